// v1 task-sink runtime figures (scheduler/DavinciModel), each against a baseline from the same run:
//   a chain of 200 small elementwise ops (f32[16]), one execution at a time:
//     host interactions per inference  task sink (NnExecute on device buffers: zero copy, one
//                                      execute message) vs host-scheduled (ExecuteHostScheduled:
//                                      the same tasks, each submitted by the host, then a sync)
//     wall and virtual time per inference, the same pair. Virtual time is the benchmark thread's
//     host clock (npu_sim::Runtime::HostClock): what an inference takes as the host sees it.
//   throughput of one model with 1, 2, 4 and 8 execution streams (LoadConfig::instances) and as
//   many client threads doing synchronous NnExecute, wall and virtual, vs the 1-stream figure.
//   The model is a 200-op random DAG compiled single-stream, so one execution occupies one stream
//   and what runs side by side is the instances. Virtual time is taken over the whole run, the
//   earliest client clock at the start to the latest at the end.
//
// What limits the throughput figures, as measured (not what the runtime would show on hardware):
//   wall     every kernel really runs on the host's CPUs through the actor workers, so scaling is
//            bounded by the machine's cores (2 on the development machine: expect about 1x).
//   virtual  instances share the chip's AICore units and DMA channels; each unit places work in
//            the earliest idle gap of its virtual timeline (npu_sim/timeline.h), so runs that
//            arrive one after the other in wall time still overlap in virtual time where the units
//            have room. The host side (one launch latency per execute, per client thread) and the
//            cores a run's kernels need bound the virtual scaling.
#include "benchmarks/v1_bench.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "benchmarks/loaded_model.h"
#include "synthetic/graphs.h"
#include "npu_sim/runtime.h"
#include "scheduler/davinci_model.h"

