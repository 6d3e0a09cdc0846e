#include "scheduler/model_manager.h"

#include <algorithm>
#include <atomic>

#include <fmt/format.h>

#include "base/logging.h"
#include "graph/model_file/model_file.h"

namespace npuflow::scheduler {
namespace {

std::mutex g_init_mu;
std::unique_ptr<ModelManager> g_instance;
std::atomic<ModelManager*> g_current{nullptr};

std::string Describe(const ResourceNeeds& n) {
  return fmt::format("{} bytes of memory, {} streams, {} events", n.memory_bytes, n.streams, n.events);
}

}  // namespace

// ---- environment ---------------------------------------------------------------------------------
Status ModelManager::Initialize(npu_sim::RuntimeOptions options) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_instance) return Status::ParamInvalid("ModelManager is already initialized (call Finalize first)");
  NPUFLOW_ASSIGN_OR_RETURN(auto rt, npu_sim::Runtime::Create(std::move(options)));
  NPUFLOW_ASSIGN_OR_RETURN(auto loader, weights::WeightLoader::Create(rt.get()));
  g_instance.reset(new ModelManager(std::move(rt)));
  g_instance->weight_loader_ = std::move(loader);
  g_instance->weight_manager_ = g_instance->NewExternalWeightManager();
  g_current.store(g_instance.get());
  return Status::Ok();
}

Status ModelManager::RunInitialized(npu_sim::RuntimeOptions options, const std::function<Status()>& body,
                                    std::string_view init_context) {
  if (Status s = Initialize(std::move(options)); !s.ok()) return init_context.empty() ? s : s.WithContext(init_context);
  Status s = body();
  Status f = Finalize();
  return s.ok() ? f : s;
}

Status ModelManager::Finalize() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (!g_instance) return Status::Ok();
  g_current.store(nullptr);
  // A load in progress (it may be waiting for its weights) finishes before anything goes.
  { std::lock_guard<std::mutex> wait_for_loads(g_instance->load_mu_); }
  Status first;
  for (std::uint32_t id : g_instance->LoadedModels()) {
    Status s = g_instance->Unload(id);
    if (first.ok() && !s.ok()) first = s;
  }
  g_instance.reset();
  return first;
}

ModelManager* ModelManager::Get() { return g_current.load(); }

// ---- loading -------------------------------------------------------------------------------------
ResourceNeeds ModelManager::Free(int device) const {
  ResourceNeeds free;
  auto stats = rt_->Stats(device);
  auto chip = rt_->chip(device);
  if (!stats.ok() || !chip.ok()) return free;
  const double usable = 0.95 * static_cast<double>(stats->memory.capacity);
  const double left = usable - static_cast<double>(stats->memory.in_use);
  free.memory_bytes = left > 0 ? static_cast<std::uint64_t>(left) : 0;
  const auto max_streams = static_cast<std::size_t>((*chip)->max_streams);
  const auto max_events = static_cast<std::size_t>((*chip)->max_events);
  free.streams = stats->streams < max_streams ? max_streams - stats->streams : 0;
  free.events = stats->events < max_events ? max_events - stats->events : 0;
  return free;
}

// Seed 002, 3.5.1: while the device is short of what the model needs, unload the least recently
// used model that holds no communication tasks and is not in use, and check again.
Status ModelManager::CheckAndRelease(int device, const ResourceNeeds& need, const std::string& name,
                                     RecycleReport* report) {
  int unloaded = 0;
  for (;;) {
    const ResourceNeeds free = Free(device);
    const bool short_memory = need.memory_bytes > free.memory_bytes;
    const bool short_streams = need.streams > free.streams;
    const bool short_events = need.events > free.events;
    if (!short_memory && !short_streams && !short_events) return Status::Ok();

    std::shared_ptr<DavinciModel> victim;
    std::size_t kept_comm = 0, kept_busy = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, model] : model_map_) {
        if (model->device() != device) continue;
        if (model->has_communication_tasks()) {
          ++kept_comm;
          continue;
        }
        if (model->busy()) {
          ++kept_busy;
          continue;
        }
        if (!victim || model->last_used() < victim->last_used()) victim = model;
      }
    }
    if (!victim) {
      std::string what;
      auto add = [&](bool is_short, const char* resource, std::uint64_t needed, std::uint64_t available,
                     const char* unit) {
        if (!is_short) return;
        what += fmt::format("{}{} {} needed, {} free (short by {}{})", what.empty() ? "" : "; ", resource, needed,
                            available, needed - available, unit);
      };
      add(short_memory, "memory:", need.memory_bytes, free.memory_bytes, " bytes");
      add(short_streams, "streams:", need.streams, free.streams, "");
      add(short_events, "events:", need.events, free.events, "");
      return Status::MemoryAllocation(
          "device {}: cannot load model '{}': {} after unloading {} model(s); {} loaded model(s) hold communication "
          "tasks and {} are in use, and are never unloaded to make room",
          device, name, what, unloaded, kept_comm, kept_busy);
    }
    NPUFLOW_LOG_INFO(kScheduler, "device {}: unloading model {} (least recently used) to load '{}' (needs {})", device,
                     victim->id(), name, Describe(need));
    NPUFLOW_RETURN_IF_ERROR(Unload(victim->id()));
    ++unloaded;
    if (report) report->unloaded.push_back(victim->id());
  }
}

