// Tasks: what a stream executes. Plain data: a stream's list is a vector of these, and its loop
// is a switch over `kind`.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "npu_sim/chip_spec.h"
#include "npu_sim/device_memory.h"
#include "npu_sim/kernel.h"

namespace npuflow::npu_sim {

// The tiling-sink placeholder: a kernel whose block_dim is this when it starts was never
// updated by its tiling task.
inline constexpr std::uint32_t kTilingSinkBlockDim = 0xFFFFFFFFu;

enum class TaskKind : std::uint8_t {
  kKernel,       // AICore kernel: block_dim blocks over the AICore cluster
  kAicpuKernel,  // AICPU kernel: one run on an AICPU unit
  kMemcpy,       // DMA copy
  kEventRecord,
  kEventWait,
  kNop,
  kTaskUpdate,   // patch block_dim / tiling_key of a task on another stream
  kModelExecute, // host stream: run a device model (rtModelExecute on a stream); done when the run is
};
std::string_view TaskKindName(TaskKind kind);

// kPeerToPeer: from this device's memory to another device's of the same runtime, over the
// link between the two chips (ChipSpec::link_*), traced on the link's own track.
enum class CopyKind : std::uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice, kPeerToPeer };
std::string_view CopyKindName(CopyKind kind);

using StreamId = std::uint32_t;
using EventId = std::uint32_t;

// A host buffer whose owner may give it up while a copy into it is still queued: a synchronous
// caller writes its outputs straight into its own buffers, and returns (timed out, or its answer
// came from a system shutting down) without knowing whether a copy is still on its way. A
// device-to-host copy with a window writes only while the window is open, under its lock, so once
// Close() has returned nothing writes the buffer again; a copy that finds it closed fails
// (Aborted) and moves nothing.
class HostWindow {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  // Runs `write` under the lock if the window is open; false (nothing run) once it is closed.
  template <typename F>
  bool WriteIfOpen(F&& write) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return false;
    write();
    return true;
  }

 private:
  std::mutex mu_;
  bool open_ = true;
};

struct Task {
  TaskKind kind = TaskKind::kNop;
  // Set by a model stream when it loads its program (the caller's value is ignored): how many plain
  // NOPs run in a row from this one (0 if it is none), for the stream to run the row at once. Beside
  // `kind`, in what would be padding: a NOP's check reads no other line.
  std::uint32_t nop_row = 0;
  std::string name;  // for traces and errors; empty: the kind's name

  // kKernel, kAicpuKernel
  const KernelDef* kernel = nullptr;
  std::uint32_t block_dim = 1;
  std::uint64_t tiling_key = 0;
  std::vector<std::uint64_t> args;

  // kMemcpy: host pointers are raw addresses on the host side of a copy
  CopyKind copy = CopyKind::kHostToDevice;
  DevicePtr dst_dev, src_dev;
  void* dst_host = nullptr;
  const void* src_host = nullptr;
  std::uint64_t bytes = 0;
  // The owner of the host memory the copy reads or writes: the DMA engine holds it until the copy
  // is done, so an aborted stream's caller may drop its buffers while a copy is still in flight.
  std::shared_ptr<const void> keep_alive;
  // kDeviceToHost only: the destination's window (see HostWindow), owned through keep_alive; null:
  // the destination stays valid until the copy is done.
  HostWindow* host_window = nullptr;
  // kHostToDevice: the host has already written the bytes at dst_dev through
  // Runtime::MapForHostWrite (src_host is unused). kDeviceToHost: the host reads the bytes at
  // src_dev itself once the synchronisation that covers the copy has answered
  // (Runtime::ReadInPlace; dst_host is unused), and nothing writes them before it has. Either
  // way the copy checks the range, moves nothing and costs the same virtual time: the
  // device-side order (a latch recorded after it, the stream's next task) is unchanged.
  bool data_in_place = false;
  // kPeerToPeer: the destination device and its memory (dst_dev is an address there).
  int peer_device = -1;
  DeviceMemory* peer_memory = nullptr;

  // kEventRecord, kEventWait
  EventId event = 0;
  // A NOP that was an event wait (Runtime::ElideWaits): the race detector still orders it after
  // the event's records, which is what made eliding it safe.
  bool elided_wait = false;

  // kTaskUpdate: the target task, and the device words holding its new values (a u32
  // block_dim, a u64 tiling_key)
  StreamId target_stream = 0;
  std::uint32_t target_task = 0;
  DevicePtr block_dim_addr, tiling_key_addr;

  // kModelExecute: the device model, and its I/O addresses for this run (see IoPatch)
  std::uint32_t model = 0;
  std::shared_ptr<const std::vector<std::uint64_t>> io;

  static Task Nop() { return Task{}; }
  static Task Kernel(const KernelDef* def, std::uint32_t block_dim, std::vector<std::uint64_t> args,
                     std::uint64_t tiling_key = 0);
  static Task Copy(CopyKind kind, std::uint64_t bytes);  // fill the endpoints
  static Task Record(EventId event);
  static Task Wait(EventId event);
  static Task ModelExecute(std::uint32_t model, std::shared_ptr<const std::vector<std::uint64_t>> io);
  static Task Update(StreamId target_stream, std::uint32_t target_task, DevicePtr block_dim_addr,
                     DevicePtr tiling_key_addr);
  std::string_view display_name() const { return name.empty() ? TaskKindName(kind) : std::string_view(name); }
};

// Zero copy: a loaded task list names the places that hold a model input's or output's address,
// and each model run supplies the addresses (one per slot). At the start of a run the stream
// writes io[slot] + offset into each place, so a run reads and writes the caller's buffers
// directly. Runs of one model are serialized, so a patch never changes a running list.
struct IoPatch {
  static constexpr std::uint32_t kCopySrc = 0xFFFFFFFEu;  // `field`: a copy task's src_dev
  static constexpr std::uint32_t kCopyDst = 0xFFFFFFFFu;  // `field`: a copy task's dst_dev
  std::uint32_t task = 0;   // index in the stream's list
  std::uint32_t field = 0;  // a kernel argument index, or kCopySrc / kCopyDst
  std::uint32_t slot = 0;
  std::uint64_t offset = 0;
};

}  // namespace npuflow::npu_sim
