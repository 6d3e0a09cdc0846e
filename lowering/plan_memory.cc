// plan-memory (seed 002, section 8): the segment and offset of every tensor.
//
//   weights     each Const, in order, 512-byte aligned
//   file_constant  each FileConstant, at a logical offset: the loader maps it to its file region's
//               device address (weights/)
//   variables   each Variable, with its initial value
//   input       one block per Data node, never shared
//   output      one block per NetOutput input; its producer writes it in place (zero copy)
//   fixed_fm    tensors whose address a device-side task keeps (the value inputs of ops that tile
//               on AICPU) and kernel workspaces
//   fm          every other activation: refreshable, the memory a user may supply per model
//
// Activations reuse bytes. Nodes are taken in topological order; a tensor's bytes go back to its
// arena after its last reader, tagged with the stream clock of every task that touched them. A
// later tensor takes freed bytes only if its producer's clock covers that tag: every earlier
// access is ordered before its producer starts by stream order or events (see insert-events), so
// streams running side by side never share bytes. An op with `inplace` writes its output over
// its input when that input has no other reader; over a Variable always (that is how a KV cache
// is updated). A view (OpDef::view: a Reshape, a contiguous Split) is placed inside its input's
// bytes, which stay taken until the view's last reader; it is marked `_view` and runs no task.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "graph/ops/op_registry.h"
#include "lowering/graph_index.h"
#include "lowering/memory_plan.h"
#include "lowering/pass.h"

namespace npuflow::lowering {
namespace {

using graph::MemRef;
using graph::Segment;

std::uint64_t Align(std::uint64_t bytes) { return (bytes + kMemoryAlignment - 1) / kMemoryAlignment * kMemoryAlignment; }

// True when `clock` has seen every task `tag` names (per stream: the last seq that touched some bytes).
bool Covered(const std::vector<int>& tag, const int* clock) {
  for (std::size_t s = 0; s < tag.size(); ++s)
    if (tag[s] > clock[s]) return false;
  return true;
}

// An offset allocator whose free blocks remember who used them last (a per-stream clock).
class Arena {
 public:
  explicit Arena(int streams) : streams_(streams) {}
  std::uint64_t top() const { return top_; }

  std::uint64_t Allocate(std::uint64_t size, const int* clock) {
    if (size == 0) return 0;
    int scanned = 0;
    for (auto it = by_size_.lower_bound({size, 0}); it != by_size_.end() && scanned < kMaxScan; ++it, ++scanned) {
      auto fit = free_.find(it->second);
      if (!Covered(fit->second.tag, clock)) continue;
      const std::uint64_t off = fit->first;
      Block rest{fit->second.size - size, fit->second.tag};
      by_size_.erase(it);
      free_.erase(fit);
      if (rest.size > 0) Insert(off + size, std::move(rest));
      return off;
    }
    // The free block that ends at the top may grow into fresh bytes.
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second.size == top_ && Covered(last->second.tag, clock)) {
        const std::uint64_t off = last->first;
        EraseFromSizes(off, last->second.size);
        free_.erase(last);
        top_ = off + size;
        return off;
      }
    }
    const std::uint64_t off = top_;
    top_ += size;
    return off;
  }

  void Release(std::uint64_t off, std::uint64_t size, std::vector<int> tag) {
    if (size == 0) return;
    Block b{size, std::move(tag)};
    auto next = free_.lower_bound(off);
    if (next != free_.end() && off + size == next->first) {
      Merge(b.tag, next->second.tag);
      b.size += next->second.size;
      EraseFromSizes(next->first, next->second.size);
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.size == off) {
        Merge(b.tag, prev->second.tag);
        b.size += prev->second.size;
        off = prev->first;
        EraseFromSizes(prev->first, prev->second.size);
        free_.erase(prev);
      }
    }
    Insert(off, std::move(b));
  }

 private:
  static constexpr int kMaxScan = 64;
  struct Block {
    std::uint64_t size;
    std::vector<int> tag;  // per stream: the last seq that touched these bytes
  };
  void Merge(std::vector<int>& into, const std::vector<int>& other) const {
    for (int s = 0; s < streams_; ++s) into[s] = std::max(into[s], other[s]);
  }
  void Insert(std::uint64_t off, Block b) {
    by_size_.emplace(b.size, off);
    free_.emplace(off, std::move(b));
  }
  void EraseFromSizes(std::uint64_t off, std::uint64_t size) { by_size_.erase({size, off}); }

  int streams_;
  std::uint64_t top_ = 0;
  std::map<std::uint64_t, Block> free_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;  // (size, offset) of each free block
};

