#include "scheduler/v2/execution_data.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>

#include <fmt/format.h>

namespace npuflow::v2 {

StatusOr<std::unique_ptr<ExecutionData>> ExecutionData::Build(std::shared_ptr<const exe::ExecuteGraph> graph,
                                                              const exe::KernelRegistry& registry) {
  if (!graph) return Status::ParamInvalid("ExecutionData::Build: no execute graph");
  NPUFLOW_RETURN_IF_ERROR(graph->Validate());
  std::unique_ptr<ExecutionData> d(new ExecutionData());
  d->graph_ = std::move(graph);
  const exe::ExecuteGraph& g = *d->graph_;
  const std::size_t n = g.nodes().size();

  d->chains_ = std::make_unique<exe::Chain[]>(g.values().size());
  d->contexts_ = std::make_unique<exe::KernelContext[]>(n);
  std::size_t slots = 0;
  for (const exe::ExeNode& node : g.nodes()) slots += node.inputs.size() + node.outputs.size();
  d->chain_ptrs_.reserve(slots);  // never grows below: contexts point into it
  d->nodes.resize(n);
  d->tags.resize(n);
  d->critical_section.assign(n, -1);
  d->infos_.resize(n);
  std::map<std::string, int, std::less<>> sections;

  for (std::size_t i = 0; i < n; ++i) {
    const exe::ExeNode& node = g.nodes()[i];
    auto def = registry.Find(node.kernel);
    if (!def.ok())
      return Status::NotFound("execute graph '{}': node '{}': no kernel '{}' is registered", g.name(), node.name,
                              node.kernel);
    const exe::KernelDef* kd = *def;
    if (kd->run == nullptr)
      return Status::ParamInvalid("execute graph '{}': node '{}': kernel '{}' has no run function", g.name(),
                                  node.name, node.kernel);
    exe::KernelContext& ctx = d->contexts_[i];
    ctx.num_inputs = static_cast<std::uint32_t>(node.inputs.size());
    ctx.num_outputs = static_cast<std::uint32_t>(node.outputs.size());
    ctx.chains = d->chain_ptrs_.data() + d->chain_ptrs_.size();
    for (int v : node.inputs) d->chain_ptrs_.push_back(&d->chains_[v]);
    for (int v : node.outputs) d->chain_ptrs_.push_back(&d->chains_[v]);
    ctx.node_id = static_cast<std::uint32_t>(i);
    ctx.node = &node;
    ctx.def = kd;
    ctx.run = &d->run_;
    if (kd->prepare) {
      auto info = kd->prepare(node);
      if (!info.ok())
        return Status(info.status().code(), fmt::format("execute graph '{}': node '{}' ({}): {}", g.name(), node.name,
                                                        node.kernel, info.status().message()));
      d->infos_[i] = *std::move(info);
      ctx.node_info = d->infos_[i].get();
    }
    if (kd->outputs_creator) {
      Status s = kd->outputs_creator(&ctx);
      if (!s.ok())
        return Status(s.code(), fmt::format("execute graph '{}': node '{}' ({}): outputs creator: {}", g.name(),
                                            node.name, node.kernel, s.message()));
    }
    d->nodes[i] = ExecNode{kd->run, &ctx};
    d->tags[i] = kd->tag;
    if (kd->tag == exe::KernelTag::kLaunch) ++d->launch_nodes_;
    if (!kd->critical_section.empty()) {
      auto [it, fresh] = sections.emplace(kd->critical_section, static_cast<int>(sections.size()));
      d->critical_section[i] = it->second;
    }
  }
  d->critical_sections_ = static_cast<int>(sections.size());
  d->has_control_flow_ = g.HasControlFlow();
  NPUFLOW_RETURN_IF_ERROR(d->Layout());
  return d;
}

Status ExecutionData::Layout() {
  const exe::ExecuteGraph& g = *graph_;
  const std::size_t n = g.nodes().size();
  kinds.resize(n);
  branches.resize(n);
  init_counter.assign(n, 0);
  priority_key.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const exe::ExeNode& node = g.nodes()[i];
    kinds[i] = node.kind;
    branches[i] = node.kind == exe::NodeKind::kSwitch ? node.branches : 0;
    const std::int64_t p = node.priority;
    const std::uint64_t rank = p == exe::kNoPriority ? 0xffffffffull
                               : static_cast<std::uint64_t>(std::clamp<std::int64_t>(p, 0, 0xfffffffe));
    priority_key[i] = (rank << 32) | i;
  }

