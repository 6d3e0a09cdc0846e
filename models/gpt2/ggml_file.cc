#include "models/gpt2/ggml_file.h"

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
#include "graph/ir/half.h"
#include "models/gpt2/ggml_tensors.h"

namespace npuflow::gpt2 {
namespace {

using graph::DataType;
using graph::DataTypeSize;
using graph::Dim;
using graph::Shape;
using graph::HalfToFloat;

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

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
  out.vocab.ReserveTokens(static_cast<std::size_t>(n_vocab));
  for (std::int32_t id = 0; id < n_vocab; ++id) {
    if (!in.Has(4)) return in.Truncated(4, fmt::format("the length of token {}", id));
    std::int32_t len = 0;
    NPUFLOW_RETURN_IF_ERROR(in.ReadI32(len));
    const std::uint32_t bytes = static_cast<std::uint32_t>(len);
    if (!in.Has(bytes)) return in.Truncated(bytes, fmt::format("token {} of {} bytes", id, bytes));
    if (bytes > VocabBytes::kMaxTotalBytes - out.vocab.total_bytes())
      return Status::Unsupported("{}: token {} of {} bytes at offset {}: the vocabulary would hold more than {} bytes",
                                 path, id, bytes, in.offset() - 4, VocabBytes::kMaxTotalBytes);
    NPUFLOW_RETURN_IF_ERROR(in.Read(out.vocab.Append(bytes), bytes));
  }
  out.vocab.ShrinkToFit();
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

}  // namespace npuflow::gpt2
