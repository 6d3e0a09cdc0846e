// (being written)
#include "graph/op_library.h"

namespace npuflow::graph {

void RegisterElementwiseKernels() {}

}  // namespace npuflow::graph
