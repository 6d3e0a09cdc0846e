// The pipeline: partition-stages (lowering/partition_stages.h) and the PipelineExecutor
// (scheduler/pipeline_executor.h) against the interpreter, on one and several devices, with
// several steps in flight, failing and hanging stages, and a model too big for one device.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <atomic>
#include <mutex>
#include <thread>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "actors/tap.h"
#include "graph/model_file/model_file.h"
#include "graph/ops/interpreter.h"
#include "graph/ops/op_registry.h"
#include "lowering/partition_stages.h"
#include "npu_sim/chip_spec.h"
#include "scheduler/model_manager.h"
#include "scheduler/pipeline_executor.h"
#include "scheduler/session.h"
#include "scheduler_testing.h"
#include "synthetic/graphs.h"

namespace npuflow::scheduler::test {
namespace {

using graph::ComputeGraph;

npu_sim::ChipSpec Chip910B() { return npu_sim::LoadChipSpec("910B").value(); }

std::unique_ptr<ComputeGraph> RandomDag(std::uint64_t seed, int nodes = 40) {
  return synthetic::MakeRandomDag({.nodes = nodes, .inputs = 3, .max_fan_in = 2, .locality = 5, .seed = seed}).value();
}

// Random inputs for `graph`'s Data nodes, in the pipeline's input order.
std::vector<graph::Tensor> InputsFor(const PipelineExecutor& p, const ComputeGraph& graph, std::mt19937& rng) {
  std::vector<graph::Tensor> in;
  for (const std::string& name : p.input_names()) {
    const graph::Node* d = graph.FindNode(name);
    graph::TensorDesc desc{d->op().Attr<graph::DataType>("dtype").value(), d->op().Attr<graph::Shape>("shape").value()};
    in.push_back(RandomFloats(desc, rng, -1.f, 1.f));
  }
  return in;
}

std::map<std::string, graph::Tensor> Feeds(const PipelineExecutor& p, const std::vector<graph::Tensor>& in) {
  std::map<std::string, graph::Tensor> feeds;
  for (std::size_t i = 0; i < in.size(); ++i) feeds[p.input_names()[i]] = in[i];
  return feeds;
}

class PipelineTest : public ::testing::Test {
 protected:
  void Init(int devices, std::string chip = "910B") {
    graph::RegisterBuiltinOps();
    std::vector<std::string> chips(static_cast<std::size_t>(devices), chip);
    Status s = ModelManager::Initialize({.chips = chips, .workers = 2});
    ASSERT_TRUE(s.ok()) << s;
    initialized_ = true;
  }
  void TearDown() override {
    if (initialized_) {
      Status s = ModelManager::Finalize();
      EXPECT_TRUE(s.ok()) << s;
    }
  }
  bool initialized_ = false;
  std::mutex interp_mu_;
};

TEST(PartitionStages, CutsARandomDagIntoBalancedContiguousStages) {
  graph::RegisterBuiltinOps();
  auto g = RandomDag(3, 60);
  auto root = lowering::PartitionStages(*g, 3, Chip910B());
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_TRUE(lowering::HasPipelineStages(**root));
  auto stages = lowering::PipelineStages(**root);
  ASSERT_TRUE(stages.ok()) << stages.status();
  ASSERT_EQ(stages->size(), 3u);
  std::vector<double> cost;
  for (const auto& st : *stages) {
    double c = 0;
    int compute = 0;
    for (const graph::Node* n : st.subgraph->nodes()) {
      c += lowering::EstimateNodeCostNs(*n, Chip910B());
      if (n->type() != "Data" && n->type() != "NetOutput") ++compute;
    }
    EXPECT_GT(compute, 0) << st.subgraph->name();
    cost.push_back(c);
    // A stage reads only root inputs and earlier stages.
    for (const graph::Endpoint& e : st.call->inputs()) {
      if (e.node->type() == "Data") continue;
      EXPECT_LT(e.node->op().Attr<std::int64_t>("_stage").value(), st.call->op().Attr<std::int64_t>("_stage").value());
    }
  }
  const double total = cost[0] + cost[1] + cost[2];
  for (double c : cost) EXPECT_LT(c, total * 0.6) << "a stage holds most of the cost";
}

TEST(PartitionStages, MatchesTheInterpreterForOneToFourStages) {
  graph::RegisterBuiltinOps();
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    auto flat = RandomDag(seed);
    auto flat_interp = graph::Interpreter::Create(*flat);
    ASSERT_TRUE(flat_interp.ok()) << flat_interp.status();
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::map<std::string, graph::Tensor> feeds;
    for (const graph::Node* n : flat->nodes())
      if (n->type() == "Data")
        feeds[n->name()] = RandomFloats(graph::TensorDesc{n->op().Attr<graph::DataType>("dtype").value(),
                                                          n->op().Attr<graph::Shape>("shape").value()},
                                        rng, -1.f, 1.f);
    auto want = (*flat_interp)->Run(feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    for (int k = 1; k <= 4; ++k) {
      auto g = RandomDag(seed);
      auto root = lowering::PartitionStages(*g, k, Chip910B());
      ASSERT_TRUE(root.ok()) << root.status();
      auto interp = graph::Interpreter::Create(**root);
      ASSERT_TRUE(interp.ok()) << interp.status();
      auto got = (*interp)->Run(feeds);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), want->size());
      for (std::size_t i = 0; i < got->size(); ++i) EXPECT_EQ((*got)[i].data, (*want)[i].data) << "seed " << seed << " K " << k;
    }
  }
}

