// The tiling sink (seed 003; docs/compiler.md "Tiling sink"): an op whose tiling depends on an
// input's value (OpDef::tiling_depend_inputs) cannot be tiled at compile time when that value is
// known only at run time. With ge.tiling_schedule_optimize = "1" it can stay on the static task
// sink anyway: an AICPU task tiles it on the device, on an attached stream, and a task update
// patches the kernel's block_dim and tiling key before the AICore fetches it.
//
// mark-tiling-sink decides, per such node, with GE's triple gate, checked in this order:
//   option  ge.tiling_schedule_optimize is "1"
//   device  the target chip supports task update (online compiles only: an offline compile,
//           `npuflow compile`, names no device and skips it, as atc does)
//   op      the op registers AICPU tiling (OpDef::tiling_on_aicpu)
// All pass: `_tiling_sink` = true; the node stays static and gen-tasks emits the sink's tasks.
// One fails: `_tiling_dynamic` = the gate's name; the node takes the dynamic path. Each decision
// goes into CompiledModel::tiling_sink and the compile log, naming the node and the failed gate.
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "graph/ops/op_registry.h"
#include "lowering/pass.h"

namespace npuflow::lowering {

// "", "0" or "1"; anything else is a ParamInvalid naming `option` (the spelling the user gave:
// ge.tiling_schedule_optimize, --tiling_schedule_optimize) and the accepted values.
Status CheckTilingScheduleOptimize(std::string_view value, std::string_view option);

// Whether `node`'s tiling depends on an input whose value is not a Const: known only at run time.
bool HasRuntimeTilingDepend(const graph::Node& node, const graph::OpDef& def);

// The gate decision for each node with a run-time tiling depend, in graph order, without changing
// the graph (mark-tiling-sink applies them).
StatusOr<std::vector<graph::TilingSinkDecision>> DecideTilingSink(const graph::ComputeGraph& graph,
                                                                  const graph::CompileOptions& options,
                                                                  const npu_sim::ChipSpec& chip);

Status MarkTilingSinkPass(PassContext& ctx);  // mark-tiling-sink

}  // namespace npuflow::lowering
