#include "lowering/graph_converter.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "graph/ir/tensor_access.h"
#include "graph/ops/control_flow.h"
#include "graph/ops/op_registry.h"
#include "lowering/compiler.h"
#include "lowering/pass.h"
#include "lowering/tiling_sink.h"

namespace npuflow::lowering {

using graph::ComputeGraph;
using graph::Node;
using graph::TensorDesc;

// What the converters share while one graph is lowered.
//
// Control flow lowers into regions: an If's branch, a While's loop and its body. A region's nodes
// run only when it is entered (a switch picked it, a loop's head fired), so no dep may reach into
// a region from outside it: a node of a region waits only for nodes of the same region, and a
// node left without any waits for the region's entry. A value made outside and read inside is
// read directly; its readers, for freeing, are the region's exit node (the If's merge, the
// While's exit), never a node inside.
struct LowerContext {
  const ComputeGraph& graph;
  const npu_sim::ChipSpec& chip;
  exe::ExecuteGraphSet& set;
  std::map<const Node*, std::int64_t> order;             // topological position: the priority
  std::map<std::pair<const Node*, int>, int> tensors;    // (node, output) -> Main value
  std::map<int, int> launch_of;                          // value -> the Main node that issues its data
  std::map<int, int> alloc_of;                           // value -> the Main node that gives its address
  std::map<int, std::vector<int>> readers;               // value -> Main nodes that read its data
  std::vector<int> run_allocated;                        // values whose memory a run takes (to free)
  std::vector<int> user_outputs;                         // Main inputs: the caller's output tensors
  std::map<std::string, int> variables;                  // Variable name -> its Main input (shared by name)
  // Regions: 0 is Main itself.
  int region = 0;
  std::vector<int> region_parent{-1};
  std::vector<int> region_exit{-1};  // the node, in the parent region, that stands for the region
  std::vector<int> node_region;      // per Main node
  std::map<int, int> value_region;   // per Main value made by a converter (absent: region 0)
  std::string prefix;                // names of nodes lowered from a subgraph: "<call>/<role>/"
  // Streams (a multi-stream Main: no control flow, the assign-streams pass's `_stream`): the stream
  // each value's data is issued on and whose allocator holds its memory, the stream of each node
  // that issues device work, and the cross-stream waits made so far ((value, stream) -> WaitEvent).
  std::map<int, int> value_stream;
  std::map<int, int> node_stream;
  std::map<std::pair<int, int>, int> waits;
  int streams = 1;
  int events = 0;

