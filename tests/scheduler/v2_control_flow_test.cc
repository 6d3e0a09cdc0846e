// Control flow end to end: If and While in the op library, the interpreter's reference, their
// lowering to switch / merge nodes, and every topological executor against the interpreter on
// hand-written and random graphs with dynamic shapes (loops that grow a tensor, an If inside a
// While's body, subgraph constants), the iteration limit, and v1's refusal.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "graph/ops/control_flow.h"
#include "graph/ops/interpreter.h"
#include "lowering/compiler.h"
#include "lowering/graph_converter.h"
#include "npu_sim/runtime.h"
#include "scheduler/v2/executors.h"
#include "scheduler/v2/model_v2_executor.h"
#include "scheduler/v2/op_kernels.h"
#include "tests/scheduler/v2_test_util.h"

namespace npuflow::v2 {
namespace {

using namespace v2test;  // NOLINT: the helpers of v2_test_util.h

graph::Tensor Scalar(float v, Shape shape = Shape{}) {
  graph::Tensor t = graph::ZeroTensor({DataType::kFloat32, std::move(shape)});
  graph::StoreF(t, 0, v);
  return t;
}

Node* Const(ComputeGraph& g, const std::string& name, graph::Tensor value) {
  return AddOp(g, name, "Const", {}, {{"value", std::move(value)}});
}

// A subgraph with `n` Data inputs (indexed), built by `body`, returning what it returns.
template <typename Body>
ComputeGraph* Subgraph(ComputeGraph& root, const std::string& name, int n, Body body) {
  ComputeGraph* g = *root.AddSubgraph(name);
  std::vector<Node*> args;
  for (int i = 0; i < n; ++i)
    args.push_back(AddOp(*g, "arg" + std::to_string(i), "Data", {}, {{"index", std::int64_t{i}}}));
  std::vector<Endpoint> results = body(*g, args);
  AddOp(*g, "out", "NetOutput", results);
  return g;
}

// x[batch, 8], flag[1], n[]:
//   y = If(Relu(flag), x) then Tanh(MatMul(x, w)) else Mul(x, x)
//   (z, k, acc) = While(y, n, x): cond k; body (Tanh(y + MatMul(y, w2)), k - 1, Concat(acc, row))
//     where the body holds an If of its own: y' = If(Relu(flag'), ...) is not needed; instead the
//     body's first output goes through If(k - 1, ...) choosing Add or Sub with a constant.
//   out = NetOutput(z, k, MatMul(acc, w))
std::unique_ptr<ComputeGraph> ControlFlowModel(Dim batch) {
  auto g = std::make_unique<ComputeGraph>("cf");
  Node* x = AddOp(*g, "x", "Data", {},
                  {{"dtype", DataType::kFloat32}, {"shape", Shape(std::vector<Dim>{batch, Dim::Static(8)})}});
  Node* flag = AddOp(*g, "flag", "Data", {}, {{"dtype", DataType::kFloat32}, {"shape", Shape{1}}});
  Node* n = AddOp(*g, "n", "Data", {}, {{"dtype", DataType::kFloat32}, {"shape", Shape{}}});
  Node* w = Const(*g, "w", RandomTensor({DataType::kFloat32, Shape{8, 8}}, 11));
  Subgraph(*g, "then", 1, [](ComputeGraph& s, std::vector<Node*> a) -> std::vector<Endpoint> {
    Node* ws = Const(s, "w", RandomTensor({DataType::kFloat32, Shape{8, 8}}, 12));
    Node* mm = AddOp(s, "mm", "MatMul", {{a[0], 0}, {ws, 0}});
    return {{AddOp(s, "tanh", "Tanh", {{mm, 0}}), 0}};
  });
  Subgraph(*g, "else", 1, [](ComputeGraph& s, std::vector<Node*> a) -> std::vector<Endpoint> {
    return {{AddOp(s, "square", "Mul", {{a[0], 0}, {a[0], 0}}), 0}};
  });
  Subgraph(*g, "inner_then", 1, [](ComputeGraph& s, std::vector<Node*> a) -> std::vector<Endpoint> {
    Node* c = Const(s, "c", Scalar(0.25f));
    return {{AddOp(s, "add", "Add", {{a[0], 0}, {c, 0}}), 0}};
  });
  Subgraph(*g, "inner_else", 1, [](ComputeGraph& s, std::vector<Node*> a) -> std::vector<Endpoint> {
    return {{a[0], 0}};  // passes its input through
  });
  Subgraph(*g, "cond", 3, [](ComputeGraph&, std::vector<Node*> a) -> std::vector<Endpoint> { return {{a[1], 0}}; });
  Subgraph(*g, "body", 3, [](ComputeGraph& s, std::vector<Node*> a) -> std::vector<Endpoint> {
    Node* w2 = Const(s, "w2", RandomTensor({DataType::kFloat32, Shape{8, 8}}, 13));
    Node* one = Const(s, "one", Scalar(1));
    Node* row = Const(s, "row", RandomTensor({DataType::kFloat32, Shape{1, 8}}, 14));
    Node* mm = AddOp(s, "mm", "MatMul", {{a[0], 0}, {w2, 0}});
    Node* add = AddOp(s, "add", "Add", {{a[0], 0}, {mm, 0}});
    Node* tanh = AddOp(s, "tanh", "Tanh", {{add, 0}});
    Node* k = AddOp(s, "k", "Sub", {{a[1], 0}, {one, 0}});
    Node* inner = AddOp(s, "inner", "If", {{k, 0}, {tanh, 0}},
                        {{"then_branch", graph::SubgraphRef{"inner_then"}},
                         {"else_branch", graph::SubgraphRef{"inner_else"}}});
    Node* grow = AddOp(s, "grow", "Concat", {{a[2], 0}, {row, 0}}, {{"axis", std::int64_t{0}}});
    return {{inner, 0}, {k, 0}, {grow, 0}};
  });
  Node* c = AddOp(*g, "c", "Relu", {{flag, 0}});
  Node* y = AddOp(*g, "y", "If", {{c, 0}, {x, 0}},
                  {{"then_branch", graph::SubgraphRef{"then"}}, {"else_branch", graph::SubgraphRef{"else"}}});
  Node* loop = AddOp(*g, "loop", "While", {{y, 0}, {n, 0}, {x, 0}},
                     {{"cond", graph::SubgraphRef{"cond"}}, {"body", graph::SubgraphRef{"body"}},
                      {"max_iterations", std::int64_t{50}}});
  Node* mm = AddOp(*g, "mm", "MatMul", {{loop, 2}, {w, 0}});
  AddOp(*g, "output", "NetOutput", {{loop, 0}, {loop, 1}, {mm, 0}});
  return g;
}

class V2ControlFlow : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterOpKernels();
    npu_sim::RuntimeOptions options;
    options.workers = 2;
    rt_ = *npu_sim::Runtime::Create(options);
  }
  std::unique_ptr<npu_sim::Runtime> rt_;
};

