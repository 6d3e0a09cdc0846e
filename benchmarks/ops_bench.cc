// Op device-kernel benchmarks (`npuflow bench ops`): the f32 MatMul device kernel (op.MatMul, the
// packed GEMM of graph/kernels/matmul.h) against OpenBLAS's cblas_sgemm on the same shapes and
// the same bytes, in the same process; the GEMV against a plain read.
//
//   matmul_MxKxN_1t_gflops, matmul_MxKxN_2t_gflops
//     GPT-2's prefill projections at M = 128 (K x N: 768 x 768 and 3072 x 3072, the issue's
//     squares, and the real 768 -> 2304, 768 -> 3072, 3072 -> 768), in GPT-2's layout: A [M, K]
//     row-major, the weights B stored [N, K] (transpose_b, the Linear layout), C [M, N]; OpenBLAS
//     gets cblas_sgemm(RowMajor, NoTrans, Trans) over the same device buffers. Ours is the
//     device kernel's KernelFn called for every block of the op's own 910B tiling over plain
//     npu_sim DeviceMemory, no runtime: 1t runs the blocks on this thread, 2t shares them
//     between 2 threads (a oneTBB arena of 2 over the blocks), as npu_sim's AICore workers do.
//     OpenBLAS runs with openblas_set_num_threads(1) or (2). Each round runs ours once and
//     OpenBLAS once, back to back, in alternating order; the figures are the medians of the rounds.
//     Before the first round both results are compared (a relative 1e-4, or the area fails).
//   matmul_MxKxN_runtime_gflops
//     The same launch through npu_sim::Runtime (LaunchKernel + SynchronizeStream, 2 worker
//     threads), against OpenBLAS on 2 threads, paired the same way (the two squares only).
//   gemv_f32_gbps, gemv_f16_gbps
//     graph::Gemv (the M = 1 path a decode step spends its time in) over a 192 MiB weight matrix
//     stored [N][768] (the Linear layout), one thread, in GB/s of weights read, against a plain
//     read of the same buffer (a 32-lane sum, the faster of a prefetched and an unprefetched one,
//     whichever of the two ways the GEMV picks by measuring) in the same round. Paired rounds, medians.
#include "benchmarks/ops_bench.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <fmt/format.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "base/large_buffer.h"
#include "graph/kernels/kernel_abi.h"
#include "graph/kernels/matmul.h"
#include "graph/ops/op_registry.h"
#include "npu_sim/chip_spec.h"
#include "npu_sim/device_memory.h"
#include "npu_sim/runtime.h"

namespace npuflow::bench {
namespace {

using graph::DataType;
using graph::KernelParams;
using graph::Shape;
using graph::TensorDesc;

struct GemmShape {
  std::int64_t m, k, n;
  bool runtime;  // also measured through npu_sim::Runtime
  std::string Name() const { return fmt::format("{}x{}x{}", m, k, n); }
};
constexpr std::array<GemmShape, 5> kShapes = {{{128, 768, 768, true},
                                               {128, 3072, 3072, true},
                                               {128, 768, 2304, false},
                                               {128, 768, 3072, false},
                                               {128, 3072, 768, false}}};
constexpr int kThreadCounts[] = {1, 2};

std::vector<float> RandomFloats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double Flops(const GemmShape& s) {
  return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
}

// One MatMul a [M, K] x b [N, K]^T ready to launch: host inputs, the op's tiling and params.
struct MatMulSetup {
  GemmShape shape;
  std::vector<float> a, b;
  const graph::OpDef* def = nullptr;
  graph::TilingInfo tiling;
  KernelParams params;
  Status status;

