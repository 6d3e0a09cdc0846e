// infer-shapes: every node's output descriptors from its inputs', in topological order.
#include "graph/ops/control_flow.h"
#include "lowering/pass.h"

namespace npuflow::lowering {

Status InferShapesPass(PassContext& ctx) {
  // If and While nodes take their shapes from their subgraphs (which are inferred on the way).
  return graph::InferGraphShapes(ctx.graph, nullptr);
}

}  // namespace npuflow::lowering
