// gen-tasks: the per-stream task lists of the task sink. On each stream, in topological order, a
// node becomes: a wait per received event, its kernel (block_dim and tiling_key from the op's
// host tiling; its KernelParams written into the tiling-data segment; args in kernel_abi order),
// a record per sent event, and a copy into each model output block it feeds but does not write in
// place. A view (`_view`, plan-memory) has no kernel: its waits and records only. Outputs that
// come straight from a Data, Const or Variable are copied at the start of stream 0.
//
// A node mark-tiling-sink marked (`_tiling_sink`) is tiled on the device instead (seed 003):
//   attached stream "tiling" (the last stream, AICPU):
//     [wait e_ready] -> AICPU tiling (context, tiling-depend inputs) -> task update -> record e_tiled
//   the node's stream:
//     [record e_ready] -> wait e_tiled -> NOP x N -> kernel (block_dim kTilingSinkBlockDim)
// N is --tiling-sink-nops, else the chip's prefetch_num. e_ready (the node's inputs are ready on its
// stream) is needed only when a tiling-depend input is produced by a kernel of the model: model
// inputs and Variables are there when the run starts. The context (graph/ops/tiling_context.h)
// lives in the tiling-data segment; its workspace is the one host tiling run's.
//
// Shared tiling (CompileOptions::tiling_sink_share, on by default): a later marked node on the
// same stream whose tiling is the same computation as an earlier one's (TilingKey: the op type and
// its attributes but not its name or the compiler's "_" marks, the input descriptions, the
// workspace, and the very tensors its tiling depends on, which must be model inputs: nothing in the
// run writes them) joins that node's group. It gets no
// AICPU task, wait or NOPs of its own: its task update goes on the tiling stream before the
// group's record, so the first kernel's wait orders every update of the group before the stream
// reaches the later kernels (far past its prefetch window then). A GPT-2 decode step tiles its 12
// layers' Attention, all over the same valid_len, once instead of 12 times.
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <unordered_map>

#include "graph/kernels/kernel_abi.h"
#include "graph/ops/tiling_context.h"
#include "graph/ops/op_registry.h"
#include "lowering/graph_index.h"
#include "lowering/memory_plan.h"
#include "lowering/pass.h"

namespace npuflow::lowering {
namespace {

using graph::MemRef;
using graph::Segment;
using graph::TaskDef;
using graph::TaskType;

// Each kernel's KernelParams (its used prefix) starts on this boundary in the tiling segment.
constexpr std::uint64_t kParamsAlign = 64;

// Where plan-memory put each tensor. plan-memory lists a node's placements together (its outputs in
// order, then its workspace), in topological order: one merge walk finds each node's first. A plan
// in another order falls back to a name lookup.
class PlacementLookup {
 public:
  PlacementLookup(const GraphIndex& index, const std::vector<graph::TensorPlacement>& tensors)
      : index_(index), tensors_(tensors), first_at_(index.size(), kNone) {
    std::size_t cursor = 0;
    for (int pos = 0; pos < index.size() && cursor < tensors.size(); ++pos) {
      if (tensors[cursor].node != index.node(pos)->name()) continue;
      first_at_[pos] = cursor;
      while (cursor < tensors.size() && tensors[cursor].node == index.node(pos)->name()) ++cursor;
    }
    if (cursor != tensors.size())
      for (std::size_t i = 0; i < tensors.size(); ++i) first_by_name_.emplace(tensors[i].node, i);
  }

