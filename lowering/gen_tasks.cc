// gen-tasks: the per-stream task lists of the task sink. On each stream, in topological order, a
// node becomes: a wait per received event, its kernel (block_dim and tiling_key from the op's
// host tiling; its KernelParams written into the tiling-data segment; args in kernel_abi order),
// a record per sent event, and a copy into each model output block it feeds but does not write in
// place. Outputs that come straight from a Data, Const or Variable are copied at the start of
// stream 0.
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <unordered_map>

#include "graph/kernels/kernel_abi.h"
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

}  // namespace

Status GenTasksPass(PassContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(GraphIndex index, GraphIndex::Build(ctx.graph));
  graph::CompiledModel& model = ctx.model;
  if (model.memory.tensors.empty() && ctx.graph.node_count() > 0)
    return Status::ParamInvalid("the model has no memory plan: gen-tasks runs after plan-memory");
  // plan-memory lists a node's placements together (its outputs in order, then its workspace), in
  // topological order: one merge walk finds each node's first. A plan in another order falls back
  // to a name lookup.
  const auto& tensors = model.memory.tensors;
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<std::size_t> first_at(index.size(), kNone);
  std::unordered_map<std::string_view, std::size_t> first_by_name;
  {
    std::size_t cursor = 0;
    for (int pos = 0; pos < index.size() && cursor < tensors.size(); ++pos) {
      if (tensors[cursor].node != index.node(pos)->name()) continue;
      first_at[pos] = cursor;
      while (cursor < tensors.size() && tensors[cursor].node == index.node(pos)->name()) ++cursor;
    }
    if (cursor != tensors.size())
      for (std::size_t i = 0; i < tensors.size(); ++i) first_by_name.emplace(tensors[i].node, i);
  }
  auto find = [&](const graph::Node& node, int output) -> const graph::TensorPlacement* {
    std::size_t first = first_at[index.pos(&node)];
    if (first == kNone && !first_by_name.empty()) {
      auto it = first_by_name.find(node.name());
      if (it != first_by_name.end()) first = it->second;
    }
    if (first == kNone) return nullptr;
    for (std::size_t i = first; i < tensors.size() && tensors[i].node == node.name(); ++i)
      if (tensors[i].output == output) return &tensors[i];
    return nullptr;
  };
  auto where = [&](const graph::Node& node, int output) -> StatusOr<const graph::TensorPlacement*> {
    if (const graph::TensorPlacement* t = find(node, output)) return t;
    return Status::Internal("tensor {}:{} has no place in the memory plan", node.name(), output);
  };

  int S = 0;
  for (int pos = 0; pos < index.size(); ++pos) S = std::max(S, StreamOf(*index.node(pos)) + 1);
  model.streams.clear();
  model.tiling_data.clear();
  std::int64_t max_event = -1;

  // Model outputs: the copies each producer owes.
  std::map<int, std::vector<std::size_t>> copies_after;  // producer position (-1: host) -> output ids
  const graph::Node* net_output = nullptr;
  for (int pos = 0; pos < index.size(); ++pos) {
    const graph::Node& node = *index.node(pos);
    if (node.type() != "NetOutput") continue;
    net_output = &node;
    if (node.inputs().size() != model.outputs.size())
      return Status::Internal("NetOutput '{}' has {} inputs, the memory plan {} outputs", node.name(),
                              node.inputs().size(), model.outputs.size());
    for (std::size_t k = 0; k < node.inputs().size(); ++k) {
      const graph::Endpoint& e = node.inputs()[k];
      NPUFLOW_ASSIGN_OR_RETURN(const graph::TensorPlacement* t, where(*e.node, e.index));
      if (t->ref == model.outputs[k].ref) continue;
      const int p = index.pos(e.node);
      copies_after[StreamOf(*e.node) < 0 ? -1 : p].push_back(k);
    }
  }
  if (copies_after.count(-1) && S == 0) S = 1;
  model.streams.resize(S);
  for (int s = 0; s < S; ++s) model.streams[s].id = static_cast<std::uint32_t>(s);
  {
    std::vector<std::size_t> per_stream(S, 0);
    std::size_t kernels = 0;
    for (int pos = 0; pos < index.size(); ++pos)
      if (const int s = StreamOf(*index.node(pos)); s >= 0) {
        per_stream[s] += 2;  // the kernel, and room for its sync tasks
        ++kernels;
      }
    for (int s = 0; s < S; ++s) model.streams[s].tasks.reserve(per_stream[s]);
    model.tiling_data.reserve(kernels * 256);
  }
  std::vector<char> engine_set(S, 0);

  auto emit_copies = [&](int key, graph::StreamDef& stream) -> Status {
    auto it = copies_after.find(key);
    if (it == copies_after.end()) return Status::Ok();
    for (std::size_t k : it->second) {
      const graph::Endpoint& e = net_output->inputs()[k];
      NPUFLOW_ASSIGN_OR_RETURN(const graph::TensorPlacement* t, where(*e.node, e.index));
      TaskDef copy;
      copy.type = TaskType::kMemcpy;
      copy.node = e.node->name();
      copy.src = t->ref;
      copy.dst = model.outputs[k].ref;
      copy.bytes = model.outputs[k].desc.bytes().value_or(0);
      stream.tasks.push_back(std::move(copy));
    }
    return Status::Ok();
  };
  if (S > 0) NPUFLOW_RETURN_IF_ERROR(emit_copies(-1, model.streams[0]));

  std::vector<graph::TensorDesc> in_descs;
  for (int pos = 0; pos < index.size(); ++pos) {
    const graph::Node& node = *index.node(pos);
    const int s = StreamOf(node);
    if (s < 0) continue;
    graph::StreamDef& stream = model.streams[s];
    NPUFLOW_ASSIGN_OR_RETURN(const graph::OpDef* def, graph::OpRegistry::Global().Find(node.type()));
    if (!engine_set[s]) {
      stream.engine = def->engine;
      engine_set[s] = 1;
    }
    NPUFLOW_ASSIGN_OR_RETURN(auto recv, node.op().AttrOr<std::vector<std::int64_t>>("_recv_events", {}));
    for (std::int64_t e : recv) {
      TaskDef wait{.type = TaskType::kEventWait, .node = node.name()};
      wait.event = static_cast<std::uint32_t>(e);
      stream.tasks.push_back(std::move(wait));
      max_event = std::max(max_event, e);
    }

    if (def->device_kernel.empty())
      return Status::Unsupported("node '{}' ({}) has no device kernel", node.name(), node.type());
    in_descs.clear();
    std::vector<graph::Tensor> depend_storage;
    std::vector<const graph::Tensor*> depend;
    for (const graph::Endpoint& e : node.inputs()) in_descs.push_back(e.node->outputs()[e.index]);
    for (int k : def->tiling_depend_inputs) {
      if (static_cast<std::size_t>(k) >= node.inputs().size()) continue;
      const graph::Node& producer = *node.inputs()[k].node;
      if (producer.type() != "Const") {
        depend_storage.clear();  // a value known only at run time: tile for the worst case
        break;
      }
      NPUFLOW_ASSIGN_OR_RETURN(graph::Tensor v, producer.op().Attr<graph::Tensor>("value"));
      depend_storage.push_back(std::move(v));
    }
    if (depend_storage.size() == def->tiling_depend_inputs.size())
      for (const graph::Tensor& t : depend_storage) depend.push_back(&t);
    graph::TilingInfo tiling;
    if (def->tiling != nullptr) {
      auto t = def->tiling(node.op(), in_descs, depend, ctx.chip.aicore_count);
      if (!t.ok()) return t.status().WithContext(fmt::format("tiling node '{}'", node.name()));
      tiling = *t;
    }
    NPUFLOW_ASSIGN_OR_RETURN(graph::KernelParams params,
                             graph::EncodeKernelParams(*def, node.op(), in_descs, node.outputs()));
    const std::uint64_t params_off = model.tiling_data.size();
    const std::size_t params_bytes = graph::KernelParamsBytes(params);
    const auto* raw = reinterpret_cast<const std::uint8_t*>(&params);
    model.tiling_data.insert(model.tiling_data.end(), raw, raw + params_bytes);
    model.tiling_data.resize((model.tiling_data.size() + kParamsAlign - 1) / kParamsAlign * kParamsAlign, 0);

    TaskDef kernel;
    kernel.type = def->engine == graph::OpEngine::kAICpu ? TaskType::kAicpuKernel : TaskType::kKernel;
    kernel.node = node.name();
    kernel.kernel = def->device_kernel;
    kernel.block_dim = tiling.block_dim;
    kernel.tiling_key = tiling.tiling_key;
    for (const graph::Endpoint& e : node.inputs()) {
      NPUFLOW_ASSIGN_OR_RETURN(const graph::TensorPlacement* t, where(*e.node, e.index));
      kernel.args.push_back(t->ref);
    }
    for (int o = 0; o < static_cast<int>(node.outputs().size()); ++o) {
      NPUFLOW_ASSIGN_OR_RETURN(const graph::TensorPlacement* t, where(node, o));
      kernel.args.push_back(t->ref);
    }
    const graph::TensorPlacement* ws = find(node, kWorkspaceOutput);
    if (tiling.workspace_bytes > (ws == nullptr ? 0 : ws->bytes))
      return Status::Internal("node '{}': its tiling asks for {} workspace bytes, the memory plan gave {}", node.name(),
                              tiling.workspace_bytes, ws == nullptr ? 0 : ws->bytes);
    kernel.args.push_back(ws == nullptr ? MemRef{} : ws->ref);
    kernel.args.push_back(MemRef{Segment::kTilingData, params_off});
    stream.tasks.push_back(std::move(kernel));

    NPUFLOW_ASSIGN_OR_RETURN(auto send, node.op().AttrOr<std::vector<std::int64_t>>("_send_events", {}));
    for (std::int64_t e : send) {
      TaskDef record{.type = TaskType::kEventRecord, .node = node.name()};
      record.event = static_cast<std::uint32_t>(e);
      stream.tasks.push_back(std::move(record));
      max_event = std::max(max_event, e);
    }
    NPUFLOW_RETURN_IF_ERROR(emit_copies(pos, stream));
  }
  model.event_count = static_cast<std::uint32_t>(max_event + 1);
  model.memory.segment_bytes[static_cast<int>(Segment::kTilingData)] = model.tiling_data.size();
  return Status::Ok();
}

}  // namespace npuflow::lowering
