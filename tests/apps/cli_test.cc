// The npuflow command as a user meets it: help, errors for unknown words, the bench JSON shape.
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_testing.h"

namespace {

using npuflow::cli_testing::CommandRun;
using npuflow::cli_testing::Npuflow;
using npuflow::cli_testing::Shell;

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

TEST(Cli, UnknownSubcommandAfterAnOptionExitsTwoListingTheKnownOnes) {
  for (const char* args : {"frobnicate", "--log info frobnicate", "frobnicate compile --model x.pbtxt"}) {
    CommandRun r = Npuflow(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find("unknown subcommand 'frobnicate' (known: bench, compile, info, run, gpt2, make-gpt2, demo, stress)"),
              std::string::npos)
        << args << ": " << r.output;
  }
  CommandRun inside = Npuflow("demo frobnicate");  // a stray word inside a subcommand is CLI11's to name
  EXPECT_NE(inside.exit_code, 0);
  EXPECT_EQ(inside.output.find("unknown subcommand"), std::string::npos) << inside.output;
  EXPECT_NE(inside.output.find("frobnicate"), std::string::npos) << inside.output;
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
  for (const char* name : {"actor_hop", "actor_hop_vs_caf", "actor_hop_vs_raw_bypass", "tap_hook_overhead", "fan_in",
                           "fan_in_vs_caf", "ring_vs_caf", "fanout_fanin_vs_caf"}) {
    ASSERT_TRUE(j["figures"].contains(name)) << name;
    const auto& f = j["figures"][name];
    EXPECT_FALSE(f.value("given", true)) << name << ": its baseline must be measured in the same run";
    for (const char* field : {"value", "unit", "baseline", "ratio"}) EXPECT_TRUE(f.contains(field)) << name << "." << field;
    EXPECT_GT(f["value"].get<double>(), 0) << name;
    EXPECT_GT(f["baseline"].get<double>(), 0) << name;
    EXPECT_NEAR(f["ratio"].get<double>(), f["value"].get<double>() / f["baseline"].get<double>(), 1e-9);
  }
}


// ---- compile and info -----------------------------------------------------------------------------

std::string WriteTemp(const std::string& name, const std::string& content) {
  std::string path = ::testing::TempDir() + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(content.data(), 1, content.size(), f);
  std::fclose(f);
  return path;
}

constexpr const char* kDiamond = R"pb(
  name: "diamond"
  node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 3 } } } } }
  node { name: "a" op: "Relu" input: "x" }
  node { name: "b" op: "Tanh" input: "x" }
  node { name: "c" op: "Add" input: "a" input: "b" }
  node { name: "out" op: "NetOutput" input: "c" }
)pb";

TEST(Cli, CompileThenInfo) {
  const std::string graph = WriteTemp("cli_diamond.pbtxt", kDiamond);
  const std::string om = ::testing::TempDir() + "cli_diamond.om";
  CommandRun c = Npuflow("compile --model " + graph + " --output " + om + " --verify");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("2 streams, 1 events"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("memory plan verified"), std::string::npos) << c.output;
  CommandRun i = Npuflow("info " + om);
  ASSERT_EQ(i.exit_code, 0) << i.output;
  for (const char* want : {"model diamond: chip 910B, stream mode multi", "nodes (5): Add 1 Data 1 NetOutput 1 Relu 1 Tanh 1",
                           "c Add -> f32[2, 3] on stream 1", "stream 0 (AICore): 2 tasks, kernel 1, event_record 1",
                           "stream 1 (AICore): 3 tasks, kernel 2, event_wait 1", "feature map peak 1024 bytes"})
    EXPECT_NE(i.output.find(want), std::string::npos) << want << "\n" << i.output;

  CommandRun single = Npuflow("compile --model " + graph + " --output " + om + " --stream-mode single --chip 310P");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  EXPECT_NE(single.output.find("1 streams, 0 events"), std::string::npos) << single.output;
}

// Without OpenSSL's libcrypto (opened on first use), what needs a SHA-256 fails with an error that
// names the library; nothing crashes.
TEST(Cli, AMissingLibcryptoIsAnErrorNamingIt) {
  const std::string graph = WriteTemp("cli_nocrypto.pbtxt", kDiamond);
  const std::string om = ::testing::TempDir() + "cli_nocrypto.om";
  ASSERT_EQ(Npuflow("compile --model " + graph + " --output " + om).exit_code, 0);
  for (const std::string& args : {"info " + om, "compile --model " + graph + " --output " + om + ".2"}) {
    CommandRun r = Shell("NPUFLOW_LIBCRYPTO=/nonexistent/libcrypto.so.3 " + std::string(NPUFLOW_BIN) + " " + args);
    EXPECT_EQ(r.exit_code, 1) << args << ": " << r.output;
    EXPECT_NE(r.output.find("cannot load the library /nonexistent/libcrypto.so.3"), std::string::npos)
        << args << ": " << r.output;
  }
}

TEST(Cli, CompileDumpsAfterAPass) {
  const std::string graph = WriteTemp("cli_dump.pbtxt", kDiamond);
  CommandRun c = Npuflow("compile --model " + graph + " --output " + ::testing::TempDir() +
                         "cli_dump.om --dump-after assign-streams");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("# after assign-streams"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("c = Add(a, b) -> f32[2, 3] {_engine=\"AICore\", _stream=1}"), std::string::npos) << c.output;
}

TEST(Cli, CompileOptionsAreChecked) {
  const std::string graph = WriteTemp("cli_opts.pbtxt", kDiamond);
  const std::string base = "compile --model " + graph + " --output " + ::testing::TempDir() + "cli_opts.om ";
  struct Case {
    std::string args;
    std::vector<std::string> wants;
  } cases[] = {
      {"--stream-mode bogus", {"--stream-mode", "single", "multi"}},
      {"--max-parallel 0", {"--max-parallel", "1", "64"}},
      {"--max-parallel 65", {"--max-parallel"}},
      {"--chip 920X", {"--chip '920X'", "310P, 910B"}},
      {"--dump-after fuse-everything", {"--dump-after", "validate", "gen-tasks"}},
      {"--dump-format xml", {"--dump-format", "summary", "pbtxt"}},
      {"--bogus", {"--bogus"}},
  };
  for (const Case& c : cases) {
    CommandRun r = Npuflow(base + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    for (const std::string& want : c.wants) EXPECT_NE(r.output.find(want), std::string::npos) << c.args << ": " << r.output;
  }
  CommandRun missing = Npuflow("compile --model /nonexistent.pbtxt --output x.om");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("/nonexistent.pbtxt"), std::string::npos) << missing.output;
}

TEST(Cli, CompileErrorsNameTheNode) {
  const std::string graph = WriteTemp("cli_bad.pbtxt", R"pb(
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } } } } }
    node { name: "y" op: "Frobnicate" input: "x" }
    node { name: "out" op: "NetOutput" input: "y" })pb");
  CommandRun r = Npuflow("compile --model " + graph + " --output " + ::testing::TempDir() + "cli_bad.om");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("node 'y': unknown op type 'Frobnicate'"), std::string::npos) << r.output;
}

TEST(Cli, InfoRejectsACorruptModel) {
  const std::string bad = WriteTemp("cli_corrupt.om", "this is not a model file at all, not even close to one......");
  CommandRun r = Npuflow("info " + bad);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(bad), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("magic"), std::string::npos) << r.output;
}

}  // namespace
