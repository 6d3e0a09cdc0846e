// DeadlineTimer: runs callbacks at deadlines on one background thread.
//
//   DeadlineTimer timer;
//   auto id = timer.Schedule(std::chrono::milliseconds(50), [] { ... });
//   timer.Cancel(id);   // true if the callback had not started
//
// Callbacks run on the timer's thread, one at a time, in deadline order; they may block briefly
// (e.g. abort a device model) but delay the callbacks behind them. A callback may Schedule and
// Cancel. The destructor drops callbacks not yet due and waits for a running one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

#include "base/unique_function.h"

namespace npuflow {

class DeadlineTimer {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = std::uint64_t;

  DeadlineTimer();
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  Id Schedule(Clock::duration delay, UniqueFunction<void()> fn);
  // True if the callback was removed before it started; false if it ran, is running or is unknown.
  bool Cancel(Id id);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<Clock::time_point, Id>, UniqueFunction<void()>> due_;
  std::map<Id, Clock::time_point> when_;
  Id next_id_ = 1;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace npuflow
