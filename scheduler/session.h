// Session: a user's context for graphs (seed 002, section 7): compile, load lazily, run.
//
//   ModelManager::Initialize({});
//   auto session = Session::Create({{"ge.exec.deviceId", "0"}}).value();
//   session->AddGraph(1, std::move(graph));
//   auto outputs = session->RunGraph(1, inputs).value();   // builds and loads on first use
//
// Options (a string map; unknown names and bad values are ParamInvalid naming the option and
// the accepted values). Session options are defaults for AddGraph's options.
//   ge.exec.deviceId          device index (default 0)
//   ge.socVersion             chip to compile for (default: the device's chip)
//   ge.enableSingleStream     "true" | "false" (default false: multi-stream)
//   ge.streamMaxParallelNum   streams per engine in multi-stream mode, 1..64 (default 8)
//   npuflow.executionStreams  concurrent execution instances per loaded model, 1..64 (default 1)
//   npuflow.executeTimeoutMs  per execution, 0 = none (default 0)
//   ge.externalWeight         "" / "0" / "1" / "2": external weights at build (weights/convert.h)
//   ge.externalWeightDir      the weight directory for modes 1 and 2 (default: the session's
//                             tmp_weight_<pid>_<session id>/, removed by Finalize; a directory
//                             given here is never removed)
//   ge.exec.value_bins        JSON table of FileConstant file ids -> files
//   npuflow.verifyWeights     "true" | "false": check each weight region's SHA-256 at load
//   npuflow.weightKey         AES-256-GCM key of encrypted weight files (64 hex digits or @file)
//   npuflow.weightPath        the directory FileConstant files are loaded from (ACL_MDL_WEIGHT_PATH)
//   npuflow.modelDir          the directory of the model file: its weight/ holds moved files
//   ge.tiling_schedule_optimize "" / "0" / "1": the tiling sink (lowering/tiling_sink.h); the
//                             device gate checks the session's device chip
//   npuflow.tilingSinkShare   true (default) | false: sunk nodes on one stream with the same tiling
//                             share one AICPU tiling task (docs/tiling_sink.md, "Shared tiling")
//   npuflow.pipelineDevices   0..64: the devices a stage-partitioned graph spreads its stages over
//                             (default 0: one per stage, up to the devices there are)
//   npuflow.runtime           auto (default) | v1 | v2: which runtime builds the graph. auto: RT2.0
//                             for unknown dims, control flow, or a node whose tiling needs a
//                             run-time value and is not sunk (a failed tiling-sink gate, GE's
//                             forced unknown shape); else the v1 task sink. v1 tiles such a node
//                             once for its worst case. AddCompiledModel refuses a model compiled
//                             for the other runtime.
//
// Entry points and the runtime paths they take (seed 002, 3.4):
//   RunGraph                 -> NnExecute: a message to the model's ModelActor, then a wait; a
//                               graph built for RT2.0 (npuflow.runtime above: e.g. an unknown
//                               dimension in a Data shape, GE's IsNeedHybridLoad) runs on a pool
//                               of ModelV2Executors (up to execution_streams), any shape each call
//   RunGraphAsync            -> the model's Run loop, outputs to the callback (task-sink graphs)
//   A root graph holding pipeline stages (PartitionedCall nodes with "_stage",
//   lowering/partition_stages.h) runs on the pipeline executor, chosen automatically: RunGraph
//   submits a step and waits for it (callers' steps are in the pipeline together, up to
//   npuflow.executionStreams); the other entry points are errors saying so.
//   RunGraphWithStreamAsync  -> NnExecute async on the caller's stream, device buffers only
//                               (task-sink graphs; an RT2.0 one is an error saying why it is there)
//
// The session's state is an actor (SessionActor, scheduler/session_actor.h): its graph table and,
// per graph, a lease that one caller at a time holds to build, load or change the graph. A run of
// a loaded graph takes no lease (one message to the session's actor, then one to the model's).
// Any number of threads and Boost.Fiber fibers may call any method; a fiber waiting for a lease
// or a run yields to its thread's other fibers. RunGraph calls on one graph run concurrently over
// its execution instances.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/system.h"
#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "scheduler/run_loop.h"
#include "scheduler/model_manager.h"
#include "scheduler/pipeline_executor.h"
#include "scheduler/v2/rt_v2_executor.h"
#include "weights/convert.h"

