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

  StatusOr<Node*> Transpose(const std::string& name, Node* x, std::vector<std::int64_t> perm) {
    OpDesc op(name, "Transpose");
    op.SetAttr("perm", std::move(perm));
    return Add(std::move(op), {{x, 0}});
  }

  StatusOr<Node*> KvCache(const std::string& layer, int c, std::int64_t H, std::int64_t C, std::int64_t D) {
    OpDesc var(fmt::format("{}/attn/{}_cache", layer, c == 0 ? "k" : "v"), "Variable");
    var.SetAttr("dtype", DataType::kFloat32);
    var.SetAttr("shape", Shape{H, C, D});
    return Add(std::move(var), {});
  }

 private:
  ComputeGraph& g_;
  const Gpt2File& file_;
  std::string location_;
};

}  // namespace

namespace {

Status CheckHParams(const Gpt2File& file) {
  const Gpt2HParams& hp = file.hparams;
  if (hp.n_layer < 1 || hp.n_head < 1 || hp.n_embd < 1 || hp.n_embd % hp.n_head != 0 || hp.n_ctx < 1 ||
      hp.n_vocab < 1)
    return Status::ParamInvalid("{}: hyperparameters n_layer {}, n_head {}, n_embd {}, n_ctx {}, n_vocab {} do not "
                                "make a GPT-2",
                                file.path, hp.n_layer, hp.n_head, hp.n_embd, hp.n_ctx, hp.n_vocab);
  return Status::Ok();
}

std::string WeightLocation(const Gpt2File& file) {
  std::error_code ec;
  std::filesystem::path location = std::filesystem::absolute(file.path, ec);
  if (ec) location = file.path;
  return location.lexically_normal().string();
}

// Token + position embedding of `tokens` at `positions` (f32 rows).
StatusOr<Node*> Embed(Gpt2Builder& b, const Gpt2File& file, Node* tokens, Node* positions, Node*& wte) {
  NPUFLOW_ASSIGN_OR_RETURN(wte, b.Weight("model/wte", "wte"));
  NPUFLOW_ASSIGN_OR_RETURN(Node * wpe, b.Weight("model/wpe", "wpe"));
  NPUFLOW_ASSIGN_OR_RETURN(Node * tok_emb, b.Binary("tok_emb", "Gather", wte, tokens));
  if (file.Find("model/wte")->dtype != DataType::kFloat32) {
    OpDesc cast("tok_emb/cast", "Cast");
    cast.SetAttr("dtype", DataType::kFloat32);
    NPUFLOW_ASSIGN_OR_RETURN(tok_emb, b.Add(std::move(cast), {{tok_emb, 0}}));
  }
  NPUFLOW_ASSIGN_OR_RETURN(Node * pos_emb, b.Binary("pos_emb", "Gather", wpe, positions));
  return b.Binary("embed", "Add", tok_emb, pos_emb);
}

// The MLP half of a block: LayerNorm -> c_fc -> GELU -> c_proj -> residual.
StatusOr<Node*> MlpBlock(Gpt2Builder& b, Node* x, const std::string& n, const std::string& w) {
  NPUFLOW_ASSIGN_OR_RETURN(Node * ln2, b.LayerNorm(n + "/ln_2", x, w + "/ln_2"));
  NPUFLOW_ASSIGN_OR_RETURN(Node * fc, b.Linear(n + "/mlp/c_fc", ln2, w + "/mlp/c_fc"));
  NPUFLOW_ASSIGN_OR_RETURN(Node * gelu, b.Unary(n + "/mlp/gelu", "Gelu", fc));
  NPUFLOW_ASSIGN_OR_RETURN(Node * mproj, b.Linear(n + "/mlp/c_proj", gelu, w + "/mlp/c_proj"));
  return b.Binary(n + "/mlp/residual", "Add", x, mproj);
}

// The final LayerNorm and the head (model/lm_head, else tied to wte), then the NetOutput: the
// logits, and with next_token the greedy token after them too (ArgMax of the logits).
Status Head(Gpt2Builder& b, const Gpt2File& file, Node* x, Node* wte, bool next_token) {
  NPUFLOW_ASSIGN_OR_RETURN(Node * lnf, b.LayerNorm("ln_f", x, "model/ln_f"));
  Node* head = wte;
  if (file.has_lm_head) {
    NPUFLOW_ASSIGN_OR_RETURN(head, b.Weight("model/lm_head", "lm_head"));
  }
  OpDesc logits_op("logits", "MatMul");
  logits_op.SetAttr("transpose_b", true);
  NPUFLOW_ASSIGN_OR_RETURN(Node * logits, b.Add(std::move(logits_op), {{lnf, 0}, {head, 0}}));
  if (!next_token) return b.Add(OpDesc("output", "NetOutput"), {{logits, 0}}).status();
  OpDesc argmax("next_token", "ArgMax");
  argmax.SetAttr("axis", std::int64_t{-1});
  NPUFLOW_ASSIGN_OR_RETURN(Node * token, b.Add(std::move(argmax), {{logits, 0}}));
  return b.Add(OpDesc("output", "NetOutput"), {{logits, 0}, {token, 0}}).status();
}

}  // namespace

