#include "lowering/drop_event.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace npuflow::lowering {
namespace {

std::set<std::uint32_t> UsedEvents(const graph::CompiledModel& model) {
  std::set<std::uint32_t> used;
  for (const graph::StreamDef& s : model.streams)
    for (const graph::TaskDef& t : s.tasks)
      if (t.type == graph::TaskType::kEventRecord || t.type == graph::TaskType::kEventWait) used.insert(t.event);
  return used;
}

// Is every wait of `event` reachable from every record of it without the event's own edge?
bool CoveredByOtherOrder(const graph::CompiledModel& model, std::uint32_t event) {
  // Nodes: (stream, task) flattened; edges: the next task on the stream, and record -> wait of
  // every other event.
  std::vector<std::size_t> first(model.streams.size() + 1, 0);
  for (std::size_t s = 0; s < model.streams.size(); ++s) first[s + 1] = first[s] + model.streams[s].tasks.size();
  const std::size_t n = first.back();
  std::vector<std::vector<std::size_t>> waits_of;  // by event
  std::vector<std::vector<std::size_t>> records_of;
  std::vector<std::size_t> records, waits;  // of `event`
  for (std::size_t s = 0; s < model.streams.size(); ++s) {
    for (std::size_t i = 0; i < model.streams[s].tasks.size(); ++i) {
      const graph::TaskDef& t = model.streams[s].tasks[i];
      if (t.type != graph::TaskType::kEventRecord && t.type != graph::TaskType::kEventWait) continue;
      auto& table = t.type == graph::TaskType::kEventRecord ? records_of : waits_of;
      if (table.size() <= t.event) table.resize(t.event + 1);
      table[t.event].push_back(first[s] + i);
      if (t.event == event) (t.type == graph::TaskType::kEventRecord ? records : waits).push_back(first[s] + i);
    }
  }
  std::vector<std::size_t> stream_of(n);
  for (std::size_t s = 0; s < model.streams.size(); ++s)
    for (std::size_t k = first[s]; k < first[s + 1]; ++k) stream_of[k] = s;
  for (std::size_t from : records) {
    std::vector<bool> seen(n, false);
    std::vector<std::size_t> stack{from};
    seen[from] = true;
    while (!stack.empty()) {
      const std::size_t k = stack.back();
      stack.pop_back();
      auto visit = [&](std::size_t next) {
        if (!seen[next]) {
          seen[next] = true;
          stack.push_back(next);
        }
      };
      if (k + 1 < first[stream_of[k] + 1]) visit(k + 1);
      const graph::TaskDef& t = model.streams[stream_of[k]].tasks[k - first[stream_of[k]]];
      if (t.type == graph::TaskType::kEventRecord && t.event != event && t.event < waits_of.size())
        for (std::size_t w : waits_of[t.event]) visit(w);
    }
    for (std::size_t w : waits)
      if (!seen[w]) return false;
  }
  return true;
}

}  // namespace

Status DropEventPair(graph::CompiledModel& model, std::uint32_t event) {
  const std::set<std::uint32_t> used = UsedEvents(model);
  if (used.count(event) == 0) {
    if (used.empty()) return Status::ParamInvalid("--debug-drop-event {}: the model uses no events", event);
    return Status::ParamInvalid("--debug-drop-event {}: the model has no such event (it uses {} events: {}..{})", event,
                                used.size(), *used.begin(), *used.rbegin());
  }
  for (graph::StreamDef& s : model.streams) {
    for (graph::TaskDef& t : s.tasks) {
      if ((t.type == graph::TaskType::kEventRecord || t.type == graph::TaskType::kEventWait) && t.event == event) {
        t = graph::TaskDef{};
        t.type = graph::TaskType::kNop;
        t.node = fmt::format("dropped event {}", event);
      }
    }
  }
  return Status::Ok();
}

std::vector<std::uint32_t> DroppableEvents(const graph::CompiledModel& model) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t e : UsedEvents(model))
    if (!CoveredByOtherOrder(model, e)) out.push_back(e);
  return out;
}

}  // namespace npuflow::lowering
