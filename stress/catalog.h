// The models a stress run drives, each with its input sets and their expected outputs.
//
// Built-in models (compiled in-process, deterministic for the run's seed):
//   mlp             x[4,8], two parallel branches (MatMul+bias -> Gelu, MatMul -> Tanh) summed, then
//                   MatMul and Softmax: the two branches run on two streams joined by an event
//   mlp_single      mlp compiled for one stream (ge.enableSingleStream): no events between streams
//   chain           x[256] through 12 elementwise ops: one stream, no events
//   dag             a random 48-node DAG of elementwise ops over four tensor sizes, up to 4 streams
//                   per engine: many events between streams
//   mlp_dynamic     mlp with an unknown batch (x[batch,8]): RT2.0, a batch of 1..32 per input set
//   attention_sink  Tanh(q) -> Attention over constant k/v with a run-time valid_len: the tiling
//                   sink (AICPU tiling, task update, NOPs), one model per --tiling-nops count
//   weights_a/_b    x[1,1024] x w[1024,4096] (16 MiB) -> Tanh with the weight in an external file:
//                   loading streams it in two 10 MiB chunks while executions may already start
//   om              the user's model file (--om)
// A name may carry a variant, "mlp#2": the same structure with other weights.
//
// Expected outputs come from the reference interpreter (graph/ops/interpreter.h) on the source
// graph, once per input set. A user's model whose graph the interpreter cannot run is checked
// against its own first run instead ("solo run": the set run alone, before the storm starts).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/ir/compute_graph.h"
#include "graph/model_file/compiled_model.h"
#include "npu_sim/chip_spec.h"
#include "scheduler/session.h"
#include "stress/options.h"

namespace npuflow::stress {

struct InputSet {
  std::vector<graph::Tensor> inputs;    // in the model's input order
  std::vector<graph::Tensor> expected;  // outputs; empty until a solo run fills them
};

struct StressModel {
  std::string name;  // unique in the run: "mlp", "dag#2", "attention_sink/nops=4"
  std::string base;  // the catalog entry
  bool v2 = false;   // runs on RT2.0: RunGraph only
  // How the run's sessions get it: a fresh source graph (Session::AddGraph), else `compiled`.
  std::function<StatusOr<std::unique_ptr<graph::ComputeGraph>>()> make_graph;
  std::shared_ptr<const graph::CompiledModel> compiled;
  scheduler::Options graph_options;           // per graph (AddGraph / AddCompiledModel)
  std::vector<graph::IoDef> inputs, outputs;  // v1: the static descriptors (device buffers)
  std::vector<InputSet> sets;
  std::string reference = "interpreter";  // or "solo run"
  // The tiling sink: NOPs before the sunk kernel and the chip's prefetch_num. Fewer NOPs than
  // prefetch_num may race (detected by npu_sim, never a silent wrong answer): expected there.
  int nops = -1;
  int prefetch = 0;
  bool race_allowed() const { return nops >= 0 && nops < prefetch; }
  bool external_weights = false;
};

// The catalog's entries, for messages and --help.
const std::vector<std::string>& CatalogNames();

// The run's models, from options.models (a count or names), options.tiling_nops and options.om.
// `work_dir` holds files the models need (external weight files). Errors name the model or the
// option that was wrong.
StatusOr<std::vector<StressModel>> BuildModels(const StressOptions& options, const npu_sim::ChipSpec& chip,
                                               const std::string& work_dir);

// Whether `got` matches `want` (same descriptor; floats within 1e-4 relative + 1e-5, integers
// exactly). The message says where it differs.
Status CompareOutputs(const std::vector<graph::Tensor>& got, const std::vector<graph::Tensor>& want);

}  // namespace npuflow::stress
