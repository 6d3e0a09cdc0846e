// `npuflow bench gpt2 [--model F]`: GPT-2 generation, load, peak RSS and time to first token.
//
// Models: --model F, else the GPT-2 117M shape (12 layers, n_embd 768, 12 heads, n_ctx 1024,
// vocab 50257) in f32 and f16, written by make-gpt2 into the cache directory
// ($XDG_CACHE_HOME/npuflow, else ~/.cache/npuflow) the first time a benchmark body needs one.
// Registering the benchmarks creates nothing, so a filtered run that measures no GPT-2 benchmark
// writes no file.
//
// Figures against a baseline measured in the same run:
//   gen_<ftype>_<T>t      tokens/s of a greedy 64-token generation with T device worker threads,
//                         against the memory-bandwidth roofline: the bytes of weights a decode
//                         step must read, divided into the read bandwidth of a plain read with T
//                         threads (SumStream) done immediately before and immediately after that
//                         generation, the higher of the two (a decode step is a GEMV over every
//                         weight: no engine can beat it on this machine at that moment).
//   load_<ftype>          GB/s of a fresh `npuflow gpt2` process from reading the file (header,
//                         graph, compile, load) until every weight region has landed (median of
//                         3 back to back), against `cat FILE > /dev/null` (warm page cache).
//   load_<ftype>_after_idle  the same, one process after 6 s idle, against what a fresh process
//                         gets writing as many bytes of fresh memory after the same idle time.
//   load_<ftype>_warm_process  the old in-process figure (after a warm-up engine), against cat.
//   rss_<ftype>           peak RSS (VmHWM) of a `npuflow gpt2` process (16 tokens) against
//                         weights + the KV-cache pages 16 positions use + activations. Its
//                         one-token prompt is one decode step: no prefill model is built.
//   rss_<ftype>_prompt128_batch  the same with a 128-token prompt and --prefill batch, against
//                         --prefill tokens (fresh processes, alternated): the prefill's cost.
//   ttft_<ftype>_streaming  time to first token when the first step runs while the weights stream
//                         in, against loading everything first.
//   gen_<ftype>_4streams_fibers  tokens/s over 4 concurrent greedy 32-token generations (2 device
//                         workers) run as fibers on one host thread, against the same 4 generations
//                         with one OS thread each, same engine, rounds alternated.
//   ttft_<ftype>_prefill_batch  time to first token of a 128-token prompt (2 device workers, weights
//                         on the device), measured from the prefill's start: the prompt as one
//                         RT2.0 graph (Gpt2Engine::Prefill, then the sampler) against the same
//                         prompt fed token by token through the decode step, same engine, rounds
//                         alternated, medians of 3.
// Given figures (not re-measured: the reference engine is not installed here), dated in
// docs/benchmarks.md:
//   gen_<ftype>_<T>t_vs_ggml  the same tokens/s against the reference CPU engine's figure of
//                         issue 7 (97 / 68 tok/s f32, 150 / 128 f16 at 2 / 1 threads).
//   load_f32_seconds[_after_idle]  the fresh-process f32 load in seconds against the reference
//                         engine's 1.7 s (issue 16, this machine, 2026-11-23).
//   rss_f32_vs_reference  rss_f32 against the reference engine's 518 MB (issue 16).
//   ttft_f32_prefill_vs_reference  ttft_f32_prefill_batch in seconds against the reference engine
//                         processing the same 128-token prompt in one batch at 2 threads, its first
//                         evaluation: 0.55 s (issue 17).
#include "benchmarks/gpt2_bench.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "actors/adaptive_wait.h"
#include "base/files.h"
#include "base/large_buffer.h"
#include "models/gpt2/engine.h"
#include "models/gpt2/pipeline_engine.h"
#include "models/gpt2/sampling.h"
#include "models/gpt2/ggml_file.h"
#include "scheduler/model_manager.h"
#include "synthetic/gpt2_file.h"

namespace npuflow::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// A model to measure. Naming one creates nothing (see EnsureModel).
struct ModelSpec {
  std::string label;  // "f32" or "f16"
  std::string path;
  bool generated = false;  // a default model: written into the cache on first use
};
struct Models {
  std::vector<ModelSpec> list;
  std::string error;
};

const Models& GetModels() {
  static const Models models = [] {
    Models m;
    if (!CurrentOptions().model.empty()) {
      auto f = gpt2::ReadGpt2File(CurrentOptions().model);  // the header and directory only
      if (!f.ok()) {
        m.error = std::string(f.status().message());
        return m;
      }
      m.list.push_back({f->hparams.weight_type() == graph::DataType::kFloat16 ? "f16" : "f32", CurrentOptions().model});
      return m;
    }
    for (const char* label : {"f32", "f16"})
      m.list.push_back({label, (UserCacheDirectory() / fmt::format("bench-gpt2-117m-{}.bin", label)).string(), true});
    return m;
  }();
  return models;
}

// Writes a default model into the cache unless a readable one is there. Benchmark bodies call it,
// never registration: a run that measures no GPT-2 benchmark must not write 750 MB.
Status EnsureModel(const ModelSpec& spec) {
  static std::set<std::string> ready;  // benchmark bodies run one at a time, on one thread
  if (!spec.generated || ready.contains(spec.path)) return Status::Ok();
  if (!gpt2::ReadGpt2File(spec.path).ok()) {
    std::error_code ec;
    fs::create_directories(fs::path(spec.path).parent_path(), ec);
    if (ec) return Status::Failed("cannot create the cache directory for '{}': {}", spec.path, ec.message());
    NPUFLOW_RETURN_IF_ERROR(synthetic::WriteGpt2File(
        spec.path, {.layers = 12, .embd = 768, .heads = 12, .ctx = 1024, .vocab = 50257, .f16 = spec.label == "f16",
                    .seed = 117}));
  }
  ready.insert(spec.path);
  return Status::Ok();
}

// The model a benchmark measures (its first argument), made first where it is a default one.
// nullptr once the error is reported on `state`.
const ModelSpec* ModelFor(benchmark::State& state) {
  const Models& models = GetModels();
  if (!models.error.empty()) {
    state.SkipWithError(models.error.c_str());
    return nullptr;
  }
  const std::size_t which = static_cast<std::size_t>(state.range(0));
  if (which >= models.list.size()) {
    state.SkipWithError("no such model");
    return nullptr;
  }
  if (Status s = EnsureModel(models.list[which]); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return nullptr;
  }
  return &models.list[which];
}