TEST_F(V2ControlFlow, InterpreterRunsIfAndWhile) {
  auto g = ControlFlowModel(Dim::Symbolic("batch"));
  auto interp = graph::Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  graph::Tensor x = RandomTensor({DataType::kFloat32, Shape{3, 8}}, 1);
  auto out = (*interp)->Run({{"x", x}, {"flag", Scalar(1, Shape{1})}, {"n", Scalar(4)}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].desc.ToString(), "f32[3, 8]");
  EXPECT_FLOAT_EQ(graph::LoadF((*out)[1], 0), 0.0f) << "the loop ran until k reached 0";
  EXPECT_EQ((*out)[2].desc.ToString(), "f32[7, 8]") << "4 rows appended";
  out = (*interp)->Run({{"x", x}, {"flag", Scalar(-1, Shape{1})}, {"n", Scalar(0)}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[2].desc.ToString(), "f32[3, 8]") << "no iteration";
  for (std::size_t i = 0; i < 24; ++i)
    EXPECT_FLOAT_EQ(graph::LoadF((*out)[0], i), graph::LoadF(x, i) * graph::LoadF(x, i)) << "else branch";

  auto endless = (*interp)->Run({{"x", x}, {"flag", Scalar(1, Shape{1})}, {"n", Scalar(100)}});
  ASSERT_FALSE(endless.ok());
  EXPECT_NE(endless.status().message().find("While 'loop': still running after max_iterations = 50"),
            std::string_view::npos)
      << endless.status();
}

TEST_F(V2ControlFlow, ShapesComeFromTheSubgraphs) {
  auto g = ControlFlowModel(Dim::Static(3));
  ASSERT_TRUE(graph::InferGraphShapes(*g, nullptr).ok());
  EXPECT_EQ(g->FindNode("y")->outputs()[0].ToString(), "f32[3, 8]");
  EXPECT_EQ(g->FindNode("loop")->outputs()[0].ToString(), "f32[3, 8]") << "the body keeps y's shape";
  EXPECT_EQ(g->FindNode("loop")->outputs()[2].ToString(), "f32[loop.2.0, 8]") << "the body grows acc";
  EXPECT_EQ(g->FindNode("mm")->outputs()[0].ToString(), "f32[loop.2.0, 8]");
}

TEST_F(V2ControlFlow, LowersToSwitchAndMerge) {
  auto set = lowering::CompileV2(ControlFlowModel(Dim::Symbolic("batch")), graph::CompileOptions{});
  ASSERT_TRUE(set.ok()) << set.status();
  const exe::ExecuteGraph& main = *set->main;
  ASSERT_TRUE(main.HasControlFlow());
  auto kind = [&](const std::string& name) {
    const int id = main.FindNode(name);
    EXPECT_GE(id, 0) << name << "\n" << main.ToText();
    return id < 0 ? exe::NodeKind::kNormal : main.nodes()[id].kind;
  };
  EXPECT_EQ(kind("y/switch"), exe::NodeKind::kSwitch);
  EXPECT_EQ(kind("y"), exe::NodeKind::kMerge);
  EXPECT_EQ(kind("loop/head"), exe::NodeKind::kMerge);
  EXPECT_EQ(kind("loop/switch"), exe::NodeKind::kSwitch);
  EXPECT_EQ(kind("loop/body/inner/switch"), exe::NodeKind::kSwitch) << "the If inside the body";
  EXPECT_GE(main.FindNode("loop/body/mm"), 0);
  // Subgraph constants are placed by Init under their subgraph's name.
  EXPECT_GE(set->init->FindNode("body/w2"), 0) << set->init->ToText();
  EXPECT_GE(set->init->FindNode("inner_then/c"), 0);

  auto m = ModelV2Executor::Create(*set, rt_.get(), 0);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE((*m)->Load().ok());
  EXPECT_NE((*m)->main_executor_type(), ExecutorType::kSequentialPriority) << "auto: control flow";
  auto seq = ModelV2Executor::Create(*set, rt_.get(), 0, ExecutorOption{.type = ExecutorType::kSequentialPriority});
  ASSERT_TRUE(seq.ok());
  Status s = (*seq)->Load();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("control flow"), std::string_view::npos) << s;
}

