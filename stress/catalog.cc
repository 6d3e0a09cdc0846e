#include "stress/catalog.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "graph/ir/tensor_access.h"
#include "graph/model_file/model_file.h"
#include "graph/ops/interpreter.h"
#include "graph/ops/op_registry.h"
#include "lowering/compiler.h"
#include "stress/rng.h"
#include "synthetic/graphs.h"

namespace npuflow::stress {
namespace {

using graph::ComputeGraph;
using graph::DataType;
using graph::Node;
using graph::Shape;
using graph::Tensor;
using graph::TensorDesc;
using GraphPtr = std::unique_ptr<ComputeGraph>;
using detail::Rng;

std::uint64_t HashName(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

Tensor RandomTensor(const TensorDesc& desc, Rng& rng, float lo, float hi) {
  Tensor t = graph::ZeroTensor(desc);
  const auto n = static_cast<std::size_t>(desc.shape.num_elements().value_or(0));
  for (std::size_t i = 0; i < n; ++i) graph::StoreF(t, i, rng.Between(lo, hi));
  return t;
}

// Builds a graph node by node; the first error sticks and Take reports it.
class Builder {
 public:
  explicit Builder(std::string name) : g_(std::make_unique<ComputeGraph>(std::move(name))) {}
  Node* Data(std::string name, DataType dtype, Shape shape) {
    graph::OpDesc op(std::move(name), "Data");
    op.SetAttr("dtype", dtype);
    op.SetAttr("shape", std::move(shape));
    return Add(std::move(op), {});
  }
  Node* Const(std::string name, Tensor value) {
    graph::OpDesc op(std::move(name), "Const");
    op.SetAttr("value", std::move(value));
    return Add(std::move(op), {});
  }
  Node* Op(std::string name, std::string type, std::vector<Node*> inputs,
           std::vector<std::pair<std::string, graph::AttrValue>> attrs = {}) {
    graph::OpDesc op(std::move(name), std::move(type));
    for (auto& [k, v] : attrs) op.SetAttr(k, std::move(v));
    return Add(std::move(op), std::move(inputs));
  }
  StatusOr<GraphPtr> Take() {
    if (!status_.ok()) return status_;
    return std::move(g_);
  }

 private:
  Node* Add(graph::OpDesc op, std::vector<Node*> inputs) {
    if (!status_.ok()) return nullptr;
    auto node = g_->AddNode(std::move(op));
    if (!node.ok()) {
      status_ = node.status();
      return nullptr;
    }
    for (Node* in : inputs) {
      if (in == nullptr) return nullptr;
      if (Status s = g_->AddInput(*node, {in, 0}); !s.ok()) {
        status_ = s;
        return nullptr;
      }
    }
    return *node;
  }
  GraphPtr g_;
  Status status_;
};

// The mlp example's structure (examples/graphs/mlp.pbtxt) with weights from `seed`.
StatusOr<GraphPtr> MakeMlp(const std::string& name, std::uint64_t seed, bool dynamic) {
  Rng rng{seed};
  Builder b(name);
  Shape x_shape = dynamic ? Shape({graph::Dim::Symbolic("batch"), graph::Dim::Static(8)}) : Shape{4, 8};
  Node* x = b.Data("x", DataType::kFloat32, x_shape);
  Node* w1 = b.Const("w1", RandomTensor({DataType::kFloat32, Shape{8, 16}}, rng, -0.5f, 0.5f));
  Node* b1 = b.Const("b1", RandomTensor({DataType::kFloat32, Shape{16}}, rng, -0.5f, 0.5f));
  Node* w2 = b.Const("w2", RandomTensor({DataType::kFloat32, Shape{8, 16}}, rng, -0.5f, 0.5f));
  Node* w3 = b.Const("w3", RandomTensor({DataType::kFloat32, Shape{16, 4}}, rng, -0.5f, 0.5f));
  Node* h1 = b.Op("h1", "MatMul", {x, w1, b1});
  Node* g1 = b.Op("g1", "Gelu", {h1});
  Node* h2 = b.Op("h2", "MatMul", {x, w2});
  Node* g2 = b.Op("g2", "Tanh", {h2});
  Node* sum = b.Op("sum", "Add", {g1, g2});
  Node* logits = b.Op("logits", "MatMul", {sum, w3});
  Node* probs = b.Op("probs", "Softmax", {logits}, {{"axis", std::int64_t{-1}}});
  b.Op("out", "NetOutput", {probs});
  return b.Take();
}

constexpr std::int64_t kHeads = 4, kCacheRows = 16, kHeadDim = 8;

StatusOr<GraphPtr> MakeAttention(const std::string& name, std::uint64_t seed) {
  Rng rng{seed};
  Builder b(name);
  Node* q = b.Data("q", DataType::kFloat32, Shape{kHeads, 1, kHeadDim});
  Node* len = b.Data("len", DataType::kInt32, Shape{1});
  Node* k = b.Const("k", RandomTensor({DataType::kFloat32, Shape{kHeads, kCacheRows, kHeadDim}}, rng, -1.f, 1.f));
  Node* v = b.Const("v", RandomTensor({DataType::kFloat32, Shape{kHeads, kCacheRows, kHeadDim}}, rng, -1.f, 1.f));
  // Work before the sunk kernel on its stream: the update races the prefetch only when it lands
  // late, which is what the perturbed schedule varies.
  Node* qt = b.Op("qt", "Tanh", {q});
  Node* att = b.Op("att", "Attention", {qt, k, v, len});
  b.Op("out", "NetOutput", {att});
  return b.Take();
}

constexpr std::int64_t kWeightRows = 1024, kWeightCols = 4096;  // 16 MiB of f32: two 10 MiB chunks

StatusOr<GraphPtr> MakeBigWeight(const std::string& name, std::uint64_t seed) {
  Rng rng{seed};
  Builder b(name);
  Node* x = b.Data("x", DataType::kFloat32, Shape{1, kWeightRows});
  Node* w = b.Const("w", RandomTensor({DataType::kFloat32, Shape{kWeightRows, kWeightCols}}, rng, -0.05f, 0.05f));
  Node* mm = b.Op("mm", "MatMul", {x, w});
  Node* t = b.Op("t", "Tanh", {mm});
  b.Op("out", "NetOutput", {t});
  return b.Take();
}

// The scenario's model list, for a count.
std::vector<std::string> DefaultList(const StressOptions& o) {
  if (!o.om.empty()) return {"om"};
  if (o.scenario == "weights") return {"weights_a", "weights_b", "mlp"};
  if (o.scenario == "tiling") return {"attention_sink"};
  return {"mlp", "dag", "mlp_dynamic"};
}

StatusOr<std::vector<std::string>> ModelNames(const StressOptions& o) {
  int count = 0;
  auto [p, ec] = std::from_chars(o.models.data(), o.models.data() + o.models.size(), count);
  std::vector<std::string> names;
  if (ec == std::errc() && p == o.models.data() + o.models.size()) {
    if (count < 1 || count > 16) return Status::ParamInvalid("--models {}: expected 1..16, or catalog names", count);
    const std::vector<std::string> list = DefaultList(o);
    for (int i = 0; i < count; ++i) {
      const int round = i / static_cast<int>(list.size());
      names.push_back(list[i % list.size()] + (round == 0 ? "" : fmt::format("#{}", round + 1)));
    }
    return names;
  }
  std::size_t pos = 0;
  while (pos <= o.models.size()) {
    const std::size_t comma = std::min(o.models.find(',', pos), o.models.size());
    names.push_back(o.models.substr(pos, comma - pos));
    pos = comma + 1;
  }
  if (names.size() > 16) return Status::ParamInvalid("--models: {} names, expected at most 16", names.size());
  std::vector<std::string> seen;
  for (const std::string& n : names) {
    if (std::find(seen.begin(), seen.end(), n) != seen.end())
      return Status::ParamInvalid("--models: '{}' is listed twice (use a variant, {}#2)", n, n);
    seen.push_back(n);
  }
  return names;
}

// "mlp#2" -> ("mlp", 2); the variant number changes the weights.
StatusOr<std::pair<std::string, int>> SplitVariant(const std::string& name) {
  const std::size_t hash = name.find('#');
  std::string base = name.substr(0, hash);
  int variant = 1;
  if (hash != std::string::npos) {
    const std::string v = name.substr(hash + 1);
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), variant);
    if (v.empty() || ec != std::errc() || p != v.data() + v.size() || variant < 1)
      return Status::ParamInvalid("--models: '{}': the variant after '#' must be a number >= 1", name);
  }
  const auto& known = CatalogNames();
  if (std::find(known.begin(), known.end(), base) == known.end()) {
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    return Status::ParamInvalid("--models: unknown model '{}' (known: {}; or a count)", name, list);
  }
  return std::make_pair(base, variant);
}

// Input sets for `ios`: floats uniform in [-1, 1]; int32 scalars-of-one (a valid_len) in
// [1, kCacheRows]; other integers 1, which is in range for index-like inputs.
std::vector<Tensor> RandomInputs(const std::vector<graph::IoDef>& ios, Rng& rng) {
  std::vector<Tensor> inputs;
  for (const graph::IoDef& io : ios) {
    Tensor t = graph::ZeroTensor(io.desc);
    const auto n = static_cast<std::size_t>(io.desc.shape.num_elements().value_or(0));
    for (std::size_t e = 0; e < n; ++e) {
      if (graph::IsFloat(io.desc.dtype)) {
        graph::StoreF(t, e, rng.Between(-1.f, 1.f));
      } else if (io.desc.dtype == DataType::kInt32 && n == 1) {
        graph::StoreI(t, e, 1 + static_cast<std::int64_t>(rng.Next() % kCacheRows));
      } else {
        graph::StoreI(t, e, 1);
      }
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

// The graph's Data nodes as IoDefs (dynamic dims resolved by `resolve`), in node order, which is
// the order the runtimes take inputs in.
std::vector<graph::IoDef> DataInputs(const ComputeGraph& g) {
  std::vector<graph::IoDef> ios;
  for (const Node* n : g.nodes()) {
    if (n->op().type() != "Data") continue;
    graph::IoDef io;
    io.name = n->name();
    io.desc.dtype = n->op().Attr<DataType>("dtype").value_or(DataType::kFloat32);
    io.desc.shape = n->op().Attr<Shape>("shape").value_or(Shape{});
    ios.push_back(std::move(io));
  }
  return ios;
}

Status FillExpected(const ComputeGraph& source, const std::vector<graph::IoDef>& ios, InputSet& set) {
  NPUFLOW_ASSIGN_OR_RETURN(auto interp, graph::Interpreter::Create(source));
  std::map<std::string, Tensor> feeds;
  for (std::size_t i = 0; i < ios.size(); ++i) feeds[ios[i].name] = set.inputs[i];
  NPUFLOW_ASSIGN_OR_RETURN(set.expected, interp->Run(feeds));
  return Status::Ok();
}

// Input sets for a source graph, with the interpreter's outputs. `batches`: sizes for a
// dynamic first dim.
Status MakeSets(StressModel& m, const ComputeGraph& source, int count, std::uint64_t seed) {
  const std::vector<graph::IoDef> declared = DataInputs(source);
  static constexpr std::int64_t kBatches[] = {1, 2, 5, 8, 17, 32};
  for (int k = 0; k < count; ++k) {
    Rng rng{seed ^ HashName(m.name) ^ (0x5E7ull * static_cast<std::uint64_t>(k + 1))};
    std::vector<graph::IoDef> ios = declared;
    const std::int64_t batch = kBatches[rng.Next() % std::size(kBatches)];
    for (graph::IoDef& io : ios) {
      std::vector<graph::Dim> dims;
      for (const graph::Dim& d : io.desc.shape.dims()) dims.push_back(d.is_static() ? d : graph::Dim::Static(batch));
      io.desc.shape = Shape(std::move(dims));
    }
    InputSet set;
    set.inputs = RandomInputs(ios, rng);
    NPUFLOW_RETURN_IF_ERROR(FillExpected(source, ios, set).WithContext(fmt::format("model {} input set {}", m.name, k)));
    m.sets.push_back(std::move(set));
  }
  return Status::Ok();
}

StatusOr<StressModel> BuiltIn(const std::string& name, const std::string& base, int variant, int nops,
                              const StressOptions& o, const npu_sim::ChipSpec& chip, const std::string& work_dir) {
  StressModel m;
  m.name = name;
  m.base = base;
  const std::uint64_t seed = o.seed ^ HashName(base) ^ (0x9E37ull * static_cast<std::uint64_t>(variant));
  std::function<StatusOr<GraphPtr>()> make;
  if (base == "mlp" || base == "mlp_dynamic" || base == "mlp_single") {
    const bool dynamic = base == "mlp_dynamic";
    make = [name, seed, dynamic] { return MakeMlp(name, seed, dynamic); };
    m.v2 = dynamic;
    if (base == "mlp_single") m.graph_options["ge.enableSingleStream"] = "true";
  } else if (base == "chain") {
    make = [] { return synthetic::MakeChainGraph(12, 256); };
  } else if (base == "dag") {
    make = [seed]() -> StatusOr<GraphPtr> {
      return synthetic::MakeRandomDag({.nodes = 48, .inputs = 2, .max_fan_in = 2, .locality = 6, .seed = seed});
    };
    m.graph_options["ge.streamMaxParallelNum"] = "4";
  } else if (base == "attention_sink") {
    make = [name, seed] { return MakeAttention(name, seed); };
  } else if (base == "weights_a" || base == "weights_b") {
    make = [name, seed] { return MakeBigWeight(name, seed); };
  }
  NPUFLOW_ASSIGN_OR_RETURN(GraphPtr source, make());
  NPUFLOW_RETURN_IF_ERROR(MakeSets(m, *source, o.input_sets, o.seed).WithContext("stress"));

  if (base == "attention_sink") {
    if (!chip.task_update_supported)
      return Status::ParamInvalid("model {}: the tiling sink needs a chip with task update (910B); --chip {} has none",
                                  name, chip.name);
    graph::CompileOptions co;
    co.chip = o.chip;
    co.tiling_schedule_optimize = "1";
    co.online = true;
    co.tiling_sink_nops = nops;
    NPUFLOW_ASSIGN_OR_RETURN(GraphPtr g, make());
    NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel cm, lowering::CompileV1(std::move(g), co));
    if (std::none_of(cm.tiling_sink.begin(), cm.tiling_sink.end(), [](const auto& d) { return d.marked; }))
      return Status::Internal("model {}: the Attention was not marked for the tiling sink", name);
    m.compiled = std::make_shared<const graph::CompiledModel>(std::move(cm));
    m.nops = nops < 0 ? chip.prefetch_num : nops;
    m.prefetch = chip.prefetch_num;
  } else if (base == "weights_a" || base == "weights_b") {
    graph::CompileOptions co;
    co.chip = o.chip;
    co.external_weight = "1";
    co.external_weight_dir = (std::filesystem::path(work_dir) / name).string();
    co.model_name = name;
    NPUFLOW_ASSIGN_OR_RETURN(GraphPtr g, make());
    NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel cm, lowering::CompileV1(std::move(g), co));
    m.compiled = std::make_shared<const graph::CompiledModel>(std::move(cm));
    m.external_weights = true;
  } else {
    m.make_graph = make;
  }
  if (!m.v2) {
    if (m.compiled) {
      m.inputs = m.compiled->inputs;
      m.outputs = m.compiled->outputs;
    } else {
      // The descriptors the session's compile will give: the Data nodes in order, and outputs
      // as the interpreter produced them.
      m.inputs = DataInputs(*source);
      for (const Tensor& t : m.sets[0].expected) m.outputs.push_back({"", t.desc, {}});
    }
  }
  return m;
}

// `--input-shape NAME:D0,D1`: a user's RT2.0 model's inputs with their run-time shapes.
StatusOr<std::vector<graph::IoDef>> ResolveShapes(std::vector<graph::IoDef> ios, const std::vector<std::string>& specs) {
  for (const std::string& spec : specs) {
    const std::size_t colon = spec.rfind(':');
    if (colon == std::string::npos)
      return Status::ParamInvalid("--input-shape '{}': expected NAME:D0,D1,... (NAME: for a scalar)", spec);
    const std::string name = spec.substr(0, colon);
    auto it = std::find_if(ios.begin(), ios.end(), [&](const graph::IoDef& io) { return io.name == name; });
    if (it == ios.end()) return Status::ParamInvalid("--input-shape '{}': the model has no input '{}'", spec, name);
    std::vector<graph::Dim> dims;
    const std::string list = spec.substr(colon + 1);
    for (std::size_t pos = 0; !list.empty() && pos <= list.size();) {
      const std::size_t comma = std::min(list.find(',', pos), list.size());
      const std::string item = list.substr(pos, comma - pos);
      std::int64_t v = -1;
      auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
      if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0)
        return Status::ParamInvalid("--input-shape '{}': '{}' is not a size (a whole number >= 0)", spec, item);
      dims.push_back(graph::Dim::Static(v));
      pos = comma + 1;
    }
    if (dims.size() != it->desc.shape.rank())
      return Status::ParamInvalid("--input-shape '{}': rank {}, input '{}' is {}", spec, dims.size(), name,
                                  it->desc.ToString());
    it->desc.shape = Shape(std::move(dims));
  }
  for (const graph::IoDef& io : ios)
    if (!io.desc.shape.is_static())
      return Status::ParamInvalid("--om: input '{}' is {}: give its shape with --input-shape {}:D0,D1,...", io.name,
                                  io.desc.ToString(), io.name);
  return ios;
}

StatusOr<StressModel> UserModel(const StressOptions& o) {
  NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel read, graph::ReadModelFile(o.om));
  auto cm = std::make_shared<const graph::CompiledModel>(std::move(read));
  if (!cm->stages.empty())
    return Status::Unsupported("--om {}: a pipeline model (compile --pipeline-stages); npuflow stress drives "
                               "single-device models",
                               o.om);
  StressModel m;
  m.name = "om";
  m.base = "om";
  m.compiled = cm;
  m.v2 = cm->execute_graphs && cm->streams.empty();
  std::vector<graph::IoDef> ios;
  if (m.v2) {
    for (const auto& d : cm->execute_graphs->desc.inputs) ios.push_back({d.name, d.desc, {}});
    NPUFLOW_ASSIGN_OR_RETURN(ios, ResolveShapes(std::move(ios), o.input_shapes));
  } else {
    if (!o.input_shapes.empty())
      return Status::ParamInvalid("--input-shape is for RT2.0 models; {} runs on the v1 task sink", o.om);
    ios = cm->inputs;
    m.inputs = cm->inputs;
    m.outputs = cm->outputs;
    for (const graph::IoDef& io : m.outputs)
      if (!io.desc.bytes())
        return Status::Unsupported("--om {}: output '{}' has the dynamic shape {}", o.om, io.name, io.desc.ToString());
  }
  // The interpreter on the file's graph when it can run it; otherwise each set's first run is
  // the reference (filled before the storm).
  bool interpreted = cm->graph != nullptr;
  for (int k = 0; k < o.input_sets; ++k) {
    Rng rng{o.seed ^ HashName(o.om) ^ (0x5E7ull * static_cast<std::uint64_t>(k + 1))};
    InputSet set;
    set.inputs = RandomInputs(ios, rng);
    if (interpreted && !FillExpected(*cm->graph, ios, set).ok()) interpreted = false;
    m.sets.push_back(std::move(set));
  }
  if (!interpreted) {
    for (InputSet& s : m.sets) s.expected.clear();
    m.reference = "solo run";
  }
  return m;
}

}  // namespace

