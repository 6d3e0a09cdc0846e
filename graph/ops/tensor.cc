// Tensor-layout ops: shape inference, reference kernels, host tiling and kernel params.
//
//   Reshape(x)       attrs: shape (int list; one -1 inferred, 0 is a literal 0). Output 0 may live
//                    in place over x (a view): the device copy is skipped then.
//   Transpose(x)     attrs: perm (int list, a permutation of 0..rank-1).
//   Concat(x0..x13)  attrs: axis (int, negative counts from the back); other dims equal. An axis
//                    sum with symbols is a symbol of its own, named after the sum ("seq+3").
//   Split(x)         attrs: axis, and sizes (int list summing to the axis dim) or num_split (int
//                    dividing it); one output per piece.
//   Slice(x)         attrs: begin, end (int lists, one per dim; negative counts from the back;
//                    clamped like Python), strides (optional int list, default 1, positive).
//   Cast(x)          attrs: dtype. Float -> integer truncates toward zero and saturates (NaN -> 0);
//                    integer -> integer wraps; -> bool is x != 0.
//   Variable         attrs: dtype, shape (static), value (optional Tensor). Host-local.
//   FileConstant     attrs: dtype, shape (static), location (path) else file_path else file_id (a
//                    ge.exec.value_bins id: enough for shape inference, the external-weights pass
//                    turns it into a location), offset (bytes, default 0), length (bytes; 0: the
//                    tensor size). Host-local.
//
// Device kernel ints (KernelParams::ints; tensors' dtypes and shapes are in KernelParams):
//   Reshape, Cast:   none.
//   Transpose:       ints[0..rank) = perm.
//   Concat, Split:   ints[0] = axis, normalized to 0..rank-1.
//   Slice:           ints[d] = begin_d | stride_d << 32 for each dim d (begin normalized and
//                    clamped, 0 <= begin_d < 2^32, 1 <= stride_d < 2^31); the output shape gives
//                    the count per dim.
// Every AICore op here splits its work (the elements of its outputs) into blocks of 4096.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "graph/ops/op_library.h"
#include "graph/ops/op_registry.h"
#include "graph/ir/tensor_access.h"

