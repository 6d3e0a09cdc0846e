// System::RunIo: blocking jobs run on the system's I/O threads, never on its workers; inline when
// io_threads is 0 (and always in deterministic mode); Shutdown waits for running jobs and drops
// queued ones.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <variant>

#include <gtest/gtest.h>
#include <oneapi/tbb/task_arena.h>

#include "actors/system.h"

namespace npuflow::actors {
namespace {

using namespace std::chrono_literals;

// A one-shot gate a test opens from another thread.
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  bool IsOpen() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Where a piece of code ran.
struct Where {
  std::thread::id thread;
  int arena_index = 0;  // oneTBB's slot in the current arena; negative outside every arena
  bool in_handler = false;
};
Where Here() {
  return {std::this_thread::get_id(), tbb::this_task_arena::current_thread_index(), detail::InHandler()};
}

// An actor that hands a job to the I/O threads and answers with where its handler and the job ran.
class IoUser {
 public:
  struct Go {
    Promise<StatusOr<std::pair<Where, Where>>> done;
  };
  struct Ping {};
  using Message = std::variant<Go, Ping>;
  explicit IoUser(System* system) : system_(system) {}

  void Receive(Message& msg, Context<Message>& ctx) {
    if (std::holds_alternative<Ping>(msg)) {
      ctx.Reply();
      return;
    }
    const Where handler = Here();
    Promise<StatusOr<std::pair<Where, Where>>> done = std::move(std::get<Go>(msg).done);
    ASSERT_TRUE(system_->RunIo([handler, done = std::move(done)]() mutable { done.Set(std::make_pair(handler, Here())); }));
  }

 private:
  System* system_;
};

TEST(IoJobs, RunOnAnIoThreadNotOnAWorker) {
  System system({.workers = 2, .io_threads = 1});
  EXPECT_EQ(system.io_threads(), 1);
  auto user = system.Spawn<IoUser>("io-user", &system);
  for (int i = 0; i < 20; ++i) {
    Promise<StatusOr<std::pair<Where, Where>>> p;
    auto f = p.GetFuture();
    user.Send(IoUser::Go{std::move(p)});
    StatusOr<std::pair<Where, Where>> r = f.Get();
    ASSERT_TRUE(r.ok()) << r.status();
    const auto& [handler, job] = *r;
    EXPECT_TRUE(handler.in_handler);
    EXPECT_GE(handler.arena_index, 0);  // a worker of the system's arena
    EXPECT_FALSE(job.in_handler);
    EXPECT_LT(job.arena_index, 0) << "the job ran on a oneTBB thread";
    EXPECT_NE(job.thread, handler.thread);
    EXPECT_NE(job.thread, std::this_thread::get_id());
  }
  system.Shutdown();  // the last job counts once it has ended, after it answered
  EXPECT_EQ(system.io_stats().jobs_run, 20u);
}

TEST(IoJobs, WithOneWorkerHandlersRunWhileAJobIsHeld) {
  System system({.workers = 1, .io_threads = 1});
  auto user = system.Spawn<IoUser>("io-user", &system);
  Gate held, release;
  ASSERT_TRUE(system.RunIo([&] {
    held.Open();
    release.Wait();
  }));
  held.Wait();
  // The one worker is free: handlers keep running while the job blocks.
  for (int i = 0; i < 100; ++i) {
    Status s = user.Ask(IoUser::Ping{}).GetFor(60s);
    ASSERT_TRUE(s.ok()) << s;
  }
  release.Open();
  system.Shutdown();
  EXPECT_EQ(system.io_stats().jobs_run, 1u);
}

TEST(IoJobs, ZeroIoThreadsRunInlineAndDeterministicModeAlwaysDoes) {
  System system({.workers = 1, .io_threads = 0});
  EXPECT_EQ(system.io_threads(), 0);
  Where job;
  ASSERT_TRUE(system.RunIo([&] { job = Here(); }));
  EXPECT_EQ(job.thread, std::this_thread::get_id());  // done before RunIo returned
  // From a handler: the job runs inside it, before the handler returns.
  auto user = system.Spawn<IoUser>("io-user", &system);
  Promise<StatusOr<std::pair<Where, Where>>> p;
  auto f = p.GetFuture();
  user.Send(IoUser::Go{std::move(p)});
  StatusOr<std::pair<Where, Where>> r = f.Get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first.thread, r->second.thread);
  EXPECT_TRUE(r->second.in_handler);

