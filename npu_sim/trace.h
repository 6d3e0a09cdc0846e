// Trace: Chrome trace-event JSON (opens in Perfetto or chrome://tracing) with one track per
// stream, AICore, AICPU unit, DMA channel and host thread, on virtual time.
//
// Each track has one writer (the actor that owns it, or one host thread), so recording is an
// append to that track's buffer. Wall-clock times are attached as arguments, except in
// deterministic mode, where the same program must give a byte-identical file.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "npu_sim/chip_spec.h"

namespace npuflow::npu_sim {

struct TraceEvent {
  std::string name;
  VTime start = 0;
  VTime duration = 0;
  std::int64_t wall_ns = -1;  // wall time at the event's end, -1 if not recorded
  std::string args;           // a JSON object's members, e.g. "\"task\":3,\"block_dim\":8"
};

class TraceTrack {
 public:
  TraceTrack(int device, int tid, std::string name) : device_(device), tid_(tid), name_(std::move(name)) {}
  void Add(TraceEvent event) {
    std::lock_guard<std::mutex> lock(mu_);  // uncontended: one writer; Dump is the reader
    events_.push_back(std::move(event));
  }
  int device() const { return device_; }
  int tid() const { return tid_; }
  const std::string& name() const { return name_; }

 private:
  friend class TraceRecorder;
  int device_;
  int tid_;
  std::string name_;
  std::mutex mu_;
  std::vector<TraceEvent> events_;
};

class TraceRecorder {
 public:
  TraceRecorder(bool enabled, bool wall_times) : enabled_(enabled), wall_times_(wall_times) {}
  bool enabled() const { return enabled_; }
  bool wall_times() const { return wall_times_; }

  // A new track; tids are given in creation order within a device.
  TraceTrack* AddTrack(int device, std::string name);

  // The whole trace as Chrome trace-event JSON, tracks in creation order, events in recording
  // order within a track.
  std::string ToJson() const;
  Status WriteFile(const std::string& path) const;
  std::size_t event_count() const;

 private:
  const bool enabled_;
  const bool wall_times_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<TraceTrack>> tracks_;
};

// Wall-clock nanoseconds since an arbitrary process-wide start.
std::int64_t WallNs();

}  // namespace npuflow::npu_sim
