#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterPipelineBenchmarks();
std::vector<Figure> PipelineFigures(const Results& results);

}  // namespace npuflow::bench