namespace npuflow::graph {
namespace {

using Ints = std::vector<std::int64_t>;

std::string IntsString(const Ints& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }


// `axis` (negative counts from the back) as 0..rank-1, or a ParamInvalid naming the node.
StatusOr<std::size_t> NormalizeAxis(const OpDesc& op, std::int64_t axis, const Shape& shape) {
  const auto rank = static_cast<std::int64_t>(shape.rank());
  const std::int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return Status::ParamInvalid("node '{}' ({}): attribute 'axis' {} is out of range for {} (rank {})", op.name(),
                                op.type(), axis, shape.ToString(), rank);
  return static_cast<std::size_t>(a);
}

// Row-major element strides of a static shape.
Ints Strides(const Shape& s) {
  Ints st(s.rank(), 1);
  for (std::size_t k = s.rank(); k-- > 1;) st[k - 1] = st[k] * s.dim(k).size;
  return st;
}

std::int64_t Elements(const Tensor& t) { return t.desc.shape.num_elements().value_or(0); }

// ---- Reshape ----------------------------------------------------------------------------------------
Status InferReshape(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(Ints target, op.Attr<Ints>("shape"));
  const Shape& x = in[0].shape;
  int minus_one = -1;
  std::int64_t known = 1;  // product of the target dims other than -1
  for (std::size_t i = 0; i < target.size(); ++i) {
    const std::int64_t v = target[i];
    if (v == -1) {
      if (minus_one >= 0)
        return Status::ParamInvalid("node '{}' (Reshape): attribute 'shape' {} has more than one -1", op.name(),
                                    IntsString(target));
      minus_one = static_cast<int>(i);
    } else if (v < 0) {
      return Status::ParamInvalid("node '{}' (Reshape): attribute 'shape' {} has a negative dim {}", op.name(),
                                  IntsString(target), v);
    } else if (v != 0 && known > std::numeric_limits<std::int64_t>::max() / v) {
      return Status::ParamInvalid("node '{}' (Reshape): attribute 'shape' {} overflows", op.name(), IntsString(target));
    } else {
      known *= v;
    }
  }
  std::vector<Dim> dims;
  for (std::int64_t v : target) dims.push_back(Dim::Static(v));
  if (x.is_static()) {
    const auto n = x.num_elements();
    if (!n) return Status::ParamInvalid("node '{}' (Reshape): input shape {} overflows", op.name(), x.ToString());
    if (minus_one >= 0) {
      if (known == 0 || *n % known != 0)
        return Status::ParamInvalid("node '{}' (Reshape): cannot reshape {} ({} elements) to {}: no size for -1",
                                    op.name(), x.ToString(), *n, IntsString(target));
      dims[minus_one] = Dim::Static(*n / known);
    } else if (known != *n) {
      return Status::ParamInvalid("node '{}' (Reshape): cannot reshape {} ({} elements) to {} ({} elements)",
                                  op.name(), x.ToString(), *n, IntsString(target), known);
    }
  } else {
    // A symbolic input: -1 can stand for its one symbolic dim when the static rest matches.
    const Dim* symbol = nullptr;
    int symbols = 0;
    std::int64_t px = 1;
    for (const Dim& d : x.dims()) {
      if (d.is_static()) {
        px *= d.size;
      } else {
        symbol = &d;
        ++symbols;
      }
    }
    if (minus_one < 0 || symbols != 1 || known == 0 || px != known)
      return Status::ParamInvalid(
          "node '{}' (Reshape): cannot reshape {} to {}: with a symbolic input, 'shape' needs one -1 standing for its "
          "single symbolic dim and static dims whose product equals the input's static dims",
          op.name(), x.ToString(), IntsString(target));
    dims[minus_one] = *symbol;
  }
  out.push_back(TensorDesc{in[0].dtype, Shape(std::move(dims))});
  return Status::Ok();
}

Status RefCopy(const OpDesc&, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  out[0].data = in[0]->data;
  return Status::Ok();
}

// ---- Transpose --------------------------------------------------------------------------------------
StatusOr<Ints> TransposePerm(const OpDesc& op, const Shape& x) {
  NPUFLOW_ASSIGN_OR_RETURN(Ints perm, op.Attr<Ints>("perm"));
  std::vector<bool> seen(x.rank(), false);
  bool ok = perm.size() == x.rank();
  for (std::size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < static_cast<std::int64_t>(x.rank()) && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok)
    return Status::ParamInvalid("node '{}' (Transpose): attribute 'perm' {} is not a permutation of 0..{} for {}",
                                op.name(), IntsString(perm), static_cast<std::int64_t>(x.rank()) - 1, x.ToString());
  return perm;
}

Status InferTranspose(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(Ints perm, TransposePerm(op, in[0].shape));
  std::vector<Dim> dims;
  for (std::int64_t p : perm) dims.push_back(in[0].shape.dim(p));
  out.push_back(TensorDesc{in[0].dtype, Shape(std::move(dims))});
  return Status::Ok();
}

// Output element at multi-index i is input element at i permuted back: in[perm[k]] = i[k].
Status RefTranspose(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(Ints perm, TransposePerm(op, in[0]->desc.shape));
  const Shape& ys = out[0].desc.shape;
  const Ints xstride = Strides(in[0]->desc.shape);
  const std::size_t esize = DataTypeSize(in[0]->desc.dtype);
  Ints index(ys.rank(), 0);
  for (std::int64_t i = 0; i < Elements(out[0]); ++i) {
    std::int64_t src = 0;
    for (std::size_t k = 0; k < ys.rank(); ++k) src += index[k] * xstride[perm[k]];
    std::memcpy(out[0].data.data() + i * esize, in[0]->data.data() + src * esize, esize);
    for (std::size_t k = ys.rank(); k-- > 0;) {
      if (++index[k] < ys.dim(k).size) break;
      index[k] = 0;
    }
  }
  return Status::Ok();
}

Status ParamsTranspose(const OpDesc& op, const std::vector<TensorDesc>& in, KernelParams& p) {
  NPUFLOW_ASSIGN_OR_RETURN(Ints perm, TransposePerm(op, in[0].shape));
  if (perm.size() > static_cast<std::size_t>(kKernelInts))
    return Status::ParamInvalid("node '{}' (Transpose): rank {} above the device kernel limit {}", op.name(),
                                perm.size(), kKernelInts);
  std::copy(perm.begin(), perm.end(), p.ints);
  return Status::Ok();
}

// ---- Concat -----------------------------------------------------------------------------------------
Status InferConcat(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.Attr<std::int64_t>("axis"));
  const Shape& first = in[0].shape;
  NPUFLOW_ASSIGN_OR_RETURN(std::size_t axis, NormalizeAxis(op, axis_attr, first));
  std::vector<std::string> sizes;
  std::int64_t sum = 0;
  const Dim* symbol = nullptr;
  int symbols = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i].shape;
    if (in[i].dtype != in[0].dtype)
      return Status::ParamInvalid("node '{}' (Concat): input {} is {}, input 0 is {}", op.name(), i,
                                  in[i].ToString(), in[0].ToString());
    bool match = s.rank() == first.rank();
    for (std::size_t k = 0; match && k < s.rank(); ++k) match = k == axis || s.dim(k) == first.dim(k);
    if (!match)
      return Status::ParamInvalid("node '{}' (Concat): input {} shape {} does not match input 0 shape {} outside axis {}",
                                  op.name(), i, s.ToString(), first.ToString(), axis);
    const Dim& d = s.dim(axis);
    sizes.push_back(d.ToString());
    if (d.is_static()) {
      sum += d.size;
    } else {
      symbol = &d;
      ++symbols;
    }
  }
  std::vector<Dim> dims = first.dims();
  if (symbols == 0) {
    dims[axis] = Dim::Static(sum);
  } else if (symbols == 1 && sum == 0) {
    dims[axis] = *symbol;  // the other inputs are empty along the axis
  } else {
    // Known only at run time: a symbol named after the sum ("seq+3"), equal to no other.
    std::vector<std::string> terms;
    for (const std::string& t : sizes)
      if (t != "0") terms.push_back(t);
    dims[axis] = Dim::Symbolic(fmt::format("{}", fmt::join(terms, "+")));
  }
  out.push_back(TensorDesc{in[0].dtype, Shape(std::move(dims))});
  return Status::Ok();
}

