#include "npu_sim/units.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <utility>

#include <fmt/format.h>

#include "base/cycle_clock.h"

namespace npuflow::npu_sim {

double CopyBandwidth(const ChipSpec& chip, CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice: return chip.h2d_bandwidth_gbps;
    case CopyKind::kDeviceToHost: return chip.d2h_bandwidth_gbps;
    case CopyKind::kDeviceToDevice: return chip.d2d_bandwidth_gbps;
    case CopyKind::kPeerToPeer: return chip.link_bandwidth_gbps;
  }
  return 1;
}

namespace {

// Passes a SetUnitFault on to the unit or channel it names; the asker hears that one's answer.
template <typename Msg, typename TargetMsg>
void ForwardFault(actors::Context<Msg>& ctx, const actors::Address<TargetMsg>& target, const SetUnitFault& fault) {
  actors::Replier<void> reply = ctx.TakeReply();
  ctx.Then(target.Ask(SetUnitFault{fault}), [reply = std::move(reply)](Status s) mutable {
    if (s.ok()) reply.Reply(); else reply.Fail(s);
  });
}

}  // namespace

// ---- UnitActor ------------------------------------------------------------------------------------
namespace {

// A kernel function that throws fails its block: the part still reports, so its stream hears of it.
Status RunBlock(const KernelDef& def, KernelContext& ctx) {
  try {
    return def.run(ctx);
  } catch (const std::exception& e) {
    return Status::Internal("kernel {} threw: {}", def.name, e.what());
  } catch (...) {
    return Status::Internal("kernel {} threw", def.name);
  }
}

// The gate of a run of parts (On(RunBlocks)): entered once for the run, and looked at again before
// each part with plain loads, so an abort still stops the run at its next part (as each part's own
// Enter did), while the run pays one Enter and one Leave, not one each part. Left before the run
// reports: the stream that waits for the gate to empty (StreamActor::NewEpoch) may be the one told.
class RunGate {
 public:
  RunGate(WorkGate* gate, std::uint64_t epoch) : gate_(gate), epoch_(epoch) {
    entered_ = gate_ == nullptr || gate_->Enter(epoch_);
  }
  ~RunGate() { Leave(); }
  RunGate(const RunGate&) = delete;
  RunGate& operator=(const RunGate&) = delete;
  // Whether the next part may start; once not, the rest of the run is out too.
  bool Open() {
    if (paused_) {
      paused_ = false;
      entered_ = gate_->Enter(epoch_);
      return entered_;
    }
    if (gate_ == nullptr || !entered_) return entered_;
    if (gate_->Admits(epoch_)) return true;
    Leave();
    return false;
  }
  // Shut because a host caller is stopping the stream's work (WorkGate::stop_below).
  bool Stopped() const { return gate_ != nullptr && gate_->Stopped(epoch_); }
  void Leave() {
    if (entered_ && gate_ != nullptr) gate_->Leave();
    entered_ = false;
  }
  // Out of the gate while the run waits for a unit's state (held by another stream's part), so an
  // abort of this stream does not wait for that part too; the next Open enters again.
  void Pause() {
    if (!entered_ || gate_ == nullptr) return;
    gate_->Leave();
    entered_ = false;
    paused_ = true;
  }

