// The tiling sink's compile side (lowering/tiling_sink.h): the option's values, and
// mark-tiling-sink's triple gate, each gate failing alone.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>
#include <set>
#include <map>

#include "graph/ir/text_format.h"
#include "graph/model_file/model_file.h"
#include "graph/ops/tiling_context.h"
#include "graph/ops/op_registry.h"
#include "lowering/compiler.h"
#include "lowering/memory_plan.h"
#include "lowering/tiling_sink.h"
#include "npu_sim/runtime.h"
#include "scheduler/session.h"

namespace npuflow::lowering {
namespace {

using graph::Segment;

// One decode step's attention: q[2, 1, 4] over a cache[2, 8, 4] Variable, valid_len a Data input
// (known only at run time) unless `len_const` gives it as a Const.
std::string AttentionGraph(const std::string& op = "Attention", int len_const = 0) {
  std::string len =
      len_const > 0
          ? "node { name: \"len\" op: \"Const\" attr { key: \"value\" value { tensor { dtype: DT_INT32 "
            "shape { dim { size: 1 } } int_val: " +
                std::to_string(len_const) + " } } } }\n"
          : "node { name: \"len\" op: \"Data\" attr { key: \"dtype\" value { type: DT_INT32 } } "
            "attr { key: \"shape\" value { shape { dim { size: 1 } } } } }\n";
  return R"pb(
    node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
    node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
  )pb" + len + "node { name: \"att\" op: \"" + op +
         "\" input: \"q\" input: \"cache\" input: \"cache\" input: \"len\" }\n"
         "node { name: \"out\" op: \"NetOutput\" input: \"att\" }\n";
}

StatusOr<graph::CompiledModel> Compile(const std::string& text, CompileOptions options) {
  graph::RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(auto g, graph::ParseGraphText(text, "attention.pbtxt"));
  return CompileV1(std::move(g), options);
}

// An Attention that tiles only on the host: the op gate fails.
void RegisterHostTiledAttention() {
  graph::RegisterBuiltinOps();
  graph::OpDef def = **graph::OpRegistry::Global().Find("Attention");
  def.type = "HostTiledAttention";
  def.tiling_on_aicpu = false;
  graph::OpRegistry::Global().Register(def);
}

TEST(TilingSink, OptionValues) {
  for (const char* ok : {"", "0", "1"}) EXPECT_TRUE(CheckTilingScheduleOptimize(ok, "opt").ok()) << ok;
  for (const char* bad : {"2", "true", " 1", "on", "01"}) {
    Status s = CheckTilingScheduleOptimize(bad, "ge.tiling_schedule_optimize");
    EXPECT_EQ(s.code(), StatusCode::kParamInvalid) << bad;
    EXPECT_NE(s.message().find("ge.tiling_schedule_optimize '" + std::string(bad) + "'"), std::string_view::npos) << s;
    EXPECT_NE(s.message().find("expected \"\", \"0\""), std::string_view::npos) << s;
  }
  CompileOptions options;
  options.tiling_schedule_optimize = "yes";
  Status s = CheckCompileOptions(options);
  EXPECT_NE(s.message().find("--tiling_schedule_optimize 'yes'"), std::string_view::npos) << s;
  options.tiling_schedule_optimize = "1";
  options.tiling_sink_nops = 65;
  s = CheckCompileOptions(options);
  EXPECT_NE(s.message().find("--tiling-sink-nops 65: expected 0 to 64"), std::string_view::npos) << s;

  auto parsed = scheduler::ParseGraphOptions({{"ge.tiling_schedule_optimize", "1"}});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->tiling_schedule_optimize, "1");
  parsed = scheduler::ParseGraphOptions({{"ge.tiling_schedule_optimize", "2"}});
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("option ge.tiling_schedule_optimize '2'"), std::string_view::npos)
      << parsed.status();
}

struct GateCase {
  const char* what;
  std::string option;
  std::string chip;
  bool online;
  const char* op;
  bool marked;
  const char* gate;  // the failed gate, when not marked
};

