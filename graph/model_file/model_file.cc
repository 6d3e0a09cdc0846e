#include "graph/model_file/model_file.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include <unistd.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "base/files.h"
#include "base/sha256.h"
#include "graph/ir/text_format.h"
#include "proto/model.pb.h"

namespace npuflow::graph {
namespace {

constexpr std::uint32_t kKnownFlags = kModelFileFlagWeightsEmbedded;
using Digest = Sha256Digest;

// ---- header --------------------------------------------------------------------------------------

template <typename T>
void PutLittleEndian(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <typename T>
T GetLittleEndian(std::string_view bytes, std::size_t offset) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<std::uint8_t>(bytes[offset + i])) << (8 * i);
  return v;
}

std::string Hex(std::string_view bytes) { return ToHex(bytes.data(), bytes.size()); }

// The magic as read, printable characters as they are and the rest as \xNN.
std::string Printable(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    const auto u = static_cast<std::uint8_t>(c);
    if (u >= 0x20 && u < 0x7f && c != '"' && c != '\\') out.push_back(c);
    else out += fmt::format("\\x{:02x}", u);
  }
  return out;
}

// ---- enums ---------------------------------------------------------------------------------------

StatusOr<proto::SegmentDef> ToProto(Segment s, std::string_view where) {
  if (static_cast<int>(s) >= kSegmentCount)
    return Status::ParamInvalid("{}: unknown segment {}", where, static_cast<int>(s));
  return static_cast<proto::SegmentDef>(static_cast<int>(s));  // the values match (model.proto)
}

StatusOr<Segment> FromProto(proto::SegmentDef s, std::string_view where) {
  const int v = static_cast<int>(s);
  if (v < 0 || v >= kSegmentCount) return Status::DataCorrupted("{}: unknown segment type {}", where, v);
  return static_cast<Segment>(v);
}

StatusOr<proto::TaskTypeDef> ToProto(TaskType t, std::string_view where) {
  switch (t) {
    case TaskType::kKernel: return proto::TASK_KERNEL;
    case TaskType::kAicpuKernel: return proto::TASK_AICPU_KERNEL;
    case TaskType::kMemcpy: return proto::TASK_MEMCPY;
    case TaskType::kEventRecord: return proto::TASK_EVENT_RECORD;
    case TaskType::kEventWait: return proto::TASK_EVENT_WAIT;
    case TaskType::kNop: return proto::TASK_NOP;
    case TaskType::kTaskUpdate: return proto::TASK_UPDATE;
  }
  return Status::ParamInvalid("{}: unknown task type {}", where, static_cast<int>(t));
}

StatusOr<TaskType> FromProto(proto::TaskTypeDef t, std::string_view where) {
  switch (t) {
    case proto::TASK_KERNEL: return TaskType::kKernel;
    case proto::TASK_AICPU_KERNEL: return TaskType::kAicpuKernel;
    case proto::TASK_MEMCPY: return TaskType::kMemcpy;
    case proto::TASK_EVENT_RECORD: return TaskType::kEventRecord;
    case proto::TASK_EVENT_WAIT: return TaskType::kEventWait;
    case proto::TASK_NOP: return TaskType::kNop;
    case proto::TASK_UPDATE: return TaskType::kTaskUpdate;
    default: break;
  }
  return Status::DataCorrupted("{}: unknown task type {}", where, static_cast<int>(t));
}

StatusOr<proto::EngineDef> ToProto(OpEngine e, std::string_view where) {
  switch (e) {
    case OpEngine::kAICore: return proto::ENGINE_AICORE;
    case OpEngine::kAICpu: return proto::ENGINE_AICPU;
    case OpEngine::kHostLocal: return proto::ENGINE_HOST;
  }
  return Status::ParamInvalid("{}: unknown engine {}", where, static_cast<int>(e));
}

StatusOr<OpEngine> FromProto(proto::EngineDef e, std::string_view where) {
  switch (e) {
    case proto::ENGINE_AICORE: return OpEngine::kAICore;
    case proto::ENGINE_AICPU: return OpEngine::kAICpu;
    case proto::ENGINE_HOST: return OpEngine::kHostLocal;
    default: break;
  }
  return Status::DataCorrupted("{}: unknown engine {}", where, static_cast<int>(e));
}

StatusOr<proto::StreamModeDef> ToProto(CompileOptions::StreamMode m, std::string_view where) {
  switch (m) {
    case CompileOptions::StreamMode::kSingle: return proto::STREAM_MODE_SINGLE;
    case CompileOptions::StreamMode::kMulti: return proto::STREAM_MODE_MULTI;
  }
  return Status::ParamInvalid("{}: unknown stream mode {}", where, static_cast<int>(m));
}

StatusOr<CompileOptions::StreamMode> FromProto(proto::StreamModeDef m, std::string_view where) {
  switch (m) {
    case proto::STREAM_MODE_SINGLE: return CompileOptions::StreamMode::kSingle;
    case proto::STREAM_MODE_MULTI: return CompileOptions::StreamMode::kMulti;
    default: break;
  }
  return Status::DataCorrupted("{}: unknown stream mode {}", where, static_cast<int>(m));
}

