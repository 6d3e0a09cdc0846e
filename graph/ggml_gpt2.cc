#include "graph/ggml_gpt2.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string_view>
#include <unordered_set>

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/files.h"
#include "graph/half.h"

namespace npuflow::graph {
namespace {

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

constexpr std::int32_t kTtypeF32 = 0;
constexpr std::int32_t kTtypeF16 = 1;
constexpr std::uint64_t kHparamsOffset = 4;
constexpr std::uint64_t kVocabOffset = kHparamsOffset + 6 * 4;
// No GPT-2 tensor name comes near this; a longer name is unknown without reading it.
constexpr std::int32_t kMaxNameBytes = 4096;

// A name or token as it may appear in a message: printable ASCII as is, other bytes as \xNN, cut
// after 80 bytes (a name read from a damaged file can hold anything).
std::string Printable(std::string_view bytes) {
  constexpr std::size_t kMaxShown = 80;
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && i < kMaxShown; ++i) {
    const auto u = static_cast<std::uint8_t>(bytes[i]);
    if (u >= 0x20 && u < 0x7f && u != '\'' && u != '\\') out.push_back(static_cast<char>(u));
    else out += fmt::format("\\x{:02x}", u);
  }
  if (bytes.size() > kMaxShown) out += fmt::format("... ({} bytes)", bytes.size());
  return out;
}

std::string NeString(const std::array<std::int64_t, 2>& ne) { return fmt::format("[{}, {}]", ne[0], ne[1]); }

// ---- the tensors ggml's gpt2_model_load declares -------------------------------------------------

// How WriteGpt2File initializes a tensor: gains near 1, biases and shifts small, matrices GPT-2's
// std 0.02.
enum class Init { kGain, kBias, kMatrix, kPosition };

struct TensorSpec {
  std::string name;
  std::array<std::int64_t, 2> ne{1, 1};  // ggml pads to two dims with 1
  int n_dims = 1;
  DataType dtype = DataType::kFloat32;
  Init init = Init::kBias;

