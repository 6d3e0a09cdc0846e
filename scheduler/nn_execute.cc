// Execution: NnExecute (zero copy, host buffers staged through the instance's own I/O blocks, or
// async on a user stream), Execute, ExecuteHostScheduled, and the instance and I/O choices they share.
#include "scheduler/davinci_model.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "actors/adaptive_wait.h"
#include "graph/ir/tensor_access.h"

namespace npuflow::scheduler {

namespace {

using graph::MemRef;
using graph::Segment;

}  // namespace

// ---- execution -----------------------------------------------------------------------------------
std::vector<std::uint64_t> DavinciModel::OwnIo(int i) const {
  const Instance& inst = *instances_[i];
  std::vector<std::uint64_t> io;
  io.reserve(model_->inputs.size() + model_->outputs.size());
  for (const graph::IoDef& d : model_->inputs) io.push_back((inst.base[Seg(Segment::kInput)] + d.ref.offset).value);
  for (const graph::IoDef& d : model_->outputs) io.push_back((inst.base[Seg(Segment::kOutput)] + d.ref.offset).value);
  return io;
}

npu_sim::DevicePtr DavinciModel::OwnInput(int i, std::size_t index) const {
  return instances_[i]->base[Seg(Segment::kInput)] + model_->inputs[index].ref.offset;
}
npu_sim::DevicePtr DavinciModel::OwnOutput(int i, std::size_t index) const {
  return instances_[i]->base[Seg(Segment::kOutput)] + model_->outputs[index].ref.offset;
}

Status DavinciModel::CheckArgs(const ExecuteArgs& args) const {
  const CompiledModel& m = *model_;
  if (args.inputs.size() != m.inputs.size())
    return Status::ParamInvalid("model {}: {} inputs given, the model takes {}", id_, args.inputs.size(), m.inputs.size());
  if (args.outputs.size() != m.outputs.size())
    return Status::ParamInvalid("model {}: {} output buffers given, the model has {} outputs", id_, args.outputs.size(),
                                m.outputs.size());
  auto check = [&](const DataBuffer& b, const graph::IoDef& io, const char* what) -> Status {
    if (b.discard) {
      if (what != std::string_view("output"))
        return Status::ParamInvalid("model {}: {} '{}' is discarded; only an output may be", id_, what, io.name);
      if (b.host != nullptr || b.device || b.bytes != 0)
        return Status::ParamInvalid("model {}: output '{}' is discarded but names a buffer", id_, io.name);
      return Status::Ok();
    }
    const std::uint64_t want = io.desc.bytes().value_or(0);
    if (b.bytes != want)
      return Status::ParamInvalid("model {}: {} '{}' ({}) takes {} bytes, got {}", id_, what, io.name, io.desc.ToString(),
                                  want, b.bytes);
    if (b.host == nullptr && !b.device && want > 0)
      return Status::ParamInvalid("model {}: {} '{}' has neither a host nor a device buffer", id_, what, io.name);
    if (b.host != nullptr && b.device)
      return Status::ParamInvalid("model {}: {} '{}' has both a host and a device buffer", id_, what, io.name);
    if (args.stream && b.host != nullptr)
      return Status::ParamInvalid("model {}: {} '{}' is host memory; execution on a user stream takes device buffers",
                                  id_, what, io.name);
    return Status::Ok();
  };
  for (std::size_t i = 0; i < m.inputs.size(); ++i) NPUFLOW_RETURN_IF_ERROR(check(args.inputs[i], m.inputs[i], "input"));
  for (std::size_t i = 0; i < m.outputs.size(); ++i)
    NPUFLOW_RETURN_IF_ERROR(check(args.outputs[i], m.outputs[i], "output"));
  if (args.stream && args.stream->device != config_.device)
    return Status::ParamInvalid("model {} is on device {}, the stream on device {}", id_, config_.device,
                                args.stream->device);
  return Status::Ok();
}

DavinciModel::Instance& DavinciModel::PickInstance() {
  // An idle instance, claimed atomically (two callers never both take the same idle one); if
  // none is idle, the least busy. Starting points rotate so load spreads. The caller releases
  // the instance (in_flight - 1) when its execution ends.
  const std::size_t n = instances_.size();
  const std::size_t start = next_instance_.fetch_add(1, std::memory_order_relaxed) % n;
  for (std::size_t k = 0; k < n; ++k) {
    Instance& inst = *instances_[(start + k) % n];
    int idle = 0;
    if (inst.in_flight.compare_exchange_strong(idle, 1, std::memory_order_acq_rel)) return inst;
  }
  std::size_t best = start;
  int best_load = std::numeric_limits<int>::max();
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (start + k) % n;
    const int load = instances_[i]->in_flight.load(std::memory_order_relaxed);
    if (load < best_load) {
      best_load = load;
      best = i;
    }
  }
  instances_[best]->in_flight.fetch_add(1, std::memory_order_acq_rel);
  return *instances_[best];
}

