#include "scheduler/davinci_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "base/logging.h"
#include "graph/ops/op_registry.h"
#include "graph/ir/tensor_access.h"

namespace npuflow::scheduler {
namespace {

using graph::MemRef;
using graph::Segment;

constexpr int Seg(Segment s) { return static_cast<int>(s); }

// A Variable updated in place lives in the variables segment under the updating node's name.
bool UpdatesVariables(const CompiledModel& model) {
  for (const graph::TensorPlacement& t : model.memory.tensors) {
    if (t.ref.segment != Segment::kVariables) continue;
    const graph::Node* node = model.graph ? model.graph->FindNode(t.node) : nullptr;
    if (node == nullptr || node->op().type() != "Variable") return true;
  }
  return false;
}

// The segments every execution instance has its own copy of.
constexpr std::array<Segment, 5> kPerInstance = {Segment::kFixedFeatureMap, Segment::kFeatureMap, Segment::kInput,
                                                 Segment::kOutput, Segment::kTilingData};

int InstanceCount(const CompiledModel& model, const LoadConfig& config) {
  return UpdatesVariables(model) ? 1 : std::clamp(config.instances, 1, 64);
}

}  // namespace

ResourceNeeds DavinciModel::Needs(const CompiledModel& model, const LoadConfig& config) {
  ResourceNeeds need;
  const int n = InstanceCount(model, config);
  if (!config.shared_weights && !config.const_memory_base) need.memory_bytes += model.memory.bytes(Segment::kWeights);
  need.memory_bytes += model.memory.bytes(Segment::kVariables);
  // External weights: at most their logical size (less when shared or on user memory), and one
  // latch event per FileConstant.
  need.memory_bytes += model.memory.bytes(Segment::kFileConstant);
  for (const graph::TensorPlacement& t : model.memory.tensors)
    if (t.ref.segment == Segment::kFileConstant) need.events += 1;
  for (Segment s : kPerInstance) {
    if (s == Segment::kFeatureMap && config.feature_memory_base) continue;
    need.memory_bytes += static_cast<std::uint64_t>(n) * model.memory.bytes(s);
  }
  need.streams = static_cast<std::size_t>(n) * (model.streams.size() + 1);  // + the execution stream
  need.events += static_cast<std::size_t>(n) * model.event_count;
  return need;
}

DavinciModel::DavinciModel(npu_sim::Runtime* rt, std::uint32_t id, std::shared_ptr<const CompiledModel> model,
                           LoadConfig config)
    : rt_(rt), id_(id), model_(std::move(model)), config_(std::move(config)) {}

DavinciModel::~DavinciModel() { (void)Unload(); }

void DavinciModel::Touch() {
  static std::atomic<std::uint64_t> tick{1};
  last_used_.store(tick.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
}

Status DavinciModel::Init() {
  Touch();
  auto stage = [&](const char* name, Status (DavinciModel::*fn)()) -> Status {
    init_stages_.emplace_back(name);
    Status s = (this->*fn)();
    if (!s.ok()) return s.WithContext(fmt::format("model {} {}", id_, name));
    return Status::Ok();
  };
  Status s = stage("InitModelMem", &DavinciModel::InitModelMem);
  if (s.ok()) s = stage("PreProcessFileConstants", &DavinciModel::PreProcessFileConstants);
  if (s.ok()) s = stage("InitIoNodes", &DavinciModel::InitIoNodes);
  if (s.ok()) s = stage("InitVariables", &DavinciModel::InitVariables);
  if (s.ok()) s = stage("InitNodes", &DavinciModel::InitNodes);
  if (s.ok()) s = stage("DoTaskSink", &DavinciModel::DoTaskSink);
  if (!s.ok()) (void)Unload();
  return s;
}

// ---- InitModelMem --------------------------------------------------------------------------------
Status DavinciModel::InitModelMem() {
  const CompiledModel& m = *model_;
  const int device = config_.device;
  if (!m.graph) return Status::ParamInvalid("the compiled model has no graph");
  updates_variables_ = UpdatesVariables(m);
  const int n = InstanceCount(m, config_);
  if (config_.instances < 1 || config_.instances > 64)
    return Status::ParamInvalid("execution instances must be 1 to 64, got {}", config_.instances);
  if (config_.feature_memory_base && n > 1)
    return Status::ParamInvalid("a user feature-memory base serves one execution instance, {} were asked for", n);
  if (config_.feature_memory_base && config_.feature_memory_size < m.memory.bytes(Segment::kFeatureMap))
    return Status::ParamInvalid("user feature memory is too small: the model needs {} bytes, {} were provided",
                                m.memory.bytes(Segment::kFeatureMap), config_.feature_memory_size);
  if (config_.const_memory_base && config_.const_memory_size < m.memory.bytes(Segment::kWeights))
    return Status::ParamInvalid("user const (weight) memory is too small: the model needs {} bytes, {} were provided",
                                m.memory.bytes(Segment::kWeights), config_.const_memory_size);

  auto alloc = [&](Segment s, const char* what) -> StatusOr<npu_sim::DevicePtr> {
    return rt_->Malloc(device, std::max<std::uint64_t>(m.memory.bytes(s), 1), npu_sim::Placement::kHbm,
                       fmt::format("model{}.{}", id_, what));
  };
  // Weights: shared (already loaded), on user memory, or our own.
  if (config_.shared_weights) {
    weights_ = config_.shared_weights;
  } else {
    if (config_.const_memory_base) {
      weights_ = config_.const_memory_base;
    } else {
      NPUFLOW_ASSIGN_OR_RETURN(weights_, alloc(Segment::kWeights, "weights"));
      owns_weights_ = true;
    }
    if (!m.weights.empty()) NPUFLOW_RETURN_IF_ERROR(rt_->MemcpyH2D(device, weights_, m.weights.data(), m.weights.size()));
  }
  NPUFLOW_ASSIGN_OR_RETURN(variables_, alloc(Segment::kVariables, "variables"));
  owns_variables_ = true;

  for (int i = 0; i < n; ++i) {
    auto inst = std::make_unique<Instance>();
    for (Segment s : kPerInstance) {
      if (s == Segment::kFeatureMap && config_.feature_memory_base) {
        inst->base[Seg(s)] = config_.feature_memory_base;
        continue;
      }
      auto ptr = alloc(s, std::string(graph::SegmentName(s)).c_str());
      if (!ptr.ok()) {
        instances_.push_back(std::move(inst));  // freed by Unload
        return ptr.status();
      }
      inst->base[Seg(s)] = *ptr;
      inst->owned[Seg(s)] = true;
    }
    // Each instance's kernels read their parameters from its own tiling data (written on the
    // device when tiling is sunk), so every instance gets the initial copy.
    Instance& ref = *inst;
    instances_.push_back(std::move(inst));
    if (!m.tiling_data.empty())
      NPUFLOW_RETURN_IF_ERROR(
          rt_->MemcpyH2D(device, ref.base[Seg(Segment::kTilingData)], m.tiling_data.data(), m.tiling_data.size()));
  }
  return Status::Ok();
}

StatusOr<std::uint64_t> DavinciModel::Resolve(const Instance& inst, const MemRef& ref) const {
  const std::uint64_t size = model_->memory.bytes(ref.segment);
  if (ref.segment != Segment::kNone && ref.offset > size)
    return Status::DataCorrupted("a task refers to {} offset {}, past the segment's {} bytes",
                                 graph::SegmentName(ref.segment), ref.offset, size);
  switch (ref.segment) {
    case Segment::kNone: return 0;
    case Segment::kWeights: return (weights_ + ref.offset).value;
    case Segment::kVariables: return (variables_ + ref.offset).value;
    case Segment::kFileConstant: {
      const int slot = FileConstantSlotOf(ref.offset);
      if (slot < 0)
        return Status::DataCorrupted("a task refers to file_constant offset {}, where no FileConstant lives", ref.offset);
      const FileConstantSlot& fc = file_constants_[static_cast<std::size_t>(slot)];
      return (fc.address + (ref.offset - fc.logical)).value;
    }
    default: return (inst.base[Seg(ref.segment)] + ref.offset).value;
  }
}

// ---- PreProcessFileConstants (external weights) --------------------------------------------------
Status LoadConfig::SetExternalWeightAddress(std::string name, npu_sim::DevicePtr ptr, std::uint64_t size) {
  if (name.empty()) return Status::ParamInvalid("SetExternalWeightAddress: the file name is empty");
  if (!ptr) return Status::ParamInvalid("SetExternalWeightAddress('{}'): the device pointer is null", name);
  if (size == 0 || size % 32 != 0)
    return Status::ParamInvalid("SetExternalWeightAddress('{}'): size {} must be a non-zero multiple of 32", name, size);
  for (FileConstantMem& m : external_weight_memory) {
    if (m.file_name == name) {
      m.ptr = ptr;
      m.size = size;
      return Status::Ok();
    }
  }
  external_weight_memory.push_back(FileConstantMem{std::move(name), ptr, size});
  return Status::Ok();
}

namespace {

// A FileConstant's file at load: the weight path given at load, else <model dir>/weight/, else
// its location (relative to the model's directory when it is there).
std::string WeightFileAtLoad(const std::string& location, const LoadConfig& config) {
  namespace fs = std::filesystem;
  const fs::path loc(location);
  const fs::path name = loc.filename();
  if (!config.weight_path.empty()) return (fs::path(config.weight_path) / name).string();
  std::error_code ec;
  if (!config.model_dir.empty()) {
    const fs::path next_to_model = fs::path(config.model_dir) / "weight" / name;
    if (fs::exists(next_to_model, ec)) return next_to_model.string();
    if (loc.is_relative() && fs::exists(fs::path(config.model_dir) / loc, ec))
      return (fs::path(config.model_dir) / loc).string();
  }
  return location;
}

}  // namespace

Status DavinciModel::PreProcessFileConstants() {
  const CompiledModel& m = *model_;
  struct Fc {
    const graph::Node* node = nullptr;
    std::string path, file_name, sha256;
    std::uint64_t logical = 0, bytes = 0, offset = 0;
    std::uint64_t order = 0;  // its first reader's place in the topological order
  };
  std::vector<Fc> fcs;
  // Weights load in the order the model first reads them, whatever their order in the file (a
  // ggml file converted from a checkpoint lists the embeddings last), so the first layers land first.
  std::unordered_map<const graph::Node*, std::uint64_t> first_read;  // a node -> its first reader's index
  if (auto order = m.graph->TopologicalOrder(); order.ok())
    for (std::size_t i = 0; i < order->size(); ++i)
      for (const graph::Endpoint& in : (*order)[i]->inputs()) first_read.try_emplace(in.node, i);
  for (const graph::TensorPlacement& t : m.memory.tensors) {
    if (t.ref.segment != Segment::kFileConstant) continue;
    Fc fc;
    fc.node = m.graph->FindNode(t.node);
    if (fc.node == nullptr || fc.node->type() != "FileConstant")
      return Status::DataCorrupted("the file_constant segment places '{}', which is no FileConstant node", t.node);
    const graph::OpDesc& op = fc.node->op();
    NPUFLOW_ASSIGN_OR_RETURN(std::string location, op.AttrOr<std::string>("location", ""));
    if (location.empty()) {
      NPUFLOW_ASSIGN_OR_RETURN(location, op.AttrOr<std::string>("file_path", ""));
    }
    if (location.empty())
      return Status::ParamInvalid(
          "node '{}' (FileConstant): no location or file_path (a file_id is resolved at compile time, through "
          "ge.exec.value_bins)",
          t.node);
    NPUFLOW_ASSIGN_OR_RETURN(std::int64_t offset, op.AttrOr<std::int64_t>("offset", 0));
    NPUFLOW_ASSIGN_OR_RETURN(fc.sha256, op.AttrOr<std::string>("_sha256", ""));
    if (offset < 0) return Status::ParamInvalid("node '{}' (FileConstant): offset {} is negative", t.node, offset);
    const auto bytes = fc.node->outputs().empty() ? std::nullopt : fc.node->outputs()[0].bytes();
    if (!bytes) return Status::ParamInvalid("node '{}' (FileConstant): no static output size", t.node);
    fc.bytes = *bytes;
    fc.offset = static_cast<std::uint64_t>(offset);
    fc.logical = t.ref.offset;
    fc.path = WeightFileAtLoad(location, config_);
    const auto first = first_read.find(fc.node);
    fc.order = first == first_read.end() ? std::numeric_limits<std::uint64_t>::max() : first->second;
    fc.file_name = std::filesystem::path(fc.path).filename().string();
    fcs.push_back(std::move(fc));
  }
  if (fcs.empty()) return Status::Ok();
  const int device = config_.device;

  // User device memory first: matched by file name, used in place.
  auto user_memory = [&](const std::string& file_name) -> const FileConstantMem* {
    for (const FileConstantMem& u : config_.external_weight_memory)
      if (u.file_name == file_name) return &u;
    return nullptr;
  };
  std::map<std::string, std::vector<const Fc*>> by_file;  // the rest, per file
  for (const Fc& fc : fcs) {
    const FileConstantMem* u = user_memory(fc.file_name);
    if (u == nullptr) {
      by_file[fc.path].push_back(&fc);
      continue;
    }
    if (u->size < fc.offset || u->size - fc.offset < fc.bytes)
      return Status::ParamInvalid(
          "node '{}' (FileConstant {}): user device memory for file '{}' is too small: required {} bytes (offset {} + "
          "{} bytes), provided {}",
          fc.node->name(), fc.node->outputs()[0].ToString(), fc.file_name, fc.offset + fc.bytes, fc.offset, fc.bytes,
          u->size);
    file_constants_.push_back(FileConstantSlot{fc.logical, fc.bytes, u->ptr + fc.offset, std::nullopt, fc.node->name()});
    external_weight_info_.push_back(
        ExternalWeightInfo{fc.node->name(), fc.path, fc.offset, fc.bytes, u->ptr + fc.offset, true, false});
  }

  if (!by_file.empty()) {
    if (!config_.weight_manager)
      return Status::ParamInvalid("the model has external weights but no ExternalWeightManager was given to load them");
    // Missing and short files are errors naming the node, before anything is allocated.
    for (const auto& [path, users] : by_file) {
      std::error_code ec;
      const std::uintmax_t size = std::filesystem::file_size(path, ec);
      if (ec)
        return Status::NotFound("node '{}' (FileConstant): weight file '{}' cannot be read: {}", users[0]->node->name(),
                                path, ec.message());
      if (config_.weight_key) continue;  // the envelope's size is checked by the loader
      for (const Fc* fc : users)
        if (size < fc->offset + fc->bytes)
          return Status::ParamInvalid(
              "node '{}' (FileConstant): weight file '{}' has {} bytes, reading offset {} + length {} needs {}",
              fc->node->name(), path, size, fc->offset, fc->bytes, fc->offset + fc->bytes);
    }
    weights::WeightLoadFlags flags{config_.verify_weights, config_.weight_key};
    // Every FileConstant in one file: one device copy of the span they use (HandleCombinedWeights);
    // otherwise one per region (HandleIndividualWeights).
    const bool combined = by_file.size() == 1;
    for (const auto& [path, users] : by_file) {
      std::map<std::uint64_t, weights::RegionNeed> regions;  // by offset: nodes sharing a region share the copy
      for (const Fc* fc : users) {
        weights::RegionNeed& r = regions[fc->offset];
        r.offset = fc->offset;
        if (fc->bytes > r.length) r.length = fc->bytes;
        if (r.sha256.empty()) r.sha256 = fc->sha256;
        r.order = r.name.empty() ? fc->order : std::min(r.order, fc->order);
        r.name += (r.name.empty() ? "" : ", ") + fc->node->name();
      }
      std::vector<std::pair<std::vector<weights::RegionNeed>, std::pair<std::uint64_t, std::uint64_t>>> spans;
      if (combined) {
        std::vector<weights::RegionNeed> all;
        std::uint64_t lo = std::numeric_limits<std::uint64_t>::max(), hi = 0;
        for (auto& [off, r] : regions) {
          lo = std::min(lo, r.offset);
          hi = std::max(hi, r.offset + r.length);
          all.push_back(r);
        }
        spans.push_back({std::move(all), {lo, hi}});
      } else {
        for (auto& [off, r] : regions) spans.push_back({{r}, {r.offset, r.offset + r.length}});
      }
      for (auto& [needs, span] : spans) {
        // Regions at file offsets that are not aligned (a ggml file's tensors follow their
        // variable-length headers) get aligned slots of their own in the device copy.
        bool packed = false;
        for (const weights::RegionNeed& r : needs)
          packed = packed || (r.offset - span.first) % weights::ExternalWeightManager::kPackedAlignment != 0;
        NPUFLOW_ASSIGN_OR_RETURN(weights::FilePlacement placed, config_.weight_manager->Place(device, path, span.first,
                                                                                           span.second, needs, flags,
                                                                                           packed));
        weight_files_.push_back(placed.file);
        for (std::size_t i = 0; i < needs.size(); ++i) {
          const weights::PlacedRegion& pr = placed.regions[i];
          weight_loads_.push_back(pr.state);
          for (const Fc* fc : users) {
            if (fc->offset != needs[i].offset) continue;
            file_constants_.push_back(FileConstantSlot{fc->logical, fc->bytes, pr.address, pr.ready, fc->node->name()});
            external_weight_info_.push_back(ExternalWeightInfo{fc->node->name(), path, fc->offset, fc->bytes,
                                                               pr.address, false, pr.copied_here});
          }
        }
      }
    }
  }
  // A zero-byte FileConstant reads nothing and shares its logical offset with the next one: it
  // takes no slot, so lookups find the FileConstant that holds bytes.
  file_constants_.erase(std::remove_if(file_constants_.begin(), file_constants_.end(),
                                       [](const FileConstantSlot& s) { return s.bytes == 0; }),
                        file_constants_.end());
  std::sort(file_constants_.begin(), file_constants_.end(),
            [](const FileConstantSlot& a, const FileConstantSlot& b) { return a.logical < b.logical; });
  // Verified or encrypted weights are checked before the model may run; otherwise the load goes
  // on while the model is set up, and errors found at once still fail it here.
  if (config_.verify_weights || config_.weight_key) return WaitForWeights();
  return WeightsStatus();
}

int DavinciModel::FileConstantSlotOf(std::uint64_t offset) const {
  auto it = std::upper_bound(file_constants_.begin(), file_constants_.end(), offset,
                             [](std::uint64_t off, const FileConstantSlot& s) { return off < s.logical; });
  if (it == file_constants_.begin()) return -1;
  --it;
  if (offset > it->logical + it->bytes) return -1;
  return static_cast<int>(it - file_constants_.begin());
}

Status DavinciModel::WeightsStatus() {
  if (weights_landed_.load(std::memory_order_acquire)) return Status::Ok();
  bool all = true;
  for (const auto& state : weight_loads_) {
    std::optional<Status> s = state->Peek();
    if (!s) {
      all = false;
      continue;
    }
    if (!s->ok()) return s->WithContext(fmt::format("model {}: external weights", id_));
  }
  if (all) weights_landed_.store(true, std::memory_order_release);
  return Status::Ok();
}

Status DavinciModel::WaitForWeights() const {
  for (const auto& state : weight_loads_) {
    StatusOr<weights::WeightLoadReport> r = state->Wait();
    if (!r.ok()) return r.status().WithContext(fmt::format("model {}: external weights", id_));
  }
  return Status::Ok();
}

// ---- InitIoNodes: zero-copy places ---------------------------------------------------------------
Status DavinciModel::InitIoNodes() {
  const CompiledModel& m = *model_;
  const std::uint32_t n_in = static_cast<std::uint32_t>(m.inputs.size());
  // slot and offset within the slot's block for a kInput / kOutput reference
  auto slot_of = [&](const MemRef& ref) -> StatusOr<std::pair<std::uint32_t, std::uint64_t>> {
    const auto& ios = ref.segment == Segment::kInput ? m.inputs : m.outputs;
    for (std::uint32_t i = 0; i < ios.size(); ++i) {
      const std::uint64_t begin = ios[i].ref.offset;
      const std::uint64_t bytes = ios[i].desc.bytes().value_or(0);
      if (ref.offset >= begin && (ref.offset < begin + bytes || ref.offset == begin))
        return std::make_pair(ref.segment == Segment::kInput ? i : n_in + i, ref.offset - begin);
    }
    return Status::DataCorrupted("a task refers to {} offset {}, which is no model {}", graph::SegmentName(ref.segment),
                                 ref.offset, ref.segment == Segment::kInput ? "input" : "output");
  };
  for (const graph::IoDef& io : m.inputs)
    if (!io.desc.bytes()) return Status::Unsupported("input '{}' has a dynamic shape {}", io.name, io.desc.ToString());
  io_patches_.assign(m.streams.size(), {});
  for (std::size_t s = 0; s < m.streams.size(); ++s) {
    const auto& tasks = m.streams[s].tasks;
    for (std::uint32_t t = 0; t < tasks.size(); ++t) {
      const graph::TaskDef& td = tasks[t];
      auto add = [&](const MemRef& ref, std::uint32_t field) -> Status {
        if (ref.segment != Segment::kInput && ref.segment != Segment::kOutput) return Status::Ok();
        NPUFLOW_ASSIGN_OR_RETURN(auto so, slot_of(ref));
        io_patches_[s].push_back(npu_sim::IoPatch{t, field, so.first, so.second});
        return Status::Ok();
      };
      if (td.type == graph::TaskType::kKernel || td.type == graph::TaskType::kAicpuKernel) {
        for (std::uint32_t a = 0; a < td.args.size(); ++a) NPUFLOW_RETURN_IF_ERROR(add(td.args[a], a));
      } else if (td.type == graph::TaskType::kMemcpy) {
        NPUFLOW_RETURN_IF_ERROR(add(td.src, npu_sim::IoPatch::kCopySrc));
        NPUFLOW_RETURN_IF_ERROR(add(td.dst, npu_sim::IoPatch::kCopyDst));
      }
    }
  }
  return Status::Ok();
}

// ---- InitVariables (TransAllVarData) -------------------------------------------------------------
Status DavinciModel::InitVariables() {
  const CompiledModel& m = *model_;
  if (m.variables.empty()) return Status::Ok();
  if (m.variables.size() > m.memory.bytes(Segment::kVariables))
    return Status::DataCorrupted("{} bytes of initial variable values for a {}-byte segment", m.variables.size(),
                                 m.memory.bytes(Segment::kVariables));
  return rt_->MemcpyH2D(config_.device, variables_, m.variables.data(), m.variables.size());
}

// ---- InitNodes -----------------------------------------------------------------------------------
Status DavinciModel::InitNodes() {
  const CompiledModel& m = *model_;
  graph::RegisterBuiltinOps();
  for (const graph::Node* node : m.graph->nodes()) {
    auto def = graph::OpRegistry::Global().Find(node->op().type());
    if (!def.ok()) return def.status().WithContext(fmt::format("node '{}'", node->name()));
    if ((*def)->communication) has_communication_ = true;
  }
  kernels_.clear();
  for (const graph::StreamDef& sd : m.streams) {
    for (const graph::TaskDef& t : sd.tasks) {
      const npu_sim::KernelDef* def = nullptr;
      if (t.type == graph::TaskType::kKernel || t.type == graph::TaskType::kAicpuKernel) {
        auto found = npu_sim::KernelRegistry::Global().Find(t.kernel);
        if (!found.ok()) return found.status().WithContext(fmt::format("node '{}'", t.node));
        def = *found;
      }
      kernels_.push_back(def);
    }
    for (const graph::TaskDef& t : sd.tasks)
      if (t.type == graph::TaskType::kEventRecord || t.type == graph::TaskType::kEventWait)
        if (t.event >= m.event_count)
          return Status::DataCorrupted("stream {} uses event {}, the model has {}", sd.id, t.event, m.event_count);
  }
  return Status::Ok();
}

// ---- DoTaskSink ----------------------------------------------------------------------------------
Status DavinciModel::DoTaskSink() {
  const CompiledModel& m = *model_;
  const int device = config_.device;
  for (auto& inst_ptr : instances_) {
    Instance& inst = *inst_ptr;
    NPUFLOW_ASSIGN_OR_RETURN(inst.model, rt_->CreateModel(device));
    inst.has_model = true;
    NPUFLOW_ASSIGN_OR_RETURN(inst.exec_stream, rt_->CreateStream(device));
    for (std::uint32_t e = 0; e < m.event_count; ++e) {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Event ev, rt_->CreateEvent(device));
      inst.events.push_back(ev);
    }
    // BindModelStream
    for (std::size_t s = 0; s < m.streams.size(); ++s) {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Stream stream, rt_->CreateStream(device));
      inst.streams.push_back(stream);
      NPUFLOW_RETURN_IF_ERROR(rt_->BindStream(inst.model, stream));
    }
    // InitTaskInfo: each TaskDef becomes a device task with resolved addresses.
    std::size_t k = 0;
    inst.lists.assign(m.streams.size(), {});
    inst.gates.assign(m.streams.size(), {});
    std::vector<std::vector<std::uint32_t>> moved(m.streams.size());  // TaskDef index -> list index
    for (std::size_t s = 0; s < m.streams.size(); ++s) {
      std::vector<npu_sim::Task>& tasks = inst.lists[s];
      tasks.reserve(m.streams[s].tasks.size());
      // The first task on this stream that reads an external weight region waits on its latch.
      std::vector<char> waited(file_constants_.size(), 0);
      auto gate = [&](const MemRef& r) {
        if (r.segment != Segment::kFileConstant) return;
        const int slot = FileConstantSlotOf(r.offset);
        if (slot < 0 || waited[static_cast<std::size_t>(slot)]) return;
        waited[static_cast<std::size_t>(slot)] = 1;
        const FileConstantSlot& fc = file_constants_[static_cast<std::size_t>(slot)];
        if (!fc.ready) return;
        inst.gates[s].push_back(static_cast<std::uint32_t>(tasks.size()));
        tasks.push_back(npu_sim::Task::Wait(fc.ready->id));
        tasks.back().name = "weights ready: " + fc.node;
      };
      moved[s].resize(m.streams[s].tasks.size());
      for (std::size_t ti = 0; ti < m.streams[s].tasks.size(); ++ti) {
        const graph::TaskDef& t = m.streams[s].tasks[ti];
        const npu_sim::KernelDef* def = kernels_[k++];
        if (t.type == graph::TaskType::kKernel || t.type == graph::TaskType::kAicpuKernel)
          for (const MemRef& a : t.args) gate(a);
        else if (t.type == graph::TaskType::kMemcpy)
          gate(t.src);
        moved[s][ti] = static_cast<std::uint32_t>(tasks.size());
        switch (t.type) {
          case graph::TaskType::kKernel:
          case graph::TaskType::kAicpuKernel: {
            std::vector<std::uint64_t> args;
            args.reserve(t.args.size());
            for (const MemRef& a : t.args) {
              NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t v, Resolve(inst, a));
              args.push_back(v);
            }
            tasks.push_back(npu_sim::Task::Kernel(def, t.block_dim, std::move(args), t.tiling_key));
            tasks.back().name = t.node;
            break;
          }
          case graph::TaskType::kMemcpy: {
            npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kDeviceToDevice, t.bytes);
            NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t src, Resolve(inst, t.src));
            NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t dst, Resolve(inst, t.dst));
            c.src_dev = npu_sim::DevicePtr{src};
            c.dst_dev = npu_sim::DevicePtr{dst};
            c.name = t.node.empty() ? "memcpy" : t.node + ":copy";
            tasks.push_back(std::move(c));
            break;
          }
          case graph::TaskType::kEventRecord: tasks.push_back(npu_sim::Task::Record(inst.events[t.event].id)); break;
          case graph::TaskType::kEventWait: tasks.push_back(npu_sim::Task::Wait(inst.events[t.event].id)); break;
          case graph::TaskType::kNop: tasks.push_back(npu_sim::Task::Nop()); break;
        }
      }
    }
    // DistributeTask: each stream gets its list once. Then the model is built.
    inst.patches = io_patches_;
    // Latch waits moved the tasks: patches name the new positions.
    for (std::size_t s = 0; s < m.streams.size(); ++s)
      for (npu_sim::IoPatch& p : inst.patches[s]) p.task = moved[s][p.task];
    for (std::size_t s = 0; s < m.streams.size(); ++s)
      NPUFLOW_RETURN_IF_ERROR(rt_->LoadTasks(inst.model, inst.streams[s], inst.lists[s], inst.patches[s]));
  }
  return Status::Ok();
}

