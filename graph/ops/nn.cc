// Neural-network ops: shape inference, reference kernels, host tiling and kernel params.
//
//   MatMul(a, b [, bias] [, residual] [, gamma, beta])  attrs transpose_a, transpose_b (bool,
//                           default false).
//                           a [M, K], b [K, N] after the transposes, bias [N]; out [M, N]. Float
//                           dtypes; a, bias and out equal, b any float dtype (f32 activations x
//                           f16 weights). The epilogue, which lowering's fuse-epilogues pass sets
//                           (a graph may also say it): attr fused_activation ("" or "gelu", on
//                           a x b + bias), then attr fused_residual (bool): the last input, [M, N]
//                           like out, is added. out = act(a x b + bias) + residual. The
//                           prologue (the same pass): attr fused_norm (bool) with
//                           fused_norm_epsilon (float, default 1e-5): a is one f32 row [1, K]
//                           (not transposed) and is LayerNorm(a, gamma, beta) first, gamma and
//                           beta [K] f32, the last two inputs. attr stream_weights (bool, a
//                           speed choice only; lowering's stream-weights pass sets it): on the
//                           GEMV path, b streams from memory, so the kernel prefetches it with the
//                           short lead (graph/kernels/gemv_prefetch.h).
//   BatchMatMul(a, b)       same attrs; a [..., M, K], b [..., K, N], rank >= 3, the batch dims
//                           broadcast (NumPy); out [batch..., M, N].
//   Softmax(x)              attr axis (int, default -1); numerically stable (max subtracted).
//   ArgMax(x)               attr axis (int, default -1); out i32, x's shape without the axis: the
//                           index of the first largest element along it (greedy decoding's next
//                           token, base/first_max.h). NaN never compares larger and -inf never
//                           wins: a vector of only -inf and NaN gives -1.
//   LayerNorm(x, gamma, beta)  attr epsilon (float, default 1e-5); normalizes over the last axis;
//                           gamma and beta are [last dim].
//   Gather(params, indices) attr axis (int, default 0); indices i32 or i64, each in
//                           [0, params.shape[axis]) (otherwise a run-time error naming the index
//                           and the bound); out = params[:axis] + indices + params[axis + 1:].
//   Attention(q, k_cache, v_cache, valid_len)  causal multi-head attention over a KV cache.
//                           q [H, T, D] or [B, H, T, D]; caches [H, S_max, D] or [B, H, S_max, D];
//                           valid_len i32 [1], the valid cache rows including the T new ones.
//                           Query row t sits at p = valid_len - T + t and attends to rows 0..p.
//                           attr scale (float, default 1/sqrt(D)). out like q. valid_len < T or
//                           > S_max is a run-time error.
//   KvCacheWrite(cache, new_rows, position)  cache [H, S_max, D] or [B, H, S_max, D], new_rows
//                           [H, T, D] or [B, H, T, D], position i32 [1]; out = cache with rows
//                           position .. position + T - 1 replaced. Output 0 may alias input 0.
//
// Every op runs on AICore with device kernel DeviceKernelName(type) (graph/kernels/nn.cc). Kernel
// params (KernelParams::ints / floats; the tensors' shapes and dtypes are in the params too):
//   MatMul       ints[0] transpose_a, ints[1] transpose_b, ints[2] has bias (0 / 1), ints[3] has a
//                residual (0 / 1), ints[4] activation (0 none, 1 gelu), ints[5] LayerNorm
//                prologue (0 / 1) with floats[0] its epsilon
//   BatchMatMul  ints[0] transpose_a, ints[1] transpose_b
//   Softmax      ints[0] axis, normalized to [0, rank)
//   ArgMax       ints[0] axis, normalized to [0, rank)
//   LayerNorm    floats[0] epsilon
//   Gather       ints[0] axis, normalized to [0, rank of params)
//   Attention    floats[0] scale (the attribute, or 1/sqrt(D))
//   KvCacheWrite none
//
// Tiling (block_dim is always in [1, core_count]; workspace_bytes is 0: the kernels keep their
// scratch per block, so any block_dim works):
//   MatMul, BatchMatMul  one block per output tile of kGemmTileM x kGemmTileN (times the batch);
//                        a single f32 row (the GEMV path): one per kGemvBlockColumns columns,
//                        an even count when more than one (2 host threads share it evenly)
//   Softmax, LayerNorm, Gather, KvCacheWrite  one block per 4096 (KvCacheWrite: 16384) elements,
//                        at most one per row (KvCacheWrite counts the new rows it writes)
//   ArgMax               one block per vector along the axis, up to the cores: a vector is never
//                        split (its maximum would need a second pass across blocks)
//   Attention (tiling-depend on valid_len, may tile on AICPU): L = valid_len when its value is
//                        given, else S_max; block_dim = min(core_count, B*H*T, B*H*ceil(L / 128));
//                        tiling_key = the key chunk the kernel walks (online softmax):
//                        0: L <= 128 (chunk 128), 1: L <= 1024 (chunk 1024), 2: above (chunk 8192).
//                        Every key gives the same result up to rounding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "graph/kernels/matmul.h"
#include "graph/ops/op_library.h"
#include "graph/ops/op_registry.h"
#include "graph/ir/tensor_access.h"

