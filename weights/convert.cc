#include "weights/convert.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include "base/sha256.h"

namespace npuflow::weights {
namespace {

namespace fs = std::filesystem;
using graph::ComputeGraph;
using graph::Node;
using graph::OpDesc;

// The FileConstant attributes a conversion writes or a reverse conversion drops.
constexpr const char* kFileConstantAttrs[] = {"location", "file_path", "file_id",        "offset", "length",
                                              "dtype",    "shape",     "original_shape", "_sha256"};

std::vector<ComputeGraph*> AllGraphs(ComputeGraph& root) {
  std::vector<ComputeGraph*> graphs{&root};
  for (ComputeGraph* sub : root.subgraphs()) graphs.push_back(sub);
  return graphs;
}

std::vector<const ComputeGraph*> AllGraphs(const ComputeGraph& root) {
  std::vector<const ComputeGraph*> graphs{&root};
  for (ComputeGraph* sub : root.subgraphs()) graphs.push_back(sub);
  return graphs;
}

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

// The file a FileConstant reads: location > file_path > value_bins[file_id]; "" when the node has
// none of the three. A relative path is taken relative to `base_dir` when that is not empty.
StatusOr<std::string> FileConstantPath(const OpDesc& op, const ValueBins& value_bins, const std::string& base_dir) {
  NPUFLOW_ASSIGN_OR_RETURN(std::string path, op.AttrOr<std::string>("location", ""));
  if (path.empty()) {
    NPUFLOW_ASSIGN_OR_RETURN(path, op.AttrOr<std::string>("file_path", ""));
  }
  if (path.empty() && op.HasAttr("file_id")) {
    NPUFLOW_ASSIGN_OR_RETURN(std::string id, op.Attr<std::string>("file_id"));
    if (id.empty()) return Status::ParamInvalid("node '{}' (FileConstant): attribute 'file_id' is empty", op.name());
    auto it = value_bins.find(id);
    if (it == value_bins.end()) {
      if (value_bins.empty())
        return Status::NotFound(
            "node '{}' (FileConstant): file_id '{}' is not in ge.exec.value_bins (no value bins given)", op.name(), id);
      std::vector<std::string> ids;
      for (const auto& [k, v] : value_bins) ids.push_back(k);
      return Status::NotFound("node '{}' (FileConstant): file_id '{}' is not in ge.exec.value_bins (ids: {})",
                              op.name(), id, fmt::join(ids, ", "));
    }
    path = it->second;
  }
  if (!path.empty() && !base_dir.empty() && fs::path(path).is_relative()) path = (fs::path(base_dir) / path).string();
  return path;
}

// `length` bytes at `offset` of `path`, for node `op`.
StatusOr<std::vector<std::uint8_t>> ReadRegion(const OpDesc& op, const std::string& path, std::uint64_t offset,
                                               std::uint64_t length) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::NotFound("node '{}' (FileConstant): cannot read weight file '{}': {}", op.name(), path,
                            ErrnoText(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::Failed("node '{}' (FileConstant): cannot stat weight file '{}': {}", op.name(), path,
                          ErrnoText(err));
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (offset > size || length > size - offset) {
    ::close(fd);
    return Status::ParamInvalid(
        "node '{}' (FileConstant): weight file '{}' has {} bytes, reading offset {} + length {} needs {}", op.name(),
        path, size, offset, length, offset + length);
  }
  std::vector<std::uint8_t> data(length);
  std::uint64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, data.data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return Status::Failed("node '{}' (FileConstant): reading {} bytes at offset {} of '{}' failed: {}", op.name(),
                            length, offset, path, ErrnoText(err));
    }
    done += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  return data;
}

Status WriteAll(int fd, const void* data, std::uint64_t bytes, const std::string& path) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Failed("writing weight file '{}' failed: {}", path, ErrnoText(errno));
    p += n;
    bytes -= static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

Status WriteAllAt(int fd, const void* data, std::uint64_t bytes, std::uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Failed("writing weight file '{}' at offset {} failed: {}", path, offset, ErrnoText(errno));
    p += n;
    bytes -= static_cast<std::uint64_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return Status::Ok();
}

std::optional<std::uint64_t> FileSize(const std::string& path) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) return std::nullopt;
  return static_cast<std::uint64_t>(size);
}

