// Graph boundary ops (Data, Const, NetOutput) and elementwise ops (Add, Sub, Mul, Div with NumPy
// broadcasting; Relu, Tanh, Gelu): shape inference and reference kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "graph/ops/op_library.h"
#include "graph/ops/op_registry.h"
#include "graph/ir/tensor_access.h"

namespace npuflow::graph {
namespace {

// ---- boundary ops -----------------------------------------------------------------------------------
Status InferData(const OpDesc& op, const std::vector<TensorDesc>&, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(DataType dtype, op.Attr<DataType>("dtype"));
  NPUFLOW_ASSIGN_OR_RETURN(Shape shape, op.Attr<Shape>("shape"));
  out.push_back(TensorDesc{dtype, std::move(shape)});
  return Status::Ok();
}

Status InferConst(const OpDesc& op, const std::vector<TensorDesc>&, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(Tensor value, op.Attr<Tensor>("value"));
  out.push_back(value.desc);
  return Status::Ok();
}

Status ReferenceConst(const OpDesc& op, const std::vector<const Tensor*>&, std::vector<Tensor>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(out[0], op.Attr<Tensor>("value"));
  return Status::Ok();
}

Status InferNetOutput(const OpDesc&, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  out = in;  // the graph's outputs, passed through
  return Status::Ok();
}

Status ReferenceIdentity(const OpDesc&, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = *in[i];
  return Status::Ok();
}

// ---- binary elementwise with broadcasting ----------------------------------------------------------
Status InferBinary(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  if (in[0].dtype != in[1].dtype)
    return Status::ParamInvalid("node '{}' ({}): input dtypes differ: {} and {}", op.name(), op.type(),
                                DataTypeName(in[0].dtype), DataTypeName(in[1].dtype));
  NPUFLOW_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(in[0].shape, in[1].shape, op.name()));
  out.push_back(TensorDesc{in[0].dtype, std::move(shape)});
  return Status::Ok();
}

// Element offsets into a broadcast input, walking the output in row-major order.
class BroadcastWalker {
 public:
  BroadcastWalker(const Shape& in, const Shape& out) : index_(out.rank(), 0), dims_(out.rank()), strides_(out.rank(), 0) {
    std::int64_t stride = 1;
    for (std::size_t k = in.rank(); k-- > 0;) {
      const std::size_t o = k + out.rank() - in.rank();
      strides_[o] = in.dim(k).size == 1 ? 0 : stride;
      stride *= in.dim(k).size;
    }
    for (std::size_t k = 0; k < out.rank(); ++k) dims_[k] = out.dim(k).size;
  }
  std::size_t offset() const { return static_cast<std::size_t>(offset_); }
  void Next() {
    for (std::size_t k = dims_.size(); k-- > 0;) {
      offset_ += strides_[k];
      if (++index_[k] < dims_[k]) return;
      offset_ -= strides_[k] * dims_[k];
      index_[k] = 0;
    }
  }

