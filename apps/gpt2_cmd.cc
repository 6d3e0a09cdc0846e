#include "apps/gpt2_cmd.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "actors/fibers.h"
#include "base/files.h"
#include "weights/weight_loader.h"
#include "lowering/tiling_sink.h"
#include "models/gpt2/engine.h"
#include "models/gpt2/pipeline_engine.h"
#include "models/gpt2/sampling.h"
#include "models/gpt2/tokenizer.h"
#include "models/gpt2/ggml_file.h"
#include "synthetic/gpt2_file.h"
#include "scheduler/model_manager.h"

namespace npuflow::apps {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using gpt2::Generation;

StatusOr<std::vector<int>> ParseIds(const std::string& text, int n_vocab) {
  std::vector<int> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    int id = 0;
    std::size_t used = 0;
    try {
      id = std::stoi(word, &used);
    } catch (...) {
      used = 0;
    }
    if (used != word.size()) return Status::ParamInvalid("--prompt-ids: '{}' is not a token id", word);
    if (id < 0 || id >= n_vocab)
      return Status::ParamInvalid("--prompt-ids: token id {} is outside the vocabulary (0..{})", id, n_vocab - 1);
    ids.push_back(id);
  }
  if (ids.empty()) return Status::ParamInvalid("--prompt-ids: no token ids in '{}'", text);
  return ids;
}

std::string Printable(std::string_view bytes) {
  // The text as it is, except control bytes other than newline and tab, shown as \xNN.
  std::string s;
  for (unsigned char c : bytes) {
    if (c < 0x20 && c != '\n' && c != '\t')
      s += fmt::format("\\x{:02x}", c);
    else
      s += static_cast<char>(c);
  }
  return s;
}

std::string JoinIds(const std::vector<int>& ids) { return fmt::format("{}", fmt::join(ids, " ")); }

// The process's peak resident memory (VmHWM), MB; 0 when unknown.
double PeakRssMb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0 * 1.024 * 1.024;
  return 0;
}

// `-v`: where the load time and the memory go. Each stage records the process's memory
// (/proc/self/status, decimal MB) and the time since the run started; the load's page-fault
// counters (/proc/vmstat) are taken at the start and once the weights are on the device. Stages
// may be recorded from any thread.
class StageReport {
 public:
  explicit StageReport(Clock::time_point t0) : t0_(t0), vm_start_(VmCounters()) {}

  void Stage(const std::string& name) {
    std::map<std::string, double> kb = ProcStatus("VmRSS:", "RssAnon:", "RssFile:", "VmHWM:");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
    auto mb = [&](const char* k) { return kb[k] * 1.024 / 1000; };
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(fmt::format("stage {:<22} {:8.1f} ms  VmRSS {:6.1f} MB (anon {:6.1f}, file {:5.1f})  VmHWM {:6.1f} MB",
                                 name, ms, mb("VmRSS:"), mb("RssAnon:"), mb("RssFile:"), mb("VmHWM:")));
  }
  // Called once the weights are on the device: the page-fault counters over the load.
  void LoadEnded() {
    std::map<std::string, long long> end = VmCounters();
    std::lock_guard<std::mutex> lock(mu_);
    std::string line = "page faults over the load (/proc/vmstat, whole machine):";
    for (const auto& [k, v] : end) line += fmt::format(" {} +{}", k, v - vm_start_[k]);
    lines_.push_back(line);
  }
  void Add(std::string line) {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.push_back(std::move(line));
  }
  void Print(std::ostream& out) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& l : lines_) out << l << "\n";
  }

 private:
  template <typename... Keys>
  static std::map<std::string, double> ProcStatus(Keys... keys) {
    std::map<std::string, double> kb;
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
      for (const char* k : {keys...})
        if (line.rfind(k, 0) == 0) kb[k] = std::strtod(line.c_str() + std::strlen(k), nullptr);
    return kb;
  }
  static std::map<std::string, long long> VmCounters() {
    std::map<std::string, long long> v;
    std::ifstream in("/proc/vmstat");
    std::string key;
    long long value = 0;
    while (in >> key >> value)
      if (key == "thp_fault_alloc" || key == "thp_fault_fallback" || key == "compact_stall" || key == "pgfault")
        v[key] = value;
    return v;
  }

  Clock::time_point t0_;
  std::map<std::string, long long> vm_start_;
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// The loader's and the DMA channels' share of the load, for the stage report.
std::string LoadSplit(scheduler::ModelManager& mm) {
  const weights::WeightLoaderStats ls = mm.weight_loader().stats();
  std::uint64_t dma_ns = 0, dma_bytes = 0;
  for (int d = 0; d < mm.runtime().device_count(); ++d) {
    if (auto st = mm.runtime().Stats(d); st.ok()) {
      dma_ns += st->dma_copy_ns;
      dma_bytes += st->dma_copy_bytes;
    }
  }
  const int io = mm.runtime().system().io_threads();
  return fmt::format("load split: loader pread {:.1f} ms, SHA-256 {:.1f} ms, AES-GCM {:.1f} ms ({}); "
                     "DMA copies {:.1f} ms for {:.1f} MB (their memcpy, with the first touch of device pages); "
                     "peak staging {:.1f} MB",
                     ls.read_seconds * 1e3, ls.hash_seconds * 1e3, ls.decrypt_seconds * 1e3,
                     io == 0 ? std::string("inline in its handler") : fmt::format("on {} I/O thread{}", io, io == 1 ? "" : "s"),
                     dma_ns / 1e6,
                     static_cast<double>(dma_bytes) / 1e6, static_cast<double>(ls.peak_staging_bytes) / 1e6);
}