  explicit MatMulSetup(const GemmShape& s)
      : shape(s), a(RandomFloats(static_cast<std::size_t>(s.m * s.k), 1)),
        b(RandomFloats(static_cast<std::size_t>(s.n * s.k), 2)) {
    status = Init();
  }
  Status Init() {
    graph::RegisterBuiltinOps();
    NPUFLOW_ASSIGN_OR_RETURN(def, graph::OpRegistry::Global().Find("MatMul"));
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::ChipSpec chip, npu_sim::LoadChipSpec("910B"));
    graph::OpDesc op("mm", "MatMul");
    op.SetAttr("transpose_b", true);
    const std::vector<TensorDesc> in = {{DataType::kFloat32, Shape{shape.m, shape.k}},
                                        {DataType::kFloat32, Shape{shape.n, shape.k}}};
    std::vector<TensorDesc> out;
    NPUFLOW_RETURN_IF_ERROR(graph::InferOutputs(*def, op, in, out));
    NPUFLOW_ASSIGN_OR_RETURN(tiling, def->tiling(op, in, {}, chip.aicore_count));
    NPUFLOW_ASSIGN_OR_RETURN(params, graph::EncodeKernelParams(*def, op, in, out));
    return Status::Ok();
  }
};

// C = A B^T by OpenBLAS on its current thread count, in the kernel's layout.
void OpenBlasGemm(const GemmShape& s, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(s.m), static_cast<blasint>(s.n),
              static_cast<blasint>(s.k), 1.f, a, static_cast<blasint>(s.k), b, static_cast<blasint>(s.k), 0.f, c,
              static_cast<blasint>(s.n));
}

// The largest |x - y| relative to the largest |y|.
double RelativeError(const float* x, const float* y, std::size_t n) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// The kernel over plain device memory: A, B, C and the params in DeviceMemory, plus a second C
// that OpenBLAS writes (it reads the same A and B bytes).
struct DirectMatMul {
  MatMulSetup setup;
  npu_sim::DeviceMemory memory{0, std::uint64_t{1} << 32};
  std::vector<std::uint64_t> args;
  float *a = nullptr, *b = nullptr, *c = nullptr, *c_blas = nullptr;
  const npu_sim::KernelDef* kernel = nullptr;
  oneapi::tbb::task_arena arena{2};
  Status status;

  explicit DirectMatMul(const GemmShape& s) : setup(s) { status = setup.status.ok() ? Init() : setup.status; }
  Status Init() {
    NPUFLOW_ASSIGN_OR_RETURN(kernel, npu_sim::KernelRegistry::Global().Find(setup.def->device_kernel));
    auto put = [&](const void* data, std::uint64_t bytes) -> StatusOr<float*> {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, memory.Allocate(bytes, npu_sim::Placement::kHbm, "ops bench"));
      NPUFLOW_ASSIGN_OR_RETURN(auto m, memory.Map(p, bytes));
      if (data) std::memcpy(m.data(), data, bytes);
      args.push_back(p.value);
      return reinterpret_cast<float*>(m.data());
    };
    const GemmShape& s = setup.shape;
    NPUFLOW_ASSIGN_OR_RETURN(a, put(setup.a.data(), setup.a.size() * sizeof(float)));
    NPUFLOW_ASSIGN_OR_RETURN(b, put(setup.b.data(), setup.b.size() * sizeof(float)));
    NPUFLOW_ASSIGN_OR_RETURN(c, put(nullptr, static_cast<std::uint64_t>(s.m * s.n) * sizeof(float)));
    args.push_back(0);  // no workspace
    NPUFLOW_RETURN_IF_ERROR(put(&setup.params, graph::KernelParamsBytes(setup.params)).status());
    blas_c.resize(static_cast<std::size_t>(s.m * s.n));
    c_blas = blas_c.data();
    return Check();
  }
  // Ours and OpenBLAS agree (both sum in f32, in different orders).
  Status Check() {
    NPUFLOW_RETURN_IF_ERROR(Run(1));
    openblas_set_num_threads(1);
    OpenBlasGemm(setup.shape, a, b, c_blas);
    const double err = RelativeError(c, c_blas, blas_c.size());
    if (!(err < 1e-4))
      return Status::Failed("ops bench: MatMul {} differs from OpenBLAS by {} (relative)", setup.shape.Name(), err);
    return Status::Ok();
  }
  // One launch's block, as a unit runs it (with the launch's number: KernelContext::launch).
  Status RunBlock(std::uint32_t block, std::uint64_t launch) {
    npu_sim::KernelContext ctx(&memory, args, block, setup.tiling.block_dim, setup.tiling.tiling_key, launch);
    return kernel->run(ctx);
  }
  Status Run(int threads) {
    const std::uint32_t blocks = setup.tiling.block_dim;
    const std::uint64_t launch = npu_sim::NextKernelLaunch();
    if (threads == 1) {
      for (std::uint32_t block = 0; block < blocks; ++block) NPUFLOW_RETURN_IF_ERROR(RunBlock(block, launch));
      return Status::Ok();
    }
    std::vector<Status> results(blocks);
    arena.execute([&] {
      oneapi::tbb::parallel_for(std::uint32_t{0}, blocks,
                                [&](std::uint32_t block) { results[block] = RunBlock(block, launch); });
    });
    for (const Status& s : results) NPUFLOW_RETURN_IF_ERROR(s);
    return Status::Ok();
  }
  void RunOpenBlas() { OpenBlasGemm(setup.shape, a, b, c_blas); }

  std::vector<float> blas_c;
};