struct Buffer {
  MemRef ref;
  std::uint64_t size = 0;  // aligned
  Arena* arena = nullptr;  // null: not reused (weights, variables, input, output)
  int remaining = 0;       // data uses still to run
  std::vector<int> tag;
  bool released = false;
};

// The pass's state, and one method per stage; PlanMemoryPass runs them in order.
class MemoryPlanner {
 public:
  MemoryPlanner(const GraphIndex& index, const SyncOrder& order, const npu_sim::ChipSpec& chip,
                graph::CompiledModel& model)
      : index_(index),
        order_(order),
        chip_(chip),
        model_(model),
        n_(index.size()),
        fm_(std::max(order.stream_count(), 1)),
        fixed_(std::max(order.stream_count(), 1)),
        buffer_of_(n_),
        tensor_of_(n_),
        zero_tag_(std::max(order.stream_count(), 1), 0) {
    model_.memory = {};
    model_.inputs.clear();
    model_.outputs.clear();
    model_.weights.clear();
    model_.variables.clear();
    model_.memory.tensors.reserve(static_cast<std::size_t>(n_) + 16);
  }

  Status CheckInputDescriptors() const;
  Status PlaceModelOutputs();
  Status PlaceModelInputs();
  Status MarkKeptAddresses();
  Status PlaceNode(int pos);
  void WriteSegmentBytes();

 private:
  Status PlaceOutput(int pos, int i, const graph::OpDef& def, int stream, std::vector<std::string>& mem_attr);
  StatusOr<MemRef> PlaceConst(const graph::Node& node, const graph::TensorDesc& desc, std::uint64_t raw,
                              std::uint64_t size);
  StatusOr<MemRef> PlaceVariable(const graph::Node& node, std::uint64_t raw, std::uint64_t size);
  StatusOr<int> InplaceSource(int pos, int i, const graph::OpDef& def, std::uint64_t size) const;
  bool ViewOffsets(int pos, const graph::OpDef& def, std::vector<std::int64_t>& at) const;
  void PlaceView(int pos, int i, std::int64_t offset, std::vector<std::string>& mem_attr);
  Status PlaceWorkspace(int pos, const graph::OpDef& def, int stream);
  void ReleaseReads(int pos, int outs, int stream);
  void ReleaseIfDone(int buf);

  int Place(int pos, int output, Buffer b) {
    const graph::Node& node = *index_.node(pos);
    graph::TensorPlacement t{node.name(), output, b.ref, b.size, pos, pos};
    model_.memory.tensors.push_back(std::move(t));
    buffers_.push_back(std::move(b));
    return static_cast<int>(buffers_.size()) - 1;
  }
  void RecordAlias(int pos, int output, int buf) {
    const graph::Node& node = *index_.node(pos);
    model_.memory.tensors.push_back({node.name(), output, buffers_[buf].ref, buffers_[buf].size, pos, pos});
  }
  int UsesOf(int pos, int output) const { return static_cast<int>(index_.uses(pos, output).size()); }

