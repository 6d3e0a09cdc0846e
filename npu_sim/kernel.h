// Device kernels: CPU functions that run one block of a kernel task over device memory, each
// with a cost function that gives the block's virtual duration.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/registry.h"
#include "base/status.h"
#include "npu_sim/chip_spec.h"
#include "npu_sim/device_memory.h"

namespace npuflow::npu_sim {

enum class Engine : std::uint8_t { kAICore, kAICpu };
std::string_view EngineName(Engine engine);

// What a running block sees. Arguments are 64-bit words: device pointers or scalars, as the
// launch gave them.
class KernelContext {
 public:
  KernelContext(const DeviceMemory* memory, std::span<const std::uint64_t> args, std::uint32_t block_idx,
                std::uint32_t block_dim, std::uint64_t tiling_key, std::uint64_t launch = 0)
      : memory_(memory), args_(args), block_idx_(block_idx), block_dim_(block_dim), tiling_key_(tiling_key),
        launch_(launch) {}

  std::uint32_t block_idx() const { return block_idx_; }
  std::uint32_t block_dim() const { return block_dim_; }
  std::uint64_t tiling_key() const { return tiling_key_; }
  // Which launch of a kernel task these blocks belong to: unique in the process (NextKernelLaunch)
  // for blocks a unit runs, 0 where the caller gives none. The blocks of one launch see the same
  // inputs (nothing writes a running kernel's inputs), so a kernel may keep a value it computes
  // from them alone for the launch's other blocks on the same thread (MatMul's fused LayerNorm
  // prologue). 0: keep nothing.
  std::uint64_t launch() const { return launch_; }
  std::size_t arg_count() const { return args_.size(); }
  std::uint64_t scalar(std::size_t i) const { return i < args_.size() ? args_[i] : 0; }
  DevicePtr ptr(std::size_t i) const { return DevicePtr{scalar(i)}; }

  // `count` elements of T at argument i (a device pointer), bounds-checked.
  template <typename T>
  StatusOr<std::span<T>> Buffer(std::size_t i, std::size_t count, DeviceMemory::Mapping& keep) const {
    if (i >= args_.size()) return Status::ParamInvalid("kernel argument {} missing ({} given)", i, args_.size());
    NPUFLOW_ASSIGN_OR_RETURN(keep, memory_->Map(ptr(i), count * sizeof(T)));
    return std::span<T>(keep.as<T>(), count);
  }
  const DeviceMemory& memory() const { return *memory_; }

 private:
  const DeviceMemory* memory_;
  std::span<const std::uint64_t> args_;
  std::uint32_t block_idx_;
  std::uint32_t block_dim_;
  std::uint64_t tiling_key_;
  std::uint64_t launch_;
};
// A new launch number (never 0): one per kernel task a stream starts.
std::uint64_t NextKernelLaunch();

// The device-memory mappings a unit's thread keeps for the kernel launch it runs, by argument
// (graph's OpKernelView fills and reads it): the launch's later blocks on the thread take an
// argument's bytes without mapping it again. The unit lets them go once its parts have run, before
// it reports the kernel (UnitActor), so a thread holds no allocation's backing once it has no
// kernel to run.
struct LaunchMappings {
  static constexpr std::size_t kArgs = 16;
  struct Arg {
    std::uint64_t ptr = 0;
    std::uint64_t bytes = 0;
    DeviceMemory::Mapping mapping;
  };
  std::uint64_t launch = 0;  // 0: holds nothing
  const DeviceMemory* memory = nullptr;
  std::array<Arg, kArgs> args;
  // Drops every mapping (the backings they held may go) and the launch.
  void Release() {
    if (launch == 0) return;
    for (Arg& a : args) a = {};
    launch = 0;
    memory = nullptr;
  }
};
LaunchMappings& ThisThreadLaunchMappings();

using KernelFn = Status (*)(KernelContext& ctx);
// The device memory a kernel task reads and writes, for the race detector (race_detector.h): given
// the launch's arguments (the context of block 0), append every range the whole task touches.
// Over-approximating is allowed (a whole tensor for a row written), missing a range is not.
struct MemAccess {
  DevicePtr ptr;
  std::uint64_t bytes = 0;
  bool write = false;
};
using AccessFn = Status (*)(const KernelContext& ctx, std::vector<MemAccess>& out);
// Virtual nanoseconds one block takes on one unit of `chip`.
using CostFn = VTime (*)(const KernelContext& ctx, const ChipSpec& chip);

struct KernelDef {
  std::string name;
  Engine engine = Engine::kAICore;
  KernelFn run = nullptr;
  CostFn cost = nullptr;
  AccessFn accesses = nullptr;  // null: not declared, so the race detector cannot check the kernel
};

// Process-wide registry of device kernels, by name. Registration is for start-up; lookups are
// thread-safe after it. Registering a name again replaces the definition (the last one wins).
class KernelRegistry {
 public:
  static KernelRegistry& Global();
  void Register(KernelDef def) { defs_.Register(std::move(def)); }
  // A missing name is a NotFound naming it.
  StatusOr<const KernelDef*> Find(std::string_view name) const;

 private:
  NamedRegistry<KernelDef, &KernelDef::name> defs_;
};

// Registers a kernel at static-initialization time: NPUFLOW_REGISTER_KERNEL(def_expr).
struct KernelRegistration {
  explicit KernelRegistration(KernelDef def) { KernelRegistry::Global().Register(std::move(def)); }
};

}  // namespace npuflow::npu_sim
