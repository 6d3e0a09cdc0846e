// fuse-epilogues: an elementwise op that only finishes a MatMul's output becomes that MatMul's
// epilogue, one kernel instead of two (a kernel dispatch costs the task sink a few microseconds
// whatever its size, and a decode step is mostly small kernels).
//
//   MatMul -> Gelu           the MatMul gets fused_activation "gelu" (GPT-2's c_fc + GELU)
//   Add(x, MatMul) / Add(MatMul, x)  the MatMul gets x as its last input and fused_residual true
//                            (GPT-2's residual adds after attn/c_proj and mlp/c_proj)
//
// Only when the MatMul's output goes to that one op alone (once), nothing orders either node by
// a control edge, the output is f32, and for the Add, x has the output's exact shape (no
// broadcast) and is ready before the MatMul starts (an input, or something the MatMul already
// depends on: a residual from a parallel branch would chain the branches). The epilogue runs
// act(a x b + bias) + residual with the same functions as op.Gelu and op.Add
// (graph/kernels/activations.h), so the fused kernel gives the unfused pair's bits.
// The removed node's consumers read the MatMul; the MatMul keeps its name and lists what it
// absorbed in `_fused`.
//
// Then the prologue, once no epilogue fuses any more:
//   LayerNorm -> MatMul      a LayerNorm whose one f32 row [1, K] goes to that MatMul alone, as
//                            its a (not transposed): the MatMul reads the LayerNorm's x, gets
//                            gamma and beta as its last inputs, fused_norm true and
//                            fused_norm_epsilon (GPT-2's ln_1 -> c_attn, ln_2 -> c_fc and ln_f ->
//                            logits in the decode step). Each GEMV block normalizes the row with
//                            op.LayerNorm's own function, so the bits do not change.
#include <string>
#include <unordered_set>
#include <vector>

#include "lowering/pass.h"

namespace npuflow::lowering {
namespace {

using graph::Node;

bool HasControlEdges(const ComputeGraph& g, const Node* n) {
  if (!n->control_inputs().empty()) return true;
  for (const Node* c : g.Consumers(n))
    for (const Node* ci : c->control_inputs())
      if (ci == n) return true;
  return false;
}

// The one op that reads `mm`'s output, reading it once; null otherwise.
Node* OnlyReader(const ComputeGraph& g, const Node* mm) {
  const std::vector<Node*> consumers = g.Consumers(mm);
  if (consumers.size() != 1) return nullptr;
  Node* u = consumers.front();
  int uses = 0;
  for (const graph::Endpoint& e : u->inputs())
    if (e.node == mm) ++uses;
  return uses == 1 ? u : nullptr;
}

// Whether `x` is ready before `mm` can start anyway: a node without inputs (Data, Const, ...), or
// one `mm` already depends on. Fusing any other residual would make the MatMul wait for a branch
// that ran beside it (examples/graphs/mlp.pbtxt: Gelu(MatMul) + Tanh(MatMul) would become one
// chain).
bool ReadyBefore(const Node* x, const Node* mm) {
  if (x->inputs().empty() && x->control_inputs().empty()) return true;
  std::vector<const Node*> stack = {mm};
  std::unordered_set<const Node*> seen;
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const graph::Endpoint& e : n->inputs()) {
      if (e.node == x) return true;
      if (seen.insert(e.node).second) stack.push_back(e.node);
    }
    for (const Node* c : n->control_inputs()) {
      if (c == x) return true;
      if (seen.insert(c).second) stack.push_back(c);
    }
  }
  return false;
}

// Moves every reader of `from`'s output 0 to `to`'s output 0, then removes `from`.
Status Replace(ComputeGraph& g, Node* from, Node* to) {
  for (Node* c : g.Consumers(from))
    for (std::size_t i = 0; i < c->inputs().size(); ++i)
      if (c->inputs()[i].node == from) NPUFLOW_RETURN_IF_ERROR(g.SetInput(c, i, graph::Endpoint{to, 0}));
  g.ClearInputs(from);
  return g.RemoveNode(from);
}

