// Gpt2Engine: a GPT-2 ggml model file compiled once and loaded on K streams of one device, for
// K generations at a time.
//
//   scheduler::ModelManager::Initialize({...});
//   auto engine = Gpt2Engine::Create("gpt2.bin", {.streams = 4}).value();
//   auto gens = engine->GenerateConcurrently(prompts, 32, sampling).value();  // K fibers, 1 host thread
//
// How it runs: the file is read and checked (models/gpt2/ggml_file.h), the decode step built as a graph
// whose weights are FileConstants pointing into the file, compiled by the v1 compiler in a
// Session, and loaded as K models (the origin and K - 1 forks of it). The session's
// ExternalWeightManager gives all of them one device copy of the weights, streamed in by the
// WeightLoaderActor; each model has its own KV cache (its Variables) and activations. A
// generation feeds the prompt, then samples; each decode step is one NnExecute on the stream's
// loaded model (kept from the load: no session lookup per step), the logits written straight into
// the caller's vector. A greedy generation reads only the next token: the step picks it on the
// device (StepGreedy).
//
// The prompt (PrefillMode::kBatch, the default): one execution of the prefill graph, N unknown
// until run time, compiled once for RT2.0 and loaded per stream as a ModelV2Executor whose Init
// borrows the stream's decode model's memory (ModelLoadArg): the same device copy of the weights
// and the same KV-cache Variables. The prefill writes rows 0..N-1 of the cache, and the decode
// steps (v1 task sink) read them: one model, two runtimes, as GE's hybrid execution runs it.
// A one-token prompt is one decode step in either mode: there is nothing to batch, and the step
// runs while the weights stream in (the prefill waits for all of them). PrefillMode::kTokens feeds
// every prompt token by token through the decode step, and builds no prefill model.
//
// Thread-safe across streams: generations on different streams run concurrently (threads or
// fibers); one stream runs one generation at a time (its KV cache is the state). Every model is
// loaded in Create, before any generation runs: the load path holds std mutexes across waits, which
// a fiber must not do (docs/actors.md, "Fibers").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/gpt2/sampling.h"
#include "models/gpt2/ggml_file.h"
#include "scheduler/session.h"
#include "scheduler/v2/model_v2_executor.h"

namespace npuflow::gpt2 {

// How a generation feeds its prompt.
enum class PrefillMode {
  kBatch,   // the prompt as one dynamic-shape graph on RT2.0 (BuildGpt2PrefillGraph): N rows at once
  kTokens,  // token by token through the decode step (the v1 task sink)
};
std::string_view PrefillModeName(PrefillMode mode);
StatusOr<PrefillMode> ParsePrefillMode(std::string_view name);  // "batch" | "tokens"

struct EngineOptions {
  int streams = 1;                     // concurrent generations, 1..64
  scheduler::Options session_options;  // extra Session options (ge.exec.deviceId, ...)
  PrefillMode prefill = PrefillMode::kBatch;
};

struct Generation {
  using Clock = std::chrono::steady_clock;
  std::vector<int> prompt;
  std::vector<int> ids;           // the generated tokens
  double first_token_ms = 0;      // wall, from the start to the first generated token
  double wall_ms = 0;             // the whole generation, prompt included
  double decode_wall_ms = 0;      // the steps after the first generated token
  double virtual_ms = 0;          // the same span on the caller's virtual host clock (GenerateConcurrently:
                                  // the generation's own host client, "generation i")
  double decode_virtual_ms = 0;
  // The decode steps after the first generated token alone (no sampling): their wall time, and the
  // device's kernel wall time meanwhile (npu_sim's DeviceStats::kernel_ns: every stream of the
  // device, so with one generation at a time the step's own kernels). Their difference is what
  // the runtime costs per step beyond its kernels. Of that, the DMA channels' wall time inside
  // copies meanwhile (DeviceStats::dma_copy_ns: the step's input H2D and logits D2H memcpy).
  double decode_step_wall_ms = 0;
  double decode_kernel_wall_ms = 0;
  double decode_copy_wall_ms = 0;
  int decode_steps = 0;
  // Each of those steps' own overhead (its wall time minus the kernels' meanwhile), in order: the
  // mean above is moved by rare stalls of the host thread (a scheduler tick, 1-4 ms); the median
  // of these is the runtime's usual cost.
  std::vector<float> decode_step_overhead_us;
  int steps = 0;                  // executions: decode steps (prompt tokens + generated - 1), or with a
                                  // batch prefill 1 + generated - 1
  // When it happened (for figures over several streams): wall, and virtual (host clock, ns).
  Clock::time_point started, first_token_at, finished;
  std::int64_t virtual_first_token_at = 0, virtual_finished = 0;
};

// Called after each generated token (stream, token); return false to stop early. With several
// generations it is called from each of them: concurrently from several host threads, and
// interleaved between fibers.
using TokenCallback = std::function<bool(int stream, int token)>;

// How GenerateConcurrently runs its K generations on the host.
struct HostOptions {
  enum class Mode {
    kFibers,   // one Boost.Fiber fiber each, on `threads` host threads (actors::RunFibers)
    kThreads,  // one OS thread each (for comparison, and for ThreadSanitizer, which cannot follow fibers)
  };
  Mode mode = Mode::kFibers;
  int threads = 1;                          // kFibers: host threads, the caller's included (1..64)
  std::size_t fiber_stack_bytes = 512 * 1024;  // kFibers: each generation's stack (guard page below it)
};

class Gpt2Engine {
 public:
  // Requires scheduler::ModelManager::Initialize.
  static StatusOr<std::unique_ptr<Gpt2Engine>> Create(const std::string& model_path, const EngineOptions& options);
  // The same from a file already read (ReadGpt2File): the header is not read again.
  static StatusOr<std::unique_ptr<Gpt2Engine>> Create(Gpt2File file, const EngineOptions& options);
  ~Gpt2Engine();

