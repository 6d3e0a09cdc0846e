// A plain C++ GPT-2 decode step, written for clarity rather than speed: the answer the compiled
// graph and the runtime are compared against. Weights are read once as f32 (f16 files converted);
// every sum accumulates in double. One Step is ggml's gpt2_eval for a single token: the token's
// and position's embeddings, n_layer pre-LayerNorm blocks (causal self-attention over the KV cache,
// then a GELU MLP), the final LayerNorm and the head (model/lm_head, or model/wte when tied).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/status.h"
#include "models/gpt2/ggml_file.h"

namespace npuflow::gpt2::gpt2_testing {

using namespace graph;

class Gpt2Reference {
 public:
  static StatusOr<Gpt2Reference> Load(const gpt2::Gpt2File& file) {
    Gpt2Reference m;
    m.hp_ = file.hparams;
    auto load = [&file](const std::string& name, std::vector<float>& out) -> Status {
      NPUFLOW_ASSIGN_OR_RETURN(out, gpt2::ReadGpt2TensorF32(file, name));
      return Status::Ok();
    };
    NPUFLOW_RETURN_IF_ERROR(load("model/wte", m.wte_));
    NPUFLOW_RETURN_IF_ERROR(load("model/wpe", m.wpe_));
    NPUFLOW_RETURN_IF_ERROR(load(file.head().name, m.head_));
    NPUFLOW_RETURN_IF_ERROR(load("model/ln_f/g", m.ln_f_g_));
    NPUFLOW_RETURN_IF_ERROR(load("model/ln_f/b", m.ln_f_b_));
    m.layers_.resize(static_cast<std::size_t>(m.hp_.n_layer));
    for (int i = 0; i < m.hp_.n_layer; ++i) {
      Layer& l = m.layers_[static_cast<std::size_t>(i)];
      const std::string p = fmt::format("model/h{}/", i);
      NPUFLOW_RETURN_IF_ERROR(load(p + "ln_1/g", l.ln_1_g));
      NPUFLOW_RETURN_IF_ERROR(load(p + "ln_1/b", l.ln_1_b));
      NPUFLOW_RETURN_IF_ERROR(load(p + "attn/c_attn/w", l.attn_w));
      NPUFLOW_RETURN_IF_ERROR(load(p + "attn/c_attn/b", l.attn_b));
      NPUFLOW_RETURN_IF_ERROR(load(p + "attn/c_proj/w", l.proj_w));
      NPUFLOW_RETURN_IF_ERROR(load(p + "attn/c_proj/b", l.proj_b));
      NPUFLOW_RETURN_IF_ERROR(load(p + "ln_2/g", l.ln_2_g));
      NPUFLOW_RETURN_IF_ERROR(load(p + "ln_2/b", l.ln_2_b));
      NPUFLOW_RETURN_IF_ERROR(load(p + "mlp/c_fc/w", l.fc_w));
      NPUFLOW_RETURN_IF_ERROR(load(p + "mlp/c_fc/b", l.fc_b));
      NPUFLOW_RETURN_IF_ERROR(load(p + "mlp/c_proj/w", l.mproj_w));
      NPUFLOW_RETURN_IF_ERROR(load(p + "mlp/c_proj/b", l.mproj_b));
    }
    // As ggml sizes memory_k / memory_v: n_layer * n_ctx * n_embd each.
    const std::size_t cache = static_cast<std::size_t>(m.hp_.n_layer) * m.hp_.n_ctx * m.hp_.n_embd;
    m.k_cache_.assign(cache, 0.0);
    m.v_cache_.assign(cache, 0.0);
    return m;
  }

  const gpt2::Gpt2HParams& hparams() const { return hp_; }

