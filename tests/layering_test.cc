// Layers include only layers below them. The layers and their order come from the README's layout
// table (section "Layout"): one row per layer, lowest first; the folders named in one row share a
// rank. So the table a newcomer reads and the rule this test enforces cannot disagree.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;

const fs::path kRoot = NPUFLOW_SOURCE_DIR;

// Folder (relative to the root, no trailing slash) -> rank, from the README's layout table.
std::map<std::string, int> ReadLayoutTable() {
  std::ifstream in(kRoot / "README.md");
  std::string line;
  bool in_layout = false;
  int rank = 0;
  std::map<std::string, int> ranks;
  const std::regex folder_re(R"re(`([a-z_]+(?:/[a-z_]+)*)/`)re");
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) in_layout = line.find("Layout") != std::string::npos;
    if (!in_layout || line.rfind("| `", 0) != 0) continue;
    // Only the first cell names folders; the second describes them.
    const std::string first_cell = line.substr(1, line.find('|', 1) - 1);
    bool any = false;
    for (std::sregex_iterator it(first_cell.begin(), first_cell.end(), folder_re), end; it != end; ++it) {
      ranks.emplace((*it)[1], rank);
      any = true;
    }
    if (any) ++rank;
  }
  return ranks;
}

// The layer a path (a source file's, relative to the root, or an include's) belongs to: the
// longest folder of the table that is a prefix of it. Empty when none is.
std::string LayerOf(const std::string& path, const std::map<std::string, int>& ranks) {
  std::string best;
  for (const auto& [folder, rank] : ranks)
    if (path.rfind(folder + "/", 0) == 0 && folder.size() > best.size()) best = folder;
  return best;
}

TEST(Layering, ReadmeLayoutTableCoversEveryCodeFile) {
  const auto ranks = ReadLayoutTable();
  ASSERT_GT(ranks.size(), 8u) << "README.md: no layout table found under a heading with 'Layout'";
  for (const auto& [folder, rank] : ranks)
    EXPECT_TRUE(fs::is_directory(kRoot / folder)) << "README.md names '" << folder << "/', which does not exist";
  // Every C++ file outside tests/ belongs to a row of the table.
  for (const auto& entry : fs::directory_iterator(kRoot)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name[0] == '.' || name == "tests" || name.rfind("build", 0) == 0) continue;
    for (const auto& f : fs::recursive_directory_iterator(entry.path())) {
      if (f.path().extension() != ".cc" && f.path().extension() != ".h") continue;
      const std::string rel = fs::relative(f.path(), kRoot).generic_string();
      EXPECT_FALSE(LayerOf(rel, ranks).empty()) << rel << " is in no folder of README.md's layout table";
    }
  }
}

TEST(Layering, NoLayerIncludesALayerAboveIt) {
  const auto ranks = ReadLayoutTable();
  ASSERT_FALSE(ranks.empty());
  const std::regex include_re(R"re(#include\s+"([a-z_]+(?:/[a-z_]+)*/[a-z_0-9.]+\.h)")re");
  int files = 0;
  std::set<std::string> tops;
  for (const auto& [folder, rank] : ranks) tops.insert(folder.substr(0, folder.find('/')));
  for (const std::string& top : tops) {
    for (const auto& entry : fs::recursive_directory_iterator(kRoot / top)) {
      const auto ext = entry.path().extension();
      if (ext != ".h" && ext != ".cc") continue;
      const std::string rel = fs::relative(entry.path(), kRoot).generic_string();
      const std::string layer = LayerOf(rel, ranks);
      if (layer.empty()) continue;
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      int lineno = 0;
      while (std::getline(in, line)) {
        ++lineno;
        std::smatch m;
        if (!std::regex_search(line, m, include_re)) continue;
        const std::string included = LayerOf(m[1], ranks);
        if (included.empty()) continue;
        EXPECT_LE(ranks.at(included), ranks.at(layer))
            << rel << ":" << lineno << ": layer '" << layer << "' includes higher layer '" << included << "' ("
            << m[1] << ")";
      }
    }
  }
  EXPECT_GT(files, 100);
}

}  // namespace
