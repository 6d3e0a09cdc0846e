// Device: one simulated NPU. Its state that every actor of the device shares: the chip, the
// memory, the trace, and the addresses of its actors.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/system.h"
#include "base/cycle_clock.h"
#include "npu_sim/chip_spec.h"
#include "npu_sim/device_memory.h"
#include "npu_sim/messages.h"
#include "npu_sim/race_detector.h"
#include "npu_sim/timeline.h"
#include "npu_sim/trace.h"

namespace npuflow::npu_sim {

struct DeviceStats {
  std::uint64_t host_interactions = 0;  // host API calls that reached the device
  std::uint64_t tasks_executed = 0;
  std::uint64_t kernels_executed = 0;
  // Of them, those started by the unit that ended the kernel before them, in a model stream's run
  // of kernels (StreamActor::StartKernelRun), not by their stream.
  std::uint64_t run_kernels = 0;
  // Copies their stream ran on a DMA channel itself (StreamActor::CopyHere), not through the
  // engine and the channel's actor.
  std::uint64_t copies_here = 0;
  // Wall time the DMA channels spent moving bytes (the memcpy of each copy, including first
  // touches of fresh destination pages), and the bytes they moved.
  std::uint64_t dma_copy_ns = 0;
  std::uint64_t dma_copy_bytes = 0;
  // Wall time the AICore and AICPU units spent inside kernel functions (every block they ran), and
  // the block runs: a step's wall time minus this is what the runtime itself cost (with one worker
  // thread, when the units never run side by side).
  std::uint64_t kernel_ns = 0;
  std::uint64_t kernel_blocks = 0;
  // How many streams have taken a home AICore / AICPU unit (npu_sim::HomeUnit gives the k-th's).
  std::uint32_t aicore_homes = 0;
  std::uint32_t aicpu_homes = 0;
  MemoryStats memory;
  std::size_t streams = 0;
  std::size_t events = 0;
};

// Held by whoever works on the state it guards, one at a time; a holder never waits for anything
// while it holds it, so Take waits at most one piece of work.
struct Hold {
  std::atomic<bool> taken{false};
  bool TryTake() { return !taken.load(std::memory_order_relaxed) && !taken.exchange(true, std::memory_order_acquire); }
  void Take() {
    while (!TryTake()) std::this_thread::yield();
  }
  void Give() { taken.store(false, std::memory_order_release); }
};

// One AICore or AICPU unit's own state: its virtual clock, trace track and injected fault. The
// unit's actor runs the parts sent to it on it; the first unit of a kernel's group also runs the
// group's other parts on their units' states while those are free (SendKernelParts, units.h).
// Whoever runs a part holds `taken`; the holder touches nothing else of another unit's and holds
// one state at a time, so a unit's own actor waits at most one part for its state.
//
// What a part reads comes first and fills one cache line (`fault_at` stands for the fault until it
// is due), and the group's states are one array: a run of parts finds them cold after the parts'
// weights went through the caches, and its first unit prefetches them all at once.
struct alignas(64) UnitState : Hold {
  std::uint64_t runs = 0;      // parts run since the fault was set
  std::uint64_t fault_at = 0;  // `fault->nth` (0: none): the part that meets the fault
  BusyTimeline busy;
  std::optional<Fault> fault;
  TraceTrack* track = nullptr;
  std::string name;  // "aicore 3": the engine and index, for traces and errors
};

static_assert(alignof(UnitState) == 64 && sizeof(UnitState) % 64 == 0, "a unit's state starts its own cache line");

// One DMA channel's own state: its virtual clock, trace track and injected fault. The channel's
// actor runs the copies the engine routes to it; a stream runs a small copy on it itself while
// nobody holds it (StreamActor::CopyHere). Whoever runs a copy holds it for that copy alone.
struct alignas(64) DmaChannelState : Hold {
  std::uint64_t runs = 0;  // copies run since the fault was set
  BusyTimeline busy;
  std::optional<Fault> fault;
  TraceTrack* track = nullptr;
};

// The DMA engine's routing: when each channel is predicted to be free. The engine actor routes each
// copy sent to it to the channel free first; a stream that runs a copy itself picks the same way.
// Whoever picks holds it for the pick alone.
struct DmaRouting : Hold {
  std::vector<VTime> free_at;  // by channel
  // Copies sent to the engine (not peer to peer) that no channel has run yet: a stream runs a copy
  // itself only when there are none, so copies reach the channels in the order they were started.
  std::atomic<std::uint64_t> sent{0};
  // The channel free first; a copy `bytes` long at virtual time `at` takes it until `cost` after.
  std::size_t Pick() const {
    std::size_t best = 0;
    for (std::size_t i = 1; i < free_at.size(); ++i)
      if (free_at[i] < free_at[best]) best = i;
    return best;
  }
  void Book(std::size_t channel, VTime at, VTime cost) { free_at[channel] = std::max(free_at[channel], at) + cost; }
};

class Device {
 public:
  Device(int id, ChipSpec chip, TraceRecorder* trace, bool deterministic, bool kernel_runs = true,
         bool copies_here = true)
      : id_(id), chip_(std::move(chip)), memory_(id, chip_.hbm_capacity_bytes), trace_(trace),
        deterministic_(deterministic), kernel_runs_(kernel_runs), copies_here_(copies_here) {}