namespace npuflow::graph {
namespace {

// ---- shared helpers ---------------------------------------------------------------------------------

// Dims that can be equal at run time: the same, or a symbol against a static size.
bool DimsCompatible(const Dim& a, const Dim& b) { return a == b || a.is_static() != b.is_static(); }
// The better known of two compatible dims.
Dim MergeDims(const Dim& a, const Dim& b) { return a.is_static() ? a : b; }

Status NeedFloat(const OpDesc& op, std::string_view what, const TensorDesc& d) {
  if (IsFloat(d.dtype)) return Status::Ok();
  return Status::ParamInvalid("node '{}' ({}): {} must be a float tensor (f32, f16, bf16), got {}", op.name(),
                              op.type(), what, d.ToString());
}

Status NeedSameDtype(const OpDesc& op, std::string_view what_a, const TensorDesc& a, std::string_view what_b,
                     const TensorDesc& b) {
  if (a.dtype == b.dtype) return Status::Ok();
  return Status::ParamInvalid("node '{}' ({}): {} and {} dtypes differ: {} and {}", op.name(), op.type(), what_a,
                              what_b, DataTypeName(a.dtype), DataTypeName(b.dtype));
}

// An i32 tensor of shape [1] (valid_len, position).
Status NeedI32Scalar(const OpDesc& op, std::string_view what, const TensorDesc& d) {
  if (d.dtype == DataType::kInt32 && d.shape == Shape{1}) return Status::Ok();
  return Status::ParamInvalid("node '{}' ({}): {} must be i32[1], got {}", op.name(), op.type(), what, d.ToString());
}

StatusOr<std::int64_t> NormalizedAxis(const OpDesc& op, std::int64_t axis, std::size_t rank, const Shape& shape) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r)
    return Status::ParamInvalid("node '{}' ({}): axis {} out of range for {} (rank {})", op.name(), op.type(), axis,
                                shape.ToString(), rank);
  return axis < 0 ? axis + r : axis;
}

StatusOr<std::int64_t> StaticElements(const OpDesc& op, const TensorDesc& d) {
  auto n = d.shape.num_elements();
  if (!n)
    return Status::ParamInvalid("node '{}' ({}): tiling needs static shapes, got {}", op.name(), op.type(),
                                d.shape.ToString());
  return *n;
}

std::uint32_t ClampBlocks(std::int64_t want, std::int64_t max_useful, int core_count) {
  const std::int64_t hi = std::max<std::int64_t>(1, std::min<std::int64_t>(core_count, max_useful));
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(want, 1, hi));
}

// Product of dims [begin, end) of a static shape.
std::int64_t Product(const Shape& s, std::size_t begin, std::size_t end) {
  std::int64_t n = 1;
  for (std::size_t i = begin; i < end; ++i) n *= s.dim(i).size;
  return n;
}

// ---- MatMul / BatchMatMul ---------------------------------------------------------------------------
struct MatMulFlags {
  bool ta = false, tb = false;
  bool residual = false;  // the last input is added after the activation (MatMul only)
  int activation = 0;     // 0 none, 1 gelu (MatMul only)
  bool norm = false;      // a is LayerNorm(a, gamma, beta) first: the last two inputs (MatMul only)
  double norm_eps = 1e-5;
  bool stream = false;    // a GEMV's weights stream from memory: the short prefetch lead (MatMul only)
  // Inputs: a, b [, bias] [, residual] [, gamma, beta]; how many come before the residual.
  std::size_t Plain(std::size_t inputs) const { return inputs - (residual ? 1 : 0) - (norm ? 2 : 0); }
};

StatusOr<MatMulFlags> ReadMatMulFlags(const OpDesc& op) {
  MatMulFlags f;
  NPUFLOW_ASSIGN_OR_RETURN(f.ta, op.AttrOr<bool>("transpose_a", false));
  NPUFLOW_ASSIGN_OR_RETURN(f.tb, op.AttrOr<bool>("transpose_b", false));
  if (op.type() == "MatMul") {
    NPUFLOW_ASSIGN_OR_RETURN(f.residual, op.AttrOr<bool>("fused_residual", false));
    NPUFLOW_ASSIGN_OR_RETURN(std::string act, op.AttrOr<std::string>("fused_activation", std::string()));
    if (act == "gelu") {
      f.activation = 1;
    } else if (!act.empty()) {
      return Status::ParamInvalid("node '{}' (MatMul): fused_activation '{}': expected \"\" or \"gelu\"", op.name(), act);
    }
    NPUFLOW_ASSIGN_OR_RETURN(f.norm, op.AttrOr<bool>("fused_norm", false));
    NPUFLOW_ASSIGN_OR_RETURN(f.norm_eps, op.AttrOr<double>("fused_norm_epsilon", 1e-5));
    NPUFLOW_ASSIGN_OR_RETURN(f.stream, op.AttrOr<bool>("stream_weights", false));
  }
  return f;
}

