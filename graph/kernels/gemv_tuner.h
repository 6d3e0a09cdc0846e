// Whether a GEMV prefetches its weights in software, chosen by measuring both ways as it runs.
//
// The right answer depends on where the weights are, and on this shared machine that changes by
// the hour. Measured on 2x64's logits (12.8 MB of f32 weights, K = 64), 1 thread:
//   - 2026-11-29 ~12:00, inside the engine: the prefetchnta lead (gemv_prefetch.h) won by far,
//     271-359 us of kernels a step against 427-608 without it (docs/gpt2.md, "Tried on 2026-11-29");
//   - the same day ~14:35, the same comparison the other way: 231-238 against 264-275; a plain
//     loop over the matrix read 80-88 GB/s without software prefetch and 56-67 with any hint at
//     any lead (36.6 against 31.0 GB/s when the matrix was flushed to memory between passes).
// So the kernel measures: each unit thread keeps, per weight class (f32 or f16; cached or
// streaming lead), the cycles per byte of each way, and runs the cheaper one, trying the other on
// one call in kExploreEvery so a change in the machine is noticed within a few steps. Both ways
// compute the same products in the same order: the choice changes the time, never the bits.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#else
#include <chrono>
#endif

namespace npuflow::graph {

class GemvReadTuner {
 public:
  enum Way : int { kPrefetch = 0, kNoPrefetch = 1 };
  static constexpr std::uint32_t kWarmup = 8;         // samples of each way before either is chosen
  static constexpr std::uint32_t kExploreEvery = 32;  // one call in this many runs the other way
  static constexpr double kSmoothing = 1.0 / 16;      // each new sample's weight in the average
  static constexpr double kOutlierCap = 4;            // a sample counts at most this many times the average
  // Reading without the non-temporal prefetch also leaves the weights in L2 and L3, where they evict
  // what the rest of the step keeps there (the runtime's own state, activations): a cost outside the
  // call, which its samples do not see. So the plain read is chosen only when it is at least this
  // much cheaper per byte. Measured 2026-11-29 ~14:40, GPT-2 decode at 1 worker, runs alternated:
  // with the plain read the median step's cost beyond its kernels rose 56 -> 78-83 us on 4 x 256
  // (about 1% of its step; its kernels fell 16%) and 232 -> 268-313 us on 117M f16 (about 0.5-1%;
  // its kernels did not move); the two ways' costs per byte on 117M f16 were within 4-8% of each
  // other. A 5% margin still moved 117M between the two ways (its median step's rest 273 -> 305 us
  // against the build before the tuner, 6 alternated runs); at 10% it keeps the prefetch there (a
  // later set: 354 before the tuner, 308 at 10%, 335 at 5%, within that hour's noise), while
  // 2 x 64 and 4 x 256, whose plain reads are 20-30% cheaper, still take them.
  static constexpr double kNoPrefetchMargin = 0.10;

  // The way the next call runs.
  Way Next() {
    ++calls_;
    if (samples_[0] < kWarmup || samples_[1] < kWarmup) return samples_[0] <= samples_[1] ? kPrefetch : kNoPrefetch;
    if (calls_ % kExploreEvery == 0) return Other(best_);
    return best_;
  }

  // A call that ran `way` took `ticks` for `bytes` of weights. A sample far above the average (the
  // thread was preempted) counts as kOutlierCap times it, so one does not flip the choice.
  void Record(Way way, std::uint64_t ticks, std::uint64_t bytes) {
    if (bytes == 0) return;
    double x = static_cast<double>(ticks) / static_cast<double>(bytes);
    double& avg = cost_[way];
    if (samples_[way] == 0) {
      avg = x;
    } else {
      x = std::min(x, kOutlierCap * avg);
      avg += (x - avg) * kSmoothing;
    }
    if (samples_[way] < kWarmup) ++samples_[way];
    ++runs_[way];
    if (samples_[0] >= kWarmup && samples_[1] >= kWarmup)
      best_ = cost_[kNoPrefetch] < cost_[kPrefetch] * (1 - kNoPrefetchMargin) ? kNoPrefetch : kPrefetch;
  }

  Way best() const { return best_; }
  double cost(Way way) const { return cost_[way]; }
  std::uint64_t runs(Way way) const { return runs_[way]; }

  // A cheap clock for the samples: the TSC where there is one (ratios only, so its rate does not
  // matter), else steady_clock's nanoseconds.
  static std::uint64_t Now() {
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
  }

  // The calling thread's tuner for a weight class: f16 or not, streaming lead or cached.
  static GemvReadTuner& ForThisThread(bool f16, bool streams) {
    thread_local GemvReadTuner tuners[4];
    return tuners[(f16 ? 2 : 0) + (streams ? 1 : 0)];
  }

 private:
  static Way Other(Way w) { return w == kPrefetch ? kNoPrefetch : kPrefetch; }
  double cost_[2] = {0, 0};            // average ticks per byte
  std::uint32_t samples_[2] = {0, 0};  // up to kWarmup
  std::uint64_t runs_[2] = {0, 0};
  std::uint32_t calls_ = 0;
  Way best_ = kPrefetch;
};

}  // namespace npuflow::graph
