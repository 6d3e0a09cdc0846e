// DeadlineTimer: callbacks run at their deadlines, in order; a cancelled one never runs.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/timer.h"

namespace npuflow {
namespace {

using namespace std::chrono_literals;

TEST(DeadlineTimer, RunsInDeadlineOrderAndCancelStopsACallback) {
  DeadlineTimer timer;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  auto push = [&](int v) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(v);
    cv.notify_all();
  };
  timer.Schedule(30ms, [&] { push(3); });
  timer.Schedule(10ms, [&] { push(1); });
  auto cancelled = timer.Schedule(20ms, [&] { push(2); });
  EXPECT_TRUE(timer.Cancel(cancelled));
  EXPECT_FALSE(timer.Cancel(cancelled));
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return order.size() == 2; }));
  EXPECT_EQ(order, (std::vector<int>{1, 3}));
}

TEST(DeadlineTimer, ManyThreadsScheduleAndCancel) {
  std::atomic<int> ran{0};
  {
    DeadlineTimer timer;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 200; ++i) {
          auto id = timer.Schedule(std::chrono::microseconds(i % 7), [&] { ran.fetch_add(1); });
          if (i % 2 == 0) timer.Cancel(id);
        }
      });
    }
    for (auto& th : threads) th.join();
    std::this_thread::sleep_for(50ms);
  }  // the destructor drops what is not due and joins
  EXPECT_GE(ran.load(), 1);
  EXPECT_LE(ran.load(), 800);
}

// Every DeadlineTimer shares the process's one timer thread.
TEST(DeadlineTimer, TimersShareTheProcessTimerThread) {
  DeadlineTimer a, b;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::thread::id> ran_on;
  auto note = [&] {
    std::lock_guard<std::mutex> lock(mu);
    ran_on.push_back(std::this_thread::get_id());
    cv.notify_all();
  };
  a.Schedule(1ms, note);
  b.Schedule(2ms, note);
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return ran_on.size() == 2; }));
  EXPECT_EQ(ran_on[0], ran_on[1]);
  EXPECT_NE(ran_on[0], std::this_thread::get_id());
  EXPECT_EQ(TimerQueue::Process().threads_started(), 1);
}

// A timer's destructor drops only its own callbacks and waits for one of them that is running.
TEST(DeadlineTimer, DestructorDropsItsOwnCallbacksAndWaitsForARunningOne) {
  DeadlineTimer keeper;
  std::atomic<bool> kept{false}, started{false}, finished{false}, dropped_ran{false};
  keeper.Schedule(30ms, [&] { kept = true; });
  {
    DeadlineTimer gone;
    gone.Schedule(0ms, [&] {
      started = true;
      std::this_thread::sleep_for(20ms);
      finished = true;
    });
    gone.Schedule(10s, [&] { dropped_ran = true; });
    while (!started) std::this_thread::yield();
  }
  EXPECT_TRUE(finished);  // the destructor returned after the running callback
  for (int i = 0; i < 1000 && !kept; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(kept);
  EXPECT_FALSE(dropped_ran);
}

TEST(DeadlineTimer, CancelAllCountsWhatItDroppedAndACallbackMayDestroyItsTimer) {
  DeadlineTimer timer;
  timer.Schedule(10s, [] {});
  timer.Schedule(20s, [] {});
  EXPECT_EQ(timer.CancelAll(), 2u);
  EXPECT_EQ(timer.CancelAll(), 0u);

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  auto owned = std::make_unique<DeadlineTimer>();
  owned->Schedule(1ms, [&] {
    owned.reset();  // on the timer thread: must not wait for itself
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return done; }));
}

// One timer cannot cancel another's callback by its id.
TEST(DeadlineTimer, CancelOnlyReachesItsOwnCallbacks) {
  DeadlineTimer a, b;
  auto id = a.Schedule(10s, [] {});
  EXPECT_FALSE(b.Cancel(id));
  EXPECT_TRUE(a.Cancel(id));
}

}  // namespace
}  // namespace npuflow
