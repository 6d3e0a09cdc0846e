#include "weights/external_weight_manager.h"

#include <filesystem>

#include <fmt/format.h>

namespace npuflow::weights {

void RegionLoadState::Set(StatusOr<WeightLoadReport> result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (result_) return;
    result_ = std::move(result);
  }
  cv_.notify_all();
}

StatusOr<WeightLoadReport> RegionLoadState::Wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return result_.has_value(); });
  return *result_;
}

std::optional<Status> RegionLoadState::Peek() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!result_) return std::nullopt;
  return result_->status();
}

DeviceWeightFile::~DeviceWeightFile() {
  if (rt_ == nullptr) return;
  for (auto& [offset, region] : regions_) {
    // A load still in flight writes into this memory: wait for it before freeing (the loader
    // always ends, with or without an error).
    if (region.state) (void)region.state->Wait();
    (void)rt_->DestroyEvent(region.ready);
  }
  if (base_) (void)rt_->Free(device_, base_);
}

StatusOr<FilePlacement> ExternalWeightManager::Place(int device, const std::string& path, std::uint64_t begin,
                                                     std::uint64_t end, const std::vector<RegionNeed>& needs,
                                                     const WeightLoadFlags& flags) {
  for (const RegionNeed& n : needs)
    if (n.offset < begin || n.offset + n.length > end)
      return Status::Internal("weight file '{}': region [{}, {}) of {} is outside the span [{}, {})", path, n.offset,
                              n.offset + n.length, n.name, begin, end);
  std::error_code ec;
  std::string key_path = std::filesystem::weakly_canonical(path, ec).string();
  if (ec || key_path.empty()) key_path = path;

  std::lock_guard<std::mutex> lock(mu_);
  FilePlacement placement;
  auto& copies = files_[{device, key_path}];
  for (auto it = copies.begin(); it != copies.end();) {
    std::shared_ptr<DeviceWeightFile> f = it->lock();
    if (!f) {
      it = copies.erase(it);
      continue;
    }
    if (!placement.file && f->begin_ <= begin && end <= f->end_) placement.file = std::move(f);
    ++it;
  }
  if (!placement.file) {
    std::shared_ptr<DeviceWeightFile> f(new DeviceWeightFile());
    f->rt_ = rt_;
    f->device_ = device;
    f->path_ = path;
    f->begin_ = begin;
    f->end_ = end;
    NPUFLOW_ASSIGN_OR_RETURN(
        f->base_, rt_->Malloc(device, std::max<std::uint64_t>(end - begin, 1), npu_sim::Placement::kHbm,
                              fmt::format("weights:{}", std::filesystem::path(path).filename().string())));
    copies.push_back(f);
    placement.file = std::move(f);
    stats_.files_allocated += 1;
  }
  DeviceWeightFile& file = *placement.file;

  WeightLoadRequest request;
  request.device = device;
  request.path = path;
  request.verify = flags.verify;
  request.key = flags.key;
  std::vector<std::shared_ptr<RegionLoadState>> started;
  for (const RegionNeed& n : needs) {
    PlacedRegion placed;
    placed.address = file.AddressOf(n.offset);
    auto found = file.regions_.find(n.offset);
    // A region whose earlier load failed is loaded again.
    if (found != file.regions_.end() && found->second.length >= n.length) {
      auto outcome = found->second.state->Peek();
      if (!outcome || outcome->ok()) {
        placed.ready = found->second.ready;
        placed.state = found->second.state;
        stats_.regions_shared += 1;
        placement.regions.push_back(std::move(placed));
        continue;
      }
    }
    DeviceWeightFile::Region region;
    if (found != file.regions_.end()) {
      region.ready = found->second.ready;
    } else {
      NPUFLOW_ASSIGN_OR_RETURN(region.ready, rt_->CreateEvent(device, npu_sim::EventKind::kLatch));
    }
    region.length = n.length;
    region.state = std::make_shared<RegionLoadState>();
    if (found != file.regions_.end()) {
      (void)rt_->ResetEvent(region.ready);
      found->second = region;
    } else {
      file.regions_.emplace(n.offset, region);
    }
    request.regions.push_back(
        WeightRegion{n.offset, n.length, placed.address, region.ready, n.sha256, n.name});
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
  return placement;
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