// graph.proto's DataType and Shape: the text format's mapping, with damage reported as corruption.
StatusOr<DataType> FromProto(proto::DataType t, std::string_view where) {
  auto dtype = DataTypeFromProto(t, where);
  if (!dtype.ok()) return Status::DataCorrupted("{}", dtype.status().message());
  return dtype;
}

// ---- RT2.0 execute graphs ---------------------------------------------------------------------

proto::ExecuteGraphDef ToProto(const exe::ExecuteGraph& g) {
  proto::ExecuteGraphDef def;
  def.set_name(g.name());
  for (const exe::ExeValue& v : g.values()) def.add_value(v.name);
  for (int v : g.inputs()) def.add_input(v);
  for (int v : g.outputs()) def.add_output(v);
  for (const exe::ExeNode& n : g.nodes()) {
    proto::ExeNodeDef* pn = def.add_node();
    pn->set_name(n.name);
    pn->set_kernel(n.kernel);
    pn->set_kind(static_cast<int>(n.kind));
    pn->set_branches(n.branches);
    for (int v : n.inputs) pn->add_input(v);
    for (int v : n.outputs) pn->add_output(v);
    for (const exe::ExeDep& d : n.deps) {
      proto::ExeDepDef* pd = pn->add_dep();
      pd->set_node(d.node);
      pd->set_branch(d.branch);
    }
    pn->set_priority(n.priority);
    for (const auto& [key, value] : n.attrs) (*pn->mutable_attr())[key] = AttrValueToProto(value);
  }
  return def;
}

// Rebuilt node by node, deps after all nodes (a merge may wait for a later node); then the
// structural checks of ExecuteGraph::Validate. Anything wrong is DataCorrupted.
StatusOr<std::shared_ptr<exe::ExecuteGraph>> FromProto(const proto::ExecuteGraphDef& def, std::string_view source) {
  const std::string where = fmt::format("{}: execute graph '{}'", source, def.name());
  auto corrupt = [&](const Status& s) { return Status::DataCorrupted("{}: {}", where, s.message()); };
  auto g = std::make_shared<exe::ExecuteGraph>(def.name());
  std::vector<char> is_input(def.value_size(), 0);
  for (int v : def.input()) {
    if (v < 0 || v >= def.value_size()) return Status::DataCorrupted("{}: input value {} does not exist", where, v);
    is_input[v] = 1;
  }
  for (int i = 0; i < def.value_size(); ++i) {
    if (is_input[i]) g->AddInput(def.value(i));
    else g->AddValue(def.value(i));
  }
  if (!std::equal(g->inputs().begin(), g->inputs().end(), def.input().begin(), def.input().end()))
    return Status::DataCorrupted("{}: the inputs are not in value order", where);
  for (int v : def.output()) {
    if (v < 0 || v >= def.value_size()) return Status::DataCorrupted("{}: output value {} does not exist", where, v);
    g->AddOutput(v);
  }
  for (const proto::ExeNodeDef& pn : def.node()) {
    exe::ExeNode n;
    n.name = pn.name();
    n.kernel = pn.kernel();
    if (pn.kind() < 0 || pn.kind() > static_cast<int>(exe::NodeKind::kMerge))
      return Status::DataCorrupted("{}: node '{}' has the unknown kind {}", where, pn.name(), pn.kind());
    n.kind = static_cast<exe::NodeKind>(pn.kind());
    n.branches = pn.branches();
    n.inputs.assign(pn.input().begin(), pn.input().end());
    n.outputs.assign(pn.output().begin(), pn.output().end());
    n.priority = pn.priority();
    for (const auto& [key, value] : pn.attr()) {
      auto v = AttrValueFromProto(value, fmt::format("node '{}' attribute '{}'", pn.name(), key));
      if (!v.ok()) return corrupt(v.status());
      n.attrs.emplace(key, std::move(*v));
    }
    if (auto id = g->AddNode(std::move(n), false); !id.ok()) return corrupt(id.status());
  }
  for (int i = 0; i < def.node_size(); ++i)
    for (const proto::ExeDepDef& d : def.node(i).dep())
      if (Status s = g->AddDep(i, exe::ExeDep{d.node(), d.branch()}); !s.ok()) return corrupt(s);
  if (Status s = g->Validate(); !s.ok()) return corrupt(s);
  return g;
}

void ToProto(const exe::ModelIoDesc& io, proto::ModelIoDescDef& out) {
  out.set_name(io.name);
  out.mutable_desc()->set_dtype(DataTypeToProto(io.desc.dtype));
  *out.mutable_desc()->mutable_shape() = ShapeToProto(io.desc.shape);
}

StatusOr<exe::ModelIoDesc> FromProto(const proto::ModelIoDescDef& io, std::string_view where) {
  exe::ModelIoDesc out;
  out.name = io.name();
  auto dtype = DataTypeFromProto(io.desc().dtype(), where);
  if (!dtype.ok()) return Status::DataCorrupted("{}", dtype.status().message());
  auto shape = ShapeFromProto(io.desc().shape(), where);
  if (!shape.ok()) return Status::DataCorrupted("{}", shape.status().message());
  out.desc = TensorDesc{*dtype, std::move(*shape)};
  return out;
}