std::vector<std::uint64_t> DavinciModel::IoFor(const Instance& inst, const ExecuteArgs& args) const {
  const CompiledModel& m = *model_;
  std::vector<std::uint64_t> io;
  io.reserve(m.inputs.size() + m.outputs.size());
  for (std::size_t i = 0; i < m.inputs.size(); ++i)
    io.push_back(args.inputs[i].device ? args.inputs[i].device.value
                                       : (inst.base[Seg(Segment::kInput)] + m.inputs[i].ref.offset).value);
  for (std::size_t i = 0; i < m.outputs.size(); ++i)
    io.push_back(args.outputs[i].device ? args.outputs[i].device.value
                                        : (inst.base[Seg(Segment::kOutput)] + m.outputs[i].ref.offset).value);
  // A zero-byte tensor has no address of its own; any non-null one will do.
  for (std::uint64_t& a : io)
    if (a == 0) a = inst.base[Seg(Segment::kInput)].value;
  return io;
}

namespace {
// Counts an execution in `c` for its duration (adopt: already counted by PickInstance).
struct InFlight {
  explicit InFlight(std::atomic<int>& c, bool adopt = false) : c_(c) {
    if (!adopt) c_.fetch_add(1, std::memory_order_relaxed);
  }
  ~InFlight() { c_.fetch_sub(1, std::memory_order_acq_rel); }
  std::atomic<int>& c_;
};
}  // namespace

Status DavinciModel::NnExecute(const ExecuteArgs& args) {
  if (actor_.valid()) return NnExecuteThroughActor(args);
  return NnExecuteOnCaller(args);
}

Status DavinciModel::NnExecuteThroughActor(const ExecuteArgs& args) {
  // Once unloaded the actor is retired (an execution sent now would fail as not delivered).
  if (unloaded_.load(std::memory_order_acquire)) return Status::Aborted("model {} is unloaded", id_);
  // Refused before anything is sent: a caller that could not wait for the answer would leave a
  // run whose outputs nobody reads (and its instance held).
  if (actors::detail::InHandler()) return actors::detail::WaitInHandlerError("NnExecute");
  NPUFLOW_RETURN_IF_ERROR(CheckArgs(args));
  const CompiledModel& m = *model_;
  ExecRequest req;
  req.io.reserve(m.inputs.size() + m.outputs.size());
  bool zero_copy = true;
  for (const DataBuffer& b : args.inputs) {
    req.io.push_back(b.device.value);  // 0 (host memory): the instance's own block
    zero_copy = zero_copy && b.host == nullptr;
  }
  for (const DataBuffer& b : args.outputs) {
    req.io.push_back(b.device.value);
    zero_copy = zero_copy && b.host == nullptr;
  }
  if (!zero_copy) {  // the caller's only copy in: into staging the tasks own
    req.staging = AcquireStaging();
    FillStaging(args, *req.staging);
  }
  req.stream = args.stream;
  req.timeout = args.timeout;
  npu_sim::HostSide& host = rt_->CurrentHostSide();
  req.host = &host;
  // No copy writes the caller's outputs once this returns (closed before the staging goes back).
  StagingCloser closer(this, req.staging);
  Staging* const req_staging = req.staging.get();
  // Weights still streaming in when this is sent: the run may start before they land, so its
  // success waits for the load's verdict (a load that records its latches even when it fails).
  const bool weights_settled = weights_landed_.load(std::memory_order_acquire);
  StatusOr<npu_sim::VTime> end = exec_wait_.Get(actor_.Ask<npu_sim::VTime>(model_msg::Execute{std::move(req)}));
  if (!end.ok()) {
    // The actor's own errors name the model; the device's, answered to us directly, do not.
    const std::string self = fmt::format("model {}", id_);
    if (end.status().message().starts_with(self)) return end.status();
    return end.status().WithContext(self);
  }
  host.clock = std::max(host.clock, *end);
  // The outputs are in the caller's buffers already (the run's answer came after its copies), or
  // in the instance's blocks for this thread to read, the instance held until it has.
  if (req_staging != nullptr && req_staging->read_in_place >= 0)
    NPUFLOW_RETURN_IF_ERROR(ReadOutputsInPlace(args, *req_staging));
  if (!weights_settled) NPUFLOW_RETURN_IF_ERROR(WaitForWeights());
  return Status::Ok();
}

