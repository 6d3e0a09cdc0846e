#include "scheduler/session.h"

#include <atomic>
#include <charconv>

#include <fmt/format.h>

#include "actors/wait_mutex.h"
#include "graph/ir/text_format.h"
#include "lowering/compiler.h"
#include "weights/convert.h"
#include "weights/weight_dir.h"

namespace npuflow::scheduler {
namespace {

std::atomic<std::uint64_t> g_next_session{1};

constexpr const char* kKnownOptions =
    "ge.exec.deviceId, ge.socVersion, ge.enableSingleStream, ge.streamMaxParallelNum, npuflow.executionStreams, "
    "npuflow.executeTimeoutMs, ge.externalWeight, ge.externalWeightDir, ge.exec.value_bins, npuflow.verifyWeights, "
    "npuflow.weightKey, npuflow.weightPath, npuflow.modelDir";

StatusOr<std::int64_t> ParseInt(const std::string& name, const std::string& value, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || ptr != end || v < lo || v > hi)
    return Status::ParamInvalid("option {}='{}': expected an integer from {} to {}", name, value, lo, hi);
  return v;
}

}  // namespace

StatusOr<GraphOptions> ParseGraphOptions(const Options& options, const GraphOptions& base) {
  GraphOptions o = base;
  for (const auto& [name, value] : options) {
    if (name == "ge.exec.deviceId") {
      NPUFLOW_ASSIGN_OR_RETURN(std::int64_t v, ParseInt(name, value, 0, 63));
      o.device = static_cast<int>(v);
    } else if (name == "ge.socVersion") {
      auto chip = npu_sim::LoadChipSpec(value);
      if (!chip.ok()) return Status::ParamInvalid("option {}='{}': {}", name, value, chip.status().message());
      o.chip = value;
    } else if (name == "ge.enableSingleStream") {
      if (value != "true" && value != "false")
        return Status::ParamInvalid("option {}='{}': expected true or false", name, value);
      o.single_stream = value == "true";
    } else if (name == "ge.streamMaxParallelNum") {
      NPUFLOW_ASSIGN_OR_RETURN(std::int64_t v, ParseInt(name, value, 1, 64));
      o.max_parallel = static_cast<int>(v);
    } else if (name == "npuflow.executionStreams") {
      NPUFLOW_ASSIGN_OR_RETURN(std::int64_t v, ParseInt(name, value, 1, 64));
      o.execution_streams = static_cast<int>(v);
    } else if (name == "npuflow.executeTimeoutMs") {
      NPUFLOW_ASSIGN_OR_RETURN(std::int64_t v, ParseInt(name, value, 0, 24LL * 3600 * 1000));
      o.timeout = v == 0 ? npu_sim::Timeout{} : npu_sim::Timeout{std::chrono::milliseconds(v)};
    } else if (name == "ge.externalWeight") {
      NPUFLOW_RETURN_IF_ERROR(weights::ParseExternalWeightMode(value, name).status());
      o.external_weight = value;
    } else if (name == "ge.externalWeightDir") {
      o.external_weight_dir = value;
    } else if (name == "ge.exec.value_bins") {
      NPUFLOW_RETURN_IF_ERROR(weights::ParseValueBins(value).status().WithContext("option ge.exec.value_bins"));
      o.value_bins = value;
    } else if (name == "npuflow.verifyWeights") {
      if (value != "true" && value != "false")
        return Status::ParamInvalid("option {}='{}': expected true or false", name, value);
      o.verify_weights = value == "true";
    } else if (name == "npuflow.weightKey") {
      auto key = ParseAesKey(value);
      if (!key.ok()) return Status::ParamInvalid("option {}: {}", name, key.status().message());
      o.weight_key = *key;
    } else if (name == "npuflow.weightPath") {
      o.weight_path = value;
    } else if (name == "npuflow.modelDir") {
      o.model_dir = value;
    } else {
      return Status::ParamInvalid("unknown option '{}' (known: {})", name, kKnownOptions);
    }
  }
  return o;
}

