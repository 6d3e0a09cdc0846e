// Sampling: greedy argmax, ggml's top-k / top-p sampling (the same ids as a transcription of ggml's
// gpt_sample_top_k_top_p with std::discrete_distribution under libstdc++), the empirical
// distribution, seeding, NaN / inf logits, option validation, and no allocation per call.
#include "models/gpt2/sampling.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <vector>

#include <gtest/gtest.h>

// Counts every allocation of this test binary, to check that Sample allocates nothing once warm.
namespace {
std::atomic<std::size_t> g_allocations{0};
}  // namespace

// Not inlined, so the compiler does not pair a new-expression with the free() below and warn.
[[gnu::noinline]] void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace npuflow::gpt2 {


namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ggml's gpt_sample_top_k_top_p (examples/common.cpp), transcribed; top_k must not exceed the
// number of logits.
std::int32_t GgmlSampleTopKTopP(const std::vector<float>& logits, int top_k, double top_p, double temp,
                                std::mt19937& rng) {
  const int n_logits = static_cast<int>(logits.size());
  std::vector<std::pair<double, std::int32_t>> logits_id;
  logits_id.reserve(n_logits);
  const double scale = 1.0 / temp;
  for (int i = 0; i < n_logits; ++i) logits_id.push_back(std::make_pair(logits[i] * scale, i));
  std::partial_sort(logits_id.begin(), logits_id.begin() + top_k, logits_id.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  logits_id.resize(top_k);
  double maxl = -INFINITY;
  for (const auto& kv : logits_id) maxl = std::max(maxl, kv.first);
  std::vector<double> probs;
  double sum = 0.0;
  for (const auto& kv : logits_id) {
    const double p = std::exp(kv.first - maxl);
    probs.push_back(p);
    sum += p;
  }
  for (auto& p : probs) p /= sum;
  if (top_p < 1.0f) {
    double cumsum = 0.0f;
    for (int i = 0; i < top_k; i++) {
      cumsum += probs[i];
      if (cumsum >= top_p) {
        top_k = i + 1;
        probs.resize(top_k);
        logits_id.resize(top_k);
        break;
      }
    }
    cumsum = 1.0 / cumsum;
    for (auto& p : probs) p *= cumsum;
  }
  std::discrete_distribution<> dist(probs.begin(), probs.end());
  return logits_id[dist(rng)].second;
}

// Distinct values, so the order of the top k does not depend on how ties are broken.
std::vector<float> RandomLogits(std::mt19937& rng, std::size_t n, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> logits(n);
  for (;;) {
    for (float& logit : logits) logit = normal(rng);
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) return logits;
  }
}

std::int32_t SampleOk(Sampler& sampler, std::span<const float> logits) {
  const auto id = sampler.Sample(logits);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.value_or(-1);
}

// Frequencies of `draws` samples.
std::vector<double> Frequencies(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<double> counts(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) {
    const std::int32_t id = SampleOk(sampler, logits);
    if (id < 0) break;
    counts[id] += 1.0;
  }
  for (double& c : counts) c /= draws;
  return counts;
}

TEST(SamplingOptions, ValidateNamesTheOptionAndValue) {
  EXPECT_TRUE(SamplingOptions{}.Validate().ok());
  EXPECT_TRUE((SamplingOptions{.top_k = 1, .top_p = 1.0f, .temp = 1e-3f}).Validate().ok());
  const auto message = [](SamplingOptions options) {
    const Status status = options.Validate();
    EXPECT_EQ(status.code(), StatusCode::kParamInvalid);
    return std::string(status.message());
  };
  EXPECT_EQ(message({.top_k = 0}), "sampling option top_k is 0, expected >= 1");
  EXPECT_EQ(message({.top_k = -3}), "sampling option top_k is -3, expected >= 1");
  EXPECT_EQ(message({.top_p = 0.0f}), "sampling option top_p is 0, expected 0 < top_p <= 1");
  EXPECT_EQ(message({.top_p = 1.5f}), "sampling option top_p is 1.5, expected 0 < top_p <= 1");
  EXPECT_EQ(message({.top_p = kNaN}), "sampling option top_p is nan, expected 0 < top_p <= 1");
  const std::string temp_hint = ", expected a finite temp > 0 (greedy sampling is the zero-temperature limit)";
  EXPECT_EQ(message({.temp = 0.0f}), "sampling option temp is 0" + temp_hint);
  EXPECT_EQ(message({.temp = -1.0f}), "sampling option temp is -1" + temp_hint);
  EXPECT_EQ(message({.temp = kInf}), "sampling option temp is inf" + temp_hint);
  // Validated even when greedy ignores them.
  EXPECT_EQ(message({.greedy = true, .top_k = 0}), "sampling option top_k is 0, expected >= 1");

  // A Sampler with invalid options reports them on every call.
  Sampler sampler({.temp = 0.0f});
  const std::vector<float> logits = {1.0f, 2.0f};
  for (int i = 0; i < 2; ++i) {
    const auto id = sampler.Sample(logits);
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().message(), "sampling option temp is 0" + temp_hint);
  }
}

