// Gpt2Engine's generations as fibers: 64 generations on 2 host threads give each prompt the ids it
// gets alone, need no OS thread per generation, and really run at the same time.
#include "models/gpt2/engine.h"
#include "synthetic/gpt2_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <utility>
#include <vector>
#include <unistd.h>

#include "graph/ops/op_registry.h"
#include "scheduler/model_manager.h"

namespace npuflow::gpt2 {
namespace {

namespace fs = std::filesystem;
using scheduler::ModelManager;

int OsThreads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/task")) ++n;
  return n;
}

class Gpt2FiberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    graph::RegisterBuiltinOps();
    dir_ = fs::temp_directory_path() / ("npuflow_gpt2_fiber_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "tiny.bin").string();
    ASSERT_TRUE(synthetic::WriteGpt2File(path_, {.layers = 2, .embd = 64, .heads = 4, .ctx = 64, .vocab = 256, .seed = 16})
                    .ok());
    ASSERT_TRUE(ModelManager::Initialize({.chips = {"910B"}, .workers = 2}).ok());
  }
  void TearDown() override {
    (void)ModelManager::Finalize();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Each prompt run alone, one after the other, on a one-stream engine.
  std::vector<std::vector<int>> Alone(const std::vector<std::vector<int>>& prompts, int n_predict,
                                      const std::vector<SamplingOptions>& samplings) {
    std::vector<std::vector<int>> ids;
    auto engine = Gpt2Engine::Create(path_, {.streams = 1});
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return ids;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      auto g = (*engine)->Generate(0, prompts[i], n_predict, samplings[i]);
      EXPECT_TRUE(g.ok()) << g.status();
      ids.push_back(g.ok() ? g->ids : std::vector<int>{});
    }
    return ids;
  }
  fs::path dir_;
  std::string path_;
};

TEST_F(Gpt2FiberTest, SixtyFourGenerationsOnTwoHostThreadsGiveTheIdsEachGetsAlone) {
  constexpr int kGens = 64, kPredict = 12;
  std::vector<std::vector<int>> prompts;
  std::vector<SamplingOptions> samplings;
  for (int i = 0; i < kGens; ++i) {
    std::vector<int> p;
    for (int t = 0; t <= i % 3; ++t) p.push_back((i * 37 + t * 11) % 256);
    prompts.push_back(p);
    if (i % 2 == 0)
      samplings.push_back({.greedy = true});
    else
      samplings.push_back({.top_k = 20, .top_p = 0.95f, .temp = 0.9f, .seed = 1000 + static_cast<std::uint64_t>(i)});
  }
  const std::vector<std::vector<int>> alone = Alone(prompts, kPredict, samplings);
  ASSERT_EQ(alone.size(), prompts.size());

  auto engine = Gpt2Engine::Create(path_, {.streams = kGens});
  ASSERT_TRUE(engine.ok()) << engine.status();
  npu_sim::Runtime& rt = ModelManager::Get()->runtime();
  const npu_sim::VTime caller_clock = rt.HostClock();
  const int threads_before = OsThreads();
  std::mutex mu;  // on_token runs on 2 host threads; never held across a wait
  int most_threads = 0;
  auto on_token = [&](int, int) {
    std::lock_guard<std::mutex> lock(mu);
    most_threads = std::max(most_threads, OsThreads());
    return true;
  };
  // No WaitForWeights first: the first steps may come while the weights still stream in.
  auto gens = (*engine)->GenerateConcurrently(prompts, kPredict, samplings, on_token,
                                              {.mode = HostOptions::Mode::kFibers, .threads = 2});
  ASSERT_TRUE(gens.ok()) << gens.status();
  ASSERT_EQ(gens->size(), prompts.size());
  for (int i = 0; i < kGens; ++i) {
    const Generation& g = (*gens)[static_cast<std::size_t>(i)];
    EXPECT_EQ(g.ids, alone[static_cast<std::size_t>(i)]) << "generation " << i;
    EXPECT_EQ(static_cast<int>(g.ids.size()), kPredict);
    EXPECT_GT(g.virtual_ms, 0) << "generation " << i << ": its own host client saw no time";
  }
  EXPECT_LE(most_threads, threads_before + 1) << "more than one new OS thread for 2 host threads";
  // Really at the same time: more generations in flight at once than there are host threads (one
  // generation after another on each thread would give at most 2). Not "all 64 at once": a
  // generation's 12 steps may end before the last fiber starts.
  std::vector<std::pair<Generation::Clock::time_point, int>> edges;
  for (const Generation& g : *gens) {
    edges.emplace_back(g.started, +1);
    edges.emplace_back(g.finished, -1);
  }
  std::sort(edges.begin(), edges.end());  // at one instant an end (-1) counts before a start
  int in_flight = 0, most_in_flight = 0;
  for (const auto& [when, step] : edges) most_in_flight = std::max(most_in_flight, in_flight += step);
  EXPECT_GT(most_in_flight, 2) << "the generations did not run at once";
  // The generations charged their own host clients, not the calling thread.
  EXPECT_EQ(rt.HostClock(), caller_clock);
}

TEST_F(Gpt2FiberTest, OneHostThreadAndOneThreadPerGenerationGiveTheSameIds) {
  const std::vector<std::vector<int>> prompts = {{1, 2, 3}, {200, 7}, {42}, {99, 98, 97}};
  const std::vector<SamplingOptions> samplings = {{.greedy = true},
                                                  {.top_k = 5, .top_p = 0.9f, .temp = 0.8f, .seed = 1},
                                                  {.greedy = true},
                                                  {.top_k = 40, .top_p = 1.f, .temp = 1.f, .seed = 9}};
  const std::vector<std::vector<int>> alone = Alone(prompts, 10, samplings);
  auto engine = Gpt2Engine::Create(path_, {.streams = 4});
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (HostOptions host : {HostOptions{.threads = 1}, HostOptions{.mode = HostOptions::Mode::kThreads}}) {
    auto gens = (*engine)->GenerateConcurrently(prompts, 10, samplings, {}, host);
    ASSERT_TRUE(gens.ok()) << gens.status();
    for (std::size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ((*gens)[i].ids, alone[i]) << "stream " << i;
  }
}

TEST_F(Gpt2FiberTest, BadHostOptionsAndFailingGenerationsAreErrors) {
  auto engine = Gpt2Engine::Create(path_, {.streams = 2});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<SamplingOptions> greedy = {{.greedy = true}};
  auto bad = (*engine)->GenerateConcurrently({{1}, {2}}, 4, greedy, {}, {.threads = 0});
  EXPECT_EQ(bad.status().code(), StatusCode::kParamInvalid);
  EXPECT_NE(bad.status().message().find("host threads 0"), std::string::npos) << bad.status();
  // A token outside the vocabulary fails its generation (as a fiber), naming it; the other ends normally.
  auto failed = (*engine)->GenerateConcurrently({{1}, {256}}, 4, greedy, {}, {.threads = 2});
  EXPECT_EQ(failed.status().code(), StatusCode::kParamInvalid);
  EXPECT_NE(failed.status().message().find("generation 1"), std::string::npos) << failed.status();
  EXPECT_NE(failed.status().message().find("token id 256"), std::string::npos) << failed.status();
}

}  // namespace
}  // namespace npuflow::gpt2
