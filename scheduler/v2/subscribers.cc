#include "scheduler/v2/subscribers.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "graph/exe_graph/exe_graph.h"

namespace npuflow::v2 {

std::string_view ExecutorEventName(ExecutorEvent event) {
  switch (event) {
    case ExecutorEvent::kModelStart: return "model-start";
    case ExecutorEvent::kExecuteStart: return "execute-start";
    case ExecutorEvent::kExecuteEnd: return "execute-end";
    case ExecutorEvent::kModelEnd: return "model-end";
  }
  return "?";
}

// --- HostProfiler

void HostProfiler::OnEvent(void* arg, const ExecutorEventInfo& info) {
  auto* self = static_cast<HostProfiler*>(arg);
  switch (info.event) {
    case ExecutorEvent::kModelStart: {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (self->slots_.size() != info.num_nodes) self->slots_.assign(info.num_nodes, Slot{});
      return;
    }
    case ExecutorEvent::kExecuteStart:
      self->slots_[info.node->node_id].start = std::chrono::steady_clock::now();
      return;
    case ExecutorEvent::kExecuteEnd: {
      Slot& slot = self->slots_[info.node->node_id];
      const auto took = std::chrono::steady_clock::now() - slot.start;
      if (slot.row.runs == 0) {
        slot.row.node = info.node->node->name;
        slot.row.kernel = info.node->node->kernel;
      }
      ++slot.row.runs;
      slot.row.total += took;
      slot.row.max = std::max<std::chrono::nanoseconds>(slot.row.max, took);
      return;
    }
    case ExecutorEvent::kModelEnd:
      return;
  }
}

std::vector<HostProfiler::Row> HostProfiler::Top(std::size_t top) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Row> rows;
  for (const Slot& s : slots_)
    if (s.row.runs > 0) rows.push_back(s.row);
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.total > b.total; });
  if (rows.size() > top) rows.resize(top);
  return rows;
}

std::string HostProfiler::Report(const std::vector<const HostProfiler*>& profilers, std::size_t top) {
  std::vector<Row> rows;
  for (const HostProfiler* p : profilers) {
    for (const Row& r : p->Top(SIZE_MAX)) {
      auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& x) { return x.node == r.node; });
      if (it == rows.end()) {
        rows.push_back(r);
        continue;
      }
      it->runs += r.runs;
      it->total += r.total;
      it->max = std::max(it->max, r.max);
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.total > b.total; });
  if (rows.size() > top) rows.resize(top);
  return Table(rows);
}

std::string HostProfiler::Report(std::size_t top) const { return Table(Top(top)); }

std::string HostProfiler::Table(const std::vector<Row>& rows) {
  std::string out = fmt::format("{:<40} {:<20} {:>8} {:>12} {:>12} {:>12}\n", "node", "kernel", "runs", "total us",
                                "mean us", "max us");
  for (const Row& r : rows) {
    const double total_us = static_cast<double>(r.total.count()) / 1e3;
    out += fmt::format("{:<40} {:<20} {:>8} {:>12.1f} {:>12.2f} {:>12.2f}\n", r.node, r.kernel, r.runs, total_us,
                       total_us / static_cast<double>(r.runs), static_cast<double>(r.max.count()) / 1e3);
  }
  return out;
}

void HostProfiler::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  slots_.clear();
}

// --- ExecutorTracer

void ExecutorTracer::OnEvent(void* arg, const ExecutorEventInfo& info) {
  auto* self = static_cast<ExecutorTracer*>(arg);
  switch (info.event) {
    case ExecutorEvent::kModelStart: {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (self->starts_.size() != info.num_nodes) self->starts_.resize(info.num_nodes);
      return;
    }
    case ExecutorEvent::kExecuteStart:
      self->starts_[info.node->node_id] = std::chrono::steady_clock::now();
      return;
    case ExecutorEvent::kExecuteEnd: {
      const auto end = std::chrono::steady_clock::now();
      const auto start = self->starts_[info.node->node_id];
      Span span;
      span.name = info.node->node->name;
      span.args = info.node->def->trace_printer ? info.node->def->trace_printer(info.node) : std::string();
      if (info.result != exe::kKernelSuccess) span.args += span.args.empty() ? "failed" : " (failed)";
      span.start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(start - self->origin_).count();
      span.dur_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
      span.thread = std::hash<std::thread::id>()(std::this_thread::get_id());
      std::lock_guard<std::mutex> lock(self->mu_);
      self->spans_.push_back(std::move(span));
      return;
    }
    case ExecutorEvent::kModelEnd:
      return;
  }
}

std::size_t ExecutorTracer::span_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_.size();
}

