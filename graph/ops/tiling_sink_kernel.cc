// aicpu.TilingSink (graph/ops/tiling_context.h): the tiling sink's AICPU tiling task. Args: the
// op's device tiling context, then its tiling-depend inputs in OpDef::tiling_depend_inputs order.
// It reads the compute-node info and the inputs' values from device memory, runs the op's tiling
// function (the same one the host runs) and writes block_dim and the tiling key into the context,
// where the task update that follows reads them. A tiling that needs more workspace than the
// kernel was given, an op with no tiling function, or a context that is not one is an error
// naming the node.
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "graph/ops/op_registry.h"
#include "graph/ops/tiling_context.h"
#include "npu_sim/kernel.h"

namespace npuflow::graph {
namespace {

// Decoded contexts by their compute-node bytes: a model's contexts decode once, not every run.
class DecodedContexts {
 public:
  StatusOr<std::shared_ptr<const TilingContextInfo>> Get(std::span<const std::uint8_t> context) {
    const std::string_view info(reinterpret_cast<const char*>(context.data()) + sizeof(TilingContextHeader),
                                context.size() - sizeof(TilingContextHeader));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = decoded_.find(info); it != decoded_.end()) return it->second;
    }
    NPUFLOW_ASSIGN_OR_RETURN(TilingContextInfo d, DecodeTilingContext(context));
    auto shared = std::make_shared<const TilingContextInfo>(std::move(d));
    std::lock_guard<std::mutex> lock(mu_);
    if (decoded_.size() >= kMaxEntries) decoded_.clear();  // bounded: a long-lived process loads many models
    decoded_.emplace(std::string(info), shared);
    return shared;
  }

 private:
  static constexpr std::size_t kMaxEntries = 4096;
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const TilingContextInfo>, Hash, std::equal_to<>> decoded_;
};

DecodedContexts& Contexts() {
  static DecodedContexts* contexts = new DecodedContexts;
  return *contexts;
}

Status TilingSinkRun(npu_sim::KernelContext& ctx) {
  npu_sim::DeviceMemory::Mapping head_map;
  NPUFLOW_ASSIGN_OR_RETURN(auto head, ctx.Buffer<std::uint8_t>(0, sizeof(TilingContextHeader), head_map));
  TilingContextHeader h;
  std::memcpy(&h, head.data(), sizeof(h));
  if (h.magic != kTilingContextMagic)
    return CheckTilingContextMagic(h.magic, fmt::format("{}: argument 0 is not a tiling context", kAicpuTilingKernel));
  npu_sim::DeviceMemory::Mapping map;
  NPUFLOW_ASSIGN_OR_RETURN(auto context, ctx.Buffer<std::uint8_t>(0, sizeof(h) + h.info_bytes, map));
  NPUFLOW_ASSIGN_OR_RETURN(std::shared_ptr<const TilingContextInfo> info, Contexts().Get(context));
  const OpDesc& op = info->op;
  NPUFLOW_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(op.type()));
  if (def->tiling == nullptr)
    return Status::Unsupported("{}: node '{}' ({}) has no tiling function", kAicpuTilingKernel, op.name(), op.type());
  // The tiling-depend inputs' values, read from device memory.
  std::vector<Tensor> values(def->tiling_depend_inputs.size());
  std::vector<const Tensor*> depend;
  for (std::size_t j = 0; j < def->tiling_depend_inputs.size(); ++j) {
    const auto k = static_cast<std::size_t>(def->tiling_depend_inputs[j]);
    if (k >= info->inputs.size())
      return Status::DataCorrupted("{}: node '{}': tiling-depend input {} is not in its context ({} inputs)",
                                   kAicpuTilingKernel, op.name(), k, info->inputs.size());
    const TensorDesc& desc = info->inputs[k];
    const std::optional<std::uint64_t> bytes = desc.bytes();
    if (!bytes)
      return Status::DataCorrupted("{}: node '{}': tiling-depend input {} has no static size ({})", kAicpuTilingKernel,
                                   op.name(), k, desc.ToString());
    npu_sim::DeviceMemory::Mapping m;
    auto data = ctx.Buffer<const std::uint8_t>(1 + j, static_cast<std::size_t>(*bytes), m);
    if (!data.ok())
      return data.status().WithContext(
          fmt::format("{}: node '{}': reading tiling-depend input {}", kAicpuTilingKernel, op.name(), k));
    values[j].desc = desc;
    values[j].data.assign(data->begin(), data->end());
    depend.push_back(&values[j]);
  }
  auto tiling = TileOp(*def, op, info->inputs, depend, TileTargetOf(h));
  if (!tiling.ok()) return tiling.status().WithContext(fmt::format("{}: node '{}'", kAicpuTilingKernel, op.name()));
  if (tiling->workspace_bytes > h.workspace_bytes)
    return Status::Failed("{}: node '{}' needs {} workspace bytes, the kernel was given {} (one host tiling run)",
                          kAicpuTilingKernel, op.name(), tiling->workspace_bytes, h.workspace_bytes);
  h.block_dim = tiling->block_dim;
  h.tiling_key = tiling->tiling_key;
  std::memcpy(head.data(), &h, sizeof(h));
  return Status::Ok();
}

// For the race detector: the context is read whole and its header written; each tiling-depend
// input is read.
Status TilingSinkAccesses(const npu_sim::KernelContext& ctx, std::vector<npu_sim::MemAccess>& out) {
  npu_sim::DeviceMemory::Mapping head_map;
  NPUFLOW_ASSIGN_OR_RETURN(auto head, ctx.Buffer<const std::uint8_t>(0, sizeof(TilingContextHeader), head_map));
  TilingContextHeader h;
  std::memcpy(&h, head.data(), sizeof(h));
  if (h.magic != kTilingContextMagic)
    return CheckTilingContextMagic(h.magic, fmt::format("{}: argument 0 is not a tiling context", kAicpuTilingKernel));
  out.push_back({ctx.ptr(0), sizeof(h) + h.info_bytes, false});
  out.push_back({ctx.ptr(0), sizeof(h), true});
  npu_sim::DeviceMemory::Mapping map;
  NPUFLOW_ASSIGN_OR_RETURN(auto context, ctx.Buffer<const std::uint8_t>(0, sizeof(h) + h.info_bytes, map));
  NPUFLOW_ASSIGN_OR_RETURN(std::shared_ptr<const TilingContextInfo> info, Contexts().Get(context));
  NPUFLOW_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(info->op.type()));
  for (std::size_t j = 0; j < def->tiling_depend_inputs.size() && 1 + j < ctx.arg_count(); ++j) {
    const auto k = static_cast<std::size_t>(def->tiling_depend_inputs[j]);
    if (k >= info->inputs.size()) continue;
    if (const std::optional<std::uint64_t> bytes = info->inputs[k].bytes()) out.push_back({ctx.ptr(1 + j), *bytes, false});
  }
  return Status::Ok();
}

// A small host-like function on one AICPU unit, as npu_sim's tiling_write.
npu_sim::VTime TilingSinkCost(const npu_sim::KernelContext&, const npu_sim::ChipSpec& chip) {
  return static_cast<npu_sim::VTime>(2000.0 / chip.aicpu_gflops);
}

}  // namespace

void RegisterTilingSinkKernel() {
  npu_sim::KernelRegistry::Global().Register(
      {kAicpuTilingKernel, npu_sim::Engine::kAICpu, &TilingSinkRun, &TilingSinkCost, &TilingSinkAccesses});
}

}  // namespace npuflow::graph
