// PipelineExecutor: runs a stage-partitioned root graph (lowering/partition_stages.h) as a
// pipeline (GE's RtV2PipelineExecutor, seed 001 5.6; GE_BEHAVIOUR.md "Pipeline executor").
//
//   ModelManager::Initialize({.chips = {"910B", "910B"}});
//   auto root = lowering::PartitionStages(*graph, 2, chip).value();
//   auto p = PipelineExecutor::Create(*root, {.devices = 2, .max_in_flight = 4}).value();
//   auto f1 = p->Submit(inputs1);            // several steps in flight at once
//   auto f2 = p->Submit(inputs2);
//   auto out1 = f1.Get();                    // or p->Execute(inputs): Submit, then wait
//
// Each stage's subgraph is compiled for the v1 task sink and loaded on its device (stage s of K on
// device s * D / K), with a stream of its own: the StageActor of the stage. Stage 0 takes the
// caller's inputs (host to device on its stream). Every step has a slot (step k: slot k mod
// max_in_flight) holding, on each stage's device, buffers of its own for the stage's outputs (the
// cut edges) and for what it receives from other devices, so step k+1 can run a stage while later
// stages still read step k's outputs.
//
// The pipeline is a oneTBB flow graph, and its ordering is the graph's:
//
//   submit -> queue -> limiter(max_in_flight) -> admit -> sequencer -> [link s] -> stage s -> ... -> finish
//                          ^------------------------------------------------------------------------'
//
// Every hop (a stage, or the link bringing a stage's inputs from other devices) is a queue, a
// limiter of 1 and an async_node: the node's body issues the hop's device work on its stream and
// returns; the stream's completion puts the step on the next hop. One step at a time per hop, in
// order, so a stage runs step k only after it ran step k-1 and after its producers finished step k,
// and a failing step never takes the next one's queued work down with it. The link hop copies the
// producers' outputs device to device (Runtime::MemcpyPeerAsync: the chip's link bandwidth and
// latency, on the link's own trace track); stages on one device read each other's outputs in
// place.
//
// Errors: a step that fails in stage s fails that step's future with the stage and its device
// named; later hops pass it through and later steps run as usual. Execute waits at most
// `timeout`: then the hop holding the pipeline up (a hung device task) has its model and streams
// aborted, the call fails naming that stage, and the pipeline is poisoned: work the device had
// already been sent may still land in that step's buffers, so from then on every step fails at
// once ("reload it"). Abort does the same for callers with waits of their own. Unload drains what
// is in flight (aborting after `timeout`), unloads every stage's model and frees what the pipeline
// allocated; it always ends.
//
// Thread-safe: any number of threads may Submit and Execute. Requires ModelManager::Initialize
// with at least `devices` devices.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/future.h"
#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "graph/model_file/compiled_model.h"
#include "npu_sim/runtime.h"

