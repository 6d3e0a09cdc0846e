// External weights, each against a baseline run in the same round of the same process:
//   conversion  Const -> FileConstant of a 500 MB model (50 x 10 MB weights), SHA-256 + writing,
//               in mode 1 (one file per weight) and mode 2 (one combined file), its SHA-256 on
//               oneTBB's threads and its writes on up to ConvertOptions::writers threads
//               vs the same SHA-256 (base/sha256.h, OpenSSL) over the same bytes in memory on
//               one thread: what hashing alone costs, without the threads or the writing
//   load        the 500 MB combined file into device memory through the WeightLoaderActor (10 MiB
//               chunks read straight into device memory, on the runtime's 2 I/O threads), from a
//               warm page cache into device memory already touched once
//               vs `cat FILE > /dev/null`
//   kernels     a small kernel's round trip (launch + synchronize) from the host, on a runtime with
//   during load one worker, while that runtime loads the 500 MB file: p50 and p99 with the reads
//               on the I/O threads vs with the reads inline in the loader's handler (io_threads 0),
//               where a kernel may wait behind a pread
//   I/O threads the same load with the reads inline in the loader's handler on a compute worker
//               (io_threads = 0, where they ran before issue 16) and with 1 I/O thread, each on
//               its own runtime, alternated in the same rounds
//   staging     the most host staging memory the load held, vs the file size (0: a plain file
//               needs no staging; encrypted files do)
// The weight directory is under $NPUFLOW_BENCH_DIR, else the system temp directory.
#include "benchmarks/weights_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include <benchmark/benchmark.h>

#include <fmt/format.h>
#include <oneapi/tbb/task_arena.h>

#include "base/sha256.h"
#include "graph/ir/compute_graph.h"
#include "npu_sim/runtime.h"
#include "weights/convert.h"
#include "weights/weight_loader.h"

namespace npuflow::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kWeights = 50;
constexpr std::uint64_t kWeightBytes = 10'000'000;  // 2,500,000 f32
constexpr std::uint64_t kModelBytes = kWeights * kWeightBytes;

struct Fixture {
  bool ok = false;
  std::string error;
  fs::path dir;
  std::vector<std::vector<std::uint8_t>> values;  // the weights
  std::string combined;                            // the mode-2 file, for the load
  std::vector<weights::ExternalWeightDesc> regions;
  // One runtime per I/O placement (io_threads 2, 0, 1), each with its own device copy.
  struct Target {
    std::unique_ptr<npu_sim::Runtime> rt;
    std::unique_ptr<weights::WeightLoader> loader;
    npu_sim::DevicePtr device_copy;
  };
  static constexpr int kIoThreads[] = {2, 0, 1};  // [0] is the default, the headline figure
  std::vector<Target> targets;

  static Fixture& Get() {
    static Fixture f = Make();
    return f;
  }

  std::unique_ptr<graph::ComputeGraph> Graph() const {
    auto g = std::make_unique<graph::ComputeGraph>("bench");
    for (int i = 0; i < kWeights; ++i) {
      graph::OpDesc op(fmt::format("w{}", i), "Const");
      graph::Tensor t;
      t.desc = graph::TensorDesc{graph::DataType::kFloat32, graph::Shape{static_cast<std::int64_t>(kWeightBytes / 4)}};
      t.data = values[static_cast<std::size_t>(i)];
      op.SetAttr("value", std::move(t));
      (void)g->AddNode(std::move(op));
    }
    return g;
  }

  static Fixture Make() {
    Fixture f;
    const char* base = std::getenv("NPUFLOW_BENCH_DIR");
    f.dir = fs::path(base != nullptr && *base ? base : fs::temp_directory_path().string()) /
            ("npuflow_weights_bench_" + std::to_string(::getpid()));
    std::error_code ec;
    fs::remove_all(f.dir, ec);
    fs::create_directories(f.dir, ec);
    std::mt19937_64 rng(7);
    for (int i = 0; i < kWeights; ++i) {
      std::vector<std::uint8_t> v(kWeightBytes);
      for (std::size_t k = 0; k < v.size(); k += 8) {
        const std::uint64_t r = rng();
        std::memcpy(v.data() + k, &r, std::min<std::size_t>(8, v.size() - k));
      }
      f.values.push_back(std::move(v));
    }
    // The combined file the load reads.
    auto g = f.Graph();
    auto converted = weights::ConvertConstToFileConstant(
        *g, {.mode = weights::ExternalWeightMode::kCombined, .dir = (f.dir / "load").string(), .model_name = "bench"});
    if (!converted.ok()) {
      f.error = std::string(converted.status().message());
      return f;
    }
    f.regions = converted->weights;
    f.combined = f.regions.empty() ? "" : f.regions[0].path;
    for (const int io : kIoThreads) {
      auto rt = npu_sim::Runtime::Create({.chips = {"910B"}, .io_threads = io});
      if (!rt.ok()) {
        f.error = std::string(rt.status().message());
        return f;
      }
      Target t;
      t.rt = std::move(rt).value();
      auto loader = weights::WeightLoader::Create(t.rt.get());
      auto dev = t.rt->Malloc(0, fs::file_size(f.combined));
      if (!loader.ok() || !dev.ok()) {
        f.error = "loader or device memory";
        return f;
      }
      t.loader = std::move(loader).value();
      t.device_copy = *dev;
      f.targets.push_back(std::move(t));
    }
    f.ok = true;
    return f;
  }
};


