// The tiling sink at run time (seed 003, 5.2-5.4): a Session with ge.tiling_schedule_optimize = "1"
// runs a marked Attention through the task sink (AICPU tiling, task update, NOPs) and gives the
// interpreter's results.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"
#include "graph/ops/interpreter.h"
#include "graph/ops/op_registry.h"
#include "graph/model_file/model_file.h"
#include "graph/ops/tiling_context.h"
#include "lowering/compiler.h"
#include "scheduler/session.h"
#include "scheduler_testing.h"

namespace npuflow::scheduler {
namespace {

using graph::Tensor;

const char* kAttention = R"pb(
  node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
  node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
  node { name: "row" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
  node { name: "pos" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
         attr { key: "shape" value { shape { dim { size: 1 } } } } }
  node { name: "len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
         attr { key: "shape" value { shape { dim { size: 1 } } } } }
  node { name: "kv" op: "KvCacheWrite" input: "cache" input: "row" input: "pos" }
  node { name: "att" op: "Attention" input: "q" input: "kv" input: "kv" input: "len" }
  node { name: "out" op: "NetOutput" input: "att" }
)pb";

// The same attention over a cache the model only reads: the wait for the tiling is its stream's
// first task, so the stream's first fetch already covers the kernel when K < prefetch_num.
const char* kAttentionOnly = R"pb(
  node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
  node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
  node { name: "len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
         attr { key: "shape" value { shape { dim { size: 1 } } } } }
  node { name: "att" op: "Attention" input: "q" input: "cache" input: "cache" input: "len" }
  node { name: "out" op: "NetOutput" input: "att" }
)pb";

// valid_len computed on the device (len = len_in + 1): host tiling must read it back.
const char* kAttentionComputedLen = R"pb(
  node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
  node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
  node { name: "row" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
  node { name: "pos" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
         attr { key: "shape" value { shape { dim { size: 1 } } } } }
  node { name: "one" op: "Const" attr { key: "value" value { tensor { dtype: DT_INT32
         shape { dim { size: 1 } } int_val: 1 } } } }
  node { name: "len" op: "Add" input: "pos" input: "one" }
  node { name: "kv" op: "KvCacheWrite" input: "cache" input: "row" input: "pos" }
  node { name: "att" op: "Attention" input: "q" input: "kv" input: "kv" input: "len" }
  node { name: "out" op: "NetOutput" input: "att" }
)pb";

// Two Attentions over the same valid_len, the second's query the first's output: on one stream
// they share one AICPU tiling (gen-tasks' shared tiling).
const char* kTwoAttentions = R"pb(
  node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
  node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
         attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
  node { name: "len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
         attr { key: "shape" value { shape { dim { size: 1 } } } } }
  node { name: "a1" op: "Attention" input: "q" input: "cache" input: "cache" input: "len" }
  node { name: "r" op: "Tanh" input: "a1" }
  node { name: "a2" op: "Attention" input: "r" input: "cache" input: "cache" input: "len" }
  node { name: "out" op: "NetOutput" input: "a2" }
)pb";

class TilingSinkRun : public test::ModelManagerTest {};

// The valid_len values an op's tiling was given (-1: tiled without the value).
std::mutex g_seen_mu;
std::vector<std::int64_t> g_seen;

StatusOr<graph::TilingInfo> RecordingTiling(const graph::OpDesc& op, const std::vector<graph::TensorDesc>& in,
                                            const std::vector<const Tensor*>& depend, int cores) {
  {
    std::lock_guard<std::mutex> lock(g_seen_mu);
    g_seen.push_back(depend.empty() || depend[0] == nullptr ? -1 : graph::LoadI(*depend[0], 0));
  }
  return graph::OpRegistry::Global().Find("Attention").value()->tiling(op, in, depend, cores);
}

