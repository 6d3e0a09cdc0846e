#include "stress/storm.h"

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <thread>

#include <boost/fiber/operations.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "actors/fibers.h"
#include "base/logging.h"
#include "lowering/compiler.h"
#include "scheduler/model_manager.h"
#include "stress/storm_state.h"
#include "weights/weight_loader.h"

namespace npuflow::stress {
namespace detail {

void Nap(std::chrono::milliseconds ms) {
  if (actors::InFiber()) {
    boost::this_fiber::sleep_for(ms);
  } else {
    std::this_thread::sleep_for(ms);
  }
}

scheduler::Options StormSessionOptions(const StressOptions& o) {
  scheduler::Options options = {{"npuflow.executionStreams", std::to_string(o.streams)},
                                {"npuflow.executeTimeoutMs", std::to_string(o.timeout_ms)}};
  // The multi-thread executor sends from threads of its own: their order is the machine's.
  if (o.deterministic) options["npuflow.v2Executor"] = "sequential";
  return options;
}

Status AddModel(scheduler::Session& session, std::uint32_t graph, const StressModel& m) {
  if (m.make_graph) {
    NPUFLOW_ASSIGN_OR_RETURN(auto g, m.make_graph());
    return session.AddGraph(graph, std::move(g), m.graph_options);
  }
  return session.AddCompiledModel(graph, m.compiled, m.graph_options);
}

// ---- StormState --------------------------------------------------------------------------------

StormState::StormState(const StressOptions& o, std::vector<StressModel>& m, npu_sim::Runtime& runtime)
    : options(o), models(m), rt(runtime), targets_(m.size()) {
  if (o.timeout_ms > 0) timeout = std::chrono::milliseconds(o.timeout_ms);
  started = Clock::now();
}

void StormState::Publish(std::shared_ptr<Target> target) {
  std::lock_guard<std::mutex> lock(targets_mu_);
  targets_[target->model].push_back(std::move(target));
}

bool StormState::Unpublish(const std::shared_ptr<Target>& target) {
  std::lock_guard<std::mutex> lock(targets_mu_);
  auto& list = targets_[target->model];
  auto it = std::find(list.begin(), list.end(), target);
  if (it == list.end()) return false;
  list.erase(it);
  return true;
}

std::shared_ptr<Target> StormState::Pick(int model, Rng& rng) const {
  std::lock_guard<std::mutex> lock(targets_mu_);
  const auto& list = targets_[model];
  if (list.empty()) return nullptr;
  return list[rng.Below(list.size())];
}

std::vector<std::shared_ptr<Target>> StormState::TargetsOf(int model) const {
  std::lock_guard<std::mutex> lock(targets_mu_);
  return targets_[model];
}


std::optional<std::uint64_t> StormState::NextTicket() {
  if (stop.load(std::memory_order_acquire)) return std::nullopt;
  if (options.duration_s > 0 &&
      std::chrono::duration<double>(Clock::now() - started).count() >= options.duration_s)
    return std::nullopt;
  const std::uint64_t t = tickets_.fetch_add(1, std::memory_order_relaxed);
  if (options.requests > 0 && t >= static_cast<std::uint64_t>(options.requests)) return std::nullopt;
  return t;
}

void StormState::Begin(std::uint64_t request, const InFlight& what) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_[request] = what;
}

void StormState::Restart(std::uint64_t request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = in_flight_.find(request); it != in_flight_.end()) it->second.start = Clock::now();
}

std::string StormState::ErrorKind(const Status& s) const {
  const std::string_view m = s.message();
  if (m.find("injected fault") != std::string_view::npos) return "injected_fault";
  if (m.find("task update race") != std::string_view::npos ||
      m.find("unresolved tiling placeholder") != std::string_view::npos)
    return "race";
  std::string k(StatusCodeName(s.code()));
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return k;
}

bool StormState::Expected(const std::string& kind, int model) const {
  if (kind == "race") return models[model].race_allowed();
  if (options.faults > 0 && (kind == "injected_fault" || kind == "timeout" || kind == "aborted")) return true;
  if (options.churn_every > 0 && (kind == "aborted" || kind == "not_found" || kind == "memory_allocation")) return true;
  return false;
}

void StormState::AddFailure(Failure failure) {
  std::lock_guard<std::mutex> lock(mu_);
  ++tally_.failures_total;
  if (tally_.failures.size() < StressReport::kMaxListed) tally_.failures.push_back(std::move(failure));
}