TEST_F(V2ControlFlow, EveryTopologicalExecutorMatchesTheInterpreter) {
  auto reference = ControlFlowModel(Dim::Symbolic("batch"));
  auto interp = *graph::Interpreter::Create(*reference);
  auto set = lowering::CompileV2(ControlFlowModel(Dim::Symbolic("batch")), graph::CompileOptions{});
  ASSERT_TRUE(set.ok()) << set.status();
  for (ExecutorType type : {ExecutorType::kTopological, ExecutorType::kTopologicalPriority,
                            ExecutorType::kTopologicalMultiThread, ExecutorType::kAutomatic}) {
    auto m = ModelV2Executor::Create(*set, rt_.get(), 0, ExecutorOption{.type = type});
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE((*m)->Load().ok());
    int run = 0;
    for (int batch : {1, 2, 5}) {
      for (float flag : {1.0f, -1.0f}) {
        for (int n : {0, 1, 3}) {
          const std::string what = fmt::format("{} batch {} flag {} n {}", ExecutorTypeName(type), batch, flag, n);
          graph::Tensor x = RandomTensor({DataType::kFloat32, Shape{batch, 8}}, 7 + run++);
          std::vector<graph::Tensor> in = {x, Scalar(flag, Shape{1}), Scalar(static_cast<float>(n))};
          auto want = interp->Run({{"x", in[0]}, {"flag", in[1]}, {"n", in[2]}});
          ASSERT_TRUE(want.ok()) << what << ": " << want.status();
          auto got = RunV2(**m, in);
          ASSERT_TRUE(got.ok()) << what << ": " << got.status();
          for (int j = 0; j < 3; ++j) ExpectNear((*got)[j], (*want)[j], what + " output " + std::to_string(j), 1e-3);
        }
      }
    }
    // Past the loop's limit: an error naming the loop, and the model runs on.
    auto endless = RunV2(**m, {RandomTensor({DataType::kFloat32, Shape{2, 8}}, 1), Scalar(1, Shape{1}), Scalar(60)});
    ASSERT_FALSE(endless.ok());
    EXPECT_NE(endless.status().message().find("loop/switch"), std::string_view::npos) << endless.status();
    EXPECT_NE(endless.status().message().find("max_iterations = 50"), std::string_view::npos) << endless.status();
    auto again = RunV2(**m, {RandomTensor({DataType::kFloat32, Shape{2, 8}}, 1), Scalar(1, Shape{1}), Scalar(2)});
    EXPECT_TRUE(again.ok()) << ExecutorTypeName(type) << " after a failed run: " << again.status();
    ASSERT_TRUE((*m)->UnLoad().ok());
  }
}

