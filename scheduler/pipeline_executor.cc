#include "scheduler/pipeline_executor.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <oneapi/tbb/flow_graph.h>

#include "actors/system.h"
#include "lowering/compiler.h"
#include "lowering/partition_stages.h"
#include "npu_sim/host_client.h"
#include "scheduler/davinci_model.h"
#include "scheduler/model_manager.h"

namespace npuflow::scheduler {

namespace flow = tbb::flow;
using npu_sim::DevicePtr;
using npu_sim::Stream;
using npu_sim::VTime;

double PipelineStats::bubble_fraction() const {
  const VTime span = last_end - first_start;
  if (span <= 0 || stage_busy.empty()) return 0;
  double busy = 0;
  for (VTime b : stage_busy) busy += static_cast<double>(b);
  return std::clamp(1.0 - busy / (static_cast<double>(stage_busy.size()) * static_cast<double>(span)), 0.0, 1.0);
}

namespace {

constexpr std::uint64_t kIdle = std::numeric_limits<std::uint64_t>::max();

// Owned by `self` from Submit to Finish; a host copy in flight holds a reference too (its
// keep_alive), so an aborted step's late copy never touches freed memory.
struct Step {
  std::shared_ptr<Step> self;
  std::uint64_t index = 0;
  int slot = 0;
  int replica = 0;
  std::vector<graph::Tensor> inputs, outputs;
  Status status;
  VTime admitted = 0;  // the submitting host's clock
  VTime ready_at = 0;  // when its producers' work ended (device clock)
  actors::Promise<StatusOr<StepOutput>> promise;
};

// Where a value comes from: output `index` of stage `stage`, or root input `index` (stage -1).
struct Source {
  int stage = -1;
  int index = 0;
};

using Gateway = flow::async_node<Step*, Step*>::gateway_type;

// One hop of the pipeline: a queue, a limiter of 1 and the asynchronous body, which issues the
// hop's device work and returns; the work's completion puts the step on the hop's output.
struct Hop {
  using Body = std::function<void(Hop&, Step*, Gateway&)>;
  Hop(flow::graph& g, int stage_index, bool is_link, Body body)
      : queue(g), gate(g, 1),
        work(g, flow::unlimited, [this, body = std::move(body)](Step* const& step, Gateway& gw) { body(*this, step, gw); }),
        done(g, flow::unlimited, [](Step*) { return flow::continue_msg(); }), stage(stage_index), link(is_link) {
    flow::make_edge(queue, gate);
    flow::make_edge(gate, work);
    flow::make_edge(flow::output_port<0>(work), done);
    flow::make_edge(done, gate.decrementer());
  }
  flow::queue_node<Step*> queue;
  flow::limiter_node<Step*> gate;
  flow::async_node<Step*, Step*> work;
  flow::function_node<Step*, flow::continue_msg> done;
  std::atomic<std::uint64_t> busy_step{kIdle};  // the step whose device work is in flight
  std::atomic<int> busy_replica{0};              // a stage hop's: the replica that step runs on
  int stage = 0;
  bool link = false;
};

struct Replica {
  std::uint32_t model_id = 0;
  bool loaded = false;
  std::shared_ptr<DavinciModel> dm;
  npu_sim::Model device_model;
};

struct StageState {
  int index = 0;
  int device = 0;
  std::shared_ptr<const graph::CompiledModel> model;
  std::vector<Replica> replicas;
  Stream stream{-1, 0};
  bool caller_stream = false;  // options.stream: not the pipeline's to destroy
  std::vector<Source> inputs;  // per model input (the compiled model's order)
  std::vector<std::uint64_t> in_bytes, out_bytes;
  std::vector<bool> own_input;  // a buffer of its own (root inputs, other devices' outputs)
  std::vector<std::vector<DevicePtr>> in_buf, out_buf;  // [slot][input | output]
  std::vector<std::pair<int, int>> root_outputs;        // (root output, stage output) copied to the host here
  std::map<int, Stream> link_streams;                   // by source device
  npu_sim::HostClient client{"pipeline stage"};
  npu_sim::HostClient link_client{"pipeline link"};
  VTime last_end = 0;  // its stream's last step's end
  VTime busy = 0;
};

std::uint64_t AllocBytes(std::uint64_t bytes) { return std::max<std::uint64_t>(bytes, 64); }

// The root's Data nodes in input order: by `index` attribute, then graph order (as the interpreter
// and plan-memory order them).
StatusOr<std::vector<const graph::Node*>> OrderedData(const graph::ComputeGraph& g) {
  std::vector<std::pair<std::pair<std::int64_t, std::size_t>, const graph::Node*>> data;
  const auto nodes = g.nodes();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i]->type() != "Data") continue;
    NPUFLOW_ASSIGN_OR_RETURN(std::int64_t idx,
                             nodes[i]->op().AttrOr<std::int64_t>("index", 1'000'000'000 + static_cast<std::int64_t>(i)));
    data.push_back({{idx, i}, nodes[i]});
  }
  std::sort(data.begin(), data.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const graph::Node*> out;
  for (auto& d : data) out.push_back(d.second);
  return out;
}

StatusOr<graph::TensorDesc> DeclaredDesc(const graph::Node& data) {
  if (!data.outputs().empty() && data.outputs()[0].shape.is_static()) return data.outputs()[0];
  graph::TensorDesc d;
  NPUFLOW_ASSIGN_OR_RETURN(d.dtype, data.op().Attr<graph::DataType>("dtype"));
  NPUFLOW_ASSIGN_OR_RETURN(d.shape, data.op().Attr<graph::Shape>("shape"));
  if (!d.shape.is_static())
    return Status::ParamInvalid("Data node '{}': {} is not static; pipeline stages run on the v1 task sink", data.name(),
                                d.ToString());
  return d;
}

}  // namespace

struct PipelineExecutor::Impl {
  PipelineOptions options;
  npu_sim::Runtime* rt = nullptr;
  std::vector<std::unique_ptr<StageState>> stages;
  std::vector<std::string> in_names, out_names;
  std::vector<graph::TensorDesc> in_desc, out_desc;
  std::vector<Source> outputs;  // the root's outputs