// ---- execution -----------------------------------------------------------------------------------
std::vector<std::uint64_t> DavinciModel::OwnIo(int i) const {
  const Instance& inst = *instances_[i];
  std::vector<std::uint64_t> io;
  io.reserve(model_->inputs.size() + model_->outputs.size());
  for (const graph::IoDef& d : model_->inputs) io.push_back((inst.base[Seg(Segment::kInput)] + d.ref.offset).value);
  for (const graph::IoDef& d : model_->outputs) io.push_back((inst.base[Seg(Segment::kOutput)] + d.ref.offset).value);
  return io;
}

npu_sim::DevicePtr DavinciModel::OwnInput(int i, std::size_t index) const {
  return instances_[i]->base[Seg(Segment::kInput)] + model_->inputs[index].ref.offset;
}
npu_sim::DevicePtr DavinciModel::OwnOutput(int i, std::size_t index) const {
  return instances_[i]->base[Seg(Segment::kOutput)] + model_->outputs[index].ref.offset;
}

Status DavinciModel::CheckArgs(const ExecuteArgs& args) const {
  const CompiledModel& m = *model_;
  if (args.inputs.size() != m.inputs.size())
    return Status::ParamInvalid("model {}: {} inputs given, the model takes {}", id_, args.inputs.size(), m.inputs.size());
  if (args.outputs.size() != m.outputs.size())
    return Status::ParamInvalid("model {}: {} output buffers given, the model has {} outputs", id_, args.outputs.size(),
                                m.outputs.size());
  auto check = [&](const DataBuffer& b, const graph::IoDef& io, const char* what) -> Status {
    const std::uint64_t want = io.desc.bytes().value_or(0);
    if (b.bytes != want)
      return Status::ParamInvalid("model {}: {} '{}' ({}) takes {} bytes, got {}", id_, what, io.name, io.desc.ToString(),
                                  want, b.bytes);
    if (b.host == nullptr && !b.device && want > 0)
      return Status::ParamInvalid("model {}: {} '{}' has neither a host nor a device buffer", id_, what, io.name);
    if (b.host != nullptr && b.device)
      return Status::ParamInvalid("model {}: {} '{}' has both a host and a device buffer", id_, what, io.name);
    if (args.stream && b.host != nullptr)
      return Status::ParamInvalid("model {}: {} '{}' is host memory; execution on a user stream takes device buffers",
                                  id_, what, io.name);
    return Status::Ok();
  };
  for (std::size_t i = 0; i < m.inputs.size(); ++i) NPUFLOW_RETURN_IF_ERROR(check(args.inputs[i], m.inputs[i], "input"));
  for (std::size_t i = 0; i < m.outputs.size(); ++i)
    NPUFLOW_RETURN_IF_ERROR(check(args.outputs[i], m.outputs[i], "output"));
  if (args.stream && args.stream->device != config_.device)
    return Status::ParamInvalid("model {} is on device {}, the stream on device {}", id_, config_.device,
                                args.stream->device);
  return Status::Ok();
}

