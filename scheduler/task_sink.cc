// DoTaskSink: per execution instance, BindModelStream, InitTaskInfo (TaskDef -> npu_sim::Task with
// resolved addresses and weight gates) and DistributeTask (each stream's list sent once).
#include "scheduler/davinci_model.h"

#include <algorithm>

#include "graph/ops/tiling_context.h"

namespace npuflow::scheduler {
namespace {

using graph::MemRef;
using graph::Segment;

}  // namespace

Status DavinciModel::DoTaskSink() {
  for (auto& inst : instances_) {
    NPUFLOW_RETURN_IF_ERROR(BindModelStream(*inst));
    TaskPositions moved;
    NPUFLOW_RETURN_IF_ERROR(InitTaskInfo(*inst, moved));
    NPUFLOW_RETURN_IF_ERROR(DistributeTask(*inst, moved));
  }
  return Status::Ok();
}

// The instance's device model, execution stream and events, and one stream bound per model stream.
Status DavinciModel::BindModelStream(Instance& inst) {
  const int device = config_.device;
  NPUFLOW_ASSIGN_OR_RETURN(inst.model, rt_->CreateModel(device));
  inst.has_model = true;
  NPUFLOW_ASSIGN_OR_RETURN(inst.exec_stream, rt_->CreateStream(device));
  for (std::uint32_t e = 0; e < model_->event_count; ++e) {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Event ev, rt_->CreateEvent(device));
    inst.events.push_back(ev);
  }
  for (std::size_t s = 0; s < model_->streams.size(); ++s) {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Stream stream, rt_->CreateStream(device));
    inst.streams.push_back(stream);
    NPUFLOW_RETURN_IF_ERROR(rt_->BindStream(inst.model, stream));
  }
  return Status::Ok();
}

// Each TaskDef becomes a device task with resolved addresses; `moved` records where each landed.
Status DavinciModel::InitTaskInfo(Instance& inst, TaskPositions& moved) {
  const CompiledModel& m = *model_;
  inst.lists.assign(m.streams.size(), {});
  inst.tiling_sink.clear();
  inst.gates.assign(m.streams.size(), {});
  moved.assign(m.streams.size(), {});
  std::size_t first_kernel = 0;  // kernels_ is flat over (stream, task)
  for (std::size_t s = 0; s < m.streams.size(); ++s) {
    NPUFLOW_RETURN_IF_ERROR(InitStreamTasks(inst, s, first_kernel, moved[s]));
    first_kernel += m.streams[s].tasks.size();
  }
  return Status::Ok();
}

Status DavinciModel::InitStreamTasks(Instance& inst, std::size_t s, std::size_t first_kernel,
                                     std::vector<std::uint32_t>& moved) {
  const std::vector<graph::TaskDef>& defs = model_->streams[s].tasks;
  std::vector<npu_sim::Task>& tasks = inst.lists[s];
  tasks.reserve(defs.size());
  // The first task on this stream that reads an external weight region waits on its latch.
  std::vector<char> waited(file_constants_.size(), 0);
  auto gate = [&](const MemRef& r) {
    if (r.segment != Segment::kFileConstant) return;
    const int slot = FileConstantSlotOf(r.offset);
    if (slot < 0 || waited[static_cast<std::size_t>(slot)]) return;
    waited[static_cast<std::size_t>(slot)] = 1;
    const FileConstantSlot& fc = file_constants_[static_cast<std::size_t>(slot)];
    if (!fc.ready) return;
    inst.gates[s].push_back(static_cast<std::uint32_t>(tasks.size()));
    tasks.push_back(npu_sim::Task::Wait(fc.ready->id));
    tasks.back().name = "weights ready: " + fc.node;
  };
  moved.resize(defs.size());
  for (std::size_t ti = 0; ti < defs.size(); ++ti) {
    const graph::TaskDef& t = defs[ti];
    if (t.type == graph::TaskType::kKernel || t.type == graph::TaskType::kAicpuKernel)
      for (const MemRef& a : t.args) gate(a);
    else if (t.type == graph::TaskType::kMemcpy)
      gate(t.src);
    moved[ti] = static_cast<std::uint32_t>(tasks.size());
    NPUFLOW_RETURN_IF_ERROR(RecordTilingSinkTask(inst, s, t, moved[ti]));
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Task task, TaskOf(inst, t, kernels_[first_kernel + ti]));
    tasks.push_back(std::move(task));
  }
  return Status::Ok();
}

// A kernel with the placeholder block_dim, and the AICPU tiling task that reads its context: what
// the task update of the same node will name.
Status DavinciModel::RecordTilingSinkTask(Instance& inst, std::size_t s, const graph::TaskDef& t,
                                          std::uint32_t position) const {
  const bool kernel = t.type == graph::TaskType::kKernel && t.block_dim == graph::kTilingSinkBlockDim;
  const bool tiling = t.type == graph::TaskType::kAicpuKernel && t.kernel == graph::kAicpuTilingKernel;
  if (!kernel && !tiling) return Status::Ok();
  auto it = std::find_if(inst.tiling_sink.begin(), inst.tiling_sink.end(),
                         [&](const Instance::TilingSinkTask& x) { return x.node == t.node; });
  if (it == inst.tiling_sink.end()) it = inst.tiling_sink.insert(it, Instance::TilingSinkTask{.node = t.node});
  if (kernel) {
    it->stream = s;
    it->task = position;
    it->kernel_seen = true;
  } else {
    if (t.args.empty())
      return Status::DataCorrupted("node '{}': the AICPU tiling task has no tiling context argument", t.node);
    NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t ctx, Resolve(inst, t.args[0]));
    it->context = npu_sim::DevicePtr{ctx};
  }
  return Status::Ok();
}

