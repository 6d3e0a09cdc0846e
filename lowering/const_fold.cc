// const-fold: a node whose data inputs are all Const is computed now, with its reference kernel,
// and becomes a Const (a multi-output node gives one new Const per output, named
// "<node>_folded<i>", and is left for dead-code-elimination). Host-local ops, in-place ops (they
// write state), nodes with control inputs and results above kMaxFoldedBytes are left alone.
#include <fmt/format.h>

#include "graph/ops/op_registry.h"
#include "graph/ir/tensor_access.h"
#include "lowering/graph_index.h"
#include "lowering/pass.h"

namespace npuflow::lowering {
namespace {

constexpr std::uint64_t kMaxFoldedBytes = 64ull << 20;

bool Foldable(const graph::Node& node, const graph::OpDef& def) {
  // A node with control inputs stays: folded into a Const (which runs no task) it would drop the
  // ordering they give to its consumers.
  if (def.engine == graph::OpEngine::kHostLocal || def.reference == nullptr || node.inputs().empty() ||
      !node.control_inputs().empty())
    return false;
  for (int alias : def.inplace)
    if (alias >= 0) return false;
  for (const graph::Endpoint& e : node.inputs())
    if (e.node->type() != "Const") return false;
  std::uint64_t bytes = 0;
  for (const graph::TensorDesc& d : node.outputs()) {
    auto b = d.bytes();
    if (!b) return false;
    bytes += *b;
  }
  return bytes <= kMaxFoldedBytes;
}

}  // namespace

Status ConstFoldPass(PassContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(GraphIndex index, GraphIndex::Build(ctx.graph));
  for (int pos = 0; pos < index.size(); ++pos) {
    graph::Node* node = index.node(pos);
    NPUFLOW_ASSIGN_OR_RETURN(const graph::OpDef* def, graph::OpRegistry::Global().Find(node->type()));
    if (!Foldable(*node, *def)) continue;
    std::vector<graph::Tensor> values;  // the Const inputs, by value: the producers may be rewritten
    std::vector<const graph::Tensor*> in;
    values.reserve(node->inputs().size());
    for (const graph::Endpoint& e : node->inputs()) {
      NPUFLOW_ASSIGN_OR_RETURN(graph::Tensor v, e.node->op().Attr<graph::Tensor>("value"));
      values.push_back(std::move(v));
    }
    for (const graph::Tensor& v : values) in.push_back(&v);
    std::vector<graph::Tensor> out;
    for (const graph::TensorDesc& d : node->outputs()) out.push_back(graph::ZeroTensor(d));
    Status s = def->reference(node->op(), in, out);
    if (!s.ok()) return s.WithContext(fmt::format("folding node '{}'", node->name()));

    if (out.size() == 1) {
      ctx.graph.ClearInputs(node);
      node->op() = graph::OpDesc(node->name(), "Const");
      node->op().SetAttr("value", std::move(out[0]));
      continue;
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      std::string name = fmt::format("{}_folded{}", node->name(), i);
      for (int k = 1; ctx.graph.FindNode(name) != nullptr; ++k) name = fmt::format("{}_folded{}_{}", node->name(), i, k);
      graph::OpDesc c(std::move(name), "Const");
      c.SetAttr("value", out[i]);
      NPUFLOW_ASSIGN_OR_RETURN(graph::Node * folded, ctx.graph.AddNode(std::move(c)));
      folded->outputs() = {out[i].desc};
      for (const DataUse& use : index.uses(pos, static_cast<int>(i)))
        NPUFLOW_RETURN_IF_ERROR(ctx.graph.SetInput(index.node(use.consumer), use.input, graph::Endpoint{folded, 0}));
    }
  }
  return Status::Ok();
}

}  // namespace npuflow::lowering