struct Gpt2Run {
  std::vector<std::string> labels;  // what each generation started from (the prompt)
  std::vector<std::vector<int>> prompts;
  int n_predict = 0;
  std::vector<gpt2::SamplingOptions> samplings;
  bool print_ids = false;
  std::string trace;
  gpt2::HostOptions host;
  gpt2::PrefillMode prefill = gpt2::PrefillMode::kBatch;
  std::string tiling_schedule_optimize;
  bool one_token_prompts = false;  // then no prefill model is built: each prompt is one decode step
};

struct LoadAndGenerations {
  Status load_status;
  double load_ms = -1;  // from the load's start to the weights on the device
  StatusOr<std::vector<Generation>> gens = Status::Failed("not run");
};

// Runs the generations while the weights stream in, and times the load meanwhile: as a fiber of
// the main thread when the generations are fibers, else on a thread of its own.
LoadAndGenerations RunGenerations(gpt2::Gpt2Engine& engine, const Gpt2Run& run, StageReport* stages) {
  LoadAndGenerations r;
  auto time_load = [&] {
    r.load_status = engine.WaitForWeights();
    r.load_ms = std::chrono::duration<double, std::milli>(Clock::now() - engine.load_started()).count();
    if (stages) {
      stages->Stage("weights on the device");
      stages->LoadEnded();
    }
  };
  auto generate = [&] { r.gens = engine.GenerateConcurrently(run.prompts, run.n_predict, run.samplings, {}, run.host); };
  if (run.host.mode == gpt2::HostOptions::Mode::kThreads) {
    std::thread load_timer(time_load);
    generate();
    load_timer.join();
    return r;
  }
  // Fiber 0 times the load (it waits, yielding); fiber 1 runs the generations' fibers.
  Status s = actors::RunFibers(2, {.threads = 1, .stack_bytes = run.host.fiber_stack_bytes}, [&](int i) {
    if (i == 0)
      time_load();
    else
      generate();
    return Status::Ok();
  });
  if (!s.ok()) r.gens = s;
  return r;
}

