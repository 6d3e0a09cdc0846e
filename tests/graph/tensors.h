// Test helpers: small tensors from values, and their values back as floats.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "graph/ir/compute_graph.h"
#include "graph/ir/tensor_access.h"

namespace npuflow::graph {

template <typename T>
Tensor MakeTensor(DataType dtype, Shape shape, const std::vector<T>& values) {
  Tensor t{TensorDesc{dtype, std::move(shape)}, {}};
  t.data.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

inline Tensor F32(Shape shape, std::vector<float> values) { return MakeTensor(DataType::kFloat32, std::move(shape), values); }
inline Tensor I32(Shape shape, std::vector<std::int32_t> values) {
  return MakeTensor(DataType::kInt32, std::move(shape), values);
}
inline Tensor I64(Shape shape, std::vector<std::int64_t> values) {
  return MakeTensor(DataType::kInt64, std::move(shape), values);
}

// Every element as f32, whatever the storage type.
inline std::vector<float> Floats(const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.desc.shape.num_elements().value_or(0)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = LoadF(t, i);
  return v;
}

}  // namespace npuflow::graph