// "<dir>/<name>", without doubling a trailing '/' of dir.
std::string JoinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// meta.json, opened and exclusively flock'ed for as long as the object lives (closing the
// descriptor releases the lock).
class LockedMetaFile {
 public:
  static StatusOr<std::unique_ptr<LockedMetaFile>> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return Status::Failed("cannot open '{}': {}", path, ErrnoText(errno));
    auto file = std::unique_ptr<LockedMetaFile>(new LockedMetaFile(path, fd));
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) return Status::Failed("cannot lock '{}': {}", path, ErrnoText(errno));
    }
    return file;
  }
  ~LockedMetaFile() { ::close(fd_); }
  LockedMetaFile(const LockedMetaFile&) = delete;
  LockedMetaFile& operator=(const LockedMetaFile&) = delete;

  StatusOr<std::string> ReadAll() const {
    std::string text;
    char buf[1 << 14];
    off_t pos = 0;
    for (;;) {
      const ssize_t n = ::pread(fd_, buf, sizeof buf, pos);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::Failed("cannot read '{}': {}", path_, ErrnoText(errno));
      if (n == 0) return text;
      text.append(buf, static_cast<std::size_t>(n));
      pos += n;
    }
  }

  Status Rewrite(const std::string& text) const {
    if (::ftruncate(fd_, 0) != 0) return Status::Failed("cannot truncate '{}': {}", path_, ErrnoText(errno));
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::pwrite(fd_, text.data() + done, text.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::Failed("cannot write '{}': {}", path_, ErrnoText(errno));
      done += static_cast<std::size_t>(n);
    }
    return Status::Ok();
  }

 private:
  LockedMetaFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

struct MetaEntry {
  std::string file;
  std::uint64_t offset = 0;
};
using Meta = std::map<std::string, MetaEntry>;  // hash -> region

