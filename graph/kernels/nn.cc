// Device kernels of the neural-network ops (graph/ops/nn.cc), registered as "op.<Type>":
// op.MatMul, op.BatchMatMul, op.Softmax, op.ArgMax, op.LayerNorm, op.Gather, op.Attention, op.KvCacheWrite.
//
// Each kernel reads its KernelParams (graph/kernels/kernel_abi.h), checks them against what the op
// promises, and does the share of the work items that BlockRange gives its block, so every
// block_dim >= 1 gives the same bytes. The ints / floats per op (filled by graph/ops/nn.cc):
//   MatMul       ints[0] transpose_a, ints[1] transpose_b, ints[2] has bias, ints[3] has a residual (the
//                input after a, b [, bias], added after the activation), ints[4] activation (0 none,
//                1 gelu), ints[5] LayerNorm prologue (the last two inputs gamma, beta; one f32 row
//                only, GEMV path) with floats[0] its epsilon, ints[6] the GEMV's weights stream from
//                memory (the prefetch lead and, for f16, the loop; the same bits either way:
//                graph/kernels/gemv_prefetch.h)
//   BatchMatMul  ints[0] transpose_a, ints[1] transpose_b
//   Softmax      ints[0] axis (normalized)
//   ArgMax       ints[0] axis (normalized)
//   LayerNorm    floats[0] epsilon
//   Gather       ints[0] axis (normalized)
//   Attention    floats[0] scale
//   KvCacheWrite none
//
// Work items and dtypes:
//   MatMul / BatchMatMul  output tiles of kGemmTileM x kGemmTileN per batch (graph/kernels/matmul.h);
//                         f32, f16, bf16 (converted to f32 while packing, accumulated in f32); b
//                         may be narrower than a (f32 activations x f16 weights). A single f32
//                         row (M = 1, no batch) is a GEMV over the output columns instead.
//   Softmax               the vectors along the axis; LayerNorm: the rows (last axis). f32/f16/bf16,
//                         each vector converted to f32 scratch.
//   ArgMax                the vectors along the axis, whole (i32 out); f32/f16/bf16. A contiguous f32
//                         vector takes base/first_max.h's 8-lane pass, others a scalar scan: the
//                         same index either way.
//   Gather                (outer index, index) rows of the slice after the axis; any dtype (bytes);
//                         an index outside [0, dim) fails the block, naming index and bound.
//   Attention             query rows (b, h, t); f32/f16/bf16. valid_len is read from device memory;
//                         tiling_key picks the key chunk of the online softmax (0: 128, 1: 1024,
//                         2: 8192 keys), a choice of speed only.
//   KvCacheWrite          cache rows; any dtype. When output 0 is input 0's buffer only the new rows
//                         are written, otherwise every row is (copied or new).
// Scratch is per block (no workspace), so the tiling's block_dim can be overridden freely.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "base/first_max.h"
#include "graph/kernels/activations.h"
#include "graph/kernels/kernel_abi.h"
#include "graph/kernels/matmul.h"
#include "graph/kernels/device_kernels.h"
#include "graph/ir/tensor_access.h"

namespace npuflow::graph {
namespace {

using npu_sim::ChipSpec;
using npu_sim::KernelContext;
using npu_sim::VTime;

// ---- tensor access ----------------------------------------------------------------------------------
// A whole input or output tensor as bytes, bounds-checked by the view's mapping.
struct RawTensor {
  std::byte* data = nullptr;  // null when the tensor is empty
  DataType dtype = DataType::kFloat32;
  std::int64_t elements = 0;
  std::size_t element_size = 0;