actors::Future<Status> DavinciModel::ShareInstanceWithRunLoop() {
  // No actor: no run leaves its outputs in place.
  if (!actor_.valid()) return actors::Future<Status>::Ready(Status::Ok());
  return actor_.Ask(model_msg::ShareInstance{0});
}

Status DavinciModel::ReadOutputsInPlace(const ExecuteArgs& args, const Staging& staging) {
  const int i = staging.read_in_place;
  Status status;
  // The unload frees the instance's blocks under the exclusive lock: until then they are there
  // (an unload that has begun does not wait for this read; see ModelActor's Unload). The unload
  // may hold the lock across a fiber switch (its device model's destruction waits on an actor):
  // a fiber here yields rather than block the thread that unload runs on.
  std::shared_lock<std::shared_mutex> exec_lock(exec_mu_, std::defer_lock);
  const bool fiber = actors::InFiberWait();
  while (!exec_lock.try_lock()) {
    if (fiber) actors::SpinPause(true);
    else std::this_thread::yield();
  }
  if (instances_freed_) status = Status::Aborted("model {} was unloaded before its outputs were read", id_);
  for (std::size_t k = 0; k < args.outputs.size() && status.ok(); ++k) {
    const DataBuffer& b = args.outputs[k];
    if (b.host == nullptr || b.bytes == 0) continue;
    status = rt_->ReadInPlace(config_.device, b.host, OwnOutput(i, k), b.bytes)
                 .WithContext(fmt::format("model {}: output '{}'", id_, model_->outputs[k].name));
  }
  exec_lock.unlock();
  if (status.ok()) reads_in_place_.fetch_add(1, std::memory_order_relaxed);
  actor_.Send(model_msg::OutputsRead{i});  // the instance may run again
  return status;
}

std::shared_ptr<Staging> DavinciModel::AcquireStaging() {
  {
    std::lock_guard<std::mutex> lock(staging_mu_);
    if (!spare_staging_.empty()) {
      std::shared_ptr<Staging> s = std::move(spare_staging_.back());
      spare_staging_.pop_back();
      return s;
    }
  }
  return std::make_shared<Staging>();
}

void DavinciModel::CloseStaging(std::shared_ptr<Staging> staging) {
  staging->window.Close();
  ReleaseStaging(std::move(staging));
}

void DavinciModel::ReleaseStaging(std::shared_ptr<Staging> staging) {
  // Only the caller holds it: the tasks that copied through it are gone, nothing writes it now.
  if (staging == nullptr || staging.use_count() != 1) return;
  std::lock_guard<std::mutex> lock(staging_mu_);
  if (spare_staging_.size() < kSpareStaging) spare_staging_.push_back(std::move(staging));
}

Status DavinciModel::NnExecuteOnCaller(const ExecuteArgs& args) {
  std::shared_lock<std::shared_mutex> exec_lock(exec_mu_);
  if (unloaded_.load()) return Status::Aborted("model {} is unloaded", id_);
  NPUFLOW_RETURN_IF_ERROR(CheckArgs(args));
  NPUFLOW_RETURN_IF_ERROR(WeightsStatus());
  // Weights still streaming in: the run waits for them on the device, and afterwards for their
  // load's verdict here (a load that failed records its latches anyway, so as not to hang).
  const bool weights_settled = weights_landed_.load(std::memory_order_acquire);
  InFlight model_guard(in_flight_);
  Touch();
  if (args.stream) {
    // Async on the caller's stream: the run is queued behind the stream's work; device buffers only.
    Instance& inst = *instances_[next_instance_.fetch_add(1, std::memory_order_relaxed) % instances_.size()];
    return rt_->ExecuteModelOnStream(inst.model, *args.stream, IoFor(inst, args));
  }
  Instance& inst = PickInstance();
  InFlight inst_guard(inst.in_flight, /*adopt=*/true);
  std::vector<std::uint64_t> io = IoFor(inst, args);
  const auto on_device = [](const DataBuffer& b) { return b.host == nullptr; };
  const bool zero_copy = std::all_of(args.inputs.begin(), args.inputs.end(), on_device) &&
                         std::all_of(args.outputs.begin(), args.outputs.end(), on_device);
  if (zero_copy) {
    // One host interaction: the execute message; the host hears only the completion.
    auto end = rt_->ExecuteModel(inst.model, std::move(io), args.timeout);
    if (!end.ok()) return end.status().WithContext(fmt::format("model {}", id_));
    if (!weights_settled) return WaitForWeights();
    ElideGates(inst);
    return Status::Ok();
  }
  return ExecuteStaged(inst, std::move(io), args, weights_settled);
}

