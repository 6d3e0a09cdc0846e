// External weights (seed 000): Const <-> FileConstant, weight files and meta.json, value bins, the
// weight directory and the move of weight files next to a saved model, and the external-weights
// pass inside the v1 compiler.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "graph/model_file/compiled_model.h"
#include "graph/ops/op_registry.h"
#include "lowering/compiler.h"
#include "lowering/memory_plan.h"
#include "tests/graph/tensors.h"
#include "weights/convert.h"
#include "weights/weight_dir.h"

namespace npuflow::weights {
namespace {

namespace fs = std::filesystem;
using graph::ComputeGraph;
using graph::DataType;
using graph::Node;
using graph::OpDesc;
using graph::Shape;
using graph::Tensor;

// A fresh directory under the system temp dir, removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> n{0};
    path_ = (fs::temp_directory_path() / ("npuflow_conv_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
                .string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<std::uint8_t> Bytes(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

Tensor U8(std::vector<std::uint8_t> bytes) {
  const auto n = static_cast<std::int64_t>(bytes.size());
  return Tensor{graph::TensorDesc{DataType::kUInt8, Shape{n}}, std::move(bytes)};
}

Node* AddConst(ComputeGraph& g, const std::string& name, Tensor value) {
  OpDesc op(name, "Const");
  graph::TensorDesc desc = value.desc;
  op.SetAttr("value", std::move(value));
  Node* node = g.AddNode(std::move(op)).value();
  node->outputs() = {desc};
  return node;
}

std::vector<std::uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void WriteFile(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string Hash(const std::vector<std::uint8_t>& bytes) { return Sha256Hex(bytes.data(), bytes.size()); }

nlohmann::json ReadMeta(const std::string& dir) {
  std::ifstream f(dir + "/meta.json");
  return nlohmann::json::parse(f);
}

template <typename T>
T AttrOf(const Node* node, const std::string& key) {
  auto v = node->op().Attr<T>(key);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : T{};
}

ConvertOptions PerWeight(const std::string& dir) { return {.mode = ExternalWeightMode::kPerWeight, .dir = dir}; }
ConvertOptions Combined(const std::string& dir, std::string model = "m") {
  return {.mode = ExternalWeightMode::kCombined, .dir = dir, .model_name = std::move(model)};
}

// ---- options ------------------------------------------------------------------------------------------
TEST(ExternalWeightMode, AcceptsTheFourValuesAndNamesTheOptionOtherwise) {
  EXPECT_EQ(ParseExternalWeightMode("", "ge.externalWeight").value(), ExternalWeightMode::kDefault);
  EXPECT_EQ(ParseExternalWeightMode("0", "ge.externalWeight").value(), ExternalWeightMode::kEmbedded);
  EXPECT_EQ(ParseExternalWeightMode("1", "ge.externalWeight").value(), ExternalWeightMode::kPerWeight);
  EXPECT_EQ(ParseExternalWeightMode("2", "ge.externalWeight").value(), ExternalWeightMode::kCombined);
  auto bad = ParseExternalWeightMode("3", "--external_weight");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kParamInvalid);
  EXPECT_EQ(bad.status().message(), R"(--external_weight '3': expected "", "0", "1" or "2")");
  EXPECT_FALSE(ParseExternalWeightMode(" 1", "ge.externalWeight").ok());
}

TEST(ValueBins, ParsesStringAndNumberIds) {
  auto bins = ParseValueBins(
      R"({"value_bins":[{"value_bin_id":"a","value_bin_file":"/w/a.bin"},{"value_bin_id":7,"value_bin_file":"b.bin"}]})");
  ASSERT_TRUE(bins.ok()) << bins.status();
  EXPECT_EQ(*bins, (ValueBins{{"a", "/w/a.bin"}, {"7", "b.bin"}}));
  EXPECT_TRUE(ParseValueBins(R"({"value_bins":[]})")->empty());
}

TEST(ValueBins, ErrorsNameWhatWasWrong) {
  auto message = [](std::string_view json) {
    auto r = ParseValueBins(json);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kParamInvalid);
    return std::string(r.status().message());
  };
  EXPECT_TRUE(message(R"({"value_bins":[)").starts_with("ge.exec.value_bins is not valid JSON: ")) << message("{");
  EXPECT_EQ(message(R"([1])"),
            R"(ge.exec.value_bins: expected {"value_bins": [{"value_bin_id": ID, "value_bin_file": PATH}, ...]})");
  EXPECT_EQ(message(R"({"value_bins":[{"value_bin_file":"x"}]})"),
            R"(ge.exec.value_bins: entry 0 has no "value_bin_id")");
  EXPECT_EQ(message(R"({"value_bins":[{"value_bin_id":"a","value_bin_file":"x"},{"value_bin_id":"b"}]})"),
            R"(ge.exec.value_bins: entry 1 has no "value_bin_file")");
  EXPECT_EQ(message(R"({"value_bins":[{"value_bin_id":1.5,"value_bin_file":"x"}]})"),
            R"(ge.exec.value_bins: entry 0: "value_bin_id" must be a string or an integer)");
  EXPECT_EQ(message(R"({"value_bins":[{"value_bin_id":"a","value_bin_file":""}]})"),
            R"(ge.exec.value_bins: entry 0 (id 'a'): "value_bin_file" must be a non-empty string)");
  EXPECT_EQ(
      message(R"({"value_bins":[{"value_bin_id":"1","value_bin_file":"x"},{"value_bin_id":1,"value_bin_file":"y"}]})"),
      "ge.exec.value_bins: value_bin_id '1' appears twice (entries 0 and 1)");
  EXPECT_EQ(message(R"({"value_bins":[3]})"), "ge.exec.value_bins: entry 0 is not an object");
  // A number beyond a double's range is nlohmann's out_of_range, not a parse_error (found by
  // fuzz_meta_json: it ended the process).
  EXPECT_EQ(message(R"({"value_bins":[{"value_bin_id":1e400,"value_bin_file":"x"}]})"),
            "ge.exec.value_bins is not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'");
}

// ---- mode 1 ---------------------------------------------------------------------------------------------
TEST(ConvertPerWeight, IdenticalWeightsShareOneFileAndMetaListsEachHash) {
  TempDir tmp;
  const std::string dir = tmp / "w";  // created by the conversion
  ComputeGraph g("g");
  const auto y = Bytes(40, 2);
  Node* a = AddConst(g, "a", graph::F32(Shape{2, 3}, {1, 2, 3, 4, 5, 6}));
  Node* b = AddConst(g, "b", graph::F32(Shape{2, 3}, {1, 2, 3, 4, 5, 6}));
  Node* c = AddConst(g, "c", U8(y));
  const std::vector<std::uint8_t> ab = std::get<Tensor>(a->op().attrs().at("value")).data;
  const std::string hab = Hash(ab), hc = Hash(y);

  auto result = ConvertConstToFileConstant(g, PerWeight(dir));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->files_written, 2);
  EXPECT_EQ(result->bytes_hashed, 24u + 24u + 40u);
  EXPECT_EQ(result->bytes_written, 24u + 40u);

  for (Node* n : {a, b, c}) {
    EXPECT_EQ(n->type(), "FileConstant");
    EXPECT_FALSE(n->op().HasAttr("value"));
    EXPECT_EQ(AttrOf<std::int64_t>(n, "offset"), 0);
  }
  EXPECT_EQ(AttrOf<std::string>(a, "location"), dir + "/weight_" + hab);
  EXPECT_EQ(AttrOf<std::string>(b, "location"), dir + "/weight_" + hab);
  EXPECT_EQ(AttrOf<std::string>(c, "location"), dir + "/weight_" + hc);
  EXPECT_EQ(AttrOf<std::int64_t>(a, "length"), 24);
  EXPECT_EQ(AttrOf<DataType>(a, "dtype"), DataType::kFloat32);
  EXPECT_EQ(AttrOf<Shape>(a, "shape"), (Shape{2, 3}));
  EXPECT_EQ(AttrOf<Shape>(a, "original_shape"), (Shape{2, 3}));
  EXPECT_EQ(AttrOf<std::string>(a, "_sha256"), hab);
  EXPECT_EQ(AttrOf<DataType>(c, "dtype"), DataType::kUInt8);
  // The output descriptor the later passes read is the Const's.
  EXPECT_EQ(a->outputs().at(0).ToString(), "f32[2, 3]");

  EXPECT_EQ(ReadFile(dir + "/weight_" + hab), ab);
  EXPECT_EQ(ReadFile(dir + "/weight_" + hc), y);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::vector<std::string> expected = {"meta.json", "weight_" + hab, "weight_" + hc};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);  // no temporary files left behind
  EXPECT_EQ(fs::status(dir + "/meta.json").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);

  const nlohmann::json meta = ReadMeta(dir);
  EXPECT_EQ(meta, nlohmann::json::parse(R"({"hash_to_weight_file": {")" + hab + R"(": ")" + dir + "/weight_" + hab +
                                        R"(", ")" + hc + R"(": ")" + dir + "/weight_" + hc +
                                        R"("}, "hash_to_weight_offset": {")" + hab + R"(": 0, ")" + hc + R"(": 0}})"));

