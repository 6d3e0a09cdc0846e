#include "graph/ir/compute_graph.h"

#include <algorithm>
#include <queue>
#include <unordered_set>

namespace npuflow::graph {

StatusOr<Node*> ComputeGraph::AddNode(OpDesc op) {
  if (op.name().empty()) return Status::ParamInvalid("graph '{}': a node needs a name (op {})", name_, op.type());
  if (op.type().empty()) return Status::ParamInvalid("graph '{}': node '{}' needs an op type", name_, op.name());
  if (by_name_.count(op.name()))
    return Status::ParamInvalid("graph '{}': two nodes are named '{}'", name_, op.name());
  auto node = std::make_unique<Node>();
  node->op_ = std::move(op);
  node->id_ = next_id_++;
  node->graph_ = this;
  Node* raw = node.get();
  by_name_.emplace(raw->name(), raw);
  nodes_.push_back(std::move(node));
  return raw;
}

Status ComputeGraph::AddInput(Node* dst, Endpoint src) {
  if (dst == nullptr || src.node == nullptr) return Status::ParamInvalid("graph '{}': edge with a null node", name_);
  if (dst->graph_ != this || src.node->graph_ != this)
    return Status::ParamInvalid("graph '{}': edge {} -> {} crosses graphs", name_, src.node->name(), dst->name());
  if (src.index < 0) return Status::ParamInvalid("graph '{}': node '{}' reads output {} of '{}'", name_, dst->name(),
                                                 src.index, src.node->name());
  dst->inputs_.push_back(src);
  return Status::Ok();
}

Status ComputeGraph::AddControlInput(Node* dst, Node* src) {
  if (dst == nullptr || src == nullptr) return Status::ParamInvalid("graph '{}': control edge with a null node", name_);
  if (dst->graph_ != this || src->graph_ != this)
    return Status::ParamInvalid("graph '{}': control edge {} -> {} crosses graphs", name_, src->name(), dst->name());
  if (std::find(dst->control_inputs_.begin(), dst->control_inputs_.end(), src) == dst->control_inputs_.end())
    dst->control_inputs_.push_back(src);
  return Status::Ok();
}

Status ComputeGraph::RemoveNode(Node* node) {
  if (node == nullptr || node->graph_ != this) return Status::ParamInvalid("graph '{}': no such node to remove", name_);
  for (const auto& other : nodes_) {
    for (const Endpoint& in : other->inputs_)
      if (in.node == node)
        return Status::ParamInvalid("graph '{}': cannot remove '{}': '{}' reads it", name_, node->name(), other->name());
    for (Node* c : other->control_inputs_)
      if (c == node)
        return Status::ParamInvalid("graph '{}': cannot remove '{}': '{}' depends on it", name_, node->name(),
                                    other->name());
  }
  by_name_.erase(node->name());
  nodes_.erase(std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& n) { return n.get() == node; }));
  return Status::Ok();
}

Status ComputeGraph::SetInput(Node* dst, std::size_t i, Endpoint src) {
  if (dst == nullptr || src.node == nullptr || dst->graph_ != this || src.node->graph_ != this)
    return Status::ParamInvalid("graph '{}': SetInput with a node of another graph", name_);
  if (i >= dst->inputs_.size())
    return Status::ParamInvalid("graph '{}': node '{}' has {} inputs, no input {}", name_, dst->name(),
                                dst->inputs_.size(), i);
  dst->inputs_[i] = src;
  return Status::Ok();
}

void ComputeGraph::ClearInputs(Node* node) {
  node->inputs_.clear();
  node->control_inputs_.clear();
}

Status ComputeGraph::RemoveNodes(const std::vector<Node*>& doomed) {
  std::unordered_set<const Node*> set(doomed.begin(), doomed.end());
  for (const Node* n : doomed)
    if (n == nullptr || n->graph_ != this) return Status::ParamInvalid("graph '{}': no such node to remove", name_);
  for (const auto& other : nodes_) {
    if (set.count(other.get())) continue;
    for (const Endpoint& in : other->inputs_)
      if (set.count(in.node))
        return Status::ParamInvalid("graph '{}': cannot remove '{}': '{}' reads it", name_, in.node->name(),
                                    other->name());
    for (Node* c : other->control_inputs_)
      if (set.count(c))
        return Status::ParamInvalid("graph '{}': cannot remove '{}': '{}' depends on it", name_, c->name(),
                                    other->name());
  }
  for (const Node* n : doomed) by_name_.erase(n->name());
  std::erase_if(nodes_, [&](const auto& n) { return set.count(n.get()) > 0; });
  return Status::Ok();
}

