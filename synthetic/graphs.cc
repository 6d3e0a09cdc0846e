#include "synthetic/graphs.h"

#include <fmt/format.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace npuflow::synthetic {

using namespace graph;  // the IR these graphs are built in
namespace {

StatusOr<Node*> AddData(ComputeGraph& g, const std::string& name, std::int64_t width) {
  OpDesc op(name, "Data");
  op.SetAttr("dtype", DataType::kFloat32);
  op.SetAttr("shape", Shape{width});
  return g.AddNode(std::move(op));
}

}  // namespace

StatusOr<std::unique_ptr<ComputeGraph>> MakeChainGraph(int length, std::int64_t width) {
  if (length < 1 || width < 1) return Status::ParamInvalid("chain of {} ops of width {}: both must be >= 1", length, width);
  auto g = std::make_unique<ComputeGraph>(fmt::format("chain{}", length));
  NPUFLOW_ASSIGN_OR_RETURN(Node * prev, AddData(*g, "x", width));
  for (int i = 0; i < length; ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(Node * n, g->AddNode(OpDesc(fmt::format("n{}", i), i % 2 ? "Tanh" : "Relu")));
    NPUFLOW_RETURN_IF_ERROR(g->AddInput(n, {prev, 0}));
    prev = n;
  }
  NPUFLOW_ASSIGN_OR_RETURN(Node * out, g->AddNode(OpDesc("out", "NetOutput")));
  NPUFLOW_RETURN_IF_ERROR(g->AddInput(out, {prev, 0}));
  return g;
}

StatusOr<std::unique_ptr<ComputeGraph>> MakeRandomDag(const RandomDagOptions& o) {
  if (o.nodes < 1 || o.inputs < 1 || o.max_fan_in < 1 || o.max_fan_in > 2 || o.locality < 1)
    return Status::ParamInvalid("random DAG: nodes, inputs and locality must be >= 1, max_fan_in 1 or 2");
  constexpr std::int64_t kWidths[] = {16, 256, 1024, 4096};
  constexpr int kClasses = 4;
  std::mt19937_64 rng(o.seed);
  auto g = std::make_unique<ComputeGraph>(fmt::format("dag{}_{}", o.nodes, o.seed));
  std::vector<std::vector<Node*>> by_class(kClasses);
  for (int c = 0; c < kClasses; ++c)
    for (int i = 0; i < o.inputs; ++i) {
      NPUFLOW_ASSIGN_OR_RETURN(Node * d, AddData(*g, fmt::format("x{}_{}", c, i), kWidths[c]));
      by_class[c].push_back(d);
    }
  auto pick = [&](int c) {
    const auto& pool = by_class[c];
    const std::size_t window = std::min<std::size_t>(pool.size(), o.locality);
    // Mostly recent nodes (long chains, short lifetimes), sometimes any (long-lived tensors).
    if (rng() % 8 == 0) return pool[rng() % pool.size()];
    return pool[pool.size() - 1 - rng() % window];
  };
  static constexpr const char* kUnary[] = {"Relu", "Tanh", "Gelu"};
  static constexpr const char* kBinary[] = {"Add", "Mul", "Sub"};
  std::vector<Node*> nodes;
  std::unordered_map<const Node*, bool> read;
  for (int i = 0; i < o.nodes; ++i) {
    const int c = static_cast<int>(rng() % kClasses);
    const bool binary = o.max_fan_in == 2 && rng() % 2 == 0;
    const char* type = binary ? kBinary[rng() % 3] : kUnary[rng() % 3];
    NPUFLOW_ASSIGN_OR_RETURN(Node * n, g->AddNode(OpDesc(fmt::format("n{}", i), type)));
    for (int k = 0; k < (binary ? 2 : 1); ++k) {
      Node* src = pick(c);
      NPUFLOW_RETURN_IF_ERROR(g->AddInput(n, {src, 0}));
      read[src] = true;
    }
    by_class[c].push_back(n);
    nodes.push_back(n);
  }
  NPUFLOW_ASSIGN_OR_RETURN(Node * out, g->AddNode(OpDesc("out", "NetOutput")));
  for (Node* n : nodes)
    if (!read.count(n)) NPUFLOW_RETURN_IF_ERROR(g->AddInput(out, {n, 0}));
  return g;
}

}  // namespace npuflow::synthetic
