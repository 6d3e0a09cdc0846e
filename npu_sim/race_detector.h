// RaceDetector: a happens-before race detector for device memory (RuntimeOptions::race_detect,
// `--race-detect` on every command).
//
// Agents are the things that run in program order: each device stream, and each host client
// (thread, fiber, named HostClient). Each agent carries a vector clock. The order between agents
// comes from what the runtime really orders:
//   - a stream's tasks, one after another;
//   - event record -> the stream wait that passes on it (and a wait elided because its latch was
//     recorded, and the host's SynchronizeEvent);
//   - a host submission -> the tasks it submitted; a stream's work -> the Synchronize it answers;
//   - a model run: its requester's submission -> every bound stream's run; every stream's end of
//     run -> the requester's completion and the model's next run.
// Kernels and copies declare the byte ranges they read and write (KernelDef::accesses; a copy's
// source and destination). Two accesses to overlapping bytes, at least one a write, that neither
// happens before the other are a race, reported with both tasks, their streams, their graph nodes
// (the task names) and the address range.
//
// One lock guards everything: the detector is a debugging mode, and its cost is measured
// (`npuflow bench stress`: GPT-2 decode with and without).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "npu_sim/device_memory.h"

namespace npuflow::npu_sim {

using RaceAgent = std::uint32_t;
using RaceSync = std::uint32_t;
using RaceTicket = std::uint32_t;
inline constexpr RaceAgent kNoRaceAgent = 0xFFFFFFFFu;
inline constexpr RaceTicket kNoRaceTicket = 0;

// One side of a race.
struct RaceAccess {
  std::string agent;      // "device 0 stream 3", "host thread 1", ...
  std::uint64_t task = 0; // the task's id on its stream (host clients: 0)
  std::string node;       // the task's name: the graph node for compiled kernels
  bool write = false;
  std::uint64_t begin = 0, end = 0;  // offsets in the allocation
};

struct RaceReport {
  int device = 0;
  std::uint32_t allocation = 0;
  std::string allocation_tag;
  std::uint64_t begin = 0, end = 0;  // the overlap, as offsets in the allocation
  RaceAccess first;                  // the earlier access
  RaceAccess second;                 // the access that found it
  std::string ToString() const;
};

class RaceDetector {
 public:
  RaceDetector() = default;
  RaceDetector(const RaceDetector&) = delete;
  RaceDetector& operator=(const RaceDetector&) = delete;

  RaceAgent NewAgent(std::string name);
  // The agent of a device stream ("device D stream S"), made on first use.
  RaceAgent StreamAgent(int device, std::uint32_t stream);

  // `agent`'s clock joins `sync`'s (an acquire), or `sync`'s joins `agent`'s and the agent moves
  // on (a release). Syncs are named by a key the caller picks (an event, a model).
  void Acquire(RaceAgent agent, std::uint64_t sync_key);
  void Release(RaceAgent agent, std::uint64_t sync_key);
  void ForgetSync(std::uint64_t sync_key);
  static std::uint64_t EventKey(int device, std::uint32_t event) {
    return (std::uint64_t{1} << 62) | (static_cast<std::uint64_t>(device) << 32) | event;
  }
  static std::uint64_t ModelKey(int device, std::uint32_t model) {
    return (std::uint64_t{2} << 62) | (static_cast<std::uint64_t>(device) << 32) | model;
  }
  // The runtime's host-side locks: the host calls that take a stream's lock (a submission) or a
  // model's table entry (load, bind, execute, elide, destroy) are ordered by it, as a mutex orders
  // its critical sections. So a model loaded by one client and run by another is ordered after
  // what the loader did before it loaded (its synchronized copies), and nothing more.
  static std::uint64_t HostStreamKey(int device, std::uint32_t stream) {
    return (std::uint64_t{3} << 62) | (std::uint64_t{1} << 61) | (static_cast<std::uint64_t>(device) << 32) | stream;
  }
  static std::uint64_t HostModelKey(int device, std::uint32_t model) {
    return (std::uint64_t{3} << 62) | (static_cast<std::uint64_t>(device) << 32) | model;
  }
  // Acquire then release: a critical section of the lock `sync_key` stands for.
  void Critical(RaceAgent agent, std::uint64_t sync_key);