TEST(TilingSink, EachGateFailingAloneSendsTheNodeDynamic) {
  RegisterHostTiledAttention();
  const GateCase cases[] = {
      {"all gates pass", "1", "910B", true, "Attention", true, ""},
      {"option unset", "", "910B", true, "Attention", false, "option"},
      {"option 0", "0", "910B", true, "Attention", false, "option"},
      {"device without task update, online", "1", "310P", true, "Attention", false, "device"},
      {"device gate skipped offline", "1", "310P", false, "Attention", true, ""},
      {"op without AICPU tiling", "1", "910B", true, "HostTiledAttention", false, "op"},
  };
  for (const GateCase& c : cases) {
    CompileOptions options;
    options.chip = c.chip;
    options.online = c.online;
    options.tiling_schedule_optimize = c.option;
    auto model = Compile(AttentionGraph(c.op), options);
    ASSERT_TRUE(model.ok()) << c.what << ": " << model.status();
    ASSERT_EQ(model->tiling_sink.size(), 1u) << c.what;
    const graph::TilingSinkDecision& d = model->tiling_sink[0];
    EXPECT_EQ(d.node, "att") << c.what;
    EXPECT_EQ(d.marked, c.marked) << c.what;
    EXPECT_EQ(d.gate, c.gate) << c.what;
    const graph::Node* att = model->graph->FindNode("att");
    ASSERT_NE(att, nullptr);
    EXPECT_EQ(att->op().AttrOr<bool>("_tiling_sink", false).value(), c.marked) << c.what;
    EXPECT_EQ(att->op().AttrOr<std::string>("_tiling_dynamic", "").value(), c.gate) << c.what;
    if (!c.marked) {
      EXPECT_FALSE(d.why.empty()) << c.what;
    }
  }
}

