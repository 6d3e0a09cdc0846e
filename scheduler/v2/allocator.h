// RT2.0's memory: allocators per placement (seed 001 section 6).
//
//   kOnDeviceHbm / kOnDeviceP2p -> CachingMemAllocator: device blocks kept in a cache and reused.
//     It is bound to one stream: a block freed by a kernel node may be handed out again at once,
//     because whatever uses it next is submitted to the same stream after whatever used it before.
//     Nothing goes back to the device until that stream has synchronized (ReleaseCached), and the
//     allocator must not be destroyed before then.
//   kOnHost / kFollowing -> HostMemAllocator: 64-byte aligned host memory.
//   CreateExternalAllocator: the user's malloc / free functions behind the same interface.
//
// Stream, event and notify allocators hand out device streams, events and notifies by index; a
// ModelV2Executor takes the built-in ones, or the user gives all three (never some).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "npu_sim/runtime.h"

namespace npuflow::v2 {

enum class TensorPlacement : std::uint8_t { kOnDeviceHbm, kOnDeviceP2p, kOnHost, kFollowing };
std::string_view TensorPlacementName(TensorPlacement placement);

struct MemBlock {
  std::uint64_t addr = 0;  // a device address (npu_sim::DevicePtr::value), or a host pointer
  std::uint64_t size = 0;  // what the allocator reserved (at least what was asked)
  explicit operator bool() const { return addr != 0; }
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Size 0 gives a null block. Out of memory is a MemoryAllocation error naming the allocator.
  virtual StatusOr<MemBlock> Malloc(std::uint64_t size) = 0;
  virtual void Free(MemBlock block) = 0;
  virtual TensorPlacement placement() const = 0;
};

class CachingMemAllocator final : public Allocator {
 public:
  static constexpr std::uint64_t kAlignment = 512;
  CachingMemAllocator(npu_sim::Runtime* runtime, int device, TensorPlacement placement, std::string name);
  ~CachingMemAllocator() override;  // returns every block it holds to the device

  StatusOr<MemBlock> Malloc(std::uint64_t size) override;
  void Free(MemBlock block) override;
  TensorPlacement placement() const override { return placement_; }

  // The stream whose order makes reuse safe. Rebinding needs the old stream synchronized.
  void BindStream(npu_sim::Stream stream);
  npu_sim::Stream stream() const;
  // After the bound stream synchronized: the cached (free) blocks go back to the device.
  Status ReleaseCached();

  struct Stats {
    std::uint64_t in_use_bytes = 0;
    std::uint64_t cached_bytes = 0;
    std::uint64_t device_mallocs = 0;  // blocks taken from the device
    std::uint64_t reuses = 0;          // Mallocs served from the cache
  };
  Stats stats() const;

 private:
  npu_sim::Runtime* runtime_;
  int device_;
  TensorPlacement placement_;
  std::string name_;
  mutable std::mutex mu_;
  npu_sim::Stream stream_{-1, 0};
  std::multimap<std::uint64_t, std::uint64_t> cache_;  // size -> addr of free blocks
  std::map<std::uint64_t, std::uint64_t> in_use_;      // addr -> size
  Stats stats_;
};

class HostMemAllocator final : public Allocator {
 public:
  StatusOr<MemBlock> Malloc(std::uint64_t size) override;
  void Free(MemBlock block) override;
  TensorPlacement placement() const override { return TensorPlacement::kOnHost; }
};

// GE's AllocatorFactory::Create(graph_name, placement).
StatusOr<std::unique_ptr<Allocator>> CreateAllocator(npu_sim::Runtime* runtime, int device, const std::string& graph_name,
                                                     TensorPlacement placement);

// The user's allocator (GE's CreateExternalAllocator(AllocatorDesc)).
struct AllocatorDesc {
  // Returns the block's address, 0 when out of memory.
  std::uint64_t (*alloc)(void* user, std::uint64_t size) = nullptr;
  void (*free)(void* user, std::uint64_t addr) = nullptr;
  void* user = nullptr;
  TensorPlacement placement = TensorPlacement::kOnDeviceHbm;
};
StatusOr<std::unique_ptr<Allocator>> CreateExternalAllocator(const AllocatorDesc& desc);

// Streams, events and notifies for a model (ModelDesc's reusable / attached counts).
class StreamAllocator {
 public:
  virtual ~StreamAllocator() = default;
  virtual StatusOr<npu_sim::Stream> Stream(int index) = 0;
};
class EventAllocator {
 public:
  virtual ~EventAllocator() = default;
  virtual StatusOr<npu_sim::Event> Event(int index) = 0;
};
// A notify is a cross-stream (and cross-model) signal; on npu_sim, an event.
class NotifyAllocator {
 public:
  virtual ~NotifyAllocator() = default;
  virtual StatusOr<npu_sim::Event> Notify(int index) = 0;
};

// The built-ins: made on first use, destroyed with the allocator.
class BuiltinStreamAllocator final : public StreamAllocator {
 public:
  BuiltinStreamAllocator(npu_sim::Runtime* runtime, int device) : runtime_(runtime), device_(device) {}
  ~BuiltinStreamAllocator() override;
  StatusOr<npu_sim::Stream> Stream(int index) override;

 private:
  npu_sim::Runtime* runtime_;
  int device_;
  std::mutex mu_;
  std::vector<npu_sim::Stream> streams_;
};

class BuiltinEventAllocator final : public EventAllocator, public NotifyAllocator {
 public:
  BuiltinEventAllocator(npu_sim::Runtime* runtime, int device) : runtime_(runtime), device_(device) {}
  ~BuiltinEventAllocator() override;
  StatusOr<npu_sim::Event> Event(int index) override { return Take(events_, index); }
  StatusOr<npu_sim::Event> Notify(int index) override { return Take(notifies_, index); }

 private:
  StatusOr<npu_sim::Event> Take(std::vector<npu_sim::Event>& pool, int index);
  npu_sim::Runtime* runtime_;
  int device_;
  std::mutex mu_;
  std::vector<npu_sim::Event> events_;
  std::vector<npu_sim::Event> notifies_;
};

}  // namespace npuflow::v2
