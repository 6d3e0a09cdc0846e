// (being written)
#include "graph/op_library.h"

namespace npuflow::graph {

void RegisterTensorKernels() {}

}  // namespace npuflow::graph
