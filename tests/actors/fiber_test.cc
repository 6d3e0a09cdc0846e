// Waiting on futures from Boost.Fiber fibers: a waiting fiber yields to the thread's other
// fibers instead of parking the thread (and never parks a oneTBB worker).
#include <atomic>
#include <thread>
#include <variant>
#include <vector>

#include <boost/fiber/all.hpp>
#include <gtest/gtest.h>

#include "actors/system.h"

namespace npuflow::actors {
namespace {

// Answers nobody until `expected` asks have arrived, then everybody at once. If a waiting fiber
// blocked its thread, the second fiber could never ask and this would never answer.
class Barrier {
 public:
  struct Arrive {
    int who;
  };
  using Message = std::variant<Arrive>;
  explicit Barrier(int expected) : expected_(expected) {}
  void Receive(Message& msg, Context<Message>& ctx) {
    waiting_.push_back(ctx.TakeReply<int>());
    if (static_cast<int>(waiting_.size()) == expected_) {
      for (auto& r : waiting_) r.Reply(expected_);
      waiting_.clear();
    }
  }

 private:
  int expected_;
  std::vector<Replier<int>> waiting_;
};

TEST(Fibers, ManyFibersOnOneThreadWaitWithoutBlockingEachOther) {
  constexpr int kFibers = 500;
  System system({.workers = 2});
  auto barrier = system.Spawn<Barrier>("barrier", kFibers);
  std::atomic<int> answered{0};
  std::thread host([&] {
    std::vector<boost::fibers::fiber> fibers;
    for (int i = 0; i < kFibers; ++i) {
      fibers.emplace_back([&, i] {
        StatusOr<int> r = barrier.Ask<int>(Barrier::Arrive{i}).Get();
        if (r.ok() && *r == kFibers) answered.fetch_add(1);
      });
    }
    for (auto& f : fibers) f.join();
  });
  host.join();
  EXPECT_EQ(answered.load(), kFibers);
}

TEST(Fibers, FibersOnTwoThreadsAndAPlainThreadShareOneActor) {
  constexpr int kPerThread = 100;
  System system({.workers = 2});
  auto barrier = system.Spawn<Barrier>("barrier", 2 * kPerThread + 1);
  std::atomic<int> answered{0};
  auto run = [&] {
    std::vector<boost::fibers::fiber> fibers;
    for (int i = 0; i < kPerThread; ++i)
      fibers.emplace_back([&, i] {
        if (barrier.Ask<int>(Barrier::Arrive{i}).Get().ok()) answered.fetch_add(1);
      });
    for (auto& f : fibers) f.join();
  };
  std::thread a(run), b(run);
  EXPECT_TRUE(barrier.Ask<int>(Barrier::Arrive{-1}).Get().ok());  // a plain thread waits too
  a.join();
  b.join();
  EXPECT_EQ(answered.load(), 2 * kPerThread);
}

TEST(Fibers, WaitForTimesOutInAFiber) {
  Promise<StatusOr<int>> p;
  auto f = p.GetFuture();
  bool timed_out = false;
  boost::fibers::fiber([&] { timed_out = !f.WaitFor(std::chrono::milliseconds(2)); }).join();
  EXPECT_TRUE(timed_out);
  p.Set(3);
  boost::fibers::fiber([&] { EXPECT_EQ(f.Get().value(), 3); }).join();
}

}  // namespace
}  // namespace npuflow::actors
