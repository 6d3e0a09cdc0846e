#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "lowering/memory_plan.h"

namespace npuflow::lowering {
namespace {

using graph::Segment;

struct TaskRef {
  int stream = 0;
  int index = 0;
  friend bool operator==(const TaskRef&, const TaskRef&) = default;
};

struct Access {
  TaskRef task;
  bool write = false;
};

}  // namespace

Status VerifyMemoryPlan(const graph::CompiledModel& model) {
  const auto& streams = model.streams;
  const int S = static_cast<int>(streams.size());
  // Replay records and waits: clock[s][i] = what task i of stream s knows has finished.
  std::vector<std::vector<std::vector<int>>> clock(S);
  {
    std::vector<std::size_t> next(S, 0);
    std::vector<std::vector<int>> at(S, std::vector<int>(S, 0));
    std::map<std::uint32_t, std::vector<int>> recorded;
    for (int s = 0; s < S; ++s) clock[s].resize(streams[s].tasks.size());
    for (bool progress = true; progress;) {
      progress = false;
      for (int s = 0; s < S; ++s) {
        while (next[s] < streams[s].tasks.size()) {
          const graph::TaskDef& t = streams[s].tasks[next[s]];
          if (t.type == graph::TaskType::kEventWait) {
            auto it = recorded.find(t.event);
            if (it == recorded.end()) break;
            for (int k = 0; k < S; ++k) at[s][k] = std::max(at[s][k], it->second[k]);
          }
          at[s][s] = static_cast<int>(next[s]) + 1;
          clock[s][next[s]] = at[s];
          if (t.type == graph::TaskType::kEventRecord) recorded[t.event] = at[s];
          ++next[s];
          progress = true;
        }
      }
    }
    for (int s = 0; s < S; ++s)
      if (next[s] < streams[s].tasks.size())
        return Status::Internal("stream {} task {} waits for event {}, which no stream records before it", s, next[s],
                                streams[s].tasks[next[s]].event);
  }
  auto hb = [&](TaskRef a, TaskRef b) { return clock[b.stream][b.index][a.stream] >= a.index + 1; };
  auto ordered = [&](TaskRef a, TaskRef b) { return a == b || hb(a, b); };
  auto name_task = [&](TaskRef t) {
    const graph::TaskDef& d = streams[t.stream].tasks[t.index];
    return fmt::format("stream {} task {} ({} {})", t.stream, t.index, graph::TaskTypeName(d.type), d.node);
  };

  const auto& tensors = model.memory.tensors;
  std::map<std::pair<std::string, int>, int> tensor_of;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const graph::TensorPlacement& t = tensors[i];
    if (t.ref.offset + t.bytes > model.memory.bytes(t.ref.segment))
      return Status::Internal("tensor {}:{} at {}+{} ({} bytes) ends past its segment ({} bytes)", t.node, t.output,
                              graph::SegmentName(t.ref.segment), t.ref.offset, t.bytes,
                              model.memory.bytes(t.ref.segment));
    tensor_of.emplace(std::make_pair(t.node, t.output), static_cast<int>(i));
  }
  auto tensor_name = [&](int i) { return fmt::format("{}:{}", tensors[i].node, tensors[i].output); };

  // Who touches each tensor.
  std::vector<std::vector<Access>> access(tensors.size());
  for (int s = 0; s < S; ++s) {
    for (std::size_t i = 0; i < streams[s].tasks.size(); ++i) {
      const graph::TaskDef& t = streams[s].tasks[i];
      const TaskRef ref{s, static_cast<int>(i)};
      if (t.type != graph::TaskType::kKernel && t.type != graph::TaskType::kAicpuKernel) continue;
      const graph::Node* node = model.graph ? model.graph->FindNode(t.node) : nullptr;
      if (node == nullptr) return Status::Internal("{} runs node '{}', which the graph lacks", name_task(ref), t.node);
      for (const graph::Endpoint& e : node->inputs())
        if (auto it = tensor_of.find({e.node->name(), e.index}); it != tensor_of.end())
          access[it->second].push_back({ref, false});
      for (int o = 0; o < static_cast<int>(node->outputs().size()); ++o)
        if (auto it = tensor_of.find({node->name(), o}); it != tensor_of.end())
          access[it->second].push_back({ref, true});
      if (auto it = tensor_of.find({node->name(), kWorkspaceOutput}); it != tensor_of.end())
        access[it->second].push_back({ref, true});
    }
  }

  for (std::size_t i = 0; i < tensors.size(); ++i) {
    for (const Access& w : access[i]) {
      if (!w.write) continue;
      for (const Access& r : access[i])
        if (!r.write && !ordered(w.task, r.task))
          return Status::Internal("tensor {}: {} reads it without being ordered after its writer {}",
                                  tensor_name(static_cast<int>(i)), name_task(r.task), name_task(w.task));
    }
  }

  auto before = [&](int x, int y) {
    for (const Access& a : access[x])
      for (const Access& b : access[y])
        if (!ordered(a.task, b.task)) return false;
    return true;
  };
  for (Segment seg : {Segment::kFeatureMap, Segment::kFixedFeatureMap}) {
    std::vector<int> list;
    for (std::size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].ref.segment == seg && tensors[i].bytes > 0) list.push_back(static_cast<int>(i));
    std::sort(list.begin(), list.end(),
              [&](int a, int b) { return tensors[a].ref.offset < tensors[b].ref.offset; });
    for (std::size_t a = 0; a < list.size(); ++a) {
      const graph::TensorPlacement& x = tensors[list[a]];
      for (std::size_t b = a + 1; b < list.size() && tensors[list[b]].ref.offset < x.ref.offset + x.bytes; ++b) {
        if (before(list[a], list[b]) || before(list[b], list[a])) continue;
        const graph::TensorPlacement& y = tensors[list[b]];
        return Status::Internal("tensors {} ({}+{}, {} bytes) and {} ({}+{}, {} bytes) share bytes but their uses "
                                "are not ordered",
                                tensor_name(list[a]), graph::SegmentName(seg), x.ref.offset, x.bytes,
                                tensor_name(list[b]), graph::SegmentName(seg), y.ref.offset, y.bytes);
      }
    }
  }
  return Status::Ok();
}

}  // namespace npuflow::lowering