double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// `cat` as a process, the way a user would run it.
double ShellSeconds(const std::string& command) {
  const auto t0 = Clock::now();
  const int rc = std::system(command.c_str());
  const auto t1 = Clock::now();
  return rc == 0 ? Seconds(t0, t1) : -1;
}

// The hash the conversion computes, over the same bytes, by OpenSSL on the calling thread alone.
double Sha256Seconds(const Fixture& f) {
  const auto t0 = Clock::now();
  for (const std::vector<std::uint8_t>& v : f.values) {
    Sha256Digest d = Sha256(v.data(), v.size());
    benchmark::DoNotOptimize(d);
  }
  return Seconds(t0, Clock::now());
}

void BM_ConvertPairedWithSha256(benchmark::State& state) {
  Fixture& f = Fixture::Get();
  if (!f.ok) return state.SkipWithError(f.error.c_str());
  const auto mode = state.range(0) == 1 ? weights::ExternalWeightMode::kPerWeight : weights::ExternalWeightMode::kCombined;
  std::vector<double> convert, sha;
  int round = 0, hash_threads = 0, writer_threads = 0;
  for (auto _ : state) {
    const fs::path out = f.dir / ("convert" + std::to_string(round++));
    auto g = f.Graph();
    const double s = Sha256Seconds(f);
    // Every round starts with no dirty pages of earlier rounds (or other files) being written
    // back: otherwise the kernel throttles this round's writes by however much the last one left,
    // and rounds alternate between ~2 and ~0.5 GB/s.
    ::sync();
    const auto t0 = Clock::now();
    auto r = weights::ConvertConstToFileConstant(*g, {.mode = mode, .dir = out.string(), .model_name = "bench"});
    const auto t1 = Clock::now();
    std::error_code ec;
    fs::remove_all(out, ec);
    if (!r.ok()) return state.SkipWithError(std::string(r.status().message()).c_str());
    convert.push_back(kModelBytes / Seconds(t0, t1));
    sha.push_back(kModelBytes / s);
    hash_threads = r->hash_threads;
    writer_threads = r->writer_threads;
  }
  state.counters["convert_bytes_per_second"] = MedianOf(convert);
  state.counters["sha256_one_thread_bytes_per_second"] = MedianOf(sha);
  state.counters["hash_threads"] = hash_threads;
  state.counters["writer_threads"] = writer_threads;
}

// One load of the combined file through `t`'s loader: GB/s, or a negative value on an error.
double LoadOnce(const Fixture& f, const Fixture::Target& t, std::string& error) {
  weights::WeightLoadRequest req{.device = 0, .path = f.combined};
  for (const weights::ExternalWeightDesc& w : f.regions)
    req.regions.push_back({w.offset, w.size, t.device_copy + w.offset, std::nullopt, "", w.nodes.empty() ? "" : w.nodes[0]});
  const auto t0 = Clock::now();
  auto r = t.loader->Load(std::move(req)).Get();
  const auto t1 = Clock::now();
  if (!r.ok()) {
    error = std::string(r.status().message());
    return -1;
  }
  return kModelBytes / Seconds(t0, t1);
}

