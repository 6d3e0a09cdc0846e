#include "scheduler/v2/executors.h"

#include <algorithm>
#include <functional>

namespace npuflow::v2 {

std::string_view ExecutorTypeName(ExecutorType type) {
  switch (type) {
    case ExecutorType::kSequentialPriority: return "sequential";
    case ExecutorType::kTopological: return "topological";
    case ExecutorType::kTopologicalPriority: return "priority";
    case ExecutorType::kTopologicalMultiThread: return "multithread";
    case ExecutorType::kAutomatic: return "auto";
  }
  return "?";
}

StatusOr<ExecutorType> ParseExecutorType(std::string_view name) {
  for (auto t : {ExecutorType::kSequentialPriority, ExecutorType::kTopological, ExecutorType::kTopologicalPriority,
                 ExecutorType::kTopologicalMultiThread, ExecutorType::kAutomatic})
    if (ExecutorTypeName(t) == name) return t;
  return Status::ParamInvalid("--executor: '{}' is not an executor; expected sequential, topological, priority, "
                              "multithread or auto",
                              name);
}

ExecutorType ChooseExecutorType(const ExecutionData& data) {
  if (!data.has_control_flow()) return ExecutorType::kSequentialPriority;
  return data.launch_nodes() >= 5 ? ExecutorType::kTopologicalPriority : ExecutorType::kTopological;
}

namespace {

inline void Notify(const ExecutorSubscriber* s, ExecutorEvent event, const ExecutionData& d, std::uint64_t iteration,
                   const exe::KernelContext* node = nullptr, std::uint32_t result = exe::kKernelSuccess) {
  s->callback(s->arg, ExecutorEventInfo{event, static_cast<std::uint32_t>(d.nodes.size()), iteration, node, result});
}

template <bool kCallback>
Status RunSequential(ExecutionData& d, const ExecutorSubscriber* sub) {
  const std::uint64_t iteration = ++d.run_state().iteration;
  if constexpr (kCallback) Notify(sub, ExecutorEvent::kModelStart, d, iteration);
  const ExecNode* nodes = d.sequence.data();
  const std::size_t n = d.sequence.size();
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (kCallback) Notify(sub, ExecutorEvent::kExecuteStart, d, iteration, nodes[i].ctx);
    const std::uint32_t rc = nodes[i].fn(nodes[i].ctx);
    if constexpr (kCallback) Notify(sub, ExecutorEvent::kExecuteEnd, d, iteration, nodes[i].ctx, rc);
    if (rc != exe::kKernelSuccess) [[unlikely]]
      return d.NodeFailure(nodes[i].ctx->node_id, rc);
  }
  if constexpr (kCallback) Notify(sub, ExecutorEvent::kModelEnd, d, iteration);
  return Status::Ok();
}

// The ready queue: a FIFO ring, or a min-heap of priority keys.
template <bool kPriority>
class ReadyQueue {
 public:
  explicit ReadyQueue(ExecutionData& d)
      : ring_(d.ready_ring.data()), cap_(static_cast<std::uint32_t>(d.ready_ring.size())), heap_(d.ready_heap),
        keys_(d.priority_key.data()) {
    heap_.clear();
  }
  bool empty() const {
    if constexpr (kPriority) return heap_.empty();
    else return head_ == tail_;
  }
  // False when the queue is full (a node became ready again before it ran).
  bool Push(std::uint32_t id) {
    if constexpr (kPriority) {
      if (heap_.size() == heap_.capacity()) return false;
      heap_.push_back(keys_[id]);
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
    } else {
      const std::uint32_t next = tail_ + 1 == cap_ ? 0 : tail_ + 1;
      if (next == head_) return false;
      ring_[tail_] = id;
      tail_ = next;
    }
    return true;
  }
  std::uint32_t Pop() {
    if constexpr (kPriority) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      const auto id = static_cast<std::uint32_t>(heap_.back() & 0xffffffffu);
      heap_.pop_back();
      return id;
    } else {
      const std::uint32_t id = ring_[head_];
      head_ = head_ + 1 == cap_ ? 0 : head_ + 1;
      return id;
    }
  }

 private:
  std::uint32_t* ring_;
  std::uint32_t cap_;
  std::uint32_t head_ = 0, tail_ = 0;
  std::vector<std::uint64_t>& heap_;
  const std::uint64_t* keys_;
};

