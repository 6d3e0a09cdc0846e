#include "lowering/graph_index.h"

#include <algorithm>

namespace npuflow::lowering {

StatusOr<GraphIndex> GraphIndex::Build(const graph::ComputeGraph& graph) {
  GraphIndex ix;
  NPUFLOW_ASSIGN_OR_RETURN(ix.order_, graph.TopologicalOrder());
  const int n = ix.size();
  std::int64_t max_id = -1;
  for (const graph::Node* node : ix.order_) max_id = std::max(max_id, node->id());
  ix.pos_by_id_.assign(static_cast<std::size_t>(max_id + 1), -1);
  for (int i = 0; i < n; ++i) ix.pos_by_id_[ix.order_[i]->id()] = i;

  // Predecessors (deduplicated, ascending) in one pass; uses and successors by counting.
  ix.pred_begin_.assign(n + 1, 0);
  ix.uses_begin_.assign(n + 1, 0);
  ix.succ_begin_.assign(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    const graph::Node* node = ix.order_[i];
    const std::size_t first = ix.pred_.size();
    for (const graph::Endpoint& e : node->inputs()) {
      const int p = ix.pos(e.node);
      ix.pred_.push_back(p);
      ++ix.uses_begin_[p + 1];
    }
    for (const graph::Node* c : node->control_inputs()) ix.pred_.push_back(ix.pos(c));
    std::sort(ix.pred_.begin() + first, ix.pred_.end());
    ix.pred_.erase(std::unique(ix.pred_.begin() + first, ix.pred_.end()), ix.pred_.end());
    for (std::size_t k = first; k < ix.pred_.size(); ++k) ++ix.succ_begin_[ix.pred_[k] + 1];
    ix.pred_begin_[i + 1] = static_cast<int>(ix.pred_.size());
  }
  for (int i = 0; i < n; ++i) {
    ix.uses_begin_[i + 1] += ix.uses_begin_[i];
    ix.succ_begin_[i + 1] += ix.succ_begin_[i];
  }
  ix.uses_.resize(ix.uses_begin_[n]);
  ix.succ_.resize(ix.succ_begin_[n]);
  std::vector<int> use_fill(ix.uses_begin_.begin(), ix.uses_begin_.end() - 1);
  std::vector<int> succ_fill(ix.succ_begin_.begin(), ix.succ_begin_.end() - 1);
  for (int i = 0; i < n; ++i) {
    const graph::Node* node = ix.order_[i];
    for (std::size_t k = 0; k < node->inputs().size(); ++k) {
      const graph::Endpoint& e = node->inputs()[k];
      ix.uses_[use_fill[ix.pos(e.node)]++] = DataUse{i, static_cast<int>(k), e.index};
    }
    for (int p : ix.predecessors(i)) ix.succ_[succ_fill[p]++] = i;
  }
  // Within a producer, group by output (consumers stay in position order).
  for (int p = 0; p < n; ++p) {
    auto b = ix.uses_.begin() + ix.uses_begin_[p], e = ix.uses_.begin() + ix.uses_begin_[p + 1];
    if (e - b > 1)
      std::stable_sort(b, e, [](const DataUse& x, const DataUse& y) { return x.output < y.output; });
  }
  return ix;
}

std::span<const DataUse> GraphIndex::uses(int pos, int output) const {
  const DataUse* b = uses_.data() + uses_begin_[pos];
  const DataUse* e = uses_.data() + uses_begin_[pos + 1];
  while (b != e && b->output < output) ++b;
  const DataUse* end = b;
  while (end != e && end->output == output) ++end;
  return {b, static_cast<std::size_t>(end - b)};
}

int StreamOf(const graph::Node& node) {
  auto s = node.op().AttrOr<std::int64_t>("_stream", -1);
  return s.ok() ? static_cast<int>(*s) : -1;
}

StatusOr<SyncOrder> SyncOrder::Build(const GraphIndex& index) {
  SyncOrder so;
  const int n = index.size();
  so.stream_.assign(n, -1);
  so.seq_.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    so.stream_[i] = StreamOf(*index.node(i));
    so.streams_ = std::max(so.streams_, so.stream_[i] + 1);
  }
  const int S = so.streams_;
  so.clocks_.assign(static_cast<std::size_t>(n) * std::max(S, 1), 0);
  std::vector<int> current(static_cast<std::size_t>(S) * S, 0);  // [stream][s]
  std::vector<std::vector<int>> event_clock;
  for (int i = 0; i < n; ++i) {
    const graph::Node& node = *index.node(i);
    const int t = so.stream_[i];
    if (t < 0) continue;
    int* clock = &so.clocks_[static_cast<std::size_t>(i) * S];
    std::copy_n(&current[static_cast<std::size_t>(t) * S], S, clock);
    auto recv = node.op().AttrOr<std::vector<std::int64_t>>("_recv_events", {});
    if (!recv.ok()) return recv.status();
    for (std::int64_t e : *recv) {
      if (e < 0 || static_cast<std::size_t>(e) >= event_clock.size() || event_clock[e].empty())
        return Status::ParamInvalid("node '{}' waits for event {}, which no earlier node records", node.name(), e);
      for (int s = 0; s < S; ++s) clock[s] = std::max(clock[s], event_clock[e][s]);
    }
    so.seq_[i] = clock[t] = current[static_cast<std::size_t>(t) * S + t] + 1;
    std::copy_n(clock, S, &current[static_cast<std::size_t>(t) * S]);
    auto send = node.op().AttrOr<std::vector<std::int64_t>>("_send_events", {});
    if (!send.ok()) return send.status();
    for (std::int64_t e : *send) {
      if (e < 0) return Status::ParamInvalid("node '{}' records event {}", node.name(), e);
      if (static_cast<std::size_t>(e) >= event_clock.size()) event_clock.resize(e + 1);
      event_clock[e].assign(clock, clock + S);
    }
  }
  return so;
}

bool SyncOrder::HappensBefore(int a, int b) const {
  if (a == b) return false;
  const int sa = stream_[a];
  if (sa < 0) return true;  // no task: ready from the start (or, for NetOutput, compared below)
  if (stream_[b] < 0) return true;  // b runs no task: only NetOutput reads, after the model ends
  return clock(b)[sa] >= seq_[a];
}

}  // namespace npuflow::lowering
