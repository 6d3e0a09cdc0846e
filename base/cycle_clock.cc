#include "base/cycle_clock.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace npuflow {
namespace {

bool InvariantTsc() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, eax, ebx, ecx, edx);
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

// One reading of steady_clock bracketed by two of the counter: the counter's value at the
// reading is taken as the midpoint, off by at most half the bracket.
struct ClockReading {
  std::uint64_t ticks;
  std::uint64_t ns;
  std::uint64_t bracket;
};

std::uint64_t Tsc() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_rdtsc();
#else
  return 0;
#endif
}

ClockReading ReadBoth() {
  ClockReading best{0, 0, ~std::uint64_t{0}};
  for (int i = 0; i < 5; ++i) {  // the tightest of a few: a preemption widens one bracket, not all
    const std::uint64_t a = Tsc();
    const auto ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
    const std::uint64_t b = Tsc();
    if (b - a < best.bracket) best = ClockReading{a + (b - a) / 2, ns, b - a};
  }
  return best;
}

// Asks the CPU itself, not kTscUsable: a call before this file's static initialisation must not
// settle on 1 for good.
double MeasureNsPerTick() {
  if (!InvariantTsc()) return 1.0;
  constexpr std::uint64_t kSpanNs = 200'000;
  const ClockReading p0 = ReadBoth();
  ClockReading p1 = ReadBoth();
  while (p1.ns - p0.ns < kSpanNs) p1 = ReadBoth();
  if (p1.ticks <= p0.ticks) return 1.0;  // not ticking forward: treat ticks as nanoseconds
  return static_cast<double>(p1.ns - p0.ns) / static_cast<double>(p1.ticks - p0.ticks);
}

}  // namespace

const bool CycleClock::kTscUsable = InvariantTsc();

std::uint64_t CycleClock::SteadyNs() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

double CycleClock::NsPerTick() {
  static const double ns_per_tick = MeasureNsPerTick();
  return ns_per_tick;
}

}  // namespace npuflow