// On the dynamic path RT2.0 tiles before every launch from the value the run computed on the
// device (read back), not once for the worst case.
TEST_F(TilingSinkRun, TheDynamicPathTilesFromTheValueEachRun) {
  graph::OpDef recording = *graph::OpRegistry::Global().Find("Attention").value();
  recording.type = "RecordingAttention";
  recording.tiling = &RecordingTiling;
  graph::OpRegistry::Global().Register(recording);
  std::string text = kAttentionComputedLen;
  const std::string attention_op = "op: \"Attention\"";
  text.replace(text.find(attention_op), attention_op.size(), "op: \"RecordingAttention\"");
  for (const char* executor : {"sequential", "multithread"}) {
    SCOPED_TRACE(executor);
    auto session = Session::Create({{"npuflow.v2Executor", executor}});
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->AddGraph(1, graph::ParseGraphText(text, "a.pbtxt").value()).ok());
    ASSERT_TRUE((*session)->LoadGraph(1).ok());
    {
      std::lock_guard<std::mutex> lock(g_seen_mu);
      g_seen.clear();
    }
    for (std::int32_t p = 0; p < 8; ++p) {
      Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.1f * (i + p); });
      Tensor row = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.05f * (i * p % 7); });
      Tensor pos = test::FilledI32(graph::Shape{1}, [p](std::size_t) { return p; });
      auto got = (*session)->RunGraph(1, {q, row, pos});
      ASSERT_TRUE(got.ok()) << "position " << p << ": " << got.status();
    }
    std::vector<std::int64_t> seen;
    {
      std::lock_guard<std::mutex> lock(g_seen_mu);  // not held while the executor is torn down
      seen = g_seen;
    }
    EXPECT_EQ(seen, (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
    ASSERT_TRUE((*session)->Finalize().ok());
  }
}

// The entry points RT2.0 does not serve say why the graph is there.
TEST_F(TilingSinkRun, AnRt2GraphNamesWhyItIsThere) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->AddGraph(1, graph::ParseGraphText(kAttentionComputedLen, "a.pbtxt").value()).ok());
  ASSERT_TRUE((*session)->BuildGraph(1).ok());
  Status async = (*session)->RunGraphAsync(1, {}, [](Status, std::vector<Tensor>) {});
  ASSERT_FALSE(async.ok());
  EXPECT_NE(async.message().find("node 'att' (Attention) tiles from a value known only at run time"),
            std::string_view::npos) << async;
  EXPECT_NE(async.message().find("gate 'option'"), std::string_view::npos) << async;
  // A fork shares the built graph and runs it too.
  ASSERT_TRUE((*session)->ForkGraph(1, 2).ok());
  Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [](std::size_t i) { return 0.1f * i; });
  Tensor row = test::FilledF32(graph::Shape{2, 1, 4}, [](std::size_t i) { return 0.05f * i; });
  Tensor pos = test::FilledI32(graph::Shape{1}, [](std::size_t) { return 2; });
  EXPECT_TRUE((*session)->RunGraph(2, {q, row, pos}).ok());
  // A model compiled for one runtime is refused under the other's option.
  graph::CompileOptions options;
  options.tiling_schedule_optimize = "1";
  auto v1 = lowering::CompileV1(*graph::ParseGraphText(kAttention, "attention.pbtxt"), options);
  ASSERT_TRUE(v1.ok()) << v1.status();
  Status refused = (*session)->AddCompiledModel(3, std::make_shared<const graph::CompiledModel>(std::move(*v1)),
                                                {{"npuflow.runtime", "v2"}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("npuflow.runtime=v2"), std::string_view::npos) << refused;
  ASSERT_TRUE((*session)->Finalize().ok());
}