  ASSERT_EQ(result->weights.size(), 2u);
  const ExternalWeightDesc& shared = result->weights[hab < hc ? 0 : 1];
  EXPECT_EQ(shared.path, dir + "/weight_" + hab);
  EXPECT_EQ(shared.size, 24u);
  EXPECT_EQ(shared.offset, 0u);
  EXPECT_EQ(shared.id, hab);
  EXPECT_EQ(shared.nodes, (std::vector<std::string>{"a", "b"}));
}

// The writers run in a oneTBB arena of their own: more of them than the machine has threads, or
// one, write the same files, and a write that fails still fails the conversion naming the file.
TEST(ConvertPerWeight, AnyNumberOfWritersWritesTheSameFilesAndReportsAFailedWrite) {
  TempDir tmp;
  auto build = [](ComputeGraph& g) {
    for (int i = 0; i < 24; ++i)
      AddConst(g, fmt::format("w{}", i), U8(Bytes(100 + 37 * i, static_cast<std::uint8_t>(i))));
  };
  std::map<int, std::map<std::string, std::vector<std::uint8_t>>> files;  // writers -> name -> bytes
  for (int writers : {1, 64}) {
    ComputeGraph g("g");
    build(g);
    const std::string dir = tmp / fmt::format("w{}", writers);
    ConvertOptions options = PerWeight(dir);
    options.writers = writers;
    auto result = ConvertConstToFileConstant(g, options);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->files_written, 24);
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename() != "meta.json") files[writers][e.path().filename().string()] = ReadFile(e.path().string());
  }
  EXPECT_EQ(files[1].size(), 24u);
  EXPECT_EQ(files[1], files[64]);

  // A directory where one weight file must go: its rename fails, and so does the conversion.
  const std::string dir = tmp / "blocked";
  const std::string blocked = "weight_" + Hash(Bytes(100 + 37 * 5, 5));
  fs::create_directories(dir + "/" + blocked + "/x");
  ComputeGraph g("g");
  build(g);
  ConvertOptions options = PerWeight(dir);
  options.writers = 64;
  auto result = ConvertConstToFileConstant(g, options);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().ToString().find(blocked), std::string::npos) << result.status();
}

TEST(ConvertPerWeight, ASecondCompileReusesKnownWeightsAndAddsNewOnes) {
  TempDir tmp;
  const auto w1 = Bytes(100, 1), w2 = Bytes(200, 2);
  const std::string f1 = tmp / ("weight_" + Hash(w1)), f2 = tmp / ("weight_" + Hash(w2));
  {
    ComputeGraph g("first");
    AddConst(g, "w1", U8(w1));
    ASSERT_TRUE(ConvertConstToFileConstant(g, PerWeight(tmp.path())).ok());
  }
  const auto old_time = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(f1, old_time);
  ComputeGraph g("second");
  Node* n1 = AddConst(g, "other_name", U8(w1));
  Node* n2 = AddConst(g, "w2", U8(w2));
  auto result = ConvertConstToFileConstant(g, PerWeight(tmp.path()));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->files_written, 1);
  EXPECT_EQ(result->bytes_written, 200u);
  EXPECT_EQ(fs::last_write_time(f1), old_time);  // not written again
  EXPECT_EQ(ReadFile(f1), w1);
  EXPECT_EQ(ReadFile(f2), w2);
  EXPECT_EQ(AttrOf<std::string>(n1, "location"), f1);
  EXPECT_EQ(AttrOf<std::string>(n2, "location"), f2);
  const nlohmann::json meta = ReadMeta(tmp.path());
  EXPECT_EQ(meta["hash_to_weight_file"].size(), 2u);
  EXPECT_EQ(meta["hash_to_weight_file"][Hash(w1)], f1);
  EXPECT_EQ(meta["hash_to_weight_file"][Hash(w2)], f2);
  EXPECT_EQ(meta["hash_to_weight_offset"][Hash(w2)], 0);
}

