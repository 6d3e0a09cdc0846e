#include "graph/exe_graph/kernel_registry.h"

#include <utility>

namespace npuflow::exe {

void RunState::RecordError(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok()) {
    error_ = status.ok() ? Status::Internal("a kernel failed without saying why") : std::move(status);
  }
  failed_.store(true, std::memory_order_release);
}

Status RunState::TakeError() {
  std::lock_guard<std::mutex> lock(mu_);
  failed_.store(false, std::memory_order_release);
  return std::exchange(error_, Status());
}

std::string_view KernelTagName(KernelTag tag) {
  switch (tag) {
    case KernelTag::kNormal: return "normal";
    case KernelTag::kMemory: return "memory";
    case KernelTag::kLaunch: return "launch";
  }
  return "?";
}

KernelRegistry& KernelRegistry::Global() {
  static KernelRegistry registry;
  return registry;
}

void KernelRegistry::Register(KernelDef def) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  defs_.Register(std::move(def));
}

StatusOr<const KernelDef*> KernelRegistry::Find(std::string_view type) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (const KernelDef* def = defs_.Find(type)) return def;
  return Status::NotFound("no kernel '{}' is registered", type);
}

std::vector<std::string> KernelRegistry::Types() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return defs_.Names();
}

}  // namespace npuflow::exe
