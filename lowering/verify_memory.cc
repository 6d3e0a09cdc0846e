#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

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

// The checker's state, and one method per check; VerifyMemoryPlan runs them in order.
class PlanVerifier {
 public:
  explicit PlanVerifier(const graph::CompiledModel& model)
      : model_(model), streams_(model.streams), tensors_(model.memory.tensors), S_(static_cast<int>(streams_.size())) {}

  Status ReplayEvents();
  Status IndexTensors();
  Status CollectAccesses();
  Status CheckReadsAfterWrites() const;
  Status CheckSharedBytes(Segment seg) const;

 private:
  Status CollectKernelAccesses(const graph::TaskDef& t, TaskRef ref);

  bool HappensBefore(TaskRef a, TaskRef b) const { return clock_[b.stream][b.index][a.stream] >= a.index + 1; }
  bool Ordered(TaskRef a, TaskRef b) const { return a == b || HappensBefore(a, b); }
  // Every use of tensor x is ordered before every use of tensor y that conflicts with it (one of
  // the two writes: two reads of the same bytes need no order, as when a view and its input are read).
  bool Before(int x, int y) const {
    for (const Access& a : access_[x])
      for (const Access& b : access_[y])
        if ((a.write || b.write) && !Ordered(a.task, b.task)) return false;
    return true;
  }
  bool Written(int x) const {
    return std::any_of(access_[x].begin(), access_[x].end(), [](const Access& a) { return a.write; });
  }
  std::string NameTask(TaskRef t) const {
    const graph::TaskDef& d = streams_[t.stream].tasks[t.index];
    return fmt::format("stream {} task {} ({} {})", t.stream, t.index, graph::TaskTypeName(d.type), d.node);
  }
  std::string TensorName(int i) const { return fmt::format("{}:{}", tensors_[i].node, tensors_[i].output); }
  Status Conflict(Segment seg, int a, int b) const {
    const graph::TensorPlacement& x = tensors_[a];
    const graph::TensorPlacement& y = tensors_[b];
    return Status::Internal("tensors {} ({}+{}, {} bytes) and {} ({}+{}, {} bytes) share bytes but their uses are not "
                            "ordered",
                            TensorName(a), graph::SegmentName(seg), x.ref.offset, x.bytes, TensorName(b),
                            graph::SegmentName(seg), y.ref.offset, y.bytes);
  }

  const graph::CompiledModel& model_;
  const std::vector<graph::StreamDef>& streams_;
  const std::vector<graph::TensorPlacement>& tensors_;
  const int S_;
  std::vector<std::vector<std::vector<int>>> clock_;  // [s][i]: what task i of stream s knows has finished
  std::map<std::pair<std::string, int>, int> tensor_of_;
  std::map<std::pair<int, std::uint64_t>, std::vector<int>> at_ref_;  // (segment, offset) -> tensors placed there
  std::vector<std::vector<Access>> access_;                           // per tensor: who touches it
};

// Replay records and waits: clock[s][i] = what task i of stream s knows has finished.
Status PlanVerifier::ReplayEvents() {
  const int S = S_;
  clock_.assign(S, {});
  std::vector<std::size_t> next(S, 0);
  std::vector<std::vector<int>> at(S, std::vector<int>(S, 0));
  std::map<std::uint32_t, std::vector<int>> recorded;
  for (int s = 0; s < S; ++s) clock_[s].resize(streams_[s].tasks.size());
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < S; ++s) {
      while (next[s] < streams_[s].tasks.size()) {
        const graph::TaskDef& t = streams_[s].tasks[next[s]];
        if (t.type == graph::TaskType::kEventWait) {
          auto it = recorded.find(t.event);
          if (it == recorded.end()) break;
          for (int k = 0; k < S; ++k) at[s][k] = std::max(at[s][k], it->second[k]);
        }
        at[s][s] = static_cast<int>(next[s]) + 1;
        clock_[s][next[s]] = at[s];
        if (t.type == graph::TaskType::kEventRecord) recorded[t.event] = at[s];
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < S; ++s)
    if (next[s] < streams_[s].tasks.size())
      return Status::Internal("stream {} task {} waits for event {}, which no stream records before it", s, next[s],
                              streams_[s].tasks[next[s]].event);
  return Status::Ok();
}

