#include "graph/exe_graph/exe_graph.h"

#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>

namespace npuflow::exe {

std::string_view NodeKindName(NodeKind kind) {
  switch (kind) {
    case NodeKind::kNormal: return "normal";
    case NodeKind::kSwitch: return "switch";
    case NodeKind::kMerge: return "merge";
  }
  return "?";
}

int ExecuteGraph::AddValue(std::string name) {
  values_.push_back(ExeValue{std::move(name), -1});
  return static_cast<int>(values_.size()) - 1;
}

int ExecuteGraph::AddInput(std::string name) {
  const int v = AddValue(std::move(name));
  inputs_.push_back(v);
  return v;
}

StatusOr<int> ExecuteGraph::AddNode(ExeNode node, bool deps_from_inputs) {
  const int id = static_cast<int>(nodes_.size());
  const int num_values = static_cast<int>(values_.size());
  for (int v : node.inputs)
    if (v < 0 || v >= num_values)
      return Status::ParamInvalid("execute graph '{}': node '{}' reads value {}, which does not exist ({} values)",
                                  name_, node.name, v, num_values);
  for (int v : node.outputs)
    if (v < 0 || v >= num_values)
      return Status::ParamInvalid("execute graph '{}': node '{}' writes value {}, which does not exist ({} values)",
                                  name_, node.name, v, num_values);
  for (const ExeDep& d : node.deps)
    if (d.node < 0 || d.node >= id)
      return Status::ParamInvalid("execute graph '{}': node '{}' depends on node {}, which does not exist yet",
                                  name_, node.name, d.node);
  if (FindNode(node.name) >= 0)
    return Status::ParamInvalid("execute graph '{}': a node named '{}' exists already", name_, node.name);
  if (deps_from_inputs) {
    for (int v : node.inputs) {
      const int p = values_[v].producer;
      if (p < 0) continue;
      const ExeDep dep{p, -1};
      if (std::find(node.deps.begin(), node.deps.end(), dep) == node.deps.end()) node.deps.push_back(dep);
    }
  }
  for (int v : node.outputs)
    if (values_[v].producer < 0) values_[v].producer = id;
  by_name_.emplace(node.name, id);
  nodes_.push_back(std::move(node));
  return id;
}

Status ExecuteGraph::AddDep(int node, ExeDep dep) {
  const int n = static_cast<int>(nodes_.size());
  if (node < 0 || node >= n || dep.node < 0 || dep.node >= n)
    return Status::ParamInvalid("execute graph '{}': a dep of node {} on node {}: {} nodes exist", name_, node, dep.node, n);
  nodes_[node].deps.push_back(dep);
  return Status::Ok();
}

int ExecuteGraph::FindNode(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? -1 : it->second;
}

Status ExecuteGraph::Validate() const {
  const int n = static_cast<int>(nodes_.size());
  const int num_values = static_cast<int>(values_.size());
  std::unordered_set<std::string_view> names;
  for (int i = 0; i < n; ++i) {
    const ExeNode& node = nodes_[i];
    auto bad = [&](std::string_view what) {
      return Status::ParamInvalid("execute graph '{}': node '{}' ({}): {}", name_, node.name, node.kernel, what);
    };
    if (!names.insert(node.name).second) return bad("its name is used by another node");
    if (node.kernel.empty()) return bad("names no kernel");
    for (int v : node.inputs)
      if (v < 0 || v >= num_values) return bad(fmt::format("reads value {}, which does not exist", v));
    for (int v : node.outputs)
      if (v < 0 || v >= num_values) return bad(fmt::format("writes value {}, which does not exist", v));
    if (node.kind == NodeKind::kSwitch) {
      if (node.branches < 1) return bad("a switch needs at least one branch");
      if (node.outputs.empty()) return bad("a switch needs an output (the branch it picks)");
    }
    if (node.kind == NodeKind::kMerge && node.deps.empty()) return bad("a merge node needs at least one dep");
    for (const ExeDep& d : node.deps) {
      if (d.node < 0 || d.node >= n) return bad(fmt::format("depends on node {}, which does not exist", d.node));
      if (d.node == i) return bad("depends on itself");
      const ExeNode& src = nodes_[d.node];
      if (d.branch >= 0) {
        if (src.kind != NodeKind::kSwitch)
          return bad(fmt::format("has a branch label {} on its dep on '{}', which is no switch", d.branch, src.name));
        if (d.branch >= src.branches)
          return bad(fmt::format("waits for branch {} of switch '{}', which has {}", d.branch, src.name, src.branches));
      }
    }
  }
  for (int v : inputs_)
    if (v < 0 || v >= num_values) return Status::ParamInvalid("execute graph '{}': input value {} does not exist", name_, v);
  for (int v : outputs_)
    if (v < 0 || v >= num_values) return Status::ParamInvalid("execute graph '{}': output value {} does not exist", name_, v);

  // Every cycle passes through a merge node: without the deps into merge nodes, no cycle is left.
  std::vector<int> indegree(n, 0);
  std::vector<std::vector<int>> succ(n);
  for (int i = 0; i < n; ++i) {
    if (nodes_[i].kind == NodeKind::kMerge) continue;
    for (const ExeDep& d : nodes_[i].deps) {
      succ[d.node].push_back(i);
      ++indegree[i];
    }
  }
  std::vector<int> ready;
  for (int i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push_back(i);
  int seen = 0;
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    ++seen;
    for (int s : succ[i])
      if (--indegree[s] == 0) ready.push_back(s);
  }
  if (seen != n) {
    std::string on_cycle;
    for (int i = 0, listed = 0; i < n && listed < 5; ++i) {
      if (indegree[i] == 0) continue;
      on_cycle += (listed++ ? ", '" : "'") + nodes_[i].name + "'";
    }
    return Status::ParamInvalid("execute graph '{}': a cycle passes through no merge node (nodes on or after it: {})",
                                name_, on_cycle);
  }
  return Status::Ok();
}

bool ExecuteGraph::HasControlFlow() const {
  return std::any_of(nodes_.begin(), nodes_.end(), [](const ExeNode& n) { return n.kind != NodeKind::kNormal; });
}

std::string ExecuteGraph::ToText() const {
  std::string out = fmt::format("execute graph '{}': {} nodes, {} values\n", name_, nodes_.size(), values_.size());
  auto value_list = [&](const std::vector<int>& ids) {
    std::string s;
    for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + values_[ids[i]].name;
    return s;
  };
  if (!inputs_.empty()) out += "  inputs(" + value_list(inputs_) + ")\n";
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const ExeNode& node = nodes_[i];
    out += fmt::format("  {} {} [{}", i, node.name, node.kernel);
    if (node.kind != NodeKind::kNormal) out += fmt::format(", {}", NodeKindName(node.kind));
    if (node.kind == NodeKind::kSwitch) out += fmt::format(" of {}", node.branches);
    out += "]";
    if (!node.inputs.empty()) out += " in(" + value_list(node.inputs) + ")";
    if (!node.outputs.empty()) out += " out(" + value_list(node.outputs) + ")";
    if (!node.deps.empty()) {
      out += " deps(";
      for (std::size_t d = 0; d < node.deps.size(); ++d) {
        out += (d ? ", " : "") + std::to_string(node.deps[d].node);
        if (node.deps[d].branch >= 0) out += fmt::format("#{}", node.deps[d].branch);
      }
      out += ")";
    }
    if (node.priority != kNoPriority) out += fmt::format(" prio {}", node.priority);
    out += "\n";
  }
  if (!outputs_.empty()) out += "  outputs(" + value_list(outputs_) + ")\n";
  return out;
}

