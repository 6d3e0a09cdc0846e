// Runtime: the rt/acl-style host API over the simulated devices. Every runtime above npu_sim
// talks to the device through this class only.
//
//   auto rt = npu_sim::Runtime::Create({.chips = {"910B"}}).value();
//   DevicePtr buf = rt->Malloc(0, 4096).value();
//   Stream s = rt->CreateStream(0).value();
//   rt->LaunchKernel(s, "vector_add_f32", 8, {a.value, b.value, c.value, n});
//   rt->SynchronizeStream(s);
//
// Calls are thread-safe. Each host API call that reaches a device advances the caller's host
// virtual clock by the chip's host launch latency and counts as one host interaction. The caller
// is a host client (host_client.h): the thread, the fiber, or a HostClient a ScopedHostClient
// names.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/system.h"
#include "npu_sim/device.h"
#include "npu_sim/host_client.h"
#include "npu_sim/messages.h"
#include "npu_sim/task.h"
#include "npu_sim/trace.h"

namespace boost::fibers {
template <typename T>
class fiber_specific_ptr;
}

namespace npuflow::npu_sim {

struct RuntimeOptions {
  std::vector<std::string> chips = {"910B"};  // one device per entry: a shipped chip name or a JSON path
  int workers = 0;                            // actor worker threads; 0: one per hardware thread
  bool deterministic = false;                 // one worker, FIFO delivery, byte-identical traces
  bool trace = false;                         // record the Chrome trace
  // Threads for blocking file work (the weight loader's reads, hashing, decryption), apart from
  // the workers: actors::SystemOptions::io_threads. 0: inline in the loader's handler; always 0
  // in deterministic mode.
  int io_threads = 2;
  // Happens-before race detection on device memory (race_detector.h). Also on when the process
  // default is (RaceDetector::SetProcessDefault, `--race-detect`, NPUFLOW_RACE_DETECT=1).
  bool race_detect = false;
  // A model stream starts the fetched kernels that follow a kernel, with only NOPs between them, as
  // one run: each started by the unit that ends the one before it, the stream told once
  // (StreamActor::StartKernelRun). Results and virtual times are the same either way; false runs
  // every kernel through its stream (as a traced stream does), for comparison; so does the
  // environment variable NPUFLOW_KERNEL_RUNS=0 for every runtime of the process.
  bool kernel_runs = true;
  // A stream runs a small copy (up to kCopyHereMaxBytes, not peer to peer) on a free DMA channel
  // itself instead of sending it through the DMA engine to the channel's actor
  // (StreamActor::CopyHere). Results, virtual times, faults and traces are those of the channel
  // either way; false sends every copy, for comparison; so does NPUFLOW_COPIES_HERE=0 for every
  // runtime of the process.
  bool copies_here = true;
  // How long a synchronous copy (MemcpyH2D / D2H / D2D, on the device's default stream) waits
  // before it aborts the default stream and fails with Timeout, so that a hung copy cannot wedge
  // every later synchronous copy. 0: wait for good.
  std::chrono::milliseconds copy_timeout{60'000};
};

struct Stream {
  int device = -1;
  StreamId id = 0;
  friend bool operator==(const Stream&, const Stream&) = default;
};
struct Event {
  int device = -1;
  EventId id = 0;
};
struct Model {
  int device = -1;
  std::uint32_t id = 0;
};

enum class Feature : std::uint8_t { kTaskUpdate };
// kDefault: each stream wait consumes one record (rtStreamWaitEvent). kLatch: once recorded, every
// wait passes until ResetEvent; nothing is consumed (a "this data is ready" flag).
enum class EventKind : std::uint8_t { kDefault, kLatch };
enum class FaultTarget : std::uint8_t { kStream, kAICore, kAICpu, kDma };

using Timeout = std::optional<std::chrono::milliseconds>;  // nullopt: wait forever

class Runtime {
 public:
  static StatusOr<std::unique_ptr<Runtime>> Create(RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int device_count() const { return static_cast<int>(devices_.size()); }
  StatusOr<const ChipSpec*> chip(int device) const;
  StatusOr<bool> GetDeviceCapability(int device, Feature feature) const;

  // ---- memory
  StatusOr<DevicePtr> Malloc(int device, std::uint64_t bytes, Placement placement = Placement::kHbm,
                             std::string tag = "", PagePolicy pages = PagePolicy::kHugeFirst);
  Status Free(int device, DevicePtr ptr);
  // Synchronous copies, through the device's default stream.
  Status MemcpyH2D(int device, DevicePtr dst, const void* src, std::uint64_t bytes);
  Status MemcpyD2H(int device, void* dst, DevicePtr src, std::uint64_t bytes);
  Status MemcpyD2D(int device, DevicePtr dst, DevicePtr src, std::uint64_t bytes);
  // Asynchronous copies on a stream. The host buffer must stay valid until the stream has run it.
  Status MemcpyH2DAsync(Stream stream, DevicePtr dst, const void* src, std::uint64_t bytes);
  Status MemcpyD2HAsync(Stream stream, void* dst, DevicePtr src, std::uint64_t bytes);
  Status MemcpyD2DAsync(Stream stream, DevicePtr dst, DevicePtr src, std::uint64_t bytes);
  // From `src` on the stream's device to `dst` on `dst_device` over the link between the two
  // chips (the source chip's link_bandwidth_gbps and link_latency_ns), in the stream's order.
  Status MemcpyPeerAsync(Stream stream, int dst_device, DevicePtr dst, DevicePtr src, std::uint64_t bytes);

  // ---- streams
  StatusOr<Stream> CreateStream(int device);
  Status DestroyStream(Stream stream);
  Stream DefaultStream(int device) const { return Stream{device, 0}; }
  // Waits for everything submitted to `stream` before this call. A failed task's error is
  // returned here (once). On timeout: a Timeout status; the stream goes on.
  Status SynchronizeStream(Stream stream, Timeout timeout = std::nullopt);
  // The same without blocking: the future completes with the virtual time the work ended. For
  // actors, which must not block.
  actors::Future<StatusOr<VTime>> SynchronizeStreamAsync(Stream stream);
  // For a caller that shares the stream with others: waits for the caller's own `task_count`
  // tasks from `first_task` (what Submit answered) and fails if any of them failed or was dropped,
  // even when another caller's Synchronize heard of that failure first; Ok if they all ran, even
  // when another caller's later task failed.
  Status SynchronizeSubmission(Stream stream, std::uint32_t first_task, std::uint32_t task_count,
                               Timeout timeout = std::nullopt);
  actors::Future<StatusOr<VTime>> SynchronizeSubmissionAsync(Stream stream, std::uint32_t first_task,
                                                             std::uint32_t task_count);
  // Stops a host stream: the running and queued tasks fail with Aborted (reported by the next
  // Synchronize); the stream then serves new submissions. The way out of a hung task.
  Status AbortStream(Stream stream);

  // ---- events
  StatusOr<Event> CreateEvent(int device, EventKind kind = EventKind::kDefault);
  Status DestroyEvent(Event event);
  Status RecordEvent(Event event, Stream stream);
  Status StreamWaitEvent(Stream stream, Event event);
  StatusOr<bool> QueryEvent(Event event);  // a record not yet consumed by a stream's wait
  Status SynchronizeEvent(Event event, Timeout timeout = std::nullopt);
  Status ResetEvent(Event event);

  // ---- kernels and tasks
  Status LaunchKernel(Stream stream, std::string_view kernel, std::uint32_t block_dim, std::vector<std::uint64_t> args,
                      std::uint64_t tiling_key = 0);
  Status LaunchAicpuKernel(Stream stream, std::string_view kernel, std::vector<std::uint64_t> args);
  // Any tasks (NOPs, updates, ...), in one host interaction. Returns the first task's id.
  StatusOr<std::uint32_t> Submit(Stream stream, std::vector<Task> tasks);

  // ---- device models (task sink)
  StatusOr<Model> CreateModel(int device);
  Status BindStream(Model model, Stream stream);
  // Sends the stream its task list once. The stream must be bound to the model. `patches` name
  // the zero-copy places of the list (task.h, IoPatch); a run then gives one address per slot.
  Status LoadTasks(Model model, Stream stream, std::vector<Task> tasks, std::vector<IoPatch> patches = {});
  // Turns event waits of a stream's loaded list into NOPs (from the next run if one is running):
  // for waits that can no longer block, such as a latch every run has passed. A task that is not
  // an event wait (or a NOP) is an error naming it, and nothing changes.
  Status ElideWaits(Model model, Stream stream, std::vector<std::uint32_t> tasks);
  actors::Future<Status> ElideWaitsAsync(Model model, Stream stream, std::vector<std::uint32_t> tasks);
  // One message to the device; the host hears only the completion. On timeout the model is
  // aborted and a Timeout status returned. Returns the run's virtual end time. `io`: one address
  // per slot of the loaded patches (empty: the lists run as loaded).
  StatusOr<VTime> ExecuteModel(Model model, Timeout timeout = std::nullopt) { return ExecuteModel(model, {}, timeout); }
  StatusOr<VTime> ExecuteModel(Model model, std::vector<std::uint64_t> io, Timeout timeout);
  actors::Future<StatusOr<VTime>> ExecuteModelAsync(Model model, std::vector<std::uint64_t> io = {});
  // The same execution answered into `reply` (an actor's caller waits on it: the device answers
  // that caller itself, with no future or continuation in between), after `on_end` has run. A
  // request refused before it reaches the device also runs `on_end`, then fails `reply`.
  void ExecuteModelReplyTo(Model model, std::vector<std::uint64_t> io, actors::Replier<VTime> reply,
                           RunEndHook on_end);
  // rtModelExecute on a host stream: one task that runs the model after the stream's earlier
  // work; the stream's later work waits for the run, and SynchronizeStream reports its error.
  Status ExecuteModelOnStream(Model model, Stream stream, std::vector<std::uint64_t> io = {});
  Status AbortModel(Model model);
  actors::Future<Status> AbortModelAsync(Model model);  // without blocking (for actors)
  // Aborts the model, unbinds and destroys its streams, and forgets it. Its id is not reused.
  Status DestroyModel(Model model);

  // ---- faults, stats, trace
  // The `fault.nth` task (from now) of the target fails, hangs or is delayed. index: stream id,
  // or unit / channel index.
  Status InjectFault(int device, FaultTarget target, int index, Fault fault);
  StatusOr<DeviceStats> Stats(int device) const;
  // DeviceStats::kernel_ns alone, without the locks Stats takes (0 for an unknown device): cheap
  // enough to read around every step.
  std::uint64_t KernelWallNs(int device) const;
  // DeviceStats::dma_copy_ns alone, the same way: the DMA channels' wall time inside copies.
  std::uint64_t DmaCopyWallNs(int device) const;

  // Host-visible device memory, the simulator's GPUDirect-Storage-style path: the bytes
  // [ptr, ptr + bytes) of a live allocation, range checked, the allocation kept alive while the
  // Mapping lives. Only the weight loader writes through it (a file read straight into its
  // device slot), before it submits a Task with data_in_place for the same range and records the
  // region's latch after that task, so kernels that wait on the latch see the bytes then, as
  // with a copy. Not a host call: it does not advance the host clock.
  StatusOr<DeviceMemory::Mapping> MapForHostWrite(int device, DevicePtr ptr, std::uint64_t bytes) const;
  // The host's side of a D2H copy with data_in_place: copies [src, src + bytes) to `dst` on the
  // calling thread, after the synchronisation that covered the copy task, and counts it as DMA
  // copy time (DmaCopyWallNs), as the channel would have. The bytes then cross between cores
  // once, into the cache of the thread that reads them next (a channel's copy into a buffer that
  // thread has read cost a decode step's logits 15-20 us more on this 2-core VM).
  Status ReadInPlace(int device, void* dst, DevicePtr src, std::uint64_t bytes) const;
  TraceRecorder& trace() { return *trace_; }
  Status WriteTrace(const std::string& path) const { return trace_->WriteFile(path); }
  VTime HostClock() const;  // the current host client's virtual clock (host_client.h)
  // The current host client's side, to lend to an actor that acts for this caller while the
  // caller waits for its answer (ScopedHostClient(HostSide&)). The caller makes no host call of
  // its own until the answer comes.
  HostSide& CurrentHostSide() const;
  // Host calls (or host-clock reads) made from an actor's handler with no host client in scope:
  // their virtual time would be the worker thread's, so it would depend on which worker ran the
  // handler. Every actor that calls the host API scopes a client of its own or its caller's, so
  // this stays 0; the first one is logged as an error naming the actor.
  std::uint64_t unattributed_host_calls() const { return unattributed_.load(std::memory_order_relaxed); }
  actors::System& system() { return *system_; }
  // The race detector, or null when race detection is off.
  const RaceDetector* race_detector() const { return race_.get(); }

 private:
  struct HostStream {
    std::mutex mu;
    StreamAddr addr;
    std::uint64_t next_task = 0;
    std::int64_t model = -1;  // bound model id, -1 for a host stream
    bool live = false;
    WorkGate gate;  // the stream actor's (StreamActor::gate_): an abort stops its units' work first
  };
  struct ModelEntry {
    actors::Address<ModelMsg> addr;
    std::vector<StreamId> streams;
    std::uint32_t io_slots = 0;  // 1 + the largest patch slot of the loaded lists
    bool live = true;
  };
  struct DeviceEntry {
    std::unique_ptr<Device> device;
    std::mutex mu;  // streams and models tables
    std::vector<std::unique_ptr<HostStream>> streams;
    std::deque<ModelEntry> models;  // deque: entries stay put while others are added
  };

  explicit Runtime(RuntimeOptions options);
  void StopModelWork(DeviceEntry& dev, const ModelEntry& model);
  Status Init();
  StatusOr<DeviceEntry*> Dev(int device) const;
  StatusOr<HostStream*> HostStreamOf(Stream stream) const;
  // The stream, if it is bound to `model` (else ParamInvalid naming both).
  StatusOr<HostStream*> BoundStreamOf(Model model, Stream stream) const;
  StatusOr<ModelEntry*> ModelOf(Model model) const;
  StatusOr<ModelEntry*> LiveModel(DeviceEntry& dev, Model model) const;  // caller holds dev.mu
  // A run of `model` with `io` (empty: as loaded), checked: the model is live and the I/O has one
  // non-null address per slot. One look-up and one lock of the device's tables per run.
  struct CheckedRun {
    DeviceEntry* dev;
    ModelEntry* model;
    std::shared_ptr<const std::vector<std::uint64_t>> io;  // null: as loaded
  };
  StatusOr<CheckedRun> CheckRun(Model model, std::vector<std::uint64_t> io) const;
  // Host side of a call that reaches the device: advances the current client's host clock.
  VTime HostCall(DeviceEntry& dev, std::string_view what);
  HostSide& CurrentHost() const;
  // The current host client's race-detector agent (race detection on).
  RaceAgent HostRaceAgent();
  StatusOr<std::uint32_t> SubmitTasks(Stream stream, std::vector<Task> tasks, std::string_view what);
  Status SyncStream(Stream stream, Synchronize sync, Timeout timeout);
  // The end of a synchronous copy: the default stream's synchronize with options_.copy_timeout.
  Status FinishSyncCopy(int device, std::string_view what);
  actors::Future<StatusOr<VTime>> SyncStreamAsync(Stream stream, Synchronize sync);
  template <typename R>
  static StatusOr<R> Wait(actors::Future<StatusOr<R>>& future, Timeout timeout, std::string_view what);
  static Status WaitStatus(actors::Future<Status>& future, Timeout timeout, std::string_view what);

  RuntimeOptions options_;
  std::unique_ptr<TraceRecorder> trace_;
  std::unique_ptr<RaceDetector> race_;
  std::unique_ptr<actors::System> system_;
  std::vector<std::unique_ptr<DeviceEntry>> devices_;
  const std::uint64_t uid_;  // tells this runtime's host clocks from another's
  std::atomic<int> next_host_track_{0};
  mutable std::atomic<std::uint64_t> unattributed_{0};
  mutable std::atomic<int> next_host_fiber_{0};
  // Each fiber's own host side for this runtime (deleted when the fiber ends).
  std::unique_ptr<boost::fibers::fiber_specific_ptr<HostSide>> fiber_host_;
};

}  // namespace npuflow::npu_sim
