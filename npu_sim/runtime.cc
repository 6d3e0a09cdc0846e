#include "npu_sim/runtime.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <boost/fiber/fss.hpp>
#include <fmt/format.h>

#include "base/logging.h"
#include "npu_sim/builtin_kernels.h"
#include "npu_sim/device_model.h"
#include "npu_sim/event_table.h"
#include "npu_sim/stream_actor.h"
#include "npu_sim/units.h"

namespace npuflow::npu_sim {
namespace {

std::atomic<std::uint64_t> g_runtime_uid{1};

// The calling thread's own host side (its main context's), and the client a ScopedHostClient
// named on it, if any. A fiber's own side lives in a fiber-specific slot of the runtime.
thread_local HostSide tl_host;
thread_local HostSide* tl_scoped = nullptr;

// The scoped client of the current context. A fiber has its own slot: fibers sharing a thread
// must not see each other's scopes (a fiber suspended inside its scope would otherwise charge
// the next fiber's calls to its client). The slot object is never destroyed, so it outlives
// every fiber.
HostSide*& ScopedSlot(bool in_fiber) {
  if (!in_fiber) return tl_scoped;
  static auto* fiber_scoped = new boost::fibers::fiber_specific_ptr<HostSide*>();
  HostSide** slot = fiber_scoped->get();
  if (slot == nullptr) {
    fiber_scoped->reset(new HostSide*(nullptr));
    slot = fiber_scoped->get();
  }
  return *slot;
}

}  // namespace

ScopedHostClient::ScopedHostClient(HostClient& client) : ScopedHostClient(client.side_) {}
ScopedHostClient::ScopedHostClient(HostSide& side) {
  HostSide*& slot = ScopedSlot(actors::detail::InNonMainFiber());
  previous_ = slot;
  slot = &side;
}
ScopedHostClient::~ScopedHostClient() { ScopedSlot(actors::detail::InNonMainFiber()) = previous_; }

// Which host side the current call is charged to: a scoped client, else the fiber's own, else
// the thread's own. A side last used with another runtime starts afresh at 0.
HostSide& Runtime::CurrentHost() const {
  HostSide* side = nullptr;
  const bool in_fiber = actors::detail::InNonMainFiber();
  if (HostSide* scoped = ScopedSlot(in_fiber); scoped != nullptr) {
    side = scoped;
  } else if (in_fiber) {
    side = fiber_host_->get();
    if (side == nullptr) {
      fiber_host_->reset(new HostSide{});
      side = fiber_host_->get();
      side->name = fmt::format("host fiber {}", next_host_fiber_.fetch_add(1));
    }
  } else {
    side = &tl_host;
    if (actors::detail::InHandler() && unattributed_.fetch_add(1, std::memory_order_relaxed) == 0)
      NPUFLOW_LOG_ERROR(kNpuSim, "npu_sim: a host call from actor '{}' with no host client in scope: its virtual time is "
                                 "the worker thread's (scope an npu_sim::ScopedHostClient in the handler)",
                        actors::detail::CurrentActorName());
  }
  if (side->runtime != uid_) {
    side->runtime = uid_;
    side->clock = 0;
    side->tracks.clear();
    side->race_agent = kNoRaceAgent;
  }
  return *side;
}

RaceAgent Runtime::HostRaceAgent() {
  HostSide& host = CurrentHost();
  if (host.race_agent == kNoRaceAgent)
    host.race_agent = race_->NewAgent(host.name.empty() ? std::string("host thread") : host.name);
  return host.race_agent;
}

Runtime::Runtime(RuntimeOptions options)
    : options_(std::move(options)),
      uid_(g_runtime_uid.fetch_add(1)),
      fiber_host_(std::make_unique<boost::fibers::fiber_specific_ptr<HostSide>>()) {}

Runtime::~Runtime() {
  if (system_) system_->Shutdown();
}

StatusOr<std::unique_ptr<Runtime>> Runtime::Create(RuntimeOptions options) {
  if (options.chips.empty()) return Status::ParamInvalid("npu_sim: at least one device (chip) is required");
  if (options.chips.size() > 64) return Status::ParamInvalid("npu_sim: at most 64 devices, got {}", options.chips.size());
  NPUFLOW_RETURN_IF_ERROR(
      actors::System::CheckOptions({.workers = options.workers, .io_threads = options.io_threads}));
  RegisterBuiltinKernels();
  std::unique_ptr<Runtime> rt(new Runtime(std::move(options)));
  NPUFLOW_RETURN_IF_ERROR(rt->Init());
  return rt;
}

Status Runtime::Init() {
  std::vector<ChipSpec> chips;
  for (const auto& name : options_.chips) {
    NPUFLOW_ASSIGN_OR_RETURN(ChipSpec spec, LoadChipSpec(name));
    chips.push_back(std::move(spec));
  }
  trace_ = std::make_unique<TraceRecorder>(options_.trace, /*wall_times=*/!options_.deterministic);
  if (options_.race_detect || RaceDetector::ProcessDefault()) race_ = std::make_unique<RaceDetector>();
  system_ = std::make_unique<actors::System>(
      actors::SystemOptions{
          .workers = options_.workers, .deterministic = options_.deterministic, .io_threads = options_.io_threads});
  // NPUFLOW_KERNEL_RUNS=0: no runs of kernels in this process (to compare the same binary both ways).
  const char* runs_env = std::getenv("NPUFLOW_KERNEL_RUNS");
  const bool kernel_runs = options_.kernel_runs && !(runs_env != nullptr && std::string_view(runs_env) == "0");
  const char* copies_env = std::getenv("NPUFLOW_COPIES_HERE");  // the same for copies run by their stream
  const bool copies_here = options_.copies_here && !(copies_env != nullptr && std::string_view(copies_env) == "0");
  for (std::size_t i = 0; i < chips.size(); ++i) {
    const int id = static_cast<int>(i);
    auto entry = std::make_unique<DeviceEntry>();
    entry->device = std::make_unique<Device>(id, std::move(chips[i]), trace_.get(), options_.deterministic,
                                             kernel_runs, copies_here);
    Device* dev = entry->device.get();
    dev->race = race_.get();
    const ChipSpec& chip = dev->chip();
    auto wire = [&](Engine engine, int count) -> StatusOr<actors::Address<ClusterMsg>> {
      auto cluster = system_->Spawn<ClusterActor>(
          fmt::format("dev{}.{}", id, engine == Engine::kAICore ? "aicore" : "aicpu"), dev, engine);
      Device::UnitGroup& group = engine == Engine::kAICore ? dev->aicore_units : dev->aicpu_units;
      group.lanes = static_cast<std::uint32_t>(std::max(system_->workers(), 1));
      group.states = std::vector<UnitState>(static_cast<std::size_t>(count));
      for (int u = 0; u < count; ++u) {
        UnitState& state = group.states[static_cast<std::size_t>(u)];
        state.name = fmt::format("{} {}", engine == Engine::kAICore ? "aicore" : "aicpu", u);
        if (dev->tracing()) state.track = dev->trace()->AddTrack(id, state.name);
        group.units.push_back(system_->Spawn<UnitActor>(
            fmt::format("dev{}.{}{}", id, engine == Engine::kAICore ? "aicore" : "aicpu", u), dev, &group, u));
      }
      NPUFLOW_RETURN_IF_ERROR(cluster.Ask(AttachUnits{group.units}).Get());
      return cluster;
    };
    NPUFLOW_ASSIGN_OR_RETURN(dev->aicore, wire(Engine::kAICore, chip.aicore_count));
    NPUFLOW_ASSIGN_OR_RETURN(dev->aicpu, wire(Engine::kAICpu, chip.aicpu_count));
    dev->dma_channels = std::vector<DmaChannelState>(static_cast<std::size_t>(chip.dma_channels));
    dev->dma_routing.free_at.assign(static_cast<std::size_t>(chip.dma_channels), 0);
    dev->dma = system_->Spawn<DmaEngineActor>(fmt::format("dev{}.dma", id), dev);
    std::vector<actors::Address<DmaMsg>> channels;
    for (int c = 0; c < chip.dma_channels; ++c)
      channels.push_back(system_->Spawn<DmaChannelActor>(fmt::format("dev{}.dma{}", id, c), dev, c));
    NPUFLOW_RETURN_IF_ERROR(dev->dma.Ask(AttachChannels{std::move(channels)}).Get());
    dev->events = system_->Spawn<EventTableActor>(fmt::format("dev{}.events", id), dev);
    devices_.push_back(std::move(entry));
    NPUFLOW_RETURN_IF_ERROR(CreateStream(id).status());  // stream 0: the default stream
  }
  return Status::Ok();
}

StatusOr<Runtime::DeviceEntry*> Runtime::Dev(int device) const {
  if (device < 0 || device >= device_count())
    return Status::ParamInvalid("npu_sim: no device {} (there are {})", device, device_count());
  return devices_[device].get();
}

StatusOr<const ChipSpec*> Runtime::chip(int device) const {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  return &dev->device->chip();
}

StatusOr<bool> Runtime::GetDeviceCapability(int device, Feature feature) const {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  switch (feature) {
    case Feature::kTaskUpdate: return dev->device->chip().task_update_supported;
  }
  return Status::ParamInvalid("npu_sim: unknown feature");
}

VTime Runtime::HostClock() const { return CurrentHost().clock; }
HostSide& Runtime::CurrentHostSide() const { return CurrentHost(); }

VTime Runtime::HostCall(DeviceEntry& dev, std::string_view what) {
  HostSide& host = CurrentHost();
  const VTime start = host.clock;
  const VTime latency = dev.device->chip().host_launch_latency_ns;
  host.clock += latency;
  dev.device->host_interactions.fetch_add(1, std::memory_order_relaxed);
  if (dev.device->tracing()) {
    const auto d = static_cast<std::size_t>(dev.device->id());
    if (host.tracks.size() <= d) host.tracks.resize(d + 1, nullptr);
    if (host.tracks[d] == nullptr) {
      host.tracks[d] = trace_->AddTrack(
          dev.device->id(), host.name.empty() ? fmt::format("host thread {}", next_host_track_.fetch_add(1)) : host.name);
    }
    host.tracks[d]->Add(TraceEvent{std::string(what), start, latency, dev.device->deterministic() ? -1 : WallNs(), {}});
  }
  return host.clock;
}

template <typename R>
StatusOr<R> Runtime::Wait(actors::Future<StatusOr<R>>& future, Timeout timeout, std::string_view what) {
  if (!timeout || actors::detail::InHandler()) return future.Get();
  if (!future.WaitFor(*timeout))
    return Status::Timeout("{} did not complete within {} ms", what, timeout->count());
  return future.Get();
}

Status Runtime::WaitStatus(actors::Future<Status>& future, Timeout timeout, std::string_view what) {
  if (!timeout || actors::detail::InHandler()) return future.Get();
  if (!future.WaitFor(*timeout)) return Status::Timeout("{} did not complete within {} ms", what, timeout->count());
  return future.Get();
}

// ---- memory -------------------------------------------------------------------------------------
StatusOr<DevicePtr> Runtime::Malloc(int device, std::uint64_t bytes, Placement placement, std::string tag,
                                    PagePolicy pages) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  HostCall(*dev, "malloc");
  return dev->device->memory().Allocate(bytes, placement, tag.empty() ? fmt::format("malloc {} bytes", bytes) : tag,
                                        pages);
}