  // The pipeline's flow graph runs in the actor system's arena, on its workers: the bodies never
  // block, and a graph of its own would wait for workers the actors hold.
  std::unique_ptr<flow::graph> graph;
  std::unique_ptr<flow::queue_node<Step*>> entry;
  std::unique_ptr<flow::limiter_node<Step*>> limiter;
  std::unique_ptr<flow::function_node<Step*, Step*>> admit;
  // A serial function_node may hand its outputs on out of order (oneTBB starts the next body
  // before it forwards this one's result): the sequencer puts the admitted steps back in index
  // order, which the hops keep, so steps leave in order and a slot is free when its next step comes.
  std::unique_ptr<flow::sequencer_node<Step*>> in_order;
  std::unique_ptr<flow::function_node<Step*, flow::continue_msg>> finish;
  std::vector<std::unique_ptr<Hop>> hops;
  std::uint64_t next_index = 0;  // admit's (serial)

  bool closed = false;  // under mu: Unload has begun (a Submit then fails; one before it is drained)
  // Set once a hop was aborted (a timeout): work sent to the device before the abort may still
  // land in its step's slot, so no step issues device work any more; each fails with this reason.
  std::atomic<bool> poisoned{false};
  std::string poison_reason;  // written under mu before `poisoned`
  std::mutex mu;  // stats, in_flight
  std::condition_variable drained;
  int in_flight = 0;
  PipelineStats stats;

  std::string StageName(int s) const {
    return fmt::format("pipeline '{}' stage {} (device {})", options.name, s, stages[s]->device);
  }