// Each gate failing alone sends the graph down the dynamic path: the session gives it to RT2.0,
// which tiles Attention before each launch from valid_len read back from the device. Results
// equal the interpreter's step after step.
TEST_F(TilingSinkRun, AFailedGateTakesTheDynamicPathWithTheInterpretersResults) {
  // The op gate: the same op without AICPU tiling, under a name of its own.
  graph::OpDef no_aicpu = *graph::OpRegistry::Global().Find("Attention").value();
  no_aicpu.type = "AttentionHostTilingOnly";
  no_aicpu.tiling_on_aicpu = false;
  graph::OpRegistry::Global().Register(no_aicpu);
  std::string op_gate_text = kAttentionComputedLen;
  const std::string attention_op = "op: \"Attention\"";
  op_gate_text.replace(op_gate_text.find(attention_op), attention_op.size(), "op: \"AttentionHostTilingOnly\"");
  struct Case {
    const char* gate;
    Options options;
    std::string text;
  };
  for (const Case& c : {Case{"option (unset)", {}, kAttentionComputedLen},
                        Case{"option (0)", {{"ge.tiling_schedule_optimize", "0"}}, kAttentionComputedLen},
                        Case{"device (310P)", {{"ge.tiling_schedule_optimize", "1"}, {"ge.socVersion", "310P"}},
                             kAttentionComputedLen},
                        Case{"op", {{"ge.tiling_schedule_optimize", "1"}}, op_gate_text}}) {
    SCOPED_TRACE(c.gate);
    auto session = Session::Create(c.options);
    ASSERT_TRUE(session.ok()) << session.status();
    auto ref_graph = graph::ParseGraphText(c.text, "attention.pbtxt");
    ASSERT_TRUE(ref_graph.ok()) << ref_graph.status();
    auto interp = graph::Interpreter::Create(**ref_graph);
    ASSERT_TRUE(interp.ok()) << interp.status();
    ASSERT_TRUE((*session)->AddGraph(1, graph::ParseGraphText(c.text, "attention.pbtxt").value()).ok());
    for (std::int32_t p = 0; p < 8; ++p) {
      Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.1f * (i + p); });
      Tensor row = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.05f * (i * p % 7); });
      Tensor pos = test::FilledI32(graph::Shape{1}, [p](std::size_t) { return p; });
      auto want = (*interp)->Run({{"q", q}, {"row", row}, {"pos", pos}});
      ASSERT_TRUE(want.ok()) << want.status();
      auto got = (*session)->RunGraph(1, {q, row, pos});
      ASSERT_TRUE(got.ok()) << "position " << p << ": " << got.status();
      for (std::size_t i = 0; i < 8; ++i)
        EXPECT_NEAR(graph::LoadF((*got)[0], i), graph::LoadF((*want)[0], i), 1e-5) << "position " << p;
    }
    EXPECT_TRUE((*session)->GetLoadedV2(1).ok()) << "the graph should run on RT2.0";
    EXPECT_FALSE((*session)->GetLoadedModel(1).ok()) << "the graph should not be on the task sink";
    ASSERT_TRUE((*session)->Finalize().ok());
  }
  // With every gate passing the same graph stays on the task sink.
  auto session = Session::Create({{"ge.tiling_schedule_optimize", "1"}});
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->AddGraph(1, graph::ParseGraphText(kAttentionComputedLen, "a.pbtxt").value()).ok());
  ASSERT_TRUE((*session)->LoadGraph(1).ok());
  EXPECT_TRUE((*session)->GetLoadedModel(1).ok());
  ASSERT_TRUE((*session)->Finalize().ok());
}

TEST_F(TilingSinkRun, AMarkedAttentionGivesTheInterpretersResults) {
  auto session = Session::Create({{"ge.tiling_schedule_optimize", "1"}, {"npuflow.executeTimeoutMs", "5000"}});
  ASSERT_TRUE(session.ok()) << session.status();
  auto g = graph::ParseGraphText(kAttention, "attention.pbtxt");
  ASSERT_TRUE(g.ok()) << g.status();
  auto ref_graph = graph::ParseGraphText(kAttention, "attention.pbtxt");
  auto interp = graph::Interpreter::Create(**ref_graph);
  ASSERT_TRUE(interp.ok()) << interp.status();
  ASSERT_TRUE((*session)->AddGraph(1, std::move(*g)).ok());
  for (std::int32_t p = 0; p < 8; ++p) {
    Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.1f * (i + p); });
    Tensor row = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.05f * (i * p % 7); });
    Tensor pos = test::FilledI32(graph::Shape{1}, [p](std::size_t) { return p; });
    Tensor len = test::FilledI32(graph::Shape{1}, [p](std::size_t) { return p + 1; });
    auto want = (*interp)->Run({{"q", q}, {"row", row}, {"pos", pos}, {"len", len}});
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = (*session)->RunGraph(1, {q, row, pos, len});
    ASSERT_TRUE(got.ok()) << "position " << p << ": " << got.status();
    ASSERT_EQ(got->size(), 1u);
    for (std::size_t i = 0; i < 8; ++i)  // the device's key chunks round differently from the reference
      EXPECT_NEAR(graph::LoadF((*got)[0], i), graph::LoadF((*want)[0], i),
                  1e-5)
          << "position " << p << " element " << i;
  }
}

