// The v1 task-sink runtime computes what the reference interpreter computes, on every entry a
// user has: Session::RunGraph (host tensors, NnExecute on the caller's thread), DavinciModel::
// NnExecute with device buffers (zero copy), Session::RunGraphAsync (the model's Run loop) and
// Session::RunGraphWithStreamAsync (a user stream). Graphs: chains, diamonds, independent branches
// in single- and multi-stream mode, random DAGs, and the ops of the graph issue (MatMul, Softmax,
// LayerNorm, Gather, Transpose, Concat, Split, Slice, Cast, Gelu, HcomAllReduce, and a KV-cache
// decode step updating a Variable). The paths run the same kernels, so they agree bit for bit;
// against the interpreter (reference kernels) f32 outputs agree within 1e-5 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "graph/ops/interpreter.h"
#include "graph/model_file/model_file.h"
#include "synthetic/graphs.h"
#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"
#include "scheduler/davinci_model.h"
#include "scheduler/model_manager.h"
#include "scheduler/session.h"
#include "scheduler_testing.h"

namespace npuflow::scheduler {
namespace {

using graph::ComputeGraph;
using graph::IoDef;
using test::Answer;
using test::CompileText;
using test::ConstNode;
using test::DataNode;
using test::DeviceBuffers;
using test::HostArgs;
using test::Near;
using test::RandomFloats;
using test::VariableNode;
using test::ZeroOutputs;

// ---- graphs -----------------------------------------------------------------------------------

// A float Const with values in [-0.5, 0.5), deterministic for `seed`.
std::string RandomConstNode(const std::string& name, const std::vector<std::int64_t>& dims, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  std::vector<float> values;
  for (std::int64_t i = 0; i < n; ++i) values.push_back(dist(rng));
  return ConstNode(name, dims, values);
}

std::string DiamondText() {
  return DataNode("x", "DT_FLOAT", {4, 64}) + R"pb(
    node { name: "a" op: "Relu" input: "x" }
    node { name: "b" op: "Tanh" input: "x" }
    node { name: "c" op: "Add" input: "a" input: "b" }
    node { name: "d" op: "Mul" input: "c" input: "x" }
    node { name: "out" op: "NetOutput" input: "d" input: "a" }
  )pb";
}

// Four independent MatMul -> Gelu -> Tanh branches over one input, joined by a Concat.
std::string BranchesText() {
  std::string t = DataNode("x", "DT_FLOAT", {8, 16});
  for (int b = 0; b < 4; ++b) {
    t += RandomConstNode(fmt::format("w{}", b), {16, 8}, 10 + b);
    t += fmt::format(R"pb(
      node {{ name: "m{0}" op: "MatMul" input: "x" input: "w{0}" }}
      node {{ name: "g{0}" op: "Gelu" input: "m{0}" }}
      node {{ name: "t{0}" op: "Tanh" input: "g{0}" }}
    )pb",
                     b);
  }
  t += R"pb(
    node { name: "cat" op: "Concat" input: "t0" input: "t1" input: "t2" input: "t3"
           attr { key: "axis" value { i: 1 } } }
    node { name: "out" op: "NetOutput" input: "cat" input: "g2" }
  )pb";
  return t;
}

// LayerNorm -> MatMul (+bias) -> Gelu -> Softmax -> Transpose.
std::string NnBlockText() {
  return DataNode("x", "DT_FLOAT", {6, 16}) + RandomConstNode("gamma", {16}, 1) + RandomConstNode("beta", {16}, 2) +
         RandomConstNode("w", {16, 32}, 3) + RandomConstNode("bias", {32}, 4) + R"pb(
    node { name: "ln" op: "LayerNorm" input: "x" input: "gamma" input: "beta" }
    node { name: "mm" op: "MatMul" input: "ln" input: "w" input: "bias" }
    node { name: "act" op: "Gelu" input: "mm" }
    node { name: "sm" op: "Softmax" input: "act" attr { key: "axis" value { i: -1 } } }
    node { name: "tr" op: "Transpose" input: "sm" attr { key: "perm" value { ints { val: 1 val: 0 } } } }
    node { name: "out" op: "NetOutput" input: "sm" input: "tr" input: "act" }
  )pb";
}