void BM_LoadPairedWithCat(benchmark::State& state) {
  Fixture& f = Fixture::Get();
  if (!f.ok) return state.SkipWithError(f.error.c_str());
  const std::uint64_t file_bytes = fs::file_size(f.combined);
  std::string error;
  // Every target's device copy is touched once first: the rounds compare reads, not first touches.
  for (const Fixture::Target& t : f.targets)
    if (LoadOnce(f, t, error) < 0) return state.SkipWithError(error.c_str());
  const std::size_t n = f.targets.size();
  std::vector<std::vector<double>> load(n);
  std::vector<double> cat;
  int round = 0;
  for (auto _ : state) {
    const double c = ShellSeconds("cat '" + f.combined + "' > /dev/null");
    if (c <= 0) return state.SkipWithError("cat failed");
    cat.push_back(static_cast<double>(file_bytes) / c);
    for (std::size_t k = 0; k < n; ++k) {  // a different target goes first each round
      const std::size_t i = (k + static_cast<std::size_t>(round)) % n;
      const double gbs = LoadOnce(f, f.targets[i], error);
      if (gbs < 0) return state.SkipWithError(error.c_str());
      load[i].push_back(gbs);
    }
    ++round;
  }
  state.counters["load_bytes_per_second"] = MedianOf(load[0]);
  state.counters["load_inline_bytes_per_second"] = MedianOf(load[1]);
  state.counters["load_1io_bytes_per_second"] = MedianOf(load[2]);
  state.counters["cat_bytes_per_second"] = MedianOf(cat);
  state.counters["peak_staging_bytes"] = static_cast<double>(f.targets[0].loader->stats().peak_staging_bytes);
  state.counters["file_bytes"] = static_cast<double>(file_bytes);
}


// A one-worker runtime loading the combined file, and a small kernel on another stream.
struct KernelProbe {
  std::unique_ptr<npu_sim::Runtime> rt;
  std::unique_ptr<weights::WeightLoader> loader;
  npu_sim::DevicePtr device_copy, scratch;
  npu_sim::Stream stream;
  std::vector<double> p50, p99;  // per round, microseconds

  static StatusOr<KernelProbe> Make(const Fixture& f, int io_threads) {
    KernelProbe p;
    NPUFLOW_ASSIGN_OR_RETURN(p.rt, npu_sim::Runtime::Create({.chips = {"910B"}, .workers = 1, .io_threads = io_threads}));
    NPUFLOW_ASSIGN_OR_RETURN(p.loader, weights::WeightLoader::Create(p.rt.get()));
    NPUFLOW_ASSIGN_OR_RETURN(p.device_copy, p.rt->Malloc(0, fs::file_size(f.combined)));
    NPUFLOW_ASSIGN_OR_RETURN(p.scratch, p.rt->Malloc(0, 4096));
    NPUFLOW_ASSIGN_OR_RETURN(p.stream, p.rt->CreateStream(0));
    return p;
  }

  // One load, with kernels launched and waited for one after another until it ends.
  Status Round(const Fixture& f) {
    weights::WeightLoadRequest req{.device = 0, .path = f.combined};
    for (const weights::ExternalWeightDesc& w : f.regions)
      req.regions.push_back({w.offset, w.size, device_copy + w.offset, std::nullopt, "", ""});
    auto done = loader->Load(std::move(req));
    std::vector<double> us;
    while (!done.WaitFor(std::chrono::seconds(0))) {
      const auto t0 = Clock::now();
      NPUFLOW_RETURN_IF_ERROR(rt->LaunchKernel(stream, "fill_f32", 1, {scratch.value, 1024, 0}));
      NPUFLOW_RETURN_IF_ERROR(rt->SynchronizeStream(stream));
      us.push_back(Seconds(t0, Clock::now()) * 1e6);
    }
    NPUFLOW_RETURN_IF_ERROR(done.Get().status());
    if (us.empty()) return Status::Ok();
    std::sort(us.begin(), us.end());
    p50.push_back(us[us.size() / 2]);
    p99.push_back(us[(us.size() - 1) * 99 / 100]);
    return Status::Ok();
  }
};

void BM_KernelDuringLoad(benchmark::State& state) {
  Fixture& f = Fixture::Get();
  if (!f.ok) return state.SkipWithError(f.error.c_str());
  // [0]: 2 I/O threads (the default), [1]: inline in the handler, [2]: 1 I/O thread.
  std::vector<KernelProbe> probes;
  for (const int io : {2, 0, 1}) {
    auto p = KernelProbe::Make(f, io);
    if (!p.ok()) return state.SkipWithError(std::string(p.status().message()).c_str());
    probes.push_back(std::move(p).value());
  }
  // Device copies touched once first; then the runtimes alternate, the first one rotating.
  for (KernelProbe& p : probes) {
    if (Status s = p.Round(f); !s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
    p.p50.clear();
    p.p99.clear();
  }
  std::size_t round = 0;
  for (auto _ : state) {
    for (std::size_t k = 0; k < probes.size(); ++k) {
      KernelProbe& p = probes[(k + round) % probes.size()];
      if (Status s = p.Round(f); !s.ok()) return state.SkipWithError(std::string(s.message()).c_str());
    }
    ++round;
  }
  state.counters["kernel_p50_us"] = MedianOf(probes[0].p50);
  state.counters["kernel_p99_us"] = MedianOf(probes[0].p99);
  state.counters["kernel_p50_us_inline"] = MedianOf(probes[1].p50);
  state.counters["kernel_p99_us_inline"] = MedianOf(probes[1].p99);
  state.counters["kernel_p50_us_1io"] = MedianOf(probes[2].p50);
  state.counters["kernel_p99_us_1io"] = MedianOf(probes[2].p99);
}

}  // namespace

