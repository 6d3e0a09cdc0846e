// External weights in the v1 runtime: models compiled in modes 1 and 2 run like embedded ones;
// PreProcessFileConstants finds the files, uses user device memory in place, copies a region once
// per device through the session's ExternalWeightManager, and refuses truncated, missing,
// corrupted (verify) and wrongly keyed files; the session's temporary weight directory goes with it.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "base/aes_gcm.h"
#include "graph/ops/interpreter.h"
#include "graph/model_file/model_file.h"
#include "scheduler_testing.h"
#include "weights/convert.h"
#include "weights/weight_dir.h"

namespace npuflow::scheduler {
namespace {

namespace fs = std::filesystem;
using test::ConstNode;
using test::DataNode;
using test::FilledF32;

// x[8,16] -> MatMul w[16,4] -> Relu; MatMul w2[16,4] (the same values as w: one file region) and
// Add bias[4] on another branch.
std::string ModelText() {
  std::vector<float> w, bias;
  for (int i = 0; i < 64; ++i) w.push_back(0.01f * static_cast<float>(i % 13) - 0.05f);
  for (int i = 0; i < 4; ++i) bias.push_back(0.25f * static_cast<float>(i));
  return DataNode("x", "DT_FLOAT", {8, 16}) + ConstNode("w", {16, 4}, w) + ConstNode("w2", {16, 4}, w) +
         ConstNode("bias", {4}, bias) + R"pb(
  node { name: "a" op: "MatMul" input: "x" input: "w" }
  node { name: "a2" op: "Relu" input: "a" }
  node { name: "b" op: "MatMul" input: "x" input: "w2" }
  node { name: "b2" op: "Add" input: "b" input: "bias" }
  node { name: "out" op: "NetOutput" input: "a2" input: "b2" }
)pb";
}

Tensor Input(float seed) {
  return FilledF32({8, 16}, [seed](std::size_t i) { return seed * (static_cast<float>(i % 7) - 3.f); });
}

// A model whose one weight is `mb` MB: x[1,k] x w[k,n].
std::unique_ptr<graph::ComputeGraph> BigWeightGraph(std::int64_t k, std::int64_t n) {
  auto g = std::make_unique<graph::ComputeGraph>("big");
  graph::OpDesc x("x", "Data");
  x.SetAttr("dtype", graph::DataType::kFloat32);
  x.SetAttr("shape", graph::Shape{1, k});
  graph::Node* xn = g->AddNode(std::move(x)).value();
  graph::Tensor t = FilledF32({k, n}, [](std::size_t i) { return 0.001f * static_cast<float>(i % 1000) - 0.5f; });
  graph::OpDesc w("w", "Const");
  w.SetAttr("value", std::move(t));
  graph::Node* wn = g->AddNode(std::move(w)).value();
  graph::Node* mm = g->AddNode(graph::OpDesc("mm", "MatMul")).value();
  EXPECT_TRUE(g->AddInput(mm, {xn, 0}).ok());
  EXPECT_TRUE(g->AddInput(mm, {wn, 0}).ok());
  graph::Node* out = g->AddNode(graph::OpDesc("out", "NetOutput")).value();
  EXPECT_TRUE(g->AddInput(out, {mm, 0}).ok());
  return g;
}

class ExternalWeights : public test::ModelManagerTest {
 protected:
  void SetUp() override {
    test::ModelManagerTest::SetUp();
    static int n = 0;
    dir_ = fs::temp_directory_path() / ("npuflow_extw_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    test::ModelManagerTest::TearDown();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::shared_ptr<const CompiledModel> Compile(const std::string& mode, const fs::path& weight_dir,
                                               const std::string& text = ModelText()) {
    graph::CompileOptions o;
    o.external_weight = mode;
    o.external_weight_dir = weight_dir.string();
    return test::CompileText(text, o, "model.pbtxt");
  }
  std::vector<Tensor> Embedded(const Tensor& x) {
    auto cm = test::CompileText(ModelText());
    auto id = mm().LoadModelOnline(cm, {});
    EXPECT_TRUE(id.ok()) << id.status();
    auto out = mm().GetModel(*id).value()->Execute({x});
    EXPECT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(mm().Unload(*id).ok());
    return out.ok() ? *out : std::vector<Tensor>{};
  }
  static std::vector<std::string> FileConstantFiles(const CompiledModel& cm) {
    std::vector<std::string> files;
    for (const auto& w : weights::ListExternalWeights(*cm.graph)) files.push_back(w.path);
    std::sort(files.begin(), files.end());
    files.erase(std::unique(files.begin(), files.end()), files.end());
    return files;
  }
  fs::path dir_;
};

TEST_F(ExternalWeights, ModesOneAndTwoRunLikeEmbeddedWeights) {
  const Tensor x = Input(0.5f);
  const std::vector<Tensor> want = Embedded(x);
  for (const std::string mode : {"1", "2"}) {
    SCOPED_TRACE("mode " + mode);
    auto cm = Compile(mode, dir_ / mode);
    ASSERT_NE(cm, nullptr);
    EXPECT_EQ(cm->memory.bytes(graph::Segment::kWeights), 0u);
    EXPECT_GT(cm->memory.bytes(graph::Segment::kFileConstant), 0u);
    // w and w2 share one file region: two files in mode 1 (w, bias), one in mode 2.
    EXPECT_EQ(FileConstantFiles(*cm).size(), mode == "1" ? 2u : 1u);
    auto id = mm().LoadModelOnline(cm, {});
    ASSERT_TRUE(id.ok()) << id.status();
    auto model = mm().GetModel(*id).value();
    const auto& stages = model->init_stages();
    ASSERT_GE(stages.size(), 2u);
    EXPECT_EQ(stages[1], "PreProcessFileConstants");
    EXPECT_EQ(model->external_weights().size(), 3u);
    auto got = model->Execute({x});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want);
    ASSERT_TRUE(mm().Unload(*id).ok());
  }
}

TEST_F(ExternalWeights, AFirstRunRightAfterLoadWaitsForWeightsStillStreamingIn) {
  // 32 MB of weights: four 10 MiB chunks still in flight when the first execution starts; the
  // kernel reading them waits on the region's latch on the device.
  auto g = BigWeightGraph(2048, 4096);
  auto oracle = graph::Interpreter::Create(*g).value();
  const Tensor x = FilledF32({1, 2048}, [](std::size_t i) { return 0.01f * static_cast<float>(i % 17); });
  auto want = oracle->Run({{"x", x}});
  ASSERT_TRUE(want.ok()) << want.status();
  graph::CompileOptions o;
  o.external_weight = "2";
  o.external_weight_dir = (dir_ / "big").string();
  auto compiled = lowering::CompileV1(std::move(g), o);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto cm = std::make_shared<const CompiledModel>(std::move(*compiled));
  for (int round = 0; round < 3; ++round) {
    ModelLoadOptions lo;
    lo.weight_manager = mm().NewExternalWeightManager();  // a fresh copy each round
    auto id = mm().LoadModelOnline(cm, lo);
    ASSERT_TRUE(id.ok()) << id.status();
    auto got = mm().GetModel(*id).value()->Execute({x});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(test::Near((*got)[0], (*want)[0]));
    ASSERT_TRUE(mm().Unload(*id).ok());
  }
}

TEST_F(ExternalWeights, ARegionIsCopiedOncePerDeviceForAllModelsOfASession) {
  auto cm = Compile("2", dir_ / "w");
  ASSERT_NE(cm, nullptr);
  auto manager = mm().NewExternalWeightManager();
  ModelLoadOptions lo;
  lo.weight_manager = manager;
  auto a = mm().LoadModelOnline(cm, lo);
  auto b = mm().LoadModelOnline(cm, lo);
  ASSERT_TRUE(a.ok() && b.ok());
  const weights::ExternalWeightStats st = manager->stats();
  EXPECT_EQ(st.files_allocated, 1u);
  EXPECT_EQ(st.regions_copied, 2u);  // w (= w2) and bias
  EXPECT_EQ(st.regions_shared, 2u);
  const Tensor x = Input(1.5f);
  auto ra = mm().GetModel(*a).value()->Execute({x});
  auto rb = mm().GetModel(*b).value()->Execute({x});
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(*ra, *rb);
  EXPECT_EQ(mm().GetModel(*a).value()->external_weights()[0].address,
            mm().GetModel(*b).value()->external_weights()[0].address);
}

TEST_F(ExternalWeights, AnotherDeviceGetsItsOwnCopy) {
  ASSERT_TRUE(ModelManager::Finalize().ok());
  ASSERT_TRUE(ModelManager::Initialize({.chips = {"910B", "910B"}, .workers = 2}).ok());
  auto cm = Compile("1", dir_ / "w");
  auto manager = mm().NewExternalWeightManager();
  ModelLoadOptions on0, on1;
  on0.weight_manager = on1.weight_manager = manager;
  on1.device = 1;
  auto a = mm().LoadModelOnline(cm, on0);
  auto b = mm().LoadModelOnline(cm, on1);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(manager->stats().regions_copied, 4u);
  EXPECT_EQ(manager->stats().regions_shared, 0u);
  auto ra = mm().GetModel(*a).value()->Execute({Input(2.f)});
  auto rb = mm().GetModel(*b).value()->Execute({Input(2.f)});
  ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
  EXPECT_EQ(*ra, *rb);
}

TEST_F(ExternalWeights, UserDeviceMemoryIsUsedInPlaceAndNeverFreed) {
  auto cm = Compile("2", dir_ / "w");
  const std::string file = FileConstantFiles(*cm).at(0);
  const std::string name = fs::path(file).filename().string();
  const std::uint64_t size = fs::file_size(file);  // padded to 512: a multiple of 32
  std::vector<std::uint8_t> bytes(size);
  std::ifstream(file, std::ios::binary).read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  npu_sim::DevicePtr user = rt().Malloc(0, size).value();
  ASSERT_TRUE(rt().MemcpyH2D(0, user, bytes.data(), size).ok());

  ModelLoadOptions lo;
  lo.weight_manager = mm().NewExternalWeightManager();
  EXPECT_EQ(lo.SetExternalWeightAddress(name, user, size - 1).code(), StatusCode::kParamInvalid);  // not x32
  EXPECT_EQ(lo.SetExternalWeightAddress(name, {}, size).code(), StatusCode::kParamInvalid);
  EXPECT_EQ(lo.SetExternalWeightAddress(name, user, 0).code(), StatusCode::kParamInvalid);
  ASSERT_TRUE(lo.SetExternalWeightAddress(name, user, size - 512).ok());  // one region short
  auto short_load = mm().LoadModelOnline(cm, lo);
  ASSERT_FALSE(short_load.ok());
  EXPECT_NE(short_load.status().message().find("user device memory for file '" + name + "' is too small"),
            std::string::npos)
      << short_load.status();
  EXPECT_NE(short_load.status().message().find(fmt::format("provided {}", size - 512)), std::string::npos);

  ASSERT_TRUE(lo.SetExternalWeightAddress(name, user, size).ok());  // exact fit; the later entry wins
  auto id = mm().LoadModelOnline(cm, lo);
  ASSERT_TRUE(id.ok()) << id.status();
  auto model = mm().GetModel(*id).value();
  EXPECT_EQ(lo.weight_manager->stats().regions_copied, 0u);
  for (const auto& w : model->external_weights()) {
    EXPECT_TRUE(w.user_memory);
    EXPECT_EQ(w.address, user + w.offset);
  }
  const Tensor x = Input(0.75f);
  auto got = model->Execute({x});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Embedded(x));
  model.reset();
  ASSERT_TRUE(mm().Unload(*id).ok());
  // Still ours: readable, and freeing it succeeds exactly once.
  std::vector<std::uint8_t> back(size);
  ASSERT_TRUE(rt().MemcpyD2H(0, back.data(), user, size).ok());
  EXPECT_EQ(back, bytes);
  EXPECT_TRUE(rt().Free(0, user).ok());
}

