// `npuflow run`: load an .om model on the simulated device through a Session and run it, as a
// user's program would: outputs with checksums, latency percentiles, throughput and host
// interactions per inference.
//
//   npuflow run --om /tmp/mlp.om --random-inputs --seed 7 --mode nnexecute --streams 4 --requests 400
//
// Modes (the runtime paths of seed 002, 3.4):
//   nnexecute  `streams` execution instances and as many client threads; each thread runs its share
//              of the requests with Session::RunGraph (NnExecute on the caller's thread). Latency
//              is per request, wall and virtual (the thread's host virtual clock, the time the
//              request took as the host sees it).
//   runloop    every request pushed at once with Session::RunGraphAsync into the model's Run loop
//              (one execution instance); latency is completion minus push, so it includes the
//              wait in the queue. No host clock sees a Run-loop request, so virtual figures are n/a.
// One warm-up request per client thread (nnexecute) or one (runloop) runs before the measured
// ones and is not counted: it brings the thread's host clock to the device's time. With several
// streams the virtual figures depend on how the host interleaved the runs: npu_sim's units serve
// work in arrival order, so runs that did not overlap in wall time serialize in virtual time
// (see benchmarks/v1_bench.cc).
//
// RT2.0 models (dynamic shapes, control flow) run through the same Session, which routes them to
// RT2.0: `npuflow run --om m.om --input-shape x:1,37 --random-inputs [--executor priority]
// [--profile]`. Only nnexecute mode (the Run loop is the v1 task sink's).
//
// Random inputs are deterministic for a seed: floating-point elements uniform in [-1, 1]; integer
// and bool elements are all 1, which is in range for every index-like input of the op library
// (Gather indices, Attention valid_len, KvCacheWrite pos) whenever the indexed dim is at least 2.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"

namespace npuflow::apps {

struct RunArgs {
  std::string om;                    // the .om model file
  std::vector<std::string> inputs;   // raw little-endian bytes, one file per model input, in order
  bool random_inputs = false;        // instead of `inputs`
  std::uint64_t seed = 1;            // for random_inputs
  std::string outputs_dir;           // write each output as <dir>/<index>_<name>.bin; empty: don't
  std::string mode = "nnexecute";    // nnexecute | runloop
  int streams = 1;                   // execution instances (and client threads in nnexecute), 1..64
  int requests = 1;                  // measured requests, >= 1
  std::int64_t timeout_ms = 0;       // per execution; 0: none
  std::string trace;                 // Chrome trace file; empty: no trace
  std::string device_chip;           // the simulated device; empty: the chip the model was compiled for
  bool verbose = false;              // also print the load stages
  // External weights: where FileConstant files are (default: <model dir>/weight/, else their
  // recorded locations), SHA-256 verification at load, and the AES-256-GCM key of an encrypted
  // model and its weight files (64 hex digits or @file).
  std::string weight_dir;
  bool verify_weights = false;
  std::string key;
  // RT2.0 models (npuflow compile --runtime v2): the shape of each input with unknown dims,
  // "name:d0,d1,..." ("name:" for a scalar); Main's executor (empty: the model's); the per-node
  // host profile (the top nodes are printed).
  std::vector<std::string> input_shapes;
  std::string executor;
  bool profile = false;
  // Pipeline models (npuflow compile --pipeline-stages K): the devices the stages spread over
  // (1..K); --streams is then the steps in flight.
  int devices = 1;
};

// Every option in range; errors name the option and the accepted values.
Status CheckRunArgs(const RunArgs& args);

Status RunModel(const RunArgs& args, std::ostream& out);

// FNV-1a, 64 bits, of `bytes` (the output checksum `npuflow run` prints, in hex).
std::uint64_t Fnv1a64(const std::uint8_t* bytes, std::size_t size);

}  // namespace npuflow::apps
