// External weights: PreProcessFileConstants (each FileConstant found, placed on user memory or
// through the session's ExternalWeightManager), the load's status, and the elision of the weight
// gates once every weight has landed.
#include "scheduler/davinci_model.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "base/logging.h"

namespace npuflow::scheduler {

namespace {

using graph::MemRef;
using graph::Segment;

}  // namespace

// ---- PreProcessFileConstants (external weights) --------------------------------------------------
Status LoadConfig::SetExternalWeightAddress(std::string name, npu_sim::DevicePtr ptr, std::uint64_t size) {
  if (name.empty()) return Status::ParamInvalid("SetExternalWeightAddress: the file name is empty");
  if (!ptr) return Status::ParamInvalid("SetExternalWeightAddress('{}'): the device pointer is null", name);
  if (size == 0 || size % 32 != 0)
    return Status::ParamInvalid("SetExternalWeightAddress('{}'): size {} must be a non-zero multiple of 32", name, size);
  for (FileConstantMem& m : external_weight_memory) {
    if (m.file_name == name) {
      m.ptr = ptr;
      m.size = size;
      return Status::Ok();
    }
  }
  external_weight_memory.push_back(FileConstantMem{std::move(name), ptr, size});
  return Status::Ok();
}

namespace {

// A FileConstant's file at load: the weight path given at load, else <model dir>/weight/, else
// its location (relative to the model's directory when it is there).
std::string WeightFileAtLoad(const std::string& location, const LoadConfig& config) {
  namespace fs = std::filesystem;
  const fs::path loc(location);
  const fs::path name = loc.filename();
  if (!config.weight_path.empty()) return (fs::path(config.weight_path) / name).string();
  std::error_code ec;
  if (!config.model_dir.empty()) {
    const fs::path next_to_model = fs::path(config.model_dir) / "weight" / name;
    if (fs::exists(next_to_model, ec)) return next_to_model.string();
    if (loc.is_relative() && fs::exists(fs::path(config.model_dir) / loc, ec))
      return (fs::path(config.model_dir) / loc).string();
  }
  return location;
}

}  // namespace

// One FileConstant as the model uses it: where its bytes are and who reads them first.
struct DavinciModel::FileConstantUse {
  const graph::Node* node = nullptr;
  std::string path, file_name, sha256;
  std::uint64_t logical = 0, bytes = 0, offset = 0;
  std::uint64_t order = 0;  // its first reader's place in the topological order
};

Status DavinciModel::PreProcessFileConstants() {
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<FileConstantUse> fcs, FindFileConstants());
  if (fcs.empty()) return Status::Ok();
  FileConstantsByFile by_file;  // those not on user memory, per file
  NPUFLOW_RETURN_IF_ERROR(BindUserWeightMemory(fcs, by_file));
  if (!by_file.empty()) {
    if (!config_.weight_manager)
      return Status::ParamInvalid("the model has external weights but no ExternalWeightManager was given to load them");
    NPUFLOW_RETURN_IF_ERROR(CheckWeightFiles(by_file));
    // Every FileConstant in one file: one device copy of the span they use (HandleCombinedWeights);
    // otherwise one per region (HandleIndividualWeights).
    const bool combined = by_file.size() == 1;
    for (const auto& [path, users] : by_file) NPUFLOW_RETURN_IF_ERROR(PlaceWeightFile(path, users, combined));
  }
  // A zero-byte FileConstant reads nothing and shares its logical offset with the next one: it
  // takes no slot, so lookups find the FileConstant that holds bytes.
  file_constants_.erase(std::remove_if(file_constants_.begin(), file_constants_.end(),
                                       [](const FileConstantSlot& s) { return s.bytes == 0; }),
                        file_constants_.end());
  std::sort(file_constants_.begin(), file_constants_.end(),
            [](const FileConstantSlot& a, const FileConstantSlot& b) { return a.logical < b.logical; });
  // Verified or encrypted weights are checked before the model may run; otherwise the load goes
  // on while the model is set up, and errors found at once still fail it here.
  if (config_.verify_weights || config_.weight_key) return WaitForWeights();
  return WeightsStatus();
}

StatusOr<std::vector<DavinciModel::FileConstantUse>> DavinciModel::FindFileConstants() const {
  const CompiledModel& m = *model_;
  // Weights load in the order the model first reads them, whatever their order in the file (a
  // ggml file converted from a checkpoint lists the embeddings last), so the first layers land first.
  std::unordered_map<const graph::Node*, std::uint64_t> first_read;  // a node -> its first reader's index
  if (auto order = m.graph->TopologicalOrder(); order.ok())
    for (std::size_t i = 0; i < order->size(); ++i)
      for (const graph::Endpoint& in : (*order)[i]->inputs()) first_read.try_emplace(in.node, i);
  std::vector<FileConstantUse> fcs;
  for (const graph::TensorPlacement& t : m.memory.tensors) {
    if (t.ref.segment != Segment::kFileConstant) continue;
    NPUFLOW_ASSIGN_OR_RETURN(FileConstantUse fc, ReadFileConstant(t));
    const auto first = first_read.find(fc.node);
    fc.order = first == first_read.end() ? std::numeric_limits<std::uint64_t>::max() : first->second;
    fcs.push_back(std::move(fc));
  }
  return fcs;
}

