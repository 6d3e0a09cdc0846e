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

#include "graph/ops/op_registry.h"
#include "lowering/compiler.h"
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

struct Tiny {
  std::unique_ptr<npu_sim::Runtime> rt;
  std::unique_ptr<DavinciModel> model;
  std::vector<ExecuteArgs> args;  // per client: device buffers (zero copy)
  ~Tiny() {
    model.reset();  // unloads while the runtime is alive
    rt.reset();
  }
};

StatusOr<std::unique_ptr<Tiny>> LoadTiny(int instances, int clients, ExecutePath path) {
  graph::RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(auto graph, synthetic::MakeChainGraph(4, 16));
  NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel compiled, lowering::CompileV1(std::move(graph), {}));
  auto model = std::make_shared<const graph::CompiledModel>(std::move(compiled));
  auto t = std::make_unique<Tiny>();
  NPUFLOW_ASSIGN_OR_RETURN(t->rt, npu_sim::Runtime::Create({.chips = {model->chip}, .workers = 2}));
  scheduler::LoadConfig config{.instances = instances};
  config.execute_path = path;
  t->model = std::make_unique<DavinciModel>(t->rt.get(), 1, model, std::move(config));
  NPUFLOW_RETURN_IF_ERROR(t->model->Init());
  for (int c = 0; c < clients; ++c) {
    ExecuteArgs args;
    for (const graph::IoDef& io : model->inputs) {
      const std::uint64_t bytes = io.desc.bytes().value_or(0);
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, t->rt->Malloc(0, bytes, npu_sim::Placement::kHbm, "bench input"));
      std::vector<float> values(bytes / sizeof(float), 0.5f);
      NPUFLOW_RETURN_IF_ERROR(t->rt->MemcpyH2D(0, p, values.data(), bytes));
      args.inputs.push_back(DataBuffer::Device(p, bytes));
    }
    for (const graph::IoDef& io : model->outputs) {
      const std::uint64_t bytes = io.desc.bytes().value_or(0);
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, t->rt->Malloc(0, bytes, npu_sim::Placement::kHbm, "bench output"));
      args.outputs.push_back(DataBuffer::Device(p, bytes));
    }
    t->args.push_back(std::move(args));
  }
  return t;
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