struct Session::GraphNode {
  std::uint32_t id = 0;
  GraphOptions options;
  actors::WaitMutex mu;  // build and load, one at a time (a waiting fiber yields)
  std::unique_ptr<graph::ComputeGraph> graph;  // until built
  std::shared_ptr<const CompiledModel> compiled;
  std::optional<std::uint32_t> model_id;
  std::shared_ptr<DavinciModel> model;  // the loaded model while it is loaded (no table lookup per run)
  std::unique_ptr<RunLoop> loop;
  npu_sim::DevicePtr const_base, feature_base;
  std::uint64_t const_size = 0, feature_size = 0;
};

StatusOr<std::unique_ptr<Session>> Session::Create(const Options& options) {
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr) return Status::Failed("Session: ModelManager is not initialized (call ModelManager::Initialize)");
  NPUFLOW_ASSIGN_OR_RETURN(GraphOptions parsed, ParseGraphOptions(options));
  NPUFLOW_RETURN_IF_ERROR(mm->runtime().chip(parsed.device).status());
  std::unique_ptr<Session> s(new Session(g_next_session.fetch_add(1), parsed));
  s->weight_manager_ = mm->NewExternalWeightManager();
  mm->BindSession(s->id_, parsed.device);
  return s;
}

Session::~Session() { (void)Finalize(); }

StatusOr<std::shared_ptr<Session::GraphNode>> Session::Find(std::uint32_t graph_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (finalized_) return Status::Failed("session {} is finalized", id_);
  auto it = graphs_.find(graph_id);
  if (it == graphs_.end()) return Status::NotFound("session {}: graph {} does not exist", id_, graph_id);
  return it->second;
}

Status Session::Insert(std::uint32_t graph_id, std::shared_ptr<GraphNode> node) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finalized_) return Status::Failed("session {} is finalized", id_);
  if (!graphs_.emplace(graph_id, std::move(node)).second)
    return Status::ParamInvalid("session {}: graph id {} is already in use", id_, graph_id);
  return Status::Ok();
}

Status Session::AddGraph(std::uint32_t graph_id, std::unique_ptr<graph::ComputeGraph> graph, const Options& options) {
  if (graph == nullptr) return Status::ParamInvalid("session {}: AddGraph {}: no graph", id_, graph_id);
  auto node = std::make_shared<GraphNode>();
  NPUFLOW_ASSIGN_OR_RETURN(node->options, ParseGraphOptions(options, options_));
  node->id = graph_id;
  node->graph = std::move(graph);
  return Insert(graph_id, std::move(node));
}

Status Session::AddCompiledModel(std::uint32_t graph_id, std::shared_ptr<const CompiledModel> model,
                                 const Options& options) {
  if (model == nullptr) return Status::ParamInvalid("session {}: AddCompiledModel {}: no model", id_, graph_id);
  auto node = std::make_shared<GraphNode>();
  NPUFLOW_ASSIGN_OR_RETURN(node->options, ParseGraphOptions(options, options_));
  node->id = graph_id;
  node->compiled = std::move(model);
  return Insert(graph_id, std::move(node));
}

Status Session::Build(GraphNode& node) {
  if (node.compiled) return Status::Ok();
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr) return Status::Failed("session {}: ModelManager is finalized", id_);
  lowering::CompileOptions co;
  if (!node.options.chip.empty()) {
    co.chip = node.options.chip;
  } else {
    NPUFLOW_ASSIGN_OR_RETURN(const npu_sim::ChipSpec* chip, mm->runtime().chip(node.options.device));
    co.chip = chip->name;
  }
  co.stream_mode = node.options.single_stream ? graph::CompileOptions::StreamMode::kSingle
                                              : graph::CompileOptions::StreamMode::kMulti;
  co.max_parallel = node.options.max_parallel;
  co.external_weight = node.options.external_weight;
  co.value_bins = node.options.value_bins;
  co.model_name = node.graph->name();
  if (co.external_weight == "1" || co.external_weight == "2") {
    if (!node.options.external_weight_dir.empty()) {
      co.external_weight_dir = node.options.external_weight_dir;
    } else {
      co.external_weight_dir = weights::ResolveWeightDir("", id_);
      std::lock_guard<std::mutex> lock(mu_);
      temporary_weight_dir_ = co.external_weight_dir;
    }
  }
  // The graph is kept if compilation fails, so the user can see the error and remove it.
  auto copy = graph::ParseGraphText(graph::PrintGraphText(*node.graph), node.graph->name());
  if (!copy.ok()) return copy.status().WithContext(fmt::format("session {} graph {}", id_, node.id));
  auto compiled = lowering::CompileV1(std::move(*copy), co);
  if (!compiled.ok()) return compiled.status().WithContext(fmt::format("session {}: building graph {}", id_, node.id));
  node.compiled = std::make_shared<const CompiledModel>(std::move(*compiled));
  node.graph.reset();
  return Status::Ok();
}

