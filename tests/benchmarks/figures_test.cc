// What a figure's baseline is: measured in the same run, or given and named. Without any
// measurement (empty results) a measured baseline is 0, so a figure whose baseline is still a
// number there took it from elsewhere, and must say so.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "benchmarks/harness.h"

namespace npuflow::bench {
namespace {

TEST(BenchmarkFiguresTest, FixedBaselinesAreGivenAndNamed) {
  const std::set<std::string> areas = {"actors", "npu", "compile", "ops", "v1", "v2", "weights", "gpt2", "tiling", "pipeline", "stress"};
  std::set<std::string> seen;
  for (const Area& area : Areas()) {
    seen.insert(area.name);
    const std::vector<Figure> figures = area.figures(Results{});
    EXPECT_FALSE(figures.empty()) << area.name;
    for (const Figure& f : figures) {
      EXPECT_EQ(f.given, f.baseline != 0) << area.name << " figure " << f.name << ": baseline " << f.baseline
                                          << " (" << f.baseline_what << ")";
      EXPECT_FALSE(f.baseline_what.empty()) << area.name << " figure " << f.name;
    }
  }
  EXPECT_EQ(seen, areas);
}

TEST(BenchmarkFiguresTest, GivenFiguresNameTheirSource) {
  for (const Area& area : Areas()) {
    for (const Figure& f : area.figures(Results{})) {
      if (!f.given) continue;
      EXPECT_TRUE(f.baseline_what.find("issue") != std::string::npos ||
                  f.baseline_what.find("reference") != std::string::npos)
          << area.name << " figure " << f.name << ": '" << f.baseline_what << "'";
    }
  }
}

}  // namespace
}  // namespace npuflow::bench