// One plain read with `threads` threads over a buffer larger than any cache, bytes/s: the
// roofline's read, SumStream, each thread summing its own contiguous share.
double ReadBandwidth(int threads) {
  constexpr std::size_t kBytes = std::size_t{512} << 20;
  static LargeBuffer buffer = [] {
    LargeBuffer b = AllocateLargeBuffer(kBytes);
    if (b) std::memset(b.get(), 1, kBytes);
    return b;
  }();
  if (!buffer) return 0;
  const auto* data = reinterpret_cast<const float*>(buffer.get());
  const std::size_t n = kBytes / sizeof(float);
  // The faster of a prefetched and a plain read (SumStream).
  double best = 0;
  for (const bool prefetch : {true, false}) {
    std::vector<float> sums(static_cast<std::size_t>(threads) * 16);
    std::vector<std::thread> pool;
    const auto t0 = Clock::now();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const std::size_t a = n * t / threads, b = n * (t + 1) / threads;
        sums[static_cast<std::size_t>(t) * 16] = SumStream(data + a, (b - a) * sizeof(float), prefetch);
      });
    for (auto& p : pool) p.join();
    benchmark::DoNotOptimize(sums.data());
    best = std::max(best, static_cast<double>(kBytes) / Seconds(t0, Clock::now()));
  }
  return best;
}

// The bytes of weights one decode step reads: every matrix and vector once (the embeddings only
// one row each; the tied head reads all of wte).
double BytesPerToken(const gpt2::Gpt2File& f) {
  double bytes = static_cast<double>(f.weight_bytes());
  const gpt2::GgmlTensorInfo* wte = f.Find("model/wte");
  const gpt2::GgmlTensorInfo* wpe = f.Find("model/wpe");
  if (wpe) bytes -= static_cast<double>(wpe->bytes);
  if (wte && f.has_lm_head) bytes -= static_cast<double>(wte->bytes);
  return bytes;
}

// The prompt: GPT-2's "The" (464), or the last id of a smaller vocabulary.
int FirstToken(const gpt2::Gpt2File& f) { return std::min(464, f.hparams.n_vocab - 1); }

// The `npuflow` program, which sits next to this one (npuflow-bench, or a test binary's build tree).
std::string NpuflowProgram() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path next = self.parent_path() / "npuflow";
  if (!ec && fs::exists(next)) return next.string();
  return (self.parent_path().parent_path() / "apps" / "npuflow").string();
}

// Runs `npuflow <args>` as a fresh process; its output, or an error. The process reports its own
// figures (VmHWM, load times): rusage would also count pages it shared with this process
// between fork and exec.
StatusOr<std::string> RunNpuflow(const std::string& args) {
  std::FILE* pipe = ::popen(fmt::format("'{}' {} 2>&1", NpuflowProgram(), args).c_str(), "r");
  if (pipe == nullptr) return Status::Failed("cannot start npuflow {}", args);
  std::string output;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  if (::pclose(pipe) != 0) return Status::Failed("npuflow {} failed: {}", args, output);
  return output;
}

// The number after `key` in `text`, or -1.
double NumberAfter(const std::string& text, const std::string& key) {
  const std::size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::strtod(text.c_str() + at + key.size(), nullptr);
}

// A fresh `npuflow gpt2` process (one prompt token, no generated token): seconds from reading the
// header until every weight is on the device, as the process reports it (its "read, build and
// compile" plus "weights on the device ... after the load started").
StatusOr<double> FreshProcessLoadSeconds(const std::string& path, int token) {
  NPUFLOW_ASSIGN_OR_RETURN(std::string out,
                           RunNpuflow(fmt::format("gpt2 --model '{}' --prompt-ids {} -n 0 --greedy", path, token)));
  const double create_ms = NumberAfter(out, "read, build and compile ");
  const double weights_ms = NumberAfter(out, "weights on the device ");
  if (create_ms < 0 || weights_ms < 0) return Status::Failed("npuflow gpt2 printed no load time: {}", out);
  return (create_ms + weights_ms) / 1e3;
}

// What this machine gives a fresh process for `bytes` of memory it has never touched: a forked
// child maps them as the device does (2 MiB-aligned, THP hint) and writes every page. Bytes/s.
// On a VM whose balloon takes freed memory back (free page reporting), this is the floor of any
// load into fresh anonymous memory.
double FreshMemoryBandwidth(std::size_t bytes) {
  int fds[2];
  if (::pipe(fds) != 0) return 0;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const auto t0 = Clock::now();
    LargeBuffer b = AllocateLargeBuffer(bytes);
    for (std::size_t i = 0; b && i < bytes; i += 4096) b[i] = std::byte{1};
    const double rate = b ? static_cast<double>(bytes) / Seconds(t0, Clock::now()) : 0;
    (void)!::write(fds[1], &rate, sizeof(rate));
    ::_exit(0);
  }
  ::close(fds[1]);
  double rate = 0;
  if (pid < 0 || ::read(fds[0], &rate, sizeof(rate)) != static_cast<ssize_t>(sizeof(rate))) rate = 0;
  ::close(fds[0]);
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  return rate;
}

// Long enough for the VM's free page reporting (2 s after memory is freed) to have taken back
// what the previous processes freed: the state of a machine that has not just run a load.
constexpr auto kIdle = std::chrono::seconds(6);

Status WithRuntime(int threads, const std::function<Status()>& body) {
  return scheduler::ModelManager::RunInitialized({.chips = {"910B"}, .workers = threads}, body);
}

void BM_Gpt2Generate(benchmark::State& state) {
  const ModelSpec* model = ModelFor(state);
  if (model == nullptr) return;
  const int threads = static_cast<int>(state.range(1));
  std::vector<double> rates, rooflines, reads;
  for (auto _ : state) {
    Status s = WithRuntime(threads, [&]() -> Status {
      NPUFLOW_ASSIGN_OR_RETURN(auto engine, gpt2::Gpt2Engine::Create(model->path, {}));
      NPUFLOW_RETURN_IF_ERROR(engine->WaitForWeights());
      // The machine's bandwidth moves from one moment to the next (a shared VM): the roofline is
      // taken from reads right around this generation, the higher one, so that it bounds it.
      const double before = ReadBandwidth(threads);
      NPUFLOW_ASSIGN_OR_RETURN(gpt2::Generation g,
                               engine->Generate(0, std::vector<int>{FirstToken(engine->file())}, 64,
                                                gpt2::SamplingOptions{.greedy = true}));
      const double read = std::max(before, ReadBandwidth(threads));
      if (g.ids.size() > 1 && g.decode_wall_ms > 0) {
        rates.push_back(static_cast<double>(g.ids.size() - 1) / g.decode_wall_ms * 1e3);
        rooflines.push_back(read / BytesPerToken(engine->file()));
        reads.push_back(read);
      }
      return Status::Ok();
    });
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
  }
  state.counters["tokens_per_second"] = MedianOf(rates);
  state.counters["roofline_tokens_per_second"] = MedianOf(rooflines);
  state.counters["read_bytes_per_second"] = MedianOf(reads);
}

// Decode tokens/s over concurrent generations: the tokens after each one's first, over the window
// from the earliest first token to the latest end.
double ConcurrentTokensPerSecond(const std::vector<gpt2::Generation>& gens) {
  double tokens = 0;
  auto first = gpt2::Generation::Clock::time_point::max(), last = gpt2::Generation::Clock::time_point::min();
  for (const gpt2::Generation& g : gens) {
    if (g.ids.empty()) continue;
    tokens += static_cast<double>(g.ids.size() - 1);
    first = std::min(first, g.first_token_at);
    last = std::max(last, g.finished);
  }
  return last > first ? tokens / Seconds(first, last) : 0;
}

