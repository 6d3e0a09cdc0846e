// Device kernels of the tensor-layout ops (npu_sim kernels "op.<Type>", AICore):
//
//   op.Reshape    [x, y, workspace, params]; ints: none. Copies x to y, skipped when y is x (in place).
//   op.Transpose  [x, y, workspace, params]; ints[0..rank) = perm.
//   op.Concat     [x0..xn-1, y, workspace, params]; ints[0] = axis (0..rank-1).
//   op.Split      [x, y0..ym-1, workspace, params]; ints[0] = axis (0..rank-1).
//   op.Slice      [x, y, workspace, params]; ints[d] = begin_d | stride_d << 32; y's shape gives the
//                 count per dim.
//   op.Cast       [x, y, workspace, params]; ints: none (the dtypes are the tensors').
//
// Block `block_idx` of `block_dim` writes the elements BlockRange(n) of its outputs (Split: of its
// input, which covers the outputs once), so any block_dim >= 1 gives the same bytes. The kernels
// check the params against the tensors before touching memory: corrupt params are an error, never
// an out-of-bounds access.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "graph/ir/half.h"
#include "graph/kernels/kernel_abi.h"
#include "graph/kernels/device_kernels.h"

namespace npuflow::graph {
namespace {

using npu_sim::ChipSpec;
using npu_sim::KernelContext;
using npu_sim::VTime;

// Calls f.template operator()<T>() with the unsigned integer type of `size` bytes.
template <typename F>
Status BySize(std::size_t size, F&& f) {
  switch (size) {
    case 1: return f.template operator()<std::uint8_t>();
    case 2: return f.template operator()<std::uint16_t>();
    case 4: return f.template operator()<std::uint32_t>();
    case 8: return f.template operator()<std::uint64_t>();
  }
  return Status::Internal("element size {} not supported", size);
}

Status CheckCounts(const KernelParams& p, std::string_view kernel, std::uint32_t inputs, std::uint32_t outputs) {
  if (p.num_inputs != inputs || p.num_outputs != outputs)
    return Status::ParamInvalid("{}: {} inputs and {} outputs, expected {} and {}", kernel, p.num_inputs,
                                p.num_outputs, inputs, outputs);
  return Status::Ok();
}

Status CheckSameDtype(const KernelTensor& a, const KernelTensor& b, std::string_view kernel) {
  if (a.dtype != b.dtype)
    return Status::ParamInvalid("{}: dtypes {} and {} differ", kernel, DataTypeName(a.data_type()),
                                DataTypeName(b.data_type()));
  return Status::Ok();
}

// A block's cost: it reads and writes its share of the outputs' elements (nothing when Reshape
// runs in place).
VTime CopyCost(const KernelContext& ctx, const ChipSpec& chip, bool skip_in_place) {
  auto view = OpKernelView::Open(ctx);
  if (!view.ok() || view->params().num_outputs == 0) return BlockCost(chip, 0, 0);
  const KernelParams& p = view->params();
  if (skip_in_place && view->output_addr(0) == view->input_addr(0)) return BlockCost(chip, 0, 0);
  std::int64_t n = 0;
  for (std::uint32_t i = 0; i < p.num_outputs; ++i) n += p.output(i).num_elements();
  const auto [b, e] = BlockRange(n, ctx.block_idx(), ctx.block_dim());
  const double bytes = static_cast<double>(e - b) *
                       static_cast<double>(DataTypeSize(p.input(0).data_type()) + DataTypeSize(p.output(0).data_type()));
  return BlockCost(chip, bytes, 0);
}
VTime CopyCostFn(const KernelContext& ctx, const ChipSpec& chip) { return CopyCost(ctx, chip, false); }
VTime ReshapeCostFn(const KernelContext& ctx, const ChipSpec& chip) { return CopyCost(ctx, chip, true); }

// ---- element copies: HcomAllReduce over one rank, Reshape -----------------------------------------
// Copies input 0 to output 0 element for element (this block's share): Reshape (skipped when it
// is a view in place) and the single-device HcomAllReduce, whose sum over one rank is the input.
Status CopyElementsRun(KernelContext& ctx, const char* name, bool skip_in_place) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
  const KernelParams& p = v.params();
  NPUFLOW_RETURN_IF_ERROR(CheckCounts(p, name, 1, 1));
  NPUFLOW_RETURN_IF_ERROR(CheckSameDtype(p.input(0), p.output(0), name));
  const std::int64_t n = p.output(0).num_elements();
  if (p.input(0).num_elements() != n)
    return Status::ParamInvalid("{}: {} input elements, {} output elements", name, p.input(0).num_elements(), n);
  if (skip_in_place && v.output_addr(0) == v.input_addr(0)) return Status::Ok();  // in place: a view
  const auto range = BlockRange(n, v.block_idx(), v.block_dim());
  const std::int64_t b = range.first, e = range.second;  // captured below: no structured binding (clang 14)
  if (b == e) return Status::Ok();
  return BySize(DataTypeSize(p.output(0).data_type()), [&]<typename T>() -> Status {
    NPUFLOW_ASSIGN_OR_RETURN(auto x, v.Input<const T>(0));
    NPUFLOW_ASSIGN_OR_RETURN(auto y, v.Output<T>(0));
    std::memmove(y.data() + b, x.data() + b, static_cast<std::size_t>(e - b) * sizeof(T));
    return Status::Ok();
  });
}

Status AllReduceRun(KernelContext& ctx) { return CopyElementsRun(ctx, "op.HcomAllReduce", false); }
Status ReshapeRun(KernelContext& ctx) { return CopyElementsRun(ctx, "op.Reshape", true); }

// ---- strided gather (Transpose, Slice) --------------------------------------------------------------
// y[i] = x[base + sum_k index_k(i) * stride[k]] over the row-major dims of y.
struct Gather {
  int rank = 0;
  std::int64_t dims[kMaxKernelRank] = {};
  std::int64_t stride[kMaxKernelRank] = {};
  std::int64_t base = 0;