Status PlanVerifier::IndexTensors() {
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const graph::TensorPlacement& t = tensors_[i];
    if (t.ref.offset + t.bytes > model_.memory.bytes(t.ref.segment))
      return Status::Internal("tensor {}:{} at {}+{} ({} bytes) ends past its segment ({} bytes)", t.node, t.output,
                              graph::SegmentName(t.ref.segment), t.ref.offset, t.bytes,
                              model_.memory.bytes(t.ref.segment));
    tensor_of_.emplace(std::make_pair(t.node, t.output), static_cast<int>(i));
  }
  return Status::Ok();
}

// Who touches each tensor. A kernel's arguments must be where the plan put its tensors (so a
// task that reads or writes anything else is caught); a copy touches the tensors placed exactly
// at its source and destination.
Status PlanVerifier::CollectAccesses() {
  for (std::size_t i = 0; i < tensors_.size(); ++i)
    at_ref_[{static_cast<int>(tensors_[i].ref.segment), tensors_[i].ref.offset}].push_back(static_cast<int>(i));
  access_.assign(tensors_.size(), {});
  for (int s = 0; s < S_; ++s) {
    for (std::size_t i = 0; i < streams_[s].tasks.size(); ++i) {
      const graph::TaskDef& t = streams_[s].tasks[i];
      const TaskRef ref{s, static_cast<int>(i)};
      if (t.type == graph::TaskType::kMemcpy) {
        for (auto [r, write] : {std::pair{t.src, false}, std::pair{t.dst, true}})
          if (auto it = at_ref_.find({static_cast<int>(r.segment), r.offset}); it != at_ref_.end())
            for (int k : it->second) access_[k].push_back({ref, write});
        continue;
      }
      if (t.type != graph::TaskType::kKernel && t.type != graph::TaskType::kAicpuKernel) continue;
      NPUFLOW_RETURN_IF_ERROR(CollectKernelAccesses(t, ref));
    }
  }
  return Status::Ok();
}

Status PlanVerifier::CollectKernelAccesses(const graph::TaskDef& t, TaskRef ref) {
  const graph::Node* node = model_.graph ? model_.graph->FindNode(t.node) : nullptr;
  if (node == nullptr) return Status::Internal("{} runs node '{}', which the graph lacks", NameTask(ref), t.node);
  const std::size_t nin = node->inputs().size(), nout = node->outputs().size();
  if (t.args.size() != nin + nout + 2)
    return Status::Internal("{} has {} arguments, node '{}' needs {} (inputs, outputs, workspace, params)",
                            NameTask(ref), t.args.size(), node->name(), nin + nout + 2);
  auto touch = [&](const std::string& producer, int output, std::size_t arg, bool write) -> Status {
    auto it = tensor_of_.find({producer, output});
    if (it == tensor_of_.end())
      return Status::Internal("{}: tensor {}:{} has no place in the memory plan", NameTask(ref), producer, output);
    if (!(t.args[arg] == tensors_[it->second].ref))
      return Status::Internal("{}: argument {} points at {}+{}, but tensor {}:{} is at {}+{}", NameTask(ref), arg,
                              graph::SegmentName(t.args[arg].segment), t.args[arg].offset, producer, output,
                              graph::SegmentName(tensors_[it->second].ref.segment), tensors_[it->second].ref.offset);
    access_[it->second].push_back({ref, write});
    return Status::Ok();
  };
  for (std::size_t k = 0; k < nin; ++k)
    NPUFLOW_RETURN_IF_ERROR(touch(node->inputs()[k].node->name(), node->inputs()[k].index, k, false));
  for (std::size_t o = 0; o < nout; ++o) NPUFLOW_RETURN_IF_ERROR(touch(node->name(), static_cast<int>(o), nin + o, true));
  if (t.args[nin + nout].segment != Segment::kNone)
    NPUFLOW_RETURN_IF_ERROR(touch(node->name(), kWorkspaceOutput, nin + nout, true));
  return Status::Ok();
}

