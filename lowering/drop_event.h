// Debugging event placement: remove one event pair from a compiled model, and tell which events
// are needed at all.
//
// `npuflow compile --debug-drop-event N` writes a model without event N's record and wait (they
// become NOPs, so no task index moves). Run it with `--race-detect`: if the event ordered a
// producer before its consumer and nothing else does, the race detector reports the race.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "graph/model_file/compiled_model.h"

namespace npuflow::lowering {

// Event `event`'s record and wait tasks become NOPs named "dropped event N". An event the model
// does not use is a ParamInvalid naming the events it has.
Status DropEventPair(graph::CompiledModel& model, std::uint32_t event);

// The events whose order nothing else gives: within one run, with every stream's tasks in
// program order and every other event's records before its waits, some record of the event does
// not reach some wait of it. Dropping one of these leaves its producer and consumer unordered.
std::vector<std::uint32_t> DroppableEvents(const graph::CompiledModel& model);

}  // namespace npuflow::lowering