// Prints each generation (its prompt and text, and with --print-ids its ids), then `load_line`,
// then the time to first token (from `start`, the slowest stream; `ttft_note` says how the prompt
// went in) and the decode throughput over all streams: the tokens after each stream's first, over
// the window from the earliest first token to the latest end (wall, and virtual).
Status ReportGenerations(const std::vector<Generation>& gens, const Gpt2Run& run, const gpt2::Vocab& vocab,
                         Clock::time_point start, std::string_view ttft_note, const std::string& load_line,
                         std::ostream& out) {
  double tokens = 0;
  auto first = Generation::Clock::time_point::max(), last = Generation::Clock::time_point::min();
  std::int64_t v_first = std::numeric_limits<std::int64_t>::max(), v_last = 0;
  double ttft = 0;
  for (std::size_t i = 0; i < gens.size(); ++i) {
    const gpt2::Generation& g = gens[i];
    NPUFLOW_ASSIGN_OR_RETURN(std::string prompt_text, vocab.Detokenize(g.prompt));
    NPUFLOW_ASSIGN_OR_RETURN(std::string text, vocab.Detokenize(g.ids));
    out << fmt::format("--- stream {} ({} prompt tokens, {} generated)\n", i, g.prompt.size(), g.ids.size());
    out << Printable(prompt_text) << Printable(text) << "\n";
    if (run.print_ids) out << "ids: " << JoinIds(g.ids) << "\n";
    if (g.ids.empty()) continue;
    tokens += static_cast<double>(g.ids.size() - 1);
    first = std::min(first, g.first_token_at);
    last = std::max(last, g.finished);
    v_first = std::min(v_first, g.virtual_first_token_at);
    v_last = std::max(v_last, g.virtual_finished);
    ttft = std::max(ttft, std::chrono::duration<double, std::milli>(g.first_token_at - start).count());
  }
  out << "---\n" << load_line;
  if (tokens > 0 || ttft > 0) {
    const double wall_s = std::chrono::duration<double>(last - first).count();
    const double virtual_s = static_cast<double>(v_last - v_first) / 1e9;
    out << fmt::format("time to first token: {:.1f} ms after the load started (the slowest stream; {})\n", ttft,
                       ttft_note);
    out << fmt::format("generation: {:.1f} tokens/s wall, {:.1f} tokens/s virtual over {} stream{} ({:.1f} tokens/s "
                       "wall per stream)\n",
                       wall_s > 0 ? tokens / wall_s : 0.0, virtual_s > 0 ? tokens / virtual_s : 0.0, gens.size(),
                       gens.size() == 1 ? "" : "s",
                       wall_s > 0 ? tokens / static_cast<double>(gens.size()) / wall_s : 0.0);
    double step_ms = 0, kernel_ms = 0, copy_ms = 0;
    int steps = 0;
    std::vector<float> each_rest_us;
    for (const Generation& g : gens) {
      step_ms += g.decode_step_wall_ms;
      kernel_ms += g.decode_kernel_wall_ms;
      copy_ms += g.decode_copy_wall_ms;
      steps += g.decode_steps;
      each_rest_us.insert(each_rest_us.end(), g.decode_step_overhead_us.begin(), g.decode_step_overhead_us.end());
    }
    if (steps > 0) {
      // The median step's own rest: with one stream only (side by side, a step's kernels include
      // the other streams').
      std::string median_rest;
      if (gens.size() == 1 && !each_rest_us.empty()) {
        auto median = each_rest_us.begin() + static_cast<std::ptrdiff_t>(each_rest_us.size() / 2);
        std::nth_element(each_rest_us.begin(), median, each_rest_us.end());
        median_rest = fmt::format(", {:.1f} us in the median step", *median);
      }
      out << fmt::format("decode step: {:.1f} us wall, {:.1f} us of it in kernels, {:.1f} us the rest{} ({:.1f} us "
                         "of the rest in DMA copies; {}; the kernels and copies of every stream on the device)\n",
                         step_ms * 1e3 / steps, kernel_ms * 1e3 / steps, (step_ms - kernel_ms) * 1e3 / steps,
                         median_rest, copy_ms * 1e3 / steps,
                         gens.size() == 1 ? "one stream" : "streams side by side: the split is not per step");
    }
  }
  return Status::Ok();
}

