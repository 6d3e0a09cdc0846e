#include "weights/weight_dir.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "weights/convert.h"

namespace npuflow::weights {
namespace {

namespace fs = std::filesystem;

std::string StripTrailingSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// Moves `from` to `to`, replacing `to`; across file systems by copy and remove.
Status MoveFile(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec == std::errc::cross_device_link) {
    ec.clear();
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::remove(from, ec);
  }
  if (ec) return Status::Failed("cannot move weight file '{}' to '{}': {}", from.string(), to.string(), ec.message());
  return Status::Ok();
}

}  // namespace

std::string ResolveWeightDir(const std::string& user_dir, std::uint64_t session_id) {
  if (!user_dir.empty()) return StripTrailingSlashes(user_dir);
  const std::string name = fmt::format("tmp_weight_{}_{}", ::getpid(), session_id);
  const char* work = std::getenv("ASCEND_WORK_PATH");
  if (work != nullptr && *work != '\0') {
    const std::string base = StripTrailingSlashes(work);
    return base == "/" ? "/" + name : base + "/" + name;
  }
  return "./" + name;
}

bool IsTemporaryWeightDir(const std::string& dir) {
  const std::string stripped = StripTrailingSlashes(dir);
  return fs::path(stripped).filename().string().starts_with("tmp_weight_");
}

Status RelocateWeightFiles(graph::ComputeGraph& root, const std::string& model_path) {
  fs::path model_dir = fs::path(model_path).parent_path();
  if (model_dir.empty()) model_dir = ".";
  const fs::path dest_dir = model_dir / "weight";
  std::set<std::string> moved;      // sources already moved by an earlier node
  std::set<std::string> temp_dirs;  // temporary directories files left
  std::vector<graph::ComputeGraph*> graphs{&root};
  for (graph::ComputeGraph* sub : root.subgraphs()) graphs.push_back(sub);
  for (graph::ComputeGraph* g : graphs) {
    for (graph::Node* node : g->nodes()) {
      if (node->type() != "FileConstant") continue;
      NPUFLOW_ASSIGN_OR_RETURN(std::string location, node->op().AttrOr<std::string>("location", ""));
      if (location.empty()) continue;
      const fs::path src(location);
      const fs::path parent = src.parent_path();
      if (parent.empty() || !IsTemporaryWeightDir(parent.string())) continue;
      const std::string name = src.filename().string();
      if (!moved.contains(location)) {
        std::error_code ec;
        fs::create_directories(dest_dir, ec);
        if (ec)
          return Status::Failed("cannot create weight directory '{}' for weight file '{}': {}", dest_dir.string(),
                                location, ec.message());
        NPUFLOW_RETURN_IF_ERROR(MoveFile(src, dest_dir / name));
        moved.insert(location);
        temp_dirs.insert(parent.string());
      }
      node->op().SetAttr("location", name);
    }
  }
  // A temporary directory with nothing left but its meta.json is done with.
  for (const std::string& dir : temp_dirs) {
    std::error_code ec;
    bool only_meta = true;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().filename() != kMetaFileName) {
        only_meta = false;
        break;
      }
    }
    if (!ec && only_meta) fs::remove_all(dir, ec);  // best effort: the files have moved already
  }
  return Status::Ok();
}

Status RemoveTemporaryWeightDir(const std::string& dir) {
  if (!IsTemporaryWeightDir(dir))
    return Status::ParamInvalid("weight directory '{}' is not a temporary one (tmp_weight_*): not removing it", dir);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return Status::Failed("cannot remove temporary weight directory '{}': {}", dir, ec.message());
  return Status::Ok();
}

}  // namespace npuflow::weights
