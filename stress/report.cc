#include "stress/report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace npuflow::stress {
namespace {

nlohmann::json FailureJson(const Failure& f) {
  return {{"kind", f.kind},     {"request", f.request}, {"client", f.client},
          {"model", f.model},   {"action", f.action},   {"detail", f.detail}};
}

nlohmann::json TallyJson(const std::map<std::string, Tally>& tallies) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, t] : tallies)
    j[name] = {{"requests", t.requests}, {"ok", t.ok}, {"errors", t.errors}, {"wrong", t.wrong}};
  return j;
}

}  // namespace

bool StressReport::leaked() const {
  return std::any_of(resources.begin(), resources.end(), [](const ResourceCheck& r) { return r.leaked(); });
}

bool StressReport::passed() const {
  return wrong_outputs == 0 && hangs == 0 && races == 0 && unexpected_errors == 0 && !leaked() && !abandoned;
}

std::string StressReport::Verdict() const {
  std::vector<std::string> parts;
  auto add = [&](std::uint64_t n, std::string_view one, std::string_view many) {
    if (n > 0) parts.push_back(fmt::format("{} {}", n, n == 1 ? one : many));
  };
  add(wrong_outputs, "wrong output", "wrong outputs");
  add(hangs, "hang", "hangs");
  add(races, "race", "races");
  add(unexpected_errors, "unexpected error", "unexpected errors");
  for (const ResourceCheck& r : resources)
    if (r.leaked()) parts.push_back(fmt::format("{} leaked ({} before, {} after)", r.name, r.baseline, r.after));
  if (abandoned) parts.push_back("hung clients abandoned");
  if (parts.empty()) return "passed";
  std::string s = "FAILED: ";
  for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s;
}

nlohmann::json ComparableJson(const StressReport& r) {
  nlohmann::json j;
  j["scenario"] = r.scenario;
  j["seed"] = r.seed;
  j["requests"] = r.requests;
  j["ok"] = r.ok;
  j["errors"] = r.errors;
  j["expected_errors"] = r.expected_errors;
  j["unexpected_errors"] = r.unexpected_errors;
  j["wrong_outputs"] = r.wrong_outputs;
  j["races"] = r.races;
  j["hangs"] = r.hangs;
  nlohmann::json leaks = nlohmann::json::object();
  for (const ResourceCheck& c : r.resources) leaks[c.name] = {{"baseline", c.baseline}, {"after", c.after}};
  j["leaks"] = leaks;
  j["by_action"] = TallyJson(r.by_action);
  j["by_model"] = TallyJson(r.by_model);
  j["faults"] = r.faults;
  j["churn"] = r.churn;
  j["tiling_sink"] = r.tiling;
  nlohmann::json failures = nlohmann::json::array();
  for (const Failure& f : r.failures) failures.push_back({{"kind", f.kind}, {"model", f.model}, {"action", f.action}});
  j["failures"] = failures;
  j["failures_total"] = r.failures_total;
  j["passed"] = r.passed();
  return j;
}

nlohmann::json ToJson(const StressReport& r) {
  nlohmann::json j = ComparableJson(r);
  j["deterministic"] = r.deterministic;
  j["perturb"] = r.perturb;
  j["verdict"] = r.Verdict();
  nlohmann::json failures = nlohmann::json::array();
  for (const Failure& f : r.failures) failures.push_back(FailureJson(f));
  j["failures"] = failures;
  j["leaked"] = r.leaked();
  j["abandoned"] = r.abandoned;
  j["wall_s"] = r.wall_s;
  j["requests_per_s"] = r.wall_s > 0 ? static_cast<double>(r.requests) / r.wall_s : 0.0;
  j["latency_ms"] = {{"p50", r.latency_p50_ms}, {"p99", r.latency_p99_ms}, {"max", r.latency_max_ms}};
  if (r.slowest) j["slowest"] = FailureJson(*r.slowest);
  j["schedule"] = {{"deliveries", r.deliveries}, {"delayed", r.delayed}};
  j["device_memory"] = {{"capacity", r.memory_capacity}, {"peak", r.memory_peak}};
  j["references"] = r.references;
  return j;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

}  // namespace npuflow::stress
