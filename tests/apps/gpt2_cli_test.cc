// The GPT-2 commands as a user runs them: make-gpt2, gpt2, compile --model gpt2.bin, info, run,
// demo; and their errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "tests/apps/cli_testing.h"

namespace npuflow {
namespace {

namespace fs = std::filesystem;
using cli_testing::CommandRun;
using cli_testing::Npuflow;
using cli_testing::ShellQuote;

class Gpt2CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("npuflow_gpt2_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "m.bin").string();
    CommandRun r = Npuflow("make-gpt2 --layers 2 --embd 64 --heads 4 --ctx 64 --vocab 400 --ftype f16 --seed 3 -o " +
                           ShellQuote(model_));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
  std::string model_;
};

// The "ids: ..." lines of a gpt2 run, in stream order.
std::vector<std::string> IdLines(const std::string& output) {
  std::vector<std::string> lines;
  std::regex re("ids: ([0-9 ]+)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re); it != std::sregex_iterator(); ++it)
    lines.push_back((*it)[1]);
  return lines;
}

TEST_F(Gpt2CliTest, GeneratesAndReportsTimings) {
  CommandRun r = Npuflow("gpt2 --model " + ShellQuote(model_) + " --prompt 'hello world' -n 8 --greedy --print-ids");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("hello world"), std::string::npos) << r.output;
  ASSERT_EQ(IdLines(r.output).size(), 1u) << r.output;
  for (const char* what : {"load:", "GB/s", "time to first token:", "tokens/s wall", "tokens/s virtual"})
    EXPECT_NE(r.output.find(what), std::string::npos) << what << "\n" << r.output;
}

// A chip given as a JSON file (--device-chip PATH) serves the whole run: the runtime's device and
// the session's compiler load the same file (the compiler once looked the chip up by its name).
// With the block-split cost model off the greedy ids are the shipped 910B's: splits never change
// a kernel's result.
TEST_F(Gpt2CliTest, AChipFromAFileServesTheRunAndSplitsDoNotChangeTheIds) {
  const std::string chip = Path("my910.json");
  std::ofstream(chip) << R"({"name": "my910", "aicore_count": 24, "aicpu_count": 6,
    "hbm_capacity_bytes": 68719476736, "hbm_bandwidth_gbps": 1600, "h2d_bandwidth_gbps": 24,
    "d2h_bandwidth_gbps": 24, "d2d_bandwidth_gbps": 800, "dma_latency_ns": 2000, "dma_channels": 4,
    "host_launch_latency_ns": 3000, "event_record_latency_ns": 500, "event_wait_latency_ns": 500,
    "nop_latency_ns": 100, "kernel_launch_overhead_ns": 1500, "aicpu_launch_overhead_ns": 5000,
    "task_update_latency_ns": 800, "aicore_gflops": 1200, "aicpu_gflops": 4, "prefetch_num": 8,
    "block_dispatch_ns": 0, "features": {"task_update": true}})";
  const std::string base = "gpt2 --model " + ShellQuote(model_) + " --prompt-ids '5 17 42 9' -n 6 --greedy --print-ids";
  CommandRun shipped = Npuflow(base);
  CommandRun file = Npuflow(base + " --device-chip " + ShellQuote(chip));
  ASSERT_EQ(shipped.exit_code, 0) << shipped.output;
  ASSERT_EQ(file.exit_code, 0) << file.output;
  EXPECT_EQ(IdLines(file.output), IdLines(shipped.output));
}