  const GraphIndex& index_;
  const SyncOrder& order_;
  const npu_sim::ChipSpec& chip_;
  graph::CompiledModel& model_;
  const int n_;
  Arena fm_, fixed_;
  std::uint64_t weights_top_ = 0, file_constant_top_ = 0, variables_top_ = 0, input_top_ = 0, output_top_ = 0;
  std::vector<Buffer> buffers_;
  std::vector<std::vector<int>> buffer_of_;  // [pos][output]
  std::vector<std::vector<int>> tensor_of_;  // [pos][output]: index into model.memory.tensors
  const std::vector<int> zero_tag_;
  std::map<std::pair<int, int>, MemRef> output_block_;  // (pos, output) NetOutput reads -> its block
  std::map<int, MemRef> input_block_;                   // Data pos -> its block
  std::vector<std::vector<char>> keeps_address_;        // [pos][output]: an AICPU tiling task keeps it
};

Status MemoryPlanner::CheckInputDescriptors() const {
  for (int pos = 0; pos < n_; ++pos)
    for (const graph::Endpoint& e : index_.node(pos)->inputs())
      if (static_cast<std::size_t>(e.index) >= e.node->outputs().size())
        return Status::ParamInvalid("node '{}' reads output {} of '{}', which has {} output descriptor(s): "
                                    "plan-memory runs after infer-shapes",
                                    index_.node(pos)->name(), e.index, e.node->name(), e.node->outputs().size());
  return Status::Ok();
}

// The tensors NetOutput reads: the first read of each gets that output's block.
Status MemoryPlanner::PlaceModelOutputs() {
  for (int pos = 0; pos < n_; ++pos) {
    const graph::Node& node = *index_.node(pos);
    if (node.type() != "NetOutput") continue;
    for (const graph::Endpoint& e : node.inputs()) {
      const int p = index_.pos(e.node);
      const graph::TensorDesc& desc = e.node->outputs()[e.index];
      auto bytes = desc.bytes();
      if (!bytes)
        return Status::ParamInvalid("model output '{}:{}' has dynamic shape {}: the v1 task sink needs static shapes (RT2.0 runs dynamic ones: --runtime v2 or auto)",
                                    e.node->name(), e.index, desc.ToString());
      MemRef ref{Segment::kOutput, output_top_};
      output_top_ += Align(*bytes);
      model_.outputs.push_back({fmt::format("{}:{}", e.node->name(), e.index), desc, ref});
      output_block_.emplace(std::make_pair(p, e.index), ref);
    }
  }
  return Status::Ok();
}