// Each output row (the dims before the axis) is the inputs' rows one after the other.
Status RefConcat(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.Attr<std::int64_t>("axis"));
  const Shape& ys = out[0].desc.shape;
  NPUFLOW_ASSIGN_OR_RETURN(std::size_t axis, NormalizeAxis(op, axis_attr, ys));
  std::int64_t outer = 1;
  for (std::size_t k = 0; k < axis; ++k) outer *= ys.dim(k).size;
  std::size_t dst = 0;
  for (std::int64_t r = 0; r < outer; ++r) {
    for (const Tensor* x : in) {
      const std::size_t row = x->data.size() / static_cast<std::size_t>(std::max<std::int64_t>(outer, 1));
      if (row > 0) std::memcpy(out[0].data.data() + dst, x->data.data() + r * row, row);  // empty inputs have no data
      dst += row;
    }
  }
  return Status::Ok();
}

Status ParamsAxis(const OpDesc& op, const std::vector<TensorDesc>& in, KernelParams& p) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.Attr<std::int64_t>("axis"));
  NPUFLOW_ASSIGN_OR_RETURN(std::size_t axis, NormalizeAxis(op, axis_attr, in[0].shape));
  p.ints[0] = static_cast<std::int64_t>(axis);
  return Status::Ok();
}