StatusOr<std::unique_ptr<ComputeGraph>> BuildGpt2DecodeGraph(const Gpt2File& file, const Gpt2GraphOptions& options) {
  NPUFLOW_RETURN_IF_ERROR(CheckHParams(file));
  const Gpt2HParams& hp = file.hparams;
  auto g = std::make_unique<ComputeGraph>(options.name);
  Gpt2Builder b(*g, file, WeightLocation(file));
  const std::int64_t E = hp.n_embd, H = hp.n_head, D = hp.head_dim(), C = hp.n_ctx;

  NPUFLOW_ASSIGN_OR_RETURN(Node * token, b.Data("token", DataType::kInt32, Shape{1}));
  NPUFLOW_ASSIGN_OR_RETURN(Node * pos, b.Data("pos", DataType::kInt32, Shape{1}));
  NPUFLOW_ASSIGN_OR_RETURN(Node * len, b.Data("len", DataType::kInt32, Shape{1}));

  Node* wte = nullptr;
  NPUFLOW_ASSIGN_OR_RETURN(Node * x, Embed(b, file, token, pos, wte));

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
      NPUFLOW_ASSIGN_OR_RETURN(Node * vn, b.KvCache(n, c, H, C, D));
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
    NPUFLOW_ASSIGN_OR_RETURN(x, MlpBlock(b, x, n, w));
  }
  NPUFLOW_RETURN_IF_ERROR(Head(b, file, x, wte, options.next_token));
  return g;
}