template <bool kPriority, bool kCallback>
Status RunTopological(ExecutionData& d, const ExecutorSubscriber* sub) {
  const std::uint64_t iteration = ++d.run_state().iteration;
  if constexpr (kCallback) Notify(sub, ExecutorEvent::kModelStart, d, iteration);
  ReadyQueue<kPriority> ready(d);
  for (std::uint32_t r : d.roots) ready.Push(r);
  const ExecNode* nodes = d.nodes.data();
  std::int32_t* counter = d.counter.data();
  const std::int32_t* init = d.init_counter.data();
  const std::uint32_t* group_begin = d.group_begin.data();
  const std::uint32_t* group_offset = d.group_offset.data();
  const std::uint32_t* succ = d.succ.data();
  const exe::NodeKind* kinds = d.kinds.data();
  while (!ready.empty()) {
    const std::uint32_t id = ready.Pop();
    const ExecNode& node = nodes[id];
    if constexpr (kCallback) Notify(sub, ExecutorEvent::kExecuteStart, d, iteration, node.ctx);
    const std::uint32_t rc = node.fn(node.ctx);
    if constexpr (kCallback) Notify(sub, ExecutorEvent::kExecuteEnd, d, iteration, node.ctx, rc);
    if (rc != exe::kKernelSuccess) [[unlikely]] {
      d.RestoreCounters();
      return d.NodeFailure(id, rc);
    }
    std::uint32_t group = group_begin[id];
    if (kinds[id] == exe::NodeKind::kSwitch) [[unlikely]] {
      const std::uint64_t branch = node.ctx->output(0).word();
      if (branch >= static_cast<std::uint64_t>(d.branches[id])) {
        d.RestoreCounters();
        return Status::Internal("node '{}' ({}): picked branch {} of {}", node.ctx->node->name,
                                node.ctx->node->kernel, branch, d.branches[id]);
      }
      group += static_cast<std::uint32_t>(branch);
    }
    for (std::uint32_t k = group_offset[group], end = group_offset[group + 1]; k < end; ++k) {
      const std::uint32_t s = succ[k];
      if (--counter[s] == 0) {
        counter[s] = init[s];
        if (!ready.Push(s)) [[unlikely]] {
          d.RestoreCounters();
          return Status::Internal("execute graph '{}': node '{}' became ready again before it ran",
                                  d.graph().name(), d.graph().nodes()[s].name);
        }
      }
    }
  }
  // Control flow may leave counters of nodes that did not run (an untaken branch) part-way.
  if (d.has_control_flow()) d.RestoreCounters();
  if constexpr (kCallback) Notify(sub, ExecutorEvent::kModelEnd, d, iteration);
  return Status::Ok();
}

}  // namespace

Status ExecuteSequential(ExecutionData& data, const ExecutorSubscriber* subscriber) {
  if (data.has_control_flow())
    return Status::ParamInvalid("execute graph '{}' has control flow: the sequential executor cannot run it",
                                data.graph().name());
  return subscriber ? RunSequential<true>(data, subscriber) : RunSequential<false>(data, nullptr);
}

Status ExecuteTopological(ExecutionData& data, const ExecutorSubscriber* subscriber) {
  return subscriber ? RunTopological<false, true>(data, subscriber) : RunTopological<false, false>(data, nullptr);
}

Status ExecuteTopologicalPriority(ExecutionData& data, const ExecutorSubscriber* subscriber) {
  return subscriber ? RunTopological<true, true>(data, subscriber) : RunTopological<true, false>(data, nullptr);
}

StatusOr<std::unique_ptr<ExeGraphExecutor>> ExeGraphExecutor::Create(std::shared_ptr<const exe::ExecuteGraph> graph,
                                                                     ExecutorType type, int threads) {
  std::unique_ptr<ExeGraphExecutor> e(new ExeGraphExecutor());
  NPUFLOW_ASSIGN_OR_RETURN(e->data_, ExecutionData::Build(std::move(graph)));
  if (type == ExecutorType::kAutomatic) type = ChooseExecutorType(*e->data_);
  if (type == ExecutorType::kSequentialPriority && e->data_->has_control_flow())
    return Status::ParamInvalid("execute graph '{}' has control flow: the sequential executor cannot run it; use "
                                "topological, priority, multithread or auto",
                                e->data_->graph().name());
  if (type == ExecutorType::kTopologicalMultiThread) {
    NPUFLOW_ASSIGN_OR_RETURN(e->multi_thread_, MultiThreadExecutor::Create(threads));
  }
  e->type_ = type;
  return e;
}

Status ExeGraphExecutor::Execute(void* args, const ExecutorSubscriber* subscriber) {
  data_->run_state().args = args;
  switch (type_) {
    case ExecutorType::kSequentialPriority: return ExecuteSequential(*data_, subscriber);
    case ExecutorType::kTopological: return ExecuteTopological(*data_, subscriber);
    case ExecutorType::kTopologicalPriority: return ExecuteTopologicalPriority(*data_, subscriber);
    case ExecutorType::kTopologicalMultiThread: return multi_thread_->Execute(*data_, subscriber);
    case ExecutorType::kAutomatic: break;
  }
  return Status::Internal("executor type {} was not resolved", static_cast<int>(type_));
}

}  // namespace npuflow::v2