// Built on first use and kept for the process, so repetitions reuse the buffers.
DirectMatMul& Direct(std::size_t shape) {
  static std::vector<std::unique_ptr<DirectMatMul>> fixtures(kShapes.size());
  if (!fixtures[shape]) fixtures[shape] = std::make_unique<DirectMatMul>(kShapes[shape]);
  return *fixtures[shape];
}

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double>(to - from).count(); }

// Rounds of ours once and OpenBLAS once, back to back, so the machine's noise hits a pair alike;
// the counters are the medians over the rounds. The order alternates: OpenBLAS's threads spin a
// while after a call and TBB's briefly, so whichever runs second shares the cores with the
// other's leftovers as often as the other does.
class PairedRounds {
 public:
  template <typename Ours>
  Status Run(const GemmShape& shape, Ours&& ours, DirectMatMul& blas) {
    const bool ours_first = (ours_.size() % 2) == 0;
    double ours_s = 0, blas_s = 0;
    for (int turn = 0; turn < 2; ++turn) {
      const auto t0 = Clock::now();
      if ((turn == 0) == ours_first) {
        NPUFLOW_RETURN_IF_ERROR(ours());
        ours_s = Seconds(t0, Clock::now());
      } else {
        blas.RunOpenBlas();
        benchmark::DoNotOptimize(blas.c_blas);
        benchmark::ClobberMemory();
        blas_s = Seconds(t0, Clock::now());
      }
    }
    ours_.push_back(Flops(shape) / ours_s);
    blas_.push_back(Flops(shape) / blas_s);
    return Status::Ok();
  }
  void Report(benchmark::State& state) const {
    state.counters["ours_flop_per_second"] = MedianOf(ours_);
    state.counters["openblas_flop_per_second"] = MedianOf(blas_);
  }

 private:
  std::vector<double> ours_, blas_;
};

// Ours (every block of the kernel, direct) against OpenBLAS, on the same thread count.
void BM_MatMulPairedWithOpenBlas(benchmark::State& state, std::size_t shape, int threads) {
  DirectMatMul& direct = Direct(shape);
  if (!direct.status.ok()) return state.SkipWithError(direct.status.ToString().c_str());
  openblas_set_num_threads(threads);
  PairedRounds rounds;
  for (auto _ : state) {
    if (Status s = rounds.Run(kShapes[shape], [&] { return direct.Run(threads); }, direct); !s.ok())
      return state.SkipWithError(s.ToString().c_str());
  }
  rounds.Report(state);
  state.counters["block_dim"] = direct.setup.tiling.block_dim;
}

// Through the runtime: one launch and synchronize per round, blocks on its 2 worker threads.
struct RuntimeMatMul {
  MatMulSetup setup;
  std::unique_ptr<npu_sim::Runtime> rt;
  npu_sim::Stream stream;
  std::vector<std::uint64_t> args;
  Status status;

