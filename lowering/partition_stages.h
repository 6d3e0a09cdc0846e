// partition-stages: cuts a flat graph into K pipeline stages (GE's stage-partitioned root graph).
//
// The result is a root graph holding the original Data nodes, one PartitionedCall per stage
// (attribute "f": its subgraph "stage_<s>", "_stage": s) and the NetOutput. Each stage subgraph is
// a flat graph of its own: Data nodes for what it reads from the root inputs or from earlier
// stages (attribute "index" in call order), its nodes, and a NetOutput of what later stages or the
// root's NetOutput read from it. A cut edge is a stage output: the pipeline executor gives it
// memory of its own per step in flight.
//
// How the cut is chosen: the compute nodes (everything but Data, Const, FileConstant, Variable and
// NetOutput) in the graph's stable topological order are split into K contiguous runs whose
// estimated costs (EstimateNodeCostNs) are as even as a greedy cut at the running total's
// K-quantiles makes them. Contiguous in topological order, a stage reads only from the root's
// inputs and earlier stages. For GPT-2 that is contiguous blocks of layers, the embeddings with
// the first and the head with the last.
//
// Sources go where they are read: a Const or FileConstant is copied into every stage that reads
// it (tied weights on two devices are two device copies); a Variable goes to the stage of its
// readers, and a Variable read by two stages is an error naming it and them (its updates would
// have no order). Control edges inside a stage are kept; one across stages is implied by the
// pipeline's order and dropped.
#pragma once

#include <memory>

#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "graph/model_file/compiled_model.h"
#include "lowering/pass.h"
#include "npu_sim/chip_spec.h"

namespace npuflow::lowering {

inline constexpr int kMaxPipelineStages = 16;

// Estimated device time of one node on `chip`, for balancing stages: the larger of its memory
// traffic (input and output bytes at the HBM bandwidth) and its arithmetic (2*M*N*K for
// MatMul / BatchMatMul, ~8 flops per output element otherwise, on all AICores), plus the kernel
// launch overhead. Sources and NetOutput cost 0. Symbolic dims count as 1.
double EstimateNodeCostNs(const graph::Node& node, const npu_sim::ChipSpec& chip);

// Whether `graph` is a stage-partitioned root: a PartitionedCall with a "_stage" attribute.
bool HasPipelineStages(const graph::ComputeGraph& graph);

// Infers `graph`'s shapes and cuts it into `stages` stages (1..kMaxPipelineStages). A graph that
// already has stages, control flow or subgraphs, or fewer compute nodes than stages, is a
// ParamInvalid saying so.
StatusOr<std::unique_ptr<graph::ComputeGraph>> PartitionStages(graph::ComputeGraph& graph, int stages,
                                                               const npu_sim::ChipSpec& chip);

// The stage subgraphs of a stage-partitioned root, in stage order, with their calls. Checks that
// stage indices are 0..K-1, each once, and each call has a subgraph.
struct StageCall {
  const graph::Node* call = nullptr;
  const graph::ComputeGraph* subgraph = nullptr;
};
StatusOr<std::vector<StageCall>> PipelineStages(const graph::ComputeGraph& root);

// A stage-partitioned root reduced to its wiring: the same root nodes and edges, each stage
// subgraph holding only its Data nodes (in order, with their attributes) and an empty NetOutput.
// What a pipeline model file keeps besides the stage models (their nodes are in those).
StatusOr<std::unique_ptr<graph::ComputeGraph>> PipelineWiring(const graph::ComputeGraph& root);

inline constexpr std::string_view kPartitionStagesPass = "partition-stages";

// `npuflow compile --pipeline-stages K`: PartitionStages, then each stage compiled for the v1 task
// sink with `options`. The result's `stages` are the stage models and its `graph` the wiring; a
// stage that does not compile is an error naming it. `dump`: after "partition-stages", the
// partitioned root (its stage subgraphs included); after a v1 pass, each stage's graph after it,
// headed "stage <s>".
StatusOr<graph::CompiledModel> CompilePipeline(std::unique_ptr<graph::ComputeGraph> graph, int stages,
                                               const graph::CompileOptions& options, const DumpRequest& dump = {});

// A pipeline model in a few lines: per stage, where its inputs come from (a root input, or an
// earlier stage's output), its outputs, streams, tasks and weights.
std::string DescribePipeline(const graph::CompiledModel& model);

// A flat graph's copy as a root of its own (a stage subgraph, compiled alone): nodes in order
// with their attributes, output descriptors, data and control inputs.
StatusOr<std::unique_ptr<graph::ComputeGraph>> CopyFlatGraph(const graph::ComputeGraph& graph);

}  // namespace npuflow::lowering