// Concat, Split, Slice, Cast, Transpose, Reshape.
std::string LayoutBlockText() {
  return DataNode("x", "DT_FLOAT", {4, 6}) + DataNode("y", "DT_FLOAT", {4, 2}) + R"pb(
    node { name: "cat" op: "Concat" input: "x" input: "y" attr { key: "axis" value { i: 1 } } }
    node { name: "sp" op: "Split" input: "cat" attr { key: "axis" value { i: 1 } }
           attr { key: "num_split" value { i: 2 } } }
    node { name: "sl" op: "Slice" input: "cat" attr { key: "begin" value { ints { val: 1 val: 2 } } }
           attr { key: "end" value { ints { val: 4 val: 7 } } } }
    node { name: "ca" op: "Cast" input: "sp:1" attr { key: "dtype" value { type: DT_INT32 } } }
    node { name: "tr" op: "Transpose" input: "sl" attr { key: "perm" value { ints { val: 1 val: 0 } } } }
    node { name: "rs" op: "Reshape" input: "sp:0" attr { key: "shape" value { ints { val: 2 val: 8 } } } }
    node { name: "mul" op: "Mul" input: "sp:0" input: "sp:1" }
    node { name: "out" op: "NetOutput" input: "tr" input: "ca" input: "rs" input: "mul" }
  )pb";
}

// Gather on both axes (i32 and i64 indices), then an all-reduce (a communication task).
std::string GatherAllReduceText() {
  return DataNode("table", "DT_FLOAT", {10, 8}) + DataNode("rows", "DT_INT32", {6}) +
         DataNode("cols", "DT_INT64", {3}) + R"pb(
    node { name: "g" op: "Gather" input: "table" input: "rows" }
    node { name: "gc" op: "Gather" input: "table" input: "cols" attr { key: "axis" value { i: 1 } } }
    node { name: "ar" op: "HcomAllReduce" input: "g" }
    node { name: "r" op: "Relu" input: "ar" }
    node { name: "out" op: "NetOutput" input: "r" input: "gc" }
  )pb";
}

// One decode step over a KV cache held in a Variable (updated in place, persists across runs).
std::string KvDecodeText() {
  return VariableNode("cache", "DT_FLOAT", {2, 8, 4}) + DataNode("q", "DT_FLOAT", {2, 1, 4}) +
         DataNode("row", "DT_FLOAT", {2, 1, 4}) + DataNode("pos", "DT_INT32", {1}) + DataNode("len", "DT_INT32", {1}) +
         R"pb(
    node { name: "kv" op: "KvCacheWrite" input: "cache" input: "row" input: "pos" }
    node { name: "att" op: "Attention" input: "q" input: "kv" input: "kv" input: "len" }
    node { name: "out" op: "NetOutput" input: "att" input: "kv" }
  )pb";
}

using GraphMaker = std::function<StatusOr<std::unique_ptr<ComputeGraph>>()>;

GraphMaker FromText(std::string text) {
  return [text = std::move(text)] { return graph::ParseGraphText(text, "test.pbtxt"); };
}

// ---- inputs and comparisons -------------------------------------------------------------------

// Inputs of step `step`: floats in [-3, 3); integer inputs by name (index bounds, KV positions).
Tensor MakeInput(const IoDef& io, int step, std::mt19937& rng) {
  if (graph::IsFloat(io.desc.dtype)) return RandomFloats(io.desc, rng, -3.f, 3.f);
  Tensor t = graph::ZeroTensor(io.desc);
  const auto n = static_cast<std::size_t>(io.desc.shape.num_elements().value_or(0));
  std::int64_t bound = 1;
  if (io.name == "rows") bound = 10;
  if (io.name == "cols") bound = 8;
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t v = std::uniform_int_distribution<std::int64_t>(0, bound - 1)(rng);
    if (io.name == "pos") v = step;
    if (io.name == "len") v = step + 1;
    graph::StoreI(t, i, v);
  }
  return t;
}

::testing::AssertionResult SameBits(const Tensor& a, const Tensor& b) {
  if (a == b) return ::testing::AssertionSuccess();
  auto r = Near(a, b);
  return ::testing::AssertionFailure() << "not bit-identical" << (r ? "" : ": ") << (r ? "" : r.message());
}

// ---- the paths --------------------------------------------------------------------------------

enum class Path { kRunGraph, kNnExecuteZeroCopy, kNnExecuteHost, kRunGraphAsync, kRunGraphWithStream };
const char* PathName(Path p) {
  switch (p) {
    case Path::kRunGraph: return "RunGraph";
    case Path::kNnExecuteZeroCopy: return "NnExecute(device buffers)";
    case Path::kNnExecuteHost: return "NnExecute(host buffers)";
    case Path::kRunGraphAsync: return "RunGraphAsync";
    case Path::kRunGraphWithStream: return "RunGraphWithStreamAsync";
  }
  return "?";
}

