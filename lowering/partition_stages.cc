#include "lowering/partition_stages.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "graph/ops/control_flow.h"
#include "graph/ops/op_registry.h"
#include "lowering/compiler.h"

namespace npuflow::lowering {

using graph::ComputeGraph;
using graph::Endpoint;
using graph::Node;

namespace {

bool IsSource(const Node& n) {
  return n.type() == "Data" || n.type() == "Const" || n.type() == "FileConstant" || n.type() == "Variable";
}

double Elements(const graph::TensorDesc& d) {
  double n = 1;
  for (const graph::Dim& dim : d.shape.dims()) n *= dim.is_static() ? static_cast<double>(dim.size) : 1.0;
  return n;
}

double Bytes(const graph::TensorDesc& d) { return Elements(d) * static_cast<double>(graph::DataTypeSize(d.dtype)); }

}  // namespace

double EstimateNodeCostNs(const Node& node, const npu_sim::ChipSpec& chip) {
  if (IsSource(node) || node.type() == "NetOutput") return 0;
  double bytes = 0;
  // Gather reads the rows it outputs, not its whole table; KvCacheWrite writes its rows into the
  // cache in place, not the whole cache.
  const bool rows_only = node.type() == "Gather" || node.type() == "KvCacheWrite";
  for (std::size_t i = 0; i < node.inputs().size(); ++i) {
    const Endpoint& e = node.inputs()[i];
    if (rows_only && i == 0) continue;
    if (e.index < static_cast<int>(e.node->outputs().size())) bytes += Bytes(e.node->outputs()[e.index]);
  }
  if (node.type() == "Gather")
    for (const graph::TensorDesc& d : node.outputs()) bytes += Bytes(d);  // the rows read
  double out_elements = 0;
  for (const graph::TensorDesc& d : node.outputs()) {
    if (node.type() != "KvCacheWrite") bytes += Bytes(d);
    out_elements += node.type() == "KvCacheWrite" ? 0 : Elements(d);
  }
  double flops = 8 * out_elements;
  if ((node.type() == "MatMul" || node.type() == "BatchMatMul") && !node.inputs().empty()) {
    const Endpoint& a = node.inputs()[0];
    if (a.index < static_cast<int>(a.node->outputs().size())) {
      const graph::Shape& s = a.node->outputs()[a.index].shape;
      const bool ta = node.op().AttrOr<bool>("transpose_a", false).value_or(false);
      if (s.rank() >= 2) {
        const graph::Dim& k = s.dim(ta ? s.rank() - 2 : s.rank() - 1);
        flops = 2 * out_elements * (k.is_static() ? static_cast<double>(k.size) : 1.0);
      }
    }
  }
  const double memory_ns = bytes / std::max(chip.hbm_bandwidth_gbps, 1e-3);
  const double compute_ns = flops / std::max(chip.aicore_gflops * std::max(chip.aicore_count, 1), 1e-3);
  return std::max(memory_ns, compute_ns) + static_cast<double>(chip.kernel_launch_overhead_ns);
}

StatusOr<std::unique_ptr<ComputeGraph>> CopyFlatGraph(const ComputeGraph& graph) {
  auto copy = std::make_unique<ComputeGraph>(graph.name());
  std::unordered_map<const Node*, Node*> to;
  const std::vector<Node*> nodes = graph.nodes();
  for (const Node* n : nodes) {
    if (n->subgraph() != nullptr)
      return Status::ParamInvalid("graph '{}': node '{}' calls a subgraph; only flat graphs are copied", graph.name(),
                                  n->name());
    NPUFLOW_ASSIGN_OR_RETURN(Node * c, copy->AddNode(n->op()));
    c->outputs() = n->outputs();
    to[n] = c;
  }
  for (const Node* n : nodes) {
    for (const Endpoint& e : n->inputs()) NPUFLOW_RETURN_IF_ERROR(copy->AddInput(to.at(n), Endpoint{to.at(e.node), e.index}));
    for (const Node* c : n->control_inputs()) NPUFLOW_RETURN_IF_ERROR(copy->AddControlInput(to.at(n), to.at(c)));
  }
  return copy;
}

StatusOr<std::unique_ptr<ComputeGraph>> PipelineWiring(const ComputeGraph& root) {
  NPUFLOW_RETURN_IF_ERROR(PipelineStages(root).status());
  auto out = std::make_unique<ComputeGraph>(root.name());
  std::unordered_map<const Node*, Node*> to;
  const std::vector<Node*> nodes = root.nodes();
  for (const Node* n : nodes) {
    NPUFLOW_ASSIGN_OR_RETURN(Node * c, out->AddNode(n->op()));
    c->outputs() = n->outputs();
    to[n] = c;
    if (n->subgraph() == nullptr) continue;
    NPUFLOW_ASSIGN_OR_RETURN(ComputeGraph * sub, out->AddSubgraph(n->subgraph()->name()));
    for (const Node* d : n->subgraph()->nodes()) {
      if (d->type() != "Data") continue;
      NPUFLOW_ASSIGN_OR_RETURN(Node * dc, sub->AddNode(d->op()));
      dc->outputs() = d->outputs();
    }
    NPUFLOW_RETURN_IF_ERROR(sub->AddNode(graph::OpDesc(fmt::format("{}_output", sub->name()), "NetOutput")).status());
    NPUFLOW_RETURN_IF_ERROR(out->SetSubgraph(c, sub));
  }
  for (const Node* n : nodes)
    for (const Endpoint& e : n->inputs()) NPUFLOW_RETURN_IF_ERROR(out->AddInput(to.at(n), Endpoint{to.at(e.node), e.index}));
  return out;
}

StatusOr<graph::CompiledModel> CompilePipeline(std::unique_ptr<ComputeGraph> graph, int stages,
                                               const graph::CompileOptions& options, const DumpRequest& dump) {
  const bool dump_partition = dump.after == kPartitionStagesPass;
  NPUFLOW_RETURN_IF_ERROR(CheckCompileOptions(options, dump_partition ? std::string_view() : std::string_view(dump.after)));
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::ChipSpec chip, npu_sim::LoadChipSpec(options.chip));
  NPUFLOW_ASSIGN_OR_RETURN(std::unique_ptr<ComputeGraph> root, PartitionStages(*graph, stages, chip));
  if (dump_partition && dump.sink) dump.sink(kPartitionStagesPass, PrintDump(*root, graph::CompiledModel{}, dump.format));
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<StageCall> calls, PipelineStages(*root));
  graph::CompiledModel model;
  model.options = options;
  model.chip = chip.name;
  for (std::size_t s = 0; s < calls.size(); ++s) {
    NPUFLOW_ASSIGN_OR_RETURN(auto copy, CopyFlatGraph(*calls[s].subgraph));
    graph::CompileOptions co = options;
    co.model_name = fmt::format("{}_stage{}", options.model_name.empty() ? root->name() : options.model_name, s);
    DumpRequest stage_dump;
    if (!dump_partition && !dump.after.empty() && dump.sink) {
      stage_dump = dump;
      stage_dump.sink = [&dump, s](std::string_view pass, const std::string& text) {
        dump.sink(fmt::format("{} (stage {})", pass, s), text);
      };
    }
    auto compiled = CompileV1(std::move(copy), co, stage_dump);
    if (!compiled.ok()) return compiled.status().WithContext(fmt::format("pipeline stage {}", s));
    model.stages.push_back(std::make_shared<const graph::CompiledModel>(std::move(*compiled)));
  }
  NPUFLOW_ASSIGN_OR_RETURN(model.graph, PipelineWiring(*root));
  return model;
}

