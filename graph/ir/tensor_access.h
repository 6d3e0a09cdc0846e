// Element access for reference kernels: any storage type read and written as f32 (f16 and bf16
// are storage types; arithmetic accumulates in f32), plus allocation of a tensor's bytes.
#pragma once

#include <cstdint>
#include <cstring>

#include "graph/ir/compute_graph.h"
#include "graph/ir/half.h"

namespace npuflow::graph {

inline float LoadF(const Tensor& t, std::size_t i) {
  const std::uint8_t* p = t.data.data();
  switch (t.desc.dtype) {
    case DataType::kFloat32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DataType::kFloat16: { std::uint16_t v; std::memcpy(&v, p + 2 * i, 2); return HalfToFloat(v); }
    case DataType::kBFloat16: { std::uint16_t v; std::memcpy(&v, p + 2 * i, 2); return BFloat16ToFloat(v); }
    case DataType::kInt32: { std::int32_t v; std::memcpy(&v, p + 4 * i, 4); return static_cast<float>(v); }
    case DataType::kInt64: { std::int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<float>(v); }
    case DataType::kUInt8:
    case DataType::kBool: return static_cast<float>(p[i]);
  }
  return 0;
}

inline void StoreF(Tensor& t, std::size_t i, float v) {
  std::uint8_t* p = t.data.data();
  switch (t.desc.dtype) {
    case DataType::kFloat32: std::memcpy(p + 4 * i, &v, 4); break;
    case DataType::kFloat16: { std::uint16_t h = FloatToHalf(v); std::memcpy(p + 2 * i, &h, 2); break; }
    case DataType::kBFloat16: { std::uint16_t h = FloatToBFloat16(v); std::memcpy(p + 2 * i, &h, 2); break; }
    case DataType::kInt32: { auto x = static_cast<std::int32_t>(v); std::memcpy(p + 4 * i, &x, 4); break; }
    case DataType::kInt64: { auto x = static_cast<std::int64_t>(v); std::memcpy(p + 8 * i, &x, 8); break; }
    case DataType::kUInt8: p[i] = static_cast<std::uint8_t>(v); break;
    case DataType::kBool: p[i] = v != 0 ? 1 : 0; break;
  }
}

// Integer element i of an integer tensor (i32, i64, u8, bool), exactly.
inline std::int64_t LoadI(const Tensor& t, std::size_t i) {
  const std::uint8_t* p = t.data.data();
  switch (t.desc.dtype) {
    case DataType::kInt32: { std::int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DataType::kInt64: { std::int64_t v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case DataType::kUInt8:
    case DataType::kBool: return p[i];
    default: return static_cast<std::int64_t>(LoadF(t, i));
  }
}

// Stores an integer into an integer tensor, wrapping to the element's width (two's complement).
inline void StoreI(Tensor& t, std::size_t i, std::int64_t v) {
  std::uint8_t* p = t.data.data();
  switch (t.desc.dtype) {
    case DataType::kInt32: { auto x = static_cast<std::int32_t>(static_cast<std::uint32_t>(v)); std::memcpy(p + 4 * i, &x, 4); break; }
    case DataType::kInt64: std::memcpy(p + 8 * i, &v, 8); break;
    case DataType::kUInt8: p[i] = static_cast<std::uint8_t>(v); break;
    case DataType::kBool: p[i] = v != 0 ? 1 : 0; break;
    default: StoreF(t, i, static_cast<float>(v)); break;
  }
}

inline bool IsFloat(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16; }
inline bool IsInteger(DataType t) { return t == DataType::kInt32 || t == DataType::kInt64; }

// A zero-filled tensor of a static descriptor (empty data for a dynamic one).
inline Tensor ZeroTensor(const TensorDesc& desc) {
  Tensor t{desc, {}};
  t.data.assign(desc.bytes().value_or(0), 0);
  return t;
}

}  // namespace npuflow::graph