  // A one-shot release: the agent's clock now, for whoever receives the ticket (a submission, a
  // model run request). AcquireTicket joins it; the last holder drops it.
  RaceTicket Snapshot(RaceAgent agent);
  // The same for a host client submitting work, which first learns every completion any host
  // client has waited for (see HostWorld).
  RaceTicket HostSnapshot(RaceAgent agent);
  void AcquireTicket(RaceAgent agent, RaceTicket ticket);
  void DropTicket(RaceTicket ticket);
  // `to` learns everything `from` has done (a Synchronize answered); `from` moves on. The host
  // world learns it too.
  void Join(RaceAgent to, RaceAgent from);
  // Host clients talk to each other in ways the detector does not see (futures, actor messages,
  // condition variables): a loader synchronizes its copies and then answers the thread that runs
  // the model. So a completion any host client has waited for (a Synchronize, a model run's end,
  // a SynchronizeEvent) goes into the host world, and every host submission starts from it. What
  // this gives up: a host thread that uses a buffer another thread synchronized, with no signal
  // between the two, is not reported. Device-side order (events, streams, model runs) is exact.
  static constexpr std::uint64_t kHostWorld = ~std::uint64_t{0};

  // One access of `bytes` at `ptr` on `device` by `agent`, for its task `task` named `node`.
  // Checked against earlier accesses; a race is recorded (and logged) once per pair of tasks.
  struct Access {
    DevicePtr ptr;
    std::uint64_t bytes = 0;
    bool write = false;
  };
  void OnAccess(int device, const DeviceMemory* memory, RaceAgent agent, std::uint64_t task, std::string_view node,
                const Access& access);
  // An allocation was freed: its history goes (its id may be reused).
  void ForgetAllocation(int device, std::uint32_t allocation);

  std::vector<RaceReport> reports() const;
  std::uint64_t race_count() const;  // distinct pairs of tasks found racing
  std::uint64_t accesses_checked() const;
  // Kernel launches whose kernel declares no accesses (not checked).
  void CountUndeclared() { undeclared_.fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t undeclared_kernels() const { return undeclared_.load(std::memory_order_relaxed); }

  // Races found by every detector of this process (for a command's exit status).
  static std::uint64_t ProcessRaceCount();
  static std::uint64_t ProcessAccessesChecked();
  // Whether runtimes of this process detect races by default (`--race-detect`, or the
  // environment variable NPUFLOW_RACE_DETECT=1; =fatal also aborts the process at the first race).
  static void SetProcessDefault(bool on);
  static bool ProcessDefault();

 private:
  // A sparse vector clock: (agent, time), sorted by agent.
  using Clock = std::vector<std::pair<RaceAgent, std::uint32_t>>;
  static std::uint32_t TimeOf(const Clock& c, RaceAgent a);
  static void JoinInto(Clock& into, const Clock& from);
  static void Tick(Clock& c, RaceAgent a);
  struct AgentState {
    std::string name;
    Clock clock;
  };
  struct Record {
    std::uint64_t begin, end;
    RaceAgent agent;
    std::uint32_t time;  // the agent's own time at the access
    std::uint32_t node;  // interned task name
    std::uint64_t task;
    bool write;
  };
  std::uint32_t Intern(std::string_view name);
  void Report(int device, const DeviceMemory* memory, std::uint32_t allocation, const Record& earlier,
              const Record& now);

  mutable std::mutex mu_;
  std::vector<AgentState> agents_;
  std::unordered_map<std::uint64_t, RaceAgent> stream_agents_;
  std::unordered_map<std::uint64_t, Clock> syncs_;
  std::unordered_map<RaceTicket, Clock> tickets_;
  RaceTicket next_ticket_ = 1;
  std::unordered_map<std::uint64_t, std::vector<Record>> shadow_;  // (device << 32 | allocation)
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::uint32_t, NameHash, std::equal_to<>> name_ids_;
  std::vector<std::string> names_;
  std::unordered_set<std::uint64_t> reported_pairs_;
  std::vector<RaceReport> reports_;
  std::uint64_t races_ = 0;
  std::uint64_t checked_ = 0;
  std::atomic<std::uint64_t> undeclared_{0};
};

}  // namespace npuflow::npu_sim