TEST(PartitionStages, RejectsBadRequests) {
  graph::RegisterBuiltinOps();
  auto g = RandomDag(1, 3);
  auto too_many = lowering::PartitionStages(*g, 5, Chip910B());
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("fewer than 5 stages"), std::string::npos) << too_many.status();
  auto zero = lowering::PartitionStages(*g, 0, Chip910B());
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("out of range"), std::string::npos) << zero.status();
  auto root = lowering::PartitionStages(*g, 2, Chip910B());
  ASSERT_TRUE(root.ok()) << root.status();
  auto again = lowering::PartitionStages(**root, 2, Chip910B());
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already partitioned"), std::string::npos) << again.status();
}

// Results equal the interpreter for K = 1..4 stages, on one device and on K devices, with several
// steps in flight.
TEST_F(PipelineTest, MatchesTheInterpreterOnOneAndSeveralDevices) {
  Init(4);
  for (std::uint64_t seed = 1; seed <= 2; ++seed) {
    for (int k = 1; k <= 4; ++k) {
      for (int devices : {1, k}) {
        auto g = RandomDag(seed);
        auto reference = RandomDag(seed);
        auto interp = graph::Interpreter::Create(*reference);
        ASSERT_TRUE(interp.ok()) << interp.status();
        auto root = lowering::PartitionStages(*g, k, Chip910B());
        ASSERT_TRUE(root.ok()) << root.status();
        auto p = PipelineExecutor::Create(**root, {.devices = devices, .max_in_flight = 3});
        ASSERT_TRUE(p.ok()) << p.status();
        for (int s = 0; s < k; ++s) EXPECT_EQ((*p)->device_of(s), s * devices / k);
        std::mt19937 rng(static_cast<unsigned>(seed * 10 + k));
        std::vector<std::vector<graph::Tensor>> inputs;
        std::vector<actors::Future<StatusOr<std::vector<graph::Tensor>>>> futures;
        for (int step = 0; step < 6; ++step) {
          inputs.push_back(InputsFor(**p, *reference, rng));
          futures.push_back((*p)->Submit(inputs.back()));
        }
        for (int step = 0; step < 6; ++step) {
          auto got = futures[step].Get();
          ASSERT_TRUE(got.ok()) << got.status();
          auto want = (*interp)->Run(Feeds(**p, inputs[step]));
          ASSERT_TRUE(want.ok()) << want.status();
          ASSERT_EQ(got->size(), want->size());
          for (std::size_t i = 0; i < got->size(); ++i)
            EXPECT_TRUE(Near((*got)[i], (*want)[i])) << "seed " << seed << " K " << k << " D " << devices << " step " << step;
        }
        const PipelineStats st = (*p)->stats();
        EXPECT_EQ(st.steps, 6u);
        EXPECT_EQ(st.failed, 0u);
        EXPECT_GT(st.last_end, st.first_start);
        EXPECT_TRUE((*p)->Unload().ok());
      }
    }
  }
}

