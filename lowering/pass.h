// Compiler passes: each has a name, one job and a registry entry. A pass reads and annotates the
// ComputeGraph (node attributes starting with '_', printed by the text format) and fills its part
// of the CompiledModel. `npuflow compile --dump-after=<pass>` prints the graph after it.
//
// The v1 pipeline, in order (V1Pipeline()):
//   validate -> infer-shapes -> const-fold -> dead-code-elimination -> external-weights -> fuse-epilogues ->
//   stream-weights -> mark-tiling-sink -> assign-engines -> assign-streams -> insert-events -> plan-memory -> gen-tasks
//
// Annotations (the contract between passes; a later pass reads only these and the graph):
//   _engine       string   assign-engines: "AICore", "AICPU" or "host"
//   _stream       int      assign-streams: the stream of a node that runs a task (absent: none)
//   _send_events  ints     insert-events: events recorded on the node's stream after it runs
//   _recv_events  ints     insert-events: events waited on the node's stream before it runs
//   _mem          strings  plan-memory: one "<segment>+<offset>" per output
//   _independent  bool     set by users: never share a stream with a neighbour
//   _tiling_sink  bool     mark-tiling-sink: tiled on the device (AICPU) at run time, stays static
//   _tiling_dynamic string mark-tiling-sink: its tiling needs a run-time value and the gate named
//                          failed: the dynamic path
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/registry.h"
#include "base/status.h"
#include "graph/model_file/compiled_model.h"
#include "graph/ir/compute_graph.h"
#include "npu_sim/chip_spec.h"

namespace npuflow::lowering {

using graph::CompiledModel;
using graph::CompileOptions;
using graph::ComputeGraph;

struct PassContext {
  ComputeGraph& graph;
  const CompileOptions& options;
  const npu_sim::ChipSpec& chip;
  CompiledModel& model;
};

struct PassDef {
  std::string name;
  std::string summary;  // one line, shown by `npuflow compile --help` and in errors
  Status (*run)(PassContext& ctx) = nullptr;
};

class PassRegistry {
 public:
  static PassRegistry& Global();  // holds the built-in passes
  void Register(PassDef def) { defs_.Register(std::move(def)); }
  // An unknown name is a NotFound listing the registered passes.
  StatusOr<const PassDef*> Find(std::string_view name) const;
  std::vector<std::string> Names() const { return defs_.Names(); }

 private:
  NamedRegistry<PassDef, &PassDef::name> defs_;
};

// The v1 (task-sink) pipeline's pass names, in order.
const std::vector<std::string>& V1Pipeline();

// Called with (pass name, text) after a pass whose output was asked for.
using DumpFn = std::function<void(std::string_view pass, const std::string& text)>;

// How a dump prints the graph: the compact one-line-per-node summary, or the text format (which
// `npuflow compile` reads back).
enum class DumpFormat : std::uint8_t { kSummary, kText };

struct DumpRequest {
  std::string after;  // a pass name; empty: no dump
  DumpFormat format = DumpFormat::kSummary;
  DumpFn sink;
};

// Runs `passes` in order; after the pass `dump.after` names, `dump.sink` gets PrintDump. A pass
// error is returned prefixed with the pass name.
Status RunPasses(PassContext& ctx, const std::vector<std::string>& passes, const DumpRequest& dump = {});

// What a dump shows: the graph, then the model's memory plan and tasks as '#' comment lines once
// the passes have filled them.
std::string PrintDump(const ComputeGraph& graph, const CompiledModel& model, DumpFormat format = DumpFormat::kSummary);

// ---- the built-in passes (one file each) ----------------------------------------------------------
Status ValidatePass(PassContext& ctx);            // validate.cc
Status InferShapesPass(PassContext& ctx);         // infer_shapes.cc
Status ConstFoldPass(PassContext& ctx);           // const_fold.cc
Status DeadCodeEliminationPass(PassContext& ctx); // dead_code.cc
Status FuseEpiloguesPass(PassContext& ctx);        // fuse_epilogues.cc
Status StreamWeightsPass(PassContext& ctx);       // stream_weights.cc
Status ExternalWeightsPass(PassContext& ctx);     // external_weights.cc
Status AssignEnginesPass(PassContext& ctx);       // assign_engines.cc
Status AssignStreamsPass(PassContext& ctx);       // assign_streams.cc
Status InsertEventsPass(PassContext& ctx);        // insert_events.cc
Status PlanMemoryPass(PassContext& ctx);          // plan_memory.cc
Status GenTasksPass(PassContext& ctx);            // gen_tasks.cc

}  // namespace npuflow::lowering
