// The end of a stress run: what happened to every request, what the run left behind, and whether
// that is a pass. `npuflow stress` prints it as JSON (docs/stress.md, "Report").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace npuflow::stress {

// One request that did not end well, as the report lists it.
struct Failure {
  std::string kind;  // wrong_output | hang | unexpected_error | race | leak | replay
  std::uint64_t request = 0;
  int client = -1;
  std::string model;
  std::string action;
  std::string detail;
};

// A device resource, before the run and after everything was unloaded.
struct ResourceCheck {
  std::string name;  // device_memory_bytes | allocations | streams | events
  std::int64_t baseline = 0;
  std::int64_t after = 0;
  bool leaked() const { return after != baseline; }
};

struct Tally {
  std::uint64_t requests = 0, ok = 0, errors = 0, wrong = 0;
  friend bool operator==(const Tally&, const Tally&) = default;
};

struct StressReport {
  std::string scenario;
  std::uint64_t seed = 0;
  bool deterministic = false;
  std::string perturb;

  std::uint64_t requests = 0;  // finished (ok, error or wrong), plus hung ones
  std::uint64_t ok = 0;        // correct outputs
  std::map<std::string, std::uint64_t> errors;  // by kind: timeout, aborted, injected_fault, race, ...
  std::uint64_t expected_errors = 0;    // errors the scenario causes on purpose (faults, churn, few NOPs)
  std::uint64_t unexpected_errors = 0;  // any other error: a failure
  std::uint64_t wrong_outputs = 0;
  std::uint64_t races = 0;  // race reports where none may happen
  std::uint64_t hangs = 0;
  bool abandoned = false;  // hung clients could not be freed: the process must exit
  std::vector<ResourceCheck> resources;
  std::map<std::string, Tally> by_action;
  std::map<std::string, Tally> by_model;
  std::map<std::string, std::uint64_t> faults;  // injected, not_placed, and per kind / target
  std::map<std::string, std::uint64_t> churn;   // per churn action
  std::map<std::string, std::uint64_t> tiling;  // per tiling-sink model: races detected where expected
  std::vector<Failure> failures;                // the first kMaxListed
  std::uint64_t failures_total = 0;

  // Timing: differs from run to run, never compared by a replay.
  double wall_s = 0;
  double latency_p50_ms = 0, latency_p99_ms = 0, latency_max_ms = 0;
  std::optional<Failure> slowest;  // kind "slowest": the slowest request (detail: its time)
  std::uint64_t deliveries = 0, delayed = 0;  // the schedule, as the tap saw it
  std::uint64_t memory_capacity = 0, memory_peak = 0;  // the device's, bytes (peak: over the run)
  std::map<std::string, std::string> references;  // per model: "interpreter" or "solo run"

  static constexpr std::size_t kMaxListed = 20;

  bool leaked() const;
  // No wrong output, hang, race, leak or unexpected error.
  bool passed() const;
  // One line: "FAILED: 2 wrong outputs, 1 hang" or "passed".
  std::string Verdict() const;
};

// The whole report (with timing) as JSON.
nlohmann::json ToJson(const StressReport& report);
// What a replay of the run must give again: everything but wall-clock timing and the schedule's
// own counts.
nlohmann::json ComparableJson(const StressReport& report);

// Nearest rank: the smallest value with at least p% of the values at or below it.
double Percentile(std::vector<double> values, double p);

}  // namespace npuflow::stress