// 4 generations as fibers on one host thread against one OS thread each, alternated on one engine.
void BM_Gpt2Streams(benchmark::State& state) {
  const ModelSpec* model = ModelFor(state);
  if (model == nullptr) return;
  constexpr int kStreams = 4, kRounds = 3;
  std::vector<double> fibers, threads;
  for (auto _ : state) {
    Status s = WithRuntime(2, [&]() -> Status {
      NPUFLOW_ASSIGN_OR_RETURN(auto engine, gpt2::Gpt2Engine::Create(model->path, {.streams = kStreams}));
      NPUFLOW_RETURN_IF_ERROR(engine->WaitForWeights());
      const std::vector<std::vector<int>> prompts(kStreams, std::vector<int>{FirstToken(engine->file())});
      const std::vector<gpt2::SamplingOptions> greedy = {gpt2::SamplingOptions{.greedy = true}};
      using Mode = gpt2::HostOptions::Mode;
      for (int round = 0; round < kRounds; ++round) {
        for (Mode mode : round % 2 == 0 ? std::vector{Mode::kThreads, Mode::kFibers} : std::vector{Mode::kFibers, Mode::kThreads}) {
          NPUFLOW_ASSIGN_OR_RETURN(auto gens, engine->GenerateConcurrently(prompts, 32, greedy, {}, {.mode = mode}));
          (mode == Mode::kFibers ? fibers : threads).push_back(ConcurrentTokensPerSecond(gens));
        }
      }
      return Status::Ok();
    });
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
  }
  state.counters["fibers_tokens_per_second"] = MedianOf(fibers);
  state.counters["threads_tokens_per_second"] = MedianOf(threads);
}

// The load and first-step figures time the decode engine, as a one-token prompt gets it: no
// prefill model (BM_Gpt2Prefill measures that one).
const gpt2::EngineOptions kDecodeOnly{.prefill = gpt2::PrefillMode::kTokens};

void BM_Gpt2Load(benchmark::State& state) {
  const ModelSpec* model = ModelFor(state);
  if (model == nullptr) return;
  const std::string& path = model->path;
  std::vector<double> load, cat, seconds, ttft_stream, ttft_wait, fresh, idle, fresh_memory_idle;
  double weight_bytes = 0;
  int token = 0;
  for (auto _ : state) {
    const auto c0 = Clock::now();
    const int rc = std::system(fmt::format("cat '{}' > /dev/null", path).c_str());
    const double cat_s = Seconds(c0, Clock::now());
    if (rc != 0) return state.SkipWithError("cat failed");
    auto file_size = fs::file_size(path);
    cat.push_back(static_cast<double>(file_size) / cat_s);
    Status s = WithRuntime(0, [&]() -> Status {
      // Time to the first logits, the first step sent as soon as the model is loaded (it runs
      // while the weights stream in), or after every weight has landed.
      auto first_token = [&](bool wait_first) -> StatusOr<double> {
        const auto t0 = Clock::now();
        NPUFLOW_ASSIGN_OR_RETURN(auto engine, gpt2::Gpt2Engine::Create(path, kDecodeOnly));
        if (wait_first) NPUFLOW_RETURN_IF_ERROR(engine->WaitForWeights());
        std::vector<float> logits;
        NPUFLOW_RETURN_IF_ERROR(engine->Step(0, FirstToken(engine->file()), 0, logits));
        return Seconds(t0, Clock::now());
      };
      NPUFLOW_RETURN_IF_ERROR(first_token(true).status());  // warm-up: first-touch costs go here
      for (int round = 0; round < 3; ++round) {  // interleaved, so drift hits both alike
        NPUFLOW_ASSIGN_OR_RETURN(double streamed, first_token(false));
        NPUFLOW_ASSIGN_OR_RETURN(double waited, first_token(true));
        ttft_stream.push_back(streamed);
        ttft_wait.push_back(waited);
      }
      // The load on its own: from the first load call until every region has landed.
      const auto t0 = Clock::now();
      NPUFLOW_ASSIGN_OR_RETURN(auto engine, gpt2::Gpt2Engine::Create(path, kDecodeOnly));
      NPUFLOW_RETURN_IF_ERROR(engine->WaitForWeights());
      const auto t1 = Clock::now();
      weight_bytes = static_cast<double>(engine->file().weight_bytes());
      token = FirstToken(engine->file());
      seconds.push_back(Seconds(t0, t1));
      load.push_back(weight_bytes / Seconds(t0, t1));
      return Status::Ok();
    });
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
    // Fresh processes, as a user runs `npuflow gpt2`: three back to back, then one after the
    // machine was idle, next to the fresh-memory floor after the same idle time.
    for (int round = 0; round < 3; ++round) {
      auto f = FreshProcessLoadSeconds(path, token);
      if (!f.ok()) return state.SkipWithError(std::string(f.status().message()).c_str());
      fresh.push_back(*f);
    }
    std::this_thread::sleep_for(kIdle);
    fresh_memory_idle.push_back(FreshMemoryBandwidth(static_cast<std::size_t>(weight_bytes)));
    std::this_thread::sleep_for(kIdle);
    auto f = FreshProcessLoadSeconds(path, token);
    if (!f.ok()) return state.SkipWithError(std::string(f.status().message()).c_str());
    idle.push_back(*f);
  }
  state.counters["fresh_seconds"] = MedianOf(fresh);
  state.counters["fresh_bytes_per_second"] = weight_bytes / MedianOf(fresh);
  state.counters["idle_seconds"] = MedianOf(idle);
  state.counters["idle_bytes_per_second"] = weight_bytes / MedianOf(idle);
  state.counters["fresh_memory_idle_bytes_per_second"] = MedianOf(fresh_memory_idle);
  state.counters["load_bytes_per_second"] = MedianOf(load);
  state.counters["load_seconds"] = MedianOf(seconds);
  state.counters["cat_bytes_per_second"] = MedianOf(cat);
  state.counters["ttft_stream_seconds"] = MedianOf(ttft_stream);
  state.counters["ttft_wait_seconds"] = MedianOf(ttft_wait);
}