  exe::ExecuteGraph& main() { return *set.main; }
  std::int64_t Priority(const Node& node, int stage) const { return order.at(&node) * 8 + stage; }
  int NewValue(const std::string& name) {
    const int v = main().AddValue(prefix + name);
    value_region[v] = region;
    return v;
  }
  int RegionOf(int value) const {
    auto it = value_region.find(value);
    return it == value_region.end() ? 0 : it->second;
  }
  // Adds a Main node in the current region. With deps_from_inputs it waits for the node that
  // makes each input ready (its allocation, else its producer). Deps on nodes of other regions
  // are dropped (the region's entry stands for them).
  StatusOr<int> Add(exe::ExeNode n, bool deps_from_inputs = true) {
    if (deps_from_inputs) {
      for (int v : n.inputs) {
        auto it = alloc_of.find(v);
        const int p = it != alloc_of.end() ? it->second : main().values()[v].producer;
        const exe::ExeDep dep{p, -1};
        if (p >= 0 && std::find(n.deps.begin(), n.deps.end(), dep) == n.deps.end()) n.deps.push_back(dep);
      }
    }
    std::erase_if(n.deps, [&](const exe::ExeDep& d) {
      return d.node < 0 || d.node >= static_cast<int>(node_region.size()) || node_region[d.node] != region;
    });
    n.name = prefix + n.name;
    return AddIn(std::move(n), region);
  }
  // Adds a Main node to `in_region` with exactly the deps given.
  StatusOr<int> AddIn(exe::ExeNode n, int in_region) {
    NPUFLOW_ASSIGN_OR_RETURN(int id, main().AddNode(std::move(n), false));
    node_region.push_back(in_region);
    return id;
  }
  // `node` reads `value`: from an inner region, the reader that counts is the exit of the
  // outermost region inside the value's own.
  void AddReader(int value, int node) {
    const int vr = RegionOf(value);
    int reader = node;
    for (int r = node_region[node]; r != vr; r = region_parent[r]) {
      if (r <= 0) return;  // a value of an inner region read outside it: cannot happen
      reader = region_exit[r];
    }
    std::vector<int>& list = readers[value];
    if (std::find(list.begin(), list.end(), reader) == list.end()) list.push_back(reader);
  }
};

namespace {

void SetDesc(exe::ExeNode& n, const std::string& prefix, const TensorDesc& d) {
  n.attrs[prefix + "_shape"] = d.shape;
  n.attrs[prefix + "_dtype"] = d.dtype;
}

void AddDep(exe::ExeNode& n, int node) {
  if (node < 0) return;
  const exe::ExeDep dep{node, -1};
  if (std::find(n.deps.begin(), n.deps.end(), dep) == n.deps.end()) n.deps.push_back(dep);
}

int StreamOrZero(const Node& node) {  // graph_index.h's StreamOf gives -1 when unset
  auto s = node.op().AttrOr<std::int64_t>("_stream", 0);
  return s.ok() ? static_cast<int>(*s) : 0;
}

StatusOr<int> EventNode(LowerContext& ctx, const char* kernel, int stream, int event, std::vector<int> deps,
                        std::int64_t priority) {
  exe::ExeNode n;
  n.name = fmt::format("{}/{}", kernel == std::string_view("SendEvent") ? "send" : "wait", event);
  n.kernel = kernel;
  n.attrs["stream"] = static_cast<std::int64_t>(stream);
  n.attrs["event"] = static_cast<std::int64_t>(event);
  n.priority = priority;
  for (int d : deps) AddDep(n, d);
  const std::string prefix = std::exchange(ctx.prefix, "");
  auto id = ctx.Add(std::move(n), false);
  ctx.prefix = prefix;
  if (id.ok()) ctx.node_stream[*id] = stream;
  return id;
}

// The WaitEvent after which stream `stream` may read `value` (made on another stream), or -1 when
// no wait is needed: one SendEvent / WaitEvent pair per (value, reading stream).
StatusOr<int> WaitFor(LowerContext& ctx, int value, int stream) {
  auto vs = ctx.value_stream.find(value);
  if (vs == ctx.value_stream.end() || vs->second == stream || !ctx.launch_of.count(value)) return -1;
  if (auto it = ctx.waits.find({value, stream}); it != ctx.waits.end()) return it->second;
  const int event = ctx.events++;
  const std::int64_t priority = ctx.main().nodes()[ctx.launch_of[value]].priority;
  NPUFLOW_ASSIGN_OR_RETURN(int send, EventNode(ctx, "SendEvent", vs->second, event, {ctx.launch_of[value]}, priority));
  NPUFLOW_ASSIGN_OR_RETURN(int wait, EventNode(ctx, "WaitEvent", stream, event, {send}, priority));
  ctx.waits[{value, stream}] = wait;
  return wait;
}

StatusOr<int> Tensor(LowerContext& ctx, const Node& node, int input) {
  const graph::Endpoint& src = node.inputs()[input];
  auto it = ctx.tensors.find({src.node, src.index});
  if (it == ctx.tensors.end())
    return Status::Internal("node '{}': input {} ('{}':{}) was not lowered before it", node.name(), input,
                            src.node->name(), src.index);
  return it->second;
}

// --- Constants: Init places them, DeInit frees them, Main reads them as its last inputs.
Status ConvertConstant(const Node& node, LowerContext& ctx) {
  if (node.outputs().empty() || !node.outputs()[0].shape.is_static())
    return Status::ParamInvalid("node '{}' ({}): a constant needs a static shape", node.name(), node.type());
  const TensorDesc& desc = node.outputs()[0];
  exe::ExeNode place;
  place.name = ctx.prefix + node.name();
  place.kernel = "ConstToDevice";
  SetDesc(place, "const", desc);
  if (node.type() == "FileConstant") {
    NPUFLOW_ASSIGN_OR_RETURN(std::string location, node.op().Attr<std::string>("location"));
    NPUFLOW_ASSIGN_OR_RETURN(std::int64_t offset, node.op().AttrOr<std::int64_t>("offset", 0));
    place.attrs["location"] = location;
    place.attrs["offset"] = offset;
  } else if (node.type() == "Variable" && !node.op().HasAttr("value")) {
    place.attrs["zeros"] = true;  // a Variable starts at zeros (not spelled out: a KV cache is large)
  } else {
    NPUFLOW_ASSIGN_OR_RETURN(graph::Tensor value, node.op().Attr<graph::Tensor>("value"));
    place.attrs["value"] = std::move(value);
  }
  const int init_value = ctx.set.init->AddValue(ctx.prefix + node.name());
  place.outputs = {init_value};
  NPUFLOW_RETURN_IF_ERROR(ctx.set.init->AddNode(std::move(place)).status());
  ctx.set.init->AddOutput(init_value);

  const int deinit_value = ctx.set.deinit->AddInput(ctx.prefix + node.name());
  exe::ExeNode release;
  release.name = "free/" + ctx.prefix + node.name();
  release.kernel = "FreeConst";
  release.inputs = {deinit_value};
  NPUFLOW_RETURN_IF_ERROR(ctx.set.deinit->AddNode(std::move(release)).status());
  return Status::Ok();
}

Status ConvertData(const Node& node, LowerContext& ctx) {
  const int user = ctx.main().AddInput(node.name());
  const int buffer = ctx.NewValue(node.name() + ":0");
  exe::ExeNode prepare;
  prepare.name = "input/" + node.name();
  prepare.kernel = "PrepareInput";
  prepare.inputs = {user};
  prepare.outputs = {buffer};
  prepare.priority = ctx.Priority(node, 0);
  prepare.attrs["io_name"] = node.name();
  SetDesc(prepare, "io", node.outputs()[0]);
  NPUFLOW_ASSIGN_OR_RETURN(int id, ctx.Add(std::move(prepare)));
  ctx.tensors[{&node, 0}] = buffer;
  ctx.launch_of[buffer] = id;  // its host-to-device copy is on the stream
  ctx.alloc_of[buffer] = id;
  ctx.value_stream[buffer] = 0;
  ctx.node_stream[id] = 0;
  ctx.run_allocated.push_back(buffer);
  return Status::Ok();
}

Status ConvertNetOutput(const Node& node, LowerContext& ctx) {
  for (std::size_t j = 0; j < node.inputs().size(); ++j) {
    NPUFLOW_ASSIGN_OR_RETURN(int value, Tensor(ctx, node, static_cast<int>(j)));
    const graph::Endpoint& src = node.inputs()[j];
    exe::ExeNode copy;
    copy.name = fmt::format("output/{}", j);
    copy.kernel = "CopyOutput";
    copy.inputs = {value, ctx.user_outputs[j]};
    copy.priority = ctx.Priority(node, 0);
    copy.attrs["io_name"] = ctx.set.desc.outputs[j].name;
    SetDesc(copy, "io", src.node->outputs()[src.index]);
    AddDep(copy, ctx.launch_of.count(value) ? ctx.launch_of[value] : -1);
    AddDep(copy, ctx.alloc_of.count(value) ? ctx.alloc_of[value] : -1);
    NPUFLOW_ASSIGN_OR_RETURN(int wait, WaitFor(ctx, value, 0));
    AddDep(copy, wait);
    NPUFLOW_ASSIGN_OR_RETURN(int id, ctx.Add(std::move(copy), false));
    ctx.node_stream[id] = 0;
    ctx.AddReader(value, id);
  }
  return Status::Ok();
}

// A compute op: [InferShape, Tiling,] AllocOutputs, LaunchKernel.
Status ConvertComputeOp(const Node& node, LowerContext& ctx) {
  NPUFLOW_ASSIGN_OR_RETURN(const graph::OpDef* def, graph::OpRegistry::Global().Find(node.type()));
  if (def->device_kernel.empty())
    return Status::Unsupported("node '{}' ({}): the op has no device kernel to launch", node.name(), node.type());
  const int nin = static_cast<int>(node.inputs().size());
  const int nout = static_cast<int>(node.outputs().size());
  std::vector<int> ins;
  bool is_static = true;
  for (int i = 0; i < nin; ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(int v, Tensor(ctx, node, i));
    ins.push_back(v);
    const graph::Endpoint& src = node.inputs()[i];
    if (!src.node->outputs()[src.index].shape.is_static()) is_static = false;
  }
  for (const TensorDesc& d : node.outputs())
    if (!d.shape.is_static()) is_static = false;
  // A tiling that needs an input's value known only at run time (seed 003's dynamic path): the op
  // is tiled before each launch, from the value read back once what writes it has run.
  const bool value_tiling = HasRuntimeTilingDepend(node, *def);
  if (value_tiling) is_static = false;

  exe::ExeNode common;
  common.attrs["op_type"] = node.type();
  common.attrs["op_name"] = node.name();
  for (const auto& [key, value] : node.op().attrs())
    if (key.rfind('_', 0) != 0) common.attrs["op." + key] = value;  // compiler annotations stay behind
  common.attrs["core_count"] = static_cast<std::int64_t>(ctx.chip.aicore_count);
  // The block-split cost model (graph::TileOp): dispatch ns, GB/s, GFLOP/s.
  const graph::BlockCosts costs = graph::TileTargetOf(ctx.chip).costs;
  common.attrs["block_costs"] = std::vector<double>{costs.dispatch_ns, costs.bytes_per_ns, costs.flops_per_ns};
  common.attrs["num_inputs"] = static_cast<std::int64_t>(nin);
  common.attrs["num_outputs"] = static_cast<std::int64_t>(nout);
  common.attrs["static"] = is_static;
  common.attrs["value_tiling"] = value_tiling;
  const int stream = ctx.region == 0 ? StreamOrZero(node) : 0;
  ctx.streams = std::max(ctx.streams, stream + 1);
  common.attrs["stream"] = static_cast<std::int64_t>(stream);
  // An op that updates a Variable in place writes the Variable's own memory.
  for (int j = 0; j < nout; ++j) {
    const int alias = j < static_cast<int>(def->inplace.size()) ? def->inplace[j] : -1;
    if (def->updates_inplace_input && alias >= 0 && node.inputs()[alias].node->type() == "Variable")
      common.attrs[fmt::format("alias_{}", j)] = static_cast<std::int64_t>(alias);
  }
  if (is_static) {
    for (int i = 0; i < nin; ++i) {
      const graph::Endpoint& src = node.inputs()[i];
      SetDesc(common, fmt::format("in{}", i), src.node->outputs()[src.index]);
    }
    for (int j = 0; j < nout; ++j) SetDesc(common, fmt::format("out{}", j), node.outputs()[j]);
  }
  std::vector<int> outs;
  for (int j = 0; j < nout; ++j) outs.push_back(ctx.NewValue(fmt::format("{}:{}", node.name(), j)));
  std::vector<int> ins_and_outs = ins;
  ins_and_outs.insert(ins_and_outs.end(), outs.begin(), outs.end());

  int infer = -1, tiling = -1, tiling_value = -1;
  if (!is_static) {
    exe::ExeNode n = common;
    n.name = node.name() + "/infer_shape";
    n.kernel = "InferShape";
    n.inputs = ins;
    n.outputs = outs;
    n.priority = ctx.Priority(node, 0);
    NPUFLOW_ASSIGN_OR_RETURN(infer, ctx.Add(std::move(n)));
    tiling_value = ctx.NewValue(node.name() + "/tiling");
    exe::ExeNode t = common;
    t.name = node.name() + "/tiling";
    t.kernel = "Tiling";
    t.inputs = ins_and_outs;
    t.outputs = {tiling_value};
    t.priority = ctx.Priority(node, 1);
    if (value_tiling) {  // it reads the values: after what writes them, and what its control inputs order first
      for (int k : def->tiling_depend_inputs)
        if (k >= 0 && k < nin) AddDep(t, ctx.launch_of.count(ins[k]) ? ctx.launch_of[ins[k]] : -1);
      for (const Node* before : node.control_inputs())
        for (int j = 0; j < static_cast<int>(before->outputs().size()); ++j) {
          auto it = ctx.tensors.find({before, j});
          if (it != ctx.tensors.end() && ctx.launch_of.count(it->second)) AddDep(t, ctx.launch_of[it->second]);
        }
    }
    NPUFLOW_ASSIGN_OR_RETURN(tiling, ctx.Add(std::move(t)));
  }
  exe::ExeNode alloc = common;
  alloc.name = node.name() + "/alloc";
  alloc.kernel = "AllocOutputs";
  alloc.inputs = ins;
  alloc.outputs = outs;
  alloc.priority = ctx.Priority(node, 2);
  AddDep(alloc, infer);
  for (int v : ins) AddDep(alloc, ctx.alloc_of.count(v) ? ctx.alloc_of[v] : -1);
  NPUFLOW_ASSIGN_OR_RETURN(int alloc_id, ctx.Add(std::move(alloc), false));

  exe::ExeNode launch = common;
  launch.name = node.name();
  launch.kernel = "LaunchKernel";
  launch.inputs = ins_and_outs;
  if (tiling_value >= 0) launch.inputs.push_back(tiling_value);
  launch.priority = ctx.Priority(node, 3);
  AddDep(launch, alloc_id);
  AddDep(launch, tiling);
  for (int v : ins) {
    AddDep(launch, ctx.launch_of.count(v) ? ctx.launch_of[v] : -1);
    AddDep(launch, ctx.alloc_of.count(v) ? ctx.alloc_of[v] : -1);
    NPUFLOW_ASSIGN_OR_RETURN(int wait, WaitFor(ctx, v, stream));
    AddDep(launch, wait);
  }
  // Control inputs order this launch after theirs (across streams through an event), as the
  // task sink does.
  for (const Node* before : node.control_inputs()) {
    for (int j = 0; j < static_cast<int>(before->outputs().size()); ++j) {
      auto it = ctx.tensors.find({before, j});
      if (it == ctx.tensors.end() || !ctx.launch_of.count(it->second)) continue;
      AddDep(launch, ctx.launch_of[it->second]);
      NPUFLOW_ASSIGN_OR_RETURN(int wait, WaitFor(ctx, it->second, stream));
      AddDep(launch, wait);
    }
  }
  NPUFLOW_ASSIGN_OR_RETURN(int launch_id, ctx.Add(std::move(launch), false));
  ctx.node_stream[launch_id] = stream;

  for (int v : ins) ctx.AddReader(v, launch_id);
  for (int j = 0; j < nout; ++j) {
    ctx.tensors[{&node, j}] = outs[j];
    ctx.launch_of[outs[j]] = launch_id;
    ctx.alloc_of[outs[j]] = alloc_id;
    ctx.value_stream[outs[j]] = stream;
    if (!common.attrs.count(fmt::format("alias_{}", j))) ctx.run_allocated.push_back(outs[j]);
  }
  return Status::Ok();
}

// One FreeMemory per tensor a run allocates in the current region, after its readers (or its
// writer), in that region.
Status AddFrees(LowerContext& ctx) {
  const std::string prefix = std::exchange(ctx.prefix, "");  // value names carry it already
  std::vector<int> mine;
  std::erase_if(ctx.run_allocated, [&](int value) {
    if (ctx.RegionOf(value) != ctx.region) return false;
    mine.push_back(value);
    return true;
  });
  for (int value : mine) {
    exe::ExeNode n;
    n.name = "free/" + ctx.main().values()[value].name;
    n.kernel = "FreeMemory";
    n.inputs = {value};
    const int home = ctx.value_stream.count(value) ? ctx.value_stream[value] : 0;
    n.attrs["stream"] = static_cast<std::int64_t>(home);
    const std::vector<int> readers = ctx.readers[value];
    std::int64_t priority = 0;
    std::map<int, std::vector<int>> other_streams;  // readers on other streams, by stream
    for (int r : readers) {
      AddDep(n, r);
      priority = std::max(priority, ctx.main().nodes()[r].priority);
      auto rs = ctx.node_stream.find(r);
      if (rs != ctx.node_stream.end() && rs->second != home) other_streams[rs->second].push_back(r);
    }
    // The memory goes back to the allocator of its own stream, which may hand it out to the next
    // kernel of that stream at once: that stream first waits for the readers on other streams.
    for (const auto& [stream, on_it] : other_streams) {
      const int event = ctx.events++;
      auto send = EventNode(ctx, "SendEvent", stream, event, on_it, priority);
      if (!send.ok()) {
        ctx.prefix = prefix;
        return send.status();
      }
      auto wait = EventNode(ctx, "WaitEvent", home, event, {*send}, priority);
      if (!wait.ok()) {
        ctx.prefix = prefix;
        return wait.status();
      }
      AddDep(n, *wait);
    }
    if (readers.empty()) {
      AddDep(n, ctx.launch_of[value]);
      priority = ctx.main().nodes()[ctx.launch_of[value]].priority;
    }
    n.priority = priority + 1;
    auto added = ctx.Add(std::move(n), false);
    if (!added.ok()) {
      ctx.prefix = prefix;
      return added.status();
    }
  }
  ctx.prefix = prefix;
  return Status::Ok();
}

// --- Regions (see LowerContext).

struct Region {
  int id = 0;
  int parent = 0;
  int first_node = 0;
};

Region OpenRegion(LowerContext& ctx, int exit_node) {
  Region r{static_cast<int>(ctx.region_parent.size()), ctx.region, static_cast<int>(ctx.main().nodes().size())};
  ctx.region_parent.push_back(ctx.region);
  ctx.region_exit.push_back(exit_node);
  ctx.region = r.id;
  return r;
}

// Frees the region's tensors, makes every node of it that waits for nothing wait for `entry`,
// and returns its sinks (the nodes of the region nothing waits for).
StatusOr<std::vector<int>> CloseRegion(LowerContext& ctx, const Region& r, exe::ExeDep entry) {
  NPUFLOW_RETURN_IF_ERROR(AddFrees(ctx));
  exe::ExecuteGraph& g = ctx.main();
  const int end = static_cast<int>(g.nodes().size());
  std::vector<char> waited_for(end, 0);
  for (int i = r.first_node; i < end; ++i) {
    if (ctx.node_region[i] != r.id) continue;
    if (g.nodes()[i].deps.empty()) NPUFLOW_RETURN_IF_ERROR(g.AddDep(i, entry));
    for (const exe::ExeDep& d : g.nodes()[i].deps) waited_for[d.node] = 1;
  }
  std::vector<int> sinks;
  for (int i = r.first_node; i < end; ++i)
    if (ctx.node_region[i] == r.id && !waited_for[i]) sinks.push_back(i);
  ctx.region = r.parent;
  return sinks;
}

// The nodes of region `r` (but `skip`) that no node added since the region opened waits for: what
// a node closing part of the region must wait for.
std::vector<int> UnwaitedNodes(LowerContext& ctx, const Region& r, int skip = -1) {
  const exe::ExecuteGraph& g = ctx.main();
  const int end = static_cast<int>(g.nodes().size());
  std::vector<char> waited(end, 0);
  for (int i = r.first_node; i < end; ++i)
    for (const exe::ExeDep& d : g.nodes()[i].deps) waited[d.node] = 1;
  std::vector<int> out;
  for (int i = r.first_node; i < end; ++i)
    if (ctx.node_region[i] == r.id && i != skip && !waited[i]) out.push_back(i);
  return out;
}

exe::ExeNode Control(std::string name, std::string kernel, std::int64_t priority) {
  exe::ExeNode n;
  n.name = std::move(name);
  n.kernel = std::move(kernel);
  n.priority = priority;
  return n;
}

// Lowers a subgraph's nodes with its Data nodes reading `args`; returns the values its
// NetOutput reads. Names get "<prefix><call>/<role>/"; priorities are the call's.
StatusOr<std::vector<int>> LowerSubgraph(LowerContext& ctx, const Node& call, std::string_view role,
                                         const ComputeGraph& sub, const std::vector<int>& args);

StatusOr<std::vector<TensorDesc>> ArgDescs(const Node& node, std::size_t first) {
  std::vector<TensorDesc> descs;
  for (std::size_t i = first; i < node.inputs().size(); ++i) {
    const graph::Endpoint& e = node.inputs()[i];
    descs.push_back(e.node->outputs().at(e.index));
  }
  return descs;
}

// The branch's subgraph, its shapes inferred for this call (a subgraph may serve several calls).
StatusOr<const ComputeGraph*> PrepareBranch(const Node& node, std::string_view attr,
                                            const std::vector<TensorDesc>& args) {
  NPUFLOW_ASSIGN_OR_RETURN(const ComputeGraph* sub, graph::BranchGraph(node, attr));
  NPUFLOW_RETURN_IF_ERROR(graph::InferGraphShapes(const_cast<ComputeGraph&>(*sub), &args)
                              .WithContext(fmt::format("node '{}' ({}): {} '{}'", node.name(), node.type(), attr,
                                                       sub->name())));
  return sub;
}

// If(cond, x...): a switch reads the condition (branch 0: then, 1: else); each branch copies its
// results into the If's outputs and ends in a join; a merge after both joins stands for the If.
Status ConvertIf(const Node& node, LowerContext& ctx) {
  if (node.inputs().empty()) return Status::ParamInvalid("node '{}' (If): no condition input", node.name());
  NPUFLOW_ASSIGN_OR_RETURN(int cond, Tensor(ctx, node, 0));
  std::vector<int> args;
  for (int i = 1; i < static_cast<int>(node.inputs().size()); ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(int v, Tensor(ctx, node, i));
    args.push_back(v);
  }
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<TensorDesc> arg_descs, ArgDescs(node, 1));
  std::vector<int> outs;
  for (std::size_t j = 0; j < node.outputs().size(); ++j) outs.push_back(ctx.NewValue(fmt::format("{}:{}", node.name(), j)));