  std::byte* at(std::int64_t i) const { return data + static_cast<std::size_t>(i) * element_size; }
  float LoadF(std::int64_t i) const {
    switch (dtype) {
      case DataType::kFloat16: { std::uint16_t h; std::memcpy(&h, at(i), 2); return HalfToFloat(h); }
      case DataType::kBFloat16: { std::uint16_t h; std::memcpy(&h, at(i), 2); return BFloat16ToFloat(h); }
      default: { float f; std::memcpy(&f, at(i), 4); return f; }
    }
  }
  void StoreF(std::int64_t i, float v) const {
    switch (dtype) {
      case DataType::kFloat16: { const std::uint16_t h = FloatToHalf(v); std::memcpy(at(i), &h, 2); break; }
      case DataType::kBFloat16: { const std::uint16_t h = FloatToBFloat16(v); std::memcpy(at(i), &h, 2); break; }
      default: std::memcpy(at(i), &v, 4); break;
    }
  }
  // n elements from `first`, stride 1, as f32: the tensor's own bytes for f32, else converted into
  // `scratch` (n floats).
  const float* RowF32(std::int64_t first, std::int64_t n, float* scratch) const {
    if (dtype == DataType::kFloat32) return reinterpret_cast<const float*>(at(first));
    for (std::int64_t i = 0; i < n; ++i) scratch[i] = LoadF(first + i);
    return scratch;
  }
  std::int64_t LoadIndex(std::int64_t i) const {
    if (dtype == DataType::kInt64) { std::int64_t v; std::memcpy(&v, at(i), 8); return v; }
    std::int32_t v;
    std::memcpy(&v, at(i), 4);
    return v;
  }
};

template <typename T>
StatusOr<RawTensor> MapAs(OpKernelView& view, bool output, std::uint32_t i, const KernelTensor& t) {
  NPUFLOW_ASSIGN_OR_RETURN(std::span<T> span, output ? view.Output<T>(i) : view.Input<T>(i));
  return RawTensor{reinterpret_cast<std::byte*>(span.data()), t.data_type(), t.num_elements(), sizeof(T)};
}

StatusOr<RawTensor> MapTensor(OpKernelView& view, bool output, std::uint32_t i) {
  const KernelTensor& t = output ? view.params().output(i) : view.params().input(i);
  switch (DataTypeSize(t.data_type())) {
    case 1: return MapAs<std::uint8_t>(view, output, i, t);
    case 2: return MapAs<std::uint16_t>(view, output, i, t);
    case 4: return MapAs<std::uint32_t>(view, output, i, t);
    default: return MapAs<std::uint64_t>(view, output, i, t);
  }
}
StatusOr<RawTensor> MapInput(OpKernelView& view, std::uint32_t i) { return MapTensor(view, false, i); }
StatusOr<RawTensor> MapOutput(OpKernelView& view, std::uint32_t i) { return MapTensor(view, true, i); }

// ---- params checks ----------------------------------------------------------------------------------
std::string DimsString(const KernelTensor& t) {
  std::string s = "[";
  for (std::uint32_t i = 0; i < t.rank; ++i) s += (i ? ", " : "") + std::to_string(t.dims[i]);
  return s + "]";
}

bool SameDims(const KernelTensor& a, const KernelTensor& b) {
  if (a.rank != b.rank) return false;
  for (std::uint32_t i = 0; i < a.rank; ++i)
    if (a.dims[i] != b.dims[i]) return false;
  return true;
}

std::int64_t Product(const KernelTensor& t, std::uint32_t begin, std::uint32_t end) {
  std::int64_t n = 1;
  for (std::uint32_t i = begin; i < end; ++i) n *= t.dims[i];
  return n;
}

Status NeedArity(const KernelParams& p, std::string_view kernel, std::uint32_t min_in, std::uint32_t max_in) {
  if (p.num_inputs < min_in || p.num_inputs > max_in || p.num_outputs != 1)
    return Status::ParamInvalid("{}: params have {} inputs and {} outputs, expected {} to {} inputs and 1 output",
                                kernel, p.num_inputs, p.num_outputs, min_in, max_in);
  return Status::Ok();
}

Status NeedFloat(std::string_view kernel, std::string_view what, const KernelTensor& t) {
  if (IsFloat(t.data_type())) return Status::Ok();
  return Status::Unsupported("{}: {} has unsupported dtype {} (f32, f16, bf16)", kernel, what,
                             DataTypeName(t.data_type()));
}

Status NeedSameDtype(std::string_view kernel, std::string_view what, const KernelTensor& t, const KernelTensor& like) {
  if (t.dtype == like.dtype) return Status::Ok();
  return Status::ParamInvalid("{}: {} is {}, expected {}", kernel, what, DataTypeName(t.data_type()),
                              DataTypeName(like.data_type()));
}

Status Mismatch(std::string_view kernel, std::string_view what, const KernelTensor& t, std::string_view expected) {
  return Status::ParamInvalid("{}: {} has shape {}, expected {}", kernel, what, DimsString(t), expected);
}

// The virtual time of this block: its BlockRange share of `items` of a kernel moving `bytes` and
// doing `flops` in all.
VTime ShareCost(const KernelContext& ctx, const ChipSpec& chip, std::int64_t items, double bytes, double flops) {
  if (items <= 0) return BlockCost(chip, 0, 0);
  const auto [begin, end] = BlockRange(items, ctx.block_idx(), ctx.block_dim());
  const double share = static_cast<double>(end - begin) / static_cast<double>(items);
  return BlockCost(chip, bytes * share, flops * share);
}

// One row through LayerNorm: out[i] = (row[i] - mean) * rstd * gamma[i] + beta[i] (out may be row).
// op.LayerNorm and the MatMul prologue (a fused LayerNorm) call this one compiled function, so the
// fused kernel gives the unfused pair's bits.
[[gnu::noinline]] void NormalizeRow(const float* row, std::size_t d, const float* gamma, const float* beta, float eps,
                                    float* out) {
  float mean = 0;
  for (std::size_t i = 0; i < d; ++i) mean += row[i];
  mean /= static_cast<float>(d);
  float var = 0;
  for (std::size_t i = 0; i < d; ++i) var += (row[i] - mean) * (row[i] - mean);
  var /= static_cast<float>(d);
  const float inv = 1.f / std::sqrt(var + eps);
  for (std::size_t i = 0; i < d; ++i) out[i] = (row[i] - mean) * inv * gamma[i] + beta[i];
}

// The fused prologue's row for one block of a GEMV launch. Every block of a launch normalizes the
// same row with the same gamma and beta (nothing writes a running kernel's inputs), so the blocks
// a thread runs for one launch share one NormalizeRow: a 117M f16 step's fused GEMVs did it about
// 170 times (6 blocks for each c_attn and c_fc, 24 for the logits), at about 1 us each
// (NormalizeRow's sums are sequential, for op.LayerNorm's bits). The
// virtual time is unchanged: each block's cost still counts the prologue. Launch 0 (a caller that
// names none) keeps nothing.
const float* NormalizedRow(std::uint64_t launch, const float* row, std::size_t k, const float* gamma,
                           const float* beta, float eps) {
  struct Kept {
    std::uint64_t launch = 0;
    const float *row = nullptr, *gamma = nullptr, *beta = nullptr;
    float eps = 0;
    std::vector<float> normed;
  };
  thread_local Kept kept;
  if (launch != 0 && kept.launch == launch && kept.row == row && kept.gamma == gamma && kept.beta == beta &&
      kept.eps == eps && kept.normed.size() == k)
    return kept.normed.data();
  kept.normed.resize(k);
  NormalizeRow(row, k, gamma, beta, eps, kept.normed.data());
  kept.launch = launch;
  kept.row = row;
  kept.gamma = gamma;
  kept.beta = beta;
  kept.eps = eps;
  return kept.normed.data();
}

// ---- MatMul / BatchMatMul ---------------------------------------------------------------------------
struct GemmProblem {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool ta = false, tb = false, bias = false;
  bool residual = false;  // the epilogue (MatMul): act(a x b + bias) + residual
  int activation = 0;     // 0 none, 1 gelu
  bool norm = false;      // the prologue (MatMul): a is LayerNorm(a, gamma, beta) first
  float norm_eps = 0;
  bool stream = false;  // GEMV only: the weights stream from memory (the short prefetch lead)
  std::uint32_t residual_input = 0, gamma_input = 0;  // where the epilogue's and prologue's inputs are
  std::int64_t tiles_m = 0, tiles_n = 0;
  std::int64_t items() const { return batch * tiles_m * tiles_n; }
};

// The matrix index of `in` (rank >= 2) for output batch `b` of `out`, broadcasting size-1 and
// missing leading dims.
std::int64_t BroadcastBatch(const KernelTensor& in, const KernelTensor& out, std::int64_t b) {
  std::int64_t index = 0, stride = 1;
  for (std::uint32_t back = 1; back + 2 <= out.rank; ++back) {
    const std::int64_t size = out.dims[out.rank - 2 - back];
    const std::int64_t idx = b % size;
    b /= size;
    if (back + 2 <= in.rank) {
      const std::int64_t in_size = in.dims[in.rank - 2 - back];
      index += (in_size == 1 ? 0 : idx) * stride;
      stride *= in_size;
    }
  }
  return index;
}

StatusOr<GemmProblem> ReadGemm(const KernelParams& p, std::string_view kernel, bool batched) {
  NPUFLOW_RETURN_IF_ERROR(NeedArity(p, kernel, 2, batched ? 2 : 6));
  const KernelTensor &a = p.input(0), &b = p.input(1), &c = p.output(0);
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(kernel, "a", a));
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(kernel, "b", b));  // may be narrower than a (f16 weights)
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "the output", c, a));
  GemmProblem g;
  g.ta = p.ints[0] != 0;
  g.tb = p.ints[1] != 0;
  g.bias = !batched && p.ints[2] != 0;
  g.residual = !batched && p.ints[3] != 0;
  g.activation = batched ? 0 : static_cast<int>(p.ints[4]);
  g.norm = !batched && p.ints[5] != 0;
  g.norm_eps = p.floats[0];
  g.stream = !batched && p.ints[6] != 0;
  if (p.num_inputs != 2 + (g.bias ? 1u : 0u) + (g.residual ? 1u : 0u) + (g.norm ? 2u : 0u))
    return Status::ParamInvalid("{}: params say bias {}, residual {} and norm {} but there are {} inputs", kernel,
                                g.bias, g.residual, g.norm, p.num_inputs);
  g.residual_input = g.bias ? 3 : 2;
  g.gamma_input = p.num_inputs - 2;
  if (g.activation < 0 || g.activation > 1)
    return Status::ParamInvalid("{}: activation {}: expected 0 (none) or 1 (gelu)", kernel, g.activation);
  const std::uint32_t min_rank = batched ? 3 : 2, max_rank = batched ? kMaxKernelRank : 2;
  if (a.rank < min_rank || a.rank > max_rank || b.rank < min_rank || b.rank > max_rank ||
      c.rank != std::max(a.rank, b.rank))
    return Status::ParamInvalid("{}: ranks of a {}, b {}, out {} do not fit", kernel, DimsString(a), DimsString(b),
                                DimsString(c));
  g.m = g.ta ? a.dim(-1) : a.dim(-2);
  g.k = g.ta ? a.dim(-2) : a.dim(-1);
  const std::int64_t kb = g.tb ? b.dim(-1) : b.dim(-2);
  g.n = g.tb ? b.dim(-2) : b.dim(-1);
  if (kb != g.k)
    return Status::ParamInvalid("{}: a {} has K = {} but b {} has K = {}", kernel, DimsString(a), g.k, DimsString(b),
                                kb);
  if (c.dim(-2) != g.m || c.dim(-1) != g.n) return Mismatch(kernel, "the output", c, "[..., M, N]");
  for (std::uint32_t back = 1; back + 2 <= c.rank; ++back) {
    const std::int64_t size = c.dims[c.rank - 2 - back];
    for (const KernelTensor* in : {&a, &b}) {
      if (back + 2 > in->rank) continue;
      const std::int64_t s = in->dims[in->rank - 2 - back];
      if (s != 1 && s != size) return Mismatch(kernel, "the output", c, "the broadcast batch of a and b");
    }
  }
  if (g.bias) {
    const KernelTensor& bias = p.input(2);
    NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "bias", bias, a));
    if (bias.rank != 1 || bias.dims[0] != g.n) return Mismatch(kernel, "bias", bias, "[N]");
  }
  if (g.residual) {
    const KernelTensor& r = p.input(g.residual_input);
    if (r.data_type() != DataType::kFloat32 || c.data_type() != DataType::kFloat32)
      return Status::Unsupported("{}: a fused residual needs f32 output and residual", kernel);
    if (r.rank != 2 || r.dims[0] != g.m || r.dims[1] != g.n) return Mismatch(kernel, "the residual", r, "[M, N]");
  }
  if (g.activation != 0 && c.data_type() != DataType::kFloat32)
    return Status::Unsupported("{}: a fused activation needs an f32 output", kernel);
  if (g.norm) {
    if (g.m != 1 || g.ta || a.rank != 2 || a.data_type() != DataType::kFloat32 || c.data_type() != DataType::kFloat32)
      return Status::Unsupported("{}: a fused LayerNorm needs a to be one f32 row [1, K] (not transposed), got {}",
                                 kernel, DimsString(a));
    for (std::uint32_t i : {g.gamma_input, g.gamma_input + 1})
      if (p.input(i).data_type() != DataType::kFloat32 || p.input(i).rank != 1 || p.input(i).dims[0] != g.k)
        return Mismatch(kernel, i == g.gamma_input ? "gamma" : "beta", p.input(i), "f32 [K]");
  }
  g.batch = Product(c, 0, c.rank - 2);
  g.tiles_m = (g.m + kGemmTileM - 1) / kGemmTileM;
  g.tiles_n = (g.n + kGemmTileN - 1) / kGemmTileN;
  return g;
}