void ToProto(const CompiledModel& m, proto::ExecuteGraphSetDef& out) {
  const exe::ExecuteGraphSet& set = *m.execute_graphs;
  *out.mutable_init() = ToProto(*set.init);
  *out.mutable_main() = ToProto(*set.main);
  *out.mutable_deinit() = ToProto(*set.deinit);
  for (const exe::ModelIoDesc& io : set.desc.inputs) ToProto(io, *out.add_input());
  for (const exe::ModelIoDesc& io : set.desc.outputs) ToProto(io, *out.add_output());
  out.set_reusable_stream_num(set.desc.reusable_stream_num);
  out.set_reusable_event_num(set.desc.reusable_event_num);
  out.set_reusable_notify_num(set.desc.reusable_notify_num);
  out.set_attached_stream_num(set.desc.attached_stream_num);
  out.set_updates_variables(set.desc.updates_variables);
  out.set_executor(m.executor);
}

Status FromProto(const proto::ExecuteGraphSetDef& def, CompiledModel& m, std::string_view source) {
  auto set = std::make_shared<exe::ExecuteGraphSet>();
  NPUFLOW_ASSIGN_OR_RETURN(set->init, FromProto(def.init(), source));
  NPUFLOW_ASSIGN_OR_RETURN(set->main, FromProto(def.main(), source));
  NPUFLOW_ASSIGN_OR_RETURN(set->deinit, FromProto(def.deinit(), source));
  for (int i = 0; i < def.input_size(); ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(exe::ModelIoDesc io, FromProto(def.input(i), fmt::format("{}: v2 input {}", source, i)));
    set->desc.inputs.push_back(std::move(io));
  }
  for (int i = 0; i < def.output_size(); ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(exe::ModelIoDesc io, FromProto(def.output(i), fmt::format("{}: v2 output {}", source, i)));
    set->desc.outputs.push_back(std::move(io));
  }
  set->desc.reusable_stream_num = def.reusable_stream_num();
  set->desc.reusable_event_num = def.reusable_event_num();
  set->desc.reusable_notify_num = def.reusable_notify_num();
  set->desc.attached_stream_num = def.attached_stream_num();
  set->desc.updates_variables = def.updates_variables();
  if (Status s = set->Validate(); !s.ok()) return Status::DataCorrupted("{}: execute graphs: {}", source, s.message());
  m.execute_graphs = std::move(set);
  m.executor = def.executor();
  return Status::Ok();
}

// ---- CompiledModel -> ModelDef ------------------------------------------------------------------

Status ToProto(const MemRef& r, proto::MemRefDef& out, std::string_view where) {
  NPUFLOW_ASSIGN_OR_RETURN(proto::SegmentDef seg, ToProto(r.segment, where));
  out.set_segment(seg);
  out.set_offset(r.offset);
  return Status::Ok();
}

Status ToProto(const IoDef& io, proto::IoDefProto& out, std::string_view where) {
  out.set_name(io.name);
  out.mutable_desc()->set_dtype(DataTypeToProto(io.desc.dtype));
  *out.mutable_desc()->mutable_shape() = ShapeToProto(io.desc.shape);
  return ToProto(io.ref, *out.mutable_ref(), where);
}

// A Const whose value lives in the weights segment is stored once: the graph keeps its dtype and
// shape and the marker attribute; the reader puts the bytes back from the segment.
constexpr const char* kValueInWeights = "_value_in_weights";

void MoveConstValuesToWeights(const CompiledModel& m, proto::GraphDef& graph) {
  std::unordered_map<std::string_view, const TensorPlacement*> in_weights;
  for (const TensorPlacement& t : m.memory.tensors)
    if (t.ref.segment == Segment::kWeights && t.output == 0) in_weights.emplace(t.node, &t);
  for (proto::NodeDef& node : *graph.mutable_node()) {
    if (node.op() != "Const") continue;
    auto placed = in_weights.find(node.name());
    auto value = node.mutable_attr()->find("value");
    if (placed == in_weights.end() || value == node.mutable_attr()->end() || !value->second.has_tensor()) continue;
    proto::TensorDef* t = value->second.mutable_tensor();
    const std::uint64_t offset = placed->second->ref.offset;
    if (t->data().empty() || offset + t->data().size() > m.weights.size() ||
        std::memcmp(m.weights.data() + offset, t->data().data(), t->data().size()) != 0)
      continue;  // not byte-identical to the segment: keep it inline
    t->clear_data();
    (*node.mutable_attr())[kValueInWeights].set_b(true);
  }
}