// GPT-2's GELU (the tanh approximation), as the reference Gelu computes it.
float RefGeluOf(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

// The output's [M, N] from the last two dims of a and b, checking that their K agree.
StatusOr<std::pair<Dim, Dim>> InferMatrixDims(const OpDesc& op, const TensorDesc& a, const TensorDesc& b,
                                              MatMulFlags f) {
  const std::size_t ra = a.shape.rank(), rb = b.shape.rank();
  const Dim& m = a.shape.dim(f.ta ? ra - 1 : ra - 2);
  const Dim& ka = a.shape.dim(f.ta ? ra - 2 : ra - 1);
  const Dim& kb = b.shape.dim(f.tb ? rb - 1 : rb - 2);
  const Dim& n = b.shape.dim(f.tb ? rb - 2 : rb - 1);
  if (!DimsCompatible(ka, kb))
    return Status::ParamInvalid(
        "node '{}' ({}): a {} has K = {} but b {} has K = {} (transpose_a = {}, transpose_b = {})", op.name(),
        op.type(), a.shape.ToString(), ka.ToString(), b.shape.ToString(), kb.ToString(), f.ta, f.tb);
  return std::make_pair(m, n);
}

Status InferMatMul(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(op, "a", in[0]));
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(op, "b", in[1]));  // may be narrower than a: f16 weights
  if (in[0].shape.rank() != 2 || in[1].shape.rank() != 2)
    return Status::ParamInvalid("node '{}' (MatMul): needs 2-D a and b, got {} and {}", op.name(),
                                in[0].shape.ToString(), in[1].shape.ToString());
  NPUFLOW_ASSIGN_OR_RETURN(MatMulFlags f, ReadMatMulFlags(op));
  NPUFLOW_ASSIGN_OR_RETURN(auto mn, InferMatrixDims(op, in[0], in[1], f));
  const std::size_t plain = f.Plain(in.size());  // inputs before the residual
  if (in.size() < (f.residual ? 1u : 0u) + (f.norm ? 2u : 0u) || plain < 2 || plain > 3)
    return Status::ParamInvalid("node '{}' (MatMul): {} inputs with fused_residual {} and fused_norm {}: expected a, b "
                                "[, bias]{}{}",
                                op.name(), in.size(), f.residual, f.norm, f.residual ? ", residual" : "",
                                f.norm ? ", gamma, beta" : "");
  if (f.norm) {
    if (in[0].dtype != DataType::kFloat32 || f.ta || !in[0].shape.is_static() || in[0].shape.dim(0).size != 1)
      return Status::ParamInvalid("node '{}' (MatMul): fused_norm needs a to be one f32 row [1, K], not transposed; got "
                                  "{}{}",
                                  op.name(), in[0].ToString(), f.ta ? " with transpose_a" : "");
    for (std::size_t i : {in.size() - 2, in.size() - 1}) {
      const TensorDesc& v = in[i];
      if (v.dtype != DataType::kFloat32 || v.shape.rank() != 1 || !DimsCompatible(v.shape.dim(0), in[0].shape.dim(1)))
        return Status::ParamInvalid("node '{}' (MatMul): fused_norm's {} {} does not match K of a {} (f32 [K])",
                                    op.name(), i == in.size() - 2 ? "gamma" : "beta", v.ToString(),
                                    in[0].shape.ToString());
    }
  }
  if (plain == 3) {
    NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(op, "a", in[0], "bias", in[2]));
    if (in[2].shape.rank() != 1 || !DimsCompatible(in[2].shape.dim(0), mn.second))
      return Status::ParamInvalid("node '{}' (MatMul): bias {} does not match N = {} of a {} x b {}", op.name(),
                                  in[2].shape.ToString(), mn.second.ToString(), in[0].shape.ToString(),
                                  in[1].shape.ToString());
    mn.second = MergeDims(mn.second, in[2].shape.dim(0));
  }
  if (f.residual) {
    const TensorDesc& r = in[plain];
    NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(op, "a", in[0], "residual", r));
    if (r.shape.rank() != 2 || !DimsCompatible(r.shape.dim(0), mn.first) || !DimsCompatible(r.shape.dim(1), mn.second))
      return Status::ParamInvalid("node '{}' (MatMul): residual {} does not match the output [{}, {}]", op.name(),
                                  r.shape.ToString(), mn.first.ToString(), mn.second.ToString());
    mn.first = MergeDims(mn.first, r.shape.dim(0));
    mn.second = MergeDims(mn.second, r.shape.dim(1));
  }
  out.push_back(TensorDesc{in[0].dtype, Shape({mn.first, mn.second})});
  return Status::Ok();
}

Status InferBatchMatMul(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(op, "a", in[0], "b", in[1]));
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(op, "a", in[0]));
  const Shape &a = in[0].shape, &b = in[1].shape;
  if (a.rank() < 3 || b.rank() < 3)
    return Status::ParamInvalid("node '{}' (BatchMatMul): needs a and b of rank >= 3, got {} and {}", op.name(),
                                a.ToString(), b.ToString());
  NPUFLOW_ASSIGN_OR_RETURN(MatMulFlags f, ReadMatMulFlags(op));
  NPUFLOW_ASSIGN_OR_RETURN(auto mn, InferMatrixDims(op, in[0], in[1], f));
  const Shape batch_a(std::vector<Dim>(a.dims().begin(), a.dims().end() - 2));
  const Shape batch_b(std::vector<Dim>(b.dims().begin(), b.dims().end() - 2));
  auto batch = BroadcastShapes(batch_a, batch_b, op.name());
  if (!batch.ok())
    return Status::ParamInvalid("node '{}' (BatchMatMul): batch dims {} of a {} and {} of b {} do not broadcast",
                                op.name(), batch_a.ToString(), a.ToString(), batch_b.ToString(), b.ToString());
  std::vector<Dim> dims = batch->dims();
  dims.push_back(mn.first);
  dims.push_back(mn.second);
  out.push_back(TensorDesc{in[0].dtype, Shape(std::move(dims))});
  return Status::Ok();
}

Status RefLayerNorm(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out);

// out[batch][i][j] = sum_k A(i, k) * B(k, j) (+ bias[j]), batch offsets broadcast from out's.
Status RefMatMulCommon(const OpDesc& op, const std::vector<const Tensor*>& in, Tensor& c) {
  NPUFLOW_ASSIGN_OR_RETURN(MatMulFlags f, ReadMatMulFlags(op));
  const std::size_t plain = f.Plain(in.size());
  const Tensor* bias = plain == 3 ? in[2] : nullptr;
  const Tensor* residual = f.residual ? in[plain] : nullptr;
  std::vector<Tensor> normed;
  if (f.norm) {  // the prologue: a through op.LayerNorm's reference first
    OpDesc ln(op.name(), "LayerNorm");
    ln.SetAttr("epsilon", f.norm_eps);
    normed.push_back(ZeroTensor(in[0]->desc));
    NPUFLOW_RETURN_IF_ERROR(RefLayerNorm(ln, {in[0], in[in.size() - 2], in[in.size() - 1]}, normed));
  }
  const Tensor &a = f.norm ? normed[0] : *in[0], &b = *in[1];
  const Shape &sa = a.desc.shape, &sb = b.desc.shape, &sc = c.desc.shape;
  const std::size_t ra = sa.rank(), rb = sb.rank(), rc = sc.rank();
  const std::int64_t m = sc.dim(rc - 2).size, n = sc.dim(rc - 1).size;
  const std::int64_t k = f.ta ? sa.dim(ra - 2).size : sa.dim(ra - 1).size;
  const std::int64_t batches = Product(sc, 0, rc - 2);
  for (std::int64_t batch = 0; batch < batches; ++batch) {
    // The batch index of a and b: the output's batch multi-index, with broadcast (size-1) dims at 0.
    std::int64_t ia = 0, ib = 0, rest = batch, stride_a = 1, stride_b = 1;
    for (std::size_t d = rc - 2; d-- > 0;) {
      const std::int64_t idx = rest % sc.dim(d).size;
      rest /= sc.dim(d).size;
      const std::size_t back = rc - 2 - d;  // 1 for the innermost batch dim
      if (back + 2 <= ra) {
        const std::int64_t size = sa.dim(ra - 2 - back).size;
        ia += (size == 1 ? 0 : idx) * stride_a;
        stride_a *= size;
      }
      if (back + 2 <= rb) {
        const std::int64_t size = sb.dim(rb - 2 - back).size;
        ib += (size == 1 ? 0 : idx) * stride_b;
        stride_b *= size;
      }
    }
    const std::size_t a0 = static_cast<std::size_t>(ia * m * k), b0 = static_cast<std::size_t>(ib * k * n);
    const std::size_t c0 = static_cast<std::size_t>(batch * m * n);
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        float acc = 0;
        for (std::int64_t kk = 0; kk < k; ++kk) {
          const float x = LoadF(a, a0 + static_cast<std::size_t>(f.ta ? kk * m + i : i * k + kk));
          const float y = LoadF(b, b0 + static_cast<std::size_t>(f.tb ? j * k + kk : kk * n + j));
          acc += x * y;
        }
        if (bias) acc += LoadF(*bias, static_cast<std::size_t>(j));
        if (f.activation == 1) acc = RefGeluOf(acc);
        if (residual) acc += LoadF(*residual, c0 + static_cast<std::size_t>(i * n + j));
        StoreF(c, c0 + static_cast<std::size_t>(i * n + j), acc);
      }
    }
  }
  return Status::Ok();
}