  exe::ExeNode merge = Control(ctx.prefix + node.name(), "NoOp", ctx.Priority(node, 3));
  merge.kind = exe::NodeKind::kMerge;
  NPUFLOW_ASSIGN_OR_RETURN(const int merge_id, ctx.AddIn(std::move(merge), ctx.region));

  exe::ExeNode sw = Control(node.name() + "/switch", "IfSwitch", ctx.Priority(node, 0));
  sw.kind = exe::NodeKind::kSwitch;
  sw.branches = 2;
  sw.inputs = {cond};
  sw.outputs = {ctx.NewValue(node.name() + "/branch")};
  sw.attrs["op_name"] = node.name();
  for (int v : args) {  // the branches read them directly: issued and placed before the switch
    AddDep(sw, ctx.launch_of.count(v) ? ctx.launch_of[v] : -1);
    AddDep(sw, ctx.alloc_of.count(v) ? ctx.alloc_of[v] : -1);
  }
  AddDep(sw, ctx.launch_of.count(cond) ? ctx.launch_of[cond] : -1);
  AddDep(sw, ctx.alloc_of.count(cond) ? ctx.alloc_of[cond] : -1);
  NPUFLOW_ASSIGN_OR_RETURN(const int sw_id, ctx.Add(std::move(sw), false));
  ctx.AddReader(cond, sw_id);

