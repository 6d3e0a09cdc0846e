#include "lowering/pass.h"

#include <fmt/format.h>

#include "graph/ir/text_format.h"
#include "lowering/model_text.h"
#include "lowering/tiling_sink.h"

namespace npuflow::lowering {

PassRegistry& PassRegistry::Global() {
  static PassRegistry* registry = [] {
    auto* r = new PassRegistry;
    r->Register({"validate", "op types, input counts, attributes, one NetOutput, no cycles", &ValidatePass});
    r->Register({"infer-shapes", "output dtypes and shapes of every node, in topological order", &InferShapesPass});
    r->Register({"const-fold", "nodes whose inputs are all Const become Const", &ConstFoldPass});
    r->Register({"dead-code-elimination", "removes nodes that neither reach NetOutput nor update a Variable",
                 &DeadCodeEliminationPass});
    r->Register({"fuse-epilogues", "a Gelu or residual Add that only finishes a MatMul becomes its epilogue",
                 &FuseEpiloguesPass});
    r->Register({"stream-weights",
                 "stream_weights on the GEMVs when their weights together are too big to stay cached",
                 &StreamWeightsPass});
    r->Register({"external-weights",
                 "ge.externalWeight: Consts to weight files (FileConstant), or FileConstants back to Consts",
                 &ExternalWeightsPass});
    r->Register({"mark-tiling-sink",
                 "_tiling_sink / _tiling_dynamic: ops whose tiling needs a run-time value, through the triple gate",
                 &MarkTilingSinkPass});
    r->Register({"assign-engines", "_engine of every node from its op definition", &AssignEnginesPass});
    r->Register({"assign-streams", "_stream: chains share a stream, independent branches and engines get new ones",
                 &AssignStreamsPass});
    r->Register({"insert-events", "one send/wait pair per cross-stream dependency not already ordered",
                 &InsertEventsPass});
    r->Register({"plan-memory", "segments and offsets of every tensor, reusing bytes between disjoint lifetimes",
                 &PlanMemoryPass});
    r->Register({"gen-tasks", "per-stream task lists: kernels with tiling, event records and waits, copies",
                 &GenTasksPass});
    return r;
  }();
  return *registry;
}

StatusOr<const PassDef*> PassRegistry::Find(std::string_view name) const {
  if (const PassDef* def = defs_.Find(name)) return def;
  return Status::NotFound("unknown pass '{}' (passes: {})", name, fmt::join(Names(), ", "));
}

const std::vector<std::string>& V1Pipeline() {
  static const std::vector<std::string> pipeline = {
      "validate",       "infer-shapes",     "const-fold",     "dead-code-elimination", "external-weights",
      "fuse-epilogues", "stream-weights",   "mark-tiling-sink", "assign-engines",      "assign-streams",
      "insert-events",  "plan-memory",      "gen-tasks"};
  return pipeline;
}

Status RunPasses(PassContext& ctx, const std::vector<std::string>& passes, const DumpRequest& dump) {
  for (const std::string& name : passes) {
    NPUFLOW_ASSIGN_OR_RETURN(const PassDef* pass, PassRegistry::Global().Find(name));
    Status s = pass->run(ctx);
    if (!s.ok()) return Status(s.code(), fmt::format("{}: {}", name, s.message()));
    if (dump.sink && name == dump.after) dump.sink(name, PrintDump(ctx.graph, ctx.model, dump.format));
  }
  return Status::Ok();
}

std::string PrintDump(const ComputeGraph& graph, const CompiledModel& model, DumpFormat format) {
  std::string text = format == DumpFormat::kText ? graph::PrintGraphText(graph) : graph::PrintGraphSummary(graph);
  if (!model.memory.tensors.empty()) {
    text += "\n";
    text += CommentLines(PrintMemoryPlan(model));
  }
  if (!model.streams.empty()) {
    text += "\n";
    text += CommentLines(PrintTasks(model));
  }
  return text;
}

}  // namespace npuflow::lowering
