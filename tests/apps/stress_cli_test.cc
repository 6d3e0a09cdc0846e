// `npuflow stress` as a user runs it: bad input is exit 1 with a message naming what was wrong; a
// passing run prints the JSON report and exits 0; a failing run exits 3, prints the seed and
// writes a replay file; a deterministic run's replay file re-runs to the same report.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli_testing.h"

namespace npuflow {
namespace {

namespace fs = std::filesystem;
using cli_testing::Npuflow;
using cli_testing::ReadFile;
using cli_testing::ShellQuote;

class StressCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("npuflow_stress_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(StressCli, BadInputNamesWhatWasWrong) {
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {"--scenario chaos", "--scenario 'chaos'"},
      {"--clients 0", "--clients 0: expected 1..10000"},
      {"--om /nonexistent/m.om", "--om '/nonexistent/m.om': no such file"},
      {"--mix rungraph=1,warp=2", "unknown action 'warp'"},
      {"--device-memory 3X", "unknown unit 'X'"},
      {"--faults 10 --timeout-ms 0", "needs --timeout-ms"},
      {"--models mlp,unet", "unknown model 'unet'"},
      {"--pct-delay-us -5", "--pct-delay-us -5"},
  };
  for (const Case& c : cases) {
    auto run = Npuflow("stress -q --requests 10 " + c.args);
    EXPECT_EQ(run.exit_code, 1) << c.args << "\n" << run.output;
    EXPECT_NE(run.output.find(c.says), std::string::npos) << c.args << "\n" << run.output;
  }
  // A missing or corrupt replay file.
  auto missing = Npuflow("stress --replay /nonexistent/r.json");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("--replay '/nonexistent/r.json': no such file"), std::string::npos) << missing.output;
  const std::string corrupt = Path("corrupt.json");
  { std::ofstream(corrupt) << "{\"format\": \"npuflow-stress-replay\", \"version\": 1"; }
  auto bad = Npuflow("stress --replay " + ShellQuote(corrupt));
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("not JSON"), std::string::npos) << bad.output;
}

TEST_F(StressCli, APassingRunPrintsItsReportAndADeterministicOneReplays) {
  const std::string replay = Path("run.replay.json");
  auto run = Npuflow("stress -q --deterministic --seed 9 --requests 200 --clients 16 --save-replay --replay-out " +
                     ShellQuote(replay) + " --report " + ShellQuote(Path("run.json")));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json report = nlohmann::json::parse(ReadFile(Path("run.json")), nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << run.output;
  EXPECT_EQ(report["requests"], 200);
  EXPECT_EQ(report["ok"], 200);
  EXPECT_EQ(report["hangs"], 0);
  EXPECT_EQ(report["passed"], true);
  EXPECT_EQ(report["seed"], 9);
  for (const char* key : {"errors", "leaks", "latency_ms", "by_action", "by_model", "races", "wrong_outputs"})
    EXPECT_TRUE(report.contains(key)) << key;
  EXPECT_TRUE(fs::exists(replay));

  auto again = Npuflow("stress -q --replay " + ShellQuote(replay) + " --report " + ShellQuote(Path("again.json")));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("same schedule, same report"), std::string::npos) << again.output;
  auto combined = Npuflow("stress --replay " + ShellQuote(replay) + " --clients 3");
  EXPECT_EQ(combined.exit_code, 1);
  EXPECT_NE(combined.output.find("drop --clients"), std::string::npos) << combined.output;
}

TEST_F(StressCli, AFailingRunExitsThreeWithItsSeedAndAReplayFile) {
  // --hang-ms 1: a request that takes longer than 1 ms is a hang, so the run fails.
  const std::string replay = Path("failed.replay.json");
  auto run = Npuflow("stress -q --seed 21 --requests 50 --clients 4 --models dag --hang-ms 1 --replay-out " +
                     ShellQuote(replay) + " --report " + ShellQuote(Path("failed.json")));
  EXPECT_EQ(run.exit_code, 3) << run.output;
  EXPECT_NE(run.output.find("seed 21"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("npuflow stress --replay " + replay), std::string::npos) << run.output;
  const nlohmann::json report = nlohmann::json::parse(ReadFile(Path("failed.json")), nullptr, false);
  ASSERT_FALSE(report.is_discarded());
  EXPECT_GT(report["hangs"].get<int>(), 0);
  EXPECT_EQ(report["passed"], false);
  const nlohmann::json file = nlohmann::json::parse(ReadFile(replay), nullptr, false);
  ASSERT_FALSE(file.is_discarded());
  EXPECT_EQ(file["options"]["seed"], 21);
  EXPECT_EQ(file["options"]["hang_ms"], 1);
}

}  // namespace
}  // namespace npuflow