 private:
  WorkGate* gate_;
  std::uint64_t epoch_;
  bool entered_ = false;
  bool paused_ = false;
};

// What a run's parts fold into their job and device at once, after the run: one atomic each per
// run, not per part (about 370 parts a GPT-2 117M decode step, at 1 worker in about 100 runs).
struct PartTally {
  VTime end = 0;
  std::uint64_t ticks = 0;   // CycleClock ticks in the kernel's functions
  std::uint64_t blocks = 0;
  std::uint32_t parts = 0;   // parts that report (a hung one never does)
};

// Runs blocks [first, first + count) of `job` as one part on `unit`, which the caller holds, and
// adds it to `tally`; a failure goes into the job at once (the first wins). The caller folds the
// tally into the job after its run (FoldParts).
void RunPart(Device& device, UnitState& unit, KernelJob& job, std::uint32_t first, std::uint32_t count, VTime at,
             RunGate& gate, PartTally& tally) {
  unit.busy.PrefetchNext();  // reserved after the blocks: the line arrives while they run
  ++unit.runs;
  // Blocks run first (their results do not depend on time); their cost then takes the earliest
  // idle gap on this unit at or after the kernel's start.
  VTime t = 0;
  Status status;
  if (unit.fault_at != 0 && unit.runs == unit.fault_at) {
    switch (unit.fault->kind) {
      case FaultKind::kHang:
        return;  // never reports (nor runs): the stream, and whoever waits on it, times out
      case FaultKind::kFail:
        status = Status::Failed("device {} stream {} task {} ({}): injected fault on {}", device.id(), job.stream_id,
                                job.task, job.name, unit.name);
        break;
      case FaultKind::kDelay:
        t += unit.fault->delay;
        break;
      case FaultKind::kEndOfSequence:
        status = Status::EndOfSequence("device {} stream {} task {} ({}): end of sequence on {}", device.id(),
                                       job.stream_id, job.task, job.name, unit.name);
        break;
    }
  }
  // The stream's task was aborted before these blocks started: skip them (the report is stale).
  bool stopped = false;
  if (!gate.Open()) {
    stopped = gate.Stopped();
    status = Status::Aborted("device {} stream {} task {} ({}): aborted", device.id(), job.stream_id, job.task,
                             job.name);
  }
  // CycleClock, not steady_clock: two readings a part, and steady_clock's clock page is cold after
  // the part's weights went through the caches (docs/gpt2.md "A part's time read from the TSC").
  const std::uint64_t wall0 = CycleClock::Now();
  for (std::uint32_t b = first; status.ok() && b < first + count; ++b) {
    KernelContext kctx(&device.memory(), job.args, b, job.block_dim, job.tiling_key, job.launch);
    status = RunBlock(*job.def, kctx);
    if (!status.ok()) {
      status = status.WithContext(fmt::format("device {} stream {} task {} ({}) block {} on {}", device.id(),
                                              job.stream_id, job.task, job.name, b, unit.name));
      break;
    }
    t += job.def->cost ? std::max<VTime>(job.def->cost(kctx, device.chip()), 0) : 0;
  }
  const std::uint64_t wall1 = CycleClock::Now();
  // Never negative: a thread moved to a core whose counter is behind counts nothing.
  const std::uint64_t wall_ticks = wall1 > wall0 ? wall1 - wall0 : 0;
  const VTime start = unit.busy.Reserve(at, t);
  t += start;
  if (device.tracing() && unit.track) {
    // The wall time the part's kernel functions took (not in deterministic mode, whose traces are
    // byte-identical run to run).
    const TraceArg run_ns = device.deterministic()
                                ? TraceArg{}
                                : TraceArg{"run_ns", static_cast<std::uint64_t>(CycleClock::ToNs(wall_ticks))};
    unit.track->Add(TraceEvent{count == job.block_dim ? job.name : fmt::format("{} [{}+{}]", job.name, first, count),
                               start, t - start, device.deterministic() ? -1 : WallNs(),
                               {TraceArg{"stream", job.stream_id}, TraceArg{"task", job.task},
                                TraceArg{"block_dim", job.block_dim}, TraceArg{"tiling_key", job.tiling_key}, run_ns}});
  }
  if (!status.ok() && !job.failed.exchange(true, std::memory_order_relaxed)) {
    job.status = std::move(status);
    job.stopped = stopped;
  }
  tally.end = std::max(tally.end, t);
  tally.ticks += wall_ticks;
  tally.blocks += count;
  ++tally.parts;
}

// Folds a run's parts into the device's counters and the job; if they were the job's last, starts
// the next kernel of its run of kernels (KernelJob::next) on `group`, or reports to its stream when
// there is none or this one failed. The caller must not touch `job` afterwards (the stream reuses a
// job once it is reported), nor at all when the tally has no part: the job may be reused already.
void FoldParts(Device& device, Device::UnitGroup& group, KernelJob& job, const PartTally& tally) {
  if (tally.parts == 0) return;
  device.kernel_ticks.fetch_add(tally.ticks, std::memory_order_relaxed);
  device.kernel_blocks.fetch_add(tally.blocks, std::memory_order_relaxed);
  VTime end = job.end.load(std::memory_order_relaxed);
  while (tally.end > end && !job.end.compare_exchange_weak(end, tally.end, std::memory_order_relaxed)) {
  }
  if (job.parts_left.fetch_sub(tally.parts, std::memory_order_acq_rel) != tally.parts) return;
  KernelJob* next = std::exchange(job.next, nullptr);
  if (next != nullptr && !job.failed.load(std::memory_order_relaxed)) {
    // The stream would start it at this end plus the NOPs between and the launch overhead: the
    // same virtual time, without the report and the stream's turn in between. Inside the stream's
    // gate, so an abort either waits for this start (and finds it in the run's progress) or makes
    // it stop here, as the stream would not have started it either.
    GateScope gate(job.gate, job.epoch);
    if (gate.entered()) {
      const VTime before = job.end.load(std::memory_order_relaxed) + next->lead;
      const VTime at = before + device.chip().kernel_launch_overhead_ns;
      next->progress->epoch.store(job.epoch, std::memory_order_relaxed);
      next->progress->task.store(next->task, std::memory_order_relaxed);
      next->progress->clock.store(before, std::memory_order_relaxed);
      // Nothing on `next` after its parts are sent: the run may end and the stream reuse it.
      const bool split = std::min<std::uint32_t>(next->block_dim, static_cast<std::uint32_t>(group.units.size())) > 1 &&
                         group.lanes > 1;
      job.in_use.store(false, std::memory_order_release);  // the last look
      device.run_kernels.fetch_add(1, std::memory_order_relaxed);
      std::uint32_t home = next->home;
      SendKernelParts(group, next, at, home);
      // Its parts on this unit (sent to itself) may run in this very pass: its parts elsewhere must
      // not wait for them as this thread's handoff (with two workers, that serialized the two halves
      // of every kernel of a run: GPT-2 4 x 256 decoded 27% slower at 2 threads).
      if (split) actors::SpawnHandoffNow();
      return;
    }
    // Stopped: report this kernel as the stream would see it (its abort makes the report stale,
    // or a host caller's stop mark makes it one the stream ignores), and free the rest.
    if (!job.failed.exchange(true, std::memory_order_relaxed)) {
      job.status = Status::Aborted("device {} stream {} task {} ({}): aborted", device.id(), job.stream_id, next->task,
                                   next->name);
      job.stopped = gate.stopped(job.epoch);
    }
  }
  UnitDone report{job.epoch, job.task, job.end.load(std::memory_order_relaxed), std::move(job.status), job.stopped};
  job.status = Status::Ok();
  job.stopped = false;
  const StreamAddr stream = job.stream;
  // The kernels of the run that will not start now: free for the stream again.
  for (KernelJob* left = next; left != nullptr;) {
    KernelJob* const after = std::exchange(left->next, nullptr);
    left->in_use.store(false, std::memory_order_release);
    left = after;
  }
  job.in_use.store(false, std::memory_order_release);  // the last look: the stream may reuse it
  stream.Send(std::move(report));
}

}  // namespace

