#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterTilingBenchmarks();
std::vector<Figure> TilingFigures(const Results& results);

}  // namespace npuflow::bench