// ---- Split ------------------------------------------------------------------------------------------
Status InferSplit(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.Attr<std::int64_t>("axis"));
  const Shape& x = in[0].shape;
  NPUFLOW_ASSIGN_OR_RETURN(std::size_t axis, NormalizeAxis(op, axis_attr, x));
  const bool has_sizes = op.HasAttr("sizes"), has_num = op.HasAttr("num_split");
  if (has_sizes == has_num)
    return Status::ParamInvalid("node '{}' (Split): needs exactly one of the attributes 'sizes' and 'num_split'",
                                op.name());
  const Dim& d = x.dim(axis);
  std::vector<Dim> pieces;
  if (has_sizes) {
    NPUFLOW_ASSIGN_OR_RETURN(Ints sizes, op.Attr<Ints>("sizes"));
    std::int64_t sum = 0;
    bool ok = !sizes.empty();
    for (std::int64_t s : sizes) {
      ok = ok && s >= 0;
      sum += s;
      pieces.push_back(Dim::Static(s));
    }
    if (!ok || !d.is_static() || sum != d.size)
      return Status::ParamInvalid("node '{}' (Split): attribute 'sizes' {} does not split axis {} of {} (size {})",
                                  op.name(), IntsString(sizes), axis, x.ToString(), d.ToString());
  } else {
    NPUFLOW_ASSIGN_OR_RETURN(std::int64_t num, op.Attr<std::int64_t>("num_split"));
    if (num == 1) {
      pieces.push_back(d);  // one piece: the whole input, symbolic or not
    } else if (num < 1 || !d.is_static() || d.size % num != 0) {
      return Status::ParamInvalid("node '{}' (Split): attribute 'num_split' {} does not divide axis {} of {} (size {})",
                                  op.name(), num, axis, x.ToString(), d.ToString());
    } else {
      pieces.assign(static_cast<std::size_t>(num), Dim::Static(d.size / num));
    }
  }
  for (const Dim& piece : pieces) {
    std::vector<Dim> dims = x.dims();
    dims[axis] = piece;
    out.push_back(TensorDesc{in[0].dtype, Shape(std::move(dims))});
  }
  return Status::Ok();
}

// Each input row (the dims before the axis) is the outputs' rows one after the other.
Status RefSplit(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t axis_attr, op.Attr<std::int64_t>("axis"));
  const Shape& xs = in[0]->desc.shape;
  NPUFLOW_ASSIGN_OR_RETURN(std::size_t axis, NormalizeAxis(op, axis_attr, xs));
  std::int64_t outer = 1;
  for (std::size_t k = 0; k < axis; ++k) outer *= xs.dim(k).size;
  std::size_t src = 0;
  for (std::int64_t r = 0; r < outer; ++r) {
    for (Tensor& y : out) {
      const std::size_t row = y.data.size() / static_cast<std::size_t>(std::max<std::int64_t>(outer, 1));
      if (row > 0) std::memcpy(y.data.data() + r * row, in[0]->data.data() + src, row);  // empty pieces have no data
      src += row;
    }
  }
  return Status::Ok();
}

// ---- Slice ------------------------------------------------------------------------------------------
struct SliceSpec {
  Ints begin, stride;  // per dim: normalized, clamped begin and the stride (static dims only)
  std::vector<Dim> dims;
};

StatusOr<SliceSpec> ResolveSlice(const OpDesc& op, const Shape& x) {
  NPUFLOW_ASSIGN_OR_RETURN(Ints begin, op.Attr<Ints>("begin"));
  NPUFLOW_ASSIGN_OR_RETURN(Ints end, op.Attr<Ints>("end"));
  NPUFLOW_ASSIGN_OR_RETURN(Ints strides, op.AttrOr<Ints>("strides", Ints(x.rank(), 1)));
  for (const auto& [name, list] : std::initializer_list<std::pair<const char*, const Ints*>>{
           {"begin", &begin}, {"end", &end}, {"strides", &strides}}) {
    if (list->size() != x.rank())
      return Status::ParamInvalid("node '{}' (Slice): attribute '{}' {} has {} values, input {} has rank {}", op.name(),
                                  name, IntsString(*list), list->size(), x.ToString(), x.rank());
  }
  for (std::int64_t s : strides)
    if (s < 1)
      return Status::ParamInvalid("node '{}' (Slice): attribute 'strides' {} must be positive", op.name(),
                                  IntsString(strides));
  SliceSpec spec;
  for (std::size_t k = 0; k < x.rank(); ++k) {
    const Dim& d = x.dim(k);
    if (!d.is_static()) {
      // A symbolic dim survives only when taken whole.
      if (begin[k] != 0 || end[k] != std::numeric_limits<std::int64_t>::max() || strides[k] != 1)
        return Status::ParamInvalid(
            "node '{}' (Slice): dim {} of {} is symbolic: only begin 0, end {} (to the end), stride 1 is supported",
            op.name(), k, x.ToString(), std::numeric_limits<std::int64_t>::max());
      spec.begin.push_back(0);
      spec.stride.push_back(1);
      spec.dims.push_back(d);
      continue;
    }
    auto clamp = [&](std::int64_t v) { return v < 0 ? std::max<std::int64_t>(v + d.size, 0) : std::min(v, d.size); };
    const std::int64_t b = clamp(begin[k]), e = clamp(end[k]);
    spec.begin.push_back(b);
    spec.stride.push_back(strides[k]);
    spec.dims.push_back(Dim::Static(e > b ? (e - b + strides[k] - 1) / strides[k] : 0));
  }
  return spec;
}

