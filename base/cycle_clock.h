// CycleClock: a cheap clock for timing short spans on a hot path.
//
// Reading steady_clock costs a vDSO call that reads the kernel's clock page; on a path that times
// every part of every kernel that page is often out of cache by then (a kernel streams megabytes of
// weights), and the reading costs more than the spans it times are worth. CycleClock reads the
// CPU's time-stamp counter instead where it ticks at a constant rate (an invariant TSC: x86 CPUID
// 0x80000007, EDX bit 8), and steady_clock's nanoseconds elsewhere.
//
//   const std::uint64_t t0 = CycleClock::Now();
//   ...                                                // the span
//   ticks += CycleClock::Now() - t0;                   // sum ticks on the hot path
//   const double ns = CycleClock::ToNs(ticks);          // convert where the figure is read
//
// The rate is measured once, on the first call that needs it (ToNs, FromNs, NsPerTick), against
// steady_clock over about 200 us. Ticks are only comparable within a process, and only after its
// static initialisation (before it, Now() reads steady_clock: time no span across main()'s start).
// The counters of different cores may disagree a little: take a difference as zero if it is
// negative.
#pragma once

#include <cstdint>

namespace npuflow {

class CycleClock {
 public:
  // The counter now: TSC ticks where the TSC is invariant, else steady_clock nanoseconds.
  static std::uint64_t Now() {
#if defined(__x86_64__) || defined(__i386__)
    if (kTscUsable) return __builtin_ia32_rdtsc();
#endif
    return SteadyNs();
  }

  // Nanoseconds per tick (1 without an invariant TSC).
  static double NsPerTick();
  static double ToNs(std::uint64_t ticks) { return static_cast<double>(ticks) * NsPerTick(); }
  static std::uint64_t FromNs(double ns) { return static_cast<std::uint64_t>(ns / NsPerTick()); }

 private:
  static std::uint64_t SteadyNs();
  static const bool kTscUsable;
};

}  // namespace npuflow