StatusOr<std::vector<Tensor>> RunZeroCopy(DavinciModel& model, const std::vector<Tensor>& inputs) {
  DeviceBuffers io(model.runtime(), model.device());
  // Poison: an output the run never wrote shows.
  NPUFLOW_RETURN_IF_ERROR(io.Allocate(inputs, model.compiled().outputs, 0xCD));
  io.args.timeout = std::chrono::seconds(60);
  NPUFLOW_RETURN_IF_ERROR(model.NnExecute(io.args));
  return io.ReadOutputs();
}

StatusOr<std::vector<Tensor>> RunHostBuffers(DavinciModel& model, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outs = ZeroOutputs(model.compiled().outputs);
  for (Tensor& t : outs) std::fill(t.data.begin(), t.data.end(), 0xCD);
  ExecuteArgs args = HostArgs(inputs, outs);
  args.timeout = std::chrono::seconds(60);
  NPUFLOW_RETURN_IF_ERROR(model.NnExecute(args));
  return outs;
}

StatusOr<std::vector<Tensor>> RunAsync(Session& session, std::uint32_t id, const std::vector<Tensor>& inputs) {
  Answer answer;  // a second answer is reported below
  Status submitted = session.RunGraphAsync(id, inputs, answer.Callback());
  if (!submitted.ok()) return submitted.WithContext("RunGraphAsync");
  Answer::Result result;
  if (!answer.Wait(result, 60)) return Status::Timeout("RunGraphAsync: the callback did not come within 60 s");
  if (answer.calls() != 1) return Status::Internal("RunGraphAsync: the callback ran {} times", answer.calls());
  if (!result.first.ok()) return result.first;
  return std::move(result.second);
}

StatusOr<std::vector<Tensor>> RunWithStream(Session& session, std::uint32_t id, DavinciModel& model,
                                            const std::vector<Tensor>& inputs) {
  DeviceBuffers io(model.runtime(), model.device());
  NPUFLOW_RETURN_IF_ERROR(io.Allocate(inputs, model.compiled().outputs));
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Stream stream, model.runtime().CreateStream(model.device()));
  Status run = session.RunGraphWithStreamAsync(id, stream, io.InputTensors(), io.OutputTensors());
  if (run.ok()) run = model.runtime().SynchronizeStream(stream, std::chrono::seconds(60));
  (void)model.runtime().DestroyStream(stream);
  NPUFLOW_RETURN_IF_ERROR(run);
  return io.ReadOutputs();
}

// ---- the fixture ------------------------------------------------------------------------------

class SchedulerExecute : public test::ModelManagerTest {
 protected:
  struct Case {
    std::string name;
    GraphMaker make;
    Options options;
    int steps = 1;  // > 1: a stateful graph, run step after step against the interpreter
    std::optional<std::size_t> expect_streams_at_least;  // multi-stream graphs
  };

