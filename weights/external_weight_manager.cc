#include "weights/external_weight_manager.h"

#include <filesystem>

#include <fmt/format.h>

#include "actors/fibers.h"
#include "actors/future.h"
#include "base/sha256.h"

namespace npuflow::weights {

void RegionLoadState::Set(StatusOr<WeightLoadReport> result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (result_) return;
    result_ = std::move(result);
    ready_.store(true, std::memory_order_seq_cst);
  }
  cv_.notify_all();
  // The fiber condition variable only when a fiber may wait: it sets up Boost.Fiber's scheduler on
  // the calling thread (a oneTBB worker, here). A fiber waiter marks itself before it checks
  // result_ under mu_, so either Set sees the mark here or the waiter sees the result.
  if (!fiber_waiter_.load(std::memory_order_seq_cst)) return;
  fiber_cv_.notify_all();
}

StatusOr<WeightLoadReport> RegionLoadState::Wait() const {
  const bool fiber = !ready_.load(std::memory_order_acquire) && actors::detail::WaitSuspendsFiber();
  if (fiber) fiber_waiter_.store(true, std::memory_order_seq_cst);
  std::unique_lock<std::mutex> lock(mu_);
  // A fiber sleeps on the fiber condition variable over the same plain mutex (held only for the
  // check), so the loader's thread never enters a Boost.Fiber mutex.
  if (fiber) {
    fiber_cv_.wait(lock, [&] { return result_.has_value(); });
  } else {
    cv_.wait(lock, [&] { return result_.has_value(); });
  }
  return *result_;
}

std::optional<Status> RegionLoadState::Peek() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!result_) return std::nullopt;
  return result_->status();
}

DeviceWeightFile::~DeviceWeightFile() {
  if (rt_ == nullptr) return;
  // A load still in flight writes into this memory: wait for it before freeing (the loader always
  // ends, with or without an error).
  for (auto& [offset, region] : regions_) retired_.push_back(std::move(region));
  for (Region& region : retired_) {
    if (region.state) (void)region.state->Wait();
    (void)rt_->DestroyEvent(region.ready);
  }
  if (base_) (void)rt_->Free(device_, base_);
}

npu_sim::DevicePtr DeviceWeightFile::AddressOf(std::uint64_t file_offset) const {
  if (!packed_) return base_ + (file_offset - begin_);
  auto it = slots_.upper_bound(file_offset);
  if (it == slots_.begin()) return base_;  // not a placed region: never asked for
  --it;
  return base_ + (it->second.first + (file_offset - it->first));
}

StatusOr<FilePlacement> ExternalWeightManager::Place(int device, const std::string& path, std::uint64_t begin,
                                                     std::uint64_t end, const std::vector<RegionNeed>& needs,
                                                     const WeightLoadFlags& flags, bool packed) {
  for (const RegionNeed& n : needs)
    if (n.offset < begin || n.offset + n.length > end)
      return Status::Internal("weight file '{}': region [{}, {}) of {} is outside the span [{}, {})", path, n.offset,
                              n.offset + n.length, n.name, begin, end);
  std::error_code ec;
  std::string key_path = std::filesystem::weakly_canonical(path, ec).string();
  if (ec || key_path.empty()) key_path = path;
  std::string checks = flags.verify ? "verified" : "";
  if (flags.key) NPUFLOW_RETURN_IF_ERROR(CryptoAvailable().WithContext(fmt::format("weight file '{}'", path)));
  if (flags.key) checks += ":key " + Sha256Hex(flags.key->bytes.data(), flags.key->bytes.size());

  std::lock_guard<std::mutex> lock(mu_);
  FilePlacement placement;
  auto& copies = files_[{device, key_path, checks}];
  placement.file = ReusableCopy(copies, begin, end, needs, packed);
  if (!placement.file) {
    NPUFLOW_ASSIGN_OR_RETURN(placement.file, NewCopy(device, path, begin, end, needs, packed));
    copies.push_back(placement.file);
    stats_.files_allocated += 1;
  }
  DeviceWeightFile& file = *placement.file;

  // Which needs this copy already holds (or is loading), and which must be loaded. Every new latch
  // is created before anything changes, so an error leaves the copy as it was.
  std::vector<bool> shared(needs.size(), false);
  for (std::size_t i = 0; i < needs.size(); ++i) {
    auto found = file.regions_.find(needs[i].offset);
    if (found == file.regions_.end() || found->second.length < needs[i].length) continue;
    const std::optional<Status> outcome = found->second.state->Peek();
    shared[i] = !outcome || outcome->ok();  // a region whose load failed is loaded again
  }
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<npu_sim::Event> latches, NewLatches(device, path, needs, shared));
  StartLoads(device, path, key_path, needs, flags, shared, latches, placement);
  return placement;
}

