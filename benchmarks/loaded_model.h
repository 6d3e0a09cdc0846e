// A compiled model loaded on a runtime of its own, with zero-copy device I/O buffers per client:
// what the v1 and ModelActor benchmarks measure executions of.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "graph/model_file/compiled_model.h"
#include "npu_sim/runtime.h"
#include "scheduler/davinci_model.h"

namespace npuflow::bench {

struct LoadedModel {
  std::unique_ptr<npu_sim::Runtime> rt;
  std::unique_ptr<scheduler::DavinciModel> model;
  std::vector<scheduler::ExecuteArgs> args;  // per client: device buffers (zero copy), inputs 0.5f
  LoadedModel() = default;
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  ~LoadedModel() {
    model.reset();  // unloads while the runtime is alive
    rt.reset();
  }
};

// Compiles `graph` for the v1 task sink, loads it with `config` on a 2-worker runtime, and gives
// each of `clients` its own input and output buffers on device 0.
StatusOr<std::unique_ptr<LoadedModel>> LoadModelForBench(StatusOr<std::unique_ptr<graph::ComputeGraph>> graph,
                                                         graph::CompileOptions options, scheduler::LoadConfig config,
                                                         int clients);

}  // namespace npuflow::bench
