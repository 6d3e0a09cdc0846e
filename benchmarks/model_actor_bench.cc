// The ModelActor against the caller-thread path it replaced (scheduler/model_actor.h), the same
// work in the same process:
//   a tiny model (a chain of 4 elementwise ops on f32[16], one stream when compiled) loaded with 1
//   or 4 execution instances ("streams": each instance runs on its own device streams), and 1, 8
//   or 64 clients, each a Boost.Fiber fiber on ONE host thread, each doing synchronous zero-copy
//   NnExecute on its own device buffers. One iteration is 512 executions spread evenly over the
//   clients; its wall time is the figure's. The caller path is LoadConfig::execute_path =
//   kCallerThread: the model's shared_mutex, atomics and a blocking wait per call on the caller.
//   With fibers, a waiting client yields its thread to the others on both paths.
#include "benchmarks/model_actor_bench.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <boost/fiber/all.hpp>
#include <fmt/format.h>

#include "benchmarks/loaded_model.h"
#include "npu_sim/runtime.h"
#include "scheduler/davinci_model.h"
#include "synthetic/graphs.h"

namespace npuflow::bench {
namespace {

using Clock = std::chrono::steady_clock;
using scheduler::DataBuffer;
using scheduler::DavinciModel;
using scheduler::ExecuteArgs;
using scheduler::ExecutePath;

constexpr int kExecutionsPerRound = 512;
constexpr int kClientCounts[] = {1, 8, 64};
constexpr int kStreamCounts[] = {1, 4};

using Tiny = LoadedModel;

StatusOr<std::unique_ptr<Tiny>> LoadTiny(int instances, int clients, ExecutePath path) {
  scheduler::LoadConfig config{.instances = instances};
  config.execute_path = path;
  return LoadModelForBench(synthetic::MakeChainGraph(4, 16), {}, std::move(config), clients);
}

// One round: `clients` fibers on one fresh host thread, `per_client` executions each. The first
// error of any client, if one failed.
Status Round(Tiny& t, int clients, int per_client) {
  std::vector<Status> status(clients);
  std::thread host([&] {
    std::vector<boost::fibers::fiber> fibers;
    fibers.reserve(clients);
    for (int c = 0; c < clients; ++c)
      fibers.emplace_back([&, c] {
        for (int i = 0; i < per_client && status[c].ok(); ++i) status[c] = t.model->NnExecute(t.args[c]);
      });
    for (auto& f : fibers) f.join();
  });
  host.join();
  for (int c = 0; c < clients; ++c)
    if (!status[c].ok()) return status[c].WithContext(fmt::format("client {}", c));
  return Status::Ok();
}

void Executions(benchmark::State& state, int streams, int clients, ExecutePath path) {
  auto tiny = LoadTiny(streams, clients, path);
  if (!tiny.ok()) return state.SkipWithError(tiny.status().ToString().c_str());
  if (Status s = Round(**tiny, clients, 1); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (Status s = Round(**tiny, clients, kExecutionsPerRound / clients); !s.ok())
      return state.SkipWithError(s.ToString().c_str());
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  state.SetItemsProcessed(state.iterations() * (kExecutionsPerRound / clients) * clients);
}

std::string Name(int streams, int clients, ExecutePath path) {
  return fmt::format("BM_ModelExec{}_{}c_{}s", path == ExecutePath::kActor ? "Actor" : "Caller", clients, streams);
}

}  // namespace

void RegisterModelActorBenchmarks() {
  for (int streams : kStreamCounts)
    for (int clients : kClientCounts)
      for (ExecutePath path : {ExecutePath::kActor, ExecutePath::kCallerThread})
        benchmark::RegisterBenchmark(Name(streams, clients, path).c_str(),
                                     [=](benchmark::State& s) { Executions(s, streams, clients, path); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
}

std::vector<Figure> ModelActorFigures(const Results& r) {
  std::vector<Figure> figures;
  for (int streams : kStreamCounts) {
    for (int clients : kClientCounts) {
      auto rate = [&](ExecutePath p) {
        auto it = r.find(Name(streams, clients, p));
        return it == r.end() ? 0.0 : it->second.rate;
      };
      figures.push_back({fmt::format("model_actor_exec_per_s_{}c_{}s", clients, streams), rate(ExecutePath::kActor),
                         "exec/s", rate(ExecutePath::kCallerThread),
                         fmt::format("caller-thread path (before the ModelActor), {} fiber clients on one thread, "
                                     "{} stream(s), tiny model",
                                     clients, streams),
                         clients == 1 ? "ratio >= 0.95" : "ratio >= 1"});
    }
  }
  return figures;
}

}  // namespace npuflow::bench
