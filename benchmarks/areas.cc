// The areas `npuflow bench` runs. Each later layer adds its own.
#include "benchmarks/actors_bench.h"
#include "benchmarks/harness.h"

namespace npuflow::bench {

const std::vector<Area>& Areas() {
  static const std::vector<Area> areas = {
      {"actors", "actor hop, fan-in and tap-hook cost vs raw oneTBB flow-graph nodes", &RegisterActorBenchmarks,
       &ActorFigures},
  };
  return areas;
}

}  // namespace npuflow::bench
