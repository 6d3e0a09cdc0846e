#include "stress/replay.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

namespace npuflow::stress {
namespace {

constexpr const char* kFormat = "npuflow-stress-replay";
constexpr int kVersion = 1;

void Diff(const std::string& path, const nlohmann::json& a, const nlohmann::json& b, std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it)
      Diff(path.empty() ? it.key() : path + "." + it.key(), it.value(), b.contains(it.key()) ? b[it.key()] : nlohmann::json(),
           out);
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key())) Diff(path.empty() ? it.key() : path + "." + it.key(), nlohmann::json(), it.value(), out);
    return;
  }
  if (a != b) out.push_back(fmt::format("{}: {} recorded, {} now", path, a.is_null() ? "none" : a.dump(), b.is_null() ? "none" : b.dump()));
}

}  // namespace

Status WriteReplayFile(const std::string& path, const ReplayFile& r) {
  nlohmann::json decisions = nlohmann::json::array();
  for (const actors::ScheduleDecision& d : r.schedule.decisions)
    decisions.push_back({d.index, d.receiver, d.kind, d.delay.count()});
  nlohmann::json schedule = {{"deliveries", r.schedule.deliveries},
                             {"delayed", r.schedule.delayed},
                             {"truncated", r.schedule.truncated},
                             {"decisions", std::move(decisions)}};
  schedule["digest"] = r.schedule.digest ? nlohmann::json(fmt::format("{:016x}", *r.schedule.digest)) : nlohmann::json();
  nlohmann::json j = {{"format", kFormat},
                      {"version", kVersion},
                      {"options", ToJson(r.options)},
                      {"schedule", std::move(schedule)},
                      {"report", r.report}};
  std::ofstream out(path, std::ios::trunc);
  out << j.dump() << "\n";
  if (!out.good()) return Status::Failed("cannot write the replay file '{}'", path);
  return Status::Ok();
}

StatusOr<ReplayFile> ReadReplayFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("--replay '{}': no such file", path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::DataCorrupted("--replay '{}': not JSON (a replay file is written by npuflow stress)", path);
  if (!j.is_object() || j.value("format", "") != kFormat)
    return Status::DataCorrupted("--replay '{}': not an npuflow stress replay file (\"format\" is not \"{}\")", path, kFormat);
  if (j.value("version", 0) != kVersion)
    return Status::DataCorrupted("--replay '{}': version {}, this npuflow reads version {}", path, j.value("version", 0),
                                 kVersion);
  for (const char* key : {"options", "schedule", "report"})
    if (!j.contains(key)) return Status::DataCorrupted("--replay '{}': missing \"{}\"", path, key);
  ReplayFile r;
  NPUFLOW_ASSIGN_OR_RETURN(r.options, OptionsFromJson(j["options"], "--replay " + path));
  r.report = j["report"];
  const nlohmann::json& s = j["schedule"];
  try {
    r.schedule.deliveries = s.at("deliveries").get<std::uint64_t>();
    r.schedule.delayed = s.at("delayed").get<std::uint64_t>();
    r.schedule.truncated = s.at("truncated").get<bool>();
    if (s.contains("digest") && !s["digest"].is_null())
      r.schedule.digest = std::stoull(s["digest"].get<std::string>(), nullptr, 16);
    const nlohmann::json& ds = s.at("decisions");
    if (!ds.is_array()) return Status::DataCorrupted("--replay '{}': schedule.decisions is not a list", path);
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const nlohmann::json& d = ds[i];
      if (!d.is_array() || d.size() != 4 || !d[0].is_number_unsigned() || !d[1].is_string() || !d[2].is_string() ||
          !d[3].is_number_integer() || d[3].get<std::int64_t>() <= 0)
        return Status::DataCorrupted("--replay '{}': schedule decision {} is {} (expected [index, \"receiver\", \"kind\", "
                                     "delay_ns > 0])",
                                     path, i, d.dump());
      r.schedule.decisions.push_back(
          {d[0].get<std::uint64_t>(), d[1].get<std::string>(), d[2].get<std::string>(), std::chrono::nanoseconds(d[3].get<std::int64_t>())});
      if (i > 0 && r.schedule.decisions[i].index <= r.schedule.decisions[i - 1].index)
        return Status::DataCorrupted("--replay '{}': schedule decision {} (delivery {}) is not after the one before it",
                                     path, i, r.schedule.decisions[i].index);
    }
  } catch (const std::exception& e) {
    return Status::DataCorrupted("--replay '{}': the schedule is malformed: {}", path, e.what());
  }
  return r;
}

std::string ReportDifferences(const nlohmann::json& recorded, const nlohmann::json& now) {
  std::vector<std::string> diffs;
  Diff("", recorded, now, diffs);
  std::string s;
  for (const std::string& d : diffs) s += (s.empty() ? "" : "; ") + d;
  return s;
}

}  // namespace npuflow::stress
