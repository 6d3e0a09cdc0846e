#include "scheduler/session.h"

#include <atomic>
#include <charconv>

#include <fmt/format.h>

#include "graph/ir/text_format.h"
#include "graph/ops/control_flow.h"
#include "lowering/compiler.h"
#include "lowering/graph_converter.h"
#include "lowering/partition_stages.h"
#include "lowering/tiling_sink.h"
#include "scheduler/session_actor.h"
#include "weights/convert.h"
#include "weights/weight_dir.h"

namespace npuflow::scheduler {
namespace {

std::atomic<std::uint64_t> g_next_session{1};

constexpr const char* kKnownOptions =
    "ge.exec.deviceId, ge.socVersion, ge.enableSingleStream, ge.streamMaxParallelNum, npuflow.executionStreams, "
    "npuflow.executeTimeoutMs, ge.externalWeight, ge.externalWeightDir, ge.exec.value_bins, npuflow.verifyWeights, "
    "npuflow.weightKey, npuflow.weightPath, npuflow.modelDir, npuflow.v2Executor, npuflow.v2Profile, "
    "ge.tiling_schedule_optimize, npuflow.tilingSinkShare, npuflow.runtime, npuflow.pipelineDevices";

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
    } else if (name == "npuflow.v2Executor") {
      NPUFLOW_RETURN_IF_ERROR(v2::ParseExecutorType(value).status().WithContext(fmt::format("option {}", name)));
      o.v2_executor = value;
    } else if (name == "ge.tiling_schedule_optimize") {
      NPUFLOW_RETURN_IF_ERROR(lowering::CheckTilingScheduleOptimize(value, "option ge.tiling_schedule_optimize"));
      o.tiling_schedule_optimize = value;
    } else if (name == "npuflow.tilingSinkShare") {
      if (value != "true" && value != "false")
        return Status::ParamInvalid("option {}='{}': expected true or false", name, value);
      o.tiling_sink_share = value == "true";
    } else if (name == "npuflow.runtime") {
      if (value != "auto" && value != "v1" && value != "v2")
        return Status::ParamInvalid("option {}='{}': expected auto, v1 (the task sink) or v2 (RT2.0)", name, value);
      o.runtime = value;
    } else if (name == "npuflow.pipelineDevices") {
      NPUFLOW_ASSIGN_OR_RETURN(std::int64_t v, ParseInt(name, value, 0, 64));
      o.pipeline_devices = static_cast<int>(v);
    } else if (name == "npuflow.v2Profile") {
      if (value != "true" && value != "false")
        return Status::ParamInvalid("option {}='{}': expected true or false", name, value);
      o.v2_profile = value == "true";
    } else {
      return Status::ParamInvalid("unknown option '{}' (known: {})", name, kKnownOptions);
    }
  }
  return o;
}

// ---- the session's actor --------------------------------------------------------------------------
namespace {
using session_msg::NodePtr;
using session_msg::Used;
}  // namespace

// Holds a graph's lease (or nothing, for a run of a loaded graph); gives it back when it goes.
class Session::Held {
 public:
  Held(actors::Address<SessionMsg> actor, Used used, bool leased)
      : actor_(actor), node_(std::move(used.node)), model_(std::move(used.model)), leased_(leased) {}
  Held(Held&& o) noexcept
      : actor_(o.actor_), node_(std::move(o.node_)), model_(std::move(o.model_)), leased_(std::exchange(o.leased_, false)) {}
  Held& operator=(Held&&) = delete;
  ~Held() { Release(); }
  void Release() {
    if (std::exchange(leased_, false)) actor_.Send(session_msg::Release{node_});
  }
  GraphNode& node() const { return *node_; }
  // The loaded model the actor found (no lease taken), or null.
  const std::shared_ptr<DavinciModel>& model() const { return model_; }

 private:
  actors::Address<SessionMsg> actor_;
  NodePtr node_;
  std::shared_ptr<DavinciModel> model_;
  bool leased_;
};

