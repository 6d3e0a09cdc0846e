#include "npu_sim/kernel.h"

#include <atomic>
#include <mutex>

#include "npu_sim/task.h"

namespace npuflow::npu_sim {

std::uint64_t NextKernelLaunch() {
  // Each thread takes the numbers in runs of 1,024 (the workers start kernels concurrently; one
  // shared counter bumped per kernel would move its cache line between them every time).
  constexpr std::uint64_t kRun = 1024;
  static std::atomic<std::uint64_t> next{1};
  thread_local std::uint64_t at = 0, end = 0;
  if (at == end) {
    at = next.fetch_add(kRun, std::memory_order_relaxed);
    end = at + kRun;
  }
  return at++;
}

LaunchMappings& ThisThreadLaunchMappings() {
  thread_local LaunchMappings mappings;
  return mappings;
}

std::string_view EngineName(Engine engine) { return engine == Engine::kAICore ? "AICore" : "AICPU"; }

KernelRegistry& KernelRegistry::Global() {
  static KernelRegistry registry;
  return registry;
}

StatusOr<const KernelDef*> KernelRegistry::Find(std::string_view name) const {
  if (const KernelDef* def = defs_.Find(name)) return def;
  return Status::NotFound("no device kernel named '{}' is registered", name);
}

std::string_view TaskKindName(TaskKind kind) {
  switch (kind) {
    case TaskKind::kKernel: return "kernel";
    case TaskKind::kAicpuKernel: return "aicpu_kernel";
    case TaskKind::kMemcpy: return "memcpy";
    case TaskKind::kEventRecord: return "event_record";
    case TaskKind::kEventWait: return "event_wait";
    case TaskKind::kNop: return "nop";
    case TaskKind::kTaskUpdate: return "task_update";
    case TaskKind::kModelExecute: return "model_execute";
  }
  return "unknown";
}

std::string_view CopyKindName(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice: return "H2D";
    case CopyKind::kDeviceToHost: return "D2H";
    case CopyKind::kDeviceToDevice: return "D2D";
    case CopyKind::kPeerToPeer: return "P2P";
  }
  return "unknown";
}

Task Task::Kernel(const KernelDef* def, std::uint32_t block_dim, std::vector<std::uint64_t> args,
                  std::uint64_t tiling_key) {
  Task t;
  t.kind = def != nullptr && def->engine == Engine::kAICpu ? TaskKind::kAicpuKernel : TaskKind::kKernel;
  t.kernel = def;
  t.block_dim = block_dim;
  t.args = std::move(args);
  t.tiling_key = tiling_key;
  if (def != nullptr) t.name = def->name;
  return t;
}

Task Task::Copy(CopyKind kind, std::uint64_t bytes) {
  Task t;
  t.kind = TaskKind::kMemcpy;
  t.copy = kind;
  t.bytes = bytes;
  return t;
}

Task Task::Record(EventId event) {
  Task t;
  t.kind = TaskKind::kEventRecord;
  t.event = event;
  return t;
}

Task Task::Wait(EventId event) {
  Task t;
  t.kind = TaskKind::kEventWait;
  t.event = event;
  return t;
}

Task Task::ModelExecute(std::uint32_t model, std::shared_ptr<const std::vector<std::uint64_t>> io) {
  Task t;
  t.kind = TaskKind::kModelExecute;
  t.model = model;
  t.io = std::move(io);
  return t;
}

Task Task::Update(StreamId target_stream, std::uint32_t target_task, DevicePtr block_dim_addr,
                  DevicePtr tiling_key_addr) {
  Task t;
  t.kind = TaskKind::kTaskUpdate;
  t.target_stream = target_stream;
  t.target_task = target_task;
  t.block_dim_addr = block_dim_addr;
  t.tiling_key_addr = tiling_key_addr;
  return t;
}

}  // namespace npuflow::npu_sim
