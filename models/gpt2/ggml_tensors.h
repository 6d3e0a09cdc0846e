// The tensors ggml's gpt2_model_load declares for a GPT-2 file, as one table: what the reader
// checks a file against and what synthetic::WriteGpt2File writes. Internal to models/gpt2 and the
// synthetic model writer.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "models/gpt2/ggml_file.h"

namespace npuflow::gpt2 {

// ggml's ttype field.
inline constexpr std::int32_t kTtypeF32 = 0;
inline constexpr std::int32_t kTtypeF16 = 1;

// What a tensor is: a LayerNorm gain, a bias or shift, a weight matrix, the position embedding
// (synthetic::WriteGpt2File draws each kind with its own mean and scale).
enum class TensorRole { kGain, kBias, kMatrix, kPosition };

struct TensorSpec {
  std::string name;
  std::array<std::int64_t, 2> ne{1, 1};  // ggml pads to two dims with 1
  int n_dims = 1;
  DataType dtype = DataType::kFloat32;
  TensorRole role = TensorRole::kBias;

  std::int64_t elements() const { return ne[0] * ne[1]; }
};

// One per-layer tensor: dims in units of n_embd (ne1 0: one-dimensional); matrices use wtype.
struct LayerTensor {
  std::string_view suffix;
  int ne0;
  int ne1;
  TensorRole role;
};

constexpr std::array<LayerTensor, 12> kLayerTensors = {{
    {"ln_1/g", 1, 0, TensorRole::kGain},
    {"ln_1/b", 1, 0, TensorRole::kBias},
    {"attn/c_attn/w", 1, 3, TensorRole::kMatrix},
    {"attn/c_attn/b", 3, 0, TensorRole::kBias},
    {"attn/c_proj/w", 1, 1, TensorRole::kMatrix},
    {"attn/c_proj/b", 1, 0, TensorRole::kBias},
    {"ln_2/g", 1, 0, TensorRole::kGain},
    {"ln_2/b", 1, 0, TensorRole::kBias},
    {"mlp/c_fc/w", 1, 4, TensorRole::kMatrix},
    {"mlp/c_fc/b", 4, 0, TensorRole::kBias},
    {"mlp/c_proj/w", 4, 1, TensorRole::kMatrix},
    {"mlp/c_proj/b", 1, 0, TensorRole::kBias},
}};

constexpr std::int64_t kRequiredGlobalTensors = 4;  // wte, wpe, ln_f/g, ln_f/b

inline TensorSpec Spec1D(std::string name, std::int64_t n, TensorRole role) {
  return TensorSpec{std::move(name), {n, 1}, 1, DataType::kFloat32, role};
}

inline TensorSpec Spec2D(std::string name, std::int64_t ne0, std::int64_t ne1, DataType dtype, TensorRole role) {
  return TensorSpec{std::move(name), {ne0, ne1}, 2, dtype, role};
}

inline TensorSpec LayerSpec(const Gpt2HParams& hp, int layer, const LayerTensor& t) {
  std::string name = fmt::format("model/h{}/{}", layer, t.suffix);
  if (t.ne1 == 0) return Spec1D(std::move(name), std::int64_t{t.ne0} * hp.n_embd, t.role);
  return Spec2D(std::move(name), std::int64_t{t.ne0} * hp.n_embd, std::int64_t{t.ne1} * hp.n_embd, hp.weight_type(),
                t.role);
}

inline TensorSpec WteSpec(const Gpt2HParams& hp, std::string name) {
  return Spec2D(std::move(name), hp.n_embd, hp.n_vocab, hp.weight_type(), TensorRole::kMatrix);
}

// Calls fn(spec) for every tensor in the order WriteGpt2File writes them (wte, wpe, h0 .. h{L-1},
// ln_f, [lm_head]) until fn returns false.
template <typename Fn>
void ForEachTensor(const Gpt2HParams& hp, bool lm_head, Fn&& fn) {
  if (!fn(WteSpec(hp, "model/wte"))) return;
  if (!fn(Spec2D("model/wpe", hp.n_embd, hp.n_ctx, DataType::kFloat32, TensorRole::kPosition))) return;
  for (int layer = 0; layer < hp.n_layer; ++layer)
    for (const LayerTensor& t : kLayerTensors)
      if (!fn(LayerSpec(hp, layer, t))) return;
  if (!fn(Spec1D("model/ln_f/g", hp.n_embd, TensorRole::kGain))) return;
  if (!fn(Spec1D("model/ln_f/b", hp.n_embd, TensorRole::kBias))) return;
  if (lm_head) fn(WteSpec(hp, "model/lm_head"));
}

// The layer index in "model/h{i}/...", written as std::to_string writes it; nullopt otherwise.
inline std::optional<int> ParseLayer(std::string_view digits, int n_layer) {
  if (digits.empty() || digits.size() > 10 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  std::int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v >= n_layer) return std::nullopt;
  return static_cast<int>(v);
}

// What ggml declares for `name`; nullopt for a name it does not know. Matches names by pattern, so
// nothing here grows with n_layer (which comes from the file).
inline std::optional<TensorSpec> Expect(std::string_view name, const Gpt2HParams& hp) {
  if (name == "model/wte" || name == "model/lm_head") return WteSpec(hp, std::string(name));
  if (name == "model/wpe") return Spec2D("model/wpe", hp.n_embd, hp.n_ctx, DataType::kFloat32, TensorRole::kPosition);
  if (name == "model/ln_f/g") return Spec1D("model/ln_f/g", hp.n_embd, TensorRole::kGain);
  if (name == "model/ln_f/b") return Spec1D("model/ln_f/b", hp.n_embd, TensorRole::kBias);
  constexpr std::string_view kLayerPrefix = "model/h";
  if (name.substr(0, kLayerPrefix.size()) != kLayerPrefix) return std::nullopt;
  const std::string_view rest = name.substr(kLayerPrefix.size());
  const std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const std::optional<int> layer = ParseLayer(rest.substr(0, slash), hp.n_layer);
  if (!layer) return std::nullopt;
  for (const LayerTensor& t : kLayerTensors)
    if (rest.substr(slash + 1) == t.suffix) return LayerSpec(hp, *layer, t);
  return std::nullopt;
}

}  // namespace npuflow::gpt2