StatusOr<Meta> ParseMeta(const std::string& text, const std::string& path) {
  Meta meta;
  if (text.empty()) return meta;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    return Status::ParamInvalid("weight meta file '{}' is not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) return Status::ParamInvalid("weight meta file '{}': expected a JSON object", path);
  if (auto it = j.find("hash_to_weight_file"); it != j.end()) {
    if (!it->is_object())
      return Status::ParamInvalid("weight meta file '{}': 'hash_to_weight_file' is not an object", path);
    for (const auto& [hash, file] : it->items()) {
      if (!file.is_string())
        return Status::ParamInvalid("weight meta file '{}': 'hash_to_weight_file' entry '{}' is not a string", path,
                                    hash);
      meta[hash].file = file.get<std::string>();
    }
  }
  if (auto it = j.find("hash_to_weight_offset"); it != j.end()) {
    if (!it->is_object())
      return Status::ParamInvalid("weight meta file '{}': 'hash_to_weight_offset' is not an object", path);
    for (const auto& [hash, offset] : it->items()) {
      if (!offset.is_number_unsigned())
        return Status::ParamInvalid(
            "weight meta file '{}': 'hash_to_weight_offset' entry '{}' is not a non-negative integer", path, hash);
      auto m = meta.find(hash);
      if (m != meta.end()) m->second.offset = offset.get<std::uint64_t>();  // an offset without a file means nothing
    }
  }
  return meta;
}

std::string PrintMeta(const Meta& meta) {
  nlohmann::json files = nlohmann::json::object(), offsets = nlohmann::json::object();
  for (const auto& [hash, e] : meta) {
    files[hash] = e.file;
    offsets[hash] = e.offset;
  }
  nlohmann::json j = nlohmann::json::object();
  j["hash_to_weight_file"] = std::move(files);
  j["hash_to_weight_offset"] = std::move(offsets);
  return j.dump(2) + "\n";
}

// A Const to externalize.
struct ConstWeight {
  Node* node = nullptr;
  const graph::Tensor* value = nullptr;  // the node's "value" attribute
  std::string hash;
};

// A distinct weight value and where it ends up.
struct PlacedWeight {
  const graph::Tensor* value = nullptr;  // of the first node (in sorted order) holding it
  std::string file;
  std::uint64_t offset = 0;
};

std::atomic<std::uint64_t> temp_counter{0};

// Writes `data` to "<dir>/<name>" through a temporary file in the same directory, so a reader
// never sees a partly written weight file.
Status WriteWeightFile(const std::string& dir, const std::string& name, const std::vector<std::uint8_t>& data) {
  const std::string path = JoinPath(dir, name);
  const std::string temp = JoinPath(
      dir, fmt::format(".{}.tmp{}_{}", name, ::getpid(), temp_counter.fetch_add(1, std::memory_order_relaxed)));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Failed("cannot create weight file '{}': {}", temp, ErrnoText(errno));
  Status s = WriteAll(fd, data.data(), data.size(), temp);
  if (::close(fd) != 0 && s.ok()) s = Status::Failed("writing weight file '{}' failed: {}", temp, ErrnoText(errno));
  if (s.ok() && ::rename(temp.c_str(), path.c_str()) != 0)
    s = Status::Failed("cannot rename '{}' to '{}': {}", temp, path, ErrnoText(errno));
  if (!s.ok()) ::unlink(temp.c_str());
  return s;
}

// Runs fn(0..n-1) with at most `threads` at once (the caller's among them) and returns each
// status; `used` is set to the threads the arena could use. Writing is I/O: its threads mostly wait, so it runs in an arena of its own with
// `threads` slots rather than in the compute pool, and the process-wide limit on oneTBB's threads
// (hardware threads by default) is raised to `threads` while it runs unless another part of the
// process holds it lower on purpose.
template <typename F>
std::vector<Status> InParallel(std::size_t n, int threads, int& used, F fn) {
  std::vector<Status> results(n);
  if (n == 0) return results;
  const int count = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(threads, 1)), n));
  std::optional<tbb::global_control> room;
  if (tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism) <
      static_cast<std::size_t>(count))
    room.emplace(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(count));
  // Never ask for more slots than the limit allows (oneTBB would warn on stderr and ignore them).
  const auto limit = tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  const std::size_t slots = std::min<std::size_t>(static_cast<std::size_t>(count), std::max<std::size_t>(limit, 1));
  tbb::task_arena arena(static_cast<int>(slots));
  used = static_cast<int>(slots);
  arena.execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<std::size_t>(0, n, 1),
        [&](const tbb::blocked_range<std::size_t>& r) {
          for (std::size_t i = r.begin(); i != r.end(); ++i) results[i] = fn(i);
        },
        tbb::simple_partitioner());
  });
  return results;
}

std::string CombinedFileName(const ComputeGraph& root, const std::string& model_name) {
  if (!model_name.empty()) return model_name + "_weight_combined";
  if (!root.name().empty()) return root.name() + "_weight_combined";
  return "weight_combined";
}

