// assign-streams (seed 002, section 9): which stream each task-running node goes on.
//
// Single-stream mode: every such node on stream 0. Multi-stream mode, in topological order: a node
// continues a predecessor's stream when they share an engine, the predecessor is still that
// stream's last node, and neither is marked _independent; the latest such predecessor wins (the
// longest chain stays on one stream). Otherwise the node opens a new stream for its engine, up to
// max_parallel streams per engine; past that it joins the engine's stream with the fewest nodes.
//
// npuflow: GE opens new streams for every successor of a fork (a predecessor with several
// successors on its engine); here the first successor continues the stream, which saves a stream
// and an event pair per fork and orders nothing that was not ordered.
#include <limits>

#include "lowering/graph_index.h"
#include "lowering/pass.h"

namespace npuflow::lowering {

Status AssignStreamsPass(PassContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(GraphIndex index, GraphIndex::Build(ctx.graph));
  const bool single = ctx.options.stream_mode == CompileOptions::StreamMode::kSingle;
  if (ctx.options.max_parallel < 1)
    return Status::ParamInvalid("max_parallel is {}, expected 1 to 64", ctx.options.max_parallel);
  struct StreamInfo {
    std::string engine;
    int tail = -1;  // position of its last node
    int nodes = 0;
  };
  std::vector<StreamInfo> streams;
  std::vector<int> stream_of(index.size(), -1);
  std::vector<std::string> engine_of(index.size());
  std::vector<char> independent(index.size(), 0);
  for (int pos = 0; pos < index.size(); ++pos) {
    graph::Node& node = *index.node(pos);
    node.op().RemoveAttr("_stream");
    auto engine = node.op().Attr<std::string>("_engine");
    if (!engine.ok())
      return Status::ParamInvalid("node '{}' has no _engine: assign-streams runs after assign-engines", node.name());
    engine_of[pos] = *engine;
    NPUFLOW_ASSIGN_OR_RETURN(bool ind, node.op().AttrOr<bool>("_independent", false));
    independent[pos] = ind;
    if (*engine == graph::OpEngineName(graph::OpEngine::kHostLocal)) continue;

    int chosen = -1;
    if (single) {
      if (streams.empty()) streams.push_back({*engine});
      chosen = 0;
    } else {
      const auto preds = index.predecessors(pos);
      for (auto it = preds.rbegin(); chosen < 0 && !independent[pos] && it != preds.rend(); ++it) {
        const int p = *it;
        const int s = stream_of[p];
        if (s >= 0 && !independent[p] && engine_of[p] == *engine && streams[s].tail == p) chosen = s;
      }
      if (chosen < 0) {
        int count = 0, fewest = -1;
        for (int s = 0; s < static_cast<int>(streams.size()); ++s) {
          if (streams[s].engine != *engine) continue;
          ++count;
          if (fewest < 0 || streams[s].nodes < streams[fewest].nodes) fewest = s;
        }
        if (count < ctx.options.max_parallel) {
          chosen = static_cast<int>(streams.size());
          streams.push_back({*engine});
        } else {
          chosen = fewest;
        }
      }
    }
    stream_of[pos] = chosen;
    streams[chosen].tail = pos;
    ++streams[chosen].nodes;
    node.op().SetAttr("_stream", static_cast<std::int64_t>(chosen));
  }
  return Status::Ok();
}

}  // namespace npuflow::lowering
