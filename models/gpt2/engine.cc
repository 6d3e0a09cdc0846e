#include "models/gpt2/engine.h"
#include "models/gpt2/decode_graph.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "actors/fibers.h"
#include "graph/ops/op_registry.h"
#include "lowering/graph_converter.h"
#include "scheduler/model_manager.h"

namespace npuflow::gpt2 {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The prefill model of one stream on RT2.0, Init borrowing the decode model's weights and KV cache.
StatusOr<std::unique_ptr<v2::ModelV2Executor>> LoadPrefill(const exe::ExecuteGraphSet& set,
                                                           scheduler::DavinciModel& decode) {
  std::map<std::string, v2::LentConstant> lent;
  for (const exe::ExeNode& n : set.init->nodes()) {
    auto shared = decode.SharedTensor(n.name);
    if (!shared.ok()) {
      // Every constant of the prefill is one of the decode step's; a missing KV cache would
      // silently split the state in two.
      return shared.status().WithContext(fmt::format("the prefill's constant '{}'", n.name));
    }
    lent[n.name] = v2::LentConstant{shared->first.value, shared->second};
  }
  NPUFLOW_ASSIGN_OR_RETURN(std::unique_ptr<v2::ModelV2Executor> m,
                           v2::ModelV2Executor::Create(set, &decode.runtime(), decode.device()));
  NPUFLOW_RETURN_IF_ERROR(m->Load(v2::ModelExecuteArg{}, v2::ModelLoadArg{&lent}));
  decode.AddBorrower(1);  // until the prefill is gone (~Gpt2Engine)
  return m;
}

}  // namespace

std::string_view PrefillModeName(PrefillMode mode) { return mode == PrefillMode::kBatch ? "batch" : "tokens"; }

StatusOr<PrefillMode> ParsePrefillMode(std::string_view name) {
  if (name == "batch") return PrefillMode::kBatch;
  if (name == "tokens") return PrefillMode::kTokens;
  return Status::ParamInvalid("--prefill '{}': expected batch (the prompt as one RT2.0 graph) or tokens (token by "
                              "token through the decode step)",
                              name);
}

StatusOr<std::unique_ptr<Gpt2Engine>> Gpt2Engine::Create(const std::string& model_path, const EngineOptions& options) {
  NPUFLOW_ASSIGN_OR_RETURN(Gpt2File file, ReadGpt2File(model_path));
  return Create(std::move(file), options);
}

