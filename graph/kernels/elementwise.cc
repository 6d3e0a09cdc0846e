// Device kernels of the elementwise ops (npu_sim kernels "op.<Type>", AICore):
//
//   op.Add, op.Sub, op.Mul, op.Div   [a, b, c, workspace, params]; NumPy broadcasting of a and b to
//                                    c's shape. f32, f16, bf16 (computed in f32), i32, i64 (exact,
//                                    wrapping; Div truncates toward zero and a zero divisor is an
//                                    error).
//   op.Relu, op.Tanh, op.Gelu        [x, y, workspace, params]; f32, f16, bf16. Gelu is GPT-2's tanh
//                                    approximation.
//   ints / floats: none. The op is the kernel; shapes and dtypes come from KernelParams.
//
// Block `block_idx` of `block_dim` computes the output elements BlockRange(n). The broadcast dims
// are coalesced first (same shape: one dim; [M, N] + [N]: rows of N), so the innermost loop always
// reads each input either contiguously or as one repeated element; those loops are plain so GCC
// vectorizes them. f16 and bf16 go through f32 in chunks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "graph/ir/half.h"
#include "graph/kernels/activations.h"
#include "graph/kernels/kernel_abi.h"
#include "graph/kernels/device_kernels.h"

namespace npuflow::graph {
namespace {

using npu_sim::ChipSpec;
using npu_sim::KernelContext;
using npu_sim::VTime;

// ---- the operations ---------------------------------------------------------------------------------
template <typename T>
using Unsigned = std::make_unsigned_t<T>;

struct AddOp {
  static constexpr const char* kName = "op.Add";
  template <typename T>
  static T Apply(T x, T y) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<Unsigned<T>>(x) + static_cast<Unsigned<T>>(y));
    else return x + y;
  }
};
struct SubOp {
  static constexpr const char* kName = "op.Sub";
  template <typename T>
  static T Apply(T x, T y) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<Unsigned<T>>(x) - static_cast<Unsigned<T>>(y));
    else return x - y;
  }
};
struct MulOp {
  static constexpr const char* kName = "op.Mul";
  template <typename T>
  static T Apply(T x, T y) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<Unsigned<T>>(x) * static_cast<Unsigned<T>>(y));
    else return x * y;
  }
};
struct DivOp {
  static constexpr const char* kName = "op.Div";
  // Integers: truncates toward zero; min / -1 wraps; a zero divisor gives 0 here and is reported
  // by the caller.
  template <typename T>
  static T Apply(T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      if (y == 0) return 0;
      if (y == -1) return static_cast<T>(Unsigned<T>{0} - static_cast<Unsigned<T>>(x));
      return x / y;
    } else {
      return x / y;
    }
  }
};

struct ReluOp {
  static constexpr const char* kName = "op.Relu";
  static constexpr double kFlops = 1;
  static float Apply(float x) { return x > 0 ? x : 0.f; }
};
struct TanhOp {
  static constexpr const char* kName = "op.Tanh";
  static constexpr double kFlops = 20;
  [[gnu::always_inline]] static float Apply(float x) { return TanhF(x); }
};
struct GeluOp {
  static constexpr const char* kName = "op.Gelu";
  static constexpr double kFlops = kGeluFlops;
  [[gnu::always_inline]] static float Apply(float x) { return GeluF(x); }
};

// ---- storage ------------------------------------------------------------------------------------------
// How a dtype is stored and computed: T in memory, C in arithmetic.
template <typename T_, typename C_ = T_>
struct Direct {
  using T = T_;
  using C = C_;
};
struct F16 {
  using T = std::uint16_t;
  using C = float;
  static float ToC(T v) { return HalfToFloat(v); }
  static T FromC(float v) { return FloatToHalf(v); }
};
struct BF16 {
  using T = std::uint16_t;
  using C = float;
  static float ToC(T v) { return BFloat16ToFloat(v); }
  static T FromC(float v) { return FloatToBFloat16(v); }
};
template <typename S>
constexpr bool kDirect = std::is_same_v<typename S::T, typename S::C>;

constexpr std::int64_t kChunk = 256;  // f16/bf16: elements converted to f32 at a time

// ---- binary -----------------------------------------------------------------------------------------
// The output's dims after coalescing, with each input's element stride per dim (0: broadcast).
// The innermost stride of each input is 0 or 1.
struct BinaryPlan {
  int rank = 0;
  std::int64_t dims[kMaxKernelRank] = {};
  std::int64_t sa[kMaxKernelRank] = {};
  std::int64_t sb[kMaxKernelRank] = {};
};

