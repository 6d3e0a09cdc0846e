// `npuflow compile` with external weights, as a user meets it, with real processes of the binary:
// --external_weight 0/1/2, the weight directory (a user's, or a temporary one whose files move next
// to the model), `npuflow info` listing the weight files, --encrypt-key, and several compiles
// running at once into one weight directory (meta.json stays consistent: every hash once, every
// region holding the bytes its hash names).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "cli_testing.h"

namespace npuflow {
namespace {

namespace fs = std::filesystem;
using cli_testing::Child;
using cli_testing::CommandRun;
using cli_testing::ProcessSetup;
using cli_testing::ReadFile;

// Every weight is f32[3, 50]: 600 bytes, not a multiple of 512, so mode 2 pads.
constexpr int kRows = 3, kCols = 50;
constexpr std::size_t kWeightBytes = kRows * kCols * 4;
constexpr const char* kKeyHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

// The values of weight `seed`: multiples of 1/8, exact in decimal and in binary.
std::vector<float> WeightValues(int seed) {
  std::vector<float> v(kRows * kCols);
  for (std::size_t j = 0; j < v.size(); ++j)
    v[j] = static_cast<float>((seed * 37 + static_cast<int>(j) * 11) % 97 - 48) / 8.0f;
  return v;
}

std::string WeightBytes(int seed) {
  const std::vector<float> v = WeightValues(seed);
  std::string bytes(v.size() * 4, '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

std::string Sha(std::string_view bytes) { return Sha256Hex(bytes.data(), bytes.size()); }
std::string WeightSha(int seed) { return Sha(WeightBytes(seed)); }

std::string ShapeText() { return fmt::format("shape {{ dim {{ size: {} }} dim {{ size: {} }} }}", kRows, kCols); }

// x + w0_s<seeds[0]> + w1_s<seeds[1]> + ... -> out: Const i holds weight seeds[i].
std::string GraphText(const std::string& name, const std::vector<int>& seeds) {
  std::string text = fmt::format("name: \"{}\"\n", name);
  text += fmt::format(
      "node {{ name: \"x\" op: \"Data\" attr {{ key: \"dtype\" value {{ type: DT_FLOAT }} }}\n"
      "       attr {{ key: \"shape\" value {{ {} }} }} }}\n",
      ShapeText());
  std::string prev = "x";
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    const std::string w = fmt::format("w{}_s{}", i, seeds[i]);
    std::string values;
    for (float f : WeightValues(seeds[i])) values += fmt::format(" float_val: {}", f);
    text += fmt::format("node {{ name: \"{}\" op: \"Const\"\n"
                        "       attr {{ key: \"value\" value {{ tensor {{ dtype: DT_FLOAT {}{} }} }} }} }}\n",
                        w, ShapeText(), values);
    const std::string sum = fmt::format("sum{}", i);
    text += fmt::format("node {{ name: \"{}\" op: \"Add\" input: \"{}\" input: \"{}\" }}\n", sum, prev, w);
    prev = sum;
  }
  text += fmt::format("node {{ name: \"out\" op: \"NetOutput\" input: \"{}\" }}\n", prev);
  return text;
}

void WriteFile(const fs::path& path, std::string_view bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// `bytes` of `path` from `offset`; shorter when the file ends first.
std::string ReadRegion(const fs::path& path, std::uint64_t offset, std::uint64_t bytes) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::string out(bytes, '\0');
  in.read(out.data(), static_cast<std::streamsize>(bytes));
  out.resize(static_cast<std::size_t>(in.gcount()));
  return out;
}

bool StartsWith(const std::string& s, std::string_view prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// A weight region as `npuflow info` lists it.
struct Region {
  std::string path;
  std::uint64_t size = 0;
  std::uint64_t offset = 0;
  std::string id;
};

std::vector<Region> ListedRegions(const std::string& info_output) {
  static const std::regex re(R"(^  (\S+)  size (\d+)  offset (\d+)  id (\S+))");
  std::vector<Region> out;
  std::istringstream lines(info_output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re))
      out.push_back({m[1].str(), std::stoull(m[2].str()), std::stoull(m[3].str()), m[4].str()});
  }
  return out;
}

class CompileWeightsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("npuflow_compile_weights_{}_{}",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name(), static_cast<long>(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(cwd());
    setup_.cwd = cwd().string();
    setup_.unset = {"ASCEND_WORK_PATH"};
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(root_);
  }

  fs::path cwd() const { return root_ / "cwd"; }  // where the processes run: a temporary dir would land here

  // A graph file under root_/graphs.
  std::string Graph(const std::string& name, const std::vector<int>& seeds) {
    const fs::path path = root_ / "graphs" / (name + ".pbtxt");
    WriteFile(path, GraphText(name, seeds));
    return path.string();
  }

  CommandRun Run(const std::vector<std::string>& args) {
    return cli_testing::RunNpuflow(args, (root_ / fmt::format("log_{}.txt", logs_++)).string(), setup_);
  }
  Child Start(const std::vector<std::string>& args) {
    return cli_testing::Spawn(args, (root_ / fmt::format("log_{}.txt", logs_++)).string(), setup_);
  }

  // `npuflow info` must succeed; the regions it lists.
  std::vector<Region> Info(const std::string& om, const std::string& key = "") {
    std::vector<std::string> args = {"info", om};
    if (!key.empty()) args.insert(args.end(), {"--key", key});
    CommandRun r = Run(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("external weight files:"), std::string::npos) << r.output;
    return ListedRegions(r.output);
  }

  // Each region's bytes hash to its id (bare names live in <model dir>/weight/).
  void ExpectRegionsHold(const std::vector<Region>& regions, const fs::path& om) {
    for (const Region& r : regions) {
      const fs::path file = r.path.find('/') == std::string::npos ? om.parent_path() / "weight" / r.path : fs::path(r.path);
      ASSERT_TRUE(fs::exists(file)) << file;
      EXPECT_EQ(r.size, kWeightBytes) << r.path;
      EXPECT_EQ(Sha(ReadRegion(file, r.offset, r.size)), r.id) << r.path << " at " << r.offset;
    }
  }

  // No temporary weight directory left in the working directory (or `also`).
  void ExpectNoTemporaryDirs(const fs::path& also = {}) {
    for (const fs::path& dir : {cwd(), also}) {
      if (dir.empty() || !fs::exists(dir)) continue;
      for (const auto& e : fs::directory_iterator(dir))
        EXPECT_FALSE(StartsWith(e.path().filename().string(), "tmp_weight_")) << e.path();
    }
  }

  fs::path root_;
  ProcessSetup setup_;
  int logs_ = 0;
};

// ---- options ----------------------------------------------------------------------------------------

TEST_F(CompileWeightsCli, ABadExternalWeightValueNamesTheOptionAndTheAcceptedValues) {
  const std::string graph = Graph("bad", {1});
  for (const std::string value : {"3", "yes", "-1", "01"}) {
    CommandRun r = Run({"compile", "--model", graph, "--output", (root_ / "bad.om").string(), "--external_weight", value});
    EXPECT_NE(r.exit_code, 0) << value;
    EXPECT_NE(r.output.find("--external_weight"), std::string::npos) << value << ": " << r.output;
    EXPECT_NE(r.output.find(value), std::string::npos) << value << ": " << r.output;
    for (const char* accepted : {"0", "1", "2"}) EXPECT_NE(r.output.find(accepted), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(root_ / "bad.om"));
  }
  ExpectNoTemporaryDirs();

  CommandRun key = Run({"compile", "--model", graph, "--output", (root_ / "bad.om").string(), "--encrypt-key", "abc"});
  EXPECT_NE(key.exit_code, 0);
  EXPECT_NE(key.output.find("--encrypt-key"), std::string::npos) << key.output;
  CommandRun bins =
      Run({"compile", "--model", graph, "--output", (root_ / "bad.om").string(), "--value_bins", "{not json"});
  EXPECT_NE(bins.exit_code, 0);
  EXPECT_NE(bins.output.find("--value_bins"), std::string::npos) << bins.output;
}

// ---- mode 1 into a user directory -------------------------------------------------------------------

TEST_F(CompileWeightsCli, Mode1WritesOneFilePerWeightIntoTheUserDirectoryWhereTheyStay) {
  const fs::path dir = root_ / "user_weights";
  const fs::path om = root_ / "out" / "m1.om";
  fs::create_directories(om.parent_path());
  // w2 twice: one file for both nodes.
  const std::string graph = Graph("m1", {1, 2, 3, 2});
  CommandRun c = Run({"compile", "--model", graph, "--output", om.string(), "--external_weight", "1",
                      "--external_weight_dir", dir.string()});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  for (int seed : {1, 2, 3}) EXPECT_NE(c.output.find("id " + WeightSha(seed)), std::string::npos) << c.output;

  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"meta.json", "weight_" + WeightSha(1), "weight_" + WeightSha(2),
                                          "weight_" + WeightSha(3)}));
  for (int seed : {1, 2, 3}) EXPECT_EQ(ReadFile((dir / ("weight_" + WeightSha(seed))).string()), WeightBytes(seed));
  EXPECT_FALSE(fs::exists(om.parent_path() / "weight"));  // a user directory's files do not move
  ExpectNoTemporaryDirs();

  const std::vector<Region> regions = Info(om.string());
  ASSERT_EQ(regions.size(), 3u);
  std::set<std::string> ids;
  for (const Region& r : regions) {
    ids.insert(r.id);
    EXPECT_EQ(r.offset, 0u);
    EXPECT_EQ(fs::path(r.path).filename().string(), "weight_" + r.id);
    EXPECT_TRUE(fs::equivalent(fs::path(r.path).parent_path(), dir)) << r.path;
  }
  EXPECT_EQ(ids, (std::set<std::string>{WeightSha(1), WeightSha(2), WeightSha(3)}));
  ExpectRegionsHold(regions, om);
  // Each region lists its FileConstant nodes: weight 2 is read by two.
  CommandRun info = Run({"info", om.string()});
  EXPECT_NE(info.output.find("FileConstant nodes: w1_s2, w3_s2"), std::string::npos) << info.output;
}