// The reader's half: each marked Const gets its bytes back from the weights segment.
Status RestoreConstValues(const proto::ModelDef& def, proto::GraphDef& graph, std::string_view source) {
  std::unordered_map<std::string_view, const proto::TensorPlacementDef*> placed;
  for (const proto::TensorPlacementDef& t : def.memory().tensor())
    if (t.ref().segment() == proto::SEGMENT_WEIGHTS && t.output() == 0) placed.emplace(t.node(), &t);
  for (proto::NodeDef& node : *graph.mutable_node()) {
    auto marker = node.mutable_attr()->find(kValueInWeights);
    if (marker == node.mutable_attr()->end()) continue;
    node.mutable_attr()->erase(marker);
    auto value = node.mutable_attr()->find("value");
    auto at = placed.find(node.name());
    if (value == node.mutable_attr()->end() || !value->second.has_tensor() || at == placed.end())
      return Status::DataCorrupted("{}: Const '{}' keeps its value in the weights segment, which has no place for it",
                                   source, node.name());
    proto::TensorDef* t = value->second.mutable_tensor();
    const std::string where = fmt::format("{}: Const '{}'", source, node.name());
    auto dtype = DataTypeFromProto(t->dtype(), where);
    if (!dtype.ok()) return Status::DataCorrupted("{}", dtype.status().message());
    auto shape = ShapeFromProto(t->shape(), where);
    if (!shape.ok()) return Status::DataCorrupted("{}", shape.status().message());
    const TensorDesc desc{*dtype, std::move(*shape)};
    const std::optional<std::uint64_t> bytes = desc.bytes();
    if (!bytes)
      return Status::DataCorrupted("{}: keeps its value in the weights segment, but {} has no size in bytes", where,
                                   desc.ToString());
    // Both from the file: compared without adding them, which could wrap around.
    const std::uint64_t offset = at->second->ref().offset(), size = def.weights().size();
    if (offset > size || *bytes > size - offset)
      return Status::DataCorrupted("{} at weights+{} ({} bytes) ends past the weights ({} bytes)", where, offset, *bytes,
                                   size);
    t->set_data(def.weights().substr(offset, *bytes));
  }
  return Status::Ok();
}

StatusOr<proto::ModelDef> ToModelDef(const CompiledModel& m, std::string_view source) {
  proto::ModelDef def;
  if (m.graph) {
    *def.mutable_graph() = ToGraphDef(*m.graph);
    MoveConstValuesToWeights(m, *def.mutable_graph());
  }
  proto::CompileOptionsDef* opt = def.mutable_options();
  opt->set_chip(m.options.chip);
  NPUFLOW_ASSIGN_OR_RETURN(proto::StreamModeDef mode, ToProto(m.options.stream_mode, source));
  opt->set_stream_mode(mode);
  opt->set_max_parallel(m.options.max_parallel);
  opt->set_external_weight(m.options.external_weight);
  opt->set_external_weight_dir(m.options.external_weight_dir);
  opt->set_model_name(m.options.model_name);
  opt->set_value_bins(m.options.value_bins);
  opt->set_tiling_schedule_optimize(m.options.tiling_schedule_optimize);
  opt->set_tiling_sink_nops(m.options.tiling_sink_nops);
  def.set_chip(m.chip);

  proto::MemoryPlanDef* mem = def.mutable_memory();
  for (std::uint64_t b : m.memory.segment_bytes) mem->add_segment_bytes(b);
  for (const TensorPlacement& t : m.memory.tensors) {
    proto::TensorPlacementDef* pt = mem->add_tensor();
    pt->set_node(t.node);
    pt->set_output(t.output);
    NPUFLOW_RETURN_IF_ERROR(ToProto(t.ref, *pt->mutable_ref(), source));
    pt->set_bytes(t.bytes);
    pt->set_first_use(t.first_use);
    pt->set_last_use(t.last_use);
  }
  mem->set_feature_map_tensor_bytes(m.memory.feature_map_tensor_bytes);

  for (const StreamDef& s : m.streams) {
    const std::string where = fmt::format("{}: stream {}", source, s.id);
    proto::StreamDefProto* ps = def.add_stream();
    ps->set_id(s.id);
    ps->set_name(s.name);
    NPUFLOW_ASSIGN_OR_RETURN(proto::EngineDef engine, ToProto(s.engine, where));
    ps->set_engine(engine);
    for (const TaskDef& t : s.tasks) {
      proto::TaskDefProto* pt = ps->add_task();
      NPUFLOW_ASSIGN_OR_RETURN(proto::TaskTypeDef type, ToProto(t.type, where));
      pt->set_type(type);
      pt->set_node(t.node);
      pt->set_kernel(t.kernel);
      pt->set_block_dim(t.block_dim);
      pt->set_tiling_key(t.tiling_key);
      for (const MemRef& a : t.args) NPUFLOW_RETURN_IF_ERROR(ToProto(a, *pt->add_arg(), where));
      pt->set_event(t.event);
      NPUFLOW_RETURN_IF_ERROR(ToProto(t.src, *pt->mutable_src(), where));
      NPUFLOW_RETURN_IF_ERROR(ToProto(t.dst, *pt->mutable_dst(), where));
      pt->set_bytes(t.bytes);
      if (t.type == TaskType::kTaskUpdate) {
        pt->set_target_stream(t.target_stream);
        pt->set_target_task(t.target_task);
        NPUFLOW_RETURN_IF_ERROR(ToProto(t.block_dim_ref, *pt->mutable_block_dim_ref(), where));
        NPUFLOW_RETURN_IF_ERROR(ToProto(t.tiling_key_ref, *pt->mutable_tiling_key_ref(), where));
      }
    }
  }
  def.set_event_count(m.event_count);
  for (const IoDef& io : m.inputs) NPUFLOW_RETURN_IF_ERROR(ToProto(io, *def.add_input(), source));
  for (const IoDef& io : m.outputs) NPUFLOW_RETURN_IF_ERROR(ToProto(io, *def.add_output(), source));
  def.set_weights(std::string(m.weights.begin(), m.weights.end()));
  def.set_variables(std::string(m.variables.begin(), m.variables.end()));
  def.set_tiling_data(std::string(m.tiling_data.begin(), m.tiling_data.end()));
  if (m.execute_graphs) ToProto(m, *def.mutable_execute_graphs());
  for (std::size_t i = 0; i < m.stages.size(); ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(*def.add_stage(), ToModelDef(*m.stages[i], fmt::format("{}: stage {}", source, i)));
  }
  return def;
}

