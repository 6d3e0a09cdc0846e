// Interpreter: runs a ComputeGraph directly on the CPU with each op's reference kernel. It is the
// oracle every runtime (v1 task sink, v2 executors) is compared against, so it is simple and
// strict rather than fast.
//
// A Run walks each graph in topological order. For every node it takes the input tensors, infers
// the output descriptors from the *actual* input shapes (so symbolic dims resolve per run),
// allocates zeroed outputs and calls the reference kernel. An intermediate tensor is freed after
// its last consumer. Special nodes:
//   - Data: the feed of that name (root graph), or the PartitionedCall's input (subgraph).
//   - Const: its `value` attribute, read in place (never copied per run).
//   - Variable: its state. A Variable's state starts from its `value` attribute (zeros when
//     absent) and persists across Run calls. Variables are identified by name across the root
//     graph and its subgraphs: same-named Variable nodes share one state and must declare the same
//     descriptor.
//   - PartitionedCall: runs its subgraph. The call's inputs feed the subgraph's Data nodes in the
//     order of their `index` attributes (when every Data node has one) or else in node order; its
//     outputs are the inputs of the subgraph's NetOutput, in order.
//   - If / While: run their subgraphs (graph/ops/control_flow.h has the rules).
//   - NetOutput: its inputs, in order, are the graph's outputs.
//
// The Variable update rule: an in-place op (OpDef::inplace[i] = j) whose in-place input j is read
// directly from a Variable, and whose output i has that Variable's dtype and shape, updates the
// Variable with output i (e.g. KvCacheWrite(cache=Variable, ...)). An output of another shape is a
// view (Reshape) and updates nothing. Updates take effect when the Run succeeds: within a Run every
// read of a Variable sees its value from the start of the Run, and a failed Run changes no
// Variable. Two updates of one Variable in one Run are an error naming both nodes.
//
// Not thread-safe: one Run at a time per Interpreter.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "graph/ops/op_registry.h"

namespace npuflow::graph {

class Interpreter {
 public:
  // Validates `graph` (and every subgraph a PartitionedCall calls): every op type is registered
  // and has a reference kernel (Data, Variable, PartitionedCall and NetOutput are run by the
  // interpreter itself), the graph has no cycle, the root graph has exactly one NetOutput, Data
  // nodes declare a dtype and shape, a PartitionedCall's input count matches its subgraph's Data
  // nodes, same-named Variables agree. Errors name the graph and the node. Registers the builtin
  // ops first. `graph` must outlive the Interpreter.
  static StatusOr<std::unique_ptr<Interpreter>> Create(const ComputeGraph& graph);

  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Runs the graph once. `feeds` holds one tensor per Data node of the root graph, by node name;
  // a feed must have the Data node's dtype and a static shape matching its declared shape (a
  // symbolic dim matches any size, but one symbol gets one size across all feeds). Returns the
  // inputs of the NetOutput node, in order. Errors: a missing feed (names the Data node), an
  // unknown feed name, a dtype / rank / dim / byte-size mismatch, a symbol bound to two sizes
  // (names the symbol and both sizes), and any inference or kernel error (naming the node).
  StatusOr<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& feeds);

  // The Variable's current state. A name that is no Variable is a NotFound listing the Variables.
  StatusOr<Tensor> GetVariable(const std::string& name) const;
  // Replaces a Variable's state; `value` must have the Variable's declared descriptor and size.
  Status SetVariable(const std::string& name, Tensor value);
  // The Variables' names, sorted.
  std::vector<std::string> VariableNames() const;

 private:
  struct NodePlan;
  struct GraphPlan;
  struct RunState;
  struct Slot;
  struct Frame;
  using DataNodes = std::vector<std::pair<const Node*, int>>;  // (node, position in the plan)

  explicit Interpreter(const ComputeGraph& graph);
  // Planning, in PlanGraph's order: each node's kind, then consumer counts, then Data order.
  Status PlanGraph(const ComputeGraph& graph);
  Status PlanCall(const Node& node, const std::string& where, NodePlan& np);
  Status PlanControlFlow(const Node& node, const std::string& where, NodePlan& np);
  Status PlanOp(const ComputeGraph& graph, const Node& node, const std::string& where, GraphPlan& plan,
                NodePlan& np);
  Status PlanVariable(const ComputeGraph& graph, const Node& node, const std::string& where, NodePlan& np);
  static void CountConsumers(GraphPlan& plan);
  static Status OrderDataNodes(const ComputeGraph& graph, bool is_root, DataNodes data, GraphPlan& plan);

  // Running, in RunGraph's order per node: inputs, the node's own step, then its outputs' slots.
  Status RunGraph(const GraphPlan& plan, std::vector<Slot>& data_inputs, RunState& run,
                  std::vector<Tensor>& outputs) const;
  static Status GatherInputs(const GraphPlan& plan, std::size_t pos, Frame& f);
  Status RunCall(const GraphPlan& plan, const NodePlan& np, Frame& f, RunState& run) const;
  Status RunControlFlow(const GraphPlan& plan, const NodePlan& np, Frame& f, RunState& run) const;
  static Status RunKernel(const GraphPlan& plan, const NodePlan& np, Frame& f);
  static void TakeOutputs(const NodePlan& np, Frame& f, std::vector<Tensor>& outputs);
  Status KeepOutputs(std::size_t pos, const NodePlan& np, Frame& f, RunState& run) const;

  const ComputeGraph* root_;
  std::unordered_map<const ComputeGraph*, std::unique_ptr<GraphPlan>> plans_;
  std::map<std::string, Tensor> variables_;
};

}  // namespace npuflow::graph