TEST(ConvertPerWeight, AWeightFileGoneFromTheDirectoryIsWrittenAgain) {
  TempDir tmp;
  const auto w = Bytes(64, 3);
  const std::string file = tmp / ("weight_" + Hash(w));
  {
    ComputeGraph g("g");
    AddConst(g, "w", U8(w));
    ASSERT_TRUE(ConvertConstToFileConstant(g, PerWeight(tmp.path())).ok());
  }
  fs::remove(file);
  ComputeGraph g("g");
  AddConst(g, "w", U8(w));
  auto result = ConvertConstToFileConstant(g, PerWeight(tmp.path()));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->files_written, 1);
  EXPECT_EQ(ReadFile(file), w);
  // A file that is there but not listed in meta.json is written too (it may be anything).
  WriteFile(file, {1, 2, 3});
  WriteFile(tmp / "meta.json", {});
  ComputeGraph again("g");
  AddConst(again, "w", U8(w));
  ASSERT_TRUE(ConvertConstToFileConstant(again, PerWeight(tmp.path())).ok());
  EXPECT_EQ(ReadFile(file), w);
}

TEST(ConvertPerWeight, EmptyConstsStayConstAndFileConstantsAreReExternalized) {
  TempDir tmp;
  const auto bytes = Bytes(48, 9);
  WriteFile(tmp / "old.bin", [&] {
    auto v = Bytes(16, 0);  // 16 bytes before the weight
    v.insert(v.end(), bytes.begin(), bytes.end());
    return v;
  }());
  ComputeGraph g("g");
  Node* empty = AddConst(g, "empty", Tensor{graph::TensorDesc{DataType::kFloat32, Shape{0}}, {}});
  OpDesc fc("fc", "FileConstant");
  fc.SetAttr("file_path", tmp / "old.bin");
  fc.SetAttr("offset", std::int64_t{16});
  fc.SetAttr("dtype", DataType::kUInt8);
  fc.SetAttr("shape", Shape{48});
  Node* f = g.AddNode(std::move(fc)).value();
  auto result = ConvertConstToFileConstant(g, PerWeight(tmp / "w"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(empty->type(), "Const");
  EXPECT_TRUE(empty->op().HasAttr("value"));
  EXPECT_EQ(f->type(), "FileConstant");
  EXPECT_FALSE(f->op().HasAttr("file_path"));
  EXPECT_EQ(AttrOf<std::string>(f, "location"), tmp / "w" + "/weight_" + Hash(bytes));
  EXPECT_EQ(AttrOf<std::int64_t>(f, "offset"), 0);
  EXPECT_EQ(AttrOf<std::int64_t>(f, "length"), 48);
  EXPECT_EQ(ReadFile(tmp / "w" + "/weight_" + Hash(bytes)), bytes);
  EXPECT_EQ(result->bytes_hashed, 48u);
}

TEST(ConvertPerWeight, InvalidMetaJsonFailsNamingTheFile) {
  TempDir tmp;
  WriteFile(tmp / "meta.json", {'{', 'x'});
  ComputeGraph g("g");
  Node* w = AddConst(g, "w", U8(Bytes(8, 1)));
  auto result = ConvertConstToFileConstant(g, PerWeight(tmp.path()));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kParamInvalid);
  EXPECT_TRUE(result.status().message().starts_with("weight meta file '" + tmp / "meta.json" + "' is not valid JSON: "))
      << result.status();
  EXPECT_EQ(w->type(), "Const");  // nothing changed
  EXPECT_EQ(fs::file_size(tmp / "meta.json"), 2u);

  WriteFile(tmp / "meta.json", {'[', ']'});
  EXPECT_EQ(ConvertConstToFileConstant(g, PerWeight(tmp.path())).status().message(),
            "weight meta file '" + tmp / "meta.json" + "': expected a JSON object");
  const std::string bad_offset = R"({"hash_to_weight_file": {"h": "f"}, "hash_to_weight_offset": {"h": -1}})";
  WriteFile(tmp / "meta.json", std::vector<std::uint8_t>(bad_offset.begin(), bad_offset.end()));
  EXPECT_EQ(
      ConvertConstToFileConstant(g, PerWeight(tmp.path())).status().message(),
      "weight meta file '" + tmp / "meta.json" + "': 'hash_to_weight_offset' entry 'h' is not a non-negative integer");
}

// Found by fuzz_meta_json: a number beyond a double's range made nlohmann throw out_of_range,
// which the reader did not catch, and the compile ended the process.
TEST(ConvertPerWeight, ANumberTooLargeForADoubleInMetaJsonFailsNamingTheFile) {
  TempDir tmp;
  ComputeGraph g("g");
  Node* w = AddConst(g, "w", U8(Bytes(8, 1)));
  const std::string metas[] = {
      R"(1e400lue_bins":[{"va-luvalhash_to_weight-offset"}]})",  // the input as the fuzzer found it
      R"({"hash_to_weight_file": {"h": "f"}, "hash_to_weight_offset": {"h": 1e400}})",
  };
  for (const std::string& meta : metas) {
    WriteFile(tmp / "meta.json", std::vector<std::uint8_t>(meta.begin(), meta.end()));
    auto result = ConvertConstToFileConstant(g, PerWeight(tmp.path()));
    ASSERT_FALSE(result.ok()) << meta;
    EXPECT_EQ(result.status().code(), StatusCode::kParamInvalid);
    EXPECT_EQ(result.status().message(), "weight meta file '" + tmp / "meta.json" +
                                             "' is not valid JSON: [json.exception.out_of_range.406] number overflow "
                                             "parsing '1e400'");
    EXPECT_EQ(w->type(), "Const");
  }
}

TEST(ConvertPerWeight, NeedsAModeAndADirectory) {
  ComputeGraph g("g");
  AddConst(g, "w", U8(Bytes(8, 1)));
  EXPECT_EQ(ConvertConstToFileConstant(g, {.mode = ExternalWeightMode::kPerWeight}).status().message(),
            "converting Consts to FileConstants needs a weight directory");
  EXPECT_EQ(ConvertConstToFileConstant(g, {.mode = ExternalWeightMode::kEmbedded, .dir = "/tmp"}).status().message(),
            "converting Consts to FileConstants needs external weight mode 1 or 2");
}

