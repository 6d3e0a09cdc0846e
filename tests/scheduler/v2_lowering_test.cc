// RT2.0 end to end: ComputeGraph -> lowering -> ModelV2Executor on npu_sim, against the reference
// interpreter; a dynamic batch run with 20 shapes on every executor, the static path (InferShape
// and Tiling folded), bad inputs, and the converter lookup.
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "graph/ir/compute_graph.h"
#include "graph/ir/tensor_access.h"
#include "graph/ops/interpreter.h"
#include "graph/ops/op_registry.h"
#include "lowering/graph_converter.h"
#include "npu_sim/runtime.h"
#include "scheduler/v2/model_v2_executor.h"
#include "scheduler/v2/op_kernels.h"
#include "tests/scheduler/v2_test_util.h"

namespace npuflow::v2 {
namespace {

using namespace v2test;  // NOLINT: the helpers of v2_test_util.h

// x[batch, 16] -> MatMul(W1[16, 8], b1) -> Relu -> MatMul(W2[8, 4]) -> Softmax -> out.
std::unique_ptr<ComputeGraph> Mlp(Dim batch) {
  auto g = std::make_unique<ComputeGraph>("mlp");
  Node* x = AddOp(*g, "x", "Data", {},
                  {{"dtype", DataType::kFloat32}, {"shape", Shape(std::vector<Dim>{batch, Dim::Static(16)})}});
  Node* w1 = AddOp(*g, "w1", "Const", {}, {{"value", RandomTensor({DataType::kFloat32, Shape{16, 8}}, 1)}});
  Node* b1 = AddOp(*g, "b1", "Const", {}, {{"value", RandomTensor({DataType::kFloat32, Shape{8}}, 2)}});
  Node* w2 = AddOp(*g, "w2", "Const", {}, {{"value", RandomTensor({DataType::kFloat32, Shape{8, 4}}, 3)}});
  Node* mm1 = AddOp(*g, "mm1", "MatMul", {{x, 0}, {w1, 0}, {b1, 0}});
  Node* relu = AddOp(*g, "relu", "Relu", {{mm1, 0}});
  Node* mm2 = AddOp(*g, "mm2", "MatMul", {{relu, 0}, {w2, 0}});
  Node* sm = AddOp(*g, "softmax", "Softmax", {{mm2, 0}});
  AddOp(*g, "output", "NetOutput", {{sm, 0}, {relu, 0}});
  return g;
}

class V2Lowering : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterOpKernels();
    npu_sim::RuntimeOptions options;
    options.workers = 2;
    rt_ = *npu_sim::Runtime::Create(options);
  }

  std::unique_ptr<npu_sim::Runtime> rt_;
};

TEST_F(V2Lowering, ADynamicBatchRunsWithTwentyShapesOnEveryExecutor) {
  auto reference_graph = Mlp(Dim::Symbolic("batch"));
  auto interpreter = *graph::Interpreter::Create(*reference_graph);
  auto set = lowering::CompileV2(Mlp(Dim::Symbolic("batch")), graph::CompileOptions{});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->desc.inputs.size(), 1u);
  EXPECT_EQ(set->desc.outputs.size(), 2u);
  EXPECT_EQ(set->init->nodes().size(), 3u);  // three constants
  EXPECT_NE(set->main->FindNode("mm1/infer_shape"), -1) << set->main->ToText();
  for (ExecutorType type : {ExecutorType::kSequentialPriority, ExecutorType::kTopological,
                            ExecutorType::kTopologicalPriority, ExecutorType::kTopologicalMultiThread}) {
    auto m = ModelV2Executor::Create(*set, rt_.get(), 0, ExecutorOption{.type = type});
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE((*m)->Load().ok());
    for (int batch = 1; batch <= 39; batch += 2) {
      graph::Tensor x = RandomTensor({DataType::kFloat32, Shape{batch, 16}}, 100 + batch);
      auto want = interpreter->Run({{"x", x}});
      ASSERT_TRUE(want.ok()) << want.status();
      auto got = RunV2(**m, {x});
      ASSERT_TRUE(got.ok()) << ExecutorTypeName(type) << " batch " << batch << ": " << got.status();
      ExpectNear((*got)[0], (*want)[0], "softmax, batch " + std::to_string(batch));
      ExpectNear((*got)[1], (*want)[1], "relu, batch " + std::to_string(batch));
    }
    ASSERT_TRUE((*m)->UnLoad().ok());
  }
}