// --prefill batch (the default) runs a prompt of several tokens as one RT2.0 graph; a one-token
// prompt is one decode step, with the same ids as --prefill tokens.
TEST_F(Gpt2CliTest, PrefillModesGiveTheSameIds) {
  for (const char* prompt : {"5 17 42 9", "5"}) {
    const std::string base = "gpt2 --model " + ShellQuote(model_) + " --prompt-ids '" + prompt + "' -n 6 --greedy --print-ids";
    CommandRun batch = Npuflow(base + " --prefill batch");
    CommandRun tokens = Npuflow(base + " --prefill tokens");
    ASSERT_EQ(batch.exit_code, 0) << batch.output;
    ASSERT_EQ(tokens.exit_code, 0) << tokens.output;
    EXPECT_EQ(IdLines(batch.output), IdLines(tokens.output)) << prompt;
    const bool one = std::string(prompt) == "5";
    EXPECT_NE(batch.output.find(one ? "a one-token prompt: one decode step" : "the prompt as one RT2.0 graph"),
              std::string::npos)
        << batch.output;
  }
}

TEST_F(Gpt2CliTest, VerboseReportsStagesAndWhereTheLoadWent) {
  CommandRun r = Npuflow("gpt2 --model " + ShellQuote(model_) + " --prompt-ids 5 -n 2 --greedy -v");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* what : {"stage start", "stage header read", "stage model loaded", "stage weights on the device",
                           "stage end", "VmHWM", "anon", "page faults over the load", "thp_fault_alloc",
                           "load split: loader pread", "DMA copies", "peak staging"})
    EXPECT_NE(r.output.find(what), std::string::npos) << what << "\n" << r.output;
}

TEST_F(Gpt2CliTest, StreamsGiveWhatEachGivesAlone) {
  // Greedy, the same prompt on 3 streams: every stream the single run's ids.
  CommandRun one = Npuflow("gpt2 --model " + ShellQuote(model_) + " --prompt-ids '5 6 7' -n 10 --greedy --print-ids");
  CommandRun three =
      Npuflow("gpt2 --model " + ShellQuote(model_) + " --prompt-ids '5 6 7' -n 10 --greedy --print-ids --streams 3");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(three.exit_code, 0) << three.output;
  ASSERT_EQ(IdLines(one.output).size(), 1u);
  const auto lines = IdLines(three.output);
  ASSERT_EQ(lines.size(), 3u) << three.output;
  for (const std::string& l : lines) EXPECT_EQ(l, IdLines(one.output)[0]);
  // The same on 2 host threads (fibers), and with one OS thread per generation.
  for (const char* host : {"--host-threads 2", "--host-mode threads"}) {
    CommandRun r = Npuflow("gpt2 --model " + ShellQuote(model_) + " --prompt-ids '5 6 7' -n 10 --greedy --print-ids --streams 3 " +
                           host);
    ASSERT_EQ(r.exit_code, 0) << host << "\n" << r.output;
    EXPECT_EQ(IdLines(r.output), lines) << host;
  }
  // Sampling: stream i uses seed + i, so stream 1 of a run with seed 4 is stream 0 of seed 5.
  CommandRun s4 = Npuflow("gpt2 --model " + ShellQuote(model_) + " --prompt-ids 9 -n 12 --seed 4 --streams 2 --print-ids");
  CommandRun s5 = Npuflow("gpt2 --model " + ShellQuote(model_) + " --prompt-ids 9 -n 12 --seed 5 --print-ids");
  ASSERT_EQ(s4.exit_code, 0) << s4.output;
  ASSERT_EQ(s5.exit_code, 0) << s5.output;
  ASSERT_EQ(IdLines(s4.output).size(), 2u);
  EXPECT_EQ(IdLines(s4.output)[1], IdLines(s5.output)[0]);
}