StatusOr<std::unique_ptr<Gpt2Engine>> Gpt2Engine::Create(Gpt2File file, const EngineOptions& options) {
  if (options.streams < 1 || options.streams > 64)
    return Status::ParamInvalid("streams {}: expected 1..64", options.streams);
  if (scheduler::ModelManager::Get() == nullptr)
    return Status::Failed("Gpt2Engine: ModelManager::Initialize has not been called");
  graph::RegisterBuiltinOps();
  std::unique_ptr<Gpt2Engine> engine(new Gpt2Engine());
  engine->file_ = std::move(file);
  const std::string& model_path = engine->file_.path;
  NPUFLOW_ASSIGN_OR_RETURN(std::unique_ptr<graph::ComputeGraph> g,
                           BuildGpt2DecodeGraph(engine->file_, {.next_token = true}));
  // The decode step is a task-sink model (its Attention is tiled on the device with the tiling
  // sink, or once for n_ctx when a gate fails); the prompt goes to RT2.0 below.
  scheduler::Options session_options = options.session_options;
  session_options["npuflow.runtime"] = "v1";
  // One stream unless asked otherwise: a decode step is one row through a chain of layers, so the
  // side branches multi-stream mode finds (K and V into the cache beside Q) are a few microseconds
  // of work each, less than the event pair that joins them again (2 layers x 64: 6 streams and 9
  // events a step). Parallelism inside the step comes from each kernel's blocks.
  session_options.emplace("ge.enableSingleStream", "true");
  NPUFLOW_ASSIGN_OR_RETURN(engine->session_, scheduler::Session::Create(session_options));
  scheduler::Session& s = *engine->session_;
  NPUFLOW_RETURN_IF_ERROR(s.AddGraph(1, std::move(g)));
  NPUFLOW_RETURN_IF_ERROR(s.BuildGraph(1).WithContext(model_path));
  engine->graph_ids_.push_back(1);
  for (int i = 1; i < options.streams; ++i) {
    const auto id = static_cast<std::uint32_t>(i + 1);
    NPUFLOW_RETURN_IF_ERROR(s.ForkGraph(1, id));
    engine->graph_ids_.push_back(id);
  }
  // Loading starts the weight streaming; the loads do not wait for it.
  engine->load_started_ = Clock::now();
  for (std::uint32_t id : engine->graph_ids_) {
    NPUFLOW_RETURN_IF_ERROR(s.LoadGraph(id).WithContext(model_path));
    NPUFLOW_ASSIGN_OR_RETURN(std::shared_ptr<scheduler::DavinciModel> m, s.GetLoadedModel(id));
    engine->models_.push_back(std::move(m));
  }
  NPUFLOW_ASSIGN_OR_RETURN(scheduler::GraphOptions parsed, scheduler::ParseGraphOptions(options.session_options));
  engine->timeout_ = parsed.timeout;
  engine->prefill_mode_ = options.prefill;
  if (options.prefill == PrefillMode::kBatch) {
    NPUFLOW_ASSIGN_OR_RETURN(std::unique_ptr<graph::ComputeGraph> pg, BuildGpt2PrefillGraph(engine->file_));
    graph::CompileOptions co;
    // The decode model's device's chip, as it was loaded (a shipped name or a JSON file's path).
    NPUFLOW_ASSIGN_OR_RETURN(const npu_sim::ChipSpec* chip,
                             scheduler::ModelManager::Get()->runtime().chip(engine->models_[0]->device()));
    co.chip = chip->LoadName();
    // One stream: the layers are a chain, so side streams overlapped little (a 128-token prefill
    // took the same time on 8 streams as on one, 2 device workers) while each stream's caching
    // allocator kept its own activations (575 MB peak RSS against 538 MB on one).
    co.stream_mode = graph::CompileOptions::StreamMode::kSingle;
    auto set = lowering::CompileV2(std::move(pg), co);
    if (!set.ok()) return set.status().WithContext(fmt::format("{}: the prefill graph", model_path));
    for (const auto& m : engine->models_) {
      auto loaded = LoadPrefill(*set, *m);
      if (!loaded.ok()) return loaded.status().WithContext(fmt::format("{}: loading the prefill on RT2.0", model_path));
      engine->prefill_.push_back(std::move(*loaded));
      engine->prefill_loaded_ = engine->prefill_.size();
    }
  }
  return engine;
}

Gpt2Engine::~Gpt2Engine() {
  prefill_.clear();  // it borrows the decode models' memory: unloaded first
  if (prefill_mode_ == PrefillMode::kBatch)
    for (std::size_t i = 0; i < prefill_loaded_; ++i) models_[i]->AddBorrower(-1);
  if (session_) (void)session_->Finalize();
}