// ---- ModelDef -> CompiledModel ------------------------------------------------------------------

StatusOr<MemRef> FromProto(const proto::MemRefDef& r, std::string_view where) {
  MemRef out;
  NPUFLOW_ASSIGN_OR_RETURN(out.segment, FromProto(r.segment(), where));
  out.offset = r.offset();
  return out;
}

StatusOr<IoDef> FromProto(const proto::IoDefProto& io, std::string_view where) {
  IoDef out;
  out.name = io.name();
  NPUFLOW_ASSIGN_OR_RETURN(out.desc.dtype, FromProto(io.desc().dtype(), where));
  auto shape = ShapeFromProto(io.desc().shape(), where);
  if (!shape.ok()) return Status::DataCorrupted("{}", shape.status().message());
  out.desc.shape = std::move(*shape);
  NPUFLOW_ASSIGN_OR_RETURN(out.ref, FromProto(io.ref(), where));
  return out;
}

StatusOr<CompiledModel> FromModelDef(const proto::ModelDef& def, std::string_view source) {
  CompiledModel m;
  if (def.has_graph()) {
    // A graph the text format would reject is, inside a checksummed file, a corrupt file.
    proto::GraphDef graph_def = def.graph();
    NPUFLOW_RETURN_IF_ERROR(RestoreConstValues(def, graph_def, source));
    auto graph = FromGraphDef(graph_def, source);
    if (!graph.ok()) return Status(StatusCode::kDataCorrupted, std::string(graph.status().message()));
    m.graph = std::move(graph).value();
  }
  m.options.chip = def.options().chip();
  NPUFLOW_ASSIGN_OR_RETURN(m.options.stream_mode,
                           FromProto(def.options().stream_mode(), fmt::format("{}: compile options", source)));
  m.options.max_parallel = def.options().max_parallel();
  m.options.external_weight = def.options().external_weight();
  m.options.external_weight_dir = def.options().external_weight_dir();
  m.options.model_name = def.options().model_name();
  m.options.value_bins = def.options().value_bins();
  m.options.tiling_schedule_optimize = def.options().tiling_schedule_optimize();
  // Files written before the tiling sink hold 0 here: the chip's prefetch_num was the only choice.
  m.options.tiling_sink_nops = def.options().has_tiling_sink_nops() ? def.options().tiling_sink_nops() : -1;
  m.chip = def.chip();

  const proto::MemoryPlanDef& mem = def.memory();
  // Files written before the file_constant segment existed have one size fewer.
  if (mem.segment_bytes_size() != kSegmentCount && mem.segment_bytes_size() != kSegmentCount - 1)
    return Status::DataCorrupted("{}: the memory plan has {} segment sizes, expected {}", source,
                                 mem.segment_bytes_size(), kSegmentCount);
  for (int i = 0; i < mem.segment_bytes_size(); ++i) m.memory.segment_bytes[i] = mem.segment_bytes(i);
  for (const proto::TensorPlacementDef& pt : mem.tensor()) {
    const std::string where = fmt::format("{}: placement of '{}':{}", source, pt.node(), pt.output());
    TensorPlacement t;
    t.node = pt.node();
    t.output = pt.output();
    NPUFLOW_ASSIGN_OR_RETURN(t.ref, FromProto(pt.ref(), where));
    t.bytes = pt.bytes();
    t.first_use = pt.first_use();
    t.last_use = pt.last_use();
    m.memory.tensors.push_back(std::move(t));
  }
  m.memory.feature_map_tensor_bytes = mem.feature_map_tensor_bytes();

  for (const proto::StreamDefProto& ps : def.stream()) {
    StreamDef s;
    s.id = ps.id();
    s.name = ps.name();
    NPUFLOW_ASSIGN_OR_RETURN(s.engine, FromProto(ps.engine(), fmt::format("{}: stream {}", source, ps.id())));
    for (int i = 0; i < ps.task_size(); ++i) {
      const proto::TaskDefProto& pt = ps.task(i);
      const std::string where = fmt::format("{}: stream {} task {}", source, ps.id(), i);
      TaskDef t;
      NPUFLOW_ASSIGN_OR_RETURN(t.type, FromProto(pt.type(), where));
      t.node = pt.node();
      t.kernel = pt.kernel();
      t.block_dim = pt.block_dim();
      t.tiling_key = pt.tiling_key();
      for (const proto::MemRefDef& a : pt.arg()) {
        NPUFLOW_ASSIGN_OR_RETURN(MemRef r, FromProto(a, where));
        t.args.push_back(r);
      }
      t.event = pt.event();
      NPUFLOW_ASSIGN_OR_RETURN(t.src, FromProto(pt.src(), where));
      NPUFLOW_ASSIGN_OR_RETURN(t.dst, FromProto(pt.dst(), where));
      t.bytes = pt.bytes();
      if (t.type == TaskType::kTaskUpdate) {
        t.target_stream = pt.target_stream();
        t.target_task = pt.target_task();
        NPUFLOW_ASSIGN_OR_RETURN(t.block_dim_ref, FromProto(pt.block_dim_ref(), where));
        NPUFLOW_ASSIGN_OR_RETURN(t.tiling_key_ref, FromProto(pt.tiling_key_ref(), where));
      }
      s.tasks.push_back(std::move(t));
    }
    m.streams.push_back(std::move(s));
  }
  m.event_count = def.event_count();
  for (int i = 0; i < def.input_size(); ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(IoDef io, FromProto(def.input(i), fmt::format("{}: input {}", source, i)));
    m.inputs.push_back(std::move(io));
  }
  for (int i = 0; i < def.output_size(); ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(IoDef io, FromProto(def.output(i), fmt::format("{}: output {}", source, i)));
    m.outputs.push_back(std::move(io));
  }
  m.weights.assign(def.weights().begin(), def.weights().end());
  m.variables.assign(def.variables().begin(), def.variables().end());
  m.tiling_data.assign(def.tiling_data().begin(), def.tiling_data().end());
  if (def.has_execute_graphs()) NPUFLOW_RETURN_IF_ERROR(FromProto(def.execute_graphs(), m, source));
  for (int i = 0; i < def.stage_size(); ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(CompiledModel stage, FromModelDef(def.stage(i), fmt::format("{}: stage {}", source, i)));
    m.stages.push_back(std::make_shared<const CompiledModel>(std::move(stage)));
  }
  return m;
}

