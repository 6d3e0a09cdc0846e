#include "lowering/tiling_sink.h"

#include <fmt/format.h>

#include "base/logging.h"

namespace npuflow::lowering {

Status CheckTilingScheduleOptimize(std::string_view value, std::string_view option) {
  if (value.empty() || value == "0" || value == "1") return Status::Ok();
  return Status::ParamInvalid("{} '{}': expected \"\", \"0\" (tiling on the host or the dynamic path) or \"1\" "
                              "(tiling sink: device tiling on AICPU)",
                              option, value);
}

bool HasRuntimeTilingDepend(const graph::Node& node, const graph::OpDef& def) {
  for (int k : def.tiling_depend_inputs) {
    if (k < 0 || static_cast<std::size_t>(k) >= node.inputs().size()) continue;
    if (node.inputs()[static_cast<std::size_t>(k)].node->type() != "Const") return true;
  }
  return false;
}

namespace {

graph::TilingSinkDecision Decide(const graph::Node& node, const graph::OpDef& def,
                                 const graph::CompileOptions& options, const npu_sim::ChipSpec& chip) {
  graph::TilingSinkDecision d{.node = node.name(), .op_type = node.type()};
  const std::string& option = options.tiling_schedule_optimize;
  if (option != "1") {
    d.gate = "option";
    d.why = option.empty() ? "ge.tiling_schedule_optimize is not set" : "ge.tiling_schedule_optimize is \"0\"";
  } else if (options.online && !chip.task_update_supported) {
    d.gate = "device";
    d.why = fmt::format("chip {} does not support model task update", chip.name);
  } else if (!def.tiling_on_aicpu) {
    d.gate = "op";
    d.why = fmt::format("op {} registers no AICPU tiling", node.type());
  } else {
    d.marked = true;
  }
  return d;
}

}  // namespace

StatusOr<std::vector<graph::TilingSinkDecision>> DecideTilingSink(const graph::ComputeGraph& graph,
                                                                  const graph::CompileOptions& options,
                                                                  const npu_sim::ChipSpec& chip) {
  std::vector<graph::TilingSinkDecision> decisions;
  for (const graph::Node* node : graph.nodes()) {
    NPUFLOW_ASSIGN_OR_RETURN(const graph::OpDef* def, graph::OpRegistry::Global().Find(node->type()));
    if (HasRuntimeTilingDepend(*node, *def)) decisions.push_back(Decide(*node, *def, options, chip));
  }
  return decisions;
}

Status MarkTilingSinkPass(PassContext& ctx) {
  ctx.model.tiling_sink.clear();
  for (graph::Node* node : ctx.graph.nodes()) {
    NPUFLOW_ASSIGN_OR_RETURN(const graph::OpDef* def, graph::OpRegistry::Global().Find(node->type()));
    node->op().RemoveAttr("_tiling_sink");
    node->op().RemoveAttr("_tiling_dynamic");
    if (!HasRuntimeTilingDepend(*node, *def)) continue;
    graph::TilingSinkDecision d = Decide(*node, *def, ctx.options, ctx.chip);
    if (d.marked) {
      node->op().SetAttr("_tiling_sink", true);
      NPUFLOW_LOG_INFO(kLowering, "mark-tiling-sink: node '{}' ({}): tiling sink (device tiling on AICPU)",
                       node->name(), node->type());
    } else {
      node->op().SetAttr("_tiling_dynamic", d.gate);
      NPUFLOW_LOG_INFO(kLowering, "mark-tiling-sink: node '{}' ({}): dynamic path, gate '{}' failed: {}",
                       node->name(), node->type(), d.gate, d.why);
    }
    ctx.model.tiling_sink.push_back(std::move(d));
  }
  return Status::Ok();
}

}  // namespace npuflow::lowering