Status Runtime::Free(int device, DevicePtr ptr) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  HostCall(*dev, "free");
  NPUFLOW_RETURN_IF_ERROR(dev->device->memory().Free(ptr));
  if (race_) race_->ForgetAllocation(device, ptr.allocation());
  return Status::Ok();
}

namespace {
Task CopyTask(CopyKind kind, DevicePtr dst_dev, DevicePtr src_dev, void* dst_host, const void* src_host,
              std::uint64_t bytes) {
  Task t = Task::Copy(kind, bytes);
  t.dst_dev = dst_dev;
  t.src_dev = src_dev;
  t.dst_host = dst_host;
  t.src_host = src_host;
  return t;
}
}  // namespace

Status Runtime::MemcpyH2DAsync(Stream stream, DevicePtr dst, const void* src, std::uint64_t bytes) {
  if (src == nullptr) return Status::ParamInvalid("memcpy H2D: null host source");
  return SubmitTasks(stream, {CopyTask(CopyKind::kHostToDevice, dst, {}, nullptr, src, bytes)}, "memcpy H2D").status();
}
Status Runtime::MemcpyD2HAsync(Stream stream, void* dst, DevicePtr src, std::uint64_t bytes) {
  if (dst == nullptr) return Status::ParamInvalid("memcpy D2H: null host destination");
  return SubmitTasks(stream, {CopyTask(CopyKind::kDeviceToHost, {}, src, dst, nullptr, bytes)}, "memcpy D2H").status();
}
Status Runtime::MemcpyD2DAsync(Stream stream, DevicePtr dst, DevicePtr src, std::uint64_t bytes) {
  return SubmitTasks(stream, {CopyTask(CopyKind::kDeviceToDevice, dst, src, nullptr, nullptr, bytes)}, "memcpy D2D")
      .status();
}
Status Runtime::MemcpyPeerAsync(Stream stream, int dst_device, DevicePtr dst, DevicePtr src, std::uint64_t bytes) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * peer, Dev(dst_device));
  if (dst_device == stream.device)
    return Status::ParamInvalid("memcpy P2P: device {} to itself (use a D2D copy)", dst_device);
  Task t = CopyTask(CopyKind::kPeerToPeer, dst, src, nullptr, nullptr, bytes);
  t.peer_device = dst_device;
  t.peer_memory = &peer->device->memory();
  return SubmitTasks(stream, {std::move(t)}, "memcpy P2P").status();
}
Status Runtime::MemcpyH2D(int device, DevicePtr dst, const void* src, std::uint64_t bytes) {
  NPUFLOW_RETURN_IF_ERROR(MemcpyH2DAsync(DefaultStream(device), dst, src, bytes));
  return FinishSyncCopy(device, "memcpy H2D");
}
Status Runtime::MemcpyD2H(int device, void* dst, DevicePtr src, std::uint64_t bytes) {
  NPUFLOW_RETURN_IF_ERROR(MemcpyD2HAsync(DefaultStream(device), dst, src, bytes));
  return FinishSyncCopy(device, "memcpy D2H");
}
Status Runtime::MemcpyD2D(int device, DevicePtr dst, DevicePtr src, std::uint64_t bytes) {
  NPUFLOW_RETURN_IF_ERROR(MemcpyD2DAsync(DefaultStream(device), dst, src, bytes));
  return FinishSyncCopy(device, "memcpy D2D");
}

