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
std::uint64_t g_generation = 0;  // under g_init_mu

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
  g_instance->generation_ = ++g_generation;
  g_instance->table_ = SpawnModelTable(g_instance->rt_->system());
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
  // A load in progress (it may be waiting for its weights) finishes before anything goes; later
  // loads fail.
  (void)g_instance->table_.Ask(table_msg::DrainLoads{}).Get();
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

    NPUFLOW_ASSIGN_OR_RETURN(table_msg::Victim v, table_.Ask<table_msg::Victim>(table_msg::PickVictim{device}).Get());
    std::shared_ptr<DavinciModel> victim = std::move(v.model);
    const std::size_t kept_comm = v.kept_comm, kept_busy = v.kept_busy;
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

  const bool share = options.share_weights && !options.const_memory_base;
  NPUFLOW_ASSIGN_OR_RETURN(table_msg::LoadTicket ticket,
                           table_.Ask<table_msg::LoadTicket>(table_msg::BeginLoad{model.get(), options.device, share}).Get());
  npu_sim::DevicePtr created_shared;
  StatusOr<std::shared_ptr<DavinciModel>> loaded =
      LoadUnderLease(model, options, name, ticket, created_shared, report);
  // The lease ends either way; a failed load's shared weights go if it was their last user.
  table_msg::EndLoad end{ticket.id, loaded.ok() ? *loaded : nullptr, created_shared, options.device,
                         options.session_id, share, model.get()};
  StatusOr<npu_sim::DevicePtr> to_free = table_.Ask<npu_sim::DevicePtr>(std::move(end)).Get();
  if (to_free.ok() && *to_free) (void)rt_->Free(options.device, *to_free);
  if (!loaded.ok()) return loaded.status();
  if (!to_free.ok()) return to_free.status();
  return ticket.id;
}

StatusOr<std::shared_ptr<DavinciModel>> ModelManager::LoadUnderLease(const std::shared_ptr<const CompiledModel>& model,
                                                                     const ModelLoadOptions& options,
                                                                     const std::string& name,
                                                                     const table_msg::LoadTicket& ticket,
                                                                     npu_sim::DevicePtr& created_shared,
                                                                     RecycleReport* report) {
  LoadConfig config = options;
  if (!config.weight_manager) config.weight_manager = weight_manager_;
  if (ticket.shared_weights) config.shared_weights = ticket.shared_weights;
  ResourceNeeds need = DavinciModel::Needs(*model, config);
  NPUFLOW_RETURN_IF_ERROR(CheckAndRelease(options.device, need, name, report));
  if (ticket.create_shared) {
    const std::uint64_t bytes = std::max<std::uint64_t>(model->memory.bytes(graph::Segment::kWeights), 1);
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr ptr,
                             rt_->Malloc(options.device, bytes, npu_sim::Placement::kHbm, "shared weights"));
    created_shared = ptr;
    if (!model->weights.empty())
      NPUFLOW_RETURN_IF_ERROR(rt_->MemcpyH2D(options.device, ptr, model->weights.data(), model->weights.size()));
    config.shared_weights = ptr;
  }
  auto davinci = std::make_shared<DavinciModel>(rt_.get(), ticket.id, model, config);
  if (Status s = davinci->Init(); !s.ok())
    return s.WithContext(fmt::format("loading model '{}' on device {}", name, options.device));
  return davinci;
}

StatusOr<std::uint32_t> ModelManager::LoadModelFromData(std::string_view om, const ModelLoadOptions& options,
                                                        std::string source, RecycleReport* report) {
  NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel model, graph::ParseModel(om, source));
  return LoadModelOnline(std::make_shared<const CompiledModel>(std::move(model)), options, report);
}

Status ModelManager::Unload(std::uint32_t model_id) {
  NPUFLOW_ASSIGN_OR_RETURN(table_msg::Taken taken, table_.Ask<table_msg::Taken>(table_msg::Take{model_id}).Get());
  if (taken.hybrid) return taken.hybrid->Unload();
  Status s = taken.model->Unload();
  if (taken.free_weights) {
    Status f = rt_->Free(taken.model->device(), taken.free_weights);
    if (s.ok()) s = f;
  }
  return s;
}

StatusOr<std::shared_ptr<DavinciModel>> ModelManager::GetModel(std::uint32_t model_id) const {
  return table_.Ask<std::shared_ptr<DavinciModel>>(table_msg::Get{model_id}).Get();
}

bool ModelManager::IsLoaded(std::uint32_t model_id) const {
  return GetModel(model_id).ok() || GetHybridModel(model_id).ok();
}

std::vector<std::uint32_t> ModelManager::LoadedModels() const {
  return table_.Ask<std::vector<std::uint32_t>>(table_msg::List{}).Get().value_or(std::vector<std::uint32_t>{});
}

StatusOr<std::uint32_t> ModelManager::RegisterHybridModel(std::shared_ptr<HybridModel> model) {
  if (model == nullptr) return Status::ParamInvalid("RegisterHybridModel: no model");
  return table_.Ask<std::uint32_t>(table_msg::RegisterHybrid{std::move(model)}).Get();
}

StatusOr<std::shared_ptr<HybridModel>> ModelManager::GetHybridModel(std::uint32_t model_id) const {
  return table_.Ask<std::shared_ptr<HybridModel>>(table_msg::GetHybrid{model_id}).Get();
}

void ModelManager::BindSession(std::uint64_t session_id, int device) {
  (void)table_.Ask(table_msg::BindSession{session_id, device}).Get();
}

std::set<int> ModelManager::SessionDevices(std::uint64_t session_id) const {
  return table_.Ask<std::set<int>>(table_msg::SessionDevices{session_id}).Get().value_or(std::set<int>{});
}

Status ModelManager::DestroySession(std::uint64_t session_id) {
  NPUFLOW_ASSIGN_OR_RETURN(std::set<std::uint32_t> ids,
                           table_.Ask<std::set<std::uint32_t>>(table_msg::TakeSession{session_id}).Get());
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
