// The GPT-2 decode step as a ComputeGraph: weights as FileConstants pointing into the ggml file, the
// KV cache as Variables.
#include "models/gpt2/decode_graph.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>


namespace npuflow::gpt2 {

using namespace graph;  // the IR and the ops this builder composes

namespace {

// Adds nodes with their inputs; every method returns the node's output 0.
class Gpt2Builder {
 public:
  Gpt2Builder(ComputeGraph& g, const Gpt2File& file, std::string location)
      : g_(g), file_(file), location_(std::move(location)) {}

  StatusOr<Node*> Add(OpDesc op, std::initializer_list<Endpoint> inputs) {
    NPUFLOW_ASSIGN_OR_RETURN(Node * n, g_.AddNode(std::move(op)));
    for (const Endpoint& e : inputs) NPUFLOW_RETURN_IF_ERROR(g_.AddInput(n, e));
    return n;
  }

  StatusOr<Node*> Data(const std::string& name, DataType dtype, Shape shape) {
    OpDesc op(name, "Data");
    op.SetAttr("dtype", dtype);
    op.SetAttr("shape", std::move(shape));
    return Add(std::move(op), {});
  }

  // A FileConstant reading the tensor's bytes where they are in the ggml file.
  StatusOr<Node*> Weight(const std::string& tensor, const std::string& node_name) {
    const GgmlTensorInfo* t = file_.Find(tensor);
    if (t == nullptr) return Status::NotFound("{}: the model has no tensor '{}'", file_.path, tensor);
    OpDesc op(node_name, "FileConstant");
    op.SetAttr("dtype", t->dtype);
    op.SetAttr("shape", t->shape());
    op.SetAttr("original_shape", t->shape());
    op.SetAttr("location", location_);
    op.SetAttr("offset", static_cast<std::int64_t>(t->offset));
    op.SetAttr("length", static_cast<std::int64_t>(t->bytes));
    return Add(std::move(op), {});
  }

  StatusOr<Node*> Unary(const std::string& name, const char* type, Node* x) {
    return Add(OpDesc(name, type), {{x, 0}});
  }
  StatusOr<Node*> Binary(const std::string& name, const char* type, Node* a, Node* b) {
    return Add(OpDesc(name, type), {{a, 0}, {b, 0}});
  }

  StatusOr<Node*> LayerNorm(const std::string& name, Node* x, const std::string& prefix) {
    NPUFLOW_ASSIGN_OR_RETURN(Node * g, Weight(prefix + "/g", name + "/g"));
    NPUFLOW_ASSIGN_OR_RETURN(Node * b, Weight(prefix + "/b", name + "/b"));
    OpDesc op(name, "LayerNorm");
    op.SetAttr("epsilon", 1e-5);
    return Add(std::move(op), {{x, 0}, {g, 0}, {b, 0}});
  }

  // y = x W^T + b with W stored [out][in] (ggml's ne [in, out]).
  StatusOr<Node*> Linear(const std::string& name, Node* x, const std::string& prefix) {
    NPUFLOW_ASSIGN_OR_RETURN(Node * w, Weight(prefix + "/w", name + "/w"));
    NPUFLOW_ASSIGN_OR_RETURN(Node * b, Weight(prefix + "/b", name + "/b"));
    OpDesc op(name, "MatMul");
    op.SetAttr("transpose_b", true);
    return Add(std::move(op), {{x, 0}, {w, 0}, {b, 0}});
  }

  StatusOr<Node*> Reshape(const std::string& name, Endpoint x, std::vector<std::int64_t> shape) {
    OpDesc op(name, "Reshape");
    op.SetAttr("shape", std::move(shape));
    return Add(std::move(op), {x});
  }

