// StreamActor: one device stream, an in-order submission queue.
//
// A host stream runs tasks the host submits; a model stream (bound to a device model) runs its
// loaded task list once per model run. The task loop is plain data: a vector of tasks and an
// index; NOPs, event records and host-side bookkeeping run inline, and the loop only stops for
// work another actor does (a kernel on the AICore cluster, a copy on the DMA engine, an event
// wait, a task update on another stream).
//
// Prefetch. As on the hardware, the stream fetches up to prefetch_num tasks ahead of the one
// executing and snapshots their parameters (block_dim, tiling_key) when it fetches them. A task
// update patches a task only if it has not been fetched yet; otherwise the update fails as a
// detected race naming both tasks (the hazard the tiling-sink NOPs exist to prevent). A kernel
// that starts with block_dim still kTilingSinkBlockDim fails, never runs silently.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "npu_sim/device.h"
#include "npu_sim/messages.h"

namespace npuflow::npu_sim {

// The most kernels one run starts (StartKernelRun), so the jobs a stream holds stay bounded. Not
// prefetch_num + 1, as it was: GPT-2 117M's decode step is about 100 kernels in 3 runs between
// its event waits instead of 12, and each run's end is a report to the stream and its turn, both
// on caches the step's weights went through (the median step's overhead 168 -> 132 us, 8
// alternated runs, 1 worker; docs/gpt2.md).
inline constexpr std::uint32_t kMaxKernelRun = 256;

// The largest copy a stream runs on a DMA channel itself (StreamActor::CopyHere) rather than sending
// it through the engine to a channel actor and hearing back: three actor hops, each on caches a
// GPT-2 step's weights went through, where a step's input and output copies are a few bytes. Past
// this a copy's own time outweighs the hops, and the stream would hold its mailbox for it.
inline constexpr std::uint64_t kCopyHereMaxBytes = 64 * 1024;

class StreamActor {
 public:
  using Message = StreamMsg;
  // `gate`: the stream's, kept by the runtime so that a host caller can stop its work (WorkGate).
  StreamActor(Device* device, StreamId id, WorkGate* gate);
  using Ctx = actors::Context<Message>;
  // One handler per message type; Receive dispatches with std::visit (a jump table).
  Status Receive(Message& msg, Ctx& ctx);

 private:
  Status On(Submit& m, Ctx& ctx);
  Status On(Synchronize& m, Ctx& ctx);
  Status On(LoadProgram& m, Ctx& ctx);
  Status On(StartModel& m, Ctx& ctx);
  Status On(UnitDone& m, Ctx& ctx);
  Status On(EventFired& m, Ctx& ctx);
  Status On(PatchTask& m, Ctx& ctx);
  Status On(ElideWaits& m, Ctx& ctx);
  Status On(AbortStream& m, Ctx& ctx);
  Status On(ExecutionStopped& m, Ctx& ctx);
  Status On(ResetStream& m, Ctx& ctx);
  Status On(SetStreamFault& m, Ctx& ctx);

  enum class Mode : std::uint8_t { kHost, kModel };
  enum class State : std::uint8_t { kIdle, kRunning, kWaiting };
  struct Param {
    std::uint32_t block_dim;
    std::uint64_t tiling_key;
  };
  struct PendingSync {
    std::uint64_t target;  // host: absolute task id to reach (every task submitted before the sync)
    actors::Replier<VTime> reply;
    std::uint32_t race_agent = 0xFFFFFFFFu;  // the requester, for the race detector
    std::uint64_t since = kNoSince;          // host: the caller's first task (Synchronize::since)
    Status error;                            // host: failed while draining_, answered after it
  };
  static constexpr std::uint64_t kNoSince = ~std::uint64_t{0};
  // Host: the tasks a failure failed or dropped, [begin, end), with its error; the last few.
  struct FailedRange {
    std::uint64_t begin;
    std::uint64_t end;
    Status status;
    std::uint64_t seq;  // the stream's failure count at it (sticky_seq_)
  };
  static constexpr std::size_t kFailedRangesKept = 64;
  const FailedRange* FailureSince(std::uint64_t since, std::uint64_t target) const;
  void Advance();
  void StartTask(Task& t, std::uint32_t index);
  // StartTask's stages, one per task kind another actor completes.
  void StartEventWait(const Task& t, std::uint32_t task_id);
  void StartKernel(const Task& t, std::uint32_t index, std::uint32_t task_id);
  void StartKernelRun(KernelJob* first, std::size_t index);
  void CatchUpWithRun(std::uint64_t epoch);
  KernelJob* FillJob(const Task& t, const Param& p, std::uint32_t task_id);
  KernelJob* FreeJob();
  void StartMemcpy(const Task& t, std::uint32_t task_id);
  // A copy this stream runs on a DMA channel itself (CopyHere): ended (the loop goes on), waiting
  // (an injected hang, or stopped by its caller's abort), or not run here (StartMemcpy sends it).
  enum class CopiedHere { kNo, kEnded, kWaiting };
  CopiedHere CopyHere(const Task& t, std::uint32_t task_id);
  void StartTaskUpdate(const Task& t, std::uint32_t task_id);
  void StartModelExecute(const Task& t, std::uint32_t task_id);
  bool InjectFault();
  void CompleteWaitingTask(VTime end);
  void Fail(Status status);
  void Finish();
  void FetchAhead();
  void Compact();
  void AcceptSubmit(Submit& submit);
  Status ApplyPatch(const PatchTask& m);
  Status StalePatch(const PatchTask& m) const;
  void ReleaseHeldPatches();
  void AnswerSyncs();
  void DropWhileInError();
  std::uint32_t TaskId(std::size_t index) const { return static_cast<std::uint32_t>(base_ + index); }
  void Trace(std::string_view name, VTime start, VTime duration, std::uint32_t task);
  // Race detection (device_->race set): the order a task starts in, and what it touches.
  void RaceBeforeTask(const Task& t);
  void RaceAccesses(const Task& t, std::uint32_t task_id);

