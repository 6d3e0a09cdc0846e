// insert-events: one event (a record on the producer's stream after it, a wait on the consumer's
// stream before it) per cross-stream dependency that is not already ordered.
//
// Nodes are taken in topological order, which is each stream's task order. Each stream carries a
// vector clock: for every stream, the last task known finished. A dependency p -> n across
// streams is already ordered when n's stream clock has reached p (an earlier wait covered it,
// directly or through a third stream); only otherwise is a pair emitted, and n's clock takes p's.
// Predecessors are taken latest first, so one wait for a late producer covers its stream's
// earlier ones. This drops both redundant cases GE drops (an earlier sender to the same receiver;
// the same sender to a later receiver on that stream) and the transitive ones; event ids are
// dense from 0 in emission order.
#include <algorithm>

#include "lowering/graph_index.h"
#include "lowering/pass.h"

namespace npuflow::lowering {

Status InsertEventsPass(PassContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(GraphIndex index, GraphIndex::Build(ctx.graph));
  const int n = index.size();
  int S = 0;
  std::vector<int> stream(n);
  for (int pos = 0; pos < n; ++pos) {
    graph::Node& node = *index.node(pos);
    node.op().RemoveAttr("_send_events");
    node.op().RemoveAttr("_recv_events");
    stream[pos] = StreamOf(node);
    S = std::max(S, stream[pos] + 1);
  }
  std::vector<int> current(static_cast<std::size_t>(S) * S, 0);  // [stream][s]
  std::vector<int> clocks(static_cast<std::size_t>(n) * std::max(S, 1), 0);
  std::vector<int> seq(n, 0);
  std::vector<std::vector<std::int64_t>> send(n), recv(n);
  std::int64_t next_event = 0;
  std::vector<int> preds;
  for (int pos = 0; pos < n; ++pos) {
    const int t = stream[pos];
    if (t < 0) continue;
    int* clock = &clocks[static_cast<std::size_t>(pos) * S];
    std::copy_n(&current[static_cast<std::size_t>(t) * S], S, clock);
    preds.assign(index.predecessors(pos).begin(), index.predecessors(pos).end());
    std::sort(preds.rbegin(), preds.rend());
    for (int p : preds) {
      const int s = stream[p];
      if (s < 0 || s == t || clock[s] >= seq[p]) continue;
      const std::int64_t e = next_event++;
      send[p].push_back(e);
      recv[pos].push_back(e);
      const int* pc = &clocks[static_cast<std::size_t>(p) * S];
      for (int k = 0; k < S; ++k) clock[k] = std::max(clock[k], pc[k]);
    }
    seq[pos] = clock[t] = current[static_cast<std::size_t>(t) * S + t] + 1;
    std::copy_n(clock, S, &current[static_cast<std::size_t>(t) * S]);
  }
  for (int pos = 0; pos < n; ++pos) {
    graph::OpDesc& op = index.node(pos)->op();
    if (!send[pos].empty()) op.SetAttr("_send_events", std::move(send[pos]));
    if (!recv[pos].empty()) op.SetAttr("_recv_events", std::move(recv[pos]));
  }
  return Status::Ok();
}

}  // namespace npuflow::lowering