  // precompiled: the stage models, in stage order (null: compile each stage subgraph here).
  Status Build(const graph::ComputeGraph& root, const std::vector<std::shared_ptr<const graph::CompiledModel>>* precompiled);
  std::shared_ptr<const graph::CompiledModel> pipeline_model;  // when made from one
  void Wire();
  void RunStage(StageState& st, Step* step, Gateway& gw, Hop& hop);
  void RunLink(StageState& st, Step* step, Gateway& gw, Hop& hop);
  void Finish(Step* step);
  void AbortHop(const Hop& hop);
  // Poisons the pipeline (`why`) and aborts every hop with device work in flight.
  void AbortAll(const std::string& why);
  // A step that must not issue device work: failed already, or the pipeline is poisoned.
  bool Skip(Step* step) {
    if (!step->status.ok()) return true;
    if (!poisoned.load(std::memory_order_acquire)) return false;
    std::lock_guard<std::mutex> lock(mu);
    step->status = Status::Aborted("pipeline '{}' was aborted ({}); reload it", options.name, poison_reason);
    return true;
  }
  Status Cleanup();
};

PipelineExecutor::PipelineExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PipelineExecutor::~PipelineExecutor() { (void)Unload(); }

StatusOr<std::unique_ptr<PipelineExecutor>> PipelineExecutor::Create(std::shared_ptr<const graph::CompiledModel> model,
                                                                     PipelineOptions options) {
  if (!model || model->stages.empty() || !model->graph)
    return Status::ParamInvalid("PipelineExecutor: the model is no pipeline model (it has no stages)");
  return Create(*model->graph, std::move(options), model);
}

StatusOr<std::unique_ptr<PipelineExecutor>> PipelineExecutor::Create(const graph::ComputeGraph& root,
                                                                     PipelineOptions options) {
  return Create(root, std::move(options), nullptr);
}

StatusOr<std::unique_ptr<PipelineExecutor>> PipelineExecutor::Create(const graph::ComputeGraph& root,
                                                                     PipelineOptions options,
                                                                     std::shared_ptr<const graph::CompiledModel> model) {
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr) return Status::ParamInvalid("PipelineExecutor: ModelManager is not initialized");
  if (options.replicas < 1 || options.replicas > kMaxPipelineReplicas)
    return Status::ParamInvalid("pipeline replicas {} is out of range 1..{}", options.replicas, kMaxPipelineReplicas);
  if (options.max_in_flight < 1 || options.max_in_flight > kMaxPipelineInFlight)
    return Status::ParamInvalid("pipeline max_in_flight {} is out of range 1..{}", options.max_in_flight,
                                kMaxPipelineInFlight);
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->rt = &mm->runtime();
  impl->pipeline_model = model;
  Status s = impl->Build(root, model ? &model->stages : nullptr);
  if (!s.ok()) {
    (void)impl->Cleanup();
    return s;
  }
  impl->Wire();
  return std::unique_ptr<PipelineExecutor>(new PipelineExecutor(std::move(impl)));
}