Status Session::BuildGraph(std::uint32_t graph_id) {
  NPUFLOW_ASSIGN_OR_RETURN(auto node, Find(graph_id));
  std::lock_guard<actors::WaitMutex> lock(node->mu);
  return Build(*node);
}

StatusOr<std::shared_ptr<DavinciModel>> Session::EnsureLoaded(GraphNode& node) {
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr) return Status::Failed("session {}: ModelManager is finalized", id_);
  if (node.model_id) {
    if (node.model != nullptr && !node.model->unloaded()) return node.model;
    // Unloaded meanwhile (resource recycling): its Run loop went with it; load again.
    node.model_id.reset();
    node.model.reset();
    if (node.loop) {
      (void)node.loop->Stop();
      node.loop.reset();
    }
  }
  NPUFLOW_RETURN_IF_ERROR(Build(node));
  ModelLoadOptions lo;
  lo.device = node.options.device;
  lo.session_id = id_;
  lo.instances = node.options.execution_streams;
  lo.feature_memory_base = node.feature_base;
  lo.feature_memory_size = node.feature_size;
  lo.const_memory_base = node.const_base;
  lo.const_memory_size = node.const_size;
  lo.verify_weights = node.options.verify_weights;
  lo.weight_key = node.options.weight_key;
  lo.weight_path = node.options.weight_path;
  lo.model_dir = node.options.model_dir;
  lo.weight_manager = weight_manager_;
  const std::string graph_name = node.compiled->graph ? node.compiled->graph->name() : std::string("?");
  lo.name = fmt::format("{} (session {} graph {})", graph_name, id_, node.id);
  NPUFLOW_ASSIGN_OR_RETURN(std::uint32_t id, mm->LoadModelOnline(node.compiled, lo));
  node.model_id = id;
  NPUFLOW_ASSIGN_OR_RETURN(node.model, mm->GetModel(id));
  return node.model;
}

Status Session::LoadGraph(std::uint32_t graph_id) {
  NPUFLOW_ASSIGN_OR_RETURN(auto node, Find(graph_id));
  std::lock_guard<actors::WaitMutex> lock(node->mu);
  return EnsureLoaded(*node).status();
}

StatusOr<std::vector<Tensor>> Session::RunGraph(std::uint32_t graph_id, const std::vector<Tensor>& inputs) {
  NPUFLOW_ASSIGN_OR_RETURN(auto node, Find(graph_id));
  std::shared_ptr<DavinciModel> model;
  {
    std::lock_guard<actors::WaitMutex> lock(node->mu);
    NPUFLOW_ASSIGN_OR_RETURN(model, EnsureLoaded(*node));
  }
  const CompiledModel& m = model->compiled();
  if (inputs.size() != m.inputs.size())
    return Status::ParamInvalid("session {} graph {}: {} inputs given, the graph takes {}", id_, graph_id,
                                inputs.size(), m.inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!(inputs[i].desc == m.inputs[i].desc) || inputs[i].data.size() != m.inputs[i].desc.bytes().value_or(0))
      return Status::ParamInvalid("session {} graph {}: input '{}' takes {} ({} bytes), got {} ({} bytes)", id_,
                                  graph_id, m.inputs[i].name, m.inputs[i].desc.ToString(),
                                  m.inputs[i].desc.bytes().value_or(0), inputs[i].desc.ToString(),
                                  inputs[i].data.size());
  }
  return model->Execute(inputs, node->options.timeout);
}