  const graph::TensorPlacement* Find(const graph::Node& node, int output) const {
    std::size_t first = first_at_[index_.pos(&node)];
    if (first == kNone && !first_by_name_.empty()) {
      auto it = first_by_name_.find(node.name());
      if (it != first_by_name_.end()) first = it->second;
    }
    if (first == kNone) return nullptr;
    for (std::size_t i = first; i < tensors_.size() && tensors_[i].node == node.name(); ++i)
      if (tensors_[i].output == output) return &tensors_[i];
    return nullptr;
  }
  StatusOr<const graph::TensorPlacement*> Where(const graph::Node& node, int output) const {
    if (const graph::TensorPlacement* t = Find(node, output)) return t;
    return Status::Internal("tensor {}:{} has no place in the memory plan", node.name(), output);
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  const GraphIndex& index_;
  const std::vector<graph::TensorPlacement>& tensors_;
  std::vector<std::size_t> first_at_;
  std::unordered_map<std::string_view, std::size_t> first_by_name_;
};

// The pass's state, and one method per stage; GenTasksPass runs them in order.
class TaskGenerator {
 public:
  TaskGenerator(const GraphIndex& index, const npu_sim::ChipSpec& chip, const graph::CompileOptions& options,
                graph::CompiledModel& model)
      : index_(index), chip_(chip), options_(options), model_(model), places_(index, model.memory.tensors) {
    for (int pos = 0; pos < index.size(); ++pos) {
      const graph::Node& node = *index.node(pos);
      streams_ = std::max(streams_, StreamOf(node) + 1);
      if (IsTilingSink(node)) has_tiling_sink_ = true;
      // insert-events' ids first: the tiling sink's events are numbered after all of them.
      for (const char* attr : {"_send_events", "_recv_events"})
        for (std::int64_t e : node.op().AttrOr<std::vector<std::int64_t>>(attr, {}).value_or(std::vector<std::int64_t>{}))
          max_event_ = std::max(max_event_, e);
    }
    model_.streams.clear();
    model_.tiling_data.clear();
  }

  Status PlanOutputCopies();
  void CreateStreams();
  // Outputs that come straight from a host node (Data, Const, Variable): copied at the start of stream 0.
  Status EmitHostCopies() { return streams_ > 0 ? EmitCopies(-1, model_.streams[0]) : Status::Ok(); }
  Status EmitNode(int pos);
  void Finish() {
    model_.event_count = static_cast<std::uint32_t>(max_event_ + 1);
    model_.memory.segment_bytes[static_cast<int>(Segment::kTilingData)] = model_.tiling_data.size();
  }

 private:
  static bool IsTilingSink(const graph::Node& node) {
    return StreamOf(node) >= 0 && node.op().AttrOr<bool>("_tiling_sink", false).value_or(false);
  }
  Status EmitTilingSink(const graph::Node& node, const graph::OpDef& def, const graph::TilingInfo& tiling, int s,
                        TaskDef& kernel);
  // What makes two marked nodes' tilings the same computation (see the file comment); empty when
  // the node's tiling is not to be shared (it depends on something other than model inputs).
  StatusOr<std::string> TilingKey(const graph::Node& node, const graph::OpDef& def, std::uint64_t workspace);
  // Shared tiling: makes `node` a member of an earlier group with `key` on stream s, if there is
  // one (its update before the group's record, `kernel` with the placeholder block_dim).
  bool JoinTilingGroup(const graph::Node& node, const std::string& key, int s, TaskDef& kernel);
  Status EmitCopies(int key, graph::StreamDef& stream);
  Status EmitEvents(const graph::Node& node, const char* attr, TaskType type, graph::StreamDef& stream);
  StatusOr<graph::TilingInfo> Tile(const graph::Node& node, const graph::OpDef& def);
  StatusOr<std::uint64_t> AppendKernelParams(const graph::Node& node, const graph::OpDef& def);
  StatusOr<TaskDef> KernelTask(const graph::Node& node, const graph::OpDef& def, const graph::TilingInfo& tiling,
                               std::uint64_t params_off) const;