TEST_F(PipelineTest, WrongInputsFailAtOnceNamingThem) {
  Init(1);
  auto g = RandomDag(1);
  auto root = lowering::PartitionStages(*g, 2, Chip910B());
  ASSERT_TRUE(root.ok()) << root.status();
  auto p = PipelineExecutor::Create(**root, {.devices = 1});
  ASSERT_TRUE(p.ok()) << p.status();
  // Stage 0 on the caller's stream: the same results; a stream of another device is refused.
  npu_sim::Runtime& rt = ModelManager::Get()->runtime();
  auto caller = rt.CreateStream(0);
  ASSERT_TRUE(caller.ok()) << caller.status();
  {
    auto on_caller = PipelineExecutor::Create(**root, {.devices = 1, .stream = *caller});
    ASSERT_TRUE(on_caller.ok()) << on_caller.status();
    std::mt19937 rng0(4);
    auto in = InputsFor(**on_caller, *g, rng0);
    auto a = (*on_caller)->Execute(in);
    auto b = (*p)->Execute(in);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ((*a)[0].data, (*b)[0].data);
    EXPECT_TRUE((*on_caller)->Unload().ok());
  }
  EXPECT_TRUE(rt.SynchronizeStream(*caller).ok()) << "the caller's stream outlives the pipeline";
  EXPECT_TRUE(rt.DestroyStream(*caller).ok());
  auto none = (*p)->Execute({});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("0 inputs given"), std::string::npos) << none.status();
  std::mt19937 rng(1);
  auto in = InputsFor(**p, *g, rng);
  in[0].data.pop_back();
  auto bad = (*p)->Execute(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(fmt::format("'{}'", (*p)->input_names()[0])), std::string::npos) << bad.status();
  auto more = PipelineExecutor::Create(**root, {.devices = 3});
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("out of range"), std::string::npos) << more.status();
}

// A fault in stage 1 at one step fails that step naming the stage; the steps after it run, and
// Unload succeeds.
// What the two devices hold: memory, allocations, streams, events (nothing leaked = back to this).
struct Held {
  std::uint64_t memory = 0, allocations = 0;
  std::size_t streams = 0, events = 0;
  friend bool operator==(const Held&, const Held&) = default;
};
Held DevicesHold(int devices) {
  Held h;
  npu_sim::Runtime& rt = ModelManager::Get()->runtime();
  for (int d = 0; d < devices; ++d) {
    auto st = rt.Stats(d).value();
    h.memory += st.memory.in_use;
    h.allocations += st.memory.allocations;
    h.streams += st.streams;
    h.events += st.events;
  }
  return h;
}

