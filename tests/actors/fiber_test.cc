// Waiting on futures from Boost.Fiber fibers: a waiting fiber yields to the thread's other
// fibers instead of parking the thread (and never parks a oneTBB worker).
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <variant>
#include <vector>

#include <boost/fiber/all.hpp>
#include <gtest/gtest.h>

#include "actors/fibers.h"
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

// Checks per-sender order: each sender's messages must arrive numbered 0, 1, 2, ...
class Recorder {
 public:
  struct Note {
    int sender;
    int seq;
  };
  struct Count {};
  using Message = std::variant<Note, Count>;
  explicit Recorder(int senders) : next_(static_cast<std::size_t>(senders), 0) {}
  void Receive(Message& msg, Context<Message>& ctx) {
    if (auto* n = std::get_if<Note>(&msg)) {
      int& expected = next_[static_cast<std::size_t>(n->sender)];
      if (n->seq != expected) ++out_of_order_;
      expected = n->seq + 1;
      ++received_;
    } else {
      ctx.TakeReply<int>().Reply(out_of_order_ * 1000000 + received_);
    }
  }

 private:
  std::vector<int> next_;
  int out_of_order_ = 0;
  int received_ = 0;
};

int OsThreads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(RunFibers, SixtyFourFibersOnTwoThreadsAreAllInFlightAtOnce) {
  constexpr int kFibers = 64;
  System system({.workers = 2});
  auto barrier = system.Spawn<Barrier>("barrier", kFibers);
  auto warm = system.Spawn<Barrier>("warm", 1);
  ASSERT_TRUE(warm.Ask<int>(Barrier::Arrive{0}).Get().ok());  // the system's workers are up
  const int threads_before = OsThreads();
  std::atomic<int> most_threads{0};
  std::mutex mu;
  std::vector<std::thread::id> ran_on(kFibers);
  Status s = RunFibers(kFibers, {.threads = 2}, [&](int i) -> Status {
    {
      std::lock_guard<std::mutex> lock(mu);  // not held across the wait below
      ran_on[static_cast<std::size_t>(i)] = std::this_thread::get_id();
    }
    int now = OsThreads();
    for (int seen = most_threads.load(); now > seen && !most_threads.compare_exchange_weak(seen, now);) {
    }
    // The barrier answers only when all 64 have asked: every fiber is suspended in this wait at once.
    NPUFLOW_ASSIGN_OR_RETURN(int answer, barrier.Ask<int>(Barrier::Arrive{i}).Get());
    if (answer != kFibers) return Status::Failed("barrier answered {}", answer);
    if (ran_on[static_cast<std::size_t>(i)] != std::this_thread::get_id()) return Status::Failed("fiber {} migrated", i);
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_LE(most_threads.load(), threads_before + 1);  // one new OS thread; the caller's is the other
  std::set<std::thread::id> even, odd;
  for (int i = 0; i < kFibers; ++i) (i % 2 == 0 ? even : odd).insert(ran_on[static_cast<std::size_t>(i)]);
  ASSERT_EQ(even.size(), 1u);  // fiber i on thread i % 2, the caller's thread first
  ASSERT_EQ(odd.size(), 1u);
  EXPECT_EQ(*even.begin(), std::this_thread::get_id());
  EXPECT_NE(*odd.begin(), *even.begin());
}

TEST(RunFibers, EachFibersSendsArriveInTheOrderSent) {
  constexpr int kFibers = 32, kNotes = 200;
  System system({.workers = 2});
  auto recorder = system.Spawn<Recorder>("recorder", kFibers);
  auto echo = system.Spawn<Barrier>("echo", 1);
  Status s = RunFibers(kFibers, {.threads = 3}, [&](int i) -> Status {
    for (int k = 0; k < kNotes; ++k) {
      recorder.Send(Recorder::Note{i, k});
      // Other fibers of this thread send between this fiber's notes.
      if (k % 16 == 0) NPUFLOW_RETURN_IF_ERROR(echo.Ask<int>(Barrier::Arrive{i}).Get().status());
      boost::this_fiber::yield();
    }
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  system.WaitIdle();
  StatusOr<int> r = recorder.Ask<int>(Recorder::Count{}).Get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r / 1000000, 0) << "notes out of order";
  EXPECT_EQ(*r % 1000000, kFibers * kNotes);
}

TEST(RunFibers, AnExceptionOrAnErrorBecomesTheFibersStatus) {
  std::atomic<int> ran{0};
  Status s = RunFibers(8, {.threads = 2}, [&](int i) -> Status {
    ran.fetch_add(1);
    if (i == 3) throw std::runtime_error("tokenizer exploded");
    if (i == 5) return Status::NotFound("prompt file 'p5.txt'");
    return Status::Ok();
  });
  EXPECT_EQ(ran.load(), 8);  // the others still ran
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("fiber 3"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("tokenizer exploded"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("1 more of 8"), std::string::npos) << s.ToString();

  Status one = RunFibers(4, {.threads = 1}, [](int i) { return i == 2 ? Status::NotFound("prompt file 'p2.txt'") : Status::Ok(); });
  EXPECT_EQ(one.code(), StatusCode::kNotFound);
  EXPECT_NE(one.message().find("fiber 2"), std::string::npos) << one.ToString();
  EXPECT_NE(one.message().find("p2.txt"), std::string::npos) << one.ToString();
}

TEST(RunFibers, BadOptionsAreErrorsNamingTheOption) {
  auto body = [](int) { return Status::Ok(); };
  Status s = RunFibers(4, {.threads = 0}, body);
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.message().find("0 threads"), std::string::npos) << s.ToString();
  s = RunFibers(-1, {}, body);
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  s = RunFibers(4, {.stack_bytes = 1024}, body);
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.message().find("stack of 1024 bytes"), std::string::npos) << s.ToString();
  s = RunFibers(4, {}, {});
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_TRUE(RunFibers(0, {}, body).ok());
  std::atomic<int> ran{0};
  EXPECT_TRUE(RunFibers(3, {.threads = 8}, [&](int) { ran.fetch_add(1); return Status::Ok(); }).ok());
  EXPECT_EQ(ran.load(), 3);  // more threads than fibers: only as many threads as fibers
}

TEST(RunFibers, AFiberCanRunFibersOfItsOwn) {
  constexpr int kOuter = 4, kInner = 4;
  System system({.workers = 2});
  auto barrier = system.Spawn<Barrier>("barrier", kOuter * kInner);
  std::atomic<int> answered{0};
  Status s = RunFibers(kOuter, {.threads = 2}, [&](int i) {
    return RunFibers(kInner, {.threads = 1}, [&, i](int j) -> Status {
      NPUFLOW_ASSIGN_OR_RETURN(int answer, barrier.Ask<int>(Barrier::Arrive{i * kInner + j}).Get());
      if (answer == kOuter * kInner) answered.fetch_add(1);
      return Status::Ok();
    });
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(answered.load(), kOuter * kInner);
}

TEST(RunFibers, AMainContextWaitOnAFiberThreadLetsItsFibersRun) {
  // Without the mark, the main context's wait would block the thread, and the fiber that
  // completes the promise could never run.
  ScopedFiberThread mark;
  Promise<StatusOr<int>> p;
  Future<StatusOr<int>> f = p.GetFuture();
  boost::fibers::fiber producer([&] {
    for (int i = 0; i < 10; ++i) boost::this_fiber::yield();
    p.Set(7);
  });
  StatusOr<int> r = f.GetFor(std::chrono::seconds(60));
  producer.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 7);
}

[[gnu::noinline]] int Recurse(int depth) {
  volatile char frame[1024];
  frame[0] = static_cast<char>(depth);
  if (depth == 0) return frame[0];
  return Recurse(depth - 1) + frame[0];
}

TEST(RunFibersDeathTest, AStackOverflowHitsTheGuardPage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // 64 KiB of stack, about 1 MiB of frames: the guard page below the stack stops it.
  EXPECT_DEATH((void)RunFibers(1, {.threads = 1, .stack_bytes = 64 * 1024},
                               [](int) { return Status::Failed("{}", Recurse(1000)); }),
               "");
  // The same depth fits in a 4 MiB stack.
  Status s = RunFibers(1, {.threads = 1, .stack_bytes = 4 * 1024 * 1024},
                       [](int) {
                         (void)Recurse(1000);
                         return Status::Ok();
                       });
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace npuflow::actors
