// A stress run's options, replay file and report comparison, without a device: scenarios fill
// what the user did not give, bad input is an error naming what was wrong, the options and the
// schedule survive the replay file, and a corrupt replay file is refused naming the problem.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "stress/options.h"
#include "stress/replay.h"

namespace npuflow::stress {
namespace {

namespace fs = std::filesystem;

StressOptions Resolved(std::string scenario, GivenFlags given = {}, StressOptions base = {}) {
  base.scenario = std::move(scenario);
  Status s = ApplyScenario(base, given);
  EXPECT_TRUE(s.ok()) << s;
  return base;
}

// The message of CheckStressOptions after `change`, on the storm's resolved options.
template <typename F>
std::string Refusal(F change) {
  StressOptions o = Resolved("storm");
  change(o);
  Status s = CheckStressOptions(o);
  EXPECT_FALSE(s.ok());
  return std::string(s.message());
}

TEST(StressOptions, ScenariosFillOnlyWhatTheUserDidNotGive) {
  StressOptions storm = Resolved("storm");
  EXPECT_EQ(storm.models, "mlp,dag,mlp_dynamic");
  EXPECT_EQ(storm.faults, 0);
  EXPECT_EQ(storm.churn_every, 0);
  EXPECT_TRUE(CheckStressOptions(storm).ok());

  StressOptions faults = Resolved("faults");
  EXPECT_EQ(faults.faults, 1000);
  EXPECT_EQ(faults.timeout_ms, 100);
  EXPECT_TRUE(CheckStressOptions(faults).ok());

  // Given flags keep the user's value.
  StressOptions mine;
  mine.faults = 10;
  mine.timeout_ms = 250;
  mine.models = "chain";
  StressOptions given = Resolved("faults", {"faults", "timeout-ms", "models"}, mine);
  EXPECT_EQ(given.faults, 10);
  EXPECT_EQ(given.timeout_ms, 250);
  EXPECT_EQ(given.models, "chain");

  StressOptions churn = Resolved("churn");
  EXPECT_EQ(churn.churn_every, 8);
  EXPECT_EQ(churn.device_memory, "auto");
  EXPECT_TRUE(Resolved("weights").weight_streaming);
  EXPECT_EQ(Resolved("tiling").tiling_nops, (std::vector<int>{0, 4, 7, -1, 12}));

  StressOptions unknown;
  unknown.scenario = "chaos";
  Status s = ApplyScenario(unknown, {});
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.message().find("--scenario 'chaos'"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("storm"), std::string_view::npos) << s;
}

TEST(StressOptions, BadOptionsNameTheOption) {
  EXPECT_NE(Refusal([](auto& o) { o.clients = 0; }).find("--clients 0"), std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.clients = 10001; }).find("1..10000"), std::string::npos);
  EXPECT_NE(Refusal([](auto& o) {
              o.host_mode = "threads";
              o.clients = 300;
            }).find("--host-mode threads"),
            std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.host_mode = "processes"; }).find("--host-mode 'processes'"), std::string::npos);
  EXPECT_NE(Refusal([](auto& o) {
              o.requests = 0;
              o.duration_s = 0;
            }).find("at least one bound"),
            std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.streams = 65; }).find("--streams 65"), std::string::npos);
  EXPECT_NE(Refusal([](auto& o) {
              o.timeout_ms = 500;
              o.hang_ms = 400;
            }).find("--hang-ms 400 must exceed --timeout-ms 500"),
            std::string::npos);
  EXPECT_NE(Refusal([](auto& o) {
              o.faults = 10;
              o.timeout_ms = 0;
            }).find("needs --timeout-ms"),
            std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.fault_kinds = {"fail", "melt"}; }).find("unknown kind 'melt'"), std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.fault_targets = {"gpu"}; }).find("unknown target 'gpu'"), std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.tiling_nops = {3, 99}; }).find("--tiling-nops: 99"), std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.perturb = "chaos"; }).find("--perturb 'chaos'"), std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.perturbation.delay_probability = 2; }).find("delay probability"), std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.device_memory = "12Q"; }).find("unknown unit 'Q'"), std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.om = "/nonexistent/m.om"; }).find("--om '/nonexistent/m.om': no such file"),
            std::string::npos);
  EXPECT_NE(Refusal([](auto& o) { o.scenario = "om"; }).find("needs --om"), std::string::npos);

  EXPECT_NE(ParseMix("rungraph=2,teleport=1").status().message().find("unknown action 'teleport'"),
            std::string_view::npos);
  EXPECT_NE(ParseMix("rungraph=x").status().message().find("weight 'x'"), std::string_view::npos);
  EXPECT_NE(ParseMix("rungraph=0,async=0").status().message().find("no action with a weight above 0"),
            std::string_view::npos);
  EXPECT_EQ(MixText(ParseMix("stream=1,rungraph=3").value()), "rungraph=3,stream=1");
  EXPECT_EQ(ParseBytes("96M", "--device-memory").value(), 96ull << 20);
  EXPECT_EQ(ParseBytes("4096", "--device-memory").value(), 4096u);
}