// Model inputs: one block each, in `index` order (Data nodes without one follow, in graph order).
Status MemoryPlanner::PlaceModelInputs() {
  std::vector<std::pair<std::int64_t, int>> data;
  for (int pos = 0; pos < n_; ++pos) {
    const graph::Node& node = *index_.node(pos);
    if (node.type() != "Data") continue;
    NPUFLOW_ASSIGN_OR_RETURN(std::int64_t idx, node.op().AttrOr<std::int64_t>("index", 1'000'000'000 + pos));
    data.push_back({idx, pos});
  }
  std::stable_sort(data.begin(), data.end());
  for (auto [idx, pos] : data) {
    const graph::Node& node = *index_.node(pos);
    if (node.outputs().empty())
      return Status::ParamInvalid("node '{}' (Data) has no output descriptor: plan-memory runs after infer-shapes",
                                  node.name());
    const graph::TensorDesc& desc = node.outputs()[0];
    auto bytes = desc.bytes();
    if (!bytes)
      return Status::ParamInvalid("model input '{}' has dynamic shape {}: the v1 task sink needs static shapes (RT2.0 runs dynamic ones: --runtime v2 or auto)",
                                  node.name(), desc.ToString());
    MemRef ref{Segment::kInput, input_top_};
    input_top_ += Align(*bytes);
    model_.inputs.push_back({node.name(), desc, ref});
    input_block_.emplace(pos, ref);
  }
  return Status::Ok();
}

// Tensors whose address an AICPU tiling task keeps: the value inputs of ops that tile on AICPU.
Status MemoryPlanner::MarkKeptAddresses() {
  keeps_address_.assign(n_, {});
  for (int pos = 0; pos < n_; ++pos) keeps_address_[pos].assign(index_.node(pos)->outputs().size(), 0);
  for (int pos = 0; pos < n_; ++pos) {
    const graph::Node& node = *index_.node(pos);
    NPUFLOW_ASSIGN_OR_RETURN(const graph::OpDef* def, graph::OpRegistry::Global().Find(node.type()));
    if (!def->tiling_on_aicpu) continue;
    for (int k : def->tiling_depend_inputs)
      if (static_cast<std::size_t>(k) < node.inputs().size()) {
        const graph::Endpoint& e = node.inputs()[k];
        keeps_address_[index_.pos(e.node)][e.index] = 1;
      }
  }
  return Status::Ok();
}

// The node's outputs and workspace get their places, then its reads give back bytes.
Status MemoryPlanner::PlaceNode(int pos) {
  graph::Node& node = *index_.node(pos);
  const std::string& type = node.type();
  // NetOutput's outputs are the model's outputs, placed above.
  const int outs = type == "NetOutput" ? 0 : static_cast<int>(node.outputs().size());
  buffer_of_[pos].assign(outs, -1);
  tensor_of_[pos].assign(outs, -1);
  std::vector<std::string> mem_attr;
  NPUFLOW_ASSIGN_OR_RETURN(const graph::OpDef* def, graph::OpRegistry::Global().Find(type));
  const int stream = order_.stream(pos);
  if (stream < 0 && def->engine != graph::OpEngine::kHostLocal)
    return Status::ParamInvalid("node '{}' ({}) has no _stream: plan-memory runs after assign-streams", node.name(),
                                type);
  std::vector<std::int64_t> view_at;
  const bool view = stream >= 0 && outs > 0 && ViewOffsets(pos, *def, view_at);
  for (int i = 0; i < outs; ++i) {
    if (view)
      PlaceView(pos, i, view_at[i], mem_attr);
    else
      NPUFLOW_RETURN_IF_ERROR(PlaceOutput(pos, i, *def, stream, mem_attr));
  }
  if (!view && stream >= 0 && def->tiling != nullptr) NPUFLOW_RETURN_IF_ERROR(PlaceWorkspace(pos, *def, stream));
  if (!mem_attr.empty()) node.op().SetAttr("_mem", std::move(mem_attr));
  if (view || node.op().HasAttr("_view")) node.op().SetAttr("_view", view);
  ReleaseReads(pos, outs, stream);
  return Status::Ok();
}

Status MemoryPlanner::PlaceOutput(int pos, int i, const graph::OpDef& def, int stream,
                                  std::vector<std::string>& mem_attr) {
  const graph::Node& node = *index_.node(pos);
  const std::string& type = node.type();
  const graph::TensorDesc& desc = node.outputs()[i];
  auto raw = desc.bytes();
  if (!raw)
    return Status::ParamInvalid("node '{}' output {} has dynamic shape {}: the v1 task sink needs static shapes (RT2.0 runs dynamic ones: --runtime v2 or auto)",
                                node.name(), i, desc.ToString());
  const std::uint64_t size = Align(*raw);
  Buffer b;
  b.size = size;
  b.remaining = UsesOf(pos, i);
  b.tag = zero_tag_;
  if (type == "Data") {
    b.ref = input_block_.at(pos);
  } else if (type == "Const") {
    NPUFLOW_ASSIGN_OR_RETURN(b.ref, PlaceConst(node, desc, *raw, size));
  } else if (type == "FileConstant") {
    b.ref = {Segment::kFileConstant, file_constant_top_};
    file_constant_top_ += size;
  } else if (type == "Variable") {
    NPUFLOW_ASSIGN_OR_RETURN(b.ref, PlaceVariable(node, *raw, size));
  } else if (stream >= 0) {
    NPUFLOW_ASSIGN_OR_RETURN(const int shared, InplaceSource(pos, i, def, size));
    if (shared >= 0) {
      buffers_[shared].remaining += b.remaining;
      buffer_of_[pos][i] = shared;
      tensor_of_[pos][i] = static_cast<int>(model_.memory.tensors.size());
      RecordAlias(pos, i, shared);
      mem_attr.push_back(
          fmt::format("{}+{}", graph::SegmentName(buffers_[shared].ref.segment), buffers_[shared].ref.offset));
      return Status::Ok();
    }
    if (auto it = output_block_.find({pos, i}); it != output_block_.end()) {
      b.ref = it->second;
    } else {
      b.arena = keeps_address_[pos][i] ? &fixed_ : &fm_;
      b.ref = {b.arena == &fixed_ ? Segment::kFixedFeatureMap : Segment::kFeatureMap,
               b.arena->Allocate(size, order_.clock(pos))};
      model_.memory.feature_map_tensor_bytes += size;
      b.tag[stream] = order_.seq(pos);
    }
  } else {
    return Status::Unsupported("node '{}' ({}) runs on the host: the v1 task sink runs only device ops", node.name(),
                               type);
  }
  mem_attr.push_back(fmt::format("{}+{}", graph::SegmentName(b.ref.segment), b.ref.offset));
  tensor_of_[pos][i] = static_cast<int>(model_.memory.tensors.size());
  buffer_of_[pos][i] = Place(pos, i, std::move(b));
  return Status::Ok();
}

StatusOr<MemRef> MemoryPlanner::PlaceConst(const graph::Node& node, const graph::TensorDesc& desc, std::uint64_t raw,
                                           std::uint64_t size) {
  const MemRef ref{Segment::kWeights, weights_top_};
  weights_top_ += size;
  model_.weights.resize(weights_top_, 0);
  NPUFLOW_ASSIGN_OR_RETURN(graph::Tensor value, node.op().Attr<graph::Tensor>("value"));
  if (value.data.size() != raw)
    return Status::ParamInvalid("node '{}' (Const): value has {} bytes, {} needs {}", node.name(), value.data.size(),
                                desc.ToString(), raw);
  std::memcpy(model_.weights.data() + ref.offset, value.data.data(), value.data.size());
  return ref;
}

StatusOr<MemRef> MemoryPlanner::PlaceVariable(const graph::Node& node, std::uint64_t raw, std::uint64_t size) {
  const MemRef ref{Segment::kVariables, variables_top_};
  variables_top_ += size;
  // Initial values only up to the last Variable that has one: variable memory starts zeroed
  // on the device (a GPT-2 KV cache is tens of MB of zeros nobody needs to store or copy).
  if (node.op().HasAttr("value")) {
    NPUFLOW_ASSIGN_OR_RETURN(graph::Tensor value, node.op().Attr<graph::Tensor>("value"));
    if (value.data.size() == raw) {
      if (model_.variables.size() < ref.offset + raw) model_.variables.resize(ref.offset + raw, 0);
      std::memcpy(model_.variables.data() + ref.offset, value.data.data(), raw);
    }
  }
  return ref;
}

// The buffer output `i` of `pos` may write over in place (its op's `inplace` input), or -1.
StatusOr<int> MemoryPlanner::InplaceSource(int pos, int i, const graph::OpDef& def, std::uint64_t size) const {
  const graph::Node& node = *index_.node(pos);
  const int alias = static_cast<std::size_t>(i) < def.inplace.size() ? def.inplace[i] : -1;
  if (alias < 0 || static_cast<std::size_t>(alias) >= node.inputs().size()) return -1;
  const graph::Endpoint& in = node.inputs()[alias];
  const int p = index_.pos(in.node);
  const int ib = buffer_of_[p][in.index];
  const Buffer& src = buffers_[ib];
  // A view that starts inside its buffer is not the buffer: writing over it would write elsewhere.
  if (!(model_.memory.tensors[tensor_of_[p][in.index]].ref == src.ref)) return -1;
  // Over a Variable: only an op that writes it, reading the Variable itself (an update of
  // an update is a new tensor, as the interpreter sees it).
  if (src.ref.segment == Segment::kVariables && def.updates_inplace_input && in.node->type() == "Variable") {
    if (UsesOf(p, in.index) > 1)
      return Status::ParamInvalid(
          "node '{}' updates Variable '{}' in place, which {} other node(s) also read: read the updated value "
          "through '{}'",
          node.name(), in.node->name(), UsesOf(p, in.index) - 1, node.name());
    return ib;
  }
  if (src.arena != nullptr && src.remaining == 1 && src.size >= size &&
      src.arena == (keeps_address_[pos][i] ? &fixed_ : &fm_) && Covered(src.tag, order_.clock(pos)) &&
      !output_block_.count({p, in.index}) && !output_block_.count({pos, i})) {
    // This node is the input's last reader, every other reader (on any stream) is ordered
    // before it, and both tensors belong in the same arena.
    return ib;
  }
  return -1;
}

// The node's outputs as views of its input (OpDef::view), when every output is one: the input's
// bytes are a feature map's (not a Variable a later kernel updates, not a block a user or the
// loader supplies), no output is a model output (that has a block of its own), and an output an
// AICPU tiling task keeps the address of views fixed bytes.
bool MemoryPlanner::ViewOffsets(int pos, const graph::OpDef& def, std::vector<std::int64_t>& at) const {
  const graph::Node& node = *index_.node(pos);
  if (def.view == nullptr || node.inputs().size() != 1) return false;
  const graph::Endpoint& in = node.inputs()[0];
  const int p = index_.pos(in.node);
  const int ib = buffer_of_[p][in.index];
  if (ib < 0 || buffers_[ib].arena == nullptr) return false;
  const graph::TensorPlacement& src = model_.memory.tensors[tensor_of_[p][in.index]];
  const std::vector<graph::TensorDesc> in_descs{in.node->outputs()[in.index]};
  const int outs = static_cast<int>(node.outputs().size());
  at.assign(outs, -1);
  for (int i = 0; i < outs; ++i) {
    if (output_block_.count({pos, i})) return false;
    if (keeps_address_[pos][i] && src.ref.segment != Segment::kFixedFeatureMap) return false;
    const auto raw = node.outputs()[i].bytes();
    const std::int64_t offset = def.view(node.op(), in_descs, node.outputs(), i);
    if (!raw || offset < 0 || static_cast<std::uint64_t>(offset) + *raw > src.bytes) return false;
    at[i] = offset;
  }
  return true;
}

// Output `i` of a view: `offset` bytes into its input, whose bytes now also wait for this output's readers.
void MemoryPlanner::PlaceView(int pos, int i, std::int64_t offset, std::vector<std::string>& mem_attr) {
  const graph::Node& node = *index_.node(pos);
  const graph::Endpoint& in = node.inputs()[0];
  const int p = index_.pos(in.node);
  const int ib = buffer_of_[p][in.index];
  const MemRef src = model_.memory.tensors[tensor_of_[p][in.index]].ref;
  const MemRef ref{src.segment, src.offset + static_cast<std::uint64_t>(offset)};
  buffers_[ib].remaining += UsesOf(pos, i);
  buffer_of_[pos][i] = ib;
  tensor_of_[pos][i] = static_cast<int>(model_.memory.tensors.size());
  model_.memory.tensors.push_back({node.name(), i, ref, node.outputs()[i].bytes().value_or(0), pos, pos});
  mem_attr.push_back(fmt::format("{}+{}", graph::SegmentName(ref.segment), ref.offset));
}

// The kernel's workspace: fixed, alive while the kernel runs.
Status MemoryPlanner::PlaceWorkspace(int pos, const graph::OpDef& def, int stream) {
  const graph::Node& node = *index_.node(pos);
  std::vector<graph::TensorDesc> in_descs;
  for (const graph::Endpoint& e : node.inputs()) in_descs.push_back(e.node->outputs()[e.index]);
  auto tiled = graph::TileOp(def, node.op(), in_descs, {}, graph::TileTargetOf(chip_));
  if (!tiled.ok()) return tiled.status().WithContext(fmt::format("tiling node '{}'", node.name()));
  const graph::TilingInfo& tiling = *tiled;
  // Under the tiling sink the device tiles it (seed 003): the host tiling run sizes the
  // workspace, plus a margin for a custom op.
  std::uint64_t bytes = tiling.workspace_bytes;
  if (def.custom && node.op().HasAttr("_tiling_sink")) bytes += graph::kCustomOpSinkWorkspaceBytes;
  if (bytes > 0) {
    const std::uint64_t size = Align(bytes);
    const std::uint64_t off = fixed_.Allocate(size, order_.clock(pos));
    model_.memory.feature_map_tensor_bytes += size;
    model_.memory.tensors.push_back(
        {node.name(), kWorkspaceOutput, MemRef{Segment::kFixedFeatureMap, off}, size, pos, pos});
    std::vector<int> tag = zero_tag_;
    tag[stream] = order_.seq(pos);
    fixed_.Release(off, size, std::move(tag));
  }
  return Status::Ok();
}

// This node's reads: the last reader gives the bytes back.
void MemoryPlanner::ReleaseReads(int pos, int outs, int stream) {
  for (const graph::Endpoint& e : index_.node(pos)->inputs()) {
    const int buf = buffer_of_[index_.pos(e.node)][e.index];
    Buffer& b = buffers_[buf];
    if (stream >= 0) b.tag[stream] = std::max(b.tag[stream], order_.seq(pos));
    auto& placed = model_.memory.tensors[tensor_of_[index_.pos(e.node)][e.index]];
    placed.last_use = std::max<std::int64_t>(placed.last_use, pos);
    --b.remaining;
    ReleaseIfDone(buf);
  }
  for (int i = 0; i < outs; ++i)
    if (UsesOf(pos, i) == 0 && buffer_of_[pos][i] >= 0) ReleaseIfDone(buffer_of_[pos][i]);
}

void MemoryPlanner::ReleaseIfDone(int buf) {
  Buffer& b = buffers_[buf];
  if (b.remaining > 0 || b.arena == nullptr || b.released) return;
  b.released = true;
  b.arena->Release(b.ref.offset, b.size, b.tag);
}

void MemoryPlanner::WriteSegmentBytes() {
  auto& seg = model_.memory.segment_bytes;
  seg[static_cast<int>(Segment::kWeights)] = weights_top_;
  seg[static_cast<int>(Segment::kFileConstant)] = file_constant_top_;
  seg[static_cast<int>(Segment::kVariables)] = variables_top_;
  seg[static_cast<int>(Segment::kInput)] = input_top_;
  seg[static_cast<int>(Segment::kOutput)] = output_top_;
  seg[static_cast<int>(Segment::kFeatureMap)] = fm_.top();
  seg[static_cast<int>(Segment::kFixedFeatureMap)] = fixed_.top();
}

}  // namespace

Status PlanMemoryPass(PassContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(GraphIndex index, GraphIndex::Build(ctx.graph));
  NPUFLOW_ASSIGN_OR_RETURN(SyncOrder order, SyncOrder::Build(index));
  MemoryPlanner planner(index, order, ctx.chip, ctx.model);
  NPUFLOW_RETURN_IF_ERROR(planner.CheckInputDescriptors());
  NPUFLOW_RETURN_IF_ERROR(planner.PlaceModelOutputs());
  NPUFLOW_RETURN_IF_ERROR(planner.PlaceModelInputs());
  NPUFLOW_RETURN_IF_ERROR(planner.MarkKeptAddresses());
  for (int pos = 0; pos < index.size(); ++pos) NPUFLOW_RETURN_IF_ERROR(planner.PlaceNode(pos));
  planner.WriteSegmentBytes();
  return Status::Ok();
}

}  // namespace npuflow::lowering
