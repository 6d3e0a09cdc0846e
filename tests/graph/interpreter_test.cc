// The reference interpreter: graphs in the text format run with each op's reference kernel;
// symbolic dims resolved per run; feed errors; Variable state across runs; PartitionedCall.
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "tests/graph/tensors.h"

#include "graph/ops/interpreter.h"
#include "graph/ops/op_registry.h"
#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"

namespace npuflow::graph {
namespace {



std::unique_ptr<ComputeGraph> Parse(std::string_view text) {
  auto g = ParseGraphText(text, "test.pbtxt");
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(g).value() : nullptr;
}

std::string Message(const Status& s) { return std::string(s.message()); }

// ---- test ops -----------------------------------------------------------------------------------

Status InferSameAsFirst(const OpDesc&, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  out.push_back(in[0]);
  return Status::Ok();
}

// acc + x, written in place over acc: the shape of KvCacheWrite's update of its cache.
Status RefAccumulate(const OpDesc&, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const std::size_t n = static_cast<std::size_t>(in[0]->desc.shape.num_elements().value_or(0));
  for (std::size_t i = 0; i < n; ++i) StoreF(out[0], i, LoadF(*in[0], i) + LoadF(*in[1], i));
  return Status::Ok();
}

// Passes its input through; fails on a negative element (to fail a run after an update).
Status RefCheckNonNegative(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const std::size_t n = static_cast<std::size_t>(in[0]->desc.shape.num_elements().value_or(0));
  for (std::size_t i = 0; i < n; ++i)
    if (LoadF(*in[0], i) < 0) return Status::ParamInvalid("node '{}': element {} is negative", op.name(), i);
  out[0] = *in[0];
  return Status::Ok();
}

Status InferVariable(const OpDesc& op, const std::vector<TensorDesc>&, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(DataType dtype, op.Attr<DataType>("dtype"));
  NPUFLOW_ASSIGN_OR_RETURN(Shape shape, op.Attr<Shape>("shape"));
  out.push_back(TensorDesc{dtype, std::move(shape)});
  return Status::Ok();
}

void RegisterTestOps() {
  RegisterBuiltinOps();
  OpRegistry& r = OpRegistry::Global();
  r.Register({.type = "TestAccumulate", .min_inputs = 2, .max_inputs = 2, .infer = &InferSameAsFirst,
              .reference = &RefAccumulate, .inplace = {0}, .updates_inplace_input = true});
  r.Register({.type = "TestCheckNonNegative", .min_inputs = 1, .max_inputs = 1, .infer = &InferSameAsFirst,
              .reference = &RefCheckNonNegative});
  r.Register({.type = "TestNoKernel", .min_inputs = 1, .max_inputs = 1, .infer = &InferSameAsFirst});
  // The op library's Variable when it is there (the test graphs give it dtype, shape and value);
  // a stand-in with the same attributes otherwise.
  if (!r.Find("Variable").ok())
    r.Register({.type = "Variable", .min_inputs = 0, .max_inputs = 0, .required_attrs = {"dtype", "shape"},
                .engine = OpEngine::kHostLocal, .infer = &InferVariable});
}

class InterpreterTest : public ::testing::Test {
 protected:
  void SetUp() override { RegisterTestOps(); }
};

// ---- elementwise chains -------------------------------------------------------------------------

constexpr std::string_view kChain = R"pb(
name: "chain"
node {
  name: "x" op: "Data"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: 2 } dim { size: 3 } } } }
}
node {
  name: "bias" op: "Const"
  attr { key: "value" value { tensor { dtype: DT_FLOAT shape { dim { size: 3 } } float_val: 1 float_val: -10 float_val: 0.5 } } }
}
node {
  name: "scale" op: "Const"
  attr { key: "value" value { tensor { dtype: DT_FLOAT shape { dim { size: 2 } dim { size: 1 } } float_val: 2 float_val: -1 } } }
}
node { name: "sum" op: "Add" input: "x" input: "bias" }
node { name: "prod" op: "Mul" input: "sum" input: "scale" }
node { name: "act" op: "Relu" input: "prod" }
node { name: "out" op: "NetOutput" input: "act" input: "sum" input: "act" }
)pb";