StatusOr<std::unique_ptr<Session>> Session::Create(const Options& options) {
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr) return Status::Failed("Session: ModelManager is not initialized (call ModelManager::Initialize)");
  NPUFLOW_ASSIGN_OR_RETURN(GraphOptions parsed, ParseGraphOptions(options));
  NPUFLOW_RETURN_IF_ERROR(mm->runtime().chip(parsed.device).status());
  const std::uint64_t id = g_next_session.fetch_add(1);
  std::unique_ptr<Session> s(new Session(id, parsed, weights::ResolveWeightDir("", id)));
  s->weight_manager_ = mm->NewExternalWeightManager();
  s->generation_ = mm->generation();
  s->actor_ = SpawnSessionActor(mm->runtime().system(), id);
  mm->BindSession(s->id_, parsed.device);
  return s;
}

Session::~Session() { (void)Finalize(); }

StatusOr<actors::Address<SessionMsg>> Session::Actor() const {
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr || mm->generation() != generation_)
    return Status::Failed("session {}: the ModelManager it was made under is finalized", id_);
  if (actor_retired_.load(std::memory_order_acquire)) return Status::Failed("session {} is finalized", id_);
  return actor_;
}

StatusOr<Session::Held> Session::Lease(std::uint32_t graph_id) const {
  NPUFLOW_ASSIGN_OR_RETURN(auto actor, Actor());
  NPUFLOW_ASSIGN_OR_RETURN(Used used, actor.Ask<Used>(session_msg::Use{graph_id, false}).Get());
  return Held(actor, std::move(used), true);
}

StatusOr<Session::Held> Session::LeaseNode(NodePtr node) const {
  NPUFLOW_ASSIGN_OR_RETURN(auto actor, Actor());
  NPUFLOW_ASSIGN_OR_RETURN(Used used, actor.Ask<Used>(session_msg::Lease{std::move(node)}).Get());
  return Held(actor, std::move(used), true);
}

StatusOr<Session::RunTarget> Session::TargetForRun(std::uint32_t graph_id, npu_sim::Timeout* timeout) {
  NPUFLOW_ASSIGN_OR_RETURN(auto actor, Actor());
  NPUFLOW_ASSIGN_OR_RETURN(Used used, actor.Ask<Used>(session_msg::Use{graph_id, true}).Get());
  if (timeout != nullptr) *timeout = used.node->options.timeout;  // options never change once added
  if (used.v2) return RunTarget{nullptr, std::move(used.v2), used.node->v2_reason};
  if (used.pipeline) return RunTarget{nullptr, nullptr, "it holds pipeline stages", std::move(used.pipeline)};
  const bool leased = used.model == nullptr;
  Held held(actor, std::move(used), leased);
  if (!leased) return RunTarget{held.model(), nullptr};
  NPUFLOW_RETURN_IF_ERROR(Build(held.node()));
  if (held.node().v2_graphs) {
    NPUFLOW_ASSIGN_OR_RETURN(auto v2, EnsureLoadedV2(held.node()));
    return RunTarget{nullptr, std::move(v2), held.node().v2_reason};
  }
  if (held.node().pipeline_root) {
    NPUFLOW_ASSIGN_OR_RETURN(auto pipeline, EnsureLoadedPipeline(held.node()));
    return RunTarget{nullptr, nullptr, "it holds pipeline stages", std::move(pipeline)};
  }
  NPUFLOW_ASSIGN_OR_RETURN(auto model, EnsureLoaded(held.node()));
  return RunTarget{std::move(model), nullptr};
}

StatusOr<std::shared_ptr<DavinciModel>> Session::ModelForRun(std::uint32_t graph_id, npu_sim::Timeout* timeout) {
  NPUFLOW_ASSIGN_OR_RETURN(RunTarget target, TargetForRun(graph_id, timeout));
  if (target.v2)
    return Status::Unsupported("session {} graph {} runs on RT2.0 ({}): use RunGraph", id_, graph_id, target.reason);
  if (target.pipeline)
    return Status::Unsupported("session {} graph {} runs on the pipeline executor ({}): use RunGraph", id_, graph_id,
                               target.reason);
  return std::move(target.v1);
}