Status RefMatMul(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return RefMatMulCommon(op, in, out[0]);
}

StatusOr<TilingInfo> TileMatMul(const OpDesc& op, const std::vector<TensorDesc>& in, const std::vector<const Tensor*>&,
                                int core_count) {
  for (const TensorDesc& d : in) NPUFLOW_RETURN_IF_ERROR(StaticElements(op, d).status());
  std::vector<TensorDesc> out;
  NPUFLOW_RETURN_IF_ERROR(op.type() == "MatMul" ? InferMatMul(op, in, out) : InferBatchMatMul(op, in, out));
  const Shape& c = out[0].shape;
  const std::size_t r = c.rank();
  TilingInfo t;
  if (RunsAsGemv(c, in[0].dtype)) {
    // The GEMV path (one f32 row): blocks of kGemvBlockColumns output columns. Each block streams
    // its own rows of B, so a block must be long enough that the start-up of the stream and the
    // dispatch do not dominate (128 columns cost GPT-2 10-25% of its decode speed against 512).
    // An even count when more than one, so 2 host threads share the work evenly.
    std::int64_t units = (c.dim(r - 1).size + kGemvBlockColumns - 1) / kGemvBlockColumns;
    if (units > 1) units += units % 2;
    t.block_dim = ClampBlocks(units, units, core_count);
    return t;
  }
  const std::int64_t tiles = Product(c, 0, r - 2) * ((c.dim(r - 2).size + kGemmTileM - 1) / kGemmTileM) *
                             ((c.dim(r - 1).size + kGemmTileN - 1) / kGemmTileN);
  t.block_dim = ClampBlocks(tiles, tiles, core_count);
  return t;
}

// Work the cost model cannot measure: never caps a split.
constexpr OpWork kUnknownWork{std::numeric_limits<double>::infinity(), 0};

// Every input's bytes read and the output written once; 2 M N K flops.
OpWork WorkMatMul(const OpDesc& op, const std::vector<TensorDesc>& in, const std::vector<const Tensor*>&) {
  auto flags = ReadMatMulFlags(op);
  std::vector<TensorDesc> out;
  if (!flags.ok() || !(op.type() == "MatMul" ? InferMatMul(op, in, out) : InferBatchMatMul(op, in, out)).ok())
    return kUnknownWork;
  const std::optional<double> in_bytes = StaticBytes(in), out_bytes = StaticBytes(out);
  const std::optional<std::int64_t> out_elements = out[0].shape.num_elements();
  const Shape& a = in[0].shape;
  if (!in_bytes || !out_bytes || !out_elements || a.rank() < 2) return kUnknownWork;
  const Dim& k = a.dim(flags->ta ? a.rank() - 2 : a.rank() - 1);
  if (!k.is_static()) return kUnknownWork;
  return {*in_bytes + *out_bytes, 2.0 * static_cast<double>(*out_elements) * static_cast<double>(k.size)};
}

Status ParamsMatMul(const OpDesc& op, const std::vector<TensorDesc>& in, KernelParams& p) {
  NPUFLOW_ASSIGN_OR_RETURN(MatMulFlags f, ReadMatMulFlags(op));
  p.ints[0] = f.ta;
  p.ints[1] = f.tb;
  p.ints[2] = f.Plain(in.size()) == 3 ? 1 : 0;
  p.ints[3] = f.residual ? 1 : 0;
  p.ints[4] = f.activation;
  p.ints[5] = f.norm ? 1 : 0;
  p.ints[6] = f.stream ? 1 : 0;
  p.floats[0] = static_cast<float>(f.norm_eps);
  return Status::Ok();
}

// A static shape cut at op's attr axis (default -1): the vectors along it are `outer` x `inner`,
// each `len` long, element a of vector (o, i) at (o * len + a) * inner + i.
struct AxisVectors {
  std::size_t axis = 0;
  std::int64_t outer = 1, len = 1, inner = 1;
  std::int64_t vectors() const { return outer * inner; }
};
StatusOr<AxisVectors> VectorsAlongAxis(const OpDesc& op, const Shape& s) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.AttrOr<std::int64_t>("axis", -1));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis, NormalizedAxis(op, axis_attr, s.rank(), s));
  const auto ax = static_cast<std::size_t>(axis);
  return AxisVectors{ax, Product(s, 0, ax), s.dim(ax).size, Product(s, ax + 1, s.rank())};
}

// ---- Softmax ----------------------------------------------------------------------------------------
Status InferSoftmax(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(op, "x", in[0]));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis, op.AttrOr<std::int64_t>("axis", -1));
  NPUFLOW_RETURN_IF_ERROR(NormalizedAxis(op, axis, in[0].shape.rank(), in[0].shape).status());
  out.push_back(in[0]);
  return Status::Ok();
}