// ---- mode 2 ---------------------------------------------------------------------------------------------
TEST(ConvertCombined, WeightsAre512ByteAlignedAndZeroPadded) {
  TempDir tmp;
  const auto small = Bytes(4, 1), big = Bytes(600, 2);
  ComputeGraph g("root");
  Node* a = AddConst(g, "a", U8(small));
  Node* b = AddConst(g, "b", U8(big));
  Node* a2 = AddConst(g, "c", U8(small));  // identical to a: the same region
  auto result = ConvertConstToFileConstant(g, Combined(tmp.path(), "model"));
  ASSERT_TRUE(result.ok()) << result.status();
  const std::string file = tmp / "model_weight_combined";
  EXPECT_EQ(result->files_written, 1);
  EXPECT_EQ(result->bytes_written, 604u);
  for (Node* n : {a, b, a2}) EXPECT_EQ(AttrOf<std::string>(n, "location"), file);
  EXPECT_EQ(AttrOf<std::int64_t>(a, "offset"), 0);
  EXPECT_EQ(AttrOf<std::int64_t>(a2, "offset"), 0);
  EXPECT_EQ(AttrOf<std::int64_t>(b, "offset"), 512);
  EXPECT_EQ(AttrOf<std::int64_t>(a, "length"), 4);
  EXPECT_EQ(AttrOf<std::int64_t>(b, "length"), 600);
  const auto bytes = ReadFile(file);
  ASSERT_EQ(bytes.size(), 1536u);
  EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + 4), small);
  EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin() + 512, bytes.begin() + 1112), big);
  EXPECT_EQ(std::count(bytes.begin() + 4, bytes.begin() + 512, 0), 508);
  EXPECT_EQ(std::count(bytes.begin() + 1112, bytes.end(), 0), 424);

  EXPECT_EQ(ReadMeta(tmp.path()),
            nlohmann::json::parse(R"({"hash_to_weight_file": {")" + Hash(small) + R"(": ")" + file + R"(", ")" +
                                  Hash(big) + R"(": ")" + file + R"("}, "hash_to_weight_offset": {")" + Hash(small) +
                                  R"(": 0, ")" + Hash(big) + R"(": 512}})"));
  ASSERT_EQ(result->weights.size(), 2u);
  EXPECT_EQ(result->weights[0].offset, 0u);
  EXPECT_EQ(result->weights[0].size, 4u);
  EXPECT_EQ(result->weights[0].nodes, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(result->weights[1].offset, 512u);
  EXPECT_EQ(result->weights[1].id, Hash(big));
}

TEST(ConvertCombined, TheFileIsNamedByModelElseRootGraph) {
  TempDir tmp;
  ComputeGraph g("root");
  Node* w = AddConst(g, "w", U8(Bytes(8, 1)));
  ASSERT_TRUE(ConvertConstToFileConstant(g, Combined(tmp.path(), "")).ok());
  EXPECT_EQ(AttrOf<std::string>(w, "location"), tmp / "root_weight_combined");
  ComputeGraph unnamed("");
  Node* u = AddConst(unnamed, "w", U8(Bytes(8, 2)));
  ASSERT_TRUE(ConvertConstToFileConstant(unnamed, Combined(tmp.path(), "")).ok());
  EXPECT_EQ(AttrOf<std::string>(u, "location"), tmp / "weight_combined");
}

TEST(ConvertCombined, ASecondCompileKeepsOldOffsetsAndAppendsNewWeights) {
  TempDir tmp;
  const auto old_w = Bytes(600, 1), new_w = Bytes(10, 2);
  const std::string file = tmp / "m_weight_combined";
  {
    ComputeGraph g("g");
    AddConst(g, "z_old", U8(old_w));
    ASSERT_TRUE(ConvertConstToFileConstant(g, Combined(tmp.path())).ok());
  }
  ASSERT_EQ(fs::file_size(file), 1024u);
  ComputeGraph g("g");
  Node* n_new = AddConst(g, "a_new", U8(new_w));  // sorts first, but is new: appended at the end
  Node* n_old = AddConst(g, "z_old", U8(old_w));
  auto result = ConvertConstToFileConstant(g, Combined(tmp.path()));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->bytes_written, 10u);
  EXPECT_EQ(AttrOf<std::int64_t>(n_old, "offset"), 0);
  EXPECT_EQ(AttrOf<std::int64_t>(n_new, "offset"), 1024);
  const auto bytes = ReadFile(file);
  ASSERT_EQ(bytes.size(), 1536u);
  EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + 600), old_w);
  EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin() + 1024, bytes.begin() + 1034), new_w);
  const nlohmann::json meta = ReadMeta(tmp.path());
  EXPECT_EQ(meta["hash_to_weight_offset"][Hash(old_w)], 0);
  EXPECT_EQ(meta["hash_to_weight_offset"][Hash(new_w)], 1024);
  EXPECT_EQ(meta["hash_to_weight_file"][Hash(new_w)], file);

  // meta.json names both, but the combined file is gone: both are appended anew, in sorted order.
  fs::remove(file);
  ComputeGraph g3("g");
  Node* m_new = AddConst(g3, "a_new", U8(new_w));
  Node* m_old = AddConst(g3, "z_old", U8(old_w));
  ASSERT_TRUE(ConvertConstToFileConstant(g3, Combined(tmp.path())).ok());
  EXPECT_EQ(AttrOf<std::int64_t>(m_new, "offset"), 0);
  EXPECT_EQ(AttrOf<std::int64_t>(m_old, "offset"), 512);
  EXPECT_EQ(fs::file_size(file), 1536u);
  EXPECT_EQ(ReadMeta(tmp.path())["hash_to_weight_offset"][Hash(old_w)], 512);
}

TEST(ConvertCombined, OffsetsFollowNodeNameThenGraphNameThenId) {
  TempDir tmp;
  ComputeGraph root("root");
  ComputeGraph* sub = root.AddSubgraph("a_sub").value();
  // Inserted in reverse name order; "x" exists in both graphs and "a_sub" < "root".
  Node* y = AddConst(root, "y", U8(Bytes(8, 1)));
  Node* x_root = AddConst(root, "x", U8(Bytes(8, 2)));
  Node* x_sub = AddConst(*sub, "x", U8(Bytes(8, 3)));
  Node* b = AddConst(*sub, "b", U8(Bytes(8, 4)));
  ASSERT_TRUE(ConvertConstToFileConstant(root, Combined(tmp.path())).ok());
  EXPECT_EQ(AttrOf<std::int64_t>(b, "offset"), 0);
  EXPECT_EQ(AttrOf<std::int64_t>(x_sub, "offset"), 512);
  EXPECT_EQ(AttrOf<std::int64_t>(x_root, "offset"), 1024);
  EXPECT_EQ(AttrOf<std::int64_t>(y, "offset"), 1536);
  EXPECT_EQ(fs::file_size(tmp / "m_weight_combined"), 2048u);
}

