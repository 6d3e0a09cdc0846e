#include "graph/ir/text_format.h"

#include <charconv>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <sstream>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

namespace npuflow::graph {

StatusOr<DataType> DataTypeFromProto(proto::DataType t, std::string_view where) {
  switch (t) {
    case proto::DT_FLOAT: return DataType::kFloat32;
    case proto::DT_FLOAT16: return DataType::kFloat16;
    case proto::DT_BF16: return DataType::kBFloat16;
    case proto::DT_INT32: return DataType::kInt32;
    case proto::DT_INT64: return DataType::kInt64;
    case proto::DT_UINT8: return DataType::kUInt8;
    case proto::DT_BOOL: return DataType::kBool;
    default: return Status::ParamInvalid("{}: undefined data type", where);
  }
}

proto::DataType DataTypeToProto(DataType t) {
  switch (t) {
    case DataType::kFloat32: return proto::DT_FLOAT;
    case DataType::kFloat16: return proto::DT_FLOAT16;
    case DataType::kBFloat16: return proto::DT_BF16;
    case DataType::kInt32: return proto::DT_INT32;
    case DataType::kInt64: return proto::DT_INT64;
    case DataType::kUInt8: return proto::DT_UINT8;
    case DataType::kBool: return proto::DT_BOOL;
  }
  return proto::DT_UNDEFINED;
}

StatusOr<Shape> ShapeFromProto(const proto::Shape& s, std::string_view where) {
  std::vector<Dim> dims;
  for (const proto::Dim& d : s.dim()) {
    if (d.kind_case() == proto::Dim::kSymbol) {
      if (d.symbol().empty()) return Status::ParamInvalid("{}: a dynamic dim needs a symbol name", where);
      dims.push_back(Dim::Symbolic(d.symbol()));
    } else {
      if (d.size() < 0) return Status::ParamInvalid("{}: dim size {} is negative", where, d.size());
      dims.push_back(Dim::Static(d.size()));
    }
  }
  return Shape(std::move(dims));
}

proto::Shape ShapeToProto(const Shape& s) {
  proto::Shape out;
  for (const Dim& d : s.dims()) {
    auto* pd = out.add_dim();
    if (d.is_static()) pd->set_size(d.size); else pd->set_symbol(d.symbol);
  }
  return out;
}

namespace {

StatusOr<DataType> FromProto(proto::DataType t, std::string_view where) { return DataTypeFromProto(t, where); }
proto::DataType ToProto(DataType t) { return DataTypeToProto(t); }
StatusOr<Shape> FromProto(const proto::Shape& s, std::string_view where) { return ShapeFromProto(s, where); }
proto::Shape ToProto(const Shape& s) { return ShapeToProto(s); }

StatusOr<Tensor> FromProto(const proto::TensorDef& t, std::string_view where) {
  Tensor out;
  NPUFLOW_ASSIGN_OR_RETURN(out.desc.dtype, FromProto(t.dtype(), where));
  NPUFLOW_ASSIGN_OR_RETURN(out.desc.shape, FromProto(t.shape(), where));
  if (!out.desc.shape.is_static())
    return Status::ParamInvalid("{}: a constant tensor needs a static shape, got {}", where, out.desc.shape.ToString());
  auto bytes = out.desc.bytes();
  if (!bytes)
    return Status::ParamInvalid("{}: a constant tensor of {} is too large: its size in bytes does not fit 64 bits",
                                where, out.desc.ToString());
  const std::size_t elems = static_cast<std::size_t>(*out.desc.shape.num_elements());
  if (!t.data().empty()) {
    if (t.data().size() != *bytes)
      return Status::ParamInvalid("{}: tensor data has {} bytes, expected {} for {}", where, t.data().size(), *bytes,
                                  out.desc.ToString());
    out.data.assign(t.data().begin(), t.data().end());
  } else if (t.float_val_size() > 0) {
    if (out.desc.dtype != DataType::kFloat32)
      return Status::ParamInvalid("{}: float_val needs dtype f32, got {}", where, DataTypeName(out.desc.dtype));
    if (static_cast<std::size_t>(t.float_val_size()) != elems)
      return Status::ParamInvalid("{}: {} float_val for {} elements", where, t.float_val_size(), elems);
    out.data.resize(*bytes);
    std::memcpy(out.data.data(), t.float_val().data(), *bytes);
  } else if (t.int_val_size() > 0) {
    if (static_cast<std::size_t>(t.int_val_size()) != elems)
      return Status::ParamInvalid("{}: {} int_val for {} elements", where, t.int_val_size(), elems);
    out.data.resize(*bytes);
    for (std::size_t i = 0; i < elems; ++i) {
      const std::int64_t v = t.int_val(static_cast<int>(i));
      switch (out.desc.dtype) {
        case DataType::kInt32: { auto x = static_cast<std::int32_t>(v); std::memcpy(&out.data[i * 4], &x, 4); break; }
        case DataType::kInt64: std::memcpy(&out.data[i * 8], &v, 8); break;
        case DataType::kUInt8:
        case DataType::kBool: out.data[i] = static_cast<std::uint8_t>(v); break;
        default:
          return Status::ParamInvalid("{}: int_val needs an integer or bool dtype, got {}", where,
                                      DataTypeName(out.desc.dtype));
      }
    }
  } else {
    if (*bytes > kMaxZeroLiteralBytes)
      return Status::ParamInvalid(
          "{}: a constant tensor of {} without values would be {} bytes of zeros, more than the {} the reader fills "
          "in; give its values, or keep a weight this large in a FileConstant",
          where, out.desc.ToString(), *bytes, kMaxZeroLiteralBytes);
    out.data.assign(*bytes, 0);  // an empty literal is zeros
  }
  return out;
}

proto::TensorDef ToProto(const Tensor& t) {
  proto::TensorDef out;
  out.set_dtype(ToProto(t.desc.dtype));
  *out.mutable_shape() = ToProto(t.desc.shape);
  out.set_data(std::string(t.data.begin(), t.data.end()));
  return out;
}

StatusOr<AttrValue> FromProto(const proto::AttrValue& a, std::string_view where) {
  switch (a.value_case()) {
    case proto::AttrValue::kI: return AttrValue(a.i());
    case proto::AttrValue::kF: return AttrValue(a.f());
    case proto::AttrValue::kS: return AttrValue(a.s());
    case proto::AttrValue::kB: return AttrValue(a.b());
    case proto::AttrValue::kInts: return AttrValue(std::vector<std::int64_t>(a.ints().val().begin(), a.ints().val().end()));
    case proto::AttrValue::kFloats: return AttrValue(std::vector<double>(a.floats().val().begin(), a.floats().val().end()));
    case proto::AttrValue::kStrs: return AttrValue(std::vector<std::string>(a.strs().val().begin(), a.strs().val().end()));
    case proto::AttrValue::kTensor: {
      NPUFLOW_ASSIGN_OR_RETURN(Tensor t, FromProto(a.tensor(), where));
      return AttrValue(std::move(t));
    }
    case proto::AttrValue::kType: {
      NPUFLOW_ASSIGN_OR_RETURN(DataType t, FromProto(a.type(), where));
      return AttrValue(t);
    }
    case proto::AttrValue::kShape: {
      NPUFLOW_ASSIGN_OR_RETURN(Shape s, FromProto(a.shape(), where));
      return AttrValue(std::move(s));
    }
    case proto::AttrValue::kSubgraph: return AttrValue(SubgraphRef{a.subgraph()});
    case proto::AttrValue::VALUE_NOT_SET: break;
  }
  return Status::ParamInvalid("{}: attribute without a value", where);
}

proto::AttrValue ToProto(const AttrValue& v) {
  proto::AttrValue out;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::int64_t>) out.set_i(x);
        else if constexpr (std::is_same_v<T, double>) out.set_f(x);
        else if constexpr (std::is_same_v<T, std::string>) out.set_s(x);
        else if constexpr (std::is_same_v<T, bool>) out.set_b(x);
        // A list sets its case even when empty (mutable_*() first): an unset value would read
        // back as "attribute without a value".
        else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          auto* list = out.mutable_ints();
          for (auto e : x) list->add_val(e);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          auto* list = out.mutable_floats();
          for (auto e : x) list->add_val(e);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          auto* list = out.mutable_strs();
          for (const auto& e : x) list->add_val(e);
        }
        else if constexpr (std::is_same_v<T, Tensor>) *out.mutable_tensor() = ToProto(x);
        else if constexpr (std::is_same_v<T, DataType>) out.set_type(ToProto(x));
        else if constexpr (std::is_same_v<T, Shape>) *out.mutable_shape() = ToProto(x);
        else if constexpr (std::is_same_v<T, SubgraphRef>) out.set_subgraph(x.name);
      },
      v);
  return out;
}

