#include "apps/run_cmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "base/aes_gcm.h"
#include "graph/model_file/model_file.h"
#include "graph/ops/op_registry.h"
#include "graph/ir/tensor_access.h"
#include "scheduler/model_manager.h"
#include "scheduler/pipeline_executor.h"
#include "scheduler/session.h"
#include "scheduler/v2/executors.h"

namespace npuflow::apps {
namespace {

using Clock = std::chrono::steady_clock;
using graph::CompiledModel;
using graph::Tensor;

constexpr std::uint32_t kGraphId = 1;
constexpr int kMaxStreams = 64;

// What one measured request left behind.
struct RequestRecord {
  double wall_ms = 0;
  std::optional<double> virtual_us;       // nnexecute only
  std::vector<std::uint64_t> checksums;   // per output
  Status status;
};

struct Measured {
  std::vector<RequestRecord> requests;  // by request index
  std::vector<Tensor> outputs;          // of request 0
  double wall_s = 0;                    // first request started .. last one finished
  std::optional<double> virtual_s;      // the same on the host clocks (nnexecute)
  std::uint64_t host_interactions = 0;  // over the measured requests
  int warmup = 0;
};

std::string Join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// splitmix64: a fixed generator, so a seed gives the same inputs everywhere.
std::uint64_t NextRandom(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

StatusOr<std::uint64_t> StaticBytes(const graph::IoDef& io, std::string_view what, std::size_t index) {
  auto bytes = io.desc.bytes();
  if (!bytes)
    return Status::Unsupported("{} {} '{}' has the dynamic shape {}; npuflow run needs static shapes", what, index,
                               io.name, io.desc.ToString());
  return *bytes;
}

StatusOr<std::vector<Tensor>> RandomInputs(const std::vector<graph::IoDef>& ios, std::uint64_t seed) {
  std::vector<Tensor> inputs;
  std::uint64_t state = seed;
  for (std::size_t i = 0; i < ios.size(); ++i) {
    const graph::IoDef& io = ios[i];
    NPUFLOW_RETURN_IF_ERROR(StaticBytes(io, "input", i).status());
    Tensor t = graph::ZeroTensor(io.desc);
    const std::int64_t n = io.desc.shape.num_elements().value_or(0);
    for (std::int64_t e = 0; e < n; ++e) {
      if (graph::IsFloat(io.desc.dtype)) {
        const double u = static_cast<double>(NextRandom(state) >> 11) * 0x1.0p-53;  // [0, 1)
        graph::StoreF(t, static_cast<std::size_t>(e), static_cast<float>(2 * u - 1));
      } else {
        graph::StoreI(t, static_cast<std::size_t>(e), 1);
      }
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

StatusOr<std::vector<Tensor>> InputsFromFiles(const std::vector<graph::IoDef>& ios, const std::vector<std::string>& files) {
  if (files.size() != ios.size()) {
    std::vector<std::string> names;
    for (const auto& io : ios) names.push_back(fmt::format("'{}' {}", io.name, io.desc.ToString()));
    return Status::ParamInvalid("--inputs: the model takes {} input{} ({}), got {} file{}", ios.size(),
                                ios.size() == 1 ? "" : "s", Join(names), files.size(),
                                files.size() == 1 ? "" : "s");
  }
  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const graph::IoDef& io = ios[i];
    NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t want, StaticBytes(io, "input", i));
    std::error_code ec;
    const std::uintmax_t have = std::filesystem::file_size(files[i], ec);
    if (ec) return Status::NotFound("--inputs: input {} '{}': cannot read '{}': {}", i, io.name, files[i], ec.message());
    if (have != want)
      return Status::ParamInvalid("--inputs: input {} '{}' ({}) takes {} bytes, file '{}' has {}", i, io.name,
                                  io.desc.ToString(), want, files[i], have);
    Tensor t = graph::ZeroTensor(io.desc);
    std::ifstream in(files[i], std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(t.data.data()), static_cast<std::streamsize>(want)))
      return Status::Failed("--inputs: input {} '{}': reading {} bytes of '{}' failed", i, io.name, want, files[i]);
    inputs.push_back(std::move(t));
  }
  return inputs;
}

// An RT2.0 model's inputs with the shapes --input-shape gives ("x:1,37"); inputs not named keep
// their declared shape, which must then be static.
StatusOr<std::vector<graph::IoDef>> ResolveInputShapes(const exe::ModelDesc& desc, const std::vector<std::string>& specs) {
  std::vector<graph::IoDef> ios;
  for (const exe::ModelIoDesc& d : desc.inputs) ios.push_back(graph::IoDef{d.name, d.desc, {}});
  std::vector<bool> given(ios.size(), false);
  for (const std::string& spec : specs) {
    const std::size_t colon = spec.rfind(':');
    if (colon == std::string::npos)
      return Status::ParamInvalid("--input-shape '{}': expected NAME:D0,D1,... (NAME: for a scalar)", spec);
    const std::string name = spec.substr(0, colon);
    auto it = std::find_if(ios.begin(), ios.end(), [&](const graph::IoDef& io) { return io.name == name; });
    if (it == ios.end()) {
      std::vector<std::string> names;
      for (const auto& io : ios) names.push_back(fmt::format("{} {}", io.name, io.desc.ToString()));
      return Status::ParamInvalid("--input-shape '{}': the model has no input '{}' (inputs: {})", spec, name,
                                  Join(names));
    }
    std::vector<std::int64_t> dims;
    const std::string list = spec.substr(colon + 1);
    for (std::size_t pos = 0; !list.empty() && pos <= list.size();) {
      const std::size_t comma = std::min(list.find(',', pos), list.size());
      const std::string item = list.substr(pos, comma - pos);
      std::int64_t v = -1;
      auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
      if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 0)
        return Status::ParamInvalid("--input-shape '{}': '{}' is not a size (a whole number >= 0)", spec, item);
      dims.push_back(v);
      pos = comma + 1;
    }
    const graph::Shape& want = it->desc.shape;
    if (dims.size() != want.rank())
      return Status::ParamInvalid("--input-shape '{}': rank {}, input '{}' is {}", spec, dims.size(), name,
                                  it->desc.ToString());
    for (std::size_t k = 0; k < dims.size(); ++k)
      if (want.dim(k).is_static() && want.dim(k).size != dims[k])
        return Status::ParamInvalid("--input-shape '{}': dim {} is {}, input '{}' is {}", spec, k, dims[k], name,
                                    it->desc.ToString());
    std::vector<graph::Dim> resolved;
    for (std::int64_t d : dims) resolved.push_back(graph::Dim::Static(d));
    it->desc.shape = graph::Shape(std::move(resolved));
    given[it - ios.begin()] = true;
  }
  for (std::size_t i = 0; i < ios.size(); ++i)
    if (!ios[i].desc.shape.is_static())
      return Status::ParamInvalid("input '{}' is {}: give its shape with --input-shape {}:D0,D1,...", ios[i].name,
                                  ios[i].desc.ToString(), ios[i].name);
  return ios;
}

std::vector<std::uint64_t> Checksums(const std::vector<Tensor>& outputs) {
  std::vector<std::uint64_t> sums;
  sums.reserve(outputs.size());
  for (const Tensor& t : outputs) sums.push_back(Fnv1a64(t.data.data(), t.data.size()));
  return sums;
}

// Nearest rank: the smallest value with at least p% of the values at or below it.
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

std::string SanitizedName(std::string_view name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  return s;
}

StatusOr<std::uint64_t> HostInteractions(npu_sim::Runtime& rt, int device) {
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DeviceStats stats, rt.Stats(device));
  return stats.host_interactions;
}

// nnexecute: `streams` client threads, request i on thread i % streams, after one warm-up each.
StatusOr<Measured> RunNnExecute(scheduler::Session& session, npu_sim::Runtime& rt, int device,
                                const std::vector<Tensor>& inputs, const RunArgs& args) {
  const int threads = args.streams;
  Measured m;
  m.warmup = threads;
  m.requests.resize(static_cast<std::size_t>(args.requests));
  std::vector<Status> warmup_status(threads);
  std::vector<npu_sim::VTime> start_clock(threads, 0), end_clock(threads, 0);
  std::latch warmed(threads), go(1);
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t) {
    clients.emplace_back([&, t] {
      auto warm = session.RunGraph(kGraphId, inputs);
      warmup_status[t] = warm.status();
      warmed.count_down();
      go.wait();
      if (!warm.ok()) return;
      start_clock[t] = end_clock[t] = rt.HostClock();
      for (int i = t; i < args.requests; i += threads) {
        RequestRecord& r = m.requests[static_cast<std::size_t>(i)];
        const npu_sim::VTime v0 = rt.HostClock();
        const auto w0 = Clock::now();
        auto outs = session.RunGraph(kGraphId, inputs);
        const auto w1 = Clock::now();
        const npu_sim::VTime v1 = rt.HostClock();
        end_clock[t] = v1;
        r.wall_ms = std::chrono::duration<double, std::milli>(w1 - w0).count();
        r.virtual_us = static_cast<double>(v1 - v0) / 1e3;
        if (!outs.ok()) {
          r.status = outs.status();
          return;  // this thread's later requests are not run; the first error is reported
        }
        r.checksums = Checksums(*outs);
        if (i == 0) m.outputs = std::move(*outs);
      }
    });
  }
  warmed.wait();
  auto before = HostInteractions(rt, device);
  const auto w0 = Clock::now();
  go.count_down();
  for (auto& c : clients) c.join();
  const auto w1 = Clock::now();
  auto after = HostInteractions(rt, device);

