// npuflow-bench: what `npuflow bench` runs. The npuflow command hands its bench arguments to this
// program (next to it in the build), so the peers measured in the same run (the C++ Actor
// Framework, OpenBLAS) and Google Benchmark are linked into this program only: no other npuflow
// process loads them (OpenBLAS alone starts its threads and takes memory when it is loaded).
// Log levels come from NPUFLOW_LOG, which `npuflow --log` sets for it.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "benchmarks/harness.h"

namespace {

std::string AreaNames() {
  std::string names;
  for (const auto& area : npuflow::bench::Areas()) names += (names.empty() ? "" : ", ") + area.name;
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"run an area's benchmarks and print its figures with baselines", "npuflow bench"};
  std::string area;
  npuflow::bench::RunOptions options;
  app.add_option("area", area, "what to measure: " + AreaNames() + ", or all (every area, one JSON object)")
      ->required();
  app.add_flag("--json", options.json, "print one JSON object {\"figures\": {...}}");
  app.add_option("--repetitions", options.repetitions, "repetitions per benchmark (median is kept)")
      ->check(CLI::Range(1, 100));
  app.add_option("--model", options.model, "the area's input model (gpt2: a ggml GPT-2 file)")
      ->check(CLI::ExistingFile);
  app.add_flag("--small", options.small,
               "gpt2: the small shapes (2 layers x 64, 4 x 256, and 12 x 768): decode tokens/s at 1 thread against "
               "the reference engine (NPUFLOW_GPT2_REFERENCE), and each decode step's cost beyond its kernels");
  app.add_option("--min-time", options.min_time_s, "seconds per repetition")->check(CLI::Range(0.001, 60.0));
  CLI11_PARSE(app, argc, argv);
  if (npuflow::Status s = npuflow::bench::RunArea(area, options, std::cout); !s.ok()) {
    std::cerr << "npuflow: " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}