Status InferSlice(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(SliceSpec spec, ResolveSlice(op, in[0].shape));
  out.push_back(TensorDesc{in[0].dtype, Shape(std::move(spec.dims))});
  return Status::Ok();
}

Status RefSlice(const OpDesc& op, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(SliceSpec spec, ResolveSlice(op, in[0]->desc.shape));
  const Shape& ys = out[0].desc.shape;
  const Ints xstride = Strides(in[0]->desc.shape);
  const std::size_t esize = DataTypeSize(in[0]->desc.dtype);
  Ints index(ys.rank(), 0);
  for (std::int64_t i = 0; i < Elements(out[0]); ++i) {
    std::int64_t src = 0;
    for (std::size_t k = 0; k < ys.rank(); ++k) src += (spec.begin[k] + index[k] * spec.stride[k]) * xstride[k];
    std::memcpy(out[0].data.data() + i * esize, in[0]->data.data() + src * esize, esize);
    for (std::size_t k = ys.rank(); k-- > 0;) {
      if (++index[k] < ys.dim(k).size) break;
      index[k] = 0;
    }
  }
  return Status::Ok();
}

Status ParamsSlice(const OpDesc& op, const std::vector<TensorDesc>& in, KernelParams& p) {
  NPUFLOW_ASSIGN_OR_RETURN(SliceSpec spec, ResolveSlice(op, in[0].shape));
  if (spec.begin.size() > static_cast<std::size_t>(kKernelInts))
    return Status::ParamInvalid("node '{}' (Slice): rank {} above the device kernel limit {}", op.name(),
                                spec.begin.size(), kKernelInts);
  for (std::size_t k = 0; k < spec.begin.size(); ++k) {
    if (spec.begin[k] >= (std::int64_t{1} << 32) || spec.stride[k] >= (std::int64_t{1} << 31))
      return Status::ParamInvalid("node '{}' (Slice): begin {} / stride {} of dim {} above the device kernel limits",
                                  op.name(), spec.begin[k], spec.stride[k], k);
    p.ints[k] = spec.begin[k] | spec.stride[k] << 32;
  }
  return Status::Ok();
}

// ---- Cast -------------------------------------------------------------------------------------------
// HcomAllReduce over a group of one rank: the sum of one tensor is itself.
Status InferAllReduce(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(std::string r, op.AttrOr<std::string>("reduction", "sum"));
  if (r != "sum" && r != "max" && r != "min" && r != "prod")
    return Status::ParamInvalid("node '{}' (HcomAllReduce): reduction '{}' is not one of sum, max, min, prod", op.name(), r);
  out = {in[0]};
  return Status::Ok();
}

Status InferCast(const OpDesc& op, const std::vector<TensorDesc>& in, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(DataType dtype, op.Attr<DataType>("dtype"));
  out.push_back(TensorDesc{dtype, in[0].shape});
  return Status::Ok();
}

// Float -> integer: truncated toward zero, saturated to [lo, hi]; NaN is 0.
std::int64_t TruncateSaturate(float v, double lo, double hi) {
  if (std::isnan(v)) return 0;
  const double t = std::trunc(static_cast<double>(v));
  if (t <= lo) return static_cast<std::int64_t>(lo);
  if (t >= hi) return hi >= 9.2e18 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(hi);
  return static_cast<std::int64_t>(t);
}

