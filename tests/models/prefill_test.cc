// GPT-2's prompt as one dynamic-shape graph on RT2.0 (PrefillMode::kBatch): the last row's logits
// against a plain C++ forward pass fed token by token and against the decode step on the same
// engine; the decode steps after a prefill read the KV-cache rows it wrote (one model, two
// runtimes); a prompt prefilled in two chunks; greedy ids equal to the token-by-token path; bad
// arguments. f32 and f16, tied and separate heads.
#include "models/gpt2/engine.h"
#include "synthetic/gpt2_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "graph/ops/op_registry.h"
#include "scheduler/model_manager.h"
#include "tests/models/gpt2_reference.h"

namespace npuflow::gpt2 {
namespace {

namespace fs = std::filesystem;
using scheduler::ModelManager;

double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 1e-6;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return err / scale;
}

struct Case {
  const char* name;
  bool f16;
  bool lm_head;
  double tol;
};

class Gpt2Prefill : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    graph::RegisterBuiltinOps();
    dir_ = fs::temp_directory_path() / ("npuflow_gpt2_prefill_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "model.bin").string();
    ASSERT_TRUE(synthetic::WriteGpt2File(path_, {.layers = 2, .embd = 64, .heads = 4, .ctx = 64, .vocab = 300,
                                                 .f16 = GetParam().f16, .seed = 5, .lm_head = GetParam().lm_head})
                    .ok());
    ASSERT_TRUE(ModelManager::Initialize({.chips = {"910B"}}).ok());
  }
  void TearDown() override {
    (void)ModelManager::Finalize();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
  std::string path_;
};

const std::vector<int> kPrompt = {11, 257, 42, 7, 199, 3, 88, 150, 21, 64, 5};

TEST_P(Gpt2Prefill, LastRowLogitsMatchTheTokenByTokenPathAndDecodeReadsTheCache) {
  const double tol = GetParam().tol;
  auto file = ReadGpt2File(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  auto ref = gpt2_testing::Gpt2Reference::Load(*file);
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto engine = Gpt2Engine::Create(path_, {.streams = 2, .prefill = PrefillMode::kBatch});
  ASSERT_TRUE(engine.ok()) << engine.status();

  std::vector<float> want, by_steps, batch;
  for (std::size_t i = 0; i < kPrompt.size(); ++i) {
    want = ref->Step(kPrompt[i], static_cast<int>(i));
    ASSERT_TRUE((*engine)->Step(1, kPrompt[i], static_cast<int>(i), by_steps).ok());
  }
  Status s = (*engine)->Prefill(0, kPrompt, 0, batch);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_LE(RelativeError(batch, want), tol) << "prefill vs the reference";
  EXPECT_LE(RelativeError(batch, by_steps), tol) << "prefill vs the decode step fed token by token";

  // Decode on both streams after their prompts: stream 0's cache came from the prefill (RT2.0),
  // stream 1's from the decode steps (v1); both must see the same rows.
  int token = static_cast<int>(std::max_element(want.begin(), want.end()) - want.begin());
  for (int pos = static_cast<int>(kPrompt.size()); pos < static_cast<int>(kPrompt.size()) + 6; ++pos) {
    want = ref->Step(token, pos);
    std::vector<float> a, b;
    ASSERT_TRUE((*engine)->Step(0, token, pos, a).ok());
    ASSERT_TRUE((*engine)->Step(1, token, pos, b).ok());
    EXPECT_LE(RelativeError(a, want), tol) << "decode after the prefill, position " << pos;
    EXPECT_LE(RelativeError(a, b), tol) << "position " << pos;
    token = static_cast<int>(std::max_element(want.begin(), want.end()) - want.begin());
  }
}

TEST_P(Gpt2Prefill, APromptPrefilledInTwoChunksEqualsOneBatch) {
  auto engine = Gpt2Engine::Create(path_, {.streams = 2});
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<float> whole, first, second;
  ASSERT_TRUE((*engine)->Prefill(0, kPrompt, 0, whole).ok());
  const std::span<const int> p(kPrompt);
  ASSERT_TRUE((*engine)->Prefill(1, p.first(4), 0, first).ok());
  Status s = (*engine)->Prefill(1, p.subspan(4), 4, second);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_LE(RelativeError(second, whole), GetParam().tol);
}

TEST_P(Gpt2Prefill, GreedyIdsEqualTheTokenByTokenPath) {
  std::vector<int> ids[2];
  for (PrefillMode mode : {PrefillMode::kBatch, PrefillMode::kTokens}) {
    auto engine = Gpt2Engine::Create(path_, {.streams = 1, .prefill = mode});
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto g = (*engine)->Generate(0, kPrompt, 12, SamplingOptions{.greedy = true});
    ASSERT_TRUE(g.ok()) << g.status();
    ids[mode == PrefillMode::kBatch ? 0 : 1] = g->ids;
    EXPECT_EQ(g->steps, mode == PrefillMode::kBatch ? 12 : static_cast<int>(kPrompt.size()) + 11);
  }
  EXPECT_EQ(ids[0], ids[1]);
}

// A one-token prompt has nothing to batch: it is one decode step in either mode (which runs while
// the weights stream in), and the ids are the same.
TEST_P(Gpt2Prefill, AOneTokenPromptIsOneDecodeStepInEitherMode) {
  std::vector<int> ids[2];
  const std::vector<int> one = {kPrompt[0]};
  for (PrefillMode mode : {PrefillMode::kBatch, PrefillMode::kTokens}) {
    auto engine = Gpt2Engine::Create(path_, {.streams = 1, .prefill = mode});
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto g = (*engine)->Generate(0, one, 6, SamplingOptions{.greedy = true});
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->steps, 6);  // 1 prompt step + 5 generated fed back
    ids[mode == PrefillMode::kBatch ? 0 : 1] = g->ids;
  }
  EXPECT_EQ(ids[0], ids[1]);
}

TEST_P(Gpt2Prefill, BadArgumentsAreClearErrors) {
  auto engine = Gpt2Engine::Create(path_, {.streams = 1});
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<float> logits;
  std::vector<int> long_prompt(65, 1);
  Status s = (*engine)->Prefill(0, long_prompt, 0, logits);
  EXPECT_NE(s.message().find("positions 0..64 are outside the context (0..63)"), std::string_view::npos) << s;
  const std::vector<int> bad = {1, 300};
  s = (*engine)->Prefill(0, bad, 0, logits);
  EXPECT_NE(s.message().find("token id 300 is outside the vocabulary (0..299)"), std::string_view::npos) << s;
  s = (*engine)->Prefill(0, std::vector<int>{}, 0, logits);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE((*engine)->Prefill(0, kPrompt, 0, logits).ok()) << "usable after bad calls";
  EXPECT_EQ(ParsePrefillMode("chunks").status().code(), StatusCode::kParamInvalid);
  auto tokens_engine = Gpt2Engine::Create(path_, {.streams = 1, .prefill = PrefillMode::kTokens});
  ASSERT_TRUE(tokens_engine.ok());
  EXPECT_EQ((*tokens_engine)->Prefill(0, kPrompt, 0, logits).code(), StatusCode::kUnsupported);
}

INSTANTIATE_TEST_SUITE_P(Models, Gpt2Prefill,
                         ::testing::Values(Case{"f32", false, false, 1e-4}, Case{"f16", true, false, 2e-3},
                                           Case{"f32_lm_head", false, true, 1e-4}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace npuflow::gpt2