  for (int t = 0; t < threads; ++t)
    if (!warmup_status[t].ok()) return warmup_status[t].WithContext(fmt::format("warm-up request of client thread {}", t));
  // A thread stops only at a failed request: when none failed, every request ran.
  for (std::size_t i = 0; i < m.requests.size(); ++i)
    if (!m.requests[i].status.ok()) return m.requests[i].status.WithContext(fmt::format("request {}", i));
  NPUFLOW_RETURN_IF_ERROR(before.status());
  NPUFLOW_RETURN_IF_ERROR(after.status());
  m.host_interactions = *after - *before;
  m.wall_s = std::chrono::duration<double>(w1 - w0).count();
  // The span of the virtual host clocks: from the earliest start to the latest end over threads
  // that ran a request (each clock was brought to the device's time by its warm-up).
  npu_sim::VTime v_start = 0, v_end = 0;
  bool any = false;
  for (int t = 0; t < threads && t < args.requests; ++t) {
    v_start = any ? std::min(v_start, start_clock[t]) : start_clock[t];
    v_end = any ? std::max(v_end, end_clock[t]) : end_clock[t];
    any = true;
  }
  m.virtual_s = static_cast<double>(v_end - v_start) / 1e9;
  return m;
}

// What the Run loop's callbacks share with the pushing thread. Owned by the callbacks too, so a
// callback that comes late never touches freed memory.
struct AsyncState {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Clock::time_point> pushed, done_at;
  std::vector<RequestRecord> records;
  std::vector<Tensor> outputs;
  std::size_t done = 0;
  std::vector<bool> answered;
};

