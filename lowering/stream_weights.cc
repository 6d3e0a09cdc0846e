// stream-weights: how the GEMVs of one execution prefetch their weights (graph/kernels/matmul.h).
//
// A GEMV (a MatMul of one f32 row, the decode step's shape) reads its b operand, the weights, once
// per execution. Whether those bytes are still cached when the next execution reads them again
// depends on how many the execution reads in all, not on one matrix: when the GEMVs' distinct b
// operands together exceed graph::kGemvCachedWeightBytes they stream from memory every time, so
// each of those MatMuls gets `stream_weights=true` and its kernel prefetches with the short lead
// that leaves the streaming to the hardware prefetcher; below it they keep the long lead that
// pulls cached lines in early. A choice of speed only: the bits do not change. A graph that
// already sets stream_weights keeps it.
//
// What it cannot see: the model is judged alone, so the stages of a pipeline (compiled one by one)
// and several models running at once are each judged by their own weights; RT2.0's lowering does
// not run this pass (its MatMuls keep the long lead); a BatchMatMul of one row runs the GEMV with
// the long lead too.
#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "graph/kernels/gemv_prefetch.h"
#include "lowering/pass.h"

namespace npuflow::lowering {
namespace {

bool IsGemv(const graph::Node* n) {
  if (n->type() != "MatMul" || n->inputs().size() < 2 || n->outputs().size() != 1) return false;
  const graph::Endpoint& a = n->inputs()[0];
  return graph::RunsAsGemv(n->outputs()[0].shape, a.node->outputs()[a.index].dtype);
}

}  // namespace

Status StreamWeightsPass(PassContext& ctx) {
  std::vector<graph::Node*> gemvs;
  std::set<std::pair<const graph::Node*, std::size_t>> counted;  // a b read by several GEMVs is cached once
  std::uint64_t bytes = 0;
  for (graph::Node* n : ctx.graph.nodes()) {
    if (!IsGemv(n)) continue;
    const graph::Endpoint& b = n->inputs()[1];
    const std::optional<std::uint64_t> bytes_b = b.node->outputs()[b.index].bytes();
    if (!bytes_b) continue;  // a dynamic shape: left alone
    if (counted.emplace(b.node, b.index).second) bytes += *bytes_b;
    gemvs.push_back(n);
  }
  if (bytes <= graph::kGemvCachedWeightBytes) return Status::Ok();
  for (graph::Node* n : gemvs) {
    NPUFLOW_ASSIGN_OR_RETURN(bool set, n->op().AttrOr<bool>("stream_weights", true));
    if (set) n->op().SetAttr("stream_weights", true);
  }
  return Status::Ok();
}

}  // namespace npuflow::lowering