  explicit RuntimeMatMul(const GemmShape& s) : setup(s) { status = setup.status.ok() ? Init() : setup.status; }
  Status Init() {
    NPUFLOW_ASSIGN_OR_RETURN(rt, npu_sim::Runtime::Create({.chips = {"910B"}, .workers = 2}));
    NPUFLOW_ASSIGN_OR_RETURN(stream, rt->CreateStream(0));
    auto put = [&](const void* data, std::uint64_t bytes) -> Status {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, rt->Malloc(0, bytes));
      if (data) NPUFLOW_RETURN_IF_ERROR(rt->MemcpyH2D(0, p, data, bytes));
      args.push_back(p.value);
      return Status::Ok();
    };
    const GemmShape& s = setup.shape;
    NPUFLOW_RETURN_IF_ERROR(put(setup.a.data(), setup.a.size() * sizeof(float)));
    NPUFLOW_RETURN_IF_ERROR(put(setup.b.data(), setup.b.size() * sizeof(float)));
    NPUFLOW_RETURN_IF_ERROR(put(nullptr, static_cast<std::uint64_t>(s.m * s.n) * sizeof(float)));
    args.push_back(0);
    return put(&setup.params, graph::KernelParamsBytes(setup.params));
  }
  Status Run() {
    NPUFLOW_RETURN_IF_ERROR(
        rt->LaunchKernel(stream, setup.def->device_kernel, setup.tiling.block_dim, args, setup.tiling.tiling_key));
    return rt->SynchronizeStream(stream);
  }
};

void BM_MatMulRuntimePairedWithOpenBlas(benchmark::State& state, std::size_t shape) {
  static std::vector<std::unique_ptr<RuntimeMatMul>> fixtures(kShapes.size());  // kept for the process
  if (!fixtures[shape]) fixtures[shape] = std::make_unique<RuntimeMatMul>(kShapes[shape]);
  RuntimeMatMul& fixture = *fixtures[shape];
  if (!fixture.status.ok()) return state.SkipWithError(fixture.status.ToString().c_str());
  DirectMatMul& direct = Direct(shape);  // OpenBLAS's buffers
  if (!direct.status.ok()) return state.SkipWithError(direct.status.ToString().c_str());
  openblas_set_num_threads(2);
  PairedRounds rounds;
  for (auto _ : state) {
    if (Status s = rounds.Run(kShapes[shape], [&] { return fixture.Run(); }, direct); !s.ok())
      return state.SkipWithError(s.ToString().c_str());
  }
  rounds.Report(state);
}

// The GEMV over a [N][kGemvK] weight matrix of `dtype` filling kGemvBytes, paired with a plain read.
constexpr std::size_t kGemvBytes = std::size_t{192} << 20;
constexpr std::int64_t kGemvK = 768;

void BM_GemvPairedWithRead(benchmark::State& state, DataType dtype) {
  const std::size_t elem = dtype == DataType::kFloat32 ? 4 : 2;
  const std::int64_t n = static_cast<std::int64_t>(kGemvBytes / elem / kGemvK);
  LargeBuffer w = AllocateLargeBuffer(kGemvBytes);
  if (!w) return state.SkipWithError("cannot map the weight buffer");
  // Small values in every element, so the pages are resident and the sums stay finite.
  std::mt19937 rng(7);
  if (dtype == DataType::kFloat32) {
    auto* f = reinterpret_cast<float*>(w.get());
    for (std::size_t i = 0; i < kGemvBytes / 4; ++i) f[i] = static_cast<float>(rng() % 256) * (1.f / 1024);
  } else {
    auto* h = reinterpret_cast<std::uint16_t*>(w.get());
    for (std::size_t i = 0; i < kGemvBytes / 2; ++i) h[i] = graph::FloatToHalf(static_cast<float>(rng() % 256) * (1.f / 1024));
  }
  const std::vector<float> a = RandomFloats(kGemvK, 3);
  std::vector<float> c(static_cast<std::size_t>(n));
  const graph::GemmMatrix b{.data = w.get(), .dtype = dtype, .ld = kGemvK, .transposed = true};
  std::vector<double> gemv, read;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    graph::Gemv(a.data(), b, nullptr, c.data(), kGemvK, 0, n,
                graph::GemvPrefetchLead(kGemvBytes > graph::kGemvCachedWeightBytes));
    benchmark::DoNotOptimize(c.data());
    const auto t1 = Clock::now();
    benchmark::DoNotOptimize(SumStream(w.get(), kGemvBytes, true));
    const auto t2 = Clock::now();
    benchmark::DoNotOptimize(SumStream(w.get(), kGemvBytes, false));
    const auto t3 = Clock::now();
    gemv.push_back(static_cast<double>(kGemvBytes) / std::chrono::duration<double>(t1 - t0).count());
    // The GEMV runs the faster of its two ways (GemvReadTuner): so does its baseline.
    read.push_back(static_cast<double>(kGemvBytes) /
                   std::min(std::chrono::duration<double>(t2 - t1).count(), std::chrono::duration<double>(t3 - t2).count()));
  }
  state.counters["gemv_bytes_per_second"] = MedianOf(gemv);
  state.counters["read_bytes_per_second"] = MedianOf(read);
}