 private:
  std::vector<std::int64_t> index_, dims_, strides_;
  std::int64_t offset_ = 0;
};

// Floats accumulate in f32; integers are exact and wrap at their width, as the device kernels do.
template <typename F, typename I>
Status ReferenceBinary(const std::vector<const Tensor*>& in, std::vector<Tensor>& out, F f, I fi) {
  const Tensor& a = *in[0];
  const Tensor& b = *in[1];
  Tensor& c = out[0];
  const auto n = static_cast<std::size_t>(c.desc.shape.num_elements().value_or(0));
  BroadcastWalker wa(a.desc.shape, c.desc.shape), wb(b.desc.shape, c.desc.shape);
  if (IsFloat(c.desc.dtype)) {
    for (std::size_t i = 0; i < n; ++i, wa.Next(), wb.Next())
      StoreF(c, i, f(LoadF(a, wa.offset()), LoadF(b, wb.offset())));
  } else {
    for (std::size_t i = 0; i < n; ++i, wa.Next(), wb.Next())
      StoreI(c, i, fi(LoadI(a, wa.offset()), LoadI(b, wb.offset())));
  }
  return Status::Ok();
}

std::int64_t Wrap(std::uint64_t v) { return static_cast<std::int64_t>(v); }

Status RefAdd(const OpDesc&, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return ReferenceBinary(in, out, [](float x, float y) { return x + y; },
                         [](std::int64_t x, std::int64_t y) { return Wrap(std::uint64_t(x) + std::uint64_t(y)); });
}
Status RefSub(const OpDesc&, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return ReferenceBinary(in, out, [](float x, float y) { return x - y; },
                         [](std::int64_t x, std::int64_t y) { return Wrap(std::uint64_t(x) - std::uint64_t(y)); });
}
Status RefMul(const OpDesc&, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return ReferenceBinary(in, out, [](float x, float y) { return x * y; },
                         [](std::int64_t x, std::int64_t y) { return Wrap(std::uint64_t(x) * std::uint64_t(y)); });
}
Status RefDiv(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (!IsFloat(in[0]->desc.dtype)) {
    // Integer division by zero is an error, not a crash.
    const auto n = static_cast<std::size_t>(in[1]->desc.shape.num_elements().value_or(0));
    for (std::size_t i = 0; i < n; ++i)
      if (LoadI(*in[1], i) == 0) return Status::ParamInvalid("node '{}' (Div): integer division by zero", op.name());
  }
  return ReferenceBinary(in, out, [](float x, float y) { return x / y; },
                         [](std::int64_t x, std::int64_t y) {
                           // Truncates toward zero; the one overflowing case (min / -1) wraps to min.
                           if (y == -1) return Wrap(0 - std::uint64_t(x));
                           return x / y;
                         });
}

// ---- unary elementwise ------------------------------------------------------------------------------
Status InferUnaryFloat(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  if (!IsFloat(in[0].dtype))
    return Status::ParamInvalid("node '{}' ({}): needs a float input (f32, f16, bf16), got {}", op.name(), op.type(),
                                DataTypeName(in[0].dtype));
  out.push_back(in[0]);
  return Status::Ok();
}

template <typename F>
Status ReferenceUnary(const std::vector<const Tensor*>& in, std::vector<Tensor>& out, F f) {
  const auto n = static_cast<std::size_t>(in[0]->desc.shape.num_elements().value_or(0));
  for (std::size_t i = 0; i < n; ++i) StoreF(out[0], i, f(LoadF(*in[0], i)));
  return Status::Ok();
}

Status RefRelu(const OpDesc&, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return ReferenceUnary(in, out, [](float x) { return x > 0 ? x : 0.f; });
}
Status RefTanh(const OpDesc&, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return ReferenceUnary(in, out, [](float x) { return std::tanh(x); });
}
// GPT-2's GELU: the tanh approximation.
Status RefGelu(const OpDesc&, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  return ReferenceUnary(in, out, [](float x) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * x * (1.f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  });
}

// One block per 4096 elements, at most one per core: the tiling of every elementwise op.
StatusOr<TilingInfo> TileElementwise(const OpDesc& op, const std::vector<TensorDesc>& in,
                                     const std::vector<const Tensor*>&, int core_count) {
  std::int64_t n = 1;
  for (const TensorDesc& d : in) {
    auto e = d.shape.num_elements();
    if (!e) return Status::ParamInvalid("node '{}' ({}): tiling needs static shapes, got {}", op.name(), op.type(),
                                        d.shape.ToString());
    n = std::max(n, *e);
  }
  TilingInfo t;
  t.block_dim = static_cast<std::uint32_t>(std::clamp<std::int64_t>((n + 4095) / 4096, 1, std::max(core_count, 1)));
  return t;
}

}  // namespace

// Defined in this file: the ops it holds. Other op files add theirs.
void RegisterElementwiseOps(OpRegistry& r) {
  r.Register({.type = "Data", .min_inputs = 0, .max_inputs = 0, .required_attrs = {"dtype", "shape"},
              .engine = OpEngine::kHostLocal, .infer = &InferData});
  r.Register({.type = "Const", .min_inputs = 0, .max_inputs = 0, .required_attrs = {"value"},
              .engine = OpEngine::kHostLocal, .infer = &InferConst, .reference = &ReferenceConst});
  r.Register({.type = "NetOutput", .min_inputs = 1, .max_inputs = -1, .engine = OpEngine::kHostLocal,
              .infer = &InferNetOutput, .reference = &ReferenceIdentity});
  for (auto [type, ref] : std::initializer_list<std::pair<const char*, OpDef::ReferenceFn>>{
           {"Add", &RefAdd}, {"Sub", &RefSub}, {"Mul", &RefMul}, {"Div", &RefDiv}}) {
    r.Register({.type = type, .min_inputs = 2, .max_inputs = 2, .infer = &InferBinary, .reference = ref,
                .tiling = &TileElementwise, .device_kernel = DeviceKernelName(type)});
  }
  for (auto [type, ref] : std::initializer_list<std::pair<const char*, OpDef::ReferenceFn>>{
           {"Relu", &RefRelu}, {"Tanh", &RefTanh}, {"Gelu", &RefGelu}}) {
    r.Register({.type = type, .min_inputs = 1, .max_inputs = 1, .infer = &InferUnaryFloat, .reference = ref,
                .tiling = &TileElementwise, .device_kernel = DeviceKernelName(type)});
  }
}


}  // namespace npuflow::graph