Status PipelineExecutor::Impl::Build(const graph::ComputeGraph& root,
                                     const std::vector<std::shared_ptr<const graph::CompiledModel>>* precompiled) {
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<lowering::StageCall> calls, lowering::PipelineStages(root));
  if (calls.empty())
    return Status::ParamInvalid("graph '{}' has no pipeline stages (PartitionedCall nodes with '_stage')", root.name());
  const int k = static_cast<int>(calls.size());
  if (precompiled != nullptr && precompiled->size() != calls.size())
    return Status::ParamInvalid("pipeline '{}': {} stage models for {} stages", options.name, precompiled->size(), k);
  const int devices = options.devices;
  if (devices < 1 || devices > k)
    return Status::ParamInvalid("pipeline devices {} is out of range 1..{} (the stage count)", devices, k);
  if (devices > rt->device_count())
    return Status::ParamInvalid("pipeline devices {}: the runtime has {} device(s)", devices, rt->device_count());

  NPUFLOW_ASSIGN_OR_RETURN(auto data, OrderedData(root));
  std::unordered_map<const graph::Node*, int> root_input;
  for (const graph::Node* d : data) {
    root_input[d] = static_cast<int>(in_names.size());
    in_names.push_back(d->name());
    NPUFLOW_ASSIGN_OR_RETURN(graph::TensorDesc desc, DeclaredDesc(*d));
    in_desc.push_back(std::move(desc));
  }
  std::unordered_map<const graph::Node*, int> stage_of_call;
  for (int s = 0; s < k; ++s) stage_of_call[calls[s].call] = s;
  const auto source_of = [&](const graph::Endpoint& e, std::string_view what) -> StatusOr<Source> {
    if (auto it = root_input.find(e.node); it != root_input.end()) return Source{-1, it->second};
    if (auto it = stage_of_call.find(e.node); it != stage_of_call.end()) return Source{it->second, e.index};
    return Status::ParamInvalid("graph '{}': {} reads '{}', which is neither a root input nor a stage", root.name(), what,
                                e.node->name());
  };

  ModelManager& mm = *ModelManager::Get();
  for (int s = 0; s < k; ++s) {
    auto st = std::make_unique<StageState>();
    st->index = s;
    st->device = s * devices / k;
    const graph::Node& call = *calls[s].call;
    const graph::ComputeGraph& sub = *calls[s].subgraph;
    if (precompiled != nullptr) {
      st->model = (*precompiled)[static_cast<std::size_t>(s)];
      if (!st->model || st->model->streams.empty() || !st->model->stages.empty())
        return Status::ParamInvalid("pipeline '{}' stage {}: not a task-sink model", options.name, s);
    } else {
      NPUFLOW_ASSIGN_OR_RETURN(auto copy, lowering::CopyFlatGraph(sub));
      graph::CompileOptions co = options.compile;
      co.online = true;
      auto compiled = lowering::CompileV1(std::move(copy), co);
      if (!compiled.ok()) return compiled.status().WithContext(fmt::format("pipeline '{}' stage {}", options.name, s));
      st->model = std::make_shared<const graph::CompiledModel>(std::move(*compiled));
    }
    const graph::CompiledModel& cm = *st->model;

    // Model inputs <- call inputs: the subgraph's Data nodes in their order are the call's inputs.
    NPUFLOW_ASSIGN_OR_RETURN(auto sub_data, OrderedData(sub));
    if (sub_data.size() != call.inputs().size())
      return Status::ParamInvalid("graph '{}': stage call '{}' has {} inputs, its subgraph {} Data nodes", root.name(),
                                  call.name(), call.inputs().size(), sub_data.size());
    for (const graph::IoDef& in : cm.inputs) {
      auto it = std::find_if(sub_data.begin(), sub_data.end(), [&](const graph::Node* d) { return d->name() == in.name; });
      if (it == sub_data.end())
        return Status::Internal("pipeline stage {}: model input '{}' is no Data node of its subgraph", s, in.name);
      const std::size_t pos = static_cast<std::size_t>(it - sub_data.begin());
      NPUFLOW_ASSIGN_OR_RETURN(Source src, source_of(call.inputs()[pos], fmt::format("stage call '{}'", call.name())));
      if (src.stage >= s)
        return Status::ParamInvalid("graph '{}': stage {} reads stage {}; a stage reads only earlier stages", root.name(),
                                    s, src.stage);
      st->inputs.push_back(src);
      st->in_bytes.push_back(in.desc.bytes().value_or(0));
    }
    for (const graph::IoDef& out : cm.outputs) st->out_bytes.push_back(out.desc.bytes().value_or(0));
    stages.push_back(std::move(st));
  }
  for (auto& st : stages)
    for (const Source& src : st->inputs)
      st->own_input.push_back(src.stage < 0 || stages[src.stage]->device != st->device);

  // The root's outputs.
  const graph::Node* net = nullptr;
  for (const graph::Node* n : root.nodes())
    if (n->type() == "NetOutput") net = n;
  if (net == nullptr) return Status::ParamInvalid("graph '{}' has no NetOutput node", root.name());
  for (const graph::Endpoint& e : net->inputs()) {
    NPUFLOW_ASSIGN_OR_RETURN(Source src, source_of(e, "the NetOutput"));
    if (src.stage >= 0) {
      const graph::CompiledModel& cm = *stages[src.stage]->model;
      if (src.index >= static_cast<int>(cm.outputs.size()))
        return Status::ParamInvalid("graph '{}': the NetOutput reads output {} of stage {}, which has {}", root.name(),
                                    src.index, src.stage, cm.outputs.size());
      stages[src.stage]->root_outputs.emplace_back(static_cast<int>(outputs.size()), src.index);
      out_desc.push_back(cm.outputs[src.index].desc);
      out_names.push_back(cm.outputs[src.index].name);
    } else {
      out_desc.push_back(in_desc[src.index]);
      out_names.push_back(in_names[src.index]);
    }
    outputs.push_back(src);
  }

  // Load each stage on its device; streams and per-slot buffers.
  const int slots = options.max_in_flight;
  for (auto& st : stages) {
    for (int r = 0; r < options.replicas; ++r) {
      ModelLoadOptions lo;
      lo.device = st->device;
      lo.share_weights = true;  // one device copy of the stage's weights for all replicas
      lo.name = fmt::format("{} stage {} replica {}", options.name, st->index, r);
      auto id = mm.LoadModelOnline(st->model, lo);
      if (!id.ok()) return id.status().WithContext(StageName(st->index));
      Replica& rep = st->replicas.emplace_back();
      rep.model_id = *id;
      rep.loaded = true;
      NPUFLOW_ASSIGN_OR_RETURN(rep.dm, mm.GetModel(*id));
      rep.dm->AddBorrower(1);  // never recycled while the pipeline holds it
      NPUFLOW_RETURN_IF_ERROR(rep.dm->WaitForWeights().WithContext(StageName(st->index)));
      rep.device_model = rep.dm->device_model(0);
    }
    if (st->index == 0 && options.stream.device >= 0) {
      if (options.stream.device != st->device)
        return Status::ParamInvalid("pipeline '{}': the caller's stream is on device {}; stage 0 runs on device {}",
                                    options.name, options.stream.device, st->device);
      st->stream = options.stream;
      st->caller_stream = true;
    } else {
      NPUFLOW_ASSIGN_OR_RETURN(st->stream, rt->CreateStream(st->device));
    }
    for (const Source& src : st->inputs)
      if (src.stage >= 0 && stages[src.stage]->device != st->device && !st->link_streams.count(stages[src.stage]->device)) {
        NPUFLOW_ASSIGN_OR_RETURN(Stream ls, rt->CreateStream(stages[src.stage]->device));
        st->link_streams[stages[src.stage]->device] = ls;
      }
    st->in_buf.assign(slots, std::vector<DevicePtr>(st->inputs.size()));
    st->out_buf.assign(slots, std::vector<DevicePtr>(st->out_bytes.size()));
    for (int m = 0; m < slots; ++m) {
      for (std::size_t i = 0; i < st->inputs.size(); ++i)
        if (st->own_input[i]) {
          auto p = rt->Malloc(st->device, AllocBytes(st->in_bytes[i]));
          if (!p.ok()) return p.status().WithContext(fmt::format("{}: input buffers", StageName(st->index)));
          st->in_buf[m][i] = *p;
        }
      for (std::size_t j = 0; j < st->out_bytes.size(); ++j) {
        auto p = rt->Malloc(st->device, AllocBytes(st->out_bytes[j]));
        if (!p.ok()) return p.status().WithContext(fmt::format("{}: output buffers", StageName(st->index)));
        st->out_buf[m][j] = *p;
      }
    }
    st->client.Merge(0);
  }
  stats.stage_busy.assign(stages.size(), 0);
  return Status::Ok();
}