// A model compiled with the option, written to .om bytes and read back, runs the same.
TEST_F(TilingSinkRun, AModelSavedAndLoadedAgainBehavesTheSame) {
  graph::CompileOptions options;
  options.tiling_schedule_optimize = "1";
  auto compiled = lowering::CompileV1(*graph::ParseGraphText(kAttention, "attention.pbtxt"), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto bytes = graph::SerializeModel(*compiled);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto loaded = graph::ParseModel(*bytes, "attention.om");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->streams.back().name, "tiling");
  auto ref_graph = graph::ParseGraphText(kAttention, "attention.pbtxt");
  auto interp = graph::Interpreter::Create(**ref_graph);
  ASSERT_TRUE(interp.ok()) << interp.status();
  for (auto model : {std::make_shared<const graph::CompiledModel>(std::move(*compiled)),
                     std::make_shared<const graph::CompiledModel>(std::move(*loaded))}) {
    auto session = Session::Create({{"npuflow.executeTimeoutMs", "10000"}});
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->AddCompiledModel(1, model).ok());
    for (std::int32_t p = 0; p < 8; ++p) {
      Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.1f * (i + p); });
      Tensor row = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.05f * (i * p % 7); });
      Tensor pos = test::FilledI32(graph::Shape{1}, [p](std::size_t) { return p; });
      Tensor len = test::FilledI32(graph::Shape{1}, [p](std::size_t) { return p + 1; });
      auto want = (*interp)->Run({{"q", q}, {"row", row}, {"pos", pos}, {"len", len}});
      ASSERT_TRUE(want.ok()) << want.status();
      auto got = (*session)->RunGraph(1, {q, row, pos, len});
      ASSERT_TRUE(got.ok()) << "position " << p << ": " << got.status();
      for (std::size_t i = 0; i < 8; ++i)
        EXPECT_NEAR(graph::LoadF((*got)[0], i), graph::LoadF((*want)[0], i), 1e-5) << "position " << p;
    }
    ASSERT_TRUE((*session)->Finalize().ok());
  }
}

// The sequence as the device got it (seed 003, 4.3), read back from the loaded model: the tiling
// stream's AICPU tiling, update (naming the kernel's stream and task, and the context's words) and
// record; the kernel's stream's wait, 8 NOPs and the kernel with the placeholder.
TEST_F(TilingSinkRun, TheLoadedModelHoldsTheSinksTaskSequence) {
  graph::CompileOptions options;
  options.tiling_schedule_optimize = "1";
  auto compiled = lowering::CompileV1(*graph::ParseGraphText(kAttentionOnly, "attention.pbtxt"), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->AddCompiledModel(1, std::make_shared<const graph::CompiledModel>(std::move(*compiled))).ok());
  Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [](std::size_t i) { return 0.1f * i; });
  Tensor len = test::FilledI32(graph::Shape{1}, [](std::size_t) { return 3; });
  ASSERT_TRUE((*session)->RunGraph(1, {q, len}).ok());
  auto model = (*session)->GetLoadedModel(1);
  ASSERT_TRUE(model.ok()) << model.status();
  const auto lists = (*model)->DistributedTasks(0);
  ASSERT_EQ(lists.size(), 2u);
  const auto& main = lists[0];
  const auto& tiling = lists[1];
  ASSERT_EQ(tiling.size(), 3u);
  EXPECT_EQ(tiling[0].kind, npu_sim::TaskKind::kAicpuKernel);
  EXPECT_EQ(tiling[1].kind, npu_sim::TaskKind::kTaskUpdate);
  EXPECT_EQ(tiling[2].kind, npu_sim::TaskKind::kEventRecord);
  ASSERT_EQ(main.size(), 10u);
  EXPECT_EQ(main[0].kind, npu_sim::TaskKind::kEventWait);
  for (int i = 1; i <= 8; ++i) EXPECT_EQ(main[i].kind, npu_sim::TaskKind::kNop) << i;
  EXPECT_EQ(main[9].kind, npu_sim::TaskKind::kKernel);
  EXPECT_EQ(main[9].block_dim, npu_sim::kTilingSinkBlockDim);
  EXPECT_EQ(tiling[1].target_task, 9u);
  EXPECT_EQ(tiling[1].block_dim_addr.value, tiling[0].args[0] + graph::kTilingContextBlockDimOffset);
  EXPECT_EQ(tiling[1].tiling_key_addr.value, tiling[0].args[0] + graph::kTilingContextTilingKeyOffset);
  ASSERT_TRUE((*session)->Finalize().ok());
}

