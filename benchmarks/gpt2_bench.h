#pragma once

#include <vector>

#include "benchmarks/harness.h"

namespace npuflow::bench {

void RegisterGpt2Benchmarks();
std::vector<Figure> Gpt2Figures(const Results& results);

// The tiling area's GPT-2 part (BM_Gpt2TilingSink: decode with the tiling sink on vs off).
void RegisterGpt2TilingBenchmarks();
std::vector<Figure> Gpt2TilingFigures(const Results& results);
// GPT-2 decode with the race detector on vs off (the stress area).
void RegisterGpt2RaceBenchmarks();
std::vector<Figure> Gpt2RaceFigures(const Results& results);

// The pipeline area's GPT-2 part (BM_Gpt2Pipeline: 8 sequences through 1, 2, 4 stages on as many
// devices).
void RegisterGpt2PipelineBenchmarks();
std::vector<Figure> Gpt2PipelineFigures(const Results& results);

}  // namespace npuflow::bench