void ExecuteGraph::RemapNodes(const std::vector<int>& remap) {
  std::vector<ExeNode> kept;
  kept.reserve(nodes_.size());
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (remap[i] >= 0) kept.push_back(std::move(nodes_[i]));
  for (ExeNode& node : kept) {
    std::vector<ExeDep> deps;
    for (const ExeDep& d : node.deps)
      if (remap[d.node] >= 0) deps.push_back(ExeDep{remap[d.node], d.branch});
    node.deps = std::move(deps);
  }
  nodes_ = std::move(kept);
  by_name_.clear();
  for (std::size_t i = 0; i < nodes_.size(); ++i) by_name_.emplace(nodes_[i].name, static_cast<int>(i));
  for (ExeValue& v : values_) v.producer = v.producer >= 0 ? remap[v.producer] : -1;
}

Status ExecuteGraphSet::Validate() const {
  if (!init || !main || !deinit) return Status::ParamInvalid("execute graph set: Init, Main and DeInit must all exist");
  const std::size_t io = desc.inputs.size() + desc.outputs.size();
  const std::size_t from_init = init->outputs().size();
  if (main->inputs().size() != io + from_init)
    return Status::ParamInvalid("execute graph '{}': {} inputs, expected {} model inputs + {} model outputs + {} from "
                                "Init",
                                main->name(), main->inputs().size(), desc.inputs.size(), desc.outputs.size(), from_init);
  if (deinit->inputs().size() != from_init)
    return Status::ParamInvalid("execute graph '{}': {} inputs, expected Init's {} outputs", deinit->name(),
                                deinit->inputs().size(), from_init);
  if (desc.reusable_stream_num < 1 || desc.reusable_event_num < 0 || desc.reusable_notify_num < 0 ||
      desc.attached_stream_num < 0)
    return Status::ParamInvalid("model desc: resource counts out of range (streams {}, events {}, notifies {}, "
                                "attached streams {})",
                                desc.reusable_stream_num, desc.reusable_event_num, desc.reusable_notify_num,
                                desc.attached_stream_num);
  return Status::Ok();
}

}  // namespace npuflow::exe