Status Gpt2Engine::Prefill(int stream, std::span<const int> tokens, int n_past, std::vector<float>& logits) {
  const Gpt2HParams& hp = file_.hparams;
  if (stream < 0 || stream >= streams())
    return Status::ParamInvalid("stream {}: the engine has streams 0..{}", stream, streams() - 1);
  if (prefill_.empty())
    return Status::Unsupported("the engine was made with --prefill tokens: it has no prefill model");
  if (tokens.empty()) return Status::ParamInvalid("the prefill needs at least one token");
  if (n_past < 0 || n_past + static_cast<std::int64_t>(tokens.size()) > hp.n_ctx)
    return Status::ParamInvalid("positions {}..{} are outside the context (0..{})", n_past,
                                n_past + static_cast<std::int64_t>(tokens.size()) - 1, hp.n_ctx - 1);
  const auto n = static_cast<std::int32_t>(tokens.size());
  std::vector<std::int32_t> ids(tokens.size()), positions(tokens.size());
  for (std::int32_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= hp.n_vocab)
      return Status::ParamInvalid("token id {} is outside the vocabulary (0..{})", tokens[i], hp.n_vocab - 1);
    ids[i] = tokens[i];
    positions[i] = n_past + i;
  }
  // RT2.0's kernels read the weights directly: they must have landed (the task sink waits on
  // latches inside its task lists instead).
  NPUFLOW_RETURN_IF_ERROR(models_[static_cast<std::size_t>(stream)]->WaitForWeights());
  const std::int32_t pos = n_past, len = n_past + n, last = n - 1;
  auto host = [](const void* data, std::uint64_t bytes, std::int64_t rows) {
    v2::Tensor t;
    t.placement = v2::TensorPlacement::kOnHost;
    t.addr = reinterpret_cast<std::uint64_t>(data);
    t.size = bytes;
    t.shape.dtype = static_cast<std::uint32_t>(graph::DataType::kInt32);
    t.shape.rank = 1;
    t.shape.dims[0] = rows;
    return t;
  };
  v2::Tensor in[5] = {host(ids.data(), ids.size() * 4, n), host(positions.data(), positions.size() * 4, n),
                      host(&pos, 4, 1), host(&len, 4, 1), host(&last, 4, 1)};
  logits.resize(static_cast<std::size_t>(hp.n_vocab));
  v2::Tensor out;
  out.placement = v2::TensorPlacement::kOnHost;
  out.addr = reinterpret_cast<std::uint64_t>(logits.data());
  out.size = logits.size() * sizeof(float);
  v2::Tensor* ins[5] = {&in[0], &in[1], &in[2], &in[3], &in[4]};
  v2::Tensor* outs[1] = {&out};
  return prefill_[static_cast<std::size_t>(stream)]->ExecuteSync(ins, 5, outs, 1);
}

Status Gpt2Engine::WaitForWeights() {
  for (std::uint32_t id : graph_ids_) {
    NPUFLOW_ASSIGN_OR_RETURN(std::shared_ptr<scheduler::DavinciModel> m, session_->GetLoadedModel(id));
    NPUFLOW_RETURN_IF_ERROR(m->WaitForWeights());
  }
  return Status::Ok();
}

Status Gpt2Engine::RunStep(int stream, int token, int n_past, float* logits, std::int32_t* next) {
  const Gpt2HParams& hp = file_.hparams;
  if (stream < 0 || stream >= streams())
    return Status::ParamInvalid("stream {}: the engine has streams 0..{}", stream, streams() - 1);
  if (token < 0 || token >= hp.n_vocab)
    return Status::ParamInvalid("token id {} is outside the vocabulary (0..{})", token, hp.n_vocab - 1);
  if (n_past < 0 || n_past >= hp.n_ctx)
    return Status::ParamInvalid("position {} is outside the context (0..{})", n_past, hp.n_ctx - 1);
  // Straight to the stream's model (what RunGraph would find, without asking the session each
  // step), the outputs wanted written into the caller's memory (no output tensor, no copy of it),
  // the other one left on the device.
  const std::int32_t in[3] = {token, n_past, n_past + 1};
  scheduler::ExecuteArgs args;
  for (const std::int32_t& v : in) args.inputs.push_back(scheduler::DataBuffer::Host(&v, sizeof(v)));
  args.outputs.push_back(logits != nullptr ? scheduler::DataBuffer::Host(logits, hp.n_vocab * sizeof(float))
                                           : scheduler::DataBuffer::Discard());
  args.outputs.push_back(next != nullptr ? scheduler::DataBuffer::Host(next, sizeof(*next))
                                         : scheduler::DataBuffer::Discard());
  args.timeout = timeout_;
  return models_[static_cast<std::size_t>(stream)]->NnExecute(args);
}

