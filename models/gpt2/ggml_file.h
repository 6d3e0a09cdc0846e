// GPT-2 model files in ggml's legacy format (seed 004), read exactly as ggml's gpt-2 example reads
// them. The importer that turns one into a ComputeGraph is decode_graph.h; synthetic/gpt2_file.h
// writes such files.
//
// The file, little-endian:
//   int32 magic 0x67676d6c ("ggml")
//   int32 n_vocab, n_ctx, n_embd, n_head, n_layer, ftype   (ftype % 1000: 0 = f32, 1 = f16)
//   int32 n_vocab again, then per token: uint32 length, the token's raw bytes
//   tensors until end of file: int32 n_dims, int32 name_len, int32 ttype (0 f32, 1 f16),
//     int32 ne[n_dims] (ne[0] is the contiguous dimension), the name, the raw data.
// Tensors (ne order, as ggml declares them; wtype = f16 when ftype is 1, else f32):
//   model/wte [n_embd, n_vocab] wtype    model/wpe [n_embd, n_ctx] f32
//   model/lm_head [n_embd, n_vocab] wtype (optional: absent, the head is tied to model/wte)
//   model/ln_f/g, model/ln_f/b [n_embd] f32
//   per layer i, model/h{i}/:
//     ln_1/g, ln_1/b, ln_2/g, ln_2/b [n_embd] f32
//     attn/c_attn/w [n_embd, 3 n_embd] wtype   attn/c_attn/b [3 n_embd] f32
//     attn/c_proj/w [n_embd, n_embd] wtype     attn/c_proj/b [n_embd] f32
//     mlp/c_fc/w [n_embd, 4 n_embd] wtype      mlp/c_fc/b [4 n_embd] f32
//     mlp/c_proj/w [4 n_embd, n_embd] wtype    mlp/c_proj/b [n_embd] f32
// A matrix with ne [in, out] is stored row-major [out][in]: y = W x + b. c_attn's output rows are
// q, then k, then v.
//
// Every check ggml makes is an error here, naming the file, the tensor and the byte offset: bad
// magic, an ftype other than f32 / f16, non-positive or inconsistent hyperparameters, a vocab count
// that differs from n_vocab, an unknown tensor, a wrong element count, a wrong shape, a byte size
// that does not fit the type ggml expects, a tensor given twice, a tensor missing at end of file,
// and a truncated file (a header, a name or data running past the end).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "graph/ir/types.h"
#include "models/gpt2/vocab_bytes.h"

namespace npuflow::gpt2 {

using graph::DataType;
using graph::Shape;

inline constexpr std::uint32_t kGgmlMagic = 0x67676d6c;

struct Gpt2HParams {
  std::int32_t n_vocab = 0;
  std::int32_t n_ctx = 0;
  std::int32_t n_embd = 0;
  std::int32_t n_head = 0;
  std::int32_t n_layer = 0;
  std::int32_t ftype = 0;  // as stored; ftype % 1000 is the weight type

  DataType weight_type() const { return ftype % 1000 == 1 ? DataType::kFloat16 : DataType::kFloat32; }
  std::int32_t head_dim() const { return n_head > 0 ? n_embd / n_head : 0; }
};

// Where one tensor's data is in the file.
struct GgmlTensorInfo {
  std::string name;
  DataType dtype = DataType::kFloat32;  // from ttype
  std::vector<std::int64_t> ne;         // ggml order: ne[0] contiguous
  std::uint64_t header_offset = 0;      // where its n_dims field is
  std::uint64_t offset = 0;             // its data
  std::uint64_t bytes = 0;

  // The logical row-major shape: ne reversed ([n_vocab, n_embd] for wte).
  Shape shape() const;
};

struct Gpt2File {
  std::string path;
  std::uint64_t file_bytes = 0;
  Gpt2HParams hparams;
  VocabBytes vocab;                               // id -> token bytes
  std::map<std::string, GgmlTensorInfo> tensors;  // by name
  bool has_lm_head = false;

  const GgmlTensorInfo* Find(const std::string& name) const;
  // model/lm_head when the file has one, else model/wte (the tied head).
  const GgmlTensorInfo& head() const;
  std::uint64_t weight_bytes() const;  // the sum of the tensors' data
};

// True when the file starts with the ggml magic (unreadable or short files: false).
bool IsGgmlFile(const std::string& path);

// Reads the hyperparameters, the vocabulary and the tensor directory, checking everything above;
// the tensors' data is not read (only its extent is checked against the file size).
StatusOr<Gpt2File> ReadGpt2File(const std::string& path);

// Reads one tensor's data as f32 (converting f16): for tests and tools, not the runtime path.
StatusOr<std::vector<float>> ReadGpt2TensorF32(const Gpt2File& file, const std::string& name);

}  // namespace npuflow::gpt2
