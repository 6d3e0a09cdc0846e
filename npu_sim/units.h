// The device's execution units as actors.
//
//   ClusterActor   AICoreCluster (or the AICPU group): owns its units and routes faults to them.
//                  A kernel's blocks are spread over the units as parts (contiguous block ranges,
//                  one per unit) by SendKernelParts, which the stream calls: no hop through here.
//   UnitActor      one AICore or AICPU unit with its own virtual clock: runs blocks on the CPU
//                  over device memory, in order; the run of parts that ends a kernel's last
//                  parts reports the kernel done to its stream.
//   DmaEngineActor picks the channel that frees up first (it knows every copy's cost).
//   DmaChannelActor one copy channel with a virtual clock and the chip's bandwidth.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "npu_sim/device.h"
#include "npu_sim/messages.h"
#include "npu_sim/timeline.h"

namespace npuflow::npu_sim {

class UnitActor {
 public:
  using Message = UnitMsg;
  using Ctx = actors::Context<Message>;
  UnitActor(Device* device, Device::UnitGroup* group, int index);
  void Receive(Message& msg, Ctx& ctx) {
    std::visit([&](auto& m) { On(m, ctx); }, msg);
  }

 private:
  void On(RunBlocks& run, Ctx& ctx);
  void On(SetUnitFault& m, Ctx& ctx);
  Device* device_;
  Device::UnitGroup* group_;
  std::uint32_t index_;
  std::uint64_t budget_ticks_;  // kGroupWallBudgetNs in CycleClock ticks
};

class ClusterActor {
 public:
  using Message = ClusterMsg;
  using Ctx = actors::Context<Message>;
  ClusterActor(Device* device, Engine engine);
  void Receive(Message& msg, Ctx& ctx) {
    std::visit([&](auto& m) { On(m, ctx); }, msg);
  }

