// Executor subscribers (seed 001 section 5.7): callbacks around an execution and each node.
//
// Events: kModelStart, then kExecuteStart / kExecuteEnd around each node, then kModelEnd; a
// failure returns after the failing node's kExecuteEnd, before kModelEnd. Under the multi-thread
// executor callbacks come from several threads at once (never two for one node).
//
// ExecutorSubscribersScheduler holds the built-in subscribers (a per-node host profiler, a
// tracer into a Chrome trace, a data dumper), each off until enabled, and the user's. It is
// enabled when at least one subscriber works; exactly one is called directly, several through a
// fan-out. Removing the user's subscribers and disabling the built-ins turns it off again, and
// the executors go back to their loops without callbacks. Change it only between executions.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "graph/exe_graph/kernel_registry.h"

namespace npuflow::v2 {

enum class ExecutorEvent : std::uint8_t { kModelStart, kExecuteStart, kExecuteEnd, kModelEnd };
std::string_view ExecutorEventName(ExecutorEvent event);

struct ExecutorEventInfo {
  ExecutorEvent event = ExecutorEvent::kModelStart;
  std::uint32_t num_nodes = 0;
  std::uint64_t iteration = 0;
  const exe::KernelContext* node = nullptr;  // null for the model events
  std::uint32_t result = exe::kKernelSuccess;  // kExecuteEnd: what the kernel returned
};

struct ExecutorSubscriber {
  using Callback = void (*)(void* arg, const ExecutorEventInfo& info);
  Callback callback = nullptr;
  void* arg = nullptr;
};

// Per-node host time: runs, total and largest wall time.
class HostProfiler {
 public:
  struct Row {
    std::string node;
    std::string kernel;
    std::uint64_t runs = 0;
    std::chrono::nanoseconds total{0};
    std::chrono::nanoseconds max{0};
  };
  ExecutorSubscriber subscriber() { return {&HostProfiler::OnEvent, this}; }
  // The nodes by total time, largest first (at most `top`).
  std::vector<Row> Top(std::size_t top) const;
  std::string Report(std::size_t top) const;  // a table
  void Clear();
  // Rows of several profilers (one per model instance) summed by node, then the table.
  static std::string Report(const std::vector<const HostProfiler*>& profilers, std::size_t top);

 private:
  static void OnEvent(void* arg, const ExecutorEventInfo& info);
  static std::string Table(const std::vector<Row>& rows);
  struct Slot {
    std::chrono::steady_clock::time_point start;
    Row row;
  };
  mutable std::mutex mu_;  // the model events resize; node events touch their own slot only
  std::vector<Slot> slots_;
};

// Host spans of every node into Chrome trace-event JSON (one track per executor thread).
class ExecutorTracer {
 public:
  ExecutorSubscriber subscriber() { return {&ExecutorTracer::OnEvent, this}; }
  std::size_t span_count() const;
  std::string ToChromeTraceJson() const;
  Status WriteChromeTrace(const std::string& path) const;
  void Clear();

 private:
  static void OnEvent(void* arg, const ExecutorEventInfo& info);
  struct Span {
    std::string name;
    std::string args;
    std::int64_t start_ns = 0;
    std::int64_t dur_ns = 0;
    std::uint64_t thread = 0;
  };
  mutable std::mutex mu_;
  std::vector<std::chrono::steady_clock::time_point> starts_;
  std::vector<Span> spans_;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
};

// Writes each node's outputs (as its kernel's data-dump filler gives them) to
// <dir>/<iteration>/<node>.<output>.bin, with names made file-safe. A node whose kernel has no
// filler is skipped; a write error is kept and reported by status().
class DataDumper {
 public:
  explicit DataDumper(std::string dir) : dir_(std::move(dir)) {}
  ExecutorSubscriber subscriber() { return {&DataDumper::OnEvent, this}; }
  const std::string& dir() const { return dir_; }
  std::uint64_t files_written() const;
  Status status() const;

 private:
  static void OnEvent(void* arg, const ExecutorEventInfo& info);
  std::string dir_;
  mutable std::mutex mu_;
  std::uint64_t files_ = 0;
  Status status_;
};

class ExecutorSubscribersScheduler {
 public:
  ExecutorSubscribersScheduler();

  // Built-ins.
  HostProfiler& EnableProfiler();
  ExecutorTracer& EnableTracer();
  DataDumper& EnableDataDumper(std::string dir);
  void DisableBuiltins();
  HostProfiler* profiler() { return profiler_on_ ? &profiler_ : nullptr; }
  ExecutorTracer* tracer() { return tracer_on_ ? &tracer_ : nullptr; }
  DataDumper* dumper() { return dumper_.get(); }

  // User subscribers; the id removes it. The first one enables the scheduler.
  int AddSubscriber(ExecutorSubscriber subscriber);
  // False when no subscriber has that id.
  bool RemoveSubscriber(int id);

  bool IsEnabled() const { return !working_.empty(); }
  std::size_t working_count() const { return working_.size(); }
  // What an executor calls: null when disabled, the one subscriber, or the fan-out.
  const ExecutorSubscriber* Working() const;

 private:
  void Refresh();
  static void FanOut(void* arg, const ExecutorEventInfo& info);

  HostProfiler profiler_;
  ExecutorTracer tracer_;
  std::unique_ptr<DataDumper> dumper_;
  bool profiler_on_ = false;
  bool tracer_on_ = false;
  std::vector<std::pair<int, ExecutorSubscriber>> user_;
  int next_id_ = 1;
  std::vector<ExecutorSubscriber> working_;
  ExecutorSubscriber fan_out_;
};

}  // namespace npuflow::v2