TEST(TilingSink, AConstDependValueIsTiledAtCompileTime) {
  CompileOptions options;
  options.tiling_schedule_optimize = "1";
  auto model = Compile(AttentionGraph("Attention", 5), options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(model->tiling_sink.empty());
  EXPECT_FALSE(model->graph->FindNode("att")->op().HasAttr("_tiling_sink"));
}

// The two streams of one marked node, as gen-tasks writes them (seed 003, 4.3), on a chip's
// prefetch_num NOPs or --tiling-sink-nops.
TEST(TilingSink, TheTaskSequenceOnBothStreams) {
  struct Case {
    std::string chip;
    int nops_option;
    int nops;
  };
  for (const Case& c : {Case{"910B", -1, 8}, Case{"310P", -1, 5}, Case{"910B", 3, 3}, Case{"910B", 0, 0}}) {
    const std::string what = c.chip + " nops " + std::to_string(c.nops_option);
    CompileOptions options;
    options.chip = c.chip;
    options.tiling_schedule_optimize = "1";  // offline: the device gate is skipped, 310P included
    options.tiling_sink_nops = c.nops_option;
    auto model = Compile(AttentionGraph(), options);
    ASSERT_TRUE(model.ok()) << what << ": " << model.status();
    ASSERT_EQ(model->streams.size(), 2u) << what;
    const graph::StreamDef& main = model->streams[0];
    const graph::StreamDef& tiling = model->streams[1];
    EXPECT_EQ(tiling.name, "tiling");
    EXPECT_EQ(tiling.engine, graph::OpEngine::kAICpu);
    // Tiling stream: AICPU tiling (context, valid_len) -> task update -> record.
    ASSERT_EQ(tiling.tasks.size(), 3u) << what;
    EXPECT_EQ(tiling.tasks[0].type, graph::TaskType::kAicpuKernel);
    EXPECT_EQ(tiling.tasks[0].kernel, graph::kAicpuTilingKernel);
    ASSERT_EQ(tiling.tasks[0].args.size(), 2u);
    EXPECT_EQ(tiling.tasks[0].args[0].segment, Segment::kTilingData);
    EXPECT_EQ(tiling.tasks[0].args[1].segment, Segment::kInput);  // valid_len, a model input
    const graph::TaskDef& update = tiling.tasks[1];
    EXPECT_EQ(update.type, graph::TaskType::kTaskUpdate);
    EXPECT_EQ(tiling.tasks[2].type, graph::TaskType::kEventRecord);
    // Main stream: wait -> NOP x N -> the kernel with the placeholder block_dim.
    ASSERT_EQ(main.tasks.size(), static_cast<std::size_t>(c.nops + 2)) << what;
    EXPECT_EQ(main.tasks[0].type, graph::TaskType::kEventWait);
    EXPECT_EQ(main.tasks[0].event, tiling.tasks[2].event);
    for (int i = 1; i <= c.nops; ++i) EXPECT_EQ(main.tasks[i].type, graph::TaskType::kNop) << what;
    const graph::TaskDef& kernel = main.tasks.back();
    EXPECT_EQ(kernel.type, graph::TaskType::kKernel);
    EXPECT_EQ(kernel.block_dim, graph::kTilingSinkBlockDim);
    EXPECT_EQ(update.target_stream, 0u);
    EXPECT_EQ(update.target_task, main.tasks.size() - 1);
    // The update reads the words of the context the AICPU task writes.
    const std::uint64_t ctx = tiling.tasks[0].args[0].offset;
    EXPECT_EQ(update.block_dim_ref.offset, ctx + graph::kTilingContextBlockDimOffset);
    EXPECT_EQ(update.tiling_key_ref.offset, ctx + graph::kTilingContextTilingKeyOffset);
    auto info = graph::DecodeTilingContext(std::span(model->tiling_data).subspan(ctx));
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->op.type(), "Attention");
    EXPECT_EQ(info->op.name(), "att");
    ASSERT_EQ(info->inputs.size(), 4u);
    EXPECT_EQ(info->inputs[1].shape.ToString(), "[2, 8, 4]");
    EXPECT_EQ(info->header.block_dim, graph::kTilingSinkBlockDim);
    // Written and read back, the model is the same.
    auto bytes = graph::SerializeModel(*model);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    auto again = graph::ParseModel(*bytes, "model");
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_EQ(again->streams.size(), 2u);
    EXPECT_EQ(again->streams[1].name, "tiling");
    EXPECT_EQ(again->streams[1].tasks[1].target_task, update.target_task);
    EXPECT_EQ(again->streams[1].tasks[1].tiling_key_ref.offset, update.tiling_key_ref.offset);
    EXPECT_EQ(again->options.tiling_schedule_optimize, "1");
    EXPECT_EQ(again->options.tiling_sink_nops, c.nops_option);
  }
}

// Two Attentions on one stream; the second's valid_len is `len2` (the same tensor as the first's
// unless told otherwise) and its query `q2_shape` long.
std::string TwoAttentions(const std::string& len2 = "len", int q2_rows = 1, const std::string& len_op = "Data") {
  return R"pb(
    node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
    node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
    node { name: "q2" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: )pb" +
         std::to_string(q2_rows) + R"pb( } dim { size: 4 } } } } }
    node { name: "len" op: ")pb" + len_op + R"pb(" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "other_len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "a1" op: "Attention" input: "q" input: "cache" input: "cache" input: "len" }
    node { name: "a2" op: "Attention" input: "q2" input: "cache" input: "cache" input: ")pb" +
         len2 + R"pb(" }
    node { name: "out" op: "NetOutput" input: "a1" input: "a2" }
  )pb";
}