UnitActor::UnitActor(Device* device, Device::UnitGroup* group, int index)
    : device_(device), group_(group), index_(static_cast<std::uint32_t>(index)),
      budget_ticks_(CycleClock::FromNs(static_cast<double>(kGroupWallBudgetNs))) {}

namespace {
// Holds a unit's state for a scope (a kernel that throws still gives it back).
class Held {
 public:
  explicit Held(UnitState& unit) : unit_(unit) {}
  ~Held() { unit_.Give(); }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;

 private:
  UnitState& unit_;
};
}  // namespace

void UnitActor::On(SetUnitFault& m, Ctx& ctx) {
  UnitState& unit = group_->states[index_];
  unit.Take();
  Held held(unit);
  unit.fault = m.fault;
  unit.fault_at = m.fault.nth;
  unit.runs = 0;
  ctx.Reply();
}

// This unit's part, then the group's others on the units after it (see SendKernelParts).
void UnitActor::On(RunBlocks& run, Ctx&) {
  KernelJob* job = run.job;
  const std::uint32_t block_dim = job->block_dim;
  const auto n = static_cast<std::uint32_t>(group_->states.size());
  // In deterministic mode (one worker, so every unit is free) the run never stops early: what is
  // sent where must not depend on how long the kernels took.
  const bool budget = !device_->deterministic();
  PartTally tally;  // the job stays alive until it is folded: its parts here have not reported
  {
    RunGate gate(job->gate, job->epoch);
    UnitState& own = group_->states[index_];
    // Another unit's run may hold this unit's state for one of its parts: then this unit's own part
    // goes last, after the others, by when that part has most likely ended (and else it is waited
    // for: a holder never waits for anything).
    // Read intent: a write prefetch would take the line from a worker running a part there.
    for (std::uint32_t i = 1; i < run.group; ++i) __builtin_prefetch(&group_->states[(index_ + i) % n], 0);
    const bool own_first = own.TryTake();
    auto run_own = [&] {
      if (!own_first && !own.TryTake()) {
        gate.Pause();
        own.Take();
      }
      Held held(own);
      const auto [first, count] = PartBlocks(block_dim, run.parts, run.part);
      RunPart(*device_, own, *job, first, count, run.at, gate, tally);
    };
    if (own_first) run_own();
    for (std::uint32_t i = 1; i < run.group; ++i) {
      const std::uint32_t p = run.part + i, u = (index_ + i) % n;
      UnitState& unit = group_->states[u];
      if ((!budget || tally.ticks < budget_ticks_) && unit.TryTake()) {
        Held held(unit);
        const auto [f, c] = PartBlocks(block_dim, run.parts, p);
        RunPart(*device_, unit, *job, f, c, run.at, gate, tally);
      } else {
        group_->units[u].Send(RunBlocks{job, p, 1, run.parts, run.at});
      }
    }
    if (!own_first) run_own();
  }
  // The mappings the parts' kernels kept for their launch go before anyone hears the kernel ended
  // (LaunchMappings): once the stream knows, the host may free what they mapped.
  ThisThreadLaunchMappings().Release();
  FoldParts(*device_, *group_, *job, tally);
}

