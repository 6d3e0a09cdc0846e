#include "graph/kernels/kernel_abi.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

namespace npuflow::graph {

namespace {

// The params a unit thread last read for a launch (KernelContext::launch): a launch's blocks, and
// its cost function beside its run, open the same params, which nothing writes while the launch
// runs. Reading them again from device memory took two mappings (a lock and a held backing each)
// per Open, twice a block.
struct KeptParams {
  std::uint64_t launch = 0;
  std::uint64_t at = 0;
  const npu_sim::DeviceMemory* memory = nullptr;
  KernelParams params;
};

static_assert(kMaxKernelTensors <= npu_sim::LaunchMappings::kArgs, "a launch's tensors each keep a mapping");

Status CheckArgCount(const npu_sim::KernelContext& ctx, const KernelParams& p) {
  if (ctx.arg_count() != p.num_inputs + p.num_outputs + 2)
    return Status::ParamInvalid("op kernel: {} arguments, params say {} inputs and {} outputs (+ workspace, params)",
                                ctx.arg_count(), p.num_inputs, p.num_outputs);
  return Status::Ok();
}

// Reads the params at `at` into `p` and checks them against the context's arguments.
Status ReadParams(const npu_sim::KernelContext& ctx, npu_sim::DevicePtr at, KernelParams& p) {
  // The header first, then as many tensors as it names.
  constexpr std::size_t kHeader = offsetof(KernelParams, tensors);
  npu_sim::DeviceMemory::Mapping m;
  NPUFLOW_ASSIGN_OR_RETURN(m, ctx.memory().Map(at, kHeader));
  std::memcpy(static_cast<void*>(&p), m.data(), kHeader);
  if (p.num_inputs + p.num_outputs > static_cast<std::uint32_t>(kMaxKernelTensors))
    return Status::DataCorrupted("op kernel params: {} tensors, at most {}", p.num_inputs + p.num_outputs,
                                 kMaxKernelTensors);
  NPUFLOW_ASSIGN_OR_RETURN(m, ctx.memory().Map(at, KernelParamsBytes(p)));
  std::memcpy(static_cast<void*>(&p), m.data(), KernelParamsBytes(p));
  NPUFLOW_RETURN_IF_ERROR(CheckArgCount(ctx, p));
  for (std::uint32_t i = 0; i < p.num_inputs + p.num_outputs; ++i) {
    const KernelTensor& t = p.tensors[i];
    if (t.rank > static_cast<std::uint32_t>(kMaxKernelRank) || t.dtype > static_cast<std::uint32_t>(DataType::kBool))
      return Status::DataCorrupted("op kernel params: tensor {} has rank {} / dtype {}", i, t.rank, t.dtype);
    for (std::uint32_t d = 0; d < t.rank; ++d)
      if (t.dims[d] < 0) return Status::DataCorrupted("op kernel params: tensor {} dim {} is {}", i, d, t.dims[d]);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<OpKernelView> OpKernelView::Open(const npu_sim::KernelContext& ctx) {
  OpKernelView v;
  v.ctx_ = &ctx;
  if (ctx.arg_count() < 2) return Status::ParamInvalid("op kernel: {} arguments, expected at least 2", ctx.arg_count());
  const npu_sim::DevicePtr at = ctx.ptr(ctx.arg_count() - 1);
  const std::uint64_t launch = ctx.launch();
  if (launch == 0) {  // nothing to share: the view holds its own
    v.own_ = std::make_unique<Own>();
    NPUFLOW_RETURN_IF_ERROR(ReadParams(ctx, at, v.own_->params));
    v.params_ = &v.own_->params;
    return v;
  }
  thread_local KeptParams kept;
  if (kept.launch != launch || kept.at != at.value || kept.memory != &ctx.memory()) {
    kept.launch = 0;  // claimed only once read and checked
    NPUFLOW_RETURN_IF_ERROR(ReadParams(ctx, at, kept.params));
    kept.launch = launch;
    kept.at = at.value;
    kept.memory = &ctx.memory();
  } else {
    NPUFLOW_RETURN_IF_ERROR(CheckArgCount(ctx, kept.params));
  }
  v.params_ = &kept.params;
  return v;
}

StatusOr<std::byte*> OpKernelView::MapArg(std::uint32_t arg, std::uint64_t bytes) {
  const std::uint64_t launch = ctx_->launch();
  if (arg >= ctx_->arg_count())
    return Status::ParamInvalid("kernel argument {} missing ({} given)", arg, ctx_->arg_count());
  const npu_sim::DevicePtr ptr = ctx_->ptr(arg);
  if (own_ != nullptr || launch == 0 || arg >= kMaxKernelTensors) {  // nothing to share with: the view holds it
    if (own_ == nullptr) own_ = std::make_unique<Own>();
    Own& own = *own_;
    if (own.num_maps == own.maps.size())
      return Status::Internal("kernel argument {}: more than {} mappings in one kernel view", arg, own.maps.size());
    NPUFLOW_ASSIGN_OR_RETURN(own.maps[own.num_maps], ctx_->memory().Map(ptr, bytes));
    return own.maps[own.num_maps++].data();
  }
  npu_sim::LaunchMappings& kept = npu_sim::ThisThreadLaunchMappings();
  if (kept.launch != launch || kept.memory != &ctx_->memory()) {
    kept.Release();  // the last launch's backings are let go
    kept.launch = launch;
    kept.memory = &ctx_->memory();
  }
  npu_sim::LaunchMappings::Arg& a = kept.args[arg];
  if (a.mapping.data() != nullptr && a.ptr == ptr.value && bytes <= a.bytes) return a.mapping.data();
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DeviceMemory::Mapping m, ctx_->memory().Map(ptr, bytes));
  a.ptr = ptr.value;
  a.bytes = bytes;
  a.mapping = std::move(m);
  return a.mapping.data();
}

npu_sim::VTime BlockCost(const npu_sim::ChipSpec& chip, double bytes, double flops) {
  const double by_bw = bytes / (chip.hbm_bandwidth_gbps / std::max(chip.aicore_count, 1));
  const double by_flops = flops / std::max(chip.aicore_gflops, 1e-9);
  return 20 + static_cast<npu_sim::VTime>(std::max(by_bw, by_flops));
}

Status OpKernelAccesses(const npu_sim::KernelContext& ctx, std::vector<npu_sim::MemAccess>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
  const KernelParams& p = v.params();
  for (std::uint32_t i = 0; i < p.num_inputs; ++i)
    out.push_back({npu_sim::DevicePtr{v.input_addr(i)}, p.input(i).bytes(), false});
  for (std::uint32_t i = 0; i < p.num_outputs; ++i)
    out.push_back({npu_sim::DevicePtr{v.output_addr(i)}, p.output(i).bytes(), true});
  out.push_back({ctx.ptr(ctx.arg_count() - 1), KernelParamsBytes(p), false});
  return Status::Ok();
}

std::string DeviceKernelName(std::string_view op_type) { return "op." + std::string(op_type); }

}  // namespace npuflow::graph