// Mode 1: one file per hash, skipped when meta.json knows the hash and the file is there (with
// the right size: a file cut short by a crash before the rename cannot exist, but one cut by hand
// can).
Status WritePerWeightFiles(const std::string& dir, const std::vector<std::string>& order,
                           std::map<std::string, PlacedWeight>& regions, Meta& meta, int writers,
                           ConvertResult& result) {
  std::vector<std::string> to_write;
  for (const std::string& hash : order) {
    PlacedWeight& r = regions.at(hash);
    r.file = JoinPath(dir, "weight_" + hash);
    r.offset = 0;
    const auto size = FileSize(r.file);
    const bool known = meta.count(hash) != 0 && size && *size == r.value->data.size();
    if (!known) to_write.push_back(hash);
    meta[hash] = MetaEntry{r.file, 0};
  }
  std::vector<Status> errors = InParallel(to_write.size(), writers, result.writer_threads, [&](std::size_t i) {
    return WriteWeightFile(dir, "weight_" + to_write[i], regions.at(to_write[i]).value->data);
  });
  for (Status& s : errors) NPUFLOW_RETURN_IF_ERROR(std::move(s));
  for (const std::string& hash : to_write) result.bytes_written += regions.at(hash).value->data.size();
  result.files_written = static_cast<int>(to_write.size());
  return Status::Ok();
}

// Mode 2: new hashes appended to the combined file in `order`, each at a 512-byte aligned offset
// and zero-padded to the next one. A hash meta.json knows keeps its region while that region's
// file exists and holds it.
Status WriteCombinedFile(const std::string& dir, const std::string& file_name, const std::vector<std::string>& order,
                         std::map<std::string, PlacedWeight>& regions, Meta& meta, int writers,
                         ConvertResult& result) {
  std::vector<std::string> to_write;
  for (const std::string& hash : order) {
    PlacedWeight& r = regions.at(hash);
    auto m = meta.find(hash);
    if (m != meta.end()) {
      const auto size = FileSize(m->second.file);
      if (size && m->second.offset <= *size && r.value->data.size() <= *size - m->second.offset) {
        r.file = m->second.file;
        r.offset = m->second.offset;
        continue;
      }
    }
    to_write.push_back(hash);
  }
  if (to_write.empty()) return Status::Ok();

  const std::string path = JoinPath(dir, file_name);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Failed("cannot open combined weight file '{}': {}", path, ErrnoText(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::Failed("cannot stat combined weight file '{}': {}", path, ErrnoText(err));
  }
  // Offsets first (the flock keeps every other writer out), then the file is extended to its new
  // size (the padding reads as zeros) and the regions are written side by side. A file this code
  // wrote always ends aligned; one cut short by hand may not, and is padded.
  auto align = [](std::uint64_t v) { return (v + kCombinedAlignment - 1) / kCombinedAlignment * kCombinedAlignment; };
  std::uint64_t end = align(static_cast<std::uint64_t>(st.st_size));
  for (const std::string& hash : to_write) {
    PlacedWeight& r = regions.at(hash);
    r.file = path;
    r.offset = end;
    end = align(end + r.value->data.size());
  }
  Status s;
  if (::ftruncate(fd, static_cast<off_t>(end)) != 0)
    s = Status::Failed("cannot extend combined weight file '{}' to {} bytes: {}", path, end, ErrnoText(errno));
  if (s.ok()) {
    std::vector<Status> errors = InParallel(to_write.size(), writers, result.writer_threads, [&](std::size_t i) {
      const PlacedWeight& r = regions.at(to_write[i]);
      return WriteAllAt(fd, r.value->data.data(), r.value->data.size(), r.offset, path);
    });
    for (Status& e : errors)
      if (s.ok() && !e.ok()) s = std::move(e);
  }
  if (::close(fd) != 0 && s.ok())
    s = Status::Failed("writing combined weight file '{}' failed: {}", path, ErrnoText(errno));
  NPUFLOW_RETURN_IF_ERROR(std::move(s));
  for (const std::string& hash : to_write) {
    const PlacedWeight& r = regions.at(hash);
    result.bytes_written += r.value->data.size();
    meta[hash] = MetaEntry{r.file, r.offset};
  }
  result.files_written = 1;
  return Status::Ok();
}

}  // namespace