// One f32 row against any B (batch 1, M = 1): the GEMV path, graph::RunsAsGemv (gemv_prefetch.h)
// seen from the kernel's side. TileMatMul (graph/ops/nn.cc) tiles the same condition by output columns.
bool IsGemv(const GemmProblem& g, const KernelParams& p) {
  return g.batch == 1 && g.m == 1 && p.input(0).data_type() == DataType::kFloat32 &&
         p.output(0).data_type() == DataType::kFloat32;
}

// The epilogue over rows [m0, m1) x columns [j0, j1) of an f32 output with row stride n, after
// the bias: the activation, then the residual (same layout as the output). The same functions as
// op.Gelu and op.Add, in the same order, so the fused kernel gives the unfused pair's bits.
void Epilogue(const GemmProblem& g, float* c, const float* residual, std::int64_t m0, std::int64_t m1,
              std::int64_t j0, std::int64_t j1) {
  for (std::int64_t i = m0; i < m1; ++i) {
    float* row = c + i * g.n;
    if (g.activation == 1)
      for (std::int64_t j = j0; j < j1; ++j) row[j] = GeluF(row[j]);
    if (residual != nullptr) {
      const float* r = residual + i * g.n;
      for (std::int64_t j = j0; j < j1; ++j) row[j] = r[j] + row[j];
    }
  }
}