TEST_F(PipelineTest, AFailingStageFailsItsStepOnly) {
  Init(2);
  const Held before = DevicesHold(2);
  auto g = synthetic::MakeChainGraph(8, 64).value();
  auto reference = synthetic::MakeChainGraph(8, 64).value();
  auto interp = graph::Interpreter::Create(*reference).value();
  auto root = lowering::PartitionStages(*g, 2, Chip910B());
  ASSERT_TRUE(root.ok()) << root.status();
  auto p = PipelineExecutor::Create(**root, {.devices = 2, .max_in_flight = 4});
  ASSERT_TRUE(p.ok()) << p.status();
  // AICore unit 0 of device 1 fails its sixth run: unit 0 is the home of the first stream that
  // runs a kernel on device 1 (npu_sim::SendKernelParts), so one kernel of one step fails.
  npu_sim::Runtime& rt = ModelManager::Get()->runtime();
  ASSERT_TRUE(rt.InjectFault(1, npu_sim::FaultTarget::kAICore, 0, {.kind = npu_sim::FaultKind::kFail, .nth = 6}).ok());
  std::mt19937 rng(5);
  std::vector<std::vector<graph::Tensor>> inputs;
  std::vector<actors::Future<StatusOr<std::vector<graph::Tensor>>>> futures;
  for (int step = 0; step < 8; ++step) {
    inputs.push_back(InputsFor(**p, *reference, rng));
    futures.push_back((*p)->Submit(inputs.back()));
  }
  int failed = 0;
  int first_failed = -1;
  for (int step = 0; step < 8; ++step) {
    auto got = futures[step].Get();
    if (!got.ok()) {
      ++failed;
      if (first_failed < 0) first_failed = step;
      EXPECT_NE(got.status().message().find("stage 1 (device 1)"), std::string::npos) << got.status();
      continue;
    }
    auto want = interp->Run(Feeds(**p, inputs[step]));
    ASSERT_TRUE(want.ok());
    for (std::size_t i = 0; i < got->size(); ++i) EXPECT_TRUE(Near((*got)[i], (*want)[i])) << "step " << step;
  }
  EXPECT_GE(failed, 1);
  EXPECT_LT(first_failed, 7) << "the steps after the failing one ran";
  EXPECT_LE(failed, 2);
  // Later steps run normally.
  auto after = (*p)->Execute(InputsFor(**p, *reference, rng));
  EXPECT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE((*p)->Unload().ok());
  const Held left = DevicesHold(2);
  EXPECT_TRUE(left == before) << "memory " << left.memory << " vs " << before.memory << ", allocations "
                              << left.allocations << " vs " << before.allocations << ", streams " << left.streams
                              << " vs " << before.streams << ", events " << left.events << " vs " << before.events;
}

// A hung stage ends in a timeout naming it; the pipeline is then aborted, and still unloads.
TEST_F(PipelineTest, AHungStageTimesOutNamingItAndUnloads) {
  Init(2);
  auto g = synthetic::MakeChainGraph(6, 16).value();
  auto root = lowering::PartitionStages(*g, 2, Chip910B());
  ASSERT_TRUE(root.ok()) << root.status();
  auto p = PipelineExecutor::Create(**root, {.devices = 2, .timeout = std::chrono::milliseconds(300)});
  ASSERT_TRUE(p.ok()) << p.status();
  npu_sim::Runtime& rt = ModelManager::Get()->runtime();
  const int cores = rt.chip(1).value()->aicore_count;
  for (int u = 0; u < cores; ++u)
    ASSERT_TRUE(rt.InjectFault(1, npu_sim::FaultTarget::kAICore, u, {.kind = npu_sim::FaultKind::kHang, .nth = 1}).ok());
  std::mt19937 rng(2);
  auto got = (*p)->Execute(InputsFor(**p, *g, rng));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kTimeout) << got.status();
  EXPECT_NE(got.status().message().find("stage 1 (device 1)"), std::string::npos) << got.status();
  // Aborted: every later step fails at once, naming why, until the pipeline is reloaded.
  auto next = (*p)->Execute(InputsFor(**p, *g, rng));
  ASSERT_FALSE(next.ok());
  EXPECT_NE(next.status().message().find("was aborted"), std::string::npos) << next.status();
  EXPECT_TRUE((*p)->Unload().ok());
  auto later = (*p)->Execute(InputsFor(**p, *g, rng));
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.status().message().find("unloaded"), std::string::npos) << later.status();
}

