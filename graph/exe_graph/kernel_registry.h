// Kernels of execute graphs (RT2.0, seed 001 section 5.5): what a node of an ExecuteGraph runs.
//
// A kernel registers a run function and optionally an outputs creator, a prepare function, a
// trace printer, profiling / data-dump / exception-dump fillers, a critical-section key and a
// worker tag. The registry is process-wide; the last registration of a type wins (pointers handed
// out stay valid, an execution already built keeps the functions it resolved).
//
// The run function is a plain function pointer over a plain context, as in GE's C executors:
// it returns kKernelSuccess (0) or a failure code, and records what went wrong with ctx->Fail.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/registry.h"
#include "base/status.h"
#include "graph/exe_graph/chain.h"

namespace npuflow::exe {

struct ExeNode;
struct KernelDef;

inline constexpr std::uint32_t kKernelSuccess = 0;
inline constexpr std::uint32_t kKernelFailed = 1;

// One execution of a graph: its first error, and the runtime's per-execution arguments (the
// stream, the allocators: whatever the kernels of that runtime agree on).
class RunState {
 public:
  void* args = nullptr;
  std::uint64_t iteration = 0;  // executions started so far (the current one included)

  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Keeps the first error (several workers may fail at once).
  void RecordError(Status status);
  // The first error, or OK; clears it for the next execution.
  Status TakeError();

 private:
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  Status error_;
};

// What a run function sees: its chains (inputs, then outputs) and what was prepared for it.
struct KernelContext {
  std::uint32_t num_inputs = 0;
  std::uint32_t num_outputs = 0;
  Chain** chains = nullptr;
  const void* node_info = nullptr;  // built once by the kernel's Prepare (null: none)
  std::uint32_t node_id = 0;
  const ExeNode* node = nullptr;    // name and attributes: for errors and slow paths
  const KernelDef* def = nullptr;
  RunState* run = nullptr;

  Chain& input(std::uint32_t i) const { return *chains[i]; }
  Chain& output(std::uint32_t i) const { return *chains[num_inputs + i]; }
  template <typename T>
  const T& info() const { return *static_cast<const T*>(node_info); }
  void* args() const { return run->args; }
  // Records the error (the executor adds the node's name) and returns kKernelFailed.
  std::uint32_t Fail(Status status) const {
    run->RecordError(std::move(status));
    return kKernelFailed;
  }
};

using KernelRunFn = std::uint32_t (*)(KernelContext* ctx);

// Which worker of the multi-thread executor runs the kernel.
enum class KernelTag : std::uint8_t { kNormal, kMemory, kLaunch };
std::string_view KernelTagName(KernelTag tag);

struct ProfilingInfo {
  std::string op_type;  // the ComputeGraph op the node was lowered from, if any
  std::uint64_t bytes = 0;
  std::uint64_t flops = 0;
};

struct DumpTensor {
  std::string name;  // e.g. "output0"
  std::string desc;  // e.g. "f32[2, 3]"
  std::vector<std::uint8_t> bytes;
};

struct KernelDef {
  std::string type;
  KernelRunFn run = nullptr;
  // Once per node at load: a value the run function reads as ctx->node_info (e.g. the parsed
  // attributes). Null: the node has no info.
  using PrepareFn = StatusOr<std::shared_ptr<const void>> (*)(const ExeNode& node);
  PrepareFn prepare = nullptr;
  // Once per node at load, after prepare: gives the output chains their initial content (GE's
  // outputs creator). Null: they start empty.
  using OutputsCreatorFn = Status (*)(KernelContext* ctx);
  OutputsCreatorFn outputs_creator = nullptr;
  // One line describing an execution of the node (its shapes, addresses), for traces.
  using TracePrinterFn = std::string (*)(const KernelContext* ctx);
  TracePrinterFn trace_printer = nullptr;
  using ProfilingInfoFillerFn = void (*)(const KernelContext* ctx, ProfilingInfo& info);
  ProfilingInfoFillerFn profiling_info_filler = nullptr;
  // The node's outputs as bytes, for the data dumper.
  using DataDumpInfoFillerFn = Status (*)(const KernelContext* ctx, std::vector<DumpTensor>& out);
  DataDumpInfoFillerFn data_dump_info_filler = nullptr;
  // What to add to the error when the node fails (its inputs, its state).
  using ExceptionDumpInfoFillerFn = std::string (*)(const KernelContext* ctx);
  ExceptionDumpInfoFillerFn exception_dump_info_filler = nullptr;
  // Kernels with the same non-empty key never run at the same time (multi-thread executor).
  std::string critical_section;
  KernelTag tag = KernelTag::kNormal;
};

class KernelRegistry {
 public:
  static KernelRegistry& Global();
  void Register(KernelDef def);
  // An unknown type is a NotFound naming it.
  StatusOr<const KernelDef*> Find(std::string_view type) const;
  std::vector<std::string> Types() const;

 private:
  mutable std::shared_mutex mu_;
  NamedRegistry<KernelDef, &KernelDef::type> defs_;
};

// REGISTER_KERNEL's builder: KernelRegister("Add").RunFunc(AddRun).TracePrinter(...); registers
// into the global registry when the statement ends.
class KernelRegister {
 public:
  explicit KernelRegister(std::string type) { def_.type = std::move(type); }
  KernelRegister(const KernelRegister&) = delete;
  KernelRegister& operator=(const KernelRegister&) = delete;
  ~KernelRegister() { KernelRegistry::Global().Register(std::move(def_)); }

  KernelRegister& RunFunc(KernelRunFn f) { def_.run = f; return *this; }
  KernelRegister& Prepare(KernelDef::PrepareFn f) { def_.prepare = f; return *this; }
  KernelRegister& OutputsCreator(KernelDef::OutputsCreatorFn f) { def_.outputs_creator = f; return *this; }
  KernelRegister& TracePrinter(KernelDef::TracePrinterFn f) { def_.trace_printer = f; return *this; }
  KernelRegister& ProfilingInfoFiller(KernelDef::ProfilingInfoFillerFn f) { def_.profiling_info_filler = f; return *this; }
  KernelRegister& DataDumpInfoFiller(KernelDef::DataDumpInfoFillerFn f) { def_.data_dump_info_filler = f; return *this; }
  KernelRegister& ExceptionDumpInfoFiller(KernelDef::ExceptionDumpInfoFillerFn f) {
    def_.exception_dump_info_filler = f;
    return *this;
  }
  KernelRegister& ConcurrentCriticalSectionKey(std::string key) { def_.critical_section = std::move(key); return *this; }
  KernelRegister& Tag(KernelTag tag) { def_.tag = tag; return *this; }

 private:
  KernelDef def_;
};

}  // namespace npuflow::exe