// One request through the Run loop, waited for.
Status WarmUpRunLoop(scheduler::Session& session, const std::vector<Tensor>& inputs) {
  // Shared with the callback, which may outlive this scope if the push itself failed.
  struct Warm {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Status> status;
  };
  auto warm = std::make_shared<Warm>();
  NPUFLOW_RETURN_IF_ERROR(session
                              .RunGraphAsync(kGraphId, inputs,
                                             [warm](Status s, std::vector<Tensor>) {
                                               std::lock_guard<std::mutex> lock(warm->mu);
                                               warm->status = std::move(s);
                                               warm->cv.notify_all();
                                             })
                              .WithContext("warm-up request"));
  std::unique_lock<std::mutex> lock(warm->mu);
  warm->cv.wait(lock, [&] { return warm->status.has_value(); });
  return warm->status->WithContext("warm-up request");
}

// runloop: one warm-up through the loop, then every request pushed at once.
StatusOr<Measured> RunRunLoop(scheduler::Session& session, npu_sim::Runtime& rt, int device,
                              const std::vector<Tensor>& inputs, const RunArgs& args) {
  Measured m;
  m.warmup = 1;
  NPUFLOW_RETURN_IF_ERROR(WarmUpRunLoop(session, inputs));

  const auto n = static_cast<std::size_t>(args.requests);
  auto state = std::make_shared<AsyncState>();
  state->pushed.resize(n);
  state->done_at.resize(n);
  state->records.resize(n);
  state->answered.assign(n, false);
  NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t before, HostInteractions(rt, device));
  std::size_t accepted = 0;
  Status push_error;
  for (std::size_t i = 0; i < n; ++i) {
    state->pushed[i] = Clock::now();
    Status s = session.RunGraphAsync(kGraphId, inputs, [state, i](Status status, std::vector<Tensor> outs) {
      const auto now = Clock::now();
      // Callbacks run on an actor worker: checksums are cheap, the lock is held briefly.
      std::vector<std::uint64_t> sums = status.ok() ? Checksums(outs) : std::vector<std::uint64_t>{};
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->answered[i]) return;
      state->answered[i] = true;
      state->done_at[i] = now;
      state->records[i].status = std::move(status);
      state->records[i].checksums = std::move(sums);
      if (i == 0) state->outputs = std::move(outs);
      ++state->done;
      state->cv.notify_all();
    });
    if (!s.ok()) {
      push_error = s.WithContext(fmt::format("request {}", i));
      break;
    }
    ++accepted;
  }
  {
    std::unique_lock<std::mutex> lock(state->mu);
    // A push that failed may still have answered its callback; count only the accepted ones.
    state->cv.wait(lock, [&] {
      std::size_t answered = 0;
      for (std::size_t i = 0; i < accepted; ++i) answered += state->answered[i] ? 1 : 0;
      return answered == accepted;
    });
  }
  NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t after, HostInteractions(rt, device));
  std::lock_guard<std::mutex> lock(state->mu);
  for (std::size_t i = 0; i < accepted; ++i)
    if (!state->records[i].status.ok()) return state->records[i].status.WithContext(fmt::format("request {}", i));
  NPUFLOW_RETURN_IF_ERROR(push_error);
  Clock::time_point last = state->pushed[0];
  for (std::size_t i = 0; i < n; ++i) {
    state->records[i].wall_ms = std::chrono::duration<double, std::milli>(state->done_at[i] - state->pushed[i]).count();
    last = std::max(last, state->done_at[i]);
  }
  m.requests = std::move(state->records);
  m.outputs = std::move(state->outputs);
  m.wall_s = std::chrono::duration<double>(last - state->pushed[0]).count();
  m.host_interactions = after - before;
  return m;
}