TEST_F(InterpreterTest, AddMulReluChainBroadcasts) {
  auto g = Parse(kChain);
  ASSERT_NE(g, nullptr);
  auto interp = Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  auto out = (*interp)->Run({{"x", F32(Shape{2, 3}, {1, 2, 3, 4, 5, 6})}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  // sum = x + [1, -10, 0.5]; prod = sum * [[2], [-1]]; act = relu(prod).
  EXPECT_EQ(Floats((*out)[1]), (std::vector<float>{2, -8, 3.5, 5, -5, 6.5}));
  EXPECT_EQ(Floats((*out)[0]), (std::vector<float>{4, 0, 7, 0, 5, 0}));
  EXPECT_EQ((*out)[0].desc.ToString(), "f32[2, 3]");
  EXPECT_EQ((*out)[2], (*out)[0]);  // one tensor listed twice comes out twice

  // The Const values are read in place, never consumed: a second run gives the same result.
  auto again = (*interp)->Run({{"x", F32(Shape{2, 3}, {1, 2, 3, 4, 5, 6})}});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Floats((*again)[0]), Floats((*out)[0]));
}

constexpr std::string_view kSymbolic = R"pb(
name: "symbolic"
node {
  name: "a" op: "Data"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { symbol: "seq" } dim { size: 2 } } } }
}
node {
  name: "b" op: "Data"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { symbol: "seq" } dim { size: 1 } } } }
}
node { name: "sum" op: "Add" input: "a" input: "b" }
node { name: "t" op: "Tanh" input: "sum" }
node { name: "out" op: "NetOutput" input: "sum" input: "t" }
)pb";

TEST_F(InterpreterTest, SymbolicDimsResolveToEachRunsFeeds) {
  auto g = Parse(kSymbolic);
  ASSERT_NE(g, nullptr);
  auto interp = Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();

  auto one = (*interp)->Run({{"a", F32(Shape{1, 2}, {1, 2})}, {"b", F32(Shape{1, 1}, {10})}});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)[0].desc.ToString(), "f32[1, 2]");
  EXPECT_EQ(Floats((*one)[0]), (std::vector<float>{11, 12}));

  auto three = (*interp)->Run({{"a", F32(Shape{3, 2}, {1, 2, 3, 4, 5, 6})}, {"b", F32(Shape{3, 1}, {0, 10, 100})}});
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ((*three)[0].desc.ToString(), "f32[3, 2]");
  EXPECT_EQ(Floats((*three)[0]), (std::vector<float>{1, 2, 13, 14, 105, 106}));
  EXPECT_EQ((*three)[1].desc.ToString(), "f32[3, 2]");
  EXPECT_FLOAT_EQ(Floats((*three)[1])[0], std::tanh(1.f));
}