  const std::string_view roles[2] = {graph::kIfThenAttr, graph::kIfElseAttr};
  for (int b = 0; b < 2; ++b) {
    NPUFLOW_ASSIGN_OR_RETURN(const ComputeGraph* sub, PrepareBranch(node, roles[b], arg_descs));
    const Region region = OpenRegion(ctx, merge_id);
    NPUFLOW_ASSIGN_OR_RETURN(std::vector<int> results, LowerSubgraph(ctx, node, roles[b], *sub, args));
    if (results.size() != outs.size())
      return Status::ParamInvalid("node '{}' (If): {} returns {} outputs, the If has {}", node.name(), roles[b],
                                  results.size(), outs.size());
    const std::string prefix = std::exchange(ctx.prefix, fmt::format("{}{}/{}/", ctx.prefix, node.name(), roles[b]));
    for (std::size_t j = 0; j < outs.size(); ++j) {
      exe::ExeNode copy = Control(fmt::format("output/{}", j), "CopyToValue", ctx.Priority(node, 2));
      copy.inputs = {results[j]};
      copy.outputs = {outs[j]};
      AddDep(copy, ctx.launch_of.count(results[j]) ? ctx.launch_of[results[j]] : -1);
      AddDep(copy, ctx.alloc_of.count(results[j]) ? ctx.alloc_of[results[j]] : -1);
      NPUFLOW_ASSIGN_OR_RETURN(int copy_id, ctx.Add(std::move(copy), false));
      ctx.AddReader(results[j], copy_id);
    }
    const std::string join_name = ctx.prefix + "end";
    ctx.prefix = prefix;
    NPUFLOW_ASSIGN_OR_RETURN(std::vector<int> sinks, CloseRegion(ctx, region, exe::ExeDep{sw_id, b}));
    exe::ExeNode join = Control(join_name, "NoOp", ctx.Priority(node, 3));
    for (int k : sinks) join.deps.push_back({k, -1});
    if (sinks.empty()) join.deps.push_back({sw_id, b});
    NPUFLOW_ASSIGN_OR_RETURN(int join_id, ctx.AddIn(std::move(join), region.id));
    NPUFLOW_RETURN_IF_ERROR(ctx.main().AddDep(merge_id, {join_id, -1}));
  }
  for (std::size_t j = 0; j < outs.size(); ++j) {
    ctx.tensors[{&node, static_cast<int>(j)}] = outs[j];
    ctx.launch_of[outs[j]] = merge_id;
    ctx.alloc_of[outs[j]] = merge_id;
    ctx.run_allocated.push_back(outs[j]);
  }
  return Status::Ok();
}

// While(x...): enter copies x into the loop variables; the loop's head (a merge) runs cond, whose
// switch picks exit (0) or the body (1); the body's results are copied into the loop variables
// (next) and the iteration's end leads back to the head. The exit stands for the While, and its
// outputs are the loop variables.
Status ConvertWhile(const Node& node, LowerContext& ctx) {
  std::vector<int> args;
  for (int i = 0; i < static_cast<int>(node.inputs().size()); ++i) {
    NPUFLOW_ASSIGN_OR_RETURN(int v, Tensor(ctx, node, i));
    args.push_back(v);
  }
  NPUFLOW_ASSIGN_OR_RETURN(std::int64_t max_iterations, graph::MaxIterations(node));
  std::vector<int> vars;
  for (std::size_t j = 0; j < node.outputs().size(); ++j) vars.push_back(ctx.NewValue(fmt::format("{}:{}", node.name(), j)));
  if (vars.size() != args.size())
    return Status::Internal("node '{}' (While): {} outputs for {} inputs", node.name(), vars.size(), args.size());
  const int counter = ctx.NewValue(node.name() + "/iterations");

  exe::ExeNode enter = Control(node.name() + "/enter", "LoopEnter", ctx.Priority(node, 0));
  enter.inputs = args;
  enter.outputs = vars;
  enter.outputs.push_back(counter);
  for (int v : args) {
    AddDep(enter, ctx.launch_of.count(v) ? ctx.launch_of[v] : -1);
    AddDep(enter, ctx.alloc_of.count(v) ? ctx.alloc_of[v] : -1);
  }
  NPUFLOW_ASSIGN_OR_RETURN(const int enter_id, ctx.Add(std::move(enter), false));
  for (int v : args) ctx.AddReader(v, enter_id);
  NPUFLOW_ASSIGN_OR_RETURN(const int exit_id,
                           ctx.AddIn(Control(ctx.prefix + node.name(), "NoOp", ctx.Priority(node, 3)), ctx.region));

  // The loop: head, cond, switch.
  const Region loop = OpenRegion(ctx, exit_id);
  exe::ExeNode head = Control(ctx.prefix + node.name() + "/head", "NoOp", ctx.Priority(node, 1));
  head.kind = exe::NodeKind::kMerge;
  head.deps.push_back({enter_id, -1});
  NPUFLOW_ASSIGN_OR_RETURN(const int head_id, ctx.AddIn(std::move(head), loop.id));
  NPUFLOW_ASSIGN_OR_RETURN(const ComputeGraph* cond_graph, PrepareBranch(node, graph::kWhileCondAttr, node.outputs()));
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<int> cond, LowerSubgraph(ctx, node, graph::kWhileCondAttr, *cond_graph, vars));
  if (cond.size() != 1)
    return Status::ParamInvalid("node '{}' (While): cond returns {} outputs, expected 1", node.name(), cond.size());
  // The condition is read into a word first, and cond's tensors are freed, so that the switch is
  // the last node of every iteration's cond part: a node after it (the iteration's end) then waits
  // for nothing that also fires in the iteration that exits (counters are only restored when the
  // run ends, and a loop inside a loop enters again within one run).
  exe::ExeNode read = Control(node.name() + "/read_cond", "ReadCondition", ctx.Priority(node, 1));
  read.inputs = {cond[0]};
  read.outputs = {ctx.NewValue(node.name() + "/go_on")};
  AddDep(read, ctx.launch_of.count(cond[0]) ? ctx.launch_of[cond[0]] : -1);
  AddDep(read, ctx.alloc_of.count(cond[0]) ? ctx.alloc_of[cond[0]] : -1);
  AddDep(read, head_id);
  const int go_on = read.outputs[0];
  NPUFLOW_ASSIGN_OR_RETURN(const int read_id, ctx.Add(std::move(read), false));
  ctx.AddReader(cond[0], read_id);
  NPUFLOW_RETURN_IF_ERROR(AddFrees(ctx));  // cond's tensors (the loop region's, so far)
  exe::ExeNode sw = Control(node.name() + "/switch", "LoopSwitch", ctx.Priority(node, 1));
  sw.kind = exe::NodeKind::kSwitch;
  sw.branches = 2;
  sw.inputs = {go_on, counter};
  sw.outputs = {ctx.NewValue(node.name() + "/branch")};
  sw.attrs["op_name"] = node.name();
  sw.attrs["max_iterations"] = max_iterations;
  AddDep(sw, read_id);
  for (int k : UnwaitedNodes(ctx, loop, head_id)) AddDep(sw, k);
  NPUFLOW_ASSIGN_OR_RETURN(const int sw_id, ctx.Add(std::move(sw), false));
  NPUFLOW_RETURN_IF_ERROR(ctx.main().AddDep(exit_id, {sw_id, 0}));