Status WriteOutputs(const std::vector<graph::IoDef>& ios, const std::vector<Tensor>& outputs, const std::string& dir,
                    std::ostream& out) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Failed("--outputs: cannot create directory '{}': {}", dir, ec.message());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const std::string path =
        (std::filesystem::path(dir) / fmt::format("{}_{}.bin", i, SanitizedName(ios[i].name))).string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(outputs[i].data.data()), static_cast<std::streamsize>(outputs[i].data.size()));
    if (!f.good()) return Status::Failed("--outputs: writing output {} '{}' to '{}' failed", i, ios[i].name, path);
    out << fmt::format("wrote output {} '{}' ({} bytes) to {}\n", i, ios[i].name, outputs[i].data.size(), path);
  }
  return Status::Ok();
}

void PrintSummary(const std::vector<graph::IoDef>& ios, const Measured& m, const RunArgs& args, std::ostream& out) {
  const std::size_t n = m.requests.size();
  for (std::size_t o = 0; o < ios.size(); ++o) {
    graph::IoDef io = ios[o];
    if (o < m.outputs.size()) io.desc = m.outputs[o].desc;  // the shape request 0 produced
    const std::uint64_t sum = o < m.requests[0].checksums.size() ? m.requests[0].checksums[o] : 0;
    std::size_t differ = 0;
    for (const RequestRecord& r : m.requests) differ += (o < r.checksums.size() && r.checksums[o] == sum) ? 0 : 1;
    out << fmt::format("output {} '{}' {} fnv1a64 {:016x} ({})\n", o, io.name, io.desc.ToString(), sum,
                       differ == 0 ? fmt::format("the same in all {} requests", n)
                                   : fmt::format("differs from request 0's in {} of {} requests", differ, n));
  }
  std::vector<double> wall, virt;
  for (const RequestRecord& r : m.requests) {
    wall.push_back(r.wall_ms);
    if (r.virtual_us) virt.push_back(*r.virtual_us);
  }
  out << fmt::format("latency wall ms:     p50 {:.3f}  p90 {:.3f}  p99 {:.3f}{}\n", Percentile(wall, 50),
                     Percentile(wall, 90), Percentile(wall, 99),
                     args.mode == "runloop" ? "  (push to callback, including the wait in the queue)" : "");
  if (virt.size() == n) {
    out << fmt::format("latency virtual us:  p50 {:.1f}  p90 {:.1f}  p99 {:.1f}\n", Percentile(virt, 50),
                       Percentile(virt, 90), Percentile(virt, 99));
  } else {
    out << "latency virtual us:  n/a (the Run loop synchronizes on an actor thread; no host clock sees a request)\n";
  }
  const double wall_rate = m.wall_s > 0 ? static_cast<double>(n) / m.wall_s : 0;
  const std::string virt_rate = m.virtual_s && *m.virtual_s > 0
                                    ? fmt::format("{:.1f}", static_cast<double>(n) / *m.virtual_s)
                                    : std::string("n/a");
  out << fmt::format("throughput: {:.1f} inferences/s wall, {} inferences/s virtual\n", wall_rate, virt_rate);
  out << fmt::format("host interactions per inference: {:.2f}\n",
                     static_cast<double>(m.host_interactions) / static_cast<double>(n));
}

