// `npuflow run` as a user meets it: examples/graphs/mlp.pbtxt compiled with `npuflow compile`, run
// in both modes with random inputs; the outputs agree across modes and with the file written by
// --outputs; bad arguments fail naming the option, the input and the accepted values. Also the
// `npuflow bench v1` JSON figures.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_testing.h"

namespace {

using npuflow::cli_testing::CommandRun;
using npuflow::cli_testing::Npuflow;
using npuflow::cli_testing::ReadFile;

std::string WriteTemp(const std::string& name, const std::string& content) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// The checksum printed for output 0, or "" when the line is missing.
std::string Checksum(const std::string& output) {
  std::smatch m;
  static const std::regex re(R"(output 0 'probs:0' f32\[4, 4\] fnv1a64 ([0-9a-f]{16}))");
  return std::regex_search(output, m, re) ? m[1].str() : "";
}

std::string Fnv1a64Hex(const std::string& bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

class RunCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    om_ = ::testing::TempDir() + "run_cli_mlp.om";
    CommandRun c = Npuflow("compile --model " + std::string(NPUFLOW_SOURCE_DIR) + "/examples/graphs/mlp.pbtxt --output " +
                           om_);
    ASSERT_EQ(c.exit_code, 0) << c.output;
  }
  static std::string om_;
};
std::string RunCli::om_;

TEST_F(RunCli, NnExecutePrintsTheSummary) {
  CommandRun r = Npuflow("run --om " + om_ + " --random-inputs --seed 3 --mode nnexecute --streams 2 --requests 8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"input 0 'x' f32[4, 8]: random, seed 3", "ran 8 requests (2 warm-up not counted)",
                           "(the same in all 8 requests)", "latency wall ms:     p50 ", "latency virtual us:  p50 ",
                           "inferences/s wall", "inferences/s virtual", "host interactions per inference: "})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  EXPECT_NE(Checksum(r.output), "") << r.output;
  EXPECT_EQ(r.output.find("n/a"), std::string::npos) << r.output;
}

TEST_F(RunCli, RunLoopPrintsTheSummaryAndTheSameOutputs) {
  CommandRun loop = Npuflow("run --om " + om_ + " --random-inputs --seed 3 --mode runloop --requests 6");
  ASSERT_EQ(loop.exit_code, 0) << loop.output;
  for (const char* want : {"ran 6 requests (1 warm-up not counted)", "(the same in all 6 requests)",
                           "latency wall ms:     p50 ", "latency virtual us:  n/a", "inferences/s wall",
                           "n/a inferences/s virtual", "host interactions per inference: "})
    EXPECT_NE(loop.output.find(want), std::string::npos) << want << "\n" << loop.output;

  CommandRun sync = Npuflow("run --om " + om_ + " --random-inputs --seed 3");
  ASSERT_EQ(sync.exit_code, 0) << sync.output;
  ASSERT_NE(Checksum(loop.output), "");
  EXPECT_EQ(Checksum(loop.output), Checksum(sync.output)) << loop.output << sync.output;

  CommandRun other_seed = Npuflow("run --om " + om_ + " --random-inputs --seed 4");
  ASSERT_EQ(other_seed.exit_code, 0) << other_seed.output;
  EXPECT_NE(Checksum(other_seed.output), Checksum(sync.output));
}

TEST_F(RunCli, OutputsAreWrittenAsPrinted) {
  const std::string dir = ::testing::TempDir() + "run_cli_outputs";
  const std::string trace = ::testing::TempDir() + "run_cli_trace.json";
  const std::string zeros = WriteTemp("run_cli_zeros.bin", std::string(4 * 8 * 4, '\0'));
  CommandRun r = Npuflow("run --om " + om_ + " --inputs " + zeros + " --outputs " + dir + " --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string bytes = ReadFile(dir + "/0_probs_0.bin");
  ASSERT_EQ(bytes.size(), 4u * 4 * 4) << r.output;
  EXPECT_EQ(Fnv1a64Hex(bytes), Checksum(r.output)) << r.output;
  // Softmax rows: each sums to 1.
  for (int row = 0; row < 4; ++row) {
    float sum = 0;
    for (int col = 0; col < 4; ++col) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * (row * 4 + col), 4);
      sum += v;
    }
    EXPECT_NEAR(sum, 1.0f, 1e-5) << "row " << row;
  }
  EXPECT_NE(ReadFile(trace).find("traceEvents"), std::string::npos);
}