namespace npuflow::scheduler {

using Options = std::map<std::string, std::string>;

// The options above, parsed.
struct GraphOptions {
  int device = 0;
  std::string chip;  // empty: the device's
  bool single_stream = false;
  int max_parallel = 8;
  int execution_streams = 1;
  npu_sim::Timeout timeout;
  std::string external_weight;
  std::string external_weight_dir;
  std::string value_bins;
  bool verify_weights = false;
  std::optional<AesKey> weight_key;
  std::string weight_path;
  std::string model_dir;
  // RT2.0 graphs: Main's executor (sequential | topological | priority | multithread | auto) and
  // the per-node host profiler.
  std::string v2_executor = "auto";
  bool v2_profile = false;
  std::string tiling_schedule_optimize;  // "", "0", "1"
  // npuflow.tilingSinkShare: sunk nodes with the same tiling share one AICPU tiling task
  // (CompileOptions::tiling_sink_share; true by default).
  bool tiling_sink_share = true;
  // npuflow.runtime: auto (RT2.0 for unknown dims, control flow, or a node whose tiling needs a
  // run-time value and is not sunk; else the v1 task sink), v1 or v2. A graph v1 cannot run
  // (control flow, unknown dims) fails to build on v1; a not-sunk tiling-depend node is tiled
  // there once for the worst case (the value's bound).
  std::string runtime = "auto";
  // npuflow.pipelineDevices: a graph of pipeline stages spreads them over this many devices,
  // from ge.exec.deviceId on (0: as many as it has stages, up to the devices there are).
  int pipeline_devices = 0;
};
// Parses `options` over `base`. Errors name the option and its accepted values.
StatusOr<GraphOptions> ParseGraphOptions(const Options& options, const GraphOptions& base = {});

// A tensor in device memory (for RunGraphWithStreamAsync).
struct DeviceTensor {
  graph::TensorDesc desc;
  npu_sim::DevicePtr ptr;
};

// The messages of the session's actor (scheduler/session_actor.h).
namespace session_msg {
struct Insert;
struct Use;
struct Lease;
struct Release;
struct Remove;
struct Finalize;
}  // namespace session_msg
using SessionMsg = std::variant<session_msg::Insert, session_msg::Use, session_msg::Lease, session_msg::Release,
                                session_msg::Remove, session_msg::Finalize>;

class Session {
 public:
  // Requires ModelManager::Initialize.
  static StatusOr<std::unique_ptr<Session>> Create(const Options& options = {});
  ~Session();  // Finalize()

  std::uint64_t id() const { return id_; }

  // Adds a graph under `graph_id` (an id in use is ParamInvalid).
  Status AddGraph(std::uint32_t graph_id, std::unique_ptr<graph::ComputeGraph> graph, const Options& options = {});
  // Adds an already compiled model (from an .om file): built, not loaded.
  Status AddCompiledModel(std::uint32_t graph_id, std::shared_ptr<const CompiledModel> model,
                          const Options& options = {});
  // Compiles only (no device resources taken). Building a built graph is a no-op.
  Status BuildGraph(std::uint32_t graph_id);
  // Loads now (RunGraph does it on first use).
  Status LoadGraph(std::uint32_t graph_id);

  StatusOr<std::vector<Tensor>> RunGraph(std::uint32_t graph_id, const std::vector<Tensor>& inputs);
  // The callback gets the outputs or the error; see ModelActor for the outcomes. When this call
  // returns an error the callback is never called; otherwise it is called exactly once.
  Status RunGraphAsync(std::uint32_t graph_id, std::vector<Tensor> inputs, RunCallback done);
  Status RunGraphWithStreamAsync(std::uint32_t graph_id, npu_sim::Stream stream, const std::vector<DeviceTensor>& inputs,
                                 const std::vector<DeviceTensor>& outputs);