// An RT2.0 model, loaded: nnexecute from --streams client threads, then the summary and the profile.
Status RunV2Loaded(const RunArgs& args, scheduler::Session& session, scheduler::ModelManager& mm,
                   const std::vector<Tensor>& inputs, const std::vector<graph::IoDef>& output_ios, std::ostream& out) {
  NPUFLOW_ASSIGN_OR_RETURN(std::shared_ptr<v2::RtV2SimpleExecutor> executor, session.GetLoadedV2(kGraphId));
  const int device = 0;
  StatusOr<Measured> measured = RunNnExecute(session, mm.runtime(), device, inputs, args);
  if (!measured.ok()) return measured.status();
  out << fmt::format("ran {} request{} on RT2.0 ({} instance{}; {} warm-up not counted)\n", args.requests,
                     args.requests == 1 ? "" : "s", executor->instances(), executor->instances() == 1 ? "" : "s",
                     measured->warmup);
  PrintSummary(output_ios, *measured, args, out);
  if (args.profile) out << "host profile of Main (top 10 nodes by host time, warm-up included):\n" << executor->ProfileReport(10);
  if (!args.outputs_dir.empty()) NPUFLOW_RETURN_IF_ERROR(WriteOutputs(output_ios, measured->outputs, args.outputs_dir, out));
  if (!args.trace.empty()) {
    NPUFLOW_RETURN_IF_ERROR(mm.runtime().WriteTrace(args.trace).WithContext("--trace"));
    out << "trace: " << args.trace << "\n";
  }
  return session.Finalize();
}

// Everything between Initialize and Finalize of the ModelManager.
Status RunInitialized(const RunArgs& args, std::shared_ptr<const CompiledModel> model, const std::vector<Tensor>& inputs,
                      const std::vector<graph::IoDef>& output_ios, std::ostream& out) {
  scheduler::ModelManager& mm = *scheduler::ModelManager::Get();
  NPUFLOW_ASSIGN_OR_RETURN(std::unique_ptr<scheduler::Session> session, scheduler::Session::Create());
  scheduler::Options options = {{"npuflow.executionStreams", std::to_string(args.streams)},
                                {"npuflow.executeTimeoutMs", std::to_string(args.timeout_ms)},
                                {"npuflow.modelDir", std::filesystem::absolute(args.om).parent_path().string()},
                                {"npuflow.verifyWeights", args.verify_weights ? "true" : "false"}};
  if (!args.weight_dir.empty()) options["npuflow.weightPath"] = args.weight_dir;
  if (!args.key.empty()) options["npuflow.weightKey"] = args.key;
  const bool v2 = model->execute_graphs && model->streams.empty();
  if (!args.executor.empty()) options["npuflow.v2Executor"] = args.executor;
  if (args.profile) options["npuflow.v2Profile"] = "true";
  NPUFLOW_RETURN_IF_ERROR(session->AddCompiledModel(kGraphId, model, options).WithContext("--weight-dir / --key"));
  const auto load_start = std::chrono::steady_clock::now();
  NPUFLOW_RETURN_IF_ERROR(session->LoadGraph(kGraphId).WithContext(args.om));
  if (v2) return RunV2Loaded(args, *session, mm, inputs, output_ios, out);
  NPUFLOW_ASSIGN_OR_RETURN(std::shared_ptr<scheduler::DavinciModel> loaded, session->GetLoadedModel(kGraphId));
  const int device = loaded->device();
  if (!loaded->external_weights().empty()) {
    // The weights stream in behind the load; wait for them here only to report the figure.
    NPUFLOW_RETURN_IF_ERROR(loaded->WaitForWeights());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    std::uint64_t bytes = 0, copied = 0;
    std::set<std::string> files;
    for (const auto& w : loaded->external_weights()) {
      bytes += w.bytes;
      if (w.copied_here) copied += w.bytes;
      files.insert(w.file);
    }
    out << fmt::format("external weights: {} FileConstant{} in {} file{}, {} bytes ({} copied to the device); load "
                       "{:.1f} ms, {:.2f} GB/s\n",
                       loaded->external_weights().size(), loaded->external_weights().size() == 1 ? "" : "s",
                       files.size(), files.size() == 1 ? "" : "s", bytes, copied, seconds * 1e3,
                       seconds > 0 ? static_cast<double>(copied) / seconds / 1e9 : 0.0);
    if (args.verbose)
      for (const auto& w : loaded->external_weights())
        out << fmt::format("  {}: {} offset {} ({} bytes){}\n", w.node, w.file, w.offset, w.bytes,
                           w.user_memory ? ", user memory" : w.copied_here ? "" : ", shared");
  }
  if (args.verbose) {
    out << fmt::format("loaded as model {} on device {}: {} execution instance{}; init stages {}\n", loaded->id(), device,
                       loaded->instances(), loaded->instances() == 1 ? "" : "s", Join(loaded->init_stages()));
  }
  if (args.mode == "nnexecute" && loaded->instances() < args.streams) {
    out << fmt::format("note: the model has {} execution instance{} (a model that updates Variables has one); the {} "
                       "client threads share {}\n",
                       loaded->instances(), loaded->instances() == 1 ? "" : "s", args.streams,
                       loaded->instances() == 1 ? "it" : "them");
  }

  if (args.mode == "runloop" && args.streams > 1)
    out << "note: the Run loop executes on one instance, one request at a time; --streams only sizes the model\n";

  StatusOr<Measured> measured = args.mode == "runloop" ? RunRunLoop(*session, mm.runtime(), device, inputs, args)
                                                       : RunNnExecute(*session, mm.runtime(), device, inputs, args);
  if (!measured.ok()) return measured.status();
  out << fmt::format("ran {} request{} ({} warm-up not counted)\n", args.requests, args.requests == 1 ? "" : "s",
                     measured->warmup);
  PrintSummary(output_ios, *measured, args, out);
  if (!args.outputs_dir.empty()) NPUFLOW_RETURN_IF_ERROR(WriteOutputs(output_ios, measured->outputs, args.outputs_dir, out));
  if (!args.trace.empty()) {
    NPUFLOW_RETURN_IF_ERROR(mm.runtime().WriteTrace(args.trace).WithContext("--trace"));
    out << "trace: " << args.trace << "\n";
  }
  return session->Finalize();
}

}  // namespace

