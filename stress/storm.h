// RunStress: one stress run (docs/stress.md). It brings up the simulated device with the run's
// options, loads the models, drives C clients at them (Boost.Fiber fibers, OS threads, or in
// deterministic mode one request at a time in a seeded turn order), checks every output against
// its expected value, churns models and injects faults as the options ask, perturbs the actor
// schedule through the delivery tap, and after the last request unloads everything and checks
// that device memory, streams and events are back at their baseline.
//
//   StatusOr<StressResult> r = RunStress(options, {.progress = print_line});
//   r->report.passed();   // no wrong output, hang, race, leak or unexpected error
//
// It owns the process's ModelManager for its duration (Initialize .. Finalize): a caller must
// not have one initialized.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "actors/perturb.h"
#include "base/status.h"
#include "stress/options.h"
#include "stress/report.h"

namespace npuflow::stress {

// What the progress line shows, about once a second.
struct Progress {
  double elapsed_s = 0;
  std::uint64_t requests = 0;  // finished
  std::uint64_t target = 0;    // --requests (0: bounded by --duration)
  std::uint64_t in_flight = 0;
  std::map<std::string, std::uint64_t> errors;  // by kind
  std::uint64_t wrong = 0, hangs = 0;
  double slowest_ms = 0;      // the slowest request so far, finished or still running
  std::string slowest_what;   // "request 812 (client 3, mlp, rungraph)"
};

struct RunHooks {
  std::function<void(const Progress&)> progress;  // from a monitor thread; must not block for long
};

struct StressResult {
  StressReport report;
  actors::ScheduleLog schedule;  // what the tap decided (a replay: what it re-applied)
  Status replay_check;           // a replay: Ok, or where it left the recorded schedule
};

// `replay`: a recorded schedule to re-apply by delivery index (options.deterministic must be set)
// instead of the seeded strategy.
StatusOr<StressResult> RunStress(const StressOptions& options, const RunHooks& hooks = {},
                                 const actors::ScheduleLog* replay = nullptr);

}  // namespace npuflow::stress