Status RefSoftmax(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  NPUFLOW_ASSIGN_OR_RETURN(AxisVectors split, VectorsAlongAxis(op, x.desc.shape));
  const std::int64_t outer = split.outer, len = split.len, inner = split.inner;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t a) { return static_cast<std::size_t>((o * len + a) * inner + i); };
      float mx = -std::numeric_limits<float>::infinity();
      for (std::int64_t a = 0; a < len; ++a) mx = std::max(mx, LoadF(x, at(a)));
      float sum = 0;
      for (std::int64_t a = 0; a < len; ++a) sum += std::exp(LoadF(x, at(a)) - mx);
      for (std::int64_t a = 0; a < len; ++a) StoreF(out[0], at(a), std::exp(LoadF(x, at(a)) - mx) / sum);
    }
  }
  return Status::Ok();
}

// One block per `per_block` elements, at most one per row and per core.
TilingInfo TileRows(std::int64_t elements, std::int64_t rows, std::int64_t per_block, int core_count) {
  TilingInfo t;
  t.block_dim = ClampBlocks((elements + per_block - 1) / per_block, rows, core_count);
  return t;
}

StatusOr<TilingInfo> TileSoftmax(const OpDesc& op, const std::vector<TensorDesc>& in, const std::vector<const Tensor*>&,
                                 int core_count) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t n, StaticElements(op, in[0]));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.AttrOr<std::int64_t>("axis", -1));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis, NormalizedAxis(op, axis_attr, in[0].shape.rank(), in[0].shape));
  const std::int64_t len = in[0].shape.dim(static_cast<std::size_t>(axis)).size;
  return TileRows(n, len == 0 ? 0 : n / len, 4096, core_count);
}

// Softmax, ArgMax: ints[0] the axis, normalized.
Status ParamsAxisOrLast(const OpDesc& op, const std::vector<TensorDesc>& in, KernelParams& p) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis, op.AttrOr<std::int64_t>("axis", -1));
  NPUFLOW_ASSIGN_OR_RETURN(p.ints[0], NormalizedAxis(op, axis, in[0].shape.rank(), in[0].shape));
  return Status::Ok();
}

// ---- ArgMax -----------------------------------------------------------------------------------------
Status InferArgMax(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(op, "x", in[0]));
  const Shape& x = in[0].shape;
  if (x.rank() == 0)
    return Status::ParamInvalid("node '{}' (ArgMax): x must have rank >= 1, got {}", op.name(), x.ToString());
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.AttrOr<std::int64_t>("axis", -1));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis, NormalizedAxis(op, axis_attr, x.rank(), x));
  const Dim& along = x.dim(static_cast<std::size_t>(axis));
  if (along.is_static() && along.size - 1 > std::numeric_limits<std::int32_t>::max())
    return Status::ParamInvalid("node '{}' (ArgMax): axis {} is {} long; an i32 index holds at most {}", op.name(),
                                axis, along.size, std::numeric_limits<std::int32_t>::max());
  std::vector<Dim> dims = x.dims();
  dims.erase(dims.begin() + axis);
  out.push_back(TensorDesc{DataType::kInt32, Shape(std::move(dims))});
  return Status::Ok();
}

Status RefArgMax(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  NPUFLOW_ASSIGN_OR_RETURN(AxisVectors split, VectorsAlongAxis(op, x.desc.shape));
  const std::int64_t outer = split.outer, len = split.len, inner = split.inner;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      // A plain running scan: the first strictly larger element.
      float best_value = -std::numeric_limits<float>::infinity();
      std::int64_t best = -1;
      for (std::int64_t a = 0; a < len; ++a) {
        const float v = LoadF(x, static_cast<std::size_t>((o * len + a) * inner + i));
        if (v > best_value) {
          best_value = v;
          best = a;
        }
      }
      StoreI(out[0], static_cast<std::size_t>(o * inner + i), best);
    }
  }
  return Status::Ok();
}

StatusOr<TilingInfo> TileArgMax(const OpDesc& op, const std::vector<TensorDesc>& in, const std::vector<const Tensor*>&,
                                int core_count) {
  NPUFLOW_RETURN_IF_ERROR(StaticElements(op, in[0]).status());
  NPUFLOW_ASSIGN_OR_RETURN(AxisVectors split, VectorsAlongAxis(op, in[0].shape));
  return TileRows(split.vectors(), split.vectors(), 1, core_count);
}

// ---- LayerNorm --------------------------------------------------------------------------------------
Status InferLayerNorm(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(op, "x", in[0]));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(op, "x", in[0], "gamma", in[1]));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(op, "x", in[0], "beta", in[2]));
  const Shape& x = in[0].shape;
  if (x.rank() == 0)
    return Status::ParamInvalid("node '{}' (LayerNorm): x must have rank >= 1, got {}", op.name(), x.ToString());
  const Dim& last = x.dim(x.rank() - 1);
  for (int i : {1, 2}) {
    const Shape& s = in[i].shape;
    if (s.rank() != 1 || !DimsCompatible(s.dim(0), last))
      return Status::ParamInvalid("node '{}' (LayerNorm): {} {} does not match the last dim {} of x {}", op.name(),
                                  i == 1 ? "gamma" : "beta", s.ToString(), last.ToString(), x.ToString());
  }
  NPUFLOW_RETURN_IF_ERROR(op.AttrOr<double>("epsilon", 1e-5).status());
  out.push_back(in[0]);
  return Status::Ok();
}

Status RefLayerNorm(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(double eps, op.AttrOr<double>("epsilon", 1e-5));
  const Tensor &x = *in[0], &gamma = *in[1], &beta = *in[2];
  const Shape& s = x.desc.shape;
  const std::int64_t d = s.dim(s.rank() - 1).size;
  const std::int64_t rows = d == 0 ? 0 : Product(s, 0, s.rank()) / d;
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto base = static_cast<std::size_t>(r * d);
    float mean = 0;
    for (std::int64_t i = 0; i < d; ++i) mean += LoadF(x, base + i);
    mean /= static_cast<float>(d);
    float var = 0;
    for (std::int64_t i = 0; i < d; ++i) {
      const float c = LoadF(x, base + i) - mean;
      var += c * c;
    }
    var /= static_cast<float>(d);
    const float inv = 1.f / std::sqrt(var + static_cast<float>(eps));
    for (std::int64_t i = 0; i < d; ++i) {
      const auto k = static_cast<std::size_t>(i);
      StoreF(out[0], base + k, (LoadF(x, base + k) - mean) * inv * LoadF(gamma, k) + LoadF(beta, k));
    }
  }
  return Status::Ok();
}

