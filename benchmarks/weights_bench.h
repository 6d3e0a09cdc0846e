#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterWeightsBenchmarks();
std::vector<Figure> WeightsFigures(const Results& results);

}  // namespace npuflow::bench
