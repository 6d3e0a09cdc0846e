#include "lowering/graph_converter.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "graph/ir/tensor_access.h"
#include "graph/ops/op_registry.h"
#include "lowering/compiler.h"
#include "lowering/pass.h"

namespace npuflow::lowering {

using graph::ComputeGraph;
using graph::Node;
using graph::TensorDesc;

// What the converters share while one graph is lowered.
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

  exe::ExecuteGraph& main() { return *set.main; }
  std::int64_t Priority(const Node& node, int stage) const { return order.at(&node) * 8 + stage; }
  StatusOr<int> Add(exe::ExecuteGraph& g, exe::ExeNode n, bool deps_from_inputs = true) {
    return g.AddNode(std::move(n), deps_from_inputs);
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
  place.name = node.name();
  place.kernel = "ConstToDevice";
  SetDesc(place, "const", desc);
  if (node.type() == "FileConstant") {
    NPUFLOW_ASSIGN_OR_RETURN(std::string location, node.op().Attr<std::string>("location"));
    NPUFLOW_ASSIGN_OR_RETURN(std::int64_t offset, node.op().AttrOr<std::int64_t>("offset", 0));
    place.attrs["location"] = location;
    place.attrs["offset"] = offset;
  } else if (node.type() == "Variable" && !node.op().HasAttr("value")) {
    place.attrs["value"] = graph::ZeroTensor(desc);  // a Variable starts at zeros
  } else {
    NPUFLOW_ASSIGN_OR_RETURN(graph::Tensor value, node.op().Attr<graph::Tensor>("value"));
    place.attrs["value"] = std::move(value);
  }
  const int init_value = ctx.set.init->AddValue(node.name());
  place.outputs = {init_value};
  NPUFLOW_RETURN_IF_ERROR(ctx.set.init->AddNode(std::move(place)).status());
  ctx.set.init->AddOutput(init_value);

  const int deinit_value = ctx.set.deinit->AddInput(node.name());
  exe::ExeNode release;
  release.name = "free/" + node.name();
  release.kernel = "FreeConst";
  release.inputs = {deinit_value};
  NPUFLOW_RETURN_IF_ERROR(ctx.set.deinit->AddNode(std::move(release)).status());
  return Status::Ok();
}

Status ConvertData(const Node& node, LowerContext& ctx) {
  const int user = ctx.main().AddInput(node.name());
  const int buffer = ctx.main().AddValue(node.name() + ":0");
  exe::ExeNode prepare;
  prepare.name = "input/" + node.name();
  prepare.kernel = "PrepareInput";
  prepare.inputs = {user};
  prepare.outputs = {buffer};
  prepare.priority = ctx.Priority(node, 0);
  prepare.attrs["io_name"] = node.name();
  SetDesc(prepare, "io", node.outputs()[0]);
  NPUFLOW_ASSIGN_OR_RETURN(int id, ctx.Add(ctx.main(), std::move(prepare)));
  ctx.tensors[{&node, 0}] = buffer;
  ctx.launch_of[buffer] = id;  // its host-to-device copy is on the stream
  ctx.alloc_of[buffer] = id;
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
    NPUFLOW_ASSIGN_OR_RETURN(int id, ctx.Add(ctx.main(), std::move(copy), false));
    ctx.readers[value].push_back(id);
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

  exe::ExeNode common;
  common.attrs["op_type"] = node.type();
  common.attrs["op_name"] = node.name();
  for (const auto& [key, value] : node.op().attrs())
    if (key.rfind('_', 0) != 0) common.attrs["op." + key] = value;  // compiler annotations stay behind
  common.attrs["core_count"] = static_cast<std::int64_t>(ctx.chip.aicore_count);
  common.attrs["num_inputs"] = static_cast<std::int64_t>(nin);
  common.attrs["num_outputs"] = static_cast<std::int64_t>(nout);
  common.attrs["static"] = is_static;
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
  for (int j = 0; j < nout; ++j) outs.push_back(ctx.main().AddValue(fmt::format("{}:{}", node.name(), j)));
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
    NPUFLOW_ASSIGN_OR_RETURN(infer, ctx.Add(ctx.main(), std::move(n)));
    tiling_value = ctx.main().AddValue(node.name() + "/tiling");
    exe::ExeNode t = common;
    t.name = node.name() + "/tiling";
    t.kernel = "Tiling";
    t.inputs = ins_and_outs;
    t.outputs = {tiling_value};
    t.priority = ctx.Priority(node, 1);
    NPUFLOW_ASSIGN_OR_RETURN(tiling, ctx.Add(ctx.main(), std::move(t)));
  }
  exe::ExeNode alloc = common;
  alloc.name = node.name() + "/alloc";
  alloc.kernel = "AllocOutputs";
  alloc.inputs = ins;
  alloc.outputs = outs;
  alloc.priority = ctx.Priority(node, 2);
  AddDep(alloc, infer);
  for (int v : ins) AddDep(alloc, ctx.alloc_of.count(v) ? ctx.alloc_of[v] : -1);
  NPUFLOW_ASSIGN_OR_RETURN(int alloc_id, ctx.Add(ctx.main(), std::move(alloc), false));

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
  }
  NPUFLOW_ASSIGN_OR_RETURN(int launch_id, ctx.Add(ctx.main(), std::move(launch), false));

  for (int v : ins) ctx.readers[v].push_back(launch_id);
  for (int j = 0; j < nout; ++j) {
    ctx.tensors[{&node, j}] = outs[j];
    ctx.launch_of[outs[j]] = launch_id;
    ctx.alloc_of[outs[j]] = alloc_id;
    if (!common.attrs.count(fmt::format("alias_{}", j))) ctx.run_allocated.push_back(outs[j]);
  }
  return Status::Ok();
}