Status RunGemm(KernelContext& ctx, std::string_view kernel, bool batched) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView view, OpKernelView::Open(ctx));
  const KernelParams& p = view.params();
  NPUFLOW_ASSIGN_OR_RETURN(GemmProblem g, ReadGemm(p, kernel, batched));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor a, MapInput(view, 0));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor b, MapInput(view, 1));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor c, MapOutput(view, 0));
  if (IsGemv(g, p)) {
    // One row (the decode step): the blocks split the output columns; no scratch, no packing.
    const auto [j0, j1] = BlockRange(g.n, view.block_idx(), view.block_dim());
    if (j0 == j1) return Status::Ok();
    const float* bias = nullptr;
    if (g.bias) {
      NPUFLOW_ASSIGN_OR_RETURN(RawTensor raw, MapInput(view, 2));
      bias = reinterpret_cast<const float*>(raw.data);  // bias has a's dtype: f32
    }
    const float* row = reinterpret_cast<const float*>(a.data);
    if (g.norm) {
      // The prologue: each block normalizes the row itself (K floats against its K x columns of B).
      NPUFLOW_ASSIGN_OR_RETURN(RawTensor gamma, MapInput(view, g.gamma_input));
      NPUFLOW_ASSIGN_OR_RETURN(RawTensor beta, MapInput(view, g.gamma_input + 1));
      row = NormalizedRow(view.launch(), row, static_cast<std::size_t>(g.k),
                          reinterpret_cast<const float*>(gamma.data), reinterpret_cast<const float*>(beta.data),
                          g.norm_eps);
    }
    const GemmMatrix bm{b.data, b.dtype, g.tb ? g.k : g.n, g.tb};
    Gemv(row, bm, bias, reinterpret_cast<float*>(c.data), g.k, j0, j1, GemvPrefetchLead(g.stream));
    if (g.activation != 0 || g.residual) {
      const float* residual = nullptr;
      if (g.residual) {
        NPUFLOW_ASSIGN_OR_RETURN(RawTensor raw, MapInput(view, g.residual_input));
        residual = reinterpret_cast<const float*>(raw.data);
      }
      Epilogue(g, reinterpret_cast<float*>(c.data), residual, 0, 1, j0, j1);
    }
    return Status::Ok();
  }
  if (g.norm) return Status::Internal("{}: a fused LayerNorm outside the GEMV path", kernel);  // ReadGemm refuses it
  const float* residual = nullptr;
  if (g.residual) {
    NPUFLOW_ASSIGN_OR_RETURN(RawTensor raw, MapInput(view, g.residual_input));
    residual = reinterpret_cast<const float*>(raw.data);
  }
  const auto [begin, end] = BlockRange(g.items(), view.block_idx(), view.block_dim());
  if (begin == end) return Status::Ok();
  std::vector<float> bias_f32;
  const float* bias = nullptr;
  if (g.bias) {
    NPUFLOW_ASSIGN_OR_RETURN(RawTensor raw, MapInput(view, 2));
    if (raw.dtype != DataType::kFloat32) bias_f32.resize(static_cast<std::size_t>(g.n));
    bias = raw.RowF32(0, g.n, bias_f32.data());
  }
  GemmScratch scratch(g.m, g.n, g.k);
  const std::int64_t per_batch = g.tiles_m * g.tiles_n;
  for (std::int64_t item = begin; item < end; ++item) {
    // Row tiles vary fastest, so consecutive tiles share their packed columns of B.
    const std::int64_t batch = item / per_batch, tile = item % per_batch;
    const std::int64_t m0 = tile % g.tiles_m * kGemmTileM, n0 = tile / g.tiles_m * kGemmTileN;
    const std::int64_t ia = BroadcastBatch(p.input(0), p.output(0), batch);
    const std::int64_t ib = BroadcastBatch(p.input(1), p.output(0), batch);
    const GemmMatrix am{a.at(ia * g.m * g.k), a.dtype, g.ta ? g.m : g.k, g.ta};
    const GemmMatrix bm{b.at(ib * g.k * g.n), b.dtype, g.tb ? g.k : g.n, g.tb};
    const GemmOutput cm{c.at(batch * g.m * g.n), c.dtype, g.n};
    GemmTile(am, bm, bias, cm, g.k, m0, std::min(g.m, m0 + kGemmTileM), n0, std::min(g.n, n0 + kGemmTileN), scratch);
    if (g.activation != 0 || g.residual)  // MatMul only (batch 1): f32 output, checked in ReadGemm
      Epilogue(g, reinterpret_cast<float*>(c.data), residual, m0, std::min(g.m, m0 + kGemmTileM), n0,
               std::min(g.n, n0 + kGemmTileN));
  }
  return Status::Ok();
}

Status MatMulKernel(KernelContext& ctx) { return RunGemm(ctx, "op.MatMul", false); }
Status BatchMatMulKernel(KernelContext& ctx) { return RunGemm(ctx, "op.BatchMatMul", true); }

