#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterActorBenchmarks();
std::vector<Figure> ActorFigures(const Results& results);

}  // namespace npuflow::bench