// ---- mode 2 with the default (temporary) directory --------------------------------------------------

TEST_F(CompileWeightsCli, Mode2InATemporaryDirectoryMovesTheCombinedFileNextToTheModel) {
  const fs::path om = root_ / "out" / "m2.om";
  fs::create_directories(om.parent_path());
  const std::string graph = Graph("m2", {4, 5, 6});
  CommandRun c = Run({"compile", "--model", graph, "--output", om.string(), "--external_weight", "2"});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const fs::path combined = om.parent_path() / "weight" / "m2_weight_combined";
  ASSERT_TRUE(fs::exists(combined)) << c.output;
  EXPECT_EQ(fs::file_size(combined), 3 * 1024u);  // 600 bytes each, padded to 1024
  ExpectNoTemporaryDirs();

  const std::vector<Region> regions = Info(om.string());
  ASSERT_EQ(regions.size(), 3u);
  std::set<std::string> ids;
  for (const Region& r : regions) {
    EXPECT_EQ(r.path, "m2_weight_combined");  // bare names: <model dir>/weight/
    EXPECT_EQ(r.offset % 512, 0u);
    ids.insert(r.id);
  }
  EXPECT_EQ(ids, (std::set<std::string>{WeightSha(4), WeightSha(5), WeightSha(6)}));
  ExpectRegionsHold(regions, om);

  // $ASCEND_WORK_PATH holds the temporary directory when set; it is gone afterwards too.
  const fs::path work = root_ / "work";
  fs::create_directories(work);
  setup_.set["ASCEND_WORK_PATH"] = work.string();
  setup_.unset.clear();
  const fs::path om2 = root_ / "out2" / "m3.om";
  fs::create_directories(om2.parent_path());
  CommandRun c2 = Run({"compile", "--model", graph, "--output", om2.string(), "--external_weight", "2"});
  ASSERT_EQ(c2.exit_code, 0) << c2.output;
  EXPECT_TRUE(fs::exists(om2.parent_path() / "weight" / "m3_weight_combined"));
  ExpectNoTemporaryDirs(work);
  ExpectRegionsHold(Info(om2.string()), om2);

  // A compile that fails after converting (a directory where the model file should go) leaves no
  // temporary directory behind either.
  const fs::path blocked = root_ / "out3" / "blocked.om";
  fs::create_directories(blocked / "child");
  CommandRun failed = Run({"compile", "--model", graph, "--output", blocked.string(), "--external_weight", "2"});
  EXPECT_NE(failed.exit_code, 0) << failed.output;
  EXPECT_NE(failed.output.find(blocked.string()), std::string::npos) << failed.output;
  ExpectNoTemporaryDirs(work);
}