DavinciModel::Instance& DavinciModel::PickInstance() {
  // An idle instance, claimed atomically (two callers never both take the same idle one); if
  // none is idle, the least busy. Starting points rotate so load spreads. The caller releases
  // the instance (in_flight - 1) when its execution ends.
  const std::size_t n = instances_.size();
  const std::size_t start = next_instance_.fetch_add(1, std::memory_order_relaxed) % n;
  for (std::size_t k = 0; k < n; ++k) {
    Instance& inst = *instances_[(start + k) % n];
    int idle = 0;
    if (inst.in_flight.compare_exchange_strong(idle, 1, std::memory_order_acq_rel)) return inst;
  }
  std::size_t best = start;
  int best_load = std::numeric_limits<int>::max();
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (start + k) % n;
    const int load = instances_[i]->in_flight.load(std::memory_order_relaxed);
    if (load < best_load) {
      best_load = load;
      best = i;
    }
  }
  instances_[best]->in_flight.fetch_add(1, std::memory_order_acq_rel);
  return *instances_[best];
}

std::vector<std::uint64_t> DavinciModel::IoFor(const Instance& inst, const ExecuteArgs& args) const {
  const CompiledModel& m = *model_;
  std::vector<std::uint64_t> io;
  io.reserve(m.inputs.size() + m.outputs.size());
  for (std::size_t i = 0; i < m.inputs.size(); ++i)
    io.push_back(args.inputs[i].device ? args.inputs[i].device.value
                                       : (inst.base[Seg(Segment::kInput)] + m.inputs[i].ref.offset).value);
  for (std::size_t i = 0; i < m.outputs.size(); ++i)
    io.push_back(args.outputs[i].device ? args.outputs[i].device.value
                                        : (inst.base[Seg(Segment::kOutput)] + m.outputs[i].ref.offset).value);
  // A zero-byte tensor has no address of its own; any non-null one will do.
  for (std::uint64_t& a : io)
    if (a == 0) a = inst.base[Seg(Segment::kInput)].value;
  return io;
}

