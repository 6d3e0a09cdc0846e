// Session routing (GE's IsNeedHybridLoad): a graph whose Data shapes have an unknown dimension is
// built for RT2.0 and RunGraph runs it with a different shape each call, from many threads, with
// the interpreter's results; static graphs still take the v1 task sink.
#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"
#include "graph/ops/interpreter.h"
#include "npu_sim/runtime.h"
#include "scheduler/model_manager.h"
#include "scheduler/session.h"
#include "scheduler_testing.h"

namespace npuflow::scheduler {
namespace {

using test::FilledF32;

std::unique_ptr<graph::ComputeGraph> Parse(const std::string& text) {
  return *graph::ParseGraphText(text, "dynamic");
}

// x[n, 8] -> a = Relu(x) -> b = Add(a, x) -> c = Mul(b, w[8]) -> out (c, a).
const std::string kDynamic = R"pb(
  node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { symbol: "n" } dim { size: 8 } } } } }
  node { name: "w" op: "Const" attr { key: "value" value { tensor { dtype: DT_FLOAT shape { dim { size: 8 } }
         float_val: [0.5, -1, 2, 0.25, 1, -0.5, 3, 1.5] } } } }
  node { name: "a" op: "Relu" input: "x" }
  node { name: "b" op: "Add" input: "a" input: "x" }
  node { name: "c" op: "Mul" input: "b" input: "w" }
  node { name: "out" op: "NetOutput" input: "c" input: "a" }
)pb";

class V2Session : public test::ModelManagerTest {};

TEST_F(V2Session, ADynamicGraphRunsWithADifferentShapeEachCallFromManyThreads) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kDynamic), {{"npuflow.executionStreams", "3"}}).ok());
  ASSERT_TRUE(s.BuildGraph(1).ok());
  auto compiled = s.GetCompiledModel(1);
  EXPECT_FALSE(compiled.ok() && *compiled != nullptr) << "a dynamic graph has no v1 model";

  auto reference_graph = Parse(kDynamic);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      auto interpreter = graph::Interpreter::Create(*reference_graph);
      if (!interpreter.ok()) {
        ++bad;
        return;
      }
      for (int i = 0; i < 20; ++i) {
        const int n = 1 + (t * 7 + i * 3) % 29;
        const float base = 0.37f * static_cast<float>(t + 1) - static_cast<float>(i % 5);
        graph::Tensor x = FilledF32({n, 8}, [base](std::size_t k) { return base + 0.25f * static_cast<float>(k % 11) - 1.0f; });
        auto got = s.RunGraph(1, {x});
        auto want = (*interpreter)->Run({{"x", x}});
        if (!got.ok() || !want.ok() || got->size() != 2) {
          ADD_FAILURE() << (got.ok() ? want.status() : got.status());
          ++bad;
          continue;
        }
        for (int k = 0; k < 2; ++k)
          if (!((*got)[k] == (*want)[k])) ++bad;  // elementwise f32 ops: bit-exact
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);

  graph::Tensor wrong = FilledF32({3, 7}, [](std::size_t) { return 1.0f; });
  auto err = s.RunGraph(1, {wrong});
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.status().code(), StatusCode::kParamInvalid);
  EXPECT_NE(err.status().message().find("input 'x': shape f32[3, 7], the model takes f32[n, 8]"), std::string_view::npos)
      << err.status();
  EXPECT_TRUE(s.RunGraph(1, {FilledF32({2, 8}, [](std::size_t) { return 1.0f; })}).ok()) << "usable after a bad shape";

  Status async = s.RunGraphAsync(1, {FilledF32({2, 8}, [](std::size_t) { return 1.0f; })}, [](Status, std::vector<graph::Tensor>) {});
  EXPECT_EQ(async.code(), StatusCode::kUnsupported) << async;
  EXPECT_TRUE(s.RemoveGraph(1).ok());
  EXPECT_TRUE(s.Finalize().ok());
}