TEST_F(InterpreterTest, FeedErrorsNameTheFeedAndWhatWasExpected) {
  auto g = Parse(kSymbolic);
  ASSERT_NE(g, nullptr);
  auto interp = Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  Interpreter& in = **interp;
  const Tensor a = F32(Shape{2, 2}, {1, 2, 3, 4});
  const Tensor b = F32(Shape{2, 1}, {1, 2});

  auto missing = in.Run({{"a", a}});
  EXPECT_EQ(missing.status().code(), StatusCode::kParamInvalid);
  EXPECT_EQ(Message(missing.status()), "missing feed for Data node 'b' (f32[seq, 1])");

  auto unknown = in.Run({{"a", a}, {"b", b}, {"c", b}});
  EXPECT_EQ(Message(unknown.status()),
            "unknown feed 'c': graph 'symbolic' has no Data node of that name (Data nodes: a, b)");

  Tensor wrong_dtype{TensorDesc{DataType::kInt32, Shape{2, 2}}, std::vector<std::uint8_t>(16)};
  auto dtype = in.Run({{"a", wrong_dtype}, {"b", b}});
  EXPECT_EQ(Message(dtype.status()), "feed 'a' is i32[2, 2], but Data node 'a' declares f32[seq, 2]");

  auto rank = in.Run({{"a", F32(Shape{4}, {1, 2, 3, 4})}, {"b", b}});
  EXPECT_EQ(Message(rank.status()), "feed 'a' is f32[4], but Data node 'a' declares f32[seq, 2]");

  auto dim = in.Run({{"a", F32(Shape{1, 3}, {1, 2, 3})}, {"b", F32(Shape{1, 1}, {1})}});
  EXPECT_EQ(Message(dim.status()), "feed 'a' is f32[1, 3], but Data node 'a' declares f32[seq, 2]: dim 1 is 3, expected 2");

  auto symbol = in.Run({{"a", a}, {"b", F32(Shape{3, 1}, {1, 2, 3})}});
  EXPECT_EQ(Message(symbol.status()), "symbol 'seq' has two sizes: feed 'a' dim 0 is 2, but feed 'b' dim 0 is 3");

  Tensor short_data = a;
  short_data.data.resize(12);
  auto bytes = in.Run({{"a", short_data}, {"b", b}});
  EXPECT_EQ(Message(bytes.status()), "feed 'a': f32[2, 2] needs 16 bytes, the tensor holds 12");

  Tensor dynamic{TensorDesc{DataType::kFloat32, Shape({Dim::Symbolic("seq"), Dim::Static(2)})}, {}};
  auto dyn = in.Run({{"a", dynamic}, {"b", b}});
  EXPECT_EQ(Message(dyn.status()), "feed 'a' has the dynamic shape [seq, 2]; a tensor needs a static shape");

  // After all the failures the interpreter still runs.
  EXPECT_TRUE(in.Run({{"a", a}, {"b", b}}).ok());
}

TEST_F(InterpreterTest, CreateRejectsGraphsItCannotRunNamingTheNode) {
  auto unknown = Parse(R"pb(
    name: "g"
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { } } } }
    node { name: "f" op: "Frobnicate" input: "x" }
    node { name: "out" op: "NetOutput" input: "f" })pb");
  auto a = Interpreter::Create(*unknown);
  EXPECT_EQ(a.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Message(a.status()), "graph 'g': node 'f' (Frobnicate): unknown op type 'Frobnicate'");

  auto no_kernel = Parse(R"pb(
    name: "g"
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { } } } }
    node { name: "k" op: "TestNoKernel" input: "x" }
    node { name: "out" op: "NetOutput" input: "k" })pb");
  auto b = Interpreter::Create(*no_kernel);
  EXPECT_EQ(b.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(Message(b.status()),
            "graph 'g': node 'k' (TestNoKernel) has no reference kernel; the interpreter cannot run it");

  auto cyclic = Parse(R"pb(
    name: "g"
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { } } } }
    node { name: "p" op: "Add" input: "x" input: "q" }
    node { name: "q" op: "Relu" input: "p" }
    node { name: "out" op: "NetOutput" input: "q" })pb");
  auto c = Interpreter::Create(*cyclic);
  EXPECT_NE(Message(c.status()).find("cycle: q -> p -> q"), std::string::npos) << c.status();

  auto no_output = Parse(R"pb(
    name: "g"
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { } } } }
    node { name: "r" op: "Relu" input: "x" })pb");
  EXPECT_EQ(Message(Interpreter::Create(*no_output).status()), "graph 'g' has no NetOutput node");

  auto undeclared = Parse(R"pb(
    name: "g"
    node { name: "x" op: "Data" }
    node { name: "out" op: "NetOutput" input: "x" })pb");
  EXPECT_EQ(Message(Interpreter::Create(*undeclared).status()), "graph 'g': node 'x' (Data): missing attribute 'dtype'");
}

