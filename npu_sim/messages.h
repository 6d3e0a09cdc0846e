// The messages the simulated device's actors exchange. Every message that starts device work
// carries a virtual timestamp (`at`); the receiver starts at max(its own clock, at).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "actors/system.h"
#include "npu_sim/chip_spec.h"
#include "npu_sim/task.h"

namespace npuflow::npu_sim {

// Fault injection, per stream or per unit: the Nth task (counting from 1 since the fault was set)
// fails, hangs (never completes) or is delayed by `delay` virtual nanoseconds.
// kEndOfSequence (streams only): the task ends the run with an EndOfSequence status, as a
// data-queue read past the last item does on the hardware.
enum class FaultKind : std::uint8_t { kFail, kHang, kDelay, kEndOfSequence };
struct Fault {
  FaultKind kind = FaultKind::kFail;
  std::uint64_t nth = 1;
  VTime delay = 0;
};

// Stream and model messages refer to each other's addresses: names first.
struct Submit;
struct Synchronize;
struct LoadProgram;
struct StartModel;
struct UnitDone;
struct EventFired;
struct PatchTask;
struct ElideWaits;
struct AbortStream;
struct ExecutionStopped;
struct ResetStream;
struct SetStreamFault;
using StreamMsg = std::variant<Submit, Synchronize, LoadProgram, StartModel, UnitDone, EventFired, PatchTask,
                               ElideWaits, AbortStream, ExecutionStopped, ResetStream, SetStreamFault>;
using StreamAddr = actors::Address<StreamMsg>;

// ---- to the device model (rtModel) ------------------------------------------------------------
struct ModelDone {  // a bound stream finished (or failed) its part of run `run`
  static constexpr std::string_view kKind = "StreamFinished";
  StreamId stream = 0;
  std::uint64_t run = 0;
  VTime end = 0;
  Status status;
};
struct BindModelStream {  // Ask<void>
  static constexpr std::string_view kKind = "BindStream";
  StreamId stream = 0;
  StreamAddr addr;
};
// Called by the device model once per execution, right before it answers (done, failed, aborted
// or refused), on the worker that runs it: must be quick and must not block. Plain data, so an
// execution that tells its owner it ended costs no allocation.
struct RunEndHook {
  void (*fn)(void* ctx, std::uint64_t tag) = nullptr;
  void* ctx = nullptr;
  std::uint64_t tag = 0;
  void operator()() const {
    if (fn != nullptr) fn(ctx, tag);
  }
};
struct ExecuteModel {  // Ask<VTime>: one run of every bound stream's task list; replies with its end
  static constexpr std::string_view kKind = "ExecuteModel";
  VTime at = 0;
  std::shared_ptr<const std::vector<std::uint64_t>> io;  // the run's I/O addresses; null: as loaded
  RunEndHook on_end;
  // Race detector: the requester's clock at the request, and the requester, who learns the run's
  // work when it ends (0 / none: off).
  std::uint32_t race_ticket = 0;
  std::uint32_t race_requester = 0xFFFFFFFFu;
  bool race_host = false;  // the requester is a host client (its wait for the end is a host sync)
  // A host stream's rtModelExecute task: its stream, epoch and task, so that an abort of that
  // stream cancels this execution (CancelExecution). Stream kNoStream: from the host.
  StreamId from_stream = 0xFFFFFFFFu;
  std::uint64_t from_epoch = 0;
  std::uint32_t from_task = 0;
};
struct CancelExecution {  // Ask<void>: the stream that asked for an execution failed: stop or drop
                          // that one; answered once it no longer runs (its units' work included)
  static constexpr std::string_view kKind = "CancelExecution";
  StreamId from_stream = 0;
  std::uint64_t from_epoch = 0;
  std::uint32_t from_task = 0;
  Status why;
};
struct AbortModel {  // Ask<void>: stops every bound stream; the running and queued executions fail
  static constexpr std::string_view kKind = "AbortModel";
  Status why;
};
struct RunStopped {  // the model's own: every stream of a stopped run has stopped (StopRun's join)
  static constexpr std::string_view kKind = "RunStopped";
  std::uint64_t run = 0;  // the run that was stopped
};
using ModelMsg = std::variant<ModelDone, BindModelStream, ExecuteModel, AbortModel, CancelExecution, RunStopped>;

// ---- to a stream --------------------------------------------------------------------------------
// Every message the host API sends a stream (Submit, Synchronize, AbortStream, ResetStream,
// LoadProgram, ElideWaits, SetStreamFault) goes with SendInOrder / AskInOrder: a stream handles
// them in the order the host made them, whichever threads and actors made them (an abort sent
// after a submission never overtakes it).
struct Submit {  // host stream: append tasks, submitted at host virtual time `at`
  static constexpr std::string_view kKind = "Submit";
  std::vector<Task> tasks;
  VTime at = 0;
  std::uint32_t race_ticket = 0;  // the submitter's clock for the race detector (0: off)
};
struct Synchronize {  // Ask<VTime>: completes when every submission sent before it has finished
  static constexpr std::string_view kKind = "Synchronize";
  std::uint32_t race_agent = 0xFFFFFFFFu;  // the race detector's requester (learns the stream's work)
  // The caller's own work: `count` tasks from task id `since` (Runtime::Submit's answer). The
  // sync then waits for those and fails if the stream failed or dropped any of them, whoever
  // heard of the failure first. Without it (has_since false) it waits for every submission
  // before it, and the stream's one sticky error is reported once.
  std::uint32_t since = 0;
  std::uint32_t count = 0;
  bool has_since = false;
};
struct LoadProgram {  // model stream: the task list executed on every model run
  static constexpr std::string_view kKind = "LoadProgram";
  std::vector<Task> tasks;
  std::vector<IoPatch> patches;  // sorted by task
};
struct StartModel {  // run the program from its first task
  static constexpr std::string_view kKind = "StartModel";
  std::uint64_t run = 0;
  std::uint32_t model_id = 0;  // the device model (its events' records and waits carry it)
  VTime at = 0;
  actors::Address<ModelMsg> model;  // hears ModelDone
  std::shared_ptr<const std::vector<std::uint64_t>> io;  // null: run the list as loaded
};
struct UnitDone {  // a kernel, AICPU kernel or copy this stream started has finished
  static constexpr std::string_view kKind = "UnitDone";
  std::uint64_t epoch = 0;
  std::uint32_t task = 0;
  VTime end = 0;
  Status status;
  // Refused by the stop mark a host caller raised before its abort (WorkGate::stop_below): the
  // stream waits for that abort instead of failing now, so the abort stops it as it would have.
  bool stopped = false;
};
struct EventFired {  // the event this stream waits on was recorded
  static constexpr std::string_view kKind = "EventFired";
  std::uint64_t epoch = 0;
  std::uint32_t task = 0;
  VTime at = 0;
};
struct PatchTask {  // Ask<void>: a task update from another stream
  static constexpr std::string_view kKind = "PatchTask";
  std::uint32_t target_task = 0;
  std::uint32_t block_dim = 0;
  std::uint64_t tiling_key = 0;
  StreamId from_stream = 0;
  std::uint32_t from_task = 0;
  // The sender's model and run (none and 0 from a host stream). A model stream that has not
  // started that run yet holds the update until it has: on the device both streams start
  // together, so the update never lands before the target's first fetch of the run, whatever
  // the message timing. An update from another model or an older run is refused as stale.
  std::uint64_t run = 0;
  actors::Address<ModelMsg> model;
};
struct ElideWaits {  // Ask<void>, model stream: these event waits of the program become NOPs
  static constexpr std::string_view kKind = "ElideWaits";
  std::vector<std::uint32_t> tasks;  // indices in the loaded program
};
struct AbortStream {  // stop: the current and queued work fails with `why`
  static constexpr std::string_view kKind = "AbortStream";
  Status why;
};
struct ExecutionStopped {  // the model run a failed rtModelExecute task asked for has stopped
  static constexpr std::string_view kKind = "ExecutionStopped";
  std::uint64_t drain = 0;  // the stream's drain it ends (a reset stream ignores older ones)
};
struct ResetStream {  // Ask<void>: back to an empty, idle stream (reuse after destroy)
  static constexpr std::string_view kKind = "ResetStream";
};
struct SetStreamFault {  // Ask<void>
  static constexpr std::string_view kKind = "SetFault";
  Fault fault;
};

// ---- to the AICore cluster / AICPU units -------------------------------------------------------
// How far a stream's run of kernels has come (StreamActor::StartKernelRun): the kernel the run
// started last, the epoch it started in, and the stream's clock before it (the end before it and the
// NOPs between). Written by the unit that starts the kernel, inside the stream's gate, so the stream
// reads it settled once its new epoch has emptied the gate (an abort) or from the report of a kernel
// that failed (StreamActor::CatchUpWithRun). The stream owns it; streams live as long as the device.
struct RunProgress {
  std::atomic<std::uint64_t> epoch{0};
  std::atomic<std::uint32_t> task{0};
  std::atomic<VTime> clock{0};
};

// One kernel launch, from the stream to the units (SendKernelParts). Owned by the stream that
// launched it and reused (its vectors and name keep their capacity): `in_use` is set by the stream
// when it fills the job and cleared by the unit that ends its last part, after its last look at
// it, so a kernel launch allocates nothing once a stream has run its first kernels.
// A stream's gate for the work it sent to units and DMA channels: a unit enters it (with the
// epoch the work was sent in) before it touches memory and leaves after. A stream that fails or
// is aborted moves the epoch on and waits until no unit is inside, so no work of the stopped
// task writes after the abort; work that had not started yet is skipped (reported stale).
// Plain atomics, seq_cst on both sides (a unit's enter-then-check and the stream's
// store-then-wait cannot both miss each other).
struct WorkGate {
  std::atomic<std::uint64_t> epoch{0};
  std::atomic<std::uint32_t> inside{0};
  // Work of an epoch below this does not enter either. A host caller that is about to stop the
  // stream's work (Runtime::AbortStream, AbortModel) raises it to the stream's epoch + 1 before it
  // sends the abort, so units stop at their next part even while the abort's messages wait for a
  // worker (a unit runs a run of parts without a pause for other actors: SendKernelParts). The
  // stream's next epoch starts at it or after (StreamActor::NewEpoch).
  std::atomic<std::uint64_t> stop_below{0};
  // Whether work of `work_epoch` may start: its epoch is current and not below the stop mark.
  bool Admits(std::uint64_t work_epoch) const {
    return epoch.load(std::memory_order_seq_cst) == work_epoch &&
           work_epoch >= stop_below.load(std::memory_order_seq_cst);
  }
  bool Enter(std::uint64_t work_epoch) {
    inside.fetch_add(1, std::memory_order_seq_cst);
    if (Admits(work_epoch)) return true;
    inside.fetch_sub(1, std::memory_order_release);
    return false;
  }
  // After a refused Enter: refused by the stop mark alone (the stream has not moved on yet).
  bool Stopped(std::uint64_t work_epoch) const {
    return epoch.load(std::memory_order_seq_cst) == work_epoch &&
           work_epoch < stop_below.load(std::memory_order_seq_cst);
  }
  void Leave() { inside.fetch_sub(1, std::memory_order_release); }
  void RequestStop() {
    const std::uint64_t want = epoch.load(std::memory_order_seq_cst) + 1;
    std::uint64_t now = stop_below.load(std::memory_order_seq_cst);
    while (now < want && !stop_below.compare_exchange_weak(now, want, std::memory_order_seq_cst)) {
    }
  }
};
// Inside a gate for a scope (a kernel that throws still leaves). A null gate is always open.
class GateScope {
 public:
  GateScope(WorkGate* gate, std::uint64_t epoch) : gate_(gate) {
    entered_ = gate_ == nullptr || gate_->Enter(epoch);
  }
  ~GateScope() {
    if (entered_ && gate_ != nullptr) gate_->Leave();
  }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;
  bool entered() const { return entered_; }
  // Not entered because a host caller is stopping the stream's work (WorkGate::stop_below).
  bool stopped(std::uint64_t epoch) const { return !entered_ && gate_->Stopped(epoch); }