StatusOr<TilingInfo> TileLayerNorm(const OpDesc& op, const std::vector<TensorDesc>& in,
                                   const std::vector<const Tensor*>&, int core_count) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t n, StaticElements(op, in[0]));
  const std::int64_t d = in[0].shape.dim(in[0].shape.rank() - 1).size;
  return TileRows(n, d == 0 ? 0 : n / d, 4096, core_count);
}

Status ParamsLayerNorm(const OpDesc& op, const std::vector<TensorDesc>&, KernelParams& p) {
  NPUFLOW_ASSIGN_OR_RETURN(double eps, op.AttrOr<double>("epsilon", 1e-5));
  p.floats[0] = static_cast<float>(eps);
  return Status::Ok();
}

// ---- Gather -----------------------------------------------------------------------------------------
Status InferGather(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  const Shape &p = in[0].shape, &idx = in[1].shape;
  if (!IsInteger(in[1].dtype))
    return Status::ParamInvalid("node '{}' (Gather): indices must be i32 or i64, got {}", op.name(), in[1].ToString());
  if (p.rank() == 0)
    return Status::ParamInvalid("node '{}' (Gather): params must have rank >= 1, got {}", op.name(), p.ToString());
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.AttrOr<std::int64_t>("axis", 0));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis, NormalizedAxis(op, axis_attr, p.rank(), p));
  std::vector<Dim> dims(p.dims().begin(), p.dims().begin() + axis);
  dims.insert(dims.end(), idx.dims().begin(), idx.dims().end());
  dims.insert(dims.end(), p.dims().begin() + axis + 1, p.dims().end());
  out.push_back(TensorDesc{in[0].dtype, Shape(std::move(dims))});
  return Status::Ok();
}

Status RefGather(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &params = *in[0], &indices = *in[1];
  const Shape& s = params.desc.shape;
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.AttrOr<std::int64_t>("axis", 0));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis, NormalizedAxis(op, axis_attr, s.rank(), s));
  const auto ax = static_cast<std::size_t>(axis);
  const std::int64_t outer = Product(s, 0, ax), len = s.dim(ax).size, inner = Product(s, ax + 1, s.rank());
  const std::int64_t count = indices.desc.shape.num_elements().value_or(0);
  const std::size_t row_bytes = static_cast<std::size_t>(inner) * DataTypeSize(params.desc.dtype);
  for (std::int64_t n = 0; n < count; ++n) {
    const std::int64_t i = LoadI(indices, static_cast<std::size_t>(n));
    if (i < 0 || i >= len)
      return Status::ParamInvalid("node '{}' (Gather): index {} out of range [0, {}) on axis {}", op.name(), i, len,
                                  axis);
  }
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t n = 0; n < count; ++n) {
      const std::int64_t i = LoadI(indices, static_cast<std::size_t>(n));
      if (row_bytes == 0) continue;  // zero-width rows: nothing to copy (and no data pointer)
      std::memcpy(out[0].data.data() + static_cast<std::size_t>(o * count + n) * row_bytes,
                  params.data.data() + static_cast<std::size_t>(o * len + i) * row_bytes, row_bytes);
    }
  }
  return Status::Ok();
}

StatusOr<TilingInfo> TileGather(const OpDesc& op, const std::vector<TensorDesc>& in, const std::vector<const Tensor*>&,
                                int core_count) {
  std::vector<TensorDesc> out;
  for (const TensorDesc& d : in) NPUFLOW_RETURN_IF_ERROR(StaticElements(op, d).status());
  NPUFLOW_RETURN_IF_ERROR(InferGather(op, in, out));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t n, StaticElements(op, out[0]));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.AttrOr<std::int64_t>("axis", 0));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis, NormalizedAxis(op, axis_attr, in[0].shape.rank(), in[0].shape));
  const std::int64_t rows =
      Product(in[0].shape, 0, static_cast<std::size_t>(axis)) * in[1].shape.num_elements().value_or(0);
  return TileRows(n, rows, 4096, core_count);
}

Status ParamsGather(const OpDesc& op, const std::vector<TensorDesc>& in, KernelParams& p) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis, op.AttrOr<std::int64_t>("axis", 0));
  NPUFLOW_ASSIGN_OR_RETURN(p.ints[0], NormalizedAxis(op, axis, in[0].shape.rank(), in[0].shape));
  return Status::Ok();
}

// ---- KV cache: shared shape checks ------------------------------------------------------------------
// rows [(B,) H, T, D] against cache [(B,) H, S_max, D]: same rank (3 or 4), same leading dims and D.
Status CheckRowsAgainstCache(const OpDesc& op, std::string_view rows_what, const TensorDesc& rows,
                             std::string_view cache_what, const TensorDesc& cache) {
  const Shape &r = rows.shape, &c = cache.shape;
  if (c.rank() != 3 && c.rank() != 4)
    return Status::ParamInvalid("node '{}' ({}): {} must be [H, S_max, D] or [B, H, S_max, D], got {}", op.name(),
                                op.type(), cache_what, c.ToString());
  bool ok = r.rank() == c.rank();
  for (std::size_t i = 0; ok && i < r.rank(); ++i)
    if (i != r.rank() - 2) ok = DimsCompatible(r.dim(i), c.dim(i));
  if (!ok)
    return Status::ParamInvalid("node '{}' ({}): {} {} does not match {} {} (all dims but the rows must agree)",
                                op.name(), op.type(), rows_what, r.ToString(), cache_what, c.ToString());
  const Dim &t = r.dim(r.rank() - 2), &s = c.dim(c.rank() - 2);
  if (t.is_static() && s.is_static() && t.size > s.size)
    return Status::ParamInvalid("node '{}' ({}): {} {} has {} rows, more than the {} rows of {} {}", op.name(),
                                op.type(), rows_what, r.ToString(), t.size, s.size, cache_what, c.ToString());
  return Status::Ok();
}