TEST_F(V2Lowering, StaticShapesFoldInferShapeAndTiling) {
  auto reference_graph = Mlp(Dim::Static(5));
  auto interpreter = *graph::Interpreter::Create(*reference_graph);
  auto set = lowering::CompileV2(Mlp(Dim::Static(5)), graph::CompileOptions{});
  ASSERT_TRUE(set.ok()) << set.status();
  for (const exe::ExeNode& n : set->main->nodes()) {
    EXPECT_NE(n.kernel, "InferShape") << n.name;
    EXPECT_NE(n.kernel, "Tiling") << n.name;
  }
  auto m = *ModelV2Executor::Create(*set, rt_.get(), 0);
  ASSERT_TRUE(m->Load().ok());
  EXPECT_EQ(m->main_executor_type(), ExecutorType::kSequentialPriority) << "auto: no control flow";
  graph::Tensor x = RandomTensor({DataType::kFloat32, Shape{5, 16}}, 9);
  auto got = RunV2(*m, {x});
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectNear((*got)[0], (*interpreter->Run({{"x", x}}))[0], "softmax");
}

TEST_F(V2Lowering, BadInputShapesAreClearErrorsAndTheModelStaysUsable) {
  auto set = *lowering::CompileV2(Mlp(Dim::Symbolic("batch")), graph::CompileOptions{});
  auto m = *ModelV2Executor::Create(set, rt_.get(), 0);
  ASSERT_TRUE(m->Load().ok());
  graph::Tensor rank3 = RandomTensor({DataType::kFloat32, Shape{2, 16, 1}}, 1);
  auto s = RunV2(*m, {rank3});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.status().message().find("input 'x': rank 3, the model takes f32[batch, 16]"), std::string_view::npos)
      << s.status();
  graph::Tensor wrong = RandomTensor({DataType::kFloat32, Shape{2, 15}}, 1);
  s = RunV2(*m, {wrong});
  EXPECT_NE(s.status().message().find("input 'x': shape f32[2, 15], the model takes f32[batch, 16]"),
            std::string_view::npos)
      << s.status();
  graph::Tensor ok = RandomTensor({DataType::kFloat32, Shape{3, 16}}, 1);
  EXPECT_TRUE(RunV2(*m, {ok}).ok()) << "usable after bad inputs";
  ASSERT_TRUE(m->UnLoad().ok());
}

int g_custom_calls = 0;
Status CustomRelu(const Node& node, lowering::LowerContext& ctx) {
  ++g_custom_calls;
  return lowering::NodeConverterRegistry::Global().FindRegisterData("AICore")(node, ctx);
}

TEST_F(V2Lowering, ConverterLookupOrderAndItsError) {
  auto g = Mlp(Dim::Static(2));
  g->FindNode("relu")->op().SetAttr(std::string(lowering::kLoweringFuncAttr), std::string("TestCustomRelu"));
  lowering::NodeConverterRegistry::Global().Register("TestCustomRelu", &CustomRelu);
  g_custom_calls = 0;
  ASSERT_TRUE(lowering::CompileV2(std::move(g), graph::CompileOptions{}).ok());
  EXPECT_EQ(g_custom_calls, 1) << "the lowering-function attribute comes first";

  graph::RegisterBuiltinOps();
  graph::OpRegistry::Global().Register(
      graph::OpDef{.type = "TestHostOnly", .min_inputs = 1, .max_inputs = 1, .engine = graph::OpEngine::kHostLocal,
                   .infer = [](const OpDesc&, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
                     out = in;
                     return Status::Ok();
                   }});
  auto h = Mlp(Dim::Static(2));
  Node* host = AddOp(*h, "host_op", "TestHostOnly", {{h->FindNode("relu"), 0}});
  ASSERT_TRUE(h->AddInput(h->FindNode("output"), {host, 0}).ok());
  auto set = lowering::CompileV2(std::move(h), graph::CompileOptions{});
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kNotFound);
  EXPECT_NE(set.status().message().find("node 'host_op' (TestHostOnly): no node converter for its lowering function "
                                        "'(none)', its op type 'TestHostOnly' or its kernel library 'host'"),
            std::string_view::npos)
      << set.status();
}