std::shared_ptr<DeviceWeightFile> ExternalWeightManager::ReusableCopy(
    std::vector<std::weak_ptr<DeviceWeightFile>>& copies, std::uint64_t begin, std::uint64_t end,
    const std::vector<RegionNeed>& needs, bool packed) {
  std::shared_ptr<DeviceWeightFile> reused;
  for (auto it = copies.begin(); it != copies.end();) {
    std::shared_ptr<DeviceWeightFile> f = it->lock();
    if (!f) {
      it = copies.erase(it);
      continue;
    }
    if (!reused && f->packed() == packed) {
      bool fits = f->begin_ <= begin && end <= f->end_;
      for (const RegionNeed& n : needs) {
        if (packed) {
          auto slot = f->slots_.find(n.offset);
          fits = fits && slot != f->slots_.end() && n.length <= slot->second.second;
        } else {
          // A linear copy that starts elsewhere must still put every region at an aligned address.
          fits = fits && (n.offset - f->begin_) % kPackedAlignment == (n.offset - begin) % kPackedAlignment;
        }
      }
      if (fits) reused = std::move(f);
    }
    ++it;
  }
  return reused;
}

StatusOr<std::shared_ptr<DeviceWeightFile>> ExternalWeightManager::NewCopy(int device, const std::string& path,
                                                                          std::uint64_t begin, std::uint64_t end,
                                                                          const std::vector<RegionNeed>& needs,
                                                                          bool packed) {
  std::shared_ptr<DeviceWeightFile> f(new DeviceWeightFile());
  f->rt_ = rt_;
  f->device_ = device;
  f->path_ = path;
  f->begin_ = begin;
  f->end_ = end;
  std::uint64_t bytes = end - begin;
  f->packed_ = packed;
  if (packed) {
    bytes = 0;
    for (const RegionNeed& n : needs) {
      auto [slot, added] = f->slots_.try_emplace(n.offset, 0, n.length);
      if (!added) slot->second.second = std::max(slot->second.second, n.length);
    }
    for (auto& [offset, slot] : f->slots_) {
      slot.first = bytes;
      bytes += (slot.second + kPackedAlignment - 1) / kPackedAlignment * kPackedAlignment;
    }
  }
  NPUFLOW_ASSIGN_OR_RETURN(
      f->base_, rt_->Malloc(device, std::max<std::uint64_t>(bytes, 1), npu_sim::Placement::kHbm,
                            fmt::format("weights:{}", std::filesystem::path(path).filename().string())));
  return f;
}

StatusOr<std::vector<npu_sim::Event>> ExternalWeightManager::NewLatches(int device, const std::string& path,
                                                                       const std::vector<RegionNeed>& needs,
                                                                       const std::vector<bool>& shared) {
  std::vector<npu_sim::Event> latches(needs.size());
  for (std::size_t i = 0; i < needs.size(); ++i) {
    if (shared[i]) continue;
    auto event = rt_->CreateEvent(device, npu_sim::EventKind::kLatch);
    if (!event.ok()) {
      for (std::size_t k = 0; k < i; ++k)
        if (!shared[k]) (void)rt_->DestroyEvent(latches[k]);
      return event.status().WithContext(fmt::format("weight file '{}': the ready event of {}", path, needs[i].name));
    }
    latches[i] = *event;
  }
  return latches;
}

void ExternalWeightManager::StartLoads(int device, const std::string& path, const std::string& key_path,
                                       const std::vector<RegionNeed>& needs, const WeightLoadFlags& flags,
                                       const std::vector<bool>& shared, const std::vector<npu_sim::Event>& latches,
                                       FilePlacement& placement) {
  DeviceWeightFile& file = *placement.file;
  WeightLoadRequest request;
  request.device = device;
  request.path = path;
  request.verify = flags.verify;
  request.key = flags.key;
  request.at = rt_->HostClock();  // the loading client's clock: no chunk goes earlier
  std::vector<std::shared_ptr<RegionLoadState>> started;
  for (std::size_t i = 0; i < needs.size(); ++i) {
    const RegionNeed& n = needs[i];
    PlacedRegion placed;
    placed.address = file.AddressOf(n.offset);
    if (shared[i]) {
      const DeviceWeightFile::Region& r = file.regions_.at(n.offset);
      placed.ready = r.ready;
      placed.state = r.state;
      stats_.regions_shared += 1;
      placement.regions.push_back(std::move(placed));
      continue;
    }
    DeviceWeightFile::Region region;
    region.ready = latches[i];
    region.length = n.length;
    region.state = std::make_shared<RegionLoadState>();
    // A replaced region keeps its latch and load until the copy goes: a model may still wait on
    // it, and its load may still be writing.
    if (auto old = file.regions_.find(n.offset); old != file.regions_.end()) {
      file.retired_.push_back(std::move(old->second));
      old->second = region;
    } else {
      file.regions_.emplace(n.offset, region);
    }
    request.regions.push_back(
        WeightRegion{n.offset, n.length, placed.address, region.ready, n.sha256, n.name, n.order});
    placed.ready = region.ready;
    placed.state = region.state;
    placed.copied_here = true;
    started.push_back(region.state);
    stats_.regions_copied += 1;
    stats_.bytes_copied += n.length;
    loaded_keys_.emplace(fmt::format("{}:{}", key_path, n.offset), device);
    placement.regions.push_back(std::move(placed));
  }
  if (!started.empty()) {
    (void)loader_->Load(std::move(request)).Then([started = std::move(started)](StatusOr<WeightLoadReport> r) {
      for (const auto& s : started) s->Set(r);
      return r.status();
    });
  }
}

bool ExternalWeightManager::CheckAndSetWeightLoaded(const std::string& key, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  return !loaded_keys_.emplace(key, device).second;
}

ExternalWeightStats ExternalWeightManager::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace npuflow::weights