namespace {

// A pipeline model: its stages over --devices devices, --requests steps with up to --streams in
// flight; the summary as for any model, plus the pipeline's figures.
Status RunPipelineModel(const RunArgs& args, const std::shared_ptr<const CompiledModel>& model, std::ostream& out) {
  const int k = static_cast<int>(model->stages.size());
  if (args.devices < 1 || args.devices > k)
    return Status::ParamInvalid("--devices {}: expected 1..{} (the model's stages)", args.devices, k);
  if (args.mode != "nnexecute")
    return Status::ParamInvalid("--mode {}: a pipeline model runs on the pipeline executor (nnexecute)", args.mode);
  if (!args.input_shapes.empty() || !args.executor.empty() || args.profile)
    return Status::ParamInvalid("--input-shape, --executor and --profile are for RT2.0 models; {} is a pipeline model",
                                args.om);
  if (!args.weight_dir.empty() || args.verify_weights)
    return Status::ParamInvalid("--weight-dir and --verify_weights: not available for pipeline models yet");
  // The root's inputs in the pipeline's order, and its outputs, from the wiring and the stages.
  std::vector<graph::IoDef> input_ios, output_ios;
  const std::string chip = args.device_chip.empty() ? model->chip : args.device_chip;
  std::vector<Tensor> inputs;
  return scheduler::ModelManager::RunInitialized(
      {.chips = std::vector<std::string>(static_cast<std::size_t>(args.devices), chip), .trace = !args.trace.empty()},
      [&]() -> Status {
        scheduler::ModelManager& mm = *scheduler::ModelManager::Get();
        scheduler::PipelineOptions po;
        po.devices = args.devices;
        po.max_in_flight = args.streams;
        if (args.timeout_ms > 0) po.timeout = std::chrono::milliseconds(args.timeout_ms);
        po.name = model->graph->name();
        NPUFLOW_ASSIGN_OR_RETURN(auto p, scheduler::PipelineExecutor::Create(model, po));
        for (const std::string& name : p->input_names()) {
          const graph::Node* d = model->graph->FindNode(name);
          if (d == nullptr) return Status::DataCorrupted("{}: the pipeline has no input '{}'", args.om, name);
          graph::IoDef io{name, {}, {}};
          NPUFLOW_ASSIGN_OR_RETURN(io.desc.dtype, d->op().Attr<graph::DataType>("dtype"));
          NPUFLOW_ASSIGN_OR_RETURN(io.desc.shape, d->op().Attr<graph::Shape>("shape"));
          input_ios.push_back(std::move(io));
        }
        NPUFLOW_ASSIGN_OR_RETURN(inputs, args.random_inputs ? RandomInputs(input_ios, args.seed)
                                                            : InputsFromFiles(input_ios, args.inputs));
        out << fmt::format("{}: pipeline model {} compiled for {}, {} stages on {} device{} of {}, {} input{}; up to {} "
                           "step{} in flight\n",
                           args.om, model->graph->name(), model->chip, k, args.devices, args.devices == 1 ? "" : "s",
                           chip, input_ios.size(), input_ios.size() == 1 ? "" : "s", args.streams,
                           args.streams == 1 ? "" : "s");
        for (int s = 0; s < k; ++s) out << fmt::format("stage {}: device {}\n", s, p->device_of(s));
        npu_sim::Runtime& rt = mm.runtime();
        std::uint64_t calls0 = 0;
        for (int d = 0; d < args.devices; ++d) calls0 += HostInteractions(rt, d).value_or(0);
        Measured m;
        m.requests.resize(static_cast<std::size_t>(args.requests));
        // A closed loop on one host client: a step is submitted when a window slot frees, at the
        // virtual time the step that freed it ended.
        npu_sim::HostClient client("npuflow run");
        npu_sim::ScopedHostClient scope(client);
        const auto t0 = std::chrono::steady_clock::now();
        const npu_sim::VTime v0 = rt.HostClock();
        // Up to --streams steps in flight: submit, and take the oldest result once the window is full.
        struct Pending {
          actors::Future<StatusOr<scheduler::StepOutput>> future;
          std::chrono::steady_clock::time_point start;
          npu_sim::VTime vstart;
        };
        std::deque<Pending> window;
        std::size_t next = 0, done = 0;
        npu_sim::VTime v_end = v0;
        while (done < m.requests.size()) {
          while (next < m.requests.size() && window.size() < static_cast<std::size_t>(args.streams)) {
            const npu_sim::VTime vs = rt.HostClock();
            window.push_back({p->SubmitStep(inputs, {.ready_at = vs}), std::chrono::steady_clock::now(), vs});
            ++next;
          }
          Pending& head = window.front();
          auto r = args.timeout_ms > 0 ? head.future.GetFor(std::chrono::milliseconds(args.timeout_ms)) : head.future.Get();
          if (!r.ok()) {
            (void)p->Unload();
            return r.status().WithContext(fmt::format("{}: request {}", args.om, done));
          }
          RequestRecord& rec = m.requests[done];
          rec.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - head.start).count();
          rec.virtual_us = static_cast<double>(r->end - head.vstart) / 1e3;
          rec.checksums = Checksums(r->outputs);
          v_end = std::max(v_end, r->end);
          client.Merge(r->end);
          if (done == 0) m.outputs = std::move(r->outputs);
          window.pop_front();
          ++done;
        }
        m.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        m.virtual_s = static_cast<double>(v_end - v0) / 1e9;
        std::uint64_t calls1 = 0;
        for (int d = 0; d < args.devices; ++d) calls1 += HostInteractions(rt, d).value_or(0);
        m.host_interactions = calls1 - calls0;
        for (std::size_t o = 0; o < m.outputs.size(); ++o)
          output_ios.push_back({p->output_names()[o], m.outputs[o].desc, {}});
        out << fmt::format("ran {} request{}\n", args.requests, args.requests == 1 ? "" : "s");
        PrintSummary(output_ios, m, args, out);
        const scheduler::PipelineStats st = p->stats();
        out << fmt::format("pipeline: bubble fraction {:.2f} (virtual); stages busy", st.bubble_fraction());
        for (npu_sim::VTime b : st.stage_busy) out << fmt::format(" {:.1f} us", static_cast<double>(b) / 1e3);
        out << "\n";
        if (!args.outputs_dir.empty()) NPUFLOW_RETURN_IF_ERROR(WriteOutputs(output_ios, m.outputs, args.outputs_dir, out));
        if (!args.trace.empty()) {
          NPUFLOW_RETURN_IF_ERROR(rt.WriteTrace(args.trace).WithContext("--trace"));
          out << "trace: " << args.trace << "\n";
        }
        return p->Unload();
      },
      fmt::format("--device-chip {}", chip));
}

}  // namespace

