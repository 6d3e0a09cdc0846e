#include "scheduler/v2/allocator.h"

#include <cstdlib>
#include <utility>

namespace npuflow::v2 {

std::string_view TensorPlacementName(TensorPlacement placement) {
  switch (placement) {
    case TensorPlacement::kOnDeviceHbm: return "device-hbm";
    case TensorPlacement::kOnDeviceP2p: return "device-p2p";
    case TensorPlacement::kOnHost: return "host";
    case TensorPlacement::kFollowing: return "following";
  }
  return "?";
}

// --- CachingMemAllocator

CachingMemAllocator::CachingMemAllocator(npu_sim::Runtime* runtime, int device, TensorPlacement placement,
                                         std::string name)
    : runtime_(runtime), device_(device), placement_(placement), name_(std::move(name)) {}

CachingMemAllocator::~CachingMemAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [size, addr] : cache_) (void)runtime_->Free(device_, npu_sim::DevicePtr{addr});
  for (const auto& [addr, size] : in_use_) (void)runtime_->Free(device_, npu_sim::DevicePtr{addr});
}

StatusOr<MemBlock> CachingMemAllocator::Malloc(std::uint64_t size) {
  if (size == 0) return MemBlock{};
  const std::uint64_t need = (size + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> lock(mu_);
  // The smallest cached block that fits and wastes at most half of itself.
  auto it = cache_.lower_bound(need);
  if (it != cache_.end() && it->first <= 2 * need) {
    const MemBlock block{it->second, it->first};
    cache_.erase(it);
    in_use_.emplace(block.addr, block.size);
    stats_.cached_bytes -= block.size;
    stats_.in_use_bytes += block.size;
    ++stats_.reuses;
    return block;
  }
  auto ptr = runtime_->Malloc(device_, need,
                              placement_ == TensorPlacement::kOnDeviceP2p ? npu_sim::Placement::kP2p
                                                                          : npu_sim::Placement::kHbm,
                              name_);
  // Cached blocks are not given back here: their last users may not have run yet. Only
  // ReleaseCached, after the stream synchronized, may.
  if (!ptr.ok() && !cache_.empty())
    return Status::MemoryAllocation("allocator '{}': {} bytes of device memory not available ({} bytes cached, "
                                    "released once the stream synchronizes): {}",
                                    name_, need, stats_.cached_bytes, ptr.status().message());
  if (!ptr.ok())
    return Status::MemoryAllocation("allocator '{}': {} bytes of device memory not available: {}", name_, need,
                                    ptr.status().message());
  const MemBlock block{ptr->value, need};
  in_use_.emplace(block.addr, block.size);
  stats_.in_use_bytes += block.size;
  ++stats_.device_mallocs;
  return block;
}

void CachingMemAllocator::Free(MemBlock block) {
  if (!block) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(block.addr);
  if (it == in_use_.end()) return;  // not ours (or freed twice): nothing to give back
  cache_.emplace(it->second, it->first);
  stats_.in_use_bytes -= it->second;
  stats_.cached_bytes += it->second;
  in_use_.erase(it);
}

void CachingMemAllocator::BindStream(npu_sim::Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  stream_ = stream;
}

npu_sim::Stream CachingMemAllocator::stream() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stream_;
}

Status CachingMemAllocator::ReleaseCached() {
  std::lock_guard<std::mutex> lock(mu_);
  Status first;
  for (const auto& [size, addr] : cache_) {
    Status s = runtime_->Free(device_, npu_sim::DevicePtr{addr});
    if (!s.ok() && first.ok()) first = std::move(s);
  }
  cache_.clear();
  stats_.cached_bytes = 0;
  return first;
}

CachingMemAllocator::Stats CachingMemAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// --- HostMemAllocator

StatusOr<MemBlock> HostMemAllocator::Malloc(std::uint64_t size) {
  if (size == 0) return MemBlock{};
  const std::uint64_t rounded = (size + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) return Status::MemoryAllocation("host allocator: {} bytes not available", rounded);
  return MemBlock{reinterpret_cast<std::uint64_t>(p), rounded};
}

void HostMemAllocator::Free(MemBlock block) {
  if (block) std::free(reinterpret_cast<void*>(block.addr));
}

StatusOr<std::unique_ptr<Allocator>> CreateAllocator(npu_sim::Runtime* runtime, int device, const std::string& graph_name,
                                                     TensorPlacement placement) {
  switch (placement) {
    case TensorPlacement::kOnDeviceHbm:
    case TensorPlacement::kOnDeviceP2p:
      if (runtime == nullptr) return Status::ParamInvalid("graph '{}': a device allocator needs a runtime", graph_name);
      return std::unique_ptr<Allocator>(std::make_unique<CachingMemAllocator>(
          runtime, device, placement, graph_name + "." + std::string(TensorPlacementName(placement))));
    case TensorPlacement::kOnHost:
    case TensorPlacement::kFollowing:
      return std::unique_ptr<Allocator>(std::make_unique<HostMemAllocator>());
  }
  return Status::ParamInvalid("graph '{}': unknown placement {}", graph_name, static_cast<int>(placement));
}

namespace {
class ExternalAllocator final : public Allocator {
 public:
  explicit ExternalAllocator(const AllocatorDesc& desc) : desc_(desc) {}
  StatusOr<MemBlock> Malloc(std::uint64_t size) override {
    if (size == 0) return MemBlock{};
    const std::uint64_t addr = desc_.alloc(desc_.user, size);
    if (addr == 0) return Status::MemoryAllocation("external allocator: {} bytes not available", size);
    return MemBlock{addr, size};
  }
  void Free(MemBlock block) override {
    if (block) desc_.free(desc_.user, block.addr);
  }
  TensorPlacement placement() const override { return desc_.placement; }

 private:
  AllocatorDesc desc_;
};
}  // namespace

StatusOr<std::unique_ptr<Allocator>> CreateExternalAllocator(const AllocatorDesc& desc) {
  if (desc.alloc == nullptr || desc.free == nullptr)
    return Status::ParamInvalid("CreateExternalAllocator: the allocator needs both an alloc and a free function");
  return std::unique_ptr<Allocator>(std::make_unique<ExternalAllocator>(desc));
}

// --- Streams, events, notifies

BuiltinStreamAllocator::~BuiltinStreamAllocator() {
  for (const npu_sim::Stream& s : streams_) (void)runtime_->DestroyStream(s);
}

StatusOr<npu_sim::Stream> BuiltinStreamAllocator::Stream(int index) {
  if (index < 0) return Status::ParamInvalid("stream allocator: index {} is negative", index);
  std::lock_guard<std::mutex> lock(mu_);
  while (static_cast<int>(streams_.size()) <= index) {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Stream s, runtime_->CreateStream(device_));
    streams_.push_back(s);
  }
  return streams_[index];
}

BuiltinEventAllocator::~BuiltinEventAllocator() {
  for (const npu_sim::Event& e : events_) (void)runtime_->DestroyEvent(e);
  for (const npu_sim::Event& e : notifies_) (void)runtime_->DestroyEvent(e);
}

StatusOr<npu_sim::Event> BuiltinEventAllocator::Take(std::vector<npu_sim::Event>& pool, int index) {
  if (index < 0) return Status::ParamInvalid("event allocator: index {} is negative", index);
  std::lock_guard<std::mutex> lock(mu_);
  while (static_cast<int>(pool.size()) <= index) {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Event e, runtime_->CreateEvent(device_));
    pool.push_back(e);
  }
  return pool[index];
}

}  // namespace npuflow::v2