StatusOr<std::unique_ptr<ComputeGraph>> BuildGpt2PrefillGraph(const Gpt2File& file, const Gpt2GraphOptions& options) {
  NPUFLOW_RETURN_IF_ERROR(CheckHParams(file));
  const Gpt2HParams& hp = file.hparams;
  auto g = std::make_unique<ComputeGraph>(options.name + "_prefill");
  Gpt2Builder b(*g, file, WeightLocation(file));
  const std::int64_t E = hp.n_embd, H = hp.n_head, D = hp.head_dim(), C = hp.n_ctx;
  const Shape n_rows(std::vector<Dim>{Dim::Symbolic("n")});

  NPUFLOW_ASSIGN_OR_RETURN(Node * tokens, b.Data("tokens", DataType::kInt32, n_rows));
  NPUFLOW_ASSIGN_OR_RETURN(Node * positions, b.Data("positions", DataType::kInt32, n_rows));
  NPUFLOW_ASSIGN_OR_RETURN(Node * pos, b.Data("pos", DataType::kInt32, Shape{1}));
  NPUFLOW_ASSIGN_OR_RETURN(Node * len, b.Data("len", DataType::kInt32, Shape{1}));
  NPUFLOW_ASSIGN_OR_RETURN(Node * last, b.Data("last", DataType::kInt32, Shape{1}));
  Node* wte = nullptr;
  NPUFLOW_ASSIGN_OR_RETURN(Node * x, Embed(b, file, tokens, positions, wte));  // [n, E]

  for (int i = 0; i < hp.n_layer; ++i) {
    const std::string w = fmt::format("model/h{}", i);
    const std::string n = fmt::format("h{}", i);
    NPUFLOW_ASSIGN_OR_RETURN(Node * ln1, b.LayerNorm(n + "/ln_1", x, w + "/ln_1"));
    NPUFLOW_ASSIGN_OR_RETURN(Node * qkv, b.Linear(n + "/attn/c_attn", ln1, w + "/attn/c_attn"));  // [n, 3E]
    OpDesc split(n + "/attn/split", "Split");
    split.SetAttr("axis", std::int64_t{-1});
    split.SetAttr("num_split", std::int64_t{3});
    NPUFLOW_ASSIGN_OR_RETURN(Node * qkv3, b.Add(std::move(split), {{qkv, 0}}));
    // [n, E] -> [n, H, D] -> [H, n, D]: head-major, as the cache and Attention take it.
    Node* heads[3] = {};
    const char* names[3] = {"q", "k", "v"};
    for (int j = 0; j < 3; ++j) {
      NPUFLOW_ASSIGN_OR_RETURN(Node * r, b.Reshape(fmt::format("{}/attn/{}", n, names[j]), {qkv3, j}, {-1, H, D}));
      NPUFLOW_ASSIGN_OR_RETURN(heads[j], b.Transpose(fmt::format("{}/attn/{}_heads", n, names[j]), r, {1, 0, 2}));
    }
    Node* cache[2] = {};
    for (int c = 0; c < 2; ++c) {
      NPUFLOW_ASSIGN_OR_RETURN(Node * vn, b.KvCache(n, c, H, C, D));
      NPUFLOW_ASSIGN_OR_RETURN(
          cache[c], b.Add(OpDesc(fmt::format("{}/attn/{}_write", n, c == 0 ? "k" : "v"), "KvCacheWrite"),
                          {{vn, 0}, {heads[c + 1], 0}, {pos, 0}}));
    }
    OpDesc att(n + "/attn/mha", "Attention");
    att.SetAttr("scale", 1.0 / std::sqrt(static_cast<double>(D)));
    NPUFLOW_ASSIGN_OR_RETURN(Node * a, b.Add(std::move(att), {{heads[0], 0}, {cache[0], 0}, {cache[1], 0}, {len, 0}}));
    NPUFLOW_ASSIGN_OR_RETURN(Node * rows, b.Transpose(n + "/attn/rows", a, {1, 0, 2}));  // [n, H, D]
    NPUFLOW_ASSIGN_OR_RETURN(Node * merged, b.Reshape(n + "/attn/merge", {rows, 0}, {-1, E}));
    NPUFLOW_ASSIGN_OR_RETURN(Node * proj, b.Linear(n + "/attn/c_proj", merged, w + "/attn/c_proj"));
    NPUFLOW_ASSIGN_OR_RETURN(x, b.Binary(n + "/attn/residual", "Add", x, proj));
    NPUFLOW_ASSIGN_OR_RETURN(x, MlpBlock(b, x, n, w));
  }
  // Only the last row goes through the head: [n, E] -> [1, E].
  NPUFLOW_ASSIGN_OR_RETURN(Node * last_row, b.Binary("last_row", "Gather", x, last));
  NPUFLOW_RETURN_IF_ERROR(Head(b, file, last_row, wte, /*next_token=*/false));
  return g;
}

}  // namespace npuflow::gpt2