// A copy that does not end within copy_timeout (a hung DMA channel) aborts the default stream:
// it and the copies queued behind it fail, the stream serves the next ones, and the abort's
// synchronize returns once nothing of them can still write (the units' work gate).
Status Runtime::FinishSyncCopy(int device, std::string_view what) {
  const Stream stream = DefaultStream(device);
  const Timeout timeout = options_.copy_timeout.count() > 0 ? Timeout(options_.copy_timeout) : std::nullopt;
  Status s = SynchronizeStream(stream, timeout);
  if (s.code() != StatusCode::kTimeout) return s;
  (void)AbortStream(stream);
  (void)SynchronizeStream(stream, std::chrono::seconds(10));  // collect the abort
  return Status::Timeout("npu_sim: device {}: synchronous {} did not complete within {} ms; the default stream was "
                         "aborted",
                         device, what, options_.copy_timeout.count());
}

// ---- streams ------------------------------------------------------------------------------------
StatusOr<Stream> Runtime::CreateStream(int device) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  HostCall(*dev, "create stream");
  std::unique_lock<std::mutex> lock(dev->mu);
  if (dev->device->live_streams() >= static_cast<std::size_t>(dev->device->chip().max_streams))
    return Status::MemoryAllocation("npu_sim: device {}: all {} streams are in use", device,
                                    dev->device->chip().max_streams);
  if (auto reused = dev->device->ReuseStream()) {
    // Claimed under the lock (not live yet, so nobody else reaches it); reset after unlocking:
    // the device lock is never held across a wait, since actor handlers take it too (Submit),
    // and a wait that holds them all would starve the stream that has to answer.
    HostStream& hs = *dev->streams[*reused];
    lock.unlock();
    Status reset = hs.addr.AskInOrder(ResetStream{}).Get();
    lock.lock();
    if (!reset.ok()) {
      (void)dev->device->RetireStream(*reused);  // back to the pool
      return reset;
    }
    std::lock_guard<std::mutex> slock(hs.mu);
    hs.next_task = 0;
    hs.model = -1;
    hs.live = true;
    return Stream{device, *reused};
  }
  const auto id = static_cast<StreamId>(dev->streams.size());
  auto hs = std::make_unique<HostStream>();
  hs->addr = system_->Spawn<StreamActor>(fmt::format("dev{}.stream{}", device, id), dev->device.get(), id, &hs->gate);
  hs->live = true;
  const StreamId registered = dev->device->AddStream(hs->addr);
  dev->streams.push_back(std::move(hs));  // first: the actor keeps a pointer to its gate
  if (registered != id) return Status::Internal("npu_sim: stream table out of step ({} vs {})", registered, id);
  return Stream{device, id};
}

