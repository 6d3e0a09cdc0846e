#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterStressBenchmarks();
std::vector<Figure> StressFigures(const Results& results);

}  // namespace npuflow::bench