// Peak RSS of a whole `npuflow gpt2` process, against what it must hold.
void BM_Gpt2PeakRss(benchmark::State& state) {
  const ModelSpec* model = ModelFor(state);
  if (model == nullptr) return;
  const std::string& path = model->path;
  auto file = gpt2::ReadGpt2File(path);
  if (!file.ok()) return state.SkipWithError(std::string(file.status().message()).c_str());
  const gpt2::Gpt2HParams& hp = file->hparams;
  // The KV cache a 16-position run uses: per layer, K and V hold each head's rows ([H, C, D],
  // f32), so each head touches ceil(16 * D * 4 / 4096) pages of each; the rest is never touched.
  constexpr double kPage = 4096;
  const double positions = 16;  // the prompt's token, then 15 generated ones fed back (the 16th is not)
  const double head_bytes = positions * (hp.n_embd / hp.n_head) * 4.0;
  const double kv = 2.0 * hp.n_layer * hp.n_head * std::ceil(head_bytes / kPage) * kPage;
  // Activations: the decode step's feature map (a few vectors of n_embd, 4 n_embd and n_vocab).
  const double act = 4.0 * (8.0 * hp.n_embd + 4.0 * hp.n_embd + 2.0 * hp.n_vocab);
  std::vector<double> rss;
  const std::string args = fmt::format("gpt2 --model '{}' --prompt-ids {} -n 16 --greedy", path, FirstToken(*file));
  for (auto _ : state) {
    auto output = RunNpuflow(args);
    if (!output.ok()) return state.SkipWithError(std::string(output.status().message()).c_str());
    const double mb = NumberAfter(*output, "peak RSS: ");
    if (mb <= 0) return state.SkipWithError(("npuflow gpt2 printed no peak RSS: " + *output).c_str());
    rss.push_back(mb * 1e6);
  }
  state.counters["peak_rss_bytes"] = MedianOf(rss);
  state.counters["needed_bytes"] = static_cast<double>(file->weight_bytes()) + kv + act;
  // What the batch prefill costs: a 128-token prompt, batch (the prefill model on RT2.0) against
  // token by token (the decode step only), one fresh process each, alternated.
  std::string ids;
  for (int i = 0; i < 128; ++i) ids += fmt::format("{}{}", i ? " " : "", (FirstToken(*file) + i * 37) % hp.n_vocab);
  std::vector<double> batch, tokens;
  for (int round = 0; round < 2; ++round) {
    for (const char* mode : {"batch", "tokens"}) {
      auto output = RunNpuflow(fmt::format("gpt2 --model '{}' --prompt-ids '{}' -n 16 --greedy --prefill {}", path,
                                           ids, mode));
      if (!output.ok()) return state.SkipWithError(std::string(output.status().message()).c_str());
      const double mb = NumberAfter(*output, "peak RSS: ");
      if (mb <= 0) return state.SkipWithError(("npuflow gpt2 printed no peak RSS: " + *output).c_str());
      (mode[0] == 'b' ? batch : tokens).push_back(mb * 1e6);
    }
  }
  state.counters["prompt128_batch_peak_rss_bytes"] = MedianOf(batch);
  state.counters["prompt128_tokens_peak_rss_bytes"] = MedianOf(tokens);
}

// A 128-token prompt: batch prefill (RT2.0) vs token by token (decode step), alternated.
void BM_Gpt2Prefill(benchmark::State& state) {
  const ModelSpec* model = ModelFor(state);
  if (model == nullptr) return;
  constexpr int kPromptTokens = 128, kRounds = 3;
  std::vector<double> batch, tokens;
  for (auto _ : state) {
    Status s = WithRuntime(2, [&]() -> Status {
      NPUFLOW_ASSIGN_OR_RETURN(auto engine, gpt2::Gpt2Engine::Create(model->path, {.streams = 2}));
      NPUFLOW_RETURN_IF_ERROR(engine->WaitForWeights());
      const int vocab = engine->file().hparams.n_vocab;
      std::vector<int> prompt;
      for (int i = 0; i < kPromptTokens; ++i) prompt.push_back((FirstToken(engine->file()) + i * 37) % vocab);
      std::vector<float> logits;
      gpt2::Sampler sampler(gpt2::SamplingOptions{.greedy = true});
      int first_batch = -1, first_tokens = -1;
      for (int round = 0; round < kRounds; ++round) {
        const auto b0 = Clock::now();
        NPUFLOW_RETURN_IF_ERROR(engine->Prefill(0, prompt, 0, logits));
        NPUFLOW_ASSIGN_OR_RETURN(first_batch, sampler.Sample(logits));
        batch.push_back(Seconds(b0, Clock::now()));
        const auto t0 = Clock::now();
        for (int i = 0; i < kPromptTokens; ++i) NPUFLOW_RETURN_IF_ERROR(engine->Step(1, prompt[i], i, logits));
        NPUFLOW_ASSIGN_OR_RETURN(first_tokens, sampler.Sample(logits));
        tokens.push_back(Seconds(t0, Clock::now()));
      }
      if (first_batch != first_tokens)
        return Status::Internal("the first token differs: {} (batch prefill) vs {} (token by token)", first_batch,
                                first_tokens);
      return Status::Ok();
    });
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
  }
  state.counters["prefill_batch_seconds"] = MedianOf(batch);
  state.counters["prefill_tokens_seconds"] = MedianOf(tokens);
}

// The tiling area's GPT-2 figures: decode at 1 thread, 64 greedy tokens after a 4-token prompt,
// with ge.tiling_schedule_optimize = 1 (Attention tiled on the device each step) and without (tiled
// once for n_ctx), alternated. Wall tok/s from untraced runs; Attention's virtual time per token
// (AttentionVirtualUs) from one traced run each.
constexpr int kTilingTokens = 64;

// Attention's device time in a trace: its kernel's blocks on the AICore tracks ("<layer>/attn/mha
// [i+n]") plus, with the tiling sink, its tiling on the AICPU tracks ("<layer>/attn/mha").
double AttentionVirtualUs(npu_sim::Runtime& rt) {
  const nlohmann::json trace = nlohmann::json::parse(rt.trace().ToJson(), nullptr, false);
  if (trace.is_discarded()) return 0;
  const nlohmann::json& events = trace.is_object() && trace.contains("traceEvents") ? trace["traceEvents"] : trace;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> tracks;  // (pid, tid) -> name
  for (const nlohmann::json& e : events)
    if (e.is_object() && e.value("ph", "") == "M" && e.value("name", "") == "thread_name" && e.contains("args"))
      tracks[{e.value("pid", std::int64_t{0}), e.value("tid", std::int64_t{0})}] = e["args"].value("name", "");
  double us = 0;
  for (const nlohmann::json& e : events) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const std::string& track = tracks[{e.value("pid", std::int64_t{0}), e.value("tid", std::int64_t{0})}];
    const std::string name = e.value("name", "");
    const bool aicore = track.rfind("aicore", 0) == 0 && name.find("/attn/mha [") != std::string::npos;
    const bool aicpu = track.rfind("aicpu", 0) == 0 && name.size() > 9 && name.compare(name.size() - 9, 9, "/attn/mha") == 0;
    if (aicore || aicpu) us += e.value("dur", 0.0);
  }
  return us;
}