void PipelineExecutor::Impl::Wire() {
  rt->system().arena().execute([this] { graph = std::make_unique<flow::graph>(); });
  flow::graph& g = *graph;
  entry = std::make_unique<flow::queue_node<Step*>>(g);
  limiter = std::make_unique<flow::limiter_node<Step*>>(g, static_cast<std::size_t>(options.max_in_flight));
  admit = std::make_unique<flow::function_node<Step*, Step*>>(g, flow::serial, [this](Step* step) {
    step->index = next_index++;
    step->slot = static_cast<int>(step->index % static_cast<std::uint64_t>(options.max_in_flight));
    return step;
  });
  finish = std::make_unique<flow::function_node<Step*, flow::continue_msg>>(g, flow::serial, [this](Step* step) {
    Finish(step);
    return flow::continue_msg();
  });
  in_order = std::make_unique<flow::sequencer_node<Step*>>(
      g, [](Step* const& step) -> std::size_t { return static_cast<std::size_t>(step->index); });
  flow::make_edge(*entry, *limiter);
  flow::make_edge(*limiter, *admit);
  flow::make_edge(*admit, *in_order);
  flow::make_edge(*finish, limiter->decrementer());
  flow::sender<Step*>* previous = in_order.get();
  for (auto& stp : stages) {
    StageState* st = stp.get();
    if (!st->link_streams.empty()) {
      hops.push_back(std::make_unique<Hop>(g, st->index, true, [this, st](Hop& hop, Step* step, Gateway& gw) {
        RunLink(*st, step, gw, hop);
      }));
      flow::make_edge(*previous, hops.back()->queue);
      previous = &flow::output_port<0>(hops.back()->work);  // an async_node sends through its port
    }
    hops.push_back(std::make_unique<Hop>(g, st->index, false, [this, st](Hop& hop, Step* step, Gateway& gw) {
      RunStage(*st, step, gw, hop);
    }));
    flow::make_edge(*previous, hops.back()->queue);
    previous = &flow::output_port<0>(hops.back()->work);  // an async_node sends through its port
  }
  flow::make_edge(*previous, *finish);
}