namespace npuflow::bench {
namespace {

using Clock = std::chrono::steady_clock;
using scheduler::DataBuffer;
using scheduler::DavinciModel;
using scheduler::ExecuteArgs;

constexpr int kChainOps = 200;
constexpr int kDagOps = 200;
constexpr int kRequestsPerRound = 32;  // per throughput iteration, spread evenly over the clients
constexpr int kStreamCounts[] = {1, 2, 4, 8};

using Loaded = LoadedModel;

StatusOr<std::unique_ptr<Loaded>> Load(StatusOr<std::unique_ptr<graph::ComputeGraph>> graph,
                                       graph::CompileOptions options, int instances, int clients) {
  return LoadModelForBench(std::move(graph), std::move(options), scheduler::LoadConfig{.instances = instances}, clients);
}

StatusOr<std::unique_ptr<Loaded>> LoadChain() {
  return Load(synthetic::MakeChainGraph(kChainOps, 16), {}, 1, 1);
}

StatusOr<std::unique_ptr<Loaded>> LoadDag(int streams) {
  graph::CompileOptions options;
  options.stream_mode = graph::CompileOptions::StreamMode::kSingle;
  return Load(synthetic::MakeRandomDag({.nodes = kDagOps, .inputs = 4, .max_fan_in = 2, .locality = 16, .seed = 7}),
              options, streams, streams);
}

// Per inference on the chain, one at a time: task sink or host-scheduled.
void PerInference(benchmark::State& state, bool task_sink) {
  auto loaded = LoadChain();
  if (!loaded.ok()) return state.SkipWithError(loaded.status().ToString().c_str());
  Loaded& l = **loaded;
  auto run = [&] { return task_sink ? l.model->NnExecute(l.args[0]) : l.model->ExecuteHostScheduled(l.args[0]); };
  // The warm-up brings this thread's host clock to the device's time.
  if (Status s = run(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  const auto stats0 = l.rt->Stats(0);
  const npu_sim::VTime v0 = l.rt->HostClock();
  for (auto _ : state) {
    if (Status s = run(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  }
  const auto stats1 = l.rt->Stats(0);
  const npu_sim::VTime v1 = l.rt->HostClock();
  if (!stats0.ok() || !stats1.ok()) return state.SkipWithError("device stats unavailable");
  const auto n = static_cast<double>(state.iterations());
  state.counters["host_interactions_per_inference"] =
      static_cast<double>(stats1->host_interactions - stats0->host_interactions) / n;
  state.counters["virtual_us_per_inference"] = static_cast<double>(v1 - v0) / 1e3 / n;
  state.SetItemsProcessed(state.iterations());
}

void BM_V1TaskSinkChain200(benchmark::State& state) { PerInference(state, true); }
void BM_V1HostScheduledChain200(benchmark::State& state) { PerInference(state, false); }

// Client threads that live for one benchmark run, so that each keeps its host clock between
// rounds. Each brings its clock to the device's time with one warm-up inference.
class Clients {
 public:
  struct Round {
    Status status;
    double wall_s = 0;
    npu_sim::VTime virtual_start = 0;  // the earliest start over the clients' host clocks
    npu_sim::VTime virtual_end = 0;    // the latest end
  };

  Clients(Loaded& l, int n) : l_(l), n_(n), start_(n), end_(n), status_(n) {
    pending_ = n;
    for (int c = 0; c < n; ++c) threads_.emplace_back([this, c] { Loop(c); });
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
  }
  ~Clients() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  Status warmup() const {
    for (int c = 0; c < n_; ++c)
      if (!status_[c].ok()) return status_[c].WithContext(fmt::format("client {} warm-up", c));
    return Status::Ok();
  }

  Round Run(int requests) {
    Round r;
    std::unique_lock<std::mutex> lock(mu_);
    per_client_ = requests / n_;
    pending_ = n_;
    ++generation_;
    const auto t0 = Clock::now();
    cv_.notify_all();
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (int c = 0; c < n_; ++c)
      if (!status_[c].ok()) r.status = status_[c].WithContext(fmt::format("client {}", c));
    r.virtual_start = *std::min_element(start_.begin(), start_.end());
    r.virtual_end = *std::max_element(end_.begin(), end_.end());
    return r;
  }

 private:
  void Loop(int c) {
    Status warm = l_.model->NnExecute(l_.args[c]);
    std::uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_[c] = std::move(warm);
      if (--pending_ == 0) done_cv_.notify_all();
    }
    for (;;) {
      int k;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        k = per_client_;
      }
      const npu_sim::VTime v0 = l_.rt->HostClock();
      Status s;
      for (int i = 0; i < k && s.ok(); ++i) s = l_.model->NnExecute(l_.args[c]);
      const npu_sim::VTime v1 = l_.rt->HostClock();
      std::lock_guard<std::mutex> lock(mu_);
      start_[c] = v0;
      end_[c] = v1;
      if (!s.ok()) status_[c] = std::move(s);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  Loaded& l_;
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::uint64_t generation_ = 0;
  int per_client_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<npu_sim::VTime> start_, end_;
  std::vector<Status> status_;
  std::vector<std::thread> threads_;
};

void Throughput(benchmark::State& state, int streams) {
  auto loaded = LoadDag(streams);
  if (!loaded.ok()) return state.SkipWithError(loaded.status().ToString().c_str());
  if ((*loaded)->model->instances() != streams)
    return state.SkipWithError(fmt::format("model loaded with {} instances, asked for {}",
                                           (*loaded)->model->instances(), streams).c_str());
  Clients clients(**loaded, streams);
  if (Status s = clients.warmup(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  // Virtual time is taken over the whole run, first start to last end: a client that finished a
  // round early in virtual time starts the next one early, so per-round spans would overlap.
  double wall_s = 0;
  std::optional<npu_sim::VTime> v_start;
  npu_sim::VTime v_end = 0;
  std::int64_t requests = 0;
  for (auto _ : state) {
    Clients::Round r = clients.Run(kRequestsPerRound);
    if (!r.status.ok()) return state.SkipWithError(r.status.ToString().c_str());
    state.SetIterationTime(r.wall_s);
    wall_s += r.wall_s;
    if (!v_start) v_start = r.virtual_start;
    v_end = std::max(v_end, r.virtual_end);
    requests += kRequestsPerRound;
  }
  const double virtual_s = v_start ? static_cast<double>(v_end - *v_start) / 1e9 : 0;
  state.counters["wall_inferences_per_second"] = wall_s > 0 ? static_cast<double>(requests) / wall_s : 0;
  state.counters["virtual_inferences_per_second"] = virtual_s > 0 ? static_cast<double>(requests) / virtual_s : 0;
}

std::string StreamsBenchmark(int streams) { return fmt::format("BM_V1Streams{}", streams); }


double WallUs(const Results& r, const std::string& bench) {
  auto it = r.find(bench);
  return it == r.end() ? 0 : it->second.real_ns / 1e3;
}

}  // namespace

void RegisterV1Benchmarks() {
  // Times stay in nanoseconds (the harness reads real time in the benchmark's unit).
  benchmark::RegisterBenchmark("BM_V1TaskSinkChain200", BM_V1TaskSinkChain200)->UseRealTime();
  benchmark::RegisterBenchmark("BM_V1HostScheduledChain200", BM_V1HostScheduledChain200)->UseRealTime();
  for (int streams : kStreamCounts) {
    benchmark::RegisterBenchmark(StreamsBenchmark(streams).c_str(),
                                 [streams](benchmark::State& state) { Throughput(state, streams); })
        ->UseManualTime();
  }
}

std::vector<Figure> V1Figures(const Results& r) {
  const std::string ts = "BM_V1TaskSinkChain200", hs = "BM_V1HostScheduledChain200";
  std::vector<Figure> figures = {
      {"host_interactions_per_inference", Counter(r, ts, "host_interactions_per_inference"), "calls",
       Counter(r, hs, "host_interactions_per_inference"),
       "host-scheduled: each of the 200-op chain's tasks submitted by the host, same run", "value == 1"},
      {"wall_us_per_inference", WallUs(r, ts), "us", WallUs(r, hs), "host-scheduled, same chain, same run",
       "ratio < 1"},
      {"virtual_us_per_inference", Counter(r, ts, "virtual_us_per_inference"), "us",
       Counter(r, hs, "virtual_us_per_inference"), "host-scheduled, same chain, same run", "ratio < 1"},
  };
  const std::string one = StreamsBenchmark(1);
  for (int streams : kStreamCounts) {
    const std::string b = StreamsBenchmark(streams);
    // The 1-stream figures are the reference the others are divided by: their ratio is 1 by
    // construction, and their value is what the table is for.
    const std::string what = streams == 1 ? "itself: the reference of the throughput_*_streams figures"
                                          : "1 execution stream, 1 client (200-op DAG), same run";
    // Wall throughput has no target: it is bounded by the host's cores.
    figures.push_back({fmt::format("throughput_wall_streams{}", streams), Counter(r, b, "wall_inferences_per_second"),
                       "inf/s", Counter(r, one, "wall_inferences_per_second"), what, ""});
    figures.push_back({fmt::format("throughput_virtual_streams{}", streams),
                       Counter(r, b, "virtual_inferences_per_second"), "inf/s",
                       Counter(r, one, "virtual_inferences_per_second"), what, streams == 1 ? "" : "ratio > 1"});
  }
  return figures;
}

}  // namespace npuflow::bench