// A run that fails part-way (the loop past its limit) gives back what it took: failing again and
// again takes no more device memory, on every topological executor.
TEST_F(V2ControlFlow, AFailingRunKeepsNoMemory) {
  auto set = lowering::CompileV2(ControlFlowModel(Dim::Symbolic("batch")), graph::CompileOptions{});
  ASSERT_TRUE(set.ok()) << set.status();
  for (ExecutorType type : {ExecutorType::kTopological, ExecutorType::kTopologicalPriority,
                            ExecutorType::kTopologicalMultiThread}) {
    auto m = ModelV2Executor::Create(*set, rt_.get(), 0, ExecutorOption{.type = type});
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE((*m)->Load().ok());
    const std::vector<graph::Tensor> endless = {RandomTensor({DataType::kFloat32, Shape{4, 8}}, 1),
                                                Scalar(1, Shape{1}), Scalar(60)};
    std::uint64_t after_first = 0;
    for (int i = 0; i < 6; ++i) {
      ASSERT_FALSE(RunV2(**m, endless).ok());
      const std::uint64_t in_use = rt_->Stats(0)->memory.in_use;
      if (i == 0) after_first = in_use;
      EXPECT_EQ(in_use, after_first) << ExecutorTypeName(type) << ": failed run " << i + 1 << " kept memory";
    }
    auto ok = RunV2(**m, {RandomTensor({DataType::kFloat32, Shape{4, 8}}, 2), Scalar(1, Shape{1}), Scalar(3)});
    EXPECT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(rt_->Stats(0)->memory.in_use, after_first) << ExecutorTypeName(type);
    ASSERT_TRUE((*m)->UnLoad().ok());
  }
}

