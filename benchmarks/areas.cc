// The areas `npuflow bench` runs. Each later layer adds its own.
#include "benchmarks/actors_bench.h"
#include "benchmarks/harness.h"
#include "benchmarks/npu_bench.h"

namespace npuflow::bench {

const std::vector<Area>& Areas() {
  static const std::vector<Area> areas = {
      {"actors", "actor hop, fan-in and tap-hook cost vs raw oneTBB flow-graph nodes", &RegisterActorBenchmarks,
       &ActorFigures},
      {"npu", "simulated device: NOPs and tiny kernels through one stream, 1 GiB H2D in 10 MiB chunks",
       &RegisterNpuBenchmarks, &NpuFigures},
  };
  return areas;
}

}  // namespace npuflow::bench