void StoreInt(Tensor& t, std::size_t i, std::int64_t v) {
  std::uint8_t* p = t.data.data();
  switch (t.desc.dtype) {
    case DataType::kInt32: { const auto x = static_cast<std::int32_t>(v); std::memcpy(p + 4 * i, &x, 4); break; }
    case DataType::kInt64: std::memcpy(p + 8 * i, &v, 8); break;
    case DataType::kUInt8: p[i] = static_cast<std::uint8_t>(v); break;
    case DataType::kBool: p[i] = v != 0 ? 1 : 0; break;
    default: StoreF(t, i, static_cast<float>(v)); break;
  }
}

Status RefCast(const OpDesc&, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  Tensor& y = out[0];
  const DataType to = y.desc.dtype;
  for (std::int64_t i = 0; i < Elements(x); ++i) {
    const auto u = static_cast<std::size_t>(i);
    if (IsFloat(x.desc.dtype)) {
      const float v = LoadF(x, u);
      switch (to) {
        case DataType::kInt32: StoreInt(y, u, TruncateSaturate(v, -2147483648.0, 2147483647.0)); break;
        case DataType::kInt64: StoreInt(y, u, TruncateSaturate(v, -9223372036854775808.0, 9223372036854775807.0)); break;
        case DataType::kUInt8: StoreInt(y, u, TruncateSaturate(v, 0, 255)); break;
        case DataType::kBool: StoreInt(y, u, v != 0 ? 1 : 0); break;
        default: StoreF(y, u, v); break;
      }
    } else {
      std::int64_t v = LoadI(x, u);
      if (x.desc.dtype == DataType::kBool) v = v != 0;
      StoreInt(y, u, v);
    }
  }
  return Status::Ok();
}

// ---- Variable ---------------------------------------------------------------------------------------
Status InferVariable(const OpDesc& op, const std::vector<TensorDesc>&, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(DataType dtype, op.Attr<DataType>("dtype"));
  NPUFLOW_ASSIGN_OR_RETURN(Shape shape, op.Attr<Shape>("shape"));
  const TensorDesc desc{dtype, std::move(shape)};
  if (!desc.bytes())
    return Status::ParamInvalid("node '{}' (Variable): attribute 'shape' {} must be static", op.name(),
                                desc.shape.ToString());
  if (op.HasAttr("value")) {
    NPUFLOW_ASSIGN_OR_RETURN(Tensor value, op.Attr<Tensor>("value"));
    if (!(value.desc == desc) || value.data.size() != *desc.bytes())
      return Status::ParamInvalid("node '{}' (Variable): attribute 'value' is {} ({} bytes), expected {} ({} bytes)",
                                  op.name(), value.desc.ToString(), value.data.size(), desc.ToString(), *desc.bytes());
  }
  out.push_back(desc);
  return Status::Ok();
}

Status RefVariable(const OpDesc& op, const std::vector<const Tensor*>&, std::vector<Tensor>& out) {
  if (op.HasAttr("value")) {
    NPUFLOW_ASSIGN_OR_RETURN(out[0], op.Attr<Tensor>("value"));
  } else {
    out[0] = ZeroTensor(out[0].desc);
  }
  return Status::Ok();
}

// ---- FileConstant -----------------------------------------------------------------------------------
struct FileConstantSource {
  std::string path;     // empty when the node names its file only by file_id
  std::string file_id;
  std::int64_t offset = 0;
  std::uint64_t length = 0;  // bytes; the tensor size
};

