// The benchmark harness behind `npuflow bench <area>`: runs an area's Google Benchmark
// functions, takes each one's median over repetitions (randomly interleaved, so a noisy spell
// hits baseline and candidate alike), and turns them into figures: a value, its unit, a
// baseline measured in the same run, and their ratio.
#pragma once

#include <cstddef>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"

namespace npuflow::bench {

// Median of one benchmark's repetitions. rate: its items_per_second counter (0 if unset).
struct Measurement {
  double rate = 0;
  double real_ns = 0;  // real time per iteration
  std::map<std::string, double> counters;
};
using Results = std::map<std::string, Measurement>;  // by benchmark name

struct Figure {
  std::string name;  // unique across areas (bench all puts every area's figures in one object)
  double value = 0;
  std::string unit;
  double baseline = 0;
  std::string baseline_what;  // what the baseline is, for the table
  std::string target;         // what the figure must reach, for the table ("ratio <= 1.25")
  // The baseline was not measured in this run: a number from elsewhere (an issue's floor, a peer
  // measured on another day). `baseline_what` names it and its source; docs/benchmarks.md dates it.
  // Printed as "(given)" in the table and "given": true in the JSON.
  bool given = false;
  std::string area;  // filled by MeasureArea
  double ratio() const { return baseline != 0 ? value / baseline : 0; }
};

struct Area {
  std::string name;
  std::string summary;
  void (*register_benchmarks)();
  std::vector<Figure> (*figures)(const Results&);
};

// Every area `npuflow bench` knows.
const std::vector<Area>& Areas();

struct RunOptions {
  bool json = false;
  int repetitions = 5;
  double min_time_s = 0.2;  // per repetition
  std::string model;        // an area's input model, where it takes one (gpt2: a ggml file)
  bool small = false;       // gpt2: the small shapes' decode and per-step overhead instead
};

// The options of the RunArea call in progress (for areas that take inputs).
const RunOptions& CurrentOptions();

// Runs one area, or every area for "all", and prints its table (or, with json, one object
// {"figures": {NAME: {"value", "unit", "baseline", "ratio", "given", "baseline_is", "area"}}}: with
// "all", the figures of every area in that one object). An unknown area is a ParamInvalid naming it
// and the known ones.
Status RunArea(const std::string& area, const RunOptions& options, std::ostream& out);

// Runs one area's benchmarks and returns its figures (each tagged with the area's name).
StatusOr<std::vector<Figure>> MeasureArea(const Area& area, const RunOptions& options);

void PrintFigures(const std::vector<Figure>& figures, bool json, std::ostream& out);

// Helpers for areas' figure functions: a benchmark's counter (0 when absent), and the median of
// per-round samples a benchmark collected itself.
double Counter(const Results& results, const std::string& bench, const std::string& counter);
double MedianOf(std::vector<double> samples);
// A benchmark's items per second (its rate), and the nanoseconds per item; 0 when it did not run.
double Rate(const Results& results, const std::string& bench);
double NsPer(const Results& results, const std::string& bench);

// The plain read a memory-bound kernel is measured against: `bytes` of f32 summed in 32 lanes,
// prefetched non-temporally ahead as the GEMV prefetches weights that stream from memory (the
// short lead, graph/kernels/gemv_prefetch.h), or with no software prefetch when `prefetch` is
// false. The GEMV picks one of its two ways by measuring them (graph::GemvReadTuner), so a
// baseline takes the faster of the two reads. Until 2026-11-29 it used the 4 KiB lead, slower from
// memory, and until the tuner the prefetched read only: rooflines read before then are lower.
// Returns the sum (for DoNotOptimize).
float SumStream(const void* data, std::size_t bytes, bool prefetch = true);

}  // namespace npuflow::bench