// Issues stage `st`'s work for `step` on its stream: the root inputs it reads (host to device),
// the model's execution on this step's buffers, the root outputs it makes (device to host); the
// stream's synchronize puts the step on the next hop.
void PipelineExecutor::Impl::RunStage(StageState& st, Step* step, Gateway& gw, Hop& hop) {
  if (Skip(step)) {
    gw.try_put(step);
    return;
  }
  if (options.observer) options.observer({st.index, false, step->index, false});
  npu_sim::ScopedHostClient scope(st.client);
  st.client.Merge(step->ready_at);
  const VTime issued = st.client.clock();
  const int m = step->slot;
  std::vector<std::uint64_t> io;
  io.reserve(st.inputs.size() + st.out_bytes.size());
  // One host interaction for the root inputs' copies, one for the execution, one for the root
  // outputs' copies: the host latency between two steps of a stage is on the pipeline's critical
  // path.
  std::vector<npu_sim::Task> copies;
  for (std::size_t i = 0; i < st.inputs.size(); ++i) {
    const Source& src = st.inputs[i];
    if (src.stage < 0) {
      if (st.in_bytes[i] > 0) {
        npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kHostToDevice, st.in_bytes[i]);
        c.dst_dev = st.in_buf[m][i];
        c.src_host = step->inputs[src.index].data.data();
        c.keep_alive = step->self;
        copies.push_back(std::move(c));
      }
      io.push_back(st.in_buf[m][i].value);
    } else if (st.own_input[i]) {
      io.push_back(st.in_buf[m][i].value);  // the link hop filled it
    } else {
      io.push_back(stages[src.stage]->out_buf[m][src.index].value);  // same device: read in place
    }
  }
  for (const DevicePtr& p : st.out_buf[m]) io.push_back(p.value);
  Status s;
  if (!copies.empty()) s = rt->Submit(st.stream, std::move(copies)).status();
  if (s.ok()) s = rt->ExecuteModelOnStream(st.replicas[step->replica].device_model, st.stream, std::move(io));
  copies.clear();
  for (auto [o, j] : st.root_outputs) {
    if (st.out_bytes[j] == 0) continue;
    npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kDeviceToHost, st.out_bytes[j]);
    c.src_dev = st.out_buf[m][j];
    c.dst_host = step->outputs[o].data.data();
    c.keep_alive = step->self;
    copies.push_back(std::move(c));
  }
  if (s.ok() && !copies.empty()) s = rt->Submit(st.stream, std::move(copies)).status();
  hop.busy_replica.store(step->replica, std::memory_order_relaxed);
  hop.busy_step.store(step->index, std::memory_order_release);
  gw.reserve_wait();
  // What was issued runs to its end either way; a failed issue fails the step after it.
  rt->SynchronizeStreamAsync(st.stream).OnComplete([this, &st, &hop, &gw, step, issued, s](StatusOr<VTime> end) {
    hop.busy_step.store(kIdle, std::memory_order_release);
    Status result = s.ok() ? end.status() : s;
    if (end.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      st.busy += *end - std::max(issued, st.last_end);
      st.last_end = std::max(st.last_end, *end);
      step->ready_at = std::max(step->ready_at, *end);
    }
    if (!result.ok()) step->status = result.WithContext(StageName(st.index));
    if (options.observer) options.observer({st.index, false, step->index, true});
    gw.try_put(step);
    gw.release_wait();
  });
}