Status Gpt2Engine::Step(int stream, int token, int n_past, std::vector<float>& logits) {
  logits.resize(static_cast<std::size_t>(file_.hparams.n_vocab));
  return RunStep(stream, token, n_past, logits.data(), nullptr);
}

StatusOr<int> Gpt2Engine::StepGreedy(int stream, int token, int n_past) {
  std::int32_t next = -1;
  NPUFLOW_RETURN_IF_ERROR(RunStep(stream, token, n_past, nullptr, &next));
  return PickedToken(next);
}

StatusOr<int> Gpt2Engine::PickedToken(std::int32_t next) const {
  const int n_vocab = file_.hparams.n_vocab;
  if (next < 0) return AllLogitsMasked(static_cast<std::size_t>(n_vocab));
  if (next >= n_vocab)  // the device's ArgMax broke its promise: say so, never index with it
    return Status::Failed("the decode step's next token {} is outside the vocabulary (0..{})", next, n_vocab - 1);
  return next;
}

StatusOr<Generation> Gpt2Engine::Generate(int stream, std::span<const int> prompt, int n_predict,
                                          const SamplingOptions& sampling, const TokenCallback& on_token) {
  if (prompt.empty()) return Status::ParamInvalid("the prompt is empty: give at least one token");
  if (n_predict < 0) return Status::ParamInvalid("n_predict {}: expected >= 0", n_predict);
  const int n_ctx = file_.hparams.n_ctx;
  if (static_cast<int>(prompt.size()) > n_ctx)
    return Status::ParamInvalid("the prompt has {} tokens; the model's context holds {}", prompt.size(), n_ctx);
  NPUFLOW_RETURN_IF_ERROR(sampling.Validate());
  Sampler sampler(sampling);
  npu_sim::Runtime& rt = scheduler::ModelManager::Get()->runtime();
  const int device = stream >= 0 && stream < streams() ? models_[static_cast<std::size_t>(stream)]->device() : 0;

  Generation g;
  g.prompt.assign(prompt.begin(), prompt.end());
  g.decode_step_overhead_us.reserve(static_cast<std::size_t>(n_predict) + prompt.size());
  std::vector<float> logits;
  const auto t0 = Clock::now();
  g.started = t0;
  const npu_sim::VTime v0 = rt.HostClock();
  Clock::time_point t_first;
  npu_sim::VTime v_first = v0;
  int n_past = 0;
  int token = prompt[0];
  std::size_t next_prompt = 1;
  bool prefilled = false;
  if (prefill_mode_ == PrefillMode::kBatch && prompt.size() > 1) {
    NPUFLOW_RETURN_IF_ERROR(Prefill(stream, prompt, 0, logits).WithContext(fmt::format("stream {} prefill", stream)));
    n_past = static_cast<int>(prompt.size());
    next_prompt = prompt.size();
    ++g.steps;
    prefilled = true;
  }
  // Greedy: each step picks the next token on the device and sends back only it; the logits are
  // read only after a prefill (whose first token is sampled here).
  const bool greedy = sampling.greedy;
  std::int32_t next = -1;
  while (true) {
    if (!prefilled) {
      const bool decoding = !g.ids.empty();
      const std::uint64_t k0 = decoding ? rt.KernelWallNs(device) : 0;
      const std::uint64_t c0 = decoding ? rt.DmaCopyWallNs(device) : 0;
      const auto s0 = decoding ? Clock::now() : Clock::time_point{};
      if (!greedy) logits.resize(static_cast<std::size_t>(file_.hparams.n_vocab));
      NPUFLOW_RETURN_IF_ERROR(RunStep(stream, token, n_past, greedy ? nullptr : logits.data(), greedy ? &next : nullptr)
                                  .WithContext(fmt::format("stream {} step {}", stream, n_past)));
      if (decoding) {
        const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
        const double kernel_ms = static_cast<double>(rt.KernelWallNs(device) - k0) / 1e6;
        g.decode_step_wall_ms += step_ms;
        g.decode_kernel_wall_ms += kernel_ms;
        g.decode_copy_wall_ms += static_cast<double>(rt.DmaCopyWallNs(device) - c0) / 1e6;
        g.decode_step_overhead_us.push_back(static_cast<float>((step_ms - kernel_ms) * 1e3));
        ++g.decode_steps;
      }
      ++n_past;
      ++g.steps;
    }
    const bool logits_here = prefilled || !greedy;
    prefilled = false;
    if (next_prompt < prompt.size()) {
      token = prompt[next_prompt++];
      continue;
    }
    if (n_predict == 0) break;
    if (logits_here) {
      NPUFLOW_ASSIGN_OR_RETURN(token, sampler.Sample(logits));
    } else {
      NPUFLOW_ASSIGN_OR_RETURN(token, PickedToken(next));
    }
    g.ids.push_back(token);
    if (g.ids.size() == 1) {
      t_first = Clock::now();
      v_first = rt.HostClock();
      g.first_token_ms = MsSince(t0);
      g.first_token_at = t_first;
      g.virtual_first_token_at = static_cast<std::int64_t>(v_first);
    }
    if (on_token && !on_token(stream, token)) break;
    if (static_cast<int>(g.ids.size()) >= n_predict || n_past >= n_ctx) break;
  }
  g.finished = Clock::now();
  g.wall_ms = MsSince(t0);
  const npu_sim::VTime v_end = rt.HostClock();
  g.virtual_finished = static_cast<std::int64_t>(v_end);
  g.virtual_ms = static_cast<double>(v_end - v0) / 1e6;
  if (!g.ids.empty()) {
    g.decode_wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_first).count();
    g.decode_virtual_ms = static_cast<double>(v_end - v_first) / 1e6;
  }
  return g;
}

