// Layers include only layers below them (docs: ARCHITECTURE.md "Layers").
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include <gtest/gtest.h>

namespace {

// Lower rank = lower layer. proto/ is data, includable by graph/ and above.
const std::map<std::string, int> kRank = {
    {"base", 0},     {"actors", 1}, {"npu_sim", 2}, {"proto", 3},     {"graph", 3},
    {"weights", 4},  {"lowering", 5}, {"scheduler", 6}, {"benchmarks", 7}, {"apps", 8},
};

TEST(Layering, NoLayerIncludesALayerAboveIt) {
  namespace fs = std::filesystem;
  const fs::path root = NPUFLOW_SOURCE_DIR;
  const std::regex include_re(R"re(#include\s+"([a-z_]+)/)re");
  int files = 0;
  for (const auto& [layer, rank] : kRank) {
    if (!fs::exists(root / layer)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root / layer)) {
      const auto ext = entry.path().extension();
      if (ext != ".h" && ext != ".cc") continue;
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      int lineno = 0;
      while (std::getline(in, line)) {
        ++lineno;
        std::smatch m;
        if (!std::regex_search(line, m, include_re)) continue;
        auto it = kRank.find(m[1]);
        if (it == kRank.end()) continue;
        EXPECT_LE(it->second, rank) << entry.path().string() << ":" << lineno << ": layer '" << layer
                                    << "' includes higher layer '" << m[1] << "'";
      }
    }
  }
  EXPECT_GT(files, 5);
}

}  // namespace