  // The body, entered by the switch's branch 1.
  const Region body = OpenRegion(ctx, -1);
  NPUFLOW_ASSIGN_OR_RETURN(const ComputeGraph* body_graph, PrepareBranch(node, graph::kWhileBodyAttr, node.outputs()));
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<int> results, LowerSubgraph(ctx, node, graph::kWhileBodyAttr, *body_graph, vars));
  if (results.size() != vars.size())
    return Status::ParamInvalid("node '{}' (While): body returns {} outputs for {} loop variables", node.name(),
                                results.size(), vars.size());
  exe::ExeNode next = Control(node.name() + "/next", "LoopNext", ctx.Priority(node, 2));
  next.inputs = results;
  next.outputs = vars;
  for (int v : results) {
    AddDep(next, ctx.launch_of.count(v) ? ctx.launch_of[v] : -1);
    AddDep(next, ctx.alloc_of.count(v) ? ctx.alloc_of[v] : -1);
  }
  // Next frees the loop variables' old memory: after every node of the body (one may read a loop
  // variable without feeding a result, like an in-place write into a Variable).
  for (int k : UnwaitedNodes(ctx, body)) AddDep(next, k);
  NPUFLOW_ASSIGN_OR_RETURN(const int next_id, ctx.Add(std::move(next), false));
  for (int v : results) ctx.AddReader(v, next_id);
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<int> body_sinks, CloseRegion(ctx, body, exe::ExeDep{sw_id, 1}));
  // The loop region's sinks are not waited for: the switch is one, and it fires in every iteration,
  // the one that exits included.
  NPUFLOW_RETURN_IF_ERROR(CloseRegion(ctx, loop, exe::ExeDep{head_id, -1}).status());

  // The iteration's end waits for everything of the iteration, then leads back to the head.
  exe::ExeNode end = Control(ctx.prefix + node.name() + "/next_iteration", "NoOp", ctx.Priority(node, 2));
  for (int k : body_sinks) end.deps.push_back({k, -1});  // all fire only in an iteration that continues
  NPUFLOW_ASSIGN_OR_RETURN(const int end_id, ctx.AddIn(std::move(end), loop.id));
  NPUFLOW_RETURN_IF_ERROR(ctx.main().AddDep(head_id, {end_id, -1}));

  for (std::size_t j = 0; j < vars.size(); ++j) {
    ctx.tensors[{&node, static_cast<int>(j)}] = vars[j];
    ctx.launch_of[vars[j]] = exit_id;
    ctx.alloc_of[vars[j]] = exit_id;
    ctx.run_allocated.push_back(vars[j]);
  }
  return Status::Ok();
}

}  // namespace