// ---- reverse conversion and path resolution -------------------------------------------------------------
class FileConstantFile : public ::testing::Test {
 protected:
  void SetUp() override {
    auto v = Bytes(16, 0);
    v.insert(v.end(), weight_.begin(), weight_.end());
    WriteFile(tmp_ / "w.bin", v);  // 40 bytes: 16 of header, then 24
  }
  Node* AddFileConstant(ComputeGraph& g, const std::string& name,
                        std::vector<std::pair<std::string, graph::AttrValue>> attrs) {
    OpDesc op(name, "FileConstant");
    op.SetAttr("dtype", DataType::kUInt8);
    op.SetAttr("shape", Shape{24});
    for (auto& [k, v] : attrs) op.SetAttr(k, std::move(v));
    Node* n = g.AddNode(std::move(op)).value();
    n->outputs() = {graph::TensorDesc{DataType::kUInt8, Shape{24}}};
    return n;
  }
  TempDir tmp_;
  const std::vector<std::uint8_t> weight_ = Bytes(24, 5);
};

TEST_F(FileConstantFile, ReadsTheRegionIntoAConst) {
  ComputeGraph g("g");
  Node* by_location = AddFileConstant(g, "l",
                                      {{"location", tmp_ / "w.bin"},
                                       {"offset", std::int64_t{16}},
                                       {"length", std::int64_t{24}},
                                       {"_sha256", std::string("x")}});
  Node* by_path = AddFileConstant(g, "p", {{"file_path", std::string("w.bin")}, {"offset", std::int64_t{16}}});
  Node* by_id = AddFileConstant(g, "i", {{"file_id", std::string("7")}, {"offset", std::int64_t{16}}});
  Node* nothing = AddFileConstant(g, "n", {});
  ASSERT_TRUE(ConvertFileConstantToConst(g, {{"7", tmp_ / "w.bin"}}, tmp_.path()).ok());
  for (Node* n : {by_location, by_path, by_id}) {
    EXPECT_EQ(n->type(), "Const") << n->name();
    EXPECT_EQ(AttrOf<Tensor>(n, "value"), U8(weight_)) << n->name();
    for (const char* key : {"location", "file_path", "file_id", "offset", "length", "dtype", "shape", "_sha256"})
      EXPECT_FALSE(n->op().HasAttr(key)) << n->name() << " " << key;
    EXPECT_EQ(n->outputs().at(0).ToString(), "u8[24]");
  }
  EXPECT_EQ(nothing->type(), "FileConstant");  // no file named: left alone
}

TEST_F(FileConstantFile, ErrorsNameTheNodeTheFileAndTheSizes) {
  auto convert = [&](std::vector<std::pair<std::string, graph::AttrValue>> attrs, const ValueBins& bins = {}) {
    ComputeGraph g("g");
    AddFileConstant(g, "w", std::move(attrs));
    return ConvertFileConstantToConst(g, bins);
  };
  const std::string file = tmp_ / "w.bin";
  Status past_end = convert({{"location", file}, {"offset", std::int64_t{20}}, {"length", std::int64_t{24}}});
  EXPECT_EQ(past_end.code(), StatusCode::kParamInvalid);
  EXPECT_EQ(past_end.message(),
            "node 'w' (FileConstant): weight file '" + file + "' has 40 bytes, reading offset 20 + length 24 needs 44");
  Status unknown = convert({{"file_id", std::string("nope")}}, {{"7", file}, {"8", file}});
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.message(), "node 'w' (FileConstant): file_id 'nope' is not in ge.exec.value_bins (ids: 7, 8)");
  EXPECT_EQ(convert({{"file_id", std::string("nope")}}).message(),
            "node 'w' (FileConstant): file_id 'nope' is not in ge.exec.value_bins (no value bins given)");
  Status empty = convert({{"file_id", std::string()}}, {{"7", file}});
  EXPECT_EQ(empty.code(), StatusCode::kParamInvalid);
  EXPECT_EQ(empty.message(), "node 'w' (FileConstant): attribute 'file_id' is empty");
  Status missing = convert({{"location", file + ".gone"}});
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.message(),
            "node 'w' (FileConstant): cannot read weight file '" + file + ".gone': No such file or directory");
  EXPECT_EQ(convert({{"location", file}, {"length", std::int64_t{8}}}).message(),
            "node 'w' (FileConstant): length 8 bytes of '" + file + "' differs from the tensor size 24 bytes (u8[24])");
}

TEST_F(FileConstantFile, ResolveLocationsSetsLocationFromFilePathOrFileId) {
  ComputeGraph g("g");
  Node* has = AddFileConstant(g, "l", {{"location", std::string("/a")}, {"file_path", std::string("/b")}});
  Node* by_path = AddFileConstant(g, "p", {{"file_path", std::string("/b")}});
  Node* by_id = AddFileConstant(g, "i", {{"file_id", std::string("7")}});
  Node* nothing = AddFileConstant(g, "n", {});
  ASSERT_TRUE(ResolveFileConstantLocations(g, {{"7", "/c"}}).ok());
  EXPECT_EQ(AttrOf<std::string>(has, "location"), "/a");
  EXPECT_EQ(AttrOf<std::string>(by_path, "location"), "/b");
  EXPECT_EQ(AttrOf<std::string>(by_id, "location"), "/c");
  EXPECT_FALSE(nothing->op().HasAttr("location"));
  EXPECT_EQ(ResolveFileConstantLocations(g, {}).message(),
            "");  // everything has a location now; nothing left to resolve
  ComputeGraph g2("g");
  AddFileConstant(g2, "i", {{"file_id", std::string("8")}});
  EXPECT_EQ(ResolveFileConstantLocations(g2, {{"7", "/c"}}).message(),
            "node 'i' (FileConstant): file_id '8' is not in ge.exec.value_bins (ids: 7)");
}

