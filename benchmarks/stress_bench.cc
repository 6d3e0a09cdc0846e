// The stress area (`npuflow bench stress`): requests per second of the inference storm
// (stress/storm.h) on a small model with 10, 1,000 and 10,000 client fibers, each against the
// same number of the same requests issued back to back by one plain thread, measured in the same
// run. Both sides run the whole storm machinery (a ticket per request, RunGraph with host
// tensors, the output compared with the interpreter's, the leak check after), with no schedule
// perturbation; the time is from the first request to the last (loading and compiling the model
// are outside it). The ratio is what running the clients concurrently buys over one caller.
//
// Also: the race detector's cost on GPT-2 decode (gpt2_bench.cc), and the fuzz targets'
// executions per second (scripts/fuzz.sh, NPUFLOW_BENCH_FUZZ_SECONDS each, default 10; 0 skips)
// when the clang fuzz build (build-fuzz/, or NPUFLOW_FUZZ_BUILD_DIR) exists.
#include "benchmarks/stress_bench.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "benchmarks/gpt2_bench.h"
#include "stress/storm.h"

namespace npuflow::bench {
namespace {

constexpr int kClients[] = {10, 1000, 10000};

std::int64_t Requests(int clients) { return std::max<std::int64_t>(20000, 2 * static_cast<std::int64_t>(clients)); }

stress::StressOptions Storm(int clients, bool one_thread) {
  stress::StressOptions o;
  o.scenario = "storm";
  o.models = "mlp";
  o.mix = stress::ParseMix("rungraph=1").value();
  o.streams = 2;
  o.requests = Requests(clients);
  o.perturb = "none";
  o.workers = 2;
  o.seed = 1;
  if (one_thread) {
    o.clients = 1;
    o.host_mode = "threads";
  } else {
    o.clients = clients;
    o.host_mode = "fibers";
    o.host_threads = 2;
  }
  return o;
}

void RunStorm(benchmark::State& state, int clients, bool one_thread) {
  const stress::StressOptions o = Storm(clients, one_thread);
  std::int64_t requests = 0;
  for (auto _ : state) {
    auto r = stress::RunStress(o);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    if (!r->report.passed()) {
      state.SkipWithError(("the storm failed: " + r->report.Verdict()).c_str());
      return;
    }
    state.SetIterationTime(r->report.wall_s);
    requests += static_cast<std::int64_t>(r->report.requests);
  }
  state.SetItemsProcessed(requests);
}

std::string StormName(int clients) { return fmt::format("BM_StressStorm_{}", clients); }
std::string OneThreadName(int clients) { return fmt::format("BM_StressOneThread_{}", clients); }

// Runs every fuzz target for `seconds` through scripts/fuzz.sh (which builds what changed) and
// reads its per-target JSON lines.
std::vector<Figure> FuzzFigures() {
  const char* env = std::getenv("NPUFLOW_BENCH_FUZZ_SECONDS");
  const int seconds = env != nullptr ? std::atoi(env) : 10;
  if (seconds <= 0) return {};
  const std::filesystem::path src = NPUFLOW_SOURCE_DIR;
  const char* dir = std::getenv("NPUFLOW_FUZZ_BUILD_DIR");
  const std::filesystem::path build = dir != nullptr ? std::filesystem::path(dir) : src / "build-fuzz";
  const std::filesystem::path ninja = (build.is_absolute() ? build : src / build) / "build.ninja";
  if (!std::filesystem::exists(ninja)) {
    fmt::print(stderr,
               "bench stress: no fuzz figures: the clang fuzz build ({}) does not exist; `scripts/fuzz.sh all 60` "
               "makes it (bash scripts/test.sh does too)\n",
               ninja.parent_path().string());
    return {};
  }
  const std::string cmd = fmt::format("cd '{}' && bash scripts/fuzz.sh all {} --json 2>/dev/null", src.string(), seconds);
  fmt::print(stderr, "bench stress: fuzzing each target for {} s (NPUFLOW_BENCH_FUZZ_SECONDS)\n", seconds);
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {};
  std::vector<Figure> figures;
  char line[4096];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("target")) continue;
    const std::string target = j["target"].get<std::string>();
    const int crashes = j.value("crashes", 0);
    if (crashes > 0)
      fmt::print(stderr, "bench stress: fuzz target {} found {} crash(es): see {}\n", target, crashes,
                 j.value("crash_dir", std::string()));
    figures.push_back({fmt::format("fuzz_{}_exec_per_s", target), j.value("exec_per_s", 0.0), "exec/s", 0,
                       fmt::format("none: libFuzzer's average over {} s (clang, fuzzer+address+undefined, build-fuzz/); "
                                   "a fuzz target has no peer{}",
                                   seconds, crashes > 0 ? fmt::format("; {} crash(es) found", crashes) : ""),
                       ""});
  }
  const int rc = ::pclose(pipe);
  if (rc != 0) fmt::print(stderr, "bench stress: scripts/fuzz.sh exited with status {}\n", rc);
  return figures;
}

}  // namespace

void RegisterStressBenchmarks() {
  for (int c : kClients) {
    benchmark::RegisterBenchmark(StormName(c).c_str(), [c](benchmark::State& s) { RunStorm(s, c, false); })
        ->UseManualTime()
        ->Iterations(1);
    benchmark::RegisterBenchmark(OneThreadName(c).c_str(), [c](benchmark::State& s) { RunStorm(s, c, true); })
        ->UseManualTime()
        ->Iterations(1);
  }
  RegisterGpt2RaceBenchmarks();
}

std::vector<Figure> StressFigures(const Results& r) {
  std::vector<Figure> figures;
  for (int c : kClients) {
    figures.push_back({fmt::format("stress_storm_rps_{}_fibers", c), Rate(r, StormName(c)),
                       "requests/s", Rate(r, OneThreadName(c)),
                       fmt::format("the same {} RunGraph requests on the same model (mlp, 2 execution streams), issued "
                                   "back to back by one plain thread, same run",
                                   Requests(c)),
                       ""});
  }
  for (Figure& f : Gpt2RaceFigures(r)) figures.push_back(std::move(f));
  for (Figure& f : FuzzFigures()) figures.push_back(std::move(f));
  return figures;
}

}  // namespace npuflow::bench