StatusOr<ExternalWeightMode> ParseExternalWeightMode(std::string_view value, std::string_view option) {
  if (value.empty()) return ExternalWeightMode::kDefault;
  if (value == "0") return ExternalWeightMode::kEmbedded;
  if (value == "1") return ExternalWeightMode::kPerWeight;
  if (value == "2") return ExternalWeightMode::kCombined;
  return Status::ParamInvalid("{} '{}': expected \"\", \"0\", \"1\" or \"2\"", option, value);
}

StatusOr<ValueBins> ParseValueBins(std::string_view json) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    return Status::ParamInvalid("ge.exec.value_bins is not valid JSON: {}", e.what());
  }
  auto list = j.is_object() ? j.find("value_bins") : j.end();
  if (!j.is_object() || list == j.end() || !list->is_array())
    return Status::ParamInvalid(
        "ge.exec.value_bins: expected {{\"value_bins\": [{{\"value_bin_id\": ID, \"value_bin_file\": PATH}}, ...]}}");
  ValueBins bins;
  std::map<std::string, std::size_t> entry_of;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& e = (*list)[i];
    if (!e.is_object()) return Status::ParamInvalid("ge.exec.value_bins: entry {} is not an object", i);
    auto id_it = e.find("value_bin_id");
    auto file_it = e.find("value_bin_file");
    if (id_it == e.end()) return Status::ParamInvalid("ge.exec.value_bins: entry {} has no \"value_bin_id\"", i);
    if (file_it == e.end()) return Status::ParamInvalid("ge.exec.value_bins: entry {} has no \"value_bin_file\"", i);
    std::string id;
    if (id_it->is_string()) {
      id = id_it->get<std::string>();
    } else if (id_it->is_number_integer()) {
      id = id_it->dump();  // a JSON integer is its decimal text
    } else {
      return Status::ParamInvalid("ge.exec.value_bins: entry {}: \"value_bin_id\" must be a string or an integer", i);
    }
    if (id.empty()) return Status::ParamInvalid("ge.exec.value_bins: entry {}: \"value_bin_id\" is empty", i);
    if (!file_it->is_string() || file_it->get<std::string>().empty())
      return Status::ParamInvalid(
          "ge.exec.value_bins: entry {} (id '{}'): \"value_bin_file\" must be a non-empty string", i, id);
    if (auto [it, fresh] = entry_of.emplace(id, i); !fresh)
      return Status::ParamInvalid("ge.exec.value_bins: value_bin_id '{}' appears twice (entries {} and {})", id,
                                  it->second, i);
    bins.emplace(id, file_it->get<std::string>());
  }
  return bins;
}

Status ConvertFileConstantToConst(graph::ComputeGraph& root, const ValueBins& value_bins, const std::string& base_dir) {
  for (ComputeGraph* g : AllGraphs(root)) {
    for (Node* node : g->nodes()) {
      if (node->type() != "FileConstant") continue;
      OpDesc& op = node->op();
      NPUFLOW_ASSIGN_OR_RETURN(std::string path, FileConstantPath(op, value_bins, base_dir));
      if (path.empty()) continue;
      NPUFLOW_ASSIGN_OR_RETURN(graph::DataType dtype, op.Attr<graph::DataType>("dtype"));
      NPUFLOW_ASSIGN_OR_RETURN(graph::Shape shape, op.Attr<graph::Shape>("shape"));
      NPUFLOW_ASSIGN_OR_RETURN(std::int64_t offset, op.AttrOr<std::int64_t>("offset", 0));
      NPUFLOW_ASSIGN_OR_RETURN(std::int64_t length, op.AttrOr<std::int64_t>("length", 0));
      graph::TensorDesc desc{dtype, std::move(shape)};
      const auto bytes = desc.bytes();
      if (!bytes)
        return Status::ParamInvalid("node '{}' (FileConstant): attribute 'shape' {} must be static", op.name(),
                                    desc.shape.ToString());
      if (offset < 0 || length < 0)
        return Status::ParamInvalid("node '{}' (FileConstant): offset {} and length {} of '{}' must not be negative",
                                    op.name(), offset, length, path);
      if (length != 0 && static_cast<std::uint64_t>(length) != *bytes)
        return Status::ParamInvalid(
            "node '{}' (FileConstant): length {} bytes of '{}' differs from the tensor size {} bytes ({})", op.name(),
            length, path, *bytes, desc.ToString());
      NPUFLOW_ASSIGN_OR_RETURN(std::vector<std::uint8_t> data,
                               ReadRegion(op, path, static_cast<std::uint64_t>(offset), *bytes));
      for (const char* key : kFileConstantAttrs) op.RemoveAttr(key);
      op.set_type("Const");
      op.SetAttr("value", graph::Tensor{std::move(desc), std::move(data)});
    }
  }
  return Status::Ok();
}