TEST_F(ExternalWeights, TruncatedAndMissingFilesFailTheLoadNamingThem) {
  auto cm = Compile("2", dir_ / "w");
  const std::string file = FileConstantFiles(*cm).at(0);
  fs::resize_file(file, fs::file_size(file) - 600);
  auto truncated = mm().LoadModelOnline(cm, {});
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kParamInvalid);
  EXPECT_NE(truncated.status().message().find("weight file '" + file + "' has"), std::string::npos) << truncated.status();
  fs::remove(file);
  auto missing = mm().LoadModelOnline(cm, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(file), std::string::npos) << missing.status();
  EXPECT_TRUE(mm().LoadedModels().empty());
}

TEST_F(ExternalWeights, VerifyWeightsCatchesASwappedFile) {
  auto cm = Compile("1", dir_ / "w");
  const Tensor x = Input(1.f);
  ModelLoadOptions lo;
  lo.verify_weights = true;
  lo.weight_manager = mm().NewExternalWeightManager();
  auto ok = mm().LoadModelOnline(cm, lo);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_TRUE(mm().Unload(*ok).ok());
  // Same size, other bytes.
  const std::string file = FileConstantFiles(*cm).at(0);
  std::vector<char> bytes(fs::file_size(file));
  std::ifstream(file, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes[3] ^= 0x10;
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  lo.weight_manager = mm().NewExternalWeightManager();
  auto bad = mm().LoadModelOnline(cm, lo);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataCorrupted);
  EXPECT_NE(bad.status().message().find("SHA-256"), std::string::npos) << bad.status();
}