TEST(Sampler, GreedyIsTheArgmaxWithTheLowestIdOnTies) {
  Sampler greedy({.greedy = true});
  EXPECT_EQ(SampleOk(greedy, std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(SampleOk(greedy, std::vector<float>{-5.0f}), 0);
  EXPECT_EQ(SampleOk(greedy, std::vector<float>{kNaN, -kInf, 0.5f, kNaN}), 2);
  EXPECT_EQ(SampleOk(greedy, std::vector<float>{-kInf, 1e30f, kInf, kInf}), 2);
  EXPECT_EQ(SampleOk(greedy, std::vector<float>{-kInf, -1e30f}), 1);
}

TEST(Sampler, GreedyOnLongLogitsIsTheFirstLargest) {
  // Lengths around the 16-lane blocks, with NaN, -inf and ties: the first index of the largest
  // logit, as a plain scan finds it.
  std::mt19937 rng(4);
  Sampler greedy({.greedy = true});
  for (std::size_t n : {15u, 16u, 17u, 33u, 1000u, 50257u}) {
    for (int round = 0; round < 20; ++round) {
      std::normal_distribution<float> normal(0.0f, 3.0f);  // ties among these are fine here
      std::vector<float> logits(n);
      for (float& logit : logits) logit = normal(rng);
      for (std::size_t i = 0; i < n; i += 7) logits[i] = (i / 7) % 2 ? kNaN : -kInf;
      const std::size_t a = rng() % n, b = rng() % n;
      logits[a] = logits[b] = 100.0f + static_cast<float>(round % 3);  // a tie, sometimes in the tail
      std::int32_t want = -1;
      for (std::size_t i = 0; i < n; ++i)
        if (logits[i] > -kInf && (want < 0 || logits[i] > logits[static_cast<std::size_t>(want)]))
          want = static_cast<std::int32_t>(i);
      ASSERT_EQ(SampleOk(greedy, logits), want) << "n " << n << " round " << round;
    }
  }
}

TEST(Sampler, AllMaskedOrNoLogitsIsAnError) {
  for (const bool greedy : {true, false}) {
    Sampler sampler({.greedy = greedy});
    const auto masked = sampler.Sample(std::vector<float>{kNaN, -kInf, kNaN});
    ASSERT_FALSE(masked.ok());
    EXPECT_EQ(masked.status().code(), StatusCode::kParamInvalid);
    EXPECT_EQ(masked.status().message(), "cannot sample: all 3 logits are -inf or NaN");
    const auto empty = sampler.Sample(std::span<const float>());
    ASSERT_FALSE(empty.ok());
    EXPECT_EQ(empty.status().message(), "cannot sample: no logits");
  }
}

TEST(Sampler, TopKOneEqualsGreedy) {
  std::mt19937 rng(1);
  Sampler greedy({.greedy = true});
  Sampler top1({.top_k = 1, .top_p = 0.5f, .temp = 2.0f, .seed = 9});
  for (int i = 0; i < 200; ++i) {
    const std::vector<float> logits = RandomLogits(rng, 300, 2.0f);
    ASSERT_EQ(SampleOk(top1, logits), SampleOk(greedy, logits)) << "step " << i;
  }
  EXPECT_EQ(SampleOk(top1, std::vector<float>{1.0f, 5.0f, 5.0f, 2.0f}), 1);
}

TEST(Sampler, SameSeedSameSequenceOtherSeedOtherSequence) {
  const std::vector<float> flat(50, 0.0f);  // top_k 40 of 50 equal logits: uniform over ids 0..39
  const auto sequence = [&](std::uint64_t seed) {
    Sampler sampler({.top_p = 1.0f, .seed = seed});
    std::vector<std::int32_t> ids;
    for (int i = 0; i < 200; ++i) ids.push_back(SampleOk(sampler, flat));
    return ids;
  };
  const auto a = sequence(42);
  EXPECT_EQ(a, sequence(42));
  EXPECT_NE(a, sequence(43));
  EXPECT_NE(a, sequence(42 + (std::uint64_t{1} << 32)));  // the high half of the seed counts
  for (const std::int32_t id : a) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 40);
  }
}

