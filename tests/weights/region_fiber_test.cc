// A fiber waiting for a weight region's load suspends only itself: the other fibers of its thread
// keep running (a generation whose first step comes while weights stream in does not stall the
// generations sharing its host thread).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <boost/fiber/all.hpp>
#include <gtest/gtest.h>

#include "weights/external_weight_manager.h"

namespace npuflow::weights {
namespace {

using namespace std::chrono_literals;

// Waits (polling, at most 60 s) until `flag` is set; returns whether it was.
bool AwaitFlag(const std::atomic<bool>& flag) {
  for (int i = 0; i < 60000 && !flag.load(); ++i) std::this_thread::sleep_for(1ms);
  return flag.load();
}

TEST(RegionLoadStateFibers, AWaitingFiberLetsTheOtherFibersOfItsThreadRun) {
  RegionLoadState state;
  std::atomic<bool> other_finished{false};
  std::atomic<int> other_steps{0};
  StatusOr<WeightLoadReport> seen = Status::Internal("not waited");
  std::thread host([&] {
    boost::fibers::fiber waiter([&] { seen = state.Wait(); });
    boost::fibers::fiber other([&] {
      for (int i = 0; i < 100; ++i) {
        other_steps.fetch_add(1);
        boost::this_fiber::yield();
      }
      other_finished.store(true);
    });
    waiter.join();
    other.join();
  });
  // If the waiter blocked its thread, `other` could not finish before the load ends.
  const bool ran_while_waiting = AwaitFlag(other_finished);
  EXPECT_FALSE(state.Peek().has_value());
  state.Set(WeightLoadReport{.bytes = 4096, .chunks = 1});
  host.join();
  EXPECT_TRUE(ran_while_waiting);
  EXPECT_EQ(other_steps.load(), 100);
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  EXPECT_EQ(seen->bytes, 4096u);
}

TEST(RegionLoadStateFibers, OneSetWakesFibersOnTwoThreadsAndAPlainThread) {
  RegionLoadState state;
  constexpr int kPerThread = 50;
  std::atomic<int> failed_seen{0};
  std::atomic<int> waiting{0};
  auto run = [&] {
    std::vector<boost::fibers::fiber> fibers;
    for (int i = 0; i < kPerThread; ++i)
      fibers.emplace_back([&] {
        waiting.fetch_add(1);
        StatusOr<WeightLoadReport> r = state.Wait();
        if (!r.ok() && r.status().message().find("region 'h0/w'") != std::string::npos) failed_seen.fetch_add(1);
      });
    for (auto& f : fibers) f.join();
  };
  std::thread a(run), b(run);
  std::thread plain([&] {
    waiting.fetch_add(1);
    if (!state.Wait().ok()) failed_seen.fetch_add(1);
  });
  for (int i = 0; i < 60000 && waiting.load() < 2 * kPerThread + 1; ++i) std::this_thread::sleep_for(1ms);
  state.Set(Status::Failed("region 'h0/w': sha256 mismatch"));
  a.join();
  b.join();
  plain.join();
  EXPECT_EQ(failed_seen.load(), 2 * kPerThread + 1);
  // A second Set changes nothing; a wait after the end returns at once, in a fiber or not.
  state.Set(WeightLoadReport{.bytes = 1});
  EXPECT_FALSE(state.Wait().ok());
  boost::fibers::fiber late([&] { EXPECT_FALSE(state.Wait().ok()); });
  late.join();
}

}  // namespace
}  // namespace npuflow::weights