// The node's file and region. A node with only a file_id (ge.exec.value_bins, resolved by the
// external-weights pass) is fine for shape inference; reading it needs a path.
StatusOr<FileConstantSource> ResolveFileConstant(const OpDesc& op, const TensorDesc& desc) {
  FileConstantSource src;
  NPUFLOW_ASSIGN_OR_RETURN(src.path, op.AttrOr<std::string>("location", ""));
  if (src.path.empty()) {
    NPUFLOW_ASSIGN_OR_RETURN(src.path, op.AttrOr<std::string>("file_path", ""));
  }
  if (src.path.empty() && op.HasAttr("file_id")) {
    NPUFLOW_ASSIGN_OR_RETURN(src.file_id, op.Attr<std::string>("file_id"));
    if (src.file_id.empty()) return Status::ParamInvalid("node '{}' (FileConstant): attribute 'file_id' is empty", op.name());
  }
  if (src.path.empty() && src.file_id.empty())
    return Status::ParamInvalid("node '{}' (FileConstant): needs attribute 'location' or 'file_path'", op.name());
  const std::string file = src.path.empty() ? fmt::format("file_id {}", src.file_id) : src.path;
  if (!desc.bytes())
    return Status::ParamInvalid("node '{}' (FileConstant): attribute 'shape' {} must be static", op.name(),
                                desc.shape.ToString());
  NPUFLOW_ASSIGN_OR_RETURN(src.offset, op.AttrOr<std::int64_t>("offset", 0));
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t length, op.AttrOr<std::int64_t>("length", 0));
  if (src.offset < 0 || length < 0)
    return Status::ParamInvalid("node '{}' (FileConstant): offset {} and length {} of '{}' must not be negative",
                                op.name(), src.offset, length, file);
  src.length = *desc.bytes();
  if (length != 0 && static_cast<std::uint64_t>(length) != src.length)
    return Status::ParamInvalid("node '{}' (FileConstant): length {} bytes of '{}' differs from the tensor size {} bytes ({})",
                                op.name(), length, file, src.length, desc.ToString());
  return src;
}

Status InferFileConstant(const OpDesc& op, const std::vector<TensorDesc>&, std::vector<TensorDesc>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(DataType dtype, op.Attr<DataType>("dtype"));
  NPUFLOW_ASSIGN_OR_RETURN(Shape shape, op.Attr<Shape>("shape"));
  TensorDesc desc{dtype, std::move(shape)};
  NPUFLOW_RETURN_IF_ERROR(ResolveFileConstant(op, desc).status());
  out.push_back(std::move(desc));
  return Status::Ok();
}

Status RefFileConstant(const OpDesc& op, const std::vector<const Tensor*>&, std::vector<Tensor>& out) {
  NPUFLOW_ASSIGN_OR_RETURN(FileConstantSource src, ResolveFileConstant(op, out[0].desc));
  if (src.path.empty())
    return Status::ParamInvalid(
        "node '{}' (FileConstant): file_id '{}' names no file: it must be resolved through ge.exec.value_bins "
        "(the external-weights pass sets 'location')",
        op.name(), src.file_id);
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(src.path, ec);
  if (ec)
    return Status::NotFound("node '{}' (FileConstant): cannot read weight file '{}': {}", op.name(), src.path,
                            ec.message());
  const std::uint64_t need = static_cast<std::uint64_t>(src.offset) + src.length;
  if (size < need)
    return Status::ParamInvalid(
        "node '{}' (FileConstant): weight file '{}' has {} bytes, reading offset {} + length {} needs {}", op.name(),
        src.path, size, src.offset, src.length, need);
  std::ifstream file(src.path, std::ios::binary);
  out[0].data.resize(src.length);
  file.seekg(src.offset);
  file.read(reinterpret_cast<char*>(out[0].data.data()), static_cast<std::streamsize>(src.length));
  if (!file)
    return Status::Failed("node '{}' (FileConstant): reading {} bytes at offset {} of '{}' failed: {}", op.name(),
                          src.length, src.offset, src.path, std::strerror(errno));
  return Status::Ok();
}

// ---- tiling -----------------------------------------------------------------------------------------
// The device kernels split the elements of their outputs: one block per 4096, at most one per core.
template <OpDef::InferFn kInfer>
StatusOr<TilingInfo> TileByOutputs(const OpDesc& op, const std::vector<TensorDesc>& in,
                                   const std::vector<const Tensor*>&, int core_count) {
  std::vector<TensorDesc> out;
  NPUFLOW_RETURN_IF_ERROR(kInfer(op, in, out));
  std::int64_t n = 0;
  for (const TensorDesc& d : out) {
    const auto e = d.shape.num_elements();
    if (!e)
      return Status::ParamInvalid("node '{}' ({}): tiling needs static shapes, got {}", op.name(), op.type(),
                                  d.shape.ToString());
    n += *e;
  }
  TilingInfo t;
  t.block_dim = static_cast<std::uint32_t>(std::clamp<std::int64_t>((n + 4095) / 4096, 1, std::max(core_count, 1)));
  return t;
}

}  // namespace

