#include "graph/ops/op_registry.h"
#include "graph/ops/tiling_context.h"

#include "graph/kernels/device_kernels.h"
#include "graph/ops/control_flow.h"
#include "graph/ops/op_library.h"
#include "npu_sim/builtin_kernels.h"
#include "npu_sim/chip_spec.h"

#include <algorithm>
#include <cmath>
#include <mutex>

namespace npuflow::graph {

std::string_view OpEngineName(OpEngine engine) {
  switch (engine) {
    case OpEngine::kAICore: return "AICore";
    case OpEngine::kAICpu: return "AICPU";
    case OpEngine::kHostLocal: return "host";
  }
  return "unknown";
}

void RegisterBuiltinOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpRegistry& r = OpRegistry::Global();
    RegisterElementwiseOps(r);
    RegisterTensorOps(r);
    RegisterNnOps(r);
    RegisterControlFlowOps(r);
    npu_sim::RegisterBuiltinKernels();
    RegisterElementwiseKernels();
    RegisterTensorKernels();
    RegisterNnKernels();
    RegisterTilingSinkKernel();
  });
}

OpRegistry& OpRegistry::Global() {
  static OpRegistry registry;
  return registry;
}

StatusOr<const OpDef*> OpRegistry::Find(std::string_view type) const {
  if (const OpDef* def = defs_.Find(type)) return def;
  return Status::NotFound("unknown op type '{}'", type);
}

Status InferOutputs(const OpDef& def, const OpDesc& op, const std::vector<TensorDesc>& inputs,
                    std::vector<TensorDesc>& outputs) {
  const int n = static_cast<int>(inputs.size());
  if (n < def.min_inputs || (def.max_inputs >= 0 && n > def.max_inputs)) {
    if (def.max_inputs < 0)
      return Status::ParamInvalid("node '{}' ({}): {} inputs, expected at least {}", op.name(), def.type, n,
                                  def.min_inputs);
    if (def.min_inputs == def.max_inputs)
      return Status::ParamInvalid("node '{}' ({}): {} inputs, expected {}", op.name(), def.type, n, def.min_inputs);
    return Status::ParamInvalid("node '{}' ({}): {} inputs, expected {} to {}", op.name(), def.type, n, def.min_inputs,
                                def.max_inputs);
  }
  for (const std::string& attr : def.required_attrs)
    if (!op.HasAttr(attr))
      return Status::ParamInvalid("node '{}' ({}): missing attribute '{}'", op.name(), def.type, attr);
  if (def.infer == nullptr) return Status::Internal("op {} has no shape inference", def.type);
  outputs.clear();
  return def.infer(op, inputs, outputs);
}

TileTarget TileTargetOf(const npu_sim::ChipSpec& chip) {
  auto f = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  return {chip.aicore_count, {f(chip.block_dispatch_ns), f(chip.block_host_gbps), f(chip.block_host_gflops)}};
}

std::optional<double> StaticBytes(const std::vector<TensorDesc>& descs) {
  double total = 0;
  for (const TensorDesc& d : descs) {
    const std::optional<std::uint64_t> bytes = d.bytes();
    if (!bytes) return std::nullopt;
    total += static_cast<double>(*bytes);
  }
  return total;
}

std::optional<OpWork> DefaultWork(const OpDef& def, const OpDesc& op, const std::vector<TensorDesc>& inputs) {
  std::vector<TensorDesc> outputs;
  if (def.infer == nullptr || !InferOutputs(def, op, inputs, outputs).ok()) return std::nullopt;
  const std::optional<double> in = StaticBytes(inputs), out = StaticBytes(outputs);
  if (!in || !out) return std::nullopt;
  return OpWork{*in + *out, 0};
}

std::uint32_t CapBlocks(std::uint32_t block_dim, const OpWork& work, const BlockCosts& costs) {
  if (block_dim <= 1 || !(costs.dispatch_ns > 0)) return std::max<std::uint32_t>(block_dim, 1);
  // Work that is not a number, or at a rate the model does not have (zero), cannot be priced:
  // leave the split.
  if (!(work.bytes >= 0) || !(work.flops >= 0)) return block_dim;
  if ((work.bytes > 0 && !(costs.bytes_per_ns > 0)) || (work.flops > 0 && !(costs.flops_per_ns > 0)))
    return block_dim;
  const double ns = std::max(work.bytes > 0 ? work.bytes / costs.bytes_per_ns : 0.0,
                             work.flops > 0 ? work.flops / costs.flops_per_ns : 0.0);
  const double paid = std::floor(ns / costs.dispatch_ns);
  if (!(paid < static_cast<double>(block_dim))) return block_dim;  // also NaN: leave it
  return static_cast<std::uint32_t>(std::max(paid, 1.0));
}