StatusOr<Runtime::HostStream*> Runtime::HostStreamOf(Stream stream) const {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(stream.device));
  std::lock_guard<std::mutex> lock(dev->mu);
  if (stream.id >= dev->streams.size() || !dev->streams[stream.id]->live)
    return Status::NotFound("npu_sim: device {} has no stream {}", stream.device, stream.id);
  return dev->streams[stream.id].get();
}

Status Runtime::DestroyStream(Stream stream) {
  if (stream.id == 0) return Status::ParamInvalid("npu_sim: the default stream of device {} cannot be destroyed", stream.device);
  NPUFLOW_ASSIGN_OR_RETURN(HostStream * hs, HostStreamOf(stream));
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(stream.device));
  HostCall(*dev, "destroy stream");
  {
    std::lock_guard<std::mutex> lock(hs->mu);
    if (hs->model >= 0)
      return Status::ParamInvalid("npu_sim: stream {} of device {} is bound to model {}; destroy the model first",
                                  stream.id, stream.device, hs->model);
    hs->live = false;
  }
  hs->addr.SendInOrder(npu_sim::AbortStream{Status::Aborted("device {} stream {}: destroyed", stream.device, stream.id)});
  std::lock_guard<std::mutex> lock(dev->mu);
  return dev->device->RetireStream(stream.id);
}

Status Runtime::SynchronizeStream(Stream stream, Timeout timeout) {
  return SyncStream(stream, Synchronize{race_ ? HostRaceAgent() : kNoRaceAgent}, timeout);
}

Status Runtime::SynchronizeSubmission(Stream stream, std::uint32_t first_task, std::uint32_t task_count,
                                      Timeout timeout) {
  return SyncStream(stream, Synchronize{race_ ? HostRaceAgent() : kNoRaceAgent, first_task, task_count, true}, timeout);
}

Status Runtime::SyncStream(Stream stream, Synchronize sync, Timeout timeout) {
  NPUFLOW_ASSIGN_OR_RETURN(HostStream * hs, HostStreamOf(stream));
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(stream.device));
  HostCall(*dev, "synchronize stream");
  auto done = hs->addr.AskInOrder<VTime>(sync);
  auto end = Wait(done, timeout, fmt::format("device {} stream {} synchronize", stream.device, stream.id));
  if (!end.ok()) return end.status();
  CurrentHost().clock = std::max(HostClock(), *end);
  return Status::Ok();
}

actors::Future<StatusOr<VTime>> Runtime::SynchronizeStreamAsync(Stream stream) {
  return SyncStreamAsync(stream, Synchronize{race_ ? HostRaceAgent() : kNoRaceAgent});
}

actors::Future<StatusOr<VTime>> Runtime::SynchronizeSubmissionAsync(Stream stream, std::uint32_t first_task,
                                                                    std::uint32_t task_count) {
  return SyncStreamAsync(stream, Synchronize{race_ ? HostRaceAgent() : kNoRaceAgent, first_task, task_count, true});
}

actors::Future<StatusOr<VTime>> Runtime::SyncStreamAsync(Stream stream, Synchronize sync) {
  auto hs = HostStreamOf(stream);
  if (!hs.ok()) return actors::Future<StatusOr<VTime>>::Ready(hs.status());
  auto dev = Dev(stream.device);
  HostCall(**dev, "synchronize stream");
  return (*hs)->addr.AskInOrder<VTime>(sync);
}

Status Runtime::AbortStream(Stream stream) {
  NPUFLOW_ASSIGN_OR_RETURN(HostStream * hs, HostStreamOf(stream));
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(stream.device));
  HostCall(*dev, "abort stream");
  {
    std::lock_guard<std::mutex> lock(hs->mu);
    if (hs->model >= 0)
      return Status::ParamInvalid("npu_sim: device {} stream {} is bound to model {}; abort the model", stream.device,
                                  stream.id, hs->model);
  }
  // Units stop at their next part, before the abort reaches the stream. Not in deterministic mode:
  // there the abort's message comes at a fixed point of the run, and a mark raised from this
  // thread would stop the work at a point that depends on thread timing.
  if (!dev->device->deterministic()) hs->gate.RequestStop();
  hs->addr.SendInOrder(npu_sim::AbortStream{Status::Aborted("device {} stream {}: aborted", stream.device, stream.id)});
  return Status::Ok();
}