void DavinciModel::FillStaging(const ExecuteArgs& args, Staging& staging) const {
  const CompiledModel& m = *model_;
  staging.in.resize(m.inputs.size());
  staging.out.assign(m.outputs.size(), nullptr);
  staging.out_bytes.assign(m.outputs.size(), 0);
  staging.window.Open();  // a spare staging is held by no task: no copy can see it reopen
  staging.read_in_place = -1;
  // A reused staging keeps its capacity: a buffer is empty exactly when its slot is not staged.
  // Host inputs go to the instance's own blocks, at their offsets in the input segment; when
  // every input is a host one and their blocks are close together (only alignment between them)
  // they go in as one copy, one DMA task per execution instead of one per input (a decode step's
  // token, position and length); the gaps it writes belong to no tensor.
  std::uint64_t lo = ~std::uint64_t{0}, hi = 0, sum = 0;
  std::size_t staged = 0, first = 0;
  for (std::size_t i = 0; i < m.inputs.size(); ++i) {
    staging.in[i].clear();
    if (args.inputs[i].host == nullptr || args.inputs[i].bytes == 0) continue;
    const std::uint64_t off = m.inputs[i].ref.offset;
    if (off < lo) {
      lo = off;
      first = i;
    }
    hi = std::max(hi, off + args.inputs[i].bytes);
    sum += args.inputs[i].bytes;
    ++staged;
  }
  constexpr std::uint64_t kAlignmentSlack = 512;  // the gap an input's block may leave before the next
  constexpr std::uint64_t kMaxBlock = 64 * 1024;  // larger inputs: a copy each (no extra host pass)
  staging.block.clear();
  if (staged >= 2 && staged == m.inputs.size() && hi - lo <= kMaxBlock && hi - lo <= sum + kAlignmentSlack * (staged - 1)) {
    staging.block.assign(hi - lo, 0);
    staging.block_first = first;
    for (std::size_t i = 0; i < m.inputs.size(); ++i) {
      if (args.inputs[i].host == nullptr || args.inputs[i].bytes == 0) continue;
      std::memcpy(staging.block.data() + (m.inputs[i].ref.offset - lo), args.inputs[i].host, args.inputs[i].bytes);
    }
    return FillOutputs(args, staging);
  }
  for (std::size_t i = 0; i < m.inputs.size(); ++i) {
    if (args.inputs[i].host == nullptr || args.inputs[i].bytes == 0) continue;
    const auto* src = static_cast<const std::uint8_t*>(args.inputs[i].host);
    staging.in[i].assign(src, src + args.inputs[i].bytes);
  }
  FillOutputs(args, staging);
}

void DavinciModel::FillOutputs(const ExecuteArgs& args, Staging& staging) const {
  const CompiledModel& m = *model_;
  for (std::size_t i = 0; i < m.outputs.size(); ++i) {
    if (args.outputs[i].host == nullptr || args.outputs[i].bytes == 0) continue;
    staging.out[i] = args.outputs[i].host;
    staging.out_bytes[i] = args.outputs[i].bytes;
  }
}

std::vector<npu_sim::Task> DavinciModel::StagedTasks(const std::vector<std::uint64_t>& io, std::uint32_t device_model,
                                                     const std::shared_ptr<Staging>& staging,
                                                     bool outputs_in_place) const {
  const CompiledModel& m = *model_;
  std::vector<npu_sim::Task> tasks;
  if (!staging->block.empty()) {
    npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kHostToDevice, staging->block.size());
    c.src_host = staging->block.data();
    c.dst_dev = npu_sim::DevicePtr{io[staging->block_first]};
    c.name = "inputs";
    c.keep_alive = staging;
    tasks.push_back(std::move(c));
  }
  for (std::size_t i = 0; i < m.inputs.size(); ++i) {
    if (staging->in[i].empty()) continue;
    npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kHostToDevice, staging->in[i].size());
    c.src_host = staging->in[i].data();
    c.dst_dev = npu_sim::DevicePtr{io[i]};
    c.name = "input " + m.inputs[i].name;
    c.keep_alive = staging;
    tasks.push_back(std::move(c));
  }
  tasks.push_back(npu_sim::Task::ModelExecute(device_model, std::make_shared<const std::vector<std::uint64_t>>(io)));
  for (std::size_t i = 0; i < m.outputs.size(); ++i) {
    if (staging->out[i] == nullptr) continue;
    npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kDeviceToHost, staging->out_bytes[i]);
    c.src_dev = npu_sim::DevicePtr{io[m.inputs.size() + i]};
    if (outputs_in_place) {
      c.data_in_place = true;
    } else {
      c.dst_host = staging->out[i];
      c.host_window = &staging->window;
    }
    c.name = "output " + m.outputs[i].name;
    c.keep_alive = staging;
    tasks.push_back(std::move(c));
  }
  return tasks;
}

