#include "npu_sim/device_memory.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "base/large_buffer.h"

namespace npuflow::npu_sim {

struct DeviceMemory::Allocation {
  std::uint32_t id;
  std::uint64_t size;     // requested
  std::uint64_t rounded;  // accounted
  Placement placement;
  std::string tag;
  std::shared_ptr<void> backing;
};

std::string ToString(DevicePtr ptr) {
  return fmt::format("dev:{:#x}+{:#x}", ptr.allocation(), ptr.offset());
}

std::string_view PlacementName(Placement placement) {
  switch (placement) {
    case Placement::kHbm: return "hbm";
    case Placement::kP2p: return "p2p";
    case Placement::kHost: return "host";
  }
  return "unknown";
}

DeviceMemory::DeviceMemory(int device, std::uint64_t capacity) : device_(device), capacity_(capacity) {
  table_.resize(1);
  stats_.capacity = capacity;
}

DeviceMemory::~DeviceMemory() = default;

StatusOr<DevicePtr> DeviceMemory::Allocate(std::uint64_t bytes, Placement placement, std::string tag,
                                           PagePolicy pages) {
  if (bytes == 0) return Status::ParamInvalid("device {}: allocation of 0 bytes ('{}')", device_, tag);
  if (bytes > DevicePtr::kOffsetMask)
    return Status::MemoryAllocation("device {}: allocation of {} bytes ('{}') exceeds the largest allocation", device_,
                                    bytes, tag);
  const std::uint64_t rounded = (bytes + kGranularity - 1) / kGranularity * kGranularity;
  const bool on_device = placement != Placement::kHost;
  auto out_of_capacity = [&] {
    return Status::MemoryAllocation("device {}: cannot allocate {} bytes ('{}', {}): {} of {} bytes free", device_,
                                    bytes, tag, PlacementName(placement), capacity_ - stats_.in_use, capacity_);
  };
  {
    std::shared_lock<std::shared_mutex> lock(mu_);  // checked again below, under the write lock
    if (on_device && rounded > capacity_ - stats_.in_use) return out_of_capacity();
  }
  // The backing, zeroed (deterministic results, no stale data), taken before the lock: large
  // allocations are mapped from the kernel, on huge pages where it allows (base/large_buffer.h).
  std::shared_ptr<void> backing;
  if (rounded >= kLargeBufferThreshold) {
    LargeBuffer buffer =
        AllocateLargeBuffer(rounded, pages == PagePolicy::kDefaultOnly ? HugePages::kNo : HugePages::kYes);
    if (buffer) {
      LargeBufferDeleter deleter = buffer.get_deleter();
      backing = std::shared_ptr<void>(buffer.release(), deleter);
    }
  } else if (void* raw = std::aligned_alloc(kGranularity, rounded)) {
    std::memset(raw, 0, rounded);
    backing = std::shared_ptr<void>(raw, &std::free);
  }
  if (!backing)
    return Status::MemoryAllocation("device {}: host memory backing {} bytes ('{}') could not be allocated", device_,
                                    rounded, tag);
  std::unique_lock<std::shared_mutex> lock(mu_);
  if (on_device && rounded > capacity_ - stats_.in_use) return out_of_capacity();
  std::uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    if (table_.size() >= (std::uint64_t{1} << 24))
      return Status::MemoryAllocation("device {}: too many live allocations", device_);
    id = static_cast<std::uint32_t>(table_.size());
    table_.emplace_back();
  }
  table_[id] = std::make_shared<Allocation>(
      Allocation{id, bytes, rounded, placement, std::move(tag), std::move(backing)});
  (on_device ? stats_.in_use : stats_.host_in_use) += rounded;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
  ++stats_.allocations;
  ++stats_.total_allocations;
  return DevicePtr{(std::uint64_t{id} << DevicePtr::kOffsetBits)};
}

Status DeviceMemory::Free(DevicePtr ptr) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  const std::uint32_t id = ptr.allocation();
  if (id == 0 || id >= table_.size() || !table_[id])
    return Status::ParamInvalid("device {}: free of {}: no live allocation there", device_, ToString(ptr));
  if (ptr.offset() != 0)
    return Status::ParamInvalid("device {}: free of {}: not the start of allocation '{}'", device_, ToString(ptr),
                                table_[id]->tag);
  (table_[id]->placement != Placement::kHost ? stats_.in_use : stats_.host_in_use) -= table_[id]->rounded;
  --stats_.allocations;
  table_[id].reset();  // Mappings still alive keep the backing
  free_ids_.push_back(id);
  return Status::Ok();
}

StatusOr<std::uint64_t> DeviceMemory::ResidentBytes(DevicePtr ptr, std::uint64_t bytes) const {
  NPUFLOW_ASSIGN_OR_RETURN(Mapping m, Map(ptr, bytes));
  return static_cast<std::uint64_t>(npuflow::ResidentBytes(m.data(), m.size()));
}

StatusOr<DeviceMemory::Mapping> DeviceMemory::Map(DevicePtr ptr, std::uint64_t bytes) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  const std::uint32_t id = ptr.allocation();
  if (id == 0 || id >= table_.size() || !table_[id])
    return Status::ParamInvalid("device {}: access to {} ({} bytes): no live allocation there", device_, ToString(ptr),
                                bytes);
  const Allocation& a = *table_[id];
  if (ptr.offset() > a.size || bytes > a.size - ptr.offset())
    return Status::ParamInvalid("device {}: access to {} ({} bytes) is outside allocation '{}' of {} bytes", device_,
                                ToString(ptr), bytes, a.tag, a.size);
  Mapping m;
  m.hold_ = a.backing;
  m.data_ = static_cast<std::byte*>(a.backing.get()) + ptr.offset();
  m.size_ = bytes;
  return m;
}

std::string DeviceMemory::TagOf(std::uint32_t allocation) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (allocation >= table_.size() || !table_[allocation]) return "freed";
  return table_[allocation]->tag;
}

MemoryStats DeviceMemory::Stats() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return stats_;
}

std::uint64_t DeviceMemory::free_bytes() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return capacity_ - stats_.in_use;
}

}  // namespace npuflow::npu_sim