StatusOr<DavinciModel::FileConstantUse> DavinciModel::ReadFileConstant(const graph::TensorPlacement& t) const {
  FileConstantUse fc;
  fc.node = model_->graph->FindNode(t.node);
  if (fc.node == nullptr || fc.node->type() != "FileConstant")
    return Status::DataCorrupted("the file_constant segment places '{}', which is no FileConstant node", t.node);
  const graph::OpDesc& op = fc.node->op();
  NPUFLOW_ASSIGN_OR_RETURN(std::string location, op.AttrOr<std::string>("location", ""));
  if (location.empty()) {
    NPUFLOW_ASSIGN_OR_RETURN(location, op.AttrOr<std::string>("file_path", ""));
  }
  if (location.empty())
    return Status::ParamInvalid(
        "node '{}' (FileConstant): no location or file_path (a file_id is resolved at compile time, through "
        "ge.exec.value_bins)",
        t.node);
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t offset, op.AttrOr<std::int64_t>("offset", 0));
  NPUFLOW_ASSIGN_OR_RETURN(fc.sha256, op.AttrOr<std::string>("_sha256", ""));
  if (offset < 0) return Status::ParamInvalid("node '{}' (FileConstant): offset {} is negative", t.node, offset);
  const auto bytes = fc.node->outputs().empty() ? std::nullopt : fc.node->outputs()[0].bytes();
  if (!bytes) return Status::ParamInvalid("node '{}' (FileConstant): no static output size", t.node);
  fc.bytes = *bytes;
  fc.offset = static_cast<std::uint64_t>(offset);
  fc.logical = t.ref.offset;
  fc.path = WeightFileAtLoad(location, config_);
  fc.file_name = std::filesystem::path(fc.path).filename().string();
  return fc;
}

Status DavinciModel::BindUserWeightMemory(const std::vector<FileConstantUse>& fcs, FileConstantsByFile& rest) {
  // User device memory first: matched by file name, used in place.
  auto user_memory = [&](const std::string& file_name) -> const FileConstantMem* {
    for (const FileConstantMem& u : config_.external_weight_memory)
      if (u.file_name == file_name) return &u;
    return nullptr;
  };
  for (const FileConstantUse& fc : fcs) {
    const FileConstantMem* u = user_memory(fc.file_name);
    if (u == nullptr) {
      rest[fc.path].push_back(&fc);
      continue;
    }
    if (u->size < fc.offset || u->size - fc.offset < fc.bytes)
      return Status::ParamInvalid(
          "node '{}' (FileConstant {}): user device memory for file '{}' is too small: required {} bytes (offset {} + "
          "{} bytes), provided {}",
          fc.node->name(), fc.node->outputs()[0].ToString(), fc.file_name, fc.offset + fc.bytes, fc.offset, fc.bytes,
          u->size);
    file_constants_.push_back(FileConstantSlot{fc.logical, fc.bytes, u->ptr + fc.offset, std::nullopt, fc.node->name()});
    external_weight_info_.push_back(
        ExternalWeightInfo{fc.node->name(), fc.path, fc.offset, fc.bytes, u->ptr + fc.offset, true, false});
  }
  return Status::Ok();
}

Status DavinciModel::CheckWeightFiles(const FileConstantsByFile& by_file) const {
  // Missing and short files are errors naming the node, before anything is allocated.
  for (const auto& [path, users] : by_file) {
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec)
      return Status::NotFound("node '{}' (FileConstant): weight file '{}' cannot be read: {}", users[0]->node->name(),
                              path, ec.message());
    if (config_.weight_key) continue;  // the envelope's size is checked by the loader
    for (const FileConstantUse* fc : users)
      if (size < fc->offset + fc->bytes)
        return Status::ParamInvalid(
            "node '{}' (FileConstant): weight file '{}' has {} bytes, reading offset {} + length {} needs {}",
            fc->node->name(), path, size, fc->offset, fc->bytes, fc->offset + fc->bytes);
  }
  return Status::Ok();
}