std::string ExecutorTracer::ToChromeTraceJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json events = nlohmann::json::array();
  std::vector<std::uint64_t> threads;
  for (const Span& s : spans_) {
    auto it = std::find(threads.begin(), threads.end(), s.thread);
    const auto tid = static_cast<int>(it - threads.begin());
    if (it == threads.end()) threads.push_back(s.thread);
    nlohmann::json e = {{"name", s.name}, {"ph", "X"}, {"pid", 0}, {"tid", tid},
                        {"ts", static_cast<double>(s.start_ns) / 1e3}, {"dur", static_cast<double>(s.dur_ns) / 1e3}};
    if (!s.args.empty()) e["args"] = {{"detail", s.args}};
    events.push_back(std::move(e));
  }
  for (std::size_t t = 0; t < threads.size(); ++t)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", t},
                      {"args", {{"name", fmt::format("executor thread {}", t)}}}});
  return nlohmann::json{{"traceEvents", std::move(events)}}.dump();
}

Status ExecutorTracer::WriteChromeTrace(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::Failed("{}: cannot open for writing the executor trace", path);
  out << ToChromeTraceJson();
  if (!out.flush()) return Status::Failed("{}: write failed", path);
  return Status::Ok();
}

void ExecutorTracer::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  spans_.clear();
}

// --- DataDumper

namespace {
std::string FileSafe(std::string_view name) {
  std::string out(name);
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
  return out;
}
}  // namespace

void DataDumper::OnEvent(void* arg, const ExecutorEventInfo& info) {
  if (info.event != ExecutorEvent::kExecuteEnd || info.result != exe::kKernelSuccess) return;
  auto* self = static_cast<DataDumper*>(arg);
  const exe::KernelContext* ctx = info.node;
  if (ctx->def->data_dump_info_filler == nullptr) return;
  std::vector<exe::DumpTensor> tensors;
  Status s = ctx->def->data_dump_info_filler(ctx, tensors);
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(self->dir_) / std::to_string(info.iteration);
  std::error_code ec;
  if (s.ok()) {
    fs::create_directories(dir, ec);
    if (ec) s = Status::Failed("{}: cannot create the dump directory: {}", dir.string(), ec.message());
  }
  std::uint64_t written = 0;
  for (std::size_t i = 0; s.ok() && i < tensors.size(); ++i) {
    const fs::path file = dir / (FileSafe(ctx->node->name) + "." + FileSafe(tensors[i].name) + ".bin");
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(tensors[i].bytes.data()),
              static_cast<std::streamsize>(tensors[i].bytes.size()));
    if (!out.flush()) s = Status::Failed("{}: dump write failed", file.string());
    else ++written;
  }
  std::lock_guard<std::mutex> lock(self->mu_);
  self->files_ += written;
  if (!s.ok() && self->status_.ok()) self->status_ = s.WithContext(fmt::format("data dump of node '{}'", ctx->node->name));
}

std::uint64_t DataDumper::files_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_;
}

Status DataDumper::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

// --- ExecutorSubscribersScheduler

ExecutorSubscribersScheduler::ExecutorSubscribersScheduler() : fan_out_{&ExecutorSubscribersScheduler::FanOut, this} {}

HostProfiler& ExecutorSubscribersScheduler::EnableProfiler() {
  profiler_on_ = true;
  Refresh();
  return profiler_;
}

ExecutorTracer& ExecutorSubscribersScheduler::EnableTracer() {
  tracer_on_ = true;
  Refresh();
  return tracer_;
}

DataDumper& ExecutorSubscribersScheduler::EnableDataDumper(std::string dir) {
  dumper_ = std::make_unique<DataDumper>(std::move(dir));
  Refresh();
  return *dumper_;
}

void ExecutorSubscribersScheduler::DisableBuiltins() {
  profiler_on_ = tracer_on_ = false;
  dumper_.reset();
  Refresh();
}

int ExecutorSubscribersScheduler::AddSubscriber(ExecutorSubscriber subscriber) {
  const int id = next_id_++;
  user_.emplace_back(id, subscriber);
  Refresh();
  return id;
}

bool ExecutorSubscribersScheduler::RemoveSubscriber(int id) {
  auto it = std::find_if(user_.begin(), user_.end(), [id](const auto& u) { return u.first == id; });
  if (it == user_.end()) return false;
  user_.erase(it);
  Refresh();
  return true;
}

void ExecutorSubscribersScheduler::Refresh() {
  working_.clear();
  if (profiler_on_) working_.push_back(profiler_.subscriber());
  if (tracer_on_) working_.push_back(tracer_.subscriber());
  if (dumper_) working_.push_back(dumper_->subscriber());
  for (const auto& [id, s] : user_)
    if (s.callback) working_.push_back(s);
}

const ExecutorSubscriber* ExecutorSubscribersScheduler::Working() const {
  if (working_.empty()) return nullptr;
  if (working_.size() == 1) return &working_.front();
  return &fan_out_;
}

void ExecutorSubscribersScheduler::FanOut(void* arg, const ExecutorEventInfo& info) {
  for (const ExecutorSubscriber& s : static_cast<ExecutorSubscribersScheduler*>(arg)->working_) s.callback(s.arg, info);
}

}  // namespace npuflow::v2