TEST_F(FileConstantFile, ListExternalWeightsGivesOneEntryPerRegion) {
  ComputeGraph g("g");
  ComputeGraph* sub = g.AddSubgraph("s").value();
  AddFileConstant(g, "b",
                  {{"location", std::string("/f2")}, {"offset", std::int64_t{512}}, {"_sha256", std::string("h2")}});
  AddFileConstant(g, "a",
                  {{"location", std::string("/f2")}, {"offset", std::int64_t{0}}, {"length", std::int64_t{24}}});
  AddFileConstant(*sub, "c", {{"file_path", std::string("/f1")}});
  AddFileConstant(*sub, "d", {{"location", std::string("/f2")}, {"offset", std::int64_t{512}}});
  AddFileConstant(g, "e", {{"file_id", std::string("7")}});  // no path: not listed
  AddConst(g, "k", U8(Bytes(4, 0)));
  const auto list = ListExternalWeights(g);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].path, "/f1");
  EXPECT_EQ(list[0].size, 24u);
  EXPECT_EQ(list[0].nodes, (std::vector<std::string>{"c"}));
  EXPECT_EQ(list[1].path, "/f2");
  EXPECT_EQ(list[1].offset, 0u);
  EXPECT_EQ(list[1].id, "");
  EXPECT_EQ(list[2].offset, 512u);
  EXPECT_EQ(list[2].id, "h2");
  EXPECT_EQ(list[2].nodes, (std::vector<std::string>{"b", "d"}));
}

TEST(FileConstantOp, AFileIdIsEnoughForShapesButNotForTheReferenceKernel) {
  graph::RegisterBuiltinOps();
  const graph::OpDef* def = graph::OpRegistry::Global().Find("FileConstant").value();
  OpDesc op("w", "FileConstant");
  op.SetAttr("dtype", DataType::kFloat32);
  op.SetAttr("shape", Shape{2, 3});
  op.SetAttr("file_id", std::string("bin0"));
  std::vector<graph::TensorDesc> out;
  ASSERT_TRUE(graph::InferOutputs(*def, op, {}, out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ToString(), "f32[2, 3]");
  std::vector<Tensor> values = {Tensor{out[0], std::vector<std::uint8_t>(24)}};
  Status s = def->reference(op, {}, values);
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_EQ(s.message(),
            "node 'w' (FileConstant): file_id 'bin0' names no file: it must be resolved through ge.exec.value_bins "
            "(the external-weights pass sets 'location')");
  op.SetAttr("file_id", std::string());
  out.clear();
  EXPECT_EQ(graph::InferOutputs(*def, op, {}, out).message(), "node 'w' (FileConstant): attribute 'file_id' is empty");
}

// ---- weight directory -----------------------------------------------------------------------------------
TEST(WeightDir, UserDirThenAscendWorkPathThenCurrentDir) {
  const char* saved = std::getenv("ASCEND_WORK_PATH");
  const std::string saved_value = saved ? saved : "";
  const std::string tmp_name = "tmp_weight_" + std::to_string(::getpid()) + "_42";
  ::setenv("ASCEND_WORK_PATH", "/work/path/", 1);
  EXPECT_EQ(ResolveWeightDir("/user/dir/", 42), "/user/dir");
  EXPECT_EQ(ResolveWeightDir("", 42), "/work/path/" + tmp_name);
  ::setenv("ASCEND_WORK_PATH", "", 1);
  EXPECT_EQ(ResolveWeightDir("", 42), "./" + tmp_name);
  ::unsetenv("ASCEND_WORK_PATH");
  EXPECT_EQ(ResolveWeightDir("", 42), "./" + tmp_name);
  if (saved) ::setenv("ASCEND_WORK_PATH", saved_value.c_str(), 1);

  EXPECT_TRUE(IsTemporaryWeightDir("./" + tmp_name));
  EXPECT_TRUE(IsTemporaryWeightDir("/a/tmp_weight_1_2/"));
  EXPECT_FALSE(IsTemporaryWeightDir("/a/tmp_weight_1_2/sub"));
  EXPECT_FALSE(IsTemporaryWeightDir("/a/my_tmp_weight_1"));
  EXPECT_FALSE(IsTemporaryWeightDir("/user/dir"));
}

TEST(WeightDir, RelocateMovesTemporaryFilesNextToTheModel) {
  TempDir tmp;
  const std::string temp_dir = tmp / "tmp_weight_1_0";
  const std::string user_dir = tmp / "mine";
  const auto w1 = Bytes(32, 1), w2 = Bytes(32, 2), w3 = Bytes(32, 3);
  ComputeGraph g("g");
  Node* a = AddConst(g, "a", U8(w1));
  Node* a2 = AddConst(g, "a2", U8(w1));
  Node* b = AddConst(g, "b", U8(w2));
  ASSERT_TRUE(ConvertConstToFileConstant(g, PerWeight(temp_dir)).ok());
  ComputeGraph* sub = g.AddSubgraph("s").value();
  Node* c = AddConst(*sub, "c", U8(w3));
  {
    ComputeGraph other("other");
    Node* oc = AddConst(other, "c", U8(w3));
    ASSERT_TRUE(ConvertConstToFileConstant(other, PerWeight(user_dir)).ok());
    c->op() = oc->op();
  }
  // A stale file at the destination is replaced.
  fs::create_directories(tmp / "out/weight");
  WriteFile(tmp / "out/weight/weight_" + Hash(w2), {9, 9});

  ASSERT_TRUE(RelocateWeightFiles(g, tmp / "out/model.om").ok());
  EXPECT_EQ(AttrOf<std::string>(a, "location"), "weight_" + Hash(w1));
  EXPECT_EQ(AttrOf<std::string>(a2, "location"), "weight_" + Hash(w1));
  EXPECT_EQ(AttrOf<std::string>(b, "location"), "weight_" + Hash(w2));
  EXPECT_EQ(ReadFile(tmp / "out/weight/weight_" + Hash(w1)), w1);
  EXPECT_EQ(ReadFile(tmp / "out/weight/weight_" + Hash(w2)), w2);
  // The user's directory is left alone.
  EXPECT_EQ(AttrOf<std::string>(c, "location"), user_dir + "/weight_" + Hash(w3));
  EXPECT_TRUE(fs::exists(user_dir + "/weight_" + Hash(w3)));
  EXPECT_FALSE(fs::exists(tmp / "out/weight/weight_" + Hash(w3)));
  // Nothing but meta.json was left in the temporary directory: it is gone.
  EXPECT_FALSE(fs::exists(temp_dir));
}

TEST(WeightDir, RelocateKeepsATemporaryDirectoryThatStillHoldsWeights) {
  TempDir tmp;
  const std::string temp_dir = tmp / "tmp_weight_1_0";
  ComputeGraph g("g");
  Node* a = AddConst(g, "a", U8(Bytes(8, 1)));
  ComputeGraph other("other");
  AddConst(other, "b", U8(Bytes(8, 2)));
  ASSERT_TRUE(ConvertConstToFileConstant(g, PerWeight(temp_dir)).ok());
  ASSERT_TRUE(ConvertConstToFileConstant(other, PerWeight(temp_dir)).ok());
  ASSERT_TRUE(RelocateWeightFiles(g, tmp / "model.om").ok());
  EXPECT_EQ(AttrOf<std::string>(a, "location"), "weight_" + Hash(Bytes(8, 1)));
  EXPECT_TRUE(fs::exists(tmp / "weight/weight_" + Hash(Bytes(8, 1))));
  EXPECT_TRUE(fs::exists(temp_dir + "/weight_" + Hash(Bytes(8, 2))));
  EXPECT_TRUE(fs::exists(temp_dir + "/meta.json"));

  // A missing source names the file and the destination.
  ComputeGraph again("g");
  OpDesc op("x", "FileConstant");
  op.SetAttr("location", temp_dir + "/weight_gone");
  again.AddNode(std::move(op)).value();
  Status s = RelocateWeightFiles(again, tmp / "model.om");
  EXPECT_EQ(s.code(), StatusCode::kFailed);
  EXPECT_TRUE(s.message().starts_with("cannot move weight file '" + temp_dir + "/weight_gone' to '" + tmp.path() +
                                      "/weight/weight_gone': "))
      << s;
}

TEST(WeightDir, RemoveTemporaryWeightDirRefusesUserDirectories) {
  TempDir tmp;
  fs::create_directories(tmp / "tmp_weight_5_1");
  WriteFile(tmp / "tmp_weight_5_1/weight_x", {1});
  EXPECT_TRUE(RemoveTemporaryWeightDir(tmp / "tmp_weight_5_1").ok());
  EXPECT_FALSE(fs::exists(tmp / "tmp_weight_5_1"));
  Status s = RemoveTemporaryWeightDir(tmp.path());
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_EQ(s.message(),
            "weight directory '" + tmp.path() + "' is not a temporary one (tmp_weight_*): not removing it");
  EXPECT_TRUE(fs::exists(tmp.path()));
}

// ---- concurrency ----------------------------------------------------------------------------------------
TEST(ConvertConcurrency, ThreadsConvertingIntoOneDirectoryShareMetaJson) {
  for (const ExternalWeightMode mode : {ExternalWeightMode::kPerWeight, ExternalWeightMode::kCombined}) {
    for (int rep = 0; rep < 5; ++rep) {
      TempDir tmp;
      constexpr int kThreads = 4;
      std::vector<std::unique_ptr<ComputeGraph>> graphs;
      std::vector<std::vector<std::uint8_t>> all;
      for (int t = 0; t < kThreads; ++t) {
        graphs.push_back(std::make_unique<ComputeGraph>(fmt::format("g{}", t)));
        // A weight every graph has, and ones of its own, some large.
        AddConst(*graphs.back(), "shared", U8(Bytes(1000, 200)));
        for (int i = 0; i < 6; ++i) {
          auto w = Bytes(100 + 4096 * i + t, static_cast<std::uint8_t>(t * 10 + i));
          AddConst(*graphs.back(), fmt::format("w{}", i), U8(w));
          all.push_back(w);
        }
      }
      all.push_back(Bytes(1000, 200));
      std::vector<Status> status(kThreads);
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          ConvertOptions o{.mode = mode, .dir = tmp.path(), .model_name = "m", .writers = 3};
          status[t] = ConvertConstToFileConstant(*graphs[t], o).status();
        });
      }
      for (auto& th : threads) th.join();
      for (const Status& s : status) ASSERT_TRUE(s.ok()) << s;
      const nlohmann::json meta = ReadMeta(tmp.path());
      EXPECT_EQ(meta["hash_to_weight_file"].size(), all.size());
      EXPECT_EQ(meta["hash_to_weight_offset"].size(), all.size());
      for (const auto& w : all) {
        const std::string h = Hash(w);
        ASSERT_TRUE(meta["hash_to_weight_file"].contains(h));
        const std::string file = meta["hash_to_weight_file"][h];
        const std::uint64_t offset = meta["hash_to_weight_offset"][h];
        const auto bytes = ReadFile(file);
        ASSERT_LE(offset + w.size(), bytes.size());
        EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin() + offset, bytes.begin() + offset + w.size()), w);
        if (mode == ExternalWeightMode::kCombined) {
          EXPECT_EQ(offset % kCombinedAlignment, 0u);
        }
      }
      // Every node reads its own bytes back.
      for (auto& g : graphs) {
        ASSERT_TRUE(ConvertFileConstantToConst(*g).ok());
        for (Node* n : g->nodes()) EXPECT_EQ(n->type(), "Const");
      }
      EXPECT_EQ(AttrOf<Tensor>(graphs[0]->FindNode("shared"), "value"), U8(Bytes(1000, 200)));
    }
  }
}