// The sequence as the device ran it, read back from a deterministic run's trace (one worker, FIFO
// delivery): per stream track, the tasks in the order they ran. Two such runs give the same bytes.
TEST_F(TilingSinkRun, ADeterministicTraceShowsTheSinksSequence) {
  graph::CompileOptions options;
  options.tiling_schedule_optimize = "1";
  auto compiled = lowering::CompileV1(*graph::ParseGraphText(kAttentionOnly, "attention.pbtxt"), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto model = std::make_shared<const graph::CompiledModel>(std::move(*compiled));
  ASSERT_TRUE(ModelManager::Finalize().ok());
  auto run_traced = [&]() -> std::string {
    std::string json;
    Status s = ModelManager::RunInitialized({.chips = {"910B"}, .deterministic = true, .trace = true}, [&]() -> Status {
      NPUFLOW_ASSIGN_OR_RETURN(auto session, Session::Create({}));
      NPUFLOW_RETURN_IF_ERROR(session->AddCompiledModel(1, model));
      Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [](std::size_t i) { return 0.1f * i; });
      Tensor len = test::FilledI32(graph::Shape{1}, [](std::size_t) { return 5; });
      NPUFLOW_RETURN_IF_ERROR(session->RunGraph(1, {q, len}).status());
      NPUFLOW_RETURN_IF_ERROR(session->Finalize());
      json = ModelManager::Get()->runtime().trace().ToJson();
      return Status::Ok();
    });
    EXPECT_TRUE(s.ok()) << s;
    return json;
  };
  const std::string first = run_traced();
  const std::string second = run_traced();
  ASSERT_TRUE(ModelManager::Initialize(test::ManagerOptions()).ok());  // for TearDown
  EXPECT_EQ(first, second) << "a deterministic run's trace changed";
  const nlohmann::json trace = nlohmann::json::parse(first, nullptr, false);
  ASSERT_FALSE(trace.is_discarded());
  const nlohmann::json& events = trace.is_object() ? trace["traceEvents"] : trace;
  std::map<std::int64_t, std::string> track_names;
  std::map<std::int64_t, std::vector<std::string>> by_track;
  for (const nlohmann::json& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name")
      track_names[e.value("tid", std::int64_t{-1})] = e["args"].value("name", "");
    if (e.value("ph", "") == "X") by_track[e.value("tid", std::int64_t{-1})].push_back(e.value("name", ""));
  }
  std::vector<std::string> all;
  for (const auto& [tid, names] : by_track) {
    std::string line = track_names[tid] + ":";
    for (const std::string& n : names) line += " " + n;
    all.push_back(line);
  }
  // The kernel's stream: the wait for the tiling, 8 NOPs, the kernel (tasks are named after their
  // node). The tiling stream: the AICPU tiling, the update, the record. The AICPU unit ran the
  // tiling; AICore ran the kernel with the block_dim the update wrote: 1, since the tiling's B * H
  // = 2 blocks of under 400 bytes each do not pay for a second dispatch (graph::TileOp's cap).
  std::string joined;
  for (const std::string& l : all) joined += l + "\n";
  auto ends_with = [](const std::string& l, const std::string& tail) {
    return l.size() >= tail.size() && l.compare(l.size() - tail.size(), tail.size(), tail) == 0;
  };
  int main_lines = 0, tiling_lines = 0, aicpu_lines = 0, aicore_blocks = 0;
  for (const std::string& l : all) {
    main_lines += l.rfind("stream ", 0) == 0 && ends_with(l, ": event_wait nop nop nop nop nop nop nop nop att");
    tiling_lines += l.rfind("stream ", 0) == 0 && ends_with(l, ": att att:task_update record e0");
    aicpu_lines += l == "aicpu 0: att";
    // A split kernel's parts are named "att [b0, b1)", a whole one "att".
    aicore_blocks += l.rfind("aicore ", 0) == 0 && (ends_with(l, ": att") || l.find(": att [") != std::string::npos);
  }
  EXPECT_EQ(main_lines, 1) << joined;
  EXPECT_EQ(tiling_lines, 1) << joined;
  EXPECT_EQ(aicpu_lines, 1) << joined;
  EXPECT_EQ(aicore_blocks, 1) << joined;
}