// ---- ClusterActor ---------------------------------------------------------------------------------
ClusterActor::ClusterActor(Device* device, Engine engine) : device_(device), engine_(engine) {}

void ClusterActor::On(AttachUnits& attach, Ctx& ctx) {
  units_ = std::move(attach.units);
  ctx.Reply();
}

void ClusterActor::On(SetUnitFault& fault, Ctx& ctx) {
  if (fault.unit < 0 || fault.unit >= static_cast<int>(units_.size())) {
    ctx.ReplyError(Status::ParamInvalid("device {}: no {} unit {} (it has {})", device_->id(), EngineName(engine_),
                                        fault.unit, units_.size()));
    return;
  }
  ForwardFault(ctx, units_[fault.unit], fault);
}

namespace {
// i's bits reversed: i's place in 0, 1/2, 1/4, 3/4, 1/8, 5/8, ... as a fraction of 2^32.
std::uint32_t ReverseBits(std::uint32_t r) {
  r = ((r >> 1) & 0x55555555u) | ((r & 0x55555555u) << 1);
  r = ((r >> 2) & 0x33333333u) | ((r & 0x33333333u) << 2);
  r = ((r >> 4) & 0x0F0F0F0Fu) | ((r & 0x0F0F0F0Fu) << 4);
  r = ((r >> 8) & 0x00FF00FFu) | ((r & 0x00FF00FFu) << 8);
  return (r >> 16) | (r << 16);
}
}  // namespace

// Called once per stream: the walk below is at most twice the units long.
std::uint32_t HomeUnit(std::uint32_t k, std::uint32_t units) {
  if (units <= 1) return 0;
  // The points i / 2^m (i's bits reversed, 2^m >= units) scaled to the units, each unit kept the
  // first time it comes: consecutive points are at most a unit apart, so the first 2^m of them
  // reach every unit once. The k-th stream takes the (k mod units)-th unit so reached.
  std::uint64_t span = 1;
  while (span < units) span <<= 1;
  const std::uint32_t want = k % units;
  std::vector<bool> seen(units, false);
  std::uint32_t found = 0;
  for (std::uint64_t i = 0; i < span; ++i) {
    const std::uint64_t point = ReverseBits(static_cast<std::uint32_t>(i));  // of 2^32
    const auto unit = static_cast<std::uint32_t>((point * units) >> 32);
    if (seen[unit]) continue;
    if (found++ == want) return unit;
    seen[unit] = true;
  }
  return want;  // not reached: the walk reaches every unit
}

void SendKernelParts(Device::UnitGroup& group, KernelJob* job, VTime at, std::uint32_t& home) {
  const auto n = static_cast<std::uint32_t>(group.units.size());
  const std::uint32_t parts = std::min<std::uint32_t>(job->block_dim, n);
  job->parts_left.store(parts, std::memory_order_relaxed);  // the sends below publish these
  job->end.store(at, std::memory_order_relaxed);
  job->failed.store(false, std::memory_order_relaxed);
  // The stream's first kernel takes its home from the device's counter; a relaxed counter is
  // enough (which unit runs a part never changes a result, only whose virtual clock it takes).
  if (home == Device::kNoHomeUnit) home = HomeUnit(group.homes_given.fetch_add(1, std::memory_order_relaxed), n);
  const std::uint32_t groups = std::min(parts, std::max<std::uint32_t>(group.lanes, 1));
  for (std::uint32_t g = 0; g < groups; ++g) {
    const std::uint32_t p0 = g * parts / groups, p1 = (g + 1) * parts / groups;
    group.units[(home + p0) % n].Send(RunBlocks{job, p0, p1 - p0, parts, at});
  }
}