TEST_F(RunCli, BadArgumentsNameTheOptionAndWhatIsAccepted) {
  const std::string short_file = WriteTemp("run_cli_short.bin", std::string(100, '\0'));
  const std::string good_file = WriteTemp("run_cli_good.bin", std::string(128, '\0'));
  const std::string base = "run --om " + om_ + " ";
  struct Case {
    std::string args;
    std::vector<std::string> wants;
  } cases[] = {
      {"--inputs " + short_file, {"input 0 'x'", "takes 128 bytes", short_file, "has 100"}},
      {"--inputs " + good_file + "," + good_file, {"--inputs", "takes 1 input", "'x' f32[4, 8]", "got 2 files"}},
      {"--random-inputs --mode fast", {"--mode 'fast'", "nnexecute", "runloop"}},
      {"--random-inputs --streams 0", {"--streams 0", "1..64"}},
      {"--random-inputs --streams 65", {"--streams 65", "1..64"}},
      {"--random-inputs --requests 0", {"--requests 0", ">= 1"}},
      {"--random-inputs --timeout-ms -1", {"--timeout-ms -1", ">= 0"}},
      {"", {"--inputs", "--random-inputs"}},
      {"--random-inputs --inputs " + good_file, {"--inputs", "--random-inputs"}},
      {"--random-inputs --device-chip 920X", {"920X", "910B"}},
  };
  for (const Case& c : cases) {
    CommandRun r = Npuflow(base + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args << ": " << r.output;
    for (const std::string& want : c.wants) EXPECT_NE(r.output.find(want), std::string::npos) << c.args << ": " << r.output;
  }
  CommandRun missing = Npuflow("run --om /nonexistent.om --random-inputs");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("/nonexistent.om"), std::string::npos) << missing.output;
}