// Each device holds little memory: the graph's weights do not fit on one, and do on two.
TEST_F(PipelineTest, AGraphTooBigForOneDeviceRunsOnTwo) {
  // A chip like 910B with 3 MB of HBM; the graph: four 768 KB weights.
  auto chip = npu_sim::LoadChipSpec("910B").value();
  const std::string path = ::testing::TempDir() + "/small_hbm_chip.json";
  {
    std::ifstream in(std::string(NPUFLOW_SOURCE_DIR) + "/npu_sim/chips/910B.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string key = "\"hbm_capacity_bytes\": 68719476736";
    ASSERT_NE(text.find(key), std::string::npos);
    text.replace(text.find(key), key.size(), "\"hbm_capacity_bytes\": 3145728");
    std::ofstream(path) << text;
  }
  Init(2, path);
  // x[1, 448] -> four MatMuls by 448 x 448 weights (784 KB each) -> out.
  const auto big = [] {
    auto g = std::make_unique<ComputeGraph>("big");
    graph::OpDesc x("x", "Data");
    x.SetAttr("dtype", graph::DataType::kFloat32);
    x.SetAttr("shape", graph::Shape({1, 448}));
    graph::Node* prev = g->AddNode(x).value();
    for (int i = 0; i < 4; ++i) {
      graph::Tensor w{graph::TensorDesc{graph::DataType::kFloat32, graph::Shape({448, 448})}, {}};
      std::vector<float> v(448 * 448, 0.001f * static_cast<float>(i + 1));
      w.data.resize(v.size() * sizeof(float));
      std::memcpy(w.data.data(), v.data(), w.data.size());
      graph::OpDesc c(fmt::format("w{}", i), "Const");
      c.SetAttr("value", std::move(w));
      graph::Node* wn = g->AddNode(std::move(c)).value();
      graph::Node* m = g->AddNode(graph::OpDesc(fmt::format("m{}", i), "MatMul")).value();
      EXPECT_TRUE(g->AddInput(m, {prev, 0}).ok());
      EXPECT_TRUE(g->AddInput(m, {wn, 0}).ok());
      prev = m;
    }
    graph::Node* out = g->AddNode(graph::OpDesc("out", "NetOutput")).value();
    EXPECT_TRUE(g->AddInput(out, {prev, 0}).ok());
    return g;
  };
  graph::CompileOptions co;
  co.chip = path;
  {
    auto g = big();
    auto root = lowering::PartitionStages(*g, 1, npu_sim::LoadChipSpec(path).value());
    ASSERT_TRUE(root.ok()) << root.status();
    auto one = PipelineExecutor::Create(**root, {.devices = 1, .compile = co});
    ASSERT_FALSE(one.ok());
    EXPECT_EQ(one.status().code(), StatusCode::kMemoryAllocation) << one.status();
  }
  auto g = big();
  auto reference = big();
  auto root = lowering::PartitionStages(*g, 2, npu_sim::LoadChipSpec(path).value());
  ASSERT_TRUE(root.ok()) << root.status();
  auto two = PipelineExecutor::Create(**root, {.devices = 2, .compile = co});
  ASSERT_TRUE(two.ok()) << two.status();
  std::mt19937 rng(3);
  auto in = InputsFor(**two, *reference, rng);
  auto got = (*two)->Execute(in);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = graph::Interpreter::Create(*reference).value()->Run(Feeds(**two, in));
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(Near((*got)[0], (*want)[0]));
  EXPECT_TRUE((*two)->Unload().ok());
}

// A pipeline model (lowering::CompilePipeline) survives the model file: the stages read back run
// as compiled, on 1 and 3 devices; a damaged file is an error naming it.
TEST_F(PipelineTest, APipelineModelRoundTripsThroughTheModelFile) {
  Init(3);
  auto g = RandomDag(7);
  auto reference = RandomDag(7);
  auto interp = graph::Interpreter::Create(*reference).value();
  auto compiled = lowering::CompilePipeline(std::move(g), 3, {});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ(compiled->stages.size(), 3u);
  auto bytes = graph::SerializeModel(*compiled);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto read = graph::ParseModel(*bytes, "pipeline.om");
  ASSERT_TRUE(read.ok()) << read.status();
  auto model = std::make_shared<const graph::CompiledModel>(std::move(*read));
  for (int devices : {1, 3}) {
    auto p = PipelineExecutor::Create(model, {.devices = devices, .max_in_flight = 2});
    ASSERT_TRUE(p.ok()) << p.status();
    std::mt19937 rng(static_cast<unsigned>(devices));
    for (int step = 0; step < 3; ++step) {
      auto in = InputsFor(**p, *reference, rng);
      auto got = (*p)->Execute(in);
      ASSERT_TRUE(got.ok()) << got.status();
      auto want = interp->Run(Feeds(**p, in));
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(got->size(), want->size());
      for (std::size_t i = 0; i < got->size(); ++i) EXPECT_TRUE(Near((*got)[i], (*want)[i])) << "devices " << devices;
    }
    EXPECT_TRUE((*p)->Unload().ok());
  }
  std::string damaged = *bytes;
  damaged[damaged.size() / 2] ^= 0x5a;
  auto bad = graph::ParseModel(damaged, "pipeline.om");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataCorrupted) << bad.status();
  EXPECT_NE(bad.status().message().find("pipeline.om"), std::string::npos) << bad.status();
  auto plain = PipelineExecutor::Create(model->stages[0], {});
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("no pipeline model"), std::string::npos) << plain.status();
}

