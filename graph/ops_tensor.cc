// (being written)
#include "graph/op_library.h"

namespace npuflow::graph {

void RegisterTensorOps(OpRegistry& registry) {}

}  // namespace npuflow::graph
