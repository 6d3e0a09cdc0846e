// AdaptiveWait: a host wait for a reply whose delay repeats (a model's synchronous execution, step
// after step) that ends without the sleep/wake round trip where a short spin pays.
//
//   actors::AdaptiveWait wait;                       // one per repeating kind of wait (a model)
//   StatusOr<VTime> end = wait.Get(actor.Ask<VTime>(Execute{...}));
//
// A host thread blocked on a future sleeps on a futex, and the reply's completion wakes it: on
// this 2-core VM 30-100 us pass between the notify and the thread running again, once per step.
// A thread that spins sees the reply at once, but holds a core for the whole wait, which slows the
// device's workers when cores are short (an earlier attempt spun for whole steps and lost more
// than it saved). AdaptiveWait does both, each where it pays: it keeps the usual delay of its
// waits and how far they stray from it (exponential averages), sleeps until a lead before the
// usual end (a timed wait, which the reply still ends at once if it comes early), then spins until
// the reply or the lead past the usual end, then sleeps for good. The lead is the margin by which
// the timed sleeps wake up late (the spin must cover that lateness, or the sleep's wake-up is paid
// anyway) plus twice the usual stray: steps whose length wanders (a 2 x 64 GPT-2 step strays by
// tens of microseconds, its kernels and the device's own costs both) would otherwise end outside
// the spin in one step of five and pay the wake-up there. The lead is capped at max_margin, or,
// where the waiting thread has a core to spare (Options::spare_core_lead), at that fraction of the
// usual delay: a 12 ms GPT-2 117M step strays by 0.3-1.5 ms, and a sleeping host thread on this VM
// wakes 100-130 us after the notify. So a wait spins at most two leads per step (less when the
// reply comes before the usual end): tens of microseconds on short steps, up to 2 x
// spare_core_lead of a long one.
//
// In a fiber the sleep is the fiber's (the thread runs its other fibers meanwhile) and the spin
// yields to them. Thread-safe: callers on several threads share the averages (relaxed atomics;
// a lost update only shifts an average). Inside an actor's handler it never waits (Future::Get's
// rule).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "actors/future.h"

namespace npuflow::actors {

// Every AdaptiveWait of the process on or off (on by default); off, Get is Future::Get. For
// measuring what the spin pays, the same binary both ways (npuflow bench gpt2 --small).
void SetAdaptiveWaitEnabled(bool on);
bool AdaptiveWaitEnabled();

// Whether this thread's waits suspend a fiber (the spin then yields to the thread's other fibers).
bool InFiberWait();
// One pause of a spin: a fiber yields, a thread executes a CPU pause.
void SpinPause(bool fiber);

class AdaptiveWait {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    // The lateness margin lies between min_margin and max_margin. Without spare_core_lead the
    // lead (margin + 2 x stray) is capped at max_margin too: the spin never starts more than that
    // before the expected end, nor lasts longer than twice it (a wait whose delay moves more than
    // that is a sleep, as without AdaptiveWait).
    std::chrono::nanoseconds max_margin = std::chrono::microseconds(200);
    std::chrono::nanoseconds min_margin = std::chrono::microseconds(20);
    // Waits shorter than this only spin (sleeping first would cost more than the wait).
    std::chrono::nanoseconds spin_only_below = std::chrono::microseconds(30);
    // Where the waiting thread takes no core the device's workers need (fewer workers than
    // cores), the lead may grow beyond max_margin up to this fraction (0..1) of the expected
    // delay: the spin then lasts at most twice that. 0: max_margin caps it (a spin there would
    // slow the workers).
    double spare_core_lead = 0;
    bool enabled = true;  // false: Get is Future::Get
  };

  AdaptiveWait() = default;
  explicit AdaptiveWait(Options options) : options_(options) {}

  template <typename T>
  T Get(Future<T> future) {
    if (!options_.enabled || !AdaptiveWaitEnabled() || future.IsReady() || !future.valid() || detail::InHandler()) return future.Get();
    const Clock::time_point start = Clock::now();
    const std::int64_t expected = expected_ns_.load(std::memory_order_relaxed);
    const std::int64_t margin = margin_ns_.load(std::memory_order_relaxed);
    const double fraction = options_.spare_core_lead > 0 ? std::min(options_.spare_core_lead, 1.0) : 0.0;  // NaN: 0
    const std::int64_t cap = std::max<std::int64_t>(options_.max_margin.count(),
                                                    static_cast<std::int64_t>(fraction * static_cast<double>(expected)));
    const std::int64_t lead = std::min<std::int64_t>(margin + 2 * stray_ns_.load(std::memory_order_relaxed), cap);
    if (expected > 0) {
      const bool fiber = InFiberWait();
      if (expected > options_.spin_only_below.count()) {
        // Sleep until a lead before the usual end (the reply ends the sleep if it comes first).
        // A lead as long as the usual delay leaves no sleep, and no lateness to learn from.
        const auto wake = start + std::chrono::nanoseconds(std::max<std::int64_t>(expected - lead, 0));
        if (expected > lead && !future.WaitFor(wake - Clock::now())) {
          const std::int64_t late = (Clock::now() - wake).count();
          // The margin must cover how late a timed sleep wakes up: 2x the recent lateness.
          Learn(margin_ns_, std::clamp<std::int64_t>(2 * late, options_.min_margin.count(), options_.max_margin.count()));
        }
      }
      const auto give_up = start + std::chrono::nanoseconds(expected + lead);
      while (!future.IsReady() && Clock::now() < give_up) SpinPause(fiber);
    }
    T value = future.Get();
    const std::int64_t took = (Clock::now() - start).count();
    if (expected > 0) Learn(stray_ns_, took > expected ? took - expected : expected - took);
    Learn(expected_ns_, took);
    return value;
  }

  std::chrono::nanoseconds expected() const { return std::chrono::nanoseconds(expected_ns_.load(std::memory_order_relaxed)); }
  std::chrono::nanoseconds margin() const { return std::chrono::nanoseconds(margin_ns_.load(std::memory_order_relaxed)); }
  // How far a wait's delay usually strays from the expected one (either way).
  std::chrono::nanoseconds stray() const { return std::chrono::nanoseconds(stray_ns_.load(std::memory_order_relaxed)); }

 private:
  // An exponential average with weight 1/4 for the new sample (the first sample is taken as is).
  static void Learn(std::atomic<std::int64_t>& avg, std::int64_t sample) {
    const std::int64_t old = avg.load(std::memory_order_relaxed);
    avg.store(old <= 0 ? sample : old + (sample - old) / 4, std::memory_order_relaxed);
  }

  Options options_;
  std::atomic<std::int64_t> expected_ns_{0};
  std::atomic<std::int64_t> margin_ns_{50'000};
  std::atomic<std::int64_t> stray_ns_{0};
};

}  // namespace npuflow::actors