StatusOr<std::uint32_t> Runtime::SubmitTasks(Stream stream, std::vector<Task> tasks, std::string_view what) {
  NPUFLOW_ASSIGN_OR_RETURN(HostStream * hs, HostStreamOf(stream));
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(stream.device));
  const VTime at = HostCall(*dev, what);
  std::lock_guard<std::mutex> lock(hs->mu);
  if (hs->model >= 0)
    return Status::ParamInvalid("npu_sim: device {} stream {} is bound to model {}; launch on a host stream",
                                stream.device, stream.id, hs->model);
  const auto first = static_cast<std::uint32_t>(hs->next_task);
  hs->next_task += tasks.size();
  RaceTicket ticket = kNoRaceTicket;
  if (race_) {
    race_->Critical(HostRaceAgent(), RaceDetector::HostStreamKey(stream.device, stream.id));
    for (const Task& t : tasks)  // rtModelExecute names the model: its load happened before
      if (t.kind == TaskKind::kModelExecute)
        race_->Critical(HostRaceAgent(), RaceDetector::HostModelKey(stream.device, t.model));
    ticket = race_->HostSnapshot(HostRaceAgent());
  }
  // Under the stream's lock, so the stream's order of submissions is the order of their ids.
  hs->addr.SendInOrder(npu_sim::Submit{std::move(tasks), at, ticket});
  return first;
}

StatusOr<std::uint32_t> Runtime::Submit(Stream stream, std::vector<Task> tasks) {
  if (tasks.empty()) return Status::ParamInvalid("npu_sim: Submit of no tasks");
  return SubmitTasks(stream, std::move(tasks), "submit");
}

// ---- events -------------------------------------------------------------------------------------
StatusOr<Event> Runtime::CreateEvent(int device, EventKind kind) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  HostCall(*dev, "create event");
  if (dev->device->live_events.load() >= static_cast<std::size_t>(dev->device->chip().max_events))
    return Status::MemoryAllocation("npu_sim: device {}: all {} events are in use", device,
                                    dev->device->chip().max_events);
  NPUFLOW_ASSIGN_OR_RETURN(EventId id, dev->device->events.Ask<EventId>(npu_sim::CreateEvent{kind == EventKind::kLatch}).Get());
  return Event{device, id};
}
Status Runtime::DestroyEvent(Event event) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(event.device));
  HostCall(*dev, "destroy event");
  NPUFLOW_RETURN_IF_ERROR(dev->device->events.Ask(npu_sim::DestroyEvent{event.id}).Get());
  if (race_) race_->ForgetSync(RaceDetector::EventKey(event.device, event.id));
  return Status::Ok();
}
Status Runtime::RecordEvent(Event event, Stream stream) {
  if (event.device != stream.device)
    return Status::ParamInvalid("npu_sim: event of device {} recorded on a stream of device {}", event.device,
                                stream.device);
  return SubmitTasks(stream, {Task::Record(event.id)}, "record event").status();
}
Status Runtime::StreamWaitEvent(Stream stream, Event event) {
  if (event.device != stream.device)
    return Status::ParamInvalid("npu_sim: stream of device {} waits on an event of device {}", stream.device,
                                event.device);
  return SubmitTasks(stream, {Task::Wait(event.id)}, "wait event").status();
}
StatusOr<bool> Runtime::QueryEvent(Event event) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(event.device));
  HostCall(*dev, "query event");
  return dev->device->events.Ask<bool>(npu_sim::QueryEvent{event.id}).Get();
}
Status Runtime::SynchronizeEvent(Event event, Timeout timeout) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(event.device));
  HostCall(*dev, "synchronize event");
  auto f = dev->device->events.Ask<VTime>(HostWaitEvent{event.id});
  auto at = Wait(f, timeout, fmt::format("device {} event {} synchronize", event.device, event.id));
  if (!at.ok()) return at.status();
  if (race_) {
    race_->Acquire(HostRaceAgent(), RaceDetector::EventKey(event.device, event.id));
    race_->Release(HostRaceAgent(), RaceDetector::kHostWorld);
  }
  CurrentHost().clock = std::max(HostClock(), *at);
  return Status::Ok();
}
Status Runtime::ResetEvent(Event event) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(event.device));
  HostCall(*dev, "reset event");
  return dev->device->events.Ask(npu_sim::ResetEvent{event.id}).Get();
}

// ---- kernels ------------------------------------------------------------------------------------
Status Runtime::LaunchKernel(Stream stream, std::string_view kernel, std::uint32_t block_dim,
                             std::vector<std::uint64_t> args, std::uint64_t tiling_key) {
  NPUFLOW_ASSIGN_OR_RETURN(const KernelDef* def, KernelRegistry::Global().Find(kernel));
  if (def->engine != Engine::kAICore)
    return Status::ParamInvalid("npu_sim: kernel '{}' runs on {}, not AICore: use LaunchAicpuKernel", kernel,
                                EngineName(def->engine));
  if (block_dim == 0 || (block_dim > 65535 && block_dim != kTilingSinkBlockDim))
    return Status::ParamInvalid("npu_sim: kernel '{}': block_dim {} out of range (1 to 65535)", kernel, block_dim);
  return SubmitTasks(stream, {Task::Kernel(def, block_dim, std::move(args), tiling_key)}, def->name).status();
}