#if defined(__GLIBCXX__)
// std::discrete_distribution is implementation-defined; the Sampler reproduces libstdc++'s.
TEST(Sampler, EqualsGgmlWithLibstdcxx) {
  struct Case {
    int top_k;
    float top_p, temp;
    std::uint64_t seed;
  };
  const std::vector<Case> cases = {
      {40, 0.9f, 0.9f, 0},   {40, 1.0f, 0.9f, 1},  {5, 0.5f, 1.5f, 123}, {1, 0.9f, 0.9f, 7},
      {2, 1.0f, 0.7f, 99},   {500, 0.95f, 1.0f, 5}, {500, 1.0f, 3.0f, 6}, {40, 0.05f, 0.9f, 8},
  };
  for (const Case& c : cases) {
    Sampler sampler({.top_k = c.top_k, .top_p = c.top_p, .temp = c.temp, .seed = c.seed});
    std::mt19937 ggml_rng(static_cast<std::uint32_t>(c.seed));
    std::mt19937 logits_rng(c.seed + 1000);
    for (int step = 0; step < 300; ++step) {
      std::vector<float> logits = RandomLogits(logits_rng, 500, 3.0f);
      // Every third step masks all but 10 logits, so -inf (probability 0) candidates are in the top k.
      if (step % 3 == 2) {
        for (std::size_t i = 0; i < logits.size(); ++i) {
          if (i % 50 != 7) logits[i] = -kInf;
        }
      }
      const std::int32_t expected = GgmlSampleTopKTopP(logits, c.top_k, c.top_p, c.temp, ggml_rng);
      ASSERT_EQ(SampleOk(sampler, logits), expected)
          << "top_k " << c.top_k << " top_p " << c.top_p << " temp " << c.temp << " step " << step;
    }
  }
}
#endif

TEST(Sampler, EmpiricalDistributionIsTheTopKSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, -1.0f, 1.5f, 0.0f, 0.5f};
  const float temp = 0.8f;
  Sampler sampler({.top_k = 4, .top_p = 1.0f, .temp = temp, .seed = 2024});
  const std::vector<double> freq = Frequencies(sampler, logits, 20000);
  // The top 4 are ids 1, 3, 0, 5.
  std::vector<double> expected(logits.size(), 0.0);
  double sum = 0.0;
  for (const int id : {1, 3, 0, 5}) sum += expected[id] = std::exp(logits[id] / temp);
  for (double& p : expected) p /= sum;
  for (std::size_t id = 0; id < logits.size(); ++id) EXPECT_NEAR(freq[id], expected[id], 0.015) << "id " << id;
  EXPECT_EQ(freq[2], 0.0);
  EXPECT_EQ(freq[4], 0.0);
}