bool DavinciModel::HasGates(int i) const {
  for (const auto& g : instances_[i]->gates)
    if (!g.empty()) return true;
  return false;
}

Status DavinciModel::ExecuteStaged(Instance& inst, std::vector<std::uint64_t> io, const ExecuteArgs& args,
                                   bool weights_settled) {
  // Host buffers: copied through the instance's own I/O blocks, in one submission with the run.
  // Inputs go through host staging owned by the tasks, as pageable memory is staged for DMA;
  // outputs are written straight into the caller's buffers through the staging's window, which
  // is closed before this returns: a copy still in flight never touches them after that.
  std::shared_ptr<Staging> staging = AcquireStaging();
  FillStaging(args, *staging);
  std::vector<npu_sim::Task> tasks = StagedTasks(io, inst.model.id, staging, /*outputs_in_place=*/false);
  StagingCloser closer(this, std::move(staging));  // after the abort below, on every path
  const auto count = static_cast<std::uint32_t>(tasks.size());
  NPUFLOW_ASSIGN_OR_RETURN(std::uint32_t first, rt_->Submit(inst.exec_stream, std::move(tasks)));
  Status s = rt_->SynchronizeSubmission(inst.exec_stream, first, count, args.timeout);
  if (s.code() == StatusCode::kTimeout) {
    // As on hardware: nothing is left running. The copies after the run are dropped with it.
    (void)rt_->AbortModel(inst.model);
    (void)rt_->AbortStream(inst.exec_stream);
    (void)rt_->SynchronizeStream(inst.exec_stream, std::chrono::seconds(10));  // collect the abort
    return Status::Timeout("model {}: execution did not complete within {} ms; the device model was aborted", id_,
                           args.timeout->count());
  }
  if (!s.ok()) return s.WithContext(fmt::format("model {}", id_));
  if (!weights_settled) {
    NPUFLOW_RETURN_IF_ERROR(WaitForWeights());
  } else {
    ElideGates(inst);
  }
  return Status::Ok();
}

StatusOr<std::vector<Tensor>> DavinciModel::Execute(const std::vector<Tensor>& inputs, npu_sim::Timeout timeout) {
  const CompiledModel& m = *model_;
  if (inputs.size() != m.inputs.size())
    return Status::ParamInvalid("model {}: {} inputs given, the model takes {}", id_, inputs.size(), m.inputs.size());
  ExecuteArgs args;
  args.timeout = timeout;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].desc.dtype != m.inputs[i].desc.dtype)
      return Status::ParamInvalid("model {}: input '{}' is {}, the model takes {}", id_, m.inputs[i].name,
                                  inputs[i].desc.ToString(), m.inputs[i].desc.ToString());
    args.inputs.push_back(DataBuffer::Host(inputs[i].data.data(), inputs[i].data.size()));
  }
  std::vector<Tensor> outputs;
  outputs.reserve(m.outputs.size());
  for (const graph::IoDef& io : m.outputs) outputs.push_back(graph::ZeroTensor(io.desc));
  for (Tensor& t : outputs) args.outputs.push_back(DataBuffer::Host(t.data.data(), t.data.size()));
  NPUFLOW_RETURN_IF_ERROR(NnExecute(args));
  return outputs;
}

