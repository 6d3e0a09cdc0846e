#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

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

  // Who touches each tensor. A kernel's arguments must be where the plan put its tensors (so a
  // task that reads or writes anything else is caught); a copy touches the tensors placed exactly
  // at its source and destination.
  std::map<std::pair<int, std::uint64_t>, std::vector<int>> at_ref;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    at_ref[{static_cast<int>(tensors[i].ref.segment), tensors[i].ref.offset}].push_back(static_cast<int>(i));
  std::vector<std::vector<Access>> access(tensors.size());
  for (int s = 0; s < S; ++s) {
    for (std::size_t i = 0; i < streams[s].tasks.size(); ++i) {
      const graph::TaskDef& t = streams[s].tasks[i];
      const TaskRef ref{s, static_cast<int>(i)};
      if (t.type == graph::TaskType::kMemcpy) {
        for (auto [r, write] : {std::pair{t.src, false}, std::pair{t.dst, true}})
          if (auto it = at_ref.find({static_cast<int>(r.segment), r.offset}); it != at_ref.end())
            for (int k : it->second) access[k].push_back({ref, write});
        continue;
      }
      if (t.type != graph::TaskType::kKernel && t.type != graph::TaskType::kAicpuKernel) continue;
      const graph::Node* node = model.graph ? model.graph->FindNode(t.node) : nullptr;
      if (node == nullptr) return Status::Internal("{} runs node '{}', which the graph lacks", name_task(ref), t.node);
      const std::size_t nin = node->inputs().size(), nout = node->outputs().size();
      if (t.args.size() != nin + nout + 2)
        return Status::Internal("{} has {} arguments, node '{}' needs {} (inputs, outputs, workspace, params)",
                                name_task(ref), t.args.size(), node->name(), nin + nout + 2);
      auto touch = [&](const std::string& producer, int output, std::size_t arg, bool write) -> Status {
        auto it = tensor_of.find({producer, output});
        if (it == tensor_of.end())
          return Status::Internal("{}: tensor {}:{} has no place in the memory plan", name_task(ref), producer, output);
        if (!(t.args[arg] == tensors[it->second].ref))
          return Status::Internal("{}: argument {} points at {}+{}, but tensor {}:{} is at {}+{}", name_task(ref), arg,
                                  graph::SegmentName(t.args[arg].segment), t.args[arg].offset, producer, output,
                                  graph::SegmentName(tensors[it->second].ref.segment), tensors[it->second].ref.offset);
        access[it->second].push_back({ref, write});
        return Status::Ok();
      };
      for (std::size_t k = 0; k < nin; ++k)
        NPUFLOW_RETURN_IF_ERROR(touch(node->inputs()[k].node->name(), node->inputs()[k].index, k, false));
      for (std::size_t o = 0; o < nout; ++o) NPUFLOW_RETURN_IF_ERROR(touch(node->name(), static_cast<int>(o), nin + o, true));
      if (t.args[nin + nout].segment != Segment::kNone)
        NPUFLOW_RETURN_IF_ERROR(touch(node->name(), kWorkspaceOutput, nin + nout, true));
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
  // Tensors that share bytes, per segment the device writes. Tensors at exactly the same bytes
  // form a group: a valid plan orders them one after another by producer, so checking each with
  // the next is enough (the order is transitive); groups that partly overlap are checked pair by
  // pair. A 100,000-node chain is then linear, not quadratic.
  auto conflict = [&](Segment seg, int a, int b) {
    const graph::TensorPlacement& x = tensors[a];
    const graph::TensorPlacement& y = tensors[b];
    return Status::Internal("tensors {} ({}+{}, {} bytes) and {} ({}+{}, {} bytes) share bytes but their uses are not "
                            "ordered",
                            tensor_name(a), graph::SegmentName(seg), x.ref.offset, x.bytes, tensor_name(b),
                            graph::SegmentName(seg), y.ref.offset, y.bytes);
  };
  for (Segment seg : {Segment::kFeatureMap, Segment::kFixedFeatureMap, Segment::kVariables, Segment::kInput,
                      Segment::kOutput}) {
    std::vector<int> list;
    for (std::size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].ref.segment == seg && tensors[i].bytes > 0 && !access[i].empty()) list.push_back(static_cast<int>(i));
    std::sort(list.begin(), list.end(), [&](int a, int b) {
      const auto& x = tensors[a];
      const auto& y = tensors[b];
      return std::tie(x.ref.offset, x.bytes, x.first_use, a) < std::tie(y.ref.offset, y.bytes, y.first_use, b);
    });
    struct Group {
      std::uint64_t offset, bytes;
      std::size_t begin, end;  // in `list`
    };
    std::vector<Group> groups;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& t = tensors[list[i]];
      if (groups.empty() || groups.back().offset != t.ref.offset || groups.back().bytes != t.bytes)
        groups.push_back({t.ref.offset, t.bytes, i, i});
      groups.back().end = i + 1;
    }
    for (std::size_t g = 0; g < groups.size(); ++g) {
      for (std::size_t i = groups[g].begin; i + 1 < groups[g].end; ++i)
        if (!before(list[i], list[i + 1])) return conflict(seg, list[i], list[i + 1]);
      for (std::size_t h = g + 1; h < groups.size() && groups[h].offset < groups[g].offset + groups[g].bytes; ++h)
        for (std::size_t i = groups[g].begin; i < groups[g].end; ++i)
          for (std::size_t j = groups[h].begin; j < groups[h].end; ++j)
            if (!before(list[i], list[j]) && !before(list[j], list[i])) return conflict(seg, list[i], list[j]);
    }
  }
  return Status::Ok();
}

}  // namespace npuflow::lowering