// Random graphs: elementwise ops, MatMuls, Ifs and Whiles over x[batch, 8], with flag[1] and
// n[] steering the control flow.
std::unique_ptr<ComputeGraph> RandomControlFlowGraph(std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint32_t>(n)); };
  auto g = std::make_unique<ComputeGraph>("random" + std::to_string(seed));
  Node* x = AddOp(*g, "x", "Data", {},
                  {{"dtype", DataType::kFloat32},
                   {"shape", Shape(std::vector<Dim>{Dim::Symbolic("batch"), Dim::Static(8)})}});
  Node* flag = AddOp(*g, "flag", "Data", {}, {{"dtype", DataType::kFloat32}, {"shape", Shape{1}}});
  Node* n = AddOp(*g, "n", "Data", {}, {{"dtype", DataType::kFloat32}, {"shape", Shape{}}});
  Node* w = Const(*g, "w", RandomTensor({DataType::kFloat32, Shape{8, 8}}, seed));
  Node* zero = Const(*g, "zero", Scalar(0, Shape{1}));
  Node* pos = AddOp(*g, "pos", "Relu", {{flag, 0}});
  Node* neg_flag = AddOp(*g, "neg_flag", "Sub", {{zero, 0}, {flag, 0}});
  Node* neg = AddOp(*g, "neg", "Relu", {{neg_flag, 0}});
  std::vector<Node*> pool = {x};
  const char* binary[] = {"Add", "Mul", "Sub"};
  const char* unary[] = {"Tanh", "Relu"};
  const int steps = 5 + pick(6);
  for (int k = 0; k < steps; ++k) {
    const std::string name = "n" + std::to_string(k);
    Node* a = pool[pick(static_cast<int>(pool.size()))];
    Node* b = pool[pick(static_cast<int>(pool.size()))];
    const int r = pick(10);
    if (r < 3) {
      pool.push_back(AddOp(*g, name, binary[pick(3)], {{a, 0}, {b, 0}}));
    } else if (r < 5) {
      pool.push_back(AddOp(*g, name, unary[pick(2)], {{a, 0}}));
    } else if (r < 6) {
      Node* mm = AddOp(*g, name + "_mm", "MatMul", {{a, 0}, {w, 0}});
      pool.push_back(AddOp(*g, name, "Tanh", {{mm, 0}}));
    } else if (r < 8) {
      const std::string op1 = binary[pick(3)], op2 = unary[pick(2)];
      const std::uint32_t cseed = rng();
      Subgraph(*g, name + "_then", 2, [&](ComputeGraph& s, std::vector<Node*> args) -> std::vector<Endpoint> {
        Node* v = AddOp(s, "v", op1, {{args[0], 0}, {args[1], 0}});
        Node* ws = Const(s, "ws", RandomTensor({DataType::kFloat32, Shape{8, 8}}, cseed));
        Node* mm = AddOp(s, "mm", "MatMul", {{v, 0}, {ws, 0}});
        return {{AddOp(s, "t", "Tanh", {{mm, 0}}), 0}};
      });
      Subgraph(*g, name + "_else", 2, [&](ComputeGraph& s, std::vector<Node*> args) -> std::vector<Endpoint> {
        return {{AddOp(s, "u", op2, {{args[1], 0}}), 0}};
      });
      pool.push_back(AddOp(*g, name, "If", {{pick(2) ? pos : neg, 0}, {a, 0}, {b, 0}},
                           {{"then_branch", graph::SubgraphRef{name + "_then"}},
                            {"else_branch", graph::SubgraphRef{name + "_else"}}}));
    } else {
      const std::string op = binary[pick(3)];
      Subgraph(*g, name + "_cond", 2, [](ComputeGraph&, std::vector<Node*> args) -> std::vector<Endpoint> {
        return {{args[1], 0}};
      });
      Subgraph(*g, name + "_body", 2, [&](ComputeGraph& s, std::vector<Node*> args) -> std::vector<Endpoint> {
        Node* one = Const(s, "one", Scalar(1));
        Node* v = AddOp(s, "v", op, {{args[0], 0}, {args[0], 0}});
        Node* t = AddOp(s, "t", "Tanh", {{v, 0}});
        return {{t, 0}, {AddOp(s, "k", "Sub", {{args[1], 0}, {one, 0}}), 0}};
      });
      pool.push_back(AddOp(*g, name, "While", {{a, 0}, {n, 0}},
                           {{"cond", graph::SubgraphRef{name + "_cond"}},
                            {"body", graph::SubgraphRef{name + "_body"}}}));
    }
  }
  AddOp(*g, "output", "NetOutput", {{pool.back(), 0}, {pool[pick(static_cast<int>(pool.size()))], 0}});
  return g;
}