StatusOr<TilingInfo> TileOp(const OpDef& def, const OpDesc& op, const std::vector<TensorDesc>& inputs,
                            const std::vector<const Tensor*>& depend_values, const TileTarget& target) {
  if (def.tiling == nullptr) return TilingInfo{};
  NPUFLOW_ASSIGN_OR_RETURN(TilingInfo t, def.tiling(op, inputs, depend_values, target.core_count));
  if (t.block_dim > 1 && target.costs.dispatch_ns > 0) {
    const std::optional<OpWork> work = def.work != nullptr
                                           ? std::optional<OpWork>(def.work(op, inputs, depend_values))
                                           : DefaultWork(def, op, inputs);
    if (work) {
      std::uint32_t capped = CapBlocks(t.block_dim, *work, target.costs);
      if (capped < t.block_dim && capped > 1 && t.block_dim % 2 == 0 && capped % 2 == 1) --capped;
      t.block_dim = capped;
    }
  }
  return t;
}

StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b, std::string_view node) {
  const std::size_t rank = std::max(a.rank(), b.rank());
  std::vector<Dim> out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    // Align from the right.
    const Dim* da = i + a.rank() >= rank ? &a.dim(i + a.rank() - rank) : nullptr;
    const Dim* db = i + b.rank() >= rank ? &b.dim(i + b.rank() - rank) : nullptr;
    if (!da) { out[i] = *db; continue; }
    if (!db) { out[i] = *da; continue; }
    if (*da == *db) { out[i] = *da; continue; }
    if (da->is_static() && da->size == 1) { out[i] = *db; continue; }
    if (db->is_static() && db->size == 1) { out[i] = *da; continue; }
    if (!da->is_static() && db->is_static()) { out[i] = *db; continue; }
    if (da->is_static() && !db->is_static()) { out[i] = *da; continue; }
    return Status::ParamInvalid("node '{}': shapes {} and {} do not broadcast", node, a.ToString(), b.ToString());
  }
  return Shape(std::move(out));
}

StatusOr<KernelParams> EncodeKernelParams(const OpDef& def, const OpDesc& op, const std::vector<TensorDesc>& inputs,
                                          const std::vector<TensorDesc>& outputs) {
  KernelParams p;
  if (inputs.size() + outputs.size() > static_cast<std::size_t>(kMaxKernelTensors))
    return Status::ParamInvalid("node '{}' ({}): {} inputs and outputs, a device kernel takes at most {}", op.name(),
                                op.type(), inputs.size() + outputs.size(), kMaxKernelTensors);
  p.num_inputs = static_cast<std::uint32_t>(inputs.size());
  p.num_outputs = static_cast<std::uint32_t>(outputs.size());
  std::size_t k = 0;
  for (const auto* list : {&inputs, &outputs}) {
    for (const TensorDesc& d : *list) {
      if (!d.shape.is_static())
        return Status::ParamInvalid("node '{}' ({}): kernel params need static shapes, got {}", op.name(), op.type(),
                                    d.ToString());
      if (d.shape.rank() > static_cast<std::size_t>(kMaxKernelRank))
        return Status::ParamInvalid("node '{}' ({}): rank {} above the device kernel limit {}", op.name(), op.type(),
                                    d.shape.rank(), kMaxKernelRank);
      KernelTensor& t = p.tensors[k++];
      t.dtype = static_cast<std::uint32_t>(d.dtype);
      t.rank = static_cast<std::uint32_t>(d.shape.rank());
      for (std::size_t i = 0; i < d.shape.rank(); ++i) t.dims[i] = d.shape.dim(i).size;
    }
  }
  if (def.params != nullptr) NPUFLOW_RETURN_IF_ERROR(def.params(op, inputs, p));
  return p;
}

}  // namespace npuflow::graph