namespace npuflow::scheduler {

inline constexpr int kMaxPipelineInFlight = 64;
inline constexpr int kMaxPipelineReplicas = 256;

// A hop starting or ending a step's device work (PipelineOptions::observer).
struct HopEvent {
  int stage = 0;
  bool link = false;  // the link hop bringing the stage's inputs from other devices
  std::uint64_t step = 0;
  bool end = false;   // false: the work is being issued; true: it has completed (ok or not)
};

struct PipelineOptions {
  int devices = 1;        // stage s of K runs on device s * devices / K; 1..K
  int max_in_flight = 4;  // steps in the pipeline at once, 1..kMaxPipelineInFlight
  // Copies of every stage's model, 1..kMaxPipelineReplicas: each with Variables of its own (one
  // per sequence's KV cache, say), all sharing one device copy of the stage's weights. A step
  // names the replica it runs on.
  int replicas = 1;
  graph::CompileOptions compile;  // each stage's compile (the chip: the device's when empty)
  npu_sim::Timeout timeout;       // Execute's wait per step, and Unload's drain; nullopt: none
  std::string name = "pipeline";  // for messages and the trace
  // The caller's stream (a host stream of device 0): stage 0 runs on it, as GE's pipeline runs its
  // first stage on the caller's stream; the pipeline never destroys it. Device -1: a stream of its
  // own. The caller must not use it while the pipeline is loaded.
  npu_sim::Stream stream{-1, 0};
  // Called as each hop issues a step's work and as that work completes, from the hop's body and
  // from the completion (different hops concurrently): for tracing and for ordering tests. Must
  // not block. Skipped steps (failed earlier) are not reported.
  std::function<void(const HopEvent&)> observer;
};

// Virtual-time figures of the steps run so far (npu_sim's device clock, nanoseconds).
struct PipelineStats {
  std::uint64_t steps = 0;   // finished, failed ones included
  std::uint64_t failed = 0;
  npu_sim::VTime first_start = 0;  // the first step's admission on the submitting host's clock
  npu_sim::VTime last_end = 0;     // the last step's end
  std::vector<npu_sim::VTime> stage_busy;  // per stage: the time its stream worked on steps
  // 1 - sum(busy) / (stages * (last_end - first_start)): the share of stage time spent idle.
  double bubble_fraction() const;
};

struct StepOptions {
  int replica = 0;  // 0..replicas-1
  // The step's earliest start on the virtual clock (e.g. the end of the step it depends on);
  // nullopt: the submitting host client's clock.
  std::optional<npu_sim::VTime> ready_at;
};

struct StepOutput {
  std::vector<graph::Tensor> outputs;
  npu_sim::VTime end = 0;  // when its last stage ended (virtual)
};

class PipelineExecutor {
 public:
  static StatusOr<std::unique_ptr<PipelineExecutor>> Create(const graph::ComputeGraph& root, PipelineOptions options);
  // From a pipeline model (lowering::CompilePipeline, or an .om holding stages): its stage models
  // as compiled; options.compile is unused.
  static StatusOr<std::unique_ptr<PipelineExecutor>> Create(std::shared_ptr<const graph::CompiledModel> model,
                                                            PipelineOptions options);
  ~PipelineExecutor();  // Unload

  // Inputs by position (the root's Data nodes in `index` order, else graph order); each must have
  // the Data node's dtype and static shape. A wrong count, dtype or shape fails the future at once.
  actors::Future<StatusOr<std::vector<graph::Tensor>>> Submit(std::vector<graph::Tensor> inputs);
  // The same on a replica, from a virtual time, with the step's end time. Safe to call from the
  // continuation of another step's future (it never waits): a generation can drive itself.
  actors::Future<StatusOr<StepOutput>> SubmitStep(std::vector<graph::Tensor> inputs, StepOptions step);
  // Submit, then wait (at most options.timeout).
  StatusOr<std::vector<graph::Tensor>> Execute(std::vector<graph::Tensor> inputs);
  // Drains, unloads and frees. Later calls: Submit fails, Unload returns Ok.
  Status Unload();
  // Aborts the device work in flight and fails every step from now on, naming `why` (for a caller
  // whose own wait ran out: a hung device). Unload still succeeds afterwards.
  void Abort(const std::string& why);

  int stages() const;
  int device_of(int stage) const;
  const graph::CompiledModel& stage_model(int stage) const;
  std::shared_ptr<const graph::CompiledModel> stage_model_shared(int stage) const;
  const std::vector<std::string>& input_names() const;
  // The outputs' names: "<producer>:<index>" as the stage models name them (or the root input a
  // pass-through output repeats).
  const std::vector<std::string>& output_names() const;
  PipelineStats stats() const;

  struct Impl;

 private:
  static StatusOr<std::unique_ptr<PipelineExecutor>> Create(const graph::ComputeGraph& root, PipelineOptions options,
                                                            std::shared_ptr<const graph::CompiledModel> model);
  explicit PipelineExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace npuflow::scheduler
