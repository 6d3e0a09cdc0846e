#include "actors/perturb.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace npuflow::actors {
namespace {

// splitmix64's finalizer: a well-mixed 64-bit value of (seed, key), the same everywhere.
std::uint64_t Mix(std::uint64_t seed, std::uint64_t key) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (key + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t Fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Order-dependent: folding the same deliveries in another order gives another digest.
std::uint64_t Fold(std::uint64_t digest, const Delivery& d) {
  const std::uint64_t x = Fnv1a(d.receiver_name) * 31 + Fnv1a(d.kind);
  return (digest ^ x) * 0x100000001b3ull + 0x9E3779B97F4A7C15ull;
}

// p in [0, 1] as a threshold on a uniform 64-bit draw.
std::uint64_t Threshold(double p) {
  if (p <= 0) return 0;
  if (p >= 1) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(std::ldexp(p, 64));
}

constexpr std::uint64_t kPriorityKey = 0x5052494F52495459ull;  // "PRIORITY"
constexpr std::uint64_t kChangeKey = 0x4348414E4745ull;        // "CHANGE"
constexpr std::uint64_t kDelayKey = 0x44454C4159ull;           // "DELAY"
constexpr std::uint64_t kAmountKey = 0x414D4F554E54ull;        // "AMOUNT"
constexpr std::uint64_t kHoldKey = 0x484F4C44ull;              // "HOLD"

}  // namespace

Status CheckPerturbOptions(const PerturbOptions& o) {
  if (o.pct_depth < 0 || o.pct_depth > 64)
    return Status::ParamInvalid("perturbation: pct depth {}: expected 0..64 (priority change points)", o.pct_depth);
  if (o.pct_window < 1) return Status::ParamInvalid("perturbation: pct window 0: expected >= 1 deliveries");
  if (o.pct_span < 1) return Status::ParamInvalid("perturbation: pct span 0: expected >= 1 deliveries");
  if (!(o.pct_hold >= 0 && o.pct_hold <= 1))
    return Status::ParamInvalid("perturbation: pct hold {}: expected 0..1", o.pct_hold);
  if (!(o.low_priority_share >= 0 && o.low_priority_share <= 1))
    return Status::ParamInvalid("perturbation: low-priority share {}: expected 0..1", o.low_priority_share);
  if (!(o.delay_probability >= 0 && o.delay_probability <= 1))
    return Status::ParamInvalid("perturbation: delay probability {}: expected 0..1", o.delay_probability);
  if (o.pct_delay.count() < 0 || o.pct_delay > std::chrono::seconds(1))
    return Status::ParamInvalid("perturbation: pct delay {} ns: expected 0 .. 1 s", o.pct_delay.count());
  if (o.max_delay.count() < 1 || o.max_delay > std::chrono::seconds(1))
    return Status::ParamInvalid("perturbation: max delay {} ns: expected 1 ns .. 1 s", o.max_delay.count());
  return Status::Ok();
}

StatusOr<PerturbStrategy> ParsePerturbStrategy(std::string_view name) {
  if (name == "random") return PerturbStrategy::kRandom;
  if (name == "pct") return PerturbStrategy::kPct;
  return Status::ParamInvalid("perturbation strategy '{}': expected random or pct", name);
}

std::string_view PerturbStrategyName(PerturbStrategy strategy) {
  return strategy == PerturbStrategy::kPct ? "pct" : "random";
}

StatusOr<std::unique_ptr<PerturbTap>> PerturbTap::Create(const PerturbOptions& options) {
  NPUFLOW_RETURN_IF_ERROR(CheckPerturbOptions(options));
  return std::make_unique<PerturbTap>(options);
}

PerturbTap::PerturbTap(const PerturbOptions& options) : options_(options) {
  if (options_.strategy == PerturbStrategy::kPct) {
    const int depth = std::clamp(options_.pct_depth, 0, kMaxDepth);
    for (int i = 0; i < depth; ++i)
      change_points_.push_back(Mix(options_.seed ^ kChangeKey, static_cast<std::uint64_t>(i)) % options_.pct_window);
    std::sort(change_points_.begin(), change_points_.end());
    low_threshold_ = Threshold(options_.low_priority_share);
    hold_threshold_ = Threshold(options_.pct_hold);
  }
  delay_threshold_ = Threshold(options_.delay_probability);
  if (options_.digest) log_.digest = 0;
}

std::chrono::nanoseconds PerturbTap::Decide(std::uint64_t index, ActorId receiver) {
  std::chrono::nanoseconds delay{0};
  if (options_.strategy == PerturbStrategy::kPct) {
    // A change point demotes this delivery's receiver below every other, for pct_span deliveries.
    const auto cp = std::lower_bound(change_points_.begin(), change_points_.end(), index);
    if (cp != change_points_.end() && *cp == index) {
      const auto slot = static_cast<std::size_t>(cp - change_points_.begin());
      std::uint64_t expected = 0;
      demoted_[slot].compare_exchange_strong(expected, std::uint64_t{receiver} + 1, std::memory_order_acq_rel);
    }
    bool demoted = false;
    for (std::size_t i = 0; i < change_points_.size() && !demoted; ++i)
      demoted = index >= change_points_[i] && index - change_points_[i] < options_.pct_span &&
                demoted_[i].load(std::memory_order_acquire) == std::uint64_t{receiver} + 1;
    if (demoted) {
      delay += 2 * options_.pct_delay;
    } else if (Mix(options_.seed ^ kPriorityKey, receiver) < low_threshold_ &&
               Mix(options_.seed ^ kHoldKey, index) < hold_threshold_) {
      delay += options_.pct_delay;
    }
  }
  if (delay_threshold_ != 0 && Mix(options_.seed ^ kDelayKey, index) < delay_threshold_) {
    const auto span = static_cast<std::uint64_t>(options_.max_delay.count());
    delay += std::chrono::nanoseconds(1 + static_cast<std::int64_t>(Mix(options_.seed ^ kAmountKey, index) % span));
  }
  return delay;
}

std::chrono::nanoseconds PerturbTap::OnDelivery(const Delivery& delivery) {
  const std::uint64_t index = next_index_.fetch_add(1, std::memory_order_relaxed);
  const std::chrono::nanoseconds delay = options_.internal_only && delivery.sender == kExternal
                                             ? std::chrono::nanoseconds(0)
                                             : Decide(index, delivery.receiver);
  if (delay.count() > 0) delayed_.fetch_add(1, std::memory_order_relaxed);
  if (delay.count() > 0 || options_.digest) {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.digest) log_.digest = Fold(*log_.digest, delivery);
    if (delay.count() > 0) {
      if (log_.decisions.size() < options_.max_log) {
        log_.decisions.push_back({index, std::string(delivery.receiver_name), std::string(delivery.kind), delay});
      } else {
        log_.truncated = true;
      }
    }
  }
  return delay;
}