NodeConverterRegistry& NodeConverterRegistry::Global() {
  static NodeConverterRegistry* registry = [] {
    auto* r = new NodeConverterRegistry();
    r->Register("Data", &ConvertData);
    r->Register("Const", &ConvertConstant);
    r->Register("FileConstant", &ConvertConstant);
    r->Register("Variable", &ConvertConstant);
    r->Register("NetOutput", &ConvertNetOutput);
    r->Register("If", &ConvertIf);
    r->Register("While", &ConvertWhile);
    r->Register(std::string(graph::OpEngineName(graph::OpEngine::kAICore)), &ConvertComputeOp);
    r->Register(std::string(graph::OpEngineName(graph::OpEngine::kAICpu)), &ConvertComputeOp);
    return r;
  }();
  return *registry;
}

void NodeConverterRegistry::Register(std::string key, NodeConverterFn fn) {
  for (auto& [k, f] : converters_) {
    if (k == key) {
      f = fn;
      return;
    }
  }
  converters_.emplace_back(std::move(key), fn);
}

NodeConverterFn NodeConverterRegistry::FindRegisterData(std::string_view key) const {
  for (const auto& [k, f] : converters_)
    if (k == key) return f;
  return nullptr;
}

namespace {

StatusOr<NodeConverterFn> FindConverter(const Node& node) {
  const NodeConverterRegistry& registry = NodeConverterRegistry::Global();
  std::string lowering_func = "(none)";
  if (node.op().HasAttr(kLoweringFuncAttr)) {
    NPUFLOW_ASSIGN_OR_RETURN(lowering_func, node.op().Attr<std::string>(kLoweringFuncAttr));
    if (NodeConverterFn fn = registry.FindRegisterData(lowering_func)) return fn;
  }
  if (NodeConverterFn fn = registry.FindRegisterData(node.type())) return fn;
  std::string library = "(unknown op)";
  if (auto def = graph::OpRegistry::Global().Find(node.type()); def.ok()) {
    library = std::string(graph::OpEngineName((*def)->engine));
    if (NodeConverterFn fn = registry.FindRegisterData(library)) return fn;
  }
  return Status::NotFound("node '{}' ({}): no node converter for its lowering function '{}', its op type '{}' or its "
                          "kernel library '{}'",
                          node.name(), node.type(), lowering_func, node.type(), library);
}

bool IsConstant(const Node& node) {
  return node.type() == "Const" || node.type() == "FileConstant" || node.type() == "Variable";
}

StatusOr<std::vector<int>> LowerSubgraph(LowerContext& ctx, const Node& call, std::string_view role,
                                         const ComputeGraph& sub, const std::vector<int>& args) {
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<Node*> data, graph::SubgraphInputs(sub));
  if (data.size() != args.size())
    return Status::ParamInvalid("node '{}' ({}): {} '{}' takes {} inputs, the node gives {}", call.name(), call.type(),
                                role, sub.name(), data.size(), args.size());
  NPUFLOW_ASSIGN_OR_RETURN(Node* out, graph::SubgraphOutput(sub));
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<Node*> order, sub.TopologicalOrder());
  for (std::size_t i = 0; i < data.size(); ++i) ctx.tensors[{data[i], 0}] = args[i];
  for (Node* n : order) ctx.order[n] = ctx.order.at(&call);
  const std::string prefix = std::exchange(ctx.prefix, fmt::format("{}{}/{}/", ctx.prefix, call.name(), role));
  Status s;
  for (Node* n : order) {
    if (n->type() == "Data" || n->type() == "NetOutput" || IsConstant(*n)) continue;
    auto fn = FindConverter(*n);
    if (!fn.ok()) {
      s = fn.status();
      break;
    }
    s = (*fn)(*n, ctx);
    if (!s.ok()) break;
  }
  ctx.prefix = prefix;
  NPUFLOW_RETURN_IF_ERROR(s.WithContext(fmt::format("node '{}' ({}): {} '{}'", call.name(), call.type(), role,
                                                     sub.name())));
  std::vector<int> results;
  for (int j = 0; j < static_cast<int>(out->inputs().size()); ++j) {
    NPUFLOW_ASSIGN_OR_RETURN(int v, Tensor(ctx, *out, j));
    results.push_back(v);
  }
  return results;
}