void RegisterWeightsBenchmarks() {
  benchmark::RegisterBenchmark("BM_ConvertMode1PairedWithSha256", BM_ConvertPairedWithSha256)
      ->Arg(1)->Iterations(2)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_ConvertMode2PairedWithSha256", BM_ConvertPairedWithSha256)
      ->Arg(2)->Iterations(2)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_LoadPairedWithCat", BM_LoadPairedWithCat)
      ->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_KernelDuringLoad", BM_KernelDuringLoad)
      ->Iterations(4)->UseRealTime()->Unit(benchmark::kMillisecond);
}

namespace {

// What the conversion is compared with, and on how many threads it ran.
std::string Sha256Baseline(const Results& r, const std::string& bench) {
  return fmt::format("SHA-256 of the same bytes, OpenSSL, 1 thread, same run (the conversion: {:.0f} hashing, "
                     "up to {:.0f} writing threads)",
                     Counter(r, bench, "hash_threads"), Counter(r, bench, "writer_threads"));
}

}  // namespace

std::vector<Figure> WeightsFigures(const Results& r) {
  const std::string m1 = "BM_ConvertMode1PairedWithSha256", m2 = "BM_ConvertMode2PairedWithSha256";
  const std::string ld = "BM_LoadPairedWithCat", kd = "BM_KernelDuringLoad";
  return {
      {"convert_mode1_500mb", Counter(r, m1, "convert_bytes_per_second") / 1e9, "GB/s",
       Counter(r, m1, "sha256_one_thread_bytes_per_second") / 1e9, Sha256Baseline(r, m1), "ratio >= 0.5"},
      {"convert_mode2_500mb", Counter(r, m2, "convert_bytes_per_second") / 1e9, "GB/s",
       Counter(r, m2, "sha256_one_thread_bytes_per_second") / 1e9, Sha256Baseline(r, m2), "ratio >= 0.5"},
      {"load_500mb_combined", Counter(r, ld, "load_bytes_per_second") / 1e9, "GB/s",
       Counter(r, ld, "cat_bytes_per_second") / 1e9, "cat FILE > /dev/null, same run", "value >= 1.5"},
      {"load_vs_target", Counter(r, ld, "load_bytes_per_second") / 1e9, "GB/s", 1.5,
       "the external-weights issue's floor, 1.5 GB/s", "ratio >= 1", true},
      {"load_peak_staging", Counter(r, ld, "peak_staging_bytes") / 1e6, "MB", Counter(r, ld, "file_bytes") / 1e6,
       "the file's size", "value <= 20.98 (2 x 10 MiB)"},
      {"load_io_threads_vs_inline", Counter(r, ld, "load_bytes_per_second") / 1e9, "GB/s",
       Counter(r, ld, "load_inline_bytes_per_second") / 1e9,
       "the same load with the reads in the loader's handler on a compute worker (io_threads 0, before issue 16), "
       "same rounds",
       "ratio >= 0.95"},
      {"load_1_io_thread", Counter(r, ld, "load_1io_bytes_per_second") / 1e9, "GB/s",
       Counter(r, ld, "load_bytes_per_second") / 1e9, "the same load on 2 I/O threads (the default), same rounds",
       "ratio <= 1 (else 1 thread should be the default)"},
      {"kernel_during_load_p50", Counter(r, kd, "kernel_p50_us"), "us", Counter(r, kd, "kernel_p50_us_inline"),
       "the same kernel while the same runtime (1 worker) loads with the reads inline in its handler, same rounds",
       "ratio <= 1"},
      {"kernel_during_load_p99", Counter(r, kd, "kernel_p99_us"), "us", Counter(r, kd, "kernel_p99_us_inline"),
       "the same, p99", "ratio <= 0.5"},
      {"kernel_during_load_p50_1_io_thread", Counter(r, kd, "kernel_p50_us_1io"), "us", Counter(r, kd, "kernel_p50_us"),
       "the same kernel while the load reads on 2 I/O threads (the default), same rounds",
       "ratio >= 0.8 (what the second I/O thread costs kernels)"},
  };
}

}  // namespace npuflow::bench
