// Text in, text out: each pass on a small graph, its result compared with the expected listing.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "lowering/compiler.h"
#include "lowering/model_text.h"
#include "graph/ir/text_format.h"

namespace npuflow::lowering {
namespace {

// A Data node of f32 and the given dims, in the text format.
std::string Data(const std::string& name, std::initializer_list<int> dims) {
  std::string shape;
  for (int d : dims) shape += "dim { size: " + std::to_string(d) + " } ";
  return "node { name: \"" + name + "\" op: \"Data\" attr { key: \"dtype\" value { type: DT_FLOAT } } " +
         "attr { key: \"shape\" value { shape { " + shape + "} } } }\n";
}
std::string Op(const std::string& name, const std::string& op, std::initializer_list<std::string> inputs,
               const std::string& extra = "") {
  std::string out = "node { name: \"" + name + "\" op: \"" + op + "\"";
  for (const std::string& in : inputs) out += " input: \"" + in + "\"";
  return out + " " + extra + "}\n";
}
std::string Const(const std::string& name, std::initializer_list<float> values) {
  std::string vals;
  for (float v : values) vals += "float_val: " + std::to_string(v) + " ";
  return "node { name: \"" + name + "\" op: \"Const\" attr { key: \"value\" value { tensor { dtype: DT_FLOAT " +
         "shape { dim { size: " + std::to_string(values.size()) + " } } " + vals + "} } } }\n";
}

std::string RunText(const std::string& text, std::vector<std::string> passes, CompileOptions options = {}) {
  auto out = RunPassesOnText(text, passes, options);
  if (!out.ok()) return "error: " + std::string(out.status().message());
  return *out;
}

std::vector<std::string> Upto(const std::string& last) {
  std::vector<std::string> out;
  for (const std::string& p : V1Pipeline()) {
    out.push_back(p);
    if (p == last) break;
  }
  return out;
}

const std::string kDiamond = Data("x", {2, 3}) + Op("a", "Relu", {"x"}) + Op("b", "Tanh", {"x"}) +
                             Op("c", "Add", {"a", "b"}) + Op("out", "NetOutput", {"c"});

TEST(Passes, ValidateKeepsAValidGraph) {
  EXPECT_EQ(RunText(kDiamond, {"validate"}), R"(graph "graph"
  x = Data() {dtype=f32, shape=[2, 3]}
  a = Relu(x)
  b = Tanh(x)
  c = Add(a, b)
  out = NetOutput(c)
)");
}

TEST(Passes, InferShapesFillsOutputs) {
  EXPECT_EQ(RunText(kDiamond, {"validate", "infer-shapes"}), R"(graph "graph"
  x = Data() -> f32[2, 3] {dtype=f32, shape=[2, 3]}
  a = Relu(x) -> f32[2, 3]
  b = Tanh(x) -> f32[2, 3]
  c = Add(a, b) -> f32[2, 3]
  out = NetOutput(c) -> f32[2, 3]
)");
}

TEST(Passes, ValidateUnknownOp) {
  EXPECT_EQ(RunText(Data("x", {2, 3}) + Op("y", "Foo", {"x"}) + Op("out", "NetOutput", {"y"}), {"validate"}),
            "error: validate: node 'y': unknown op type 'Foo'");
}

TEST(Passes, ValidateInputCount) {
  EXPECT_EQ(RunText(Data("x", {2, 3}) + Op("y", "Add", {"x"}) + Op("out", "NetOutput", {"y"}), {"validate"}),
            "error: validate: node 'y' (Add): 1 inputs, expected 2");
}

TEST(Passes, ValidateNoNetOutput) {
  EXPECT_EQ(RunText(Data("x", {2, 3}) + Op("y", "Relu", {"x"}), {"validate"}),
            "error: validate: graph 'graph' has no NetOutput node: it computes nothing");
}

TEST(Passes, ValidateMissingAttribute) {
  EXPECT_EQ(RunText(Op("x", "Data", {}) + Op("out", "NetOutput", {"x"}), {"validate"}),
            "error: validate: node 'x' (Data): missing attribute 'dtype'");
}

TEST(Passes, InferShapesBroadcastError) {
  EXPECT_EQ(RunText(Data("x", {2, 3}) + Data("w", {4}) + Op("y", "Add", {"x", "w"}) + Op("out", "NetOutput", {"y"}), Upto("infer-shapes")),
            "error: infer-shapes: node 'y': shapes [2, 3] and [4] do not broadcast");
}

TEST(Passes, InferShapesBroadcasts) {
  EXPECT_EQ(RunText(Data("x", {2, 3}) + Data("w", {3}) + Op("y", "Add", {"x", "w"}) + Op("out", "NetOutput", {"y"}), Upto("infer-shapes")), R"(graph "graph"
  x = Data() -> f32[2, 3] {dtype=f32, shape=[2, 3]}
  w = Data() -> f32[3] {dtype=f32, shape=[3]}
  y = Add(x, w) -> f32[2, 3]
  out = NetOutput(y) -> f32[2, 3]
)");
}

TEST(Passes, ConstFoldFoldsConstSubgraphs) {
  EXPECT_EQ(RunText(Data("x", {2}) + Const("c1", {1, 2}) + Const("c2", {3, 4}) + Op("s", "Add", {"c1", "c2"}) + Op("y", "Mul", {"x", "s"}) + Op("out", "NetOutput", {"y"}), Upto("const-fold")), R"(graph "graph"
  x = Data() -> f32[2] {dtype=f32, shape=[2]}
  c1 = Const() -> f32[2] {value=f32[2]{1, 2}}
  c2 = Const() -> f32[2] {value=f32[2]{3, 4}}
  s = Const() -> f32[2] {value=f32[2]{4, 6}}
  y = Mul(x, s) -> f32[2]
  out = NetOutput(y) -> f32[2]
)");
}

TEST(Passes, DeadCodeKeepsDataAndOutputs) {
  EXPECT_EQ(RunText(Data("x", {2}) + Data("unused", {2}) + Op("a", "Relu", {"x"}) + Op("dead", "Tanh", {"a"}) + Op("dead2", "Relu", {"dead"}) + Op("out", "NetOutput", {"a"}), Upto("dead-code-elimination")), R"(graph "graph"
  x = Data() -> f32[2] {dtype=f32, shape=[2]}
  unused = Data() -> f32[2] {dtype=f32, shape=[2]}
  a = Relu(x) -> f32[2]
  out = NetOutput(a) -> f32[2]
)");
}

TEST(Passes, AssignStreamsBranchesOnNewStreams) {
  EXPECT_EQ(RunText(kDiamond, Upto("assign-streams")), R"(graph "graph"
  x = Data() -> f32[2, 3] {_engine="host", dtype=f32, shape=[2, 3]}
  a = Relu(x) -> f32[2, 3] {_engine="AICore", _stream=0}
  b = Tanh(x) -> f32[2, 3] {_engine="AICore", _stream=1}
  c = Add(a, b) -> f32[2, 3] {_engine="AICore", _stream=1}
  out = NetOutput(c) -> f32[2, 3] {_engine="host"}
)");
}

TEST(Passes, AssignStreamsSingleMode) {
  CompileOptions single;
  single.stream_mode = CompileOptions::StreamMode::kSingle;
  EXPECT_EQ(RunText(kDiamond, Upto("assign-streams"), single), R"(graph "graph"
  x = Data() -> f32[2, 3] {_engine="host", dtype=f32, shape=[2, 3]}
  a = Relu(x) -> f32[2, 3] {_engine="AICore", _stream=0}
  b = Tanh(x) -> f32[2, 3] {_engine="AICore", _stream=0}
  c = Add(a, b) -> f32[2, 3] {_engine="AICore", _stream=0}
  out = NetOutput(c) -> f32[2, 3] {_engine="host"}
)");
}

TEST(Passes, InsertEventsOnePairPerCrossStreamEdge) {
  EXPECT_EQ(RunText(kDiamond, Upto("insert-events")), R"(graph "graph"
  x = Data() -> f32[2, 3] {_engine="host", dtype=f32, shape=[2, 3]}
  a = Relu(x) -> f32[2, 3] {_engine="AICore", _send_events=[0], _stream=0}
  b = Tanh(x) -> f32[2, 3] {_engine="AICore", _stream=1}
  c = Add(a, b) -> f32[2, 3] {_engine="AICore", _recv_events=[0], _stream=1}
  out = NetOutput(c) -> f32[2, 3] {_engine="host"}
)");
}

TEST(Passes, InsertEventsNoRedundantPair) {
  // The naive rule would pair a -> c and a -> d; c already waited for a on d's stream.
  const std::string redundant = Data("x", {2}) + Op("a", "Relu", {"x"}) + Op("b", "Tanh", {"x"}) +
                                Op("c", "Add", {"a", "b"}) + Op("d", "Add", {"c", "a"}) + Op("out", "NetOutput", {"d"});
  EXPECT_EQ(RunText(redundant, Upto("insert-events")), R"(graph "graph"
  x = Data() -> f32[2] {_engine="host", dtype=f32, shape=[2]}
  a = Relu(x) -> f32[2] {_engine="AICore", _send_events=[0], _stream=0}
  b = Tanh(x) -> f32[2] {_engine="AICore", _stream=1}
  c = Add(a, b) -> f32[2] {_engine="AICore", _recv_events=[0], _stream=1}
  d = Add(c, a) -> f32[2] {_engine="AICore", _stream=1}
  out = NetOutput(d) -> f32[2] {_engine="host"}
)");
}

TEST(Passes, PlanMemoryReusesAlongAChain) {
  const std::string chain = Data("x", {2, 64}) + Op("r1", "Relu", {"x"}) + Op("r2", "Tanh", {"r1"}) +
                            Op("r3", "Relu", {"r2"}) + Op("r4", "Tanh", {"r3"}) + Op("out", "NetOutput", {"r4"});
  EXPECT_EQ(RunText(chain, Upto("plan-memory")), R"(graph "graph"
  x = Data() -> f32[2, 64] {_engine="host", _mem=["input+0"], dtype=f32, shape=[2, 64]}
  r1 = Relu(x) -> f32[2, 64] {_engine="AICore", _mem=["fm+0"], _stream=0}
  r2 = Tanh(r1) -> f32[2, 64] {_engine="AICore", _mem=["fm+512"], _stream=0}
  r3 = Relu(r2) -> f32[2, 64] {_engine="AICore", _mem=["fm+0"], _stream=0}
  r4 = Tanh(r3) -> f32[2, 64] {_engine="AICore", _mem=["output+0"], _stream=0}
  out = NetOutput(r4) -> f32[2, 64] {_engine="host"}

# memory plan
# segment    bytes
# weights    0
# fixed_fm   0
# fm         1024
# variables  0
# input      512
# output     512
# tiling     0
# feature map peak 1024 bytes (fixed 0 + refreshable 1024) vs 1536 bytes for all its tensors (66.7%)
#   x:0 input+0 512 bytes, live 0..1
#   r1:0 fm+0 512 bytes, live 1..2
#   r2:0 fm+512 512 bytes, live 2..3
#   r3:0 fm+0 512 bytes, live 3..4
#   r4:0 output+0 512 bytes, live 4..5
)");
}

TEST(Passes, GenTasksEmitsPerStreamLists) {
  EXPECT_EQ(RunText(kDiamond, Upto("gen-tasks")), R"(graph "graph"
  x = Data() -> f32[2, 3] {_engine="host", _mem=["input+0"], dtype=f32, shape=[2, 3]}
  a = Relu(x) -> f32[2, 3] {_engine="AICore", _mem=["fm+0"], _send_events=[0], _stream=0}
  b = Tanh(x) -> f32[2, 3] {_engine="AICore", _mem=["fm+512"], _stream=1}
  c = Add(a, b) -> f32[2, 3] {_engine="AICore", _mem=["output+0"], _recv_events=[0], _stream=1}
  out = NetOutput(c) -> f32[2, 3] {_engine="host"}

# memory plan
# segment    bytes
# weights    0
# fixed_fm   0
# fm         1024
# variables  0
# input      512
# output     512
# tiling     832
# feature map peak 1024 bytes (fixed 0 + refreshable 1024) vs 1024 bytes for all its tensors (100.0%)
#   x:0 input+0 512 bytes, live 0..2
#   a:0 fm+0 512 bytes, live 1..3
#   b:0 fm+512 512 bytes, live 2..3
#   c:0 output+0 512 bytes, live 3..4

# stream 0 (AICore): 2 tasks
#   0 kernel a op.Relu block_dim=1 tiling_key=0 args=[input+0, fm+0, none, tiling+0]
#   1 event_record e0 (a)
# stream 1 (AICore): 3 tasks
#   0 kernel b op.Tanh block_dim=1 tiling_key=0 args=[input+0, fm+512, none, tiling+256]
#   1 event_wait e0 (c)
#   2 kernel c op.Add block_dim=1 tiling_key=0 args=[fm+0, fm+512, output+0, none, tiling+512]
)");
}

// fuse-epilogues: the GELU and the residual Add that only finish a MatMul become its epilogue;
// an Add that broadcasts, and a Gelu whose MatMul has a second reader, stay.
// A [rows, cols] f32 Const of 0.5s.
std::string Const2(const std::string& name, int rows, int cols) {
  std::string vals;
  for (int i = 0; i < rows * cols; ++i) vals += "float_val: 0.5 ";
  return "node { name: \"" + name + "\" op: \"Const\" attr { key: \"value\" value { tensor { dtype: DT_FLOAT " +
         "shape { dim { size: " + std::to_string(rows) + " } dim { size: " + std::to_string(cols) + " } } " + vals +
         "} } } }\n";
}
const std::string kMlp = Data("x", {1, 4}) + Const2("w1", 2, 4) + Const("b1", {1, 2}) + Const2("w2", 2, 4) +
                         Const("row", {1, 2, 3, 4}) +
                         Op("fc", "MatMul", {"x", "w1", "b1"}, "attr { key: \"transpose_b\" value { b: true } } ") +
                         Op("act", "Gelu", {"fc"}) +
                         Op("proj", "MatMul", {"act", "w2"}) +
                         Op("res", "Add", {"x", "proj"}) +
                         Op("bcast", "Add", {"res", "row"}) +
                         Op("out", "NetOutput", {"bcast"});

TEST(Passes, FuseEpiloguesTakesGeluAndResidualIntoTheMatMul) {
  const std::string text = RunText(kMlp, Upto("fuse-epilogues"));
  EXPECT_NE(text.find("fc = MatMul(x, w1, b1) -> f32[1, 2] {_fused=[\"act\"], fused_activation=\"gelu\", transpose_b=true}"),
            std::string::npos) << text;
  EXPECT_NE(text.find("proj = MatMul(fc, w2, x) -> f32[1, 4] {_fused=[\"res\"], fused_residual=true}"),
            std::string::npos) << text;
  EXPECT_NE(text.find("bcast = Add(proj, row)"), std::string::npos) << text;  // [1, 4] + [4]: broadcasts, stays
  EXPECT_EQ(text.find("act = Gelu"), std::string::npos) << text;
  EXPECT_EQ(text.find("res = Add"), std::string::npos) << text;
}

TEST(Passes, FuseEpiloguesLeavesAMatMulWithTwoReaders) {
  const std::string g = Data("x", {1, 4}) + Const2("w", 4, 4) + Op("mm", "MatMul", {"x", "w"}) +
                        Op("act", "Gelu", {"mm"}) + Op("sum", "Add", {"act", "mm"}) + Op("out", "NetOutput", {"sum"});
  const std::string text = RunText(g, Upto("fuse-epilogues"));
  EXPECT_NE(text.find("act = Gelu(mm)"), std::string::npos) << text;
  EXPECT_EQ(text.find("fused_"), std::string::npos) << text;
}

TEST(Passes, FuseEpiloguesTakesALayerNormIntoTheNextMatMulsRow) {
  // ln's one row goes to mm alone: mm normalizes it itself. ln2 has two readers and stays; a
  // LayerNorm over two rows stays (the prologue is the GEMV's).
  const std::string g = Data("x", {1, 4}) + Const("gamma", {1, 1, 1, 1}) + Const("beta", {0, 0, 0, 0}) +
                        Const2("w", 4, 4) + Op("ln", "LayerNorm", {"x", "gamma", "beta"}, "attr { key: \"epsilon\" value { f: 0.001 } }") +
                        Op("mm", "MatMul", {"ln", "w"}) + Op("ln2", "LayerNorm", {"mm", "gamma", "beta"}) +
                        Op("mm2", "MatMul", {"ln2", "w"}) + Op("sum", "Add", {"mm2", "ln2"}) + Data("y", {2, 4}) +
                        Op("ln3", "LayerNorm", {"y", "gamma", "beta"}) + Op("mm3", "MatMul", {"ln3", "w"}) +
                        Op("out", "NetOutput", {"sum", "mm3"});
  const std::string text = RunText(g, Upto("fuse-epilogues"));
  EXPECT_NE(text.find("mm = MatMul(x, w, gamma, beta) -> f32[1, 4] {_fused=[\"ln\"], fused_norm=true, fused_norm_epsilon=0.001}"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("ln = LayerNorm"), std::string::npos) << text;
  EXPECT_NE(text.find("ln2 = LayerNorm(mm, gamma, beta)"), std::string::npos) << text;
  EXPECT_NE(text.find("ln3 = LayerNorm(y, gamma, beta)"), std::string::npos) << text;
}

TEST(Passes, FuseEpiloguesLeavesAMatMulThatAlreadyHasANormPrologue) {
  // Its inputs end with gamma and beta: a residual appended after them would be read as gamma.
  const std::string g = Data("x", {1, 4}) + Data("r", {1, 4}) + Const("gamma", {1, 1, 1, 1}) +
                        Const("beta", {0, 0, 0, 0}) + Const2("w", 4, 4) +
                        Op("mm", "MatMul", {"x", "w", "gamma", "beta"}, "attr { key: \"fused_norm\" value { b: true } }") +
                        Op("sum", "Add", {"mm", "r"}) + Op("out", "NetOutput", {"sum"});
  const std::string text = RunText(g, Upto("fuse-epilogues"));
  EXPECT_NE(text.find("sum = Add(mm, r)"), std::string::npos) << text;
  EXPECT_EQ(text.find("fused_residual"), std::string::npos) << text;
}

// stream-weights: the GEMVs' weights together above graph::kGemvCachedWeightBytes (16 MiB) stream
// from memory: every GEMV gets stream_weights; a MatMul of two rows is no GEMV; a graph's own
// stream_weights=false stays; small weights leave the graph as it was.
TEST(Passes, StreamWeightsMarksTheGemvsWhenTheirWeightsCannotStayCached) {
  const std::string big = Data("x", {1, 256}) + Data("w", {256, 20000}) + Data("w2", {20000, 4}) +
                          Data("y", {2, 256}) + Data("w3", {4, 4}) + Op("mm1", "MatMul", {"x", "w"}) +
                          Op("mm2", "MatMul", {"mm1", "w2"}) + Op("mm3", "MatMul", {"y", "w"}) +
                          Op("mm4", "MatMul", {"mm2", "w3"}, "attr { key: \"stream_weights\" value { b: false } } ") +
                          Op("out", "NetOutput", {"mm3", "mm4"});
  const std::string text = RunText(big, Upto("stream-weights"));
  EXPECT_NE(text.find("mm1 = MatMul(x, w) -> f32[1, 20000] {stream_weights=true}"), std::string::npos) << text;
  EXPECT_NE(text.find("mm2 = MatMul(mm1, w2) -> f32[1, 4] {stream_weights=true}"), std::string::npos) << text;
  EXPECT_NE(text.find("mm3 = MatMul(y, w) -> f32[2, 20000]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mm4 = MatMul(mm2, w3) -> f32[1, 4] {stream_weights=false}"), std::string::npos) << text;

  const std::string small = Data("x", {1, 256}) + Data("w", {256, 4000}) + Op("mm", "MatMul", {"x", "w"}) +
                            Op("out", "NetOutput", {"mm"});
  EXPECT_EQ(RunText(small, Upto("stream-weights")), RunText(small, Upto("fuse-epilogues")));
  // One 12 MB matrix read by two GEMVs is cached once: not marked.
  const std::string shared = Data("x", {1, 256}) + Data("w", {256, 12000}) + Op("mm1", "MatMul", {"x", "w"}) +
                             Op("mm2", "MatMul", {"x", "w"}) + Op("out", "NetOutput", {"mm1", "mm2"});
  EXPECT_EQ(RunText(shared, Upto("stream-weights")).find("stream_weights"), std::string::npos);
}

// `npuflow info` counts what one execution runs: every stream's tasks by kind, and the kernel blocks.
TEST(Passes, DescribeModelCountsWhatAnExecutionRuns) {
  for (bool single : {false, true}) {
    auto g = graph::ParseGraphText(kDiamond, "diamond");
    ASSERT_TRUE(g.ok()) << g.status();
    CompileOptions options;
    if (single) options.stream_mode = CompileOptions::StreamMode::kSingle;
    auto m = CompileV1(std::move(*g), options);
    ASSERT_TRUE(m.ok()) << m.status();
    const std::string text = DescribeModel(*m);
    const std::string want = single ? "per execution: 3 tasks, kernel 3; 3 AICore kernel blocks"
                                    : "per execution: 5 tasks, kernel 3, event_record 1, event_wait 1; 3 AICore kernel blocks";
    EXPECT_NE(text.find(want), std::string::npos) << text;
  }
}

TEST(Passes, ValidateNamesACycle) {
  EXPECT_EQ(RunText(Data("x", {2}) + Op("a", "Add", {"x", "b"}) + Op("b", "Relu", {"a"}) +
                        Op("out", "NetOutput", {"b"}),
                    {"validate"}),
            "error: validate: graph 'graph': cycle: b -> a -> b");
}

TEST(Passes, ValidateRejectsPartitionedCallAndTwoOutputs) {
  EXPECT_EQ(RunText(Data("x", {2}) + Op("o1", "NetOutput", {"x"}) + Op("o2", "NetOutput", {"x"}), {"validate"}),
            "error: validate: graph 'graph' has 2 NetOutput nodes (o1, o2), expected one");
}

TEST(Passes, InferShapesDtypeMismatchNamesTheNode) {
  const std::string g = Data("x", {2}) +
                        "node { name: \"i\" op: \"Data\" attr { key: \"dtype\" value { type: DT_INT32 } } "
                        "attr { key: \"shape\" value { shape { dim { size: 2 } } } } }\n" +
                        Op("y", "Add", {"x", "i"}) + Op("out", "NetOutput", {"y"});
  EXPECT_EQ(RunText(g, Upto("infer-shapes")), "error: infer-shapes: node 'y' (Add): input dtypes differ: f32 and i32");
}

TEST(Passes, AssignStreamsHonoursMaxParallelAndIndependent) {
  // Four independent branches: with max_parallel 2 they share two streams.
  const std::string g = Data("x", {2}) + Op("a", "Relu", {"x"}) + Op("b", "Tanh", {"x"}) + Op("c", "Relu", {"x"}) +
                        Op("d", "Tanh", {"x"}) + Op("out", "NetOutput", {"a", "b", "c", "d"});
  CompileOptions two;
  two.max_parallel = 2;
  const std::string out = RunText(g, Upto("assign-streams"), two);
  EXPECT_NE(out.find("a = Relu(x) -> f32[2] {_engine=\"AICore\", _stream=0}"), std::string::npos) << out;
  EXPECT_NE(out.find("b = Tanh(x) -> f32[2] {_engine=\"AICore\", _stream=1}"), std::string::npos) << out;
  EXPECT_NE(out.find("c = Relu(x) -> f32[2] {_engine=\"AICore\", _stream=0}"), std::string::npos) << out;
  EXPECT_NE(out.find("d = Tanh(x) -> f32[2] {_engine=\"AICore\", _stream=1}"), std::string::npos) << out;
  // A chain stays on one stream unless a node is marked independent.
  const std::string chain = Data("x", {2}) + Op("a", "Relu", {"x"}) +
                            Op("b", "Tanh", {"a"}, "attr { key: \"_independent\" value { b: true } }") +
                            Op("out", "NetOutput", {"b"});
  const std::string split = RunText(chain, Upto("assign-streams"));
  EXPECT_NE(split.find("_independent=true, _stream=1"), std::string::npos) << split;
}

TEST(Passes, InsertEventsDropsTransitivelyOrderedPairs) {
  // a (stream 0) -> b (stream 1) -> c (stream 2); c also reads a: the b -> c wait already orders a.
  const std::string g = Data("x", {2}) + Op("a", "Relu", {"x"}) + Op("a2", "Relu", {"a"}) + Op("b0", "Tanh", {"x"}) +
                        Op("b", "Add", {"b0", "a"}) + Op("b2", "Relu", {"b"}) + Op("c0", "Tanh", {"x"}) +
                        Op("c", "Add", {"c0", "b"}) + Op("c2", "Add", {"c", "a"}) +
                        Op("out", "NetOutput", {"a2", "b2", "c2"});
  const std::string out = RunText(g, Upto("insert-events"));
  EXPECT_NE(out.find("b = Add(b0, a) -> f32[2] {_engine=\"AICore\", _recv_events=[0], _send_events=[1], _stream=1}"), std::string::npos)
      << out;
  EXPECT_NE(out.find("c = Add(c0, b) -> f32[2] {_engine=\"AICore\", _recv_events=[1], _stream=2}"), std::string::npos)
      << out;
  EXPECT_NE(out.find("c2 = Add(c, a) -> f32[2] {_engine=\"AICore\", _stream=2}"), std::string::npos) << out;
}

TEST(Passes, UnknownPassAndBadOptionsAreNamed) {
  EXPECT_EQ(RunText(kDiamond, {"validate", "fuse-everything"}).substr(0, 39), "error: unknown pass 'fuse-everything' (");
  CompileOptions bad;
  bad.max_parallel = 0;
  EXPECT_EQ(RunText(kDiamond, {"validate"}, bad), "error: --max-parallel 0: expected 1 to 64");
  bad.max_parallel = 4;
  bad.chip = "920X";
  EXPECT_EQ(RunText(kDiamond, {"validate"}, bad).substr(0, 60),
            "error: --chip '920X': not a shipped chip (310P, 910B) or a r");
}

}  // namespace
}  // namespace npuflow::lowering

namespace npuflow::lowering {
namespace {

TEST(Passes, ValidateRefusesControlEdgesIntoHostNodes) {
  const std::string g = Data("x", {2}) + Op("a", "Relu", {"x"}) +
                        "node { name: \"c\" op: \"Const\" input: \"^a\" attr { key: \"value\" value { tensor { "
                        "dtype: DT_FLOAT shape { dim { size: 2 } } float_val: 1 float_val: 2 } } } }\n" +
                        Op("y", "Add", {"a", "c"}) + Op("out", "NetOutput", {"y"});
  EXPECT_EQ(RunText(g, {"validate"}),
            "error: validate: node 'c' (Const): runs no task, so it cannot take the control input '^a'");
}

TEST(Passes, ConstFoldKeepsNodesWithControlInputs) {
  const std::string g = Data("x", {2}) + Op("a", "Relu", {"x"}) + Const("c1", {1, 2}) +
                        Op("s", "Relu", {"c1", "^a"}) + Op("y", "Add", {"x", "s"}) + Op("out", "NetOutput", {"y"});
  const std::string out = RunText(g, Upto("const-fold"));
  EXPECT_NE(out.find("s = Relu(c1, ^a) -> f32[2]"), std::string::npos) << out;
}

}  // namespace
}  // namespace npuflow::lowering