  int id() const { return id_; }
  const ChipSpec& chip() const { return chip_; }
  DeviceMemory& memory() { return memory_; }
  const DeviceMemory& memory() const { return memory_; }
  TraceRecorder* trace() const { return trace_; }
  bool tracing() const { return trace_ != nullptr && trace_->enabled(); }
  bool deterministic() const { return deterministic_; }
  bool kernel_runs() const { return kernel_runs_; }  // RuntimeOptions::kernel_runs
  bool copies_here() const { return copies_here_; }  // RuntimeOptions::copies_here

  // Wired once at creation, read-only afterwards.
  actors::Address<ClusterMsg> aicore;
  actors::Address<ClusterMsg> aicpu;
  // A stream's home unit before its first kernel (SendKernelParts, units.h).
  static constexpr std::uint32_t kNoHomeUnit = ~std::uint32_t{0};
  // Each cluster's units. A stream sends a kernel's parts straight to them (SendKernelParts,
  // units.h): the split into parts is a function the stream calls, not a hop through the cluster
  // actor, which keeps only the units' faults.
  struct UnitGroup {
    std::vector<actors::Address<UnitMsg>> units;
    std::vector<UnitState> states;  // by unit, as `units`; made once at its size, never resized
    // How many groups a kernel's parts are sent as: the actor system's worker threads (a kernel
    // of n parts is min(n, lanes) messages and a report; see SendKernelParts).
    std::uint32_t lanes = 1;
    // How many streams have taken a home unit here (SendKernelParts, HomeUnit), so the streams'
    // kernels spread over the units.
    std::atomic<std::uint32_t> homes_given{0};
  };
  UnitGroup aicore_units;
  UnitGroup aicpu_units;
  actors::Address<DmaMsg> dma;
  actors::Address<EventMsg> events;
  RaceDetector* race = nullptr;  // the runtime's race detector; null when it is off

  // The DMA channels' states and the engine's routing: wired at creation (sized to the chip's
  // channels, never resized), then written by whoever holds them (DmaChannelState, DmaRouting).
  DmaRouting dma_routing;
  std::vector<DmaChannelState> dma_channels;

  // Streams by id. Written by the host API under mu_, read by stream actors (task updates).
  StatusOr<StreamAddr> stream(StreamId id) const {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (id >= streams_.size() || !streams_[id].live)
      return Status::NotFound("device {}: no stream {}", id_, id);
    return streams_[id].addr;
  }
  StreamId AddStream(StreamAddr addr) {
    std::lock_guard<std::mutex> lock(streams_mu_);
    streams_.push_back({addr, true});
    return static_cast<StreamId>(streams_.size() - 1);
  }
  // A destroyed stream's actor is kept for the next CreateStream.
  std::optional<StreamId> ReuseStream() {
    std::lock_guard<std::mutex> lock(streams_mu_);
    for (StreamId i = 0; i < streams_.size(); ++i) {
      if (!streams_[i].live && streams_[i].addr.valid()) {
        streams_[i].live = true;
        return i;
      }
    }
    return std::nullopt;
  }
  Status RetireStream(StreamId id) {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (id >= streams_.size() || !streams_[id].live) return Status::NotFound("device {}: no stream {}", id_, id);
    streams_[id].live = false;
    return Status::Ok();
  }
  std::size_t live_streams() const {
    std::lock_guard<std::mutex> lock(streams_mu_);
    std::size_t n = 0;
    for (const auto& s : streams_) n += s.live ? 1 : 0;
    return n;
  }

  // Device models by id, for model-execute tasks on host streams. Written by the host API.
  StatusOr<actors::Address<ModelMsg>> model(std::uint32_t id) const {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (id >= models_.size() || !models_[id].valid())
      return Status::NotFound("device {}: no model {} (never created, or destroyed)", id_, id);
    return models_[id];
  }
  void SetModel(std::uint32_t id, actors::Address<ModelMsg> addr) {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (models_.size() <= id) models_.resize(id + 1);
    models_[id] = addr;
  }

  std::atomic<std::uint64_t> host_interactions{0};
  std::atomic<std::uint64_t> tasks_executed{0};
  std::atomic<std::uint64_t> kernels_executed{0};  // started by their streams
  std::atomic<std::uint64_t> run_kernels{0};       // started in a run of kernels (DeviceStats)
  std::atomic<std::uint64_t> copies_run_here{0};   // DeviceStats::copies_here
  std::atomic<std::uint64_t> dma_copy_ns{0};
  std::atomic<std::uint64_t> dma_copy_bytes{0};
  // DeviceStats::kernel_ns in CycleClock ticks: a run of parts adds its parts' sum when it ends
  // (each part's, the difference of two readings around its blocks).
  std::atomic<std::uint64_t> kernel_ticks{0};
  std::atomic<std::uint64_t> kernel_blocks{0};
  std::uint64_t kernel_ns() const {
    return static_cast<std::uint64_t>(CycleClock::ToNs(kernel_ticks.load(std::memory_order_relaxed)));
  }
  std::atomic<std::size_t> live_events{0};

 private:
  struct StreamEntry {
    StreamAddr addr;
    bool live;
  };
  const int id_;
  const ChipSpec chip_;
  DeviceMemory memory_;
  TraceRecorder* trace_;
  const bool deterministic_;
  const bool kernel_runs_;
  const bool copies_here_;
  mutable std::mutex streams_mu_;
  std::vector<StreamEntry> streams_;
  std::vector<actors::Address<ModelMsg>> models_;  // an invalid address: destroyed
};

}  // namespace npuflow::npu_sim
