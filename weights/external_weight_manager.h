// ExternalWeightManager (seed 000, graph_external_weight_manager): per session, the device copies
// of weight file regions, so that a region (file, offset) is copied to a device once however many
// models or execution streams use it; another device gets its own copy.
//
// A DeviceWeightFile is one device allocation holding the span [begin, end) of a weight file: the
// whole used span of a combined file (every FileConstant of a model in one file), or one region.
// Regions are loaded into it by the WeightLoaderActor; each has a latch event that is recorded
// when its bytes have landed, and that the first task reading it on each stream waits on. Models
// hold their DeviceWeightFiles (shared_ptr); the manager only remembers them (weak_ptr), so the
// memory goes with the last model that uses it.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <boost/fiber/condition_variable.hpp>

#include "base/aes_gcm.h"
#include "base/status.h"
#include "npu_sim/runtime.h"
#include "weights/weight_loader.h"

namespace npuflow::weights {

// The outcome of one region's load, shared by every model that uses the region. Set from any
// thread (the loader's, a worker); waited on from a host thread or a Boost.Fiber fiber.
class RegionLoadState {
 public:
  void Set(StatusOr<WeightLoadReport> result);
  // Until the load has ended: blocks a host thread; inside a fiber (or the main context of a
  // fiber thread, actors/fibers.h), suspends only that context (the thread's fibers run meanwhile).
  StatusOr<WeightLoadReport> Wait() const;
  // The outcome if the load has ended.
  std::optional<Status> Peek() const;

 private:
  // Invariant: ready_ goes true once, after result_ is written under mu_, and before either
  // condition variable is notified; result_ is never written again.
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable boost::fibers::condition_variable_any fiber_cv_;  // a fiber's sleep, over mu_
  std::atomic<bool> ready_{false};
  mutable std::atomic<bool> fiber_waiter_{false};  // a fiber (or fiber-thread main context) waits or waited
  std::optional<StatusOr<WeightLoadReport>> result_;
};

class DeviceWeightFile {
 public:
  ~DeviceWeightFile();
  DeviceWeightFile(const DeviceWeightFile&) = delete;
  DeviceWeightFile& operator=(const DeviceWeightFile&) = delete;

  const std::string& path() const { return path_; }
  int device() const { return device_; }
  std::uint64_t begin() const { return begin_; }
  std::uint64_t end() const { return end_; }
  // The device address of the byte at `file_offset`: base + (file_offset - begin), or, in a packed
  // copy, the slot of the region starting there.
  npu_sim::DevicePtr AddressOf(std::uint64_t file_offset) const;
  bool packed() const { return packed_; }

 private:
  friend class ExternalWeightManager;
  DeviceWeightFile() = default;
  struct Region {
    std::uint64_t length = 0;
    npu_sim::Event ready;
    std::shared_ptr<RegionLoadState> state;
  };
  npu_sim::Runtime* rt_ = nullptr;
  int device_ = 0;
  std::string path_;
  std::uint64_t begin_ = 0, end_ = 0;
  npu_sim::DevicePtr base_;
  std::map<std::uint64_t, Region> regions_;  // by file offset; guarded by the manager's lock
  bool packed_ = false;
  // Packed copies only: region file offset -> (device offset, slot length). Fixed at creation.
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> slots_;
  // Replaced regions (a failed load loaded again, a longer region at the same offset): their
  // latches and loads, kept until the copy goes, so nothing writes or waits into freed memory.
  std::vector<Region> retired_;
};

// A region a model needs.
struct RegionNeed {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::string sha256;  // for verification; may be empty
  std::string name;    // the node(s), for messages
  std::uint64_t order = 0;  // load order: lower first (the model's first use)
};

struct PlacedRegion {
  npu_sim::DevicePtr address;
  npu_sim::Event ready;  // latch
  std::shared_ptr<RegionLoadState> state;
  bool copied_here = false;  // this Place started its copy (false: shared with an earlier user)
};

struct FilePlacement {
  std::shared_ptr<DeviceWeightFile> file;
  std::vector<PlacedRegion> regions;  // in the order of the needs
};

struct WeightLoadFlags {
  bool verify = false;
  std::optional<AesKey> key;
};

struct ExternalWeightStats {
  std::uint64_t files_allocated = 0;  // device allocations made
  std::uint64_t regions_copied = 0;   // region copies started
  std::uint64_t regions_shared = 0;   // region uses served by an earlier copy
  std::uint64_t bytes_copied = 0;
};

class ExternalWeightManager {
 public:
  ExternalWeightManager(npu_sim::Runtime* rt, WeightLoader* loader) : rt_(rt), loader_(loader) {}

  // Places `needs`, regions of the file `path`, on `device` inside one device copy of the span
  // [begin, end) (which must contain every need): an existing copy that covers the span is reused,
  // else one is allocated. Regions that copy does not hold yet are loaded with one loader request
  // (asynchronously: their latches and states tell when); those it holds are shared.
  // `packed`: the copy holds only the needs, each in its own slot aligned to kPackedAlignment
  // (regions at unaligned file offsets, as in a ggml file, then still start aligned on the device);
  // it is reused by a later Place whose needs all have slots in it.
  StatusOr<FilePlacement> Place(int device, const std::string& path, std::uint64_t begin, std::uint64_t end,
                                const std::vector<RegionNeed>& needs, const WeightLoadFlags& flags,
                                bool packed = false);
  static constexpr std::uint64_t kPackedAlignment = 64;

  // GE's CheckAndSetWeightLoaded("<path>:<offset>", device): false the first time, true after.
  bool CheckAndSetWeightLoaded(const std::string& key, int device);

  ExternalWeightStats stats() const;

 private:
  // Place's stages, under mu_.
  // A copy among `copies` that covers [begin, end) and has a place for every need (dead ones are
  // dropped from the list on the way), or null.
  static std::shared_ptr<DeviceWeightFile> ReusableCopy(std::vector<std::weak_ptr<DeviceWeightFile>>& copies,
                                                        std::uint64_t begin, std::uint64_t end,
                                                        const std::vector<RegionNeed>& needs, bool packed);
  StatusOr<std::shared_ptr<DeviceWeightFile>> NewCopy(int device, const std::string& path, std::uint64_t begin,
                                                      std::uint64_t end, const std::vector<RegionNeed>& needs,
                                                      bool packed);
  // A latch per need not `shared`; on an error none is left behind.
  StatusOr<std::vector<npu_sim::Event>> NewLatches(int device, const std::string& path,
                                                   const std::vector<RegionNeed>& needs,
                                                   const std::vector<bool>& shared);
  // Fills placement.regions: shared needs take the copy's region, the others get theirs and are
  // loaded with one loader request.
  void StartLoads(int device, const std::string& path, const std::string& key_path,
                  const std::vector<RegionNeed>& needs, const WeightLoadFlags& flags, const std::vector<bool>& shared,
                  const std::vector<npu_sim::Event>& latches, FilePlacement& placement);

  npu_sim::Runtime* rt_;
  WeightLoader* loader_;
  mutable std::mutex mu_;
  // (device, canonical path, how it is loaded: verified or not, under which key) -> the device
  // copies of spans of that file. Copies loaded with other checks are never shared.
  std::map<std::tuple<int, std::string, std::string>, std::vector<std::weak_ptr<DeviceWeightFile>>> files_;
  std::set<std::pair<std::string, int>> loaded_keys_;
  ExternalWeightStats stats_;
};

}  // namespace npuflow::weights