TEST_F(InterpreterTest, KernelErrorsAtRunTimeNameTheNode) {
  auto g = Parse(R"pb(
    name: "g"
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { symbol: "n" } } } } }
    node { name: "y" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { symbol: "m" } } } } }
    node { name: "sum" op: "Add" input: "x" input: "y" }
    node { name: "out" op: "NetOutput" input: "sum" })pb");
  auto interp = Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  // n and m are different symbols: their sizes meet only at run time, in the Add.
  auto bad = (*interp)->Run({{"x", F32(Shape{2}, {1, 2})}, {"y", F32(Shape{3}, {1, 2, 3})}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(Message(bad.status()), "graph 'g': node 'sum': shapes [2] and [3] do not broadcast");
  auto good = (*interp)->Run({{"x", F32(Shape{3}, {1, 2, 3})}, {"y", F32(Shape{1}, {1})}});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(Floats((*good)[0]), (std::vector<float>{2, 3, 4}));
}

// ---- Variables ----------------------------------------------------------------------------------

constexpr std::string_view kCounter = R"pb(
name: "counter"
node {
  name: "x" op: "Data"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: 2 } } } }
}
node {
  name: "v" op: "Variable"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: 2 } } } }
  attr { key: "value" value { tensor { dtype: DT_FLOAT shape { dim { size: 2 } } float_val: 1 float_val: 2 } } }
}
node { name: "acc" op: "TestAccumulate" input: "v" input: "x" }
node { name: "checked" op: "TestCheckNonNegative" input: "acc" }
node { name: "late_read" op: "Relu" input: "v" input: "^acc" }
node { name: "out" op: "NetOutput" input: "checked" input: "late_read" }
)pb";

TEST_F(InterpreterTest, AnInPlaceOpOverAVariableUpdatesItWhenTheRunSucceeds) {
  auto g = Parse(kCounter);
  ASSERT_NE(g, nullptr);
  auto interp = Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  Interpreter& in = **interp;
  EXPECT_EQ(in.VariableNames(), (std::vector<std::string>{"v"}));
  EXPECT_EQ(Floats(in.GetVariable("v").value()), (std::vector<float>{1, 2}));

  auto first = in.Run({{"x", F32(Shape{2}, {10, 20})}});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Floats((*first)[0]), (std::vector<float>{11, 22}));
  // A read after the update, in the same run, still sees the value from the start of the run.
  EXPECT_EQ(Floats((*first)[1]), (std::vector<float>{1, 2}));
  EXPECT_EQ(Floats(in.GetVariable("v").value()), (std::vector<float>{11, 22}));

  auto second = in.Run({{"x", F32(Shape{2}, {1, 1})}});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Floats((*second)[0]), (std::vector<float>{12, 23}));
  EXPECT_EQ(Floats((*second)[1]), (std::vector<float>{11, 22}));

  // A run that fails after the update changes nothing.
  auto failed = in.Run({{"x", F32(Shape{2}, {-100, 0})}});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(Message(failed.status()), "graph 'counter': node 'checked': element 0 is negative");
  EXPECT_EQ(Floats(in.GetVariable("v").value()), (std::vector<float>{12, 23}));

  ASSERT_TRUE(in.SetVariable("v", F32(Shape{2}, {0, 0})).ok());
  auto third = in.Run({{"x", F32(Shape{2}, {5, 6})}});
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(Floats((*third)[0]), (std::vector<float>{5, 6}));

  EXPECT_EQ(Message(in.SetVariable("v", F32(Shape{3}, {0, 0, 0}))),
            "Variable 'v' is f32[2] (8 bytes), the new value is f32[3] (12 bytes)");
  EXPECT_EQ(in.SetVariable("w", F32(Shape{2}, {0, 0})).code(), StatusCode::kNotFound);
  EXPECT_EQ(Message(in.GetVariable("w").status()), "graph 'counter' has no Variable 'w' (Variables: v)");
}

