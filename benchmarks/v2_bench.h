#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterV2Benchmarks();
std::vector<Figure> V2Figures(const Results& results);

}  // namespace npuflow::bench
