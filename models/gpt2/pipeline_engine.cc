#include "models/gpt2/pipeline_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <atomic>
#include <functional>
#include <mutex>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "graph/ops/op_registry.h"
#include "lowering/partition_stages.h"
#include "models/gpt2/decode_graph.h"
#include "npu_sim/chip_spec.h"
#include "scheduler/model_manager.h"

namespace npuflow::gpt2 {

namespace {

using Clock = std::chrono::steady_clock;

graph::Tensor I32(std::int32_t v) {
  graph::Tensor t{graph::TensorDesc{graph::DataType::kInt32, graph::Shape{1}}, std::vector<std::uint8_t>(4)};
  std::memcpy(t.data.data(), &v, 4);
  return t;
}

// One generation's state, advanced by its own steps' completions.
struct Sequence {
  int index = 0;
  std::vector<int> prompt;
  std::size_t next_prompt = 0;
  int n_past = 0;
  int n_predict = 0;
  int n_ctx = 0;
  std::unique_ptr<Sampler> sampler;
  Generation gen;
  npu_sim::VTime v0 = 0;
};

// The run of all sequences: counts them down and keeps the first error.
struct Run {
  std::mutex mu;
  int left = 0;
  Status first_error;
  std::atomic<bool> failed{false};  // a sequence failed: the others stop at their next step
  actors::Promise<Status> done;
  // The last End completes `done` through a promise of its own, after the lock: the waiter may
  // destroy this Run as soon as it sees the value.
  void End(Status s) {
    actors::Promise<Status> fire;
    Status result;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!s.ok() && first_error.ok()) {
        first_error = std::move(s);
        failed.store(true, std::memory_order_release);
      }
      if (--left > 0) return;
      fire = std::move(done);
      result = first_error;
    }
    fire.Set(std::move(result));
  }
};

}  // namespace

Gpt2PipelineEngine::~Gpt2PipelineEngine() {
  if (pipeline_) (void)pipeline_->Unload();
}

StatusOr<std::unique_ptr<Gpt2PipelineEngine>> Gpt2PipelineEngine::Create(Gpt2File file,
                                                                         const PipelineEngineOptions& options) {
  scheduler::ModelManager* mm = scheduler::ModelManager::Get();
  if (mm == nullptr) return Status::Failed("Gpt2PipelineEngine: ModelManager::Initialize has not been called");
  if (options.sequences < 1 || options.sequences > scheduler::kMaxPipelineReplicas)
    return Status::ParamInvalid("sequences {}: expected 1..{}", options.sequences, scheduler::kMaxPipelineReplicas);
  if (options.stages < 1 || options.stages > file.hparams.n_layer + 2)
    return Status::ParamInvalid("pipeline stages {}: expected 1..{} for a model of {} layers", options.stages,
                                std::min(lowering::kMaxPipelineStages, file.hparams.n_layer + 2), file.hparams.n_layer);
  graph::RegisterBuiltinOps();
  std::unique_ptr<Gpt2PipelineEngine> e(new Gpt2PipelineEngine());
  e->file_ = std::move(file);
  e->sequences_ = options.sequences;
  NPUFLOW_ASSIGN_OR_RETURN(std::unique_ptr<graph::ComputeGraph> g, BuildGpt2DecodeGraph(e->file_));
  std::string chip = options.chip;
  if (chip.empty()) {
    NPUFLOW_ASSIGN_OR_RETURN(const npu_sim::ChipSpec* c, mm->runtime().chip(0));
    chip = c->LoadName();
  }
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::ChipSpec spec, npu_sim::LoadChipSpec(chip));
  NPUFLOW_ASSIGN_OR_RETURN(std::unique_ptr<graph::ComputeGraph> root, lowering::PartitionStages(*g, options.stages, spec));
  scheduler::PipelineOptions po;
  po.devices = options.devices;
  po.replicas = options.sequences;
  po.max_in_flight = options.max_in_flight > 0 ? options.max_in_flight
                                               : std::min(options.sequences, scheduler::kMaxPipelineInFlight);
  po.compile.chip = chip;
  po.name = "gpt2";
  auto pipeline = scheduler::PipelineExecutor::Create(*root, po);
  if (!pipeline.ok()) return pipeline.status().WithContext(e->file_.path);
  e->pipeline_ = std::move(*pipeline);
  e->timeout_ = options.timeout;
  for (const char* name : {"token", "pos", "len"}) {
    const auto& names = e->pipeline_->input_names();
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) return Status::Internal("the GPT-2 pipeline has no input '{}'", name);
    e->input_slot_.push_back(static_cast<int>(it - names.begin()));
  }
  return e;
}

