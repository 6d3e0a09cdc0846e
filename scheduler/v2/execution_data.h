// ExecutionData: an ExecuteGraph made ready to run (GE's execution data). Kernels resolved to
// function pointers, one chain per value, one KernelContext per node, and the arrays the
// executors loop over: plain data, built once at load, reused by every execution.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "graph/exe_graph/exe_graph.h"
#include "graph/exe_graph/kernel_registry.h"

namespace npuflow::v2 {

// What a loop iteration needs of a node: GE's { node_id, func, context }.
struct ExecNode {
  exe::KernelRunFn fn = nullptr;
  exe::KernelContext* ctx = nullptr;
};

class ExecutionData {
 public:
  // Validates the graph, resolves every kernel (an unknown one is a NotFound naming the node and
  // the kernel), runs each kernel's Prepare and outputs creator, and lays out the arrays.
  static StatusOr<std::unique_ptr<ExecutionData>> Build(std::shared_ptr<const exe::ExecuteGraph> graph,
                                                        const exe::KernelRegistry& registry = exe::KernelRegistry::Global());

  ExecutionData(const ExecutionData&) = delete;
  ExecutionData& operator=(const ExecutionData&) = delete;

  const exe::ExecuteGraph& graph() const { return *graph_; }
  std::uint32_t node_count() const { return static_cast<std::uint32_t>(nodes.size()); }
  exe::Chain& value(int id) { return chains_[id]; }
  exe::Chain& input(std::size_t i) { return chains_[graph_->inputs()[i]]; }
  exe::Chain& output(std::size_t i) { return chains_[graph_->outputs()[i]]; }
  exe::RunState& run_state() { return run_; }
  bool has_control_flow() const { return has_control_flow_; }
  int launch_nodes() const { return launch_nodes_; }
  int critical_sections() const { return critical_sections_; }

  // Puts the counters back to their initial values (after a failed or partial execution).
  void RestoreCounters() { counter = init_counter; }
  // The error of node `id` that returned `code`: its name and kernel, the kernel's message and
  // its exception dump.
  Status NodeFailure(std::uint32_t id, std::uint32_t code);

  // --- What the executors read. Indexed by node id unless said otherwise.
  std::vector<ExecNode> nodes;
  // Sequential order (topological; among ready nodes the smaller priority, then the smaller
  // id), and the nodes in that order. Empty when the graph has control flow.
  std::vector<ExecNode> sequence;
  // Readiness: a node is ready when its counter drops to 0, and its counter is then reset at once.
  std::vector<std::int32_t> init_counter;
  std::vector<std::int32_t> counter;
  // Successor groups: node i's are [group_begin[i], group_begin[i + 1]); a switch has one per
  // branch, any other node one. Group g's successors: succ[group_offset[g] .. group_offset[g + 1]).
  std::vector<std::uint32_t> group_begin;
  std::vector<std::uint32_t> group_offset;
  std::vector<std::uint32_t> succ;
  std::vector<std::uint32_t> roots;         // counter 0 at the start
  std::vector<std::uint64_t> priority_key;  // (priority << 32) | id; no priority sorts last
  std::vector<exe::NodeKind> kinds;
  std::vector<std::int32_t> branches;       // a switch's branch count
  std::vector<exe::KernelTag> tags;
  std::vector<std::int32_t> critical_section;  // index of the node's key; -1: none
  // The topological executors' ready queues, sized once (no allocation while executing).
  std::vector<std::uint32_t> ready_ring;  // FIFO ring of node_count() + 1 slots
  std::vector<std::uint64_t> ready_heap;  // priority keys, capacity node_count()

 private:
  ExecutionData() = default;
  Status Layout();

  std::shared_ptr<const exe::ExecuteGraph> graph_;
  std::unique_ptr<exe::Chain[]> chains_;
  std::vector<exe::Chain*> chain_ptrs_;
  std::unique_ptr<exe::KernelContext[]> contexts_;
  std::vector<std::shared_ptr<const void>> infos_;
  exe::RunState run_;
  bool has_control_flow_ = false;
  int launch_nodes_ = 0;
  int critical_sections_ = 0;
};

}  // namespace npuflow::v2