void StormState::End(const Outcome& oc) {
  const StressModel& model = models[oc.model];
  const std::string action(ActionName(oc.action));
  std::optional<Failure> failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_flight_.find(oc.request);
    const bool hung = it != in_flight_.end() && it->second.hung;
    if (it != in_flight_.end()) in_flight_.erase(it);
    finished_.fetch_add(1, std::memory_order_acq_rel);
    if (hung) return;  // counted once, as a hang, when the monitor saw it
    ++tally_.requests;
    if (oc.ms > static_cast<double>(options.hang_ms)) {
      // Finished, but later than a request may take: a hang the monitor did not catch running.
      ++tally_.hangs;
      ++tally_.by_action[action].requests;
      ++tally_.by_action[action].errors;
      ++tally_.by_model[model.name].requests;
      ++tally_.by_model[model.name].errors;
      latencies_ms_.push_back(oc.ms);
      ++tally_.failures_total;
      if (tally_.failures.size() < StressReport::kMaxListed)
        tally_.failures.push_back({"hang", oc.request, oc.client, model.name, action,
                                   fmt::format("finished after {:.1f} ms, over --hang-ms {}", oc.ms, options.hang_ms)});
      return;
    }
    latencies_ms_.push_back(oc.ms);
    Tally& by_action = tally_.by_action[action];
    Tally& by_model = tally_.by_model[model.name];
    ++by_action.requests;
    ++by_model.requests;
    Failure f{"", oc.request, oc.client, model.name, action, ""};
    if (oc.ms > slowest_ms_) {
      slowest_ms_ = oc.ms;
      slowest_ = Failure{"slowest", oc.request, oc.client, model.name, action, fmt::format("{:.3f} ms", oc.ms)};
    }
    if (oc.status.ok() && oc.wrong.ok()) {
      ++tally_.ok;
      ++by_action.ok;
      ++by_model.ok;
    } else if (oc.status.ok()) {
      ++tally_.wrong_outputs;
      ++by_action.wrong;
      ++by_model.wrong;
      f.kind = "wrong_output";
      f.detail = std::string(oc.wrong.message());
      failure = f;
    } else {
      const std::string kind = ErrorKind(oc.status);
      ++tally_.errors[kind];
      ++by_action.errors;
      ++by_model.errors;
      if (kind == "race" && model.race_allowed()) {
        ++tally_.tiling[model.name + " races detected"];
      } else if (kind == "race") {
        ++tally_.races;
        f.kind = "race";
      }
      if (Expected(kind, oc.model)) {
        ++tally_.expected_errors;
      } else {
        ++tally_.unexpected_errors;
        if (f.kind.empty()) f.kind = "unexpected_error";
      }
      if (!f.kind.empty()) {
        f.detail = oc.status.ToString();
        failure = f;
      }
    }
    if (failure) {
      ++tally_.failures_total;
      if (tally_.failures.size() < StressReport::kMaxListed) tally_.failures.push_back(*failure);
    }
  }
}

std::uint64_t StormState::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_.size();
}

int StormState::MarkHangs() {
  const auto now = Clock::now();
  const auto limit = std::chrono::milliseconds(options.hang_ms);
  int marked = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [request, f] : in_flight_) {
    if (f.hung || now - f.start < limit) continue;
    f.hung = true;
    ++marked;
    const std::string action(ActionName(f.action));
    const std::string& model = models[f.model].name;
    ++tally_.requests;
    ++tally_.hangs;
    ++tally_.by_action[action].requests;
    ++tally_.by_action[action].errors;
    ++tally_.by_model[model].requests;
    ++tally_.by_model[model].errors;
    ++tally_.failures_total;
    if (tally_.failures.size() < StressReport::kMaxListed)
      tally_.failures.push_back({"hang", request, f.client, model, action,
                                 fmt::format("not finished after {} ms (--hang-ms)", options.hang_ms)});
  }
  return marked;
}

Progress StormState::Snapshot() const {
  Progress p;
  const auto now = Clock::now();
  p.elapsed_s = std::chrono::duration<double>(now - started).count();
  p.target = static_cast<std::uint64_t>(options.requests);
  std::lock_guard<std::mutex> lock(mu_);
  p.requests = tally_.requests;
  p.in_flight = in_flight_.size();
  p.errors = tally_.errors;
  p.wrong = tally_.wrong_outputs;
  p.hangs = tally_.hangs;
  p.slowest_ms = slowest_ms_;
  if (slowest_)
    p.slowest_what = fmt::format("request {} (client {}, {}, {})", slowest_->request, slowest_->client, slowest_->model,
                                 slowest_->action);
  for (const auto& [request, f] : in_flight_) {
    const double ms = std::chrono::duration<double, std::milli>(now - f.start).count();
    if (ms > p.slowest_ms) {
      p.slowest_ms = ms;
      p.slowest_what = fmt::format("request {} (client {}, {}, {}), still running", request, f.client,
                                   models[f.model].name, ActionName(f.action));
    }
  }
  return p;
}