  // Drops size-1 dims and merges neighbours that walk the input as one dim.
  void Coalesce() {
    int r = 0;
    for (int k = 0; k < rank; ++k) {
      if (dims[k] == 1) continue;
      if (r > 0 && stride[r - 1] == stride[k] * dims[k]) {
        dims[r - 1] *= dims[k];
        stride[r - 1] = stride[k];
        continue;
      }
      dims[r] = dims[k];
      stride[r] = stride[k];
      ++r;
    }
    if (r == 0) {  // a single element
      dims[0] = 1;
      stride[0] = 1;
      r = 1;
    }
    rank = r;
  }
};

template <typename T>
void RunGather(const Gather& g, const T* x, T* y, std::int64_t begin, std::int64_t end) {
  const int r = g.rank;
  const std::int64_t inner = g.dims[r - 1], step = g.stride[r - 1];
  std::int64_t index[kMaxKernelRank] = {};
  std::int64_t q = begin / inner, j = begin % inner, outer_off = g.base;
  for (int k = r - 2; k >= 0; --k) {
    index[k] = q % g.dims[k];
    q /= g.dims[k];
    outer_off += index[k] * g.stride[k];
  }
  for (std::int64_t pos = begin; pos < end;) {
    const std::int64_t len = std::min(inner - j, end - pos);
    const T* src = x + outer_off + j * step;
    T* dst = y + pos;
    if (step == 1) {
      if (len > 0) std::memcpy(dst, src, static_cast<std::size_t>(len) * sizeof(T));
    } else {
      for (std::int64_t t = 0; t < len; ++t) dst[t] = src[t * step];
    }
    pos += len;
    j = 0;
    for (int k = r - 2; k >= 0; --k) {
      outer_off += g.stride[k];
      if (++index[k] < g.dims[k]) break;
      outer_off -= g.stride[k] * g.dims[k];
      index[k] = 0;
    }
  }
}

Status RunGatherKernel(OpKernelView& v, Gather g) {
  const KernelParams& p = v.params();
  const std::int64_t n = p.output(0).num_elements();
  const auto range = BlockRange(n, v.block_idx(), v.block_dim());
  const std::int64_t b = range.first, e = range.second;  // captured below: no structured binding (clang 14)
  if (b == e) return Status::Ok();
  g.Coalesce();
  return BySize(DataTypeSize(p.output(0).data_type()), [&]<typename T>() -> Status {
    NPUFLOW_ASSIGN_OR_RETURN(auto x, v.Input<const T>(0));
    NPUFLOW_ASSIGN_OR_RETURN(auto y, v.Output<T>(0));
    RunGather<T>(g, x.data(), y.data(), b, e);
    return Status::Ok();
  });
}

// Row-major element strides of a kernel tensor.
void TensorStrides(const KernelTensor& t, std::int64_t* strides) {
  std::int64_t s = 1;
  for (int k = static_cast<int>(t.rank); k-- > 0;) {
    strides[k] = s;
    s *= t.dims[k];
  }
}

// ---- Transpose --------------------------------------------------------------------------------------
Status TransposeRun(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
  const KernelParams& p = v.params();
  NPUFLOW_RETURN_IF_ERROR(CheckCounts(p, "op.Transpose", 1, 1));
  const KernelTensor &x = p.input(0), &y = p.output(0);
  NPUFLOW_RETURN_IF_ERROR(CheckSameDtype(x, y, "op.Transpose"));
  if (x.rank != y.rank)
    return Status::ParamInvalid("op.Transpose: input rank {}, output rank {}", x.rank, y.rank);
  std::int64_t xstride[kMaxKernelRank];
  TensorStrides(x, xstride);
  Gather g;
  g.rank = static_cast<int>(y.rank);
  bool seen[kMaxKernelRank] = {};
  for (int k = 0; k < g.rank; ++k) {
    const std::int64_t src = p.ints[k];
    if (src < 0 || src >= g.rank || seen[src] || x.dims[src] != y.dims[k])
      return Status::ParamInvalid("op.Transpose: perm[{}] = {} does not map input dim to output dim {} ({})", k, src, k,
                                  y.dims[k]);
    seen[src] = true;
    g.dims[k] = y.dims[k];
    g.stride[k] = xstride[src];
  }
  return RunGatherKernel(v, g);
}

// ---- Slice ------------------------------------------------------------------------------------------
Status SliceRun(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
  const KernelParams& p = v.params();
  NPUFLOW_RETURN_IF_ERROR(CheckCounts(p, "op.Slice", 1, 1));
  const KernelTensor &x = p.input(0), &y = p.output(0);
  NPUFLOW_RETURN_IF_ERROR(CheckSameDtype(x, y, "op.Slice"));
  if (x.rank != y.rank) return Status::ParamInvalid("op.Slice: input rank {}, output rank {}", x.rank, y.rank);
  std::int64_t xstride[kMaxKernelRank];
  TensorStrides(x, xstride);
  Gather g;
  g.rank = static_cast<int>(y.rank);
  for (int k = 0; k < g.rank; ++k) {
    const std::int64_t begin = p.ints[k] & 0xFFFFFFFF, step = p.ints[k] >> 32;
    if (step < 1 || (y.dims[k] > 0 && begin + (y.dims[k] - 1) * step >= x.dims[k]))
      return Status::ParamInvalid("op.Slice: dim {}: begin {} stride {} count {} exceed the input size {}", k, begin,
                                  step, y.dims[k], x.dims[k]);
    g.dims[k] = y.dims[k];
    g.stride[k] = step * xstride[k];
    g.base += begin * xstride[k];
  }
  return RunGatherKernel(v, g);
}

// ---- Concat / Split ---------------------------------------------------------------------------------
// The whole tensor ("big") seen as [outer, row] where row is the pieces' rows side by side: piece i
// is [outer, len[i]]. Calls f(big_offset, piece, piece_offset, count) for the runs of big
// elements [begin, end).
struct Pieces {
  int count = 0;
  std::int64_t len[kMaxKernelTensors] = {};
  std::int64_t row = 0;

