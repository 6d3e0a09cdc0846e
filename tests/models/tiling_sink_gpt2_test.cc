// GPT-2's decode Attention through the tiling sink (ge.tiling_schedule_optimize = "1"): on 910B it
// is tiled on the device each step from the real context length; on 310P (no task update) the
// device gate fails and it falls back. Greedy ids are the same with the option on and off, f32 and
// f16, 1 and 4 concurrent generations.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "graph/ops/op_registry.h"
#include "models/gpt2/engine.h"
#include "scheduler/model_manager.h"
#include "synthetic/gpt2_file.h"

namespace npuflow::gpt2 {
namespace {

namespace fs = std::filesystem;
using scheduler::ModelManager;

struct Case {
  const char* name;
  bool f16;
  const char* chip;
};

class Gpt2TilingSink : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    graph::RegisterBuiltinOps();
    dir_ = fs::temp_directory_path() / ("npuflow_gpt2_tiling_sink_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "model.bin").string();
    ASSERT_TRUE(synthetic::WriteGpt2File(path_, {.layers = 2, .embd = 64, .heads = 4, .ctx = 64, .vocab = 300,
                                                 .f16 = GetParam().f16, .seed = 9})
                    .ok());
    ASSERT_TRUE(ModelManager::Initialize({.chips = {GetParam().chip}, .workers = 2}).ok());
  }
  void TearDown() override {
    (void)ModelManager::Finalize();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // The greedy ids of `streams` concurrent generations, the option as given.
  std::vector<std::vector<int>> Ids(const std::string& option, int streams) {
    EngineOptions options{.streams = streams, .prefill = PrefillMode::kTokens};
    options.session_options = {{"ge.tiling_schedule_optimize", option}, {"npuflow.executeTimeoutMs", "20000"}};
    auto engine = Gpt2Engine::Create(path_, options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return {};
    // Each layer's Attention: tiled on the device where the chip has task update, else the
    // device gate failed (a Session compiles online).
    const graph::CompiledModel& m = (*engine)->decode_model();
    EXPECT_EQ(m.tiling_sink.size(), 2u);
    const bool sink = option == "1" && std::string(GetParam().chip) == "910B";
    for (const graph::TilingSinkDecision& d : m.tiling_sink) {
      EXPECT_EQ(d.marked, sink) << d.node;
      if (!sink) {
        EXPECT_EQ(d.gate, option == "1" ? "device" : "option") << d.node;
      }
    }
    EXPECT_EQ(!m.streams.empty() && m.streams.back().name == "tiling", sink);
    std::vector<std::vector<int>> prompts;
    for (int s = 0; s < streams; ++s) prompts.push_back({11 + s, 257, 42, 7 * (s + 1)});
    std::vector<SamplingOptions> samplings(static_cast<std::size_t>(streams), SamplingOptions{.greedy = true});
    auto gens = (*engine)->GenerateConcurrently(prompts, 24, samplings);
    EXPECT_TRUE(gens.ok()) << gens.status();
    std::vector<std::vector<int>> ids;
    if (gens.ok())
      for (const Generation& g : *gens) ids.push_back(g.ids);
    return ids;
  }
  fs::path dir_;
  std::string path_;
};

TEST_P(Gpt2TilingSink, GreedyIdsAreTheSameWithTheOptionOnAndOff) {
  for (int streams : {1, 4}) {
    const auto off = Ids("0", streams);
    const auto on = Ids("1", streams);
    ASSERT_EQ(off.size(), static_cast<std::size_t>(streams));
    EXPECT_EQ(on, off) << GetParam().name << ", " << streams << " stream(s)";
  }
}

INSTANTIATE_TEST_SUITE_P(Chips, Gpt2TilingSink,
                         ::testing::Values(Case{"f32_910B", false, "910B"}, Case{"f16_910B", true, "910B"},
                                           Case{"f32_310P", false, "310P"}, Case{"f16_310P", true, "310P"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace npuflow::gpt2