void StormState::Count(std::map<std::string, std::uint64_t> StressReport::*field, const std::string& key,
                       std::uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  (tally_.*field)[key] += n;
}

void StormState::Fill(StressReport& r) const {
  std::lock_guard<std::mutex> lock(mu_);
  r.requests = tally_.requests;
  r.ok = tally_.ok;
  r.errors = tally_.errors;
  r.expected_errors = tally_.expected_errors;
  r.unexpected_errors = tally_.unexpected_errors;
  r.wrong_outputs = tally_.wrong_outputs;
  r.races += tally_.races;
  r.hangs = tally_.hangs;
  r.by_action = tally_.by_action;
  r.by_model = tally_.by_model;
  r.faults = tally_.faults;
  r.churn = tally_.churn;
  r.tiling = tally_.tiling;
  for (const Failure& f : tally_.failures) {
    if (r.failures.size() < StressReport::kMaxListed) r.failures.push_back(f);
  }
  r.failures_total += tally_.failures_total;
  r.latency_p50_ms = Percentile(latencies_ms_, 50);
  r.latency_p99_ms = Percentile(latencies_ms_, 99);
  r.latency_max_ms = latencies_ms_.empty() ? 0 : *std::max_element(latencies_ms_.begin(), latencies_ms_.end());
  r.slowest = slowest_;
}

}  // namespace detail

