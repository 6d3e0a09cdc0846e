// Control flow in the op library: If and While, ops whose bodies are subgraphs of the root graph
// (named by SubgraphRef attributes, like PartitionedCall's "f").
//
//   If(cond, x1..xn)    then_branch: @g1, else_branch: @g2
//     Runs one branch on x1..xn and returns its outputs. Both branches take n inputs (their Data
//     nodes, ordered as PartitionedCall's are) and return the same number of outputs of the same
//     dtypes and ranks; a dim the branches disagree on is unknown (a fresh symbol) after the If.
//   While(x1..xn)       cond: @c, body: @b [, max_iterations: int, default 1,000,000]
//     While cond(vars) is true: vars = body(vars); returns vars. cond takes n inputs and returns
//     one tensor; body takes n and returns n of the same dtypes and ranks (a dim the body changes
//     becomes unknown after the While). More than max_iterations iterations is an error naming
//     the node: a loop that does not end is reported, never run forever.
//
// A condition is true when it holds one element that is not zero, or, holding several, when it
// is not empty (TensorFlow's rule; GE follows it). Every runtime that runs control flow (the
// interpreter, RT2.0's lowering) uses these helpers, so they agree.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "graph/ops/op_registry.h"

namespace npuflow::graph {

inline constexpr std::string_view kIfThenAttr = "then_branch";
inline constexpr std::string_view kIfElseAttr = "else_branch";
inline constexpr std::string_view kWhileCondAttr = "cond";
inline constexpr std::string_view kWhileBodyAttr = "body";
inline constexpr std::string_view kWhileMaxIterationsAttr = "max_iterations";
inline constexpr std::int64_t kDefaultMaxIterations = 1'000'000;

bool IsControlFlowOp(std::string_view type);  // If or While
// Whether `graph` or any subgraph it owns has an If or While node.
bool HasControlFlow(const ComputeGraph& graph);

// The subgraph a control-flow node names in `attr`, looked up in the root graph. A missing
// attribute or an unknown name is a ParamInvalid naming the node.
StatusOr<const ComputeGraph*> BranchGraph(const Node& node, std::string_view attr);
// A subgraph's Data nodes in input order: by their `index` attributes when every one has one
// (distinct, 0..n-1), else in node order. Its NetOutput (exactly one).
StatusOr<std::vector<Node*>> SubgraphInputs(const ComputeGraph& graph);
StatusOr<Node*> SubgraphOutput(const ComputeGraph& graph);
// While's iteration limit (the attribute, default kDefaultMaxIterations; must be positive).
StatusOr<std::int64_t> MaxIterations(const Node& node);

// The truth of a condition tensor (see the header).
bool ConditionIsTrue(const Tensor& cond);

// Shape inference of a graph whose Data nodes take `args` (a subgraph) or their declared shapes
// (args == nullptr: the root). Every node's outputs are set, If and While through their
// subgraphs. Errors name the graph and the node.
Status InferGraphShapes(ComputeGraph& graph, const std::vector<TensorDesc>* args);

void RegisterControlFlowOps(OpRegistry& registry);

}  // namespace npuflow::graph
