// The race detector on compiled multi-stream models: no report on the models as compiled (every
// run path: NnExecute from the host, zero copy, the Run loop), and, with one event pair dropped
// (lowering::DropEventPair, `npuflow compile --debug-drop-event N`), a report for every event
// nothing else covers: the race the event prevented, naming the two nodes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "lowering/drop_event.h"
#include "scheduler/davinci_model.h"
#include "scheduler/model_manager.h"
#include "scheduler/session.h"
#include "scheduler_testing.h"
#include "synthetic/graphs.h"

namespace npuflow::scheduler {
namespace {

using test::ZeroOutputs;

class RaceDetectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    graph::RegisterBuiltinOps();
    Start();
  }
  static void Start() {
    npu_sim::RuntimeOptions options = test::ManagerOptions();
    options.race_detect = true;
    Status s = ModelManager::Initialize(options);
    ASSERT_TRUE(s.ok()) << s;
  }
  // A fresh runtime, so that a report is this model's (the detector reports a pair of tasks once).
  static void Restart() {
    ASSERT_TRUE(ModelManager::Finalize().ok());
    Start();
  }
  void TearDown() override { EXPECT_TRUE(ModelManager::Finalize().ok()); }
  static npu_sim::Runtime& rt() { return ModelManager::Get()->runtime(); }
  static std::uint64_t races() { return rt().race_detector()->race_count(); }

  // Loads `model`, runs it `runs` times from the host, unloads it.
  static void LoadAndRun(std::shared_ptr<const CompiledModel> model, int runs = 2) {
    auto id = ModelManager::Get()->LoadModelOnline(model, {});
    ASSERT_TRUE(id.ok()) << id.status();
    std::shared_ptr<DavinciModel> m = ModelManager::Get()->GetModel(*id).value();
    std::mt19937 rng(7);
    for (int r = 0; r < runs; ++r) {
      std::vector<Tensor> inputs = test::RandomInputs(*model, rng);
      std::vector<Tensor> outputs = ZeroOutputs(model->outputs);
      Status s = m->NnExecute(test::HostArgs(inputs, outputs));
      ASSERT_TRUE(s.ok()) << s;
    }
    ASSERT_TRUE(ModelManager::Get()->Unload(*id).ok());
  }
};

// Multi-stream models: random DAGs with up to 4 parallel streams, and independent branches.
using GraphMaker = std::function<StatusOr<std::unique_ptr<graph::ComputeGraph>>()>;
std::vector<std::pair<std::string, GraphMaker>> TestModels() {
  std::vector<std::pair<std::string, GraphMaker>> out;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    out.emplace_back(fmt::format("random DAG {}", seed), [seed] {
      return synthetic::MakeRandomDag({.nodes = 30, .inputs = 2, .max_fan_in = 2, .locality = 4, .seed = seed});
    });
  }
  return out;
}

std::shared_ptr<const CompiledModel> Compile(const GraphMaker& make, std::int64_t drop = -1) {
  graph::CompileOptions options;
  options.stream_mode = graph::CompileOptions::StreamMode::kMulti;
  options.max_parallel = 4;
  auto g = make();
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  auto m = lowering::CompileV1(std::move(*g), options);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  if (drop >= 0) {
    Status s = lowering::DropEventPair(*m, static_cast<std::uint32_t>(drop));
    EXPECT_TRUE(s.ok()) << s;
  }
  return std::make_shared<const CompiledModel>(std::move(*m));
}

TEST_F(RaceDetectTest, CompiledMultiStreamModelsRunWithoutAReport) {
  for (const auto& [name, make] : TestModels()) {
    SCOPED_TRACE(name);
    auto model = Compile(make);
    ASSERT_NE(model, nullptr);
    ASSERT_GT(model->streams.size(), 1u) << "the test wants a multi-stream model";
    LoadAndRun(model, 3);
    ASSERT_EQ(races(), 0u) << rt().race_detector()->reports()[0].ToString();
  }
  EXPECT_GT(rt().race_detector()->accesses_checked(), 0u);
  EXPECT_EQ(rt().race_detector()->undeclared_kernels(), 0u);
}