// After every node: one FreeMemory per run-allocated tensor, after its readers (or its writer).
Status AddFrees(LowerContext& ctx) {
  for (int value : ctx.run_allocated) {
    exe::ExeNode n;
    n.name = "free/" + ctx.main().values()[value].name;
    n.kernel = "FreeMemory";
    n.inputs = {value};
    const std::vector<int>& readers = ctx.readers[value];
    std::int64_t priority = 0;
    for (int r : readers) {
      AddDep(n, r);
      priority = std::max(priority, ctx.main().nodes()[r].priority);
    }
    if (readers.empty()) {
      AddDep(n, ctx.launch_of[value]);
      priority = ctx.main().nodes()[ctx.launch_of[value]].priority;
    }
    n.priority = priority + 1;
    NPUFLOW_RETURN_IF_ERROR(ctx.Add(ctx.main(), std::move(n), false).status());
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

}  // namespace

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
  if (!graph.subgraphs().empty())
    return Status::Unsupported("graph '{}': subgraphs (PartitionedCall) are not lowered to RT2.0 yet", graph.name());
  exe::ExecuteGraphSet set;
  set.init = std::make_shared<exe::ExecuteGraph>(graph.name() + ".init");
  set.main = std::make_shared<exe::ExecuteGraph>(graph.name());
  set.deinit = std::make_shared<exe::ExecuteGraph>(graph.name() + ".deinit");
  LowerContext ctx{graph, chip, set, {}, {}, {}, {}, {}, {}, {}};
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
    } else if (node->type() == "Const" || node->type() == "FileConstant" || node->type() == "Variable") {
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
  for (Node* node : constants) {
    if (node->type() == "Variable") set.desc.updates_variables = true;
    NPUFLOW_ASSIGN_OR_RETURN(NodeConverterFn fn, FindConverter(*node));
    NPUFLOW_RETURN_IF_ERROR(fn(*node, ctx));
    const int value = set.main->AddInput(node->name());
    ctx.tensors[{node, 0}] = value;
  }
  for (Node* node : order) {
    const std::string& type = node->type();
    if (type == "Data" || type == "Const" || type == "FileConstant" || type == "Variable") continue;
    NPUFLOW_ASSIGN_OR_RETURN(NodeConverterFn fn, FindConverter(*node));
    NPUFLOW_RETURN_IF_ERROR(fn(*node, ctx));
  }
  NPUFLOW_RETURN_IF_ERROR(AddFrees(ctx));
  NPUFLOW_RETURN_IF_ERROR(set.Validate());
  return set;
}

StatusOr<exe::ExecuteGraphSet> CompileV2(std::unique_ptr<ComputeGraph> graph, const graph::CompileOptions& options) {
  graph::RegisterBuiltinOps();
  NPUFLOW_RETURN_IF_ERROR(CheckCompileOptions(options));
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::ChipSpec chip, npu_sim::LoadChipSpec(options.chip));
  graph::CompiledModel scratch;
  scratch.options = options;
  scratch.chip = chip.name;
  PassContext pass_ctx{*graph, options, chip, scratch};
  NPUFLOW_RETURN_IF_ERROR(RunPasses(pass_ctx, {"validate", "infer-shapes", "const-fold", "dead-code-elimination"}));
  return ConvertComputeGraphToExecuteGraph(*graph, chip);
}

}  // namespace npuflow::lowering