  template <typename F>
  void ForEachRun(std::int64_t begin, std::int64_t end, F&& f) const {
    if (begin >= end || row == 0) return;
    std::int64_t r = begin / row, off = begin % row, start = 0;
    int i = 0;
    while (off >= start + len[i]) start += len[i++];
    for (std::int64_t pos = begin; pos < end;) {
      const std::int64_t n = std::min(end - pos, start + len[i] - off);
      f(pos, i, r * len[i] + (off - start), n);
      pos += n;
      off += n;
      if (off == start + len[i]) {
        start += len[i++];
        while (i < count && len[i] == 0) ++i;
        if (i == count) {
          ++r;
          off = start = 0;
          i = 0;
          while (i < count && len[i] == 0) ++i;
        }
      }
    }
  }
};

// Checks the pieces against the big tensor along `axis` and fills `pieces` (element units).
Status MakePieces(const KernelParams& p, const KernelTensor& big, const KernelTensor* pieces_begin, int count,
                  std::string_view kernel, Pieces& pieces) {
  const std::int64_t axis = p.ints[0];
  if (axis < 0 || axis >= static_cast<std::int64_t>(big.rank))
    return Status::ParamInvalid("{}: axis {} out of range for rank {}", kernel, axis, big.rank);
  std::int64_t inner = 1, axis_sum = 0;
  for (std::uint32_t k = static_cast<std::uint32_t>(axis) + 1; k < big.rank; ++k) inner *= big.dims[k];
  pieces.count = count;
  for (int i = 0; i < count; ++i) {
    const KernelTensor& t = pieces_begin[i];
    NPUFLOW_RETURN_IF_ERROR(CheckSameDtype(t, big, kernel));
    bool match = t.rank == big.rank;
    for (std::uint32_t k = 0; match && k < big.rank; ++k) match = k == axis || t.dims[k] == big.dims[k];
    if (!match) return Status::ParamInvalid("{}: tensor {} does not match the others outside axis {}", kernel, i, axis);
    axis_sum += t.dims[axis];
    pieces.len[i] = t.dims[axis] * inner;
  }
  if (axis_sum != big.dims[axis])
    return Status::ParamInvalid("{}: axis {} sizes add up to {}, expected {}", kernel, axis, axis_sum, big.dims[axis]);
  pieces.row = axis_sum * inner;
  return Status::Ok();
}

Status ConcatRun(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
  const KernelParams& p = v.params();
  if (p.num_outputs != 1 || p.num_inputs < 1)
    return Status::ParamInvalid("op.Concat: {} inputs and {} outputs, expected >= 1 and 1", p.num_inputs,
                                p.num_outputs);
  Pieces pieces;
  NPUFLOW_RETURN_IF_ERROR(
      MakePieces(p, p.output(0), &p.tensors[0], static_cast<int>(p.num_inputs), "op.Concat", pieces));
  const auto range = BlockRange(p.output(0).num_elements(), v.block_idx(), v.block_dim());
  const std::int64_t b = range.first, e = range.second;  // captured below: no structured binding (clang 14)
  if (b == e) return Status::Ok();
  return BySize(DataTypeSize(p.output(0).data_type()), [&]<typename T>() -> Status {
    const T* src[kMaxKernelTensors] = {};
    for (std::uint32_t i = 0; i < p.num_inputs; ++i) {
      NPUFLOW_ASSIGN_OR_RETURN(auto x, v.Input<const T>(i));
      src[i] = x.data();
    }
    NPUFLOW_ASSIGN_OR_RETURN(auto y, v.Output<T>(0));
    pieces.ForEachRun(b, e, [&](std::int64_t at, int i, std::int64_t from, std::int64_t n) {
      if (n > 0) std::memcpy(y.data() + at, src[i] + from, static_cast<std::size_t>(n) * sizeof(T));
    });
    return Status::Ok();
  });
}

Status SplitRun(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
  const KernelParams& p = v.params();
  if (p.num_inputs != 1 || p.num_outputs < 1)
    return Status::ParamInvalid("op.Split: {} inputs and {} outputs, expected 1 and >= 1", p.num_inputs,
                                p.num_outputs);
  Pieces pieces;
  NPUFLOW_RETURN_IF_ERROR(
      MakePieces(p, p.input(0), &p.tensors[1], static_cast<int>(p.num_outputs), "op.Split", pieces));
  const auto range = BlockRange(p.input(0).num_elements(), v.block_idx(), v.block_dim());
  const std::int64_t b = range.first, e = range.second;  // captured below: no structured binding (clang 14)
  if (b == e) return Status::Ok();
  return BySize(DataTypeSize(p.input(0).data_type()), [&]<typename T>() -> Status {
    NPUFLOW_ASSIGN_OR_RETURN(auto x, v.Input<const T>(0));
    T* dst[kMaxKernelTensors] = {};
    for (std::uint32_t i = 0; i < p.num_outputs; ++i) {
      NPUFLOW_ASSIGN_OR_RETURN(auto y, v.Output<T>(i));
      dst[i] = y.data();
    }
    pieces.ForEachRun(b, e, [&](std::int64_t at, int i, std::int64_t to, std::int64_t n) {
      if (n > 0) std::memcpy(dst[i] + to, x.data() + at, static_cast<std::size_t>(n) * sizeof(T));
    });
    return Status::Ok();
  });
}

// ---- Cast -------------------------------------------------------------------------------------------
template <DataType D>
using DType = std::integral_constant<DataType, D>;

template <typename F>
Status VisitDtype(DataType t, F&& f) {
  switch (t) {
    case DataType::kFloat32: return f(DType<DataType::kFloat32>{});
    case DataType::kFloat16: return f(DType<DataType::kFloat16>{});
    case DataType::kBFloat16: return f(DType<DataType::kBFloat16>{});
    case DataType::kInt32: return f(DType<DataType::kInt32>{});
    case DataType::kInt64: return f(DType<DataType::kInt64>{});
    case DataType::kUInt8: return f(DType<DataType::kUInt8>{});
    case DataType::kBool: return f(DType<DataType::kBool>{});
  }
  return Status::Internal("unknown dtype {}", static_cast<int>(t));
}

template <DataType D>
constexpr bool kIsFloat = D == DataType::kFloat32 || D == DataType::kFloat16 || D == DataType::kBFloat16;

template <DataType D>
using Storage = std::conditional_t<
    D == DataType::kFloat32, float,
    std::conditional_t<D == DataType::kFloat16 || D == DataType::kBFloat16, std::uint16_t,
                       std::conditional_t<D == DataType::kInt32, std::int32_t,
                                          std::conditional_t<D == DataType::kInt64, std::int64_t, std::uint8_t>>>>;

// A stored element as f32 (float types) or i64 (integer types; bool is 0 or 1).
template <DataType D>
auto Load(Storage<D> v) {
  if constexpr (D == DataType::kFloat32) return v;
  else if constexpr (D == DataType::kFloat16) return HalfToFloat(v);
  else if constexpr (D == DataType::kBFloat16) return BFloat16ToFloat(v);
  else if constexpr (D == DataType::kBool) return static_cast<std::int64_t>(v != 0);
  else return static_cast<std::int64_t>(v);
}

// Float -> integer of [lo, hi]: truncated toward zero, saturated; NaN is 0.
template <typename I>
I FloatToInt(float v) {
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (!(v == v)) return 0;
  const double d = static_cast<double>(v);
  if (d <= lo) return std::numeric_limits<I>::min();
  if (d >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(d);  // truncates toward zero
}

template <DataType D, typename V>
Storage<D> Store(V v) {
  if constexpr (D == DataType::kBool) return static_cast<std::uint8_t>(v != 0);
  else if constexpr (std::is_floating_point_v<V>) {
    if constexpr (D == DataType::kFloat32) return v;
    else if constexpr (D == DataType::kFloat16) return FloatToHalf(v);
    else if constexpr (D == DataType::kBFloat16) return FloatToBFloat16(v);
    else return FloatToInt<Storage<D>>(v);
  } else {
    if constexpr (kIsFloat<D>) return Store<D>(static_cast<float>(v));
    else return static_cast<Storage<D>>(v);  // integers wrap
  }
}

Status CastRun(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
  const KernelParams& p = v.params();
  NPUFLOW_RETURN_IF_ERROR(CheckCounts(p, "op.Cast", 1, 1));
  const std::int64_t n = p.output(0).num_elements();
  if (p.input(0).num_elements() != n)
    return Status::ParamInvalid("op.Cast: {} input elements, {} output elements", p.input(0).num_elements(), n);
  const auto range = BlockRange(n, v.block_idx(), v.block_dim());
  const std::int64_t b = range.first, e = range.second;  // captured below: no structured binding (clang 14)
  if (b == e) return Status::Ok();
  return VisitDtype(p.input(0).data_type(), [&](auto from) -> Status {
    return VisitDtype(p.output(0).data_type(), [&](auto to) -> Status {
      constexpr DataType S = decltype(from)::value, D = decltype(to)::value;
      NPUFLOW_ASSIGN_OR_RETURN(auto x, v.Input<const Storage<S>>(0));
      NPUFLOW_ASSIGN_OR_RETURN(auto y, v.Output<Storage<D>>(0));
      const Storage<S>* src = x.data();
      Storage<D>* dst = y.data();
      if constexpr (S == D) {
        std::memcpy(dst + b, src + b, static_cast<std::size_t>(e - b) * sizeof(Storage<D>));
      } else {
        for (std::int64_t i = b; i < e; ++i) dst[i] = Store<D>(Load<S>(src[i]));
      }
      return Status::Ok();
    });
  });
}

}  // namespace

void RegisterTensorKernels() {
  auto& r = npu_sim::KernelRegistry::Global();
  r.Register({DeviceKernelName("Reshape"), npu_sim::Engine::kAICore, &ReshapeRun, &ReshapeCostFn, &OpKernelAccesses});
  r.Register({DeviceKernelName("Transpose"), npu_sim::Engine::kAICore, &TransposeRun, &CopyCostFn, &OpKernelAccesses});
  r.Register({DeviceKernelName("Concat"), npu_sim::Engine::kAICore, &ConcatRun, &CopyCostFn, &OpKernelAccesses});
  r.Register({DeviceKernelName("Split"), npu_sim::Engine::kAICore, &SplitRun, &CopyCostFn, &OpKernelAccesses});
  r.Register({DeviceKernelName("Slice"), npu_sim::Engine::kAICore, &SliceRun, &CopyCostFn, &OpKernelAccesses});
  r.Register({DeviceKernelName("Cast"), npu_sim::Engine::kAICore, &CastRun, &CopyCostFn, &OpKernelAccesses});
  r.Register({DeviceKernelName("HcomAllReduce"), npu_sim::Engine::kAICore, &AllReduceRun, &CopyCostFn, &OpKernelAccesses});
}

}  // namespace npuflow::graph
