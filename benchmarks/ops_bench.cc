// Op device-kernel benchmarks (`npuflow bench ops`): the f32 MatMul kernel (op.MatMul, the
// cache-blocked GEMM of graph/kernels/matmul.h) against a naive i-j-k triple loop run in the same
// process.
//
//   matmul_768x768_gflops, matmul_768x3072_gflops
//     The device kernel's KernelFn called directly on this one thread for every block of the op's
//     own 910B tiling (block_idx 0 .. block_dim - 1, its tiling_key), over plain npu_sim
//     DeviceMemory: no runtime, no threads, so it compares like with like against the naive loop,
//     which is single-threaded too. M = K = 768, N = 768 or 3072.
//     The naive loop runs over the first kNaiveRows rows of A only (each row of an i-j-k loop
//     walks all of B the same way, so its rate does not depend on M) to keep the run short. Each
//     round runs one kernel pass and one naive pass back to back; the figures are the medians.
//   matmul_768x3072_runtime_gflops
//     The same launch through npu_sim::Runtime (LaunchKernel + SynchronizeStream, 2 worker
//     threads), against the direct single-thread kernel above.
//   gemv_f32_gbps, gemv_f16_gbps
//     graph::Gemv (the M = 1 path a decode step spends its time in) over a 192 MiB weight matrix
//     stored [N][768] (the Linear layout), one thread, in GB/s of weights read, against a plain
//     read of the same buffer (a 32-lane sum) in the same round. Paired rounds, medians.
#include "benchmarks/ops_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

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

constexpr std::int64_t kM = 768, kK = 768;
constexpr std::int64_t kNaiveRows = 4;

std::vector<float> RandomFloats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double Flops(std::int64_t m, std::int64_t n, std::int64_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

// One MatMul [kM, kK] x [kK, n] ready to launch: host inputs, the op's tiling and params.
struct MatMulSetup {
  std::int64_t n = 0;
  std::vector<float> a, b;
  const graph::OpDef* def = nullptr;
  graph::TilingInfo tiling;
  KernelParams params;
  Status status;

  explicit MatMulSetup(std::int64_t n_cols) : n(n_cols), a(RandomFloats(kM * kK, 1)), b(RandomFloats(kK * n_cols, 2)) {
    status = Init();
  }
  Status Init() {
    graph::RegisterBuiltinOps();
    NPUFLOW_ASSIGN_OR_RETURN(def, graph::OpRegistry::Global().Find("MatMul"));
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::ChipSpec chip, npu_sim::LoadChipSpec("910B"));
    const graph::OpDesc op("mm", "MatMul");
    const std::vector<TensorDesc> in = {{DataType::kFloat32, Shape{kM, kK}}, {DataType::kFloat32, Shape{kK, n}}};
    std::vector<TensorDesc> out;
    NPUFLOW_RETURN_IF_ERROR(graph::InferOutputs(*def, op, in, out));
    NPUFLOW_ASSIGN_OR_RETURN(tiling, def->tiling(op, in, {}, chip.aicore_count));
    NPUFLOW_ASSIGN_OR_RETURN(params, graph::EncodeKernelParams(*def, op, in, out));
    return Status::Ok();
  }
};

// The kernel over plain device memory, every block on the calling thread.
struct DirectMatMul {
  MatMulSetup setup;
  npu_sim::DeviceMemory memory{0, std::uint64_t{1} << 32};
  std::vector<std::uint64_t> args;
  const npu_sim::KernelDef* kernel = nullptr;
  Status status;