// "node", "node:2" or "^node".
struct InputRef {
  std::string node;
  int index = 0;
  bool control = false;
};

StatusOr<InputRef> ParseInput(const std::string& text, std::string_view where) {
  InputRef ref;
  std::string_view s = text;
  if (!s.empty() && s[0] == '^') {
    ref.control = true;
    s.remove_prefix(1);
  }
  const auto colon = s.rfind(':');
  if (colon != std::string_view::npos && !ref.control) {
    std::string_view idx = s.substr(colon + 1);
    int value = -1;
    auto [ptr, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), value);
    if (ec != std::errc() || ptr != idx.data() + idx.size() || value < 0)
      return Status::ParamInvalid("{}: input '{}' is not \"node\", \"node:N\" or \"^node\"", where, text);
    ref.index = value;
    s = s.substr(0, colon);
  }
  if (s.empty()) return Status::ParamInvalid("{}: input '{}' names no node", where, text);
  ref.node = std::string(s);
  return ref;
}

Status FillGraph(ComputeGraph& g, const proto::GraphDef& def, const ComputeGraph* root, std::string_view source) {
  for (const proto::NodeDef& nd : def.node()) {
    const std::string where = fmt::format("{}: node '{}'", source, nd.name());
    OpDesc op(nd.name(), nd.op());
    for (const auto& [key, value] : nd.attr()) {
      NPUFLOW_ASSIGN_OR_RETURN(AttrValue v, FromProto(value, fmt::format("{} attribute '{}'", where, key)));
      op.SetAttr(key, std::move(v));
    }
    NPUFLOW_ASSIGN_OR_RETURN(Node * node, g.AddNode(std::move(op)));
    for (const proto::TensorDescDef& out : nd.output()) {
      TensorDesc desc;
      NPUFLOW_ASSIGN_OR_RETURN(desc.dtype, FromProto(out.dtype(), where));
      NPUFLOW_ASSIGN_OR_RETURN(desc.shape, FromProto(out.shape(), where));
      node->outputs().push_back(std::move(desc));
    }
  }
  // Edges after all nodes exist, so inputs may name nodes defined later in the text.
  for (const proto::NodeDef& nd : def.node()) {
    Node* node = g.FindNode(nd.name());
    const std::string where = fmt::format("{}: node '{}'", source, nd.name());
    for (const std::string& in : nd.input()) {
      NPUFLOW_ASSIGN_OR_RETURN(InputRef ref, ParseInput(in, where));
      Node* src = g.FindNode(ref.node);
      if (src == nullptr)
        return Status::ParamInvalid("{}: input '{}' names no node in graph '{}' (dangling edge)", where, in, g.name());
      if (ref.control) {
        NPUFLOW_RETURN_IF_ERROR(g.AddControlInput(node, src));
        continue;
      }
      if (!src->outputs().empty() && ref.index >= static_cast<int>(src->outputs().size()))
        return Status::ParamInvalid("{}: input '{}': '{}' has {} outputs (dangling edge)", where, in, src->name(),
                                    src->outputs().size());
      NPUFLOW_RETURN_IF_ERROR(g.AddInput(node, Endpoint{src, ref.index}));
    }
    if (auto it = nd.attr().find("f"); it != nd.attr().end() && it->second.value_case() == proto::AttrValue::kSubgraph) {
      ComputeGraph* sub = root->FindSubgraph(it->second.subgraph());
      if (sub == nullptr)
        return Status::ParamInvalid("{}: subgraph '{}' does not exist", where, it->second.subgraph());
      NPUFLOW_RETURN_IF_ERROR(const_cast<ComputeGraph*>(root)->SetSubgraph(node, sub));
    }
  }
  return Status::Ok();
}