// Everything between ModelManager::Initialize and Finalize.
// `file_read` came from gpt2::ReadGpt2File, which started at t0.
// `stages` (may be null) gets the stage report.
Status GenerateAndReport(gpt2::Gpt2File file_read, Clock::time_point t0, const Gpt2Run& run, const gpt2::Vocab& vocab,
                         std::ostream& out, StageReport* stages = nullptr) {
  scheduler::ModelManager& mm = *scheduler::ModelManager::Get();
  const std::string model_path = file_read.path;
  if (stages) stages->Stage("runtime up");
  NPUFLOW_ASSIGN_OR_RETURN(
      std::unique_ptr<gpt2::Gpt2Engine> engine,
      gpt2::Gpt2Engine::Create(std::move(file_read),
                               {.streams = static_cast<int>(run.prompts.size()),
                                .session_options = run.tiling_schedule_optimize.empty()
                                                       ? scheduler::Options{}
                                                       : scheduler::Options{{"ge.tiling_schedule_optimize",
                                                                             run.tiling_schedule_optimize}},
                                .prefill = run.prefill}));
  if (stages) stages->Stage("model loaded");
  const double create_ms = std::chrono::duration<double, std::milli>(engine->load_started() - t0).count();
  const gpt2::Gpt2File& file = engine->file();
  const gpt2::Gpt2HParams& hp = file.hparams;
  out << fmt::format("{}: GPT-2, {} layers, n_embd {}, {} heads, n_ctx {}, vocab {}, {}; {:.1f} MB of weights\n",
                     model_path, hp.n_layer, hp.n_embd, hp.n_head, hp.n_ctx, hp.n_vocab,
                     hp.weight_type() == graph::DataType::kFloat16 ? "f16" : "f32",
                     static_cast<double>(file.weight_bytes()) / 1e6);

  // The weights stream in while the generations start.
  LoadAndGenerations done = RunGenerations(*engine, run, stages);
  NPUFLOW_RETURN_IF_ERROR(done.load_status);
  StatusOr<std::vector<Generation>>& gens = done.gens;
  if (!gens.ok()) return gens.status();
  const double load_ms = done.load_ms;

  const double mb = static_cast<double>(file.weight_bytes()) / 1e6;
  NPUFLOW_RETURN_IF_ERROR(ReportGenerations(
      *gens, run, vocab, engine->load_started(),
      run.one_token_prompts ? "a one-token prompt: one decode step, while the weights stream in"
      : run.prefill == gpt2::PrefillMode::kBatch ? "the prompt as one RT2.0 graph, once the weights are on the device"
                                                 : "the prompt fed token by token while the weights stream in",
      fmt::format("load: read, build and compile {:.1f} ms; weights on the device {:.1f} ms after the load started "
                  "({:.2f} GB/s)\n",
                  create_ms, load_ms, load_ms > 0 ? mb / load_ms : 0.0),
      out));
  if (stages) {
    stages->Stage("end");
    stages->Add(LoadSplit(mm));
    stages->Print(out);
  }
  if (const double peak = PeakRssMb(); peak > 0) out << fmt::format("peak RSS: {:.1f} MB\n", peak);
  if (!run.trace.empty()) {
    NPUFLOW_RETURN_IF_ERROR(mm.runtime().WriteTrace(run.trace).WithContext("--trace"));
    out << "trace: " << run.trace << "\n";
  }
  return Status::Ok();
}