namespace {

using detail::Clock;
using detail::Rng;
using detail::StormState;
using detail::Target;

// What each part of the run draws its numbers from (SeededRng's `stream`).
enum RngStream : std::uint64_t { kClientRng = 1, kTurnRng, kChurnRng, kFaultRng };

// Where the races figure comes from: the device's race detector. The one place it is read.
std::uint64_t DeviceRaceReports(npu_sim::Runtime& rt) {
  // With --race-detect (npuflow's flag on every command) the runtime's detector counts every pair
  // of tasks that touched the same device bytes unordered, one of them writing; each is logged
  // with both sides. Races that fail a request (a tiling-sink task update that lost to the
  // prefetch) are counted by the request that saw them.
  const npu_sim::RaceDetector* detector = rt.race_detector();
  return detector != nullptr ? detector->race_count() : 0;
}

// A directory for the run's files (chip description, external weights), removed at the end.
class WorkDir {
 public:
  WorkDir() {
    static std::atomic<int> n{0};
    path_ = (std::filesystem::temp_directory_path() / fmt::format("npuflow-stress-{}-{}", ::getpid(), n++)).string();
    std::filesystem::create_directories(path_);
  }
  ~WorkDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The chip as a JSON file with another HBM capacity (npu_sim takes a chip JSON path).
StatusOr<std::string> WriteChip(const npu_sim::ChipSpec& c, std::uint64_t capacity, const std::string& dir) {
  nlohmann::json j = {{"name", c.name},
                      {"aicore_count", c.aicore_count},
                      {"aicpu_count", c.aicpu_count},
                      {"hbm_capacity_bytes", capacity},
                      {"hbm_bandwidth_gbps", c.hbm_bandwidth_gbps},
                      {"h2d_bandwidth_gbps", c.h2d_bandwidth_gbps},
                      {"d2h_bandwidth_gbps", c.d2h_bandwidth_gbps},
                      {"d2d_bandwidth_gbps", c.d2d_bandwidth_gbps},
                      {"dma_latency_ns", c.dma_latency_ns},
                      {"dma_channels", c.dma_channels},
                      {"host_launch_latency_ns", c.host_launch_latency_ns},
                      {"event_record_latency_ns", c.event_record_latency_ns},
                      {"event_wait_latency_ns", c.event_wait_latency_ns},
                      {"nop_latency_ns", c.nop_latency_ns},
                      {"kernel_launch_overhead_ns", c.kernel_launch_overhead_ns},
                      {"aicpu_launch_overhead_ns", c.aicpu_launch_overhead_ns},
                      {"task_update_latency_ns", c.task_update_latency_ns},
                      {"aicore_gflops", c.aicore_gflops},
                      {"aicpu_gflops", c.aicpu_gflops},
                      {"prefetch_num", c.prefetch_num},
                      {"link_bandwidth_gbps", c.link_bandwidth_gbps},
                      {"link_latency_ns", c.link_latency_ns},
                      {"max_streams", c.max_streams},
                      {"max_events", c.max_events},
                      {"block_dispatch_ns", c.block_dispatch_ns},
                      {"block_host_gbps", c.block_host_gbps},
                      {"block_host_gflops", c.block_host_gflops},
                      {"features", {{"task_update", c.task_update_supported}}}};
  const std::string path = (std::filesystem::path(dir) / "chip.json").string();
  std::ofstream out(path);
  out << j.dump(2);
  if (!out.good()) return Status::Failed("stress: cannot write the chip description '{}'", path);
  return path;
}

// "auto": room for every model once (and the run's own buffers) and half as much again, so that
// forks and churn sessions must recycle.
StatusOr<std::uint64_t> AutoMemory(const StressOptions& o, const std::vector<StressModel>& models) {
  std::uint64_t need = 0, own = 0;
  for (const StressModel& m : models) {
    scheduler::LoadConfig config;
    config.instances = o.streams;
    if (m.v2) {
      need += 1ull << 20;  // RT2.0 allocates per run from its own caching allocator
    } else if (m.compiled) {
      need += scheduler::DavinciModel::Needs(*m.compiled, config).memory_bytes;
    } else {
      graph::CompileOptions co;
      co.chip = o.chip;
      if (auto it = m.graph_options.find("ge.streamMaxParallelNum"); it != m.graph_options.end())
        co.max_parallel = std::stoi(it->second);
      NPUFLOW_ASSIGN_OR_RETURN(auto g, m.make_graph());
      NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel cm, lowering::CompileV1(std::move(g), co));
      need += scheduler::DavinciModel::Needs(cm, config).memory_bytes;
    }
    for (const graph::IoDef& io : m.inputs) own += io.desc.bytes().value_or(0) * m.sets.size();
    for (const graph::IoDef& io : m.outputs)
      own += io.desc.bytes().value_or(0) * static_cast<std::uint64_t>(std::min(o.clients, 64));
  }
  return static_cast<std::uint64_t>((static_cast<double>(need) * 1.5 + static_cast<double>(own)) / 0.95) + (2ull << 20);
}

// The weight loader makes its device stream on its first load and keeps it until the runtime
// goes. A 32-byte load before the baseline makes that stream part of it, so that the leak check
// sees what the run left behind, not what the runtime keeps by design.
Status WarmWeightLoader(scheduler::ModelManager& mm, const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "warm.bin").string();
  {
    std::ofstream f(path, std::ios::binary);
    const std::string bytes(32, '\0');
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f.good()) return Status::Failed("stress: cannot write '{}'", path);
  }
  npu_sim::Runtime& rt = mm.runtime();
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr dst, rt.Malloc(0, 32, npu_sim::Placement::kHbm, "stress warm-up"));
  weights::WeightLoadRequest request;
  request.device = 0;
  request.path = path;
  request.regions.push_back({.file_offset = 0, .length = 32, .dst = dst, .name = "warm-up"});
  request.at = rt.HostClock();
  Status loaded = mm.weight_loader().Load(std::move(request)).Get().status();
  Status freed = rt.Free(0, dst);
  NPUFLOW_RETURN_IF_ERROR(loaded.WithContext("stress: warming up the weight loader"));
  return freed;
}

// --mix weighs the task-sink paths; an RT2.0 model has one entry point, RunGraph, and takes it
// with the weight of the whole mix, so it gets its share of the requests whatever the mix.
int Weight(const StressOptions& o, const StressModel& m, Action a) {
  if (m.v2) {
    if (a != Action::kRunGraph) return 0;
    int total = 0;
    for (const auto& [action, w] : o.mix) total += w;
    return total;
  }
  auto it = o.mix.find(a);
  return it == o.mix.end() ? 0 : it->second;
}

class Storm {
 public:
  Storm(const StressOptions& o, std::vector<StressModel> models, const RunHooks& hooks,
        const actors::ScheduleLog* replay, std::string work_dir)
      : o_(o), models_(std::move(models)), hooks_(hooks), replay_(replay), work_dir_(std::move(work_dir)) {}

  StatusOr<StressResult> Run();

 private:
  Status Setup();
  void RunClients();
  void ClientLoop(int client);
  void RunOne(int client, std::uint64_t ticket, Rng& rng);
  void ChurnDriver();
  void FaultDriver();
  void DeterministicDriver();
  bool ChurnDue(std::uint64_t& next) const;
  bool FaultDue(int placed) const;
  void Monitor(std::atomic<bool>& done);
  void Rescue();
  Status Teardown();
  void CheckResources(StressReport& report);

