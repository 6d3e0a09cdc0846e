// BusyTimeline: when a unit (an AICore or AICPU core, a DMA channel) is busy in virtual time.
//
// Work reaches a unit in wall-clock order, which need not be virtual-time order: two streams
// (or two model instances) run concurrently on the host, and the one that happens to be handled
// first may be later in virtual time. Reserve places each piece of work in the earliest idle gap
// at or after its ready time, so concurrent work overlaps in virtual time as it would on the
// device, whichever message came first. Plain data: a sorted array of busy intervals, adjacent
// ones merged. At least the latest kMaxIntervals are kept: once there are twice as many, the older
// half is forgotten at once (the time before them counts as busy), so no allocation happens once
// the array has grown. Work that comes in virtual-time order, the usual case, goes after the latest
// interval without a search and touches the array's end only.
//
// Why the batch: a unit that runs one part of most kernels has a gap between each two, so its array
// stays full, and dropping the oldest interval one at a time moved the whole 1 KB array on every
// reservation. With the runtime's state cold after a kernel's weights went through the caches,
// that was most of what a kernel part cost beside its blocks (GPT-2 117M decode: about 400 parts a
// step; docs/gpt2.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "npu_sim/chip_spec.h"

namespace npuflow::npu_sim {

class BusyTimeline {
 public:
  static constexpr std::size_t kMaxIntervals = 64;

  BusyTimeline() { busy_.reserve(2 * kMaxIntervals + 1); }

  // Reserves `duration` at the earliest start >= `at` that overlaps no busy interval; returns it.
  VTime Reserve(VTime at, VTime duration) {
    VTime t = std::max(at, horizon_);
    // After everything: no search, nothing moves, and the array is only written (its latest end is
    // kept beside it: the array's lines are cold when a unit's turn comes round again).
    if (busy_.empty() || t >= last_end_) {
      if (duration <= 0) return t;
      if (!busy_.empty() && last_end_ == t) {
        busy_.back().second = t + duration;
      } else {
        busy_.push_back(Interval{t, t + duration});
        Forget();
      }
      last_end_ = t + duration;
      return t;
    }
    // The first interval ending after t, then skip every interval the work would overlap.
    auto it = std::upper_bound(busy_.begin(), busy_.end(), t,
                               [](VTime v, const Interval& i) { return v < i.second; });
    while (it != busy_.end() && it->first < t + duration) {
      t = std::max(t, it->second);
      ++it;
    }
    if (duration <= 0) return t;
    // Insert [t, t + duration) before `it`, merging with touching neighbours.
    const VTime end = t + duration;
    auto pos = busy_.insert(it, Interval{t, end});
    if (pos + 1 != busy_.end() && (pos + 1)->first == end) {
      pos->second = (pos + 1)->second;
      busy_.erase(pos + 1);
    }
    if (pos != busy_.begin() && (pos - 1)->second == t) {
      (pos - 1)->second = pos->second;
      pos = busy_.erase(pos);
    }
    Forget();
    last_end_ = busy_.back().second;
    return t;
  }

  // Prefetches (for writing) where in-order work would go next: the array's end, whose line is
  // cold when a unit's turn comes round again. For whoever is about to reserve here.
  void PrefetchNext() const { __builtin_prefetch(busy_.data() + busy_.size(), 1); }

  // The end of the latest busy interval.
  VTime end() const { return busy_.empty() ? horizon_ : std::max(horizon_, last_end_); }

 private:
  // Beyond twice kMaxIntervals, all but the latest kMaxIntervals go (one move per kMaxIntervals
  // reservations).
  void Forget() {
    if (busy_.size() <= 2 * kMaxIntervals) return;
    const auto keep = busy_.end() - static_cast<std::ptrdiff_t>(kMaxIntervals);
    horizon_ = std::max(horizon_, (keep - 1)->second);
    busy_.erase(busy_.begin(), keep);
  }
  using Interval = std::pair<VTime, VTime>;  // [start, end)
  std::vector<Interval> busy_;               // sorted, disjoint
  VTime horizon_ = 0;                        // before this, everything counts as busy
  VTime last_end_ = 0;                       // busy_.back().second when busy_ is not empty
};

}  // namespace npuflow::npu_sim