Status Session::Insert(std::uint32_t graph_id, std::shared_ptr<GraphNode> node, std::string use) {
  NPUFLOW_ASSIGN_OR_RETURN(auto actor, Actor());
  return actor.Ask(session_msg::Insert{graph_id, std::move(node), std::move(use)}).Get();
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
  const bool v2_model = model->execute_graphs && model->streams.empty();  // npuflow compile --runtime v2
  if ((v2_model && node->options.runtime == "v1") || (!v2_model && node->options.runtime == "v2"))
    return Status::ParamInvalid("session {}: AddCompiledModel {}: option npuflow.runtime={} but the model was "
                                "compiled for {}",
                                id_, graph_id, node->options.runtime, v2_model ? "RT2.0 (v2)" : "the task sink (v1)");
  if (v2_model) {
    node->v2_graphs = model->execute_graphs;
    node->v2_reason = "an RT2.0 model";
    if (!model->executor.empty() && options.find("npuflow.v2Executor") == options.end())
      node->options.v2_executor = model->executor;
  }
  node->compiled = std::move(model);
  return Insert(graph_id, std::move(node));
}

Status Session::Build(GraphNode& node) {
  if (node.compiled || node.v2_graphs || node.pipeline_root) return Status::Ok();
  if (node.graph && lowering::HasPipelineStages(*node.graph)) {
    // GE's RtV2ExecutorFactory: a root holding stage-partitioned calls gets the pipeline executor,
    // which compiles each stage when it loads.
    node.pipeline_root = std::shared_ptr<const graph::ComputeGraph>(std::move(node.graph));
    return Status::Ok();
  }
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr) return Status::Failed("session {}: ModelManager is finalized", id_);
  lowering::CompileOptions co;
  if (!node.options.chip.empty()) {
    co.chip = node.options.chip;
  } else {
    NPUFLOW_ASSIGN_OR_RETURN(const npu_sim::ChipSpec* chip, mm->runtime().chip(node.options.device));
    co.chip = chip->LoadName();
  }
  co.stream_mode = node.options.single_stream ? graph::CompileOptions::StreamMode::kSingle
                                              : graph::CompileOptions::StreamMode::kMulti;
  co.max_parallel = node.options.max_parallel;
  co.external_weight = node.options.external_weight;
  co.value_bins = node.options.value_bins;
  co.tiling_schedule_optimize = node.options.tiling_schedule_optimize;
  co.tiling_sink_share = node.options.tiling_sink_share;
  co.online = true;  // the session's device is known: its chip's task-update support is a gate
  co.model_name = node.graph->name();
  if (co.external_weight == "1" || co.external_weight == "2") {
    if (!node.options.external_weight_dir.empty()) {
      co.external_weight_dir = node.options.external_weight_dir;
    } else {
      co.external_weight_dir = temporary_weight_dir_;
      temporary_weight_dir_used_.store(true);
    }
  }
  // The graph is kept if compilation fails, so the user can see the error and remove it.
  auto copy = graph::ParseGraphText(graph::PrintGraphText(*node.graph), node.graph->name());
  if (!copy.ok()) return copy.status().WithContext(fmt::format("session {} graph {}", id_, node.id));
  // GE's IsNeedHybridLoad (unknown dims; here also control flow), or a node forced dynamic by a
  // failed tiling-sink gate (its tiling needs a value known only at run time): RT2.0 runs it.
  const std::string context = fmt::format("session {}: building graph {}", id_, node.id);
  auto chip = npu_sim::LoadChipSpec(co.chip);
  if (!chip.ok()) return chip.status().WithContext(context);
  auto decisions = lowering::DecideTilingSink(**copy, co, *chip);
  if (!decisions.ok()) return decisions.status().WithContext(context);
  std::string reason;
  if (node.options.runtime == "v2") {
    reason = "npuflow.runtime=v2";
  } else if (node.options.runtime == "auto") {
    if (lowering::HasDynamicInputs(**copy)) {
      reason = "it has unknown dimensions";
    } else if (graph::HasControlFlow(**copy)) {
      reason = "it has control flow";
    } else {
      for (const graph::TilingSinkDecision& d : *decisions) {
        if (d.marked) continue;
        reason = fmt::format("node '{}' ({}) tiles from a value known only at run time and its tiling-sink gate '{}' "
                             "failed: {}; ge.tiling_schedule_optimize=1 keeps it on the task sink where the chip "
                             "allows, npuflow.runtime=v1 tiles it once for the worst case",
                             d.node, d.op_type, d.gate, d.why);
        break;
      }
    }
  }
  if (!reason.empty()) {
    node.v2_reason = reason;
    auto graphs = lowering::CompileV2(std::move(*copy), co);
    if (!graphs.ok()) return graphs.status().WithContext(fmt::format("session {}: building graph {} for RT2.0", id_, node.id));
    node.v2_graphs = std::make_shared<const exe::ExecuteGraphSet>(std::move(*graphs));
    node.graph.reset();
    return Status::Ok();
  }
  auto compiled = lowering::CompileV1(std::move(*copy), co);
  if (!compiled.ok()) return compiled.status().WithContext(fmt::format("session {}: building graph {}", id_, node.id));
  node.compiled = std::make_shared<const CompiledModel>(std::move(*compiled));
  node.graph.reset();
  return Status::Ok();
}

