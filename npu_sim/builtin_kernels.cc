#include "npu_sim/builtin_kernels.h"

#include <cstring>
#include <mutex>

#include "npu_sim/kernel.h"

namespace npuflow::npu_sim {
namespace {

// Elements [begin, end) of n that block `idx` of `dim` owns.
std::pair<std::uint64_t, std::uint64_t> Slice(std::uint64_t n, std::uint32_t idx, std::uint32_t dim) {
  const std::uint64_t per = (n + dim - 1) / dim;
  const std::uint64_t begin = std::min<std::uint64_t>(n, per * idx);
  return {begin, std::min<std::uint64_t>(n, begin + per)};
}

Status NoopRun(KernelContext&) { return Status::Ok(); }
VTime NoopCost(const KernelContext&, const ChipSpec&) { return 10; }

Status VectorAddRun(KernelContext& ctx) {
  const std::uint64_t n = ctx.scalar(3);
  auto [begin, end] = Slice(n, ctx.block_idx(), ctx.block_dim());
  if (begin == end) return Status::Ok();
  DeviceMemory::Mapping ma, mb, mc;
  NPUFLOW_ASSIGN_OR_RETURN(auto a, ctx.Buffer<const float>(0, n, ma));
  NPUFLOW_ASSIGN_OR_RETURN(auto b, ctx.Buffer<const float>(1, n, mb));
  NPUFLOW_ASSIGN_OR_RETURN(auto c, ctx.Buffer<float>(2, n, mc));
  for (std::uint64_t i = begin; i < end; ++i) c[i] = a[i] + b[i];
  return Status::Ok();
}
VTime VectorAddCost(const KernelContext& ctx, const ChipSpec& chip) {
  auto [begin, end] = Slice(ctx.scalar(3), ctx.block_idx(), ctx.block_dim());
  // 1 flop and 12 bytes per element: bound by the core's share of HBM bandwidth or its flops.
  const double bytes = 12.0 * static_cast<double>(end - begin);
  const double by_bw = bytes / (chip.hbm_bandwidth_gbps / chip.aicore_count);
  const double by_flops = static_cast<double>(end - begin) / chip.aicore_gflops;
  return 20 + static_cast<VTime>(std::max(by_bw, by_flops));
}

Status FillRun(KernelContext& ctx) {
  const std::uint64_t n = ctx.scalar(1);
  auto [begin, end] = Slice(n, ctx.block_idx(), ctx.block_dim());
  if (begin == end) return Status::Ok();
  DeviceMemory::Mapping m;
  NPUFLOW_ASSIGN_OR_RETURN(auto c, ctx.Buffer<float>(0, n, m));
  float value;
  const auto bits = static_cast<std::uint32_t>(ctx.scalar(2));
  std::memcpy(&value, &bits, sizeof(value));
  for (std::uint64_t i = begin; i < end; ++i) c[i] = value;
  return Status::Ok();
}
VTime FillCost(const KernelContext& ctx, const ChipSpec& chip) {
  auto [begin, end] = Slice(ctx.scalar(1), ctx.block_idx(), ctx.block_dim());
  return 20 + static_cast<VTime>(4.0 * static_cast<double>(end - begin) / (chip.hbm_bandwidth_gbps / chip.aicore_count));
}

Status RecordLaunchRun(KernelContext& ctx) {
  if (ctx.block_idx() != 0) return Status::Ok();
  DeviceMemory::Mapping m;
  NPUFLOW_ASSIGN_OR_RETURN(auto out, ctx.Buffer<std::uint64_t>(0, 2, m));
  out[0] = ctx.block_dim();
  out[1] = ctx.tiling_key();
  return Status::Ok();
}

Status TilingWriteRun(KernelContext& ctx) {
  DeviceMemory::Mapping mbd, mtk;
  NPUFLOW_ASSIGN_OR_RETURN(auto bd, ctx.Buffer<std::uint32_t>(0, 1, mbd));
  NPUFLOW_ASSIGN_OR_RETURN(auto tk, ctx.Buffer<std::uint64_t>(1, 1, mtk));
  bd[0] = static_cast<std::uint32_t>(ctx.scalar(2));
  tk[0] = ctx.scalar(3);
  return Status::Ok();
}
VTime TilingWriteCost(const KernelContext&, const ChipSpec& chip) {
  return static_cast<VTime>(2000.0 / chip.aicpu_gflops);  // a small host-like tiling function
}

Status NoAccesses(const KernelContext&, std::vector<MemAccess>&) { return Status::Ok(); }
Status VectorAddAccesses(const KernelContext& ctx, std::vector<MemAccess>& out) {
  const std::uint64_t bytes = ctx.scalar(3) * sizeof(float);
  out.push_back({ctx.ptr(0), bytes, false});
  out.push_back({ctx.ptr(1), bytes, false});
  out.push_back({ctx.ptr(2), bytes, true});
  return Status::Ok();
}
Status FillAccesses(const KernelContext& ctx, std::vector<MemAccess>& out) {
  out.push_back({ctx.ptr(0), ctx.scalar(1) * sizeof(float), true});
  return Status::Ok();
}
Status RecordLaunchAccesses(const KernelContext& ctx, std::vector<MemAccess>& out) {
  out.push_back({ctx.ptr(0), 2 * sizeof(std::uint64_t), true});
  return Status::Ok();
}
Status TilingWriteAccesses(const KernelContext& ctx, std::vector<MemAccess>& out) {
  out.push_back({ctx.ptr(0), sizeof(std::uint32_t), true});
  out.push_back({ctx.ptr(1), sizeof(std::uint64_t), true});
  return Status::Ok();
}

}  // namespace

void RegisterBuiltinKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& r = KernelRegistry::Global();
    r.Register({"noop", Engine::kAICore, &NoopRun, &NoopCost, &NoAccesses});
    r.Register({"vector_add_f32", Engine::kAICore, &VectorAddRun, &VectorAddCost, &VectorAddAccesses});
    r.Register({"fill_f32", Engine::kAICore, &FillRun, &FillCost, &FillAccesses});
    r.Register({"record_launch", Engine::kAICore, &RecordLaunchRun, &NoopCost, &RecordLaunchAccesses});
    r.Register({"tiling_write", Engine::kAICpu, &TilingWriteRun, &TilingWriteCost, &TilingWriteAccesses});
  });
}

}  // namespace npuflow::npu_sim
