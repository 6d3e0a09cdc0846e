// DavinciModel's outline and lifetime: construction, Init (the stages in order, each in its own
// unit: davinci_model_load.cc, weight_binding.cc, task_sink.cc) and Unload.
#include "scheduler/davinci_model.h"

#include <fmt/format.h>
#include <sched.h>

#include <cstdlib>
#include <string_view>
#include <thread>

#include "actors/future.h"
#include "base/logging.h"

namespace npuflow::scheduler {

StatusOr<ExecutePath> DefaultExecutePath() {
  const char* env = std::getenv("NPUFLOW_EXECUTE_PATH");
  const std::string_view v = env == nullptr ? "actor" : env;
  if (v == "actor" || v.empty()) return ExecutePath::kActor;
  if (v == "caller") return ExecutePath::kCallerThread;
  return Status::ParamInvalid("NPUFLOW_EXECUTE_PATH must be 'actor' or 'caller', got '{}'", v);
}

DavinciModel::DavinciModel(npu_sim::Runtime* rt, std::uint32_t id, std::shared_ptr<const CompiledModel> model,
                           LoadConfig config)
    : rt_(rt), id_(id), model_(std::move(model)), config_(std::move(config)), exec_wait_(ExecWaitOptions(*rt)) {}

actors::AdaptiveWait::Options DavinciModel::ExecWaitOptions(npu_sim::Runtime& rt) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) cores = CPU_COUNT(&allowed);  // a cpuset or taskset
  return ExecWaitOptions(rt.system().workers(), cores);
}

// With fewer device workers than the cores this process may run on, a waiting host thread has a
// core of its own: its spin may cover how far a step's length strays (a tenth of the step at
// most). A rough test: it counts the workers, not the host threads (several callers waiting on
// one model at once each spin on what it counted as one spare core).
// With as many workers as cores, a spinning host thread takes a core a worker needs: a plain wait.
// Measured 2026-11-30 ~00:42 on this 2-core VM, 2 workers, the same binary with the spin (capped at
// max_margin) and without: bench v1 wall throughput at 1 / 2 / 4 / 8 streams 3.4-3.7 / 4.7-5.0 /
// 5.6 / 6.0-6.1 k against 4.4 / 8.6 / 7.8-8.2 / 7.2-8.4 k inferences/s; GPT-2 decode at 2 threads
// 2 x 64 2,595 against 5,087 tok/s, 4 x 256 506 against 598, 117M f16 159 against 163; the demo
// (4 streams) 819 against 1,084 tok/s. Unknown cores (0): the spin as before.
actors::AdaptiveWait::Options DavinciModel::ExecWaitOptions(int workers, int cores) {
  actors::AdaptiveWait::Options options;
  if (cores > 0 && workers < cores) options.spare_core_lead = 0.1;
  else if (cores > 0) options.enabled = false;
  return options;
}

DavinciModel::~DavinciModel() { (void)Unload(); }