  const GraphIndex& index_;
  const npu_sim::ChipSpec& chip_;
  const graph::CompileOptions& options_;
  graph::CompiledModel& model_;
  PlacementLookup places_;
  int streams_ = 0;
  bool has_tiling_sink_ = false;
  int tiling_stream_ = -1;  // the attached "tiling" stream, when a node is marked
  std::int64_t max_event_ = -1;
  std::map<int, std::vector<std::size_t>> copies_after_;  // producer position (-1: host) -> output ids
  const graph::Node* net_output_ = nullptr;
  std::vector<char> engine_set_;
  std::vector<graph::TensorDesc> in_descs_;  // the current node's, reused
  // Shared tiling: the groups so far, each its key, stream, context offset, and where its record
  // sits on the tiling stream (the group's later updates go in before it).
  struct TilingGroup {
    std::string key;
    int stream = -1;
    std::uint64_t context = 0;
    std::size_t record_at = 0;
  };
  std::vector<TilingGroup> tiling_groups_;
};

// Model outputs: the copies each producer owes.
Status TaskGenerator::PlanOutputCopies() {
  for (int pos = 0; pos < index_.size(); ++pos) {
    const graph::Node& node = *index_.node(pos);
    if (node.type() != "NetOutput") continue;
    net_output_ = &node;
    if (node.inputs().size() != model_.outputs.size())
      return Status::Internal("NetOutput '{}' has {} inputs, the memory plan {} outputs", node.name(),
                              node.inputs().size(), model_.outputs.size());
    for (std::size_t k = 0; k < node.inputs().size(); ++k) {
      const graph::Endpoint& e = node.inputs()[k];
      NPUFLOW_ASSIGN_OR_RETURN(const graph::TensorPlacement* t, places_.Where(*e.node, e.index));
      if (t->ref == model_.outputs[k].ref) continue;
      const int p = index_.pos(e.node);
      copies_after_[StreamOf(*e.node) < 0 ? -1 : p].push_back(k);
    }
  }
  return Status::Ok();
}

void TaskGenerator::CreateStreams() {
  if (copies_after_.count(-1) && streams_ == 0) streams_ = 1;
  const int S = streams_;
  model_.streams.resize(S);
  for (int s = 0; s < S; ++s) model_.streams[s].id = static_cast<std::uint32_t>(s);
  std::vector<std::size_t> per_stream(S, 0);
  std::size_t kernels = 0;
  for (int pos = 0; pos < index_.size(); ++pos)
    if (const int s = StreamOf(*index_.node(pos)); s >= 0) {
      per_stream[s] += 2;  // the kernel, and room for its sync tasks
      ++kernels;
    }
  for (int s = 0; s < S; ++s) model_.streams[s].tasks.reserve(per_stream[s]);
  if (has_tiling_sink_) {  // made now: a stream added later would move the others under EmitNode
    tiling_stream_ = S;
    graph::StreamDef& t = model_.streams.emplace_back();
    t.id = static_cast<std::uint32_t>(S);
    t.engine = graph::OpEngine::kAICpu;
    t.name = "tiling";
  }
  model_.tiling_data.reserve(kernels * 256);
  engine_set_.assign(S, 0);
}

Status TaskGenerator::EmitCopies(int key, graph::StreamDef& stream) {
  auto it = copies_after_.find(key);
  if (it == copies_after_.end()) return Status::Ok();
  for (std::size_t k : it->second) {
    const graph::Endpoint& e = net_output_->inputs()[k];
    NPUFLOW_ASSIGN_OR_RETURN(const graph::TensorPlacement* t, places_.Where(*e.node, e.index));
    TaskDef copy;
    copy.type = TaskType::kMemcpy;
    copy.node = e.node->name();
    copy.src = t->ref;
    copy.dst = model_.outputs[k].ref;
    copy.bytes = model_.outputs[k].desc.bytes().value_or(0);
    stream.tasks.push_back(std::move(copy));
  }
  return Status::Ok();
}

// A node on a stream: its waits, its kernel (none for a view), its records, then the output copies it owes.
Status TaskGenerator::EmitNode(int pos) {
  const graph::Node& node = *index_.node(pos);
  const int s = StreamOf(node);
  if (s < 0) return Status::Ok();
  graph::StreamDef& stream = model_.streams[s];
  NPUFLOW_ASSIGN_OR_RETURN(const graph::OpDef* def, graph::OpRegistry::Global().Find(node.type()));
  if (!engine_set_[s]) {
    stream.engine = def->engine;
    engine_set_[s] = 1;
  }
  NPUFLOW_RETURN_IF_ERROR(EmitEvents(node, "_recv_events", TaskType::kEventWait, stream));
  if (node.op().AttrOr<bool>("_view", false).value_or(false)) {  // plan-memory placed it in its input's bytes
    NPUFLOW_RETURN_IF_ERROR(EmitEvents(node, "_send_events", TaskType::kEventRecord, stream));
    return EmitCopies(pos, stream);
  }
  if (def->device_kernel.empty())
    return Status::Unsupported("node '{}' ({}) has no device kernel", node.name(), node.type());
  in_descs_.clear();
  for (const graph::Endpoint& e : node.inputs()) in_descs_.push_back(e.node->outputs()[e.index]);
  NPUFLOW_ASSIGN_OR_RETURN(const graph::TilingInfo tiling, Tile(node, *def));
  NPUFLOW_ASSIGN_OR_RETURN(const std::uint64_t params_off, AppendKernelParams(node, *def));
  NPUFLOW_ASSIGN_OR_RETURN(TaskDef kernel, KernelTask(node, *def, tiling, params_off));
  if (IsTilingSink(node)) NPUFLOW_RETURN_IF_ERROR(EmitTilingSink(node, *def, tiling, s, kernel));
  stream.tasks.push_back(std::move(kernel));
  NPUFLOW_RETURN_IF_ERROR(EmitEvents(node, "_send_events", TaskType::kEventRecord, stream));
  return EmitCopies(pos, stream);
}

Status TaskGenerator::EmitTilingSink(const graph::Node& node, const graph::OpDef& def, const graph::TilingInfo& tiling,
                                     int s, TaskDef& kernel) {
  graph::StreamDef& main = model_.streams[static_cast<std::size_t>(s)];
  graph::StreamDef& attached = model_.streams[static_cast<std::size_t>(tiling_stream_)];
  // The context records the workspace the kernel was given (the host tiling run's, plus a custom
  // op's margin: plan-memory), the bound the device tiling is checked against.
  const graph::TensorPlacement* ws = places_.Find(node, kWorkspaceOutput);
  const std::uint64_t workspace = std::max(tiling.workspace_bytes, ws == nullptr ? std::uint64_t{0} : ws->bytes);
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<std::uint8_t> context,
                           graph::EncodeTilingContext(node.op(), in_descs_, workspace, graph::TileTargetOf(chip_)));
  std::string key;
  if (options_.tiling_sink_share) {
    NPUFLOW_ASSIGN_OR_RETURN(key, TilingKey(node, def, workspace));
    if (JoinTilingGroup(node, key, s, kernel)) return Status::Ok();
  }
  std::vector<std::uint8_t>& seg = model_.tiling_data;
  const std::uint64_t ctx = (seg.size() + kParamsAlign - 1) / kParamsAlign * kParamsAlign;
  seg.resize(ctx);
  seg.insert(seg.end(), context.begin(), context.end());
  seg.resize((seg.size() + kParamsAlign - 1) / kParamsAlign * kParamsAlign, 0);