// ---- DMA ------------------------------------------------------------------------------------------
DmaChannelActor::DmaChannelActor(Device* device, int index) : device_(device), index_(index) {
  if (device->tracing())
    device->dma_channels[static_cast<std::size_t>(index)].track =
        device->trace()->AddTrack(device->id(), fmt::format("dma {}", index));
}

Status DmaChannelActor::Copy(DeviceMemory& mem, const CopyRequest& req) {
  switch (req.kind) {
    case CopyKind::kHostToDevice: {
      if (req.data_in_place) return mem.Map(req.dst_dev, req.bytes).status();  // already written by the host
      if (req.src_host == nullptr) return Status::ParamInvalid("H2D copy with a null host source");
      NPUFLOW_ASSIGN_OR_RETURN(auto dst, mem.Map(req.dst_dev, req.bytes));
      std::memcpy(dst.data(), req.src_host, req.bytes);
      return Status::Ok();
    }
    case CopyKind::kDeviceToHost: {
      if (req.data_in_place) return mem.Map(req.src_dev, req.bytes).status();  // the host reads it (ReadInPlace)
      if (req.dst_host == nullptr) return Status::ParamInvalid("D2H copy with a null host destination");
      NPUFLOW_ASSIGN_OR_RETURN(auto src, mem.Map(req.src_dev, req.bytes));
      if (req.host_window == nullptr) {
        std::memcpy(req.dst_host, src.data(), req.bytes);
      } else if (!req.host_window->WriteIfOpen([&] { std::memcpy(req.dst_host, src.data(), req.bytes); })) {
        return Status::Aborted("D2H copy of {} bytes: its host buffer was given up by its owner (the caller stopped waiting)",
                               req.bytes);
      }
      return Status::Ok();
    }
    case CopyKind::kDeviceToDevice: {
      NPUFLOW_ASSIGN_OR_RETURN(auto src, mem.Map(req.src_dev, req.bytes));
      NPUFLOW_ASSIGN_OR_RETURN(auto dst, mem.Map(req.dst_dev, req.bytes));
      std::memmove(dst.data(), src.data(), req.bytes);
      return Status::Ok();
    }
    case CopyKind::kPeerToPeer: {
      if (req.peer_memory == nullptr) return Status::ParamInvalid("P2P copy without a peer device");
      NPUFLOW_ASSIGN_OR_RETURN(auto src, mem.Map(req.src_dev, req.bytes));
      NPUFLOW_ASSIGN_OR_RETURN(auto dst, req.peer_memory->Map(req.dst_dev, req.bytes));
      std::memcpy(dst.data(), src.data(), req.bytes);
      return Status::Ok();
    }
  }
  return Status::Internal("unknown copy kind");
}

void DmaChannelActor::On(SetUnitFault& m, Ctx& ctx) {
  DmaChannelState& state = device_->dma_channels[static_cast<std::size_t>(index_)];
  state.Take();
  state.fault = m.fault;
  state.runs = 0;
  state.Give();
  ctx.Reply();
}

