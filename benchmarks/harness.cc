#include "benchmarks/harness.h"

#include <algorithm>
#include <memory>
#include <set>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "graph/kernels/matmul.h"

namespace npuflow::bench {
namespace {

// Collects every repetition (not the aggregates) and keeps per-benchmark samples.
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      if (run.error_occurred) {
        errors.push_back(fmt::format("{}: {}", run.benchmark_name(), run.error_message));
        continue;
      }
      auto& s = samples[run.run_name.function_name];
      s.real_ns.push_back(run.GetAdjustedRealTime());
      for (const auto& [name, counter] : run.counters) s.counters[name].push_back(counter.value);
    }
  }
  struct Samples {
    std::vector<double> real_ns;
    std::map<std::string, std::vector<double>> counters;
  };
  std::map<std::string, Samples> samples;
  std::vector<std::string> errors;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void PrintFigures(const std::vector<Figure>& figures, bool json, std::ostream& out) {
  if (json) {
    nlohmann::ordered_json j;
    j["figures"] = nlohmann::ordered_json::object();
    for (const Figure& f : figures) {
      j["figures"][f.name] = {{"value", f.value},          {"unit", f.unit},   {"baseline", f.baseline},
                              {"ratio", f.ratio()},         {"given", f.given}, {"baseline_is", f.baseline_what},
                              {"area", f.area}};
    }
    out << j.dump(2) << "\n";
    return;
  }
  size_t w = 6;
  for (const Figure& f : figures) w = std::max(w, f.name.size());
  out << fmt::format("{:<{}}  {:>12}  {:<8}  {:>12}  {:>8}  {:<18}  {}\n", "figure", w, "value", "unit", "baseline",
                     "ratio", "target", "baseline is");
  out << std::string(w + 100, '-') << "\n";
  for (const Figure& f : figures) {
    out << fmt::format("{:<{}}  {:>12.4g}  {:<8}  {:>12.4g}  {:>8.3f}  {:<18}  {}{}\n", f.name, w, f.value, f.unit,
                       f.baseline, f.ratio(), f.target, f.given ? "(given) " : "", f.baseline_what);
  }
}

namespace {
RunOptions current_options;
}  // namespace

const RunOptions& CurrentOptions() { return current_options; }

namespace {

Status CheckOptions(const RunOptions& options) {
  if (options.repetitions < 1 || options.repetitions > 100)
    return Status::ParamInvalid("bench: --repetitions must be 1 to 100, got {}", options.repetitions);
  if (!(options.min_time_s > 0 && options.min_time_s <= 60))
    return Status::ParamInvalid("bench: --min-time must be in (0, 60] seconds, got {}", options.min_time_s);
  return Status::Ok();
}

void InitializeBenchmarkLibrary(const RunOptions& options) {
  static bool initialized = false;
  if (initialized) return;
  std::vector<std::string> args = {"npuflow-bench", fmt::format("--benchmark_repetitions={}", options.repetitions),
                                   fmt::format("--benchmark_min_time={}", options.min_time_s),
                                   "--benchmark_enable_random_interleaving=true"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  benchmark::Initialize(&argc, argv.data());
  initialized = true;
}

Results MediansOf(const CollectingReporter& reporter) {
  Results results;
  for (const auto& [name, s] : reporter.samples) {
    Measurement m;
    m.real_ns = Median(s.real_ns);
    for (const auto& [counter, values] : s.counters) m.counters[counter] = Median(values);
    if (auto it = m.counters.find("items_per_second"); it != m.counters.end()) m.rate = it->second;
    results[name] = m;
  }
  return results;
}

}  // namespace

StatusOr<std::vector<Figure>> MeasureArea(const Area& area, const RunOptions& options) {
  NPUFLOW_RETURN_IF_ERROR(CheckOptions(options));
  current_options = options;
  InitializeBenchmarkLibrary(options);
  benchmark::ClearRegisteredBenchmarks();
  area.register_benchmarks();
  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  if (!reporter.errors.empty()) return Status::Failed("bench {}: {}", area.name, reporter.errors.front());
  std::vector<Figure> figures = area.figures(MediansOf(reporter));
  for (Figure& f : figures) f.area = area.name;
  return figures;
}

Status RunArea(const std::string& area_name, const RunOptions& options, std::ostream& out) {
  NPUFLOW_RETURN_IF_ERROR(CheckOptions(options));
  std::vector<const Area*> selected;
  std::string known;
  for (const Area& a : Areas()) {
    if (a.name == area_name || area_name == "all") selected.push_back(&a);
    known += (known.empty() ? "" : ", ") + a.name;
  }
  if (selected.empty())
    return Status::ParamInvalid("bench: unknown area '{}' (known areas: {}, or all)", area_name, known);
  std::vector<Figure> all;
  std::set<std::string> names;
  for (const Area* area : selected) {
    NPUFLOW_ASSIGN_OR_RETURN(std::vector<Figure> figures, MeasureArea(*area, options));
    for (const Figure& f : figures)
      if (!names.insert(f.name).second) return Status::Internal("bench: figure '{}' appears twice", f.name);
    if (!options.json) {
      out << fmt::format("npuflow bench {}: {} (median of {} repetitions)\n", area->name, area->summary,
                         options.repetitions);
      PrintFigures(figures, false, out);
      out << "\n";
    }
    all.insert(all.end(), figures.begin(), figures.end());
  }
  if (options.json) PrintFigures(all, true, out);
  return Status::Ok();
}

double Rate(const Results& results, const std::string& bench) {
  auto it = results.find(bench);
  return it == results.end() ? 0 : it->second.rate;
}

double NsPer(const Results& results, const std::string& bench) {
  const double rate = Rate(results, bench);
  return rate <= 0 ? 0 : 1e9 / rate;
}

double Counter(const Results& results, const std::string& bench, const std::string& counter) {
  auto it = results.find(bench);
  if (it == results.end()) return 0;
  auto c = it->second.counters.find(counter);
  return c == it->second.counters.end() ? 0 : c->second;
}

namespace {
template <bool Prefetch>
float SumStreamWith(const float* f, std::size_t n) {
  float acc[32] = {};
  for (std::size_t i = 0; i + 32 <= n; i += 32) {
    graph::gemm_internal::PrefetchWeights<Prefetch>(f + i, graph::kGemvStreamPrefetchBytes);
    for (int l = 0; l < 32; ++l) acc[l] += f[i + l];
  }
  float s = 0;
  for (float x : acc) s += x;
  return s;
}
}  // namespace

float SumStream(const void* data, std::size_t bytes, bool prefetch) {
  const auto* f = static_cast<const float*>(data);
  return prefetch ? SumStreamWith<true>(f, bytes / sizeof(float)) : SumStreamWith<false>(f, bytes / sizeof(float));
}

double MedianOf(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples.empty() ? 0 : samples[samples.size() / 2];
}

}  // namespace npuflow::bench
