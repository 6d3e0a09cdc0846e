// The v1 compiler: ComputeGraph -> CompiledModel, through the passes of V1Pipeline().
//
//   auto graph = graph::ReadGraphTextFile("model.pbtxt").value();
//   auto model = lowering::CompileV1(std::move(graph), {.chip = "910B"}).value();
//   graph::WriteModelFile(model, "model.om");
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graph/model_file/compiled_model.h"
#include "lowering/pass.h"

namespace npuflow::lowering {

inline constexpr int kMaxParallelLimit = 64;
inline constexpr int kMaxTilingSinkNops = 64;

// Every option in range: a known chip (a shipped name or a chip JSON path), max_parallel in
// 1..kMaxParallelLimit, dump_after empty or a registered pass. Errors name the option and the
// accepted values.
Status CheckCompileOptions(const CompileOptions& options, std::string_view dump_after = {});

// Runs the v1 pipeline, dumping as `dump` asks.
StatusOr<CompiledModel> CompileV1(std::unique_ptr<ComputeGraph> graph, const CompileOptions& options,
                                  const DumpRequest& dump = {});

// Text in, text out (for pass tests): parses `text`, runs `passes`, returns PrintDump.
StatusOr<std::string> RunPassesOnText(std::string_view text, const std::vector<std::string>& passes,
                                      const CompileOptions& options = {});

}  // namespace npuflow::lowering