StatusOr<std::vector<Generation>> Gpt2PipelineEngine::Generate(const std::vector<std::vector<int>>& prompts,
                                                               int n_predict,
                                                               const std::vector<SamplingOptions>& samplings) {
  const Gpt2HParams& hp = file_.hparams;
  std::unique_lock<std::mutex> one_call(generate_mu_, std::try_to_lock);
  if (!one_call.owns_lock())
    return Status::Unsupported("Generate is already running on this engine (its sequences' KV caches are in use)");
  if (prompts.empty()) return Status::ParamInvalid("no prompts");
  if (static_cast<int>(prompts.size()) > sequences_)
    return Status::ParamInvalid("{} prompts; the pipeline was built for {} sequences", prompts.size(), sequences_);
  if (samplings.size() != 1 && samplings.size() != prompts.size())
    return Status::ParamInvalid("{} sampling settings for {} prompts: give one, or one per prompt", samplings.size(),
                                prompts.size());
  if (n_predict < 0) return Status::ParamInvalid("n_predict {}: expected >= 0", n_predict);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return Status::ParamInvalid("prompt {} is empty: give at least one token", i);
    if (static_cast<int>(prompts[i].size()) > hp.n_ctx)
      return Status::ParamInvalid("prompt {} has {} tokens; the model's context holds {}", i, prompts[i].size(), hp.n_ctx);
    for (int t : prompts[i])
      if (t < 0 || t >= hp.n_vocab)
        return Status::ParamInvalid("prompt {}: token id {} is outside the vocabulary (0..{})", i, t, hp.n_vocab - 1);
    NPUFLOW_RETURN_IF_ERROR(samplings[samplings.size() == 1 ? 0 : i].Validate());
  }
  npu_sim::Runtime& rt = scheduler::ModelManager::Get()->runtime();
  // What the steps' continuations use lives on the heap, held by each of them: the last one may
  // still be returning when Generate has seen every sequence end and returned.
  struct Gen {
    std::vector<Sequence> seqs;
    std::function<void(Sequence&, int, npu_sim::VTime)> submit;  // the next step of a sequence
    std::function<void(Sequence&, StatusOr<scheduler::StepOutput>)> step_done;
  };
  auto gen = std::make_shared<Gen>();
  gen->seqs.resize(prompts.size());
  std::vector<Sequence>& seqs = gen->seqs;
  auto run = std::make_shared<Run>();
  run->left = static_cast<int>(seqs.size());
  actors::Future<Status> all_done = run->done.GetFuture();
  const npu_sim::VTime v_start = rt.HostClock();
  const auto t0 = Clock::now();

  // Submits the next step of `q` at virtual time `at`; its completion advances `q`.
  Gen* g = gen.get();
  const auto advance = [this, g, run, t0](Sequence& q, StatusOr<scheduler::StepOutput> out) {
    if (!out.ok()) return run->End(out.status().WithContext(fmt::format("sequence {} step {}", q.index, q.n_past)));
    if (run->failed.load(std::memory_order_acquire))
      return run->End(Status::Aborted("sequence {}: stopped, another sequence failed", q.index));
    ++q.n_past;
    ++q.gen.steps;
    int token = -1;
    if (q.next_prompt < q.prompt.size()) {
      token = q.prompt[q.next_prompt++];
    } else if (q.n_predict > 0) {
      const graph::Tensor& logits = out->outputs[0];
      std::span<const float> l(reinterpret_cast<const float*>(logits.data.data()), logits.data.size() / sizeof(float));
      auto sampled = q.sampler->Sample(l);
      if (!sampled.ok()) return run->End(sampled.status().WithContext(fmt::format("sequence {}", q.index)));
      token = *sampled;
      q.gen.ids.push_back(token);
      if (q.gen.ids.size() == 1) {
        q.gen.first_token_at = Clock::now();
        q.gen.virtual_first_token_at = out->end;
        q.gen.first_token_ms = std::chrono::duration<double, std::milli>(q.gen.first_token_at - t0).count();
      }
      if (static_cast<int>(q.gen.ids.size()) >= q.n_predict || q.n_past >= q.n_ctx) token = -1;
    }
    if (token < 0) {
      q.gen.finished = Clock::now();
      q.gen.virtual_finished = out->end;
      q.gen.wall_ms = std::chrono::duration<double, std::milli>(q.gen.finished - t0).count();
      q.gen.virtual_ms = static_cast<double>(out->end - q.v0) / 1e6;
      if (!q.gen.ids.empty()) {
        q.gen.decode_wall_ms = std::chrono::duration<double, std::milli>(q.gen.finished - q.gen.first_token_at).count();
        q.gen.decode_virtual_ms = static_cast<double>(out->end - q.gen.virtual_first_token_at) / 1e6;
      }
      return run->End(Status::Ok());
    }
    g->submit(q, token, out->end);
  };
  // A continuation that throws would never end its sequence: end it with the error instead.
  g->step_done = [run, advance](Sequence& q, StatusOr<scheduler::StepOutput> out) {
    try {
      advance(q, std::move(out));
    } catch (const std::exception& e) {
      run->End(Status::Internal("sequence {}: {}", q.index, e.what()));
    }
  };
  g->submit = [this, g, weak = std::weak_ptr<Gen>(gen)](Sequence& q, int token, npu_sim::VTime at) {
    std::vector<graph::Tensor> in(3);
    in[static_cast<std::size_t>(input_slot_[0])] = I32(token);
    in[static_cast<std::size_t>(input_slot_[1])] = I32(q.n_past);
    in[static_cast<std::size_t>(input_slot_[2])] = I32(q.n_past + 1);
    pipeline_->SubmitStep(std::move(in), {.replica = q.index, .ready_at = at})
        .OnComplete([&q, keep = weak.lock()](StatusOr<scheduler::StepOutput> out) {
          keep->step_done(q, std::move(out));
        });
  };
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    Sequence& q = seqs[i];
    q.index = static_cast<int>(i);
    q.prompt = prompts[i];
    q.next_prompt = 1;
    q.n_predict = n_predict;
    q.n_ctx = hp.n_ctx;
    q.sampler = std::make_unique<Sampler>(samplings[samplings.size() == 1 ? 0 : i]);
    q.gen.prompt = prompts[i];
    q.gen.started = t0;
    q.v0 = v_start;
  }
  // Every step's continuation may submit the next, so all are set up before the first goes in.
  for (Sequence& q : seqs) g->submit(q, q.prompt[0], v_start);
  if (timeout_.count() > 0 && !all_done.WaitFor(timeout_)) {
    // A hung device: abort, so every step in flight fails and each sequence ends.
    pipeline_->Abort(fmt::format("GPT-2 Generate: no end within {} ms", timeout_.count()));
    (void)all_done.Get();
    return Status::Timeout("GPT-2 pipeline: the generations did not end within {} ms; the pipeline was aborted",
                           timeout_.count());
  }
  NPUFLOW_RETURN_IF_ERROR(all_done.Get());
  std::vector<Generation> gens;
  for (Sequence& q : seqs) gens.push_back(std::move(q.gen));
  return gens;
}

}  // namespace npuflow::gpt2