  System det({.deterministic = true, .io_threads = 2});
  EXPECT_EQ(det.io_threads(), 0);
  std::thread::id ran;
  ASSERT_TRUE(det.RunIo([&] { ran = std::this_thread::get_id(); }));
  EXPECT_EQ(ran, std::this_thread::get_id());
}

TEST(IoJobs, ShutdownWaitsForARunningJobAndDropsQueuedOnes) {
  auto system = std::make_unique<System>(SystemOptions{.workers = 1, .io_threads = 1});
  Gate started, release;
  std::atomic<bool> first_done{false}, queued_ran{false}, queued_destroyed{false};
  ASSERT_TRUE(system->RunIo([&] {
    started.Open();
    release.Wait();
    first_done = true;
  }));
  started.Wait();
  struct Witness {  // tells when the queued job's captures are destroyed
    std::atomic<bool>* destroyed;
    explicit Witness(std::atomic<bool>* d) : destroyed(d) {}
    Witness(Witness&& o) noexcept : destroyed(std::exchange(o.destroyed, nullptr)) {}
    ~Witness() {
      if (destroyed != nullptr) *destroyed = true;
    }
  };
  ASSERT_TRUE(system->RunIo([&, w = Witness(&queued_destroyed)] { queued_ran = true; }));
  bool done_when_shutdown_returned = false;
  std::thread stopper([&] {
    system->Shutdown();
    done_when_shutdown_returned = first_done.load();
  });
  // Once Shutdown has begun, RunIo refuses (and destroys the job unrun); only then release the
  // running job, so the queued one cannot have started.
  while (system->RunIo([] {})) std::this_thread::sleep_for(1ms);
  release.Open();
  stopper.join();
  EXPECT_TRUE(done_when_shutdown_returned) << "Shutdown returned before the running job ended";
  EXPECT_FALSE(queued_ran.load());
  EXPECT_TRUE(queued_destroyed.load());
  bool late_ran = false;
  EXPECT_FALSE(system->RunIo([&] { late_ran = true; }));
  EXPECT_FALSE(late_ran);
  const IoStats stats = system->io_stats();
  EXPECT_EQ(stats.jobs_run, 1u);
  EXPECT_GE(stats.jobs_dropped, 3u);  // the queued job, the probe refused, the late one
}

TEST(IoJobs, AJobThatThrowsIsCountedAndTheThreadKeepsServing) {
  System system({.workers = 1, .io_threads = 1});
  ASSERT_TRUE(system.RunIo([] { throw std::runtime_error("disk on fire"); }));
  Promise<StatusOr<int>> p;
  auto f = p.GetFuture();
  ASSERT_TRUE(system.RunIo([p = std::move(p)]() mutable { p.Set(7); }));
  StatusOr<int> r = f.Get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 7);
  system.Shutdown();
  EXPECT_EQ(system.io_stats().jobs_failed, 1u);
  EXPECT_EQ(system.io_stats().jobs_run, 2u);
}

TEST(IoJobs, BadIoThreadsAreRejectedNamingTheOption) {
  const Status s = System::CheckOptions({.io_threads = -1});
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.message().find("io_threads"), std::string_view::npos) << s;
  EXPECT_THROW(System({.io_threads = 65}), std::invalid_argument);
}

}  // namespace
}  // namespace npuflow::actors
