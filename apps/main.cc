// npuflow: the command-line entry point. One binary, one subcommand per job.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/compile_cmd.h"
#include "apps/gpt2_cmd.h"
#include "apps/run_cmd.h"
#include "base/logging.h"
#include "lowering/pass.h"
#include "benchmarks/harness.h"

namespace {

using npuflow::Status;

int Fail(const Status& status) {
  std::cerr << "npuflow: " << status.ToString() << "\n";
  return 1;
}

std::string AreaNames() {
  std::string names;
  for (const auto& area : npuflow::bench::Areas()) names += (names.empty() ? "" : ", ") + area.name;
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"npuflow: a graph compiler and runtime for a simulated Ascend-style NPU"};
  app.set_version_flag("--version", "npuflow 0.1.0");
  app.require_subcommand(1);
  std::string log_spec;
  app.add_option("--log", log_spec, "log levels, as NPUFLOW_LOG: e.g. debug or warn,actors=trace");

  // bench
  auto* bench = app.add_subcommand("bench", "run an area's benchmarks and print its figures with baselines");
  std::string area;
  npuflow::bench::RunOptions bench_options;
  bench->add_option("area", area, "what to measure: " + AreaNames() + ", or all (every area, one JSON object)")->required();
  bench->add_flag("--json", bench_options.json, "print one JSON object {\"figures\": {...}}");
  bench->add_option("--repetitions", bench_options.repetitions, "repetitions per benchmark (median is kept)")
      ->check(CLI::Range(1, 100));
  bench->add_option("--model", bench_options.model, "the area's input model (gpt2: a ggml GPT-2 file)")
      ->check(CLI::ExistingFile);
  bench->add_option("--min-time", bench_options.min_time_s, "seconds per repetition")
      ->check(CLI::Range(0.001, 60.0));

  // compile
  auto* compile = app.add_subcommand("compile", "compile a graph (text format) into an .om model for the task sink");
  npuflow::apps::CompileArgs compile_args;
  compile->add_option("--model", compile_args.model,
                      "the graph, in the text format (.pbtxt), or a GPT-2 model file in ggml's format")
      ->required()
      ->check(CLI::ExistingFile);
  compile->add_option("--output", compile_args.output, "the model file to write (.om)")->required();
  compile->add_option("--chip", compile_args.chip, "target chip: 910B, 310P or a chip JSON path")
      ->capture_default_str();
  compile->add_option("--stream-mode", compile_args.stream_mode, "single: one stream; multi: parallel branches")
      ->check(CLI::IsMember({"single", "multi"}))
      ->capture_default_str();
  compile->add_option("--max-parallel", compile_args.max_parallel, "streams per engine in multi mode")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  compile->add_option("--dump-after", compile_args.dump_after, "print the graph after this pass")
      ->check(CLI::IsMember(npuflow::lowering::V1Pipeline()));
  compile->add_option("--dump-format", compile_args.dump_format, "summary (one line per node) or pbtxt")
      ->check(CLI::IsMember({"summary", "pbtxt"}))
      ->capture_default_str();
  compile->add_flag("--verify", compile_args.verify,
                    "check the memory plan against the task lists (no two live tensors share bytes)");
  compile->add_option("--external_weight", compile_args.external_weight,
                      "external weights: 0 embeds every FileConstant, 1 one file per distinct weight, 2 one "
                      "combined file (absent: Consts embedded, FileConstants external)");
  compile->add_option("--external_weight_dir", compile_args.external_weight_dir,
                      "the weight directory of modes 1 and 2 (default: a temporary tmp_weight_<pid>_0 under "
                      "$ASCEND_WORK_PATH or ./, whose files move to <model dir>/weight/)");
  compile->add_option("--value_bins", compile_args.value_bins,
                      "FileConstant file ids to files, as ge.exec.value_bins: "
                      "{\"value_bins\":[{\"value_bin_id\":...,\"value_bin_file\":...}]}");
  compile->add_option("--encrypt-key", compile_args.encrypt_key,
                      "encrypt the model file and its weight files (AES-256-GCM): 64 hex digits or @FILE");

