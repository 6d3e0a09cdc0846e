#include "lowering/compiler.h"

#include <fmt/format.h>

#include "graph/ops/control_flow.h"
#include "graph/ops/op_registry.h"
#include "graph/ir/text_format.h"
#include "lowering/tiling_sink.h"
#include "npu_sim/chip_spec.h"

namespace npuflow::lowering {

Status CheckCompileOptions(const CompileOptions& options, std::string_view dump_after) {
  auto chip = npu_sim::LoadChipSpec(options.chip);
  if (!chip.ok())
    return Status::ParamInvalid("--chip '{}': not a shipped chip ({}) or a readable chip JSON: {}", options.chip,
                                fmt::join(npu_sim::ShippedChips(), ", "), chip.status().message());
  if (options.max_parallel < 1 || options.max_parallel > kMaxParallelLimit)
    return Status::ParamInvalid("--max-parallel {}: expected 1 to {}", options.max_parallel, kMaxParallelLimit);
  NPUFLOW_RETURN_IF_ERROR(CheckTilingScheduleOptimize(options.tiling_schedule_optimize, "--tiling_schedule_optimize"));
  if (options.tiling_sink_nops < -1 || options.tiling_sink_nops > kMaxTilingSinkNops)
    return Status::ParamInvalid("--tiling-sink-nops {}: expected 0 to {} (default: the chip's prefetch_num)",
                                options.tiling_sink_nops, kMaxTilingSinkNops);
  if (!dump_after.empty() && !PassRegistry::Global().Find(dump_after).ok())
    return Status::ParamInvalid("--dump-after '{}': not a pass (passes: {})", dump_after,
                                fmt::join(V1Pipeline(), ", "));
  return Status::Ok();
}

StatusOr<CompiledModel> CompileV1(std::unique_ptr<ComputeGraph> graph, const CompileOptions& options,
                                  const DumpRequest& dump) {
  graph::RegisterBuiltinOps();
  NPUFLOW_RETURN_IF_ERROR(CheckCompileOptions(options, dump.after));
  if (graph::HasControlFlow(*graph))
    return Status::Unsupported("graph '{}' has control flow (If/While): the v1 task sink has no branch or loop tasks; "
                               "it runs on RT2.0 (--runtime v2 or auto)",
                               graph->name());
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::ChipSpec chip, npu_sim::LoadChipSpec(options.chip));
  CompiledModel model;
  model.options = options;
  model.chip = chip.name;
  PassContext ctx{*graph, options, chip, model};
  NPUFLOW_RETURN_IF_ERROR(RunPasses(ctx, V1Pipeline(), dump));
  model.graph = std::move(graph);
  return model;
}

StatusOr<std::string> RunPassesOnText(std::string_view text, const std::vector<std::string>& passes,
                                      const CompileOptions& options) {
  graph::RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(auto graph, graph::ParseGraphText(text, "test.pbtxt"));
  NPUFLOW_RETURN_IF_ERROR(CheckCompileOptions(options));
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::ChipSpec chip, npu_sim::LoadChipSpec(options.chip));
  CompiledModel model;
  model.options = options;
  model.chip = chip.name;
  PassContext ctx{*graph, options, chip, model};
  NPUFLOW_RETURN_IF_ERROR(RunPasses(ctx, passes));
  return PrintDump(*graph, model);
}

}  // namespace npuflow::lowering
