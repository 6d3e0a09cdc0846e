// GPT-2 as a pipeline (models/gpt2/pipeline_engine.h): the greedy ids of every sequence equal the
// single-device engine's, for K = 1, 2, 4 stages on one device and on K devices, f32 and f16.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "graph/ops/op_registry.h"
#include "models/gpt2/engine.h"
#include "models/gpt2/pipeline_engine.h"
#include "scheduler/model_manager.h"
#include "synthetic/gpt2_file.h"

namespace npuflow::gpt2 {
namespace {

namespace fs = std::filesystem;
using scheduler::ModelManager;

class Gpt2Pipeline : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    graph::RegisterBuiltinOps();
    dir_ = fs::temp_directory_path() / ("npuflow_gpt2_pipeline_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "model.bin").string();
    ASSERT_TRUE(synthetic::WriteGpt2File(path_, {.layers = 4, .embd = 64, .heads = 4, .ctx = 64, .vocab = 300,
                                                 .f16 = GetParam(), .seed = 5})
                    .ok());
    ASSERT_TRUE(ModelManager::Initialize({.chips = {"910B", "910B", "910B", "910B"}, .workers = 2}).ok());
    for (int s = 0; s < kSequences; ++s) prompts_.push_back({3 + s, 250, 17 * (s + 1), 99});
    prompts_[1].push_back(5);  // prompts of different lengths
    prompts_[2].resize(1);
  }
  void TearDown() override {
    (void)ModelManager::Finalize();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static constexpr int kSequences = 4;
  fs::path dir_;
  std::string path_;
  std::vector<std::vector<int>> prompts_;
};

TEST_P(Gpt2Pipeline, GreedyIdsEqualTheSingleDeviceEngine) {
  const SamplingOptions greedy{.greedy = true};
  std::vector<std::vector<int>> want;
  {
    auto engine = Gpt2Engine::Create(path_, {.streams = kSequences, .prefill = PrefillMode::kTokens});
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto gens = (*engine)->GenerateConcurrently(prompts_, 12, {greedy});
    ASSERT_TRUE(gens.ok()) << gens.status();
    for (const Generation& g : *gens) want.push_back(g.ids);
  }
  for (int stages : {1, 2, 3, 4}) {
    for (int devices : stages == 1 ? std::vector<int>{1} : std::vector<int>{1, stages}) {
      auto file = ReadGpt2File(path_);
      ASSERT_TRUE(file.ok()) << file.status();
      auto engine = Gpt2PipelineEngine::Create(std::move(*file),
                                               {.stages = stages, .devices = devices, .sequences = kSequences});
      ASSERT_TRUE(engine.ok()) << engine.status();
      auto gens = (*engine)->Generate(prompts_, 12, {greedy});
      ASSERT_TRUE(gens.ok()) << gens.status();
      ASSERT_EQ(gens->size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ((*gens)[i].ids, want[i]) << "sequence " << i << ", " << stages << " stages on " << devices << " devices";
      const scheduler::PipelineStats st = (*engine)->pipeline().stats();
      EXPECT_EQ(st.failed, 0u);
      EXPECT_GT(st.steps, 0u);
    }
  }
}

TEST_P(Gpt2Pipeline, BadRequestsAreClearErrors) {
  auto file = ReadGpt2File(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  auto too_many = Gpt2PipelineEngine::Create(*file, {.stages = 9, .devices = 1, .sequences = 1});
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("stages 9"), std::string::npos) << too_many.status();
  auto engine = Gpt2PipelineEngine::Create(std::move(*file), {.stages = 2, .devices = 2, .sequences = 2});
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto more = (*engine)->Generate(prompts_, 4, {SamplingOptions{.greedy = true}});
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("built for 2 sequences"), std::string::npos) << more.status();
  auto bad_token = (*engine)->Generate({{100000}}, 4, {SamplingOptions{.greedy = true}});
  ASSERT_FALSE(bad_token.ok());
  EXPECT_NE(bad_token.status().message().find("outside the vocabulary"), std::string::npos) << bad_token.status();
}

INSTANTIATE_TEST_SUITE_P(F32AndF16, Gpt2Pipeline, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "f16" : "f32"; });

}  // namespace
}  // namespace npuflow::gpt2
