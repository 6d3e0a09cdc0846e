// CycleClock: its ticks never run backwards on a thread and convert to steady_clock's nanoseconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>

#include "base/cycle_clock.h"

namespace npuflow {
namespace {

TEST(CycleClock, NeverRunsBackwardsOnAThread) {
  std::uint64_t last = CycleClock::Now();
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t now = CycleClock::Now();
    ASSERT_GE(now, last);
    last = now;
  }
}

// The rate is measured against steady_clock, so the two agree on a span to well under a percent.
// Each try brackets a 20 ms sleep with both clocks; a thread paused between two paired readings
// (under a sanitizer, on a busy machine) spoils one try, so the closest of five is taken, and the
// bound is 5%.
TEST(CycleClock, TicksConvertToTheNanosecondsSteadyClockMeasures) {
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto s0 = std::chrono::steady_clock::now();
    const std::uint64_t c0 = CycleClock::Now();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::uint64_t c1 = CycleClock::Now();
    const auto s1 = std::chrono::steady_clock::now();
    const double steady_ns = std::chrono::duration<double, std::nano>(s1 - s0).count();
    const double cycle_ns = CycleClock::ToNs(c1 - c0);
    best = std::min(best, std::abs(cycle_ns / steady_ns - 1));
  }
  EXPECT_LT(best, 0.05);
  EXPECT_NEAR(CycleClock::ToNs(CycleClock::FromNs(1e6)), 1e6, 1e3);
}

}  // namespace
}  // namespace npuflow