void BM_Gpt2TilingSink(benchmark::State& state) {
  const ModelSpec* model = ModelFor(state);
  if (model == nullptr) return;
  std::vector<double> rate_on, rate_off, att_on, att_off;
  for (auto _ : state) {
    for (int round = 0; round < 3; ++round) {
      for (bool on : round % 2 == 0 ? std::vector{false, true} : std::vector{true, false}) {
        const bool traced = round == 2;
        npu_sim::RuntimeOptions ro{.chips = {"910B"}, .workers = 1, .trace = traced};
        Status s = scheduler::ModelManager::RunInitialized(ro, [&]() -> Status {
          gpt2::EngineOptions eo{.prefill = gpt2::PrefillMode::kTokens};
          if (on) eo.session_options = {{"ge.tiling_schedule_optimize", "1"}};
          NPUFLOW_ASSIGN_OR_RETURN(auto engine, gpt2::Gpt2Engine::Create(model->path, eo));
          NPUFLOW_RETURN_IF_ERROR(engine->WaitForWeights());
          const int first = FirstToken(engine->file());
          const std::vector<int> prompt = {first, first / 2, first / 3, first / 4};
          NPUFLOW_ASSIGN_OR_RETURN(gpt2::Generation g, engine->Generate(0, prompt, kTilingTokens,
                                                                          gpt2::SamplingOptions{.greedy = true}));
          if (traced) {
            const double tokens = static_cast<double>(prompt.size() + g.ids.size());
            (on ? att_on : att_off).push_back(AttentionVirtualUs(scheduler::ModelManager::Get()->runtime()) / tokens);
          } else if (g.ids.size() > 1 && g.decode_wall_ms > 0) {
            (on ? rate_on : rate_off).push_back(static_cast<double>(g.ids.size() - 1) / g.decode_wall_ms * 1e3);
          }
          return Status::Ok();
        });
        if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
      }
    }
  }
  state.counters["on_tokens_per_second"] = MedianOf(rate_on);
  state.counters["off_tokens_per_second"] = MedianOf(rate_off);
  state.counters["on_attention_virtual_us_per_token"] = MedianOf(att_on);
  state.counters["off_attention_virtual_us_per_token"] = MedianOf(att_off);
}

// GPT-2 decode with the race detector on and off, alternating: 1 thread, 64 greedy tokens after a
// 4-token prompt (tokens one by one, so every step is a task-sink run with its copies), the same
// model and options. Every kernel's accesses are checked against the model's shadow memory.
void BM_Gpt2RaceDetect(benchmark::State& state) {
  const ModelSpec* model = ModelFor(state);
  if (model == nullptr) return;
  std::vector<double> rate_on, rate_off;
  double races = 0, checked = 0;
  for (auto _ : state) {
    for (int round = 0; round < 4; ++round) {
      for (bool on : round % 2 == 0 ? std::vector{false, true} : std::vector{true, false}) {
        npu_sim::RuntimeOptions ro{.chips = {"910B"}, .workers = 1, .race_detect = on};
        Status s = scheduler::ModelManager::RunInitialized(ro, [&]() -> Status {
          gpt2::EngineOptions eo{.prefill = gpt2::PrefillMode::kTokens};
          NPUFLOW_ASSIGN_OR_RETURN(auto engine, gpt2::Gpt2Engine::Create(model->path, eo));
          NPUFLOW_RETURN_IF_ERROR(engine->WaitForWeights());
          const int first = FirstToken(engine->file());
          const std::vector<int> prompt = {first, first / 2, first / 3, first / 4};
          NPUFLOW_ASSIGN_OR_RETURN(gpt2::Generation g, engine->Generate(0, prompt, kTilingTokens,
                                                                          gpt2::SamplingOptions{.greedy = true}));
          if (g.ids.size() > 1 && g.decode_wall_ms > 0)
            (on ? rate_on : rate_off).push_back(static_cast<double>(g.ids.size() - 1) / g.decode_wall_ms * 1e3);
          if (const npu_sim::RaceDetector* d = scheduler::ModelManager::Get()->runtime().race_detector()) {
            races += static_cast<double>(d->race_count());
            checked += static_cast<double>(d->accesses_checked());
          }
          return Status::Ok();
        });
        if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
      }
    }
  }
  state.counters["on_tokens_per_second"] = MedianOf(rate_on);
  state.counters["off_tokens_per_second"] = MedianOf(rate_off);
  state.counters["races"] = races;
  state.counters["accesses_checked"] = checked;
}

// The f16 model where there is one (the default pair), else the model given.
int TilingModelIndex() {
  const Models& models = GetModels();
  for (std::size_t i = 0; i < models.list.size(); ++i)
    if (models.list[i].label == "f16") return static_cast<int>(i);
  return 0;
}

// GPT-2 as a pipeline: kPipelineSequences greedy sequences through K stages on K devices.
// Aggregate generated tokens per second, virtual (the devices' clocks: from the first submission
// to the last sequence's end) and wall; the pipeline's bubble fraction.
constexpr int kPipelineSequences = 8;

void BM_Gpt2Pipeline(benchmark::State& state) {
  const ModelSpec* model = ModelFor(state);
  if (model == nullptr) return;
  const int stages = static_cast<int>(state.range(1));
  constexpr int kTokens = 24;
  double virtual_tps = 0, wall_tps = 0, bubble = 0;
  for (auto _ : state) {
    Status s = scheduler::ModelManager::RunInitialized(
        {.chips = std::vector<std::string>(static_cast<std::size_t>(stages), "910B"), .workers = 2}, [&]() -> Status {
          NPUFLOW_ASSIGN_OR_RETURN(gpt2::Gpt2File file, gpt2::ReadGpt2File(model->path));
          const int first = FirstToken(file);
          NPUFLOW_ASSIGN_OR_RETURN(auto engine,
                                   gpt2::Gpt2PipelineEngine::Create(
                                       std::move(file), {.stages = stages, .devices = stages, .sequences = kPipelineSequences}));
          std::vector<std::vector<int>> prompts;
          for (int i = 0; i < kPipelineSequences; ++i) prompts.push_back({first - i});
          npu_sim::Runtime& rt = scheduler::ModelManager::Get()->runtime();
          const npu_sim::VTime v0 = rt.HostClock();
          const auto t0 = Clock::now();
          NPUFLOW_ASSIGN_OR_RETURN(auto gens, engine->Generate(prompts, kTokens, {gpt2::SamplingOptions{.greedy = true}}));
          const double wall = Seconds(t0, Clock::now());
          double tokens = 0;
          std::int64_t v_end = 0;
          for (const gpt2::Generation& g : gens) {
            tokens += static_cast<double>(g.ids.size());
            v_end = std::max(v_end, g.virtual_finished);
          }
          virtual_tps = v_end > v0 ? tokens / (static_cast<double>(v_end - v0) / 1e9) : 0;
          wall_tps = wall > 0 ? tokens / wall : 0;
          bubble = engine->pipeline().stats().bubble_fraction();
          return Status::Ok();
        });
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
  }
  state.counters["virtual_tokens_per_second"] = virtual_tps;
  state.counters["wall_tokens_per_second"] = wall_tps;
  state.counters["bubble_fraction"] = bubble;
}

}  // namespace

void RegisterGpt2PipelineBenchmarks() {
  for (int stages : {1, 2, 4})
    benchmark::RegisterBenchmark(fmt::format("BM_Gpt2Pipeline/{}", stages).c_str(), BM_Gpt2Pipeline)
        ->Args({TilingModelIndex(), stages})->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
}

