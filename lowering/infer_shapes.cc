// infer-shapes: every node's output descriptors from its inputs', in topological order.
#include "graph/ops/op_registry.h"
#include "lowering/graph_index.h"
#include "lowering/pass.h"

namespace npuflow::lowering {

Status InferShapesPass(PassContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(GraphIndex index, GraphIndex::Build(ctx.graph));
  std::vector<graph::TensorDesc> inputs, outputs;
  for (graph::Node* node : index.order()) {
    NPUFLOW_ASSIGN_OR_RETURN(const graph::OpDef* def, graph::OpRegistry::Global().Find(node->type()));
    inputs.clear();
    for (std::size_t i = 0; i < node->inputs().size(); ++i) {
      const graph::Endpoint& e = node->inputs()[i];
      if (static_cast<std::size_t>(e.index) >= e.node->outputs().size())
        return Status::ParamInvalid("node '{}': input {} reads output {} of '{}', which has {} output(s)",
                                    node->name(), i, e.index, e.node->name(), e.node->outputs().size());
      inputs.push_back(e.node->outputs()[e.index]);
    }
    NPUFLOW_RETURN_IF_ERROR(graph::InferOutputs(*def, node->op(), inputs, outputs));
    node->outputs() = outputs;
  }
  return Status::Ok();
}

}  // namespace npuflow::lowering