// ---- Attention --------------------------------------------------------------------------------------
Status InferAttention(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_RETURN_IF_ERROR(NeedFloat(op, "q", in[0]));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(op, "q", in[0], "k_cache", in[1]));
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(op, "q", in[0], "v_cache", in[2]));
  NPUFLOW_RETURN_IF_ERROR(NeedI32Scalar(op, "valid_len", in[3]));
  NPUFLOW_RETURN_IF_ERROR(CheckRowsAgainstCache(op, "q", in[0], "k_cache", in[1]));
  const Shape &k = in[1].shape, &v = in[2].shape;
  bool same = k.rank() == v.rank();
  for (std::size_t i = 0; same && i < k.rank(); ++i) same = DimsCompatible(k.dim(i), v.dim(i));
  if (!same)
    return Status::ParamInvalid("node '{}' (Attention): k_cache {} and v_cache {} differ", op.name(), k.ToString(),
                                v.ToString());
  NPUFLOW_RETURN_IF_ERROR(op.AttrOr<double>("scale", 1.0).status());
  out.push_back(in[0]);
  return Status::Ok();
}

StatusOr<float> AttentionScale(const OpDesc& op, std::int64_t d) {
  if (op.HasAttr("scale")) {
    NPUFLOW_ASSIGN_OR_RETURN(double s, op.Attr<double>("scale"));
    return static_cast<float>(s);
  }
  return d > 0 ? 1.f / std::sqrt(static_cast<float>(d)) : 1.f;
}

Status RefAttention(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &q = *in[0], &kc = *in[1], &vc = *in[2];
  const Shape& qs = q.desc.shape;
  const std::size_t r = qs.rank();
  const std::int64_t bh = Product(qs, 0, r - 2), t_rows = qs.dim(r - 2).size, d = qs.dim(r - 1).size;
  const std::int64_t s_max = kc.desc.shape.dim(r - 2).size;
  const std::int64_t valid = LoadI(*in[3], 0);
  if (valid < t_rows)
    return Status::ParamInvalid("node '{}' (Attention): valid_len {} is less than the {} query rows", op.name(), valid,
                                t_rows);
  if (valid > s_max)
    return Status::ParamInvalid("node '{}' (Attention): valid_len {} exceeds the cache length S_max = {}", op.name(),
                                valid, s_max);
  NPUFLOW_ASSIGN_OR_RETURN(float scale, AttentionScale(op, d));
  std::vector<float> w(static_cast<std::size_t>(valid));
  for (std::int64_t h = 0; h < bh; ++h) {
    for (std::int64_t t = 0; t < t_rows; ++t) {
      const std::int64_t p = valid - t_rows + t;  // the query's position: it sees rows 0..p
      const auto qrow = static_cast<std::size_t>((h * t_rows + t) * d);
      float mx = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j <= p; ++j) {
        const auto krow = static_cast<std::size_t>((h * s_max + j) * d);
        float dot = 0;
        for (std::int64_t i = 0; i < d; ++i) dot += LoadF(q, qrow + i) * LoadF(kc, krow + i);
        w[j] = dot * scale;
        mx = std::max(mx, w[j]);
      }
      float sum = 0;
      for (std::int64_t j = 0; j <= p; ++j) sum += (w[j] = std::exp(w[j] - mx));
      for (std::int64_t i = 0; i < d; ++i) {
        float acc = 0;
        for (std::int64_t j = 0; j <= p; ++j)
          acc += w[j] / sum * LoadF(vc, static_cast<std::size_t>((h * s_max + j) * d + i));
        StoreF(out[0], qrow + i, acc);
      }
    }
  }
  return Status::Ok();
}

StatusOr<TilingInfo> TileAttention(const OpDesc& op, const std::vector<TensorDesc>& in,
                                   const std::vector<const Tensor*>& depend, int core_count) {
  for (const TensorDesc& d : in) NPUFLOW_RETURN_IF_ERROR(StaticElements(op, d).status());
  const Shape& qs = in[0].shape;
  const std::size_t r = qs.rank();
  const std::int64_t bh = Product(qs, 0, r - 2), t_rows = qs.dim(r - 2).size;
  std::int64_t len = in[1].shape.dim(r - 2).size;  // S_max when valid_len is not known
  if (!depend.empty() && depend[0] != nullptr) {
    const Tensor& v = *depend[0];
    if (v.desc.dtype != DataType::kInt32 || v.data.size() < 4)
      return Status::ParamInvalid("node '{}' (Attention): tiling needs valid_len as i32[1], got {}", op.name(),
                                  v.desc.ToString());
    len = std::clamp<std::int64_t>(LoadI(v, 0), 0, len);  // the kernel reports a bad value itself
  }
  TilingInfo t;
  t.block_dim = ClampBlocks(bh * ((len + 127) / 128), bh * t_rows, core_count);
  t.tiling_key = len <= 128 ? 0 : len <= 1024 ? 1 : 2;
  return t;
}

// q read and the output written; the first valid_len rows of both caches read (all S_max rows
// when valid_len is not known); 4 flops per (query row, cache row, element): scores and sums.
OpWork WorkAttention(const OpDesc&, const std::vector<TensorDesc>& in, const std::vector<const Tensor*>& depend) {
  const Shape& qs = in[0].shape;
  const std::size_t r = qs.rank();
  if (r < 2 || !qs.is_static() || in[1].shape.rank() != r || !in[1].shape.dim(r - 2).is_static()) return kUnknownWork;
  const std::int64_t bh = Product(qs, 0, r - 2), t_rows = qs.dim(r - 2).size, d = qs.dim(r - 1).size;
  std::int64_t len = in[1].shape.dim(r - 2).size;
  if (!depend.empty() && depend[0] != nullptr && depend[0]->desc.dtype == DataType::kInt32 &&
      depend[0]->data.size() >= 4)
    len = std::clamp<std::int64_t>(LoadI(*depend[0], 0), 0, len);
  const double elem = static_cast<double>(DataTypeSize(in[0].dtype));
  const double q = static_cast<double>(bh * t_rows * d);
  const double cache_rows = static_cast<double>(bh * len * d);
  return {elem * (2 * q + 2 * cache_rows), 4.0 * q * static_cast<double>(len)};
}