  explicit DirectMatMul(std::int64_t n) : setup(n) { status = setup.status.ok() ? Init() : setup.status; }
  Status Init() {
    NPUFLOW_ASSIGN_OR_RETURN(kernel, npu_sim::KernelRegistry::Global().Find(setup.def->device_kernel));
    auto put = [&](const void* data, std::uint64_t bytes) -> Status {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, memory.Allocate(bytes, npu_sim::Placement::kHbm, "ops bench"));
      if (data) {
        NPUFLOW_ASSIGN_OR_RETURN(auto m, memory.Map(p, bytes));
        std::memcpy(m.data(), data, bytes);
      }
      args.push_back(p.value);
      return Status::Ok();
    };
    NPUFLOW_RETURN_IF_ERROR(put(setup.a.data(), setup.a.size() * sizeof(float)));
    NPUFLOW_RETURN_IF_ERROR(put(setup.b.data(), setup.b.size() * sizeof(float)));
    NPUFLOW_RETURN_IF_ERROR(put(nullptr, static_cast<std::uint64_t>(kM * setup.n) * sizeof(float)));
    args.push_back(0);  // no workspace
    return put(&setup.params, graph::KernelParamsBytes(setup.params));
  }
  Status Run() {
    for (std::uint32_t block = 0; block < setup.tiling.block_dim; ++block) {
      npu_sim::KernelContext ctx(&memory, args, block, setup.tiling.block_dim, setup.tiling.tiling_key);
      NPUFLOW_RETURN_IF_ERROR(kernel->run(ctx));
    }
    return Status::Ok();
  }
};

// The i-j-k loop over the first `rows` rows of C.
void NaiveMatMul(const float* a, const float* b, float* c, std::int64_t rows, std::int64_t n, std::int64_t k) {
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0;
      for (std::int64_t kk = 0; kk < k; ++kk) acc += a[i * k + kk] * b[kk * n + j];
      c[i * n + j] = acc;
    }
}

// Built on first use and kept for the process, so repetitions reuse the buffers.
DirectMatMul& Direct(std::int64_t n) {
  static DirectMatMul square(kK), wide(3072);
  return n == kK ? square : wide;
}


// Each round runs the kernel once and the naive loop once, back to back, so the machine's noise
// hits a pair alike; the counters are the medians over the rounds.
void BM_MatMulPairedWithNaive(benchmark::State& state, std::int64_t n) {
  DirectMatMul& direct = Direct(n);
  if (!direct.status.ok()) return state.SkipWithError(direct.status.ToString().c_str());
  std::vector<float> c(static_cast<std::size_t>(kNaiveRows * n));
  std::vector<double> kernel, naive;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (Status s = direct.Run(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
    const auto t1 = Clock::now();
    NaiveMatMul(direct.setup.a.data(), direct.setup.b.data(), c.data(), kNaiveRows, n, kK);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
    const auto t2 = Clock::now();
    kernel.push_back(Flops(kM, n, kK) / std::chrono::duration<double>(t1 - t0).count());
    naive.push_back(Flops(kNaiveRows, n, kK) / std::chrono::duration<double>(t2 - t1).count());
  }
  state.counters["kernel_flop_per_second"] = MedianOf(kernel);
  state.counters["naive_flop_per_second"] = MedianOf(naive);
  state.counters["block_dim"] = direct.setup.tiling.block_dim;
}

// Through the runtime: one launch and synchronize per iteration, blocks on the worker threads.
struct RuntimeMatMul {
  MatMulSetup setup{3072};
  std::unique_ptr<npu_sim::Runtime> rt;
  npu_sim::Stream stream;
  std::vector<std::uint64_t> args;
  Status status;

  RuntimeMatMul() { status = setup.status.ok() ? Init() : setup.status; }
  Status Init() {
    NPUFLOW_ASSIGN_OR_RETURN(rt, npu_sim::Runtime::Create({.chips = {"910B"}, .workers = 2}));
    NPUFLOW_ASSIGN_OR_RETURN(stream, rt->CreateStream(0));
    auto put = [&](const void* data, std::uint64_t bytes) -> Status {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, rt->Malloc(0, bytes));
      if (data) NPUFLOW_RETURN_IF_ERROR(rt->MemcpyH2D(0, p, data, bytes));
      args.push_back(p.value);
      return Status::Ok();
    };
    NPUFLOW_RETURN_IF_ERROR(put(setup.a.data(), setup.a.size() * sizeof(float)));
    NPUFLOW_RETURN_IF_ERROR(put(setup.b.data(), setup.b.size() * sizeof(float)));
    NPUFLOW_RETURN_IF_ERROR(put(nullptr, static_cast<std::uint64_t>(kM * setup.n) * sizeof(float)));
    args.push_back(0);
    return put(&setup.params, graph::KernelParamsBytes(setup.params));
  }
  Status Run() {
    NPUFLOW_RETURN_IF_ERROR(
        rt->LaunchKernel(stream, setup.def->device_kernel, setup.tiling.block_dim, args, setup.tiling.tiling_key));
    return rt->SynchronizeStream(stream);
  }
};