Status MakeBinaryPlan(const KernelParams& p, std::string_view kernel, BinaryPlan& plan) {
  if (p.num_inputs != 2 || p.num_outputs != 1)
    return Status::ParamInvalid("{}: {} inputs and {} outputs, expected 2 and 1", kernel, p.num_inputs, p.num_outputs);
  const KernelTensor &a = p.input(0), &b = p.input(1), &c = p.output(0);
  if (a.dtype != c.dtype || b.dtype != c.dtype)
    return Status::ParamInvalid("{}: dtypes {}, {} -> {} differ", kernel, DataTypeName(a.data_type()),
                                DataTypeName(b.data_type()), DataTypeName(c.data_type()));
  const int r = static_cast<int>(c.rank);
  std::int64_t dims[kMaxKernelRank], sa[kMaxKernelRank], sb[kMaxKernelRank];
  for (const auto& [t, s] : std::initializer_list<std::pair<const KernelTensor*, std::int64_t*>>{{&a, sa}, {&b, sb}}) {
    if (t->rank > c.rank)
      return Status::ParamInvalid("{}: input rank {} above the output rank {}", kernel, t->rank, c.rank);
    std::int64_t stride = 1;
    for (int k = r - 1; k >= 0; --k) {
      const int ik = k - (r - static_cast<int>(t->rank));
      const std::int64_t d = ik >= 0 ? t->dims[ik] : 1;
      if (d != c.dims[k] && d != 1)
        return Status::ParamInvalid("{}: input dim {} does not broadcast to output dim {} ({})", kernel, d, k,
                                    c.dims[k]);
      s[k] = d == 1 ? 0 : stride;
      stride *= d;
    }
  }
  for (int k = 0; k < r; ++k) dims[k] = c.dims[k];
  int n = 0;
  for (int k = 0; k < r; ++k) {
    if (dims[k] == 1) continue;
    if (n > 0 && plan.sa[n - 1] == sa[k] * dims[k] && plan.sb[n - 1] == sb[k] * dims[k]) {
      plan.dims[n - 1] *= dims[k];
      plan.sa[n - 1] = sa[k];
      plan.sb[n - 1] = sb[k];
      continue;
    }
    plan.dims[n] = dims[k];
    plan.sa[n] = sa[k];
    plan.sb[n] = sb[k];
    ++n;
  }
  if (n == 0) {  // one element
    plan.dims[0] = 1;
    plan.sa[0] = plan.sb[0] = 0;
    n = 1;
  }
  plan.rank = n;
  return Status::Ok();
}

// c[k] = op(a[k * SA], b[k * SB]) for k < n: the vectorized inner loop.
template <typename Op, int SA, int SB, typename C>
void BinaryLoop(const C* a, const C* b, C* c, std::int64_t n) {
  for (std::int64_t k = 0; k < n; ++k) c[k] = Op::template Apply<C>(a[k * SA], b[k * SB]);
}

template <typename Op, typename C>
void BinarySegment(const C* a, bool step_a, const C* b, bool step_b, C* c, std::int64_t n) {
  if (step_a && step_b) BinaryLoop<Op, 1, 1>(a, b, c, n);
  else if (step_a) BinaryLoop<Op, 1, 0>(a, b, c, n);
  else if (step_b) BinaryLoop<Op, 0, 1>(a, b, c, n);
  else BinaryLoop<Op, 0, 0>(a, b, c, n);
}

// Integer Div: whether any divisor of the segment is zero.
template <typename T>
bool AnyZero(const T* b, bool step_b, std::int64_t n) {
  if (!step_b) return n > 0 && b[0] == 0;
  bool zero = false;
  for (std::int64_t k = 0; k < n; ++k) zero |= b[k] == 0;
  return zero;
}

