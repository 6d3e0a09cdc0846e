// Host clients and fibers: each Boost.Fiber fiber is a host client of its own, so fibers sharing
// a thread keep separate virtual clocks (K generations as K fibers keep K clocks).
#include <vector>

#include <boost/fiber/all.hpp>
#include <gtest/gtest.h>

#include "npu_sim/runtime.h"

namespace npuflow::npu_sim {
namespace {

TEST(HostClients, EachFiberHasItsOwnHostClock) {
  auto rt = Runtime::Create({.chips = {"910B"}, .workers = 2}).value();
  const VTime latency = rt->chip(0).value()->host_launch_latency_ns;
  const VTime thread_before = rt->HostClock();
  constexpr int kFibers = 4;
  std::vector<VTime> clocks(kFibers), synced(kFibers);
  std::vector<boost::fibers::fiber> fibers;
  for (int f = 0; f < kFibers; ++f) {
    fibers.emplace_back([&, f] {
      for (int i = 0; i <= f; ++i) {
        EXPECT_TRUE(rt->Malloc(0, 64).ok());
        boost::this_fiber::yield();  // the others run in between, on the same thread
      }
      clocks[f] = rt->HostClock();
      // A synchronize waits (the fiber yields) and merges the device's end into this fiber's clock.
      Stream s = rt->CreateStream(0).value();
      EXPECT_TRUE(rt->Submit(s, {Task::Nop()}).ok());
      EXPECT_TRUE(rt->SynchronizeStream(s).ok());
      synced[f] = rt->HostClock();
    });
  }
  for (auto& fiber : fibers) fiber.join();
  for (int f = 0; f < kFibers; ++f) {
    EXPECT_EQ(clocks[f], static_cast<VTime>(f + 1) * latency) << "fiber " << f;
    EXPECT_GE(synced[f], clocks[f] + 3 * latency) << "fiber " << f;  // create, submit, synchronize
  }
  EXPECT_EQ(rt->HostClock(), thread_before);  // the thread's main context paid for none of it
}

}  // namespace
}  // namespace npuflow::npu_sim