void AppendNodes(const ComputeGraph& g, proto::GraphDef& out) {
  out.set_name(g.name());
  for (const Node* n : g.nodes()) {
    proto::NodeDef* nd = out.add_node();
    nd->set_name(n->name());
    nd->set_op(n->type());
    for (const Endpoint& e : n->inputs())
      nd->add_input(e.index == 0 ? e.node->name() : fmt::format("{}:{}", e.node->name(), e.index));
    for (const Node* c : n->control_inputs()) nd->add_input("^" + c->name());
    for (const auto& [key, value] : n->op().attrs()) (*nd->mutable_attr())[key] = ToProto(value);
    for (const TensorDesc& d : n->outputs()) {
      proto::TensorDescDef* od = nd->add_output();
      od->set_dtype(ToProto(d.dtype));
      *od->mutable_shape() = ToProto(d.shape);
    }
  }
}

// Collects TextFormat's errors with their line and column.
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (first.empty()) first = fmt::format("line {}, column {}: {}", line + 1, column + 1, message);
  }
  std::string first;
};

}  // namespace

StatusOr<std::unique_ptr<ComputeGraph>> FromGraphDef(const proto::GraphDef& def, std::string_view source) {
  auto g = std::make_unique<ComputeGraph>(def.name().empty() ? std::string("graph") : def.name());
  for (const proto::GraphDef& sub : def.subgraph()) {
    if (sub.subgraph_size() > 0)
      return Status::ParamInvalid("{}: subgraph '{}' has subgraphs of its own; only the root may", source, sub.name());
    NPUFLOW_RETURN_IF_ERROR(g->AddSubgraph(sub.name()).status().WithContext(std::string(source)));
  }
  for (const proto::GraphDef& sub : def.subgraph())
    NPUFLOW_RETURN_IF_ERROR(FillGraph(*g->FindSubgraph(sub.name()), sub, g.get(), source));
  NPUFLOW_RETURN_IF_ERROR(FillGraph(*g, def, g.get(), source));
  return g;
}