 private:
  WorkGate* gate_;
  bool entered_ = false;
};
struct KernelJob {
  std::atomic<bool> in_use{false};
  WorkGate* gate = nullptr;  // the stream's (streams live as long as the device)
  const KernelDef* def = nullptr;
  std::vector<std::uint64_t> args;  // a copy: the stream may be aborted and reloaded meanwhile
  std::uint32_t block_dim = 1;
  std::uint64_t tiling_key = 0;
  std::string name;
  StreamAddr stream;
  StreamId stream_id = 0;
  std::uint64_t epoch = 0;
  std::uint32_t task = 0;
  std::uint64_t launch = 0;  // NextKernelLaunch: KernelContext::launch of its blocks
  // A run of kernels (StreamActor::StartKernelRun): the kernel after this one on its stream, started
  // by the run of parts that ends this one, the NOPs' latency `lead` and the launch overhead after
  // this one's end, from `home`. Only the last of them, or one that fails, reports.
  KernelJob* next = nullptr;
  VTime lead = 0;
  std::uint32_t home = 0;
  RunProgress* progress = nullptr;  // the stream's, where the run records each kernel it starts
  // The parts' bookkeeping, set by SendKernelParts before it sends them: each run of parts folds
  // its parts' latest end in once it ends, each part its error (the first wins) as it ends, and the
  // run that folds the last parts reports the kernel to the stream itself (units.cc FoldParts).
  std::atomic<std::uint32_t> parts_left{0};
  std::atomic<VTime> end{0};
  std::atomic<bool> failed{false};  // a part has claimed `status`
  Status status;                    // written by that part before its run's parts_left decrement
  bool stopped = false;             // with `status`: UnitDone::stopped
};
struct SetUnitFault {  // Ask<void>, forwarded by the cluster to one unit
  static constexpr std::string_view kKind = "SetFault";
  int unit = 0;
  Fault fault;
};
struct RunBlocks;
using UnitMsg = std::variant<RunBlocks, SetUnitFault>;
struct AttachUnits {  // Ask<void>, once, right after spawning
  static constexpr std::string_view kKind = "AttachUnits";
  std::vector<actors::Address<UnitMsg>> units;
};
using ClusterMsg = std::variant<SetUnitFault, AttachUnits>;

struct RunBlocks {
  static constexpr std::string_view kKind = "RunBlocks";
  KernelJob* job = nullptr;
  std::uint32_t part = 0;   // the first part of this message, on the unit it is sent to
  std::uint32_t group = 1;  // parts [part, part + group), on that unit and the ones after it
  std::uint32_t parts = 1;  // the kernel's parts: part p has blocks PartBlocks(block_dim, parts, p)
  VTime at = 0;
};

// ---- to the DMA engine ------------------------------------------------------------------------
struct CopyRequest {
  static constexpr std::string_view kKind = "Copy";
  CopyKind kind = CopyKind::kHostToDevice;
  DevicePtr dst_dev, src_dev;
  void* dst_host = nullptr;
  const void* src_host = nullptr;
  std::uint64_t bytes = 0;
  std::string name;
  std::shared_ptr<const void> keep_alive;  // the host memory's owner, held until the copy is done
  StreamAddr stream;
  std::uint64_t epoch = 0;
  std::uint32_t task = 0;
  VTime at = 0;
  bool data_in_place = false;  // Task::data_in_place
  int peer_device = -1;        // kPeerToPeer: Task::peer_device, Task::peer_memory
  DeviceMemory* peer_memory = nullptr;
  WorkGate* gate = nullptr;    // the stream's: see WorkGate
  HostWindow* host_window = nullptr;  // Task::host_window
};
struct AttachChannels;
using DmaMsg = std::variant<CopyRequest, SetUnitFault, AttachChannels>;
struct AttachChannels {  // Ask<void>, once, right after spawning (to the engine)
  static constexpr std::string_view kKind = "AttachChannels";
  std::vector<actors::Address<DmaMsg>> channels;
};

// ---- to the event table -----------------------------------------------------------------------
struct CreateEvent {  // Ask<EventId>
  static constexpr std::string_view kKind = "CreateEvent";
  bool latch = false;  // see EventKind::kLatch
};
struct DestroyEvent {  // Ask<void>
  static constexpr std::string_view kKind = "DestroyEvent";
  EventId event = 0;
};
// Which model run a record or wait belongs to. A record of one run never ends a wait of another:
// a record an aborted or failed run made, whose wait never ran, is not consumed by the next run,
// and a wait an aborted stream left behind never takes the next run's record. Host streams'
// records and waits are untagged and match any.
struct RunTag {
  static constexpr std::uint32_t kUntagged = 0xFFFFFFFFu;
  std::uint32_t model = kUntagged;
  std::uint64_t run = 0;
  bool Matches(const RunTag& o) const { return model == kUntagged || o.model == kUntagged || (model == o.model && run == o.run); }
  // `this` is of an earlier run of the same model than `now`: its run is over.
  bool OlderThan(const RunTag& now) const { return model != kUntagged && model == now.model && run < now.run; }
};
struct RecordEvent {
  static constexpr std::string_view kKind = "RecordEvent";
  EventId event = 0;
  VTime at = 0;
  RunTag tag;
};
struct WaitEvent {  // a stream's wait task: consumes one record, now or when it comes
  static constexpr std::string_view kKind = "WaitEvent";
  EventId event = 0;
  StreamAddr stream;
  StreamId stream_id = 0;
  std::uint64_t epoch = 0;
  std::uint32_t task = 0;
  RunTag tag;
};
struct QueryEvent {  // Ask<bool>: is a record pending (not yet consumed)?
  static constexpr std::string_view kKind = "QueryEvent";
  EventId event = 0;
};
struct HostWaitEvent {  // Ask<VTime>: completes when the event has been recorded at least once
  static constexpr std::string_view kKind = "HostWaitEvent";
  EventId event = 0;
};
struct ResetEvent {  // Ask<void>: forget pending records
  static constexpr std::string_view kKind = "ResetEvent";
  EventId event = 0;
};
struct CancelWaits {  // an aborted stream's pending waits are dropped
  static constexpr std::string_view kKind = "CancelWaits";
  StreamId stream = 0;
};
using EventMsg = std::variant<CreateEvent, DestroyEvent, RecordEvent, WaitEvent, QueryEvent, HostWaitEvent, ResetEvent,
                              CancelWaits>;

}  // namespace npuflow::npu_sim