Node* ComputeGraph::FindNode(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<Node*> ComputeGraph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

std::vector<Node*> ComputeGraph::Consumers(const Node* node) const {
  std::vector<Node*> out;
  for (const auto& n : nodes_) {
    bool uses = std::any_of(n->inputs_.begin(), n->inputs_.end(), [&](const Endpoint& e) { return e.node == node; }) ||
                std::find(n->control_inputs_.begin(), n->control_inputs_.end(), node) != n->control_inputs_.end();
    if (uses) out.push_back(n.get());
  }
  return out;
}

StatusOr<ComputeGraph*> ComputeGraph::AddSubgraph(std::string name) {
  if (parent_ != nullptr) return Status::ParamInvalid("graph '{}': only the root graph owns subgraphs", name_);
  if (FindSubgraph(name) != nullptr || name == name_)
    return Status::ParamInvalid("graph '{}': two graphs are named '{}'", name_, name);
  auto g = std::make_unique<ComputeGraph>(std::move(name));
  g->parent_ = this;
  subgraphs_.push_back(std::move(g));
  return subgraphs_.back().get();
}

ComputeGraph* ComputeGraph::FindSubgraph(std::string_view name) const {
  for (const auto& g : subgraphs_)
    if (g->name() == name) return g.get();
  return nullptr;
}

std::vector<ComputeGraph*> ComputeGraph::subgraphs() const {
  std::vector<ComputeGraph*> out;
  for (const auto& g : subgraphs_) out.push_back(g.get());
  return out;
}

Status ComputeGraph::SetSubgraph(Node* call, ComputeGraph* subgraph) {
  if (call == nullptr || subgraph == nullptr) return Status::ParamInvalid("graph '{}': null subgraph binding", name_);
  call->subgraph_ = subgraph;
  call->op_.SetAttr("f", SubgraphRef{subgraph->name()});
  return Status::Ok();
}

StatusOr<std::vector<Node*>> ComputeGraph::TopologicalOrder() const {
  // Kahn's algorithm over arrays indexed by node id (ids are dense: next_id_ bounds them); the
  // ready set is ordered by id, so the order is stable.
  const std::size_t ids = static_cast<std::size_t>(next_id_);
  std::vector<std::uint32_t> pending(ids, 0);
  std::vector<std::uint32_t> first(ids + 1, 0);  // consumers of id k: edges[first[k] .. first[k+1])
  std::vector<Node*> edges;
  std::vector<const Node*> preds;
  auto each_pred = [&](const Node* n, auto&& fn) {
    preds.clear();
    for (const Endpoint& e : n->inputs_) preds.push_back(e.node);
    for (Node* c : n->control_inputs_) preds.push_back(c);
    std::sort(preds.begin(), preds.end());
    preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
    for (const Node* p : preds) fn(p);
  };
  for (const auto& n : nodes_)
    each_pred(n.get(), [&](const Node* p) {
      ++first[p->id_ + 1];
      ++pending[n->id_];
    });
  for (std::size_t k = 0; k < ids; ++k) first[k + 1] += first[k];
  edges.resize(first[ids]);
  std::vector<std::uint32_t> fill(first.begin(), first.end() - 1);
  for (const auto& n : nodes_) each_pred(n.get(), [&](const Node* p) { edges[fill[p->id_]++] = n.get(); });

  auto by_id = [](const Node* a, const Node* b) { return a->id() > b->id(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(by_id)> ready(by_id);
  for (const auto& n : nodes_)
    if (pending[n->id_] == 0) ready.push(n.get());
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    order.push_back(n);
    for (std::uint32_t k = first[n->id_]; k < first[n->id_ + 1]; ++k)
      if (--pending[edges[k]->id_] == 0) ready.push(edges[k]);
  }
  if (order.size() == nodes_.size()) return order;

  // Name one cycle: from a node left over, follow inputs that are left over until one repeats.
  const Node* start = nullptr;
  for (const auto& n : nodes_)
    if (pending[n->id_] > 0) {
      start = n.get();
      break;
    }
  std::vector<const Node*> path;
  std::unordered_map<const Node*, std::size_t> seen;  // only on the error path
  const Node* cur = start;
  while (cur != nullptr && !seen.count(cur)) {
    seen[cur] = path.size();
    path.push_back(cur);
    const Node* next = nullptr;
    for (const Endpoint& e : cur->inputs_)
      if (pending[e.node->id_] > 0) next = e.node;
    for (Node* c : cur->control_inputs_)
      if (next == nullptr && pending[c->id_] > 0) next = c;
    cur = next;
  }
  std::string cycle;
  if (cur != nullptr) {
    // path[seen[cur]..] is the cycle, walked against the edges: print it along them.
    for (std::size_t i = path.size(); i-- > seen[cur];) cycle += path[i]->name() + " -> ";
    cycle += path.back()->name();
  }
  return Status::ParamInvalid("graph '{}': cycle: {}", name_, cycle.empty() ? start->name() : cycle);
}

}  // namespace npuflow::graph
