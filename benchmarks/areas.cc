// The areas `npuflow bench` runs. Each later layer adds its own.
#include "benchmarks/actors_bench.h"
#include "benchmarks/compile_bench.h"
#include "benchmarks/gpt2_bench.h"
#include "benchmarks/harness.h"
#include "benchmarks/model_actor_bench.h"
#include "benchmarks/npu_bench.h"
#include "benchmarks/ops_bench.h"
#include "benchmarks/pipeline_bench.h"
#include "benchmarks/stress_bench.h"
#include "benchmarks/tiling_bench.h"
#include "benchmarks/v1_bench.h"
#include "benchmarks/v2_bench.h"
#include "benchmarks/weights_bench.h"

namespace npuflow::bench {

const std::vector<Area>& Areas() {
  static const std::vector<Area> areas = {
      {"actors", "actor hop, fan-in, ring, fan-out/fan-in and tap-hook cost vs raw oneTBB nodes and CAF", &RegisterActorBenchmarks,
       &ActorFigures},
      {"npu", "simulated device, one stream: NOPs (run inline in the stream's task loop, one by one and in rows; "
              "traced) vs a plain loop; tiny "
              "kernels (each a full round trip stream -> AICore unit -> back, 2 actor messages) vs raw "
              "flow-graph nodes doing the same 2 hops with the same handoff; 1 GiB H2D in 10 MiB chunks vs memcpy",
       &RegisterNpuBenchmarks, &NpuFigures},
      {"compile", "v1 compile time (all passes) of 100k-node chains and 10k-node random DAGs vs linear scaling",
       &RegisterCompileBenchmarks, &CompileFigures},
      {"ops",
       "op device kernels: f32 MatMul at GPT-2 prefill shapes (M = 128) vs OpenBLAS sgemm on 1 and 2 threads; "
       "GEMV vs a plain read",
       &RegisterOpsBenchmarks, &OpsFigures},
      {"v1", "v1 task sink: host interactions and time per inference vs host-scheduled tasks (200-op chain); "
             "throughput with 1, 2, 4, 8 execution streams (200-op DAG)",
       &RegisterV1Benchmarks, &V1Figures},
      {"v2", "RT2.0 executors: sequential on a 100k-node chain vs a plain function-pointer loop and oneTBB's flow "
             "graph; topological and priority on a random 100k-node DAG vs a bare ready-counter loop; multi-thread "
             "(2 threads) vs sequential on a wide DAG of 10 us kernels",
       &RegisterV2Benchmarks, &V2Figures},
      {"weights", "external weights: 500 MB Const -> FileConstant (mode 1, mode 2) vs the same SHA-256 by OpenSSL on "
                  "one thread; loading a 500 MB combined file vs cat; peak host staging memory",
       &RegisterWeightsBenchmarks, &WeightsFigures},
      {"gpt2", "GPT-2 117M shape (or --model F), f32 and f16: tokens/s with 1 and 2 threads vs the memory-bandwidth "
               "roofline read around each run (and, given, the reference engine); load GB/s vs cat; peak RSS vs "
               "what the model needs; time to first token with weight streaming vs loading first",
       &RegisterGpt2Benchmarks, &Gpt2Figures},
      {"tiling", "tiling sink: virtual time of one Attention tiled on the device (AICPU, task update) vs host tiling "
                 "(RT2.0 reads valid_len back) vs tiled once for the worst case; GPT-2 117M f16 decode at 1 thread "
                 "with ge.tiling_schedule_optimize on vs off (tok/s, Attention's virtual time per token)",
       &RegisterTilingBenchmarks, &TilingFigures},
      {"pipeline", "pipeline stages: wall time per step of 4 trivial stages vs a plain function-call chain of the same "
                   "stage models (the hand-off cost), and with 8 steps in flight; GPT-2 117M f16, 8 greedy sequences "
                   "through 1, 2, 4 stages on as many devices: aggregate tok/s (virtual and wall) vs 1 stage, bubble "
                   "fraction",
       &RegisterPipelineBenchmarks, &PipelineFigures},
      {"stress", "the inference storm (npuflow stress): RunGraph requests/s on a small model with 10, 1,000 and 10,000 "
                 "client fibers vs the same requests back to back from one plain thread; GPT-2 117M f16 decode at 1 "
                 "thread with the race detector (--race-detect) on vs off; each fuzz target's executions/s (when build-fuzz/ "
                 "exists; NPUFLOW_BENCH_FUZZ_SECONDS each, default 10)",
       &RegisterStressBenchmarks, &StressFigures},
  };
  return areas;
}

}  // namespace npuflow::bench
