#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterGpt2Benchmarks();
std::vector<Figure> Gpt2Figures(const Results& results);

}  // namespace npuflow::bench