ScheduleLog PerturbTap::Log() const {
  std::lock_guard<std::mutex> lock(mu_);
  ScheduleLog log = log_;
  log.deliveries = next_index_.load(std::memory_order_relaxed);
  log.delayed = delayed_.load(std::memory_order_relaxed);
  // With real threads, deliveries are offered concurrently: keep the log in index order.
  std::sort(log.decisions.begin(), log.decisions.end(),
            [](const ScheduleDecision& a, const ScheduleDecision& b) { return a.index < b.index; });
  return log;
}

ReplayTap::ReplayTap(std::vector<ScheduleDecision> decisions, ReplayOptions options)
    : decisions_([&] {
        std::sort(decisions.begin(), decisions.end(),
                  [](const ScheduleDecision& a, const ScheduleDecision& b) { return a.index < b.index; });
        return std::move(decisions);
      }()),
      options_(options) {
  if (options_.digest) log_.digest = 0;
}

std::chrono::nanoseconds ReplayTap::OnDelivery(const Delivery& delivery) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t index = index_++;
  log_.deliveries = index_;
  if (options_.digest) log_.digest = Fold(*log_.digest, delivery);
  if (divergence_ || next_ >= decisions_.size()) return std::chrono::nanoseconds(0);
  const ScheduleDecision& want = decisions_[next_];
  if (want.index != index) return std::chrono::nanoseconds(0);
  ++next_;
  if (want.receiver != delivery.receiver_name || want.kind != delivery.kind) {
    divergence_ = fmt::format("delivery {} went to '{}' ({}); the log has '{}' ({})", index, delivery.receiver_name,
                              delivery.kind, want.receiver, want.kind);
    return std::chrono::nanoseconds(0);
  }
  ++log_.delayed;
  log_.decisions.push_back(want);
  return want.delay;
}

ScheduleLog ReplayTap::Log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

std::optional<std::string> ReplayTap::Divergence() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (divergence_) return divergence_;
  if (next_ < decisions_.size())
    return fmt::format("the run ended after {} deliveries; the log has a decision at delivery {} ('{}', {})", index_,
                       decisions_[next_].index, decisions_[next_].receiver, decisions_[next_].kind);
  return std::nullopt;
}

Status ReplayTap::CheckAgainst(const ScheduleLog& recorded) const {
  if (auto where = Divergence()) return Status::Failed("replay diverged from the schedule: {}", *where);
  std::lock_guard<std::mutex> lock(mu_);
  if (recorded.truncated)
    return Status::Failed("the recorded schedule was truncated after {} decisions: the replay applied only those",
                          recorded.decisions.size());
  if (recorded.deliveries != 0 && recorded.deliveries != log_.deliveries)
    return Status::Failed("replay diverged from the schedule: {} deliveries, the recorded run made {}",
                          log_.deliveries, recorded.deliveries);
  if (recorded.digest && log_.digest && *recorded.digest != *log_.digest)
    return Status::Failed("replay diverged from the schedule: the same {} deliveries, in another order or to other "
                          "actors (digest {:016x}, recorded {:016x})",
                          log_.deliveries, *log_.digest, *recorded.digest);
  return Status::Ok();
}

}  // namespace npuflow::actors