std::uint64_t Fnv1a64(const std::uint8_t* bytes, std::size_t size) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < size; ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

Status CheckRunArgs(const RunArgs& args) {
  if (args.om.empty()) return Status::ParamInvalid("--om: the .om model file is required");
  if (args.random_inputs && !args.inputs.empty())
    return Status::ParamInvalid("--inputs and --random-inputs are mutually exclusive: give one");
  if (!args.random_inputs && args.inputs.empty())
    return Status::ParamInvalid("one of --inputs f1.bin,f2.bin or --random-inputs is required");
  for (const std::string& f : args.inputs)
    if (f.empty()) return Status::ParamInvalid("--inputs: an empty file name in the list (expected f1.bin,f2.bin,...)");
  if (args.mode != "nnexecute" && args.mode != "runloop")
    return Status::ParamInvalid("--mode '{}': expected nnexecute or runloop", args.mode);
  if (args.streams < 1 || args.streams > kMaxStreams)
    return Status::ParamInvalid("--streams {}: expected 1..{}", args.streams, kMaxStreams);
  if (args.requests < 1) return Status::ParamInvalid("--requests {}: expected >= 1", args.requests);
  if (args.timeout_ms < 0) return Status::ParamInvalid("--timeout-ms {}: expected >= 0 (0: no timeout)", args.timeout_ms);
  return Status::Ok();
}