// Every op of the op library lowers: a converter for its type, or its kernel library's with a
// device kernel that LaunchKernel starts; and every kernel lowering emits is registered.
TEST_F(V2Lowering, EveryOpOfTheLibraryHasAKernel) {
  graph::RegisterBuiltinOps();
  const lowering::NodeConverterRegistry& converters = lowering::NodeConverterRegistry::Global();
  for (const std::string& type : graph::OpRegistry::Global().Types()) {
    if (type.rfind("Test", 0) == 0) continue;  // registered by tests
    const graph::OpDef* def = *graph::OpRegistry::Global().Find(type);
    if (converters.FindRegisterData(type) != nullptr) continue;
    EXPECT_NE(converters.FindRegisterData(graph::OpEngineName(def->engine)), nullptr) << type;
    EXPECT_FALSE(def->device_kernel.empty()) << type << ": no device kernel to launch";
  }
  for (const char* kernel : {"ConstToDevice", "FreeConst", "PrepareInput", "CopyOutput", "InferShape", "Tiling",
                             "AllocOutputs", "LaunchKernel", "FreeMemory", "NoOp", "IfSwitch", "ReadCondition", "LoopSwitch", "SendEvent", "WaitEvent",
                             "CopyToValue", "LoopEnter", "LoopNext"})
    EXPECT_TRUE(exe::KernelRegistry::Global().Find(kernel).ok()) << kernel;
}

// Two branches of a dynamic batch (MatMul -> Relu and MatMul -> Tanh), joined: multi-stream
// lowering puts them on two streams with events between them.
std::unique_ptr<ComputeGraph> TwoBranches() {
  auto g = std::make_unique<ComputeGraph>("two_branches");
  Node* x = AddOp(*g, "x", "Data", {},
                  {{"dtype", DataType::kFloat32},
                   {"shape", Shape(std::vector<Dim>{Dim::Symbolic("batch"), Dim::Static(16)})}});
  Node* w1 = AddOp(*g, "w1", "Const", {}, {{"value", RandomTensor({DataType::kFloat32, Shape{16, 8}}, 1)}});
  Node* w2 = AddOp(*g, "w2", "Const", {}, {{"value", RandomTensor({DataType::kFloat32, Shape{16, 8}}, 2)}});
  Node* a = AddOp(*g, "relu", "Relu", {{AddOp(*g, "mm1", "MatMul", {{x, 0}, {w1, 0}}), 0}});
  Node* b = AddOp(*g, "tanh", "Tanh", {{AddOp(*g, "mm2", "MatMul", {{x, 0}, {w2, 0}}), 0}});
  Node* sum = AddOp(*g, "sum", "Add", {{a, 0}, {b, 0}});
  AddOp(*g, "output", "NetOutput", {{AddOp(*g, "softmax", "Softmax", {{sum, 0}}), 0}, {b, 0}});
  return g;
}