// Brings the outputs of earlier stages on other devices to stage `st`'s device for `step`: one
// peer copy each on a stream of the source device, over the link; done when all of them are.
void PipelineExecutor::Impl::RunLink(StageState& st, Step* step, Gateway& gw, Hop& hop) {
  if (Skip(step)) {
    gw.try_put(step);
    return;
  }
  if (options.observer) options.observer({st.index, true, step->index, false});
  npu_sim::ScopedHostClient scope(st.link_client);
  st.link_client.Merge(step->ready_at);
  const int m = step->slot;
  Status s;
  for (std::size_t i = 0; i < st.inputs.size() && s.ok(); ++i) {
    const Source& src = st.inputs[i];
    if (src.stage < 0 || !st.own_input[i] || st.in_bytes[i] == 0) continue;
    const StageState& from = *stages[src.stage];
    s = rt->MemcpyPeerAsync(st.link_streams.at(from.device), st.device, st.in_buf[m][i], from.out_buf[m][src.index],
                            st.in_bytes[i]);
  }
  struct Join {
    std::atomic<int> left{0};
    std::mutex mu;
    Status status;
    VTime end = 0;
  };
  auto join = std::make_shared<Join>();
  join->left.store(static_cast<int>(st.link_streams.size()));
  join->status = s;
  hop.busy_step.store(step->index, std::memory_order_release);
  gw.reserve_wait();
  for (auto& [device, stream] : st.link_streams) {
    rt->SynchronizeStreamAsync(stream).OnComplete([this, &st, &hop, &gw, step, join](StatusOr<VTime> end) {
      {
        std::lock_guard<std::mutex> lock(join->mu);
        if (end.ok()) join->end = std::max(join->end, *end);
        else if (join->status.ok()) join->status = end.status();
      }
      if (join->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      hop.busy_step.store(kIdle, std::memory_order_release);
      step->ready_at = std::max(step->ready_at, join->end);
      if (!join->status.ok())
        step->status = join->status.WithContext(fmt::format("{}: the link bringing its inputs", StageName(st.index)));
      if (options.observer) options.observer({st.index, true, step->index, true});
      gw.try_put(step);
      gw.release_wait();
    });
  }
}

void PipelineExecutor::Impl::Finish(Step* step) {
  if (step->status.ok())
    for (std::size_t o = 0; o < outputs.size(); ++o)
      if (outputs[o].stage < 0) step->outputs[o].data = step->inputs[outputs[o].index].data;
  {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.steps;
    if (!step->status.ok()) ++stats.failed;
    if (stats.steps == 1) stats.first_start = step->admitted;
    stats.first_start = std::min(stats.first_start, step->admitted);
    stats.last_end = std::max(stats.last_end, step->ready_at);
    for (std::size_t s = 0; s < stages.size(); ++s) stats.stage_busy[s] = stages[s]->busy;
  }
  if (step->status.ok()) step->promise.Set(StepOutput{std::move(step->outputs), step->ready_at});
  else step->promise.Fail(step->status);
  step->self.reset();  // the step goes with the last copy holding it
  std::lock_guard<std::mutex> lock(mu);
  if (--in_flight == 0) drained.notify_all();
}

void PipelineExecutor::Impl::AbortHop(const Hop& hop) {
  StageState& st = *stages[hop.stage];
  if (hop.link) {
    for (auto& [device, stream] : st.link_streams) (void)rt->AbortStream(stream);
  } else {
    // The model's run first (its streams stop, queued runs fail), then the stage's stream.
    const int r = hop.busy_replica.load(std::memory_order_relaxed);
    if (r >= 0 && r < static_cast<int>(st.replicas.size())) (void)rt->AbortModel(st.replicas[r].device_model);
    (void)rt->AbortStream(st.stream);
  }
}

void PipelineExecutor::Impl::AbortAll(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!poisoned.load(std::memory_order_relaxed)) {
      poison_reason = why;
      poisoned.store(true, std::memory_order_release);
    }
  }
  for (const auto& hop : hops)
    if (hop->busy_step.load(std::memory_order_acquire) != kIdle) AbortHop(*hop);
}

Status PipelineExecutor::Impl::Cleanup() {
  Status first;
  const auto keep = [&first](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  ModelManager* mm = ModelManager::Get();
  // Models and streams first (unloading a model aborts whatever of it still runs), then the
  // buffers they used.
  for (auto& st : stages) {
    for (Replica& rep : st->replicas) {
      if (rep.dm) {
        rep.dm->AddBorrower(-1);
        rep.dm.reset();
      }
      if (rep.loaded && mm != nullptr) keep(mm->Unload(rep.model_id));
      rep.loaded = false;
    }
    for (auto& [device, stream] : st->link_streams) keep(rt->DestroyStream(stream));
    st->link_streams.clear();
    if (st->stream.device >= 0 && !st->caller_stream) keep(rt->DestroyStream(std::exchange(st->stream, Stream{-1, 0})));
  }
  for (auto& st : stages) {
    for (auto& slot : st->in_buf)
      for (DevicePtr& p : slot)
        if (p) keep(rt->Free(st->device, std::exchange(p, DevicePtr{})));
    for (auto& slot : st->out_buf)
      for (DevicePtr& p : slot)
        if (p) keep(rt->Free(st->device, std::exchange(p, DevicePtr{})));
  }
  return first;
}

// ---- the public face -------------------------------------------------------------------------------

actors::Future<StatusOr<std::vector<graph::Tensor>>> PipelineExecutor::Submit(std::vector<graph::Tensor> inputs) {
  return SubmitStep(std::move(inputs), {}).Then([](StatusOr<StepOutput> r) -> StatusOr<std::vector<graph::Tensor>> {
    if (!r.ok()) return r.status();
    return std::move(r->outputs);
  });
}

actors::Future<StatusOr<StepOutput>> PipelineExecutor::SubmitStep(std::vector<graph::Tensor> inputs, StepOptions opts) {
  using R = StatusOr<StepOutput>;
  Impl& p = *impl_;
  const auto fail = [](Status s) { return actors::Future<R>::Ready(R(std::move(s))); };
  if (inputs.size() != p.in_desc.size())
    return fail(Status::ParamInvalid("pipeline '{}': {} inputs given, the graph takes {}", p.options.name, inputs.size(),
                                     p.in_desc.size()));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const graph::TensorDesc& want = p.in_desc[i];
    if (!(inputs[i].desc == want) || inputs[i].data.size() != want.bytes().value_or(0))
      return fail(Status::ParamInvalid("pipeline '{}': input {} ('{}') is {} with {} bytes, the graph takes {}",
                                       p.options.name, i, p.in_names[i], inputs[i].desc.ToString(),
                                       inputs[i].data.size(), want.ToString()));
  }
  if (opts.replica < 0 || opts.replica >= p.options.replicas)
    return fail(Status::ParamInvalid("pipeline '{}': replica {} is out of range 0..{}", p.options.name, opts.replica,
                                     p.options.replicas - 1));
  auto owned = std::make_shared<Step>();
  Step* step = owned.get();
  step->self = std::move(owned);
  step->replica = opts.replica;
  step->inputs = std::move(inputs);
  step->outputs.resize(p.out_desc.size());
  for (std::size_t o = 0; o < p.out_desc.size(); ++o) {
    step->outputs[o].desc = p.out_desc[o];
    step->outputs[o].data.resize(p.out_desc[o].bytes().value_or(0));
  }
  step->admitted = opts.ready_at ? *opts.ready_at : p.rt->HostClock();
  step->ready_at = step->admitted;
  auto future = step->promise.GetFuture();
  {
    // Counted under the lock Unload closes with: a step either is refused or is drained.
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.closed) {
      step->self.reset();
      return fail(Status::Aborted("pipeline '{}' is unloaded", p.options.name));
    }
    ++p.in_flight;
  }
  p.entry->try_put(step);
  return future;
}