// --pipeline K: the decode step cut into K stages over D devices, the streams' sequences decoding
// through them at once (models/gpt2/pipeline_engine.h).
Status GeneratePipelineAndReport(gpt2::Gpt2File file_read, Clock::time_point t0, const Gpt2Run& run, int stages,
                                 int devices, const gpt2::Vocab& vocab, std::ostream& out) {
  scheduler::ModelManager& mm = *scheduler::ModelManager::Get();
  const std::string model_path = file_read.path;
  const auto load_started = Clock::now();
  NPUFLOW_ASSIGN_OR_RETURN(
      std::unique_ptr<gpt2::Gpt2PipelineEngine> engine,
      gpt2::Gpt2PipelineEngine::Create(std::move(file_read), {.stages = stages,
                                                               .devices = devices,
                                                               .sequences = static_cast<int>(run.prompts.size())}));
  const double create_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const gpt2::Gpt2HParams& hp = engine->file().hparams;
  out << fmt::format("{}: GPT-2, {} layers, n_embd {}, {} heads, n_ctx {}, vocab {}, {}; {:.1f} MB of weights\n",
                     model_path, hp.n_layer, hp.n_embd, hp.n_head, hp.n_ctx, hp.n_vocab,
                     hp.weight_type() == graph::DataType::kFloat16 ? "f16" : "f32",
                     static_cast<double>(engine->file().weight_bytes()) / 1e6);
  scheduler::PipelineExecutor& p = engine->pipeline();
  for (int s = 0; s < p.stages(); ++s) {
    const graph::CompiledModel& m = p.stage_model(s);
    std::size_t tasks = 0;
    for (const auto& st : m.streams) tasks += st.tasks.size();
    out << fmt::format("stage {}: device {}, {} tasks on {} stream{}, {} inputs, {} outputs\n", s, p.device_of(s), tasks,
                       m.streams.size(), m.streams.size() == 1 ? "" : "s", m.inputs.size(), m.outputs.size());
  }
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<Generation> gens, engine->Generate(run.prompts, run.n_predict, run.samplings));
  NPUFLOW_RETURN_IF_ERROR(ReportGenerations(
      gens, run, vocab, load_started,
      fmt::format("the prompt fed token by token through {} stage{}", stages, stages == 1 ? "" : "s"),
      fmt::format("load: read, build, partition, compile and load {} stage model{} on {} device{}: {:.1f} ms\n",
                  stages * static_cast<int>(run.prompts.size()), stages * run.prompts.size() == 1 ? "" : "s", devices,
                  devices == 1 ? "" : "s", create_ms),
      out));
  const scheduler::PipelineStats st = p.stats();
  out << fmt::format("pipeline: {} steps, bubble fraction {:.2f} (virtual), stages busy", st.steps, st.bubble_fraction());
  for (npu_sim::VTime b : st.stage_busy) out << fmt::format(" {:.2f} ms", static_cast<double>(b) / 1e6);
  out << "\n";
  if (const double peak = PeakRssMb(); peak > 0) out << fmt::format("peak RSS: {:.1f} MB\n", peak);
  if (!run.trace.empty()) {
    NPUFLOW_RETURN_IF_ERROR(mm.runtime().WriteTrace(run.trace).WithContext("--trace"));
    out << "trace: " << run.trace << "\n";
  }
  return Status::Ok();
}

Status WithRuntime(const std::string& chip, int threads, int io_threads, bool trace,
                   const std::function<Status()>& body, int devices = 1) {
  if (threads < 0 || threads > 256) return Status::ParamInvalid("--threads {}: expected 0..256 (0: one per core)", threads);
  if (io_threads < 0 || io_threads > 64)
    return Status::ParamInvalid("--io-threads {}: expected 0..64 (0: read in the loader's handler)", io_threads);
  return scheduler::ModelManager::RunInitialized(
      {.chips = std::vector<std::string>(static_cast<std::size_t>(devices), chip),
       .workers = threads,
       .trace = trace,
       .io_threads = io_threads},
      body, chip);
}

}  // namespace