Status ParamsAttention(const OpDesc& op, const std::vector<TensorDesc>& in, KernelParams& p) {
  const Shape& qs = in[0].shape;
  NPUFLOW_ASSIGN_OR_RETURN(p.floats[0], AttentionScale(op, qs.dim(qs.rank() - 1).size));
  return Status::Ok();
}

// ---- KvCacheWrite -----------------------------------------------------------------------------------
Status InferKvCacheWrite(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_RETURN_IF_ERROR(NeedSameDtype(op, "cache", in[0], "new_rows", in[1]));
  NPUFLOW_RETURN_IF_ERROR(NeedI32Scalar(op, "position", in[2]));
  NPUFLOW_RETURN_IF_ERROR(CheckRowsAgainstCache(op, "new_rows", in[1], "cache", in[0]));
  out.push_back(in[0]);
  return Status::Ok();
}

Status RefKvCacheWrite(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &cache = *in[0], &rows = *in[1];
  const Shape& cs = cache.desc.shape;
  const std::size_t r = cs.rank();
  const std::int64_t bh = Product(cs, 0, r - 2), s_max = cs.dim(r - 2).size, d = cs.dim(r - 1).size;
  const std::int64_t t_rows = rows.desc.shape.dim(r - 2).size;
  const std::int64_t pos = LoadI(*in[2], 0);
  if (pos < 0 || pos + t_rows > s_max)
    return Status::ParamInvalid("node '{}' (KvCacheWrite): position {} + {} new rows does not fit the cache length {}",
                                op.name(), pos, t_rows, s_max);
  out[0].data = cache.data;
  const std::size_t row_bytes = static_cast<std::size_t>(d) * DataTypeSize(cache.desc.dtype);
  for (std::int64_t h = 0; h < bh && row_bytes > 0; ++h)
    for (std::int64_t t = 0; t < t_rows; ++t)
      std::memcpy(out[0].data.data() + static_cast<std::size_t>(h * s_max + pos + t) * row_bytes,
                  rows.data.data() + static_cast<std::size_t>(h * t_rows + t) * row_bytes, row_bytes);
  return Status::Ok();
}

StatusOr<TilingInfo> TileKvCacheWrite(const OpDesc& op, const std::vector<TensorDesc>& in,
                                      const std::vector<const Tensor*>&, int core_count) {
  for (const TensorDesc& d : in) NPUFLOW_RETURN_IF_ERROR(StaticElements(op, d).status());
  // Sized by the rows it writes (new_rows): in place, the rest of the cache is not touched. (Out of
  // place the kernel also copies the old rows; any block_dim gives the same bytes.)
  const Shape& rs = in[1].shape;
  const std::int64_t d = rs.dim(rs.rank() - 1).size;
  const std::int64_t n = Product(rs, 0, rs.rank());
  return TileRows(n, d == 0 ? 0 : n / d, 16384, core_count);
}

}  // namespace

void RegisterNnOps(OpRegistry& r) {
  r.Register({.type = "MatMul", .min_inputs = 2, .max_inputs = 6, .engine = OpEngine::kAICore, .infer = &InferMatMul,
              .reference = &RefMatMul, .tiling = &TileMatMul, .work = &WorkMatMul,
              .params = &ParamsMatMul, .device_kernel = DeviceKernelName("MatMul")});
  r.Register({.type = "BatchMatMul", .min_inputs = 2, .max_inputs = 2, .engine = OpEngine::kAICore,
              .infer = &InferBatchMatMul, .reference = &RefMatMul, .tiling = &TileMatMul, .work = &WorkMatMul,
              .params = &ParamsMatMul,
              .device_kernel = DeviceKernelName("BatchMatMul")});
  r.Register({.type = "Softmax", .min_inputs = 1, .max_inputs = 1, .engine = OpEngine::kAICore,
              .infer = &InferSoftmax, .reference = &RefSoftmax, .tiling = &TileSoftmax, .params = &ParamsAxisOrLast,
              .device_kernel = DeviceKernelName("Softmax")});
  r.Register({.type = "ArgMax", .min_inputs = 1, .max_inputs = 1, .engine = OpEngine::kAICore,
              .infer = &InferArgMax, .reference = &RefArgMax, .tiling = &TileArgMax, .params = &ParamsAxisOrLast,
              .device_kernel = DeviceKernelName("ArgMax")});
  r.Register({.type = "LayerNorm", .min_inputs = 3, .max_inputs = 3, .engine = OpEngine::kAICore,
              .infer = &InferLayerNorm, .reference = &RefLayerNorm, .tiling = &TileLayerNorm,
              .params = &ParamsLayerNorm, .device_kernel = DeviceKernelName("LayerNorm")});
  r.Register({.type = "Gather", .min_inputs = 2, .max_inputs = 2, .engine = OpEngine::kAICore, .infer = &InferGather,
              .reference = &RefGather, .tiling = &TileGather, .params = &ParamsGather,
              .device_kernel = DeviceKernelName("Gather")});
  r.Register({.type = "Attention", .min_inputs = 4, .max_inputs = 4, .engine = OpEngine::kAICore,
              .infer = &InferAttention, .reference = &RefAttention, .tiling = &TileAttention,
              .work = &WorkAttention, .tiling_depend_inputs = {3}, .tiling_on_aicpu = true, .params = &ParamsAttention,
              .device_kernel = DeviceKernelName("Attention")});
  r.Register({.type = "KvCacheWrite", .min_inputs = 3, .max_inputs = 3, .engine = OpEngine::kAICore,
              .infer = &InferKvCacheWrite, .reference = &RefKvCacheWrite, .tiling = &TileKvCacheWrite,
              .device_kernel = DeviceKernelName("KvCacheWrite"), .inplace = {0},
              .updates_inplace_input = true});
}

}  // namespace npuflow::graph