  // info
  auto* info = app.add_subcommand("info", "print an .om model: nodes, streams, events, memory plan, tasks");
  std::string info_path;
  info->add_option("model", info_path, "the .om file")->required();
  bool info_tasks = false, info_placements = false;
  info->add_flag("--tasks", info_tasks, "also list every stream's tasks");
  info->add_flag("--placements", info_placements, "also list every tensor's segment, offset and lifetime");
  std::string info_key;
  info->add_option("--key", info_key, "the key of an encrypted model: 64 hex digits or @FILE");

  // run
  auto* run = app.add_subcommand("run", "load an .om model on the simulated device and run it: output checksums, "
                                        "latency, throughput, host interactions per inference");
  npuflow::apps::RunArgs run_args;
  std::string run_inputs;
  run->add_option("--om", run_args.om, "the .om model file (npuflow compile)")->required();
  auto* inputs_opt =
      run->add_option("--inputs", run_inputs, "one raw little-endian file per model input, in order: f1.bin,f2.bin");
  auto* random_opt = run->add_flag("--random-inputs", run_args.random_inputs,
                                   "deterministic inputs from --seed: floats uniform in [-1, 1], integers 1");
  inputs_opt->excludes(random_opt);
  run->add_option("--seed", run_args.seed, "seed of --random-inputs")->needs(random_opt)->capture_default_str();
  run->add_option("--outputs", run_args.outputs_dir, "write each output as DIR/<index>_<name>.bin");
  run->add_option("--mode", run_args.mode,
                  "nnexecute: RunGraph from --streams client threads; runloop: RunGraphAsync into the Run loop")
      ->capture_default_str();
  run->add_option("--streams", run_args.streams, "execution streams (model instances), 1..64")->capture_default_str();
  run->add_option("--requests", run_args.requests, "measured requests, >= 1")->capture_default_str();
  run->add_option("--timeout-ms", run_args.timeout_ms, "per execution, >= 0 (0: none)")->capture_default_str();
  run->add_option("--trace", run_args.trace, "write the Chrome trace (Perfetto) of the run to this file");
  run->add_option("--device-chip", run_args.device_chip,
                  "the simulated device: 910B, 310P or a chip JSON path (default: the model's chip)");
  run->add_flag("-v,--verbose", run_args.verbose, "also print how the model was loaded");
  run->add_option("--weight-dir", run_args.weight_dir,
                  "directory of the model's external weight files (default: <model dir>/weight/, else their "
                  "recorded locations)");
  run->add_flag("--verify_weights,--verify-weights", run_args.verify_weights,
                "check each external weight region's SHA-256 while loading");
  run->add_option("--key", run_args.key, "AES-256-GCM key of an encrypted model and its weights: 64 hex digits or @FILE");

  // gpt2
  auto* gpt2 = app.add_subcommand("gpt2", "generate text with a GPT-2 model file (ggml format) on the simulated NPU");
  npuflow::apps::Gpt2Args gpt2_args;
  gpt2->add_option("--model", gpt2_args.model, "the GPT-2 model file, in ggml's format (npuflow make-gpt2)")
      ->required()
      ->check(CLI::ExistingFile);
  gpt2->add_option("--prompt", gpt2_args.prompts, "the prompt text; give it several times for several prompts");
  gpt2->add_option("--prompt-ids", gpt2_args.prompt_ids, "the prompt as token ids: \"464 2068 ...\"");
  gpt2->add_option("-n,--n-predict", gpt2_args.n_predict, "tokens to generate per stream (default 32)");
  gpt2->add_flag("--greedy", gpt2_args.greedy, "take the most likely token (instead of sampling)");
  gpt2->add_option("--top-k", gpt2_args.top_k, "sample from the k most likely tokens (default 40)");
  gpt2->add_option("--top-p", gpt2_args.top_p, "... within the smallest set of probability >= p (default 0.9)");
  gpt2->add_option("--temp", gpt2_args.temp, "sampling temperature (default 0.9)");
  gpt2->add_option("--seed", gpt2_args.seed, "sampling seed; stream i uses seed + i (default 0)");
  gpt2->add_option("--streams", gpt2_args.streams, "concurrent generations on as many streams (default 1)");
  gpt2->add_option("--threads", gpt2_args.threads, "device runtime worker threads (default: one per core)");
  gpt2->add_flag("--print-ids", gpt2_args.print_ids, "also print the generated token ids");
  gpt2->add_option("--trace", gpt2_args.trace, "write a Chrome trace of the run to this file");
  gpt2->add_option("--device-chip", gpt2_args.device_chip, "the simulated chip (default 910B)");