Status RunGpt2(const Gpt2Args& args, std::ostream& out) {
  if (args.model.empty()) return Status::ParamInvalid("--model: the ggml GPT-2 model file is required");
  if (args.prompts.empty() == args.prompt_ids.empty())
    return Status::ParamInvalid("give one of --prompt TEXT or --prompt-ids \"464 2068 ...\"");
  if (args.n_predict < 0) return Status::ParamInvalid("-n {}: expected >= 0", args.n_predict);
  if (args.streams < 1 || args.streams > 64) return Status::ParamInvalid("--streams {}: expected 1..64", args.streams);
  if (args.host_threads < 1 || args.host_threads > 64)
    return Status::ParamInvalid("--host-threads {}: expected 1..64", args.host_threads);
  if (args.host_mode != "fibers" && args.host_mode != "threads")
    return Status::ParamInvalid("--host-mode '{}': expected fibers or threads", args.host_mode);
  gpt2::SamplingOptions base{.greedy = args.greedy,
                             .top_k = args.top_k,
                             .top_p = static_cast<float>(args.top_p),
                             .temp = static_cast<float>(args.temp),
                             .seed = args.seed};
  NPUFLOW_RETURN_IF_ERROR(base.Validate());
  const auto t0 = Clock::now();
  std::optional<StageReport> stages;
  if (args.verbose) {
    stages.emplace(t0);
    stages->Stage("start");
  }
  NPUFLOW_ASSIGN_OR_RETURN(gpt2::Gpt2File file, gpt2::ReadGpt2File(args.model));
  if (stages) stages->Stage("header read");
  gpt2::Vocab vocab(std::move(file.vocab));  // the engine needs only the weights' directory
  if (stages) stages->Stage("tokenizer built");

  Gpt2Run run;
  run.n_predict = args.n_predict;
  run.print_ids = args.print_ids;
  NPUFLOW_ASSIGN_OR_RETURN(run.prefill, gpt2::ParsePrefillMode(args.prefill));
  NPUFLOW_RETURN_IF_ERROR(
      lowering::CheckTilingScheduleOptimize(args.tiling_schedule_optimize, "--tiling_schedule_optimize"));
  // On by default: the decode step's Attention is tiled on the device where the chip supports task
  // update (910B); elsewhere (310P) its device gate fails and it is tiled once for n_ctx.
  run.tiling_schedule_optimize = args.tiling_schedule_optimize.empty() ? "1" : args.tiling_schedule_optimize;
  run.trace = args.trace;
  run.host.threads = args.host_threads;
  if (args.host_mode == "threads") run.host.mode = gpt2::HostOptions::Mode::kThreads;
  std::vector<std::vector<int>> given;
  if (!args.prompt_ids.empty()) {
    NPUFLOW_ASSIGN_OR_RETURN(std::vector<int> ids, ParseIds(args.prompt_ids, file.hparams.n_vocab));
    given.push_back(std::move(ids));
  } else {
    for (const std::string& p : args.prompts) {
      gpt2::Tokenization t = vocab.Tokenize(p);
      if (!t.unknown_bytes.empty())
        out << fmt::format("note: {} byte{} of the prompt match no token and were skipped (first: 0x{:02x} at offset {})\n",
                           t.unknown_bytes.size(), t.unknown_bytes.size() == 1 ? "" : "s", t.unknown_bytes[0].byte,
                           t.unknown_bytes[0].offset);
      if (t.ids.empty()) return Status::ParamInvalid("--prompt '{}': no tokens (the prompt is empty)", p);
      given.push_back(std::vector<int>(t.ids.begin(), t.ids.end()));
    }
  }
  for (int i = 0; i < args.streams; ++i) {
    run.prompts.push_back(given[static_cast<std::size_t>(i) % given.size()]);
    gpt2::SamplingOptions s = base;
    s.seed = args.seed + static_cast<std::uint64_t>(i);
    run.samplings.push_back(s);
  }
  run.one_token_prompts = std::all_of(run.prompts.begin(), run.prompts.end(), [](const auto& p) { return p.size() == 1; });
  // Nothing to batch: the engine then loads no prefill model (its memory and compile time saved).
  if (run.one_token_prompts) run.prefill = gpt2::PrefillMode::kTokens;
  if (args.pipeline != 0) {
    if (args.pipeline < 1 || args.pipeline > file.hparams.n_layer + 2)
      return Status::ParamInvalid("--pipeline {}: expected 1..{} stages for a model of {} layers (0: off)", args.pipeline,
                                  file.hparams.n_layer + 2, file.hparams.n_layer);
    if (args.devices < 1 || args.devices > args.pipeline)
      return Status::ParamInvalid("--devices {}: expected 1..{} (at most one device per stage)", args.devices,
                                  args.pipeline);
    if (args.verbose) out << "note: -v's stage report covers the single-device engine only\n";
    return WithRuntime(
        args.device_chip, args.threads, args.io_threads, !args.trace.empty(),
        [&] { return GeneratePipelineAndReport(std::move(file), t0, run, args.pipeline, args.devices, vocab, out); },
        args.devices);
  }
  if (args.devices != 1) return Status::ParamInvalid("--devices {}: only with --pipeline", args.devices);
  return WithRuntime(args.device_chip, args.threads, args.io_threads, !args.trace.empty(),
                     [&] { return GenerateAndReport(std::move(file), t0, run, vocab, out, stages ? &*stages : nullptr); });
}