// The loader finds bare names in <model dir>/weight/, wherever `npuflow run` runs.
TEST_F(CompileWeightsCli, AModelWithItsWeightsNextToItRuns) {
  const fs::path om = root_ / "out" / "runs.om";
  fs::create_directories(om.parent_path());
  const std::string graph = Graph("runs", {4, 5, 6});
  for (const char* mode : {"1", "2"}) {
    CommandRun c = Run({"compile", "--model", graph, "--output", om.string(), "--external_weight", mode});
    ASSERT_EQ(c.exit_code, 0) << c.output;
    CommandRun run = Run({"run", "--om", om.string(), "--random-inputs"});
    EXPECT_EQ(run.exit_code, 0) << "mode " << mode << ": " << run.output;
  }
}

// ---- mode 0 ------------------------------------------------------------------------------------------

TEST_F(CompileWeightsCli, Mode0EmbedsFileConstantsAndTheModelRuns) {
  const fs::path bin = root_ / "data" / "w.bin";
  const std::string header = "sixteen bytes..!";
  WriteFile(bin, header + WeightBytes(7));
  const std::string graph = (root_ / "graphs" / "fc.pbtxt").string();
  WriteFile(graph, fmt::format(R"pb(
name: "fc"
node {{ name: "x" op: "Data" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }}
       attr {{ key: "shape" value {{ {0} }} }} }}
node {{ name: "w" op: "FileConstant" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }}
       attr {{ key: "shape" value {{ {0} }} }}
       attr {{ key: "location" value {{ s: "{1}" }} }}
       attr {{ key: "offset" value {{ i: 16 }} }} attr {{ key: "length" value {{ i: {2} }} }} }}