StatusOr<std::vector<Generation>> Gpt2Engine::GenerateConcurrently(const std::vector<std::vector<int>>& prompts,
                                                                   int n_predict,
                                                                   const std::vector<SamplingOptions>& samplings,
                                                                   const TokenCallback& on_token,
                                                                   const HostOptions& host) {
  if (prompts.empty()) return Status::ParamInvalid("no prompts given");
  if (static_cast<int>(prompts.size()) > streams())
    return Status::ParamInvalid("{} prompts but the engine has {} streams", prompts.size(), streams());
  if (samplings.size() != 1 && samplings.size() != prompts.size())
    return Status::ParamInvalid("{} sampling settings for {} prompts: give one, or one per prompt", samplings.size(),
                                prompts.size());
  if (host.mode == HostOptions::Mode::kFibers && (host.threads < 1 || host.threads > 64))
    return Status::ParamInvalid("host threads {}: expected 1..64", host.threads);
  std::vector<StatusOr<Generation>> results(prompts.size(), Status::Failed("not run"));
  // Generation i: on stream i, charged to its own host client.
  auto run_one = [&](int i) -> Status {
    const auto k = static_cast<std::size_t>(i);
    npu_sim::HostClient client(fmt::format("generation {}", i));
    npu_sim::ScopedHostClient scope(client);
    results[k] = Generate(i, prompts[k], n_predict, samplings.size() == 1 ? samplings[0] : samplings[k], on_token);
    return Status::Ok();
  };
  if (host.mode == HostOptions::Mode::kFibers) {
    NPUFLOW_RETURN_IF_ERROR(actors::RunFibers(static_cast<int>(prompts.size()),
                                              {.threads = host.threads, .stack_bytes = host.fiber_stack_bytes}, run_one));
  } else {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < prompts.size(); ++i) threads.emplace_back([&, i] { (void)run_one(static_cast<int>(i)); });
    for (std::thread& t : threads) t.join();
  }
  std::vector<Generation> out;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) return results[i].status().WithContext(fmt::format("generation {}", i));
    out.push_back(std::move(*results[i]));
  }
  return out;
}

}  // namespace npuflow::gpt2
