#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

// Executions per second of a tiny model from 1, 8 and 64 fiber clients on 1 and 4 execution
// streams: the ModelActor path against the caller-thread path, in the same run (`bench actors`).
void RegisterModelActorBenchmarks();
std::vector<Figure> ModelActorFigures(const Results& results);

}  // namespace npuflow::bench