node {{ name: "y" op: "Add" input: "x" input: "w" }}
node {{ name: "out" op: "NetOutput" input: "y" }}
)pb",
                               ShapeText(), bin.string(), kWeightBytes));

  // Default mode: the FileConstant stays external, reading the user's file.
  const fs::path om_default = root_ / "out" / "fc_default.om";
  fs::create_directories(om_default.parent_path());
  CommandRun d = Run({"compile", "--model", graph, "--output", om_default.string()});
  ASSERT_EQ(d.exit_code, 0) << d.output;
  const std::vector<Region> regions = Info(om_default.string());
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_EQ(regions[0].path, bin.string());
  EXPECT_EQ(regions[0].offset, 16u);
  EXPECT_EQ(regions[0].size, kWeightBytes);

  // Mode 0: embedded; nothing external; the model runs without the file.
  const fs::path om = root_ / "out" / "fc0.om";
  CommandRun c = Run({"compile", "--model", graph, "--output", om.string(), "--external_weight", "0"});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  CommandRun info = Run({"info", om.string()});
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("external weight files: none"), std::string::npos) << info.output;
  EXPECT_TRUE(ListedRegions(info.output).empty()) << info.output;
  EXPECT_FALSE(fs::exists(om.parent_path() / "weight"));
  fs::remove(bin);
  CommandRun run = Run({"run", "--om", om.string(), "--random-inputs"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ExpectNoTemporaryDirs();
}

// ---- --encrypt-key ----------------------------------------------------------------------------------

TEST_F(CompileWeightsCli, EncryptKeyEncryptsTheModelAndItsWeightFiles) {
  const fs::path dir = root_ / "user_weights";
  const fs::path om = root_ / "out" / "enc.om";
  fs::create_directories(om.parent_path());
  const std::string graph = Graph("enc", {8, 9});
  CommandRun c = Run({"compile", "--model", graph, "--output", om.string(), "--external_weight", "1",
                      "--external_weight_dir", dir.string(), "--encrypt-key", kKeyHex});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_TRUE(StartsWith(ReadFile(om.string()), "NPFWENC1"));
  for (int seed : {8, 9}) {
    const std::string name = "weight_" + WeightSha(seed);
    // The user's files stay plain; the model's copies are encrypted.
    EXPECT_EQ(ReadFile((dir / name).string()), WeightBytes(seed));
    const std::string copy = ReadFile((om.parent_path() / "weight" / name).string());
    EXPECT_TRUE(StartsWith(copy, "NPFWENC1")) << name;
    EXPECT_EQ(copy.find(WeightBytes(seed).substr(0, 64)), std::string::npos);
  }

  CommandRun no_key = Run({"info", om.string()});
  EXPECT_NE(no_key.exit_code, 0);
  EXPECT_NE(no_key.output.find(om.string() + ": the model file is encrypted"), std::string::npos) << no_key.output;
  EXPECT_NE(no_key.output.find("--key"), std::string::npos) << no_key.output;
  CommandRun wrong = Run({"info", om.string(), "--key", std::string(64, 'f')});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.output.find("wrong key"), std::string::npos) << wrong.output;

  const std::vector<Region> regions = Info(om.string(), kKeyHex);
  ASSERT_EQ(regions.size(), 2u);
  std::set<std::string> paths;
  for (const Region& r : regions) paths.insert(r.path);
  EXPECT_EQ(paths, (std::set<std::string>{"weight_" + WeightSha(8), "weight_" + WeightSha(9)}));

  // Mode 2 from a temporary directory, the key from a file: the moved combined file is encrypted.
  const fs::path key_file = root_ / "key.hex";
  WriteFile(key_file, std::string(kKeyHex) + "\n");
  const fs::path om2 = root_ / "out2" / "enc2.om";
  fs::create_directories(om2.parent_path());
  CommandRun c2 = Run({"compile", "--model", graph, "--output", om2.string(), "--external_weight", "2",
                       "--encrypt-key", "@" + key_file.string()});
  ASSERT_EQ(c2.exit_code, 0) << c2.output;
  EXPECT_TRUE(StartsWith(ReadFile(om2.string()), "NPFWENC1"));
  EXPECT_TRUE(StartsWith(ReadFile((om2.parent_path() / "weight" / "enc2_weight_combined").string()), "NPFWENC1"));
  ExpectNoTemporaryDirs();
  const std::vector<Region> regions2 = Info(om2.string(), "@" + key_file.string());
  ASSERT_EQ(regions2.size(), 2u);
  for (const Region& r : regions2) EXPECT_EQ(r.path, "enc2_weight_combined");

  // Both models run with the key (weights decrypted as they stream in, checked), and not without.
  for (const fs::path& model : {om, om2}) {
    CommandRun run = Run({"run", "--om", model.string(), "--random-inputs", "--key", kKeyHex, "--verify_weights"});
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("external weights: 2 FileConstants"), std::string::npos) << run.output;
  }
  CommandRun run_no_key = Run({"run", "--om", om.string(), "--random-inputs"});
  EXPECT_NE(run_no_key.exit_code, 0);
  EXPECT_NE(run_no_key.output.find("the model file is encrypted"), std::string::npos) << run_no_key.output;

  // The user's directory as the model's weight directory would lose its plain files: refused.
  const fs::path om3 = root_ / "out3" / "enc3.om";
  CommandRun c3 = Run({"compile", "--model", graph, "--output", om3.string(), "--external_weight", "1",
                       "--external_weight_dir", (om3.parent_path() / "weight").string(), "--encrypt-key", kKeyHex});
  EXPECT_NE(c3.exit_code, 0);
  EXPECT_NE(c3.output.find("--encrypt-key"), std::string::npos) << c3.output;
}