Status Session::RunGraphAsync(std::uint32_t graph_id, std::vector<Tensor> inputs, RunCallback done) {
  if (!done) return Status::ParamInvalid("session {}: RunGraphAsync without a callback", id_);
  NPUFLOW_ASSIGN_OR_RETURN(auto node, Find(graph_id));
  std::lock_guard<actors::WaitMutex> lock(node->mu);
  NPUFLOW_ASSIGN_OR_RETURN(auto model, EnsureLoaded(*node));
  if (!node->loop) {
    NPUFLOW_ASSIGN_OR_RETURN(node->loop, RunLoop::Start(model, node->options.timeout));
  }
  return node->loop->Push(std::move(inputs), std::move(done));
}

Status Session::RunGraphWithStreamAsync(std::uint32_t graph_id, npu_sim::Stream stream,
                                        const std::vector<DeviceTensor>& inputs,
                                        const std::vector<DeviceTensor>& outputs) {
  NPUFLOW_ASSIGN_OR_RETURN(auto node, Find(graph_id));
  std::shared_ptr<DavinciModel> model;
  {
    std::lock_guard<actors::WaitMutex> lock(node->mu);
    NPUFLOW_ASSIGN_OR_RETURN(model, EnsureLoaded(*node));
  }
  const CompiledModel& m = model->compiled();
  ExecuteArgs args;
  args.stream = stream;
  auto add = [&](const std::vector<DeviceTensor>& ts, const std::vector<graph::IoDef>& ios, const char* what,
                 std::vector<DataBuffer>& out) -> Status {
    if (ts.size() != ios.size())
      return Status::ParamInvalid("session {} graph {}: {} {}s given, the graph has {}", id_, graph_id, ts.size(), what,
                                  ios.size());
    for (std::size_t i = 0; i < ts.size(); ++i) {
      if (!(ts[i].desc == ios[i].desc))
        return Status::ParamInvalid("session {} graph {}: {} '{}' is {}, got {}", id_, graph_id, what, ios[i].name,
                                    ios[i].desc.ToString(), ts[i].desc.ToString());
      out.push_back(DataBuffer::Device(ts[i].ptr, ios[i].desc.bytes().value_or(0)));
    }
    return Status::Ok();
  };
  NPUFLOW_RETURN_IF_ERROR(add(inputs, m.inputs, "input", args.inputs));
  NPUFLOW_RETURN_IF_ERROR(add(outputs, m.outputs, "output", args.outputs));
  return model->NnExecute(args);
}

Status Session::ForkGraph(std::uint32_t origin_id, std::uint32_t fork_id) {
  NPUFLOW_ASSIGN_OR_RETURN(auto origin, Find(origin_id));
  std::shared_ptr<const CompiledModel> compiled;
  GraphOptions options;
  {
    std::lock_guard<actors::WaitMutex> lock(origin->mu);
    if (!origin->compiled)
      return Status::Failed("session {}: cannot fork graph {}: it is not built (BuildGraph it first)", id_, origin_id);
    compiled = origin->compiled;
    options = origin->options;
  }
  auto node = std::make_shared<GraphNode>();
  node->id = fork_id;
  node->options = options;
  node->compiled = std::move(compiled);  // shared compile-time state; loads on its own
  std::lock_guard<std::mutex> lock(mu_);
  if (finalized_) return Status::Failed("session {} is finalized", id_);
  if (!graphs_.emplace(fork_id, std::move(node)).second)
    return Status::ParamInvalid("session {}: cannot fork graph {} onto graph id {}: the id is in use", id_, origin_id,
                                fork_id);
  return Status::Ok();
}

namespace {
Status Release(Session::GraphNode& node) {
  Status first;
  if (node.loop) {
    first = node.loop->Stop();
    node.loop.reset();
  }
  if (node.model_id) {
    ModelManager* mm = ModelManager::Get();
    if (mm != nullptr) {
      Status s = mm->Unload(*node.model_id);
      if (first.ok() && !s.ok() && s.code() != StatusCode::kNotFound) first = s;
    }
    node.model_id.reset();
  }
  node.model.reset();
  return first;
}
}  // namespace