std::vector<Figure> Gpt2PipelineFigures(const Results& r) {
  std::vector<Figure> figures;
  const double one_v = Counter(r, "BM_Gpt2Pipeline/1", "virtual_tokens_per_second");
  const double one_w = Counter(r, "BM_Gpt2Pipeline/1", "wall_tokens_per_second");
  for (int k : {2, 4}) {
    const std::string b = fmt::format("BM_Gpt2Pipeline/{}", k);
    figures.push_back({fmt::format("gpt2_pipeline_{}stages_virtual_tokens_per_second", k),
                       Counter(r, b, "virtual_tokens_per_second"), "tok/s", one_v,
                       fmt::format("1 stage on 1 device, the same {} greedy sequences of GPT-2 117M f16, same run",
                                   kPipelineSequences),
                       k == 2 ? "ratio >= 1.8" : "ratio >= 3.2"});
    figures.push_back({fmt::format("gpt2_pipeline_{}stages_wall_tokens_per_second", k),
                       Counter(r, b, "wall_tokens_per_second"), "tok/s", one_w,
                       "1 stage on 1 device, same run (wall: every device shares this machine's 2 cores)", ""});
  }
  for (int k : {1, 2, 4})
    figures.push_back({fmt::format("gpt2_pipeline_{}stages_bubble_fraction", k),
                       Counter(r, fmt::format("BM_Gpt2Pipeline/{}", k), "bubble_fraction"), "", 0,
                       "share of stage time idle between the first submission and the last step (virtual)", ""});
  return figures;
}

void RegisterGpt2RaceBenchmarks() {
  benchmark::RegisterBenchmark("BM_Gpt2RaceDetect", BM_Gpt2RaceDetect)
      ->Arg(TilingModelIndex())->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
}

std::vector<Figure> Gpt2RaceFigures(const Results& r) {
  const double on = Counter(r, "BM_Gpt2RaceDetect", "on_tokens_per_second");
  const double off = Counter(r, "BM_Gpt2RaceDetect", "off_tokens_per_second");
  return {
      {"gpt2_decode_race_detect_tokens_per_second", on, "tok/s", off,
       "the same decode with the race detector off, 1 thread, same run (alternating); the goal is at most 2x slower", "ratio >= 0.5"},
      {"gpt2_decode_race_detect_races", Counter(r, "BM_Gpt2RaceDetect", "races"), "races", 0,
       "none expected (accesses checked: " + fmt::format("{:.0f}", Counter(r, "BM_Gpt2RaceDetect", "accesses_checked")) +
           ")", ""},
  };
}

void RegisterGpt2TilingBenchmarks() {
  benchmark::RegisterBenchmark("BM_Gpt2TilingSink", BM_Gpt2TilingSink)
      ->Arg(TilingModelIndex())->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
}

std::vector<Figure> Gpt2TilingFigures(const Results& r) {
  return {
      {"gpt2_tiling_sink_decode_tokens_per_second", Counter(r, "BM_Gpt2TilingSink", "on_tokens_per_second"), "tok/s",
       Counter(r, "BM_Gpt2TilingSink", "off_tokens_per_second"),
       "the same decode without the option (Attention tiled once for n_ctx), 1 thread, same run", ""},
      {"gpt2_tiling_sink_attention_virtual_us_per_token",
       Counter(r, "BM_Gpt2TilingSink", "on_attention_virtual_us_per_token"), "us",
       Counter(r, "BM_Gpt2TilingSink", "off_attention_virtual_us_per_token"),
       "the same decode without the option, same run (AICore blocks of the 12 layers' Attention, plus their AICPU "
       "tiling when on; device trace)", ""},
  };
}

// ---- bench gpt2 --small: decode at 1 thread on small shapes, and what a step costs beyond its kernels
//
// Shapes (f32 unless said; n_ctx 1024, vocab 50257, written into the cache on first use):
// 2 layers x n_embd 64 (13 MB), 4 x 256 (65 MB), and the 117M shape 12 x 768 in f16 (the default
// bench model). Each round generates 64 greedy tokens from "The" at 1 device worker thread and
// records, over the decode steps after the first token, the tokens/s (sampling included, as the
// reference engine's figure includes its own) and per step the wall time of the step (NnExecute:
// submit to logits on the host) and the device's kernel wall time meanwhile (npu_sim's
// DeviceStats::kernel_ns). The reference engine (ggml's GPT-2 example, built outside the project;
// NPUFLOW_GPT2_REFERENCE names its binary) runs the same model, prompt and token count at 1 thread
// in the rounds between ours, alternated, as a fresh process; without it the figures are
// the baseline, given.
struct SmallShape {
  const char* name;  // figure infix
  int layers, embd, heads;
  bool f16;
  double given_reference_tps;  // issue 21's figure for the reference engine (its best), 0: none
};
constexpr SmallShape kSmallShapes[] = {
    {"2x64", 2, 64, 2, false, 3333},
    {"4x256", 4, 256, 4, false, 540},
    {"12x768_f16", 12, 768, 12, true, 0},
};

StatusOr<std::string> SmallModel(const SmallShape& shape) {
  const std::string path = (UserCacheDirectory() / fmt::format("bench-gpt2-{}.bin", shape.layers == 12 && shape.embd == 768
                                                                                       ? std::string("117m-f16")
                                                                                       : std::string(shape.name) + "-f32"))
                               .string();
  static std::set<std::string> ready;
  if (ready.contains(path)) return path;
  if (!gpt2::ReadGpt2File(path).ok()) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) return Status::Failed("cannot create the cache directory for '{}': {}", path, ec.message());
    NPUFLOW_RETURN_IF_ERROR(synthetic::WriteGpt2File(
        path, {.layers = shape.layers, .embd = shape.embd, .heads = shape.heads, .ctx = 1024, .vocab = 50257,
               .f16 = shape.f16, .seed = 117}));
  }
  ready.insert(path);
  return path;
}

// The reference engine's binary (NPUFLOW_GPT2_REFERENCE), or "" when not set.
std::string ReferenceEngine() {
  const char* p = std::getenv("NPUFLOW_GPT2_REFERENCE");
  return p != nullptr ? std::string(p) : std::string();
}

// The reference engine's decode tokens/s on `path`: 64 greedy tokens from "The" at 1 thread, from
// its own "predict time = T ms / P ms per token" line (its per-token figure over every evaluation).
StatusOr<double> ReferenceTokensPerSecond(const std::string& binary, const std::string& path) {
  const std::string cmd = fmt::format("'{}' -m '{}' -p 'The' -n 64 -t 1 --top_k 1 -s 1 2>&1", binary, path);
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return Status::Failed("cannot start the reference engine: {}", cmd);
  std::string output;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  const int rc = ::pclose(pipe);
  const std::size_t at = output.find("predict time");
  const std::size_t slash = at == std::string::npos ? at : output.find('/', at);
  const double ms = slash == std::string::npos ? -1 : std::strtod(output.c_str() + slash + 1, nullptr);
  if (rc != 0 || ms <= 0)
    return Status::Failed("the reference engine ({}) printed no per-token time (exit {}): {}", cmd, rc,
                          output.substr(0, 2000));
  return 1e3 / ms;
}

