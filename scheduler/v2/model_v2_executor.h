// ModelV2Executor: one model on RT2.0 (seed 001 section 5.4), with the states, checks and errors
// GE_BEHAVIOUR.md records.
//
//   kInit --Load--> kLoaded --UnLoad--> kInit (and Load again)
//   Load: only from kInit. Builds and runs the Init graph, drops it, builds Main; Init's outputs
//     (constants on the device, ...) become Main's last inputs.
//   Execute: only when kLoaded. Input / output counts and null tensors are checked before any
//     kernel runs, then the I/O reuse pairs; Main runs on the caller's stream and returns once its
//     work is issued (the caller synchronizes the stream).
//   ExecuteSync: a default stream made on first use; Execute on it, then a synchronize with the
//     option's timeout. A run that fails on the device or times out leaves nothing behind: its
//     streams are aborted (a hung task stays hung otherwise, and every later run queues behind
//     it; a side stream waits for a record its failed main stream never makes), synchronized, and
//     the events reset.
//   UnLoad: only from kLoaded. Destroys the default stream, drops Main, builds, runs and drops
//     DeInit (which releases what Init made), back to kInit.
// Stream, event and notify allocators are all given or all absent (then built-in ones are used).
// Device memory comes from the caller's external allocator, else a built-in caching allocator
// per stream. Calls on one executor are serialized; StreamExecutor gives each stream its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "graph/exe_graph/exe_graph.h"
#include "npu_sim/runtime.h"
#include "scheduler/v2/allocator.h"
#include "scheduler/v2/executors.h"
#include "scheduler/v2/subscribers.h"
#include "scheduler/v2/tensor.h"

namespace npuflow::v2 {

struct ExecutorOption {
  ExecutorType type = ExecutorType::kAutomatic;  // Main's executor (Init and DeInit: automatic)
  int threads = 2;                               // the multi-thread executor's
  // Output j is written in place over input i: "i,j|i,j". Its address must equal the input's.
  std::string io_reuse;
  std::chrono::milliseconds sync_timeout{60'000};  // ExecuteSync's
  bool profile = false;  // the host profiler (GetSubscribers().profiler()) on from the start
};

struct ModelExecuteArg {
  npu_sim::Stream stream{-1, 0};  // device -1: none
  Allocator* external_allocator = nullptr;  // device memory for the run; bound to `stream`
  StreamAllocator* external_stream_allocator = nullptr;
  EventAllocator* external_event_allocator = nullptr;
  NotifyAllocator* external_notify_allocator = nullptr;
};

// Outer constant memory (GE's outer weight memory): LentConstant (tensor.h) by Init node name.
struct ModelLoadArg {
  const std::map<std::string, LentConstant>* lent_constants = nullptr;
};

enum class ModelState : std::uint8_t { kInit, kLoaded };
std::string_view ModelStateName(ModelState state);

class ModelV2Executor {
 public:
  // Checks the graph set and the option (an unparsable io_reuse is a ParamInvalid naming it).
  static StatusOr<std::unique_ptr<ModelV2Executor>> Create(exe::ExecuteGraphSet graphs, npu_sim::Runtime* runtime,
                                                           int device, ExecutorOption option = {});
  ~ModelV2Executor();

  Status Load();
  Status Load(const ModelExecuteArg& arg);
  Status Load(const ModelExecuteArg& arg, const ModelLoadArg& load);
  Status Execute(const ModelExecuteArg& arg, Tensor* const* inputs, std::size_t input_num, Tensor* const* outputs,
                 std::size_t output_num);
  Status ExecuteSync(Tensor* const* inputs, std::size_t input_num, Tensor* const* outputs, std::size_t output_num);
  Status UnLoad();

  ModelState state() const;
  const exe::ModelDesc& GetModelDesc() const { return graphs_.desc; }
  std::uint64_t GetIterationNum() const;
  // Change subscribers only between calls.
  ExecutorSubscribersScheduler& GetSubscribers() { return subscribers_; }
  ExecutorType main_executor_type() const;

 private:
  ModelV2Executor(exe::ExecuteGraphSet graphs, npu_sim::Runtime* runtime, int device, ExecutorOption option,
                  std::vector<std::pair<std::size_t, std::size_t>> io_pairs);
  Status CheckAllocators(const ModelExecuteArg& arg, std::string_view call) const;
  RunContext Context(const ModelExecuteArg& arg);
  StatusOr<Allocator*> DeviceAllocator(const ModelExecuteArg& arg);
  Status ExecuteLocked(const ModelExecuteArg& arg, Tensor* const* inputs, std::size_t input_num,
                       Tensor* const* outputs, std::size_t output_num);
  // After ExecuteSync's run failed on the device or timed out: the run's streams aborted and
  // brought to rest, its events cleared, so the next run starts clean.
  void RecoverLocked();

  exe::ExecuteGraphSet graphs_;
  npu_sim::Runtime* runtime_;
  int device_;
  ExecutorOption option_;
  std::vector<std::pair<std::size_t, std::size_t>> io_pairs_;

  mutable std::mutex mu_;
  ModelState state_ = ModelState::kInit;
  std::unique_ptr<ExeGraphExecutor> main_;
  std::uint64_t iterations_ = 0;
  ExecutorSubscribersScheduler subscribers_;
  std::unique_ptr<BuiltinStreamAllocator> builtin_streams_;
  std::unique_ptr<BuiltinEventAllocator> builtin_events_;
  std::unique_ptr<HostMemAllocator> host_allocator_ = std::make_unique<HostMemAllocator>();
  std::map<std::pair<int, std::uint32_t>, std::unique_ptr<CachingMemAllocator>> device_allocators_;  // by stream
  npu_sim::Stream default_stream_{-1, 0};
  // A multi-stream Main's tables (RunContext), sized once at the first Execute.
  std::vector<npu_sim::Stream> stream_table_;
  std::vector<Allocator*> allocator_table_;
  std::vector<npu_sim::Event> event_table_;
};

// Parses "in,out|in,out" (empty: no pairs). Errors name the option and the bad part.
StatusOr<std::vector<std::pair<std::size_t, std::size_t>>> ParseIoReuse(std::string_view spec);

}  // namespace npuflow::v2