// ---- consistency --------------------------------------------------------------------------------

// The checks the reader makes after decoding and the writer makes before encoding.
// `error` builds the Status (DataCorrupted when reading, ParamInvalid when writing).
template <typename MakeError>
Status CheckModel(const CompiledModel& m, std::string_view source, MakeError error) {
  const MemoryPlan& mem = m.memory;
  auto within = [&](const MemRef& r, std::uint64_t bytes, const std::string& what) -> Status {
    if (static_cast<int>(r.segment) >= kSegmentCount) return error(fmt::format("{}: unknown segment {}", what,
                                                                               static_cast<int>(r.segment)));
    const std::uint64_t size = mem.bytes(r.segment);
    if (r.offset > size)
      return error(fmt::format("{}: offset {} is beyond the {} segment ({} bytes)", what, r.offset,
                               SegmentName(r.segment), size));
    if (bytes > size - r.offset)
      return error(fmt::format("{}: {} bytes at offset {} run past the end of the {} segment ({} bytes)", what, bytes,
                               r.offset, SegmentName(r.segment), size));
    return Status::Ok();
  };
  for (const TensorPlacement& t : mem.tensors)
    NPUFLOW_RETURN_IF_ERROR(within(t.ref, t.bytes, fmt::format("{}: placement of '{}':{}", source, t.node, t.output)));
  for (const StreamDef& s : m.streams) {
    for (std::size_t i = 0; i < s.tasks.size(); ++i) {
      const TaskDef& t = s.tasks[i];
      const std::string where = fmt::format("{}: stream {} task {} ({}{})", source, s.id, i, TaskTypeName(t.type),
                                            t.node.empty() ? "" : fmt::format(" '{}'", t.node));
      for (std::size_t a = 0; a < t.args.size(); ++a)
        NPUFLOW_RETURN_IF_ERROR(within(t.args[a], 0, fmt::format("{}: arg {}", where, a)));
      NPUFLOW_RETURN_IF_ERROR(within(t.src, t.type == TaskType::kMemcpy ? t.bytes : 0, where + ": src"));
      NPUFLOW_RETURN_IF_ERROR(within(t.dst, t.type == TaskType::kMemcpy ? t.bytes : 0, where + ": dst"));
      if ((t.type == TaskType::kEventRecord || t.type == TaskType::kEventWait) && t.event >= m.event_count)
        return error(fmt::format("{}: event {} is out of range (the model has {} events)", where, t.event,
                                 m.event_count));
      if (t.type == TaskType::kTaskUpdate) {
        if (t.target_stream >= m.streams.size() || t.target_task >= m.streams[t.target_stream].tasks.size())
          return error(fmt::format("{}: target stream {} task {} does not exist", where, t.target_stream,
                                   t.target_task));
        if (m.streams[t.target_stream].tasks[t.target_task].type != TaskType::kKernel)
          return error(fmt::format("{}: target stream {} task {} is not a kernel", where, t.target_stream,
                                   t.target_task));
        NPUFLOW_RETURN_IF_ERROR(within(t.block_dim_ref, 4, where + ": block_dim word"));
        NPUFLOW_RETURN_IF_ERROR(within(t.tiling_key_ref, 8, where + ": tiling key word"));
      }
    }
  }
  for (std::size_t i = 0; i < m.inputs.size(); ++i)
    NPUFLOW_RETURN_IF_ERROR(within(m.inputs[i].ref, 0, fmt::format("{}: input {} '{}'", source, i, m.inputs[i].name)));
  for (std::size_t i = 0; i < m.outputs.size(); ++i)
    NPUFLOW_RETURN_IF_ERROR(
        within(m.outputs[i].ref, 0, fmt::format("{}: output {} '{}'", source, i, m.outputs[i].name)));
  for (auto [seg, bytes] : {std::pair{Segment::kWeights, m.weights.size()},
                            std::pair{Segment::kVariables, m.variables.size()},
                            std::pair{Segment::kTilingData, m.tiling_data.size()}}) {
    // Variables may hold fewer bytes: the initial values up to the last Variable that has one
    // (the rest start zeroed on the device).
    if (seg == Segment::kVariables ? bytes > mem.bytes(seg) : bytes != mem.bytes(seg))
      return error(fmt::format("{}: {} bytes of {} data, but the {} segment is {} bytes", source, bytes,
                               SegmentName(seg), SegmentName(seg), mem.bytes(seg)));
  }
  if (m.execute_graphs) {
    if (Status s = m.execute_graphs->Validate(); !s.ok())
      return error(fmt::format("{}: execute graphs: {}", source, s.message()));
  }
  for (std::size_t i = 0; i < m.stages.size(); ++i) {
    if (!m.stages[i]) return error(fmt::format("{}: stage {} has no model", source, i));
    NPUFLOW_RETURN_IF_ERROR(CheckModel(*m.stages[i], fmt::format("{}: stage {}", source, i), error));
  }
  if (!m.stages.empty() && !m.graph) return error(fmt::format("{}: a pipeline model without its stage wiring graph", source));
  return Status::Ok();
}