Status Session::RemoveGraph(std::uint32_t graph_id) {
  std::shared_ptr<GraphNode> node;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finalized_) return Status::Failed("session {} is finalized", id_);
    auto it = graphs_.find(graph_id);
    if (it == graphs_.end()) return Status::NotFound("session {}: graph {} does not exist", id_, graph_id);
    node = it->second;
    graphs_.erase(it);
  }
  std::lock_guard<actors::WaitMutex> lock(node->mu);
  return Release(*node);
}

Status Session::SetGraphConstMemoryBase(std::uint32_t graph_id, npu_sim::DevicePtr ptr, std::uint64_t size) {
  NPUFLOW_ASSIGN_OR_RETURN(auto node, Find(graph_id));
  std::lock_guard<actors::WaitMutex> lock(node->mu);
  if (!ptr || size == 0) return Status::ParamInvalid("session {} graph {}: const memory base is null or empty", id_, graph_id);
  if (node->model_id) return Status::ParamInvalid("session {} graph {}: is loaded; set its const memory before the first run", id_, graph_id);
  node->const_base = ptr;
  node->const_size = size;
  return Status::Ok();
}

Status Session::UpdateGraphFeatureMemoryBase(std::uint32_t graph_id, npu_sim::DevicePtr ptr, std::uint64_t size) {
  NPUFLOW_ASSIGN_OR_RETURN(auto node, Find(graph_id));
  std::lock_guard<actors::WaitMutex> lock(node->mu);
  if (!ptr || size == 0) return Status::ParamInvalid("session {} graph {}: feature memory base is null or empty", id_, graph_id);
  if (node->model_id) return Status::ParamInvalid("session {} graph {}: is loaded; set its feature memory before the first run", id_, graph_id);
  node->feature_base = ptr;
  node->feature_size = size;
  return Status::Ok();
}

Status Session::Finalize() {
  std::map<std::uint32_t, std::shared_ptr<GraphNode>> graphs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finalized_) return Status::Ok();
    finalized_ = true;
    graphs.swap(graphs_);
  }
  Status first;
  for (auto& [id, node] : graphs) {
    std::lock_guard<actors::WaitMutex> lock(node->mu);
    Status s = Release(*node);
    if (first.ok() && !s.ok()) first = s;
  }
  if (ModelManager* mm = ModelManager::Get()) {
    Status s = mm->DestroySession(id_);
    if (first.ok() && !s.ok()) first = s;
  }
  // The session's temporary weight directory goes with it; a user's directory never does.
  std::string tmp;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tmp.swap(temporary_weight_dir_);
  }
  if (!tmp.empty()) {
    Status s = weights::RemoveTemporaryWeightDir(tmp);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

StatusOr<std::shared_ptr<const CompiledModel>> Session::GetCompiledModel(std::uint32_t graph_id) const {
  NPUFLOW_ASSIGN_OR_RETURN(auto node, Find(graph_id));
  std::lock_guard<actors::WaitMutex> lock(node->mu);
  if (!node->compiled) return Status::Failed("session {}: graph {} is not built", id_, graph_id);
  return node->compiled;
}

StatusOr<std::vector<weights::ExternalWeightDesc>> Session::GetExternalWeightPaths(std::uint32_t graph_id) const {
  NPUFLOW_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledModel> model, GetCompiledModel(graph_id));
  if (!model->graph) return std::vector<weights::ExternalWeightDesc>{};
  return weights::ListExternalWeights(*model->graph);
}

StatusOr<std::shared_ptr<DavinciModel>> Session::GetLoadedModel(std::uint32_t graph_id) const {
  NPUFLOW_ASSIGN_OR_RETURN(auto node, Find(graph_id));
  std::optional<std::uint32_t> id;
  {
    std::lock_guard<actors::WaitMutex> lock(node->mu);
    id = node->model_id;
  }
  ModelManager* mm = ModelManager::Get();
  if (!id || mm == nullptr) return Status::NotFound("session {}: graph {} is not loaded", id_, graph_id);
  return mm->GetModel(*id);
}

}  // namespace npuflow::scheduler