StatusOr<npu_sim::Task> DavinciModel::TaskOf(const Instance& inst, const graph::TaskDef& t,
                                              const npu_sim::KernelDef* def) const {
  switch (t.type) {
    case graph::TaskType::kKernel:
    case graph::TaskType::kAicpuKernel: {
      std::vector<std::uint64_t> args;
      args.reserve(t.args.size());
      for (const MemRef& a : t.args) {
        NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t v, Resolve(inst, a));
        args.push_back(v);
      }
      npu_sim::Task k = npu_sim::Task::Kernel(def, t.block_dim, std::move(args), t.tiling_key);
      k.name = t.node;
      return k;
    }
    case graph::TaskType::kMemcpy: {
      npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kDeviceToDevice, t.bytes);
      NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t src, Resolve(inst, t.src));
      NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t dst, Resolve(inst, t.dst));
      c.src_dev = npu_sim::DevicePtr{src};
      c.dst_dev = npu_sim::DevicePtr{dst};
      c.name = t.node.empty() ? "memcpy" : t.node + ":copy";
      return c;
    }
    case graph::TaskType::kEventRecord: return npu_sim::Task::Record(inst.events[t.event].id);
    case graph::TaskType::kEventWait: return npu_sim::Task::Wait(inst.events[t.event].id);
    case graph::TaskType::kNop: break;
    case graph::TaskType::kTaskUpdate: {
      // rtModelTaskUpdate: the target kernel's stream and task id and the context's block_dim and
      // tiling-key words, all recorded when the kernel and the tiling task were distributed. The
      // context is the one whose words the update names: its node's own, or, for a node that
      // shares an earlier node's tiling (gen-tasks, "shared tiling"), that node's.
      auto it = std::find_if(inst.tiling_sink.begin(), inst.tiling_sink.end(),
                             [&](const Instance::TilingSinkTask& x) { return x.node == t.node; });
      if (it == inst.tiling_sink.end() || !it->kernel_seen)
        return Status::DataCorrupted(
            "node '{}': task update with no kernel task recorded for it (no kernel with block_dim 0xFFFFFFFF was "
            "distributed before the update; target stream {} task {})",
            t.node, t.target_stream, t.target_task);
      NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t words, Resolve(inst, t.block_dim_ref));
      NPUFLOW_ASSIGN_OR_RETURN(std::uint64_t key_word, Resolve(inst, t.tiling_key_ref));
      const npu_sim::DevicePtr context{words - graph::kTilingContextBlockDimOffset};
      // A node with its own AICPU tiling task reads that one's context; a node without one, a
      // context some other node's task writes.
      if (it->context && it->context != context)
        return Status::DataCorrupted(
            "node '{}': its task update reads the tiling context at {}, but its own AICPU tiling task writes the "
            "one at {}",
            t.node, npu_sim::ToString(context), npu_sim::ToString(it->context));
      const bool recorded =
          it->context || std::any_of(inst.tiling_sink.begin(), inst.tiling_sink.end(),
                                     [&](const Instance::TilingSinkTask& x) { return x.context && x.context == context; });
      if (!recorded || key_word != context.value + graph::kTilingContextTilingKeyOffset)
        return Status::DataCorrupted(
            "node '{}': task update with no tiling context recorded for it (no AICPU tiling task was distributed "
            "before the update for the context its words are in)",
            t.node);
      if (it->stream != t.target_stream)
        return Status::DataCorrupted("node '{}': the task update targets stream {}, its kernel is on stream {}",
                                     t.node, t.target_stream, it->stream);
      npu_sim::Task u = npu_sim::Task::Update(inst.streams[it->stream].id, it->task,
                                              context + graph::kTilingContextBlockDimOffset,
                                              context + graph::kTilingContextTilingKeyOffset);
      u.name = t.node + ":task_update";
      return u;
    }
  }
  return npu_sim::Task::Nop();
}

// Each stream gets its list once, with the zero-copy places; then the model is built.
Status DavinciModel::DistributeTask(Instance& inst, const TaskPositions& moved) {
  inst.patches = io_patches_;
  // Latch waits moved the tasks: patches name the new positions.
  for (std::size_t s = 0; s < inst.patches.size(); ++s)
    for (npu_sim::IoPatch& p : inst.patches[s]) p.task = moved[s][p.task];
  for (std::size_t s = 0; s < inst.lists.size(); ++s)
    NPUFLOW_RETURN_IF_ERROR(rt_->LoadTasks(inst.model, inst.streams[s], inst.lists[s], inst.patches[s]));
  return Status::Ok();
}

}  // namespace npuflow::scheduler