  const StressOptions o_;
  std::vector<StressModel> models_;
  const RunHooks& hooks_;
  const actors::ScheduleLog* replay_;
  const std::string work_dir_;
  npu_sim::Runtime* rt_ = nullptr;
  std::unique_ptr<StormState> state_;
  std::unique_ptr<actors::PerturbTap> perturb_;
  std::unique_ptr<actors::ReplayTap> replay_tap_;
  std::shared_ptr<scheduler::Session> session_;
  npu_sim::DeviceStats baseline_;
  std::vector<std::pair<int, Action>> choices_;  // (model, action) a request may take, with weights below
  std::vector<int> weights_;
  std::atomic<int> clients_left_{0};
  std::vector<npu_sim::Stream> user_streams_;
  bool abandoned_ = false;
  std::mutex monitor_mu_;  // wakes the monitor when the clients are done
  std::condition_variable monitor_cv_;
};

Status Storm::Setup() {
  scheduler::ModelManager& mm = *scheduler::ModelManager::Get();
  rt_ = &mm.runtime();
  state_ = std::make_unique<StormState>(o_, models_, *rt_);
  // The tap first: loads are part of what it perturbs.
  if (replay_ != nullptr) {
    replay_tap_ = std::make_unique<actors::ReplayTap>(replay_->decisions, actors::ReplayOptions{.digest = true});
    NPUFLOW_RETURN_IF_ERROR(rt_->system().SetTap(replay_tap_.get()));
  } else if (o_.perturb != "none") {
    actors::PerturbOptions p = o_.perturbation;
    p.seed = o_.seed;
    p.strategy = o_.perturb == "pct" ? actors::PerturbStrategy::kPct : actors::PerturbStrategy::kRandom;
    p.digest = o_.deterministic;
    p.internal_only = o_.deterministic;
    NPUFLOW_ASSIGN_OR_RETURN(perturb_, actors::PerturbTap::Create(p));
    NPUFLOW_RETURN_IF_ERROR(rt_->system().SetTap(perturb_.get()));
  }
  NPUFLOW_RETURN_IF_ERROR(WarmWeightLoader(mm, work_dir_));
  NPUFLOW_ASSIGN_OR_RETURN(baseline_, rt_->Stats(0));

  NPUFLOW_ASSIGN_OR_RETURN(auto session, scheduler::Session::Create(detail::StormSessionOptions(o_)));
  session_ = std::shared_ptr<scheduler::Session>(std::move(session));
  for (int m = 0; m < static_cast<int>(models_.size()); ++m) {
    const StressModel& model = models_[m];
    auto t = std::make_shared<Target>();
    t->session = session_;
    t->graph = state_->NextGraphId();
    t->model = m;
    NPUFLOW_RETURN_IF_ERROR(detail::AddModel(*session_, t->graph, model).WithContext("stress: model " + model.name));
    NPUFLOW_RETURN_IF_ERROR(session_->LoadGraph(t->graph).WithContext("stress: loading model " + model.name));
    // A user's model the interpreter cannot run: each set's first run, alone, is the reference.
    for (InputSet& set : models_[m].sets) {
      if (!set.expected.empty()) continue;
      auto out = session_->RunGraph(t->graph, set.inputs);
      if (!out.ok()) return out.status().WithContext("stress: the solo run of " + model.name);
      set.expected = std::move(*out);
    }
    state_->Publish(t);
    for (int a = 0; a < kActionCount; ++a) {
      const auto action = static_cast<Action>(a);
      const int w = Weight(o_, model, action);
      if (w == 0) continue;
      choices_.push_back({m, action});
      weights_.push_back(w);
    }
  }
  for (const StressModel& m : models_)
    if (std::none_of(choices_.begin(), choices_.end(), [&](const auto& c) { return models_[c.first].name == m.name; }))
      return Status::ParamInvalid("--mix {}: model {} can take none of these actions", MixText(o_.mix), m.name);
  // The device inputs of NnExecute and user-stream runs, one copy per (model, set): the device
  // only reads them.
  state_->inputs.resize(models_.size());
  for (std::size_t m = 0; m < models_.size(); ++m) {
    if (models_[m].v2) continue;
    for (const InputSet& set : models_[m].sets) {
      std::vector<npu_sim::DevicePtr> ptrs;
      for (const graph::Tensor& t : set.inputs) {
        NPUFLOW_ASSIGN_OR_RETURN(auto p, rt_->Malloc(0, t.data.size(), npu_sim::Placement::kHbm, "stress input"));
        NPUFLOW_RETURN_IF_ERROR(rt_->MemcpyH2D(0, p, t.data.data(), t.data.size()));
        ptrs.push_back(p);
      }
      state_->inputs[m].push_back(std::move(ptrs));
    }
  }
  // User streams: for runs on a stream, and for reading outputs back with a timeout.
  auto weight = [&](Action a) { return o_.mix.count(a) ? o_.mix.at(a) : 0; };
  const bool streams = weight(Action::kStream) > 0 || weight(Action::kNnExecute) > 0;
  for (int i = 0; streams && i < std::min(o_.clients, 8); ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Stream s, rt_->CreateStream(0));
    user_streams_.push_back(s);
    state_->streams.Add(s);
  }
  return Status::Ok();
}