TEST_F(V2ControlFlow, RandomGraphsWithIfAndWhileMatchTheInterpreterOnEveryExecutor) {
  for (std::uint32_t seed = 1; seed <= 12; ++seed) {
    auto reference = RandomControlFlowGraph(seed);
    auto interp = graph::Interpreter::Create(*reference);
    ASSERT_TRUE(interp.ok()) << "seed " << seed << ": " << interp.status();
    auto set = lowering::CompileV2(RandomControlFlowGraph(seed), graph::CompileOptions{});
    ASSERT_TRUE(set.ok()) << "seed " << seed << ": " << set.status();
    for (ExecutorType type : {ExecutorType::kTopological, ExecutorType::kTopologicalPriority,
                              ExecutorType::kTopologicalMultiThread}) {
      auto m = ModelV2Executor::Create(*set, rt_.get(), 0, ExecutorOption{.type = type});
      ASSERT_TRUE(m.ok()) << m.status();
      ASSERT_TRUE((*m)->Load().ok());
      for (int run = 0; run < 4; ++run) {
        const int batch = 1 + (run * 3 + static_cast<int>(seed)) % 6;
        std::vector<graph::Tensor> in = {RandomTensor({DataType::kFloat32, Shape{batch, 8}}, seed * 10 + run),
                                         Scalar(run % 2 ? 1.0f : -1.0f, Shape{1}), Scalar(static_cast<float>(run))};
        const std::string what = fmt::format("seed {} {} run {}", seed, ExecutorTypeName(type), run);
        auto want = (*interp)->Run({{"x", in[0]}, {"flag", in[1]}, {"n", in[2]}});
        ASSERT_TRUE(want.ok()) << what << ": " << want.status();
        auto got = RunV2(**m, in);
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        for (int j = 0; j < 2; ++j) ExpectNear((*got)[j], (*want)[j], what + " output " + std::to_string(j), 1e-3);
      }
      ASSERT_TRUE((*m)->UnLoad().ok());
    }
  }
}

// A While inside a While's body (the inner loop enters again in every outer iteration, within one
// run), with a body node whose result nobody reads: every topological executor against the
// interpreter.
std::unique_ptr<ComputeGraph> NestedLoops() {
  auto g = std::make_unique<ComputeGraph>("nested");
  Node* x = AddOp(*g, "x", "Data", {},
                  {{"dtype", DataType::kFloat32}, {"shape", Shape(std::vector<Dim>{Dim::Symbolic("b"), Dim::Static(4)})}});
  Node* n = AddOp(*g, "n", "Data", {}, {{"dtype", DataType::kFloat32}, {"shape", Shape{}}});
  Node* m = AddOp(*g, "m", "Data", {}, {{"dtype", DataType::kFloat32}, {"shape", Shape{}}});
  auto counter_cond = [](ComputeGraph&, std::vector<Node*> a) -> std::vector<Endpoint> { return {{a[1], 0}}; };
  Subgraph(*g, "inner_cond", 2, counter_cond);
  Subgraph(*g, "inner_body", 2, [](ComputeGraph& s, std::vector<Node*> a) -> std::vector<Endpoint> {
    Node* one = Const(s, "one", Scalar(1));
    Node* half = Const(s, "half", Scalar(0.5f));
    AddOp(s, "unread", "Relu", {{a[0], 0}});  // reads the loop variable, feeds nothing
    Node* v = AddOp(s, "v", "Tanh", {{AddOp(s, "scaled", "Mul", {{a[0], 0}, {half, 0}}), 0}});
    return {{AddOp(s, "plus", "Add", {{v, 0}, {one, 0}}), 0}, {AddOp(s, "k", "Sub", {{a[1], 0}, {one, 0}}), 0}};
  });
  Subgraph(*g, "outer_cond", 3, [](ComputeGraph&, std::vector<Node*> a) -> std::vector<Endpoint> { return {{a[1], 0}}; });
  Subgraph(*g, "outer_body", 3, [](ComputeGraph& s, std::vector<Node*> a) -> std::vector<Endpoint> {
    Node* one = Const(s, "one", Scalar(1));
    Node* inner = AddOp(s, "inner", "While", {{a[0], 0}, {a[2], 0}},
                        {{"cond", graph::SubgraphRef{"inner_cond"}}, {"body", graph::SubgraphRef{"inner_body"}}});
    return {{inner, 0}, {AddOp(s, "j", "Sub", {{a[1], 0}, {one, 0}}), 0}, {a[2], 0}};
  });
  Node* loop = AddOp(*g, "outer", "While", {{x, 0}, {m, 0}, {n, 0}},
                     {{"cond", graph::SubgraphRef{"outer_cond"}}, {"body", graph::SubgraphRef{"outer_body"}}});
  AddOp(*g, "output", "NetOutput", {{loop, 0}, {loop, 1}});
  return g;
}