TEST_F(ExternalWeights, EncryptedWeightFilesLoadWithTheirKeyOnly) {
  auto cm = Compile("2", dir_ / "w");
  const std::string file = FileConstantFiles(*cm).at(0);
  const AesKey key = ParseAesKey(std::string(64, '7')).value();
  ASSERT_TRUE(EncryptFile(file, file, key).ok());
  const Tensor x = Input(0.25f);
  ModelLoadOptions lo;
  lo.weight_manager = mm().NewExternalWeightManager();
  auto no_key = mm().LoadModelOnline(cm, lo);
  ASSERT_FALSE(no_key.ok());
  EXPECT_NE(no_key.status().message().find("give its key"), std::string::npos) << no_key.status();
  lo.weight_key = ParseAesKey(std::string(64, '8')).value();
  auto wrong = mm().LoadModelOnline(cm, lo);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("wrong key or tampered data"), std::string::npos) << wrong.status();
  lo.weight_key = key;
  lo.weight_manager = mm().NewExternalWeightManager();
  auto id = mm().LoadModelOnline(cm, lo);
  ASSERT_TRUE(id.ok()) << id.status();
  auto got = mm().GetModel(*id).value()->Execute({x});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Embedded(x));
}

TEST_F(ExternalWeights, FilesMovedNextToTheModelAreFoundThere) {
  // Compiled into a temporary directory, saved as model dir/m.om: the files go to model dir/weight/.
  const fs::path tmp = dir_ / ("tmp_weight_" + std::to_string(::getpid()) + "_0");
  graph::CompileOptions o;
  o.external_weight = "1";
  o.external_weight_dir = tmp.string();
  auto g = graph::ParseGraphText(ModelText(), "model.pbtxt").value();
  auto compiled = lowering::CompileV1(std::move(g), o);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const fs::path model_dir = dir_ / "out";
  fs::create_directories(model_dir);
  const std::string om = (model_dir / "m.om").string();
  ASSERT_TRUE(weights::RelocateWeightFiles(*compiled->graph, om).ok());
  ASSERT_TRUE(graph::WriteModelFile(*compiled, om).ok());
  for (const auto& w : weights::ListExternalWeights(*compiled->graph)) {
    EXPECT_EQ(w.path.find('/'), std::string::npos) << w.path;  // a bare name
    EXPECT_TRUE(fs::exists(model_dir / "weight" / w.path)) << w.path;
  }
  std::ifstream in(om, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ModelLoadOptions lo;
  lo.model_dir = model_dir.string();
  auto id = mm().LoadModelFromData(bytes, lo, om);
  ASSERT_TRUE(id.ok()) << id.status();
  const Tensor x = Input(-0.5f);
  auto got = mm().GetModel(*id).value()->Execute({x});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Embedded(x));
  // A weight path given at load wins; a wrong one is an error naming the file it looked for.
  ModelLoadOptions elsewhere;
  elsewhere.weight_path = (dir_ / "nowhere").string();
  auto wrong = mm().LoadModelFromData(bytes, elsewhere, om);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find((dir_ / "nowhere").string()), std::string::npos) << wrong.status();
}

