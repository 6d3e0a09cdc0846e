// Whether a GEMV prefetches its weights in software, chosen by measuring both ways as it runs.
//
// The right answer depends on where the weights are, and on this shared machine that changes by
// the hour. Measured on 2x64's logits (12.8 MB of f32 weights, K = 64), 1 thread:
//   - 2026-11-29 ~12:00, inside the engine: the prefetchnta lead (gemv_prefetch.h) won by far,
//     271-359 us of kernels a step against 427-608 without it (docs/gpt2.md, "Tried on 2026-11-29");
//   - the same day ~14:35, the same comparison the other way: 231-238 against 264-275; a plain
//     loop over the matrix read 80-88 GB/s without software prefetch and 56-67 with any hint at
//     any lead (36.6 against 31.0 GB/s when the matrix was flushed to memory between passes).
// So the kernel measures: each unit thread keeps, per weight matrix (and lead), the ticks per byte
// of each way, runs the cheaper one, and tries the other on one call in kExploreEvery, so a change
// in the machine is noticed after about ten tries of the way not taken (2 x 64's logits, 24
// calls a step at 1 worker: about 10 steps; a layer matrix called once a step: a few hundred).
// Per matrix, not per weight class: the calls of one class mix small matrices that stay in L2
// with a large one that does not, and a shared average then compares the two ways on different
// matrices (found in review: with equal costs a shared tuner ran the plain read on a quarter of
// the calls and flipped about 6 times a step). Both ways compute the same products in the same
// order: the choice changes the time, never the bits.
#pragma once

#include <algorithm>
#include <cstddef>
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
  static constexpr std::uint32_t kWarmup = 8;  // samples of each way before either is chosen
  // One call in this many runs the other way: a prime, so the explored calls go round the parts of a
  // kernel split into a number of blocks (24 for GPT-2's logits) instead of hitting the same few.
  static constexpr std::uint32_t kExploreEvery = 31;
  static constexpr double kSmoothing = 1.0 / 16;  // each new sample's weight after the warm-up
  // A sample counts at most this many times the average (a preempted call): one sample then moves
  // the average by at most (kOutlierCap - 1) * kSmoothing = 3%, less than kNoPrefetchMargin, so it
  // cannot flip the choice alone, while a real slow-down still shows within a few dozen samples.
  // During the warm-up (a plain mean of the first kWarmup samples) the cap is kWarmupOutlierCap.
  static constexpr double kOutlierCap = 1.5;
  static constexpr double kWarmupOutlierCap = 4;
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
  // A matrix that comes back only after more than this many bytes of weights read by this thread
  // (about one execution's GEMV weights, at one worker) is never read plainly: nothing of it is
  // left in L3 when it comes back, and the plain read's pollution costs the rest of the step more
  // than the read gains. Measured 2026-11-29 ~15:10, GPT-2 decode at 1 worker, builds alternated:
  // 4 x 256 (64 MB a step) step 2,190 -> 1,974 us with per-matrix tuning, 117M f16 (250 MB)
  // 9,129 -> 9,324 with a third of its matrices measured 10-20% cheaper read plainly (3 of 5 pairs
  // slower). Between the two, and above 117M's 125 MB a thread at 2 workers.
  static constexpr std::uint64_t kMaxPlainReuseBytes = std::uint64_t{96} << 20;

  // The way the next call runs.
  Way Next() {
    if (seen_ && ThreadBytes() - last_bytes_ > kMaxPlainReuseBytes) return kPrefetch;
    ++calls_;
    if (samples_[0] < kWarmup || samples_[1] < kWarmup) return samples_[0] <= samples_[1] ? kPrefetch : kNoPrefetch;
    if (calls_ % kExploreEvery == 0) return Other(best_);
    return best_;
  }

  // A call that ran `way` took `ticks` for `bytes` of weights. The first kWarmup samples of a way
  // make a plain mean (the first call, likely the coldest, does not dominate it); later ones an
  // average with weight kSmoothing. A sample far above the average counts as a capped multiple of
  // it (see kOutlierCap).
  void Record(Way way, std::uint64_t ticks, std::uint64_t bytes) {
    if (bytes == 0) return;
    last_bytes_ = ThreadBytes() += bytes;
    seen_ = true;
    double x = static_cast<double>(ticks) / static_cast<double>(bytes);
    double& avg = cost_[way];
    std::uint32_t& n = samples_[way];
    if (n == 0 || avg <= 0) {  // a coarse clock may read 0 ticks: such an average learns again
      avg = x;
    } else if (n < kWarmup) {
      x = std::min(x, kWarmupOutlierCap * avg);
      avg += (x - avg) / static_cast<double>(n + 1);
    } else {
      x = std::min(x, kOutlierCap * avg);
      avg += (x - avg) * kSmoothing;
    }
    if (n < kWarmup) ++n;
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

  // The calling thread's tuner for the weight matrix at `weights` read at a lead that streams or
  // not (the same matrix at the other lead is another entry). A small table per thread, looked up by
  // the address with a few probes; a matrix that finds no room takes the last probed entry over and
  // starts its warm-up there (a model has a few dozen weight matrices; the table holds kSlots).
  static GemvReadTuner& ForThisThread(const void* weights, bool streams) {
    struct Table {
      std::uintptr_t key[kSlots] = {};
      GemvReadTuner tuner[kSlots];
    };
    thread_local Table table;
    const std::uintptr_t key = reinterpret_cast<std::uintptr_t>(weights) | (streams ? 1u : 0u);
    // Weight matrices are at least 512-byte aligned (DeviceMemory::kGranularity): the low bits
    // carry nothing but the lead flag, so mix the high ones.
    std::size_t slot = static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 56) % kSlots;
    for (std::size_t probe = 0; probe < kProbes; ++probe) {
      const std::size_t at = (slot + probe) % kSlots;
      if (table.key[at] == key) return table.tuner[at];
      if (table.key[at] == 0 || probe + 1 == kProbes) {
        table.key[at] = key;
        table.tuner[at] = GemvReadTuner();
        return table.tuner[at];
      }
    }
    return table.tuner[slot];  // not reached: the last probe takes its entry
  }
  // The GEMV weight bytes this thread has recorded, the clock of kMaxPlainReuseBytes.
  static std::uint64_t& ThreadBytes() {
    thread_local std::uint64_t bytes = 0;
    return bytes;
  }
  static constexpr std::size_t kSlots = 256;
  static constexpr std::size_t kProbes = 8;

 private:
  static Way Other(Way w) { return w == kPrefetch ? kNoPrefetch : kPrefetch; }
  double cost_[2] = {0, 0};            // average ticks per byte
  std::uint32_t samples_[2] = {0, 0};  // up to kWarmup
  std::uint64_t runs_[2] = {0, 0};
  std::uint32_t calls_ = 0;
  Way best_ = kPrefetch;
  bool seen_ = false;             // recorded a call: last_bytes_ holds
  std::uint64_t last_bytes_ = 0;  // ThreadBytes() after this matrix's last call
};

}  // namespace npuflow::graph
