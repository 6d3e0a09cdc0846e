// dead-code-elimination: keeps what NetOutput needs, what updates a Variable in place (the
// update is the point of such a node), and every Data node (the model's inputs stay its
// signature); removes the rest.
#include "graph/ops/op_registry.h"
#include "lowering/graph_index.h"
#include "lowering/pass.h"

namespace npuflow::lowering {

// True when `node` writes one of its inputs in place (not a view) and that input is a Variable.
bool UpdatesVariable(const graph::Node& node) {
  auto def = graph::OpRegistry::Global().Find(node.type());
  if (!def.ok() || !(*def)->updates_inplace_input) return false;
  for (int alias : (*def)->inplace)
    if (alias >= 0 && static_cast<std::size_t>(alias) < node.inputs().size() &&
        node.inputs()[alias].node->type() == "Variable")
      return true;
  return false;
}

Status DeadCodeEliminationPass(PassContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(GraphIndex index, GraphIndex::Build(ctx.graph));
  std::vector<char> live(index.size(), 0);
  std::vector<int> stack;
  for (int pos = 0; pos < index.size(); ++pos) {
    const graph::Node& node = *index.node(pos);
    if (node.type() == "NetOutput" || node.type() == "Data" || UpdatesVariable(node)) {
      live[pos] = 1;
      stack.push_back(pos);
    }
  }
  while (!stack.empty()) {
    const int pos = stack.back();
    stack.pop_back();
    for (int p : index.predecessors(pos))
      if (!live[p]) {
        live[p] = 1;
        stack.push_back(p);
      }
  }
  std::vector<graph::Node*> dead;
  for (int pos = 0; pos < index.size(); ++pos)
    if (!live[pos]) dead.push_back(index.node(pos));
  return dead.empty() ? Status::Ok() : ctx.graph.RemoveNodes(dead);
}

}  // namespace npuflow::lowering
