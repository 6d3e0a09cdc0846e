#include "graph/ops/control_flow.h"

#include <algorithm>

#include <fmt/format.h>

#include "graph/ir/tensor_access.h"

namespace npuflow::graph {

bool IsControlFlowOp(std::string_view type) { return type == "If" || type == "While"; }

bool HasControlFlow(const ComputeGraph& graph) {
  for (const Node* node : graph.nodes())
    if (IsControlFlowOp(node->type())) return true;
  for (const ComputeGraph* sub : graph.subgraphs())
    if (HasControlFlow(*sub)) return true;
  return false;
}

namespace {

const ComputeGraph* Root(const ComputeGraph* g) {
  while (g->parent() != nullptr) g = g->parent();
  return g;
}

StatusOr<ComputeGraph*> MutableBranch(const Node& node, std::string_view attr) {
  NPUFLOW_ASSIGN_OR_RETURN(SubgraphRef ref, node.op().Attr<SubgraphRef>(attr));
  ComputeGraph* sub = Root(node.graph())->FindSubgraph(ref.name);
  if (sub == nullptr)
    return Status::ParamInvalid("node '{}' ({}): {} names subgraph '{}', which does not exist", node.name(),
                                node.type(), attr, ref.name);
  return sub;
}

// A dim two descriptors disagree on becomes a symbol named after the node, output and dim, so
// merging again gives the same descriptor (While's inference reaches a fixed point).
StatusOr<TensorDesc> Join(const TensorDesc& a, const TensorDesc& b, const Node& node, std::string_view what,
                          std::size_t index) {
  if (a.dtype != b.dtype || a.shape.rank() != b.shape.rank())
    return Status::ParamInvalid("node '{}' ({}): {} {} is {} in one and {} in the other", node.name(), node.type(),
                                what, index, a.ToString(), b.ToString());
  std::vector<Dim> dims;
  for (std::size_t d = 0; d < a.shape.rank(); ++d) {
    if (a.shape.dim(d) == b.shape.dim(d)) dims.push_back(a.shape.dim(d));
    else dims.push_back(Dim::Symbolic(fmt::format("{}.{}.{}", node.name(), index, d)));
  }
  return TensorDesc{a.dtype, Shape(std::move(dims))};
}

StatusOr<std::vector<TensorDesc>> InferCall(ComputeGraph& sub, const std::vector<TensorDesc>& args, const Node& node,
                                            std::string_view role) {
  const std::string where = fmt::format("node '{}' ({}): {} '{}'", node.name(), node.type(), role, sub.name());
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<Node*> inputs, SubgraphInputs(sub));
  if (inputs.size() != args.size())
    return Status::ParamInvalid("{} takes {} inputs, the node gives {}", where, inputs.size(), args.size());
  NPUFLOW_RETURN_IF_ERROR(InferGraphShapes(sub, &args).WithContext(where));
  NPUFLOW_ASSIGN_OR_RETURN(Node* out, SubgraphOutput(sub));
  std::vector<TensorDesc> results;
  for (const Endpoint& e : out->inputs()) results.push_back(e.node->outputs().at(e.index));
  return results;
}

Status InferIf(Node& node, const std::vector<TensorDesc>& in) {
  if (in.empty()) return Status::ParamInvalid("node '{}' (If): no condition input", node.name());
  const std::vector<TensorDesc> args(in.begin() + 1, in.end());
  NPUFLOW_ASSIGN_OR_RETURN(ComputeGraph* then_graph, MutableBranch(node, kIfThenAttr));
  NPUFLOW_ASSIGN_OR_RETURN(ComputeGraph* else_graph, MutableBranch(node, kIfElseAttr));
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<TensorDesc> a, InferCall(*then_graph, args, node, kIfThenAttr));
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<TensorDesc> b, InferCall(*else_graph, args, node, kIfElseAttr));
  if (a.size() != b.size())
    return Status::ParamInvalid("node '{}' (If): then_branch returns {} outputs, else_branch {}", node.name(), a.size(),
                                b.size());
  std::vector<TensorDesc> out;
  for (std::size_t j = 0; j < a.size(); ++j) {
    NPUFLOW_ASSIGN_OR_RETURN(TensorDesc d, Join(a[j], b[j], node, "output", j));
    out.push_back(std::move(d));
  }
  node.outputs() = std::move(out);
  return Status::Ok();
}