void Storm::RunOne(int client, std::uint64_t ticket, Rng& rng) {
  // The same number of draws per request whatever happens, so a client's choices depend only on
  // the seed and how many requests it made.
  std::uint64_t total = 0;
  for (int w : weights_) total += static_cast<std::uint64_t>(w);
  std::uint64_t pick = rng.Below(total);
  std::size_t c = 0;
  while (pick >= static_cast<std::uint64_t>(weights_[c])) pick -= static_cast<std::uint64_t>(weights_[c++]);
  const auto [model, action] = choices_[c];
  const int set = static_cast<int>(rng.Below(models_[model].sets.size()));
  std::shared_ptr<Target> target = state_->Pick(model, rng);
  detail::Outcome oc{ticket, client, model, action};
  state_->Begin(ticket, {client, model, action, Clock::now(), false});
  const auto t0 = Clock::now();
  StatusOr<std::vector<graph::Tensor>> out =
      target ? RunAction(*state_, ticket, action, *target, set)
             : StatusOr<std::vector<graph::Tensor>>(Status::Internal("stress: model {} has no graph to run", models_[model].name));
  oc.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  target.reset();  // before End: a drained target has no user once its requests have ended
  if (out.ok()) {
    oc.wrong = CompareOutputs(*out, models_[model].sets[set].expected);
  } else {
    oc.status = out.status();
  }
  state_->End(oc);
}

void Storm::ClientLoop(int client) {
  Rng rng = detail::SeededRng(o_.seed, kClientRng, static_cast<std::uint64_t>(client));
  while (auto ticket = state_->NextTicket()) RunOne(client, *ticket, rng);
  clients_left_.fetch_sub(1, std::memory_order_acq_rel);
}

bool Storm::ChurnDue(std::uint64_t& next) const {
  if (o_.churn_every == 0 || state_->finished() < next) return false;
  next += static_cast<std::uint64_t>(o_.churn_every);
  return true;
}

// Faults go in while the first half of the requests run, so that each has requests left to hit;
// a run bounded by time injects one every two requests.
bool Storm::FaultDue(int placed) const {
  if (placed >= o_.faults) return false;
  const std::uint64_t every =
      o_.requests > 0 ? std::max<std::uint64_t>(1, static_cast<std::uint64_t>(o_.requests) / (2 * o_.faults)) : 2;
  return state_->finished() / every >= static_cast<std::uint64_t>(placed);
}

void Storm::ChurnDriver() {
  Rng rng = detail::SeededRng(o_.seed, kChurnRng, 0);
  std::uint64_t next = static_cast<std::uint64_t>(o_.churn_every);
  while (clients_left_.load(std::memory_order_acquire) > 0) {
    if (ChurnDue(next)) {
      detail::ChurnStep(*state_, rng);
    } else {
      detail::Nap(std::chrono::milliseconds(1));
    }
  }
}

void Storm::FaultDriver() {
  Rng rng = detail::SeededRng(o_.seed, kFaultRng, 0);
  int placed = 0;
  while (clients_left_.load(std::memory_order_acquire) > 0 && placed < o_.faults) {
    if (FaultDue(placed)) {
      detail::FaultStep(*state_, rng);
      ++placed;
    } else {
      detail::Nap(std::chrono::milliseconds(1));
    }
  }
}