Status RunModel(const RunArgs& args, std::ostream& out) {
  NPUFLOW_RETURN_IF_ERROR(CheckRunArgs(args));
  graph::RegisterBuiltinOps();
  std::optional<AesKey> key;
  if (!args.key.empty()) {
    auto parsed = ParseAesKey(args.key);
    if (!parsed.ok()) return Status::ParamInvalid("--key: {}", parsed.status().message());
    key = *parsed;
  }
  NPUFLOW_ASSIGN_OR_RETURN(CompiledModel read, graph::ReadModelFile(args.om, key ? &*key : nullptr));
  auto model = std::make_shared<const CompiledModel>(std::move(read));
  if (!model->stages.empty()) return RunPipelineModel(args, model, out);
  if (args.devices != 1)
    return Status::ParamInvalid("--devices {}: for pipeline models (npuflow compile --pipeline-stages); {} is not one",
                                args.devices, args.om);
  const bool v2 = model->execute_graphs && model->streams.empty();
  if (!v2 && (!args.input_shapes.empty() || !args.executor.empty() || args.profile))
    return Status::ParamInvalid("--input-shape, --executor and --profile are for RT2.0 models (npuflow compile --runtime "
                                "v2); {} runs on the v1 task sink",
                                args.om);
  if (v2 && args.mode != "nnexecute")
    return Status::ParamInvalid("--mode {}: an RT2.0 model runs on its callers' threads (nnexecute); the Run loop is "
                                "the v1 task sink's",
                                args.mode);
  if (!args.executor.empty()) NPUFLOW_RETURN_IF_ERROR(v2::ParseExecutorType(args.executor).status());
  std::vector<graph::IoDef> input_ios = model->inputs, output_ios = model->outputs;
  if (v2) {
    NPUFLOW_ASSIGN_OR_RETURN(input_ios, ResolveInputShapes(model->execute_graphs->desc, args.input_shapes));
    output_ios.clear();
    for (const exe::ModelIoDesc& d : model->execute_graphs->desc.outputs) output_ios.push_back({d.name, d.desc, {}});
  } else {
    for (std::size_t i = 0; i < output_ios.size(); ++i)
      NPUFLOW_RETURN_IF_ERROR(StaticBytes(output_ios[i], "output", i).status());
  }
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<Tensor> inputs,
                           args.random_inputs ? RandomInputs(input_ios, args.seed) : InputsFromFiles(input_ios, args.inputs));

  const std::string chip = args.device_chip.empty() ? model->chip : args.device_chip;
  out << fmt::format("{}: model {} compiled for {}{}, {} input{}, {} output{}; device {}; mode {}, {} execution stream{}\n",
                     args.om, model->graph ? model->graph->name() : v2 ? model->execute_graphs->main->name() : "?",
                     model->chip, v2 ? " (RT2.0)" : "", input_ios.size(), input_ios.size() == 1 ? "" : "s",
                     output_ios.size(), output_ios.size() == 1 ? "" : "s", chip, args.mode, args.streams,
                     args.streams == 1 ? "" : "s");
  for (std::size_t i = 0; i < input_ios.size(); ++i) {
    out << fmt::format("input {} '{}' {}: {}\n", i, input_ios[i].name, input_ios[i].desc.ToString(),
                       args.random_inputs ? fmt::format("random, seed {}", args.seed) : args.inputs[i]);
  }

  return scheduler::ModelManager::RunInitialized({.chips = {chip}, .trace = !args.trace.empty()},
                                                [&] { return RunInitialized(args, model, inputs, output_ios, out); },
                                                fmt::format("--device-chip {}", chip));
}

}  // namespace npuflow::apps