std::string DescribePipeline(const graph::CompiledModel& model) {
  std::string out = fmt::format("pipeline: {} stages\n", model.stages.size());
  if (!model.graph) return out;
  auto calls = PipelineStages(*model.graph);
  if (!calls.ok()) return out + fmt::format("  (wiring: {})\n", calls.status().message());
  for (std::size_t s = 0; s < calls->size() && s < model.stages.size(); ++s) {
    const graph::CompiledModel& m = *model.stages[s];
    std::vector<std::string> from;
    for (const Endpoint& e : (*calls)[s].call->inputs()) {
      if (e.node->type() == "Data") {
        from.push_back(e.node->name());
      } else {
        from.push_back(fmt::format("stage {}:{}", e.node->op().AttrOr<std::int64_t>("_stage", -1).value_or(-1), e.index));
      }
    }
    std::size_t tasks = 0;
    for (const auto& st : m.streams) tasks += st.tasks.size();
    out += fmt::format("  stage {}: inputs [{}], {} output{}, {} stream{}, {} tasks, weights {} bytes\n", s,
                       fmt::join(from, ", "), m.outputs.size(), m.outputs.size() == 1 ? "" : "s", m.streams.size(),
                       m.streams.size() == 1 ? "" : "s", tasks, m.memory.bytes(graph::Segment::kWeights));
  }
  return out;
}

