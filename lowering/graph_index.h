// What most passes need to walk a graph in linear time: the stable topological order, each
// node's position in it, and each node's data and control consumers. Built once per pass in
// O(nodes + edges); invalid after the graph changes.
#pragma once

#include <span>
#include <vector>

#include "base/status.h"
#include "graph/ir/compute_graph.h"

namespace npuflow::lowering {

struct DataUse {
  int consumer = 0;  // position of the consuming node
  int input = 0;     // which of its inputs
  int output = 0;    // which output of the producer it reads
};

// Flat arrays (one allocation each, whatever the node count): a pass builds one per run.
class GraphIndex {
 public:
  static StatusOr<GraphIndex> Build(const graph::ComputeGraph& graph);

  const std::vector<graph::Node*>& order() const { return order_; }
  int size() const { return static_cast<int>(order_.size()); }
  graph::Node* node(int pos) const { return order_[pos]; }
  int pos(const graph::Node* node) const { return pos_by_id_[node->id()]; }
  // Data consumers of output `output` of the node at `pos`, in consumer position order.
  std::span<const DataUse> uses(int pos, int output) const;
  // Positions of the nodes that read the node at `pos` through a data or control edge, once each.
  std::span<const int> successors(int pos) const { return Range(succ_, succ_begin_, pos); }
  // Positions of the node's data and control producers, once each, ascending.
  std::span<const int> predecessors(int pos) const { return Range(pred_, pred_begin_, pos); }

 private:
  template <typename T>
  static std::span<const T> Range(const std::vector<T>& flat, const std::vector<int>& begin, int pos) {
    return {flat.data() + begin[pos], static_cast<std::size_t>(begin[pos + 1] - begin[pos])};
  }
  std::vector<graph::Node*> order_;
  std::vector<int> pos_by_id_;
  std::vector<DataUse> uses_;  // grouped by producer position, then output, then consumer
  std::vector<int> uses_begin_;
  std::vector<int> pred_, pred_begin_;
  std::vector<int> succ_, succ_begin_;
};

// Happens-before among the nodes that run on streams, from the annotations assign-streams and
// insert-events leave (_stream, _send_events, _recv_events). Tasks run in topological order on
// each stream; a wait orders everything its record's stream ran before the record.
class SyncOrder {
 public:
  static StatusOr<SyncOrder> Build(const GraphIndex& index);

  int stream_count() const { return streams_; }
  int stream(int pos) const { return stream_[pos]; }  // -1: runs no task
  int seq(int pos) const { return seq_[pos]; }        // 1-based place on its stream
  // What the node at `pos` knows has finished when it starts: per stream, the last seq done
  // (its own stream: its own seq). Null for a node without a stream.
  const int* clock(int pos) const { return stream_[pos] < 0 ? nullptr : &clocks_[static_cast<std::size_t>(pos) * streams_]; }
  // True when node `a`'s task finishes before node `b`'s starts. A node without a stream (Data,
  // Const, Variable) is ready before everything; NetOutput after everything.
  bool HappensBefore(int a, int b) const;

 private:
  int streams_ = 0;
  std::vector<int> stream_;
  std::vector<int> seq_;
  std::vector<int> clocks_;  // [pos * streams_ + s]
};

// The node's stream from its _stream annotation, or -1.
int StreamOf(const graph::Node& node);

}  // namespace npuflow::lowering
