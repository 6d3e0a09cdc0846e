#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterCompileBenchmarks();
std::vector<Figure> CompileFigures(const Results& results);

}  // namespace npuflow::bench