// ---- concurrent compiles into one directory -----------------------------------------------------------

// Graph i of a wave uses weights shared by all (1, 2), shared by every other graph (10 + i % 2) and
// its own (100 * wave + i).
std::vector<int> SeedsOf(int wave, int i) { return {1, 10 + i % 2, 100 * (wave + 1) + i, 2}; }

// meta.json of `dir` lists every hash in `expected` exactly once, and nothing else; every file and
// offset it names holds the hash's bytes.
void ExpectConsistentMeta(const fs::path& dir, const std::map<std::string, std::string>& expected, bool combined) {
  const std::string text = ReadFile((dir / "meta.json").string());
  const nlohmann::json meta = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(meta.is_discarded()) << "meta.json is not valid JSON:\n" << text;
  ASSERT_TRUE(meta.contains("hash_to_weight_file")) << text;
  ASSERT_TRUE(meta.contains("hash_to_weight_offset")) << text;
  const auto& files = meta["hash_to_weight_file"];
  const auto& offsets = meta["hash_to_weight_offset"];
  EXPECT_EQ(files.size(), expected.size()) << text;
  EXPECT_EQ(offsets.size(), expected.size()) << text;
  for (const auto& [sha, bytes] : expected) {
    // Once as a key of each map (a duplicate key would parse silently).
    std::size_t count = 0;
    for (std::size_t at = text.find('"' + sha + '"'); at != std::string::npos; at = text.find('"' + sha + '"', at + 1))
      ++count;
    EXPECT_EQ(count, 2u) << sha << " in\n" << text;
    ASSERT_TRUE(files.contains(sha)) << sha;
    ASSERT_TRUE(offsets.contains(sha)) << sha;
    fs::path file = files[sha].get<std::string>();
    if (file.is_relative()) file = dir / file;
    const std::uint64_t offset = offsets[sha].get<std::uint64_t>();
    ASSERT_TRUE(fs::exists(file)) << file;
    if (combined) {
      EXPECT_EQ(offset % 512, 0u) << sha;
      EXPECT_EQ(Sha(ReadRegion(file, offset, bytes.size())), sha) << file << " at " << offset;
    } else {
      EXPECT_EQ(offset, 0u);
      EXPECT_EQ(file.filename().string(), "weight_" + sha);
      EXPECT_EQ(Sha(ReadFile(file.string())), sha) << file;
    }
  }
}