  TaskDef tile{.type = TaskType::kAicpuKernel, .node = node.name(), .kernel = graph::kAicpuTilingKernel};
  tile.args.push_back(MemRef{Segment::kTilingData, ctx});
  bool produced_in_run = false;
  for (int k : def.tiling_depend_inputs) {
    if (static_cast<std::size_t>(k) >= node.inputs().size())
      return Status::ParamInvalid("node '{}' ({}): tiling-depend input {} is missing ({} inputs)", node.name(),
                                  node.type(), k, node.inputs().size());
    const graph::Endpoint& e = node.inputs()[static_cast<std::size_t>(k)];
    NPUFLOW_ASSIGN_OR_RETURN(const graph::TensorPlacement* t, places_.Where(*e.node, e.index));
    tile.args.push_back(t->ref);
    produced_in_run = produced_in_run || StreamOf(*e.node) >= 0;
  }
  if (produced_in_run) {
    const auto ready = static_cast<std::uint32_t>(++max_event_);
    main.tasks.push_back(TaskDef{.type = TaskType::kEventRecord, .node = node.name(), .event = ready});
    attached.tasks.push_back(TaskDef{.type = TaskType::kEventWait, .node = node.name(), .event = ready});
  }
  attached.tasks.push_back(std::move(tile));
  const int nops = options_.tiling_sink_nops >= 0 ? options_.tiling_sink_nops : chip_.prefetch_num;
  TaskDef update{.type = TaskType::kTaskUpdate, .node = node.name()};
  update.target_stream = static_cast<std::uint32_t>(s);
  update.target_task = static_cast<std::uint32_t>(main.tasks.size() + 1 + static_cast<std::size_t>(nops));
  update.block_dim_ref = MemRef{Segment::kTilingData, ctx + graph::kTilingContextBlockDimOffset};
  update.tiling_key_ref = MemRef{Segment::kTilingData, ctx + graph::kTilingContextTilingKeyOffset};
  attached.tasks.push_back(std::move(update));
  const auto tiled = static_cast<std::uint32_t>(++max_event_);
  if (!key.empty()) tiling_groups_.push_back(TilingGroup{std::move(key), s, ctx, attached.tasks.size()});
  attached.tasks.push_back(TaskDef{.type = TaskType::kEventRecord, .node = node.name(), .event = tiled});
  main.tasks.push_back(TaskDef{.type = TaskType::kEventWait, .node = node.name(), .event = tiled});
  for (int i = 0; i < nops; ++i) main.tasks.push_back(TaskDef{.type = TaskType::kNop, .node = node.name()});
  kernel.block_dim = graph::kTilingSinkBlockDim;
  kernel.tiling_key = 0;
  return Status::Ok();
}

StatusOr<std::string> TaskGenerator::TilingKey(const graph::Node& node, const graph::OpDef& def,
                                               std::uint64_t workspace) {
  // Only values nothing in the run writes are the same for every node that reads them: model
  // inputs. (A Variable, or a tensor some op writes in place, could change between two nodes.)
  for (int k : def.tiling_depend_inputs) {
    if (static_cast<std::size_t>(k) >= node.inputs().size()) return std::string();
    if (node.inputs()[static_cast<std::size_t>(k)].node->type() != "Data") return std::string();
  }
  // The context as the AICPU task would read it, for a nameless copy of the op without the
  // compiler's marks (streams, events, views: nothing the tiling reads), then the depend tensors.
  graph::OpDesc op(std::string(), node.type());
  for (const auto& [name, value] : node.op().attrs())
    if (!name.starts_with("_")) op.SetAttr(name, value);
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<std::uint8_t> context,
                           graph::EncodeTilingContext(op, in_descs_, workspace, graph::TileTargetOf(chip_)));
  std::string key(context.begin(), context.end());
  for (int k : def.tiling_depend_inputs) {
    const graph::Endpoint& e = node.inputs()[static_cast<std::size_t>(k)];
    key += fmt::format("|{}:{}", index_.pos(e.node), e.index);
  }
  return key;
}

bool TaskGenerator::JoinTilingGroup(const graph::Node& node, const std::string& key, int s, TaskDef& kernel) {
  if (key.empty()) return false;
  for (TilingGroup& g : tiling_groups_) {
    if (g.stream != s || g.key != key) continue;
    // A member: its update before the group's record, its kernel next on its stream.
    graph::StreamDef& main = model_.streams[static_cast<std::size_t>(s)];
    graph::StreamDef& attached = model_.streams[static_cast<std::size_t>(tiling_stream_)];
    TaskDef update{.type = TaskType::kTaskUpdate, .node = node.name()};
    update.target_stream = static_cast<std::uint32_t>(s);
    update.target_task = static_cast<std::uint32_t>(main.tasks.size());
    update.block_dim_ref = MemRef{Segment::kTilingData, g.context + graph::kTilingContextBlockDimOffset};
    update.tiling_key_ref = MemRef{Segment::kTilingData, g.context + graph::kTilingContextTilingKeyOffset};
    const std::size_t at = g.record_at;
    attached.tasks.insert(attached.tasks.begin() + static_cast<std::ptrdiff_t>(at), std::move(update));
    for (TilingGroup& other : tiling_groups_)
      if (other.record_at >= at) ++other.record_at;
    kernel.block_dim = graph::kTilingSinkBlockDim;
    kernel.tiling_key = 0;
    return true;
  }
  return false;
}

Status TaskGenerator::EmitEvents(const graph::Node& node, const char* attr, TaskType type, graph::StreamDef& stream) {
  NPUFLOW_ASSIGN_OR_RETURN(auto events, node.op().AttrOr<std::vector<std::int64_t>>(attr, {}));
  for (std::int64_t e : events) {
    TaskDef task{.type = type, .node = node.name()};
    task.event = static_cast<std::uint32_t>(e);
    stream.tasks.push_back(std::move(task));
    max_event_ = std::max(max_event_, e);
  }
  return Status::Ok();
}

// The op's host tiling, given the values of its tiling-depend inputs when all are Consts.
StatusOr<graph::TilingInfo> TaskGenerator::Tile(const graph::Node& node, const graph::OpDef& def) {
  std::vector<graph::Tensor> depend_storage;
  std::vector<const graph::Tensor*> depend;
  for (int k : def.tiling_depend_inputs) {
    if (static_cast<std::size_t>(k) >= node.inputs().size()) continue;
    const graph::Node& producer = *node.inputs()[k].node;
    if (producer.type() != "Const") {
      depend_storage.clear();  // a value known only at run time: tile for the worst case
      break;
    }
    NPUFLOW_ASSIGN_OR_RETURN(graph::Tensor v, producer.op().Attr<graph::Tensor>("value"));
    depend_storage.push_back(std::move(v));
  }
  if (depend_storage.size() == def.tiling_depend_inputs.size())
    for (const graph::Tensor& t : depend_storage) depend.push_back(&t);
  auto t = graph::TileOp(def, node.op(), in_descs_, depend, graph::TileTargetOf(chip_));
  if (!t.ok()) return t.status().WithContext(fmt::format("tiling node '{}'", node.name()));
  return *t;
}

// Writes the kernel's KernelParams into the tiling-data segment; returns their offset.
StatusOr<std::uint64_t> TaskGenerator::AppendKernelParams(const graph::Node& node, const graph::OpDef& def) {
  NPUFLOW_ASSIGN_OR_RETURN(graph::KernelParams params,
                           graph::EncodeKernelParams(def, node.op(), in_descs_, node.outputs()));
  const std::uint64_t params_off = model_.tiling_data.size();
  const std::size_t params_bytes = graph::KernelParamsBytes(params);
  const auto* raw = reinterpret_cast<const std::uint8_t*>(&params);
  model_.tiling_data.insert(model_.tiling_data.end(), raw, raw + params_bytes);
  model_.tiling_data.resize((model_.tiling_data.size() + kParamsAlign - 1) / kParamsAlign * kParamsAlign, 0);
  return params_off;
}

// The kernel task; args in kernel_abi order: inputs, outputs, workspace, tiling data.
StatusOr<TaskDef> TaskGenerator::KernelTask(const graph::Node& node, const graph::OpDef& def,
                                            const graph::TilingInfo& tiling, std::uint64_t params_off) const {
  TaskDef kernel;
  kernel.type = def.engine == graph::OpEngine::kAICpu ? TaskType::kAicpuKernel : TaskType::kKernel;
  kernel.node = node.name();
  kernel.kernel = def.device_kernel;
  kernel.block_dim = tiling.block_dim;
  kernel.tiling_key = tiling.tiling_key;
  for (const graph::Endpoint& e : node.inputs()) {
    NPUFLOW_ASSIGN_OR_RETURN(const graph::TensorPlacement* t, places_.Where(*e.node, e.index));
    kernel.args.push_back(t->ref);
  }
  for (int o = 0; o < static_cast<int>(node.outputs().size()); ++o) {
    NPUFLOW_ASSIGN_OR_RETURN(const graph::TensorPlacement* t, places_.Where(node, o));
    kernel.args.push_back(t->ref);
  }
  const graph::TensorPlacement* ws = places_.Find(node, kWorkspaceOutput);
  if (tiling.workspace_bytes > (ws == nullptr ? 0 : ws->bytes))
    return Status::Internal("node '{}': its tiling asks for {} workspace bytes, the memory plan gave {}", node.name(),
                            tiling.workspace_bytes, ws == nullptr ? 0 : ws->bytes);
  kernel.args.push_back(ws == nullptr ? MemRef{} : ws->ref);
  kernel.args.push_back(MemRef{Segment::kTilingData, params_off});
  return kernel;
}

}  // namespace

Status GenTasksPass(PassContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(GraphIndex index, GraphIndex::Build(ctx.graph));
  if (ctx.model.memory.tensors.empty() && ctx.graph.node_count() > 0)
    return Status::ParamInvalid("the model has no memory plan: gen-tasks runs after plan-memory");
  TaskGenerator gen(index, ctx.chip, ctx.options, ctx.model);
  NPUFLOW_RETURN_IF_ERROR(gen.PlanOutputCopies());
  gen.CreateStreams();
  NPUFLOW_RETURN_IF_ERROR(gen.EmitHostCopies());
  for (int pos = 0; pos < index.size(); ++pos) NPUFLOW_RETURN_IF_ERROR(gen.EmitNode(pos));
  gen.Finish();
  return Status::Ok();
}

}  // namespace npuflow::lowering