CopyEnd RunCopy(Device& device, DmaChannelState& state, int channel, const CopyRequest& req, std::string_view name) {
  ++state.runs;
  VTime cost = device.chip().CopyCost(req.bytes, CopyBandwidth(device.chip(), req.kind));
  CopyEnd done;
  if (state.fault && state.runs == state.fault->nth) {
    if (state.fault->kind == FaultKind::kHang) {
      done.hung = true;
      return done;
    }
    if (state.fault->kind == FaultKind::kDelay) cost += state.fault->delay;
    if (state.fault->kind == FaultKind::kFail || state.fault->kind == FaultKind::kEndOfSequence)
      done.status = Status::Failed("device {} stream {} task {} ({}): injected fault on dma {}", device.id(),
                                   req.stream.id(), req.task, name, channel);
  }
  GateScope gate(done.status.ok() ? req.gate : nullptr, req.epoch);
  done.stopped = gate.stopped(req.epoch);
  if (!gate.entered()) {
    done.status = Status::Aborted("device {} task {} ({}): aborted before the copy started", device.id(), req.task, name);
  } else if (done.status.ok()) {
    const auto t0 = std::chrono::steady_clock::now();
    done.status = DmaChannelActor::Copy(device.memory(), req);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    if (!req.data_in_place) {
      device.dma_copy_ns.fetch_add(static_cast<std::uint64_t>(ns.count()), std::memory_order_relaxed);
      device.dma_copy_bytes.fetch_add(req.bytes, std::memory_order_relaxed);
    }
    if (!done.status.ok())
      done.status = done.status.WithContext(fmt::format("device {} task {} ({} {} bytes) on dma {}", device.id(),
                                                        req.task, CopyKindName(req.kind), req.bytes, channel));
  }
  const VTime start = state.busy.Reserve(req.at, cost);
  if (state.track) {
    state.track->Add(TraceEvent{name.empty() ? std::string(CopyKindName(req.kind)) : std::string(name), start, cost,
                                device.deterministic() ? -1 : WallNs(),
                                {TraceArg{"bytes", req.bytes}, TraceArg{"task", req.task}}});
  }
  done.end = start + cost;
  return done;
}

void DmaChannelActor::On(CopyRequest& req, Ctx&) {
  DmaChannelState& state = device_->dma_channels[static_cast<std::size_t>(index_)];
  state.Take();  // a stream's own copy may hold it
  CopyEnd done = RunCopy(*device_, state, index_, req, req.name);
  state.Give();
  device_->dma_routing.sent.fetch_sub(1, std::memory_order_release);  // run (or hung): see CopyHere
  if (done.hung) return;  // never reports: the stream, and whoever waits on it, times out
  req.stream.Send(UnitDone{req.epoch, req.task, done.end, std::move(done.status), done.stopped});
}

void DmaEngineActor::On(AttachChannels& attach, Ctx& ctx) {
  channels_ = std::move(attach.channels);
  ctx.Reply();
}

void DmaEngineActor::On(SetUnitFault& f, Ctx& ctx) {
  if (f.unit < 0 || f.unit >= static_cast<int>(channels_.size())) {
    ctx.ReplyError(Status::ParamInvalid("device {}: no dma channel {} (it has {})", device_->id(), f.unit,
                                        channels_.size()));
    return;
  }
  ForwardFault(ctx, channels_[f.unit], f);
}

// The channel that is free first; ties go to the lowest index (deterministic). A copy to a peer
// device takes the link to that device instead: one transfer at a time per link, at the link's
// bandwidth, on the link's own trace track.
void DmaEngineActor::On(CopyRequest& req, Ctx&) {
  if (req.kind == CopyKind::kPeerToPeer) return LinkCopy(req);
  DmaRouting& routing = device_->dma_routing;
  routing.Take();  // a stream picking a channel for its own copy may hold it
  const std::size_t best = routing.Pick();
  routing.Book(best, req.at, device_->chip().CopyCost(req.bytes, CopyBandwidth(device_->chip(), req.kind)));
  routing.Give();
  channels_[best].Send(std::move(req));
}

void DmaEngineActor::LinkCopy(CopyRequest& req) {
  Link& link = links_[req.peer_device];
  if (link.track == nullptr && device_->tracing())
    link.track = device_->trace()->AddTrack(device_->id(), fmt::format("link -> device {}", req.peer_device));
  const VTime cost = device_->chip().LinkCost(req.bytes);
  const VTime start = std::max(link.free_at, req.at);
  link.free_at = start + cost;
  Status status;
  bool stopped = false;
  {
    GateScope gate(req.gate, req.epoch);
    stopped = gate.stopped(req.epoch);
    status = gate.entered() ? DmaChannelActor::Copy(device_->memory(), req)
                            : Status::Aborted("device {} task {} ({}): aborted before the copy started", device_->id(),
                                              req.task, req.name);
  }
  if (!status.ok())
    status = status.WithContext(fmt::format("device {} task {} (P2P {} bytes to device {})", device_->id(), req.task,
                                            req.bytes, req.peer_device));
  if (link.track) {
    link.track->Add(TraceEvent{req.name.empty() ? std::string("P2P") : req.name, start, cost,
                               device_->deterministic() ? -1 : WallNs(),
                               {TraceArg{"bytes", req.bytes}, TraceArg{"task", req.task}}});
  }
  req.stream.Send(UnitDone{req.epoch, req.task, start + cost, std::move(status), stopped});
}

}  // namespace npuflow::npu_sim
