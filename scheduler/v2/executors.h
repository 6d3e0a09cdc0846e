// The execute-graph executors (seed 001 sections 5.2-5.3; GE's executor types 0-4).
//
//   sequential (kSequentialPriority): the flat array in sequential order, stop at the first
//     failure. No control flow.
//   topological: a FIFO seeded with the nodes of counter 0; run one, decrement its successors'
//     counters (a switch: its chosen branch's only), queue those reaching 0 and reset their
//     counter at once, so loops run again. On failure every counter is restored.
//   topological-priority: the same with a min-heap on the node's priority (none = largest).
//   multi-thread: oneTBB workers (ExecuteMultiThread below).
//   automatic: no control flow -> sequential; control flow with at least 5 launch nodes ->
//     topological-priority; else topological.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include <oneapi/tbb/task_arena.h>

#include "base/status.h"
#include "scheduler/v2/execution_data.h"
#include "scheduler/v2/subscribers.h"

namespace npuflow::v2 {

enum class ExecutorType : std::uint8_t {
  kSequentialPriority = 0,
  kTopological = 1,
  kTopologicalPriority = 2,
  kTopologicalMultiThread = 3,
  kAutomatic = 4,
};
// "sequential", "topological", "priority", "multithread", "auto".
std::string_view ExecutorTypeName(ExecutorType type);
// Accepts the names above; anything else is a ParamInvalid naming the option and the choices.
StatusOr<ExecutorType> ParseExecutorType(std::string_view name);
// What kAutomatic resolves to for this graph.
ExecutorType ChooseExecutorType(const ExecutionData& data);

// One execution of `data` (its inputs' chains already set). `subscriber` null: no callbacks.
Status ExecuteSequential(ExecutionData& data, const ExecutorSubscriber* subscriber = nullptr);
Status ExecuteTopological(ExecutionData& data, const ExecutorSubscriber* subscriber = nullptr);
Status ExecuteTopologicalPriority(ExecutionData& data, const ExecutorSubscriber* subscriber = nullptr);

// The multi-thread executor: `threads` >= 2 (ParamInvalid otherwise) in one oneTBB arena, the
// calling thread included. Kernels tagged "memory" run one at a time on the memory worker lane,
// those tagged "launch" on the launch lane when there are more than 2 threads (with 2 they are
// normal), the rest on any thread. Kernels sharing a critical-section key never overlap. On a
// failure no further node starts; the nodes running finish, the counters are restored and the
// first failure is returned.
class MultiThreadExecutor {
 public:
  static StatusOr<std::unique_ptr<MultiThreadExecutor>> Create(int threads);
  ~MultiThreadExecutor();
  int threads() const { return threads_; }
  bool has_launch_worker() const { return threads_ > 2; }
  Status Execute(ExecutionData& data, const ExecutorSubscriber* subscriber = nullptr);

 private:
  explicit MultiThreadExecutor(int threads);
  int threads_;
  tbb::task_arena arena_;
};

// One execute graph and the executor chosen for it (GE's ExeGraphExecutor): what a
// ModelV2Executor holds for each of Init, Main and DeInit.
class ExeGraphExecutor {
 public:
  // Builds the execution data. kAutomatic is resolved here; the sequential executor on a graph
  // with control flow is a ParamInvalid naming the graph. `threads`: the multi-thread
  // executor's.
  static StatusOr<std::unique_ptr<ExeGraphExecutor>> Create(std::shared_ptr<const exe::ExecuteGraph> graph,
                                                            ExecutorType type, int threads = 2);
  ExecutorType type() const { return type_; }
  ExecutionData& data() { return *data_; }
  // `args`: the runtime's per-execution arguments (KernelContext::args()).
  Status Execute(void* args, const ExecutorSubscriber* subscriber = nullptr);

 private:
  ExeGraphExecutor() = default;
  ExecutorType type_ = ExecutorType::kSequentialPriority;
  std::unique_ptr<ExecutionData> data_;
  std::unique_ptr<MultiThreadExecutor> multi_thread_;
};

}  // namespace npuflow::v2