namespace {

// The regions of one file the model reads, by offset: nodes sharing a region share the copy.
template <typename Use>
std::map<std::uint64_t, weights::RegionNeed> RegionsOf(const std::vector<const Use*>& users) {
  std::map<std::uint64_t, weights::RegionNeed> regions;
  for (const Use* fc : users) {
    weights::RegionNeed& r = regions[fc->offset];
    r.offset = fc->offset;
    if (fc->bytes > r.length) r.length = fc->bytes;
    if (r.sha256.empty()) r.sha256 = fc->sha256;
    r.order = r.name.empty() ? fc->order : std::min(r.order, fc->order);
    r.name += (r.name.empty() ? "" : ", ") + fc->node->name();
  }
  return regions;
}

// What one device copy holds: its regions and the file span [first, second) it covers.
using Span = std::pair<std::vector<weights::RegionNeed>, std::pair<std::uint64_t, std::uint64_t>>;

// One span over all regions (combined), or one per region.
std::vector<Span> SpansOf(const std::map<std::uint64_t, weights::RegionNeed>& regions, bool combined) {
  std::vector<Span> spans;
  if (!combined) {
    for (const auto& [off, r] : regions) spans.push_back({{r}, {r.offset, r.offset + r.length}});
    return spans;
  }
  std::vector<weights::RegionNeed> all;
  std::uint64_t lo = std::numeric_limits<std::uint64_t>::max(), hi = 0;
  for (const auto& [off, r] : regions) {
    lo = std::min(lo, r.offset);
    hi = std::max(hi, r.offset + r.length);
    all.push_back(r);
  }
  spans.push_back({std::move(all), {lo, hi}});
  return spans;
}

}  // namespace

Status DavinciModel::PlaceWeightFile(const std::string& path, const std::vector<const FileConstantUse*>& users,
                                     bool combined) {
  const weights::WeightLoadFlags flags{config_.verify_weights, config_.weight_key};
  for (auto& [needs, span] : SpansOf(RegionsOf(users), combined)) {
    // Regions at file offsets that are not aligned (a ggml file's tensors follow their
    // variable-length headers) get aligned slots of their own in the device copy.
    bool packed = false;
    for (const weights::RegionNeed& r : needs)
      packed = packed || (r.offset - span.first) % weights::ExternalWeightManager::kPackedAlignment != 0;
    NPUFLOW_ASSIGN_OR_RETURN(weights::FilePlacement placed, config_.weight_manager->Place(config_.device, path, span.first,
                                                                                       span.second, needs, flags, packed));
    weight_files_.push_back(placed.file);
    for (std::size_t i = 0; i < needs.size(); ++i) {
      const weights::PlacedRegion& pr = placed.regions[i];
      weight_loads_.push_back(pr.state);
      for (const FileConstantUse* fc : users) {
        if (fc->offset != needs[i].offset) continue;
        file_constants_.push_back(FileConstantSlot{fc->logical, fc->bytes, pr.address, pr.ready, fc->node->name()});
        external_weight_info_.push_back(
            ExternalWeightInfo{fc->node->name(), path, fc->offset, fc->bytes, pr.address, false, pr.copied_here});
      }
    }
  }
  return Status::Ok();
}

int DavinciModel::FileConstantSlotOf(std::uint64_t offset) const {
  auto it = std::upper_bound(file_constants_.begin(), file_constants_.end(), offset,
                             [](std::uint64_t off, const FileConstantSlot& s) { return off < s.logical; });
  if (it == file_constants_.begin()) return -1;
  --it;
  if (offset > it->logical + it->bytes) return -1;
  return static_cast<int>(it - file_constants_.begin());
}

Status DavinciModel::WeightsStatus() {
  if (weights_landed_.load(std::memory_order_acquire)) return Status::Ok();
  bool all = true;
  for (const auto& state : weight_loads_) {
    std::optional<Status> s = state->Peek();
    if (!s) {
      all = false;
      continue;
    }
    if (!s->ok()) return s->WithContext(fmt::format("model {}: external weights", id_));
  }
  if (all) weights_landed_.store(true, std::memory_order_release);
  return Status::Ok();
}

Status DavinciModel::WaitForWeights() const {
  for (const auto& state : weight_loads_) {
    StatusOr<weights::WeightLoadReport> r = state->Wait();
    if (!r.ok()) return r.status().WithContext(fmt::format("model {}: external weights", id_));
  }
  return Status::Ok();
}

void DavinciModel::ElideGates(Instance& inst) {
  // Every gate passed in this run, which started after every weight had landed: the stream's
  // clock is past each latch, and the latches stay recorded while the model is loaded. The gates
  // would only cost a round trip to the event table per weight region in every later run.
  if (inst.gates_elided.load(std::memory_order_acquire) || inst.gates_elided.exchange(true)) return;
  for (std::size_t s = 0; s < inst.streams.size() && s < inst.gates.size(); ++s) {
    if (inst.gates[s].empty()) continue;
    if (Status st = rt_->ElideWaits(inst.model, inst.streams[s], inst.gates[s]); !st.ok())
      NPUFLOW_LOG_WARN(kScheduler, "model {}: its weight gates on stream {} stay: {}", id_, inst.streams[s].id,
                       st.ToString());
  }
}

}  // namespace npuflow::scheduler
