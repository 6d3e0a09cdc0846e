// plan-memory against the independent verifier (lowering/memory_plan.h) on random DAGs, in single
// and multi-stream modes; and the verifier catching a plan that is wrong.
#include <gtest/gtest.h>

#include "graph/ops/op_registry.h"
#include "synthetic/graphs.h"
#include "graph/ir/text_format.h"
#include "lowering/compiler.h"
#include "lowering/memory_plan.h"

namespace npuflow::lowering {
namespace {

using graph::Segment;

struct Case {
  int nodes;
  int max_fan_in;
  CompileOptions::StreamMode mode;
  int max_parallel;
};

TEST(MemoryPlan, RandomDagsNeverShareBytesBetweenOverlappingLifetimes) {
  graph::RegisterBuiltinOps();
  const Case cases[] = {
      {40, 1, CompileOptions::StreamMode::kSingle, 1},  {60, 2, CompileOptions::StreamMode::kSingle, 1},
      {60, 2, CompileOptions::StreamMode::kMulti, 2},   {120, 2, CompileOptions::StreamMode::kMulti, 4},
      {200, 2, CompileOptions::StreamMode::kMulti, 8},  {200, 1, CompileOptions::StreamMode::kMulti, 3},
  };
  int compiled = 0;
  for (const Case& c : cases) {
    for (std::uint64_t seed = 1; seed <= 25; ++seed) {
      synthetic::RandomDagOptions dag{.nodes = c.nodes, .inputs = 2, .max_fan_in = c.max_fan_in, .locality = 6, .seed = seed};
      auto g = synthetic::MakeRandomDag(dag);
      ASSERT_TRUE(g.ok()) << g.status();
      CompileOptions options;
      options.stream_mode = c.mode;
      options.max_parallel = c.max_parallel;
      auto model = CompileV1(std::move(*g), options);
      ASSERT_TRUE(model.ok()) << model.status();
      Status verified = VerifyMemoryPlan(*model);
      ASSERT_TRUE(verified.ok()) << "nodes " << c.nodes << " seed " << seed << " streams " << model->streams.size()
                                 << ": " << verified;
      const std::uint64_t peak =
          model->memory.bytes(Segment::kFeatureMap) + model->memory.bytes(Segment::kFixedFeatureMap);
      EXPECT_LT(peak, model->memory.feature_map_tensor_bytes) << "nodes " << c.nodes << " seed " << seed;
      if (c.mode == CompileOptions::StreamMode::kMulti && c.max_parallel > 1) {
        EXPECT_GT(model->streams.size(), 1u);
      }
      ++compiled;
    }
  }
  EXPECT_EQ(compiled, 150);
}

TEST(MemoryPlan, VerifierCatchesSharedBytesOnParallelStreams) {
  graph::RegisterBuiltinOps();
  auto g = synthetic::MakeRandomDag({.nodes = 30, .inputs = 1, .max_fan_in = 2, .locality = 4, .seed = 7});
  ASSERT_TRUE(g.ok());
  auto model = CompileV1(std::move(*g), {});
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(VerifyMemoryPlan(*model).ok());
  // A task whose argument is not where the plan put its tensor is caught.
  [&] {
    for (auto& s : model->streams)
      for (auto& t : s.tasks)
        if (t.type == graph::TaskType::kKernel && t.args[0].segment == Segment::kFeatureMap) {
          const auto saved = t.args[0];
          t.args[0].offset += 512;
          Status moved = VerifyMemoryPlan(*model);
          EXPECT_NE(moved.message().find("argument 0 points at"), std::string_view::npos) << moved;
          t.args[0] = saved;
          return;
        }
    ADD_FAILURE() << "no kernel reads the feature map";
  }();
  // Move every feature-map tensor, and the arguments naming them, to offset 0: some pair is now
  // live at once.
  for (auto& t : model->memory.tensors)
    if (t.ref.segment == Segment::kFeatureMap) t.ref.offset = 0;
  for (auto& s : model->streams)
    for (auto& t : s.tasks)
      for (auto& a : t.args)
        if (a.segment == Segment::kFeatureMap) a.offset = 0;
  Status broken = VerifyMemoryPlan(*model);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.message().find("share bytes but their uses are not ordered"), std::string_view::npos) << broken;
}

TEST(MemoryPlan, LongChainsVerifyInLinearTime) {
  // 20,000 tensors alternate between two offsets: pairwise checking would be 10^8 comparisons.
  graph::RegisterBuiltinOps();
  auto g = synthetic::MakeChainGraph(20'000);
  ASSERT_TRUE(g.ok());
  auto model = CompileV1(std::move(*g), {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->memory.bytes(Segment::kFeatureMap), 2 * kMemoryAlignment);
  EXPECT_TRUE(VerifyMemoryPlan(*model).ok());
}

TEST(MemoryPlan, InPlaceWritesWaitForReadersOnOtherStreams) {
  // x is read by b (stream 0) and then written in place by the KV-cache update (stream 1): the
  // update may not take x's bytes unless b is ordered before it, and it is not.
  const char* text = R"pb(
    node { name: "d" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 1 } dim { size: 8 } dim { size: 4 } } } } }
    node { name: "rows" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 1 } dim { size: 1 } dim { size: 4 } } } } }
    node { name: "pos" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "x" op: "Relu" input: "d" }
    node { name: "b" op: "Tanh" input: "x" }
    node { name: "c" op: "KvCacheWrite" input: "x" input: "rows" input: "pos" attr { key: "_independent" value { b: true } } }
    node { name: "out" op: "NetOutput" input: "b" input: "c" }
  )pb";
  graph::RegisterBuiltinOps();
  auto g = graph::ParseGraphText(text, "inplace.pbtxt");
  ASSERT_TRUE(g.ok()) << g.status();
  auto model = CompileV1(std::move(*g), {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(VerifyMemoryPlan(*model).ok()) << VerifyMemoryPlan(*model);
  const graph::TensorPlacement* x = nullptr;
  const graph::TensorPlacement* c = nullptr;
  for (const auto& t : model->memory.tensors) {
    if (t.node == "x") x = &t;
    if (t.node == "c") c = &t;
  }
  ASSERT_TRUE(x && c);
  EXPECT_FALSE(x->ref == c->ref);
}

TEST(MemoryPlan, VerifierSeesThroughAViewToItsInputsOtherReaders) {
  // x is read by b on another stream and, through the view v, by a. Move y (written after a) onto
  // x's bytes: b's read of x and y's write are not ordered, although x -> v and v -> y each are.
  const char* text = R"pb(
    node { name: "d" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 1 } dim { size: 768 } } } } }
    node { name: "x" op: "Relu" input: "d" }
    node { name: "v" op: "Reshape" input: "x" attr { key: "shape" value { ints { val: 768 } } } }
    node { name: "a" op: "Tanh" input: "v" }
    node { name: "b" op: "Gelu" input: "x" attr { key: "_independent" value { b: true } } }
    node { name: "y" op: "Relu" input: "a" }
    node { name: "z" op: "Tanh" input: "y" }
    node { name: "out" op: "NetOutput" input: "z" input: "b" }
  )pb";
  graph::RegisterBuiltinOps();
  auto g = graph::ParseGraphText(text, "view.pbtxt");
  ASSERT_TRUE(g.ok()) << g.status();
  CompileOptions options;
  options.stream_mode = CompileOptions::StreamMode::kMulti;
  options.max_parallel = 2;
  auto model = CompileV1(std::move(*g), options);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(VerifyMemoryPlan(*model).ok()) << VerifyMemoryPlan(*model);
  ASSERT_TRUE(model->graph->FindNode("v")->op().AttrOr<bool>("_view", false).value());
  ASSERT_NE(model->graph->FindNode("b")->op().AttrOr<std::int64_t>("_stream", -1).value(),
            model->graph->FindNode("y")->op().AttrOr<std::int64_t>("_stream", -1).value());
  graph::MemRef x_ref, y_ref;
  for (const auto& t : model->memory.tensors) {
    if (t.node == "x" && t.output == 0) x_ref = t.ref;
    if (t.node == "y" && t.output == 0) y_ref = t.ref;
  }
  ASSERT_EQ(x_ref.segment, Segment::kFeatureMap);
  ASSERT_EQ(y_ref.segment, Segment::kFeatureMap);
  for (auto& t : model->memory.tensors)
    if (t.node == "y" && t.output == 0) t.ref = x_ref;
  for (auto& s : model->streams)
    for (auto& t : s.tasks)
      for (auto& arg : t.args)
        if (arg == y_ref) arg = x_ref;
  Status broken = VerifyMemoryPlan(*model);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.message().find("share bytes but their uses are not ordered"), std::string_view::npos) << broken;
}