namespace {
// Counts an execution in `c` for its duration (adopt: already counted by PickInstance).
struct InFlight {
  explicit InFlight(std::atomic<int>& c, bool adopt = false) : c_(c) {
    if (!adopt) c_.fetch_add(1, std::memory_order_relaxed);
  }
  ~InFlight() { c_.fetch_sub(1, std::memory_order_acq_rel); }
  std::atomic<int>& c_;
};
}  // namespace

Status DavinciModel::NnExecute(const ExecuteArgs& args) {
  std::shared_lock<std::shared_mutex> exec_lock(exec_mu_);
  if (unloaded_.load()) return Status::Aborted("model {} is unloaded", id_);
  NPUFLOW_RETURN_IF_ERROR(CheckArgs(args));
  NPUFLOW_RETURN_IF_ERROR(WeightsStatus());
  // Weights still streaming in: the run waits for them on the device, and afterwards for their
  // load's verdict here (a load that failed records its latches anyway, so as not to hang).
  const bool weights_settled = weights_landed_.load(std::memory_order_acquire);
  InFlight model_guard(in_flight_);
  Touch();
  if (args.stream) {
    // Async on the caller's stream: the run is queued behind the stream's work; device buffers only.
    Instance& inst = *instances_[next_instance_.fetch_add(1, std::memory_order_relaxed) % instances_.size()];
    return rt_->ExecuteModelOnStream(inst.model, *args.stream, IoFor(inst, args));
  }
  Instance& inst = PickInstance();
  InFlight inst_guard(inst.in_flight, /*adopt=*/true);
  std::vector<std::uint64_t> io = IoFor(inst, args);
  const bool zero_copy = std::all_of(args.inputs.begin(), args.inputs.end(), [](const DataBuffer& b) { return b.host == nullptr; }) &&
                         std::all_of(args.outputs.begin(), args.outputs.end(), [](const DataBuffer& b) { return b.host == nullptr; });
  if (zero_copy) {
    // One host interaction: the execute message; the host hears only the completion.
    auto end = rt_->ExecuteModel(inst.model, std::move(io), args.timeout);
    if (!end.ok()) return end.status().WithContext(fmt::format("model {}", id_));
    if (!weights_settled) return WaitForWeights();
    ElideGates(inst);
    return Status::Ok();
  }
  // Host buffers: copied through the instance's own I/O blocks, in one submission with the run.
  // The copies go through host staging owned by the tasks (Task::keep_alive), as pageable memory
  // is staged for DMA: a timeout returns at once, and a copy still in flight never touches the
  // caller's buffers after that.
  const CompiledModel& m = *model_;
  struct Staging {
    std::vector<std::vector<std::uint8_t>> in, out;
  };
  auto staging = std::make_shared<Staging>();
  staging->in.resize(m.inputs.size());
  staging->out.resize(m.outputs.size());
  std::vector<npu_sim::Task> tasks;
  for (std::size_t i = 0; i < m.inputs.size(); ++i) {
    if (args.inputs[i].host == nullptr || args.inputs[i].bytes == 0) continue;
    const auto* src = static_cast<const std::uint8_t*>(args.inputs[i].host);
    staging->in[i].assign(src, src + args.inputs[i].bytes);
    npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kHostToDevice, args.inputs[i].bytes);
    c.src_host = staging->in[i].data();
    c.dst_dev = npu_sim::DevicePtr{io[i]};
    c.name = "input " + m.inputs[i].name;
    c.keep_alive = staging;
    tasks.push_back(std::move(c));
  }
  tasks.push_back(npu_sim::Task::ModelExecute(inst.model.id, std::make_shared<const std::vector<std::uint64_t>>(io)));
  for (std::size_t i = 0; i < m.outputs.size(); ++i) {
    if (args.outputs[i].host == nullptr || args.outputs[i].bytes == 0) continue;
    staging->out[i].resize(args.outputs[i].bytes);
    npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kDeviceToHost, args.outputs[i].bytes);
    c.src_dev = npu_sim::DevicePtr{io[m.inputs.size() + i]};
    c.dst_host = staging->out[i].data();
    c.name = "output " + m.outputs[i].name;
    c.keep_alive = staging;
    tasks.push_back(std::move(c));
  }
  NPUFLOW_RETURN_IF_ERROR(rt_->Submit(inst.exec_stream, std::move(tasks)).status());
  Status s = rt_->SynchronizeStream(inst.exec_stream, args.timeout);
  if (s.code() == StatusCode::kTimeout) {
    // As on hardware: nothing is left running. The copies after the run are dropped with it.
    (void)rt_->AbortModel(inst.model);
    (void)rt_->AbortStream(inst.exec_stream);
    (void)rt_->SynchronizeStream(inst.exec_stream, std::chrono::seconds(10));  // collect the abort
    return Status::Timeout("model {}: execution did not complete within {} ms; the device model was aborted", id_,
                           args.timeout->count());
  }
  if (!s.ok()) return s.WithContext(fmt::format("model {}", id_));
  if (!weights_settled) {
    NPUFLOW_RETURN_IF_ERROR(WaitForWeights());
  } else {
    ElideGates(inst);
  }
  for (std::size_t i = 0; i < m.outputs.size(); ++i)
    if (!staging->out[i].empty()) std::memcpy(args.outputs[i].host, staging->out[i].data(), staging->out[i].size());
  return Status::Ok();
}