StatusOr<std::string> Serialize(const CompiledModel& model, std::string_view source) {
  NPUFLOW_RETURN_IF_ERROR(CryptoAvailable().WithContext(fmt::format("{}: the header's digest", source)));
  NPUFLOW_RETURN_IF_ERROR(
      CheckModel(model, source, [](std::string msg) { return Status(StatusCode::kParamInvalid, std::move(msg)); }));
  NPUFLOW_ASSIGN_OR_RETURN(proto::ModelDef def, ToModelDef(model, source));
  const std::size_t payload_bytes = def.ByteSizeLong();
  if (payload_bytes > static_cast<std::size_t>(INT_MAX))
    return Status::Unsupported("{}: the payload would be {} bytes; protobuf messages are limited to 2 GiB", source,
                               payload_bytes);
  // Deterministic: map fields (node attributes) in key order, so one model gives one file.
  std::string payload;
  bool serialized = false;
  {
    google::protobuf::io::StringOutputStream stream(&payload);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    serialized = def.SerializeToCodedStream(&coded) && !coded.HadError();
  }
  if (!serialized) return Status::Internal("{}: the model did not serialize", source);

  std::uint32_t flags = 0;
  bool weights = model.memory.bytes(Segment::kWeights) > 0;
  for (const auto& stage : model.stages) weights = weights || stage->memory.bytes(Segment::kWeights) > 0;
  if (weights) flags |= kModelFileFlagWeightsEmbedded;
  const Digest digest = Sha256(payload);
  std::string file;
  file.reserve(kModelFileHeaderBytes + payload.size());
  file.append(kModelFileMagic);
  PutLittleEndian<std::uint32_t>(file, kModelFileVersion);
  PutLittleEndian<std::uint32_t>(file, flags);
  PutLittleEndian<std::uint64_t>(file, payload.size());
  file.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  file.append(payload);
  return file;
}

}  // namespace

StatusOr<std::string> SerializeModel(const CompiledModel& model) { return Serialize(model, "compiled model"); }