// One request at a time, the turn order drawn from the seed; churn and faults at fixed points of
// it. With the runtime in deterministic mode, the run is a function of the seed.
void Storm::DeterministicDriver() {
  Rng turn = detail::SeededRng(o_.seed, kTurnRng, 0);
  Rng churn = detail::SeededRng(o_.seed, kChurnRng, 0);
  Rng fault = detail::SeededRng(o_.seed, kFaultRng, 0);
  std::vector<Rng> clients;
  for (int c = 0; c < o_.clients; ++c) clients.push_back(detail::SeededRng(o_.seed, kClientRng, static_cast<std::uint64_t>(c)));
  std::uint64_t next_churn = static_cast<std::uint64_t>(o_.churn_every);
  int placed = 0;
  while (auto ticket = state_->NextTicket()) {
    while (ChurnDue(next_churn)) detail::ChurnStep(*state_, churn);
    while (FaultDue(placed)) {
      detail::FaultStep(*state_, fault);
      ++placed;
    }
    const int c = static_cast<int>(turn.Below(clients.size()));
    RunOne(c, *ticket, clients[c]);
  }
  clients_left_.store(0);
}

void Storm::RunClients() {
  const bool churn = o_.churn_every > 0, faults = o_.faults > 0;
  clients_left_.store(o_.clients);
  if (o_.deterministic) return DeterministicDriver();
  const int drivers = (churn ? 1 : 0) + (faults ? 1 : 0);
  auto body = [&](int i) -> Status {
    if (i < o_.clients) {
      ClientLoop(i);
    } else if (churn && i == o_.clients) {
      ChurnDriver();
    } else {
      FaultDriver();
    }
    return Status::Ok();
  };
  if (o_.host_mode == "threads") {
    std::vector<std::thread> threads;
    for (int i = 0; i < o_.clients + drivers; ++i) threads.emplace_back([&, i] { (void)body(i); });
    for (auto& t : threads) t.join();
    return;
  }
  Status s = actors::RunFibers(o_.clients + drivers, {.threads = o_.host_threads}, body);
  if (!s.ok()) state_->AddFailure({"unexpected_error", 0, -1, "", "", s.ToString()});
}

// Frees clients stuck in a hang: aborts every loaded model's device models, so that what waits
// on them ends (Aborted).
void Storm::Rescue() {
  scheduler::ModelManager* mm = scheduler::ModelManager::Get();
  for (std::uint32_t id : mm->LoadedModels()) {
    auto model = mm->GetModel(id);
    if (!model.ok()) continue;
    for (int i = 0; i < (*model)->instances(); ++i) (void)rt_->AbortModel((*model)->device_model(i));
  }
}

void Storm::Monitor(std::atomic<bool>& done) {
  auto last_progress = Clock::now();
  std::optional<Clock::time_point> hung_since;
  bool rescued = false;
  while (!done.load(std::memory_order_acquire)) {
    {
      std::unique_lock<std::mutex> lock(monitor_mu_);
      monitor_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return done.load(std::memory_order_acquire); });
    }
    if (done.load(std::memory_order_acquire)) break;
    if (state_->MarkHangs() > 0 && !hung_since) {
      hung_since = Clock::now();
      state_->stop.store(true);  // a hang fails the run: no new requests
    }
    if (hung_since && !rescued && Clock::now() - *hung_since > std::chrono::milliseconds(o_.hang_ms)) {
      Rescue();
      rescued = true;
    }
    if (hung_since && rescued && Clock::now() - *hung_since > 2 * std::chrono::milliseconds(o_.hang_ms) + std::chrono::seconds(2)) {
      abandoned_ = true;  // the clients could not be freed
      return;
    }
    if (hooks_.progress && Clock::now() - last_progress >= std::chrono::seconds(1)) {
      last_progress = Clock::now();
      hooks_.progress(state_->Snapshot());
    }
  }
}

