// Compile time of the v1 pipeline (validate .. gen-tasks), to show the passes scale linearly:
//   a 100,000-node chain       vs ten times a 10,000-node chain
//   a 10,000-node random DAG   vs ten times a 1,000-node random DAG (same generator, multi-stream)
// A ratio near 1 is linear; above 1 is the superlinear part. Building the graph is not timed.
#include "benchmarks/compile_bench.h"

#include <chrono>

#include <benchmark/benchmark.h>

#include "graph/ops/op_registry.h"
#include "synthetic/graphs.h"
#include "lowering/compiler.h"

namespace npuflow::bench {
namespace {

using Clock = std::chrono::steady_clock;

void Time(benchmark::State& state, StatusOr<std::unique_ptr<graph::ComputeGraph>> (*make)(int), int n) {
  graph::RegisterBuiltinOps();
  for (auto _ : state) {
    // An untimed compile of the same size first, so that every size is timed on a heap that has
    // held its working set once (otherwise the large size alone pays for fresh pages).
    auto warm = make(n);
    if (!warm.ok() || !lowering::CompileV1(std::move(*warm), {}).ok()) return state.SkipWithError("warm-up failed");
    auto g = make(n);
    if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
    const auto t0 = Clock::now();
    auto model = lowering::CompileV1(std::move(*g), {});
    const auto t1 = Clock::now();
    if (!model.ok()) return state.SkipWithError(std::string(model.status().message()).c_str());
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

StatusOr<std::unique_ptr<graph::ComputeGraph>> Chain(int n) { return synthetic::MakeChainGraph(n); }
StatusOr<std::unique_ptr<graph::ComputeGraph>> Dag(int n) {
  return synthetic::MakeRandomDag({.nodes = n, .inputs = 4, .max_fan_in = 2, .locality = 16, .seed = 42});
}

void BM_CompileChain10k(benchmark::State& state) { Time(state, &Chain, 10'000); }
void BM_CompileChain100k(benchmark::State& state) { Time(state, &Chain, 100'000); }
void BM_CompileRandomDag1k(benchmark::State& state) { Time(state, &Dag, 1'000); }
void BM_CompileRandomDag10k(benchmark::State& state) { Time(state, &Dag, 10'000); }

double Ms(const Results& r, const std::string& name) {
  auto it = r.find(name);
  return it == r.end() ? 0 : it->second.real_ns / 1e6;
}

}  // namespace

void RegisterCompileBenchmarks() {
  // Times stay in nanoseconds (the harness reads real time in the benchmark's unit). One timed
  // compile per repetition for every size.
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, void (*)(benchmark::State&)>>{
           {"BM_CompileChain10k", BM_CompileChain10k},
           {"BM_CompileChain100k", BM_CompileChain100k},
           {"BM_CompileRandomDag1k", BM_CompileRandomDag1k},
           {"BM_CompileRandomDag10k", BM_CompileRandomDag10k}})
    benchmark::RegisterBenchmark(name, fn)->UseManualTime()->Iterations(1);
}

std::vector<Figure> CompileFigures(const Results& r) {
  const double chain100k = Ms(r, "BM_CompileChain100k");
  const double chain10k = Ms(r, "BM_CompileChain10k");
  const double dag10k = Ms(r, "BM_CompileRandomDag10k");
  const double dag1k = Ms(r, "BM_CompileRandomDag1k");
  return {
      {"compile_chain_100k", chain100k, "ms", 10 * chain10k, "10 x the 10,000-node chain, same run (linear scaling)",
       "ratio <= 1.5"},
      {"compile_random_dag_10k", dag10k, "ms", 10 * dag1k, "10 x the 1,000-node random DAG, same run (linear scaling)",
       "ratio <= 1.5"},
  };
}

}  // namespace npuflow::bench
