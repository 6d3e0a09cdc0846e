// (being written)
#include "graph/op_library.h"

namespace npuflow::graph {

void RegisterNnKernels() {}

}  // namespace npuflow::graph