VTime GemmCost(const KernelContext& ctx, const ChipSpec& chip, bool batched) {
  auto view = OpKernelView::Open(ctx);
  if (!view.ok()) return BlockCost(chip, 0, 0);
  auto g = ReadGemm(view->params(), "", batched);
  if (!g.ok()) return BlockCost(chip, 0, 0);
  const KernelParams& p = view->params();
  const double esize_a = static_cast<double>(DataTypeSize(p.input(0).data_type()));
  const double esize_b = static_cast<double>(DataTypeSize(p.input(1).data_type()));
  const double flops = 2.0 * static_cast<double>(g->batch * g->m * g->n) * static_cast<double>(g->k);
  if (IsGemv(*g, p)) {
    // The GEMV reads B once, A once per block, and writes one row; split by output columns.
    const double bytes = static_cast<double>(g->k) * static_cast<double>(g->n) * esize_b +
                         static_cast<double>(g->k) * esize_a * (g->norm ? 3.0 : 1.0) +
                         static_cast<double>(g->n) * esize_a * (g->residual ? 2.0 : 1.0);
    // A fused LayerNorm: every block normalizes the row (8 flops an element, as op.LayerNorm's cost).
    const double norm_flops = g->norm ? 8.0 * static_cast<double>(g->k) : 0.0;
    return ShareCost(ctx, chip, g->n, bytes, flops) + (g->norm ? BlockCost(chip, 0, norm_flops) : 0);
  }
  // A tile reads its rows of A and columns of B and writes itself.
  const double tile_m = static_cast<double>(std::min<std::int64_t>(g->m, kGemmTileM));
  const double tile_n = static_cast<double>(std::min<std::int64_t>(g->n, kGemmTileN));
  const double items = static_cast<double>(g->items());
  const double bytes =
      items * (static_cast<double>(g->k) * (tile_m * esize_a + tile_n * esize_b) + tile_m * tile_n * esize_a);
  return ShareCost(ctx, chip, g->items(), bytes, flops);
}
VTime MatMulCost(const KernelContext& ctx, const ChipSpec& chip) { return GemmCost(ctx, chip, false); }
VTime BatchMatMulCost(const KernelContext& ctx, const ChipSpec& chip) { return GemmCost(ctx, chip, true); }

// ---- Softmax ----------------------------------------------------------------------------------------
struct AxisSplit {
  std::int64_t outer = 1, len = 1, inner = 1;
  std::int64_t vectors() const { return outer * inner; }
};

// x cut at its (normalized) axis, which the params give.
StatusOr<AxisSplit> SplitAtKernelAxis(std::string_view kernel, const KernelTensor& x, std::int64_t axis) {
  if (axis < 0 || axis >= static_cast<std::int64_t>(x.rank))
    return Status::ParamInvalid("{}: axis {} out of range for {}", kernel, axis, DimsString(x));
  const auto a = static_cast<std::uint32_t>(axis);
  return AxisSplit{Product(x, 0, a), x.dims[a], Product(x, a + 1, x.rank)};
}

StatusOr<AxisSplit> ReadSoftmax(const KernelParams& p) {
  constexpr std::string_view kernel = "op.Softmax";
  NPUFLOW_RETURN_IF_ERROR(NeedArity(p, kernel, 1, 1));
  const KernelTensor &x = p.input(0), &y = p.output(0);
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(kernel, "x", x));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "the output", y, x));
  if (!SameDims(x, y)) return Mismatch(kernel, "the output", y, DimsString(x));
  return SplitAtKernelAxis(kernel, x, p.ints[0]);
}

Status SoftmaxKernel(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView view, OpKernelView::Open(ctx));
  NPUFLOW_ASSIGN_OR_RETURN(AxisSplit s, ReadSoftmax(view.params()));
  const auto [begin, end] = BlockRange(s.vectors(), view.block_idx(), view.block_dim());
  if (begin == end || s.len == 0) return Status::Ok();
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor x, MapInput(view, 0));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor y, MapOutput(view, 0));
  std::vector<float> row(static_cast<std::size_t>(s.len));
  for (std::int64_t v = begin; v < end; ++v) {
    const std::int64_t first = v / s.inner * s.len * s.inner + v % s.inner;  // element 0 of the vector
    for (std::int64_t a = 0; a < s.len; ++a) row[a] = x.LoadF(first + a * s.inner);
    float mx = -std::numeric_limits<float>::infinity();
    for (float e : row) mx = std::max(mx, e);
    float sum = 0;
    for (float& e : row) sum += (e = std::exp(e - mx));
    const float inv = 1.f / sum;
    for (std::int64_t a = 0; a < s.len; ++a) y.StoreF(first + a * s.inner, row[a] * inv);
  }
  return Status::Ok();
}

VTime SoftmaxCost(const KernelContext& ctx, const ChipSpec& chip) {
  auto view = OpKernelView::Open(ctx);
  if (!view.ok()) return BlockCost(chip, 0, 0);
  auto s = ReadSoftmax(view->params());
  if (!s.ok()) return BlockCost(chip, 0, 0);
  const double bytes = 2.0 * static_cast<double>(view->params().input(0).bytes());
  return ShareCost(ctx, chip, s->vectors(), bytes, 8.0 * static_cast<double>(s->vectors() * s->len));
}

// ---- ArgMax -----------------------------------------------------------------------------------------
StatusOr<AxisSplit> ReadArgMax(const KernelParams& p) {
  constexpr std::string_view kernel = "op.ArgMax";
  NPUFLOW_RETURN_IF_ERROR(NeedArity(p, kernel, 1, 1));
  const KernelTensor &x = p.input(0), &y = p.output(0);
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(kernel, "x", x));
  NPUFLOW_ASSIGN_OR_RETURN(AxisSplit s, SplitAtKernelAxis(kernel, x, p.ints[0]));
  if (y.data_type() != DataType::kInt32)
    return Status::ParamInvalid("{}: the output is {}, expected i32", kernel, DataTypeName(y.data_type()));
  if (y.num_elements() != s.vectors()) return Mismatch(kernel, "the output", y, "x's shape without the axis");
  return s;
}

Status ArgMaxKernel(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView view, OpKernelView::Open(ctx));
  NPUFLOW_ASSIGN_OR_RETURN(AxisSplit s, ReadArgMax(view.params()));
  const auto [begin, end] = BlockRange(s.vectors(), view.block_idx(), view.block_dim());
  if (begin == end) return Status::Ok();
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor x, MapInput(view, 0));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor y, MapOutput(view, 0));
  for (std::int64_t v = begin; v < end; ++v) {
    const std::int64_t first = v / s.inner * s.len * s.inner + v % s.inner;  // element 0 of the vector
    std::int64_t best = -1;
    if (x.dtype == DataType::kFloat32 && s.inner == 1) {
      best = FirstMaxIndex(reinterpret_cast<const float*>(x.at(first)), static_cast<std::size_t>(s.len));
    } else {
      float best_value = -std::numeric_limits<float>::infinity();
      for (std::int64_t a = 0; a < s.len; ++a) {
        const float e = x.LoadF(first + a * s.inner);
        if (e > best_value) {
          best_value = e;
          best = a;
        }
      }
    }
    const auto out = static_cast<std::int32_t>(best);
    std::memcpy(y.at(v), &out, sizeof(out));
  }
  return Status::Ok();
}

