#include "graph/ops/interpreter.h"

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "graph/ir/tensor_access.h"
#include "graph/ops/control_flow.h"

namespace npuflow::graph {

struct Interpreter::NodePlan {
  enum class Kind : std::uint8_t { kData, kConst, kVariable, kCall, kIf, kWhile, kNetOutput, kKernel };
  const Node* node = nullptr;
  Kind kind = Kind::kKernel;
  const OpDef* def = nullptr;              // kKernel (and kConst / kVariable / kData when registered)
  std::vector<std::pair<int, int>> inputs;  // (producer's position in `GraphPlan::nodes`, output index)
  const GraphPlan* subgraph = nullptr;      // kCall; kIf's then_branch; kWhile's cond
  const GraphPlan* subgraph2 = nullptr;     // kIf's else_branch; kWhile's body
  std::int64_t max_iterations = 0;          // kWhile
  int data_position = -1;                   // kData: which feed / call input
  std::optional<TensorDesc> declared;       // kData (when declared), kVariable
  const Tensor* const_value = nullptr;      // kConst: the `value` attribute, read in place
  // Per output: data consumers, plus one for an output that may update a Variable (it is kept
  // until the end of the graph's run, when the update is staged).
  std::vector<int> consumers;
  std::vector<std::pair<int, std::string>> variable_updates;  // (output, Variable name)
};

struct Interpreter::GraphPlan {
  const ComputeGraph* graph = nullptr;
  std::vector<NodePlan> nodes;  // topological order
  int net_output = -1;
  std::vector<int> data_nodes;  // positions of the Data nodes, in input order
};

// A value in flight: a tensor the run owns, or a view of one that outlives the run step
// (a feed, a Const attribute, a Variable's state, a PartitionedCall's input).
struct Interpreter::Slot {
  Tensor owned;
  const Tensor* view = nullptr;
  int remaining = 0;  // consumers still to read it
  const Tensor& get() const { return view != nullptr ? *view : owned; }
};

struct Interpreter::RunState {
  // Variable name -> (updating node, new value); applied when the Run succeeds.
  std::map<std::string, std::pair<std::string, Tensor>> pending;
};

namespace {

// Symbol -> (size, where it was bound).
using SymbolBindings = std::map<std::string, std::pair<std::int64_t, std::string>>;

// `t` against a declared descriptor: same dtype and rank, equal static dims, one size per symbol,
// and bytes that fit the shape. `what` names the tensor ("feed 'x'").
Status CheckAgainstDeclared(const TensorDesc& declared, const Tensor& t, const std::string& what,
                            std::string_view declared_by, SymbolBindings& symbols) {
  if (t.desc.dtype != declared.dtype || t.desc.shape.rank() != declared.shape.rank())
    return Status::ParamInvalid("{} is {}, but {} declares {}", what, t.desc.ToString(), declared_by,
                                declared.ToString());
  if (!t.desc.shape.is_static())
    return Status::ParamInvalid("{} has the dynamic shape {}; a tensor needs a static shape", what,
                                t.desc.shape.ToString());
  for (std::size_t i = 0; i < declared.shape.rank(); ++i) {
    const Dim& want = declared.shape.dim(i);
    const std::int64_t got = t.desc.shape.dim(i).size;
    if (want.is_static()) {
      if (got != want.size)
        return Status::ParamInvalid("{} is {}, but {} declares {}: dim {} is {}, expected {}", what, t.desc.ToString(),
                                    declared_by, declared.ToString(), i, got, want.size);
      continue;
    }
    const std::string here = fmt::format("{} dim {}", what, i);
    auto [it, inserted] = symbols.emplace(want.symbol, std::make_pair(got, here));
    if (!inserted && it->second.first != got)
      return Status::ParamInvalid("symbol '{}' has two sizes: {} is {}, but {} is {}", want.symbol, it->second.second,
                                  it->second.first, here, got);
  }
  const std::uint64_t bytes = t.desc.bytes().value_or(0);
  if (t.data.size() != bytes)
    return Status::ParamInvalid("{}: {} needs {} bytes, the tensor holds {}", what, t.desc.ToString(), bytes,
                                t.data.size());
  return Status::Ok();
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

Interpreter::Interpreter(const ComputeGraph& graph) : root_(&graph) {}
Interpreter::~Interpreter() = default;

StatusOr<std::unique_ptr<Interpreter>> Interpreter::Create(const ComputeGraph& graph) {
  RegisterBuiltinOps();
  std::unique_ptr<Interpreter> interp(new Interpreter(graph));
  NPUFLOW_RETURN_IF_ERROR(interp->PlanGraph(graph));
  return interp;
}

Status Interpreter::PlanGraph(const ComputeGraph& graph) {
  // Reserve the entry first, so a subgraph that (indirectly) calls itself is seen as in progress.
  auto [entry, inserted] = plans_.emplace(&graph, nullptr);
  if (!inserted) {
    if (entry->second == nullptr)
      return Status::ParamInvalid("graph '{}' calls itself through PartitionedCall nodes", graph.name());
    return Status::Ok();
  }
  auto plan = std::make_unique<GraphPlan>();
  plan->graph = &graph;
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  std::unordered_map<const Node*, int> position;
  for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);

  DataNodes data_in_node_order;
  for (Node* node : order) {
    const std::string where = fmt::format("graph '{}': node '{}' ({})", graph.name(), node->name(), node->type());
    NodePlan np;
    np.node = node;
    for (const Endpoint& e : node->inputs()) np.inputs.emplace_back(position.at(e.node), e.index);
    if (node->type() == "PartitionedCall" || node->subgraph() != nullptr) {
      NPUFLOW_RETURN_IF_ERROR(PlanCall(*node, where, np));
    } else if (IsControlFlowOp(node->type())) {
      NPUFLOW_RETURN_IF_ERROR(PlanControlFlow(*node, where, np));
    } else {
      NPUFLOW_RETURN_IF_ERROR(PlanOp(graph, *node, where, *plan, np));
      if (np.kind == NodePlan::Kind::kData) data_in_node_order.emplace_back(node, static_cast<int>(plan->nodes.size()));
    }
    plan->nodes.push_back(std::move(np));
  }
  if (plan->net_output < 0) return Status::ParamInvalid("graph '{}' has no NetOutput node", graph.name());
  CountConsumers(*plan);
  NPUFLOW_RETURN_IF_ERROR(OrderDataNodes(graph, &graph == root_, std::move(data_in_node_order), *plan));

  entry = plans_.find(&graph);  // PlanGraph of subgraphs may have rehashed the map
  entry->second = std::move(plan);
  return Status::Ok();
}

Status Interpreter::PlanCall(const Node& node, const std::string& where, NodePlan& np) {
  if (node.subgraph() == nullptr) return Status::ParamInvalid("{}: calls no subgraph", where);
  NPUFLOW_RETURN_IF_ERROR(PlanGraph(*node.subgraph()).WithContext(where));
  np.kind = NodePlan::Kind::kCall;
  np.subgraph = plans_.at(node.subgraph()).get();
  const std::size_t want = np.subgraph->data_nodes.size();
  if (node.inputs().size() != want)
    return Status::ParamInvalid("{}: {} inputs, but subgraph '{}' has {} Data nodes", where, node.inputs().size(),
                                node.subgraph()->name(), want);
  return Status::Ok();
}

// If and While: both subgraphs planned, their input and output counts checked.
Status Interpreter::PlanControlFlow(const Node& node, const std::string& where, NodePlan& np) {
  const bool is_if = node.type() == "If";
  auto plan_branch = [&](std::string_view attr, const GraphPlan*& out) -> Status {
    NPUFLOW_ASSIGN_OR_RETURN(const ComputeGraph* g, BranchGraph(node, attr));
    NPUFLOW_RETURN_IF_ERROR(PlanGraph(*g).WithContext(fmt::format("{}: {}", where, attr)));
    out = plans_.at(g).get();
    return Status::Ok();
  };
  NPUFLOW_RETURN_IF_ERROR(plan_branch(is_if ? kIfThenAttr : kWhileCondAttr, np.subgraph));
  NPUFLOW_RETURN_IF_ERROR(plan_branch(is_if ? kIfElseAttr : kWhileBodyAttr, np.subgraph2));
  const std::size_t args = node.inputs().size() - (is_if ? 1 : 0);
  if (is_if && node.inputs().empty()) return Status::ParamInvalid("{}: no condition input", where);
  for (const GraphPlan* g : {np.subgraph, np.subgraph2})
    if (g->data_nodes.size() != args)
      return Status::ParamInvalid("{}: subgraph '{}' takes {} inputs, the node gives {}", where, g->graph->name(),
                                  g->data_nodes.size(), args);
  auto outputs = [](const GraphPlan* g) { return g->nodes[g->net_output].inputs.size(); };
  if (is_if) {
    np.kind = NodePlan::Kind::kIf;
    if (outputs(np.subgraph) != outputs(np.subgraph2))
      return Status::ParamInvalid("{}: then_branch returns {} outputs, else_branch {}", where, outputs(np.subgraph),
                                  outputs(np.subgraph2));
  } else {
    np.kind = NodePlan::Kind::kWhile;
    NPUFLOW_ASSIGN_OR_RETURN(np.max_iterations, MaxIterations(node));
    if (outputs(np.subgraph) != 1)
      return Status::ParamInvalid("{}: cond returns {} outputs, expected 1", where, outputs(np.subgraph));
    if (outputs(np.subgraph2) != args)
      return Status::ParamInvalid("{}: body returns {} outputs for {} loop variables", where, outputs(np.subgraph2),
                                  args);
  }
  return Status::Ok();
}

// A registered op: Data, Const, Variable and NetOutput are the interpreter's own; others run a
// reference kernel. `np` is about to be appended to `plan.nodes`.
Status Interpreter::PlanOp(const ComputeGraph& graph, const Node& node, const std::string& where, GraphPlan& plan,
                           NodePlan& np) {
  auto def = OpRegistry::Global().Find(node.type());
  if (!def.ok()) return def.status().WithContext(where);
  np.def = *def;
  const OpDesc& op = node.op();
  if (node.type() == "Data") {
    np.kind = NodePlan::Kind::kData;
    if (&graph == root_ || (op.HasAttr("dtype") && op.HasAttr("shape"))) {
      std::vector<TensorDesc> out;
      NPUFLOW_RETURN_IF_ERROR(InferOutputs(*np.def, op, {}, out).WithContext(fmt::format("graph '{}'", graph.name())));
      np.declared = out.at(0);
    }
  } else if (node.type() == "Const") {
    np.kind = NodePlan::Kind::kConst;
    std::vector<TensorDesc> out;
    NPUFLOW_RETURN_IF_ERROR(InferOutputs(*np.def, op, {}, out).WithContext(fmt::format("graph '{}'", graph.name())));
    np.const_value = std::get_if<Tensor>(&op.attrs().at("value"));
    if (np.const_value == nullptr || np.const_value->data.size() != np.const_value->desc.bytes().value_or(~0ull))
      return Status::ParamInvalid("{}: 'value' is not a static tensor of its declared size", where);
  } else if (node.type() == "Variable") {
    NPUFLOW_RETURN_IF_ERROR(PlanVariable(graph, node, where, np));
  } else if (node.type() == "NetOutput") {
    np.kind = NodePlan::Kind::kNetOutput;
    if (plan.net_output >= 0)
      return Status::ParamInvalid("graph '{}' has two NetOutput nodes: '{}' and '{}'", graph.name(),
                                  plan.nodes[plan.net_output].node->name(), node.name());
    plan.net_output = static_cast<int>(plan.nodes.size());
  } else {
    np.kind = NodePlan::Kind::kKernel;
    if (np.def->reference == nullptr)
      return Status::Unsupported("{} has no reference kernel; the interpreter cannot run it", where);
  }
  return Status::Ok();
}

// A Variable's descriptor and initial state; same-named Variables share one state.
Status Interpreter::PlanVariable(const ComputeGraph& graph, const Node& node, const std::string& where,
                                 NodePlan& np) {
  const OpDesc& op = node.op();
  np.kind = NodePlan::Kind::kVariable;
  std::vector<TensorDesc> out;
  NPUFLOW_RETURN_IF_ERROR(InferOutputs(*np.def, op, {}, out).WithContext(fmt::format("graph '{}'", graph.name())));
  if (out.size() != 1 || !out[0].bytes())
    return Status::ParamInvalid("{}: a Variable needs one output of a static shape", where);
  np.declared = out[0];
  Tensor initial = ZeroTensor(out[0]);
  if (op.HasAttr("value")) {
    NPUFLOW_ASSIGN_OR_RETURN(initial, op.Attr<Tensor>("value"));
    if (!(initial.desc == out[0]) || initial.data.size() != *out[0].bytes())
      return Status::ParamInvalid("{}: initial value is {}, but the Variable is {}", where, initial.desc.ToString(),
                                  out[0].ToString());
  }
  auto it = variables_.find(node.name());
  if (it == variables_.end()) {
    variables_.emplace(node.name(), std::move(initial));
  } else if (!(it->second.desc == out[0])) {
    return Status::ParamInvalid("{}: declared {}, but another Variable '{}' declares {}", where, out[0].ToString(),
                                node.name(), it->second.desc.ToString());
  }
  return Status::Ok();
}

// In-place updates of Variables (see the header), known from the graph's structure; then the
// consumer counts per output, for freeing intermediates after their last reader (an output that
// may update a Variable counts one more: it is kept until the update is staged).
void Interpreter::CountConsumers(GraphPlan& plan) {
  for (NodePlan& np : plan.nodes) {
    if (np.kind != NodePlan::Kind::kKernel || !np.def->updates_inplace_input) continue;
    for (std::size_t out = 0; out < np.def->inplace.size(); ++out) {
      const int in = np.def->inplace[out];
      if (in < 0 || in >= static_cast<int>(np.inputs.size())) continue;
      const NodePlan& producer = plan.nodes[np.inputs[in].first];
      if (producer.kind == NodePlan::Kind::kVariable)
        np.variable_updates.emplace_back(static_cast<int>(out), producer.node->name());
    }
  }
  for (NodePlan& np : plan.nodes) {
    for (auto [producer, index] : np.inputs) {
      std::vector<int>& c = plan.nodes[producer].consumers;
      if (static_cast<int>(c.size()) <= index) c.resize(index + 1, 0);
      ++c[index];
    }
  }
  for (NodePlan& np : plan.nodes)
    for (const auto& [out, var] : np.variable_updates) {
      if (static_cast<int>(np.consumers.size()) <= out) np.consumers.resize(out + 1, 0);
      ++np.consumers[out];
    }
}

// Data order: `index` attributes when every Data node has one, else node order.
Status Interpreter::OrderDataNodes(const ComputeGraph& graph, bool is_root, DataNodes data, GraphPlan& plan) {
  std::sort(data.begin(), data.end(), [](const auto& a, const auto& b) { return a.first->id() < b.first->id(); });
  std::size_t with_index = 0;
  for (const auto& [node, pos] : data) with_index += node->op().HasAttr("index") ? 1 : 0;
  if (!is_root && with_index > 0) {
    if (with_index != data.size())
      return Status::ParamInvalid("graph '{}': some Data nodes have an 'index' attribute and some do not",
                                  graph.name());
    std::vector<int> by_index(data.size(), -1);
    for (const auto& [node, pos] : data) {
      NPUFLOW_ASSIGN_OR_RETURN(std::int64_t index, node->op().Attr<std::int64_t>("index"));
      if (index < 0 || index >= static_cast<std::int64_t>(by_index.size()) || by_index[index] >= 0)
        return Status::ParamInvalid("graph '{}': Data node '{}' has index {}; expected distinct indices 0..{}",
                                    graph.name(), node->name(), index, by_index.size() - 1);
      by_index[index] = pos;
    }
    plan.data_nodes = std::move(by_index);
  } else {
    for (const auto& [node, pos] : data) plan.data_nodes.push_back(pos);
  }
  for (std::size_t i = 0; i < plan.data_nodes.size(); ++i)
    plan.nodes[plan.data_nodes[i]].data_position = static_cast<int>(i);
  return Status::Ok();
}

StatusOr<std::vector<Tensor>> Interpreter::Run(const std::map<std::string, Tensor>& feeds) {
  const GraphPlan& plan = *plans_.at(root_);
  std::set<std::string> data_names;
  for (int pos : plan.data_nodes) data_names.insert(plan.nodes[pos].node->name());
  for (const auto& [name, tensor] : feeds)
    if (!data_names.count(name))
      return Status::ParamInvalid("unknown feed '{}': graph '{}' has no Data node of that name (Data nodes: {})", name,
                                  root_->name(), JoinNames({data_names.begin(), data_names.end()}));

  SymbolBindings symbols;
  std::vector<Slot> inputs(plan.data_nodes.size());
  for (std::size_t i = 0; i < plan.data_nodes.size(); ++i) {
    const NodePlan& np = plan.nodes[plan.data_nodes[i]];
    const std::string& name = np.node->name();
    auto it = feeds.find(name);
    if (it == feeds.end())
      return Status::ParamInvalid("missing feed for Data node '{}' ({})", name, np.declared->ToString());
    NPUFLOW_RETURN_IF_ERROR(CheckAgainstDeclared(*np.declared, it->second, fmt::format("feed '{}'", name),
                                                 fmt::format("Data node '{}'", name), symbols));
    inputs[i].view = &it->second;
  }

  RunState run;
  std::vector<Tensor> outputs;
  NPUFLOW_RETURN_IF_ERROR(RunGraph(plan, inputs, run, outputs));
  for (auto& [name, update] : run.pending) variables_[name] = std::move(update.second);
  return outputs;
}

// One graph's run: a slot per node output, and buffers reused from node to node.
struct Interpreter::Frame {
  explicit Frame(std::size_t nodes) : slots(nodes) {}
  // Drops a consumer's claim on a slot; the last one frees an owned tensor.
  void Release(int node, int output) {
    Slot& s = slots[node][output];
    if (--s.remaining <= 0 && s.view == nullptr) s.owned = Tensor{};
  }