class ConcurrentCompiles : public CompileWeightsCli {
 protected:
  // `rounds` times: a fresh directory; `processes` compiles at once into it (wave 0), then as many
  // again with other graphs sharing weights with the first (wave 1).
  void RunRounds(const std::string& mode, int processes, int rounds) {
    for (int round = 0; round < rounds; ++round) {
      SCOPED_TRACE(fmt::format("mode {}, {} processes, round {}", mode, processes, round));
      const fs::path dir = root_ / fmt::format("shared_{}_{}_{}", mode, processes, round);
      std::map<std::string, std::string> expected;  // sha -> bytes
      std::vector<fs::path> models;
      for (int wave = 0; wave < 2; ++wave) {
        std::vector<Child> children;
        for (int i = 0; i < processes; ++i) {
          const std::vector<int> seeds = SeedsOf(wave, i);
          for (int s : seeds) expected.emplace(WeightSha(s), WeightBytes(s));
          const std::string name = fmt::format("g{}_{}_{}", mode, wave, i);
          const std::string graph = Graph(name, seeds);
          const fs::path om = root_ / fmt::format("out_{}_{}_{}", mode, processes, round) / (name + ".om");
          fs::create_directories(om.parent_path());
          models.push_back(om);
          children.push_back(Start({"compile", "--model", graph, "--output", om.string(), "--external_weight", mode,
                                    "--external_weight_dir", dir.string()}));
        }
        for (const Child& child : children) {
          CommandRun r = cli_testing::Wait(child);
          EXPECT_EQ(r.exit_code, 0) << r.output;
        }
      }
      ExpectConsistentMeta(dir, expected, mode == "2");
      // Every model reads the right bytes, wherever its regions ended up.
      for (const fs::path& om : models) {
        const std::vector<Region> regions = Info(om.string());
        EXPECT_EQ(regions.size(), 4u) << om;
        ExpectRegionsHold(regions, om);
      }
      if (HasFailure()) return;
    }
  }
};

TEST_F(ConcurrentCompiles, Mode1TwoProcesses) { RunRounds("1", 2, 5); }
TEST_F(ConcurrentCompiles, Mode1FourProcesses) { RunRounds("1", 4, 5); }
TEST_F(ConcurrentCompiles, Mode2TwoProcesses) { RunRounds("2", 2, 5); }
TEST_F(ConcurrentCompiles, Mode2FourProcesses) { RunRounds("2", 4, 5); }

}  // namespace
}  // namespace npuflow