VTime ArgMaxCost(const KernelContext& ctx, const ChipSpec& chip) {
  auto view = OpKernelView::Open(ctx);
  if (!view.ok()) return BlockCost(chip, 0, 0);
  auto s = ReadArgMax(view->params());
  if (!s.ok()) return BlockCost(chip, 0, 0);
  const double bytes = static_cast<double>(view->params().input(0).bytes());
  return ShareCost(ctx, chip, s->vectors(), bytes, static_cast<double>(s->vectors() * s->len));
}

// ---- LayerNorm --------------------------------------------------------------------------------------
struct Rows {
  std::int64_t rows = 0, width = 0;
};

StatusOr<Rows> ReadLayerNorm(const KernelParams& p) {
  constexpr std::string_view kernel = "op.LayerNorm";
  NPUFLOW_RETURN_IF_ERROR(NeedArity(p, kernel, 3, 3));
  const KernelTensor &x = p.input(0), &y = p.output(0);
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(kernel, "x", x));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "gamma", p.input(1), x));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "beta", p.input(2), x));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "the output", y, x));
  if (x.rank == 0 || !SameDims(x, y)) return Mismatch(kernel, "the output", y, DimsString(x));
  const std::int64_t d = x.dim(-1);
  for (std::uint32_t i : {1u, 2u})
    if (p.input(i).rank != 1 || p.input(i).dims[0] != d)
      return Mismatch(kernel, i == 1 ? "gamma" : "beta", p.input(i), "[D]");
  return Rows{d == 0 ? 0 : x.num_elements() / d, d};
}

Status LayerNormKernel(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView view, OpKernelView::Open(ctx));
  NPUFLOW_ASSIGN_OR_RETURN(Rows s, ReadLayerNorm(view.params()));
  const auto [begin, end] = BlockRange(s.rows, view.block_idx(), view.block_dim());
  if (begin == end) return Status::Ok();
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor x, MapInput(view, 0));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor gamma_raw, MapInput(view, 1));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor beta_raw, MapInput(view, 2));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor y, MapOutput(view, 0));
  const float eps = view.params().floats[0];
  const auto d = static_cast<std::size_t>(s.width);
  thread_local std::vector<float> scratch;  // grows once per unit thread: no allocation per kernel
  scratch.resize(3 * d);
  const float* gamma = gamma_raw.RowF32(0, s.width, scratch.data());
  const float* beta = beta_raw.RowF32(0, s.width, scratch.data() + d);
  float* row = scratch.data() + 2 * d;
  for (std::int64_t r = begin; r < end; ++r) {
    for (std::size_t i = 0; i < d; ++i) row[i] = x.LoadF(r * s.width + static_cast<std::int64_t>(i));
    NormalizeRow(row, d, gamma, beta, eps, row);
    for (std::size_t i = 0; i < d; ++i) y.StoreF(r * s.width + static_cast<std::int64_t>(i), row[i]);
  }
  return Status::Ok();
}

VTime LayerNormCost(const KernelContext& ctx, const ChipSpec& chip) {
  auto view = OpKernelView::Open(ctx);
  if (!view.ok()) return BlockCost(chip, 0, 0);
  auto s = ReadLayerNorm(view->params());
  if (!s.ok()) return BlockCost(chip, 0, 0);
  const double bytes = 2.0 * static_cast<double>(view->params().input(0).bytes());
  return ShareCost(ctx, chip, s->rows, bytes, 8.0 * static_cast<double>(s->rows * s->width));
}

// ---- Gather -----------------------------------------------------------------------------------------
struct GatherSplit {
  std::int64_t outer = 1, len = 0, inner = 1, count = 0;
  std::int64_t rows() const { return outer * count; }
};

StatusOr<GatherSplit> ReadGather(const KernelParams& p) {
  constexpr std::string_view kernel = "op.Gather";
  NPUFLOW_RETURN_IF_ERROR(NeedArity(p, kernel, 2, 2));
  const KernelTensor &x = p.input(0), &idx = p.input(1), &y = p.output(0);
  if (!IsInteger(idx.data_type()))
    return Status::Unsupported("{}: indices have unsupported dtype {} (i32, i64)", kernel,
                               DataTypeName(idx.data_type()));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "the output", y, x));
  if (p.ints[0] < 0 || p.ints[0] >= static_cast<std::int64_t>(x.rank))
    return Status::ParamInvalid("{}: axis {} out of range for {}", kernel, p.ints[0], DimsString(x));
  const auto axis = static_cast<std::uint32_t>(p.ints[0]);
  GatherSplit g{Product(x, 0, axis), x.dims[axis], Product(x, axis + 1, x.rank), idx.num_elements()};
  if (y.rank != x.rank - 1 + idx.rank || y.num_elements() != g.rows() * g.inner)
    return Mismatch(kernel, "the output", y, "params[:axis] + indices + params[axis + 1:]");
  return g;
}

Status GatherKernel(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView view, OpKernelView::Open(ctx));
  NPUFLOW_ASSIGN_OR_RETURN(GatherSplit g, ReadGather(view.params()));
  const auto [begin, end] = BlockRange(g.rows(), view.block_idx(), view.block_dim());
  if (begin == end) return Status::Ok();
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor x, MapInput(view, 0));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor indices, MapInput(view, 1));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor y, MapOutput(view, 0));
  const std::size_t row_bytes = static_cast<std::size_t>(g.inner) * y.element_size;
  for (std::int64_t r = begin; r < end; ++r) {
    const std::int64_t o = r / g.count;
    const std::int64_t i = indices.LoadIndex(r % g.count);
    if (i < 0 || i >= g.len)
      return Status::ParamInvalid("op.Gather: index {} out of range [0, {}) on axis {}", i, g.len,
                                  view.params().ints[0]);
    if (row_bytes > 0) std::memcpy(y.at(r * g.inner), x.at((o * g.len + i) * g.inner), row_bytes);
  }
  return Status::Ok();
}

