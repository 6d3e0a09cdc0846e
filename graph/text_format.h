// The graph text format (protobuf TextFormat of proto/graph.proto's GraphDef) and the
// conversions between GraphDef and ComputeGraph.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "graph/compute_graph.h"
#include "proto/graph.pb.h"

namespace npuflow::graph {

// A ComputeGraph from a GraphDef. Errors name `source`, the node and what was wrong: a bad input
// reference ("x:a"), an input naming no node (dangling edge), an output index the producer does
// not have (when its outputs are declared), a missing or unknown subgraph, a bad dtype.
StatusOr<std::unique_ptr<ComputeGraph>> FromGraphDef(const proto::GraphDef& def, std::string_view source);
proto::GraphDef ToGraphDef(const ComputeGraph& graph);

// Text in, graph out; a syntax error names `source`, the line and the column.
StatusOr<std::unique_ptr<ComputeGraph>> ParseGraphText(std::string_view text, std::string_view source);
StatusOr<std::unique_ptr<ComputeGraph>> ReadGraphTextFile(const std::string& path);
// Deterministic: nodes in insertion order, attributes sorted by name.
std::string PrintGraphText(const ComputeGraph& graph);

}  // namespace npuflow::graph
