#include "npu_sim/trace.h"

#include <chrono>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace npuflow::npu_sim {

std::int64_t WallNs() {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
}

TraceTrack* TraceRecorder::AddTrack(int device, std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  int tid = 0;
  for (const auto& t : tracks_) tid += t->device() == device ? 1 : 0;
  tracks_.push_back(std::make_unique<TraceTrack>(device, tid, std::move(name)));
  return tracks_.back().get();
}

std::size_t TraceRecorder::event_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t n = 0;
  for (const auto& t : tracks_) {
    std::lock_guard<std::mutex> track_lock(t->mu_);
    n += t->events_.size();
  }
  return n;
}

namespace {
std::string Micros(VTime ns) { return fmt::format("{}.{:03}", ns / 1000, ns % 1000); }
}  // namespace

std::string TraceRecorder::ToJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  std::map<int, bool> devices;
  for (const auto& t : tracks_) devices[t->device()] = true;
  for (const auto& [device, unused] : devices) {
    sep();
    out += fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"tid":0,"args":{{"name":"device {}"}}}})", device,
                       device);
  }
  for (const auto& t : tracks_) {
    sep();
    out += fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":{}}}}})", t->device(),
                       t->tid(), nlohmann::json(t->name()).dump());
    sep();
    out += fmt::format(R"({{"name":"thread_sort_index","ph":"M","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
                       t->device(), t->tid(), t->tid());
  }
  for (const auto& t : tracks_) {
    std::lock_guard<std::mutex> track_lock(t->mu_);
    for (const TraceEvent& e : t->events_) {
      sep();
      std::string args = e.args;
      if (e.wall_ns >= 0) args += fmt::format("{}\"wall_us\":{}", args.empty() ? "" : ",", Micros(e.wall_ns));
      out += fmt::format(R"({{"name":{},"ph":"X","pid":{},"tid":{},"ts":{},"dur":{},"args":{{{}}}}})",
                         nlohmann::json(e.name).dump(), t->device(), t->tid(), Micros(e.start), Micros(e.duration),
                         args);
    }
  }
  out += "\n]}\n";
  return out;
}

Status TraceRecorder::WriteFile(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::ParamInvalid("trace: cannot open '{}' for writing", path);
  out << ToJson();
  if (!out) return Status::Failed("trace: writing '{}' failed", path);
  return Status::Ok();
}

}  // namespace npuflow::npu_sim
