// The graph text format (protobuf TextFormat of proto/graph.proto's GraphDef) and the
// conversions between GraphDef and ComputeGraph.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "proto/graph.pb.h"

namespace npuflow::graph {

// A constant tensor given without values is zeros, up to this many bytes: the reader allocates
// them, and a few bytes of text must not ask it for gigabytes. Larger constants give their values
// (`data`, `float_val`, `int_val`), or live in a weight file as a FileConstant.
inline constexpr std::uint64_t kMaxZeroLiteralBytes = std::uint64_t{16} << 20;

// Messages nested deeper than this in a graph text are a syntax error (the parser recurses).
inline constexpr int kMaxTextNesting = 100;

// A ComputeGraph from a GraphDef. Errors name `source`, the node and what was wrong: a bad input
// reference ("x:a"), an input naming no node (dangling edge), an output index the producer does
// not have (when its outputs are declared), a missing or unknown subgraph, a bad dtype.
StatusOr<std::unique_ptr<ComputeGraph>> FromGraphDef(const proto::GraphDef& def, std::string_view source);
proto::GraphDef ToGraphDef(const ComputeGraph& graph);

// The element-type and shape conversions the text format and the model file share. An undefined
// type, a negative size or a symbol-less dynamic dim is a ParamInvalid naming `where`.
StatusOr<DataType> DataTypeFromProto(proto::DataType t, std::string_view where);
proto::DataType DataTypeToProto(DataType t);
StatusOr<Shape> ShapeFromProto(const proto::Shape& s, std::string_view where);
proto::Shape ShapeToProto(const Shape& s);
// An attribute value; a value of no known kind is a ParamInvalid naming `where`.
StatusOr<AttrValue> AttrValueFromProto(const proto::AttrValue& a, std::string_view where);
proto::AttrValue AttrValueToProto(const AttrValue& v);

// Text in, graph out; a syntax error names `source`, the line and the column.
StatusOr<std::unique_ptr<ComputeGraph>> ParseGraphText(std::string_view text, std::string_view source);
StatusOr<std::unique_ptr<ComputeGraph>> ReadGraphTextFile(const std::string& path);
// Deterministic: nodes in insertion order, attributes sorted by name.
std::string PrintGraphText(const ComputeGraph& graph);

// A compact listing, one node per line, for people and for pass tests:
//   graph "g"
//     x = Data() -> f32[2, 3] {dtype=f32, shape=[2, 3]}
//     y = Add(x, w:0, ^c) -> f32[2, 3] {_stream=0}
// Attributes sorted by name; a tensor attribute shows its type and up to 4 values. Subgraphs
// follow the root, each under its own "graph" line.
std::string PrintGraphSummary(const ComputeGraph& graph);

}  // namespace npuflow::graph