  // Every path, every step, against the interpreter; within a step the paths agree bit for bit.
  void ExpectMatchesInterpreter(const Case& c) {
    SCOPED_TRACE(c.name);
    auto session = Session::Create(c.options);
    ASSERT_TRUE(session.ok()) << session.status();
    auto g = c.make();
    ASSERT_TRUE(g.ok()) << g.status();
    auto oracle_graph = c.make();
    ASSERT_TRUE(oracle_graph.ok()) << oracle_graph.status();
    auto interp = graph::Interpreter::Create(**oracle_graph);
    ASSERT_TRUE(interp.ok()) << interp.status();

    ASSERT_TRUE((*session)->AddGraph(1, std::move(*g)).ok());
    Status built = (*session)->BuildGraph(1);
    ASSERT_TRUE(built.ok()) << built;
    auto compiled = (*session)->GetCompiledModel(1);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    const CompiledModel& cm = **compiled;

    // The session's options reach the compiler.
    auto parsed = ParseGraphOptions(c.options);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    if (parsed->single_stream) {
      EXPECT_EQ(cm.options.stream_mode, graph::CompileOptions::StreamMode::kSingle);
      EXPECT_EQ(cm.streams.size(), 1u);
    } else {
      EXPECT_EQ(cm.options.stream_mode, graph::CompileOptions::StreamMode::kMulti);
      EXPECT_EQ(cm.options.max_parallel, parsed->max_parallel);
    }
    if (c.expect_streams_at_least) {
      EXPECT_GE(cm.streams.size(), *c.expect_streams_at_least);
      EXPECT_GT(cm.event_count, 0u);
    }

    Status loaded = (*session)->LoadGraph(1);
    ASSERT_TRUE(loaded.ok()) << loaded;
    auto model = (*session)->GetLoadedModel(1);
    ASSERT_TRUE(model.ok()) << model.status();

    std::mt19937 rng(7);
    for (int step = 0; step < c.steps; ++step) {
      std::vector<Tensor> inputs;
      std::map<std::string, Tensor> feeds;
      for (const IoDef& io : cm.inputs) {
        inputs.push_back(MakeInput(io, step, rng));
        feeds[io.name] = inputs.back();
      }
      std::optional<std::vector<Tensor>> first;
      for (Path path : {Path::kRunGraph, Path::kNnExecuteZeroCopy, Path::kNnExecuteHost, Path::kRunGraphAsync,
                        Path::kRunGraphWithStream}) {
        SCOPED_TRACE(testing::Message() << "step " << step << ", " << PathName(path));
        // The interpreter runs once per device run so a Variable's state stays in step (the same
        // rows are written at the same position within a step).
        auto want = (*interp)->Run(feeds);
        ASSERT_TRUE(want.ok()) << want.status();
        StatusOr<std::vector<Tensor>> got = Status::Internal("not run");
        switch (path) {
          case Path::kRunGraph: got = (*session)->RunGraph(1, inputs); break;
          case Path::kNnExecuteZeroCopy: got = RunZeroCopy(**model, inputs); break;
          case Path::kNnExecuteHost: got = RunHostBuffers(**model, inputs); break;
          case Path::kRunGraphAsync: got = RunAsync(**session, 1, inputs); break;
          case Path::kRunGraphWithStream: got = RunWithStream(**session, 1, **model, inputs); break;
        }
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(got->size(), want->size());
        for (std::size_t i = 0; i < got->size(); ++i) {
          EXPECT_TRUE(Near((*got)[i], (*want)[i])) << "output " << i << " (" << cm.outputs[i].name << ")";
          if (first) {
            EXPECT_TRUE(SameBits((*got)[i], (*first)[i])) << "output " << i << " vs RunGraph";
          }
        }
        if (!first) first = std::move(*got);
      }
    }
  }
};

TEST_F(SchedulerExecute, ChainSingleAndMultiStream) {
  for (const char* single : {"true", "false"}) {
    ExpectMatchesInterpreter({.name = fmt::format("chain, enableSingleStream={}", single),
                              .make = [] { return synthetic::MakeChainGraph(12, 256); },
                              .options = {{"ge.enableSingleStream", single}}});
  }
}

TEST_F(SchedulerExecute, DiamondSingleAndMultiStream) {
  ExpectMatchesInterpreter({.name = "diamond single", .make = FromText(DiamondText()),
                            .options = {{"ge.enableSingleStream", "true"}}});
  ExpectMatchesInterpreter({.name = "diamond multi", .make = FromText(DiamondText()),
                            .options = {{"ge.enableSingleStream", "false"}, {"ge.streamMaxParallelNum", "4"}}});
}

TEST_F(SchedulerExecute, IndependentBranchesRunOnSeveralStreams) {
  for (const char* parallel : {"2", "4"}) {
    ExpectMatchesInterpreter({.name = fmt::format("branches, streamMaxParallelNum={}", parallel),
                              .make = FromText(BranchesText()),
                              .options = {{"ge.enableSingleStream", "false"}, {"ge.streamMaxParallelNum", parallel}},
                              .expect_streams_at_least = 2});
  }
  ExpectMatchesInterpreter({.name = "branches, single stream", .make = FromText(BranchesText()),
                            .options = {{"ge.enableSingleStream", "true"}}});
}

TEST_F(SchedulerExecute, RandomDags) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    ExpectMatchesInterpreter(
        {.name = fmt::format("random dag seed {}", seed),
         .make = [seed] {
           return synthetic::MakeRandomDag({.nodes = 30, .inputs = 2, .max_fan_in = 2, .locality = 5, .seed = seed});
         },
         .options = {{"ge.enableSingleStream", seed == 4 ? "true" : "false"},
                     {"ge.streamMaxParallelNum", std::to_string(1 + seed % 4)}}});
  }
}

TEST_F(SchedulerExecute, MlpExample) {
  ExpectMatchesInterpreter({.name = "mlp.pbtxt",
                            .make = [] {
                              return graph::ReadGraphTextFile(std::string(NPUFLOW_SOURCE_DIR) +
                                                              "/examples/graphs/mlp.pbtxt");
                            },
                            .options = {{"ge.streamMaxParallelNum", "2"}},
                            .expect_streams_at_least = 2});
}

TEST_F(SchedulerExecute, LayerNormMatMulGeluSoftmaxTranspose) {
  ExpectMatchesInterpreter({.name = "nn block", .make = FromText(NnBlockText())});
}