// ---- the external-weights pass --------------------------------------------------------------------------
// x -> Add(x, w) -> Mul(., w2) -> NetOutput, w and w2 Consts of 150 floats.
std::unique_ptr<ComputeGraph> AddMulGraph() {
  auto g = std::make_unique<ComputeGraph>("net");
  OpDesc x("x", "Data");
  x.SetAttr("dtype", DataType::kFloat32);
  x.SetAttr("shape", Shape{150});
  Node* xn = g->AddNode(std::move(x)).value();
  std::vector<float> v1(150), v2(150);
  for (int i = 0; i < 150; ++i) v1[i] = static_cast<float>(i), v2[i] = static_cast<float>(2 * i + 1);
  OpDesc w("w", "Const");
  w.SetAttr("value", graph::F32(Shape{150}, v1));
  Node* wn = g->AddNode(std::move(w)).value();
  OpDesc w2("w2", "Const");
  w2.SetAttr("value", graph::F32(Shape{150}, v2));
  Node* w2n = g->AddNode(std::move(w2)).value();
  Node* add = g->AddNode(OpDesc("add", "Add")).value();
  EXPECT_TRUE(g->AddInput(add, {xn, 0}).ok());
  EXPECT_TRUE(g->AddInput(add, {wn, 0}).ok());
  Node* mul = g->AddNode(OpDesc("mul", "Mul")).value();
  EXPECT_TRUE(g->AddInput(mul, {add, 0}).ok());
  EXPECT_TRUE(g->AddInput(mul, {w2n, 0}).ok());
  Node* out = g->AddNode(OpDesc("out", "NetOutput")).value();
  EXPECT_TRUE(g->AddInput(out, {mul, 0}).ok());
  return g;
}