  // A fork shares the origin's compiled model and loads and runs on its own. Errors: the origin
  // does not exist (NotFound), is not built (Failed), `fork_id` is in use (ParamInvalid).
  Status ForkGraph(std::uint32_t origin_id, std::uint32_t fork_id);
  // CompiledGraphSummary::GetExternalWeightPaths: the weight file regions a built graph reads
  // (path, size, offset, id).
  StatusOr<std::vector<weights::ExternalWeightDesc>> GetExternalWeightPaths(std::uint32_t graph_id) const;
  // Stops its Run loop, unloads it, forgets it. Forks of it are unaffected.
  Status RemoveGraph(std::uint32_t graph_id);

  // User memory for a graph, used when it loads (set before the first run).
  Status SetGraphConstMemoryBase(std::uint32_t graph_id, npu_sim::DevicePtr ptr, std::uint64_t size);
  Status UpdateGraphFeatureMemoryBase(std::uint32_t graph_id, npu_sim::DevicePtr ptr, std::uint64_t size);

  // Stops every Run loop and unloads every model of the session. Idempotent; later calls fail.
  Status Finalize();

  StatusOr<std::shared_ptr<const CompiledModel>> GetCompiledModel(std::uint32_t graph_id) const;
  // The loaded model of a graph (NotFound if not loaded, e.g. unloaded by resource recycling).
  StatusOr<std::shared_ptr<DavinciModel>> GetLoadedModel(std::uint32_t graph_id) const;
  // The RT2.0 executor of a graph that runs on RT2.0 (NotFound when it is not loaded or runs on v1).
  StatusOr<std::shared_ptr<v2::RtV2SimpleExecutor>> GetLoadedV2(std::uint32_t graph_id) const;

  struct GraphNode;  // a graph's compile and load state (opaque)

 private:
  class Held;
  struct RunTarget {
    std::shared_ptr<DavinciModel> v1;
    std::shared_ptr<v2::RtV2SimpleExecutor> v2;
    std::string reason;  // why the graph is on RT2.0, or on the pipeline executor
    std::shared_ptr<PipelineExecutor> pipeline;
  };
  StatusOr<RunTarget> TargetForRun(std::uint32_t graph_id, npu_sim::Timeout* timeout);
  StatusOr<std::shared_ptr<v2::RtV2SimpleExecutor>> EnsureLoadedV2(GraphNode& node);
  StatusOr<std::shared_ptr<PipelineExecutor>> EnsureLoadedPipeline(GraphNode& node);
  Session(std::uint64_t id, GraphOptions options, std::string temporary_weight_dir)
      : id_(id), options_(std::move(options)), temporary_weight_dir_(std::move(temporary_weight_dir)) {}
  // The session's actor, while the ModelManager it was made under lives (else Failed).
  StatusOr<actors::Address<SessionMsg>> Actor() const;
  // The graph's lease: answered once no other caller builds, loads or changes it.
  StatusOr<Held> Lease(std::uint32_t graph_id) const;
  StatusOr<Held> LeaseNode(std::shared_ptr<GraphNode> node) const;
  // The graph's loaded model, loading it first if need be (then under its lease); `timeout`, if
  // given, gets the graph's execution timeout.
  StatusOr<std::shared_ptr<DavinciModel>> ModelForRun(std::uint32_t graph_id, npu_sim::Timeout* timeout);
  Status Insert(std::uint32_t graph_id, std::shared_ptr<GraphNode> node, std::string use = {});
  Status Build(GraphNode& node);
  StatusOr<std::shared_ptr<DavinciModel>> EnsureLoaded(GraphNode& node);

  const std::uint64_t id_;
  const GraphOptions options_;
  actors::Address<SessionMsg> actor_;  // SessionActor: the graph table and each graph's lease
  std::uint64_t generation_ = 0;       // of the ModelManager it was made under
  std::atomic<bool> finalized_{false};
  std::atomic<bool> actor_retired_{false};  // Finalize is done: the actor is gone, its cell reused
  // External weights: regions copied once per device for all of this session's models, and the
  // temporary weight directory its builds write to (removed by Finalize if one did).
  std::shared_ptr<weights::ExternalWeightManager> weight_manager_;
  const std::string temporary_weight_dir_;
  std::atomic<bool> temporary_weight_dir_used_{false};
};

}  // namespace npuflow::scheduler