VTime GatherCost(const KernelContext& ctx, const ChipSpec& chip) {
  auto view = OpKernelView::Open(ctx);
  if (!view.ok()) return BlockCost(chip, 0, 0);
  auto g = ReadGather(view->params());
  if (!g.ok()) return BlockCost(chip, 0, 0);
  return ShareCost(ctx, chip, g->rows(), 2.0 * static_cast<double>(view->params().output(0).bytes()), 0);
}

// ---- KV cache shapes --------------------------------------------------------------------------------
// rows [(B,) H, T, D] against cache [(B,) H, S_max, D].
struct CacheShape {
  std::int64_t heads = 0;  // B * H
  std::int64_t t = 0, s_max = 0, d = 0;
};

StatusOr<CacheShape> ReadCacheShape(std::string_view kernel, std::string_view rows_what, const KernelTensor& rows,
                                    const KernelTensor& cache) {
  bool ok = (cache.rank == 3 || cache.rank == 4) && rows.rank == cache.rank;
  for (std::uint32_t i = 0; ok && i < rows.rank; ++i)
    if (i != rows.rank - 2) ok = rows.dims[i] == cache.dims[i];
  if (!ok) return Mismatch(kernel, rows_what, rows, "[(B,) H, T, D] like the cache " + DimsString(cache));
  return CacheShape{Product(cache, 0, cache.rank - 2), rows.dim(-2), cache.dim(-2), cache.dim(-1)};
}

// The i32 [1] scalar input `i`, read from device memory.
StatusOr<std::int64_t> ReadScalarInput(OpKernelView& view, std::uint32_t i, std::string_view kernel,
                                       std::string_view what) {
  const KernelTensor& t = view.params().input(i);
  if (t.data_type() != DataType::kInt32 || t.num_elements() != 1)
    return Status::ParamInvalid("{}: {} must be i32[1], got {} {}", kernel, what, DataTypeName(t.data_type()),
                                DimsString(t));
  NPUFLOW_ASSIGN_OR_RETURN(std::span<std::int32_t> v, view.Input<std::int32_t>(i));
  return v[0];
}

// ---- Attention --------------------------------------------------------------------------------------
StatusOr<CacheShape> ReadAttention(const KernelParams& p) {
  constexpr std::string_view kernel = "op.Attention";
  NPUFLOW_RETURN_IF_ERROR(NeedArity(p, kernel, 4, 4));
  const KernelTensor &q = p.input(0), &k = p.input(1), &v = p.input(2), &y = p.output(0);
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(kernel, "q", q));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "k_cache", k, q));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "v_cache", v, q));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "the output", y, q));
  if (!SameDims(k, v)) return Mismatch(kernel, "v_cache", v, DimsString(k));
  if (!SameDims(q, y)) return Mismatch(kernel, "the output", y, DimsString(q));
  return ReadCacheShape(kernel, "q", q, k);
}

// Keys per online-softmax step, by tiling key.
constexpr std::int64_t kAttentionChunks[] = {128, 1024, 8192};

Status AttentionKernel(KernelContext& ctx) {
  constexpr std::string_view kernel = "op.Attention";
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView view, OpKernelView::Open(ctx));
  NPUFLOW_ASSIGN_OR_RETURN(CacheShape s, ReadAttention(view.params()));
  if (view.tiling_key() >= std::size(kAttentionChunks))
    return Status::ParamInvalid("{}: unknown tiling key {} (0 to {})", kernel, view.tiling_key(),
                                std::size(kAttentionChunks) - 1);
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t valid, ReadScalarInput(view, 3, kernel, "valid_len"));
  if (valid < s.t) return Status::ParamInvalid("{}: valid_len {} is less than the {} query rows", kernel, valid, s.t);
  if (valid > s.s_max)
    return Status::ParamInvalid("{}: valid_len {} exceeds the cache length S_max = {}", kernel, valid, s.s_max);
  const auto [begin, end] = BlockRange(s.heads * s.t, view.block_idx(), view.block_dim());
  if (begin == end || s.d == 0) return Status::Ok();
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor q, MapInput(view, 0));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor kc, MapInput(view, 1));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor vc, MapInput(view, 2));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor y, MapOutput(view, 0));
  const float scale = view.params().floats[0];
  const std::int64_t chunk = std::min(kAttentionChunks[view.tiling_key()], valid);
  const auto d = static_cast<std::size_t>(s.d);
  std::vector<float> scratch(4 * d + static_cast<std::size_t>(chunk));
  float* q_buf = scratch.data();
  float* kv_buf = q_buf + d;
  float* acc = kv_buf + d;
  float* out = acc + d;
  float* score = out + d;
  for (std::int64_t row = begin; row < end; ++row) {
    const std::int64_t head = row / s.t, t = row % s.t;
    const std::int64_t p = valid - s.t + t;  // the query's position: it attends to cache rows 0..p
    const float* qv = q.RowF32(row * s.d, s.d, q_buf);
    const std::int64_t cache0 = head * s.s_max * s.d;
    // Online softmax over chunks of keys: m the running max, l the running sum of exp(score - m),
    // acc the running sum of exp(score - m) * v.
    float m = -std::numeric_limits<float>::infinity(), l = 0;
    std::fill_n(acc, d, 0.f);
    for (std::int64_t c0 = 0; c0 <= p; c0 += chunk) {
      const std::int64_t c1 = std::min(p + 1, c0 + chunk);
      float chunk_max = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = c0; j < c1; ++j) {
        const float* kv = kc.RowF32(cache0 + j * s.d, s.d, kv_buf);
        // In lanes (the GEMV's dot): a plain running sum is one long dependency chain per key.
        score[j - c0] = gemm_internal::DotF32(qv, kv, s.d) * scale;
        chunk_max = std::max(chunk_max, score[j - c0]);
      }
      const float new_m = std::max(m, chunk_max);
      const float correction = m == -std::numeric_limits<float>::infinity() ? 0.f : std::exp(m - new_m);
      l *= correction;
      for (std::size_t i = 0; i < d; ++i) acc[i] *= correction;
      for (std::int64_t j = c0; j < c1; ++j) {
        const float w = std::exp(score[j - c0] - new_m);
        l += w;
        const float* vv = vc.RowF32(cache0 + j * s.d, s.d, kv_buf);
        for (std::size_t i = 0; i < d; ++i) acc[i] += w * vv[i];
      }
      m = new_m;
    }
    const float inv = 1.f / l;
    for (std::size_t i = 0; i < d; ++i) y.StoreF(row * s.d + static_cast<std::int64_t>(i), acc[i] * inv);
  }
  return Status::Ok();
}