Status Session::BuildGraph(std::uint32_t graph_id) {
  NPUFLOW_ASSIGN_OR_RETURN(Held held, Lease(graph_id));
  return Build(held.node());
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

StatusOr<std::shared_ptr<PipelineExecutor>> Session::EnsureLoadedPipeline(GraphNode& node) {
  if (node.pipeline) return node.pipeline;
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr) return Status::Failed("session {}: ModelManager is finalized", id_);
  NPUFLOW_ASSIGN_OR_RETURN(auto calls, lowering::PipelineStages(*node.pipeline_root));
  const int k = static_cast<int>(calls.size());
  if (node.options.device != 0)
    return Status::Unsupported("session {} graph {}: a pipeline's stages start on device 0 (ge.exec.deviceId {})", id_,
                               node.id, node.options.device);
  PipelineOptions po;
  po.devices = node.options.pipeline_devices > 0 ? node.options.pipeline_devices
                                                 : std::max(1, std::min(k, mm->runtime().device_count()));
  po.max_in_flight = node.options.execution_streams;
  po.timeout = node.options.timeout;
  po.name = fmt::format("session {} graph {}", id_, node.id);
  if (!node.options.chip.empty()) {
    po.compile.chip = node.options.chip;
  } else {
    NPUFLOW_ASSIGN_OR_RETURN(const npu_sim::ChipSpec* chip, mm->runtime().chip(0));
    po.compile.chip = chip->LoadName();
  }
  po.compile.stream_mode = node.options.single_stream ? graph::CompileOptions::StreamMode::kSingle
                                                      : graph::CompileOptions::StreamMode::kMulti;
  po.compile.max_parallel = node.options.max_parallel;
  po.compile.tiling_schedule_optimize = node.options.tiling_schedule_optimize;
  auto loaded = PipelineExecutor::Create(*node.pipeline_root, std::move(po));
  if (!loaded.ok()) return loaded.status().WithContext(fmt::format("session {}: loading graph {}", id_, node.id));
  node.pipeline = std::shared_ptr<PipelineExecutor>(std::move(*loaded));
  return node.pipeline;
}

StatusOr<std::shared_ptr<v2::RtV2SimpleExecutor>> Session::EnsureLoadedV2(GraphNode& node) {
  if (node.v2) return node.v2;
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr) return Status::Failed("session {}: ModelManager is finalized", id_);
  NPUFLOW_ASSIGN_OR_RETURN(v2::ExecutorType type, v2::ParseExecutorType(node.options.v2_executor));
  v2::ExecutorOption option;
  option.type = type;
  option.profile = node.options.v2_profile;
  // npuflow.executeTimeoutMs bounds an RT2.0 run as it bounds a task-sink one.
  if (node.options.timeout) option.sync_timeout = *node.options.timeout;
  auto loaded = v2::RtV2SimpleExecutor::Create(node.v2_graphs, &mm->runtime(), node.options.device, option,
                                               std::max(1, node.options.execution_streams));
  if (!loaded.ok()) return loaded.status().WithContext(fmt::format("session {}: loading graph {} on RT2.0", id_, node.id));
  node.v2 = *std::move(loaded);
  return node.v2;
}

Status Session::LoadGraph(std::uint32_t graph_id) {
  NPUFLOW_ASSIGN_OR_RETURN(Held held, Lease(graph_id));
  NPUFLOW_RETURN_IF_ERROR(Build(held.node()));
  if (held.node().v2_graphs) return EnsureLoadedV2(held.node()).status();
  if (held.node().pipeline_root) return EnsureLoadedPipeline(held.node()).status();
  return EnsureLoaded(held.node()).status();
}