StatusOr<bool> FuseOne(ComputeGraph& g, Node* mm) {
  if (mm->type() != "MatMul" || mm->outputs().size() != 1 ||
      mm->outputs()[0].dtype != graph::DataType::kFloat32 || HasControlEdges(g, mm))
    return false;
  Node* u = OnlyReader(g, mm);
  if (u == nullptr || HasControlEdges(g, u) || u->outputs().size() != 1) return false;
  NPUFLOW_ASSIGN_OR_RETURN(bool residual, mm->op().AttrOr<bool>("fused_residual", false));
  NPUFLOW_ASSIGN_OR_RETURN(std::string act, mm->op().AttrOr<std::string>("fused_activation", std::string()));
  // A MatMul whose graph already says fused_norm ends its inputs with gamma and beta, where the
  // residual would go: left alone.
  NPUFLOW_ASSIGN_OR_RETURN(bool norm, mm->op().AttrOr<bool>("fused_norm", false));
  if (norm) return false;
  const graph::TensorDesc& out = mm->outputs()[0];
  if (u->type() == "Gelu") {
    if (residual || !act.empty()) return false;  // the activation comes before the residual
    mm->op().SetAttr("fused_activation", std::string("gelu"));
  } else if (u->type() == "Add") {
    if (residual || u->inputs().size() != 2) return false;
    const graph::Endpoint x = u->inputs()[0].node == mm ? u->inputs()[1] : u->inputs()[0];
    const graph::TensorDesc& xd = x.node->outputs()[x.index];
    if (!(xd.shape == out.shape) || !(u->outputs()[0].shape == out.shape) || xd.dtype != out.dtype ||
        !out.shape.is_static() || !ReadyBefore(x.node, mm))
      return false;
    NPUFLOW_RETURN_IF_ERROR(g.AddInput(mm, x));
    mm->op().SetAttr("fused_residual", true);
  } else {
    return false;
  }
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<std::string> fused,
                           mm->op().AttrOr<std::vector<std::string>>("_fused", std::vector<std::string>{}));
  fused.push_back(u->name());
  mm->op().SetAttr("_fused", fused);
  NPUFLOW_RETURN_IF_ERROR(Replace(g, u, mm));
  return true;
}

StatusOr<bool> FuseNorm(ComputeGraph& g, Node* ln) {
  if (ln->type() != "LayerNorm" || ln->outputs().size() != 1 || ln->inputs().size() != 3 || HasControlEdges(g, ln))
    return false;
  const graph::TensorDesc& out = ln->outputs()[0];
  if (out.dtype != graph::DataType::kFloat32 || !out.shape.is_static() || out.shape.rank() != 2 ||
      out.shape.dim(0).size != 1)
    return false;
  for (int i : {1, 2}) {
    const graph::Endpoint& e = ln->inputs()[i];
    if (e.node->outputs()[e.index].dtype != graph::DataType::kFloat32) return false;
  }
  Node* mm = OnlyReader(g, ln);
  if (mm == nullptr || mm->type() != "MatMul" || mm->inputs()[0].node != ln || HasControlEdges(g, mm)) return false;
  NPUFLOW_ASSIGN_OR_RETURN(bool ta, mm->op().AttrOr<bool>("transpose_a", false));
  NPUFLOW_ASSIGN_OR_RETURN(bool norm, mm->op().AttrOr<bool>("fused_norm", false));
  if (ta || norm) return false;
  NPUFLOW_ASSIGN_OR_RETURN(double eps, ln->op().AttrOr<double>("epsilon", 1e-5));
  const graph::Endpoint x = ln->inputs()[0], gamma = ln->inputs()[1], beta = ln->inputs()[2];
  NPUFLOW_RETURN_IF_ERROR(g.SetInput(mm, 0, x));
  NPUFLOW_RETURN_IF_ERROR(g.AddInput(mm, gamma));
  NPUFLOW_RETURN_IF_ERROR(g.AddInput(mm, beta));
  mm->op().SetAttr("fused_norm", true);
  mm->op().SetAttr("fused_norm_epsilon", eps);
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<std::string> fused,
                           mm->op().AttrOr<std::vector<std::string>>("_fused", std::vector<std::string>{}));
  fused.push_back(ln->name());
  mm->op().SetAttr("_fused", fused);
  g.ClearInputs(ln);
  NPUFLOW_RETURN_IF_ERROR(g.RemoveNode(ln));
  return true;
}

// Runs `fuse` on the nodes in topological order until it fuses nothing.
template <typename Fn>
Status FuseAll(ComputeGraph& g, Fn fuse) {
  for (bool changed = true; changed;) {
    changed = false;
    NPUFLOW_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
    for (Node* n : order) {
      NPUFLOW_ASSIGN_OR_RETURN(bool fused, fuse(g, n));
      if (fused) {
        changed = true;
        break;  // the order is stale
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status FuseEpiloguesPass(PassContext& ctx) {
  // A MatMul may take a Gelu and then an Add (act, then residual); its inputs are then a, b
  // [, bias] [, residual], and the prologue's gamma and beta come last.
  NPUFLOW_RETURN_IF_ERROR(FuseAll(ctx.graph, FuseOne));
  return FuseAll(ctx.graph, FuseNorm);
}

}  // namespace npuflow::lowering