StatusOr<std::uint32_t> ModelManager::LoadModelOnline(std::shared_ptr<const CompiledModel> model,
                                                      const ModelLoadOptions& options, RecycleReport* report) {
  if (model == nullptr) return Status::ParamInvalid("LoadModelOnline: no model");
  const std::string name = !options.name.empty() ? options.name : model->graph ? model->graph->name() : "model";
  NPUFLOW_ASSIGN_OR_RETURN(const npu_sim::ChipSpec* chip, rt_->chip(options.device));
  if (chip->name != model->chip)
    return Status::ParamInvalid("model '{}' was compiled for {}, device {} is a {}", name, model->chip, options.device,
                                chip->name);
  // The hybrid (dynamic-shape) path belongs to the RT2.0 runtime.
  for (const auto* ios : {&model->inputs, &model->outputs})
    for (const graph::IoDef& io : *ios)
      if (!io.desc.shape.is_static())
        return Status::Unsupported(
            "model '{}' has a dynamic shape ('{}' is {}); dynamic-shape models run on the RT2.0 host executors, "
            "which npuflow does not have yet",
            name, io.name, io.desc.ToString());

  std::lock_guard<std::mutex> load_lock(load_mu_);
  LoadConfig config = options;
  if (!config.weight_manager) config.weight_manager = weight_manager_;
  std::uint32_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
  }
  // Weight sharing: the new model becomes a user of already loaded weights before anything is
  // unloaded to make room, so recycling their last other user cannot free them under it.
  const bool share = options.share_weights && !options.const_memory_base;
  const auto key = std::make_pair(model.get(), options.device);
  bool new_shared = false;
  if (share) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = weights_mem_ids_to_addr_info_.find(key);
    if (it != weights_mem_ids_to_addr_info_.end()) {
      config.shared_weights = it->second.ptr;
      it->second.users.insert(id);
    } else {
      new_shared = true;
    }
  }
  auto fail = [&](Status s) -> Status {
    if (share) {
      if (npu_sim::DevicePtr ptr = ReleaseSharedWeights(id)) (void)rt_->Free(options.device, ptr);
    }
    return s;
  };
  ResourceNeeds need = DavinciModel::Needs(*model, config);
  if (Status s = CheckAndRelease(options.device, need, name, report); !s.ok()) return fail(s);

  if (new_shared) {
    const std::uint64_t bytes = std::max<std::uint64_t>(model->memory.bytes(graph::Segment::kWeights), 1);
    auto ptr = rt_->Malloc(options.device, bytes, npu_sim::Placement::kHbm, "shared weights");
    if (!ptr.ok()) return ptr.status();
    if (!model->weights.empty()) {
      Status s = rt_->MemcpyH2D(options.device, *ptr, model->weights.data(), model->weights.size());
      if (!s.ok()) {
        (void)rt_->Free(options.device, *ptr);
        return s;
      }
    }
    config.shared_weights = *ptr;
    std::lock_guard<std::mutex> lock(mu_);
    SharedWeights& sw = weights_mem_ids_to_addr_info_[key];
    sw.ptr = *ptr;
    sw.users.insert(id);
  }

  auto davinci = std::make_shared<DavinciModel>(rt_.get(), id, model, config);
  if (Status s = davinci->Init(); !s.ok())
    return fail(s.WithContext(fmt::format("loading model '{}' on device {}", name, options.device)));
  std::lock_guard<std::mutex> lock(mu_);
  model_map_[id] = davinci;
  sess_id_to_device_ids_[options.session_id].insert(options.device);
  sess_id_to_models_[options.session_id].insert(id);
  return id;
}

// Drops `model_id` from the users of shared weights; returns them when it was the last user (the
// caller frees them), else null.
npu_sim::DevicePtr ModelManager::ReleaseSharedWeights(std::uint32_t model_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto sw = weights_mem_ids_to_addr_info_.begin(); sw != weights_mem_ids_to_addr_info_.end(); ++sw) {
    if (sw->second.users.erase(model_id) == 0) continue;
    if (!sw->second.users.empty()) return {};
    const npu_sim::DevicePtr ptr = sw->second.ptr;
    weights_mem_ids_to_addr_info_.erase(sw);
    return ptr;
  }
  return {};
}

StatusOr<std::uint32_t> ModelManager::LoadModelFromData(std::string_view om, const ModelLoadOptions& options,
                                                        std::string source, RecycleReport* report) {
  NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel model, graph::ParseModel(om, source));
  return LoadModelOnline(std::make_shared<const CompiledModel>(std::move(model)), options, report);
}