// Places a constant (in Init) and makes it a Main input; same-named Variables share one.
Status LowerConstant(LowerContext& ctx, Node* node, const std::string& prefix) {
  if (node->type() == "Variable") {
    ctx.set.desc.updates_variables = true;
    if (auto it = ctx.variables.find(node->name()); it != ctx.variables.end()) {
      ctx.tensors[{node, 0}] = it->second;
      return Status::Ok();
    }
  }
  NPUFLOW_ASSIGN_OR_RETURN(NodeConverterFn fn, FindConverter(*node));
  ctx.prefix = node->type() == "Variable" ? "" : prefix;
  Status s = fn(*node, ctx);
  const int value = ctx.set.main->AddInput(ctx.prefix + node->name());
  ctx.prefix.clear();
  NPUFLOW_RETURN_IF_ERROR(s);
  ctx.tensors[{node, 0}] = value;
  if (node->type() == "Variable") ctx.variables[node->name()] = value;
  return Status::Ok();
}

}  // namespace

int RemoveDeadNodes(exe::ExecuteGraph& graph) {
  // Kernels with no effect beyond their outputs: removable once nothing reads those.
  static const std::set<std::string, std::less<>> kPure = {"InferShape", "Tiling", "NoOp"};
  const std::vector<exe::ExeNode>& nodes = graph.nodes();
  const std::size_t n = nodes.size();
  std::vector<char> dead(n, 0);
  std::set<int> outputs(graph.outputs().begin(), graph.outputs().end());
  int removed = 0;
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<int> waiters(n, 0), readers(graph.values().size(), 0);
    for (std::size_t i = 0; i < n; ++i) {
      if (dead[i]) continue;
      for (const exe::ExeDep& d : nodes[i].deps) ++waiters[d.node];
      for (int v : nodes[i].inputs) ++readers[v];
    }
    for (std::size_t i = 0; i < n; ++i) {
      const exe::ExeNode& node = nodes[i];
      if (dead[i] || node.kind != exe::NodeKind::kNormal || !kPure.count(node.kernel) || waiters[i] > 0) continue;
      bool used = false;
      for (int v : node.outputs) used = used || readers[v] > 0 || outputs.count(v) > 0;
      if (used) continue;
      dead[i] = 1;
      ++removed;
      changed = true;
    }
  }
  if (removed == 0) return 0;
  std::vector<int> remap(n, -1);
  int next = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (!dead[i]) remap[i] = next++;
  graph.RemapNodes(remap);
  return removed;
}

bool NeedsRuntimeV2(const ComputeGraph& graph) { return HasDynamicInputs(graph) || graph::HasControlFlow(graph); }

bool HasDynamicInputs(const ComputeGraph& graph) {
  for (const Node* node : graph.nodes()) {
    if (node->type() != "Data") continue;
    auto shape = node->op().Attr<graph::Shape>("shape");
    if (shape.ok() && !shape->is_static()) return true;
  }
  return false;
}