// A Session given a root of pipeline stages runs it on the pipeline executor, chosen by itself:
// RunGraph from several threads at once, each result the interpreter's; the other entry points
// say why they cannot; RemoveGraph unloads it.
TEST_F(PipelineTest, ASessionRunsAStagedGraphOnThePipelineExecutor) {
  Init(2);
  auto g = RandomDag(4);
  auto reference = RandomDag(4);
  auto interp = graph::Interpreter::Create(*reference).value();
  auto root = lowering::PartitionStages(*g, 2, Chip910B());
  ASSERT_TRUE(root.ok()) << root.status();
  // The root's Data nodes in input order, as the session takes its inputs.
  std::vector<std::string> names;
  for (const graph::Node* n : (*root)->nodes())
    if (n->type() == "Data") names.push_back(n->name());
  auto session = Session::Create({{"npuflow.executionStreams", "4"}});
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->AddGraph(1, std::move(*root)).ok());
  ASSERT_TRUE((*session)->LoadGraph(1).ok());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int step = 0; step < 5; ++step) {
        std::vector<graph::Tensor> in;
        std::map<std::string, graph::Tensor> feeds;
        for (const std::string& name : names) {
          const graph::Node* d = reference->FindNode(name);
          in.push_back(RandomFloats({d->op().Attr<graph::DataType>("dtype").value(), d->op().Attr<graph::Shape>("shape").value()},
                                    rng, -1.f, 1.f));
          feeds[name] = in.back();
        }
        auto got = (*session)->RunGraph(1, in);
        if (!got.ok()) {
          ADD_FAILURE() << got.status();
          ++wrong;
          continue;
        }
        std::lock_guard<std::mutex> lock(interp_mu_);
        auto want = interp->Run(feeds);
        for (std::size_t i = 0; i < got->size(); ++i)
          if (!Near((*got)[i], (*want)[i])) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  auto model = (*session)->GetLoadedModel(1);
  EXPECT_FALSE(model.ok());
  auto async = (*session)->RunGraphAsync(1, {}, [](Status, std::vector<graph::Tensor>) {});
  ASSERT_FALSE(async.ok());
  EXPECT_NE(async.message().find("pipeline executor"), std::string::npos) << async;
  EXPECT_TRUE((*session)->RemoveGraph(1).ok());
  EXPECT_TRUE((*session)->Finalize().ok());
  auto bad = Session::Create({{"npuflow.pipelineDevices", "65"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("npuflow.pipelineDevices"), std::string::npos) << bad.status();
}

// Delays a random quarter of the actor system's deliveries by 1..10 us, from a seed: a perturbed
// schedule of every stream, unit and DMA message under the pipeline.
class RandomDelayTap : public actors::DeliveryTap {
 public:
  void Reseed(std::uint64_t seed) {
    std::lock_guard<std::mutex> lock(mu_);
    rng_.seed(static_cast<unsigned>(seed));
  }
  std::chrono::nanoseconds OnDelivery(const actors::Delivery&) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (rng_() % 4 != 0) return std::chrono::nanoseconds(0);
    return std::chrono::nanoseconds(1000 + rng_() % 9000);
  }

 private:
  std::mutex mu_;
  std::mt19937 rng_;
};

// Stage s runs step k only after every hop before it finished step k, and after it finished step
// k-1; checked on the order the hops report (PipelineOptions::observer), with 8 steps in flight
// over 3 stages on 3 devices (links between them), under 50 perturbed schedules of 20 steps each
// (1,000 steps), every result checked against the interpreter.
TEST_F(PipelineTest, StagesRunInOrderPerStepUnderPerturbedSchedules) {
  Init(3);
  auto g = synthetic::MakeChainGraph(9, 16).value();
  auto reference = synthetic::MakeChainGraph(9, 16).value();
  auto interp = graph::Interpreter::Create(*reference).value();
  auto root = lowering::PartitionStages(*g, 3, Chip910B());
  ASSERT_TRUE(root.ok()) << root.status();
  std::mutex mu;
  std::vector<HopEvent> events;
  PipelineOptions options{.devices = 3, .max_in_flight = 8};
  options.observer = [&](const HopEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(e);
  };
  auto p = PipelineExecutor::Create(**root, options);
  ASSERT_TRUE(p.ok()) << p.status();
  RandomDelayTap tap;
  ASSERT_TRUE(ModelManager::Get()->runtime().system().SetTap(&tap).ok());
  std::mt19937 rng(9);
  constexpr int kRounds = 50, kSteps = 20;
  for (int round = 0; round < kRounds; ++round) {
    tap.Reseed(static_cast<std::uint64_t>(round) + 1);
    std::vector<std::vector<graph::Tensor>> inputs;
    std::vector<actors::Future<StatusOr<std::vector<graph::Tensor>>>> futures;
    for (int step = 0; step < kSteps; ++step) {
      inputs.push_back(InputsFor(**p, *reference, rng));
      futures.push_back((*p)->Submit(inputs.back()));
    }
    for (int step = 0; step < kSteps; ++step) {
      auto got = futures[step].Get();
      ASSERT_TRUE(got.ok()) << got.status();
      auto want = interp->Run(Feeds(**p, inputs[step]));
      ASSERT_TRUE(Near((*got)[0], (*want)[0])) << "round " << round << " step " << step;
    }
  }
  ASSERT_TRUE(ModelManager::Get()->runtime().system().SetTap(nullptr).ok());
  // Hop h of a stage chain: stage 0, link 1, stage 1, link 2, stage 2.
  const auto hop_index = [](const HopEvent& e) { return e.stage == 0 ? 0 : 2 * e.stage - (e.link ? 1 : 0); };
  constexpr int kHops = 5;
  const std::uint64_t steps = static_cast<std::uint64_t>(kRounds) * kSteps;
  std::vector<std::vector<std::int64_t>> start(kHops, std::vector<std::int64_t>(steps, -1)), end = start;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const HopEvent& e = events[i];
    ASSERT_LT(e.step, steps);
    auto& slot = (e.end ? end : start)[static_cast<std::size_t>(hop_index(e))][e.step];
    EXPECT_EQ(slot, -1) << "hop reported twice";
    slot = static_cast<std::int64_t>(i);
  }
  for (int h = 0; h < kHops; ++h) {
    for (std::uint64_t k = 0; k < steps; ++k) {
      ASSERT_GE(start[h][k], 0) << "hop " << h << " never ran step " << k;
      ASSERT_GT(end[h][k], start[h][k]);
      if (h > 0) {
        EXPECT_GT(start[h][k], end[h - 1][k]) << "hop " << h << " started step " << k << " before hop " << h - 1 << " ended it";
      }
      if (k > 0) {
        EXPECT_GT(start[h][k], end[h][k - 1]) << "hop " << h << " started step " << k << " before it ended step " << k - 1;
      }
    }
  }
  EXPECT_EQ((*p)->stats().steps, steps);
  EXPECT_TRUE((*p)->Unload().ok());
}

}  // namespace
}  // namespace npuflow::scheduler::test