TEST_F(RaceDetectTest, EveryDroppableEventIsFoundAndNoOtherDropReports) {
  int dropped = 0, covered = 0;
  for (const auto& [name, make] : TestModels()) {
    auto model = Compile(make);
    ASSERT_NE(model, nullptr);
    const std::vector<std::uint32_t> droppable = lowering::DroppableEvents(*model);
    for (std::uint32_t e = 0; e < model->event_count; ++e) {
      SCOPED_TRACE(fmt::format("{}: event {} of {}", name, e, model->event_count));
      const bool alone = std::find(droppable.begin(), droppable.end(), e) != droppable.end();
      Restart();
      LoadAndRun(Compile(make, e), 1);
      if (alone) {
        ++dropped;
        EXPECT_GT(races(), 0u) << "the race event " << e << " prevented was not reported";
      } else {
        ++covered;
        EXPECT_EQ(races(), 0u) << rt().race_detector()->reports().back().ToString();
      }
    }
  }
  EXPECT_GT(dropped, 3) << "the test models should need some of their events";
  RecordProperty("droppable_events", dropped);
  RecordProperty("covered_events", covered);
}

TEST_F(RaceDetectTest, ADroppedEventsReportNamesTheProducerAndConsumerNodes) {
  auto model = Compile(TestModels()[0].second);
  ASSERT_NE(model, nullptr);
  const std::vector<std::uint32_t> droppable = lowering::DroppableEvents(*model);
  ASSERT_FALSE(droppable.empty());
  auto broken = Compile(TestModels()[0].second, droppable[0]);
  LoadAndRun(broken, 1);
  auto reports = rt().race_detector()->reports();
  ASSERT_FALSE(reports.empty());
  const npu_sim::RaceReport& r = reports[0];
  // Both sides are kernels of the graph on different streams of the model.
  EXPECT_NE(r.first.agent, r.second.agent);
  auto is_node = [&](const std::string& node) {
    for (const graph::StreamDef& s : broken->streams)
      for (const graph::TaskDef& t : s.tasks)
        if (!t.node.empty() && t.node == node) return true;
    return false;
  };
  EXPECT_TRUE(is_node(r.first.node)) << r.ToString();
  EXPECT_TRUE(is_node(r.second.node)) << r.ToString();
  EXPECT_TRUE(r.first.write || r.second.write);
}

TEST_F(RaceDetectTest, SessionRunPathsReportNothing) {
  // RunGraph from several threads and RunGraphAsync (the model's Run loop) on a multi-stream model.
  auto make = TestModels()[1].second;
  auto g = make();
  ASSERT_TRUE(g.ok());
  auto session = Session::Create({{"ge.streamMaxParallelNum", "4"}});
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->AddGraph(1, std::move(*g)).ok());
  ASSERT_TRUE((*session)->BuildGraph(1).ok());
  auto compiled = Compile(make);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 local(static_cast<unsigned>(t));
      for (int i = 0; i < 5; ++i) {
        auto out = (*session)->RunGraph(1, test::RandomInputs(*compiled, local));
        EXPECT_TRUE(out.ok()) << out.status();
      }
    });
  }
  for (auto& th : threads) th.join();
  std::mt19937 rng(11);
  std::atomic<int> done{0};
  for (int i = 0; i < 8; ++i) {
    Status s = (*session)->RunGraphAsync(1, test::RandomInputs(*compiled, rng),
                                         [&](Status st, std::vector<Tensor>) {
                                           EXPECT_TRUE(st.ok()) << st;
                                           done.fetch_add(1);
                                         });
    ASSERT_TRUE(s.ok()) << s;
  }
  while (done.load() < 8) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(races(), 0u) << rt().race_detector()->reports()[0].ToString();
}

}  // namespace
}  // namespace npuflow::scheduler