void BM_Gpt2Small(benchmark::State& state) {
  const SmallShape& shape = kSmallShapes[state.range(0)];
  auto path = SmallModel(shape);
  if (!path.ok()) return state.SkipWithError(std::string(path.status().message()).c_str());
  const std::string reference = ReferenceEngine();
  constexpr int kRounds = 3;
  std::vector<double> rates, ref_rates, step_us, kernel_us, copy_us, overhead_us, no_spin_overhead_us;
  std::vector<double> each_step_overhead_us;  // every measured step of every round
  for (auto _ : state) {
    Status s = WithRuntime(1, [&]() -> Status {
      NPUFLOW_ASSIGN_OR_RETURN(auto engine, gpt2::Gpt2Engine::Create(*path, {}));
      NPUFLOW_RETURN_IF_ERROR(engine->WaitForWeights());
      const std::vector<int> prompt = {FirstToken(engine->file())};
      const gpt2::SamplingOptions greedy{.greedy = true};
      NPUFLOW_RETURN_IF_ERROR(engine->Generate(0, prompt, 16, greedy).status());  // warm-up: KV pages, caches
      for (int round = 0; round < kRounds; ++round) {
        // The same generation with the host's adaptive spin off (a plain sleeping wait), then on.
        actors::SetAdaptiveWaitEnabled(false);
        auto plain = engine->Generate(0, prompt, 64, greedy);
        actors::SetAdaptiveWaitEnabled(true);
        NPUFLOW_RETURN_IF_ERROR(plain.status());
        if (plain->decode_steps > 0)
          no_spin_overhead_us.push_back((plain->decode_step_wall_ms - plain->decode_kernel_wall_ms) * 1e3 /
                                        plain->decode_steps);
        NPUFLOW_ASSIGN_OR_RETURN(gpt2::Generation g, engine->Generate(0, prompt, 64, greedy));
        if (g.ids.size() < 2 || g.decode_steps == 0) return Status::Failed("the generation made no decode step");
        rates.push_back(static_cast<double>(g.ids.size() - 1) / g.decode_wall_ms * 1e3);
        step_us.push_back(g.decode_step_wall_ms * 1e3 / g.decode_steps);
        kernel_us.push_back(g.decode_kernel_wall_ms * 1e3 / g.decode_steps);
        copy_us.push_back(g.decode_copy_wall_ms * 1e3 / g.decode_steps);
        overhead_us.push_back((g.decode_step_wall_ms - g.decode_kernel_wall_ms) * 1e3 / g.decode_steps);
        each_step_overhead_us.insert(each_step_overhead_us.end(), g.decode_step_overhead_us.begin(),
                                     g.decode_step_overhead_us.end());
        if (!reference.empty()) {
          NPUFLOW_ASSIGN_OR_RETURN(double ref, ReferenceTokensPerSecond(reference, *path));
          ref_rates.push_back(ref);
        }
      }
      return Status::Ok();
    });
    if (!s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
  }
  state.counters["tokens_per_second"] = MedianOf(rates);
  state.counters["reference_tokens_per_second"] = ref_rates.empty() ? 0 : MedianOf(ref_rates);
  state.counters["step_us"] = MedianOf(step_us);
  state.counters["kernel_us"] = MedianOf(kernel_us);
  state.counters["copy_us"] = MedianOf(copy_us);
  // What one token would take if a step cost its kernels alone (sampling and the rest of the host's
  // loop as measured): the ceiling that cutting the overhead could reach, per round.
  std::vector<double> ceiling;
  for (std::size_t i = 0; i < rates.size(); ++i)
    if (const double us = 1e6 / rates[i] - overhead_us[i]; us > 0) ceiling.push_back(1e6 / us);
  state.counters["no_overhead_tokens_per_second"] = MedianOf(ceiling);
  state.counters["overhead_us"] = MedianOf(overhead_us);
  state.counters["step_overhead_median_us"] = MedianOf(each_step_overhead_us);
  state.counters["no_spin_overhead_us"] = MedianOf(no_spin_overhead_us);
}

void RegisterGpt2SmallBenchmarks() {
  for (int i = 0; i < static_cast<int>(std::size(kSmallShapes)); ++i)
    benchmark::RegisterBenchmark(fmt::format("BM_Gpt2Small/{}", kSmallShapes[i].name).c_str(), BM_Gpt2Small)
        ->Arg(i)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
}

std::vector<Figure> Gpt2SmallFigures(const Results& r) {
  std::vector<Figure> figures;
  for (const SmallShape& shape : kSmallShapes) {
    const std::string b = fmt::format("BM_Gpt2Small/{}", shape.name);
    const double tps = Counter(r, b, "tokens_per_second");
    const double ref = Counter(r, b, "reference_tokens_per_second");
    if (ref > 0) {
      figures.push_back({fmt::format("small_{}_decode_1t", shape.name), tps, "tok/s", ref,
                         "the reference engine (ggml's GPT-2 example, NPUFLOW_GPT2_REFERENCE) on the same file, 64 "
                         "greedy tokens at 1 thread, rounds alternated in the same run",
                         shape.given_reference_tps > 0 ? "ratio >= 1.2" : "ratio >= 1"});
    } else if (shape.given_reference_tps > 0) {
      figures.push_back({fmt::format("small_{}_decode_1t", shape.name), tps, "tok/s", shape.given_reference_tps,
                         "issue 21: the reference engine's best on this machine, alternated with npuflow (set "
                         "NPUFLOW_GPT2_REFERENCE to measure it in the same run)",
                         "ratio >= 1.2", true});
    }
    figures.push_back({fmt::format("small_{}_step_overhead", shape.name), Counter(r, b, "overhead_us"), "us",
                       Counter(r, b, "kernel_us"),
                       fmt::format("the step's kernels' wall time (npu_sim kernel_ns), same steps; a step: {:.1f} us "
                                   "wall, NnExecute submit to logits on the host, 1 worker thread",
                                   Counter(r, b, "step_us")),
                       "value < 50 us"});
    figures.push_back({fmt::format("small_{}_step_overhead_median", shape.name),
                       Counter(r, b, "step_overhead_median_us"), "us", Counter(r, b, "overhead_us"),
                       "the mean overhead per step (above), same steps: the median step's own overhead (the mean "
                       "also carries the rare steps in which the host thread is not scheduled for a tick)",
                       ""});
    figures.push_back({fmt::format("small_{}_step_copies", shape.name), Counter(r, b, "copy_us"), "us",
                       Counter(r, b, "overhead_us"),
                       "the step's overhead (above), same steps: the part of it spent inside copies (the inputs' "
                       "one H2D; the greedy step's next token read back by the waiting host thread, "
                       "Runtime::ReadInPlace: the logits stay on the device; npu_sim dma_copy_ns)",
                       ""});
    if (ref > 0) {
      figures.push_back({fmt::format("small_{}_decode_1t_without_overhead", shape.name),
                         Counter(r, b, "no_overhead_tokens_per_second"), "tok/s", ref,
                         "the reference engine, same run: npuflow's decode as it would be if every step cost its "
                         "kernels alone (each round's tok/s with its overhead per step taken out): how far cutting "
                         "the overhead could take the ratio",
                         ""});
    }
    figures.push_back({fmt::format("small_{}_step_overhead_spin", shape.name), Counter(r, b, "overhead_us"), "us",
                       Counter(r, b, "no_spin_overhead_us"),
                       "the same steps with the host's wait a plain sleep (actors::AdaptiveWait off), rounds "
                       "alternated, same engine",
                       "ratio < 1"});
  }
  return figures;
}

void RegisterGpt2Benchmarks() {
  if (CurrentOptions().small) return RegisterGpt2SmallBenchmarks();
  const Models& models = GetModels();
  const int n = models.error.empty() ? static_cast<int>(models.list.size()) : 1;
  for (int m = 0; m < n; ++m) {
    for (int threads : {1, 2})
      benchmark::RegisterBenchmark(fmt::format("BM_Gpt2Generate/{}/{}", m, threads).c_str(), BM_Gpt2Generate)
          ->Args({m, threads})->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(fmt::format("BM_Gpt2Streams/{}", m).c_str(), BM_Gpt2Streams)
        ->Arg(m)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(fmt::format("BM_Gpt2Load/{}", m).c_str(), BM_Gpt2Load)
        ->Arg(m)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(fmt::format("BM_Gpt2PeakRss/{}", m).c_str(), BM_Gpt2PeakRss)
        ->Arg(m)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(fmt::format("BM_Gpt2Prefill/{}", m).c_str(), BM_Gpt2Prefill)
        ->Arg(m)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
}

std::vector<Figure> Gpt2Figures(const Results& r) {
  if (CurrentOptions().small) return Gpt2SmallFigures(r);
  constexpr const char* kReferenceEngine =
      "reference engine, issue 7's figures, measured 2026-11 on this machine class";
  std::vector<Figure> figures;
  const Models& models = GetModels();
  for (std::size_t m = 0; m < models.list.size(); ++m) {
    const std::string& ft = models.list[m].label;
    for (int threads : {1, 2}) {
      const std::string b = fmt::format("BM_Gpt2Generate/{}/{}", m, threads);
      const double tps = Counter(r, b, "tokens_per_second");
      figures.push_back({fmt::format("gen_{}_{}t", ft, threads), tps, "tok/s", Counter(r, b, "roofline_tokens_per_second"),
                         fmt::format("memory-bandwidth roofline: weights per token / {:.1f} GB/s, the higher of plain "
                                     "reads with {} thread(s) just before and after the run",
                                     Counter(r, b, "read_bytes_per_second") / 1e9, threads),
                         "ratio -> 1"});
      const double ggml = ft == "f16" ? (threads == 2 ? 150 : 128) : (threads == 2 ? 97 : 68);
      figures.push_back({fmt::format("gen_{}_{}t_vs_ggml", ft, threads), tps, "tok/s", ggml, kReferenceEngine,
                         "ratio >= 0.8", true});
    }
    const std::string st = fmt::format("BM_Gpt2Streams/{}", m);
    figures.push_back({fmt::format("gen_{}_4streams_fibers", ft), Counter(r, st, "fibers_tokens_per_second"), "tok/s",
                       Counter(r, st, "threads_tokens_per_second"),
                       "the same 4 generations with one OS thread each (same engine, rounds alternated)", "ratio >= 0.95"});
    const std::string l = fmt::format("BM_Gpt2Load/{}", m);
    const double cat_gbs = Counter(r, l, "cat_bytes_per_second") / 1e9;
    figures.push_back({fmt::format("load_{}", ft), Counter(r, l, "fresh_bytes_per_second") / 1e9, "GB/s", cat_gbs,
                       "cat FILE > /dev/null (warm), same run; the load: a fresh npuflow gpt2 process, header read "
                       "to every weight on the device, median of 3 back to back",
                       "value >= 1.5"});
    figures.push_back({fmt::format("load_{}_after_idle", ft), Counter(r, l, "idle_bytes_per_second") / 1e9, "GB/s",
                       Counter(r, l, "fresh_memory_idle_bytes_per_second") / 1e9,
                       "a fresh process writing as many bytes of fresh memory (THP), after the same idle time, same "
                       "run; the load: a fresh npuflow gpt2 process after 6 s idle (the VM has taken freed memory back)",
                       "value >= 1.5"});
    figures.push_back({fmt::format("load_{}_warm_process", ft), Counter(r, l, "load_bytes_per_second") / 1e9, "GB/s",
                       cat_gbs, "cat FILE > /dev/null (warm), same run; the load: in-process, after a warm-up engine",
                       "-"});
    if (ft == "f32") {  // the reference figure is for the 500 MB f32 file
      constexpr const char* kLoadReference = "issue 16, reference engine on this machine 2026-11-23 (1.7-1.9 s)";
      figures.push_back({"load_f32_seconds", Counter(r, l, "fresh_seconds"), "s", 1.7, kLoadReference, "ratio <= 0.2",
                         true});
      figures.push_back({"load_f32_seconds_after_idle", Counter(r, l, "idle_seconds"), "s", 1.7, kLoadReference,
                         "ratio <= 0.2", true});
    }
    figures.push_back({fmt::format("ttft_{}_streaming", ft), Counter(r, l, "ttft_stream_seconds") * 1e3, "ms",
                       Counter(r, l, "ttft_wait_seconds") * 1e3, "loading every weight first, same run", "ratio < 1"});
    const std::string p = fmt::format("BM_Gpt2PeakRss/{}", m);
    figures.push_back({fmt::format("rss_{}", ft), Counter(r, p, "peak_rss_bytes") / 1e6, "MB",
                       Counter(r, p, "needed_bytes") / 1e6,
                       "weights + the KV-cache pages 16 positions use + activations", "ratio <= 1.04"});
    if (ft == "f32")  // decimal MB like ours is assumed for the given figure (docs/benchmarks.md)
      figures.push_back({"rss_f32_vs_reference", Counter(r, p, "peak_rss_bytes") / 1e6, "MB", 518,
                         "issue 16, reference engine's peak RSS on the same file, 2026-11-23", "ratio <= 1.0", true});
    figures.push_back({fmt::format("rss_{}_prompt128_batch", ft), Counter(r, p, "prompt128_batch_peak_rss_bytes") / 1e6,
                       "MB", Counter(r, p, "prompt128_tokens_peak_rss_bytes") / 1e6,
                       "the same 128-token prompt and 16 tokens with --prefill tokens (no prefill model), fresh "
                       "processes, same run: what the prefill's execute graphs and activations cost",
                       "reported"});
    const std::string pf = fmt::format("BM_Gpt2Prefill/{}", m);
    figures.push_back({fmt::format("ttft_{}_prefill_batch", ft), Counter(r, pf, "prefill_batch_seconds") * 1e3, "ms",
                       Counter(r, pf, "prefill_tokens_seconds") * 1e3,
                       "the same 128-token prompt token by token through the decode step, same engine, same run",
                       "ratio < 1"});
    if (ft == "f32")
      figures.push_back({"ttft_f32_prefill_vs_reference", Counter(r, pf, "prefill_batch_seconds"), "s", 0.55,
                         "issue 17, reference engine's first evaluation of a 128-token batch, 117M f32, 2 threads",
                         "ratio <= 1", true});
  }
  return figures;
}

}  // namespace npuflow::bench
