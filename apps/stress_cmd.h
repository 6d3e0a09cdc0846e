// `npuflow stress`: stress and race runs over the runtime (docs/stress.md).
//
//   npuflow stress                                   # the inference storm: 64 fiber clients, 3 models
//   npuflow stress --scenario faults --seed 7        # 1,000 injected faults under the storm
//   npuflow stress --scenario churn --duration 30 --report r.json
//   npuflow stress --om m.om --clients 1000
//   npuflow stress --replay npuflow-stress-faults-seed7.replay.json
//
// A progress line on stderr about once a second (off with --quiet); the JSON report on stdout,
// or in --report FILE. Exit codes: 0 the run passed; 1 bad input (an option, a file); 3 the run
// found a wrong output, hang, leak, race or unexpected error (it prints the seed and writes a
// replay file); 4 a replay left the recorded schedule or gave another report.
#pragma once

#include <ostream>
#include <string>

#include "base/status.h"
#include "stress/options.h"

namespace npuflow::apps {

struct StressArgs {
  stress::StressOptions options;
  stress::GivenFlags given;   // the flags the user gave (scenario defaults fill the rest)
  std::string mix;            // --mix text, parsed by RunStressCommand
  std::int64_t pct_delay_us = 20;
  std::int64_t max_delay_us = 50;
  std::string report;         // --report FILE (else stdout)
  std::string replay;         // --replay FILE
  std::string replay_out;     // where a failing (or --save-replay) run writes its replay file
  bool save_replay = false;
  bool quiet = false;
};

// Runs the command; `exit_code` gets 0, 3 or 4 as above. A returned error is bad input (exit 1).
Status RunStressCommand(StressArgs& args, std::ostream& out, std::ostream& err, int& exit_code);

}  // namespace npuflow::apps
