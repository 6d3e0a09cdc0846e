// GraphConverter: ComputeGraph -> ExecuteGraphSet, RT2.0's lowering (seed 001 section 5.1).
//
// Init gets the constants (Const, FileConstant, Variable values) placed on the device; DeInit
// releases them; Main gets, per compute op, plain-function nodes: InferShape and Tiling (only for
// ops whose input shapes are unknown at lowering time: for static ones both are folded into the
// next two at load), AllocOutputs [memory], LaunchKernel [launch], and a FreeMemory [memory] per
// tensor after its last reader's launch. Model inputs go through PrepareInput, outputs through
// CopyOutput (scheduler/v2/op_kernels.h runs them).
//
// Each node is lowered by a NodeConverter found in the NodeConverterRegistry by, in order, the
// node's lowering-function attribute (_ge_attr_lowering_func), its op type, its kernel library
// (the op's engine: "AICore", "AICPU"); none found is an error naming the node and the three keys.
// Node priorities follow the ComputeGraph's topological order, so the priority executor issues
// work in compute order. One stream: the model desc asks for one reusable stream.
//
// If and While (graph/ops/control_flow.h) lower to switch and merge nodes: If to a switch on its
// condition, one region per branch (each copying its results into the If's outputs) and a merge;
// While to an enter, a loop head (merge), cond, a switch (exit / body), the body, a next that
// copies the body's results into the loop variables, and a back edge to the head. A condition is
// read on the host: its switch synchronizes the stream first. Subgraph nodes are named
// "<call>/<role>/<node>"; subgraph constants "<subgraph>/<node>" in Init.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "graph/exe_graph/exe_graph.h"
#include "graph/ir/compute_graph.h"
#include "graph/model_file/compiled_model.h"
#include "lowering/pass.h"
#include "npu_sim/chip_spec.h"

namespace npuflow::lowering {

inline constexpr std::string_view kLoweringFuncAttr = "_ge_attr_lowering_func";

struct LowerContext;
using NodeConverterFn = Status (*)(const graph::Node& node, LowerContext& ctx);

class NodeConverterRegistry {
 public:
  static NodeConverterRegistry& Global();  // the built-ins registered
  void Register(std::string key, NodeConverterFn fn);  // the last registration wins
  NodeConverterFn FindRegisterData(std::string_view key) const;  // null when none

 private:
  std::vector<std::pair<std::string, NodeConverterFn>> converters_;
};

// `graph` has its output descriptors inferred (CompileV2 runs the passes first).
StatusOr<exe::ExecuteGraphSet> ConvertComputeGraphToExecuteGraph(const graph::ComputeGraph& graph,
                                                                  const npu_sim::ChipSpec& chip);

// RT2.0's compile: the passes of V2Pipeline() (validate, infer-shapes, const-fold,
// dead-code-elimination), then the conversion. The model holds the execute graphs (and no task
// lists); its executor is "auto". `dump.after` may name one of those passes or "lowering" (the
// three execute graphs, node by node).
inline constexpr std::string_view kLoweringDumpName = "lowering";
const std::vector<std::string>& V2Pipeline();
StatusOr<graph::CompiledModel> CompileV2Model(std::unique_ptr<graph::ComputeGraph> graph,
                                              const graph::CompileOptions& options, const DumpRequest& dump = {});
// The same, returning the execute graphs only.
StatusOr<exe::ExecuteGraphSet> CompileV2(std::unique_ptr<graph::ComputeGraph> graph, const graph::CompileOptions& options);

// The offline pass over an execute graph: removes nodes of pure kernels (InferShape, Tiling, a
// plain NoOp) that nothing waits for and whose outputs nobody reads (nor the graph returns), until
// none is left; returns how many. Ops whose shapes lowering knew never get InferShape / Tiling
// nodes in the first place (folded into AllocOutputs and LaunchKernel at load).
int RemoveDeadNodes(exe::ExecuteGraph& graph);

// Node counts of the three graphs (and switch / merge counts), the model's inputs and outputs,
// the resources; with `nodes`, each graph's nodes (ExecuteGraph::ToText).
std::string PrintExecuteGraphs(const exe::ExecuteGraphSet& set, bool nodes);

// Whether any Data node of the graph has a dimension unknown until run time.
bool HasDynamicInputs(const graph::ComputeGraph& graph);
// Whether the graph runs on RT2.0 only (--runtime auto, Session): unknown dimensions (GE's
// IsNeedHybridLoad) or control flow (If/While: the v1 task sink has no branch or loop tasks).
bool NeedsRuntimeV2(const graph::ComputeGraph& graph);

}  // namespace npuflow::lowering