void DavinciModel::ElideGates(Instance& inst) {
  // Every gate passed in this run, which started after every weight had landed: the stream's
  // clock is past each latch, and the latches stay recorded while the model is loaded. The gates
  // would only cost a round trip to the event table per weight region in every later run.
  if (inst.gates_elided.load(std::memory_order_acquire) || inst.gates_elided.exchange(true)) return;
  for (std::size_t s = 0; s < inst.streams.size() && s < inst.gates.size(); ++s) {
    if (inst.gates[s].empty()) continue;
    if (Status st = rt_->ElideWaits(inst.model, inst.streams[s], inst.gates[s]); !st.ok())
      NPUFLOW_LOG_WARN(kScheduler, "model {}: its weight gates on stream {} stay: {}", id_, inst.streams[s].id,
                       st.ToString());
  }
}

StatusOr<std::vector<Tensor>> DavinciModel::Execute(const std::vector<Tensor>& inputs, npu_sim::Timeout timeout) {
  const CompiledModel& m = *model_;
  if (inputs.size() != m.inputs.size())
    return Status::ParamInvalid("model {}: {} inputs given, the model takes {}", id_, inputs.size(), m.inputs.size());
  ExecuteArgs args;
  args.timeout = timeout;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].desc.dtype != m.inputs[i].desc.dtype)
      return Status::ParamInvalid("model {}: input '{}' is {}, the model takes {}", id_, m.inputs[i].name,
                                  inputs[i].desc.ToString(), m.inputs[i].desc.ToString());
    args.inputs.push_back(DataBuffer::Host(inputs[i].data.data(), inputs[i].data.size()));
  }
  std::vector<Tensor> outputs;
  outputs.reserve(m.outputs.size());
  for (const graph::IoDef& io : m.outputs) outputs.push_back(graph::ZeroTensor(io.desc));
  for (Tensor& t : outputs) args.outputs.push_back(DataBuffer::Host(t.data.data(), t.data.size()));
  NPUFLOW_RETURN_IF_ERROR(NnExecute(args));
  return outputs;
}

