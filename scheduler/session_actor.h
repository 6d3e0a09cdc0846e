// The Session's state as an actor (SessionActor, private to scheduler/): the session's graph
// table, whether it is finalized, and the lease on each graph (one build or load at a time). The
// Session's methods are host-side calls that ask it; the blocking work a lease covers (compiling,
// loading, unloading) runs on the caller while it holds the lease, so a fiber waiting for a graph
// yields instead of blocking its thread on a mutex.
//
// A run of a loaded graph takes no lease: `Use` answers with the loaded model at once (one round
// trip), and only a graph that must be built or (re)loaded first is leased.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/system.h"
#include "scheduler/davinci_model.h"
#include "scheduler/run_loop.h"
#include "scheduler/session.h"
#include "scheduler/v2/rt_v2_executor.h"

namespace npuflow::scheduler {

namespace session_msg {
using NodePtr = std::shared_ptr<Session::GraphNode>;
struct Insert {  // Ask<void>: ParamInvalid if the id is in use, Failed once finalized
  static constexpr std::string_view kKind = "Insert";
  std::uint32_t id = 0;
  NodePtr node;
  std::string use;  // how an id in use is reported ("cannot fork graph 3 onto graph id 4")
};
// Ask<Used>: the graph, leased unless `run` finds it loaded (then `model` is set, no lease).
struct Use {
  static constexpr std::string_view kKind = "Use";
  std::uint32_t id = 0;
  bool run = false;
};
struct Used {
  NodePtr node;
  std::shared_ptr<DavinciModel> model;  // set: loaded, not leased
  std::shared_ptr<v2::RtV2SimpleExecutor> v2;  // set: a loaded dynamic-shape graph, not leased
  std::shared_ptr<PipelineExecutor> pipeline;  // set: a loaded pipeline-stage graph, not leased
};
struct Lease {  // Ask<Used>: the lease on a node already found (e.g. taken out of the table)
  static constexpr std::string_view kKind = "Lease";
  NodePtr node;
};
struct Release {  // Send: ends the lease; the next waiter gets it
  static constexpr std::string_view kKind = "Release";
  NodePtr node;
};
struct Remove {  // Ask<NodePtr>: out of the table (NotFound if absent)
  static constexpr std::string_view kKind = "Remove";
  std::uint32_t id = 0;
};
// Ask<Finalized>: the first time, every graph; later, nothing.
struct Finalize {
  static constexpr std::string_view kKind = "Finalize";
};
struct Finalized {
  bool first = false;
  std::vector<NodePtr> nodes;
};
}  // namespace session_msg

// A graph's compile and load state. The lease fields are the actor's; every other field is read
// and written only by the lease holder (a message to the actor orders one holder after the next).
struct Session::GraphNode {
  std::uint32_t id = 0;
  GraphOptions options;
  std::unique_ptr<graph::ComputeGraph> graph;  // until built
  std::shared_ptr<const CompiledModel> compiled;
  std::optional<std::uint32_t> model_id;
  std::shared_ptr<DavinciModel> model;  // the loaded model while it is loaded (no table lookup per run)
  // A graph RT2.0 runs (unknown dimensions as GE's IsNeedHybridLoad, control flow, a tiling that
  // needs a run-time value and is not sunk, npuflow.runtime = v2, an RT2.0 .om): its execute
  // graphs once built, the executor once loaded, and why it is on RT2.0 (for errors).
  std::shared_ptr<const exe::ExecuteGraphSet> v2_graphs;
  std::string v2_reason;
  std::shared_ptr<v2::RtV2SimpleExecutor> v2;
  // A root graph of pipeline stages: kept as given (the executor compiles each stage), and its
  // executor once loaded.
  std::shared_ptr<const graph::ComputeGraph> pipeline_root;
  std::shared_ptr<PipelineExecutor> pipeline;
  std::unique_ptr<RunLoop> loop;
  npu_sim::DevicePtr const_base, feature_base;
  std::uint64_t const_size = 0, feature_size = 0;
  // The actor's: whether a caller holds the lease, and who waits for it (FIFO).
  bool leased = false;
  std::deque<actors::Replier<session_msg::Used>> waiting;
};


actors::Address<SessionMsg> SpawnSessionActor(actors::System& system, std::uint64_t session_id);

}  // namespace npuflow::scheduler