Status PlanVerifier::CheckReadsAfterWrites() const {
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    for (const Access& w : access_[i]) {
      if (!w.write) continue;
      for (const Access& r : access_[i])
        if (!r.write && !Ordered(w.task, r.task))
          return Status::Internal("tensor {}: {} reads it without being ordered after its writer {}",
                                  TensorName(static_cast<int>(i)), NameTask(r.task), NameTask(w.task));
    }
  }
  return Status::Ok();
}

// Tensors that share bytes in a segment the device writes. Tensors at exactly the same bytes
// form a group: a valid plan orders them one after another by producer, so checking each with
// the next ones up to the next written one is enough (the order is transitive through a write;
// a view, only read, is skipped over); groups that partly overlap are checked pair by pair. A
// 100,000-node chain is then linear, not quadratic.
Status PlanVerifier::CheckSharedBytes(Segment seg) const {
  std::vector<int> list;
  for (std::size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].ref.segment == seg && tensors_[i].bytes > 0 && !access_[i].empty())
      list.push_back(static_cast<int>(i));
  std::sort(list.begin(), list.end(), [&](int a, int b) {
    const auto& x = tensors_[a];
    const auto& y = tensors_[b];
    return std::tie(x.ref.offset, x.bytes, x.first_use, a) < std::tie(y.ref.offset, y.bytes, y.first_use, b);
  });
  struct Group {
    std::uint64_t offset, bytes;
    std::size_t begin, end;  // in `list`
  };
  std::vector<Group> groups;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto& t = tensors_[list[i]];
    if (groups.empty() || groups.back().offset != t.ref.offset || groups.back().bytes != t.bytes)
      groups.push_back({t.ref.offset, t.bytes, i, i});
    groups.back().end = i + 1;
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    // Each with the next ones up to the first that is written: a view is only read, so the order
    // through it says nothing about its neighbours' accesses to each other.
    for (std::size_t i = groups[g].begin; i + 1 < groups[g].end; ++i)
      for (std::size_t j = i + 1; j < groups[g].end; ++j) {
        if (!Before(list[i], list[j])) return Conflict(seg, list[i], list[j]);
        if (Written(list[j])) break;
      }
    for (std::size_t h = g + 1; h < groups.size() && groups[h].offset < groups[g].offset + groups[g].bytes; ++h)
      for (std::size_t i = groups[g].begin; i < groups[g].end; ++i)
        for (std::size_t j = groups[h].begin; j < groups[h].end; ++j)
          if (!Before(list[i], list[j]) && !Before(list[j], list[i])) return Conflict(seg, list[i], list[j]);
  }
  return Status::Ok();
}

}  // namespace

Status VerifyMemoryPlan(const graph::CompiledModel& model) {
  PlanVerifier verifier(model);
  NPUFLOW_RETURN_IF_ERROR(verifier.ReplayEvents());
  NPUFLOW_RETURN_IF_ERROR(verifier.IndexTensors());
  NPUFLOW_RETURN_IF_ERROR(verifier.CollectAccesses());
  NPUFLOW_RETURN_IF_ERROR(verifier.CheckReadsAfterWrites());
  for (Segment seg :
       {Segment::kFeatureMap, Segment::kFixedFeatureMap, Segment::kVariables, Segment::kInput, Segment::kOutput})
    NPUFLOW_RETURN_IF_ERROR(verifier.CheckSharedBytes(seg));
  return Status::Ok();
}

}  // namespace npuflow::lowering
