// (being written)
#include "graph/op_library.h"

namespace npuflow::graph {

void RegisterNnOps(OpRegistry& registry) {}

}  // namespace npuflow::graph
