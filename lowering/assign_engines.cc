// assign-engines: every node's engine (_engine) from its op definition.
#include "graph/ops/op_registry.h"
#include "lowering/pass.h"

namespace npuflow::lowering {

Status AssignEnginesPass(PassContext& ctx) {
  for (graph::Node* node : ctx.graph.nodes()) {
    NPUFLOW_ASSIGN_OR_RETURN(const graph::OpDef* def, graph::OpRegistry::Global().Find(node->type()));
    node->op().SetAttr("_engine", std::string(graph::OpEngineName(def->engine)));
  }
  return Status::Ok();
}

}  // namespace npuflow::lowering
