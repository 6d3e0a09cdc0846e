#include "npu_sim/stream_actor.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "npu_sim/units.h"

namespace npuflow::npu_sim {

StreamActor::StreamActor(Device* device, StreamId id, WorkGate* gate) : device_(device), id_(id), gate_(*gate) {
  name_ = fmt::format("stream {}", id);
  if (device->tracing()) track_ = device->trace()->AddTrack(device->id(), name_);
  if (device->race != nullptr) race_agent_ = device->race->StreamAgent(device->id(), id);
  gate_.epoch.store(epoch_);
}

// Stale completions of the old epoch are ignored from now on. `stop_work`: and the work it sent
// to units and channels is over: what has not started is skipped, what runs is waited for (a run
// of parts leaves the gate before its next part, and while it waits for a unit's state; a copy
// ends). A run with a hung part leaves when the run ends.
void StreamActor::NewEpoch(bool stop_work) {
  epoch_ = std::max(epoch_ + 1, gate_.stop_below.load(std::memory_order_seq_cst));
  gate_.epoch.store(epoch_, std::memory_order_seq_cst);
  if (!stop_work) return;
  while (gate_.inside.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

// Before task `t` (at exec_) starts: it comes after the host submission that made it, and an
// elided wait after the records of its event. A record orders what follows its event's waits.
void StreamActor::RaceBeforeTask(const Task& t) {
  RaceDetector& race = *device_->race;
  const std::uint64_t id = base_ + exec_;
  while (!race_tickets_.empty() && race_tickets_.front().first <= id) {
    race.AcquireTicket(race_agent_, race_tickets_.front().second);
    race.DropTicket(race_tickets_.front().second);
    race_tickets_.pop_front();
  }
  if (t.kind == TaskKind::kNop && t.elided_wait) race.Acquire(race_agent_, RaceDetector::EventKey(device_->id(), t.event));
  if (t.kind == TaskKind::kEventRecord) race.Release(race_agent_, RaceDetector::EventKey(device_->id(), t.event));
}

// The memory a kernel, copy or task update is about to touch.
void StreamActor::RaceAccesses(const Task& t, std::uint32_t task_id) {
  RaceDetector& race = *device_->race;
  const int dev = device_->id();
  const DeviceMemory* mem = &device_->memory();
  auto access = [&](int d, const DeviceMemory* m, DevicePtr p, std::uint64_t bytes, bool write) {
    race.OnAccess(d, m, race_agent_, task_id, t.display_name(), {p, bytes, write});
  };
  switch (t.kind) {
    case TaskKind::kKernel:
    case TaskKind::kAicpuKernel: {
      if (t.kernel->accesses == nullptr) {
        race.CountUndeclared();
        return;
      }
      race_scratch_.clear();
      const std::uint32_t block_dim = t.kind == TaskKind::kAicpuKernel ? 1 : snap_[exec_].block_dim;
      const KernelContext ctx(mem, t.args, 0, block_dim, snap_[exec_].tiling_key);
      if (!t.kernel->accesses(ctx, race_scratch_).ok()) return;  // the kernel itself fails on the same arguments
      for (const MemAccess& a : race_scratch_) access(dev, mem, a.ptr, a.bytes, a.write);
      return;
    }
    case TaskKind::kMemcpy:
      switch (t.copy) {
        case CopyKind::kHostToDevice: access(dev, mem, t.dst_dev, t.bytes, true); return;
        case CopyKind::kDeviceToHost: access(dev, mem, t.src_dev, t.bytes, false); return;
        case CopyKind::kDeviceToDevice:
          access(dev, mem, t.src_dev, t.bytes, false);
          access(dev, mem, t.dst_dev, t.bytes, true);
          return;
        case CopyKind::kPeerToPeer:
          access(dev, mem, t.src_dev, t.bytes, false);
          access(t.peer_device, t.peer_memory, t.dst_dev, t.bytes, true);
          return;
      }
      return;
    case TaskKind::kTaskUpdate:
      access(dev, mem, t.block_dim_addr, sizeof(std::uint32_t), false);
      access(dev, mem, t.tiling_key_addr, sizeof(std::uint64_t), false);
      return;
    default: return;
  }
}

void StreamActor::Trace(std::string_view name, VTime start, VTime duration, std::uint32_t task) {
  track_->Add(TraceEvent{std::string(name), start, duration, device_->deterministic() ? -1 : WallNs(),
                         {TraceArg{"task", task}}});
}

void StreamActor::ApplyElisions() {
  for (std::uint32_t i : elide_) {
    if (tasks_[i].kind == TaskKind::kEventWait) tasks_[i].elided_wait = true;
    tasks_[i].kind = TaskKind::kNop;
    tasks_[i].name.clear();
  }
  // The rows stay as they were: an elided wait is not a plain NOP (with the race detector on, it
  // orders what follows after its event's records), and a NOP elided again stays a plain one.
  elide_.clear();
}

void StreamActor::CountNopRows() {
  std::uint32_t row = 0;
  for (std::size_t i = tasks_.size(); i-- > 0;) {
    Task& t = tasks_[i];
    row = t.kind == TaskKind::kNop && !t.elided_wait ? row + 1 : 0;
    t.nop_row = row;
  }
}

Status StreamActor::Receive(Message& msg, Ctx& ctx) {
  if (!self_.valid()) self_ = ctx.self();
  return std::visit([&](auto& m) { return On(m, ctx); }, msg);
}

Status StreamActor::On(Submit& m, Ctx&) {
  if (mode_ == Mode::kModel)
    return Status::ParamInvalid("device {} {}: is bound to a model; host submissions are refused", device_->id(),
                                name_);
  AcceptSubmit(m);  // in submission order: the host sends them in order (SendInOrder)
  DropWhileInError();
  if (state_ == State::kIdle && exec_ < tasks_.size() && !draining_) {
    state_ = State::kRunning;
    Advance();
  }
  AnswerSyncs();
  return Status::Ok();
}

Status StreamActor::On(Synchronize& m, Ctx& ctx) {
  // Sent in order with the submissions, so every submission before it has arrived.
  std::uint64_t target = base_ + tasks_.size();
  std::uint64_t since = kNoSince;
  if (m.has_since) {  // a 32-bit task id: the 64-bit one at or below the target with those low bits
    const std::uint32_t back = static_cast<std::uint32_t>(target) - m.since;
    since = back <= target ? target - back : 0;
    target = std::min(target, since + m.count);  // the caller's own tasks
  }
  syncs_.push_back(PendingSync{target, ctx.template TakeReply<VTime>(), m.race_agent, since});
  AnswerSyncs();
  return Status::Ok();
}

Status StreamActor::On(LoadProgram& m, Ctx& ctx) {
  if (state_ != State::kIdle)
    return Status::ParamInvalid("device {} {}: cannot load a task list while it runs", device_->id(), name_);
  for (const IoPatch& p : m.patches) {
    const bool copy_field = p.field == IoPatch::kCopySrc || p.field == IoPatch::kCopyDst;
    if (p.task >= m.tasks.size() ||
        (copy_field ? m.tasks[p.task].kind != TaskKind::kMemcpy : p.field >= m.tasks[p.task].args.size()))
      return Status::ParamInvalid("device {} {}: I/O patch of task {} field {} does not match the task list",
                                  device_->id(), name_, p.task, p.field);
  }
  mode_ = Mode::kModel;
  patches_ = std::move(m.patches);
  elide_.clear();
  tasks_ = std::move(m.tasks);
  live_.resize(tasks_.size());
  snap_.resize(tasks_.size());
  for (std::size_t i = 0; i < tasks_.size(); ++i) live_[i] = {tasks_[i].block_dim, tasks_[i].tiling_key};
  ready_at_.assign(tasks_.size(), 0);
  CountNopRows();
  base_ = 0;
  exec_ = fetch_end_ = 0;
  ctx.Reply();
  return Status::Ok();
}

Status StreamActor::On(StartModel& m, Ctx&) {
  if (state_ != State::kIdle) {
    m.model.Send(ModelDone{id_, m.run, clock_,
                           Status::Internal("device {} {}: model run {} started while the stream was busy",
                                            device_->id(), name_, m.run)});
    return Status::Ok();
  }
  mode_ = Mode::kModel;
  run_ = m.run;
  model_id_ = m.model_id;
  model_ = m.model;
  ApplyElisions();
  exec_ = fetch_end_ = 0;
  clock_ = std::max(clock_, m.at);
  NewEpoch(false);
  if (m.io) {
    if (Status s = ApplyPatches(*m.io); !s.ok()) {
      m.model.Send(ModelDone{id_, m.run, clock_, std::move(s)});
      return Status::Ok();
    }
  }
  state_ = State::kRunning;
  // The run's first fetch, then the updates sent for this run before it started here: they meet
  // the stream as they would on the device, where both streams start together.
  FetchAhead();
  ReleaseHeldPatches();
  Advance();
  return Status::Ok();
}

Status StreamActor::On(UnitDone& m, Ctx&) {
  // From the kernel at exec_, or from one of the run of kernels started with it (StartKernelRun).
  if (m.epoch != epoch_ || state_ != State::kWaiting || m.task < TaskId(exec_) || m.task > TaskId(run_last_))
    return Status::Ok();  // stale
  if (!m.status.ok()) {
    // Refused by a host caller's stop mark: its abort is on the way (Runtime::AbortStream, or the
    // model's StopRun for AbortModel) and stops this stream as before the mark existed.
    if (m.stopped) return Status::Ok();
    Fail(std::move(m.status));  // from where the run got to (CatchUpWithRun)
    return Status::Ok();
  }
  if (const std::size_t at = exec_ + (m.task - TaskId(exec_)); at != exec_) {
    // The tasks of the run before the reporting kernel have ended: its NOPs and kernels.
    executed_ += at - exec_;
    device_->tasks_executed.fetch_add(at - exec_, std::memory_order_relaxed);
    exec_ = at;
  }
  CompleteWaitingTask(m.end);
  Advance();
  return Status::Ok();
}

Status StreamActor::On(EventFired& m, Ctx&) {
  if (m.epoch != epoch_ || state_ != State::kWaiting || m.task != TaskId(exec_)) return Status::Ok();  // stale
  if (device_->race) device_->race->Acquire(race_agent_, RaceDetector::EventKey(device_->id(), tasks_[exec_].event));
  CompleteWaitingTask(std::max(clock_, m.at));
  Advance();
  return Status::Ok();
}

Status StreamActor::On(PatchTask& m, Ctx& ctx) {
  if (mode_ == Mode::kModel && m.run > run_) {  // from a run this stream has not started yet
    held_patches_.push_back(HeldPatch{m, ctx.TakeReply()});
    return Status::Ok();
  }
  const bool stale = mode_ == Mode::kModel && m.run != 0 && (m.run < run_ || !(m.model == model_));
  Status s = stale ? StalePatch(m) : ApplyPatch(m);
  if (s.ok()) ctx.Reply();
  else ctx.ReplyError(std::move(s));
  return Status::Ok();
}

// The updates held for the run that just started (see PatchTask::run) land now, after its first
// fetch; those of an older run (aborted before this stream started it) are refused.
void StreamActor::ReleaseHeldPatches() {
  for (auto it = held_patches_.begin(); it != held_patches_.end();) {
    if (it->patch.run > run_) {
      ++it;
      continue;
    }
    Status s = it->patch.run < run_ || !(it->patch.model == model_) ? StalePatch(it->patch) : ApplyPatch(it->patch);
    if (s.ok()) it->reply.Reply();
    else it->reply.Fail(std::move(s));
    it = held_patches_.erase(it);
  }
}

Status StreamActor::StalePatch(const PatchTask& m) const {
  return Status::Aborted("device {}: task update from stream {} task {} (run {}) is stale: stream {} runs another "
                         "model or a later run ({})",
                         device_->id(), m.from_stream, m.from_task, m.run, id_, run_);
}

Status StreamActor::ApplyPatch(const PatchTask& m) {
  const std::uint64_t target = m.target_task;
  if (target < base_ || target - base_ >= tasks_.size()) {
    return Status::NotFound("device {}: task update from stream {} task {}: stream {} has no task {}",
                            device_->id(), m.from_stream, m.from_task, id_, target);
  } else if (target - base_ < fetch_end_) {
    return Status::Aborted(
        "device {}: task update race: stream {} task {} updates stream {} task {}, which the stream had "
        "already fetched (prefetch_num {}, executing task {}); tiling-sink ordering needs at least {} NOPs "
        "between the event wait and the kernel",
        device_->id(), m.from_stream, m.from_task, id_, target, device_->chip().prefetch_num, TaskId(exec_),
        device_->chip().prefetch_num);
  }
  live_[target - base_] = {m.block_dim, m.tiling_key};
  return Status::Ok();
}

Status StreamActor::On(ElideWaits& m, Ctx& ctx) {
  if (mode_ != Mode::kModel)
    return Status::ParamInvalid("device {} {}: eliding waits needs a loaded model program", device_->id(), name_);
  for (std::uint32_t i : m.tasks)
    if (i >= tasks_.size() || (tasks_[i].kind != TaskKind::kEventWait && tasks_[i].kind != TaskKind::kNop))
      return Status::ParamInvalid("device {} {}: cannot elide task {}: {}", device_->id(), name_, i,
                                  i < tasks_.size()
                                      ? fmt::format("it is a {} task, not an event wait", TaskKindName(tasks_[i].kind))
                                      : fmt::format("the program has {} tasks", tasks_.size()));
  // Between runs at once; during a run from the next run's start, so the running list never
  // changes under its fetch window.
  elide_.insert(elide_.end(), m.tasks.begin(), m.tasks.end());
  if (state_ == State::kIdle) ApplyElisions();
  ctx.Reply();
  return Status::Ok();
}

Status StreamActor::On(AbortStream& m, Ctx& ctx) {
  // An aborted stream's work is over for whoever hears of the abort (race detector).
  // While draining, the stream is idle but may hold queued tasks: they are dropped too.
  const bool work = state_ != State::kIdle || (draining_ && exec_ < tasks_.size());
  if (device_->race && work) device_->race->Release(race_agent_, RaceDetector::kHostWorld);
  if (work) Fail(std::move(m.why));
  CatchUpWithStop();
  ctx.Reply();  // an Ask (AbortModel's) hears that the stream and its units' work have stopped
  return Status::Ok();
}

Status StreamActor::On(ExecutionStopped& m, Ctx&) {
  if (m.drain != drain_ || !draining_) return Status::Ok();  // of a drain a reset ended
  draining_ = false;
  DropWhileInError();
  // The stopped run's streams released the model's key when they had all stopped (RunStopped),
  // before the model answered: this stream's later work comes after theirs.
  if (device_->race) device_->race->Acquire(race_agent_, RaceDetector::ModelKey(device_->id(), drain_model_));
  if (mode_ == Mode::kHost && state_ == State::kIdle && exec_ < tasks_.size()) {
    state_ = State::kRunning;
    Advance();
  }
  AnswerSyncs();
  return Status::Ok();
}

// A host caller stopped this stream's work (WorkGate::stop_below) while it had none, or before its
// abort came: the next work goes in an epoch the units take.
void StreamActor::CatchUpWithStop() {
  if (gate_.stop_below.load(std::memory_order_seq_cst) > epoch_) NewEpoch(false);
}

Status StreamActor::On(ResetStream&, Ctx& ctx) {
  if (state_ != State::kIdle) Fail(Status::Aborted("device {} {}: reset", device_->id(), name_));
  CatchUpWithStop();
  draining_ = false;  // the model answers the drain still; ExecutionStopped of it is ignored
  ++drain_;
  tasks_.clear();
  patches_.clear();
  elide_.clear();
  live_.clear();
  snap_.clear();
  ready_at_.clear();
  exec_ = fetch_end_ = 0;
  base_ = 0;
  mode_ = Mode::kHost;
  sticky_error_ = Status::Ok();
  sticky_seq_ = 0;
  skip_until_ = 0;
  failed_.clear();
  fault_.reset();
  for (auto& s : syncs_) s.reply.Fail(Status::Aborted("device {} {}: destroyed", device_->id(), name_));
  syncs_.clear();
  for (auto& h : held_patches_) h.reply.Fail(Status::Aborted("device {} {}: destroyed", device_->id(), name_));
  held_patches_.clear();
  run_ = 0;
  model_ = {};
  if (device_->race)
    for (const auto& [first, ticket] : race_tickets_) device_->race->DropTicket(ticket);
  race_tickets_.clear();
  ctx.Reply();
  return Status::Ok();
}

Status StreamActor::On(SetStreamFault& m, Ctx& ctx) {
  fault_ = m.fault;
  fault_count_ = 0;
  ctx.Reply();
  return Status::Ok();
}

void StreamActor::AcceptSubmit(Submit& submit) {
  if (submit.race_ticket != kNoRaceTicket) race_tickets_.emplace_back(base_ + tasks_.size(), submit.race_ticket);
  for (Task& t : submit.tasks) {
    live_.push_back({t.block_dim, t.tiling_key});
    snap_.push_back({});
    ready_at_.push_back(submit.at);
    tasks_.push_back(std::move(t));
  }
}

// Host stream: a sync is answered once the tasks before its target have finished. Model stream:
// once the stream is idle.
void StreamActor::AnswerSyncs() {
  if (syncs_.empty() || draining_) return;
  const std::uint64_t done = base_ + exec_;
  for (auto it = syncs_.begin(); it != syncs_.end();) {
    const bool reached = mode_ == Mode::kModel ? state_ == State::kIdle : it->target <= done;
    if (reached) {
      if (device_->race && it->race_agent != kNoRaceAgent) device_->race->Join(it->race_agent, race_agent_);
      const FailedRange* failed = it->since == kNoSince ? nullptr : FailureSince(it->since, it->target);
      if (!it->error.ok()) {
        it->reply.Fail(std::move(it->error));
      } else if (failed != nullptr) {
        it->reply.Fail(failed->status);
        if (sticky_seq_ == failed->seq) sticky_error_ = Status::Ok();  // reported to the caller it dropped
      } else if (it->since != kNoSince) {
        it->reply.Reply(clock_);
      } else if (!sticky_error_.ok()) {
        it->reply.Fail(std::move(sticky_error_));
        sticky_error_ = Status::Ok();
      } else {
        it->reply.Reply(clock_);
      }
      it = syncs_.erase(it);
    } else if (mode_ == Mode::kHost) {
      break;  // host syncs are in target order: the later ones are not reached either
    } else {
      ++it;
    }
  }
}

// A host stream in error (a failure no Synchronize has reported yet) skips the work of what is
// submitted until one does, as a device stream in error runs nothing more: the rest of a failed
// run does not run with its order broken (a wait that failed no longer orders what follows it).
// Its event records and waits still run, so other streams are not left waiting on them and no
// record is left for a later wait. The skipped tasks join the failure's range, so a caller's
// SynchronizeSubmission reports the error for them.
void StreamActor::DropWhileInError() {
  if (mode_ != Mode::kHost || sticky_error_.ok() || exec_ >= tasks_.size()) return;
  const std::uint64_t end = base_ + tasks_.size();
  if (end <= skip_until_) return;
  if (!failed_.empty() && failed_.back().seq == sticky_seq_) {
    failed_.back().end = std::max(failed_.back().end, end);
  } else {
    failed_.push_back(FailedRange{std::max(skip_until_, base_ + exec_), end, sticky_error_, sticky_seq_});
    if (failed_.size() > kFailedRangesKept) failed_.pop_front();
  }
  skip_until_ = end;
}

// The error of a failure that failed or dropped a task in [since, target), if any (the latest).
const StreamActor::FailedRange* StreamActor::FailureSince(std::uint64_t since, std::uint64_t target) const {
  for (auto it = failed_.rbegin(); it != failed_.rend(); ++it)
    if (it->begin < target && it->end > since) return &*it;
  return nullptr;
}

void StreamActor::FetchAhead() {
  const std::size_t want = std::min(tasks_.size(), exec_ + 1 + static_cast<std::size_t>(device_->chip().prefetch_num));
  for (; fetch_end_ < want; ++fetch_end_) snap_[fetch_end_] = live_[fetch_end_];
}

// The fault set by SetStreamFault, at its nth task: true if the task loop must stop (a hang or
// a failure); a delay only moves the clock.
bool StreamActor::InjectFault() {
  if (++fault_count_ != fault_->nth) return false;
  switch (fault_->kind) {
    case FaultKind::kHang:
      state_ = State::kWaiting;  // nothing will complete this task
      wait_start_ = clock_;
      return true;
    case FaultKind::kFail:
      Fail(Status::Failed("device {} {} task {} ({}): injected fault", device_->id(), name_, TaskId(exec_),
                          tasks_[exec_].display_name()));
      return true;
    case FaultKind::kEndOfSequence:
      Fail(Status::EndOfSequence("device {} {} task {} ({}): end of sequence", device_->id(), name_, TaskId(exec_),
                                 tasks_[exec_].display_name()));
      return true;
    default:
      clock_ += fault_->delay;
      return false;
  }
}

void StreamActor::Advance() {
  const ChipSpec& chip = device_->chip();
  const std::uint64_t start_executed = executed_;
  // A row of NOPs runs at once where nothing looks at them one by one (CountNopRows). Nothing
  // else runs on this stream meanwhile, so fetching the row's tasks-ahead after it, not one by
  // one, snapshots the same parameters.
  const bool nop_rows = mode_ == Mode::kModel && track_ == nullptr && !fault_ && device_->race == nullptr;
  while (state_ == State::kRunning && exec_ < tasks_.size()) {
    FetchAhead();
    if (mode_ == Mode::kHost) clock_ = std::max(clock_, ready_at_[exec_]);
    if (fault_ && InjectFault()) break;
    Task& t = tasks_[exec_];
    if (device_->race) RaceBeforeTask(t);
    if (base_ + exec_ < skip_until_ && t.kind != TaskKind::kEventRecord && t.kind != TaskKind::kEventWait) {
      t.keep_alive.reset();  // skipped: submitted while the stream was in error (DropWhileInError)
      ++exec_;
      ++executed_;
      continue;
    }
    switch (t.kind) {
      case TaskKind::kNop: {
        // No branch on the row: an elided wait's row is 0, and a branch here cost the one-by-one
        // loop 15% (bench npu's nop_tasks_per_s).
        const std::uint32_t more = nop_rows ? std::max<std::uint32_t>(t.nop_row, 1) - 1 : 0;
        clock_ += static_cast<VTime>(more) * chip.nop_latency_ns;
        exec_ += more;
        executed_ += more;
        if (track_) Trace("nop", clock_, chip.nop_latency_ns, TaskId(exec_));
        clock_ += chip.nop_latency_ns;
        break;
      }
      case TaskKind::kEventRecord:
        device_->events.Send(RecordEvent{t.event, clock_ + chip.event_record_latency_ns, RunTagOf()});
        if (track_) Trace(fmt::format("record e{}", t.event), clock_, chip.event_record_latency_ns, TaskId(exec_));
        clock_ += chip.event_record_latency_ns;
        break;
      default:
        if (t.kind == TaskKind::kMemcpy) {
          if (mode_ == Mode::kHost && !syncs_.empty()) AnswerSyncs();  // as before any task it waits for
          const CopiedHere here = CopyHere(t, TaskId(exec_));
          if (here == CopiedHere::kEnded) break;
          if (here == CopiedHere::kWaiting) {
            device_->tasks_executed.fetch_add(executed_ - start_executed, std::memory_order_relaxed);
            return;
          }
        }
        // Work another actor does: the stream waits for its completion message.
        device_->tasks_executed.fetch_add(executed_ - start_executed, std::memory_order_relaxed);
        if (mode_ == Mode::kHost && !syncs_.empty()) AnswerSyncs();  // those the work so far reached
        StartTask(t, static_cast<std::uint32_t>(exec_));
        return;
    }
    ++exec_;
    ++executed_;
  }
  device_->tasks_executed.fetch_add(executed_ - start_executed, std::memory_order_relaxed);
  if (state_ == State::kRunning && exec_ >= tasks_.size()) Finish();
}

// Starts a task another actor completes; the stream then waits (or has failed).
void StreamActor::StartTask(Task& t, std::uint32_t index) {
  const std::uint32_t task_id = TaskId(index);
  wait_start_ = clock_;
  run_last_ = index;  // a kernel's run may reach further (StartKernelRun)
  switch (t.kind) {
    case TaskKind::kEventWait: return StartEventWait(t, task_id);
    case TaskKind::kKernel:
    case TaskKind::kAicpuKernel:
      if (device_->race && t.kernel != nullptr) RaceAccesses(t, task_id);
      return StartKernel(t, index, task_id);
    case TaskKind::kMemcpy:
      if (device_->race) RaceAccesses(t, task_id);
      return StartMemcpy(t, task_id);
    case TaskKind::kTaskUpdate:
      if (device_->race) RaceAccesses(t, task_id);
      return StartTaskUpdate(t, task_id);
    case TaskKind::kModelExecute: return StartModelExecute(t, task_id);
    default:
      Fail(Status::Internal("device {} {} task {}: unknown task kind", device_->id(), name_, task_id));
      return;
  }
}

void StreamActor::StartEventWait(const Task& t, std::uint32_t task_id) {
  state_ = State::kWaiting;
  device_->events.Send(WaitEvent{t.event, self_, id_, epoch_, task_id, RunTagOf()});
}

// A kernel runs with the parameters snapshotted when it was fetched.
void StreamActor::StartKernel(const Task& t, std::uint32_t index, std::uint32_t task_id) {
  const ChipSpec& chip = device_->chip();
  const Param& p = snap_[index];
  if (t.kernel == nullptr) {
    Fail(Status::ParamInvalid("device {} {} task {}: kernel task without a kernel", device_->id(), name_, task_id));
    return;
  }
  if (p.block_dim == kTilingSinkBlockDim) {
    Fail(Status::Failed("kernel {} on stream {} task {} started with unresolved tiling placeholder", t.display_name(),
                        id_, task_id));
    return;
  }
  if (p.block_dim == 0) {
    Fail(Status::ParamInvalid("kernel {} on stream {} task {}: block_dim 0", t.display_name(), id_, task_id));
    return;
  }
  KernelJob* job = FillJob(t, p, task_id);
  state_ = State::kWaiting;
  device_->kernels_executed.fetch_add(1, std::memory_order_relaxed);
  if (t.kind == TaskKind::kKernel && mode_ == Mode::kModel && device_->kernel_runs() && track_ == nullptr &&
      !fault_ && device_->race == nullptr) {
    StartKernelRun(job, index);
  }
  if (t.kind == TaskKind::kKernel) {
    SendKernelParts(device_->aicore_units, job, clock_ + chip.kernel_launch_overhead_ns, home_aicore_);
  } else {
    SendKernelParts(device_->aicpu_units, job, clock_ + chip.aicpu_launch_overhead_ns, home_aicpu_);
  }
}

// A run of kernels: the kernels after the one at `index` with nothing but NOPs between them, each
// started by the run of parts that ends the one before it (units.cc FoldParts) at the virtual time
// this loop would start it: the end before it, the NOPs' latency, the launch overhead. The stream
// hears once, from the last kernel or from one that fails. A kernel's report and the stream's turn
// before the next were two actor hops a kernel (GPT-2 117M: about 100 kernels a decode step).
//
// Each kernel of the run is fetched by the time it would start here (within prefetch_num of the one
// before it), and the run fetches what the stream would have fetched by its last kernel's start: an
// update to any of those is a detected race, as it would be when it came after that start (an
// update that no event orders before a fetch may land after it). A run is at most kMaxKernelRun
// kernels (a job each, free again as each ends), and stops at anything else (an event wait among
// them), so a tiling-sink kernel, behind its wait and its prefetch_num NOPs, is fetched when the
// stream reaches the wait, as before. Only in an
// untraced model stream with no fault set and no race detector (which look at each task as it
// starts).
void StreamActor::StartKernelRun(KernelJob* first, std::size_t index) {
  const ChipSpec& chip = device_->chip();
  Device::UnitGroup& group = device_->aicore_units;
  if (home_aicore_ == Device::kNoHomeUnit)
    home_aicore_ = HomeUnit(group.homes_given.fetch_add(1, std::memory_order_relaxed),
                            static_cast<std::uint32_t>(group.units.size()));
  KernelJob* prev = first;
  VTime lead = 0;
  // No unit writes it now: the last run has reported, or its epoch is over.
  run_progress_.epoch.store(0, std::memory_order_relaxed);
  // At most kMaxKernelRun kernels in all: a run holds a job per kernel.
  std::uint32_t left = kMaxKernelRun - 1;
  for (std::size_t i = index + 1; i < fetch_end_ && left > 0; ++i) {
    const Task& t = tasks_[i];
    if (t.kind == TaskKind::kNop) {
      lead += chip.nop_latency_ns;
      continue;
    }
    const Param& p = snap_[i];
    // Anything else, and a kernel StartKernel would refuse, waits for this loop.
    if (t.kind != TaskKind::kKernel || t.kernel == nullptr || p.block_dim == kTilingSinkBlockDim || p.block_dim == 0)
      break;
    KernelJob* job = FillJob(t, p, TaskId(i));
    job->lead = lead;  // the NOPs' latency; the unit adds the launch overhead
    job->home = home_aicore_;
    job->progress = &run_progress_;
    prev->next = job;
    prev = job;
    run_last_ = i;
    lead = 0;
    --left;
    // What the stream fetches when this kernel starts (FetchAhead with exec_ at i).
    const std::size_t want = std::min(tasks_.size(), i + 1 + static_cast<std::size_t>(chip.prefetch_num));
    for (; fetch_end_ < want; ++fetch_end_) snap_[fetch_end_] = live_[fetch_end_];
  }
}

// A run of kernels that stops early (a kernel failed, or the stream is aborted while it runs): the
// stream moves to the kernel the run started last, with the clock before it, as it would be had it
// run the kernels one by one. Called with the gate emptied by a new epoch (NewEpoch with stop_work),
// so the run's progress is settled; `epoch` is the run's.
void StreamActor::CatchUpWithRun(std::uint64_t epoch) {
  if (run_last_ <= exec_ || run_progress_.epoch.load(std::memory_order_relaxed) != epoch) return;
  const std::uint32_t task = run_progress_.task.load(std::memory_order_relaxed);
  if (task <= TaskId(exec_) || task > TaskId(run_last_)) return;
  const std::size_t at = exec_ + (task - TaskId(exec_));
  executed_ += at - exec_;
  device_->tasks_executed.fetch_add(at - exec_, std::memory_order_relaxed);
  exec_ = at;
  clock_ = std::max(clock_, run_progress_.clock.load(std::memory_order_relaxed));
}

// A free job for kernel task `t`, fetched with parameters `p`.
KernelJob* StreamActor::FillJob(const Task& t, const Param& p, std::uint32_t task_id) {
  KernelJob* job = FreeJob();
  job->def = t.kernel;
  job->args.assign(t.args.begin(), t.args.end());  // a copy: the stream may be aborted and reloaded meanwhile
  job->block_dim = t.kind == TaskKind::kAicpuKernel ? 1 : p.block_dim;
  job->tiling_key = p.tiling_key;
  job->name.assign(t.display_name());
  job->stream = self_;
  job->stream_id = id_;
  job->epoch = epoch_;
  job->gate = &gate_;
  job->task = task_id;
  job->launch = NextKernelLaunch();
  job->next = nullptr;
  return job;
}

// A job no unit holds any more. One kernel runs per stream at a time, or one run of kernels (a job
// each); another is made only while an aborted stream's kernels are still out (and a run's stay
// taken for good behind a unit that hangs).
KernelJob* StreamActor::FreeJob() {
  // From the one after the job taken last: a run takes its jobs in order and its kernels give them
  // back in order, so the first looked at is free (a run of n kernels looks at n jobs, not n^2 / 2).
  const std::size_t n = jobs_.size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = next_job_ + k < n ? next_job_ + k : next_job_ + k - n;
    KernelJob& job = *jobs_[i];
    if (!job.in_use.load(std::memory_order_acquire)) {
      job.in_use.store(true, std::memory_order_relaxed);
      next_job_ = i + 1 < n ? i + 1 : 0;
      return &job;
    }
  }
  jobs_.push_back(std::make_unique<KernelJob>());
  jobs_.back()->in_use.store(true, std::memory_order_relaxed);
  next_job_ = 0;
  return jobs_.back().get();
}

// A small copy (kCopyHereMaxBytes; not peer to peer) runs here, on the channel the engine would
// route it to, when no copy sent to the engine is still to run and neither the routing nor that
// channel is held (else it goes as a message, as before): the same channel's fault, virtual clock
// and trace, inside the stream's gate. Not with the race detector, which sees each task start
// through StartTask.
StreamActor::CopiedHere StreamActor::CopyHere(const Task& t, std::uint32_t task_id) {
  if (!device_->copies_here() || t.copy == CopyKind::kPeerToPeer || t.bytes > kCopyHereMaxBytes || device_->race != nullptr)
    return CopiedHere::kNo;
  DmaRouting& routing = device_->dma_routing;
  // Not ahead of copies sent and not yet run: the channels' clocks take copies in the order the
  // engine routes them, and a channel's fault meets its nth copy.
  if (routing.sent.load(std::memory_order_acquire) != 0 || !routing.TryTake()) return CopiedHere::kNo;
  const std::size_t channel = routing.Pick();
  DmaChannelState& state = device_->dma_channels[channel];
  if (!state.TryTake()) {
    routing.Give();
    return CopiedHere::kNo;
  }
  routing.Book(channel, clock_, device_->chip().CopyCost(t.bytes, CopyBandwidth(device_->chip(), t.copy)));
  routing.Give();
  const CopyRequest req{t.copy, t.dst_dev, t.src_dev, t.dst_host, t.src_host, t.bytes, {}, {}, self_, epoch_,
                        task_id, clock_, t.data_in_place, t.peer_device, t.peer_memory, &gate_, t.host_window};
  CopyEnd done = RunCopy(*device_, state, static_cast<int>(channel), req, t.display_name());
  state.Give();
  device_->copies_run_here.fetch_add(1, std::memory_order_relaxed);
  if (done.hung || (!done.status.ok() && done.stopped)) {
    // As StartMemcpy's stream waits: for ever (a hang), or for the abort its caller is making.
    state_ = State::kWaiting;
    wait_start_ = clock_;
    run_last_ = exec_;
    return CopiedHere::kWaiting;
  }
  if (!done.status.ok()) {
    state_ = State::kWaiting;  // as when the channel's report comes back failed
    run_last_ = exec_;
    Fail(std::move(done.status));
    return CopiedHere::kWaiting;
  }
  // As CompleteWaitingTask, but the loop counts the task.
  const VTime start = clock_;
  clock_ = std::max(clock_, done.end);
  if (track_) Trace(t.display_name(), start, clock_ - start, task_id);
  if (mode_ == Mode::kHost) tasks_[exec_].keep_alive.reset();
  return CopiedHere::kEnded;
}

void StreamActor::StartMemcpy(const Task& t, std::uint32_t task_id) {
  state_ = State::kWaiting;
  if (t.copy != CopyKind::kPeerToPeer) device_->dma_routing.sent.fetch_add(1, std::memory_order_relaxed);
  device_->dma.Send(CopyRequest{t.copy, t.dst_dev, t.src_dev, t.dst_host, t.src_host, t.bytes,
                                std::string(t.display_name()), t.keep_alive, self_, epoch_, task_id, clock_,
                                t.data_in_place, t.peer_device, t.peer_memory, &gate_, t.host_window});
}

// The new values are read from device memory when the update executes. The update completes
// when the target has applied (or refused) it: what follows on this stream (the event record)
// happens after the patch, whatever the message timing. The answer comes back as this task's
// UnitDone.
void StreamActor::StartTaskUpdate(const Task& t, std::uint32_t task_id) {
  const ChipSpec& chip = device_->chip();
  if (!chip.task_update_supported) {
    Fail(Status::Unsupported("device {} ({}) {} task {}: the chip does not support task update", device_->id(),
                             chip.name, name_, task_id));
    return;
  }
  auto bd = device_->memory().Map(t.block_dim_addr, sizeof(std::uint32_t));
  auto tk = device_->memory().Map(t.tiling_key_addr, sizeof(std::uint64_t));
  if (!bd.ok() || !tk.ok()) {
    Fail((bd.ok() ? tk.status() : bd.status())
             .WithContext(fmt::format("device {} {} task {} (task update)", device_->id(), name_, task_id)));
    return;
  }
  PatchTask patch{t.target_task, 0, 0, id_, task_id, mode_ == Mode::kModel ? run_ : 0,
                  mode_ == Mode::kModel ? model_ : actors::Address<ModelMsg>()};
  std::memcpy(&patch.block_dim, bd->data(), sizeof(patch.block_dim));
  std::memcpy(&patch.tiling_key, tk->data(), sizeof(patch.tiling_key));
  auto target = device_->stream(t.target_stream);
  if (!target.ok()) {
    Fail(target.status().WithContext(fmt::format("device {} {} task {} (task update)", device_->id(), name_, task_id)));
    return;
  }
  state_ = State::kWaiting;
  const VTime end = clock_ + chip.task_update_latency_ns;
  target->Ask(std::move(patch)).OnComplete([self = self_, epoch = epoch_, task_id, end](Status s) {
    self.Send(UnitDone{epoch, task_id, end, std::move(s)});
  });
}

// rtModelExecute on a stream: the model runs after this stream's earlier work, and the stream's
// later work waits for the run. The run's end comes back as this task's UnitDone.
void StreamActor::StartModelExecute(const Task& t, std::uint32_t task_id) {
  auto model = device_->model(t.model);
  if (!model.ok()) {
    Fail(model.status().WithContext(fmt::format("device {} {} task {} (model execute)", device_->id(), name_, task_id)));
    return;
  }
  state_ = State::kWaiting;
  ExecuteModel request{clock_, t.io};
  request.from_stream = id_;
  request.from_epoch = epoch_;
  request.from_task = task_id;
  if (RaceDetector* race = device_->race) {
    request.race_requester = race_agent_;
    request.race_ticket = race->Snapshot(race_agent_);
  }
  model->Ask<VTime>(std::move(request)).OnComplete([self = self_, epoch = epoch_, task_id](StatusOr<VTime> r) {
    if (r.ok()) self.Send(UnitDone{epoch, task_id, *r, Status::Ok()});
    else self.Send(UnitDone{epoch, task_id, 0, r.status()});
  });
}

Status StreamActor::ApplyPatches(const std::vector<std::uint64_t>& io) {
  for (const IoPatch& p : patches_) {
    if (p.slot >= io.size())
      return Status::ParamInvalid("device {} {}: model run gives {} I/O addresses, the task list uses slot {}",
                                  device_->id(), name_, io.size(), p.slot);
    const std::uint64_t value = io[p.slot] + p.offset;
    Task& t = tasks_[p.task];
    if (p.field == IoPatch::kCopySrc) t.src_dev = DevicePtr{value};
    else if (p.field == IoPatch::kCopyDst) t.dst_dev = DevicePtr{value};
    else t.args[p.field] = value;
  }
  return Status::Ok();
}

void StreamActor::CompleteWaitingTask(VTime end) {
  clock_ = std::max(clock_, end);
  if (track_) Trace(tasks_[exec_].display_name(), wait_start_, clock_ - wait_start_, TaskId(exec_));
  // A host stream's task runs once: what it kept alive (a copy's host memory) is free now, not
  // when the list is next compacted.
  if (mode_ == Mode::kHost) tasks_[exec_].keep_alive.reset();
  ++exec_;
  ++executed_;
  device_->tasks_executed.fetch_add(1, std::memory_order_relaxed);
  state_ = State::kRunning;
}

void StreamActor::Finish() {
  state_ = State::kIdle;
  if (mode_ == Mode::kModel) {
    fetch_end_ = 0;  // an idle stream has nothing fetched
    model_.Send(ModelDone{id_, run_, clock_, Status::Ok()});
  }
  AnswerSyncs();
  Compact();
}

void StreamActor::Fail(Status status) {
  const bool waiting = state_ == State::kWaiting && exec_ < tasks_.size();
  const bool was_waiting_event = waiting && tasks_[exec_].kind == TaskKind::kEventWait;
  if (waiting && tasks_[exec_].kind == TaskKind::kModelExecute) {
    // The model's run this task asked for is this task: it stops with it (rtModelExecute), and
    // the stream waits for that before it goes on or answers a Synchronize.
    if (auto model = device_->model(tasks_[exec_].model); model.ok()) {
      AnswerSyncs();  // those whose work ended before this task, before the drain holds them
      draining_ = true;
      drain_model_ = tasks_[exec_].model;
      model->Ask(CancelExecution{id_, epoch_, TaskId(exec_), status})
          .OnComplete([self = self_, drain = ++drain_](Status) { self.Send(ExecutionStopped{drain}); });
    }
  }
  const std::uint64_t epoch = epoch_;
  NewEpoch(waiting);
  if (waiting) CatchUpWithRun(epoch);
  state_ = State::kIdle;
  if (was_waiting_event) device_->events.Send(CancelWaits{id_});
  if (mode_ == Mode::kModel) {
    fetch_end_ = 0;
    exec_ = 0;
    model_.Send(ModelDone{id_, run_, clock_, status});
    AnswerSyncs();
    return;
  }
  // A host stream in error drops what is queued. The error goes to the Synchronize calls waiting
  // for it; if none is listening any more (e.g. it timed out), the next Synchronize reports it.
  for (std::size_t i = exec_; i < tasks_.size(); ++i) tasks_[i].keep_alive.reset();
  // Synchronizes whose work ended before the failing task are answered as they would have been.
  AnswerSyncs();
  // A caller whose Synchronize (with `since`) arrives later still hears of its dropped tasks.
  const std::uint64_t seq = ++failures_;
  failed_.push_back(FailedRange{base_ + exec_, base_ + std::max<std::size_t>(tasks_.size(), exec_ + 1), status, seq});
  if (failed_.size() > kFailedRangesKept) failed_.pop_front();
  exec_ = tasks_.size();
  bool reported = false;
  for (auto& s : syncs_) {
    reported = reported || s.reply.listened();
    if (draining_) s.error = status;  // answered once the model's run has stopped
    else s.reply.Fail(status);
  }
  if (!draining_) syncs_.clear();
  if (!reported) {
    sticky_error_ = std::move(status);
    sticky_seq_ = seq;
  }
  Compact();
}

void StreamActor::Compact() {
  if (mode_ != Mode::kHost || exec_ < 1024 || exec_ * 2 < tasks_.size()) return;
  tasks_.erase(tasks_.begin(), tasks_.begin() + static_cast<std::ptrdiff_t>(exec_));
  live_.erase(live_.begin(), live_.begin() + static_cast<std::ptrdiff_t>(exec_));
  snap_.erase(snap_.begin(), snap_.begin() + static_cast<std::ptrdiff_t>(exec_));
  ready_at_.erase(ready_at_.begin(), ready_at_.begin() + static_cast<std::ptrdiff_t>(exec_));
  base_ += exec_;
  fetch_end_ = fetch_end_ > exec_ ? fetch_end_ - exec_ : 0;
  exec_ = 0;
}

}  // namespace npuflow::npu_sim
