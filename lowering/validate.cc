// validate: the graph is one the compiler can take. Every error names the node.
#include <fmt/format.h>

#include <set>

#include "graph/ops/op_registry.h"
#include "lowering/pass.h"

namespace npuflow::lowering {

Status ValidatePass(PassContext& ctx) {
  ComputeGraph& g = ctx.graph;
  if (g.node_count() == 0) return Status::ParamInvalid("graph '{}' has no nodes", g.name());
  std::vector<std::string> outputs;
  std::set<std::int64_t> data_indices;
  for (const graph::Node* node : g.nodes()) {
    const graph::OpDesc& op = node->op();
    if (node->type() == "PartitionedCall")
      return Status::Unsupported(
          "node '{}' (PartitionedCall): the v1 task sink compiles flat graphs; pipeline stages run on the v2 "
          "pipeline executor",
          node->name());
    auto def = graph::OpRegistry::Global().Find(node->type());
    if (!def.ok()) return Status::ParamInvalid("node '{}': unknown op type '{}'", node->name(), node->type());
    const int n = static_cast<int>(node->inputs().size());
    if (n < (*def)->min_inputs || ((*def)->max_inputs >= 0 && n > (*def)->max_inputs)) {
      std::string expected = (*def)->max_inputs < 0                        ? fmt::format("at least {}", (*def)->min_inputs)
                             : (*def)->min_inputs == (*def)->max_inputs ? fmt::format("{}", (*def)->min_inputs)
                                                                          : fmt::format("{} to {}", (*def)->min_inputs,
                                                                                        (*def)->max_inputs);
      return Status::ParamInvalid("node '{}' ({}): {} inputs, expected {}", node->name(), node->type(), n, expected);
    }
    for (const std::string& attr : (*def)->required_attrs)
      if (!op.HasAttr(attr))
        return Status::ParamInvalid("node '{}' ({}): missing attribute '{}'", node->name(), node->type(), attr);
    if (node->type() == "NetOutput") outputs.push_back(node->name());
    // A host-local node other than NetOutput runs no task, so nothing could carry an ordering
    // through it: a control edge into it would be silently lost.
    if ((*def)->engine == graph::OpEngine::kHostLocal && node->type() != "NetOutput" && !node->control_inputs().empty())
      return Status::ParamInvalid("node '{}' ({}): runs no task, so it cannot take the control input '^{}'",
                                  node->name(), node->type(), node->control_inputs().front()->name());
    if (node->type() == "Data" && op.HasAttr("index")) {
      NPUFLOW_ASSIGN_OR_RETURN(std::int64_t index, op.Attr<std::int64_t>("index"));
      if (index < 0 || !data_indices.insert(index).second)
        return Status::ParamInvalid("node '{}' (Data): index {} is negative or used by another Data node",
                                    node->name(), index);
    }
  }
  if (outputs.empty()) return Status::ParamInvalid("graph '{}' has no NetOutput node: it computes nothing", g.name());
  if (outputs.size() > 1)
    return Status::ParamInvalid("graph '{}' has {} NetOutput nodes ({}), expected one", g.name(), outputs.size(),
                                fmt::join(outputs, ", "));
  return g.TopologicalOrder().status();
}

}  // namespace npuflow::lowering