VTime AttentionCost(const KernelContext& ctx, const ChipSpec& chip) {
  auto view = OpKernelView::Open(ctx);
  if (!view.ok()) return BlockCost(chip, 0, 0);
  auto s = ReadAttention(view->params());
  if (!s.ok()) return BlockCost(chip, 0, 0);
  auto valid = ReadScalarInput(*view, 3, "", "");
  const double len = static_cast<double>(valid.ok() ? *valid : s->s_max);
  // A head's keys and values come from HBM once (its query rows share them); each query row does
  // about 4 flops per key and value element.
  const double esize = static_cast<double>(DataTypeSize(view->params().input(0).data_type()));
  const double head_elems = static_cast<double>(s->heads) * len * static_cast<double>(s->d);
  return ShareCost(ctx, chip, s->heads * s->t, 2.0 * head_elems * esize, 4.0 * head_elems * static_cast<double>(s->t));
}

// ---- KvCacheWrite -----------------------------------------------------------------------------------
StatusOr<CacheShape> ReadKvCacheWrite(const KernelParams& p) {
  constexpr std::string_view kernel = "op.KvCacheWrite";
  NPUFLOW_RETURN_IF_ERROR(NeedArity(p, kernel, 3, 3));
  const KernelTensor &cache = p.input(0), &rows = p.input(1), &y = p.output(0);
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "new_rows", rows, cache));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(kernel, "the output", y, cache));
  if (!SameDims(cache, y)) return Mismatch(kernel, "the output", y, DimsString(cache));
  return ReadCacheShape(kernel, "new_rows", rows, cache);
}

Status KvCacheWriteKernel(KernelContext& ctx) {
  constexpr std::string_view kernel = "op.KvCacheWrite";
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView view, OpKernelView::Open(ctx));
  NPUFLOW_ASSIGN_OR_RETURN(CacheShape s, ReadKvCacheWrite(view.params()));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t pos, ReadScalarInput(view, 2, kernel, "position"));
  if (pos < 0 || pos + s.t > s.s_max)
    return Status::ParamInvalid("{}: position {} + {} new rows does not fit the cache length {}", kernel, pos, s.t,
                                s.s_max);
  // In place, the cache rows outside the new ones are already where they belong.
  const bool inplace = view.output_addr(0) == view.input_addr(0);
  const std::int64_t items = s.heads * (inplace ? s.t : s.s_max);
  const auto [begin, end] = BlockRange(items, view.block_idx(), view.block_dim());
  if (begin == end || s.d == 0) return Status::Ok();
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor rows, MapInput(view, 1));
  NPUFLOW_ASSIGN_OR_RETURN(RawTensor y, MapOutput(view, 0));
  RawTensor cache;
  if (!inplace) {
    NPUFLOW_ASSIGN_OR_RETURN(cache, MapInput(view, 0));
  }
  const std::size_t row_bytes = static_cast<std::size_t>(s.d) * y.element_size;
  for (std::int64_t item = begin; item < end; ++item) {
    if (inplace) {
      const std::int64_t head = item / s.t, t = item % s.t;
      std::memcpy(y.at((head * s.s_max + pos + t) * s.d), rows.at(item * s.d), row_bytes);
      continue;
    }
    const std::int64_t head = item / s.s_max, r = item % s.s_max;
    const bool is_new = r >= pos && r < pos + s.t;
    std::memcpy(y.at(item * s.d), is_new ? rows.at((head * s.t + r - pos) * s.d) : cache.at(item * s.d), row_bytes);
  }
  return Status::Ok();
}

VTime KvCacheWriteCost(const KernelContext& ctx, const ChipSpec& chip) {
  auto view = OpKernelView::Open(ctx);
  if (!view.ok()) return BlockCost(chip, 0, 0);
  auto s = ReadKvCacheWrite(view->params());
  if (!s.ok()) return BlockCost(chip, 0, 0);
  const bool inplace = view->output_addr(0) == view->input_addr(0);
  const std::int64_t items = s->heads * (inplace ? s->t : s->s_max);
  const double esize = static_cast<double>(DataTypeSize(view->params().input(0).data_type()));
  return ShareCost(ctx, chip, items, 2.0 * static_cast<double>(items * s->d) * esize, 0);
}

}  // namespace

void RegisterNnKernels() {
  npu_sim::KernelRegistry& r = npu_sim::KernelRegistry::Global();
  for (auto [type, run, cost] : std::initializer_list<std::tuple<const char*, npu_sim::KernelFn, npu_sim::CostFn>>{
           {"MatMul", &MatMulKernel, &MatMulCost},
           {"BatchMatMul", &BatchMatMulKernel, &BatchMatMulCost},
           {"Softmax", &SoftmaxKernel, &SoftmaxCost},
           {"ArgMax", &ArgMaxKernel, &ArgMaxCost},
           {"LayerNorm", &LayerNormKernel, &LayerNormCost},
           {"Gather", &GatherKernel, &GatherCost},
           {"Attention", &AttentionKernel, &AttentionCost},
           {"KvCacheWrite", &KvCacheWriteKernel, &KvCacheWriteCost}}) {
    r.Register({.name = DeviceKernelName(type), .engine = npu_sim::Engine::kAICore, .run = run, .cost = cost, .accesses = &OpKernelAccesses});
  }
}

}  // namespace npuflow::graph