 private:
  ComputeGraph& g_;
  const Gpt2File& file_;
  std::string location_;
};

}  // namespace

StatusOr<std::unique_ptr<ComputeGraph>> BuildGpt2DecodeGraph(const Gpt2File& file, const Gpt2GraphOptions& options) {
  const Gpt2HParams& hp = file.hparams;
  if (hp.n_layer < 1 || hp.n_head < 1 || hp.n_embd < 1 || hp.n_embd % hp.n_head != 0 || hp.n_ctx < 1 ||
      hp.n_vocab < 1)
    return Status::ParamInvalid("{}: hyperparameters n_layer {}, n_head {}, n_embd {}, n_ctx {}, n_vocab {} do not "
                                "make a GPT-2",
                                file.path, hp.n_layer, hp.n_head, hp.n_embd, hp.n_ctx, hp.n_vocab);
  std::error_code ec;
  std::filesystem::path location = std::filesystem::absolute(file.path, ec);
  if (ec) location = file.path;
  auto g = std::make_unique<ComputeGraph>(options.name);
  Gpt2Builder b(*g, file, location.lexically_normal().string());
  const std::int64_t E = hp.n_embd, H = hp.n_head, D = hp.head_dim(), C = hp.n_ctx;

  NPUFLOW_ASSIGN_OR_RETURN(Node * token, b.Data("token", DataType::kInt32, Shape{1}));
  NPUFLOW_ASSIGN_OR_RETURN(Node * pos, b.Data("pos", DataType::kInt32, Shape{1}));
  NPUFLOW_ASSIGN_OR_RETURN(Node * len, b.Data("len", DataType::kInt32, Shape{1}));

  // Token + position embedding.
  NPUFLOW_ASSIGN_OR_RETURN(Node * wte, b.Weight("model/wte", "wte"));
  NPUFLOW_ASSIGN_OR_RETURN(Node * wpe, b.Weight("model/wpe", "wpe"));
  NPUFLOW_ASSIGN_OR_RETURN(Node * tok_emb, b.Binary("tok_emb", "Gather", wte, token));
  if (file.Find("model/wte")->dtype != DataType::kFloat32) {
    OpDesc cast("tok_emb/cast", "Cast");
    cast.SetAttr("dtype", DataType::kFloat32);
    NPUFLOW_ASSIGN_OR_RETURN(tok_emb, b.Add(std::move(cast), {{tok_emb, 0}}));
  }
  NPUFLOW_ASSIGN_OR_RETURN(Node * pos_emb, b.Binary("pos_emb", "Gather", wpe, pos));
  NPUFLOW_ASSIGN_OR_RETURN(Node * x, b.Binary("embed", "Add", tok_emb, pos_emb));

  for (int i = 0; i < hp.n_layer; ++i) {
    const std::string w = fmt::format("model/h{}", i);  // tensor names
    const std::string n = fmt::format("h{}", i);        // node names
    // Attention: LayerNorm -> c_attn -> q, k, v -> KV cache -> causal MHA -> c_proj -> residual.
    NPUFLOW_ASSIGN_OR_RETURN(Node * ln1, b.LayerNorm(n + "/ln_1", x, w + "/ln_1"));
    NPUFLOW_ASSIGN_OR_RETURN(Node * qkv, b.Linear(n + "/attn/c_attn", ln1, w + "/attn/c_attn"));
    OpDesc split(n + "/attn/split", "Split");
    split.SetAttr("axis", std::int64_t{-1});
    split.SetAttr("num_split", std::int64_t{3});
    NPUFLOW_ASSIGN_OR_RETURN(Node * qkv3, b.Add(std::move(split), {{qkv, 0}}));
    // [1, E] -> [H, 1, D]: with one token this is the head-major layout without a transpose.
    NPUFLOW_ASSIGN_OR_RETURN(Node * q, b.Reshape(n + "/attn/q", {qkv3, 0}, {H, 1, D}));
    NPUFLOW_ASSIGN_OR_RETURN(Node * k, b.Reshape(n + "/attn/k", {qkv3, 1}, {H, 1, D}));
    NPUFLOW_ASSIGN_OR_RETURN(Node * v, b.Reshape(n + "/attn/v", {qkv3, 2}, {H, 1, D}));
    Node* cache[2] = {};
    for (int c = 0; c < 2; ++c) {
      OpDesc var(fmt::format("{}/attn/{}_cache", n, c == 0 ? "k" : "v"), "Variable");
      var.SetAttr("dtype", DataType::kFloat32);
      var.SetAttr("shape", Shape{H, C, D});
      NPUFLOW_ASSIGN_OR_RETURN(Node * vn, b.Add(std::move(var), {}));
      NPUFLOW_ASSIGN_OR_RETURN(
          cache[c], b.Add(OpDesc(fmt::format("{}/attn/{}_write", n, c == 0 ? "k" : "v"), "KvCacheWrite"),
                          {{vn, 0}, {c == 0 ? k : v, 0}, {pos, 0}}));
    }
    OpDesc att(n + "/attn/mha", "Attention");
    att.SetAttr("scale", 1.0 / std::sqrt(static_cast<double>(D)));
    NPUFLOW_ASSIGN_OR_RETURN(Node * a, b.Add(std::move(att), {{q, 0}, {cache[0], 0}, {cache[1], 0}, {len, 0}}));
    NPUFLOW_ASSIGN_OR_RETURN(Node * merged, b.Reshape(n + "/attn/merge", {a, 0}, {1, E}));
    NPUFLOW_ASSIGN_OR_RETURN(Node * proj, b.Linear(n + "/attn/c_proj", merged, w + "/attn/c_proj"));
    NPUFLOW_ASSIGN_OR_RETURN(x, b.Binary(n + "/attn/residual", "Add", x, proj));
    // MLP: LayerNorm -> c_fc -> GELU -> c_proj -> residual.
    NPUFLOW_ASSIGN_OR_RETURN(Node * ln2, b.LayerNorm(n + "/ln_2", x, w + "/ln_2"));
    NPUFLOW_ASSIGN_OR_RETURN(Node * fc, b.Linear(n + "/mlp/c_fc", ln2, w + "/mlp/c_fc"));
    NPUFLOW_ASSIGN_OR_RETURN(Node * gelu, b.Unary(n + "/mlp/gelu", "Gelu", fc));
    NPUFLOW_ASSIGN_OR_RETURN(Node * mproj, b.Linear(n + "/mlp/c_proj", gelu, w + "/mlp/c_proj"));
    NPUFLOW_ASSIGN_OR_RETURN(x, b.Binary(n + "/mlp/residual", "Add", x, mproj));
  }

  NPUFLOW_ASSIGN_OR_RETURN(Node * lnf, b.LayerNorm("ln_f", x, "model/ln_f"));
  // The head: model/lm_head when the file has one, else tied to model/wte (the same node).
  Node* head = wte;
  if (file.has_lm_head) {
    NPUFLOW_ASSIGN_OR_RETURN(head, b.Weight("model/lm_head", "lm_head"));
  }
  OpDesc logits_op("logits", "MatMul");
  logits_op.SetAttr("transpose_b", true);
  NPUFLOW_ASSIGN_OR_RETURN(Node * logits, b.Add(std::move(logits_op), {{lnf, 0}, {head, 0}}));
  NPUFLOW_RETURN_IF_ERROR(b.Add(OpDesc("output", "NetOutput"), {{logits, 0}}).status());
  return g;
}

}  // namespace npuflow::gpt2