bool HasPipelineStages(const ComputeGraph& graph) {
  for (const Node* n : graph.nodes())
    if (n->type() == "PartitionedCall" && n->op().HasAttr("_stage")) return true;
  return false;
}

StatusOr<std::vector<StageCall>> PipelineStages(const ComputeGraph& root) {
  std::map<std::int64_t, StageCall> by_index;
  for (const Node* n : root.nodes()) {
    if (n->type() != "PartitionedCall" || !n->op().HasAttr("_stage")) continue;
    NPUFLOW_ASSIGN_OR_RETURN(std::int64_t s, n->op().Attr<std::int64_t>("_stage"));
    if (n->subgraph() == nullptr)
      return Status::ParamInvalid("graph '{}': stage call '{}' has no subgraph", root.name(), n->name());
    auto [it, inserted] = by_index.emplace(s, StageCall{n, n->subgraph()});
    if (!inserted)
      return Status::ParamInvalid("graph '{}': stage {} is both '{}' and '{}'", root.name(), s, it->second.call->name(),
                                  n->name());
  }
  std::vector<StageCall> stages;
  for (auto& [s, call] : by_index) {
    if (s != static_cast<std::int64_t>(stages.size()))
      return Status::ParamInvalid("graph '{}': stage indices must be 0..{} without gaps; '{}' is stage {}", root.name(),
                                  by_index.size() - 1, call.call->name(), s);
    stages.push_back(call);
  }
  // Every other node of the root is a Data or the NetOutput: the pipeline executor runs only stages.
  for (const Node* n : root.nodes())
    if (n->type() != "Data" && n->type() != "NetOutput" && !(n->type() == "PartitionedCall" && n->op().HasAttr("_stage")))
      return Status::ParamInvalid(
          "graph '{}': node '{}' ({}) is outside every stage; a stage-partitioned root holds only Data nodes, stage "
          "calls and the NetOutput",
          root.name(), n->name(), n->type());
  return stages;
}