StatusOr<CompiledModel> ParseModel(std::string_view bytes, std::string_view source) {
  NPUFLOW_RETURN_IF_ERROR(CryptoAvailable().WithContext(fmt::format("{}: the header's digest", source)));
  if (IsEncrypted(bytes))
    return Status::ParamInvalid("{}: the model file is encrypted (AES-256-GCM): give its key", source);
  const std::size_t magic_bytes = std::min(bytes.size(), kModelFileMagic.size());
  if (bytes.substr(0, magic_bytes) != kModelFileMagic.substr(0, magic_bytes))
    return Status::DataCorrupted("{}: not an npuflow model file: magic is \"{}\", expected \"{}\"", source,
                                 Printable(bytes.substr(0, kModelFileMagic.size())), kModelFileMagic);
  if (bytes.size() < kModelFileHeaderBytes)
    return Status::DataCorrupted("{}: truncated: the file has {} bytes, shorter than the {}-byte header", source,
                                 bytes.size(), kModelFileHeaderBytes);
  const auto version = GetLittleEndian<std::uint32_t>(bytes, 8);
  if (version != kModelFileVersion)
    return Status::Unsupported("{}: model file format version {} is not supported (this reader supports version {})",
                               source, version, kModelFileVersion);
  const auto flags = GetLittleEndian<std::uint32_t>(bytes, 12);
  if ((flags & ~kKnownFlags) != 0)
    return Status::Unsupported("{}: unsupported flags {:#x} (known: {:#x} = weights embedded)", source, flags,
                               kKnownFlags);
  const auto payload_bytes = GetLittleEndian<std::uint64_t>(bytes, 16);
  const std::uint64_t present = bytes.size() - kModelFileHeaderBytes;
  if (present < payload_bytes)
    return Status::DataCorrupted("{}: truncated: the header announces a payload of {} bytes, the file holds {}", source,
                                 payload_bytes, present);
  if (present > payload_bytes)
    return Status::DataCorrupted("{}: {} trailing bytes after the {}-byte payload", source, present - payload_bytes,
                                 payload_bytes);
  const std::string_view payload = bytes.substr(kModelFileHeaderBytes);
  const std::string_view expected = bytes.substr(24, 32);
  const Digest digest = Sha256(payload);
  const std::string_view actual(reinterpret_cast<const char*>(digest.data()), digest.size());
  if (actual != expected)
    return Status::DataCorrupted("{}: checksum mismatch: the payload's SHA-256 is {}, the header says {}", source,
                                 Hex(actual), Hex(expected));

  proto::ModelDef def;
  if (payload.size() > static_cast<std::size_t>(INT_MAX) ||
      !def.ParseFromArray(payload.data(), static_cast<int>(payload.size())))
    return Status::DataCorrupted("{}: the payload ({} bytes) is not a valid ModelDef protobuf", source, payload.size());
  const bool embedded = (flags & kModelFileFlagWeightsEmbedded) != 0;
  std::size_t stage_weights = 0;
  for (const proto::ModelDef& stage : def.stage()) stage_weights += stage.weights().size();
  if (!embedded && stage_weights > 0)
    return Status::DataCorrupted("{}: the payload's pipeline stages hold {} bytes of weights, but the header's "
                                 "weights-embedded flag is clear",
                                 source, stage_weights);
  if (!embedded && !def.weights().empty())
    return Status::DataCorrupted("{}: the payload holds {} bytes of weights, but the header's weights-embedded flag "
                                 "is clear",
                                 source, def.weights().size());
  if (!embedded && def.memory().segment_bytes_size() > static_cast<int>(Segment::kWeights) &&
      def.memory().segment_bytes(static_cast<int>(Segment::kWeights)) > 0)
    return Status::DataCorrupted("{}: the weights segment is {} bytes, but its data is missing (the header's "
                                 "weights-embedded flag is clear)",
                                 source, def.memory().segment_bytes(static_cast<int>(Segment::kWeights)));

  NPUFLOW_ASSIGN_OR_RETURN(CompiledModel model, FromModelDef(def, source));
  NPUFLOW_RETURN_IF_ERROR(
      CheckModel(model, source, [](std::string msg) { return Status(StatusCode::kDataCorrupted, std::move(msg)); }));
  return model;
}

Status WriteModelFile(const CompiledModel& model, const std::string& path, const AesKey* key) {
  NPUFLOW_ASSIGN_OR_RETURN(std::string bytes, Serialize(model, path));
  if (key != nullptr) {
    auto sealed = EncryptBytes(bytes, *key);
    if (!sealed.ok()) return sealed.status().WithContext(path);
    bytes = std::move(*sealed);
  }
  return WriteFileAtomically(
      path,
      [&](std::FILE* f, const std::string& tmp) -> Status {
        if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
          return Status::Failed("{}: cannot write '{}': {}", path, tmp, std::strerror(errno));
        return Status::Ok();
      },
      {.sync = true});
}

StatusOr<CompiledModel> ReadModelFile(const std::string& path, const AesKey* key) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("{}: cannot open the model file: {}", path, std::strerror(err));
    return Status::Failed("{}: cannot open the model file: {}", path, std::strerror(err));
  }
  std::string bytes;
  std::error_code size_error;
  if (const auto size = std::filesystem::file_size(path, size_error); !size_error) bytes.reserve(size);
  char buffer[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) bytes.append(buffer, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return Status::Failed("{}: cannot read the model file: {}", path, std::strerror(err));
  if (key != nullptr && IsEncrypted(bytes)) {
    NPUFLOW_ASSIGN_OR_RETURN(std::string plain, DecryptBytes(bytes, *key, path));
    return ParseModel(plain, path);
  }
  return ParseModel(bytes, path);  // encrypted without a key: ParseModel says so
}

}  // namespace npuflow::graph