Status InferWhile(Node& node, const std::vector<TensorDesc>& in) {
  NPUFLOW_ASSIGN_OR_RETURN(ComputeGraph* cond, MutableBranch(node, kWhileCondAttr));
  NPUFLOW_ASSIGN_OR_RETURN(ComputeGraph* body, MutableBranch(node, kWhileBodyAttr));
  NPUFLOW_RETURN_IF_ERROR(MaxIterations(node).status());
  std::vector<TensorDesc> vars = in;
  // Each round can only turn static dims and symbols into the node's own symbols, so it settles
  // within rank + 1 rounds per variable; a few more are allowed before giving up.
  for (int round = 0;; ++round) {
    NPUFLOW_ASSIGN_OR_RETURN(std::vector<TensorDesc> next, InferCall(*body, vars, node, kWhileBodyAttr));
    if (next.size() != vars.size())
      return Status::ParamInvalid("node '{}' (While): body returns {} outputs for {} loop variables", node.name(),
                                  next.size(), vars.size());
    std::vector<TensorDesc> joined;
    for (std::size_t j = 0; j < vars.size(); ++j) {
      NPUFLOW_ASSIGN_OR_RETURN(TensorDesc d, Join(vars[j], next[j], node, "loop variable", j));
      joined.push_back(std::move(d));
    }
    if (joined == vars) break;
    if (round > 16)
      return Status::ParamInvalid("node '{}' (While): the loop variables' shapes do not settle", node.name());
    vars = std::move(joined);
  }
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<TensorDesc> c, InferCall(*cond, vars, node, kWhileCondAttr));
  if (c.size() != 1)
    return Status::ParamInvalid("node '{}' (While): cond returns {} outputs, expected 1", node.name(), c.size());
  // The body's nodes keep the descriptors of the settled variables (the last inference above).
  NPUFLOW_RETURN_IF_ERROR(InferCall(*body, vars, node, kWhileBodyAttr).status());
  node.outputs() = std::move(vars);
  return Status::Ok();
}

Status NeedsSubgraphs(const OpDesc& op, const std::vector<TensorDesc>&, std::vector<TensorDesc>&) {
  return Status::ParamInvalid("node '{}' ({}): its shapes come from its subgraphs (InferGraphShapes)", op.name(),
                              op.type());
}

}  // namespace

StatusOr<const ComputeGraph*> BranchGraph(const Node& node, std::string_view attr) {
  NPUFLOW_ASSIGN_OR_RETURN(ComputeGraph* g, MutableBranch(node, attr));
  return g;
}

StatusOr<std::vector<Node*>> SubgraphInputs(const ComputeGraph& graph) {
  std::vector<Node*> data;
  for (Node* node : graph.nodes())
    if (node->type() == "Data") data.push_back(node);
  const auto with_index = std::count_if(data.begin(), data.end(), [](Node* n) { return n->op().HasAttr("index"); });
  if (with_index == 0) return data;
  if (with_index != static_cast<std::ptrdiff_t>(data.size()))
    return Status::ParamInvalid("graph '{}': some Data nodes have an 'index' attribute and some do not", graph.name());
  std::vector<Node*> by_index(data.size(), nullptr);
  for (Node* node : data) {
    NPUFLOW_ASSIGN_OR_RETURN(std::int64_t index, node->op().Attr<std::int64_t>("index"));
    if (index < 0 || index >= static_cast<std::int64_t>(by_index.size()) || by_index[index] != nullptr)
      return Status::ParamInvalid("graph '{}': Data node '{}' has index {}; expected distinct indices 0..{}",
                                  graph.name(), node->name(), index, by_index.size() - 1);
    by_index[index] = node;
  }
  return by_index;
}

