// `npuflow gpt2`, `npuflow make-gpt2` and `npuflow demo`: GPT-2 from ggml model files.
//
//   npuflow make-gpt2 --layers 4 --embd 256 --heads 8 --ctx 256 --vocab 4096 --ftype f16 --seed 1 -o m.bin
//   npuflow gpt2 --model m.bin --prompt "The quick brown fox" -n 32 --greedy --streams 4 --print-ids
//   npuflow demo
//
// gpt2 prints each generation's text (and with --print-ids one line "ids: <generated ids>"), then
// the load time and throughput, the time to first token and tokens per second (wall and
// virtual). With --streams K, K generations run at once on K streams of one device that share
// one device copy of the weights: prompt i (--prompt may be given several times) goes to stream
// i (cycling); when sampling, stream i uses seed S + i. The K generations are fibers on
// --host-threads host threads (default 1: the main thread), not K OS threads; --host-mode threads
// runs one OS thread each instead, for comparison.
// With --pipeline K [--devices D] the decode step is cut into K stages over D devices and the
// --streams sequences decode concurrently through them (prompts token by token); it prints the
// stages' devices and the pipeline's bubble fraction too.
// With -v it also prints a stage report: the process's memory (VmRSS, RssAnon, RssFile, VmHWM)
// at each stage of the run, the loader's read/hash/decrypt and DMA copy times, and the kernel's
// page-fault counters (/proc/vmstat) over the load.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"

namespace npuflow::apps {

struct Gpt2Args {
  std::string model;
  std::vector<std::string> prompts;  // text
  std::string prompt_ids;            // "464 2068 ..." (instead of text)
  int n_predict = 32;
  bool greedy = false;
  int top_k = 40;
  double top_p = 0.9;
  double temp = 0.9;
  std::uint64_t seed = 0;
  int streams = 1;
  int threads = 0;  // the device runtime's worker threads; 0: one per hardware thread
  int host_threads = 1;               // the generations run as fibers on this many host threads, 1..64
  int io_threads = 2;                 // threads reading the weight file, apart from the workers; 0: inline
  std::string host_mode = "fibers";   // fibers | threads (one OS thread per generation, for comparison)
  bool print_ids = false;
  std::string trace;
  std::string device_chip = "910B";
  bool verbose = false;  // also print where the load time and the memory go (stage report)
  std::string prefill = "batch";  // batch: the prompt as one RT2.0 graph; tokens: token by token (v1 decode step)
  // ge.tiling_schedule_optimize for the decode step: "1" tiles Attention on the device from the real
  // context length (where the chip supports task update); "0": the dynamic path.
  std::string tiling_schedule_optimize;
  // Serve the model as a pipeline (models/gpt2/pipeline_engine.h): K stages over D devices, the
  // --streams sequences decoding concurrently through them. 0: the single-device engine.
  int pipeline = 0;
  int devices = 1;
};

Status RunGpt2(const Gpt2Args& args, std::ostream& out);

struct MakeGpt2Args {
  int layers = 2;
  int embd = 64;
  int heads = 4;
  int ctx = 64;
  int vocab = 512;
  std::string ftype = "f32";  // f32 | f16
  std::uint64_t seed = 1;
  std::string output;
  std::string vocab_json;  // GPT-2's encoder.json: real tokens (its size must equal --vocab)
  bool lm_head = false;    // write a separate model/lm_head instead of tying it to model/wte
  bool name_order = false; // tensors sorted by name, as ggml's checkpoint converter writes them
};

Status RunMakeGpt2(const MakeGpt2Args& args, std::ostream& out);

struct DemoArgs {
  std::string cache_dir;  // empty: $XDG_CACHE_HOME/npuflow, else ~/.cache/npuflow, else ./.npuflow-cache
  int n_predict = 24;
  int threads = 0;
};

// Makes a small model in the cache directory if absent, runs 4 concurrent generations, prints
// them with timings and the path of the trace.
Status RunDemo(const DemoArgs& args, std::ostream& out);

}  // namespace npuflow::apps
