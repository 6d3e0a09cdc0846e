// A compiled model loaded on a runtime of its own, with zero-copy device I/O buffers per client:
// what the v1 and ModelActor benchmarks measure executions of.
#pragma once

#include <memory>
#include <vector>

#include <benchmark/benchmark.h>

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

// Host interactions and the host clock over the measured loop (after one warm-up, which brings
// the thread's clock to the device's time): the counters host_interactions_per_inference and
// virtual_us_per_inference, on device 0.
template <typename RunFn>
void PerInference(benchmark::State& state, npu_sim::Runtime& rt, RunFn run) {
  if (Status s = run(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  const auto stats0 = rt.Stats(0);
  const npu_sim::VTime v0 = rt.HostClock();
  for (auto _ : state) {
    if (Status s = run(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  }
  const auto stats1 = rt.Stats(0);
  const npu_sim::VTime v1 = rt.HostClock();
  if (!stats0.ok() || !stats1.ok()) return state.SkipWithError("device stats unavailable");
  const auto n = static_cast<double>(state.iterations());
  state.counters["host_interactions_per_inference"] =
      static_cast<double>(stats1->host_interactions - stats0->host_interactions) / n;
  state.counters["virtual_us_per_inference"] = static_cast<double>(v1 - v0) / 1e3 / n;
}

// Compiles `graph` for the v1 task sink, loads it with `config` on a 2-worker runtime, and gives
// each of `clients` its own input and output buffers on device 0.
StatusOr<std::unique_ptr<LoadedModel>> LoadModelForBench(StatusOr<std::unique_ptr<graph::ComputeGraph>> graph,
                                                         graph::CompileOptions options, scheduler::LoadConfig config,
                                                         int clients);

}  // namespace npuflow::bench
