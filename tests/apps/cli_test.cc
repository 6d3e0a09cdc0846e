// The npuflow command as a user meets it: help, errors for unknown words, the bench JSON shape.
#include <array>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

namespace {

struct CommandRun {
  int exit_code;
  std::string output;  // stdout and stderr
};

CommandRun Npuflow(const std::string& args) {
  std::string cmd = std::string(NPUFLOW_BIN) + " " + args + " 2>&1";
  CommandRun run{-1, {}};
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return run;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) run.output.append(buf.data(), n);
  int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

TEST(Cli, HelpListsTheSubcommandsThatExist) {
  CommandRun r = Npuflow("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("bench"), std::string::npos);
  EXPECT_NE(r.output.find("demo"), std::string::npos);
}

TEST(Cli, UnknownSubcommandIsNamedAndFails) {
  CommandRun r = Npuflow("frobnicate");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown subcommand 'frobnicate'"), std::string::npos) << r.output;
}

TEST(Cli, UnknownFlagIsNamedAndFails) {
  CommandRun r = Npuflow("demo --bogus");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--bogus"), std::string::npos) << r.output;
}

TEST(Cli, NoSubcommandFails) { EXPECT_NE(Npuflow("").exit_code, 0); }

TEST(Cli, UnknownBenchAreaListsTheKnownOnes) {
  CommandRun r = Npuflow("bench nosuch");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown area 'nosuch'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("actors"), std::string::npos) << r.output;
}

TEST(Cli, OutOfRangeOptionIsRejected) {
  CommandRun r = Npuflow("bench actors --repetitions 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--repetitions"), std::string::npos) << r.output;
  r = Npuflow("--log loud bench actors");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'loud'"), std::string::npos) << r.output;
}

TEST(Cli, BenchJsonIsOneObjectOfFiguresWithBaselines) {
  CommandRun r = Npuflow("bench actors --json --repetitions 1 --min-time 0.001");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  ASSERT_TRUE(j.contains("figures"));
  for (const char* name : {"actor_hop", "actor_hop_vs_caf", "tap_hook_overhead", "fan_in"}) {
    ASSERT_TRUE(j["figures"].contains(name)) << name;
    const auto& f = j["figures"][name];
    for (const char* field : {"value", "unit", "baseline", "ratio"}) EXPECT_TRUE(f.contains(field)) << name << "." << field;
    EXPECT_GT(f["value"].get<double>(), 0) << name;
    EXPECT_GT(f["baseline"].get<double>(), 0) << name;
    EXPECT_NEAR(f["ratio"].get<double>(), f["value"].get<double>() / f["baseline"].get<double>(), 1e-9);
  }
}

}  // namespace
