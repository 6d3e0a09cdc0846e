// Host clients and fibers: each Boost.Fiber fiber is a host client of its own, so fibers sharing
// a thread keep separate virtual clocks (K generations as K fibers keep K clocks).
#include <memory>
#include <string>
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

// A scope opened in a fiber is the fiber's: fibers of one thread, each inside its own scope and
// yielding to each other mid-scope, charge only their own client.
TEST(HostClients, AScopeInAFiberIsThatFibersOnly) {
  auto rt = Runtime::Create({.chips = {"910B"}, .workers = 2}).value();
  const VTime latency = rt->chip(0).value()->host_launch_latency_ns;
  const VTime thread_before = rt->HostClock();
  constexpr int kFibers = 3;
  std::vector<std::unique_ptr<HostClient>> clients;
  for (int f = 0; f < kFibers; ++f) clients.push_back(std::make_unique<HostClient>("generation " + std::to_string(f)));
  std::vector<VTime> own(kFibers);
  std::vector<boost::fibers::fiber> fibers;
  for (int f = 0; f < kFibers; ++f) {
    fibers.emplace_back([&, f] {
      ScopedHostClient scope(*clients[static_cast<std::size_t>(f)]);
      for (int i = 0; i <= f; ++i) {
        EXPECT_TRUE(rt->Malloc(0, 64).ok());
        boost::this_fiber::yield();  // the next fiber runs while this one is inside its scope
      }
    });
  }
  // An unscoped fiber in between: its own clock, not a neighbour's scoped client.
  fibers.emplace_back([&] {
    boost::this_fiber::yield();
    EXPECT_TRUE(rt->Malloc(0, 64).ok());
    own[0] = rt->HostClock();
  });
  for (auto& fiber : fibers) fiber.join();
  for (int f = 0; f < kFibers; ++f)
    EXPECT_EQ(clients[static_cast<std::size_t>(f)]->clock(), static_cast<VTime>(f + 1) * latency) << "client " << f;
  EXPECT_EQ(own[0], latency);
  EXPECT_EQ(rt->HostClock(), thread_before);
}

}  // namespace
}  // namespace npuflow::npu_sim