TEST(Sampler, TopPKeepsTheTokensUpToTheOneThatReachesIt) {
  // Probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 at temp 1 (top_k 40 > 5 keeps all five).
  const std::vector<float> logits = {std::log(0.125f), std::log(0.5f), std::log(0.0625f), std::log(0.25f),
                                     std::log(0.0625f)};
  // top_p 0.8: the sums are 0.5, 0.75, 0.875 -> ids 1, 3, 0 stay (0 is the one that reaches 0.8).
  Sampler sampler({.top_k = 40, .top_p = 0.8f, .temp = 1.0f, .seed = 77});
  const std::vector<double> freq = Frequencies(sampler, logits, 20000);
  EXPECT_NEAR(freq[1], 0.5 / 0.875, 0.015);
  EXPECT_NEAR(freq[3], 0.25 / 0.875, 0.015);
  EXPECT_NEAR(freq[0], 0.125 / 0.875, 0.015);
  EXPECT_EQ(freq[2], 0.0);
  EXPECT_EQ(freq[4], 0.0);

  // top_p 0.4: the first token alone reaches it.
  Sampler narrow({.top_k = 40, .top_p = 0.4f, .temp = 1.0f, .seed = 77});
  for (int i = 0; i < 100; ++i) ASSERT_EQ(SampleOk(narrow, logits), 1);
}

TEST(Sampler, NanIsMaskedAndInfiniteLogitsShareTheMass) {
  Sampler sampler({.top_p = 1.0f, .seed = 3});
  const std::vector<double> inf_freq = Frequencies(sampler, {kNaN, 0.0f, kInf, kInf, 1.0f}, 4000);
  EXPECT_NEAR(inf_freq[2], 0.5, 0.05);
  EXPECT_NEAR(inf_freq[3], 0.5, 0.05);
  EXPECT_EQ(inf_freq[0] + inf_freq[1] + inf_freq[4], 0.0);

  const std::vector<double> nan_freq = Frequencies(sampler, {kNaN, 0.0f, -kInf, 0.0f}, 4000);
  EXPECT_EQ(nan_freq[0], 0.0);
  EXPECT_EQ(nan_freq[2], 0.0);
  EXPECT_NEAR(nan_freq[1], 0.5, 0.05);
}

TEST(Sampler, AllocatesNothingOnceWarm) {
  std::mt19937 rng(4);
  std::vector<std::vector<float>> inputs;
  for (int i = 0; i < 50; ++i) inputs.push_back(RandomLogits(rng, 1000 - 10 * i, 2.0f));
  inputs[0][7] = 100.0f;  // the first call's top-p cut keeps one candidate: no cumulative sums yet
  for (const bool greedy : {false, true}) {
    Sampler sampler({.greedy = greedy, .top_p = 0.95f, .seed = 1});
    std::vector<std::int32_t> ids(inputs.size(), -1);
    const std::size_t cold = g_allocations.load();
    ids[0] = sampler.Sample(inputs[0]).value_or(-1);  // the largest vocabulary first
    const std::size_t before = g_allocations.load();
    if (!greedy) {
      EXPECT_GT(before, cold) << "the first call sets up the scratch space (and the counter counts)";
    }
    for (std::size_t i = 1; i < inputs.size(); ++i) ids[i] = sampler.Sample(inputs[i]).value_or(-1);
    const std::size_t after = g_allocations.load();
    EXPECT_EQ(after, before) << (greedy ? "greedy" : "top-k/top-p");
    for (const std::int32_t id : ids) EXPECT_GE(id, 0);
  }
}

}  // namespace
}  // namespace npuflow::gpt2