  std::int64_t elements() const { return ne[0] * ne[1]; }
};

// One per-layer tensor: dims in units of n_embd (ne1 0: one-dimensional); matrices use wtype.
struct LayerTensor {
  std::string_view suffix;
  int ne0;
  int ne1;
  Init init;
};

constexpr std::array<LayerTensor, 12> kLayerTensors = {{
    {"ln_1/g", 1, 0, Init::kGain},
    {"ln_1/b", 1, 0, Init::kBias},
    {"attn/c_attn/w", 1, 3, Init::kMatrix},
    {"attn/c_attn/b", 3, 0, Init::kBias},
    {"attn/c_proj/w", 1, 1, Init::kMatrix},
    {"attn/c_proj/b", 1, 0, Init::kBias},
    {"ln_2/g", 1, 0, Init::kGain},
    {"ln_2/b", 1, 0, Init::kBias},
    {"mlp/c_fc/w", 1, 4, Init::kMatrix},
    {"mlp/c_fc/b", 4, 0, Init::kBias},
    {"mlp/c_proj/w", 4, 1, Init::kMatrix},
    {"mlp/c_proj/b", 1, 0, Init::kBias},
}};

constexpr std::int64_t kRequiredGlobalTensors = 4;  // wte, wpe, ln_f/g, ln_f/b

TensorSpec Spec1D(std::string name, std::int64_t n, Init init) {
  return TensorSpec{std::move(name), {n, 1}, 1, DataType::kFloat32, init};
}

TensorSpec Spec2D(std::string name, std::int64_t ne0, std::int64_t ne1, DataType dtype, Init init) {
  return TensorSpec{std::move(name), {ne0, ne1}, 2, dtype, init};
}

TensorSpec LayerSpec(const Gpt2HParams& hp, int layer, const LayerTensor& t) {
  std::string name = fmt::format("model/h{}/{}", layer, t.suffix);
  if (t.ne1 == 0) return Spec1D(std::move(name), std::int64_t{t.ne0} * hp.n_embd, t.init);
  return Spec2D(std::move(name), std::int64_t{t.ne0} * hp.n_embd, std::int64_t{t.ne1} * hp.n_embd, hp.weight_type(),
                t.init);
}

TensorSpec WteSpec(const Gpt2HParams& hp, std::string name) {
  return Spec2D(std::move(name), hp.n_embd, hp.n_vocab, hp.weight_type(), Init::kMatrix);
}

// Calls fn(spec) for every tensor in the order WriteGpt2File writes them (wte, wpe, h0 .. h{L-1},
// ln_f, [lm_head]) until fn returns false.
template <typename Fn>
void ForEachTensor(const Gpt2HParams& hp, bool lm_head, Fn&& fn) {
  if (!fn(WteSpec(hp, "model/wte"))) return;
  if (!fn(Spec2D("model/wpe", hp.n_embd, hp.n_ctx, DataType::kFloat32, Init::kPosition))) return;
  for (int layer = 0; layer < hp.n_layer; ++layer)
    for (const LayerTensor& t : kLayerTensors)
      if (!fn(LayerSpec(hp, layer, t))) return;
  if (!fn(Spec1D("model/ln_f/g", hp.n_embd, Init::kGain))) return;
  if (!fn(Spec1D("model/ln_f/b", hp.n_embd, Init::kBias))) return;
  if (lm_head) fn(WteSpec(hp, "model/lm_head"));
}

// The layer index in "model/h{i}/...", written as std::to_string writes it; nullopt otherwise.
std::optional<int> ParseLayer(std::string_view digits, int n_layer) {
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
std::optional<TensorSpec> Expect(std::string_view name, const Gpt2HParams& hp) {
  if (name == "model/wte" || name == "model/lm_head") return WteSpec(hp, std::string(name));
  if (name == "model/wpe") return Spec2D("model/wpe", hp.n_embd, hp.n_ctx, DataType::kFloat32, Init::kPosition);
  if (name == "model/ln_f/g") return Spec1D("model/ln_f/g", hp.n_embd, Init::kGain);
  if (name == "model/ln_f/b") return Spec1D("model/ln_f/b", hp.n_embd, Init::kBias);
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

// ---- reading -------------------------------------------------------------------------------------

// The file front to back through stdio's buffer, with the offset every message names. Callers
// check Has(n) before Read(n) so that running past the end is a truncation error naming what was
// being read; a short read after that means the file changed or the device failed.
class Cursor {
 public:
  Cursor(std::string path, FilePtr file, std::uint64_t size)
      : path_(std::move(path)), file_(std::move(file)), size_(size) {}

  std::uint64_t offset() const { return offset_; }
  std::uint64_t remaining() const { return size_ - offset_; }
  bool Has(std::uint64_t n) const { return n <= remaining(); }

  Status Read(void* dst, std::size_t n) {
    if (n > 0 && std::fread(dst, 1, n, file_.get()) != n) {
      return Status::Failed("{}: cannot read {} bytes at offset {}: {}", path_, n, offset_,
                            std::ferror(file_.get()) ? std::strerror(errno) : "the file got shorter");
    }
    offset_ += n;
    return Status::Ok();
  }

  Status ReadI32(std::int32_t& v) {
    std::uint8_t b[4];
    NPUFLOW_RETURN_IF_ERROR(Read(b, sizeof b));
    v = static_cast<std::int32_t>(std::uint32_t{b[0]} | std::uint32_t{b[1]} << 8 | std::uint32_t{b[2]} << 16 |
                                  std::uint32_t{b[3]} << 24);
    return Status::Ok();
  }

  Status Skip(std::uint64_t n) {
    if (n > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max()) ||
        ::fseeko(file_.get(), static_cast<off_t>(n), SEEK_CUR) != 0)
      return Status::Failed("{}: cannot seek {} bytes past offset {}: {}", path_, n, offset_, std::strerror(errno));
    offset_ += n;
    return Status::Ok();
  }

  Status Truncated(std::uint64_t need, std::string_view what) const {
    return Status::DataCorrupted("{}: truncated file: {} at offset {} needs {} bytes, the file ends {} bytes later",
                                 path_, what, offset_, need, remaining());
  }

 private:
  std::string path_;
  FilePtr file_;
  std::uint64_t size_;
  std::uint64_t offset_ = 0;
};

StatusOr<std::pair<FilePtr, std::uint64_t>> OpenForReading(const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("{}: cannot open the model file: {}", path, std::strerror(err));
    return Status::Failed("{}: cannot open the model file: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(::fileno(file.get()), &st) != 0)
    return Status::Failed("{}: cannot stat the model file: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status::ParamInvalid("{}: not a regular file", path);
  return std::make_pair(std::move(file), static_cast<std::uint64_t>(st.st_size));
}

Status CheckHParams(const std::string& path, const Gpt2HParams& hp) {
  const std::pair<const char*, std::int32_t> fields[] = {
      {"n_vocab", hp.n_vocab}, {"n_ctx", hp.n_ctx}, {"n_embd", hp.n_embd}, {"n_head", hp.n_head},
      {"n_layer", hp.n_layer}};
  for (std::size_t i = 0; i < std::size(fields); ++i) {
    if (fields[i].second <= 0)
      return Status::DataCorrupted("{}: bad hparams at offset {}: {} is {}, expected a positive value", path,
                                   kHparamsOffset + 4 * i, fields[i].first, fields[i].second);
  }
  if (hp.n_embd % hp.n_head != 0)
    return Status::DataCorrupted("{}: bad hparams at offset {}: n_embd {} is not a multiple of n_head {}", path,
                                 kHparamsOffset + 8, hp.n_embd, hp.n_head);
  // The MLP's ne 4 n_embd is an int32 in the file.
  if (hp.n_embd > std::numeric_limits<std::int32_t>::max() / 4)
    return Status::DataCorrupted("{}: bad hparams at offset {}: n_embd {} is too large (4 n_embd must fit an int32)",
                                 path, kHparamsOffset + 8, hp.n_embd);
  const std::int32_t wtype = hp.ftype % 1000;
  if (wtype != kTtypeF32 && wtype != kTtypeF16)
    return Status::Unsupported("{}: bad ftype {} at offset {}: ftype % 1000 is {}, expected 0 (f32) or 1 (f16)", path,
                               hp.ftype, kHparamsOffset + 20, wtype);
  return Status::Ok();
}

Status ReadVocab(Cursor& in, const std::string& path, Gpt2File& out) {
  std::int32_t n_vocab = 0;
  if (!in.Has(4)) return in.Truncated(4, "the vocab size");
  NPUFLOW_RETURN_IF_ERROR(in.ReadI32(n_vocab));
  if (n_vocab != out.hparams.n_vocab)
    return Status::DataCorrupted("{}: bad vocab size {} != {} at offset {} (the vocab count differs from n_vocab)",
                                 path, n_vocab, out.hparams.n_vocab, kVocabOffset);
  // Every token needs its 4-byte length: a vocab the file cannot hold is refused before reserving.
  if (!in.Has(std::uint64_t{4} * static_cast<std::uint32_t>(n_vocab)))
    return in.Truncated(std::uint64_t{4} * static_cast<std::uint32_t>(n_vocab),
                        fmt::format("a vocab of {} tokens", n_vocab));
  out.vocab.reserve(static_cast<std::size_t>(n_vocab));
  for (std::int32_t id = 0; id < n_vocab; ++id) {
    if (!in.Has(4)) return in.Truncated(4, fmt::format("the length of token {}", id));
    std::int32_t len = 0;
    NPUFLOW_RETURN_IF_ERROR(in.ReadI32(len));
    const std::uint32_t bytes = static_cast<std::uint32_t>(len);
    if (!in.Has(bytes)) return in.Truncated(bytes, fmt::format("token {} of {} bytes", id, bytes));
    std::string token(bytes, '\0');
    NPUFLOW_RETURN_IF_ERROR(in.Read(token.data(), bytes));
    out.vocab.push_back(std::move(token));
  }
  return Status::Ok();
}

// One tensor record at the cursor: checked against what ggml declares, its data skipped.
Status ReadTensor(Cursor& in, const std::string& path, int index, Gpt2File& out) {
  const std::uint64_t header = in.offset();
  const std::string which = fmt::format("tensor #{} (header at offset {})", index, header);
  if (!in.Has(12)) return in.Truncated(12, fmt::format("the header of {}", which));
  std::int32_t n_dims = 0, name_len = 0, ttype = 0;
  NPUFLOW_RETURN_IF_ERROR(in.ReadI32(n_dims));
  NPUFLOW_RETURN_IF_ERROR(in.ReadI32(name_len));
  NPUFLOW_RETURN_IF_ERROR(in.ReadI32(ttype));
  if (n_dims != 1 && n_dims != 2)
    return Status::DataCorrupted("{}: {}: n_dims is {}, expected 1 or 2", path, which, n_dims);
  std::array<std::int64_t, 2> ne{1, 1};
  if (!in.Has(4 * static_cast<std::uint64_t>(n_dims)))
    return in.Truncated(4 * static_cast<std::uint64_t>(n_dims), fmt::format("the dims of {}", which));
  for (int i = 0; i < n_dims; ++i) {
    std::int32_t d = 0;
    NPUFLOW_RETURN_IF_ERROR(in.ReadI32(d));
    ne[i] = d;
  }
  if (name_len < 0) return Status::DataCorrupted("{}: {}: negative name length {}", path, which, name_len);
  if (!in.Has(static_cast<std::uint64_t>(name_len)))
    return in.Truncated(static_cast<std::uint64_t>(name_len), fmt::format("the name of {}", which));
  if (name_len > kMaxNameBytes)
    return Status::DataCorrupted("{}: unknown tensor at offset {} in model file: its name of {} bytes is longer than "
                                 "any GPT-2 tensor name",
                                 path, header, name_len);
  std::string name(static_cast<std::size_t>(name_len), '\0');
  NPUFLOW_RETURN_IF_ERROR(in.Read(name.data(), name.size()));

  const std::optional<TensorSpec> spec = Expect(name, out.hparams);
  if (!spec)
    return Status::DataCorrupted("{}: unknown tensor '{}' at offset {} in model file", path, Printable(name), header);
  if (const GgmlTensorInfo* first = out.Find(name))
    return Status::DataCorrupted("{}: tensor '{}' at offset {} is given twice (first at offset {})", path, name,
                                 header, first->header_offset);
  const std::int64_t elements = ne[0] * ne[1];
  if (elements != spec->elements())
    return Status::DataCorrupted("{}: tensor '{}' at offset {} has wrong element count in model file: {} (ne {}), "
                                 "expected {} (ne {})",
                                 path, name, header, elements, NeString(ne), spec->elements(), NeString(spec->ne));
  // As ggml compares them: both padded to two dims, so [n, 1] passes for [n].
  if (ne != spec->ne)
    return Status::DataCorrupted("{}: tensor '{}' at offset {} has wrong shape in model file: got {}, expected {}",
                                 path, name, header, NeString(ne), NeString(spec->ne));
  if (ttype != kTtypeF32 && ttype != kTtypeF16)
    return Status::Unsupported("{}: tensor '{}' at offset {} has ttype {}, expected 0 (f32) or 1 (f16)", path, name,
                               header, ttype);
  const DataType dtype = ttype == kTtypeF16 ? DataType::kFloat16 : DataType::kFloat32;
  // ggml's check: nelements * the file type's size must be the bytes of the type it declared.
  const std::uint64_t bytes = static_cast<std::uint64_t>(elements) * DataTypeSize(dtype);
  const std::uint64_t expected_bytes = static_cast<std::uint64_t>(elements) * DataTypeSize(spec->dtype);
  if (bytes != expected_bytes)
    return Status::DataCorrupted("{}: tensor '{}' at offset {} has wrong size in model file: got {} bytes ({}), "
                                 "expected {} bytes ({})",
                                 path, name, header, bytes, DataTypeName(dtype), expected_bytes,
                                 DataTypeName(spec->dtype));
  if (!in.Has(bytes))
    return in.Truncated(bytes, fmt::format("the data of tensor '{}' (header at offset {})", name, header));

  GgmlTensorInfo info;
  info.name = name;
  info.dtype = dtype;
  info.ne.assign(spec->ne.begin(), spec->ne.begin() + spec->n_dims);
  info.header_offset = header;
  info.offset = in.offset();
  info.bytes = bytes;
  NPUFLOW_RETURN_IF_ERROR(in.Skip(bytes));
  if (name == "model/lm_head") out.has_lm_head = true;
  out.tensors.emplace(std::move(name), std::move(info));
  return Status::Ok();
}

// At end of file: every tensor but lm_head must have been there.
Status CheckComplete(const std::string& path, const Gpt2File& file) {
  const std::int64_t required = kRequiredGlobalTensors + std::int64_t{12} * file.hparams.n_layer;
  const std::int64_t present = static_cast<std::int64_t>(file.tensors.size()) - (file.has_lm_head ? 1 : 0);
  if (present == required) return Status::Ok();
  // Every present tensor is a distinct required one, so the first missing is found within
  // present + 1 steps, whatever n_layer the file claims.
  std::string missing;
  ForEachTensor(file.hparams, false, [&](const TensorSpec& t) {
    if (file.Find(t.name) != nullptr) return true;
    missing = t.name;
    return false;
  });
  return Status::DataCorrupted("{}: tensor '{}' is missing: the file ends at offset {} ({} of the model's {} required "
                               "tensors are missing)",
                               path, missing, file.file_bytes, required - present, required);
}

// ---- writing -------------------------------------------------------------------------------------

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
  out.PutI32(t.dtype == DataType::kFloat16 ? kTtypeF16 : kTtypeF32);
  for (int i = 0; i < t.n_dims; ++i) out.PutI32(static_cast<std::int32_t>(t.ne[i]));
  out.Put(t.name.data(), t.name.size());
  double mean = 0, scale = 0.02;
  switch (t.init) {
    case Init::kGain: mean = 1, scale = 0.1; break;
    case Init::kBias: break;
    case Init::kMatrix: break;
    case Init::kPosition: scale = 0.01; break;
  }
  // Encoded a block at a time: a per-element Put would dominate writing a 500 MB model.
  const std::size_t element_bytes = DataTypeSize(t.dtype);
  std::vector<std::uint8_t> block(std::size_t{1} << 16);
  std::size_t used = 0;
  for (std::int64_t i = 0; i < t.elements(); ++i) {
    const float value = static_cast<float>(mean + scale * normal.Next());
    std::uint8_t* p = block.data() + used;
    if (t.dtype == DataType::kFloat16) {
      const std::uint16_t h = FloatToHalf(value);
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

Shape GgmlTensorInfo::shape() const {
  std::vector<Dim> dims;
  for (auto d = ne.rbegin(); d != ne.rend(); ++d) dims.push_back(Dim::Static(*d));
  return Shape(std::move(dims));
}

const GgmlTensorInfo* Gpt2File::Find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

const GgmlTensorInfo& Gpt2File::head() const {
  if (has_lm_head)
    if (const GgmlTensorInfo* t = Find("model/lm_head")) return *t;
  if (const GgmlTensorInfo* t = Find("model/wte")) return *t;
  static const GgmlTensorInfo kNoHead;  // only for a Gpt2File that ReadGpt2File did not return
  return kNoHead;
}

std::uint64_t Gpt2File::weight_bytes() const {
  std::uint64_t total = 0;
  for (const auto& [name, t] : tensors) total += t.bytes;
  return total;
}

bool IsGgmlFile(const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "rb"), &std::fclose);
  std::uint8_t b[4];
  if (file == nullptr || std::fread(b, 1, sizeof b, file.get()) != sizeof b) return false;
  const std::uint32_t magic =
      std::uint32_t{b[0]} | std::uint32_t{b[1]} << 8 | std::uint32_t{b[2]} << 16 | std::uint32_t{b[3]} << 24;
  return magic == kGgmlMagic;
}

StatusOr<Gpt2File> ReadGpt2File(const std::string& path) {
  NPUFLOW_ASSIGN_OR_RETURN(auto opened, OpenForReading(path));
  Gpt2File out;
  out.path = path;
  out.file_bytes = opened.second;
  Cursor in(out.path, std::move(opened.first), out.file_bytes);

  if (!in.Has(4)) return in.Truncated(4, "the magic");
  std::int32_t magic = 0;
  NPUFLOW_RETURN_IF_ERROR(in.ReadI32(magic));
  if (static_cast<std::uint32_t>(magic) != kGgmlMagic)
    return Status::DataCorrupted("{}: bad magic 0x{:08x} at offset 0, expected 0x{:08x} ('ggml'): not a ggml model "
                                 "file",
                                 path, static_cast<std::uint32_t>(magic), kGgmlMagic);

  if (!in.Has(24)) return in.Truncated(24, "the hparams");
  Gpt2HParams& hp = out.hparams;
  for (std::int32_t* field : {&hp.n_vocab, &hp.n_ctx, &hp.n_embd, &hp.n_head, &hp.n_layer, &hp.ftype})
    NPUFLOW_RETURN_IF_ERROR(in.ReadI32(*field));
  NPUFLOW_RETURN_IF_ERROR(CheckHParams(path, hp));
  NPUFLOW_RETURN_IF_ERROR(ReadVocab(in, path, out));

  // Tensors until end of file; only an end exactly between two tensors is a clean one.
  for (int index = 0; in.remaining() > 0; ++index) NPUFLOW_RETURN_IF_ERROR(ReadTensor(in, path, index, out));
  NPUFLOW_RETURN_IF_ERROR(CheckComplete(path, out));
  return out;
}

StatusOr<std::vector<float>> ReadGpt2TensorF32(const Gpt2File& file, const std::string& name) {
  const GgmlTensorInfo* t = file.Find(name);
  if (t == nullptr) return Status::NotFound("{}: no tensor '{}' in the model file", file.path, name);
  if (t->dtype != DataType::kFloat32 && t->dtype != DataType::kFloat16)
    return Status::Unsupported("{}: tensor '{}' is {}, expected f32 or f16", file.path, name, DataTypeName(t->dtype));
  NPUFLOW_ASSIGN_OR_RETURN(auto opened, OpenForReading(file.path));
  auto& [handle, size] = opened;
  if (t->offset > size || t->bytes > size - t->offset)
    return Status::DataCorrupted("{}: tensor '{}' at offset {} ({} bytes) ends past the end of the file ({} bytes): "
                                 "the file changed since it was read",
                                 file.path, name, t->offset, t->bytes, size);
  if (::fseeko(handle.get(), static_cast<off_t>(t->offset), SEEK_SET) != 0)
    return Status::Failed("{}: cannot seek to offset {}: {}", file.path, t->offset, std::strerror(errno));

  const std::size_t element_bytes = DataTypeSize(t->dtype);
  std::vector<float> values(static_cast<std::size_t>(t->bytes / element_bytes));
  std::vector<std::uint8_t> chunk(std::size_t{1} << 20);
  std::size_t done = 0;
  while (done < values.size()) {
    const std::size_t n = std::min(values.size() - done, chunk.size() / element_bytes);
    if (std::fread(chunk.data(), element_bytes, n, handle.get()) != n)
      return Status::Failed("{}: cannot read tensor '{}' at offset {}: {}", file.path, name,
                            t->offset + done * element_bytes,
                            std::ferror(handle.get()) ? std::strerror(errno) : "the file got shorter");
    const std::uint8_t* p = chunk.data();
    if (t->dtype == DataType::kFloat16) {
      for (std::size_t i = 0; i < n; ++i, p += 2)
        values[done + i] = HalfToFloat(static_cast<std::uint16_t>(p[0] | p[1] << 8));
    } else {
      for (std::size_t i = 0; i < n; ++i, p += 4) {
        const std::uint32_t bits = std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
                                   std::uint32_t{p[3]} << 24;
        std::memcpy(&values[done + i], &bits, sizeof bits);
      }
    }
    done += n;
  }
  return values;
}

Status WriteGpt2File(const std::string& path, const MakeGpt2Options& options) {
  NPUFLOW_RETURN_IF_ERROR(CheckOptions(path, options));
  Gpt2HParams hp;
  hp.n_vocab = options.vocab;
  hp.n_ctx = options.ctx;
  hp.n_embd = options.embd;
  hp.n_head = options.heads;
  hp.n_layer = options.layers;
  hp.ftype = options.f16 ? kTtypeF16 : kTtypeF32;
  const std::vector<std::string> vocab =
      options.tokens.empty() ? SyntheticVocab(options.vocab, options.seed) : options.tokens;

  // Written beside the target and renamed over it: a failed write leaves no half-written model.
  return WriteFileAtomically(path, [&](std::FILE* file, const std::string& tmp) -> Status {
    ChunkWriter out(file);
    out.PutU32(kGgmlMagic);
    for (std::int32_t v : {hp.n_vocab, hp.n_ctx, hp.n_embd, hp.n_head, hp.n_layer, hp.ftype}) out.PutI32(v);
    out.PutI32(hp.n_vocab);
    for (const std::string& token : vocab) {
      out.PutU32(static_cast<std::uint32_t>(token.size()));
      out.Put(token.data(), token.size());
    }
    NormalSource normal(options.seed);
    std::vector<TensorSpec> specs;
    ForEachTensor(hp, options.lm_head, [&](const TensorSpec& t) {
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

}  // namespace npuflow::graph
