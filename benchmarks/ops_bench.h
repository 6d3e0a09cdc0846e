#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterOpsBenchmarks();
std::vector<Figure> OpsFigures(const Results& results);

}  // namespace npuflow::bench