// Reshape moves no data: its output is its input's bytes.
std::int64_t ViewReshape(const OpDesc&, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out, int) {
  return in.size() == 1 && out.size() == 1 && in[0].bytes() && in[0].bytes() == out[0].bytes() ? 0 : -1;
}

// A Split whose dims before the axis are all 1 cuts its input into consecutive byte ranges:
// piece k starts where pieces 0..k-1 end.
std::int64_t ViewSplit(const OpDesc& op, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
                       int output) {
  if (in.size() != 1 || output < 0 || static_cast<std::size_t>(output) >= out.size() || !in[0].bytes()) return -1;
  auto axis_attr = op.Attr<std::int64_t>("axis");
  if (!axis_attr.ok()) return -1;
  auto axis = NormalizeAxis(op, *axis_attr, in[0].shape);
  if (!axis.ok()) return -1;
  for (std::size_t k = 0; k < *axis; ++k)
    if (!in[0].shape.dim(k).is_static() || in[0].shape.dim(k).size != 1) return -1;
  std::uint64_t offset = 0;
  for (int k = 0; k < output; ++k) {
    auto bytes = out[static_cast<std::size_t>(k)].bytes();
    if (!bytes) return -1;
    offset += *bytes;
  }
  return static_cast<std::int64_t>(offset);
}

void RegisterTensorOps(OpRegistry& r) {
  r.Register({.type = "Reshape", .min_inputs = 1, .max_inputs = 1, .required_attrs = {"shape"},
              .infer = &InferReshape, .reference = &RefCopy, .tiling = &TileByOutputs<&InferReshape>,
              .device_kernel = DeviceKernelName("Reshape"), .inplace = {0}, .view = &ViewReshape});
  r.Register({.type = "Transpose", .min_inputs = 1, .max_inputs = 1, .required_attrs = {"perm"},
              .infer = &InferTranspose, .reference = &RefTranspose, .tiling = &TileByOutputs<&InferTranspose>,
              .params = &ParamsTranspose, .device_kernel = DeviceKernelName("Transpose")});
  r.Register({.type = "Concat", .min_inputs = 1, .max_inputs = 14, .required_attrs = {"axis"},
              .infer = &InferConcat, .reference = &RefConcat, .tiling = &TileByOutputs<&InferConcat>,
              .params = &ParamsAxis, .device_kernel = DeviceKernelName("Concat")});
  r.Register({.type = "Split", .min_inputs = 1, .max_inputs = 1, .required_attrs = {"axis"},
              .infer = &InferSplit, .reference = &RefSplit, .tiling = &TileByOutputs<&InferSplit>,
              .params = &ParamsAxis, .device_kernel = DeviceKernelName("Split"), .view = &ViewSplit});
  r.Register({.type = "Slice", .min_inputs = 1, .max_inputs = 1, .required_attrs = {"begin", "end"},
              .infer = &InferSlice, .reference = &RefSlice, .tiling = &TileByOutputs<&InferSlice>,
              .params = &ParamsSlice, .device_kernel = DeviceKernelName("Slice")});
  r.Register({.type = "Cast", .min_inputs = 1, .max_inputs = 1, .required_attrs = {"dtype"},
              .infer = &InferCast, .reference = &RefCast, .tiling = &TileByOutputs<&InferCast>,
              .device_kernel = DeviceKernelName("Cast")});
  r.Register({.type = "HcomAllReduce", .min_inputs = 1, .max_inputs = 1, .infer = &InferAllReduce,
              .reference = &RefCopy, .tiling = &TileByOutputs<&InferAllReduce>,
              .device_kernel = DeviceKernelName("HcomAllReduce"), .communication = true});
  r.Register({.type = "Variable", .min_inputs = 0, .max_inputs = 0, .required_attrs = {"dtype", "shape"},
              .engine = OpEngine::kHostLocal, .infer = &InferVariable, .reference = &RefVariable});
  r.Register({.type = "FileConstant", .min_inputs = 0, .max_inputs = 0, .required_attrs = {"dtype", "shape"},
              .engine = OpEngine::kHostLocal, .infer = &InferFileConstant, .reference = &RefFileConstant});
}

}  // namespace npuflow::graph
