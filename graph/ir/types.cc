#include "graph/ir/types.h"

#include <array>
#include <limits>

#include <fmt/format.h>

namespace npuflow::graph {
namespace {

constexpr std::array<std::pair<std::string_view, DataType>, 7> kTypes = {{
    {"f32", DataType::kFloat32},
    {"f16", DataType::kFloat16},
    {"bf16", DataType::kBFloat16},
    {"i32", DataType::kInt32},
    {"i64", DataType::kInt64},
    {"u8", DataType::kUInt8},
    {"bool", DataType::kBool},
}};

}  // namespace

std::size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kUInt8: return 1;
    case DataType::kBool: return 1;
  }
  return 0;
}

std::string_view DataTypeName(DataType dtype) {
  for (const auto& [name, t] : kTypes)
    if (t == dtype) return name;
  return "unknown";
}

StatusOr<DataType> ParseDataType(std::string_view name) {
  for (const auto& [n, t] : kTypes)
    if (n == name) return t;
  return Status::ParamInvalid("unknown data type '{}' (expected f32, f16, bf16, i32, i64, u8 or bool)", name);
}

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  for (std::int64_t d : dims) dims_.push_back(Dim::Static(d));
}

bool Shape::is_static() const {
  for (const Dim& d : dims_)
    if (!d.is_static()) return false;
  return true;
}

std::optional<std::int64_t> Shape::num_elements() const {
  std::int64_t n = 1;
  for (const Dim& d : dims_) {
    if (!d.is_static()) return std::nullopt;
    if (d.size != 0 && n > std::numeric_limits<std::int64_t>::max() / d.size) return std::nullopt;
    n *= d.size;
  }
  return n;
}

std::string Shape::ToString() const {
  std::string out = "[";
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (i) out += ", ";
    out += dims_[i].ToString();
  }
  return out + "]";
}

std::optional<std::uint64_t> TensorDesc::bytes() const {
  auto n = shape.num_elements();
  if (!n) return std::nullopt;
  const std::uint64_t elements = static_cast<std::uint64_t>(*n), size = DataTypeSize(dtype);
  if (size != 0 && elements > std::numeric_limits<std::uint64_t>::max() / size) return std::nullopt;
  return elements * size;
}

std::string TensorDesc::ToString() const { return fmt::format("{}{}", DataTypeName(dtype), shape.ToString()); }

}  // namespace npuflow::graph
