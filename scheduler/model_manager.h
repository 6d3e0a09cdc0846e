// ModelManager: the process-wide registry of loaded models (seed 002, 2.3), and the runtime
// environment (the simulated devices) they live on.
//
//   ModelManager::Initialize({.chips = {"910B"}});   // GEInitialize: once per process
//   ModelManager& mm = *ModelManager::Get();
//   uint32_t id = mm.LoadModelOnline(compiled, {.device = 0}).value();
//   auto outs = mm.GetModel(id).value()->Execute(inputs);
//   ModelManager::Finalize();                          // GEFinalize: unloads everything
//
// Two registries are kept apart, as in the original: static-shape models (DavinciModel, task
// sink) and dynamic-shape models (run by the RT2.0 host executors, which register themselves
// through HybridModel). The v1 compiler only produces static models; loading a dynamic-shape
// model with no RT2.0 runtime present is Unsupported, naming the model.
//
// Loading checks the device's free memory, streams and events against what the model needs.
// When short it unloads loaded models of that device in least-recently-used order, skipping
// models with communication (HCCL-like) tasks, models in use and dynamic-shape models,
// re-checking after each. Still short is an error naming the resource and the shortfall.
//
// Weight sharing: models loaded from the same compiled model onto the same device with
// `share_weights` use one copy of the weights, freed with the last of them.
//
// Thread-safe, and fiber-friendly: the table, the sessions, the shared weights and the load lease
// (one load at a time) are the state of an actor (scheduler/model_table.h); these methods ask it,
// so a thread blocks and a fiber yields while it waits. A load's blocking work (recycling, Init)
// runs on the caller while it holds the lease.
#pragma once

#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/timer.h"
#include "npu_sim/runtime.h"
#include "scheduler/davinci_model.h"
#include "scheduler/model_table.h"
#include "weights/external_weight_manager.h"
#include "weights/weight_loader.h"

namespace npuflow::scheduler {

// A dynamic-shape model, run on the host by an RT2.0 executor.
class HybridModel {
 public:
  virtual ~HybridModel() = default;
  virtual Status Unload() = 0;
  virtual int device() const = 0;
};

struct ModelLoadOptions : LoadConfig {
  bool share_weights = false;
  std::string name;  // for messages
};

// What recycling did on a load (for tests and logs).
struct RecycleReport {
  std::vector<std::uint32_t> unloaded;  // in order
};

class ModelManager {
 public:
  static Status Initialize(npu_sim::RuntimeOptions options);
  // Unloads every model and destroys the devices. Ok when not initialized.
  static Status Finalize();
  // Initialize, body, Finalize (also when body fails): body's error if any, else Finalize's. An
  // error from Initialize gets `init_context` (e.g. the option that chose the chip).
  static Status RunInitialized(npu_sim::RuntimeOptions options, const std::function<Status()>& body,
                               std::string_view init_context = {});
  static ModelManager* Get();  // null unless initialized
  // Which Initialize made this manager (1, 2, ...): a session made under one never uses a later one.
  std::uint64_t generation() const { return generation_; }

  npu_sim::Runtime& runtime() { return *rt_; }
  DeadlineTimer& timer() { return timer_; }
  // External weights: the one WeightLoaderActor of the devices, a new ExternalWeightManager (one
  // per session), and the one models loaded without a session use.
  weights::WeightLoader& weight_loader() { return *weight_loader_; }
  std::shared_ptr<weights::ExternalWeightManager> NewExternalWeightManager() {
    return std::make_shared<weights::ExternalWeightManager>(rt_.get(), weight_loader_.get());
  }
  const std::shared_ptr<weights::ExternalWeightManager>& default_weight_manager() const { return weight_manager_; }

  // Online: from a compiled model in memory. The model is shared, never copied.
  StatusOr<std::uint32_t> LoadModelOnline(std::shared_ptr<const CompiledModel> model, const ModelLoadOptions& options,
                                          RecycleReport* report = nullptr);
  // Offline: from the bytes of an .om file; `source` names it in errors.
  StatusOr<std::uint32_t> LoadModelFromData(std::string_view om, const ModelLoadOptions& options,
                                            std::string source, RecycleReport* report = nullptr);
  Status Unload(std::uint32_t model_id);
  StatusOr<std::shared_ptr<DavinciModel>> GetModel(std::uint32_t model_id) const;
  bool IsLoaded(std::uint32_t model_id) const;
  std::vector<std::uint32_t> LoadedModels() const;

  StatusOr<std::uint32_t> RegisterHybridModel(std::shared_ptr<HybridModel> model);
  StatusOr<std::shared_ptr<HybridModel>> GetHybridModel(std::uint32_t model_id) const;

  // Session binding: the devices a session's models live on; unloading a session's models.
  void BindSession(std::uint64_t session_id, int device);
  std::set<int> SessionDevices(std::uint64_t session_id) const;
  Status DestroySession(std::uint64_t session_id);

  // Sync execution (GraphLoader::ExecuteModel / ModelManager::ExecuteModel -> NnExecute).
  Status ExecuteModel(std::uint32_t model_id, const ExecuteArgs& args);

  // Free resources of a device as the load check sees them: memory is
  // max(0, capacity * 0.95 - in use) (5% kept in reserve).
  ResourceNeeds Free(int device) const;

 private:
  explicit ModelManager(std::unique_ptr<npu_sim::Runtime> rt) : rt_(std::move(rt)) {}
  Status CheckAndRelease(int device, const ResourceNeeds& need, const std::string& name, RecycleReport* report);
  // Loads under a lease already granted (`ticket`); the caller ends the lease.
  StatusOr<std::shared_ptr<DavinciModel>> LoadUnderLease(const std::shared_ptr<const CompiledModel>& model,
                                                         const ModelLoadOptions& options, const std::string& name,
                                                         const table_msg::LoadTicket& ticket,
                                                         npu_sim::DevicePtr& created_shared, RecycleReport* report);

  std::unique_ptr<npu_sim::Runtime> rt_;
  // Destroyed after the models (declared later) and before the runtime (declared earlier).
  std::unique_ptr<weights::WeightLoader> weight_loader_;
  std::shared_ptr<weights::ExternalWeightManager> weight_manager_;
  DeadlineTimer timer_;
  std::uint64_t generation_ = 0;
  actors::Address<TableMsg> table_;  // ModelManagerActor: every loaded model and session
};

// GraphLoader: the loading facade (seed 002, 2.2): static functions over ModelManager::Get().
// Each fails with an error naming the missing environment when ModelManager is not initialized.
class GraphLoader {
 public:
  static StatusOr<std::uint32_t> LoadModelOnline(std::shared_ptr<const CompiledModel> model,
                                                 const ModelLoadOptions& options);
  static StatusOr<std::uint32_t> LoadModelFromData(std::string_view om, const ModelLoadOptions& options,
                                                   std::string source);
  static Status UnloadModel(std::uint32_t model_id);
  static Status ExecuteModel(std::uint32_t model_id, const ExecuteArgs& args);
};

}  // namespace npuflow::scheduler
