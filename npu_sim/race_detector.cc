#include "npu_sim/race_detector.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "base/logging.h"

namespace npuflow::npu_sim {
namespace {

std::atomic<std::uint64_t> g_process_races{0};
std::atomic<std::uint64_t> g_process_checked{0};

int EnvDefault() {
  const char* v = std::getenv("NPUFLOW_RACE_DETECT");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0 ? 1 : 0;
}
std::atomic<int> g_default{EnvDefault()};
// NPUFLOW_RACE_DETECT=fatal: the first race ends the process (a test suite run under the
// detector stops at the first false report, with the report printed).
const bool g_fatal = [] {
  const char* v = std::getenv("NPUFLOW_RACE_DETECT");
  return v != nullptr && std::strcmp(v, "fatal") == 0;
}();

constexpr std::size_t kMaxStoredReports = 256;
constexpr std::size_t kMaxLoggedReports = 8;

}  // namespace

std::uint64_t RaceDetector::ProcessRaceCount() { return g_process_races.load(std::memory_order_relaxed); }
std::uint64_t RaceDetector::ProcessAccessesChecked() { return g_process_checked.load(std::memory_order_relaxed); }
void RaceDetector::SetProcessDefault(bool on) { g_default.store(on ? 1 : 0); }
bool RaceDetector::ProcessDefault() { return g_default.load() != 0; }

std::string RaceReport::ToString() const {
  auto side = [](const RaceAccess& a) {
    return fmt::format("{} of [{:#x}, {:#x}) by {} task {} ({})", a.write ? "write" : "read", a.begin, a.end, a.agent,
                       a.task, a.node);
  };
  return fmt::format("data race on device {} allocation {} '{}' bytes [{:#x}, {:#x}): {}; and {}, with no "
                     "happens-before order between them",
                     device, allocation, allocation_tag, begin, end, side(first), side(second));
}

std::uint32_t RaceDetector::TimeOf(const Clock& c, RaceAgent a) {
  auto it = std::lower_bound(c.begin(), c.end(), a, [](const auto& e, RaceAgent x) { return e.first < x; });
  return it != c.end() && it->first == a ? it->second : 0;
}

void RaceDetector::JoinInto(Clock& into, const Clock& from) {
  if (from.empty()) return;
  Clock out;
  out.reserve(into.size() + from.size());
  auto a = into.cbegin();
  auto b = from.cbegin();
  while (a != into.cend() || b != from.cend()) {
    if (b == from.cend() || (a != into.cend() && a->first < b->first)) {
      out.push_back(*a++);
    } else if (a == into.cend() || b->first < a->first) {
      out.push_back(*b++);
    } else {
      out.emplace_back(a->first, std::max(a->second, b->second));
      ++a;
      ++b;
    }
  }
  into.swap(out);
}

void RaceDetector::Tick(Clock& c, RaceAgent a) {
  auto it = std::lower_bound(c.begin(), c.end(), a, [](const auto& e, RaceAgent x) { return e.first < x; });
  if (it != c.end() && it->first == a) ++it->second;
  else c.insert(it, {a, 1});
}

RaceAgent RaceDetector::NewAgent(std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto id = static_cast<RaceAgent>(agents_.size());
  agents_.push_back(AgentState{std::move(name), Clock{{id, 1}}});
  return id;
}

RaceAgent RaceDetector::StreamAgent(int device, std::uint32_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t key = (static_cast<std::uint64_t>(device) << 32) | stream;
  if (auto it = stream_agents_.find(key); it != stream_agents_.end()) return it->second;
  const auto id = static_cast<RaceAgent>(agents_.size());
  agents_.push_back(AgentState{fmt::format("device {} stream {}", device, stream), Clock{{id, 1}}});
  stream_agents_.emplace(key, id);
  return id;
}

void RaceDetector::Acquire(RaceAgent agent, std::uint64_t sync_key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (agent >= agents_.size()) return;
  if (auto it = syncs_.find(sync_key); it != syncs_.end()) JoinInto(agents_[agent].clock, it->second);
}

void RaceDetector::Release(RaceAgent agent, std::uint64_t sync_key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (agent >= agents_.size()) return;
  JoinInto(syncs_[sync_key], agents_[agent].clock);
  Tick(agents_[agent].clock, agent);
}

void RaceDetector::Critical(RaceAgent agent, std::uint64_t sync_key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (agent >= agents_.size()) return;
  Clock& sync = syncs_[sync_key];
  JoinInto(agents_[agent].clock, sync);
  JoinInto(sync, agents_[agent].clock);
  Tick(agents_[agent].clock, agent);
}

void RaceDetector::ForgetSync(std::uint64_t sync_key) {
  std::lock_guard<std::mutex> lock(mu_);
  syncs_.erase(sync_key);
}

RaceTicket RaceDetector::Snapshot(RaceAgent agent) {
  std::lock_guard<std::mutex> lock(mu_);
  if (agent >= agents_.size()) return kNoRaceTicket;
  RaceTicket t = next_ticket_++;
  if (next_ticket_ == kNoRaceTicket) next_ticket_ = 1;
  tickets_[t] = agents_[agent].clock;
  Tick(agents_[agent].clock, agent);
  return t;
}

RaceTicket RaceDetector::HostSnapshot(RaceAgent agent) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (agent >= agents_.size()) return kNoRaceTicket;
    if (auto it = syncs_.find(kHostWorld); it != syncs_.end()) JoinInto(agents_[agent].clock, it->second);
  }
  return Snapshot(agent);
}