TEST(StressOptions, TheResolvedOptionsRoundTripThroughJson) {
  StressOptions o = Resolved("faults");
  o.seed = 77;
  o.clients = 123;
  o.deterministic = true;
  o.perturbation.pct_depth = 5;
  o.perturbation.pct_delay = std::chrono::microseconds(7);
  o.tiling_nops = {1, 2};
  o.mix = ParseMix("nnexecute=3,stream=1").value();
  auto back = OptionsFromJson(ToJson(o), "test");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), ToJson(o));
  EXPECT_EQ(back->perturbation.seed, 77u);

  nlohmann::json missing = ToJson(o);
  missing.erase("hang_ms");
  auto refused = OptionsFromJson(missing, "f.json");
  EXPECT_EQ(refused.status().code(), StatusCode::kDataCorrupted);
  EXPECT_NE(refused.status().message().find("missing field \"hang_ms\""), std::string_view::npos) << refused.status();
  nlohmann::json mistyped = ToJson(o);
  mistyped["clients"] = "many";
  EXPECT_NE(OptionsFromJson(mistyped, "f.json").status().message().find("\"clients\" has the wrong type"),
            std::string_view::npos);
  nlohmann::json out_of_range = ToJson(o);
  out_of_range["clients"] = 0;
  EXPECT_NE(OptionsFromJson(out_of_range, "f.json").status().message().find("--clients 0"), std::string_view::npos);
}

class ReplayFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("npuflow_replay_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  ReplayFile Sample() {
    ReplayFile r;
    r.options = Resolved("storm");
    r.options.deterministic = true;
    r.schedule.deliveries = 1000;
    r.schedule.delayed = 2;
    r.schedule.digest = 0xabcdef0123456789ull;
    r.schedule.decisions = {{12, "dev0.stream3", "UnitDone", std::chrono::nanoseconds(500)},
                            {40, "model1.actor", "Execute", std::chrono::nanoseconds(9)}};
    r.report = {{"requests", 10}, {"errors", {{"timeout", 1}}}};
    return r;
  }
  fs::path dir_;
};

TEST_F(ReplayFileTest, WhatIsWrittenIsReadBack) {
  const ReplayFile r = Sample();
  const std::string path = (dir_ / "r.json").string();
  ASSERT_TRUE(WriteReplayFile(path, r).ok());
  auto back = ReadReplayFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(back->options), ToJson(r.options));
  EXPECT_EQ(back->schedule.decisions, r.schedule.decisions);
  EXPECT_EQ(back->schedule.digest, r.schedule.digest);
  EXPECT_EQ(back->schedule.deliveries, 1000u);
  EXPECT_EQ(back->report, r.report);
}

TEST_F(ReplayFileTest, ACorruptFileIsRefusedNamingTheProblem) {
  auto message = [](const StatusOr<ReplayFile>& r) { return std::string(r.status().message()); };
  EXPECT_EQ(ReadReplayFile((dir_ / "none.json").string()).status().code(), StatusCode::kNotFound);
  EXPECT_NE(message(ReadReplayFile(Write("text.json", "not json {"))).find("not JSON"), std::string::npos);
  EXPECT_NE(message(ReadReplayFile(Write("other.json", R"({"format": "something else"})"))).find("not an npuflow stress replay file"),
            std::string::npos);

  nlohmann::json j;
  const std::string good = (dir_ / "good.json").string();
  ASSERT_TRUE(WriteReplayFile(good, Sample()).ok());
  std::ifstream(good) >> j;
  nlohmann::json bad_decision = j;
  bad_decision["schedule"]["decisions"][1] = {40, "model1.actor", "Execute", -3};
  EXPECT_NE(message(ReadReplayFile(Write("d.json", bad_decision.dump()))).find("schedule decision 1"), std::string::npos);
  nlohmann::json unordered = j;
  unordered["schedule"]["decisions"][1][0] = 5;
  EXPECT_NE(message(ReadReplayFile(Write("u.json", unordered.dump()))).find("is not after the one before it"),
            std::string::npos);
  nlohmann::json no_options = j;
  no_options.erase("options");
  EXPECT_NE(message(ReadReplayFile(Write("o.json", no_options.dump()))).find("missing \"options\""), std::string::npos);
  nlohmann::json newer = j;
  newer["version"] = 9;
  EXPECT_NE(message(ReadReplayFile(Write("v.json", newer.dump()))).find("version 9"), std::string::npos);
}

TEST(StressReportDiff, NamesWhereTwoReportsDiffer) {
  nlohmann::json a = {{"requests", 10}, {"errors", {{"timeout", 1}}}, {"hangs", 0}};
  nlohmann::json b = {{"requests", 10}, {"errors", {{"timeout", 2}, {"aborted", 1}}}, {"hangs", 0}};
  const std::string d = ReportDifferences(a, b);
  EXPECT_NE(d.find("errors.timeout: 1 recorded, 2 now"), std::string::npos) << d;
  EXPECT_NE(d.find("errors.aborted: none recorded, 1 now"), std::string::npos) << d;
  EXPECT_EQ(ReportDifferences(a, a), "");
}

}  // namespace
}  // namespace npuflow::stress