// A hung RT2.0 run ends with the session's npuflow.executeTimeoutMs (it waited RT2.0's own 60 s),
// and the graph runs again afterwards (the hung kernel stayed on the stream, and every later run
// timed out behind it). npuflow stress --scenario faults found both.
TEST_F(V2Session, AHungRunTimesOutWithTheSessionsTimeoutAndTheGraphRunsAgain) {
  auto session = Session::Create({{"npuflow.executeTimeoutMs", "150"}});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kDynamic)).ok());
  const graph::Tensor x = FilledF32({3, 8}, [](std::size_t i) { return 0.25f * static_cast<float>(i % 9) - 1.f; });
  auto want = s.RunGraph(1, {x});
  ASSERT_TRUE(want.ok()) << want.status();
  npu_sim::Runtime& rt = ModelManager::Get()->runtime();
  const int cores = (*rt.chip(0))->aicore_count;
  // Every AICore unit's next kernel hangs: the run's first kernel never ends.
  for (int u = 0; u < cores; ++u)
    ASSERT_TRUE(rt.InjectFault(0, npu_sim::FaultTarget::kAICore, u, {npu_sim::FaultKind::kHang, 1}).ok());
  auto hung = s.RunGraph(1, {x});
  ASSERT_FALSE(hung.ok());
  EXPECT_EQ(hung.status().code(), StatusCode::kTimeout) << hung.status();
  EXPECT_NE(hung.status().message().find("within 150 ms"), std::string_view::npos) << hung.status();
  // The faults not fired yet are replaced by harmless ones; the graph must run again, correctly.
  for (int u = 0; u < cores; ++u)
    ASSERT_TRUE(rt.InjectFault(0, npu_sim::FaultTarget::kAICore, u, {npu_sim::FaultKind::kDelay, 1, 0}).ok());
  for (int run = 0; run < 3; ++run) {
    auto again = s.RunGraph(1, {x});
    ASSERT_TRUE(again.ok()) << "run " << run << " after the timeout: " << again.status();
    EXPECT_EQ(*again, *want);
  }
  EXPECT_TRUE(s.Finalize().ok());
}

// A task that fails on a side stream of a multi-stream RT2.0 run fails the run. Only the default
// stream was synchronized: with the side stream's later records issued after the failure, the
// main stream went on and the run answered Ok with the branch never computed. Deterministic mode
// makes that order certain (the device fails the task before the host issues the record).
TEST(V2SessionDeterministic, AFailedTaskOnASideStreamFailsTheRun) {
  graph::RegisterBuiltinOps();
  // Two independent branches of x, joined: Main runs them on two streams.
  const std::string two_branches = R"pb(
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { symbol: "n" } dim { size: 64 } } } } }
    node { name: "a1" op: "Relu" input: "x" }
    node { name: "a2" op: "Tanh" input: "a1" }
    node { name: "b1" op: "Gelu" input: "x" }
    node { name: "b2" op: "Tanh" input: "b1" }
    node { name: "c" op: "Add" input: "a2" input: "b2" }
    node { name: "out" op: "NetOutput" input: "c" }
  )pb";
  Status init = ModelManager::Initialize({.chips = {"910B"}, .deterministic = true});
  ASSERT_TRUE(init.ok()) << init;
  {
    auto session = Session::Create({{"npuflow.executeTimeoutMs", "2000"}, {"npuflow.v2Executor", "sequential"}});
    ASSERT_TRUE(session.ok()) << session.status();
    Session& s = **session;
    ASSERT_TRUE(s.AddGraph(1, Parse(two_branches)).ok());
    Status loaded = s.LoadGraph(1);
    ASSERT_TRUE(loaded.ok()) << loaded;
    auto v2 = s.GetLoadedV2(1);
    ASSERT_TRUE(v2.ok()) << v2.status();
    ASSERT_GT((*v2)->desc().reusable_stream_num, 1) << "the branches did not get a stream each";
    npu_sim::Runtime& rt = ModelManager::Get()->runtime();
    const std::size_t before = rt.Stats(0)->streams;
    const graph::Tensor x = FilledF32({2, 64}, [](std::size_t i) { return 0.05f * static_cast<float>(i % 11) - 0.3f; });
    auto want = s.RunGraph(1, {x});
    ASSERT_TRUE(want.ok()) << want.status();
    // The first run made the default stream, then the side stream: the newest stream is the side.
    const std::size_t after = rt.Stats(0)->streams;
    ASSERT_EQ(after, before + 2);
    const int side = static_cast<int>(after) - 1;
    ASSERT_TRUE(rt.InjectFault(0, npu_sim::FaultTarget::kStream, side, {npu_sim::FaultKind::kFail, 1}).ok());
    auto failed = s.RunGraph(1, {x});
    ASSERT_FALSE(failed.ok()) << "a run whose side stream failed answered Ok";
    EXPECT_NE(failed.status().message().find("injected fault"), std::string_view::npos) << failed.status();
    auto again = s.RunGraph(1, {x});
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *want);
    EXPECT_TRUE(s.Finalize().ok());
  }
  EXPECT_TRUE(ModelManager::Finalize().ok());
}

}  // namespace
}  // namespace npuflow::scheduler