double Gflops(const Results& r, const std::string& bench, const std::string& counter) {
  auto it = r.find(bench);
  if (it == r.end()) return 0;
  auto c = it->second.counters.find(counter);
  return c == it->second.counters.end() ? 0 : c->second / 1e9;
}

}  // namespace

void RegisterOpsBenchmarks() {
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    for (int threads : kThreadCounts) {
      benchmark::RegisterBenchmark(fmt::format("BM_MatMulPairedWithOpenBlas_{}_{}t", kShapes[i].Name(), threads).c_str(),
                                   BM_MatMulPairedWithOpenBlas, i, threads)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
    if (kShapes[i].runtime)
      benchmark::RegisterBenchmark(fmt::format("BM_MatMulRuntimePairedWithOpenBlas_{}", kShapes[i].Name()).c_str(),
                                   BM_MatMulRuntimePairedWithOpenBlas, i)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_GemvPairedWithRead_f32", BM_GemvPairedWithRead, DataType::kFloat32)
      ->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_GemvPairedWithRead_f16", BM_GemvPairedWithRead, DataType::kFloat16)
      ->UseRealTime()->Unit(benchmark::kMillisecond);
}

std::vector<Figure> OpsFigures(const Results& r) {
  std::vector<Figure> figures;
  auto add = [&](const std::string& figure, const std::string& bench, const std::string& baseline_what) {
    figures.push_back({figure, Gflops(r, bench, "ours_flop_per_second"), "GFLOP/s",
                       Gflops(r, bench, "openblas_flop_per_second"), baseline_what, "ratio >= 0.7"});
  };
  for (const GemmShape& s : kShapes) {
    for (int threads : kThreadCounts)
      add(fmt::format("matmul_{}_{}t_gflops", s.Name(), threads),
          fmt::format("BM_MatMulPairedWithOpenBlas_{}_{}t", s.Name(), threads),
          fmt::format("OpenBLAS sgemm, {} thread{}, paired rounds", threads, threads > 1 ? "s" : ""));
    if (s.runtime)
      add(fmt::format("matmul_{}_runtime_gflops", s.Name()), fmt::format("BM_MatMulRuntimePairedWithOpenBlas_{}", s.Name()),
          "OpenBLAS sgemm, 2 threads, paired rounds");
  }
  figures.push_back({"gemv_f32_gbps", Gflops(r, "BM_GemvPairedWithRead_f32", "gemv_bytes_per_second"), "GB/s",
                     Gflops(r, "BM_GemvPairedWithRead_f32", "read_bytes_per_second"),
                     "a plain read of the same bytes, paired rounds", "ratio -> 1"});
  figures.push_back({"gemv_f16_gbps", Gflops(r, "BM_GemvPairedWithRead_f16", "gemv_bytes_per_second"), "GB/s",
                     Gflops(r, "BM_GemvPairedWithRead_f16", "read_bytes_per_second"),
                     "a plain read of the same bytes, paired rounds", "ratio -> 1"});
  return figures;
}

}  // namespace npuflow::bench