StatusOr<std::vector<graph::Tensor>> PipelineExecutor::Execute(std::vector<graph::Tensor> inputs) {
  Impl& p = *impl_;
  auto future = Submit(std::move(inputs));
  if (!p.options.timeout || future.WaitFor(*p.options.timeout)) return future.Get();
  // Still running: the hop holding the pipeline up (the oldest step in device work) is hung or too
  // slow. Abort it and poison the pipeline (what it sent the device may still land in its slot).
  const Hop* oldest = nullptr;
  std::uint64_t oldest_step = kIdle;
  for (const auto& hop : p.hops) {
    const std::uint64_t k = hop->busy_step.load(std::memory_order_acquire);
    if (k < oldest_step) {
      oldest = hop.get();
      oldest_step = k;
    }
  }
  const std::string where =
      oldest == nullptr ? std::string("no hop (the step was queued)")
                        : fmt::format("{}{}", p.StageName(oldest->stage), oldest->link ? " (its link)" : "");
  p.AbortAll(fmt::format("no result within {} ms, held up in {}", p.options.timeout->count(), where));
  return Status::Timeout("pipeline '{}': no result within {} ms; held up in {}; the pipeline was aborted", p.options.name,
                         p.options.timeout->count(), where);
}

Status PipelineExecutor::Unload() {
  Impl& p = *impl_;
  {
    std::unique_lock<std::mutex> lock(p.mu);
    if (p.closed) return Status::Ok();
    p.closed = true;
    const auto deadline = std::chrono::steady_clock::now() + p.options.timeout.value_or(std::chrono::minutes(10));
    if (!p.drained.wait_until(lock, deadline, [&] { return p.in_flight == 0; })) {
      lock.unlock();
      p.AbortAll("unloaded while steps were still running");
      lock.lock();
      // Poisoned: what is queued fails at once, and what was in device work was aborted.
      p.drained.wait(lock, [&] { return p.in_flight == 0; });
    }
  }
  if (p.graph) p.graph->wait_for_all();
  return p.Cleanup();
}

void PipelineExecutor::Abort(const std::string& why) { impl_->AbortAll(why); }

int PipelineExecutor::stages() const { return static_cast<int>(impl_->stages.size()); }
int PipelineExecutor::device_of(int stage) const { return impl_->stages.at(stage)->device; }
const graph::CompiledModel& PipelineExecutor::stage_model(int stage) const { return *impl_->stages.at(stage)->model; }
std::shared_ptr<const graph::CompiledModel> PipelineExecutor::stage_model_shared(int stage) const {
  return impl_->stages.at(stage)->model;
}
const std::vector<std::string>& PipelineExecutor::input_names() const { return impl_->in_names; }
const std::vector<std::string>& PipelineExecutor::output_names() const { return impl_->out_names; }
PipelineStats PipelineExecutor::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace npuflow::scheduler
