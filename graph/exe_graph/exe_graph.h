// ExecuteGraph: what RT2.0 runs (seed 001 sections 4-5). Lowering turns a ComputeGraph into
// three of them (Init, Main, DeInit); an executor runs one as a loop over plain functions.
//
// A node names a registered kernel, reads and writes values (chains, by id) and waits for the
// nodes in its deps. Values carry data; deps carry order: the two are separate so that control
// flow can be expressed.
//   - kNormal: ready when every dep has fired since it last ran.
//   - kSwitch: after it runs, the word of its first output picks a branch b in [0, branches);
//     only the deps labelled with b (and unlabelled ones) of its successors count as fired.
//   - kMerge: ready when any one dep fires (a loop's head, the join after an If's branches).
// A node's readiness counter is reset the moment it becomes ready, so a node inside a loop runs
// again in the next iteration. A dep edge from outside a loop (or branch) to inside it must not
// exist: the loop's entry node waits for the outside producers and values are read directly.
// Every cycle passes through a merge node. The executors rely on these rules; Validate checks
// the structural ones.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "graph/ir/compute_graph.h"

namespace npuflow::exe {

enum class NodeKind : std::uint8_t { kNormal, kSwitch, kMerge };
std::string_view NodeKindName(NodeKind kind);

inline constexpr std::int64_t kNoPriority = std::numeric_limits<std::int64_t>::max();

// Runs after `node`; when `node` is a switch and `branch` >= 0, only when it picks `branch`.
struct ExeDep {
  int node = 0;
  int branch = -1;
  friend bool operator==(const ExeDep& a, const ExeDep& b) { return a.node == b.node && a.branch == b.branch; }
};

struct ExeNode {
  std::string name;
  std::string kernel;  // a type in the KernelRegistry
  NodeKind kind = NodeKind::kNormal;
  int branches = 0;          // kSwitch: how many branches its first output picks from
  std::vector<int> inputs;   // value ids
  std::vector<int> outputs;  // value ids
  std::vector<ExeDep> deps;
  std::int64_t priority = kNoPriority;  // smaller runs first among ready nodes
  graph::OpDesc::AttrMap attrs;         // compile-time data, read by the kernel's Prepare
};

struct ExeValue {
  std::string name;
  int producer = -1;  // the first node that writes it; -1: a graph input or a constant slot
};

class ExecuteGraph {
 public:
  explicit ExecuteGraph(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  const std::vector<ExeNode>& nodes() const { return nodes_; }
  std::vector<ExeNode>& mutable_nodes() { return nodes_; }  // not to rename: names are indexed
  const std::vector<ExeValue>& values() const { return values_; }
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return outputs_; }

  int AddValue(std::string name);
  // A graph input (fed by the caller before each execution) / output (read after it).
  int AddInput(std::string name);
  void AddOutput(int value) { outputs_.push_back(value); }
  // Adds `node` and returns its id. With deps_from_inputs, it also waits for the producer of
  // each input value (once each). Ids out of range and a repeated name are ParamInvalid naming
  // the node.
  StatusOr<int> AddNode(ExeNode node, bool deps_from_inputs = true);
  // One more dep of an existing node on an existing node (a loop's back edge). Out of range is a
  // ParamInvalid.
  Status AddDep(int node, ExeDep dep);
  int FindNode(std::string_view name) const;  // -1 when absent

  // The structural rules of the header comment: ids in range, switch and merge shapes, branch
  // labels only on deps from switches, every cycle through a merge node. Errors name the graph
  // and the node.
  Status Validate() const;
  // Whether any switch or merge node exists (the automatic executor choice).
  bool HasControlFlow() const;

  // One line per node: "  3 add [kernel Add] in(v1, v2) out(v3) deps(1, 2) prio 5".
  std::string ToText() const;

  // Replaces node ids in every dep after nodes were removed: `remap[old]` is the new id or -1.
  void RemapNodes(const std::vector<int>& remap);

 private:
  std::string name_;
  std::vector<ExeNode> nodes_;
  std::unordered_map<std::string, int> by_name_;
  std::vector<ExeValue> values_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
};

// What a loaded model needs and offers (GE's ModelDesc): its inputs and outputs, and the
// graph-level resources lowering counted.
struct ModelIoDesc {
  std::string name;
  graph::TensorDesc desc;  // symbolic dims where the shape is known only at run time
};
struct ModelDesc {
  std::vector<ModelIoDesc> inputs;
  std::vector<ModelIoDesc> outputs;
  int reusable_stream_num = 1;  // the main stream included
  int reusable_event_num = 0;
  int reusable_notify_num = 0;
  int attached_stream_num = 0;
  bool updates_variables = false;  // the model holds Variables: their state lives in one instance
};

// The three graphs of a model. Main's inputs are, in order: the model's inputs, the model's
// outputs (the tensors the caller gives to be written), then Init's outputs; DeInit's inputs are
// Init's outputs. Init and DeInit may be empty graphs.
struct ExecuteGraphSet {
  std::shared_ptr<ExecuteGraph> init;
  std::shared_ptr<ExecuteGraph> main;
  std::shared_ptr<ExecuteGraph> deinit;
  ModelDesc desc;
  // The three graphs exist and their inputs and outputs line up as above.
  Status Validate() const;
};

}  // namespace npuflow::exe
