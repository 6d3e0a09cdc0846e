// RtV2SimpleExecutor (GE's HybridModelRtV2Executor -> RtV2SimpleExecutor): what a Session runs a
// dynamic-shape graph with. Host tensors in, host tensors out, any thread: each call takes a loaded
// ModelV2Executor from a pool (up to `instances`, each on its own default stream), runs it with
// ExecuteSync and returns it. A model with Variables has one instance (their state is per
// instance).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

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
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::vector<std::unique_ptr<ModelV2Executor>> idle_;
  int made_ = 0;
};

}  // namespace npuflow::v2