Status Runtime::LaunchAicpuKernel(Stream stream, std::string_view kernel, std::vector<std::uint64_t> args) {
  NPUFLOW_ASSIGN_OR_RETURN(const KernelDef* def, KernelRegistry::Global().Find(kernel));
  if (def->engine != Engine::kAICpu)
    return Status::ParamInvalid("npu_sim: kernel '{}' runs on {}, not AICPU: use LaunchKernel", kernel,
                                EngineName(def->engine));
  return SubmitTasks(stream, {Task::Kernel(def, 1, std::move(args))}, def->name).status();
}

// ---- models -------------------------------------------------------------------------------------
StatusOr<Model> Runtime::CreateModel(int device) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  HostCall(*dev, "create model");
  std::lock_guard<std::mutex> lock(dev->mu);
  const auto id = static_cast<std::uint32_t>(dev->models.size());
  dev->models.push_back(ModelEntry{
      system_->Spawn<DeviceModelActor>(fmt::format("dev{}.model{}", device, id), dev->device.get(), id), {}});
  dev->device->SetModel(id, dev->models.back().addr);
  return Model{device, id};
}

StatusOr<Runtime::ModelEntry*> Runtime::ModelOf(Model model) const {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(model.device));
  std::lock_guard<std::mutex> lock(dev->mu);
  return LiveModel(*dev, model);
}

StatusOr<Runtime::ModelEntry*> Runtime::LiveModel(DeviceEntry& dev, Model model) const {
  if (model.id >= dev.models.size() || !dev.models[model.id].live)
    return Status::NotFound("npu_sim: device {} has no model {}", model.device, model.id);
  return &dev.models[model.id];
}

Status Runtime::BindStream(Model model, Stream stream) {
  if (model.device != stream.device)
    return Status::ParamInvalid("npu_sim: model of device {} cannot bind a stream of device {}", model.device,
                                stream.device);
  NPUFLOW_ASSIGN_OR_RETURN(ModelEntry * m, ModelOf(model));
  NPUFLOW_ASSIGN_OR_RETURN(HostStream * hs, HostStreamOf(stream));
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(model.device));
  HostCall(*dev, "bind stream");
  {
    std::lock_guard<std::mutex> lock(hs->mu);
    if (hs->model >= 0)
      return Status::ParamInvalid("npu_sim: device {} stream {} is already bound to model {}", stream.device, stream.id,
                                  hs->model);
    if (hs->next_task > 0 || stream.id == 0)
      return Status::ParamInvalid("npu_sim: device {} stream {} has host work; bind a fresh stream to a model",
                                  stream.device, stream.id);
    hs->model = model.id;
  }
  Status s = m->addr.Ask(BindModelStream{stream.id, hs->addr}).Get();
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(hs->mu);
    hs->model = -1;
    return s;
  }
  std::lock_guard<std::mutex> lock(dev->mu);
  m->streams.push_back(stream.id);
  if (race_) race_->Critical(HostRaceAgent(), RaceDetector::HostModelKey(model.device, model.id));
  return Status::Ok();
}

StatusOr<Runtime::HostStream*> Runtime::BoundStreamOf(Model model, Stream stream) const {
  NPUFLOW_ASSIGN_OR_RETURN(HostStream * hs, HostStreamOf(stream));
  std::lock_guard<std::mutex> lock(hs->mu);
  if (hs->model != static_cast<std::int64_t>(model.id) || model.device != stream.device)
    return Status::ParamInvalid("npu_sim: device {} stream {} is not bound to model {}", stream.device, stream.id,
                                model.id);
  return hs;
}

Status Runtime::LoadTasks(Model model, Stream stream, std::vector<Task> tasks, std::vector<IoPatch> patches) {
  NPUFLOW_ASSIGN_OR_RETURN(ModelEntry * m, ModelOf(model));
  NPUFLOW_ASSIGN_OR_RETURN(HostStream * hs, BoundStreamOf(model, stream));
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(stream.device));
  for (const Task& t : tasks) {
    if ((t.kind == TaskKind::kKernel || t.kind == TaskKind::kAicpuKernel) && t.kernel == nullptr)
      return Status::ParamInvalid("npu_sim: task list for stream {} has a kernel task without a kernel", stream.id);
  }
  std::uint32_t slots = 0;
  for (const IoPatch& p : patches) slots = std::max(slots, p.slot + 1);
  HostCall(*dev, "load tasks");
  NPUFLOW_RETURN_IF_ERROR(hs->addr.AskInOrder(LoadProgram{std::move(tasks), std::move(patches)}).Get());
  std::lock_guard<std::mutex> lock(dev->mu);
  m->io_slots = std::max(m->io_slots, slots);
  if (race_) race_->Critical(HostRaceAgent(), RaceDetector::HostModelKey(model.device, model.id));
  return Status::Ok();
}

Status Runtime::ElideWaits(Model model, Stream stream, std::vector<std::uint32_t> tasks) {
  NPUFLOW_RETURN_IF_ERROR(ModelOf(model).status());
  NPUFLOW_ASSIGN_OR_RETURN(HostStream * hs, BoundStreamOf(model, stream));
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(stream.device));
  HostCall(*dev, "elide waits");
  if (race_) race_->Critical(HostRaceAgent(), RaceDetector::HostModelKey(model.device, model.id));
  return hs->addr.AskInOrder(npu_sim::ElideWaits{std::move(tasks)}).Get();
}