// --pipeline K --devices D: the same greedy ids as the single-device engine, for every stream;
// the stages' devices and the bubble fraction are printed; the link appears in the trace.
TEST_F(Gpt2CliTest, PipelineGivesTheSameIds) {
  const std::string base = "gpt2 --model " + ShellQuote(model_) + " --prompt-ids '5 6 7' -n 10 --greedy --print-ids --streams 3";
  CommandRun one = Npuflow(base + " --prefill tokens");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto want = IdLines(one.output);
  ASSERT_EQ(want.size(), 3u) << one.output;
  const std::string trace = Path("pipeline.json");
  for (const char* pipe : {"--pipeline 2", "--pipeline 2 --devices 2", "--pipeline 3 --devices 3"}) {
    const bool traced = std::string(pipe).find("--devices 2") != std::string::npos;
    CommandRun r = Npuflow(base + " " + pipe + (traced ? " --trace " + ShellQuote(trace) : std::string()));
    ASSERT_EQ(r.exit_code, 0) << pipe << "\n" << r.output;
    EXPECT_EQ(IdLines(r.output), want) << pipe << "\n" << r.output;
    for (const char* what : {"stage 0: device 0", "stage 1: device", "pipeline: ", "bubble fraction", "tokens/s virtual"})
      EXPECT_NE(r.output.find(what), std::string::npos) << what << "\n" << r.output;
  }
  EXPECT_NE(cli_testing::ReadFile(trace).find("link -> device 1"), std::string::npos);
  CommandRun bad = Npuflow(base + " --pipeline 2 --devices 3");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--devices 3: expected 1..2"), std::string::npos) << bad.output;
  CommandRun lone = Npuflow(base + " --devices 2");
  EXPECT_NE(lone.exit_code, 0);
  EXPECT_NE(lone.output.find("--devices 2: only with --pipeline"), std::string::npos) << lone.output;
}

TEST_F(Gpt2CliTest, TraceIsWritten) {
  const std::string trace = Path("t.json");
  CommandRun r = Npuflow("gpt2 --model " + ShellQuote(model_) + " --prompt-ids 1 -n 2 --greedy --trace " + ShellQuote(trace));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("trace: " + trace), std::string::npos);
  EXPECT_NE(cli_testing::ReadFile(trace).find("weight chunk"), std::string::npos);
}

TEST_F(Gpt2CliTest, CompileInfoAndRunAGgmlFile) {
  const std::string om = Path("out/m.om");
  CommandRun c = Npuflow("compile --model " + ShellQuote(model_) + " --output " + ShellQuote(om));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  CommandRun info = Npuflow("info " + ShellQuote(om));
  ASSERT_EQ(info.exit_code, 0) << info.output;
  // The weights stay in the ggml file: info lists it as the external weight file.
  EXPECT_NE(info.output.find(fs::weakly_canonical(model_).string()), std::string::npos) << info.output;
  CommandRun run = Npuflow("run --om " + ShellQuote(om) + " --random-inputs");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  // Re-externalized: one file per distinct weight, none of them the ggml file.
  const std::string om1 = Path("out1/m.om"), wdir = Path("w1");
  CommandRun c1 = Npuflow("compile --model " + ShellQuote(model_) + " --output " + ShellQuote(om1) +
                          " --external_weight 1 --external_weight_dir " + ShellQuote(wdir));
  ASSERT_EQ(c1.exit_code, 0) << c1.output;
  int files = 0;
  for (const auto& e : fs::directory_iterator(wdir)) files += e.path().filename().string().rfind("weight_", 0) == 0;
  EXPECT_GE(files, 10);
  CommandRun run1 = Npuflow("run --om " + ShellQuote(om1) + " --random-inputs");
  EXPECT_EQ(run1.exit_code, 0) << run1.output;
  // Mode 0: everything embedded.
  CommandRun c0 = Npuflow("compile --model " + ShellQuote(model_) + " --output " + ShellQuote(Path("out0/m.om")) +
                          " --external_weight 0");
  ASSERT_EQ(c0.exit_code, 0) << c0.output;
  CommandRun info0 = Npuflow("info " + ShellQuote(Path("out0/m.om")));
  EXPECT_EQ(info0.output.find(fs::weakly_canonical(model_).string()), std::string::npos) << info0.output;
}