TEST(TilingSink, NodesWithTheSameTilingOnOneStreamShareOneAicpuTask) {
  CompileOptions options;
  options.tiling_schedule_optimize = "1";
  options.stream_mode = CompileOptions::StreamMode::kSingle;
  auto model = Compile(TwoAttentions(), options);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->streams.size(), 2u);
  const graph::StreamDef& main = model->streams[0];
  const graph::StreamDef& tiling = model->streams[1];
  // Tiling stream: one AICPU tiling, both updates, one record.
  ASSERT_EQ(tiling.tasks.size(), 4u);
  EXPECT_EQ(tiling.tasks[0].type, graph::TaskType::kAicpuKernel);
  EXPECT_EQ(tiling.tasks[0].node, "a1");
  const std::uint64_t ctx = tiling.tasks[0].args[0].offset;
  for (std::size_t i : {1u, 2u}) {
    const graph::TaskDef& u = tiling.tasks[i];
    EXPECT_EQ(u.type, graph::TaskType::kTaskUpdate);
    EXPECT_EQ(u.node, i == 1 ? "a1" : "a2");
    EXPECT_EQ(u.block_dim_ref.offset, ctx + graph::kTilingContextBlockDimOffset) << "the first node's context";
    EXPECT_EQ(u.tiling_key_ref.offset, ctx + graph::kTilingContextTilingKeyOffset);
    ASSERT_LT(u.target_task, main.tasks.size());
    EXPECT_EQ(main.tasks[u.target_task].type, graph::TaskType::kKernel);
    EXPECT_EQ(main.tasks[u.target_task].node, u.node);
    EXPECT_EQ(main.tasks[u.target_task].block_dim, graph::kTilingSinkBlockDim);
  }
  EXPECT_EQ(tiling.tasks[3].type, graph::TaskType::kEventRecord);
  // Main stream: one wait and the NOPs, before the first kernel only.
  int waits = 0, nops = 0;
  for (const graph::TaskDef& t : main.tasks) {
    waits += t.type == graph::TaskType::kEventWait;
    nops += t.type == graph::TaskType::kNop;
  }
  EXPECT_EQ(waits, 1);
  EXPECT_EQ(nops, 8);
  EXPECT_EQ(main.tasks[0].type, graph::TaskType::kEventWait);
  EXPECT_EQ(main.tasks[0].event, tiling.tasks[3].event);
  EXPECT_EQ(model->event_count, 1u);
  // Written and read back, the same tasks.
  auto again = graph::ParseModel(*graph::SerializeModel(*model), "model");
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->streams[1].tasks.size(), 4u);
  EXPECT_EQ(again->streams[1].tasks[2].block_dim_ref.offset, ctx + graph::kTilingContextBlockDimOffset);
}

TEST(TilingSink, NodesWhoseTilingDiffersOrWithSharingOffEachHaveTheirOwnChain) {
  struct Case {
    std::string what;
    std::string text;
    bool share;
  };
  for (const Case& c : {Case{"sharing off", TwoAttentions(), false},
                        Case{"another valid_len tensor", TwoAttentions("other_len"), true},
                        Case{"another query shape", TwoAttentions("len", 3), true},
                        Case{"valid_len a Variable (the run may write it)", TwoAttentions("len", 1, "Variable"), true}}) {
    CompileOptions options;
    options.tiling_schedule_optimize = "1";
    options.stream_mode = CompileOptions::StreamMode::kSingle;
    options.tiling_sink_share = c.share;
    auto model = Compile(c.text, options);
    ASSERT_TRUE(model.ok()) << c.what << ": " << model.status();
    const graph::StreamDef& tiling = model->streams.back();
    int aicpu = 0, records = 0;
    for (const graph::TaskDef& t : tiling.tasks) {
      aicpu += t.type == graph::TaskType::kAicpuKernel;
      records += t.type == graph::TaskType::kEventRecord;
    }
    EXPECT_EQ(aicpu, 2) << c.what;
    EXPECT_EQ(records, 2) << c.what;
  }
}