StatusOr<std::unique_ptr<ComputeGraph>> PartitionStages(ComputeGraph& graph, int stages, const npu_sim::ChipSpec& chip) {
  if (stages < 1 || stages > kMaxPipelineStages)
    return Status::ParamInvalid("pipeline stages {} is out of range 1..{}", stages, kMaxPipelineStages);
  if (HasPipelineStages(graph))
    return Status::ParamInvalid("graph '{}' is already partitioned into stages", graph.name());
  if (graph::HasControlFlow(graph) || !graph.subgraphs().empty())
    return Status::ParamInvalid("graph '{}' has subgraphs (control flow or calls); partition-stages cuts flat graphs",
                                graph.name());
  graph::RegisterBuiltinOps();
  NPUFLOW_RETURN_IF_ERROR(graph::InferGraphShapes(graph, nullptr));
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());

  // The cut: compute nodes in topological order, split at the running cost's K-quantiles.
  std::vector<Node*> compute;
  std::vector<double> cost;
  Node* net_output = nullptr;
  for (Node* n : order) {
    if (n->type() == "NetOutput") {
      if (net_output != nullptr) return Status::ParamInvalid("graph '{}' has two NetOutput nodes", graph.name());
      net_output = n;
    } else if (!IsSource(*n)) {
      compute.push_back(n);
      cost.push_back(EstimateNodeCostNs(*n, chip));
    }
  }
  if (net_output == nullptr) return Status::ParamInvalid("graph '{}' has no NetOutput node", graph.name());
  if (compute.size() < static_cast<std::size_t>(stages))
    return Status::ParamInvalid("graph '{}' has {} compute nodes, fewer than {} stages", graph.name(), compute.size(),
                                stages);
  double total = 0;
  for (double c : cost) total += c;
  // The smallest bottleneck B (the largest stage's cost) for which a greedy left-to-right packing
  // of runs of cost <= B needs at most K stages; then the packing at B, each stage closed as late
  // as B allows while enough nodes are left for the stages after it (so none is empty).
  const auto stages_needed = [&](double bound) {
    int n = 1;
    double acc = 0;
    for (double c : cost) {
      if (acc > 0 && acc + c > bound) {
        ++n;
        acc = 0;
      }
      acc += c;
    }
    return n;
  };
  double lo = *std::max_element(cost.begin(), cost.end()), hi = std::max(total, lo);
  for (int it = 0; it < 100 && hi - lo > 1e-9 * std::max(1.0, hi); ++it) {
    const double mid = (lo + hi) / 2;
    (stages_needed(mid) <= stages ? hi : lo) = mid;
  }
  std::unordered_map<const Node*, int> stage_of;
  {
    int s = 0;
    double acc = 0;
    for (std::size_t i = 0; i < compute.size(); ++i) {
      const std::size_t left = compute.size() - i;  // nodes not yet placed, this one included
      const bool s_has_nodes = i > 0 && stage_of[compute[i - 1]] == s;
      if (s < stages - 1 && s_has_nodes &&
          (acc + cost[i] > hi || left <= static_cast<std::size_t>(stages - 1 - s))) {
        ++s;
        acc = 0;
      }
      stage_of[compute[i]] = s;
      acc += cost[i];
    }
  }

  // Sources: Variables go with their readers; Consts and FileConstants are copied to each reader's stage.
  std::unordered_map<const Node*, std::set<int>> readers;  // source -> stages reading it
  for (Node* n : compute) {
    for (const Endpoint& e : n->inputs())
      if (IsSource(*e.node) && e.node->type() != "Data") readers[e.node].insert(stage_of[n]);
    for (Node* c : n->control_inputs())
      if (IsSource(*c) && c->type() != "Data") readers[c].insert(stage_of[n]);
  }
  for (const Node* o : {static_cast<const Node*>(net_output)})
    for (const Endpoint& e : o->inputs())
      if (IsSource(*e.node) && e.node->type() != "Data") readers[e.node].insert(stages - 1);
  for (auto& [src, in] : readers) {
    if (src->type() == "Variable" && in.size() > 1)
      return Status::ParamInvalid("graph '{}': Variable '{}' is read by stages {}; a Variable stays in one stage",
                                  graph.name(), src->name(), fmt::join(in, " and "));
  }

  auto root = std::make_unique<ComputeGraph>(graph.name());
  std::unordered_map<const Node*, Node*> root_data;
  for (Node* n : order) {
    if (n->type() != "Data") continue;
    NPUFLOW_ASSIGN_OR_RETURN(Node * d, root->AddNode(n->op()));
    d->outputs() = n->outputs();
    root_data[n] = d;
  }

  struct Stage {
    ComputeGraph* sub = nullptr;
    Node* call = nullptr;
    std::unordered_map<const Node*, Node*> copy;          // original -> node in the subgraph
    std::map<std::pair<const Node*, int>, Node*> inputs;  // (producer, index) -> its Data node
    std::vector<Endpoint> call_inputs;                    // in the root: what each Data reads
    std::map<std::pair<const Node*, int>, int> outputs;   // (producer, index) -> output position
    std::vector<Endpoint> net_inputs;
  };
  std::vector<Stage> st(static_cast<std::size_t>(stages));
  std::set<std::string> used_names;
  for (const Node* n : graph.nodes()) used_names.insert(n->name());
  const auto fresh = [&](std::string base) {
    std::string name = base;
    for (int k = 1; used_names.count(name) != 0; ++k) name = fmt::format("{}_{}", base, k);
    used_names.insert(name);
    return name;
  };
  for (int s = 0; s < stages; ++s) {
    NPUFLOW_ASSIGN_OR_RETURN(st[s].sub, root->AddSubgraph(fmt::format("stage_{}", s)));
  }

  // The endpoint of (producer, index) as seen inside stage s: its copy there, or a stage input.
  std::function<StatusOr<Endpoint>(int, const Endpoint&)> local;
  // The endpoint of (producer, index) in the root: a root Data, or a stage call's output.
  const auto in_root = [&](const Endpoint& e) -> StatusOr<Endpoint> {
    if (auto it = root_data.find(e.node); it != root_data.end()) return Endpoint{it->second, e.index};
    const int from = stage_of.at(e.node);
    Stage& p = st[from];
    auto key = std::make_pair(static_cast<const Node*>(e.node), e.index);
    auto it = p.outputs.find(key);
    if (it == p.outputs.end()) {
      NPUFLOW_ASSIGN_OR_RETURN(Endpoint inner, local(from, e));
      it = p.outputs.emplace(key, static_cast<int>(p.net_inputs.size())).first;
      p.net_inputs.push_back(inner);
    }
    return Endpoint{p.call, it->second};  // the call node is made before any later stage reads it
  };
  local = [&](int s, const Endpoint& e) -> StatusOr<Endpoint> {
    Stage& S = st[s];
    if (auto it = S.copy.find(e.node); it != S.copy.end()) return Endpoint{it->second, e.index};
    if (e.node->type() == "Const" || e.node->type() == "FileConstant" || e.node->type() == "Variable") {
      graph::OpDesc op = e.node->op();
      NPUFLOW_ASSIGN_OR_RETURN(Node * c, S.sub->AddNode(std::move(op)));
      c->outputs() = e.node->outputs();
      S.copy[e.node] = c;
      return Endpoint{c, e.index};
    }
    auto key = std::make_pair(static_cast<const Node*>(e.node), e.index);
    if (auto it = S.inputs.find(key); it != S.inputs.end()) return Endpoint{it->second, 0};
    if (e.index >= static_cast<int>(e.node->outputs().size()))
      return Status::ParamInvalid("node '{}' has no output {}", e.node->name(), e.index);
    const graph::TensorDesc& desc = e.node->outputs()[e.index];
    graph::OpDesc op(fresh(e.node->type() == "Data" ? e.node->name()
                                                    : fmt::format("{}_out{}", e.node->name(), e.index)),
                     "Data");
    op.SetAttr("dtype", desc.dtype);
    op.SetAttr("shape", desc.shape);
    op.SetAttr("index", static_cast<std::int64_t>(S.call_inputs.size()));
    NPUFLOW_ASSIGN_OR_RETURN(Node * d, S.sub->AddNode(std::move(op)));
    d->outputs() = {desc};
    S.inputs.emplace(key, d);
    NPUFLOW_ASSIGN_OR_RETURN(Endpoint outer, in_root(e));
    S.call_inputs.push_back(outer);
    return Endpoint{d, 0};
  };

  for (int s = 0; s < stages; ++s) {
    Stage& S = st[s];
    for (Node* n : compute) {
      if (stage_of[n] != s) continue;
      std::vector<Endpoint> ins;
      for (const Endpoint& e : n->inputs()) {
        NPUFLOW_ASSIGN_OR_RETURN(Endpoint l, local(s, e));
        ins.push_back(l);
      }
      NPUFLOW_ASSIGN_OR_RETURN(Node * c, S.sub->AddNode(n->op()));
      c->outputs() = n->outputs();
      S.copy[n] = c;
      for (const Endpoint& l : ins) NPUFLOW_RETURN_IF_ERROR(S.sub->AddInput(c, l));
      for (Node* ctl : n->control_inputs()) {
        if (IsSource(*ctl) && ctl->type() != "Data") {
          NPUFLOW_ASSIGN_OR_RETURN(Endpoint l, local(s, Endpoint{ctl, 0}));
          NPUFLOW_RETURN_IF_ERROR(S.sub->AddControlInput(c, l.node));
        } else if (auto it = S.copy.find(ctl); it != S.copy.end()) {
          NPUFLOW_RETURN_IF_ERROR(S.sub->AddControlInput(c, it->second));
        }
      }
    }
    // The call node, so later stages can read its outputs (its inputs are complete now).
    graph::OpDesc call(fresh(fmt::format("stage_{}", s)), "PartitionedCall");
    call.SetAttr("f", graph::SubgraphRef{S.sub->name()});
    call.SetAttr("_stage", static_cast<std::int64_t>(s));
    NPUFLOW_ASSIGN_OR_RETURN(S.call, root->AddNode(std::move(call)));
    NPUFLOW_RETURN_IF_ERROR(root->SetSubgraph(S.call, S.sub));
    for (const Endpoint& e : S.call_inputs) NPUFLOW_RETURN_IF_ERROR(root->AddInput(S.call, e));
  }

  // The root's NetOutput reads stage outputs (made now) and root Data nodes.
  std::vector<Endpoint> outs;
  for (const Endpoint& e : net_output->inputs()) {
    if (IsSource(*e.node) && e.node->type() != "Data") {
      NPUFLOW_ASSIGN_OR_RETURN(Endpoint inner, local(stages - 1, e));
      Stage& last = st[stages - 1];
      auto key = std::make_pair(static_cast<const Node*>(e.node), e.index);
      auto it = last.outputs.find(key);
      if (it == last.outputs.end()) {
        it = last.outputs.emplace(key, static_cast<int>(last.net_inputs.size())).first;
        last.net_inputs.push_back(inner);
      }
      outs.push_back(Endpoint{last.call, it->second});
    } else {
      NPUFLOW_ASSIGN_OR_RETURN(Endpoint r, in_root(e));
      outs.push_back(r);
    }
  }
  for (int s = 0; s < stages; ++s) {
    Stage& S = st[s];
    graph::OpDesc op(fresh(fmt::format("stage_{}_output", s)), "NetOutput");
    NPUFLOW_ASSIGN_OR_RETURN(Node * o, S.sub->AddNode(std::move(op)));
    std::vector<graph::TensorDesc> descs;
    for (const Endpoint& e : S.net_inputs) {
      NPUFLOW_RETURN_IF_ERROR(S.sub->AddInput(o, e));
      descs.push_back(e.node->outputs()[e.index]);
    }
    S.call->outputs() = std::move(descs);
  }
  NPUFLOW_ASSIGN_OR_RETURN(Node * out, root->AddNode(net_output->op()));
  for (const Endpoint& e : outs) NPUFLOW_RETURN_IF_ERROR(root->AddInput(out, e));
  return root;
}

}  // namespace npuflow::lowering