StatusOr<exe::ExecuteGraphSet> ConvertComputeGraphToExecuteGraph(const ComputeGraph& graph,
                                                                  const npu_sim::ChipSpec& chip) {
  graph::RegisterBuiltinOps();
  exe::ExecuteGraphSet set;
  set.init = std::make_shared<exe::ExecuteGraph>(graph.name() + ".init");
  set.main = std::make_shared<exe::ExecuteGraph>(graph.name());
  set.deinit = std::make_shared<exe::ExecuteGraph>(graph.name() + ".deinit");
  LowerContext ctx{graph, chip, set};
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  for (std::size_t i = 0; i < order.size(); ++i) ctx.order[order[i]] = static_cast<std::int64_t>(i);

  // Main's inputs in their fixed order: model inputs (Data, by `index`, then graph order), model
  // outputs, then one per constant (Init's outputs, in the same order).
  std::vector<std::pair<std::int64_t, Node*>> data;
  const Node* net_output = nullptr;
  std::vector<Node*> constants;
  for (std::size_t pos = 0; pos < order.size(); ++pos) {
    Node* node = order[pos];
    if (node->type() == "Data") {
      NPUFLOW_ASSIGN_OR_RETURN(std::int64_t idx,
                               node->op().AttrOr<std::int64_t>("index", 1'000'000'000 + static_cast<std::int64_t>(pos)));
      data.emplace_back(idx, node);
    } else if (node->type() == "NetOutput") {
      if (net_output) return Status::ParamInvalid("graph '{}': more than one NetOutput", graph.name());
      net_output = node;
    } else if (IsConstant(*node)) {
      constants.push_back(node);
    }
  }
  if (!net_output) return Status::ParamInvalid("graph '{}': no NetOutput", graph.name());
  std::stable_sort(data.begin(), data.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [idx, node] : data) {
    NPUFLOW_RETURN_IF_ERROR(ConvertData(*node, ctx).WithContext("lowering"));
    set.desc.inputs.push_back({node->name(), node->outputs()[0]});
  }
  for (std::size_t j = 0; j < net_output->inputs().size(); ++j) {
    const graph::Endpoint& src = net_output->inputs()[j];
    const std::string name = fmt::format("{}:{}", src.node->name(), src.index);
    ctx.user_outputs.push_back(set.main->AddInput("output/" + name));
    set.desc.outputs.push_back({name, src.node->outputs()[src.index]});
  }
  for (Node* node : constants) NPUFLOW_RETURN_IF_ERROR(LowerConstant(ctx, node, ""));
  // Constants of subgraphs (control-flow bodies) too, named after their subgraph.
  for (const ComputeGraph* sub : graph.subgraphs())
    for (Node* node : sub->nodes())
      if (IsConstant(*node)) NPUFLOW_RETURN_IF_ERROR(LowerConstant(ctx, node, sub->name() + "/"));
  for (Node* node : order) {
    if (node->type() == "Data" || IsConstant(*node)) continue;
    NPUFLOW_ASSIGN_OR_RETURN(NodeConverterFn fn, FindConverter(*node));
    NPUFLOW_RETURN_IF_ERROR(fn(*node, ctx));
  }
  NPUFLOW_RETURN_IF_ERROR(AddFrees(ctx));
  // Every side stream joins the main stream at the end (a kernel whose result nobody reads, like a
  // Variable's update, still finishes before the run does), and starts after what the main stream
  // was given before the run (a run issued while the previous one still runs, with Execute on the
  // caller's stream).
  std::vector<std::vector<int>> on_stream(static_cast<std::size_t>(std::max(ctx.streams, 1)));
  for (const auto& [node, s] : ctx.node_stream)
    if (s > 0 && s < ctx.streams) on_stream[static_cast<std::size_t>(s)].push_back(node);
  for (int stream = 1; stream < ctx.streams; ++stream) {
    const std::vector<int>& on_it = on_stream[static_cast<std::size_t>(stream)];
    if (on_it.empty()) continue;
    const int join = ctx.events++;
    NPUFLOW_ASSIGN_OR_RETURN(int send, EventNode(ctx, "SendEvent", stream, join, on_it, exe::kNoPriority - 1));
    NPUFLOW_RETURN_IF_ERROR(EventNode(ctx, "WaitEvent", 0, join, {send}, exe::kNoPriority - 1).status());
    const int fork = ctx.events++;
    NPUFLOW_ASSIGN_OR_RETURN(int fork_send, EventNode(ctx, "SendEvent", 0, fork, {}, -1));
    NPUFLOW_ASSIGN_OR_RETURN(int fork_wait, EventNode(ctx, "WaitEvent", stream, fork, {fork_send}, -1));
    for (int node : on_it) NPUFLOW_RETURN_IF_ERROR(ctx.main().AddDep(node, exe::ExeDep{fork_wait, -1}));
  }
  set.desc.reusable_stream_num = ctx.streams;
  set.desc.reusable_event_num = ctx.events;
  RemoveDeadNodes(*set.main);  // the offline pass (shapes and tiling known at lowering were folded already)
  NPUFLOW_RETURN_IF_ERROR(set.Validate());
  return set;
}

const std::vector<std::string>& V2Pipeline() {
  static const std::vector<std::string> passes = {"validate", "infer-shapes", "const-fold", "dead-code-elimination"};
  return passes;
}

StatusOr<graph::CompiledModel> CompileV2Model(std::unique_ptr<ComputeGraph> graph, const graph::CompileOptions& options,
                                              const DumpRequest& dump) {
  graph::RegisterBuiltinOps();
  NPUFLOW_RETURN_IF_ERROR(CheckCompileOptions(options));
  if (!dump.after.empty() && dump.after != kLoweringDumpName &&
      std::find(V2Pipeline().begin(), V2Pipeline().end(), dump.after) == V2Pipeline().end())
    return Status::ParamInvalid("--dump-after '{}': not a pass of RT2.0's compile ({}, {})", dump.after,
                                fmt::join(V2Pipeline(), ", "), kLoweringDumpName);
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::ChipSpec chip, npu_sim::LoadChipSpec(options.chip));
  graph::CompiledModel model;
  model.options = options;
  model.chip = chip.name;
  PassContext pass_ctx{*graph, options, chip, model};
  NPUFLOW_RETURN_IF_ERROR(RunPasses(pass_ctx, V2Pipeline(), dump));
  // Multi-stream mode: the task sink's stream assignment decides which stream each launch goes on
  // (control flow keeps one stream: its regions are not split across streams).
  if (options.stream_mode == graph::CompileOptions::StreamMode::kMulti && !graph::HasControlFlow(*graph))
    NPUFLOW_RETURN_IF_ERROR(RunPasses(pass_ctx, {"assign-engines", "assign-streams"}));
  NPUFLOW_ASSIGN_OR_RETURN(exe::ExecuteGraphSet set, ConvertComputeGraphToExecuteGraph(*graph, chip));
  if (dump.after == kLoweringDumpName && dump.sink) dump.sink(kLoweringDumpName, PrintExecuteGraphs(set, true));
  model.execute_graphs = std::make_shared<exe::ExecuteGraphSet>(std::move(set));
  model.executor = "auto";
  return model;
}

StatusOr<exe::ExecuteGraphSet> CompileV2(std::unique_ptr<ComputeGraph> graph, const graph::CompileOptions& options) {
  NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel model, CompileV2Model(std::move(graph), options));
  return *model.execute_graphs;
}

std::string PrintExecuteGraphs(const exe::ExecuteGraphSet& set, bool nodes) {
  std::string out = "execute graphs (RT2.0):\n";
  for (const auto* g : {set.init.get(), set.main.get(), set.deinit.get()}) {
    int switches = 0, merges = 0;
    for (const exe::ExeNode& n : g->nodes()) {
      switches += n.kind == exe::NodeKind::kSwitch ? 1 : 0;
      merges += n.kind == exe::NodeKind::kMerge ? 1 : 0;
    }
    const char* role = g == set.init.get() ? "Init" : g == set.main.get() ? "Main" : "DeInit";
    out += fmt::format("  {:<6} {:>6} nodes, {:>6} values, {} inputs, {} outputs{}\n", role, g->nodes().size(),
                       g->values().size(), g->inputs().size(), g->outputs().size(),
                       switches + merges > 0 ? fmt::format(" ({} switch, {} merge)", switches, merges) : "");
  }
  auto io = [](const std::vector<exe::ModelIoDesc>& list) {
    std::vector<std::string> parts;
    for (const exe::ModelIoDesc& d : list) parts.push_back(fmt::format("{} {}", d.name, d.desc.ToString()));
    return parts.empty() ? std::string("none") : fmt::format("{}", fmt::join(parts, ", "));
  };
  out += fmt::format("  inputs: {}\n  outputs: {}\n", io(set.desc.inputs), io(set.desc.outputs));
  out += fmt::format("  resources: {} stream(s), {} event(s), {} notify(s){}\n", set.desc.reusable_stream_num,
                     set.desc.reusable_event_num, set.desc.reusable_notify_num,
                     set.desc.updates_variables ? "; holds Variables" : "");
  if (nodes)
    for (const auto* g : {set.init.get(), set.main.get(), set.deinit.get()})
      out += fmt::format("graph {}\n{}", g->name(), g->ToText());
  return out;
}

}  // namespace npuflow::lowering