actors::Future<Status> Runtime::ElideWaitsAsync(Model model, Stream stream, std::vector<std::uint32_t> tasks) {
  if (auto m = ModelOf(model); !m.ok()) return actors::Future<Status>::Ready(m.status());
  auto hs = BoundStreamOf(model, stream);
  if (!hs.ok()) return actors::Future<Status>::Ready(hs.status());
  auto dev = Dev(stream.device);
  if (!dev.ok()) return actors::Future<Status>::Ready(dev.status());
  HostCall(**dev, "elide waits");
  if (race_) race_->Critical(HostRaceAgent(), RaceDetector::HostModelKey(model.device, model.id));
  return (*hs)->addr.AskInOrder(npu_sim::ElideWaits{std::move(tasks)});
}

StatusOr<Runtime::CheckedRun> Runtime::CheckRun(Model model, std::vector<std::uint64_t> io) const {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(model.device));
  CheckedRun run{dev, nullptr, nullptr};
  std::uint32_t slots;
  {
    std::lock_guard<std::mutex> lock(dev->mu);
    NPUFLOW_ASSIGN_OR_RETURN(run.model, LiveModel(*dev, model));
    slots = run.model->io_slots;
  }
  if (io.empty()) return run;
  if (io.size() != slots)
    return Status::ParamInvalid("npu_sim: device {} model {} takes {} I/O addresses, got {}", model.device, model.id,
                                slots, io.size());
  for (std::size_t i = 0; i < io.size(); ++i)
    if (io[i] == 0) return Status::ParamInvalid("npu_sim: device {} model {}: I/O address {} is null", model.device, model.id, i);
  run.io = std::make_shared<const std::vector<std::uint64_t>>(std::move(io));
  return run;
}

actors::Future<StatusOr<VTime>> Runtime::ExecuteModelAsync(Model model, std::vector<std::uint64_t> io) {
  auto run = CheckRun(model, std::move(io));
  if (!run.ok()) return actors::Future<StatusOr<VTime>>::Ready(run.status());
  const VTime at = HostCall(*run->dev, "execute model");
  npu_sim::ExecuteModel request{at, std::move(run->io)};
  if (race_) {
    request.race_requester = HostRaceAgent();
    request.race_host = true;
    race_->Critical(request.race_requester, RaceDetector::HostModelKey(model.device, model.id));
    request.race_ticket = race_->HostSnapshot(request.race_requester);
  }
  return run->model->addr.Ask<VTime>(std::move(request));
}

void Runtime::ExecuteModelReplyTo(Model model, std::vector<std::uint64_t> io, actors::Replier<VTime> reply,
                                  RunEndHook on_end) {
  auto run = CheckRun(model, std::move(io));
  if (!run.ok()) {
    on_end();
    return reply.Fail(run.status());
  }
  const VTime at = HostCall(*run->dev, "execute model");
  npu_sim::ExecuteModel request{at, std::move(run->io), on_end};
  if (race_) {
    request.race_requester = HostRaceAgent();
    request.race_host = true;
    race_->Critical(request.race_requester, RaceDetector::HostModelKey(model.device, model.id));
    request.race_ticket = race_->HostSnapshot(request.race_requester);
  }
  run->model->addr.Forward(std::move(request), std::move(reply));
}

Status Runtime::ExecuteModelOnStream(Model model, Stream stream, std::vector<std::uint64_t> io) {
  if (model.device != stream.device)
    return Status::ParamInvalid("npu_sim: model of device {} executed on a stream of device {}", model.device,
                                stream.device);
  NPUFLOW_ASSIGN_OR_RETURN(CheckedRun run, CheckRun(model, std::move(io)));
  if (race_) race_->Critical(HostRaceAgent(), RaceDetector::HostModelKey(model.device, model.id));
  return SubmitTasks(stream, {Task::ModelExecute(model.id, std::move(run.io))}, "execute model").status();
}

Status Runtime::DestroyModel(Model model) {
  NPUFLOW_ASSIGN_OR_RETURN(ModelEntry * m, ModelOf(model));
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(model.device));
  HostCall(*dev, "destroy model");
  if (race_) race_->Critical(HostRaceAgent(), RaceDetector::HostModelKey(model.device, model.id));
  NPUFLOW_RETURN_IF_ERROR(
      m->addr.Ask(npu_sim::AbortModel{Status::Aborted("device {} model {}: destroyed", model.device, model.id)}).Get());
  std::vector<StreamId> streams;
  {
    std::lock_guard<std::mutex> lock(dev->mu);
    m->live = false;
    streams = std::move(m->streams);
    dev->device->SetModel(model.id, {});
  }
  // Aborted, so nothing runs in it any more: its cell goes to the next model created. Anything
  // still sent to it (a bound stream's late completion) is dropped.
  system_->Retire(m->addr);
  for (StreamId id : streams) {
    HostStream* hs;
    {
      std::lock_guard<std::mutex> lock(dev->mu);
      hs = dev->streams[id].get();
    }
    {
      std::lock_guard<std::mutex> lock(hs->mu);
      hs->live = false;
    }
    std::lock_guard<std::mutex> lock(dev->mu);
    NPUFLOW_RETURN_IF_ERROR(dev->device->RetireStream(id));
  }
  return Status::Ok();
}

StatusOr<VTime> Runtime::ExecuteModel(Model model, std::vector<std::uint64_t> io, Timeout timeout) {
  auto future = ExecuteModelAsync(model, std::move(io));
  auto end = Wait(future, timeout, fmt::format("device {} model {} execute", model.device, model.id));
  if (!end.ok()) {
    if (end.status().code() == StatusCode::kTimeout) {
      // As on hardware: a run that times out is aborted, so nothing is left running.
      (void)AbortModel(model);
      return Status::Timeout("device {} model {}: execution did not complete within {} ms; aborted", model.device,
                             model.id, timeout->count());
    }
    return end.status();
  }
  CurrentHost().clock = std::max(HostClock(), *end);
  return *end;
}