// The v1 bench area: the task sink takes one host interaction per inference (zero copy, one execute
// message) where host scheduling takes one per task; every figure has a same-run baseline.
// A pipeline model: `npuflow compile --pipeline-stages K`, `npuflow info` lists its stages, and
// `npuflow run` on 1 and K devices gives the checksum of the ordinary model.
TEST_F(RunCli, PipelineModelRunsLikeTheOrdinaryOne) {
  CommandRun plain = Npuflow("run --om " + om_ + " --random-inputs --seed 5 --requests 2");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const std::string want = Checksum(plain.output);
  ASSERT_NE(want, "") << plain.output;
  for (int k : {2, 3}) {
    const std::string om = ::testing::TempDir() + "run_cli_mlp_pipeline" + std::to_string(k) + ".om";
    CommandRun c = Npuflow("compile --model " + std::string(NPUFLOW_SOURCE_DIR) + "/examples/graphs/mlp.pbtxt --output " +
                           om + " --pipeline-stages " + std::to_string(k) + " --verify");
    ASSERT_EQ(c.exit_code, 0) << c.output;
    EXPECT_NE(c.output.find("pipeline stages; memory plans verified"), std::string::npos) << c.output;
    CommandRun info = Npuflow("info " + om);
    ASSERT_EQ(info.exit_code, 0) << info.output;
    EXPECT_NE(info.output.find("pipeline: " + std::to_string(k) + " stages"), std::string::npos) << info.output;
    EXPECT_NE(info.output.find("stage 0:0"), std::string::npos) << info.output;
    for (int devices : {1, k}) {
      CommandRun r = Npuflow("run --om " + om + " --random-inputs --seed 5 --requests 20 --streams 4 --devices " +
                             std::to_string(devices));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_EQ(Checksum(r.output), want) << r.output;
      EXPECT_NE(r.output.find("(the same in all 20 requests)"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("pipeline: bubble fraction"), std::string::npos) << r.output;
    }
    CommandRun too_many = Npuflow("run --om " + om + " --random-inputs --devices " + std::to_string(k + 1));
    EXPECT_NE(too_many.exit_code, 0);
    EXPECT_NE(too_many.output.find("--devices " + std::to_string(k + 1) + ": expected 1.." + std::to_string(k)),
              std::string::npos)
        << too_many.output;
  }
  CommandRun dump = Npuflow("compile --model " + std::string(NPUFLOW_SOURCE_DIR) + "/examples/graphs/mlp.pbtxt --output " +
                            ::testing::TempDir() + "dump.om --pipeline-stages 2 --dump-after partition-stages");
  ASSERT_EQ(dump.exit_code, 0) << dump.output;
  for (const char* want : {"# after partition-stages", "PartitionedCall", "_stage=1", "graph \"stage_1\""})
    EXPECT_NE(dump.output.find(want), std::string::npos) << want << "\n" << dump.output;
  CommandRun bad = Npuflow("compile --model " + std::string(NPUFLOW_SOURCE_DIR) + "/examples/graphs/mlp.pbtxt --output " +
                           ::testing::TempDir() + "bad.om --pipeline-stages 17");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--pipeline-stages 17: expected 1..16"), std::string::npos) << bad.output;
  CommandRun devices = Npuflow("run --om " + om_ + " --random-inputs --devices 2");
  EXPECT_NE(devices.exit_code, 0);
  EXPECT_NE(devices.output.find("--devices 2: for pipeline models"), std::string::npos) << devices.output;
}

TEST(BenchV1, JsonHasEveryFigureWithItsBaseline) {
  CommandRun r = Npuflow("bench v1 --json --repetitions 1 --min-time 0.001");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  const auto& f = j["figures"];
  std::vector<std::string> names = {"host_interactions_per_inference", "wall_us_per_inference",
                                    "virtual_us_per_inference"};
  for (int streams : {1, 2, 4, 8}) {
    names.push_back("throughput_wall_streams" + std::to_string(streams));
    names.push_back("throughput_virtual_streams" + std::to_string(streams));
  }
  for (const std::string& name : names) {
    ASSERT_TRUE(f.contains(name)) << name << "\n" << r.output;
    EXPECT_GT(f[name]["value"].get<double>(), 0) << name;
    EXPECT_GT(f[name]["baseline"].get<double>(), 0) << name;
  }
  EXPECT_EQ(f["host_interactions_per_inference"]["value"].get<double>(), 1.0);
  // 200 kernel tasks, each its own submission, plus the synchronize.
  EXPECT_GE(f["host_interactions_per_inference"]["baseline"].get<double>(), 200.0);
  EXPECT_LT(f["virtual_us_per_inference"]["ratio"].get<double>(), 1.0);
}

// RT2.0 from the command line: examples/graphs/mlp_dynamic.pbtxt (batch unknown) compiles for
// RT2.0 under --runtime auto, `info` lists the three execute graphs, `run` takes the shape with
// --input-shape and gives the v1 model's checksum for the same inputs (batch 4), with any executor.
TEST_F(RunCli, ADynamicModelCompilesForRt2AndRunsWithTheInputShapeGiven) {
  const std::string om = ::testing::TempDir() + "run_cli_mlp_dyn.om";
  CommandRun c = Npuflow("compile --model " + std::string(NPUFLOW_SOURCE_DIR) + "/examples/graphs/mlp_dynamic.pbtxt --output " +
                         om + " --executor priority");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("for RT2.0"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("executor priority"), std::string::npos) << c.output;

  CommandRun info = Npuflow("info " + om);
  ASSERT_EQ(info.exit_code, 0) << info.output;
  for (const char* want : {"runtime: RT2.0 (executor priority)", "Init        4 nodes", "Main       54 nodes", "resources: 2 stream(s), 8 event(s)",
                           "DeInit      4 nodes", "inputs: x f32[batch, 8]", "outputs: probs:0 f32[batch, 4]"})
    EXPECT_NE(info.output.find(want), std::string::npos) << want << "\n" << info.output;

  CommandRun v1 = Npuflow("run --om " + om_ + " --random-inputs --seed 5");
  ASSERT_EQ(v1.exit_code, 0) << v1.output;
  for (const char* executor : {"sequential", "topological", "priority", "multithread", "auto"}) {
    CommandRun r = Npuflow("run --om " + om + " --random-inputs --seed 5 --input-shape x:4,8 --requests 3 --executor " +
                           executor + " --profile");
    ASSERT_EQ(r.exit_code, 0) << executor << "\n" << r.output;
    EXPECT_NE(r.output.find("ran 3 requests on RT2.0"), std::string::npos) << r.output;
    EXPECT_EQ(Checksum(r.output), Checksum(v1.output)) << executor << ": RT2.0 and the task sink agree\n" << r.output;
    EXPECT_NE(r.output.find("host profile of Main"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("LaunchKernel"), std::string::npos) << r.output;
  }
  CommandRun big = Npuflow("run --om " + om + " --random-inputs --input-shape x:37,8");
  ASSERT_EQ(big.exit_code, 0) << big.output;
  EXPECT_NE(big.output.find("output 0 'probs:0' f32[37, 4]"), std::string::npos) << big.output;

  const std::pair<std::string, std::string> bad[] = {
      {"", "input 'x' is f32[batch, 8]: give its shape with --input-shape x:D0,D1,..."},
      {"--input-shape x:3", "--input-shape 'x:3': rank 1, input 'x' is f32[batch, 8]"},
      {"--input-shape x:3,9", "--input-shape 'x:3,9': dim 1 is 9, input 'x' is f32[batch, 8]"},
      {"--input-shape y:3,8", "the model has no input 'y' (inputs: x f32[batch, 8])"},
      {"--input-shape x:3,-8", "'-8' is not a size"},
      {"--input-shape x:3,8 --executor fast", "--executor: 'fast' is not an executor"},
      {"--input-shape x:3,8 --mode runloop", "--mode runloop: an RT2.0 model runs on its callers' threads"},
  };
  for (const auto& [args, want] : bad) {
    CommandRun r = Npuflow("run --om " + om + " --random-inputs " + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find(want), std::string::npos) << args << "\n" << r.output;
  }
  CommandRun v1_profile = Npuflow("run --om " + om_ + " --random-inputs --profile");
  EXPECT_NE(v1_profile.output.find("are for RT2.0 models"), std::string::npos) << v1_profile.output;
  CommandRun bad_runtime = Npuflow("compile --model " + std::string(NPUFLOW_SOURCE_DIR) +
                                   "/examples/graphs/mlp.pbtxt --output " + ::testing::TempDir() + "y.om --runtime v3");
  EXPECT_NE(bad_runtime.output.find("--runtime 'v3': expected v1, v2 or auto"), std::string::npos) << bad_runtime.output;
}

}  // namespace