Status DavinciModel::ExecuteHostScheduled(const ExecuteArgs& args) {
  std::shared_lock<std::shared_mutex> exec_lock(exec_mu_);
  if (unloaded_.load()) return Status::Aborted("model {} is unloaded", id_);
  if (args.stream) return Status::ParamInvalid("model {}: host-scheduled execution runs on its own streams", id_);
  NPUFLOW_RETURN_IF_ERROR(CheckArgs(args));
  NPUFLOW_RETURN_IF_ERROR(WeightsStatus());
  // Claimed atomically: two callers that both saw no execution in flight would otherwise both
  // run, on the same host streams (and grow inst.host_streams at once).
  int idle = 0;
  if (!in_flight_.compare_exchange_strong(idle, 1, std::memory_order_acq_rel))
    return Status::ParamInvalid("model {}: host-scheduled execution needs the model to itself; {} executions in flight",
                                id_, idle);
  InFlight model_guard(in_flight_, /*adopt=*/true);
  Instance& inst = *instances_[0];
  InFlight inst_guard(inst.in_flight);
  Touch();
  const CompiledModel& m = *model_;
  while (inst.host_streams.size() < inst.lists.size()) {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Stream s, rt_->CreateStream(config_.device));
    inst.host_streams.push_back(s);
  }
  const std::vector<std::uint64_t> io = IoFor(inst, args);
  for (std::size_t i = 0; i < m.inputs.size(); ++i)
    if (args.inputs[i].host != nullptr && args.inputs[i].bytes > 0)
      NPUFLOW_RETURN_IF_ERROR(
          rt_->MemcpyH2D(config_.device, npu_sim::DevicePtr{io[i]}, args.inputs[i].host, args.inputs[i].bytes));
  // The task lists with this run's I/O addresses written in, as a model run would patch them.
  std::vector<std::vector<npu_sim::Task>> lists = inst.lists;
  for (std::size_t s = 0; s < lists.size(); ++s) {
    for (const npu_sim::IoPatch& p : inst.patches[s]) {
      npu_sim::Task& t = lists[s][p.task];
      const std::uint64_t v = io[p.slot] + p.offset;
      if (p.field == npu_sim::IoPatch::kCopySrc) t.src_dev = npu_sim::DevicePtr{v};
      else if (p.field == npu_sim::IoPatch::kCopyDst) t.dst_dev = npu_sim::DevicePtr{v};
      else t.args[p.field] = v;
    }
  }
  // One host interaction per task, interleaved across the streams as a host scheduler would.
  std::size_t longest = 0;
  for (const auto& l : lists) longest = std::max(longest, l.size());
  for (std::size_t k = 0; k < longest; ++k)
    for (std::size_t s = 0; s < lists.size(); ++s)
      if (k < lists[s].size()) NPUFLOW_RETURN_IF_ERROR(rt_->Submit(inst.host_streams[s], {std::move(lists[s][k])}).status());
  for (const npu_sim::Stream& s : inst.host_streams) {
    Status st = rt_->SynchronizeStream(s, args.timeout);
    if (!st.ok()) {
      for (const npu_sim::Stream& x : inst.host_streams) (void)rt_->AbortStream(x);
      return st.WithContext(fmt::format("model {} (host-scheduled)", id_));
    }
  }
  for (std::size_t i = 0; i < m.outputs.size(); ++i)
    if (args.outputs[i].host != nullptr && args.outputs[i].bytes > 0)
      NPUFLOW_RETURN_IF_ERROR(rt_->MemcpyD2H(config_.device, args.outputs[i].host,
                                             npu_sim::DevicePtr{io[m.inputs.size() + i]}, args.outputs[i].bytes));
  return Status::Ok();
}