// The model's streams' units stop at their next part, before the abort reaches the model's actor
// (WorkGate::stop_below); the streams then wait for the abort, which stops them as before.
void Runtime::StopModelWork(DeviceEntry& dev, const ModelEntry& model) {
  if (dev.device->deterministic()) return;  // as in AbortStream
  std::lock_guard<std::mutex> lock(dev.mu);
  for (StreamId id : model.streams)
    if (id < dev.streams.size()) dev.streams[id]->gate.RequestStop();
}

Status Runtime::AbortModel(Model model) {
  NPUFLOW_ASSIGN_OR_RETURN(ModelEntry * m, ModelOf(model));
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(model.device));
  HostCall(*dev, "abort model");
  StopModelWork(*dev, *m);
  return m->addr.Ask(npu_sim::AbortModel{Status::Aborted("device {} model {}: aborted", model.device, model.id)}).Get();
}

actors::Future<Status> Runtime::AbortModelAsync(Model model) {
  auto m = ModelOf(model);
  if (!m.ok()) return actors::Future<Status>::Ready(m.status());
  auto dev = Dev(model.device);
  HostCall(**dev, "abort model");
  StopModelWork(**dev, **m);
  return (*m)->addr.Ask(npu_sim::AbortModel{Status::Aborted("device {} model {}: aborted", model.device, model.id)});
}

// ---- faults and stats ----------------------------------------------------------------------------
Status Runtime::InjectFault(int device, FaultTarget target, int index, Fault fault) {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  if (fault.nth == 0) return Status::ParamInvalid("npu_sim: fault nth counts from 1, got 0");
  switch (target) {
    case FaultTarget::kStream: {
      NPUFLOW_ASSIGN_OR_RETURN(HostStream * hs, HostStreamOf(Stream{device, static_cast<StreamId>(index)}));
      return hs->addr.AskInOrder(SetStreamFault{fault}).Get();
    }
    case FaultTarget::kAICore: return dev->device->aicore.Ask(SetUnitFault{index, fault}).Get();
    case FaultTarget::kAICpu: return dev->device->aicpu.Ask(SetUnitFault{index, fault}).Get();
    case FaultTarget::kDma: return dev->device->dma.Ask(SetUnitFault{index, fault}).Get();
  }
  return Status::ParamInvalid("npu_sim: unknown fault target");
}

StatusOr<DeviceMemory::Mapping> Runtime::MapForHostWrite(int device, DevicePtr ptr, std::uint64_t bytes) const {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  return dev->device->memory().Map(ptr, bytes);
}

Status Runtime::ReadInPlace(int device, void* dst, DevicePtr src, std::uint64_t bytes) const {
  if (dst == nullptr && bytes > 0)
    return Status::ParamInvalid("device {}: read of {} bytes into a null host buffer", device, bytes);
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  NPUFLOW_ASSIGN_OR_RETURN(DeviceMemory::Mapping from, dev->device->memory().Map(src, bytes));
  const auto t0 = std::chrono::steady_clock::now();
  std::memcpy(dst, from.data(), bytes);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
  dev->device->dma_copy_ns.fetch_add(static_cast<std::uint64_t>(ns.count()), std::memory_order_relaxed);
  dev->device->dma_copy_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return Status::Ok();
}

StatusOr<DeviceStats> Runtime::Stats(int device) const {
  NPUFLOW_ASSIGN_OR_RETURN(DeviceEntry * dev, Dev(device));
  DeviceStats s;
  s.host_interactions = dev->device->host_interactions.load(std::memory_order_relaxed);
  s.tasks_executed = dev->device->tasks_executed.load(std::memory_order_relaxed);
  s.run_kernels = dev->device->run_kernels.load(std::memory_order_relaxed);
  s.copies_here = dev->device->copies_run_here.load(std::memory_order_relaxed);
  s.kernels_executed = dev->device->kernels_executed.load(std::memory_order_relaxed) + s.run_kernels;
  s.dma_copy_ns = dev->device->dma_copy_ns.load(std::memory_order_relaxed);
  s.kernel_ns = dev->device->kernel_ns();
  s.kernel_blocks = dev->device->kernel_blocks.load(std::memory_order_relaxed);
  s.dma_copy_bytes = dev->device->dma_copy_bytes.load(std::memory_order_relaxed);
  s.aicore_homes = dev->device->aicore_units.homes_given.load(std::memory_order_relaxed);
  s.aicpu_homes = dev->device->aicpu_units.homes_given.load(std::memory_order_relaxed);
  s.memory = dev->device->memory().Stats();
  s.streams = dev->device->live_streams();
  s.events = dev->device->live_events.load(std::memory_order_relaxed);
  return s;
}

std::uint64_t Runtime::KernelWallNs(int device) const {
  auto dev = Dev(device);
  return dev.ok() ? (*dev)->device->kernel_ns() : 0;
}

std::uint64_t Runtime::DmaCopyWallNs(int device) const {
  auto dev = Dev(device);
  return dev.ok() ? (*dev)->device->dma_copy_ns.load(std::memory_order_relaxed) : 0;
}

}  // namespace npuflow::npu_sim
