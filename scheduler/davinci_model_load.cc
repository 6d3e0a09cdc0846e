// Loading: what a model needs from the device, InitModelMem, InitIoNodes, InitVariables, InitNodes
// and the address resolution the task sink uses.
#include "scheduler/davinci_model.h"

#include <algorithm>

#include <fmt/format.h>

#include "graph/ops/op_registry.h"

namespace npuflow::scheduler {
namespace {

using graph::MemRef;
using graph::Segment;

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
  // Variables (a decoder's KV cache) on 4 KiB pages: only the pages the context has reached
  // become resident, instead of whole 2 MiB huge pages at the first write.
  NPUFLOW_ASSIGN_OR_RETURN(variables_, rt_->Malloc(device, std::max<std::uint64_t>(m.memory.bytes(Segment::kVariables), 1),
                                                   npu_sim::Placement::kHbm, fmt::format("model{}.variables", id_),
                                                   npu_sim::PagePolicy::kDefaultOnly));
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

StatusOr<std::pair<npu_sim::DevicePtr, std::uint64_t>> DavinciModel::SharedTensor(const std::string& node) const {
  for (const graph::TensorPlacement& t : model_->memory.tensors) {
    if (t.node != node || t.output != 0) continue;
    if (t.ref.segment != Segment::kWeights && t.ref.segment != Segment::kVariables &&
        t.ref.segment != Segment::kFileConstant)
      return Status::NotFound("node '{}' lives in the {} segment, which is not shared", node,
                              graph::SegmentName(t.ref.segment));
    if (instances_.empty()) return Status::Failed("model {} is not loaded", id_);
    NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t addr, Resolve(*instances_[0], t.ref));
    return std::make_pair(npu_sim::DevicePtr{addr}, t.bytes);
  }
  return Status::NotFound("model {} has no placed tensor for node '{}'", id_, node);
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

}  // namespace npuflow::scheduler
