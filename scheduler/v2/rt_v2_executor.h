// RtV2SimpleExecutor (GE's HybridModelRtV2Executor -> RtV2SimpleExecutor): what a Session runs a
// dynamic-shape graph with. Host tensors in, host tensors out, any thread: each call takes a loaded
// ModelV2Executor from a pool (up to `instances`, each on its own default stream), runs it with
// ExecuteSync and returns it. A model with Variables has one instance (their state is per
// instance).
// A caller that finds every instance busy waits on a future until one comes back: a fiber yields
// to its thread's other fibers (one of which may hold the instance it waits for), a thread blocks.
// It waited on a std::condition_variable before, which blocked the whole thread: with more client
// fibers on a thread than instances, the fiber holding an instance never ran again (issue 20,
// found by npuflow stress).
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/future.h"
#include "base/status.h"
#include "graph/exe_graph/exe_graph.h"
#include "graph/ir/compute_graph.h"
#include "scheduler/v2/model_v2_executor.h"

namespace npuflow::v2 {

class RtV2SimpleExecutor {
 public:
  // Builds and loads the first instance (so a model that cannot load fails here).
  static StatusOr<std::shared_ptr<RtV2SimpleExecutor>> Create(std::shared_ptr<const exe::ExecuteGraphSet> graphs,
                                                               npu_sim::Runtime* runtime, int device,
                                                               ExecutorOption option, int instances);
  ~RtV2SimpleExecutor();

  // Inputs by position (the model's inputs); outputs with their actual shapes.
  StatusOr<std::vector<graph::Tensor>> Run(const std::vector<graph::Tensor>& inputs);
  const exe::ModelDesc& desc() const { return graphs_->desc; }
  // With ExecutorOption::profile: the top nodes by host time over every instance (call between runs).
  std::string ProfileReport(std::size_t top) const;
  int instances() const;

 private:
  RtV2SimpleExecutor(std::shared_ptr<const exe::ExecuteGraphSet> graphs, npu_sim::Runtime* runtime, int device,
                     ExecutorOption option, int max_instances)
      : graphs_(std::move(graphs)), runtime_(runtime), device_(device), option_(std::move(option)),
        max_instances_(max_instances) {}
  StatusOr<std::unique_ptr<ModelV2Executor>> NewInstance();
  StatusOr<std::unique_ptr<ModelV2Executor>> Take();
  void Give(std::unique_ptr<ModelV2Executor> executor);

  std::shared_ptr<const exe::ExecuteGraphSet> graphs_;
  npu_sim::Runtime* runtime_;
  int device_;
  ExecutorOption option_;
  int max_instances_;
  mutable std::mutex mu_;  // never held across a wait
  std::vector<std::unique_ptr<ModelV2Executor>> idle_;
  std::deque<actors::Promise<Status>> waiters_;  // callers waiting for an idle instance, in order
  int made_ = 0;
};

}  // namespace npuflow::v2