Status ResolveFileConstantLocations(graph::ComputeGraph& root, const ValueBins& value_bins) {
  for (ComputeGraph* g : AllGraphs(root)) {
    for (Node* node : g->nodes()) {
      if (node->type() != "FileConstant") continue;
      NPUFLOW_ASSIGN_OR_RETURN(std::string location, node->op().AttrOr<std::string>("location", ""));
      if (!location.empty()) continue;
      NPUFLOW_ASSIGN_OR_RETURN(std::string path, FileConstantPath(node->op(), value_bins, ""));
      if (!path.empty()) node->op().SetAttr("location", std::move(path));
    }
  }
  return Status::Ok();
}

StatusOr<ConvertResult> ConvertConstToFileConstant(graph::ComputeGraph& root, const ConvertOptions& options) {
  if (options.mode != ExternalWeightMode::kPerWeight && options.mode != ExternalWeightMode::kCombined)
    return Status::ParamInvalid("converting Consts to FileConstants needs external weight mode 1 or 2");
  if (options.dir.empty()) return Status::ParamInvalid("converting Consts to FileConstants needs a weight directory");
  NPUFLOW_RETURN_IF_ERROR(CryptoAvailable().WithContext("naming external weights by their SHA-256"));
  NPUFLOW_RETURN_IF_ERROR(ConvertFileConstantToConst(root));

  std::vector<ConstWeight> consts;
  for (ComputeGraph* g : AllGraphs(root)) {
    for (Node* node : g->nodes()) {
      if (node->type() != "Const") continue;
      auto it = node->op().attrs().find("value");
      const graph::Tensor* value = it == node->op().attrs().end() ? nullptr : std::get_if<graph::Tensor>(&it->second);
      if (value == nullptr)
        return Status::ParamInvalid("node '{}' (Const): attribute 'value' is missing or not a tensor", node->name());
      if (value->data.empty()) continue;
      consts.push_back({node, value, {}});
    }
  }
  ConvertResult result;
  result.hash_threads = tbb::this_task_arena::max_concurrency();
  tbb::parallel_for(std::size_t{0}, consts.size(), [&](std::size_t i) {
    consts[i].hash = Sha256Hex(consts[i].value->data.data(), consts[i].value->data.size());
  });
  for (const ConstWeight& c : consts) result.bytes_hashed += c.value->data.size();
  // The order decides mode 2's offsets; it must not depend on how the graph was built up.
  std::stable_sort(consts.begin(), consts.end(), [](const ConstWeight& a, const ConstWeight& b) {
    return std::forward_as_tuple(a.node->name(), a.node->graph()->name(), a.node->id()) <
           std::forward_as_tuple(b.node->name(), b.node->graph()->name(), b.node->id());
  });
  std::vector<std::string> order;  // distinct hashes, first appearance in sorted order
  std::map<std::string, PlacedWeight> regions;
  for (const ConstWeight& c : consts) {
    if (regions.emplace(c.hash, PlacedWeight{c.value, {}, 0}).second) order.push_back(c.hash);
  }

  std::string dir = options.dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Failed("cannot create weight directory '{}': {}", dir, ec.message());
  const std::string meta_path = JoinPath(dir, kMetaFileName);
  NPUFLOW_ASSIGN_OR_RETURN(std::unique_ptr<LockedMetaFile> meta_file, LockedMetaFile::Open(meta_path));
  NPUFLOW_ASSIGN_OR_RETURN(std::string meta_text, meta_file->ReadAll());
  NPUFLOW_ASSIGN_OR_RETURN(Meta meta, ParseMeta(meta_text, meta_path));

  if (options.mode == ExternalWeightMode::kPerWeight) {
    NPUFLOW_RETURN_IF_ERROR(WritePerWeightFiles(dir, order, regions, meta, options.writers, result));
  } else {
    NPUFLOW_RETURN_IF_ERROR(
        WriteCombinedFile(dir, CombinedFileName(root, options.model_name), order, regions, meta, options.writers,
                          result));
  }

  NPUFLOW_RETURN_IF_ERROR(meta_file->Rewrite(PrintMeta(meta)));

  // Nothing below fails: on an error above the graph is as it was (the Consts read back from
  // FileConstants aside), and files already written are harmless (meta.json or a later compile
  // finds them).
  for (const ConstWeight& c : consts) {
    const PlacedWeight& r = regions.at(c.hash);
    OpDesc& op = c.node->op();
    graph::TensorDesc desc = c.value->desc;
    const auto length = static_cast<std::int64_t>(c.value->data.size());
    op.RemoveAttr("value");  // `c.value` dangles from here on
    op.set_type("FileConstant");
    op.SetAttr("location", r.file);
    op.SetAttr("offset", static_cast<std::int64_t>(r.offset));
    op.SetAttr("length", length);
    op.SetAttr("dtype", desc.dtype);
    op.SetAttr("shape", desc.shape);
    op.SetAttr("original_shape", desc.shape);
    op.SetAttr("_sha256", c.hash);
  }
  result.weights = ListExternalWeights(root);
  return result;
}