void BM_MatMulRuntime(benchmark::State& state) {
  static RuntimeMatMul fixture;  // kept for the process: repetitions reuse it
  if (!fixture.status.ok()) return state.SkipWithError(fixture.status.ToString().c_str());
  for (auto _ : state) {
    if (Status s = fixture.Run(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(static_cast<double>(state.iterations()) * Flops(kM, 3072, kK)));
}

// The GEMV over a [N][kK] weight matrix of `dtype` filling kGemvBytes, paired with a plain read.
constexpr std::size_t kGemvBytes = std::size_t{192} << 20;

void BM_GemvPairedWithRead(benchmark::State& state, DataType dtype) {
  const std::size_t elem = dtype == DataType::kFloat32 ? 4 : 2;
  const std::int64_t n = static_cast<std::int64_t>(kGemvBytes / elem / kK);
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
  const std::vector<float> a = RandomFloats(kK, 3);
  std::vector<float> c(static_cast<std::size_t>(n));
  const graph::GemmMatrix b{.data = w.get(), .dtype = dtype, .ld = kK, .transposed = true};
  std::vector<double> gemv, read;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    graph::Gemv(a.data(), b, nullptr, c.data(), kK, 0, n);
    benchmark::DoNotOptimize(c.data());
    const auto t1 = Clock::now();
    benchmark::DoNotOptimize(SumStream(w.get(), kGemvBytes));
    const auto t2 = Clock::now();
    gemv.push_back(static_cast<double>(kGemvBytes) / std::chrono::duration<double>(t1 - t0).count());
    read.push_back(static_cast<double>(kGemvBytes) / std::chrono::duration<double>(t2 - t1).count());
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
  for (std::int64_t n : {kK, std::int64_t{3072}}) {
    benchmark::RegisterBenchmark(("BM_MatMulPairedWithNaive_" + std::to_string(n)).c_str(), BM_MatMulPairedWithNaive, n)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_MatMulRuntime", BM_MatMulRuntime)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_GemvPairedWithRead_f32", BM_GemvPairedWithRead, DataType::kFloat32)
      ->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_GemvPairedWithRead_f16", BM_GemvPairedWithRead, DataType::kFloat16)
      ->UseRealTime()->Unit(benchmark::kMillisecond);
}

std::vector<Figure> OpsFigures(const Results& r) {
  auto kernel = [&](const char* bench) { return Gflops(r, bench, "kernel_flop_per_second"); };
  auto naive = [&](const char* bench) { return Gflops(r, bench, "naive_flop_per_second"); };
  return {
      {"matmul_768x768_gflops", kernel("BM_MatMulPairedWithNaive_768"), "GFLOP/s",
       naive("BM_MatMulPairedWithNaive_768"), "naive i-j-k loop, one thread, paired rounds", "ratio >= 20"},
      {"matmul_768x3072_gflops", kernel("BM_MatMulPairedWithNaive_3072"), "GFLOP/s",
       naive("BM_MatMulPairedWithNaive_3072"), "naive i-j-k loop, one thread, paired rounds", "ratio >= 20"},
      {"matmul_768x3072_runtime_gflops", Gflops(r, "BM_MatMulRuntime", "items_per_second"), "GFLOP/s",
       kernel("BM_MatMulPairedWithNaive_3072"), "the kernel on one thread (above)", "ratio >= 1"},
      {"gemv_f32_gbps", Gflops(r, "BM_GemvPairedWithRead_f32", "gemv_bytes_per_second"), "GB/s",
       Gflops(r, "BM_GemvPairedWithRead_f32", "read_bytes_per_second"), "a plain read of the same bytes, paired rounds",
       "ratio -> 1"},
      {"gemv_f16_gbps", Gflops(r, "BM_GemvPairedWithRead_f16", "gemv_bytes_per_second"), "GB/s",
       Gflops(r, "BM_GemvPairedWithRead_f16", "read_bytes_per_second"), "a plain read of the same bytes, paired rounds",
       "ratio -> 1"},
  };
}

}  // namespace npuflow::bench
