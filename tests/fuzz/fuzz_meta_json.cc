// libFuzzer target: the two JSON files of external weights (weights/convert.h).
//
// The input is a weight directory's meta.json, read by ConvertConstToFileConstant as `npuflow
// compile --external_weight 1|2 --external_weight_dir DIR` reads it: the fixed graph of
// weights_fixture.h is converted in mode 2 and in mode 1, each into a directory that holds the
// weight files an earlier compile of that graph wrote and the fuzzed meta.json. A compile that
// succeeds must leave every FileConstant inside its file (read back with
// ConvertFileConstantToConst) when those files are the directory's weight files. The same input
// is then parsed as ge.exec.value_bins (ParseValueBins, `--value_bins JSON`), and good value bins
// resolve a graph's file ids.
//
// The directory is relative ("w", the process works in its scratch directory), so the seeds'
// meta.json, written by the same conversion, names files that exist here.
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "graph/ir/text_format.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/weights_fixture.h"
#include "weights/convert.h"

namespace {

using namespace npuflow;
namespace fs = std::filesystem;

std::unique_ptr<graph::ComputeGraph> Graph(std::string_view text) {
  auto g = graph::ParseGraphText(text, "fixture");
  if (!g.ok()) std::abort();
  return std::move(*g);
}

weights::ConvertOptions Options(weights::ExternalWeightMode mode) {
  return {.mode = mode, .dir = "w", .model_name = std::string(fuzz::kWeightsModelName), .writers = 1};
}

// The weight files of one mode-2 and one mode-1 compile of the fixture (file name -> bytes), made
// once. Kept in memory and written back before every input: std::filesystem::copy gave up with
// EINTR when libFuzzer's timer signal arrived during the copy.
using WeightFiles = std::map<std::string, std::string>;

WeightFiles MakePristine() {
  for (auto mode : {weights::ExternalWeightMode::kCombined, weights::ExternalWeightMode::kPerWeight}) {
    auto g = Graph(fuzz::kWeightsGraph);
    if (!weights::ConvertConstToFileConstant(*g, Options(mode)).ok()) std::abort();
  }
  WeightFiles files;
  for (const auto& entry : fs::directory_iterator("w")) {
    if (entry.path().filename() == "meta.json") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    files[entry.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

// Whether every FileConstant's file is one the compile kept: in the weight directory, and not
// meta.json. A meta.json may name any file for a hash, and the converter takes it when it is
// long enough (convert.h); a file elsewhere may change under the harness (/proc, /sys), and
// meta.json itself is rewritten at the end of the compile.
bool OnlyWeightFiles(const graph::ComputeGraph& g) {
  for (const graph::Node* n : g.nodes()) {
    if (n->type() != "FileConstant") continue;
    const std::string location = n->op().AttrOr<std::string>("location", "").value_or("");
    if (location.rfind("w/", 0) != 0 || fs::path(location).filename() == "meta.json" ||
        location.find("..") != std::string::npos)
      return false;
  }
  return true;
}

void ConvertWith(const WeightFiles& pristine, const std::uint8_t* meta, std::size_t size,
                 weights::ExternalWeightMode mode) {
  std::error_code ec;
  fs::remove_all("w", ec);
  fs::create_directory("w", ec);
  if (ec) std::abort();
  for (const auto& [name, bytes] : pristine) fuzz::WriteInput(fs::path("w") / name, bytes);
  fuzz::WriteInput("w/meta.json", meta, size);
  auto g = Graph(fuzz::kWeightsGraph);
  if (!weights::ConvertConstToFileConstant(*g, Options(mode)).ok() || !OnlyWeightFiles(*g)) return;
  if (Status back = weights::ConvertFileConstantToConst(*g); !back.ok()) {
    std::fprintf(stderr, "a compile that succeeded left a FileConstant outside its file: %s\n",
                 std::string(back.message()).c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const WeightFiles pristine = [] {
    if (::chdir(fuzz::ScratchDir("meta-json").c_str()) != 0) std::abort();
    return MakePristine();
  }();
  ConvertWith(pristine, data, size, weights::ExternalWeightMode::kCombined);
  ConvertWith(pristine, data, size, weights::ExternalWeightMode::kPerWeight);

  auto bins = weights::ParseValueBins(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!bins.ok()) return 0;
  auto g = Graph(fuzz::ValueBinGraphText("w/fuzz_weight_combined"));
  (void)weights::ResolveFileConstantLocations(*g, *bins);
  return 0;
}