template <typename Op, typename S>
Status BinaryBlock(OpKernelView& v, const BinaryPlan& plan, std::int64_t begin, std::int64_t end) {
  using T = typename S::T;
  using C = typename S::C;
  NPUFLOW_ASSIGN_OR_RETURN(auto as, v.Input<const T>(0));
  NPUFLOW_ASSIGN_OR_RETURN(auto bs, v.Input<const T>(1));
  NPUFLOW_ASSIGN_OR_RETURN(auto cs, v.Output<T>(0));
  const T* a = as.data();
  const T* b = bs.data();
  T* c = cs.data();
  const int r = plan.rank;
  const std::int64_t inner = plan.dims[r - 1];
  const bool step_a = plan.sa[r - 1] != 0, step_b = plan.sb[r - 1] != 0;
  std::int64_t index[kMaxKernelRank] = {};
  std::int64_t q = begin / inner, j = begin % inner, oa = 0, ob = 0;
  for (int k = r - 2; k >= 0; --k) {
    index[k] = q % plan.dims[k];
    q /= plan.dims[k];
    oa += index[k] * plan.sa[k];
    ob += index[k] * plan.sb[k];
  }
  C fa[kChunk], fb[kChunk], fc[kChunk];
  for (std::int64_t pos = begin; pos < end;) {
    const std::int64_t len = std::min(inner - j, end - pos);
    const T* pa = a + oa + (step_a ? j : 0);
    const T* pb = b + ob + (step_b ? j : 0);
    if constexpr (std::is_same_v<Op, DivOp> && std::is_integral_v<C>) {
      if (AnyZero(pb, step_b, len))
        return Status::ParamInvalid("{}: integer division by zero (output element {} and on)", Op::kName, pos);
    }
    if constexpr (kDirect<S>) {
      BinarySegment<Op, C>(pa, step_a, pb, step_b, c + pos, len);
    } else {
      for (std::int64_t t = 0; t < len; t += kChunk) {
        const std::int64_t m = std::min(kChunk, len - t);
        if (step_a) {
          for (std::int64_t k = 0; k < m; ++k) fa[k] = S::ToC(pa[t + k]);
        } else {
          fa[0] = S::ToC(pa[0]);
        }
        if (step_b) {
          for (std::int64_t k = 0; k < m; ++k) fb[k] = S::ToC(pb[t + k]);
        } else {
          fb[0] = S::ToC(pb[0]);
        }
        BinarySegment<Op, C>(fa, step_a, fb, step_b, fc, m);
        for (std::int64_t k = 0; k < m; ++k) c[pos + t + k] = S::FromC(fc[k]);
      }
    }
    pos += len;
    j = 0;
    for (int k = r - 2; k >= 0; --k) {
      oa += plan.sa[k];
      ob += plan.sb[k];
      if (++index[k] < plan.dims[k]) break;
      oa -= plan.sa[k] * plan.dims[k];
      ob -= plan.sb[k] * plan.dims[k];
      index[k] = 0;
    }
  }
  return Status::Ok();
}

template <typename Op>
Status BinaryRun(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
  BinaryPlan plan;
  NPUFLOW_RETURN_IF_ERROR(MakeBinaryPlan(v.params(), Op::kName, plan));
  const KernelTensor& c = v.params().output(0);
  const auto [b, e] = BlockRange(c.num_elements(), v.block_idx(), v.block_dim());
  if (b == e) return Status::Ok();
  switch (c.data_type()) {
    case DataType::kFloat32: return BinaryBlock<Op, Direct<float>>(v, plan, b, e);
    case DataType::kFloat16: return BinaryBlock<Op, F16>(v, plan, b, e);
    case DataType::kBFloat16: return BinaryBlock<Op, BF16>(v, plan, b, e);
    case DataType::kInt32: return BinaryBlock<Op, Direct<std::int32_t>>(v, plan, b, e);
    case DataType::kInt64: return BinaryBlock<Op, Direct<std::int64_t>>(v, plan, b, e);
    default: break;
  }
  return Status::Unsupported("{}: dtype {} not supported (f32, f16, bf16, i32, i64)", Op::kName,
                             DataTypeName(c.data_type()));
}

VTime BinaryCost(const KernelContext& ctx, const ChipSpec& chip) {
  auto view = OpKernelView::Open(ctx);
  if (!view.ok() || view->params().num_inputs != 2 || view->params().num_outputs != 1) return BlockCost(chip, 0, 0);
  const KernelParams& p = view->params();
  const auto [b, e] = BlockRange(p.output(0).num_elements(), ctx.block_idx(), ctx.block_dim());
  const auto m = static_cast<double>(e - b);
  const auto esize = static_cast<double>(DataTypeSize(p.output(0).data_type()));
  // A broadcast input is read once per block at most.
  const double reads = std::min(m, static_cast<double>(p.input(0).num_elements())) +
                       std::min(m, static_cast<double>(p.input(1).num_elements()));
  return BlockCost(chip, (reads + m) * esize, m);
}

// ---- unary ------------------------------------------------------------------------------------------
template <typename Op>
void UnaryLoop(const float* x, float* y, std::int64_t n) {
  for (std::int64_t k = 0; k < n; ++k) y[k] = Op::Apply(x[k]);
}

