// Trace: Chrome trace-event JSON (opens in Perfetto or chrome://tracing) with one track per
// stream, AICore, AICPU unit, DMA channel and host thread, on virtual time.
//
// Each track has one writer (the actor that owns it, or one host thread), so recording is an
// append to that track's buffer. Wall-clock times are attached as arguments, except in
// deterministic mode, where the same program must give a byte-identical file.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "npu_sim/chip_spec.h"

namespace npuflow::npu_sim {

// One numeric argument of an event. The key is a string literal (it is not copied or escaped).
struct TraceArg {
  const char* key = nullptr;
  std::uint64_t value = 0;
};

// Recording an event copies plain data; the JSON text is made once, by TraceRecorder::ToJson.
struct TraceEvent {
  static constexpr std::size_t kMaxArgs = 5;
  std::string name;
  VTime start = 0;
  VTime duration = 0;
  std::int64_t wall_ns = -1;  // wall time at the event's end, -1 if not recorded
  std::array<TraceArg, kMaxArgs> args{};  // the first entries with a key are the event's args
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
  // The tracks in output order, each with its output tid.
  std::vector<std::pair<TraceTrack*, int>> Ordered() const;
  std::vector<std::unique_ptr<TraceTrack>> tracks_;
};

// Appends `text` to `out` as a JSON string (quoted, escaped): the one place trace text is escaped.
void AppendJsonString(std::string& out, std::string_view text);

// Wall-clock nanoseconds since an arbitrary process-wide start.
std::int64_t WallNs();

}  // namespace npuflow::npu_sim