TEST_F(ExternalWeights, ASessionRemovesItsTemporaryDirectoryButNeverAUserOne) {
  const fs::path work = dir_ / "work";
  fs::create_directories(work);
  ::setenv("ASCEND_WORK_PATH", work.c_str(), 1);
  const Tensor x = Input(0.5f);
  const std::vector<Tensor> want = Embedded(x);
  std::string tmp_dir;
  {
    auto s = Session::Create({{"ge.externalWeight", "1"}}).value();
    ASSERT_TRUE(s->AddGraph(1, graph::ParseGraphText(ModelText(), "m").value()).ok());
    auto got = s->RunGraph(1, {x});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want);
    auto paths = s->GetExternalWeightPaths(1);
    ASSERT_TRUE(paths.ok() && !paths->empty());
    tmp_dir = fs::path(paths->front().path).parent_path().string();
    EXPECT_EQ(fs::path(tmp_dir).parent_path(), work);
    EXPECT_TRUE(weights::IsTemporaryWeightDir(tmp_dir)) << tmp_dir;
    EXPECT_TRUE(fs::exists(tmp_dir));
    ASSERT_TRUE(s->Finalize().ok());
  }
  EXPECT_FALSE(fs::exists(tmp_dir));
  ::unsetenv("ASCEND_WORK_PATH");

  const fs::path mine = dir_ / "mine";
  {
    auto s = Session::Create({{"ge.externalWeight", "2"}, {"ge.externalWeightDir", mine.string()},
                              {"npuflow.verifyWeights", "true"}})
                 .value();
    ASSERT_TRUE(s->AddGraph(1, graph::ParseGraphText(ModelText(), "m").value()).ok());
    auto got = s->RunGraph(1, {x});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want);
    ASSERT_TRUE(s->Finalize().ok());
  }
  EXPECT_TRUE(fs::exists(mine / "meta.json"));
  int combined = 0;
  for (const auto& e : fs::directory_iterator(mine))
    combined += e.path().filename().string().ends_with("_weight_combined") ? 1 : 0;
  EXPECT_EQ(combined, 1);

  auto bad = Session::Create({{"ge.externalWeight", "3"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ge.externalWeight"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace npuflow::scheduler