template <typename Op, typename S>
Status UnaryBlock(OpKernelView& v, std::int64_t begin, std::int64_t end) {
  using T = typename S::T;
  NPUFLOW_ASSIGN_OR_RETURN(auto xs, v.Input<const T>(0));
  NPUFLOW_ASSIGN_OR_RETURN(auto ys, v.Output<T>(0));
  if constexpr (kDirect<S>) {
    UnaryLoop<Op>(xs.data() + begin, ys.data() + begin, end - begin);
  } else {
    float fx[kChunk], fy[kChunk];
    for (std::int64_t t = begin; t < end; t += kChunk) {
      const std::int64_t m = std::min(kChunk, end - t);
      for (std::int64_t k = 0; k < m; ++k) fx[k] = S::ToC(xs[t + k]);
      UnaryLoop<Op>(fx, fy, m);
      for (std::int64_t k = 0; k < m; ++k) ys[t + k] = S::FromC(fy[k]);
    }
  }
  return Status::Ok();
}

template <typename Op>
Status UnaryRun(KernelContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(OpKernelView v, OpKernelView::Open(ctx));
  const KernelParams& p = v.params();
  if (p.num_inputs != 1 || p.num_outputs != 1)
    return Status::ParamInvalid("{}: {} inputs and {} outputs, expected 1 and 1", Op::kName, p.num_inputs,
                                p.num_outputs);
  const KernelTensor &x = p.input(0), &y = p.output(0);
  if (x.dtype != y.dtype || x.num_elements() != y.num_elements())
    return Status::ParamInvalid("{}: input {} elements of {}, output {} of {}", Op::kName, x.num_elements(),
                                DataTypeName(x.data_type()), y.num_elements(), DataTypeName(y.data_type()));
  const auto [b, e] = BlockRange(y.num_elements(), v.block_idx(), v.block_dim());
  if (b == e) return Status::Ok();
  switch (y.data_type()) {
    case DataType::kFloat32: return UnaryBlock<Op, Direct<float>>(v, b, e);
    case DataType::kFloat16: return UnaryBlock<Op, F16>(v, b, e);
    case DataType::kBFloat16: return UnaryBlock<Op, BF16>(v, b, e);
    default: break;
  }
  return Status::Unsupported("{}: dtype {} not supported (f32, f16, bf16)", Op::kName, DataTypeName(y.data_type()));
}

template <typename Op>
VTime UnaryCost(const KernelContext& ctx, const ChipSpec& chip) {
  auto view = OpKernelView::Open(ctx);
  if (!view.ok() || view->params().num_outputs != 1) return BlockCost(chip, 0, 0);
  const KernelTensor& y = view->params().output(0);
  const auto [b, e] = BlockRange(y.num_elements(), ctx.block_idx(), ctx.block_dim());
  const auto m = static_cast<double>(e - b);
  return BlockCost(chip, 2 * m * static_cast<double>(DataTypeSize(y.data_type())), m * Op::kFlops);
}

}  // namespace

void RegisterElementwiseKernels() {
  auto& r = npu_sim::KernelRegistry::Global();
  r.Register({DeviceKernelName("Add"), npu_sim::Engine::kAICore, &BinaryRun<AddOp>, &BinaryCost, &OpKernelAccesses});
  r.Register({DeviceKernelName("Sub"), npu_sim::Engine::kAICore, &BinaryRun<SubOp>, &BinaryCost, &OpKernelAccesses});
  r.Register({DeviceKernelName("Mul"), npu_sim::Engine::kAICore, &BinaryRun<MulOp>, &BinaryCost, &OpKernelAccesses});
  r.Register({DeviceKernelName("Div"), npu_sim::Engine::kAICore, &BinaryRun<DivOp>, &BinaryCost, &OpKernelAccesses});
  r.Register({DeviceKernelName("Relu"), npu_sim::Engine::kAICore, &UnaryRun<ReluOp>, &UnaryCost<ReluOp>, &OpKernelAccesses});
  r.Register({DeviceKernelName("Tanh"), npu_sim::Engine::kAICore, &UnaryRun<TanhOp>, &UnaryCost<TanhOp>, &OpKernelAccesses});
  r.Register({DeviceKernelName("Gelu"), npu_sim::Engine::kAICore, &UnaryRun<GeluOp>, &UnaryCost<GeluOp>, &OpKernelAccesses});
}

}  // namespace npuflow::graph
