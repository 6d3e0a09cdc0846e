// `npuflow compile` and `npuflow info`: the atc-style compiler front end and the model inspector.
//
// External weights (../shared/docs/GE_BEHAVIOUR.md, "External weights"; weights/):
//
//   npuflow compile --model m.pbtxt --output out/m.om --external_weight 1 --external_weight_dir /w
//   npuflow compile --model m.pbtxt --output out/m.om --external_weight 2 --encrypt-key @key.hex
//   npuflow info out/m.om --key @key.hex
//
// --external_weight "" (absent) keeps Consts embedded and FileConstants external, "0" embeds every
// FileConstant, "1" writes one file per distinct weight, "2" one combined file. The weight
// directory is --external_weight_dir, else a temporary "tmp_weight_<pid>_0" under
// $ASCEND_WORK_PATH (else ./). When the model file is written, files in a temporary directory move
// to "<model dir>/weight/" (the nodes name them by bare file name) and the temporary directory is
// removed; files in a user directory stay where they are.
//
// --encrypt-key (64 hex digits or @FILE): the model file is written encrypted (AES-256-GCM), and so
// is every external weight file the model uses, under "<model dir>/weight/": files from a temporary
// directory are encrypted there, files elsewhere (a user directory) are copied encrypted and the
// originals stay plain; the nodes name the encrypted copies by bare file name.
#pragma once

#include <ostream>
#include <string>

#include "base/status.h"

namespace npuflow::apps {

struct CompileArgs {
  std::string model;   // graph text (.pbtxt)
  std::string output;  // .om
  std::string chip = "910B";
  std::string stream_mode = "multi";  // single | multi
  int max_parallel = 8;
  std::string dump_after;          // a pass name, or empty
  std::string dump_format = "summary";  // summary | pbtxt
  bool verify = false;             // check the memory plan against the task lists
  std::string external_weight;      // "", "0", "1", "2"
  std::string external_weight_dir;  // empty: a temporary directory (weights::ResolveWeightDir)
  std::string value_bins;           // ge.exec.value_bins JSON
  std::string encrypt_key;          // 64 hex digits or @FILE; empty: write plain files
  // v1: the task sink (static shapes); v2: RT2.0's execute graphs (dynamic shapes, control flow);
  // auto: v2 when a dimension is unknown or the graph has If/While, else v1.
  std::string runtime = "auto";
  std::string executor = "auto";  // RT2.0's Main: sequential | topological | priority | multithread | auto
  std::string tiling_schedule_optimize;  // "", "0", "1" (ge.tiling_schedule_optimize, atc's spelling)
  int tiling_sink_nops = -1;             // developer: NOPs before a sunk kernel (-1: the chip's prefetch_num)
  int tiling_sink_share = 1;             // sunk nodes with the same tiling share one AICPU task (0: one each)
  // A pipeline model: the graph cut into K stages (lowering::CompilePipeline), each compiled for
  // the task sink; `npuflow run` runs it on the pipeline executor. 0: an ordinary model.
  int pipeline_stages = 0;
  // Developer: event N's record and wait become NOPs in the written model (lowering/drop_event.h),
  // to see what `--race-detect` says without it. -1: none.
  std::int64_t debug_drop_event = -1;
};

Status RunCompile(const CompileArgs& args, std::ostream& out);
// `tasks`: also list every stream's tasks; `placements`: every tensor's place. `key` (64 hex
// digits or @FILE) opens an encrypted model. Lists the external weight files the model uses.
Status RunInfo(const std::string& path, bool tasks, bool placements, std::ostream& out,
               const std::string& key = "");

}  // namespace npuflow::apps