TEST(ExternalWeightsPass, RunsAfterDeadCodeElimination) {
  const auto& p = lowering::V1Pipeline();
  auto dce = std::find(p.begin(), p.end(), "dead-code-elimination");
  ASSERT_NE(dce, p.end());
  ASSERT_NE(dce + 1, p.end());
  EXPECT_EQ(*(dce + 1), "external-weights");
}

TEST(ExternalWeightsPass, ModesOneAndTwoMoveConstsToTheFileConstantSegment) {
  auto embedded = lowering::CompileV1(AddMulGraph(), {});
  ASSERT_TRUE(embedded.ok()) << embedded.status();
  EXPECT_EQ(embedded->memory.bytes(graph::Segment::kWeights), 2048u);  // two 600-byte Consts, 512-aligned
  EXPECT_EQ(embedded->memory.bytes(graph::Segment::kFileConstant), 0u);

  for (const std::string mode : {"1", "2"}) {
    TempDir tmp;
    graph::CompileOptions options;
    options.external_weight = mode;
    options.external_weight_dir = tmp / "weights";
    options.model_name = "net";
    auto model = lowering::CompileV1(AddMulGraph(), options);
    ASSERT_TRUE(model.ok()) << model.status();
    const ComputeGraph& g = *model->graph;
    for (const char* name : {"w", "w2"}) {
      const Node* n = g.FindNode(name);
      ASSERT_NE(n, nullptr);
      EXPECT_EQ(n->type(), "FileConstant") << mode;
      EXPECT_EQ(n->outputs().at(0).ToString(), "f32[150]");
      EXPECT_TRUE(fs::exists(AttrOf<std::string>(n, "location")));
    }
    EXPECT_EQ(model->memory.bytes(graph::Segment::kWeights), 0u) << mode;
    EXPECT_TRUE(model->weights.empty());
    EXPECT_EQ(model->memory.bytes(graph::Segment::kFileConstant), 2048u) << mode;
    EXPECT_TRUE(lowering::VerifyMemoryPlan(*model).ok()) << lowering::VerifyMemoryPlan(*model);
    if (mode == "2") {
      EXPECT_EQ(fs::file_size(tmp / "weights/net_weight_combined"), 2048u);  // 600 -> 1024, twice
    } else {
      EXPECT_EQ(ListExternalWeights(g).size(), 2u);
    }
    const nlohmann::json meta = ReadMeta(tmp / "weights");
    EXPECT_EQ(meta["hash_to_weight_file"].size(), 2u);
  }
}

TEST(ExternalWeightsPass, ModeZeroEmbedsFileConstantsAndDefaultResolvesFileIds) {
  TempDir tmp;
  std::vector<float> v(150);
  for (int i = 0; i < 150; ++i) v[i] = static_cast<float>(i);
  const Tensor t = graph::F32(Shape{150}, v);
  WriteFile(tmp / "w.bin", t.data);
  auto graph_with_file_constant = [&] {
    auto g = AddMulGraph();
    Node* w = g->FindNode("w");
    w->op() = OpDesc("w", "FileConstant");
    w->op().SetAttr("dtype", DataType::kFloat32);
    w->op().SetAttr("shape", Shape{150});
    w->op().SetAttr("file_id", std::string("bin0"));
    return g;
  };
  graph::CompileOptions options;
  options.value_bins = R"({"value_bins":[{"value_bin_id":"bin0","value_bin_file":")" + tmp / "w.bin" + R"("}]})";

  auto kept = lowering::CompileV1(graph_with_file_constant(), options);
  ASSERT_TRUE(kept.ok()) << kept.status();
  const Node* w = kept->graph->FindNode("w");
  EXPECT_EQ(w->type(), "FileConstant");
  EXPECT_EQ(AttrOf<std::string>(w, "location"), tmp / "w.bin");
  EXPECT_EQ(kept->memory.bytes(graph::Segment::kWeights), 1024u);  // w2 only
  EXPECT_EQ(kept->memory.bytes(graph::Segment::kFileConstant), 1024u);

  options.external_weight = "0";
  auto embedded = lowering::CompileV1(graph_with_file_constant(), options);
  ASSERT_TRUE(embedded.ok()) << embedded.status();
  EXPECT_EQ(embedded->graph->FindNode("w")->type(), "Const");
  EXPECT_EQ(embedded->memory.bytes(graph::Segment::kWeights), 2048u);
  EXPECT_EQ(embedded->memory.bytes(graph::Segment::kFileConstant), 0u);
  EXPECT_EQ(std::vector<std::uint8_t>(embedded->weights.begin(), embedded->weights.begin() + 600), t.data);

  // Mode 1 reads the file_id weight back and writes it into the weight directory.
  options.external_weight = "1";
  options.external_weight_dir = tmp / "out";
  auto external = lowering::CompileV1(graph_with_file_constant(), options);
  ASSERT_TRUE(external.ok()) << external.status();
  EXPECT_EQ(AttrOf<std::string>(external->graph->FindNode("w"), "location"), tmp / "out/weight_" + Hash(t.data));
  EXPECT_FALSE(external->graph->FindNode("w")->op().HasAttr("file_id"));
}

TEST(ExternalWeightsPass, BadOptionsFailTheCompile) {
  auto compile = [](graph::CompileOptions options) {
    auto model = lowering::CompileV1(AddMulGraph(), options);
    EXPECT_FALSE(model.ok());
    return std::string(model.status().message());
  };
  graph::CompileOptions o;
  o.external_weight = "3";
  EXPECT_EQ(compile(o), R"(external-weights: ge.externalWeight '3': expected "", "0", "1" or "2")");
  o.external_weight = "2";
  EXPECT_EQ(compile(o), "external-weights: external weights mode 2 needs a weight directory");
  o.external_weight = "";
  o.value_bins = "{";
  EXPECT_TRUE(compile(o).starts_with("external-weights: ge.exec.value_bins is not valid JSON: ")) << compile(o);
  // A file_id nobody resolves.
  o.value_bins = R"({"value_bins":[]})";
  auto g = AddMulGraph();
  Node* w = g->FindNode("w");
  w->op() = OpDesc("w", "FileConstant");
  w->op().SetAttr("dtype", DataType::kFloat32);
  w->op().SetAttr("shape", Shape{150});
  w->op().SetAttr("file_id", std::string("bin9"));
  auto model = lowering::CompileV1(std::move(g), o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(
      model.status().message(),
      "external-weights: node 'w' (FileConstant): file_id 'bin9' is not in ge.exec.value_bins (no value bins given)");
}

}  // namespace
}  // namespace npuflow::weights
