// Picking the next token from a model's logits, as ggml's gpt-2 example does it
// (examples/common.cpp: gpt_sample_top_k_top_p), or greedily.
//
// Sampling, step by step (all in double, as ggml computes it):
//   1. scale every logit by 1 / temp;
//   2. keep the top_k largest (partial sort, descending; ties go to the lower id, where ggml leaves
//      the order to std::partial_sort);
//   3. softmax over those, the maximum subtracted first;
//   4. if top_p < 1: walk the sorted probabilities summing them and cut after the first index where
//      the sum reaches top_p (that index is kept); scale the kept ones by 1 / sum;
//   5. pick one: draw u in [0, 1) from a std::mt19937 and take the first candidate whose cumulative
//      probability (normalized, the last set to exactly 1) is >= u. u is built from two 32-bit
//      draws, low word first, as (low + high * 2^32) / 2^64 and clamped below 1; a single candidate
//      draws nothing. This is what std::discrete_distribution does in libstdc++, so the ids equal
//      those of ggml's code built with libstdc++ for the same seed and logits (without ties);
//      unlike std::discrete_distribution it is the same under every standard library.
//
// Departures from ggml where ggml's behaviour is undefined: top_k larger than the number of logits
// keeps them all; a NaN logit counts as -inf; when some logit is +inf, the +inf logits share all
// the probability equally (the limit of the softmax); when every logit is -inf or NaN, or there
// are no logits, Sample is a ParamInvalid error rather than a made-up token. And one where it is
// merely unlucky: a candidate of probability 0 is never picked (in libstdc++ the rounding gap below
// the forced final 1 can pick one, with probability ~1e-16).
//
// Greedy sampling is the argmax (the lowest id among equal maxima) with the same NaN and -inf
// rules; it draws no random number.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"

namespace npuflow::gpt2 {

struct SamplingOptions {
  bool greedy = false;  // argmax; top_k, top_p, temp and seed are then unused (but still validated)
  std::int32_t top_k = 40;
  float top_p = 0.9f;
  float temp = 0.9f;
  // The generator is std::mt19937 seeded with (seed ^ (seed >> 32)) truncated to 32 bits: a seed
  // below 2^32 seeds it as ggml's std::mt19937 rng(seed) does, and every bit of a larger one counts.
  std::uint64_t seed = 0;

  // ParamInvalid naming the option and its value unless top_k >= 1, 0 < top_p <= 1 and temp is
  // finite and > 0.
  Status Validate() const;
};

// The error Sample gives when every one of n logits is -inf or NaN (greedy on the device, too).
Status AllLogitsMasked(std::size_t n);

class Sampler {
 public:
  // Invalid options are reported by every Sample call (as Validate reports them).
  explicit Sampler(SamplingOptions options);

  const SamplingOptions& options() const { return options_; }

  // The id (index into `logits`) of the next token; advances the generator. After the first call
  // with the largest vocabulary, a call allocates no memory (the scratch space is kept here).
  StatusOr<std::int32_t> Sample(std::span<const float> logits);

 private:
  StatusOr<std::int32_t> SampleGreedy(std::span<const float> logits) const;
  StatusOr<std::int32_t> SampleTopKTopP(std::span<const float> logits);
  double DrawUniform();

  SamplingOptions options_;
  Status options_status_;
  std::mt19937 rng_;
  std::vector<std::pair<double, std::int32_t>> candidates_;  // (scaled logit, id)
  std::vector<double> probs_;                                // of candidates_, same order
  std::vector<double> cumulative_;
};

}  // namespace npuflow::gpt2