  std::vector<std::vector<Slot>> slots;
  // Variable updates: (node position, output, Variable), applied once every reader is done.
  std::vector<std::tuple<int, int, std::string>> staged;
  std::vector<const Tensor*> in;  // the current node's inputs
  std::vector<TensorDesc> in_desc, out_desc;
  std::vector<Tensor> out;  // the current node's outputs (kCall, kKernel)
};

Status Interpreter::RunGraph(const GraphPlan& plan, std::vector<Slot>& data_inputs, RunState& run,
                             std::vector<Tensor>& outputs) const {
  Frame f(plan.nodes.size());
  for (std::size_t pos = 0; pos < plan.nodes.size(); ++pos) {
    const NodePlan& np = plan.nodes[pos];
    NPUFLOW_RETURN_IF_ERROR(GatherInputs(plan, pos, f));
    f.out.clear();
    std::vector<Slot>& mine = f.slots[pos];
    switch (np.kind) {
      case NodePlan::Kind::kData:
        mine.resize(1);
        mine[0].view = &data_inputs.at(np.data_position).get();
        break;
      case NodePlan::Kind::kConst:
        mine.resize(1);
        mine[0].view = np.const_value;
        break;
      case NodePlan::Kind::kVariable:
        mine.resize(1);
        mine[0].view = &variables_.at(np.node->name());
        break;
      case NodePlan::Kind::kCall:
        NPUFLOW_RETURN_IF_ERROR(RunCall(plan, np, f, run));
        break;
      case NodePlan::Kind::kIf:
      case NodePlan::Kind::kWhile:
        NPUFLOW_RETURN_IF_ERROR(RunControlFlow(plan, np, f, run));
        break;
      case NodePlan::Kind::kNetOutput:
        TakeOutputs(np, f, outputs);
        break;
      case NodePlan::Kind::kKernel:
        NPUFLOW_RETURN_IF_ERROR(RunKernel(plan, np, f));
        break;
    }
    NPUFLOW_RETURN_IF_ERROR(KeepOutputs(pos, np, f, run));
  }
  // Every reader is done: the Variable updates take the values kept for them.
  for (const auto& [pos, index, var] : f.staged) run.pending.at(var).second = std::move(f.slots[pos][index].owned);
  return Status::Ok();
}

Status Interpreter::GatherInputs(const GraphPlan& plan, std::size_t pos, Frame& f) {
  const NodePlan& np = plan.nodes[pos];
  f.in.clear();
  f.in_desc.clear();
  for (auto [producer, index] : np.inputs) {
    if (index >= static_cast<int>(f.slots[producer].size()))
      return Status::ParamInvalid("graph '{}': node '{}' reads output {} of '{}', which has {} outputs",
                                  plan.graph->name(), np.node->name(), index, plan.nodes[producer].node->name(),
                                  f.slots[producer].size());
    f.in.push_back(&f.slots[producer][index].get());
    f.in_desc.push_back(f.in.back()->desc);
  }
  return Status::Ok();
}

Status Interpreter::RunCall(const GraphPlan& plan, const NodePlan& np, Frame& f, RunState& run) const {
  const std::string& gname = plan.graph->name();
  const Node& node = *np.node;
  const GraphPlan& sub = *np.subgraph;
  std::vector<Slot> sub_inputs(f.in.size());
  SymbolBindings symbols;
  for (std::size_t i = 0; i < f.in.size(); ++i) {
    sub_inputs[i].view = f.in[i];
    const NodePlan& data = sub.nodes[sub.data_nodes[i]];
    if (data.declared)
      NPUFLOW_RETURN_IF_ERROR(CheckAgainstDeclared(
          *data.declared, *f.in[i], fmt::format("graph '{}': PartitionedCall '{}' input {}", gname, node.name(), i),
          fmt::format("Data node '{}' of subgraph '{}'", data.node->name(), sub.graph->name()), symbols));
  }
  return RunGraph(sub, sub_inputs, run, f.out)
      .WithContext(fmt::format("graph '{}': PartitionedCall '{}' (subgraph '{}')", gname, node.name(), sub.graph->name()));
}

// If: one branch on the inputs after the condition. While: cond and body until cond is false.
Status Interpreter::RunControlFlow(const GraphPlan& plan, const NodePlan& np, Frame& f, RunState& run) const {
  const std::string where = fmt::format("graph '{}': {} '{}'", plan.graph->name(), np.node->type(), np.node->name());
  if (np.kind == NodePlan::Kind::kIf) {
    const bool taken = ConditionIsTrue(*f.in[0]);
    const GraphPlan& branch = taken ? *np.subgraph : *np.subgraph2;
    std::vector<Slot> args(f.in.size() - 1);
    for (std::size_t i = 1; i < f.in.size(); ++i) args[i - 1].view = f.in[i];
    return RunGraph(branch, args, run, f.out)
        .WithContext(fmt::format("{} ({} '{}')", where, taken ? kIfThenAttr : kIfElseAttr, branch.graph->name()));
  }
  std::vector<Tensor> vars;
  for (const Tensor* t : f.in) vars.push_back(*t);
  for (std::int64_t iteration = 0;; ++iteration) {
    std::vector<Slot> args(vars.size());
    for (std::size_t i = 0; i < vars.size(); ++i) args[i].view = &vars[i];
    std::vector<Tensor> cond;
    NPUFLOW_RETURN_IF_ERROR(RunGraph(*np.subgraph, args, run, cond)
                                .WithContext(fmt::format("{} (cond, iteration {})", where, iteration)));
    if (!ConditionIsTrue(cond.at(0))) break;
    if (iteration >= np.max_iterations)
      return Status::Failed("{}: still running after max_iterations = {} iterations", where, np.max_iterations);
    std::vector<Tensor> next;
    NPUFLOW_RETURN_IF_ERROR(RunGraph(*np.subgraph2, args, run, next)
                                .WithContext(fmt::format("{} (body, iteration {})", where, iteration)));
    for (std::size_t i = 0; i < vars.size(); ++i)
      if (next[i].desc.dtype != vars[i].desc.dtype || next[i].desc.shape.rank() != vars[i].desc.shape.rank())
        return Status::ParamInvalid("{}: body output {} is {}, the loop variable was {}", where, i,
                                    next[i].desc.ToString(), vars[i].desc.ToString());
    vars = std::move(next);
  }
  f.out = std::move(vars);
  return Status::Ok();
}

Status Interpreter::RunKernel(const GraphPlan& plan, const NodePlan& np, Frame& f) {
  const std::string& gname = plan.graph->name();
  const Node& node = *np.node;
  NPUFLOW_RETURN_IF_ERROR(
      InferOutputs(*np.def, node.op(), f.in_desc, f.out_desc).WithContext(fmt::format("graph '{}'", gname)));
  for (std::size_t i = 0; i < f.out_desc.size(); ++i) {
    if (!f.out_desc[i].bytes())
      return Status::ParamInvalid("graph '{}': node '{}' ({}): output {} is {} for static inputs; the "
                                  "interpreter needs static shapes",
                                  gname, node.name(), node.type(), i, f.out_desc[i].ToString());
    f.out.push_back(ZeroTensor(f.out_desc[i]));
  }
  NPUFLOW_RETURN_IF_ERROR(np.def->reference(node.op(), f.in, f.out).WithContext(fmt::format("graph '{}'", gname)));
  if (f.out.size() != f.out_desc.size())
    return Status::Internal("graph '{}': node '{}' ({}): the reference kernel returned {} outputs, expected {}", gname,
                            node.name(), node.type(), f.out.size(), f.out_desc.size());
  for (std::size_t i = 0; i < f.out.size(); ++i)
    if (f.out[i].data.size() != f.out[i].desc.bytes().value_or(~0ull))
      return Status::Internal("graph '{}': node '{}' ({}): output {} holds {} bytes for {}", gname, node.name(),
                              node.type(), i, f.out[i].data.size(), f.out[i].desc.ToString());
  return Status::Ok();
}

// The graph's outputs: moved out of the last reader's slot, copied otherwise.
void Interpreter::TakeOutputs(const NodePlan& np, Frame& f, std::vector<Tensor>& outputs) {
  for (std::size_t i = 0; i < np.inputs.size(); ++i) {
    auto [producer, index] = np.inputs[i];
    Slot& s = f.slots[producer][index];
    if (s.view == nullptr && s.remaining == 1) outputs.push_back(std::move(s.owned));
    else outputs.push_back(s.get());
    f.Release(producer, index);
  }
}

// The node's outputs take their slots and consumer counts, Variable updates are staged, and its
// inputs are released.
Status Interpreter::KeepOutputs(std::size_t pos, const NodePlan& np, Frame& f, RunState& run) const {
  std::vector<Slot>& mine = f.slots[pos];
  if (np.kind == NodePlan::Kind::kCall || np.kind == NodePlan::Kind::kKernel || np.kind == NodePlan::Kind::kIf ||
      np.kind == NodePlan::Kind::kWhile) {
    mine.resize(f.out.size());
    for (std::size_t i = 0; i < f.out.size(); ++i) mine[i].owned = std::move(f.out[i]);
  }
  for (std::size_t i = 0; i < mine.size(); ++i) {
    mine[i].remaining = i < np.consumers.size() ? np.consumers[i] : 0;
    if (mine[i].remaining == 0 && mine[i].view == nullptr) mine[i].owned = Tensor{};  // nobody reads it
  }
  for (const auto& [index, var] : np.variable_updates) {
    const Tensor& value = mine.at(index).get();
    if (!(value.desc == variables_.at(var).desc)) {
      f.Release(static_cast<int>(pos), index);  // a view of another shape: no update
      continue;
    }
    auto [it, fresh] = run.pending.emplace(var, std::make_pair(np.node->name(), Tensor{}));
    if (!fresh)
      return Status::ParamInvalid("Variable '{}' is updated twice in one run: by '{}' and by '{}'", var,
                                  it->second.first, np.node->name());
    f.staged.emplace_back(static_cast<int>(pos), index, var);
  }
  if (np.kind != NodePlan::Kind::kNetOutput)
    for (auto [producer, index] : np.inputs) f.Release(producer, index);
  return Status::Ok();
}

StatusOr<Tensor> Interpreter::GetVariable(const std::string& name) const {
  auto it = variables_.find(name);
  if (it == variables_.end())
    return Status::NotFound("graph '{}' has no Variable '{}' (Variables: {})", root_->name(), name,
                            JoinNames(VariableNames()));
  return it->second;
}

Status Interpreter::SetVariable(const std::string& name, Tensor value) {
  auto it = variables_.find(name);
  if (it == variables_.end())
    return Status::NotFound("graph '{}' has no Variable '{}' (Variables: {})", root_->name(), name,
                            JoinNames(VariableNames()));
  if (!(value.desc == it->second.desc) || value.data.size() != it->second.data.size())
    return Status::ParamInvalid("Variable '{}' is {} ({} bytes), the new value is {} ({} bytes)", name,
                                it->second.desc.ToString(), it->second.data.size(), value.desc.ToString(),
                                value.data.size());
  it->second = std::move(value);
  return Status::Ok();
}

std::vector<std::string> Interpreter::VariableNames() const {
  std::vector<std::string> names;
  for (const auto& [name, value] : variables_) names.push_back(name);
  return names;
}

}  // namespace npuflow::graph
