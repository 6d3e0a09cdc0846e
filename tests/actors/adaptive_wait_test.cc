// AdaptiveWait (actors/adaptive_wait.h): the value of the future whatever the timing, its delay
// learned, from threads and from fibers, on or off. No assertion on wall-clock time: the learned
// delay is only compared with the delays the test itself imposed.
#include "actors/adaptive_wait.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <variant>
#include <vector>

#include <boost/fiber/all.hpp>
#include <gtest/gtest.h>

#include "actors/fibers.h"
#include "actors/system.h"

namespace npuflow::actors {
namespace {

using namespace std::chrono_literals;

// Answers each Ask after `delay` (from a thread of its own, so no worker is held).
class Delayed {
 public:
  struct Work {
    int value;
    std::chrono::microseconds delay;
  };
  using Message = std::variant<Work>;
  ~Delayed() {
    for (auto& t : threads_) t.join();
  }
  void Receive(Message& msg, Context<Message>& ctx) {
    Work w = std::get<Work>(msg);
    threads_.emplace_back([reply = ctx.TakeReply<int>(), w]() mutable {
      std::this_thread::sleep_for(w.delay);
      reply.Reply(w.value);
    });
  }

 private:
  std::vector<std::thread> threads_;
};

TEST(AdaptiveWait, GivesEachRepliesValueAndLearnsTheUsualDelay) {
  System system({.workers = 1});
  auto actor = system.Spawn<Delayed>("delayed");
  AdaptiveWait wait;
  EXPECT_EQ(wait.expected().count(), 0);
  for (int i = 0; i < 20; ++i) {
    StatusOr<int> v = wait.Get(actor.Ask<int>(Delayed::Work{i, 500us}));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, i);
  }
  // Every wait lasted at least its 500 us delay, so the average of them does too.
  EXPECT_GE(wait.expected(), 500us);
  EXPECT_GE(wait.margin().count(), 0);
}

TEST(AdaptiveWait, ARepliesEarlierOrLaterThanUsualStillEndsItsWait) {
  System system({.workers = 1});
  auto actor = system.Spawn<Delayed>("delayed");
  AdaptiveWait wait;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(wait.Get(actor.Ask<int>(Delayed::Work{i, 2000us})).ok());
  // Much earlier (the sleep before the spin is ended by the reply) and much later (past the spin:
  // the final sleep) than the learned delay.
  EXPECT_EQ(*wait.Get(actor.Ask<int>(Delayed::Work{7, 0us})), 7);
  EXPECT_EQ(*wait.Get(actor.Ask<int>(Delayed::Work{8, 20000us})), 8);
}

// Delays that alternate between short and long: the wait learns that they stray, and with a spare
// core's lead (a spin of up to half the expected delay either side) every wait still ends with its
// own value, the early ones, the late ones and one far past the spin. When the spin starts and
// ends is not asserted (no test asserts wall-clock time).
TEST(AdaptiveWait, LearnsHowFarItsDelaysStrayAndEndsEveryWaitWithASpareCoresLead) {
  System system({.workers = 1});
  auto actor = system.Spawn<Delayed>("delayed");
  AdaptiveWait wait(AdaptiveWait::Options{.spare_core_lead = 0.5});
  EXPECT_EQ(wait.stray().count(), 0);
  for (int i = 0; i < 24; ++i) {
    StatusOr<int> v = wait.Get(actor.Ask<int>(Delayed::Work{i, std::chrono::microseconds(i % 2 == 0 ? 0 : 3000)}));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, i);
  }
  EXPECT_GT(wait.stray().count(), 0);
  EXPECT_EQ(*wait.Get(actor.Ask<int>(Delayed::Work{100, 20000us})), 100);  // far past the spin
}

TEST(AdaptiveWait, AReadyOrInvalidFutureAndTheSwitchedOffWaitAreFutureGet) {
  AdaptiveWait wait;
  Promise<StatusOr<int>> p;
  Future<StatusOr<int>> f = p.GetFuture();
  p.Set(3);
  EXPECT_EQ(*wait.Get(std::move(f)), 3);
  EXPECT_EQ(wait.expected().count(), 0);  // nothing was waited for
  EXPECT_FALSE(wait.Get(Future<StatusOr<int>>()).ok());

  System system({.workers = 1});
  auto actor = system.Spawn<Delayed>("delayed");
  SetAdaptiveWaitEnabled(false);
  EXPECT_FALSE(AdaptiveWaitEnabled());
  EXPECT_EQ(*wait.Get(actor.Ask<int>(Delayed::Work{4, 100us})), 4);
  SetAdaptiveWaitEnabled(true);
  EXPECT_EQ(wait.expected().count(), 0);  // off: not learned either
}

TEST(AdaptiveWait, FibersOnOneThreadShareAWaitAndEachGetsItsOwnValue) {
  System system({.workers = 2});
  auto actor = system.Spawn<Delayed>("delayed");
  AdaptiveWait wait;
  constexpr int kFibers = 8, kRounds = 20;
  std::atomic<int> right{0};
  Status s = RunFibers(kFibers, {.threads = 1}, [&](int i) {
    for (int r = 0; r < kRounds; ++r) {
      const int v = i * 1000 + r;
      StatusOr<int> got = wait.Get(actor.Ask<int>(Delayed::Work{v, std::chrono::microseconds(100 * (r % 3))}));
      if (got.ok() && *got == v) right.fetch_add(1);
    }
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(right.load(), kFibers * kRounds);
}

TEST(AdaptiveWait, ThreadsShareAWaitAndEachGetsItsOwnValue) {
  System system({.workers = 2});
  auto actor = system.Spawn<Delayed>("delayed");
  AdaptiveWait wait;
  constexpr int kThreads = 4, kRounds = 50;
  std::atomic<int> right{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const int v = t * 1000 + r;
        StatusOr<int> got = wait.Get(actor.Ask<int>(Delayed::Work{v, std::chrono::microseconds(50 * (r % 4))}));
        if (got.ok() && *got == v) right.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(right.load(), kThreads * kRounds);
}

}  // namespace
}  // namespace npuflow::actors