TEST(MemoryPlan, VerifierCatchesAMissingEvent) {
  graph::RegisterBuiltinOps();
  auto g = synthetic::MakeRandomDag({.nodes = 40, .inputs = 1, .max_fan_in = 2, .locality = 4, .seed = 3});
  ASSERT_TRUE(g.ok());
  auto model = CompileV1(std::move(*g), {});
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_GT(model->event_count, 0u);
  // Drop one wait: its reader is no longer ordered after the writer on the other stream.
  bool dropped = false;
  for (auto& s : model->streams) {
    for (auto it = s.tasks.begin(); it != s.tasks.end() && !dropped; ++it)
      if (it->type == graph::TaskType::kEventWait) {
        s.tasks.erase(it);
        dropped = true;
        break;
      }
  }
  ASSERT_TRUE(dropped);
  EXPECT_FALSE(VerifyMemoryPlan(*model).ok());
}

TEST(MemoryPlan, SegmentsForWeightsInputsOutputsAndInPlaceOps) {
  // Const weights, two inputs, one output read twice by NetOutput (the second read is a copy).
  const char* text = R"pb(
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 4 } } } } attr { key: "index" value { i: 1 } } }
    node { name: "y" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 4 } } } } attr { key: "index" value { i: 0 } } }
    node { name: "w" op: "Const" attr { key: "value" value { tensor { dtype: DT_FLOAT shape { dim { size: 4 } }
           float_val: 1 float_val: 2 float_val: 3 float_val: 4 } } } }
    node { name: "a" op: "Mul" input: "x" input: "w" }
    node { name: "b" op: "Add" input: "a" input: "y" }
    node { name: "out" op: "NetOutput" input: "b" input: "b" input: "w" }
  )pb";
  auto out = RunPassesOnText(text, V1Pipeline());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NE(out->find("y = Data() -> f32[4] {_engine=\"host\", _mem=[\"input+0\"]"), std::string::npos) << *out;
  EXPECT_NE(out->find("x = Data() -> f32[4] {_engine=\"host\", _mem=[\"input+512\"]"), std::string::npos) << *out;
  EXPECT_NE(out->find("w = Const() -> f32[4] {_engine=\"host\", _mem=[\"weights+0\"]"), std::string::npos) << *out;
  EXPECT_NE(out->find("_mem=[\"output+0\"]"), std::string::npos) << *out;
  // Output 1 is b again and output 2 is a weight: both are copies.
  EXPECT_NE(out->find("memcpy b output+0 -> output+512 (16 bytes)"), std::string::npos) << *out;
  EXPECT_NE(out->find("memcpy w weights+0 -> output+1024 (16 bytes)"), std::string::npos) << *out;
}

TEST(MemoryPlan, DynamicShapesAreRefusedByName) {
  const char* text = R"pb(
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { symbol: "seq" } dim { size: 4 } } } } }
    node { name: "r" op: "Relu" input: "x" }
    node { name: "out" op: "NetOutput" input: "r" }
  )pb";
  auto out = RunPassesOnText(text, V1Pipeline());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "plan-memory: model output 'r:0' has dynamic shape f32[seq, 4]: the v1 task sink needs static shapes (RT2.0 runs dynamic ones: --runtime v2 or auto)");
}

}  // namespace
}  // namespace npuflow::lowering