const std::vector<std::string>& CatalogNames() {
  static const std::vector<std::string> names = {"mlp",       "mlp_single", "chain",     "dag", "mlp_dynamic",
                                                 "attention_sink", "weights_a", "weights_b", "om"};
  return names;
}

StatusOr<std::vector<StressModel>> BuildModels(const StressOptions& o, const npu_sim::ChipSpec& chip,
                                               const std::string& work_dir) {
  graph::RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(std::vector<std::string> names, ModelNames(o));
  std::vector<StressModel> models;
  for (const std::string& name : names) {
    NPUFLOW_ASSIGN_OR_RETURN(auto split, SplitVariant(name));
    const auto& [base, variant] = split;
    if (base == "om") {
      if (o.om.empty()) return Status::ParamInvalid("--models names 'om': give the model file with --om FILE");
      if (variant != 1) return Status::ParamInvalid("--models: '{}': the user's model has no variants", name);
      NPUFLOW_ASSIGN_OR_RETURN(StressModel m, UserModel(o));
      models.push_back(std::move(m));
      continue;
    }
    if (base == "attention_sink" && !o.tiling_nops.empty()) {
      for (int nops : o.tiling_nops) {
        const int resolved = nops < 0 ? chip.prefetch_num : nops;
        NPUFLOW_ASSIGN_OR_RETURN(StressModel m, BuiltIn(fmt::format("{}/nops={}", name, resolved), base, variant, nops, o,
                                                        chip, work_dir));
        models.push_back(std::move(m));
      }
      continue;
    }
    NPUFLOW_ASSIGN_OR_RETURN(StressModel m, BuiltIn(name, base, variant, -1, o, chip, work_dir));
    models.push_back(std::move(m));
  }
  return models;
}

Status CompareOutputs(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  if (got.size() != want.size()) return Status::Failed("{} outputs, expected {}", got.size(), want.size());
  for (std::size_t o = 0; o < got.size(); ++o) {
    const Tensor &a = got[o], &b = want[o];
    if (!(a.desc == b.desc) || a.data.size() != b.data.size())
      return Status::Failed("output {} is {} ({} bytes), expected {}", o, a.desc.ToString(), a.data.size(),
                            b.desc.ToString());
    const auto n = static_cast<std::size_t>(b.desc.shape.num_elements().value_or(0));
    for (std::size_t i = 0; i < n; ++i) {
      if (graph::IsFloat(b.desc.dtype)) {
        const float x = graph::LoadF(a, i), y = graph::LoadF(b, i);
        if (!(std::fabs(x - y) <= 1e-4f * std::fabs(y) + 1e-5f))
          return Status::Failed("output {} element {} is {}, expected {}", o, i, x, y);
      } else if (graph::LoadI(a, i) != graph::LoadI(b, i)) {
        return Status::Failed("output {} element {} is {}, expected {}", o, i, graph::LoadI(a, i), graph::LoadI(b, i));
      }
    }
  }
  return Status::Ok();
}

}  // namespace npuflow::stress