StatusOr<std::vector<Tensor>> Session::RunGraph(std::uint32_t graph_id, const std::vector<Tensor>& inputs) {
  npu_sim::Timeout timeout;
  NPUFLOW_ASSIGN_OR_RETURN(RunTarget target, TargetForRun(graph_id, &timeout));
  if (target.v2) {
    auto outputs = target.v2->Run(inputs);
    if (!outputs.ok()) return outputs.status().WithContext(fmt::format("session {} graph {}", id_, graph_id));
    return outputs;
  }
  if (target.pipeline) return target.pipeline->Execute(inputs);
  std::shared_ptr<DavinciModel> model = std::move(target.v1);
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
  return model->Execute(inputs, timeout);
}

Status Session::RunGraphAsync(std::uint32_t graph_id, std::vector<Tensor> inputs, RunCallback done) {
  if (!done) return Status::ParamInvalid("session {}: RunGraphAsync without a callback", id_);
  NPUFLOW_ASSIGN_OR_RETURN(Held held, Lease(graph_id));
  GraphNode& node = held.node();
  NPUFLOW_RETURN_IF_ERROR(Build(node));
  if (node.v2_graphs)
    return Status::Unsupported("session {} graph {} runs on RT2.0 ({}): RunGraphAsync takes task-sink graphs (the "
                               "Run loop is v1's); use RunGraph",
                               id_, graph_id, node.v2_reason);
  if (node.pipeline_root)
    return Status::Unsupported("session {} graph {} holds pipeline stages: it runs on the pipeline executor; use "
                               "RunGraph",
                               id_, graph_id);
  NPUFLOW_ASSIGN_OR_RETURN(auto model, EnsureLoaded(node));
  if (!node.loop) {
    NPUFLOW_ASSIGN_OR_RETURN(node.loop, RunLoop::Start(model, node.options.timeout));
  }
  return node.loop->Push(std::move(inputs), std::move(done));
}

Status Session::RunGraphWithStreamAsync(std::uint32_t graph_id, npu_sim::Stream stream,
                                        const std::vector<DeviceTensor>& inputs,
                                        const std::vector<DeviceTensor>& outputs) {
  NPUFLOW_ASSIGN_OR_RETURN(std::shared_ptr<DavinciModel> model, ModelForRun(graph_id, nullptr));
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
  auto node = std::make_shared<GraphNode>();
  {
    NPUFLOW_ASSIGN_OR_RETURN(Held origin, Lease(origin_id));
    if (!origin.node().compiled && !origin.node().v2_graphs)
      return Status::Failed("session {}: cannot fork graph {}: it is not built (BuildGraph it first)", id_, origin_id);
    node->compiled = origin.node().compiled;  // shared compile-time state; loads on its own
    node->v2_graphs = origin.node().v2_graphs;
    node->v2_reason = origin.node().v2_reason;
    node->options = origin.node().options;
  }
  node->id = fork_id;
  return Insert(fork_id, std::move(node), fmt::format("cannot fork graph {} onto graph id {}", origin_id, fork_id));
}

namespace {
Status FreeGraphResources(Session::GraphNode& node) {
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
  node.v2.reset();  // its instances unload (DeInit frees the constants)
  if (node.pipeline) {
    Status s = node.pipeline->Unload();
    if (first.ok() && !s.ok()) first = s;
    node.pipeline.reset();
  }
  return first;
}
}  // namespace

Status Session::RemoveGraph(std::uint32_t graph_id) {
  NPUFLOW_ASSIGN_OR_RETURN(auto actor, Actor());
  NPUFLOW_ASSIGN_OR_RETURN(NodePtr node, actor.Ask<NodePtr>(session_msg::Remove{graph_id}).Get());
  NPUFLOW_ASSIGN_OR_RETURN(Held held, LeaseNode(std::move(node)));  // after a build or load under way
  return FreeGraphResources(held.node());
}

