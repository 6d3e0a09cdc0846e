// Device memory: real host memory owned by a simulated device, with the chip's capacity.
//
// A DevicePtr is an opaque handle: (allocation id << 40) | offset. Code reaches the bytes only
// through Map, which checks that [ptr, ptr + bytes) lies inside one live allocation and keeps
// that allocation's backing alive while the Mapping exists, so a kernel racing a Free never
// touches freed memory (it fails, naming the address, or finishes on the old backing).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace npuflow::npu_sim {

struct DevicePtr {
  std::uint64_t value = 0;  // 0 is null
  static constexpr int kOffsetBits = 40;
  static constexpr std::uint64_t kOffsetMask = (std::uint64_t{1} << kOffsetBits) - 1;

  explicit operator bool() const { return value != 0; }
  std::uint32_t allocation() const { return static_cast<std::uint32_t>(value >> kOffsetBits); }
  std::uint64_t offset() const { return value & kOffsetMask; }
  DevicePtr operator+(std::uint64_t bytes) const { return DevicePtr{value + bytes}; }
  friend bool operator==(DevicePtr a, DevicePtr b) { return a.value == b.value; }
};

std::string ToString(DevicePtr ptr);  // "dev:0x0000030000000040" style, stable for messages

enum class Placement : std::uint8_t { kHbm, kP2p, kHost };
// How the host memory behind an allocation is paged (rtMalloc's RT_MEMORY_POLICY_HUGE_PAGE_FIRST /
// RT_MEMORY_POLICY_DEFAULT_PAGE_ONLY): kHugeFirst for memory read whole (weights, feature maps);
// kDefaultOnly (4 KiB pages) for memory used sparsely, so only the pages touched become resident.
enum class PagePolicy : std::uint8_t { kHugeFirst, kDefaultOnly };
std::string_view PlacementName(Placement placement);

struct MemoryStats {
  std::uint64_t capacity = 0;
  std::uint64_t in_use = 0;             // device memory (HBM and P2P placements)
  std::uint64_t host_in_use = 0;        // host-placed memory: not the device's capacity
  std::uint64_t peak = 0;
  std::uint64_t allocations = 0;       // live
  std::uint64_t total_allocations = 0; // ever
};

class DeviceMemory {
 public:
  // Allocations are rounded up to kGranularity bytes and aligned to it.
  static constexpr std::uint64_t kGranularity = 512;

  DeviceMemory(int device, std::uint64_t capacity);
  ~DeviceMemory();

  // Over capacity: a MemoryAllocation status naming the request and what is free.
  StatusOr<DevicePtr> Allocate(std::uint64_t bytes, Placement placement, std::string tag,
                               PagePolicy pages = PagePolicy::kHugeFirst);
  // Freeing a pointer that is not the start of a live allocation is a ParamInvalid.
  Status Free(DevicePtr ptr);

  class Mapping {
   public:
    Mapping() = default;
    std::byte* data() const { return data_; }
    std::uint64_t size() const { return size_; }
    template <typename T>
    T* as() const { return reinterpret_cast<T*>(data_); }

   private:
    friend class DeviceMemory;
    std::shared_ptr<void> hold_;
    std::byte* data_ = nullptr;
    std::uint64_t size_ = 0;
  };

  // The bytes [ptr, ptr + bytes). Outside any live allocation: a ParamInvalid naming the address
  // and the allocation (or its absence).
  StatusOr<Mapping> Map(DevicePtr ptr, std::uint64_t bytes) const;

  // How many bytes of [ptr, ptr + bytes) the host holds resident (4 KiB granularity).
  StatusOr<std::uint64_t> ResidentBytes(DevicePtr ptr, std::uint64_t bytes) const;

  MemoryStats Stats() const;
  // The tag a live allocation was made with ("freed" if it is not live), for messages.
  std::string TagOf(std::uint32_t allocation) const;
  int device() const { return device_; }
  std::uint64_t capacity() const { return capacity_; }
  std::uint64_t free_bytes() const;

 private:
  struct Allocation;
  const int device_;
  const std::uint64_t capacity_;
  mutable std::shared_mutex mu_;
  std::vector<std::shared_ptr<Allocation>> table_;  // by id; id 0 unused
  std::vector<std::uint32_t> free_ids_;
  MemoryStats stats_;
};

}  // namespace npuflow::npu_sim
