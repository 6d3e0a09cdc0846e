// GPT-2 model files in ggml's legacy format with deterministic random weights: what `npuflow
// make-gpt2` and `npuflow demo` write, and what the tests and benchmarks run. Reading is
// models/gpt2/ggml_file.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace npuflow::synthetic {

struct MakeGpt2Options {
  int layers = 2;
  int embd = 64;
  int heads = 4;
  int ctx = 64;
  int vocab = 300;
  bool f16 = false;
  std::uint64_t seed = 1;
  bool lm_head = false;             // write a separate model/lm_head (after the layers)
  bool name_order = false;          // tensors sorted by name, as ggml's convert-ckpt-to-ggml.py writes
                                    // them (h0, h1, h10, ..., ln_f, wpe, wte: the embeddings last)
  std::vector<std::string> tokens;  // the vocabulary; empty: synthetic tokens (see below)
};
// Writes a model with deterministic random weights (normal, GPT-2's init scale: std 0.02, LayerNorm
// gains near 1) in the order wte, wpe, h0 .. h{L-1}, ln_f, [lm_head]. Synthetic tokens, when none
// are given: the 256 single bytes first (so any text tokenizes), then distinct lowercase words
// with and without a leading space. Options out of range (embd not divisible by heads, a vocab
// below 256 without tokens, ...) are errors naming the option.
Status WriteGpt2File(const std::string& path, const MakeGpt2Options& options);

}  // namespace npuflow::synthetic