TEST(TilingSink, InterleavedGroupsEachPutTheirUpdatesBeforeTheirOwnRecord) {
  // a1 and a3 tile from `len`, a2 and a4 from `other_len`: two groups, their tasks interleaved on
  // the tiling stream.
  const std::string text = R"pb(
    node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
    node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
    node { name: "len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "other_len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "a1" op: "Attention" input: "q" input: "cache" input: "cache" input: "len" }
    node { name: "a2" op: "Attention" input: "a1" input: "cache" input: "cache" input: "other_len" }
    node { name: "a3" op: "Attention" input: "a2" input: "cache" input: "cache" input: "len" }
    node { name: "a4" op: "Attention" input: "a3" input: "cache" input: "cache" input: "other_len" }
    node { name: "out" op: "NetOutput" input: "a4" }
  )pb";
  CompileOptions options;
  options.tiling_schedule_optimize = "1";
  options.stream_mode = CompileOptions::StreamMode::kSingle;
  auto model = Compile(text, options);
  ASSERT_TRUE(model.ok()) << model.status();
  const graph::StreamDef& main = model->streams[0];
  const graph::StreamDef& tiling = model->streams[1];
  // Per group: AICPU task, its updates, its record; the record an event the main stream waits on
  // before the group's first kernel.
  std::vector<std::string> seq;
  std::map<std::string, std::uint64_t> context_of;  // node -> the context its update reads
  std::uint64_t current = 0;
  for (const graph::TaskDef& t : tiling.tasks) {
    if (t.type == graph::TaskType::kAicpuKernel) {
      seq.push_back("tile " + t.node);
      current = t.args[0].offset;
    } else if (t.type == graph::TaskType::kTaskUpdate) {
      seq.push_back("update " + t.node);
      EXPECT_EQ(t.block_dim_ref.offset, current + graph::kTilingContextBlockDimOffset) << t.node;
      EXPECT_EQ(main.tasks.at(t.target_task).node, t.node);
      EXPECT_EQ(main.tasks.at(t.target_task).type, graph::TaskType::kKernel);
    } else if (t.type == graph::TaskType::kEventRecord) {
      seq.push_back("record " + t.node);
    }
  }
  EXPECT_EQ(seq, (std::vector<std::string>{"tile a1", "update a1", "update a3", "record a1", "tile a2", "update a2",
                                           "update a4", "record a2"}));
  int waits = 0;
  for (const graph::TaskDef& t : main.tasks) waits += t.type == graph::TaskType::kEventWait;
  EXPECT_EQ(waits, 2);
}

TEST(TilingSink, NodesOnDifferentStreamsDoNotShare) {
  // Multi-stream: a1 and a2 (the same tiling) on parallel branches, each with its own chain.
  const std::string text = R"pb(
    node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
    node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
    node { name: "len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "q1" op: "Relu" input: "q" }
    node { name: "q2" op: "Tanh" input: "q" }
    node { name: "a1" op: "Attention" input: "q1" input: "cache" input: "cache" input: "len" }
    node { name: "a2" op: "Attention" input: "q2" input: "cache" input: "cache" input: "len" }
    node { name: "sum" op: "Add" input: "a1" input: "a2" }
    node { name: "out" op: "NetOutput" input: "sum" }
  )pb";
  CompileOptions options;
  options.tiling_schedule_optimize = "1";
  auto model = Compile(text, options);
  ASSERT_TRUE(model.ok()) << model.status();
  std::set<std::uint32_t> streams;
  int aicpu = 0;
  for (const graph::StreamDef& s : model->streams)
    for (const graph::TaskDef& t : s.tasks) {
      if (t.type == graph::TaskType::kKernel && t.block_dim == graph::kTilingSinkBlockDim) streams.insert(s.id);
      aicpu += t.type == graph::TaskType::kAicpuKernel;
    }
  ASSERT_EQ(streams.size(), 2u) << "the two Attentions are on two streams";
  EXPECT_EQ(aicpu, 2);
}