TEST_F(InterpreterTest, AVariableWithoutAValueStartsAtZeroAndTwoUpdatesInOneRunAreAnError) {
  auto g = Parse(R"pb(
    name: "twice"
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } } } } }
    node { name: "v" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } } } } }
    node { name: "first" op: "TestAccumulate" input: "v" input: "x" }
    node { name: "second" op: "TestAccumulate" input: "v" input: "x" }
    node { name: "out" op: "NetOutput" input: "first" input: "second" })pb");
  ASSERT_NE(g, nullptr);
  auto interp = Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  EXPECT_EQ(Floats((*interp)->GetVariable("v").value()), (std::vector<float>{0, 0}));
  auto run = (*interp)->Run({{"x", F32(Shape{2}, {1, 1})}});
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(Message(run.status()), "Variable 'v' is updated twice in one run: by 'first' and by 'second'");
  EXPECT_EQ(Floats((*interp)->GetVariable("v").value()), (std::vector<float>{0, 0}));
}

constexpr std::string_view kKvCache = R"pb(
name: "decode"
node {
  name: "rows" op: "Data"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: 1 } dim { symbol: "t" } dim { size: 2 } } } }
}
node {
  name: "pos" op: "Data"
  attr { key: "dtype" value { type: DT_INT32 } }
  attr { key: "shape" value { shape { dim { size: 1 } } } }
}
node {
  name: "cache" op: "Variable"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: 1 } dim { size: 4 } dim { size: 2 } } } }
}
node { name: "write" op: "KvCacheWrite" input: "cache" input: "rows" input: "pos" }
node { name: "out" op: "NetOutput" input: "write" }
)pb";

TEST_F(InterpreterTest, KvCacheWriteOverAVariableGrowsTheCacheAcrossRuns) {
  auto def = OpRegistry::Global().Find("KvCacheWrite");
  if (!def.ok() || (*def)->inplace.empty() || (*def)->inplace[0] != 0) GTEST_SKIP() << "KvCacheWrite is not registered";
  auto g = Parse(kKvCache);
  ASSERT_NE(g, nullptr);
  auto interp = Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  auto position = [](std::int32_t p) {
    Tensor t{TensorDesc{DataType::kInt32, Shape{1}}, std::vector<std::uint8_t>(4)};
    std::memcpy(t.data.data(), &p, 4);
    return t;
  };
  // A prompt of two rows, then one row per step.
  auto prompt = (*interp)->Run({{"rows", F32(Shape{1, 2, 2}, {1, 2, 3, 4})}, {"pos", position(0)}});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(Floats((*prompt)[0]), (std::vector<float>{1, 2, 3, 4, 0, 0, 0, 0}));
  auto step = (*interp)->Run({{"rows", F32(Shape{1, 1, 2}, {5, 6})}, {"pos", position(2)}});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(Floats((*step)[0]), (std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0}));
  EXPECT_EQ(Floats((*interp)->GetVariable("cache").value()), (std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0}));
  // Past the end of the cache: the kernel's error, and the cache keeps its value.
  auto full = (*interp)->Run({{"rows", F32(Shape{1, 2, 2}, {7, 8, 9, 10})}, {"pos", position(3)}});
  ASSERT_FALSE(full.ok());
  EXPECT_NE(Message(full.status()).find("node 'write' (KvCacheWrite): position 3 + 2 new rows"), std::string::npos)
      << full.status();
  EXPECT_EQ(Floats((*interp)->GetVariable("cache").value()), (std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0}));
}

// ---- PartitionedCall ----------------------------------------------------------------------------

constexpr std::string_view kCall = R"pb(
name: "root"
node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "shape" value { shape { dim { symbol: "n" } } } } }
node { name: "y" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "shape" value { shape { dim { symbol: "n" } } } } }
node { name: "stage0" op: "PartitionedCall" input: "x" input: "y"
       attr { key: "f" value { subgraph: "diff" } } attr { key: "_stage" value { i: 0 } } }