Status ModelManager::Unload(std::uint32_t model_id) {
  std::shared_ptr<DavinciModel> model;
  npu_sim::DevicePtr free_weights;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = model_map_.find(model_id);
    if (it == model_map_.end()) {
      auto hybrid = hybrid_model_map_.find(model_id);
      if (hybrid == hybrid_model_map_.end()) return Status::NotFound("no loaded model {}", model_id);
      auto h = hybrid->second;
      hybrid_model_map_.erase(hybrid);
      return h->Unload();
    }
    model = it->second;
    model_map_.erase(it);
    for (auto& [sess, ids] : sess_id_to_models_) ids.erase(model_id);
  }
  free_weights = ReleaseSharedWeights(model_id);
  Status s = model->Unload();
  if (free_weights) {
    Status f = rt_->Free(model->device(), free_weights);
    if (s.ok()) s = f;
  }
  return s;
}

StatusOr<std::shared_ptr<DavinciModel>> ModelManager::GetModel(std::uint32_t model_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = model_map_.find(model_id);
  if (it == model_map_.end()) return Status::NotFound("no loaded model {}", model_id);
  return it->second;
}

bool ModelManager::IsLoaded(std::uint32_t model_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_map_.count(model_id) > 0 || hybrid_model_map_.count(model_id) > 0;
}

std::vector<std::uint32_t> ModelManager::LoadedModels() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::uint32_t> ids;
  for (const auto& [id, m] : model_map_) ids.push_back(id);
  for (const auto& [id, m] : hybrid_model_map_) ids.push_back(id);
  return ids;
}

StatusOr<std::uint32_t> ModelManager::RegisterHybridModel(std::shared_ptr<HybridModel> model) {
  if (model == nullptr) return Status::ParamInvalid("RegisterHybridModel: no model");
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint32_t id = next_id_++;
  hybrid_model_map_[id] = std::move(model);
  return id;
}

StatusOr<std::shared_ptr<HybridModel>> ModelManager::GetHybridModel(std::uint32_t model_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hybrid_model_map_.find(model_id);
  if (it == hybrid_model_map_.end()) return Status::NotFound("no loaded dynamic-shape model {}", model_id);
  return it->second;
}

void ModelManager::BindSession(std::uint64_t session_id, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  sess_id_to_device_ids_[session_id].insert(device);
}

std::set<int> ModelManager::SessionDevices(std::uint64_t session_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sess_id_to_device_ids_.find(session_id);
  return it == sess_id_to_device_ids_.end() ? std::set<int>{} : it->second;
}

Status ModelManager::DestroySession(std::uint64_t session_id) {
  std::set<std::uint32_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sess_id_to_models_.find(session_id);
    if (it != sess_id_to_models_.end()) ids = it->second;
    sess_id_to_models_.erase(session_id);
    sess_id_to_device_ids_.erase(session_id);
  }
  Status first;
  for (std::uint32_t id : ids) {
    Status s = Unload(id);
    if (first.ok() && !s.ok() && s.code() != StatusCode::kNotFound) first = s;
  }
  return first;
}

Status ModelManager::ExecuteModel(std::uint32_t model_id, const ExecuteArgs& args) {
  NPUFLOW_ASSIGN_OR_RETURN(std::shared_ptr<DavinciModel> model, GetModel(model_id));
  return model->NnExecute(args);
}

// ---- GraphLoader ---------------------------------------------------------------------------------
namespace {
StatusOr<ModelManager*> Manager() {
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr) return Status::Failed("GraphLoader: ModelManager is not initialized (call ModelManager::Initialize)");
  return mm;
}
}  // namespace

StatusOr<std::uint32_t> GraphLoader::LoadModelOnline(std::shared_ptr<const CompiledModel> model,
                                                     const ModelLoadOptions& options) {
  NPUFLOW_ASSIGN_OR_RETURN(ModelManager * mm, Manager());
  return mm->LoadModelOnline(std::move(model), options);
}

StatusOr<std::uint32_t> GraphLoader::LoadModelFromData(std::string_view om, const ModelLoadOptions& options,
                                                       std::string source) {
  NPUFLOW_ASSIGN_OR_RETURN(ModelManager * mm, Manager());
  return mm->LoadModelFromData(om, options, std::move(source));
}

Status GraphLoader::UnloadModel(std::uint32_t model_id) {
  NPUFLOW_ASSIGN_OR_RETURN(ModelManager * mm, Manager());
  return mm->Unload(model_id);
}

Status GraphLoader::ExecuteModel(std::uint32_t model_id, const ExecuteArgs& args) {
  NPUFLOW_ASSIGN_OR_RETURN(ModelManager * mm, Manager());
  return mm->ExecuteModel(model_id, args);
}

}  // namespace npuflow::scheduler
