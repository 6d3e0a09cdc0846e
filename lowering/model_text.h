// Human-readable views of a CompiledModel: for --dump-after and `npuflow info`.
#pragma once

#include <string>

#include "graph/model_file/compiled_model.h"

namespace npuflow::lowering {

// Segment sizes, the feature-map peak against the sum of its tensors, and every placement.
std::string PrintMemoryPlan(const graph::CompiledModel& model);
// Every stream's tasks, one per line.
std::string PrintTasks(const graph::CompiledModel& model);
// What `npuflow info` prints: chip and options, inputs and outputs, nodes, streams with their
// task counts, events, and the memory plan summary.
std::string DescribeModel(const graph::CompiledModel& model);
// `text` with "# " before each line.
std::string CommentLines(const std::string& text);

}  // namespace npuflow::lowering
