// npuflow: the command-line entry point. One binary, one subcommand per job: each Add...Command
// declares a subcommand's options and returns what to run when the user chose it.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/compile_cmd.h"
#include "lowering/graph_converter.h"
#include "apps/gpt2_cmd.h"
#include "lowering/partition_stages.h"
#include "apps/run_cmd.h"
#include "apps/stress_cmd.h"
#include "base/logging.h"
#include "lowering/pass.h"
#include "npu_sim/race_detector.h"

namespace {

using npuflow::Status;

// A subcommand and its action, which reads the options parse() filled in.
struct Command {
  CLI::App* app = nullptr;
  std::function<Status()> run;
  std::shared_ptr<int> exit_code;  // set by commands with exit codes of their own (stress)
};

int Fail(const Status& status) {
  std::cerr << "npuflow: " << status.ToString() << "\n";
  return 1;
}

// `npuflow bench ...` runs npuflow-bench, the program next to this one, with the same arguments:
// the peers it measures against (CAF, OpenBLAS) are linked into that program only. It declares
// and checks the options (`npuflow bench --help` is its help).
Command AddBenchCommand(CLI::App& app, const char* argv0) {
  auto* bench = app.add_subcommand("bench", "run an area's benchmarks and print its figures with baselines "
                                            "(npuflow bench --help: areas and options)");
  bench->prefix_command();
  bench->set_help_flag();
  return {bench, [bench, argv0] {
            std::error_code ec;
            std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
            if (ec) self = argv0;
            const std::string program = (self.parent_path() / "npuflow-bench").string();
            std::vector<std::string> words = bench->remaining();
            std::vector<char*> args{const_cast<char*>(program.c_str())};
            for (std::string& w : words) args.push_back(w.data());
            args.push_back(nullptr);
            std::cout.flush();
            ::execv(program.c_str(), args.data());
            return npuflow::Status::NotFound("cannot run the benchmark program '{}': {} (it is built with npuflow: "
                                             "cmake --build build --target npuflow-bench)",
                                             program, std::strerror(errno));
          }};
}

Command AddCompileCommand(CLI::App& app) {
  auto args = std::make_shared<npuflow::apps::CompileArgs>();
  auto* compile = app.add_subcommand("compile", "compile a graph (text format) into an .om model for the task sink or RT2.0");
  compile->add_option("--model", args->model,
                      "the graph, in the text format (.pbtxt), or a GPT-2 model file in ggml's format")
      ->required()
      ->check(CLI::ExistingFile);
  compile->add_option("--output", args->output, "the model file to write (.om)")->required();
  compile->add_option("--chip", args->chip, "target chip: 910B, 310P or a chip JSON path")->capture_default_str();
  compile->add_option("--stream-mode", args->stream_mode, "single: one stream; multi: parallel branches")
      ->check(CLI::IsMember({"single", "multi"}))
      ->capture_default_str();
  compile->add_option("--max-parallel", args->max_parallel, "streams per engine in multi mode")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  compile->add_option("--runtime", args->runtime,
                      "v1: the task sink (static shapes); v2: RT2.0 execute graphs (dynamic shapes, If/While); "
                      "auto: v2 when a dim is unknown or the graph has control flow")
      ->capture_default_str();
  compile->add_option("--executor", args->executor,
                      "RT2.0: Main's executor, sequential|topological|priority|multithread|auto")
      ->capture_default_str();
  std::vector<std::string> dump_points = npuflow::lowering::V1Pipeline();
  dump_points.emplace_back(npuflow::lowering::kLoweringDumpName);  // RT2.0: the execute graphs
  dump_points.emplace_back(npuflow::lowering::kPartitionStagesPass);  // --pipeline-stages: the cut
  compile->add_option("--dump-after", args->dump_after,
                      "print the graph after this pass (RT2.0: 'lowering' prints the execute graphs; with "
                      "--pipeline-stages, 'partition-stages' prints the stage-partitioned root)")
      ->check(CLI::IsMember(dump_points));
  compile->add_option("--dump-format", args->dump_format, "summary (one line per node) or pbtxt")
      ->check(CLI::IsMember({"summary", "pbtxt"}))
      ->capture_default_str();
  compile->add_flag("--verify", args->verify,
                    "check the memory plan against the task lists (no two live tensors share bytes)");
  compile->add_option("--external_weight", args->external_weight,
                      "external weights: 0 embeds every FileConstant, 1 one file per distinct weight, 2 one "
                      "combined file (absent: Consts embedded, FileConstants external)");
  compile->add_option("--external_weight_dir", args->external_weight_dir,
                      "the weight directory of modes 1 and 2 (default: a temporary tmp_weight_<pid>_0 under "
                      "$ASCEND_WORK_PATH or ./, whose files move to <model dir>/weight/)");
  compile->add_option("--value_bins", args->value_bins,
                      "FileConstant file ids to files, as ge.exec.value_bins: "
                      "{\"value_bins\":[{\"value_bin_id\":...,\"value_bin_file\":...}]}");
  compile->add_option("--tiling_schedule_optimize", args->tiling_schedule_optimize,
                      "tiling sink (ge.tiling_schedule_optimize): 1 tiles ops whose tiling needs a run-time value "
                      "on the device (AICPU) and keeps them on the task sink; 0 or absent: the dynamic path");
  compile->add_option("--tiling-sink-nops", args->tiling_sink_nops,
                      "developer: NOPs before a sunk kernel (default: the chip's prefetch_num; fewer lets the "
                      "task update race the prefetch)");
  compile->add_option("--tiling-sink-share", args->tiling_sink_share,
                      "1 (default): sunk nodes on one stream with the same tiling (op, attributes, inputs, and "
                      "the tensors it depends on) share one AICPU tiling task and event; 0: one chain each, as "
                      "GE builds them")
      ->check(CLI::IsMember({0, 1}));
  compile->add_option("--pipeline-stages", args->pipeline_stages,
                      "cut the graph into K pipeline stages (cost-balanced, contiguous), each compiled for the task "
                      "sink; npuflow run runs the file on the pipeline executor (default 0: an ordinary model)");
  compile->add_option("--debug-drop-event", args->debug_drop_event,
                      "developer: remove event N's record and wait from the written model, to check with "
                      "--race-detect that the race it prevented is found");
  compile->add_option("--encrypt-key", args->encrypt_key,
                      "encrypt the model file and its weight files (AES-256-GCM): 64 hex digits or @FILE");
  return {compile, [args] { return npuflow::apps::RunCompile(*args, std::cout); }};
}

Command AddInfoCommand(CLI::App& app) {
  struct Args {
    std::string path, key;
    bool tasks = false, placements = false;
  };
  auto args = std::make_shared<Args>();
  auto* info = app.add_subcommand("info", "print an .om model: nodes, streams, events, memory plan, tasks");
  info->add_option("model", args->path, "the .om file")->required();
  info->add_flag("--tasks", args->tasks, "also list every stream's tasks");
  info->add_flag("--placements", args->placements, "also list every tensor's segment, offset and lifetime");
  info->add_option("--key", args->key, "the key of an encrypted model: 64 hex digits or @FILE");
  return {info, [args] {
            return npuflow::apps::RunInfo(args->path, args->tasks, args->placements, std::cout, args->key);
          }};
}

Command AddRunCommand(CLI::App& app) {
  auto args = std::make_shared<npuflow::apps::RunArgs>();
  auto* run = app.add_subcommand("run", "load an .om model on the simulated device and run it: output checksums, "
                                        "latency, throughput, host interactions per inference");
  run->add_option("--om", args->om, "the .om model file (npuflow compile)")->required();
  auto* inputs_opt =
      run->add_option("--inputs", args->inputs, "one raw little-endian file per model input, in order: f1.bin,f2.bin")
          ->delimiter(',');
  auto* random_opt = run->add_flag("--random-inputs", args->random_inputs,
                                   "deterministic inputs from --seed: floats uniform in [-1, 1], integers 1");
  inputs_opt->excludes(random_opt);
  run->add_option("--seed", args->seed, "seed of --random-inputs")->needs(random_opt)->capture_default_str();
  run->add_option("--outputs", args->outputs_dir, "write each output as DIR/<index>_<name>.bin");
  run->add_option("--mode", args->mode,
                  "nnexecute: RunGraph from --streams client threads; runloop: RunGraphAsync into the Run loop")
      ->capture_default_str();
  run->add_option("--streams", args->streams, "execution streams (model instances), 1..64")->capture_default_str();
  run->add_option("--requests", args->requests, "measured requests, >= 1")->capture_default_str();
  run->add_option("--timeout-ms", args->timeout_ms, "per execution, >= 0 (0: none)")->capture_default_str();
  run->add_option("--trace", args->trace, "write the Chrome trace (Perfetto) of the run to this file");
  run->add_option("--device-chip", args->device_chip,
                  "the simulated device: 910B, 310P or a chip JSON path (default: the model's chip)");
  run->add_flag("-v,--verbose", args->verbose, "also print how the model was loaded");
  run->add_option("--devices", args->devices,
                  "pipeline models: spread the stages over D simulated devices (default 1); --streams is then the "
                  "steps in flight")
      ->capture_default_str();
  run->add_option("--input-shape", args->input_shapes,
                  "RT2.0 models: the shape of an input with unknown dims, NAME:D0,D1,... (repeat per input)");
  run->add_option("--executor", args->executor,
                  "RT2.0 models: Main's executor, sequential|topological|priority|multithread|auto (default: the "
                  "model's)");
  run->add_flag("--profile", args->profile, "RT2.0 models: print the top nodes by host time");
  run->add_option("--weight-dir", args->weight_dir,
                  "directory of the model's external weight files (default: <model dir>/weight/, else their "
                  "recorded locations)");
  run->add_flag("--verify_weights,--verify-weights", args->verify_weights,
                "check each external weight region's SHA-256 while loading");
  run->add_option("--key", args->key, "AES-256-GCM key of an encrypted model and its weights: 64 hex digits or @FILE");
  return {run, [args] { return npuflow::apps::RunModel(*args, std::cout); }};
}

Command AddGpt2Command(CLI::App& app) {
  auto args = std::make_shared<npuflow::apps::Gpt2Args>();
  auto* gpt2 = app.add_subcommand("gpt2", "generate text with a GPT-2 model file (ggml format) on the simulated NPU");
  gpt2->add_option("--model", args->model, "the GPT-2 model file, in ggml's format (npuflow make-gpt2)")
      ->required()
      ->check(CLI::ExistingFile);
  gpt2->add_option("--prompt", args->prompts, "the prompt text; give it several times for several prompts");
  gpt2->add_option("--prompt-ids", args->prompt_ids, "the prompt as token ids: \"464 2068 ...\"");
  gpt2->add_option("-n,--n-predict", args->n_predict, "tokens to generate per stream (default 32)");
  gpt2->add_flag("--greedy", args->greedy, "take the most likely token (instead of sampling)");
  gpt2->add_option("--top-k", args->top_k, "sample from the k most likely tokens (default 40)");
  gpt2->add_option("--top-p", args->top_p, "... within the smallest set of probability >= p (default 0.9)");
  gpt2->add_option("--temp", args->temp, "sampling temperature (default 0.9)");
  gpt2->add_option("--seed", args->seed, "sampling seed; stream i uses seed + i (default 0)");
  gpt2->add_option("--streams", args->streams, "concurrent generations on as many streams (default 1)");
  gpt2->add_option("--threads", args->threads, "device runtime worker threads (default: one per core)");
  gpt2->add_option("--io-threads", args->io_threads,
                   "threads reading the weight file, apart from the runtime workers (default 2; 0: in the loader)");
  gpt2->add_option("--host-threads", args->host_threads,
                   "host threads running the generations as fibers, 1..64 (default 1)");
  gpt2->add_option("--host-mode", args->host_mode,
                   "fibers (default), or threads: one OS thread per generation, for comparison");
  gpt2->add_flag("--print-ids", args->print_ids, "also print the generated token ids");
  gpt2->add_option("--prefill", args->prefill,
                   "batch (default): the prompt as one dynamic-shape graph on RT2.0; tokens: token by token through "
                   "the decode step. With one-token prompts only, batch builds no prefill model (the token is "
                   "one decode step either way)");
  gpt2->add_option("--tiling_schedule_optimize", args->tiling_schedule_optimize,
                   "1 (default): the decode step's Attention is tiled on the device (AICPU) from the real context "
                   "length, where the chip supports task update (910B; on 310P it is tiled once for n_ctx); 0: tiled "
                   "once for n_ctx");
  gpt2->add_option("--pipeline", args->pipeline,
                   "serve the model as a pipeline of K stages (contiguous blocks of layers); 0: off (default)");
  gpt2->add_option("--devices", args->devices, "with --pipeline: spread the stages over D simulated devices (default 1)");
  gpt2->add_option("--trace", args->trace, "write a Chrome trace of the run to this file");
  gpt2->add_option("--device-chip", args->device_chip, "the simulated chip (default 910B)");
  gpt2->add_flag("-v,--verbose", args->verbose,
                 "also print a stage report: memory at each stage, where the load time went, page faults");
  return {gpt2, [args] { return npuflow::apps::RunGpt2(*args, std::cout); }};
}

Command AddMakeGpt2Command(CLI::App& app) {
  auto args = std::make_shared<npuflow::apps::MakeGpt2Args>();
  auto* make_gpt2 =
      app.add_subcommand("make-gpt2", "write a GPT-2 model file (ggml format) with deterministic random weights");
  make_gpt2->add_option("--layers", args->layers, "transformer blocks")->required();
  make_gpt2->add_option("--embd", args->embd, "embedding width (n_embd)")->required();
  make_gpt2->add_option("--heads", args->heads, "attention heads (must divide --embd)")->required();
  make_gpt2->add_option("--ctx", args->ctx, "context length (n_ctx)")->required();
  make_gpt2->add_option("--vocab", args->vocab, "vocabulary size (>= 256 with synthetic tokens)")->required();
  make_gpt2->add_option("--ftype", args->ftype, "weight type: f32 or f16 (default f32)");
  make_gpt2->add_option("--seed", args->seed, "weight seed (default 1)");
  make_gpt2->add_option("-o,--output", args->output, "the file to write")->required();
  make_gpt2->add_option("--vocab-json", args->vocab_json, "GPT-2's encoder.json for real token strings")
      ->check(CLI::ExistingFile);
  make_gpt2->add_flag("--lm-head", args->lm_head, "write a separate model/lm_head (default: tied to model/wte)");
  make_gpt2->add_flag("--name-order", args->name_order,
                      "tensors sorted by name, as ggml's checkpoint converter writes them (embeddings last)");
  return {make_gpt2, [args] { return npuflow::apps::RunMakeGpt2(*args, std::cout); }};
}

Command AddDemoCommand(CLI::App& app) {
  auto args = std::make_shared<npuflow::apps::DemoArgs>();
  auto* demo = app.add_subcommand("demo", "the main job: GPT-2 generations on 4 concurrent streams, end to end");
  demo->add_option("--cache-dir", args->cache_dir, "where the demo model is kept (default ~/.cache/npuflow)");
  demo->add_option("-n,--n-predict", args->n_predict, "tokens to generate per stream (default 24)");
  demo->add_option("--threads", args->threads, "device runtime worker threads (default: one per core)");
  return {demo, [args] { return npuflow::apps::RunDemo(*args, std::cout); }};
}

Command AddStressCommand(CLI::App& app) {
  auto args = std::make_shared<npuflow::apps::StressArgs>();
  npuflow::stress::StressOptions& o = args->options;
  auto* stress = app.add_subcommand(
      "stress", "stress and race runs: C clients x M models x K streams, churn, faults, the tiling sink or your "
                "model, outputs checked, schedule perturbed; a JSON report, a replay file on failure (docs/stress.md)");
  std::string scenarios;
  for (const auto& s : npuflow::stress::Scenarios()) scenarios += "\n  " + s.name + ": " + s.summary;
  std::vector<CLI::Option*> options = {
      stress->add_option("--scenario", o.scenario, "what to run (each a set of defaults for the flags below):" + scenarios)
          ->capture_default_str(),
      stress->add_option("--clients", o.clients, "client fibers (or threads), 1..10000")->capture_default_str(),
      stress->add_option("--models", o.models,
                         "a count (the scenario's models, cycled) or names: mlp, mlp_single, chain, dag, mlp_dynamic, "
                         "attention_sink, weights_a, weights_b, om; a variant with other weights: mlp#2"),
      stress->add_option("--streams", o.streams, "execution instances per model, 1..64")->capture_default_str(),
      stress->add_option("--requests", o.requests, "stop after this many requests (0: no bound)")->capture_default_str(),
      stress->add_option("--duration", o.duration_s, "stop after this many seconds (0: no bound)"),
      stress->add_option("--input-sets", o.input_sets, "input sets per model, each with its expected outputs, 1..64")
          ->capture_default_str(),
      stress->add_option("--seed", o.seed, "every random choice of the run comes from it")->capture_default_str(),
      stress->add_flag("--deterministic", o.deterministic,
                       "one runtime worker, FIFO delivery, clients take turns in a seeded order: a run that replays "
                       "exactly"),
      stress->add_option("--host-mode", o.host_mode, "clients as fibers (default) or as OS threads (1..256 clients)"),
      stress->add_option("--host-threads", o.host_threads, "OS threads running the client fibers, 1..64")
          ->capture_default_str(),
      stress->add_option("--workers", o.workers, "runtime worker threads (0: one per core)"),
      stress->add_option("--mix", args->mix,
                         "weights of the actions: rungraph=4,async=2,nnexecute=2,stream=1 (RunGraph, RunGraphAsync "
                         "into the Run loop, NnExecute zero copy, a model execute on a user stream)"),
      stress->add_option("--timeout-ms", o.timeout_ms, "per execution in the runtime, 0: none (faults: 100)"),
      stress->add_option("--hang-ms", o.hang_ms,
                         "a request not finished after this long is a hang (default 20000, faults 10000, plus 5 per "
                         "client: the queue of C clients)"),
      stress->add_option("--perturb", o.perturb, "schedule perturbation through the delivery tap: none, random, pct")
          ->capture_default_str(),
      stress->add_option("--pct-depth", o.perturbation.pct_depth, "PCT priority change points, 0..64")
          ->capture_default_str(),
      stress->add_option("--pct-window", o.perturbation.pct_window, "PCT change points fall in the first N deliveries")
          ->capture_default_str(),
      stress->add_option("--pct-span", o.perturbation.pct_span,
                         "PCT: deliveries after a change point during which its actor is held back")
          ->capture_default_str(),
      stress->add_option("--low-priority-share", o.perturbation.low_priority_share,
                         "PCT: the share of actors that are low priority, 0..1")
          ->capture_default_str(),
      stress->add_option("--pct-hold", o.perturbation.pct_hold,
                         "PCT: the probability a delivery to a low-priority actor is held back, 0..1")
          ->capture_default_str(),
      stress->add_option("--pct-delay-us", args->pct_delay_us, "PCT: how long a held-back delivery waits (a demoted actor's: twice)")
          ->capture_default_str(),
      stress->add_option("--delay-probability", o.perturbation.delay_probability,
                         "each delivery is also delayed with this probability, 0..1")
          ->capture_default_str(),
      stress->add_option("--max-delay-us", args->max_delay_us, "... by 1 ns up to this")->capture_default_str(),
      stress->add_option("--chip", o.chip, "the simulated chip: 910B, 310P or a chip JSON path")->capture_default_str(),
      stress->add_option("--device-memory", o.device_memory,
                         "device memory: auto (small enough that loads recycle models), or a size (96M); default the "
                         "chip's"),
      stress->add_option("--churn-every", o.churn_every,
                         "a load/unload churn action after every N requests (0: off; churn and weights: 8)"),
      stress->add_flag("--weight-streaming", o.weight_streaming,
                       "churn loads models into fresh sessions, so external weights stream in under traffic"),
      stress->add_option("--faults", o.faults, "faults to inject over the run (faults: 1000)"),
      stress->add_option("--fault-kinds", o.fault_kinds, "fail, hang, delay")->delimiter(','),
      stress->add_option("--fault-targets", o.fault_targets, "stream (a task), aicore, aicpu, dma")->delimiter(','),
      stress->add_option("--tiling-nops", o.tiling_nops,
                         "tiling-sink models with these NOP counts, -1: the chip's prefetch_num (tiling: 0,4,7,-1,12)")
          ->delimiter(','),
      stress->add_option("--om", o.om, "your model file (npuflow compile); implies --models om"),
      stress->add_option("--input-shape", o.input_shapes, "--om RT2.0 models: NAME:D0,D1,... (repeat per input)"),
      stress->add_option("--report", args->report, "write the JSON report here (default: stdout)"),
      stress->add_option("--replay", args->replay, "re-run a replay file's schedule in deterministic mode"),
      stress->add_option("--replay-out", args->replay_out,
                         "where a failing run writes its replay file (default npuflow-stress-SCENARIO-seedS.replay.json)"),
      stress->add_flag("--save-replay", args->save_replay, "write the replay file even when the run passes"),
      stress->add_flag("-q,--quiet", args->quiet, "no progress line"),
  };
  auto exit_code = std::make_shared<int>(0);
  return {stress,
          [args, options, exit_code] {
            for (CLI::Option* opt : options)
              if (opt->count() > 0) {
                std::string name = opt->get_name();
                if (name.rfind("--", 0) == 0) name = name.substr(2);
                args->given.push_back(name);
              }
            return npuflow::apps::RunStressCommand(*args, std::cout, std::cerr, *exit_code);
          },
          exit_code};
}

// A parse error with a word CLI11 could not place before any subcommand: that word was meant as
// a subcommand. Prints the message naming it and the known ones; false when there is no such word.
bool ReportUnknownSubcommand(const CLI::App& app) {
  for (const std::string& word : app.remaining()) {
    if (word.empty() || word[0] == '-') continue;
    std::string known;
    for (const auto* sub : app.get_subcommands({})) known += (known.empty() ? "" : ", ") + sub->get_name();
    std::cerr << "npuflow: unknown subcommand '" << word << "' (known: " << known << "); see npuflow --help\n";
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"npuflow: a graph compiler and runtime for a simulated Ascend-style NPU"};
  app.set_version_flag("--version", "npuflow 0.1.0");
  app.require_subcommand(1);
  std::string log_spec;
  app.add_option("--log", log_spec, "log levels, as NPUFLOW_LOG: e.g. debug or warn,actors=trace");
  bool race_detect = false;
  app.add_flag("--race-detect", race_detect,
               "detect data races on device memory (happens-before, every runtime of the command); any race found "
               "is reported with both tasks and makes the command exit with 3");
  const std::vector<Command> commands = {AddBenchCommand(app, argv[0]), AddCompileCommand(app), AddInfoCommand(app),
                                         AddRunCommand(app),   AddGpt2Command(app),    AddMakeGpt2Command(app),
                                         AddDemoCommand(app),    AddStressCommand(app)};
  for (const Command& command : commands)  // after the subcommand too: npuflow run ... --race-detect
    command.app->add_flag("--race-detect", race_detect, "detect data races on device memory (see npuflow --help)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (ReportUnknownSubcommand(app)) return 2;
    return app.exit(e);
  }

  if (!log_spec.empty()) {
    if (Status s = npuflow::log::Configure(log_spec); !s.ok()) return Fail(s);
    ::setenv("NPUFLOW_LOG", log_spec.c_str(), 1);  // for programs it runs (npuflow bench)
  }
  if (race_detect) {
    npuflow::npu_sim::RaceDetector::SetProcessDefault(true);
    ::setenv("NPUFLOW_RACE_DETECT", "1", 1);  // for programs it runs (npuflow bench)
  }
  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    Status s = command.run();
    if (!s.ok()) return Fail(s);
    const int code = command.exit_code ? *command.exit_code : 0;
    if (npuflow::npu_sim::RaceDetector::ProcessDefault()) {
      const std::uint64_t races = npuflow::npu_sim::RaceDetector::ProcessRaceCount();
      if (races > 0) {
        std::cerr << fmt::format("race detector: {} data race(s) on device memory (reported above)\n", races);
        return code != 0 ? code : 3;
      }
      std::cerr << fmt::format("race detector: no data race in {} device memory accesses\n",
                               npuflow::npu_sim::RaceDetector::ProcessAccessesChecked());
    }
    return code;
  }
  return 0;
}
