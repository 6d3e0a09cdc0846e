// The ModelActor against the caller-thread path it replaced (scheduler/model_actor.h), the same
// work in the same process:
//   a tiny model (a chain of 4 elementwise ops on f32[16], one stream when compiled) loaded with 1
//   or 4 execution instances ("streams": each instance runs on its own device streams), and 1, 8
//   or 64 clients, each a Boost.Fiber fiber on ONE host thread, each doing synchronous zero-copy
//   NnExecute on its own device buffers. One round is 512 executions spread evenly over the
//   clients; an iteration is one round on each path (two runtimes, both loaded), in alternating
//   order, and the figures are each path's executions over its own rounds' wall time. The caller
//   path is LoadConfig::execute_path = kCallerThread: the model's shared_mutex, atomics and a
//   blocking wait per call on the caller. With fibers, a waiting client yields its thread to the
//   others on both paths.
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

// Both paths in one benchmark, one round of each per iteration, the order swapped every
// iteration: the pair sees the same machine, so a noisy neighbour moves both (the figure is the
// ratio of the two rates over the whole run, not of two runs minutes apart).
void Executions(benchmark::State& state, int streams, int clients) {
  auto actor = LoadTiny(streams, clients, ExecutePath::kActor);
  if (!actor.ok()) return state.SkipWithError(actor.status().ToString().c_str());
  auto caller = LoadTiny(streams, clients, ExecutePath::kCallerThread);
  if (!caller.ok()) return state.SkipWithError(caller.status().ToString().c_str());
  for (Tiny* t : {actor->get(), caller->get()})
    if (Status s = Round(*t, clients, 1); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  const int per_client = kExecutionsPerRound / clients;
  double seconds[2] = {0, 0};  // actor, caller
  bool actor_first = true;
  for (auto _ : state) {
    double round = 0;
    for (int k = 0; k < 2; ++k) {
      const int path = (k == 0) == actor_first ? 0 : 1;
      const auto t0 = Clock::now();
      if (Status s = Round(path == 0 ? **actor : **caller, clients, per_client); !s.ok())
        return state.SkipWithError(s.ToString().c_str());
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      seconds[path] += dt;
      round += dt;
    }
    actor_first = !actor_first;
    state.SetIterationTime(round);
  }
  const double executions = static_cast<double>(state.iterations()) * per_client * clients;
  state.counters["actor_exec_per_s"] = seconds[0] > 0 ? executions / seconds[0] : 0;
  state.counters["caller_exec_per_s"] = seconds[1] > 0 ? executions / seconds[1] : 0;
}

std::string Name(int streams, int clients) { return fmt::format("BM_ModelExec_{}c_{}s", clients, streams); }

}  // namespace

void RegisterModelActorBenchmarks() {
  for (int streams : kStreamCounts)
    for (int clients : kClientCounts)
      benchmark::RegisterBenchmark(Name(streams, clients).c_str(),
                                   [=](benchmark::State& s) { Executions(s, streams, clients); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
}

std::vector<Figure> ModelActorFigures(const Results& r) {
  std::vector<Figure> figures;
  for (int streams : kStreamCounts) {
    for (int clients : kClientCounts) {
      const std::string b = Name(streams, clients);
      figures.push_back({fmt::format("model_actor_exec_per_s_{}c_{}s", clients, streams),
                         Counter(r, b, "actor_exec_per_s"), "exec/s", Counter(r, b, "caller_exec_per_s"),
                         fmt::format("caller-thread path (before the ModelActor), {} fiber clients on one thread, "
                                     "{} stream(s), tiny model; rounds of the two paths alternate in one benchmark",
                                     clients, streams),
                         clients == 1 ? "ratio >= 0.95" : "ratio >= 1"});
    }
  }
  return figures;
}

}  // namespace npuflow::bench
