// The replay file of a stress run: its resolved options (seed included), the schedule the delivery
// tap made, and the report a replay must give again (docs/stress.md, "Replay").
//
//   {"format": "npuflow-stress-replay", "version": 1,
//    "options": {...}, "schedule": {"deliveries", "delayed", "digest", "truncated",
//    "decisions": [[index, "receiver", "kind", delay_ns], ...]}, "report": {...}}
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "actors/perturb.h"
#include "base/status.h"
#include "stress/options.h"

namespace npuflow::stress {

struct ReplayFile {
  StressOptions options;
  actors::ScheduleLog schedule;
  nlohmann::json report;  // ComparableJson of the recorded run
};

Status WriteReplayFile(const std::string& path, const ReplayFile& replay);
// Errors name the file and what is wrong in it (not JSON, another format, a missing or mistyped
// field, a malformed decision).
StatusOr<ReplayFile> ReadReplayFile(const std::string& path);

// Where two comparable reports differ: "errors.timeout: 3 recorded, 4 now; ..." (empty: equal).
std::string ReportDifferences(const nlohmann::json& recorded, const nlohmann::json& now);

}  // namespace npuflow::stress