// A custom op tiled on the device gets 20 KB of workspace beyond its host tiling's (GE's margin),
// recorded in its tiling context as the bound the device tiling is checked against; npuflow's own
// op gets none, and the custom op gets none without the sink.
TEST(TilingSink, ACustomOpGetsTwentyKilobytesMoreWorkspace) {
  graph::RegisterBuiltinOps();
  graph::OpDef def = **graph::OpRegistry::Global().Find("Attention");
  def.type = "CustomAttention";
  def.custom = true;
  graph::OpRegistry::Global().Register(def);
  auto workspace_of_att = [](const graph::CompiledModel& m) -> std::uint64_t {
    for (const graph::TensorPlacement& t : m.memory.tensors)
      if (t.node == "att" && t.output == kWorkspaceOutput) return t.bytes;
    return 0;
  };
  CompileOptions sink;
  sink.tiling_schedule_optimize = "1";
  for (const char* op : {"CustomAttention", "Attention"}) {
    auto model = Compile(AttentionGraph(op), sink);
    ASSERT_TRUE(model.ok()) << op << ": " << model.status();
    const std::uint64_t ws = workspace_of_att(*model);
    const bool custom = std::string(op) == "CustomAttention";
    if (custom) {
      EXPECT_GE(ws, graph::kCustomOpSinkWorkspaceBytes) << op;
    } else {
      EXPECT_EQ(ws, 0u) << op;
    }
    const graph::TaskDef& tile = model->streams.back().tasks[0];
    auto info = graph::DecodeTilingContext(std::span(model->tiling_data).subspan(tile.args[0].offset));
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->header.workspace_bytes, ws) << op;
  }
  auto plain = Compile(AttentionGraph("CustomAttention"), CompileOptions{});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(workspace_of_att(*plain), 0u);
}

// Two marked nodes on parallel streams joined by insert-events' events: every event has one
// record, the sink's numbered after insert-events' own (a shared id deadlocked a GPT-2 step).
TEST(TilingSink, TheSinksEventsAreNumberedAfterInsertEvents) {
  const std::string text = R"pb(
    node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
    node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
    node { name: "len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "q1" op: "Relu" input: "q" }
    node { name: "q2" op: "Tanh" input: "q" }
    node { name: "a1" op: "Attention" input: "q1" input: "cache" input: "cache" input: "len" }
    node { name: "a2" op: "Attention" input: "q2" input: "cache" input: "cache" input: "len" }
    node { name: "sum" op: "Add" input: "a1" input: "a2" }
    node { name: "out" op: "NetOutput" input: "sum" }
  )pb";
  CompileOptions options;
  options.tiling_schedule_optimize = "1";
  auto model = Compile(text, options);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->tiling_sink.size(), 2u);
  std::vector<int> records(model->event_count, 0);
  for (const graph::StreamDef& s : model->streams)
    for (const graph::TaskDef& t : s.tasks)
      if (t.type == graph::TaskType::kEventRecord) ++records.at(t.event);
  for (std::size_t e = 0; e < records.size(); ++e) EXPECT_EQ(records[e], 1) << "event " << e;
}

TEST(TilingSink, AContextThatIsNotOneIsAClearError) {
  std::vector<std::uint8_t> bytes(8, 0);
  EXPECT_EQ(graph::DecodeTilingContext(bytes).status().code(), StatusCode::kDataCorrupted);
  auto good = graph::EncodeTilingContext(graph::OpDesc("att", "Attention"), {}, 0, graph::TileTarget{.core_count = 8});
  ASSERT_TRUE(good.ok());
  std::vector<std::uint8_t> truncated(good->begin(), good->end() - 1);
  Status s = graph::DecodeTilingContext(truncated).status();
  EXPECT_NE(s.message().find("runs past"), std::string_view::npos) << s;
  std::vector<std::uint8_t> old_layout = *good;  // the 32-byte header before the block costs
  const std::uint32_t old_magic = 0x4B4E5354;   // "TSNK"
  std::memcpy(old_layout.data(), &old_magic, 4);
  s = graph::DecodeTilingContext(old_layout).status();
  EXPECT_NE(s.message().find("recompile the model"), std::string_view::npos) << s;
  (*good)[0] ^= 1;
  s = graph::DecodeTilingContext(*good).status();
  EXPECT_NE(s.message().find("magic"), std::string_view::npos) << s;
}