proto::GraphDef ToGraphDef(const ComputeGraph& graph) {
  proto::GraphDef out;
  AppendNodes(graph, out);
  for (const ComputeGraph* sub : graph.subgraphs()) AppendNodes(*sub, *out.add_subgraph());
  return out;
}

StatusOr<std::unique_ptr<ComputeGraph>> ParseGraphText(std::string_view text, std::string_view source) {
  proto::GraphDef def;
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  // TextFormat recurses once per nested message and, unlike the binary parser, sets no limit of
  // its own: 2.6 MB of "subgraph {" overflowed the stack. A graph nests 8 deep (subgraph, node,
  // attr, value, tensor, shape, dim); 100 is the binary parser's default.
  parser.SetRecursionLimit(kMaxTextNesting);
  if (!parser.ParseFromString(std::string(text), &def))
    return Status::ParamInvalid("{}: {}", source, errors.first.empty() ? "not a graph in text format" : errors.first);
  return FromGraphDef(def, source);
}

StatusOr<std::unique_ptr<ComputeGraph>> ReadGraphTextFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("{}: cannot open the graph file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseGraphText(ss.str(), path);
}

std::string PrintGraphText(const ComputeGraph& graph) {
  google::protobuf::TextFormat::Printer printer;
  std::string out;
  printer.PrintToString(ToGraphDef(graph), &out);
  return out;
}

