#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterGpt2Benchmarks();
std::vector<Figure> Gpt2Figures(const Results& results);

// The tiling area's GPT-2 part (BM_Gpt2TilingSink: decode with the tiling sink on vs off).
void RegisterGpt2TilingBenchmarks();
std::vector<Figure> Gpt2TilingFigures(const Results& results);

}  // namespace npuflow::bench