  // Successor groups. Labelled deps go to their branch's group only; unlabelled deps on a switch
  // to every group of it.
  std::vector<std::vector<std::vector<std::uint32_t>>> groups(n);
  for (std::size_t i = 0; i < n; ++i) groups[i].resize(kinds[i] == exe::NodeKind::kSwitch ? branches[i] : 1);
  for (std::size_t i = 0; i < n; ++i) {
    const exe::ExeNode& node = g.nodes()[i];
    for (const exe::ExeDep& d : node.deps) {
      auto& src = groups[d.node];
      if (d.branch >= 0) {
        src[d.branch].push_back(static_cast<std::uint32_t>(i));
      } else {
        for (auto& group : src) group.push_back(static_cast<std::uint32_t>(i));
      }
    }
    init_counter[i] = node.kind == exe::NodeKind::kMerge ? 1 : static_cast<std::int32_t>(node.deps.size());
  }
  group_begin.assign(n + 1, 0);
  group_offset.clear();
  succ.clear();
  for (std::size_t i = 0; i < n; ++i) {
    group_begin[i] = static_cast<std::uint32_t>(group_offset.size());
    for (auto& group : groups[i]) {
      group_offset.push_back(static_cast<std::uint32_t>(succ.size()));
      succ.insert(succ.end(), group.begin(), group.end());
    }
  }
  group_begin[n] = static_cast<std::uint32_t>(group_offset.size());
  group_offset.push_back(static_cast<std::uint32_t>(succ.size()));
  counter = init_counter;
  roots.clear();
  for (std::size_t i = 0; i < n; ++i)
    if (init_counter[i] == 0) roots.push_back(static_cast<std::uint32_t>(i));

  ready_ring.assign(n + 1, 0);
  ready_heap.clear();
  ready_heap.reserve(n);

  // The sequential order: Kahn's algorithm, smallest priority key first.
  sequence.clear();
  if (has_control_flow_) return Status::Ok();
  std::vector<std::int32_t> left = init_counter;
  std::priority_queue<std::uint64_t, std::vector<std::uint64_t>, std::greater<>> ready;
  for (std::uint32_t r : roots) ready.push(priority_key[r]);
  sequence.reserve(n);
  while (!ready.empty()) {
    const auto id = static_cast<std::uint32_t>(ready.top() & 0xffffffffu);
    ready.pop();
    sequence.push_back(nodes[id]);
    for (std::uint32_t k = group_offset[group_begin[id]]; k < group_offset[group_begin[id] + 1]; ++k)
      if (--left[succ[k]] == 0) ready.push(priority_key[succ[k]]);
  }
  if (sequence.size() != n)
    return Status::Internal("execute graph '{}': only {} of {} nodes are reachable in order", g.name(),
                            sequence.size(), n);
  return Status::Ok();
}

Status ExecutionData::NodeFailure(std::uint32_t id, std::uint32_t code) {
  const exe::KernelContext& ctx = contexts_[id];
  Status cause = run_.TakeError();
  std::string message = cause.ok() ? fmt::format("kernel returned code {} without an error", code)
                                   : std::string(cause.message());
  if (ctx.def->exception_dump_info_filler) {
    const std::string dump = ctx.def->exception_dump_info_filler(&ctx);
    if (!dump.empty()) message += " [" + dump + "]";
  }
  return Status(cause.ok() ? StatusCode::kFailed : cause.code(),
                fmt::format("node '{}' ({}): {}", ctx.node->name, ctx.node->kernel, message));
}

}  // namespace npuflow::v2