TEST_F(V2Lowering, AMultiStreamMainOrdersItsStreamsWithEvents) {
  auto reference = TwoBranches();
  auto interpreter = *graph::Interpreter::Create(*reference);
  auto set = lowering::CompileV2(TwoBranches(), graph::CompileOptions{});  // multi-stream by default
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->desc.reusable_stream_num, 2) << set->main->ToText();
  EXPECT_GT(set->desc.reusable_event_num, 0);
  int sends = 0, waits = 0;
  for (const exe::ExeNode& n : set->main->nodes()) {
    sends += n.kernel == "SendEvent" ? 1 : 0;
    waits += n.kernel == "WaitEvent" ? 1 : 0;
  }
  EXPECT_EQ(sends, set->desc.reusable_event_num);
  EXPECT_EQ(waits, set->desc.reusable_event_num);
  graph::CompileOptions single;
  single.stream_mode = graph::CompileOptions::StreamMode::kSingle;
  EXPECT_EQ(lowering::CompileV2(TwoBranches(), single)->desc.reusable_stream_num, 1);

  for (ExecutorType type : {ExecutorType::kSequentialPriority, ExecutorType::kTopological,
                            ExecutorType::kTopologicalPriority, ExecutorType::kTopologicalMultiThread}) {
    for (int threads : {2, 3}) {  // 3: the multi-thread executor's launch lane takes the events too
      if (threads == 3 && type != ExecutorType::kTopologicalMultiThread) continue;
      auto m = ModelV2Executor::Create(*set, rt_.get(), 0, ExecutorOption{.type = type, .threads = threads});
      ASSERT_TRUE(m.ok()) << m.status();
      ASSERT_TRUE((*m)->Load().ok());
      for (int batch = 1; batch <= 39; batch += 2) {
        graph::Tensor x = RandomTensor({DataType::kFloat32, Shape{batch, 16}}, 300 + batch);
        auto want = interpreter->Run({{"x", x}});
        ASSERT_TRUE(want.ok()) << want.status();
        auto got = RunV2(**m, {x});
        ASSERT_TRUE(got.ok()) << ExecutorTypeName(type) << " batch " << batch << ": " << got.status();
        ExpectNear((*got)[0], (*want)[0], "softmax, batch " + std::to_string(batch));
        ExpectNear((*got)[1], (*want)[1], "tanh, batch " + std::to_string(batch));
      }
      ASSERT_TRUE((*m)->UnLoad().ok());
      ASSERT_TRUE((*m)->Load().ok()) << "loads again after an unload";
      ASSERT_TRUE((*m)->UnLoad().ok());
    }
  }
}

TEST_F(V2Lowering, TheOfflinePassRemovesDeadPureNodesOnly) {
  exe::ExecuteGraph g("dead");
  const int in = g.AddInput("in");
  const int shape = g.AddValue("shape"), tiling = g.AddValue("tiling"), unused = g.AddValue("unused");
  auto add = [&](const char* name, const char* kernel, std::vector<int> ins, std::vector<int> outs,
                 std::vector<exe::ExeDep> deps = {}) {
    exe::ExeNode n;
    n.name = name;
    n.kernel = kernel;
    n.inputs = std::move(ins);
    n.outputs = std::move(outs);
    n.deps = std::move(deps);
    return *g.AddNode(std::move(n), false);
  };
  const int infer = add("infer", "InferShape", {in}, {shape});
  add("tiling", "Tiling", {shape}, {tiling}, {{infer, -1}});          // read by nobody: dead
  add("dead_infer", "InferShape", {in}, {unused});                    // dead
  const int launch = add("launch", "LaunchKernel", {shape}, {}, {{infer, -1}});  // a side effect: kept
  add("free", "FreeMemory", {shape}, {}, {{launch, -1}});
  add("join", "NoOp", {}, {}, {{launch, -1}});                         // nothing after it: dead
  EXPECT_EQ(lowering::RemoveDeadNodes(g), 3) << g.ToText();
  EXPECT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.FindNode("tiling"), -1);
  EXPECT_EQ(g.FindNode("dead_infer"), -1);
  EXPECT_EQ(g.FindNode("join"), -1);
  ASSERT_GE(g.FindNode("free"), 0);
  const std::vector<exe::ExeDep> want = {exe::ExeDep{g.FindNode("launch"), -1}};
  EXPECT_EQ(g.nodes()[g.FindNode("free")].deps, want);
  EXPECT_TRUE(g.Validate().ok());
  EXPECT_EQ(lowering::RemoveDeadNodes(g), 0) << "nothing more";
}

}  // namespace
}  // namespace npuflow::v2
