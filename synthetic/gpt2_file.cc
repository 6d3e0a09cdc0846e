#include "synthetic/gpt2_file.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <unordered_set>

#include "base/files.h"
#include "graph/ir/half.h"
#include "models/gpt2/ggml_tensors.h"

namespace npuflow::synthetic {
namespace {

using graph::DataType;
using gpt2::TensorRole;
using gpt2::TensorSpec;

// Output in big chunks (a 117M model is 500 MB); remembers the first failure.
class ChunkWriter {
 public:
  explicit ChunkWriter(std::FILE* file) : file_(file), buffer_(kChunkBytes) {}

  void Put(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    while (n > 0) {
      if (used_ == buffer_.size()) Flush();
      const std::size_t take = std::min(n, buffer_.size() - used_);
      std::memcpy(buffer_.data() + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
    }
  }
  void PutU32(std::uint32_t v) {
    const std::uint8_t b[4] = {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
                               static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
    Put(b, sizeof b);
  }
  void PutI32(std::int32_t v) { PutU32(static_cast<std::uint32_t>(v)); }

  // Writes what is buffered; 0 when everything so far reached the file, else the first errno.
  int Flush() {
    if (error_ == 0 && used_ > 0 && std::fwrite(buffer_.data(), 1, used_, file_) != used_) error_ = errno ? errno : EIO;
    used_ = 0;
    return error_;
  }

 private:
  static constexpr std::size_t kChunkBytes = std::size_t{8} << 20;
  std::FILE* file_;
  std::vector<std::uint8_t> buffer_;
  std::size_t used_ = 0;
  int error_ = 0;
};

// Standard normal deviates by Marsaglia's polar method from raw mt19937_64 draws: the engine's
// sequence is fixed by the standard, std::normal_distribution's is not, so the weights depend only
// on the seed (and on std::log / std::sqrt, which IEEE hosts agree on to the last bit or so).
class NormalSource {
 public:
  explicit NormalSource(std::uint64_t seed) : engine_(seed) {}

  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u, v, s;
    do {
      u = Symmetric();
      v = Symmetric();
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double m = std::sqrt(-2.0 * std::log(s) / s);
    spare_ = v * m;
    has_spare_ = true;
    return u * m;
  }

 private:
  // Uniform in [-1, 1) with 53 random bits.
  double Symmetric() {
    return static_cast<double>(static_cast<std::int64_t>(engine_() >> 10) - (std::int64_t{1} << 53)) * 0x1.0p-53;
  }

  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

// The 256 single bytes, then distinct lowercase words of 2..8 letters, alternately with and
// without a leading space. Drawn from their own engine so the weights do not depend on the vocab.
std::vector<std::string> SyntheticVocab(int n_vocab, std::uint64_t seed) {
  std::vector<std::string> vocab;
  vocab.reserve(static_cast<std::size_t>(n_vocab));
  for (int b = 0; b < 256; ++b) vocab.emplace_back(1, static_cast<char>(b));
  std::unordered_set<std::string> seen(vocab.begin(), vocab.end());
  std::mt19937_64 rng(seed ^ 0x766f636162756c61ull);  // "vocabula"
  while (vocab.size() < static_cast<std::size_t>(n_vocab)) {
    std::string word = vocab.size() % 2 == 0 ? " " : "";
    const int letters = 2 + static_cast<int>(rng() % 7);
    for (int i = 0; i < letters; ++i) word.push_back(static_cast<char>('a' + rng() % 26));
    if (seen.insert(word).second) vocab.push_back(std::move(word));
  }
  return vocab;
}

Status CheckOptions(const std::string& path, const MakeGpt2Options& o) {
  const std::pair<const char*, int> positive[] = {
      {"layers", o.layers}, {"embd", o.embd}, {"heads", o.heads}, {"ctx", o.ctx}, {"vocab", o.vocab}};
  for (const auto& [option, value] : positive)
    if (value < 1) return Status::ParamInvalid("{}: MakeGpt2Options.{} is {}, expected >= 1", path, option, value);
  if (o.embd % o.heads != 0)
    return Status::ParamInvalid("{}: MakeGpt2Options.embd {} is not a multiple of MakeGpt2Options.heads {}", path,
                                o.embd, o.heads);
  if (o.embd > std::numeric_limits<std::int32_t>::max() / 4)
    return Status::ParamInvalid("{}: MakeGpt2Options.embd {} is too large (4 embd must fit an int32)", path, o.embd);
  if (o.tokens.empty() && o.vocab < 256)
    return Status::ParamInvalid("{}: MakeGpt2Options.vocab is {}: synthetic tokens need at least the 256 single "
                                "bytes (or give MakeGpt2Options.tokens)",
                                path, o.vocab);
  if (!o.tokens.empty() && o.tokens.size() != static_cast<std::size_t>(o.vocab))
    return Status::ParamInvalid("{}: MakeGpt2Options.tokens has {} tokens, MakeGpt2Options.vocab is {}", path,
                                o.tokens.size(), o.vocab);
  for (std::size_t i = 0; i < o.tokens.size(); ++i)
    if (o.tokens[i].size() > std::numeric_limits<std::uint32_t>::max())
      return Status::ParamInvalid("{}: MakeGpt2Options.tokens[{}] is longer than a uint32 length can say", path, i);
  return Status::Ok();
}

void WriteTensor(ChunkWriter& out, const TensorSpec& t, NormalSource& normal) {
  out.PutI32(t.n_dims);
  out.PutI32(static_cast<std::int32_t>(t.name.size()));
  out.PutI32(t.dtype == DataType::kFloat16 ? gpt2::kTtypeF16 : gpt2::kTtypeF32);
  for (int i = 0; i < t.n_dims; ++i) out.PutI32(static_cast<std::int32_t>(t.ne[i]));
  out.Put(t.name.data(), t.name.size());
  double mean = 0, scale = 0.02;
  switch (t.role) {
    case TensorRole::kGain: mean = 1, scale = 0.1; break;
    case TensorRole::kBias: break;
    case TensorRole::kMatrix: break;
    case TensorRole::kPosition: scale = 0.01; break;
  }
  // Encoded a block at a time: a per-element Put would dominate writing a 500 MB model.
  const std::size_t element_bytes = graph::DataTypeSize(t.dtype);
  std::vector<std::uint8_t> block(std::size_t{1} << 16);
  std::size_t used = 0;
  for (std::int64_t i = 0; i < t.elements(); ++i) {
    const float value = static_cast<float>(mean + scale * normal.Next());
    std::uint8_t* p = block.data() + used;
    if (t.dtype == DataType::kFloat16) {
      const std::uint16_t h = graph::FloatToHalf(value);
      p[0] = static_cast<std::uint8_t>(h);
      p[1] = static_cast<std::uint8_t>(h >> 8);
    } else {
      std::uint32_t bits;
      std::memcpy(&bits, &value, sizeof bits);
      for (int b = 0; b < 4; ++b) p[b] = static_cast<std::uint8_t>(bits >> (8 * b));
    }
    used += element_bytes;
    if (used == block.size()) {
      out.Put(block.data(), used);
      used = 0;
    }
  }
  out.Put(block.data(), used);
}

}  // namespace

Status WriteGpt2File(const std::string& path, const MakeGpt2Options& options) {
  NPUFLOW_RETURN_IF_ERROR(CheckOptions(path, options));
  gpt2::Gpt2HParams hp;
  hp.n_vocab = options.vocab;
  hp.n_ctx = options.ctx;
  hp.n_embd = options.embd;
  hp.n_head = options.heads;
  hp.n_layer = options.layers;
  hp.ftype = options.f16 ? gpt2::kTtypeF16 : gpt2::kTtypeF32;
  const std::vector<std::string> vocab =
      options.tokens.empty() ? SyntheticVocab(options.vocab, options.seed) : options.tokens;

  // Written beside the target and renamed over it: a failed write leaves no half-written model.
  return WriteFileAtomically(path, [&](std::FILE* file, const std::string& tmp) -> Status {
    ChunkWriter out(file);
    out.PutU32(gpt2::kGgmlMagic);
    for (std::int32_t v : {hp.n_vocab, hp.n_ctx, hp.n_embd, hp.n_head, hp.n_layer, hp.ftype}) out.PutI32(v);
    out.PutI32(hp.n_vocab);
    for (const std::string& token : vocab) {
      out.PutU32(static_cast<std::uint32_t>(token.size()));
      out.Put(token.data(), token.size());
    }
    NormalSource normal(options.seed);
    std::vector<TensorSpec> specs;
    gpt2::ForEachTensor(hp, options.lm_head, [&](const TensorSpec& t) {
      specs.push_back(t);
      return true;
    });
    if (options.name_order)
      std::stable_sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
    for (const TensorSpec& t : specs) WriteTensor(out, t, normal);
    if (int err = out.Flush(); err != 0) return Status::Failed("{}: cannot write '{}': {}", path, tmp, std::strerror(err));
    return Status::Ok();
  });
}

}  // namespace npuflow::synthetic
