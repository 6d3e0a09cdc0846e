// DeadlineTimer: callbacks run at their deadlines, in order; a cancelled one never runs.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
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

}  // namespace
}  // namespace npuflow