StatusOr<Node*> SubgraphOutput(const ComputeGraph& graph) {
  Node* out = nullptr;
  for (Node* node : graph.nodes()) {
    if (node->type() != "NetOutput") continue;
    if (out != nullptr)
      return Status::ParamInvalid("graph '{}' has two NetOutput nodes: '{}' and '{}'", graph.name(), out->name(),
                                  node->name());
    out = node;
  }
  if (out == nullptr) return Status::ParamInvalid("graph '{}' has no NetOutput node", graph.name());
  return out;
}

StatusOr<std::int64_t> MaxIterations(const Node& node) {
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t n, node.op().AttrOr<std::int64_t>(kWhileMaxIterationsAttr, kDefaultMaxIterations));
  if (n <= 0)
    return Status::ParamInvalid("node '{}' (While): max_iterations is {}; it must be positive", node.name(), n);
  return n;
}

bool ConditionIsTrue(const Tensor& cond) {
  const std::int64_t n = cond.desc.shape.num_elements().value_or(0);
  if (n != 1) return n > 0;
  if (IsFloat(cond.desc.dtype)) return LoadF(cond, 0) != 0.0f;
  return LoadI(cond, 0) != 0;
}

Status InferGraphShapes(ComputeGraph& graph, const std::vector<TensorDesc>* args) {
  std::vector<TensorDesc> inputs, outputs;
  std::vector<Node*> data;
  if (args != nullptr) {
    NPUFLOW_ASSIGN_OR_RETURN(data, SubgraphInputs(graph));
    if (data.size() != args->size())
      return Status::ParamInvalid("graph '{}' takes {} inputs, {} given", graph.name(), data.size(), args->size());
  }
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  for (Node* node : order) {
    inputs.clear();
    for (std::size_t i = 0; i < node->inputs().size(); ++i) {
      const Endpoint& e = node->inputs()[i];
      if (static_cast<std::size_t>(e.index) >= e.node->outputs().size())
        return Status::ParamInvalid("graph '{}': node '{}': input {} reads output {} of '{}', which has {} output(s)",
                                    graph.name(), node->name(), i, e.index, e.node->name(), e.node->outputs().size());
      inputs.push_back(e.node->outputs()[e.index]);
    }
    if (args != nullptr && node->type() == "Data") {
      const auto pos = std::find(data.begin(), data.end(), node) - data.begin();
      node->outputs() = {(*args)[pos]};
      continue;
    }
    if (node->type() == "If") {
      NPUFLOW_RETURN_IF_ERROR(InferIf(*node, inputs).WithContext(fmt::format("graph '{}'", graph.name())));
      continue;
    }
    if (node->type() == "While") {
      NPUFLOW_RETURN_IF_ERROR(InferWhile(*node, inputs).WithContext(fmt::format("graph '{}'", graph.name())));
      continue;
    }
    NPUFLOW_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(node->type()));
    NPUFLOW_RETURN_IF_ERROR(InferOutputs(*def, node->op(), inputs, outputs));
    node->outputs() = outputs;
  }
  return Status::Ok();
}

void RegisterControlFlowOps(OpRegistry& registry) {
  registry.Register({.type = "If", .min_inputs = 1, .max_inputs = -1,
                     .required_attrs = {std::string(kIfThenAttr), std::string(kIfElseAttr)},
                     .engine = OpEngine::kHostLocal, .infer = &NeedsSubgraphs});
  registry.Register({.type = "While", .min_inputs = 0, .max_inputs = -1,
                     .required_attrs = {std::string(kWhileCondAttr), std::string(kWhileBodyAttr)},
                     .engine = OpEngine::kHostLocal, .infer = &NeedsSubgraphs});
}

}  // namespace npuflow::graph