std::vector<ExternalWeightDesc> ListExternalWeights(const graph::ComputeGraph& root) {
  std::map<std::pair<std::string, std::uint64_t>, ExternalWeightDesc> regions;
  for (const ComputeGraph* g : AllGraphs(root)) {
    for (const Node* node : g->nodes()) {
      if (node->type() != "FileConstant") continue;
      const OpDesc& op = node->op();
      std::string path = op.AttrOr<std::string>("location", "").value_or("");
      if (path.empty()) path = op.AttrOr<std::string>("file_path", "").value_or("");
      if (path.empty()) continue;
      const std::int64_t offset = std::max<std::int64_t>(op.AttrOr<std::int64_t>("offset", 0).value_or(0), 0);
      std::int64_t length = std::max<std::int64_t>(op.AttrOr<std::int64_t>("length", 0).value_or(0), 0);
      if (length == 0) {
        auto dtype = op.Attr<graph::DataType>("dtype");
        auto shape = op.Attr<graph::Shape>("shape");
        if (dtype.ok() && shape.ok()) {
          length = static_cast<std::int64_t>(graph::TensorDesc{*dtype, *shape}.bytes().value_or(0));
        }
      }
      ExternalWeightDesc& d = regions[{path, static_cast<std::uint64_t>(offset)}];
      if (d.nodes.empty()) {
        d.path = path;
        d.offset = static_cast<std::uint64_t>(offset);
      }
      d.size = std::max(d.size, static_cast<std::uint64_t>(length));
      if (d.id.empty()) d.id = op.AttrOr<std::string>("_sha256", "").value_or("");
      d.nodes.push_back(node->name());
    }
  }
  std::vector<ExternalWeightDesc> out;
  out.reserve(regions.size());
  for (auto& [key, d] : regions) out.push_back(std::move(d));
  return out;
}

}  // namespace npuflow::weights