TEST_F(SchedulerExecute, ConcatSplitSliceCastTransposeReshape) {
  ExpectMatchesInterpreter({.name = "layout block", .make = FromText(LayoutBlockText())});
}

TEST_F(SchedulerExecute, GatherAndAllReduce) {
  ExpectMatchesInterpreter({.name = "gather + all-reduce", .make = FromText(GatherAllReduceText())});
}

TEST_F(SchedulerExecute, KvCacheDecodeStepsUpdateTheVariableLikeTheInterpreter) {
  // Attention tiles from valid_len, known only at run time: with the tiling sink it stays on the
  // task sink (without it the session gives the graph to RT2.0: tiling_sink_run_test).
  ExpectMatchesInterpreter({.name = "kv decode",
                            .make = FromText(KvDecodeText()),
                            .options = {{"ge.tiling_schedule_optimize", "1"}},
                            .steps = 4});
  ExpectMatchesInterpreter({.name = "kv decode, 4 execution streams asked",
                            .make = FromText(KvDecodeText()),
                            .options = {{"npuflow.executionStreams", "4"}, {"ge.tiling_schedule_optimize", "1"}},
                            .steps = 3});
  ExpectMatchesInterpreter({.name = "kv decode on the task sink, tiled for the longest context",
                            .make = FromText(KvDecodeText()),
                            .options = {{"npuflow.runtime", "v1"}},
                            .steps = 3});
}

// A model that updates a Variable gets one execution instance, whatever was asked: its updates
// then happen in call order. Other models get what was asked.
TEST_F(SchedulerExecute, ExecutionInstances) {
  auto session = Session::Create({{"npuflow.executionStreams", "4"}, {"ge.tiling_schedule_optimize", "1"}});
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->AddGraph(1, graph::ParseGraphText(KvDecodeText(), "kv").value()).ok());
  ASSERT_TRUE((*session)->AddGraph(2, graph::ParseGraphText(DiamondText(), "diamond").value()).ok());
  ASSERT_TRUE((*session)->LoadGraph(1).ok());
  ASSERT_TRUE((*session)->LoadGraph(2).ok());
  auto kv = (*session)->GetLoadedModel(1);
  auto diamond = (*session)->GetLoadedModel(2);
  ASSERT_TRUE(kv.ok() && diamond.ok());
  EXPECT_TRUE((*kv)->updates_variables());
  EXPECT_EQ((*kv)->instances(), 1);
  EXPECT_FALSE((*diamond)->updates_variables());
  EXPECT_EQ((*diamond)->instances(), 4);
  EXPECT_FALSE((*diamond)->has_communication_tasks());
}

// ModelManager's own entries: online and offline (.om bytes) loads run the same.
TEST_F(SchedulerExecute, ModelManagerOnlineAndOfflineLoadsRunTheSame) {
  std::shared_ptr<const CompiledModel> shared = CompileText(NnBlockText(), {}, "nn");
  ASSERT_NE(shared, nullptr);
  auto bytes = graph::SerializeModel(*shared);
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  ModelManager& mm = *ModelManager::Get();
  auto online = mm.LoadModelOnline(shared, {});
  ASSERT_TRUE(online.ok()) << online.status();
  auto offline = GraphLoader::LoadModelFromData(*bytes, {}, "nn.om");
  ASSERT_TRUE(offline.ok()) << offline.status();
  EXPECT_NE(*online, *offline);

  std::mt19937 rng(3);
  std::vector<Tensor> inputs;
  for (const IoDef& io : shared->inputs) inputs.push_back(MakeInput(io, 0, rng));
  auto a = mm.GetModel(*online).value()->Execute(inputs);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = mm.GetModel(*offline).value()->Execute(inputs);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), b->size());
  for (std::size_t i = 0; i < a->size(); ++i) EXPECT_TRUE(SameBits((*a)[i], (*b)[i])) << "output " << i;

  // GraphLoader::ExecuteModel -> NnExecute, host buffers.
  std::vector<Tensor> outs = ZeroOutputs(shared->outputs);
  Status s = GraphLoader::ExecuteModel(*online, HostArgs(inputs, outs));
  ASSERT_TRUE(s.ok()) << s;
  for (std::size_t i = 0; i < outs.size(); ++i) EXPECT_TRUE(SameBits(outs[i], (*a)[i])) << "output " << i;

  EXPECT_TRUE(GraphLoader::UnloadModel(*online).ok());
  EXPECT_FALSE(mm.IsLoaded(*online));
  EXPECT_EQ(mm.GetModel(*online).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(mm.IsLoaded(*offline));
}

}  // namespace
}  // namespace npuflow::scheduler