node { name: "r" op: "Relu" input: "stage0:0" }
node { name: "out" op: "NetOutput" input: "r" input: "stage0:1" }
subgraph {
  name: "diff"
  node { name: "a" op: "Data" attr { key: "index" value { i: 1 } } }
  node { name: "b" op: "Data" attr { key: "index" value { i: 0 } } }
  node { name: "d" op: "Sub" input: "a" input: "b" }
  node { name: "sub_out" op: "NetOutput" input: "d" input: "a" }
}
)pb";

TEST_F(InterpreterTest, PartitionedCallRunsItsSubgraphWithDataNodesInIndexOrder) {
  auto g = Parse(kCall);
  ASSERT_NE(g, nullptr);
  auto interp = Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  // Call input 0 (x) feeds "b" (index 0), input 1 (y) feeds "a": d = y - x.
  auto out = (*interp)->Run({{"x", F32(Shape{3}, {1, 5, 2})}, {"y", F32(Shape{3}, {4, 4, 4})}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ(Floats((*out)[0]), (std::vector<float>{3, 0, 2}));
  EXPECT_EQ(Floats((*out)[1]), (std::vector<float>{4, 4, 4}));
}

TEST_F(InterpreterTest, PartitionedCallErrorsNameTheCallAndTheSubgraph) {
  auto g = Parse(R"pb(
    name: "root"
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } } } } }
    node { name: "call" op: "PartitionedCall" input: "x" attr { key: "f" value { subgraph: "s" } } }
    node { name: "out" op: "NetOutput" input: "call" }
    subgraph {
      name: "s"
      node { name: "in" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
             attr { key: "shape" value { shape { dim { size: 3 } } } } }
      node { name: "o" op: "NetOutput" input: "in" }
    })pb");
  ASSERT_NE(g, nullptr);
  auto interp = Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  auto run = (*interp)->Run({{"x", F32(Shape{2}, {1, 2})}});
  EXPECT_EQ(Message(run.status()),
            "graph 'root': PartitionedCall 'call' input 0 is f32[2], but Data node 'in' of subgraph 's' declares "
            "f32[3]: dim 0 is 2, expected 3");

  auto arity = Parse(R"pb(
    name: "root"
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } } } } }
    node { name: "call" op: "PartitionedCall" input: "x" input: "x" attr { key: "f" value { subgraph: "s" } } }
    node { name: "out" op: "NetOutput" input: "call" }
    subgraph { name: "s" node { name: "in" op: "Data" } node { name: "o" op: "NetOutput" input: "in" } })pb");
  ASSERT_NE(arity, nullptr);
  EXPECT_EQ(Message(Interpreter::Create(*arity).status()),
            "graph 'root': node 'call' (PartitionedCall): 2 inputs, but subgraph 's' has 1 Data nodes");
}

TEST_F(InterpreterTest, AVariableInsideASubgraphSharesStateByName) {
  auto g = Parse(R"pb(
    name: "root"
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "call" op: "PartitionedCall" input: "x" attr { key: "f" value { subgraph: "s" } } }
    node { name: "total" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "out" op: "NetOutput" input: "call" input: "total" }
    subgraph {
      name: "s"
      node { name: "in" op: "Data" }
      node { name: "total" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
             attr { key: "shape" value { shape { dim { size: 1 } } } } }
      node { name: "acc" op: "TestAccumulate" input: "total" input: "in" }
      node { name: "o" op: "NetOutput" input: "acc" }
    })pb");
  ASSERT_NE(g, nullptr);
  auto interp = Interpreter::Create(*g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  for (float expected : {3.f, 6.f, 9.f}) {
    auto out = (*interp)->Run({{"x", F32(Shape{1}, {3})}});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(Floats((*out)[0]), std::vector<float>{expected});
    EXPECT_EQ(Floats((*out)[1]), std::vector<float>{expected - 3});  // the root reads the start-of-run value
  }
  EXPECT_EQ(Floats((*interp)->GetVariable("total").value()), std::vector<float>{9});
}

}  // namespace
}  // namespace npuflow::graph