Status Session::SetGraphConstMemoryBase(std::uint32_t graph_id, npu_sim::DevicePtr ptr, std::uint64_t size) {
  NPUFLOW_ASSIGN_OR_RETURN(Held held, Lease(graph_id));
  GraphNode& node = held.node();
  if (!ptr || size == 0) return Status::ParamInvalid("session {} graph {}: const memory base is null or empty", id_, graph_id);
  if (node.model_id) return Status::ParamInvalid("session {} graph {}: is loaded; set its const memory before the first run", id_, graph_id);
  node.const_base = ptr;
  node.const_size = size;
  return Status::Ok();
}

Status Session::UpdateGraphFeatureMemoryBase(std::uint32_t graph_id, npu_sim::DevicePtr ptr, std::uint64_t size) {
  NPUFLOW_ASSIGN_OR_RETURN(Held held, Lease(graph_id));
  GraphNode& node = held.node();
  if (!ptr || size == 0) return Status::ParamInvalid("session {} graph {}: feature memory base is null or empty", id_, graph_id);
  if (node.model_id) return Status::ParamInvalid("session {} graph {}: is loaded; set its feature memory before the first run", id_, graph_id);
  node.feature_base = ptr;
  node.feature_size = size;
  return Status::Ok();
}

Status Session::Finalize() {
  if (finalized_.exchange(true)) return Status::Ok();
  Status first;
  // Under a ModelManager that is gone, its models went with it: only the directory is left.
  if (auto actor = Actor(); actor.ok()) {
    auto fin = actor->Ask<session_msg::Finalized>(session_msg::Finalize{}).Get();
    if (!fin.ok()) first = fin.status();
    std::vector<NodePtr> nodes = fin.ok() ? std::move(fin->nodes) : std::vector<NodePtr>{};
    for (NodePtr& node : nodes) {
      auto held = LeaseNode(std::move(node));
      Status s = held.ok() ? FreeGraphResources(held->node()) : held.status();
      if (first.ok() && !s.ok()) first = s;
    }
    if (ModelManager* mm = ModelManager::Get()) {
      Status s = mm->DestroySession(id_);
      if (first.ok() && !s.ok()) first = s;
      // Nothing is left in the actor (its table went out with Finalize): its cell goes to the next
      // session made. A lease still held returns to nobody; a call made from now on fails here.
      actor_retired_.store(true, std::memory_order_release);
      mm->runtime().system().Retire(*actor);
    }
  }
  // The session's temporary weight directory goes with it; a user's directory never does.
  if (temporary_weight_dir_used_.load()) {
    Status s = weights::RemoveTemporaryWeightDir(temporary_weight_dir_);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

StatusOr<std::shared_ptr<const CompiledModel>> Session::GetCompiledModel(std::uint32_t graph_id) const {
  NPUFLOW_ASSIGN_OR_RETURN(Held held, Lease(graph_id));
  if (!held.node().compiled) return Status::Failed("session {}: graph {} is not built", id_, graph_id);
  return held.node().compiled;
}

StatusOr<std::vector<weights::ExternalWeightDesc>> Session::GetExternalWeightPaths(std::uint32_t graph_id) const {
  NPUFLOW_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledModel> model, GetCompiledModel(graph_id));
  if (!model->graph) return std::vector<weights::ExternalWeightDesc>{};
  return weights::ListExternalWeights(*model->graph);
}

StatusOr<std::shared_ptr<v2::RtV2SimpleExecutor>> Session::GetLoadedV2(std::uint32_t graph_id) const {
  NPUFLOW_ASSIGN_OR_RETURN(Held held, Lease(graph_id));
  if (!held.node().v2) return Status::NotFound("session {}: graph {} is not loaded on RT2.0", id_, graph_id);
  return held.node().v2;
}

StatusOr<std::shared_ptr<DavinciModel>> Session::GetLoadedModel(std::uint32_t graph_id) const {
  std::optional<std::uint32_t> id;
  {
    NPUFLOW_ASSIGN_OR_RETURN(Held held, Lease(graph_id));
    id = held.node().model_id;
  }
  ModelManager* mm = ModelManager::Get();
  if (!id || mm == nullptr) return Status::NotFound("session {}: graph {} is not loaded", id_, graph_id);
  return mm->GetModel(*id);
}

}  // namespace npuflow::scheduler