  // Logits [n_vocab] for `token` at position n_past; keys and values of positions 0 .. n_past - 1
  // must come from earlier steps. Out-of-range arguments throw std::out_of_range.
  std::vector<float> Step(int token, int n_past) {
    const int n_embd = hp_.n_embd;
    const int n_head = hp_.n_head;
    const int head_dim = hp_.head_dim();
    if (token < 0 || token >= hp_.n_vocab)
      throw std::out_of_range(fmt::format("Gpt2Reference::Step: token {} outside [0, {})", token, hp_.n_vocab));
    if (n_past < 0 || n_past >= hp_.n_ctx)
      throw std::out_of_range(fmt::format("Gpt2Reference::Step: n_past {} outside [0, {})", n_past, hp_.n_ctx));

    std::vector<double> x(static_cast<std::size_t>(n_embd));
    for (int i = 0; i < n_embd; ++i)
      x[At(i)] = double{wte_[At(token) * n_embd + At(i)]} + double{wpe_[At(n_past) * n_embd + At(i)]};

    for (int layer = 0; layer < hp_.n_layer; ++layer) {
      const Layer& l = layers_[At(layer)];

      // Attention: q, k, v are the three n_embd-row blocks of c_attn's output.
      const std::vector<double> h = LayerNorm(x, l.ln_1_g, l.ln_1_b);
      const std::vector<double> qkv = Linear(l.attn_w, l.attn_b, h, 3 * n_embd);
      double* k_at = &k_cache_[CacheIndex(layer, n_past)];
      double* v_at = &v_cache_[CacheIndex(layer, n_past)];
      for (int i = 0; i < n_embd; ++i) {
        k_at[i] = qkv[At(n_embd + i)];
        v_at[i] = qkv[At(2 * n_embd + i)];
      }
      std::vector<double> attended(static_cast<std::size_t>(n_embd), 0.0);
      const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
      for (int hd = 0; hd < n_head; ++hd) {
        const int base = hd * head_dim;
        std::vector<double> scores(static_cast<std::size_t>(n_past) + 1);
        double max_score = -std::numeric_limits<double>::infinity();
        for (int pos = 0; pos <= n_past; ++pos) {
          const double* k = &k_cache_[CacheIndex(layer, pos)];
          double dot = 0;
          for (int d = 0; d < head_dim; ++d) dot += qkv[At(base + d)] * k[base + d];
          scores[At(pos)] = dot * scale;
          max_score = std::max(max_score, scores[At(pos)]);
        }
        double total = 0;
        for (double& s : scores) {
          s = std::exp(s - max_score);
          total += s;
        }
        for (int pos = 0; pos <= n_past; ++pos) {
          const double* v = &v_cache_[CacheIndex(layer, pos)];
          const double weight = scores[At(pos)] / total;
          for (int d = 0; d < head_dim; ++d) attended[At(base + d)] += weight * v[base + d];
        }
      }
      const std::vector<double> projected = Linear(l.proj_w, l.proj_b, attended, n_embd);
      for (int i = 0; i < n_embd; ++i) x[At(i)] += projected[At(i)];

      // MLP.
      const std::vector<double> h2 = LayerNorm(x, l.ln_2_g, l.ln_2_b);
      std::vector<double> f = Linear(l.fc_w, l.fc_b, h2, 4 * n_embd);
      for (double& v : f) v = Gelu(v);
      const std::vector<double> mlp_out = Linear(l.mproj_w, l.mproj_b, f, n_embd);
      for (int i = 0; i < n_embd; ++i) x[At(i)] += mlp_out[At(i)];
    }

    const std::vector<double> final_x = LayerNorm(x, ln_f_g_, ln_f_b_);
    std::vector<float> logits(static_cast<std::size_t>(hp_.n_vocab));
    for (int t = 0; t < hp_.n_vocab; ++t) {
      double dot = 0;
      for (int i = 0; i < n_embd; ++i) dot += double{head_[At(t) * n_embd + At(i)]} * final_x[At(i)];
      logits[At(t)] = static_cast<float>(dot);
    }
    return logits;
  }

 private:
  struct Layer {
    std::vector<float> ln_1_g, ln_1_b, attn_w, attn_b, proj_w, proj_b;
    std::vector<float> ln_2_g, ln_2_b, fc_w, fc_b, mproj_w, mproj_b;
  };

  static std::size_t At(int i) { return static_cast<std::size_t>(i); }

  std::size_t CacheIndex(int layer, int pos) const {
    return (static_cast<std::size_t>(layer) * hp_.n_ctx + static_cast<std::size_t>(pos)) * hp_.n_embd;
  }

  // y = W x + b with W stored row-major [out][in] (ggml ne [in, out]).
  static std::vector<double> Linear(const std::vector<float>& w, const std::vector<float>& b,
                                    const std::vector<double>& x, int out) {
    const std::size_t in = x.size();
    std::vector<double> y(static_cast<std::size_t>(out));
    for (std::size_t o = 0; o < y.size(); ++o) {
      double sum = b[o];
      for (std::size_t i = 0; i < in; ++i) sum += double{w[o * in + i]} * x[i];
      y[o] = sum;
    }
    return y;
  }

  // (x - mean) / sqrt(var + 1e-5) * g + b, the variance over n (ggml_norm's eps).
  static std::vector<double> LayerNorm(const std::vector<double>& x, const std::vector<float>& g,
                                       const std::vector<float>& b) {
    double mean = 0;
    for (double v : x) mean += v;
    mean /= static_cast<double>(x.size());
    double var = 0;
    for (double v : x) var += (v - mean) * (v - mean);
    var /= static_cast<double>(x.size());
    const double inv = 1.0 / std::sqrt(var + 1e-5);
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) * inv * g[i] + b[i];
    return y;
  }

  static double Gelu(double v) {
    const double kSqrt2OverPi = 0.79788456080286535588;
    return 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v)));
  }

  gpt2::Gpt2HParams hp_;
  std::vector<float> wte_, wpe_, head_, ln_f_g_, ln_f_b_;
  std::vector<Layer> layers_;
  std::vector<double> k_cache_, v_cache_;  // [n_layer][n_ctx][n_embd]
};

}  // namespace npuflow::gpt2::gpt2_testing
