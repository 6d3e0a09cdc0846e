// Timers: one thread per process runs every deadline callback.
//
// TimerQueue is the thread and its deadline-ordered queue; TimerQueue::Process() is the one the
// process uses. DeadlineTimer is a user's handle on it: its callbacks form one group, dropped
// together when the handle goes away. The actor system's delayed deliveries and the scheduler's
// run timeouts both go through it, so a process has one timer thread, started when the first DeadlineTimer is made.
//
//   DeadlineTimer timer;
//   auto id = timer.Schedule(std::chrono::milliseconds(50), [] { ... });
//   timer.Cancel(id);   // true if the callback had not started
//
// Callbacks run on the timer thread, one at a time, in deadline order (ties in scheduling
// order); they may block briefly (e.g. abort a device model) but delay every callback behind
// them, whoever scheduled it. A callback may Schedule and Cancel, and may destroy its own
// DeadlineTimer. A DeadlineTimer's destructor drops its callbacks not yet started and waits for
// one of them that is running (unless it runs on the timer thread itself, which cannot wait for
// itself).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "base/unique_function.h"

namespace npuflow {

class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = std::uint64_t;
  using Group = std::uint64_t;

  // The process's queue, constructed (and its thread started) on first use.
  static TimerQueue& Process();

  TimerQueue();
  // Drops what is not due and joins the thread.
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  Group NewGroup();
  Id Schedule(Clock::time_point at, Group group, UniqueFunction<void()> fn);
  // True if `group`'s callback `id` was removed before it started.
  bool Cancel(Id id, Group group);
  // Removes every callback of `group` not yet started, waits for one that is running (unless the
  // caller is the timer thread), and returns how many were removed.
  std::size_t CancelGroup(Group group);

  // Threads this queue has started: always 1.
  int threads_started() const;

 private:
  struct Entry {
    Group group;
    UniqueFunction<void()> fn;
  };
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable cv_;       // the thread: a new first deadline, or stop
  std::condition_variable idle_cv_;  // CancelGroup: the running callback returned
  std::map<std::pair<Clock::time_point, Id>, Entry> due_;
  std::unordered_map<Id, Clock::time_point> when_;
  Id next_id_ = 1;
  Group next_group_ = 1;
  Group running_ = 0;  // the group whose callback runs now, 0 if none
  bool stop_ = false;
  int threads_started_ = 0;
  std::thread thread_;  // last: the other members exist before it runs
};

class DeadlineTimer {
 public:
  using Clock = TimerQueue::Clock;
  using Id = TimerQueue::Id;

  explicit DeadlineTimer(TimerQueue& queue = TimerQueue::Process()) : queue_(queue), group_(queue.NewGroup()) {}
  ~DeadlineTimer() { queue_.CancelGroup(group_); }
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  Id Schedule(Clock::duration delay, UniqueFunction<void()> fn) {
    return queue_.Schedule(Clock::now() + delay, group_, std::move(fn));
  }
  // True if the callback was removed before it started; false if it ran, is running or is unknown.
  bool Cancel(Id id) { return queue_.Cancel(id, group_); }
  // Drops every callback not yet started (waiting for a running one) and returns how many.
  std::size_t CancelAll() { return queue_.CancelGroup(group_); }

 private:
  TimerQueue& queue_;
  const TimerQueue::Group group_;
};

}  // namespace npuflow