// A task update whose tiling context (the AICPU tiling task) or target kernel was never
// distributed is a clear load error naming the node, not a patch from nowhere.
TEST_F(TilingSinkRun, AnUpdateWithoutItsRecordsIsAClearError) {
  graph::CompileOptions options;
  options.tiling_schedule_optimize = "1";
  struct Cut {
    const char* what;
    const char* message;
  };
  for (const Cut& cut : {Cut{"context", "no tiling context recorded for it"},
                         Cut{"words", "its own AICPU tiling task writes the one at"},
                         Cut{"kernel", "no kernel task recorded for it"}}) {
    auto compiled = lowering::CompileV1(*graph::ParseGraphText(kAttentionOnly, "attention.pbtxt"), options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    graph::CompiledModel m = std::move(*compiled);
    graph::StreamDef& tiling = m.streams.back();
    ASSERT_EQ(tiling.tasks[0].type, graph::TaskType::kAicpuKernel);
    if (std::string(cut.what) == "context") {
      tiling.tasks.erase(tiling.tasks.begin());  // no AICPU tiling task: no context recorded
    } else if (std::string(cut.what) == "words") {
      ASSERT_EQ(tiling.tasks[1].type, graph::TaskType::kTaskUpdate);
      tiling.tasks[1].block_dim_ref.offset += 64;  // words in no context the AICPU task writes
      tiling.tasks[1].tiling_key_ref.offset += 64;
    } else {
      for (graph::TaskDef& t : m.streams[0].tasks)  // the kernel no longer carries the placeholder
        if (t.type == graph::TaskType::kKernel) t.block_dim = 1;
    }
    auto session = Session::Create({});
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->AddCompiledModel(1, std::make_shared<const graph::CompiledModel>(std::move(m))).ok());
    Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [](std::size_t i) { return 0.1f * i; });
    Tensor len = test::FilledI32(graph::Shape{1}, [](std::size_t) { return 3; });
    auto got = (*session)->RunGraph(1, {q, len});
    ASSERT_FALSE(got.ok()) << cut.what;
    EXPECT_NE(got.status().message().find(cut.message), std::string_view::npos) << got.status();
    EXPECT_NE(got.status().message().find("node 'att'"), std::string_view::npos) << got.status();
    ASSERT_TRUE((*session)->Finalize().ok());
  }
}

// Perturbs deliveries at random, so the order between the tiling stream and the kernel's stream
// comes only from the events, the NOPs and the prefetch window.
class JitterTap : public actors::DeliveryTap {
 public:
  explicit JitterTap(std::uint32_t seed) : rng_(seed) {}
  std::chrono::nanoseconds OnDelivery(const actors::Delivery&) override {
    std::lock_guard<std::mutex> lock(mu_);
    return rng_() % 4 == 0 ? std::chrono::nanoseconds(rng_() % 20'000) : std::chrono::nanoseconds(0);
  }

 private:
  std::mutex mu_;
  std::mt19937 rng_;
};

// Shared tiling: the second Attention has no wait, NOPs or AICPU task of its own; its update
// lands before the first kernel's wait passes. Deliveries jittered at random, every run is clean
// (no task-update race) and equals the interpreter, as with one chain per node.
TEST_F(TilingSinkRun, NodesSharingOneTilingRunCleanUnderJitteredDeliveries) {
  auto ref_graph = graph::ParseGraphText(kTwoAttentions, "two_attentions.pbtxt");
  ASSERT_TRUE(ref_graph.ok()) << ref_graph.status();
  auto interp = graph::Interpreter::Create(**ref_graph);
  ASSERT_TRUE(interp.ok()) << interp.status();
  static JitterTap tap(29);
  ASSERT_TRUE(rt().system().SetTap(&tap).ok());
  for (bool share : {true, false}) {
    SCOPED_TRACE(share ? "shared" : "one chain each");
    auto session = Session::Create({{"npuflow.executeTimeoutMs", "10000"}});
    ASSERT_TRUE(session.ok()) << session.status();
    graph::CompileOptions options;
    options.tiling_schedule_optimize = "1";
    options.stream_mode = graph::CompileOptions::StreamMode::kSingle;
    options.tiling_sink_share = share;
    auto compiled = lowering::CompileV1(*graph::ParseGraphText(kTwoAttentions, "two_attentions.pbtxt"), options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    int aicpu = 0;
    for (const graph::TaskDef& t : compiled->streams.back().tasks) aicpu += t.type == graph::TaskType::kAicpuKernel;
    EXPECT_EQ(aicpu, share ? 1 : 2);
    ASSERT_TRUE((*session)->AddCompiledModel(1, std::make_shared<const graph::CompiledModel>(std::move(*compiled))).ok());
    const int runs = share ? 400 : 50;
    for (int r = 0; r < runs; ++r) {
      const std::int32_t p = r % 8;
      Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.1f * (i + p); });
      Tensor len = test::FilledI32(graph::Shape{1}, [p](std::size_t) { return p + 1; });
      auto got = (*session)->RunGraph(1, {q, len});
      ASSERT_TRUE(got.ok()) << "run " << r << ": " << got.status();
      auto want = (*interp)->Run({{"q", q}, {"len", len}});
      ASSERT_TRUE(want.ok()) << want.status();
      for (std::size_t i = 0; i < 8; ++i)
        ASSERT_NEAR(graph::LoadF((*got)[0], i), graph::LoadF((*want)[0], i), 1e-5) << "run " << r;
    }
    ASSERT_TRUE((*session)->Finalize().ok());
  }
  ASSERT_TRUE(rt().system().SetTap(nullptr).ok());
}