  const Gpt2File& file() const { return file_; }
  int streams() const { return static_cast<int>(graph_ids_.size()); }
  // The decode step's compiled model (the same for every stream): its streams, tasks and what
  // the compiler decided (e.g. CompiledModel::tiling_sink).
  const graph::CompiledModel& decode_model() const { return models_.front()->compiled(); }
  scheduler::Session& session() { return *session_; }
  std::uint32_t graph_id(int stream) const { return graph_ids_[static_cast<std::size_t>(stream)]; }

  // Blocks until every weight region has landed on the device (or failed).
  Status WaitForWeights();
  // When the first model load started (the weights start streaming in then).
  std::chrono::steady_clock::time_point load_started() const { return load_started_; }

  // One decode step on `stream`: `token` at position n_past (0 <= n_past < n_ctx); the logits
  // (n_vocab floats) go to `logits`. Updates the stream's KV cache at n_past.
  Status Step(int stream, int token, int n_past, std::vector<float>& logits);
  // The same step, greedy: the next token is picked on the device (the decode graph's ArgMax, the
  // same index as greedy sampling's) and only it comes back; the logits stay on the device. Every
  // logit -inf or NaN is the error greedy sampling gives (AllLogitsMasked).
  StatusOr<int> StepGreedy(int stream, int token, int n_past);
  // The prompt rows `tokens` at positions n_past .. n_past + N - 1 in one RT2.0 execution (kBatch
  // engines only); the logits of the last row go to `logits`. Updates the KV cache at those rows.
  Status Prefill(int stream, std::span<const int> tokens, int n_past, std::vector<float>& logits);
  PrefillMode prefill_mode() const { return prefill_mode_; }

  // Feeds `prompt` (non-empty, ids < n_vocab) and generates up to n_predict tokens (stopping at the
  // context's end; none for n_predict 0) on `stream`.
  StatusOr<Generation> Generate(int stream, std::span<const int> prompt, int n_predict, const SamplingOptions& sampling,
                                const TokenCallback& on_token = {});

  // One generation per prompt, prompt i on stream i, all at once: by default K fibers on one host
  // thread (host.threads; a generation waits on every step and yields meanwhile), or K OS threads.
  // Each generation charges its own host client, named "generation i": its virtual figures and its
  // trace track are its own. samplings: one per prompt, or one for all. Must not be called inside
  // an actor's handler.
  StatusOr<std::vector<Generation>> GenerateConcurrently(const std::vector<std::vector<int>>& prompts, int n_predict,
                                                         const std::vector<SamplingOptions>& samplings,
                                                         const TokenCallback& on_token = {},
                                                         const HostOptions& host = {});

 private:
  Gpt2Engine() = default;
  // One decode step; logits (n_vocab floats) and next (the device's greedy pick) each filled when
  // not null, left on the device otherwise.
  Status RunStep(int stream, int token, int n_past, float* logits, std::int32_t* next);
  // The device's greedy pick as a token id: -1 (every logit masked) is AllLogitsMasked.
  StatusOr<int> PickedToken(std::int32_t next) const;
  Gpt2File file_;
  std::unique_ptr<scheduler::Session> session_;
  std::vector<std::uint32_t> graph_ids_;
  std::vector<std::shared_ptr<scheduler::DavinciModel>> models_;  // per stream: its graph's loaded model
  PrefillMode prefill_mode_ = PrefillMode::kBatch;
  std::vector<std::unique_ptr<v2::ModelV2Executor>> prefill_;     // per stream (kBatch): on its model's memory
  std::size_t prefill_loaded_ = 0;                                // how many decode models lend to one
  npu_sim::Timeout timeout_;                                      // the session's execution timeout
  std::chrono::steady_clock::time_point load_started_;
};

}  // namespace npuflow::gpt2
