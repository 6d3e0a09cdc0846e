// plan-memory's constants and the independent check of its result.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "graph/model_file/compiled_model.h"

namespace npuflow::lowering {

// Every tensor's bytes start on this boundary (as GE's block memory assigner does).
inline constexpr std::uint64_t kMemoryAlignment = 512;
// TensorPlacement::output of a kernel's workspace.
inline constexpr int kWorkspaceOutput = -1;

// Checks a compiled model's memory plan against its task lists, without trusting the passes'
// annotations: it replays the streams' records and waits to learn which tasks are ordered, then
// requires, for every two tensors whose feature-map bytes overlap, that every access of one is
// ordered before every access of the other (a task that reads one and writes the other in place
// counts as ordered), that every reader of a tensor is ordered after its writer, and that every
// tensor lies inside its segment. The first violation is a Internal error naming both tensors and
// tasks.
Status VerifyMemoryPlan(const graph::CompiledModel& model);

}  // namespace npuflow::lowering
