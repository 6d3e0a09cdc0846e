// Gpt2PipelineEngine: GPT-2 served as a pipeline. The decode step's graph is cut into K stages
// (lowering::PartitionStages: contiguous blocks of layers, the embeddings with the first stage
// and the head with the last) and run by a scheduler::PipelineExecutor, the stages spread over D
// simulated devices of one process. S sequences decode at once: each has a replica of every stage
// model (its own KV cache, the Variables of the layers on that stage, on that stage's device), all
// replicas of a stage sharing one device copy of its weights.
//
//   scheduler::ModelManager::Initialize({.chips = {"910B", "910B"}});
//   auto engine = Gpt2PipelineEngine::Create(ReadGpt2File("m.bin").value(),
//                                            {.stages = 2, .devices = 2, .sequences = 8}).value();
//   auto gens = engine->Generate(prompts, 32, {greedy}).value();
//
// A generation is driven by its own steps' completions: a step's future continuation samples the
// next token and submits the next step (prompt tokens first, one step each), so S generations keep
// up to S steps in the pipeline with no host thread per generation, and stage s works on one
// sequence's token while stage s+1 works on another's. Each step starts on the virtual clock where
// that sequence's previous step ended.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "models/gpt2/engine.h"
#include "models/gpt2/ggml_file.h"
#include "models/gpt2/sampling.h"
#include "scheduler/pipeline_executor.h"

namespace npuflow::gpt2 {

struct PipelineEngineOptions {
  int stages = 2;     // 1..lowering::kMaxPipelineStages
  int devices = 1;    // 1..stages; needs that many devices in ModelManager's runtime
  int sequences = 1;  // concurrent generations, 1..scheduler::kMaxPipelineReplicas
  int max_in_flight = 0;  // steps in the pipeline at once; 0: one per sequence (capped at 64)
  std::string chip;       // compile target; empty: device 0's chip
  // Generate's limit: past it the pipeline is aborted (a hung device) and Generate fails. 0: none.
  std::chrono::milliseconds timeout{0};
};

class Gpt2PipelineEngine {
 public:
  // Requires scheduler::ModelManager::Initialize with at least options.devices devices.
  static StatusOr<std::unique_ptr<Gpt2PipelineEngine>> Create(Gpt2File file, const PipelineEngineOptions& options);
  ~Gpt2PipelineEngine();

  const Gpt2File& file() const { return file_; }
  scheduler::PipelineExecutor& pipeline() { return *pipeline_; }
  int sequences() const { return sequences_; }

  // One generation per prompt (at most `sequences`), all at once; samplings: one per prompt or one
  // for all. Each prompt is fed token by token, then up to n_predict tokens are generated (fewer
  // at the context's end). Blocks the calling thread (or fiber) until all have ended; the first
  // error stops every sequence and ends the call, naming the sequence. One call at a time per
  // engine (the sequences' KV caches are its replicas): a second concurrent call is an error.
  StatusOr<std::vector<Generation>> Generate(const std::vector<std::vector<int>>& prompts, int n_predict,
                                             const std::vector<SamplingOptions>& samplings);

 private:
  Gpt2PipelineEngine() = default;
  Gpt2File file_;
  int sequences_ = 0;
  std::unique_ptr<scheduler::PipelineExecutor> pipeline_;
  std::vector<int> input_slot_;  // token, pos, len -> the pipeline's input position
  std::chrono::milliseconds timeout_{0};
  std::mutex generate_mu_;
};

}  // namespace npuflow::gpt2