Status RunMakeGpt2(const MakeGpt2Args& args, std::ostream& out) {
  if (args.output.empty()) return Status::ParamInvalid("-o: the output file is required");
  if (args.ftype != "f32" && args.ftype != "f16")
    return Status::ParamInvalid("--ftype '{}': expected f32 or f16", args.ftype);
  synthetic::MakeGpt2Options o{.layers = args.layers,
                           .embd = args.embd,
                           .heads = args.heads,
                           .ctx = args.ctx,
                           .vocab = args.vocab,
                           .f16 = args.ftype == "f16",
                           .seed = args.seed,
                           .lm_head = args.lm_head,
                           .name_order = args.name_order};
  if (!args.vocab_json.empty()) {
    std::ifstream in(args.vocab_json, std::ios::binary);
    if (!in) return Status::NotFound("--vocab-json: cannot read '{}'", args.vocab_json);
    std::stringstream text;
    text << in.rdbuf();
    NPUFLOW_ASSIGN_OR_RETURN(o.tokens, gpt2::ParseEncoderJson(text.str(), args.vocab_json));
    if (static_cast<int>(o.tokens.size()) != args.vocab)
      return Status::ParamInvalid("--vocab-json '{}' has {} tokens but --vocab is {}", args.vocab_json, o.tokens.size(),
                                  args.vocab);
  }
  const auto t0 = Clock::now();
  NPUFLOW_RETURN_IF_ERROR(synthetic::WriteGpt2File(args.output, o));
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::error_code ec;
  const auto bytes = fs::file_size(args.output, ec);
  out << fmt::format("{}: GPT-2 ggml file, {} layers, n_embd {}, {} heads, n_ctx {}, vocab {} ({}), {}, seed {}; {} "
                     "bytes in {:.0f} ms\n",
                     args.output, args.layers, args.embd, args.heads, args.ctx, args.vocab,
                     args.vocab_json.empty() ? "synthetic tokens" : args.vocab_json, args.ftype, args.seed,
                     ec ? 0 : bytes, ms);
  return Status::Ok();
}

Status RunDemo(const DemoArgs& args, std::ostream& out) {
  const fs::path dir = args.cache_dir.empty() ? UserCacheDirectory() : fs::path(args.cache_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Failed("demo: cannot create the cache directory '{}': {}", dir.string(), ec.message());
  const fs::path model = dir / "demo-gpt2-l6-e384-h6-c512-v8192-f16.bin";
  auto t0 = Clock::now();
  StatusOr<gpt2::Gpt2File> cached = gpt2::ReadGpt2File(model.string());
  if (!cached.ok()) {  // missing, or not a whole model (an older or interrupted one): made again
    out << "demo: making a small GPT-2 model (random weights, synthetic vocabulary) in " << model.string() << "\n";
    MakeGpt2Args make{.layers = 6, .embd = 384, .heads = 6, .ctx = 512, .vocab = 8192, .ftype = "f16", .seed = 2026,
                      .output = model.string()};
    NPUFLOW_RETURN_IF_ERROR(RunMakeGpt2(make, out));
    t0 = Clock::now();
    cached = gpt2::ReadGpt2File(model.string());
    NPUFLOW_RETURN_IF_ERROR(cached.status());
  } else {
    out << "demo: using the model in " << model.string() << "\n";
  }
  gpt2::Gpt2File file = std::move(*cached);
  gpt2::Vocab vocab(std::move(file.vocab));
  Gpt2Run run;
  run.n_predict = args.n_predict;
  run.print_ids = true;
  run.trace = (dir / "demo-trace.json").string();
  const std::vector<std::string> prompts = {"The quick brown fox", "Once upon a time, in a land far away",
                                            "npuflow runs GPT-2 on a simulated NPU", "Four streams share one copy of"};
  std::uint64_t seed = 7;
  for (const std::string& p : prompts) {
    gpt2::Tokenization t = vocab.Tokenize(p);
    run.labels.push_back(p);
    run.prompts.push_back(std::vector<int>(t.ids.begin(), t.ids.end()));
    run.samplings.push_back({.greedy = false, .top_k = 40, .top_p = 0.9f, .temp = 0.9f, .seed = seed++});
  }
  out << "demo: the weights are random, so the text is noise; `npuflow gpt2 --model F` runs a real GPT-2 file\n";
  out << "demo: 4 concurrent generations (top-k 40, top-p 0.9, temperature 0.9) on 4 streams of one simulated 910B, "
         "sharing one device copy of the weights\n";
  return WithRuntime("910B", args.threads, npu_sim::RuntimeOptions{}.io_threads, true,
                     [&] { return GenerateAndReport(std::move(file), t0, run, vocab, out); });
}

}  // namespace npuflow::apps
