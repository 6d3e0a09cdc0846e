#include "npu_sim/trace.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>

#include <fmt/format.h>

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

void AppendJsonString(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<int>(c));
        else out += c;
    }
  }
  out += '"';
}

namespace {

// Microseconds with three decimals: exact for integer nanoseconds.
void AppendMicros(std::string& out, std::int64_t ns) {
  fmt::format_to(std::back_inserter(out), "{}.{:03}", ns / 1000, ns % 1000);
}

void AppendEvent(std::string& out, const TraceTrack& t, int tid, const TraceEvent& e) {
  out += "{\"name\":";
  AppendJsonString(out, e.name);
  fmt::format_to(std::back_inserter(out), ",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":", t.device(), tid);
  AppendMicros(out, e.start);
  out += ",\"dur\":";
  AppendMicros(out, e.duration);
  out += ",\"args\":{";
  bool first = true;
  for (const TraceArg& arg : e.args) {
    if (arg.key == nullptr) break;
    if (!first) out += ',';
    first = false;
    AppendJsonString(out, arg.key);
    fmt::format_to(std::back_inserter(out), ":{}", arg.value);
  }
  if (e.wall_ns >= 0) {
    out += first ? "\"wall_us\":" : ",\"wall_us\":";
    AppendMicros(out, e.wall_ns);
  }
  out += "}}";
}

// "stream 10" after "stream 2": the name's text, then its trailing number.
bool NaturalLess(const std::string& a, const std::string& b) {
  auto split = [](const std::string& n) {
    std::size_t i = n.size();
    while (i > 0 && n[i - 1] >= '0' && n[i - 1] <= '9') --i;
    const std::string_view digits = std::string_view(n).substr(i);
    return std::make_pair(n.substr(0, i), digits.empty() || digits.size() > 18 ? -1LL : std::stoll(std::string(digits)));
  };
  const auto ka = split(a), kb = split(b);
  return ka != kb ? ka < kb : a < b;
}

}  // namespace

// Tracks in creation order; without wall times (deterministic mode), ordered by device and name
// instead: a host client's track may be created before or after a device actor's, depending on
// real time, and the trace must not depend on that.
std::vector<std::pair<TraceTrack*, int>> TraceRecorder::Ordered() const {
  std::vector<TraceTrack*> order;
  for (const auto& t : tracks_) order.push_back(t.get());
  if (!wall_times_)
    std::stable_sort(order.begin(), order.end(), [](const TraceTrack* a, const TraceTrack* b) {
      if (a->device() != b->device()) return a->device() < b->device();
      return NaturalLess(a->name(), b->name());
    });
  std::vector<std::pair<TraceTrack*, int>> out;
  std::map<int, int> next;  // per device
  for (TraceTrack* t : order) out.emplace_back(t, wall_times_ ? t->tid() : next[t->device()]++);
  return out;
}

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
    fmt::format_to(std::back_inserter(out),
                   "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":", device);
    AppendJsonString(out, fmt::format("device {}", device));
    out += "}}";
  }
  const auto ordered = Ordered();
  for (const auto& [t, tid] : ordered) {
    sep();
    fmt::format_to(std::back_inserter(out), "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":",
                   t->device(), tid);
    AppendJsonString(out, t->name());
    out += "}}";
    sep();
    fmt::format_to(std::back_inserter(out),
                   "{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"sort_index\":{}}}}}",
                   t->device(), tid, tid);
  }
  for (const auto& [t, tid] : ordered) {
    std::lock_guard<std::mutex> track_lock(t->mu_);
    for (const TraceEvent& e : t->events_) {
      sep();
      AppendEvent(out, *t, tid, e);
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