StatusOr<AttrValue> AttrValueFromProto(const proto::AttrValue& a, std::string_view where) { return FromProto(a, where); }
proto::AttrValue AttrValueToProto(const AttrValue& v) { return ToProto(v); }

}  // namespace npuflow::graph

namespace npuflow::graph {
namespace {

std::string TensorSummary(const Tensor& t) {
  std::string out = t.desc.ToString();
  const auto n = static_cast<std::size_t>(t.desc.shape.num_elements().value_or(0));
  if (n == 0 || t.data.size() < t.desc.bytes().value_or(0)) return out;
  out += "{";
  for (std::size_t i = 0; i < std::min<std::size_t>(n, 4); ++i) {
    if (i) out += ", ";
    switch (t.desc.dtype) {
      case DataType::kFloat32: { float v; std::memcpy(&v, t.data.data() + 4 * i, 4); out += fmt::format("{}", v); break; }
      case DataType::kInt32: { std::int32_t v; std::memcpy(&v, t.data.data() + 4 * i, 4); out += fmt::format("{}", v); break; }
      case DataType::kInt64: { std::int64_t v; std::memcpy(&v, t.data.data() + 8 * i, 8); out += fmt::format("{}", v); break; }
      case DataType::kUInt8:
      case DataType::kBool: out += fmt::format("{}", t.data[i]); break;
      default: out += "..."; i = n; break;
    }
  }
  if (n > 4) out += ", ...";
  return out + "}";
}

std::string AttrSummary(const AttrValue& v) {
  struct Visitor {
    std::string operator()(std::int64_t x) const { return fmt::format("{}", x); }
    std::string operator()(double x) const { return fmt::format("{}", x); }
    std::string operator()(const std::string& x) const { return fmt::format("\"{}\"", x); }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::vector<std::int64_t>& x) const { return fmt::format("[{}]", fmt::join(x, ", ")); }
    std::string operator()(const std::vector<double>& x) const { return fmt::format("[{}]", fmt::join(x, ", ")); }
    std::string operator()(const std::vector<std::string>& x) const {
      std::string out = "[";
      for (std::size_t i = 0; i < x.size(); ++i) out += fmt::format("{}\"{}\"", i ? ", " : "", x[i]);
      return out + "]";
    }
    std::string operator()(const Tensor& x) const { return TensorSummary(x); }
    std::string operator()(DataType x) const { return std::string(DataTypeName(x)); }
    std::string operator()(const Shape& x) const { return x.ToString(); }
    std::string operator()(const SubgraphRef& x) const { return "@" + x.name; }
  };
  return std::visit(Visitor{}, v);
}

void AppendSummary(const ComputeGraph& g, std::string& out) {
  out += fmt::format("graph \"{}\"\n", g.name());
  for (const Node* n : g.nodes()) {
    std::string ins;
    for (const Endpoint& e : n->inputs())
      ins += (ins.empty() ? "" : ", ") + (e.index == 0 ? e.node->name() : fmt::format("{}:{}", e.node->name(), e.index));
    for (const Node* c : n->control_inputs()) ins += (ins.empty() ? "^" : ", ^") + c->name();
    out += fmt::format("  {} = {}({})", n->name(), n->type(), ins);
    if (!n->outputs().empty()) {
      std::string outs;
      for (const TensorDesc& d : n->outputs()) outs += (outs.empty() ? "" : ", ") + d.ToString();
      out += " -> " + outs;
    }
    if (!n->op().attrs().empty()) {
      std::string attrs;
      for (const auto& [key, value] : n->op().attrs())
        attrs += (attrs.empty() ? "" : ", ") + key + "=" + AttrSummary(value);
      out += " {" + attrs + "}";
    }
    out += "\n";
  }
}

}  // namespace

std::string PrintGraphSummary(const ComputeGraph& graph) {
  std::string out;
  AppendSummary(graph, out);
  for (const ComputeGraph* sub : graph.subgraphs()) AppendSummary(*sub, out);
  return out;
}

}  // namespace npuflow::graph
