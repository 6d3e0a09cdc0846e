// What `npuflow info --tasks --placements` prints about a model file the reader accepted
// (apps/compile_cmd.cc, RunInfo), without touching the file system: a model that reads cleanly
// must also describe cleanly.
#pragma once

#include <string>

#include "graph/model_file/compiled_model.h"
#include "lowering/graph_converter.h"
#include "lowering/model_text.h"
#include "lowering/partition_stages.h"
#include "weights/convert.h"

namespace npuflow::fuzz {

inline std::string DescribeLikeInfo(const graph::CompiledModel& model) {
  std::string out;
  if (!model.stages.empty()) {
    out += lowering::DescribePipeline(model);
    for (const auto& stage : model.stages)
      out += lowering::DescribeModel(*stage) + lowering::PrintMemoryPlan(*stage) + lowering::PrintTasks(*stage);
    return out;
  }
  if (model.execute_graphs) out += lowering::PrintExecuteGraphs(*model.execute_graphs, true);
  out += lowering::DescribeModel(model);
  if (model.graph != nullptr)
    for (const weights::ExternalWeightDesc& w : weights::ListExternalWeights(*model.graph)) out += w.path + w.id;
  return out + lowering::PrintMemoryPlan(model) + lowering::PrintTasks(model);
}

}  // namespace npuflow::fuzz