  Device* device_;
  const StreamId id_;
  std::string name_;
  TraceTrack* track_ = nullptr;
  StreamAddr self_;
  Mode mode_ = Mode::kHost;
  State state_ = State::kIdle;

  Status ApplyPatches(const std::vector<std::uint64_t>& io);
  void ApplyElisions();
  // Model: sets each task's Task::nop_row, the plain NOPs (not elided waits) in a row from it. An
  // untraced model stream without a fault or race detector runs such a row at once (Advance): a
  // task is four cache lines, and a tiling-sink chain's prefetch_num NOPs were as many misses.
  void CountNopRows();

  std::vector<IoPatch> patches_;  // model: zero-copy places, applied at each run's start
  std::vector<std::uint32_t> elide_;  // model: waits to turn into NOPs at the next run's start
  std::vector<Task> tasks_;      // host: the queue (executed prefix compacted away); model: the program
  std::vector<Param> live_;      // current parameters, patchable until fetched
  std::vector<Param> snap_;      // parameters as fetched
  std::vector<std::unique_ptr<KernelJob>> jobs_;  // kernel launches, reused (see KernelJob)
  std::size_t next_job_ = 0;                      // where FreeJob looks first
  std::uint32_t home_aicore_ = Device::kNoHomeUnit;  // where this stream's kernel parts start (SendKernelParts)
  std::uint32_t home_aicpu_ = Device::kNoHomeUnit;
  std::vector<VTime> ready_at_;  // host: a task cannot start before its submission
  std::size_t exec_ = 0;         // the task executing (or next to)
  std::size_t fetch_end_ = 0;    // tasks [.., fetch_end_) are fetched
  std::size_t run_last_ = 0;     // waiting for a kernel: the last of its run (StartKernelRun)
  RunProgress run_progress_;     // the run's, written by the units that start its kernels
  std::uint64_t base_ = 0;       // host: id of tasks_[0]
  std::uint64_t epoch_ = 1;      // bumped on failure/abort: stale completions are ignored
  WorkGate& gate_;               // epoch_ as the units see it (see WorkGate)
  void CatchUpWithStop();
  void NewEpoch(bool stop_work);
  VTime clock_ = 0;
  VTime wait_start_ = 0;

  // host submissions
  std::deque<PendingSync> syncs_;
  Status sticky_error_;  // a failure no Synchronize has reported yet
  std::uint64_t sticky_seq_ = 0;   // its FailedRange::seq
  std::uint64_t failures_ = 0;     // host failures so far
  std::uint64_t skip_until_ = 0;   // host: tasks before this id, submitted in error, skip their work
  std::deque<FailedRange> failed_;  // host: recent failures, for Synchronize with `since`
  // Host: a failed rtModelExecute task's run is being stopped (CancelExecution): the stream
  // starts nothing and answers no Synchronize until it has (ExecutionStopped).
  bool draining_ = false;
  std::uint64_t drain_ = 0;  // bumped per drain and by ResetStream (ExecutionStopped::drain)
  std::uint32_t drain_model_ = 0;  // the device model the drain waits for

  // model runs
  std::uint64_t run_ = 0;
  std::uint32_t model_id_ = 0;
  RunTag RunTagOf() const { return mode_ == Mode::kModel ? RunTag{model_id_, run_} : RunTag{}; }
  struct HeldPatch {
    PatchTask patch;
    actors::Replier<void> reply;
  };
  std::vector<HeldPatch> held_patches_;  // task updates from a run not started here yet
  actors::Address<ModelMsg> model_;

  // Race detection: this stream's agent, and the submissions' clocks by their first task id.
  RaceAgent race_agent_ = kNoRaceAgent;
  std::deque<std::pair<std::uint64_t, std::uint32_t>> race_tickets_;
  std::vector<MemAccess> race_scratch_;

  std::optional<Fault> fault_;
  std::uint64_t fault_count_ = 0;
  std::uint64_t executed_ = 0;
};

}  // namespace npuflow::npu_sim