// --tiling-sink-nops K: with fewer NOPs than the 910B's prefetch_num (8) the kernel is fetched
// before the update lands, a race the stream detects and names; with 8 every run is clean.
TEST_F(TilingSinkRun, FewerNopsThanThePrefetchWindowIsADetectedRace) {
  auto ref_graph = graph::ParseGraphText(kAttentionOnly, "attention.pbtxt");
  auto interp = graph::Interpreter::Create(**ref_graph);
  ASSERT_TRUE(interp.ok()) << interp.status();
  // Static: a drain that read the tap before SetTap(nullptr) may still call it while the test
  // ends (a local would be gone by then).
  static JitterTap tap(11);
  ASSERT_TRUE(rt().system().SetTap(&tap).ok());
  for (int k = 0; k <= 8; ++k) {
    auto session = Session::Create({{"npuflow.executeTimeoutMs", "10000"}});
    ASSERT_TRUE(session.ok()) << session.status();
    graph::CompileOptions options;
    options.tiling_schedule_optimize = "1";
    options.tiling_sink_nops = k;
    auto compiled = lowering::CompileV1(*graph::ParseGraphText(kAttentionOnly, "attention.pbtxt"), options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    ASSERT_TRUE((*session)->AddCompiledModel(1, std::make_shared<const graph::CompiledModel>(std::move(*compiled))).ok());
    const int runs = k == 8 ? 1000 : 25;
    for (int r = 0; r < runs; ++r) {
      const std::int32_t p = r % 8;
      Tensor q = test::FilledF32(graph::Shape{2, 1, 4}, [p](std::size_t i) { return 0.1f * (i + p); });
      Tensor len = test::FilledI32(graph::Shape{1}, [p](std::size_t) { return p + 1; });
      auto got = (*session)->RunGraph(1, {q, len});
      if (k < 8) {
        ASSERT_FALSE(got.ok()) << "K = " << k << " run " << r << " was not detected";
        const std::string_view m = got.status().message();
        EXPECT_NE(m.find("task update race"), std::string_view::npos) << m;
        EXPECT_NE(m.find("updates stream"), std::string_view::npos) << m;  // names the update and the kernel
        EXPECT_NE(m.find("at least 8 NOPs"), std::string_view::npos) << m;
        continue;
      }
      ASSERT_TRUE(got.ok()) << "K = 8 run " << r << ": " << got.status();
      auto want = (*interp)->Run({{"q", q}, {"len", len}});
      ASSERT_TRUE(want.ok()) << want.status();
      for (std::size_t i = 0; i < 8; ++i)
        ASSERT_NEAR(graph::LoadF((*got)[0], i), graph::LoadF((*want)[0], i), 1e-5) << "run " << r;
    }
    ASSERT_TRUE((*session)->Finalize().ok());
  }
  ASSERT_TRUE(rt().system().SetTap(nullptr).ok());
}

}  // namespace
}  // namespace npuflow::scheduler