void DavinciModel::Touch() {
  static std::atomic<std::uint64_t> tick{1};
  last_used_.store(tick.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
}

Status DavinciModel::Init() {
  Touch();
  auto stage = [&](const char* name, Status (DavinciModel::*fn)()) -> Status {
    init_stages_.emplace_back(name);
    Status s = (this->*fn)();
    if (!s.ok()) return s.WithContext(fmt::format("model {} {}", id_, name));
    return Status::Ok();
  };
  Status s = stage("InitModelMem", &DavinciModel::InitModelMem);
  if (s.ok()) s = stage("PreProcessFileConstants", &DavinciModel::PreProcessFileConstants);
  if (s.ok()) s = stage("InitIoNodes", &DavinciModel::InitIoNodes);
  if (s.ok()) s = stage("InitVariables", &DavinciModel::InitVariables);
  if (s.ok()) s = stage("InitNodes", &DavinciModel::InitNodes);
  if (s.ok()) s = stage("DoTaskSink", &DavinciModel::DoTaskSink);
  if (s.ok()) s = StartExecutionPath();
  if (!s.ok()) (void)Unload();
  return s;
}

Status DavinciModel::StartExecutionPath() {
  ExecutePath path = ExecutePath::kActor;
  if (config_.execute_path) {
    path = *config_.execute_path;
  } else {
    NPUFLOW_ASSIGN_OR_RETURN(path, DefaultExecutePath());
  }
  if (path == ExecutePath::kCallerThread) return Status::Ok();
  own_io_.clear();
  for (std::size_t i = 0; i < instances_.size(); ++i) {
    std::vector<std::uint64_t> io = OwnIo(static_cast<int>(i));
    // A zero-byte tensor has no address of its own; any non-null one will do.
    for (std::uint64_t& a : io)
      if (a == 0) a = instances_[i]->base[Seg(graph::Segment::kInput)].value;
    own_io_.push_back(std::move(io));
  }
  actor_ = SpawnModelActor(*this);
  return Status::Ok();
}

// ---- unload --------------------------------------------------------------------------------------
Status DavinciModel::FreeInstance(Instance& inst) {
  Status first;
  auto keep = [&](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  if (inst.has_model) keep(rt_->DestroyModel(inst.model));  // aborts runs; unbinds and destroys its streams
  inst.has_model = false;
  if (inst.exec_stream.device >= 0) keep(rt_->DestroyStream(inst.exec_stream));
  for (const npu_sim::Stream& s : inst.host_streams) keep(rt_->DestroyStream(s));
  for (const npu_sim::Event& e : inst.events) keep(rt_->DestroyEvent(e));
  inst.host_streams.clear();
  inst.events.clear();
  inst.exec_stream = {};
  for (int s = 0; s < graph::kSegmentCount; ++s) {
    if (inst.owned[s]) keep(rt_->Free(config_.device, inst.base[s]));
    inst.owned[s] = false;
  }
  return first;
}

bool DavinciModel::OnUnload(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(unload_hooks_mu_);
  if (unloaded_.load(std::memory_order_acquire)) return false;
  unload_hooks_.push_back(std::move(hook));
  return true;
}

Status DavinciModel::Unload() {
  {
    // Under the hooks' lock, so that a hook registered meanwhile is either run here or refused.
    std::lock_guard<std::mutex> lock(unload_hooks_mu_);
    if (unloaded_.exchange(true)) return Status::Ok();
  }
  // Whoever submits to the model's streams on its own (a Run loop) stops first.
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(unload_hooks_mu_);
    hooks.swap(unload_hooks_);
  }
  for (auto& hook : hooks) hook();
  // A host-scheduled run in flight ends now (its streams are aborted).
  for (auto& inst : instances_) {
    std::lock_guard<std::mutex> lock(host_streams_mu_);
    for (const npu_sim::Stream& s : inst->host_streams) (void)rt_->AbortStream(s);
  }
  if (actor_.valid()) {
    // The actor fails what is queued, aborts what runs and answers once nothing runs any more.
    if (actors::detail::InHandler())
      NPUFLOW_LOG_WARN(kScheduler, "model {}: unloaded inside an actor handler; executions in flight are not waited for", id_);
    else if (Status s = actor_.Ask(model_msg::Unload{&rt_->CurrentHostSide()}).Get(); !s.ok())
      NPUFLOW_LOG_WARN(kScheduler, "model {}: unload: {}", id_, s.ToString());
    else
      rt_->system().Retire(actor_);  // drained: its cell goes to the next model loaded
  } else {
    // Executions in flight end now (Aborted); then nothing uses the instances any more.
    for (auto& inst : instances_) {
      if (inst->has_model) (void)rt_->AbortModel(inst->model);
      if (inst->exec_stream.device >= 0) (void)rt_->AbortStream(inst->exec_stream);
    }
  }
  std::unique_lock<std::shared_mutex> exec_lock(exec_mu_);
  instances_freed_ = true;  // a caller still to read outputs in place finds them gone
  Status first;
  for (auto& inst : instances_) {
    Status s = FreeInstance(*inst);
    if (first.ok() && !s.ok()) first = std::move(s);
  }
  if (owns_weights_) {
    Status s = rt_->Free(config_.device, weights_);
    if (first.ok() && !s.ok()) first = std::move(s);
    owns_weights_ = false;
  }
  if (owns_variables_) {
    Status s = rt_->Free(config_.device, variables_);
    if (first.ok() && !s.ok()) first = std::move(s);
    owns_variables_ = false;
  }
  // External weight copies go with their last user (the session's manager only remembers them).
  weight_files_.clear();
  if (!first.ok()) NPUFLOW_LOG_WARN(kScheduler, "model {}: unload: {}", id_, first.ToString());
  return first;
}

}  // namespace npuflow::scheduler