TEST_F(Gpt2CliTest, BadInputsAreClearErrors) {
  // A corrupt model file: the magic flipped.
  const std::string bad = Path("bad.bin");
  fs::copy_file(model_, bad);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('X');
  }
  CommandRun r = Npuflow("gpt2 --model " + ShellQuote(bad) + " --prompt hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(bad), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("magic"), std::string::npos) << r.output;
  // Truncated.
  fs::resize_file(bad, 1000);
  r = Npuflow("gpt2 --model " + ShellQuote(bad) + " --prompt hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(bad), std::string::npos) << r.output;
  struct Case {
    std::string args, says;
  };
  for (const Case& c : std::vector<Case>{
           {"--prompt hi --prompt-ids 1", "one of --prompt"},
           {"", "one of --prompt"},
           {"--prompt-ids '1 x'", "'x' is not a token id"},
           {"--prompt-ids 400", "outside the vocabulary"},
           {"--prompt hi --streams 0", "--streams 0"},
           {"--prompt hi --top-k 0", "top_k"},
           {"--prompt hi --top-p 1.5", "top_p"},
           {"--prompt hi --temp 0", "temp"},
           {"--prompt hi --threads -1", "--threads"},
           {"--prompt hi --host-threads 0", "--host-threads 0"},
           {"--prompt hi --host-mode pool", "--host-mode 'pool'"},
       }) {
    SCOPED_TRACE(c.args);
    CommandRun e = Npuflow("gpt2 --model " + ShellQuote(model_) + " " + c.args);
    EXPECT_NE(e.exit_code, 0);
    EXPECT_NE(e.output.find(c.says), std::string::npos) << e.output;
  }
  CommandRun m = Npuflow("make-gpt2 --layers 1 --embd 30 --heads 4 --ctx 8 --vocab 300 -o " + ShellQuote(Path("x.bin")));
  EXPECT_NE(m.exit_code, 0);
  EXPECT_NE(m.output.find("heads"), std::string::npos) << m.output;
  m = Npuflow("make-gpt2 --layers 1 --embd 32 --heads 4 --ctx 8 --vocab 300 --ftype f8 -o " + ShellQuote(Path("x.bin")));
  EXPECT_NE(m.exit_code, 0);
  EXPECT_NE(m.output.find("--ftype"), std::string::npos) << m.output;
  EXPECT_FALSE(fs::exists(Path("x.bin")));
}

TEST_F(Gpt2CliTest, MakeWithEncoderJson) {
  // A tiny encoder.json: GPT-2's byte-to-unicode keys ("\u0120" is a space).
  std::ofstream(Path("encoder.json")) << R"({"a": 0, "b": 1, "\u0120a": 2, "ab": 3})";
  CommandRun r = Npuflow("make-gpt2 --layers 1 --embd 16 --heads 2 --ctx 8 --vocab 4 --vocab-json " +
                         ShellQuote(Path("encoder.json")) + " -o " + ShellQuote(Path("e.bin")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  CommandRun g = Npuflow("gpt2 --model " + ShellQuote(Path("e.bin")) + " --prompt 'ab a' -n 2 --greedy");
  EXPECT_EQ(g.exit_code, 0) << g.output;
  CommandRun wrong = Npuflow("make-gpt2 --layers 1 --embd 16 --heads 2 --ctx 8 --vocab 5 --vocab-json " +
                             ShellQuote(Path("encoder.json")) + " -o " + ShellQuote(Path("f.bin")));
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.output.find("has 4 tokens but --vocab is 5"), std::string::npos) << wrong.output;
}

TEST_F(Gpt2CliTest, DemoMakesItsModelOnceAndRunsFourStreams) {
  const std::string cache = Path("cache");
  CommandRun first = Npuflow("demo -n 4 --cache-dir " + ShellQuote(cache));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("making a small GPT-2 model"), std::string::npos) << first.output;
  EXPECT_EQ(IdLines(first.output).size(), 4u) << first.output;
  EXPECT_NE(first.output.find("trace: " + (fs::path(cache) / "demo-trace.json").string()), std::string::npos);
  CommandRun again = Npuflow("demo -n 4 --cache-dir " + ShellQuote(cache));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("using the model in"), std::string::npos) << again.output;
}

}  // namespace
}  // namespace npuflow