Status Storm::Teardown() {
  Status first = detail::EndChurn(*state_);
  auto keep = [&](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  keep(session_->Finalize());
  for (auto& per_model : state_->inputs)
    for (auto& set : per_model)
      for (const npu_sim::DevicePtr& p : set) keep(rt_->Free(0, p));
  for (const npu_sim::Stream& s : user_streams_) keep(rt_->DestroyStream(s));
  rt_->system().WaitIdle();
  return first;
}

void Storm::CheckResources(StressReport& report) {
  auto after = rt_->Stats(0);
  if (!after.ok()) return;
  auto add = [&](const char* name, std::uint64_t before, std::uint64_t now) {
    report.resources.push_back({name, static_cast<std::int64_t>(before), static_cast<std::int64_t>(now)});
  };
  add("device_memory_bytes", baseline_.memory.in_use, after->memory.in_use);
  add("allocations", baseline_.memory.allocations, after->memory.allocations);
  add("streams", baseline_.streams, after->streams);
  add("events", baseline_.events, after->events);
  report.memory_capacity = after->memory.capacity;
  report.memory_peak = after->memory.peak;
}

StatusOr<StressResult> Storm::Run() {
  NPUFLOW_RETURN_IF_ERROR(Setup());
  std::atomic<bool> done{false};
  state_->started = Clock::now();
  Clock::time_point ended{};
  std::thread pool([&] {
    RunClients();
    ended = Clock::now();  // the last request's end: the monitor's poll is not part of the time
    {
      std::lock_guard<std::mutex> lock(monitor_mu_);
      done.store(true, std::memory_order_release);
    }
    monitor_cv_.notify_all();
  });
  Monitor(done);
  StressResult result;
  StressReport& r = result.report;
  r.scenario = o_.scenario;
  r.seed = o_.seed;
  r.deterministic = o_.deterministic;
  r.perturb = replay_ != nullptr ? "replay" : o_.perturb;
  for (const StressModel& m : models_) r.references[m.name] = m.reference;
  if (abandoned_) {
    // Clients are stuck where nothing can reach them: leave them (and the runtime) to the
    // process's exit, which the caller must make.
    pool.detach();
    r.abandoned = true;
    state_->Fill(r);
    r.wall_s = std::chrono::duration<double>(Clock::now() - state_->started).count();
    return result;
  }
  pool.join();
  r.wall_s = std::chrono::duration<double>(ended - state_->started).count();
  if (Status s = Teardown(); !s.ok())
    state_->AddFailure({"unexpected_error", 0, -1, "", "teardown", s.ToString()});
  r.races = DeviceRaceReports(*rt_);
  state_->Fill(r);
  CheckResources(r);
  for (const ResourceCheck& c : r.resources) {
    if (!c.leaked()) continue;
    ++r.failures_total;
    r.failures.push_back({"leak", 0, -1, "", "", fmt::format("{}: {} before the run, {} after", c.name, c.baseline, c.after)});
  }
  if (replay_tap_) {
    result.schedule = replay_tap_->Log();
    result.replay_check = replay_tap_->CheckAgainst(*replay_);
  } else if (perturb_) {
    result.schedule = perturb_->Log();
  }
  r.deliveries = result.schedule.deliveries;
  r.delayed = result.schedule.delayed;
  (void)rt_->system().SetTap(nullptr);
  return result;
}

}  // namespace

StatusOr<StressResult> RunStress(const StressOptions& o, const RunHooks& hooks, const actors::ScheduleLog* replay) {
  NPUFLOW_RETURN_IF_ERROR(CheckStressOptions(o));
  if (replay != nullptr && !o.deterministic)
    return Status::ParamInvalid("stress: a schedule replays only in deterministic mode");
  if (scheduler::ModelManager::Get() != nullptr)
    return Status::Failed("stress: a ModelManager is initialized already; a stress run brings up its own devices");
  WorkDir dir;
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::ChipSpec chip, npu_sim::LoadChipSpec(o.chip));
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<StressModel> models, BuildModels(o, chip, dir.path()));
  std::string chip_arg = o.chip;
  if (!o.device_memory.empty()) {
    std::uint64_t capacity = 0;
    if (o.device_memory == "auto") {
      NPUFLOW_ASSIGN_OR_RETURN(capacity, AutoMemory(o, models));
    } else {
      NPUFLOW_ASSIGN_OR_RETURN(capacity, ParseBytes(o.device_memory, "--device-memory"));
    }
    NPUFLOW_ASSIGN_OR_RETURN(chip_arg, WriteChip(chip, capacity, dir.path()));
  }
  npu_sim::RuntimeOptions ro;
  ro.chips = {chip_arg};
  ro.workers = o.workers;
  ro.deterministic = o.deterministic;
  // A synchronous copy (a model's constants as RT2.0 loads them, say) behind a hung DMA copy ends
  // in a timeout like a run does, not in a hang of its client.
  if (o.timeout_ms > 0) ro.copy_timeout = std::chrono::milliseconds(std::max<std::int64_t>(1000, 10 * o.timeout_ms));
  NPUFLOW_RETURN_IF_ERROR(scheduler::ModelManager::Initialize(ro).WithContext("--chip / --device-memory"));
  auto storm = std::make_unique<Storm>(o, std::move(models), hooks, replay, dir.path());
  StatusOr<StressResult> result = storm->Run();
  if (result.ok() && result->report.abandoned) {
    // Stuck clients still use the run's state and devices: both stay, for the process's exit.
    (void)storm.release();
    return result;
  }
  Status fin = scheduler::ModelManager::Finalize();
  if (!result.ok()) return result.status();
  if (!fin.ok()) result->report.failures.push_back({"unexpected_error", 0, -1, "", "finalize", fin.ToString()});
  return result;
}

}  // namespace npuflow::stress
