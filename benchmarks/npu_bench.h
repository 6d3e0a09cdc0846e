#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterNpuBenchmarks();
std::vector<Figure> NpuFigures(const Results& results);

}  // namespace npuflow::bench