Status DavinciModel::ExecuteHostScheduled(const ExecuteArgs& args) {
  if (args.stream) return Status::ParamInvalid("model {}: host-scheduled execution runs on its own streams", id_);
  if (actor_.valid()) {
    // The model to itself: the actor refuses while anything runs, and holds back executions that
    // arrive until this one ends.
    if (unloaded_.load(std::memory_order_acquire)) return Status::Aborted("model {} is unloaded", id_);
    NPUFLOW_RETURN_IF_ERROR(CheckArgs(args));
    NPUFLOW_RETURN_IF_ERROR(actor_.Ask(model_msg::AcquireExclusive{&rt_->CurrentHostSide()}).Get());
    Status s = WeightsStatus();
    if (s.ok()) s = RunHostScheduled(args);
    actor_.Send(model_msg::ReleaseExclusive{});
    return s;
  }
  std::shared_lock<std::shared_mutex> exec_lock(exec_mu_);
  if (unloaded_.load()) return Status::Aborted("model {} is unloaded", id_);
  NPUFLOW_RETURN_IF_ERROR(CheckArgs(args));
  NPUFLOW_RETURN_IF_ERROR(WeightsStatus());
  // Claimed atomically: two callers that both saw no execution in flight would otherwise both
  // run, on the same host streams (and grow inst.host_streams at once).
  int idle = 0;
  if (!in_flight_.compare_exchange_strong(idle, 1, std::memory_order_acq_rel))
    return Status::ParamInvalid("model {}: host-scheduled execution needs the model to itself; {} executions in flight",
                                id_, idle);
  InFlight model_guard(in_flight_, /*adopt=*/true);
  Touch();
  return RunHostScheduled(args);
}

// Every task submitted by the host on its own, on instance 0's host streams (made on first use).
Status DavinciModel::RunHostScheduled(const ExecuteArgs& args) {
  Instance& inst = *instances_[0];
  if (!inst.tiling_sink.empty())
    return Status::Unsupported("model {}: its tiling-sink task updates name tasks of the model's own streams; "
                               "host-scheduled execution submits to other streams (run it through the task sink)",
                               id_);
  InFlight inst_guard(inst.in_flight);
  const CompiledModel& m = *model_;
  while (inst.host_streams.size() < inst.lists.size()) {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Stream s, rt_->CreateStream(config_.device));
    std::lock_guard<std::mutex> lock(host_streams_mu_);
    inst.host_streams.push_back(s);
  }
  const std::vector<std::uint64_t> io = IoFor(inst, args);
  for (std::size_t i = 0; i < m.inputs.size(); ++i)
    if (args.inputs[i].host != nullptr && args.inputs[i].bytes > 0)
      NPUFLOW_RETURN_IF_ERROR(
          rt_->MemcpyH2D(config_.device, npu_sim::DevicePtr{io[i]}, args.inputs[i].host, args.inputs[i].bytes));
  // The task lists with this run's I/O addresses written in, as a model run would patch them.
  std::vector<std::vector<npu_sim::Task>> lists = inst.lists;
  for (std::size_t s = 0; s < lists.size(); ++s) {
    for (const npu_sim::IoPatch& p : inst.patches[s]) {
      npu_sim::Task& t = lists[s][p.task];
      const std::uint64_t v = io[p.slot] + p.offset;
      if (p.field == npu_sim::IoPatch::kCopySrc) t.src_dev = npu_sim::DevicePtr{v};
      else if (p.field == npu_sim::IoPatch::kCopyDst) t.dst_dev = npu_sim::DevicePtr{v};
      else t.args[p.field] = v;
    }
  }
  // One host interaction per task, interleaved across the streams as a host scheduler would.
  std::size_t longest = 0;
  for (const auto& l : lists) longest = std::max(longest, l.size());
  for (std::size_t k = 0; k < longest; ++k)
    for (std::size_t s = 0; s < lists.size(); ++s)
      if (k < lists[s].size()) NPUFLOW_RETURN_IF_ERROR(rt_->Submit(inst.host_streams[s], {std::move(lists[s][k])}).status());
  for (const npu_sim::Stream& s : inst.host_streams) {
    Status st = rt_->SynchronizeStream(s, args.timeout);
    if (!st.ok()) {
      for (const npu_sim::Stream& x : inst.host_streams) (void)rt_->AbortStream(x);
      return st.WithContext(fmt::format("model {} (host-scheduled)", id_));
    }
  }
  for (std::size_t i = 0; i < m.outputs.size(); ++i)
    if (args.outputs[i].host != nullptr && args.outputs[i].bytes > 0)
      NPUFLOW_RETURN_IF_ERROR(rt_->MemcpyD2H(config_.device, args.outputs[i].host,
                                             npu_sim::DevicePtr{io[m.inputs.size() + i]}, args.outputs[i].bytes));
  return Status::Ok();
}

}  // namespace npuflow::scheduler