void RaceDetector::AcquireTicket(RaceAgent agent, RaceTicket ticket) {
  if (ticket == kNoRaceTicket) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (agent >= agents_.size()) return;
  if (auto it = tickets_.find(ticket); it != tickets_.end()) JoinInto(agents_[agent].clock, it->second);
}

void RaceDetector::DropTicket(RaceTicket ticket) {
  if (ticket == kNoRaceTicket) return;
  std::lock_guard<std::mutex> lock(mu_);
  tickets_.erase(ticket);
}

void RaceDetector::Join(RaceAgent to, RaceAgent from) {
  std::lock_guard<std::mutex> lock(mu_);
  if (to >= agents_.size() || from >= agents_.size() || to == from) return;
  JoinInto(agents_[to].clock, agents_[from].clock);
  JoinInto(syncs_[kHostWorld], agents_[from].clock);
  Tick(agents_[from].clock, from);
}

std::uint32_t RaceDetector::Intern(std::string_view name) {
  if (auto it = name_ids_.find(name); it != name_ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(names_.size());
  names_.emplace_back(name);
  name_ids_.emplace(std::string(name), id);
  return id;
}

void RaceDetector::OnAccess(int device, const DeviceMemory* memory, RaceAgent agent, std::uint64_t task,
                            std::string_view node, const Access& access) {
  if (access.bytes == 0 || !access.ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (agent >= agents_.size()) return;
  ++checked_;
  g_process_checked.fetch_add(1, std::memory_order_relaxed);
  const Clock& clock = agents_[agent].clock;
  const std::uint32_t alloc = access.ptr.allocation();
  const std::uint64_t b = access.ptr.offset(), e = b + access.bytes;
  const Record now{b, e, agent, TimeOf(clock, agent), Intern(node), task, access.write};
  std::vector<Record>& recs = shadow_[(static_cast<std::uint64_t>(device) << 32) | alloc];
  for (const Record& r : recs) {
    if (r.end <= b || r.begin >= e || r.agent == agent) continue;
    if (!r.write && !access.write) continue;
    if (TimeOf(clock, r.agent) >= r.time) continue;  // r happens before this access
    Report(device, memory, alloc, r, now);
  }
  // Keep what a later access must still be checked against. A write covers every earlier access
  // to its bytes (each happened before it or was reported); a read covers earlier reads that
  // happened before it, never a write (a later read concurrent with that write still races).
  const std::size_t n = recs.size();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Record r = recs[i];
    const bool overlaps = !(r.end <= b || r.begin >= e);
    if (!overlaps) {
      recs[kept++] = r;
      continue;
    }
    if (access.write) {
      if (r.begin < b) {
        Record left = r;
        left.end = b;
        recs[kept++] = left;
      }
      if (r.end > e) {
        Record right = r;
        right.begin = e;
        recs.push_back(right);  // past n: not visited again, moved down below
      }
      continue;
    }
    const bool covered = r.begin >= b && r.end <= e && !r.write &&
                         (r.agent == agent || TimeOf(clock, r.agent) >= r.time);
    if (!covered) recs[kept++] = r;
  }
  for (std::size_t i = n; i < recs.size(); ++i) recs[kept++] = recs[i];
  recs.resize(kept);
  recs.push_back(now);
}

void RaceDetector::Report(int device, const DeviceMemory* memory, std::uint32_t allocation, const Record& earlier,
                          const Record& now) {
  const std::uint64_t pair = (static_cast<std::uint64_t>(earlier.agent) * 0x9E3779B97F4A7C15ull) ^
                             (static_cast<std::uint64_t>(earlier.node) << 40) ^
                             (static_cast<std::uint64_t>(now.agent) << 20) ^ now.node ^
                             (static_cast<std::uint64_t>(now.write) << 63) ^ (static_cast<std::uint64_t>(earlier.write) << 62);
  if (!reported_pairs_.insert(pair).second) return;
  ++races_;
  g_process_races.fetch_add(1, std::memory_order_relaxed);
  if (reports_.size() >= kMaxStoredReports) return;
  RaceReport r;
  r.device = device;
  r.allocation = allocation;
  r.allocation_tag = memory != nullptr ? memory->TagOf(allocation) : std::string();
  r.begin = std::max(earlier.begin, now.begin);
  r.end = std::min(earlier.end, now.end);
  auto side = [&](const Record& x) {
    return RaceAccess{agents_[x.agent].name, x.task, names_[x.node], x.write, x.begin, x.end};
  };
  r.first = side(earlier);
  r.second = side(now);
  if (reports_.size() < kMaxLoggedReports) NPUFLOW_LOG_ERROR(kNpuSim, "npu_sim: {}", r.ToString());
  if (g_fatal) {
    std::fprintf(stderr, "NPUFLOW_RACE_DETECT=fatal: %s\n", r.ToString().c_str());
    std::abort();
  }
  reports_.push_back(std::move(r));
}

void RaceDetector::ForgetAllocation(int device, std::uint32_t allocation) {
  std::lock_guard<std::mutex> lock(mu_);
  shadow_.erase((static_cast<std::uint64_t>(device) << 32) | allocation);
}

std::vector<RaceReport> RaceDetector::reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_;
}
std::uint64_t RaceDetector::race_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return races_;
}
std::uint64_t RaceDetector::accesses_checked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checked_;
}

}  // namespace npuflow::npu_sim
