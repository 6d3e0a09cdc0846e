#include "apps/stress_cmd.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stress/replay.h"
#include "stress/storm.h"

namespace npuflow::apps {
namespace {

void PrintProgress(const stress::Progress& p, std::ostream& err) {
  std::string errors;
  for (const auto& [kind, n] : p.errors) errors += fmt::format("{}{} {}", errors.empty() ? "" : ", ", kind, n);
  err << fmt::format("stress: {:.0f} s: {}{} requests, {} in flight; errors: {}{}{}; slowest {:.1f} ms{}\n", p.elapsed_s,
                     p.requests, p.target ? fmt::format("/{}", p.target) : "", p.in_flight,
                     errors.empty() ? "none" : errors, p.wrong ? fmt::format("; wrong outputs {}", p.wrong) : "",
                     p.hangs ? fmt::format("; hangs {}", p.hangs) : "", p.slowest_ms,
                     p.slowest_what.empty() ? "" : " (" + p.slowest_what + ")");
  err.flush();
}

Status WriteReport(const nlohmann::json& report, const std::string& path, std::ostream& out) {
  if (path.empty()) {
    out << report.dump(2) << "\n";
    return Status::Ok();
  }
  std::ofstream f(path, std::ios::trunc);
  f << report.dump(2) << "\n";
  if (!f.good()) return Status::Failed("--report: cannot write '{}'", path);
  return Status::Ok();
}

std::string DefaultReplayPath(const stress::StressOptions& o) {
  return fmt::format("npuflow-stress-{}-seed{}.replay.json", o.scenario, o.seed);
}

// The options of a run from the command line: the scenario's defaults under the given flags.
Status ResolveOptions(StressArgs& args) {
  stress::StressOptions& o = args.options;
  if (!args.mix.empty()) {
    NPUFLOW_ASSIGN_OR_RETURN(o.mix, stress::ParseMix(args.mix));
  }
  if (args.pct_delay_us < 0 || args.pct_delay_us > 1'000'000)
    return Status::ParamInvalid("--pct-delay-us {}: expected 0..1000000", args.pct_delay_us);
  if (args.max_delay_us < 1 || args.max_delay_us > 1'000'000)
    return Status::ParamInvalid("--max-delay-us {}: expected 1..1000000", args.max_delay_us);
  o.perturbation.pct_delay = std::chrono::microseconds(args.pct_delay_us);
  o.perturbation.max_delay = std::chrono::microseconds(args.max_delay_us);
  o.perturbation.seed = o.seed;
  NPUFLOW_RETURN_IF_ERROR(stress::ApplyScenario(o, args.given));
  return stress::CheckStressOptions(o);
}

// A run's end: the report, and on failure the seed and a replay file.
Status Finish(StressArgs& args, const stress::StressOptions& o, const stress::StressResult& result, std::ostream& out,
              std::ostream& err, int& exit_code) {
  const stress::StressReport& r = result.report;
  nlohmann::json report = stress::ToJson(r);
  NPUFLOW_RETURN_IF_ERROR(WriteReport(report, args.report, out));
  exit_code = r.passed() ? 0 : 3;
  if (!r.passed() || args.save_replay) {
    const std::string path = args.replay_out.empty() ? DefaultReplayPath(o) : args.replay_out;
    NPUFLOW_RETURN_IF_ERROR(stress::WriteReplayFile(path, {o, result.schedule, stress::ComparableJson(r)}));
    if (!r.passed()) {
      err << fmt::format("stress: {}; seed {}; replay file {} (npuflow stress --replay {}){}\n", r.Verdict(), o.seed,
                         path, path,
                         o.deterministic ? "" : "; the run used real threads: rerun with --deterministic --seed to get "
                                                "a schedule that replays exactly");
    } else {
      err << fmt::format("stress: passed; replay file {}\n", path);
    }
  } else if (!args.quiet || !args.report.empty()) {
    err << fmt::format("stress: passed: {} requests in {:.1f} s, {} expected errors, seed {}\n", r.requests, r.wall_s,
                       r.expected_errors, o.seed);
  }
  return Status::Ok();
}

Status Replay(StressArgs& args, std::ostream& out, std::ostream& err, int& exit_code) {
  for (const std::string& flag : args.given)
    if (flag != "replay" && flag != "report" && flag != "quiet" && flag != "replay-out" && flag != "save-replay")
      return Status::ParamInvalid("--replay takes the run's options from the file; drop --{}", flag);
  NPUFLOW_ASSIGN_OR_RETURN(stress::ReplayFile file, stress::ReadReplayFile(args.replay));
  stress::StressOptions o = file.options;
  if (!o.deterministic)
    err << "stress: the recorded run used real threads; the replay runs in deterministic mode and may not meet the "
           "same schedule\n";
  o.deterministic = true;
  stress::RunHooks hooks;
  if (!args.quiet) hooks.progress = [&err](const stress::Progress& p) { PrintProgress(p, err); };
  NPUFLOW_ASSIGN_OR_RETURN(stress::StressResult result, stress::RunStress(o, hooks, &file.schedule));
  if (result.report.abandoned) {
    (void)WriteReport(stress::ToJson(result.report), args.report, out);
    out.flush();
    err << "stress: the replay hung and its clients could not be freed\n";
    err.flush();
    std::_Exit(3);
  }
  NPUFLOW_RETURN_IF_ERROR(WriteReport(stress::ToJson(result.report), args.report, out));
  const std::string diff = stress::ReportDifferences(file.report, stress::ComparableJson(result.report));
  if (!result.replay_check.ok()) {
    err << "stress: " << result.replay_check.message() << "\n";
    exit_code = 4;
  } else if (!diff.empty()) {
    err << "stress: the replay followed the schedule but gave another report: " << diff << "\n";
    exit_code = 4;
  } else if (!result.report.passed()) {
    err << fmt::format("stress: the replay reproduced the recorded run: {}\n", result.report.Verdict());
    exit_code = 3;
  } else {
    err << "stress: the replay reproduced the recorded run (same schedule, same report)\n";
    exit_code = 0;
  }
  return Status::Ok();
}

}  // namespace

Status RunStressCommand(StressArgs& args, std::ostream& out, std::ostream& err, int& exit_code) {
  if (!args.replay.empty()) return Replay(args, out, err, exit_code);
  NPUFLOW_RETURN_IF_ERROR(ResolveOptions(args));
  const stress::StressOptions& o = args.options;
  stress::RunHooks hooks;
  if (!args.quiet) hooks.progress = [&err](const stress::Progress& p) { PrintProgress(p, err); };
  NPUFLOW_ASSIGN_OR_RETURN(stress::StressResult result, stress::RunStress(o, hooks));
  if (result.report.abandoned) {
    // Hung clients hold the runtime: report, then leave without running its destructors.
    (void)Finish(args, o, result, out, err, exit_code);
    out.flush();
    err << "stress: hung clients could not be freed; exiting\n";
    err.flush();
    std::fflush(nullptr);
    std::_Exit(3);
  }
  return Finish(args, o, result, out, err, exit_code);
}

}  // namespace npuflow::apps
