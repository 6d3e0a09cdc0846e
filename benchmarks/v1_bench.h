#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterV1Benchmarks();
std::vector<Figure> V1Figures(const Results& results);

}  // namespace npuflow::bench