 private:
  void On(AttachUnits& attach, Ctx& ctx);
  void On(SetUnitFault& fault, Ctx& ctx);
  Device* device_;
  Engine engine_;
  std::vector<actors::Address<UnitMsg>> units_;
};

// Runs `job`'s blocks [0, block_dim) on `group`'s units as min(block_dim, units) parts of
// contiguous blocks on consecutive units, starting at the stream's home unit `home`; every part
// starts at virtual time `at` on its unit's clock. A stream without a home yet
// (Device::kNoHomeUnit) takes the next one the device gives (HomeUnit). Sets the job's part
// bookkeeping first (the sends publish it). Called by the stream that owns the job.
//
// The parts go as min(parts, group.lanes) messages, one per worker thread: each to the first unit
// of a run of consecutive parts, which runs its own part and then the run's others on their units'
// states (UnitState) while those are free; a part whose unit is busy elsewhere, and every part left
// once the run has spent kGroupWallBudgetNs in kernels (not in deterministic mode), is sent to its
// own unit instead. So
// a kernel of n parts costs min(n, workers) + 1 messages, not n + 1, and its virtual time is the
// same (each part takes its own unit's clock). Why: with one worker a 24-part kernel was 24 actor
// hops on one thread, each with the runtime's state cold after the part's weights went through
// the caches (GPT-2 117M f16: about 400 parts a decode step; docs/gpt2.md).
//
// Why a home and not a round robin (which this was until issue 21): a stream runs one kernel at a
// time, so its kernels on the same units never wait for each other, and those units' state (their
// mailboxes and busy timelines) is warm from the stream's last kernel. Round the units, each kernel
// found its unit cold after a step's weights had gone through the caches: GPT-2 decode at 1 worker,
// the median step's overhead 46.7 -> 41.5 us on 2 x 64, 284 -> 251 us on 117M f16 (alternated
// runs, 2026-11-29; docs/gpt2.md "A stream's kernels start at its home unit").
void SendKernelParts(Device::UnitGroup& group, KernelJob* job, VTime at, std::uint32_t& home);

// How much kernel wall time one message's run of parts may spend before it sends the rest to their
// units: other actors (another stream) wait about this plus one part. Aborts do not wait for it
// (WorkGate::stop_below).
inline constexpr std::int64_t kGroupWallBudgetNs = 1'000'000;

// Part p of a kernel of `block_dim` blocks split into `parts`: its first block and block count.
inline std::pair<std::uint32_t, std::uint32_t> PartBlocks(std::uint32_t block_dim, std::uint32_t parts,
                                                          std::uint32_t p) {
  const std::uint32_t each = block_dim / parts, extra = block_dim % parts;
  return {p * each + std::min(p, extra), each + (p < extra ? 1 : 0)};
}

// The home of the k-th stream (from 0) to run a kernel on a group of `units`: the units in the order
// the points 0, 1/2, 1/4, 3/4, 1/8, 5/8, ... of the way round first reach them, so the first streams
// halve the gaps between the homes before them (24 AICores: 0, 12, 6, 18, 3, 15, 9, 21, 1, 13, ...;
// 6 AICPUs: 0, 3, 1, 4, 2, 5) and streams that run together overlap only with kernels wider than the
// gap between their homes (2 streams: 12 of 24 AICores; 4: 6). Every unit is a home once before any
// is again (the k-th stream's home is the (k mod units)-th).
std::uint32_t HomeUnit(std::uint32_t k, std::uint32_t units);

// How a copy ended, as its channel reports it to its stream (UnitDone); `hung`: an injected hang,
// which never reports.
struct CopyEnd {
  VTime end = 0;
  Status status;
  bool stopped = false;  // UnitDone::stopped
  bool hung = false;
};

// Runs copy `req` on DMA channel `channel`, whose state the caller holds: the channel's injected
// fault, the bytes (inside the stream's gate), the device's copy counters, the channel's virtual
// clock and its trace. `name` names the copy in traces and errors (its kind when empty).
CopyEnd RunCopy(Device& device, DmaChannelState& state, int channel, const CopyRequest& req, std::string_view name);

// A DMA channel: runs the copies the engine routes to it on its state (Device::dma_channels), which
// a stream may hold for a copy of its own meanwhile (StreamActor::CopyHere).
class DmaChannelActor {
 public:
  using Message = DmaMsg;
  using Ctx = actors::Context<Message>;
  DmaChannelActor(Device* device, int index);
  // Moves the bytes of `req` (its source in `mem`, the device's own memory).
  static Status Copy(DeviceMemory& mem, const CopyRequest& req);
  void Receive(Message& msg, Ctx& ctx) {
    std::visit([&](auto& m) { On(m, ctx); }, msg);
  }

 private:
  void On(CopyRequest& req, Ctx& ctx);
  void On(SetUnitFault& m, Ctx& ctx);
  void On(AttachChannels&, Ctx& ctx) { ctx.Reply(); }
  Device* device_;
  int index_;
};

class DmaEngineActor {
 public:
  using Message = DmaMsg;
  using Ctx = actors::Context<Message>;
  explicit DmaEngineActor(Device* device) : device_(device) {}
  void Receive(Message& msg, Ctx& ctx) {
    std::visit([&](auto& m) { On(m, ctx); }, msg);
  }

 private:
  void On(CopyRequest& req, Ctx& ctx);
  void On(SetUnitFault& fault, Ctx& ctx);
  void On(AttachChannels& attach, Ctx& ctx);
  void LinkCopy(CopyRequest& req);
  struct Link {  // to one peer device
    VTime free_at = 0;
    TraceTrack* track = nullptr;
  };
  Device* device_;
  std::vector<actors::Address<DmaMsg>> channels_;  // routed by Device::dma_routing
  std::map<int, Link> links_;   // by peer device
};

// The bandwidth of a copy kind on `chip`, in GB/s.
double CopyBandwidth(const ChipSpec& chip, CopyKind kind);

}  // namespace npuflow::npu_sim
