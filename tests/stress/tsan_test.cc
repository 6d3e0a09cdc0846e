// A brief stress run with OS-thread clients, for ThreadSanitizer (scripts/check.sh tsan runs the
// "concurrency" tests): the storm's clients, monitor, churn and fault drivers against the runtime,
// with the schedule perturbed. Fibers switch stacks where ThreadSanitizer cannot follow, so the
// clients here are threads (--host-mode threads).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "stress/storm.h"

namespace npuflow::stress {
namespace {

StressOptions Threads(std::string scenario, GivenFlags given, StressOptions o) {
  o.scenario = std::move(scenario);
  o.host_mode = "threads";
  o.clients = 6;
  o.seed = 2;
  given.push_back("clients");
  EXPECT_TRUE(ApplyScenario(o, given).ok());
  return o;
}

TEST(StressThreads, AStormWithChurn) {
  StressOptions o;
  o.requests = 300;
  o.churn_every = 20;
  auto r = RunStress(Threads("churn", {"requests", "churn-every"}, o));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->report.passed()) << ToJson(r->report).dump(2);
  EXPECT_EQ(r->report.requests, 300u);
}

// Every action on the task-sink models under faults, with OS-thread clients (a 250 ms timeout: ThreadSanitizer
// slows the device down several times).
TEST(StressThreads, AFaultCampaign) {
  StressOptions o;
  o.requests = 300;
  o.faults = 100;
  o.timeout_ms = 250;
  o.hang_ms = 60'000;  // a client may queue behind several runs that each wait out the timeout
  auto r = RunStress(Threads("faults", {"requests", "faults", "timeout-ms", "hang-ms"}, o));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->report.passed()) << ToJson(r->report).dump(2);
  EXPECT_EQ(r->report.faults.at("injected"), 100u);
}

}  // namespace
}  // namespace npuflow::stress