// ---- unload --------------------------------------------------------------------------------------
Status DavinciModel::FreeInstance(Instance& inst) {
  Status first;
  auto keep = [&](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  if (inst.has_model) keep(rt_->DestroyModel(inst.model));  // aborts runs; unbinds and destroys its streams
  inst.has_model = false;
  if (inst.exec_stream.device >= 0) keep(rt_->DestroyStream(inst.exec_stream));
  for (const npu_sim::Stream& s : inst.host_streams) keep(rt_->DestroyStream(s));
  for (const npu_sim::Event& e : inst.events) keep(rt_->DestroyEvent(e));
  inst.host_streams.clear();
  inst.events.clear();
  inst.exec_stream = {};
  for (int s = 0; s < graph::kSegmentCount; ++s) {
    if (inst.owned[s]) keep(rt_->Free(config_.device, inst.base[s]));
    inst.owned[s] = false;
  }
  return first;
}

Status DavinciModel::Unload() {
  if (unloaded_.exchange(true)) return Status::Ok();
  // Executions in flight end now (Aborted); then nothing uses the instances any more.
  for (auto& inst : instances_) {
    if (inst->has_model) (void)rt_->AbortModel(inst->model);
    if (inst->exec_stream.device >= 0) (void)rt_->AbortStream(inst->exec_stream);
    for (const npu_sim::Stream& s : inst->host_streams) (void)rt_->AbortStream(s);
  }
  std::unique_lock<std::shared_mutex> exec_lock(exec_mu_);
  Status first;
  for (auto& inst : instances_) {
    Status s = FreeInstance(*inst);
    if (first.ok() && !s.ok()) first = std::move(s);
  }
  if (owns_weights_) {
    Status s = rt_->Free(config_.device, weights_);
    if (first.ok() && !s.ok()) first = std::move(s);
    owns_weights_ = false;
  }
  if (owns_variables_) {
    Status s = rt_->Free(config_.device, variables_);
    if (first.ok() && !s.ok()) first = std::move(s);
    owns_variables_ = false;
  }
  // External weight copies go with their last user (the session's manager only remembers them).
  weight_files_.clear();
  if (!first.ok()) NPUFLOW_LOG_WARN(kScheduler, "model {}: unload: {}", id_, first.ToString());
  return first;
}

}  // namespace npuflow::scheduler
