// Standalone Google Benchmark binary over every area's benchmarks, with Google Benchmark's own
// flags and output (e.g. --benchmark_filter=Hop --benchmark_repetitions=10). Registering an area
// creates nothing (no model, file or fixture): what a benchmark needs is made in its body, so a
// filtered run pays for, and writes, only what it measures (tests/benchmarks/filter_test.cc).
#include <benchmark/benchmark.h>

#include "benchmarks/harness.h"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (const auto& area : npuflow::bench::Areas()) area.register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