  // make-gpt2
  auto* make_gpt2 =
      app.add_subcommand("make-gpt2", "write a GPT-2 model file (ggml format) with deterministic random weights");
  npuflow::apps::MakeGpt2Args make_args;
  make_gpt2->add_option("--layers", make_args.layers, "transformer blocks")->required();
  make_gpt2->add_option("--embd", make_args.embd, "embedding width (n_embd)")->required();
  make_gpt2->add_option("--heads", make_args.heads, "attention heads (must divide --embd)")->required();
  make_gpt2->add_option("--ctx", make_args.ctx, "context length (n_ctx)")->required();
  make_gpt2->add_option("--vocab", make_args.vocab, "vocabulary size (>= 256 with synthetic tokens)")->required();
  make_gpt2->add_option("--ftype", make_args.ftype, "weight type: f32 or f16 (default f32)");
  make_gpt2->add_option("--seed", make_args.seed, "weight seed (default 1)");
  make_gpt2->add_option("-o,--output", make_args.output, "the file to write")->required();
  make_gpt2->add_option("--vocab-json", make_args.vocab_json, "GPT-2's encoder.json for real token strings")
      ->check(CLI::ExistingFile);
  make_gpt2->add_flag("--lm-head", make_args.lm_head, "write a separate model/lm_head (default: tied to model/wte)");
  make_gpt2->add_flag("--name-order", make_args.name_order,
                      "tensors sorted by name, as ggml's checkpoint converter writes them (embeddings last)");

  // demo
  auto* demo = app.add_subcommand("demo", "the main job: GPT-2 generations on 4 concurrent streams, end to end");
  npuflow::apps::DemoArgs demo_args;
  demo->add_option("--cache-dir", demo_args.cache_dir, "where the demo model is kept (default ~/.cache/npuflow)");
  demo->add_option("-n,--n-predict", demo_args.n_predict, "tokens to generate per stream (default 24)");
  demo->add_option("--threads", demo_args.threads, "device runtime worker threads (default: one per core)");

  // The first word that is not an option (or --log's value) must name a subcommand.
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "--log") {
      ++i;
      continue;
    }
    if (word.empty() || word[0] == '-') continue;
    bool found = false;
    std::string known;
    for (const auto* sub : app.get_subcommands({})) {
      found = found || sub->check_name(word);
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found) {
      std::cerr << "npuflow: unknown subcommand '" << word << "' (known: " << known << "); see npuflow --help\n";
      return 2;
    }
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (!log_spec.empty()) {
    if (Status s = npuflow::log::Configure(log_spec); !s.ok()) return Fail(s);
  }

  if (bench->parsed()) {
    Status s = npuflow::bench::RunArea(area, bench_options, std::cout);
    return s.ok() ? 0 : Fail(s);
  }
  if (compile->parsed()) {
    Status s = npuflow::apps::RunCompile(compile_args, std::cout);
    return s.ok() ? 0 : Fail(s);
  }
  if (info->parsed()) {
    Status s = npuflow::apps::RunInfo(info_path, info_tasks, info_placements, std::cout, info_key);
    return s.ok() ? 0 : Fail(s);
  }
  if (run->parsed()) {
    if (!run_inputs.empty()) {
      for (std::size_t start = 0;;) {
        const std::size_t comma = run_inputs.find(',', start);
        run_args.inputs.push_back(run_inputs.substr(start, comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    Status s = npuflow::apps::RunModel(run_args, std::cout);
    return s.ok() ? 0 : Fail(s);
  }
  if (gpt2->parsed()) {
    Status s = npuflow::apps::RunGpt2(gpt2_args, std::cout);
    return s.ok() ? 0 : Fail(s);
  }
  if (make_gpt2->parsed()) {
    Status s = npuflow::apps::RunMakeGpt2(make_args, std::cout);
    return s.ok() ? 0 : Fail(s);
  }
  if (demo->parsed()) {
    Status s = npuflow::apps::RunDemo(demo_args, std::cout);
    return s.ok() ? 0 : Fail(s);
  }
  return 0;
}