TEST_F(V2ControlFlow, ALoopInsideALoopMatchesTheInterpreter) {
  auto reference = NestedLoops();
  auto interp = graph::Interpreter::Create(*reference);
  ASSERT_TRUE(interp.ok()) << interp.status();
  auto set = lowering::CompileV2(NestedLoops(), graph::CompileOptions{});
  ASSERT_TRUE(set.ok()) << set.status();
  for (ExecutorType type : {ExecutorType::kTopological, ExecutorType::kTopologicalPriority,
                            ExecutorType::kTopologicalMultiThread}) {
    auto model = ModelV2Executor::Create(*set, rt_.get(), 0, ExecutorOption{.type = type});
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE((*model)->Load().ok());
    for (int outer : {0, 1, 3}) {
      for (int inner : {0, 1, 2, 4}) {
        const std::string what = fmt::format("{} outer {} inner {}", ExecutorTypeName(type), outer, inner);
        std::vector<graph::Tensor> in = {RandomTensor({DataType::kFloat32, Shape{3, 4}}, outer * 10 + inner),
                                         Scalar(static_cast<float>(inner)), Scalar(static_cast<float>(outer))};
        auto want = (*interp)->Run({{"x", in[0]}, {"n", in[1]}, {"m", in[2]}});
        ASSERT_TRUE(want.ok()) << what << ": " << want.status();
        auto got = RunV2(**model, in);
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        for (int j = 0; j < 2; ++j) ExpectNear((*got)[j], (*want)[j], what + " output " + std::to_string(j), 1e-5);
      }
    }
    ASSERT_TRUE((*model)->UnLoad().ok());
  }
}

TEST_F(V2ControlFlow, TheV1TaskSinkRefusesControlFlow) {
  auto compiled = lowering::CompileV1(ControlFlowModel(Dim::Static(2)), graph::CompileOptions{});
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(compiled.status().message().find("has control flow (If/While)"), std::string_view::npos)
      << compiled.status();
  EXPECT_TRUE(lowering::NeedsRuntimeV2(*ControlFlowModel(Dim::Static(2))));
  ComputeGraph flat("flat");
  Node* x = AddOp(flat, "x", "Data", {}, {{"dtype", DataType::kFloat32}, {"shape", Shape{2}}});
  AddOp(flat, "o", "NetOutput", {{AddOp(flat, "t", "Tanh", {{x, 0}}), 0}});
  EXPECT_FALSE(lowering::NeedsRuntimeV2(flat));
}

}  // namespace
}  // namespace npuflow::v2
