// The GPT-2 decode step as a ComputeGraph, built from the op library: the importer of a ggml file.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "graph/ir/compute_graph.h"
#include "models/gpt2/ggml_file.h"

namespace npuflow::gpt2 {

struct Gpt2GraphOptions {
  std::string name = "gpt2";
  // The decode step's second output: the greedy next token, picked on the device (ArgMax of the
  // logits), so a greedy step reads 4 bytes back instead of n_vocab floats. Decode graph only.
  bool next_token = false;
};
// The decode step as a ComputeGraph: one token at position n_past, static shapes.
//   inputs  token i32[1], pos i32[1] (n_past), len i32[1] (n_past + 1)
//   output  logits f32[1, n_vocab]; with next_token also next_token i32[1] (the index of the
//           first largest logit; -1 when every logit is -inf or NaN)
// Weights are FileConstants whose location, offset and length point into the ggml file itself
// (absolute path); the KV cache is one Variable pair per layer, f32 [n_head, n_ctx, head_dim],
// written with KvCacheWrite and read by Attention (n_layer * n_ctx * n_embd floats each for K and
// V, as ggml sizes memory_k / memory_v).
StatusOr<std::unique_ptr<graph::ComputeGraph>> BuildGpt2DecodeGraph(const Gpt2File& file,
                                                             const Gpt2GraphOptions& options = {});

// The prompt as one dynamic-shape graph (the prefill): N tokens at positions n_past .. n_past+N-1,
// N unknown until run time (the symbol "n"), for RT2.0.
//   inputs  tokens i32[n], positions i32[n], pos i32[1] (n_past), len i32[1] (n_past + N),
//           last i32[1] (N - 1)
//   output  logits f32[1, n_vocab] of the last row
// Batched matmuls over the N rows, causal Attention over N queries, KvCacheWrite of N rows. Its
// weights and KV-cache Variables have the decode graph's node names, so a model loaded from the
// decode graph can lend them (one device copy of the weights, one KV cache, two runtimes).
StatusOr<std::unique_ptr<graph::ComputeGraph>> BuildGpt2PrefillGraph(const Gpt2File& file,
                                                                     const Gpt2GraphOptions& options = {});

}  // namespace npuflow::gpt2