// The AICPU tiling task on npu_sim: valid_len read from device memory, the op's tiling function
// run on an AICPU unit, block_dim and the key written into the context, equal to the host's.
TEST(TilingSink, TheAicpuTaskTilesFromTheValueInDeviceMemory) {
  graph::RegisterBuiltinOps();
  npu_sim::RuntimeOptions ro;
  ro.workers = 2;
  auto rt = npu_sim::Runtime::Create(ro);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const npu_sim::ChipSpec& chip = **(*rt)->chip(0);
  using graph::DataType;
  using graph::TensorDesc;
  const std::vector<TensorDesc> inputs = {{DataType::kFloat32, graph::Shape{12, 1, 64}},
                                          {DataType::kFloat32, graph::Shape{12, 1024, 64}},
                                          {DataType::kFloat32, graph::Shape{12, 1024, 64}},
                                          {DataType::kInt32, graph::Shape{1}}};
  const graph::OpDesc op("h0/attn/mha", "Attention");
  auto context = graph::EncodeTilingContext(op, inputs, 0, graph::TileTargetOf(chip));
  ASSERT_TRUE(context.ok()) << context.status();
  auto ctx = (*rt)->Malloc(0, context->size(), npu_sim::Placement::kHbm);
  auto len = (*rt)->Malloc(0, 4, npu_sim::Placement::kHbm);
  ASSERT_TRUE(ctx.ok() && len.ok());
  ASSERT_TRUE((*rt)->MemcpyH2D(0, *ctx, context->data(), context->size()).ok());
  const graph::OpDef& def = **graph::OpRegistry::Global().Find("Attention");
  const npu_sim::Stream stream = (*rt)->DefaultStream(0);
  for (std::int32_t valid : {1, 100, 128, 129, 1000, 1024}) {
    ASSERT_TRUE((*rt)->MemcpyH2D(0, *len, &valid, 4).ok());
    Status s = (*rt)->LaunchAicpuKernel(stream, graph::kAicpuTilingKernel, {ctx->value, len->value});
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE((*rt)->SynchronizeStream(stream).ok());
    graph::TilingContextHeader h;
    ASSERT_TRUE((*rt)->MemcpyD2H(0, &h, *ctx, sizeof(h)).ok());
    graph::Tensor value{inputs[3], std::vector<std::uint8_t>(4)};
    std::memcpy(value.data.data(), &valid, 4);
    auto host = graph::TileOp(def, op, inputs, {&value}, graph::TileTargetOf(chip));
    ASSERT_TRUE(host.ok()) << host.status();
    EXPECT_EQ(h.block_dim, host->block_dim) << "valid_len " << valid;
    EXPECT_EQ(h.tiling_key, host->tiling_key) << "valid_len " << valid;
  }
  // Not a context: a clear error naming the kernel.
  const std::vector<std::uint8_t> zeros(64, 0);
  ASSERT_TRUE((*rt)->MemcpyH2D(0, *ctx, zeros.data(), zeros.size()).ok());
  ASSERT_TRUE((*rt)->LaunchAicpuKernel(stream, graph::kAicpuTilingKernel, {ctx->value, len->value}).ok());
  Status s = (*rt)->SynchronizeStream(stream);
  EXPECT_NE(s.message().find("aicpu.TilingSink: argument 0 is not a tiling context"), std::string_view::npos) << s;
}

TEST(TilingSink, TheMarkIsPrintedAfterThePass) {
  std::vector<std::string> passes;
  for (const std::string& p : V1Pipeline()) {
    passes.push_back(p);
    if (p == "mark-tiling-sink") break;
  }
  CompileOptions options;
  options.tiling_schedule_optimize = "1";
  auto text = RunPassesOnText(AttentionGraph(), passes, options);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("_tiling_sink=true"), std::string::npos) << *text;
  options.tiling_schedule_optimize = "0";
  text = RunPassesOnText(AttentionGraph(), passes, options);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("_tiling_dynamic=\"option\""), std::string::npos) << *text;
}

}  // namespace
}  // namespace npuflow::lowering
