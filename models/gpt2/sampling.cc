#include "models/gpt2/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/first_max.h"

namespace npuflow::gpt2 {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::uint32_t Seed32(std::uint64_t seed) { return static_cast<std::uint32_t>(seed ^ (seed >> 32)); }

}  // namespace

Status AllLogitsMasked(std::size_t n) {
  return Status::ParamInvalid("cannot sample: all {} logits are -inf or NaN", n);
}

Status SamplingOptions::Validate() const {
  if (top_k < 1) return Status::ParamInvalid("sampling option top_k is {}, expected >= 1", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return Status::ParamInvalid("sampling option top_p is {}, expected 0 < top_p <= 1", top_p);
  }
  if (!(temp > 0.0f) || !std::isfinite(temp)) {
    return Status::ParamInvalid("sampling option temp is {}, expected a finite temp > 0 (greedy sampling is the "
                                "zero-temperature limit)",
                                temp);
  }
  return Status::Ok();
}

Sampler::Sampler(SamplingOptions options)
    : options_(options), options_status_(options.Validate()), rng_(Seed32(options.seed)) {}

StatusOr<std::int32_t> Sampler::Sample(std::span<const float> logits) {
  if (!options_status_.ok()) return options_status_;
  if (logits.empty()) return Status::ParamInvalid("cannot sample: no logits");
  if (logits.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    return Status::ParamInvalid("cannot sample: {} logits is more than token ids can number", logits.size());
  }
  return options_.greedy ? SampleGreedy(logits) : SampleTopKTopP(logits);
}

StatusOr<std::int32_t> Sampler::SampleGreedy(std::span<const float> logits) const {
  // The same index as the ArgMax op the decode step runs on the device (base/first_max.h).
  const std::int64_t best = FirstMaxIndex(logits.data(), logits.size());
  if (best < 0) return AllLogitsMasked(logits.size());
  return static_cast<std::int32_t>(best);
}

StatusOr<std::int32_t> Sampler::SampleTopKTopP(std::span<const float> logits) {
  const std::size_t n = logits.size();
  const std::size_t k = std::min(static_cast<std::size_t>(options_.top_k), n);

  const double scale = 1.0 / static_cast<double>(options_.temp);
  candidates_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float logit = logits[i];
    candidates_[i] = {std::isnan(logit) ? -kInf : static_cast<double>(logit) * scale, static_cast<std::int32_t>(i)};
  }
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(k), candidates_.end(),
                    [](const auto& a, const auto& b) {
                      return a.first > b.first || (a.first == b.first && a.second < b.second);
                    });
  candidates_.resize(k);
  // Room for every later step at this k, even when this call's top-p cut leaves one candidate.
  cumulative_.reserve(k);

  const double max_logit = candidates_.front().first;
  if (max_logit == -kInf) return AllLogitsMasked(n);
  probs_.resize(k);
  double sum = 0.0;
  for (std::size_t i = 0; i < k; ++i) {
    const double logit = candidates_[i].first;
    // With a +inf maximum, exp(inf - inf) would be NaN: the +inf logits take all the mass instead.
    const double p = max_logit == kInf ? (logit == kInf ? 1.0 : 0.0) : std::exp(logit - max_logit);
    probs_[i] = p;
    sum += p;
  }
  for (double& p : probs_) p /= sum;

  if (options_.top_p < 1.0f) {
    const double top_p = options_.top_p;
    double cumsum = 0.0;
    for (std::size_t i = 0; i < probs_.size(); ++i) {
      cumsum += probs_[i];
      if (cumsum >= top_p) {
        probs_.resize(i + 1);
        candidates_.resize(i + 1);
        break;
      }
    }
    // As ggml: when rounding keeps the sum below top_p, nothing is cut and the sum is near 1.
    const double inverse = 1.0 / cumsum;
    for (double& p : probs_) p *= inverse;
  }

  // std::discrete_distribution as libstdc++ implements it: one candidate draws nothing; else the
  // normalized partial sums, the last forced to 1. Trailing zero-probability candidates (logits of
  // -inf) are left out of the search, so the rounding gap below that forced 1 cannot pick one;
  // they still count for whether a number is drawn, which keeps the generator in step with ggml.
  if (probs_.size() < 2) return candidates_.front().second;
  double total = 0.0;
  for (const double p : probs_) total += p;
  std::size_t searched = probs_.size();
  while (searched > 1 && probs_[searched - 1] == 0.0) --searched;
  cumulative_.resize(searched);
  double running = 0.0;
  for (std::size_t i = 0; i < searched; ++i) {
    running += probs_[i] / total;
    cumulative_[i] = running;
  }
  cumulative_.back() = 1.0;
  const double u = DrawUniform();
  const auto pick = std::lower_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin();
  return candidates_[static_cast<std::size_t>(pick)].second;
}

double Sampler::DrawUniform() {
  // std::generate_canonical<double, 53> of libstdc++ for a 32-bit engine: two draws, low word first.
  const double low = static_cast<double>(rng_());
  const double high = static_cast<double>(rng_());
  const double u = (low + high * 4294967296.0) / 18446744073709551616.0;
  return u < 1.0 ? u : std::nextafter(1.0, 0.0);
}

}  // namespace npuflow::gpt2
