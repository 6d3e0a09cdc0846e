// Element types and shapes of the ComputeGraph IR.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace npuflow::graph {

// f16 and bf16 are storage types: arithmetic on them accumulates in f32.
enum class DataType : std::uint8_t { kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool };

std::size_t DataTypeSize(DataType dtype);
std::string_view DataTypeName(DataType dtype);  // "f32", "f16", "bf16", "i32", "i64", "u8", "bool"
// Accepts the names above. Anything else is a ParamInvalid listing them.
StatusOr<DataType> ParseDataType(std::string_view name);

// One dimension: a static size, or a dynamic one named by a symbol ("seq"); dims with the same
// symbol have the same size at run time.
struct Dim {
  std::int64_t size = -1;  // >= 0 when static
  std::string symbol;      // set when dynamic

  static Dim Static(std::int64_t n) { return Dim{n, {}}; }
  static Dim Symbolic(std::string name) { return Dim{-1, std::move(name)}; }
  bool is_static() const { return size >= 0; }
  std::string ToString() const { return is_static() ? std::to_string(size) : symbol; }  // "768", "seq"
  friend bool operator==(const Dim& a, const Dim& b) { return a.size == b.size && a.symbol == b.symbol; }
};

class Shape {
 public:
  Shape() = default;  // a scalar
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::vector<Dim> dims) : dims_(std::move(dims)) {}

  std::size_t rank() const { return dims_.size(); }
  const Dim& dim(std::size_t i) const { return dims_[i]; }
  const std::vector<Dim>& dims() const { return dims_; }
  bool is_static() const;
  // The element count of a static shape; nullopt if a dim is dynamic or the count overflows.
  std::optional<std::int64_t> num_elements() const;
  std::string ToString() const;  // "[2, seq, 768]"; "[]" for a scalar

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }

 private:
  std::vector<Dim> dims_;
};

struct TensorDesc {
  DataType dtype = DataType::kFloat32;
  Shape shape;
  // Bytes of a static tensor; nullopt when the shape is dynamic or the bytes do not fit 64 bits.
  std::optional<std::uint64_t> bytes() const;
  std::string ToString() const;  // "f32[2, 3]"
  friend bool operator==(const TensorDesc& a, const TensorDesc& b) { return a.dtype == b.dtype && a.shape == b.shape; }
};

}  // namespace npuflow::graph
