// GPT-2 files in ggml's format: a written model reads back tensor by tensor at the offsets the
// format implies, with deterministic weights; every check ggml's gpt2_model_load makes rejects a
// crafted file with an error naming the file, the tensor and the offset; no cut or damaged byte
// crashes the reader; the plain C++ reference runs on what was written.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "models/gpt2/ggml_file.h"
#include "synthetic/gpt2_file.h"
#include "graph/ir/half.h"
#include "tests/models/gpt2_reference.h"

namespace npuflow::gpt2 {

using namespace graph;
using synthetic::MakeGpt2Options;
using synthetic::WriteGpt2File;

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

MakeGpt2Options Small(std::uint64_t seed = 7) {
  MakeGpt2Options o;
  o.layers = 2;
  o.embd = 16;
  o.heads = 4;
  o.ctx = 8;
  o.vocab = 300;
  o.seed = seed;
  return o;
}

// What the format says the file holds, written out here independently of the reader.
struct Expected {
  std::string name;
  std::vector<std::int64_t> ne;
  DataType dtype;
};

std::vector<Expected> ExpectedTensors(const MakeGpt2Options& o) {
  const DataType w = o.f16 ? DataType::kFloat16 : DataType::kFloat32;
  const DataType f = DataType::kFloat32;
  const std::int64_t e = o.embd;
  std::vector<Expected> out = {{"model/wte", {e, o.vocab}, w}, {"model/wpe", {e, o.ctx}, f}};
  for (int i = 0; i < o.layers; ++i) {
    const std::string p = "model/h" + std::to_string(i) + "/";
    out.push_back({p + "ln_1/g", {e}, f});
    out.push_back({p + "ln_1/b", {e}, f});
    out.push_back({p + "attn/c_attn/w", {e, 3 * e}, w});
    out.push_back({p + "attn/c_attn/b", {3 * e}, f});
    out.push_back({p + "attn/c_proj/w", {e, e}, w});
    out.push_back({p + "attn/c_proj/b", {e}, f});
    out.push_back({p + "ln_2/g", {e}, f});
    out.push_back({p + "ln_2/b", {e}, f});
    out.push_back({p + "mlp/c_fc/w", {e, 4 * e}, w});
    out.push_back({p + "mlp/c_fc/b", {4 * e}, f});
    out.push_back({p + "mlp/c_proj/w", {4 * e, e}, w});
    out.push_back({p + "mlp/c_proj/b", {e}, f});
  }
  out.push_back({"model/ln_f/g", {e}, f});
  out.push_back({"model/ln_f/b", {e}, f});
  if (o.lm_head) out.push_back({"model/lm_head", {e, o.vocab}, w});
  return out;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh file each time: truncating one in place makes ext4 flush it on close (auto_da_alloc),
// which turns thousands of crafted files into seconds of disk writes.
void WriteBytes(const std::string& path, std::string_view bytes) {
  std::error_code ignored;
  fs::remove(path, ignored);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void AppendI32(std::string& s, std::int32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((static_cast<std::uint32_t>(v) >> (8 * i)) & 0xff));
}

void PatchI32(std::string& s, std::uint64_t offset, std::int32_t v) {
  for (int i = 0; i < 4; ++i)
    s[offset + i] = static_cast<char>((static_cast<std::uint32_t>(v) >> (8 * i)) & 0xff);
}

// One tensor record with zero data of the size its ttype and ne say.
std::string TensorRecord(const std::string& name, std::int32_t ttype, const std::vector<std::int32_t>& ne) {
  std::string s;
  AppendI32(s, static_cast<std::int32_t>(ne.size()));
  AppendI32(s, static_cast<std::int32_t>(name.size()));
  AppendI32(s, ttype);
  std::int64_t n = 1;
  for (std::int32_t d : ne) {
    AppendI32(s, d);
    n *= d;
  }
  s += name;
  s.append(static_cast<std::size_t>(n) * (ttype == 1 ? 2 : 4), '\0');
  return s;
}

double Mean(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double StdDev(const std::vector<float>& v) {
  const double mean = Mean(v);
  double sum = 0;
  for (float x : v) sum += (x - mean) * (x - mean);
  return std::sqrt(sum / static_cast<double>(v.size()));
}

class GgmlGpt2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("npuflow_ggml_gpt2_test_{}_{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                       static_cast<long>(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    crafted_ = Path("crafted.bin");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a model and reads it back; both must succeed.
  Gpt2File WriteAndRead(const MakeGpt2Options& o, const std::string& name) {
    const std::string path = Path(name);
    Status written = WriteGpt2File(path, o);
    EXPECT_TRUE(written.ok()) << written;
    auto file = ReadGpt2File(path);
    EXPECT_TRUE(file.ok()) << file.status();
    return file.ok() ? std::move(file).value() : Gpt2File{};
  }

  std::string GoodBytes(const MakeGpt2Options& o = Small()) {
    const std::string path = Path("good.bin");
    EXPECT_TRUE(WriteGpt2File(path, o).ok());
    return ReadBytes(path);
  }

  // The directory of the good file: where each tensor's header is.
  Gpt2File GoodDirectory(const MakeGpt2Options& o = Small()) { return WriteAndRead(o, "good.bin"); }

  // Writes crafted bytes and reads them; the read must fail, and its message names the file.
  Status Rejected(std::string_view bytes) {
    WriteBytes(crafted_, bytes);
    auto file = ReadGpt2File(crafted_);
    EXPECT_FALSE(file.ok()) << "the crafted file was accepted";
    if (file.ok()) return Status::Ok();
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(crafted_));
    return file.status();
  }

  fs::path dir_;
  std::string crafted_;
};

// ---- round trip ----------------------------------------------------------------------------------

TEST_F(GgmlGpt2Test, RoundTripHasEveryTensorWhereTheFormatPutsIt) {
  const MakeGpt2Options o = Small();
  const Gpt2File file = WriteAndRead(o, "model.bin");
  EXPECT_EQ(file.path, Path("model.bin"));
  EXPECT_EQ(file.hparams.n_vocab, 300);
  EXPECT_EQ(file.hparams.n_ctx, 8);
  EXPECT_EQ(file.hparams.n_embd, 16);
  EXPECT_EQ(file.hparams.n_head, 4);
  EXPECT_EQ(file.hparams.n_layer, 2);
  EXPECT_EQ(file.hparams.ftype, 0);
  EXPECT_EQ(file.hparams.weight_type(), DataType::kFloat32);
  EXPECT_EQ(file.hparams.head_dim(), 4);
  ASSERT_EQ(file.vocab.size(), 300u);
  EXPECT_EQ(file.file_bytes, fs::file_size(file.path));

  // Header: magic, 6 hparams, the vocab count, then each token's length and bytes.
  std::uint64_t at = 4 + 6 * 4 + 4;
  for (std::size_t id = 0; id < file.vocab.size(); ++id) at += 4 + file.vocab[id].size();
  const std::vector<Expected> expected = ExpectedTensors(o);
  ASSERT_EQ(file.tensors.size(), expected.size());
  std::uint64_t total = 0;
  for (const Expected& e : expected) {
    SCOPED_TRACE(e.name);
    const GgmlTensorInfo* t = file.Find(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->name, e.name);
    EXPECT_EQ(t->ne, e.ne);
    EXPECT_EQ(t->dtype, e.dtype);
    std::vector<Dim> dims;
    for (auto d = e.ne.rbegin(); d != e.ne.rend(); ++d) dims.push_back(Dim::Static(*d));
    EXPECT_EQ(t->shape(), Shape(dims)) << t->shape().ToString();
    std::uint64_t elements = 1;
    for (std::int64_t d : e.ne) elements *= static_cast<std::uint64_t>(d);
    EXPECT_EQ(t->bytes, elements * DataTypeSize(e.dtype));
    EXPECT_EQ(t->header_offset, at);
    at += 12 + 4 * e.ne.size() + e.name.size();
    EXPECT_EQ(t->offset, at);
    at += t->bytes;
    total += t->bytes;
  }
  EXPECT_EQ(at, file.file_bytes);
  EXPECT_EQ(file.weight_bytes(), total);
  EXPECT_EQ(file.Find("model/lm_head"), nullptr);
  EXPECT_EQ(file.Find("model/nothing"), nullptr);
  EXPECT_EQ(file.Find("model/wte")->shape(), (Shape{300, 16}));
}

TEST_F(GgmlGpt2Test, SyntheticVocabIsTheBytesThenDistinctWords) {
  const Gpt2File file = WriteAndRead(Small(), "model.bin");
  for (int b = 0; b < 256; ++b) EXPECT_EQ(file.vocab[b], std::string(1, static_cast<char>(b))) << b;
  const std::vector<std::string> tokens = file.vocab.ToStrings();
  std::set<std::string> distinct(tokens.begin(), tokens.end());
  EXPECT_EQ(distinct.size(), file.vocab.size());
  for (std::size_t id = 256; id < file.vocab.size(); ++id) {
    const std::string& token = tokens[id];
    const bool spaced = id % 2 == 0;
    EXPECT_EQ(token[0] == ' ', spaced) << id << " '" << token << "'";
    const std::string word = spaced ? token.substr(1) : token;
    EXPECT_GE(word.size(), 2u) << token;
    EXPECT_LE(word.size(), 8u) << token;
    for (char c : word) EXPECT_TRUE(c >= 'a' && c <= 'z') << token;
  }
  const Gpt2File other = WriteAndRead(Small(8), "other.bin");
  EXPECT_NE(other.vocab, file.vocab);
  EXPECT_EQ(WriteAndRead(Small(), "again.bin").vocab, file.vocab);
}

TEST_F(GgmlGpt2Test, GivenTokensAreTheVocabByteForByte) {
  MakeGpt2Options o = Small();
  o.vocab = 4;
  o.tokens = {"a", std::string("\0\xff", 2), "", " hello world"};
  const Gpt2File file = WriteAndRead(o, "model.bin");
  EXPECT_EQ(file.vocab.ToStrings(), o.tokens);
  EXPECT_EQ(file.Find("model/wte")->ne, (std::vector<std::int64_t>{16, 4}));
}

TEST_F(GgmlGpt2Test, WeightsFollowGpt2InitAndTheSeed) {
  const Gpt2File file = WriteAndRead(Small(), "model.bin");
  auto read = [&](const Gpt2File& f, const std::string& name) {
    auto v = ReadGpt2TensorF32(f, name);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<float>{};
  };
  const std::vector<float> wte = read(file, "model/wte");
  ASSERT_EQ(wte.size(), 300u * 16);
  EXPECT_NEAR(StdDev(wte), 0.02, 0.002);
  EXPECT_NEAR(Mean(wte), 0.0, 0.002);
  EXPECT_NEAR(StdDev(read(file, "model/wpe")), 0.01, 0.003);
  EXPECT_NEAR(StdDev(read(file, "model/h1/mlp/c_fc/w")), 0.02, 0.002);

  std::vector<float> gains;
  for (const char* name : {"model/h0/ln_1/g", "model/h0/ln_2/g", "model/h1/ln_1/g", "model/h1/ln_2/g", "model/ln_f/g"})
    for (float g : read(file, name)) gains.push_back(g);
  EXPECT_NEAR(Mean(gains), 1.0, 0.05);
  EXPECT_NEAR(StdDev(gains), 0.1, 0.03);
  for (float g : gains) EXPECT_NEAR(g, 1.0, 0.6);
  const std::vector<float> bias = read(file, "model/h0/attn/c_attn/b");
  ASSERT_EQ(bias.size(), 48u);
  EXPECT_NEAR(StdDev(bias), 0.02, 0.008);
  for (float b : bias) EXPECT_LT(std::fabs(b), 0.15f);

  // Same seed: the same bytes; another seed: other weights.
  EXPECT_TRUE(WriteGpt2File(Path("again.bin"), Small()).ok());
  EXPECT_EQ(ReadBytes(Path("again.bin")), ReadBytes(Path("model.bin")));
  const Gpt2File other = WriteAndRead(Small(8), "other.bin");
  EXPECT_NE(read(other, "model/wte"), wte);
  EXPECT_NE(read(other, "model/h0/ln_1/g"), read(file, "model/h0/ln_1/g"));
}

TEST_F(GgmlGpt2Test, F16ModelStoresTheSameWeightsRoundedToHalf) {
  MakeGpt2Options o = Small();
  const Gpt2File f32 = WriteAndRead(o, "f32.bin");
  o.f16 = true;
  const Gpt2File f16 = WriteAndRead(o, "f16.bin");
  EXPECT_EQ(f16.hparams.ftype, 1);
  EXPECT_EQ(f16.hparams.weight_type(), DataType::kFloat16);
  EXPECT_LT(f16.file_bytes, f32.file_bytes);
  int halves = 0;
  for (const Expected& e : ExpectedTensors(o)) {
    SCOPED_TRACE(e.name);
    const GgmlTensorInfo* t = f16.Find(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, e.dtype);
    EXPECT_EQ(t->bytes * (e.dtype == DataType::kFloat16 ? 2 : 1), f32.Find(e.name)->bytes);
    auto a = ReadGpt2TensorF32(f32, e.name);
    auto b = ReadGpt2TensorF32(f16, e.name);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size());
    if (e.dtype == DataType::kFloat16) {
      ++halves;
      for (std::size_t i = 0; i < a->size(); ++i) ASSERT_EQ((*b)[i], HalfToFloat(FloatToHalf((*a)[i]))) << i;
      EXPECT_NE(*a, *b);  // rounding to half changed something
    } else {
      EXPECT_EQ(*a, *b);
    }
  }
  EXPECT_EQ(halves, 1 + 4 * 2);
}

TEST_F(GgmlGpt2Test, HeadIsLmHeadWhenPresentWhereverItIsElseWte) {
  MakeGpt2Options o = Small();
  const Gpt2File tied = WriteAndRead(o, "tied.bin");
  EXPECT_FALSE(tied.has_lm_head);
  EXPECT_EQ(&tied.head(), tied.Find("model/wte"));

  o.lm_head = true;
  const Gpt2File untied = WriteAndRead(o, "untied.bin");
  ASSERT_TRUE(untied.has_lm_head);
  EXPECT_EQ(untied.head().name, "model/lm_head");
  EXPECT_EQ(untied.tensors.size(), tied.tensors.size() + 1);
  EXPECT_EQ(untied.head().offset + untied.head().bytes, untied.file_bytes);  // written last
  // Everything else is the same tensor as in the tied model.
  EXPECT_EQ(ReadGpt2TensorF32(untied, "model/wte").value(), ReadGpt2TensorF32(tied, "model/wte").value());
  EXPECT_EQ(ReadGpt2TensorF32(untied, "model/ln_f/b").value(), ReadGpt2TensorF32(tied, "model/ln_f/b").value());
  const std::vector<float> lm_head = ReadGpt2TensorF32(untied, "model/lm_head").value();
  EXPECT_NE(lm_head, ReadGpt2TensorF32(untied, "model/wte").value());

  // Moved to the front (before wte), it is still the head.
  const std::string bytes = ReadBytes(untied.path);
  const std::uint64_t wte_at = untied.Find("model/wte")->header_offset;
  const std::uint64_t head_at = untied.head().header_offset;
  const std::string moved =
      bytes.substr(0, wte_at) + bytes.substr(head_at) + bytes.substr(wte_at, head_at - wte_at);
  WriteBytes(crafted_, moved);
  auto front = ReadGpt2File(crafted_);
  ASSERT_TRUE(front.ok()) << front.status();
  ASSERT_TRUE(front->has_lm_head);
  EXPECT_EQ(front->head().name, "model/lm_head");
  EXPECT_EQ(front->head().header_offset, wte_at);
  EXPECT_EQ(ReadGpt2TensorF32(*front, front->head().name).value(), lm_head);
}

TEST_F(GgmlGpt2Test, IsGgmlFileChecksTheLittleEndianMagic) {
  const Gpt2File file = WriteAndRead(Small(), "model.bin");
  EXPECT_TRUE(IsGgmlFile(file.path));
  WriteBytes(crafted_, "lmgg");  // 0x67676d6c little-endian
  EXPECT_TRUE(IsGgmlFile(crafted_));
  WriteBytes(crafted_, "ggml and more");
  EXPECT_FALSE(IsGgmlFile(crafted_));
  WriteBytes(crafted_, "lmg");
  EXPECT_FALSE(IsGgmlFile(crafted_));
  WriteBytes(crafted_, "");
  EXPECT_FALSE(IsGgmlFile(crafted_));
  EXPECT_FALSE(IsGgmlFile(Path("absent.bin")));
  EXPECT_FALSE(IsGgmlFile(dir_.string()));
}

TEST_F(GgmlGpt2Test, Ftype1000IsF32AsGgmlReadsIt) {
  std::string bytes = GoodBytes();
  PatchI32(bytes, 24, 1000);
  WriteBytes(crafted_, bytes);
  auto file = ReadGpt2File(crafted_);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->hparams.ftype, 1000);
  EXPECT_EQ(file->hparams.weight_type(), DataType::kFloat32);
}

// ggml pads both shapes to two dims before comparing: a 1-D tensor given as [n, 1] is accepted.
TEST_F(GgmlGpt2Test, OneDimensionalTensorMayBeGivenAsNBy1) {
  const Gpt2File good = GoodDirectory();
  std::string bytes = ReadBytes(good.path);
  bytes.resize(good.Find("model/ln_f/b")->header_offset);
  bytes += TensorRecord("model/ln_f/b", 0, {16, 1});
  WriteBytes(crafted_, bytes);
  auto file = ReadGpt2File(crafted_);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Find("model/ln_f/b")->ne, (std::vector<std::int64_t>{16}));
}

// ---- every loader error --------------------------------------------------------------------------

TEST_F(GgmlGpt2Test, BadMagic) {
  std::string bytes = GoodBytes();
  bytes[0] = 'x';
  const Status s = Rejected(bytes);
  EXPECT_EQ(s.code(), StatusCode::kDataCorrupted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad magic 0x67676d78 at offset 0"));
}

TEST_F(GgmlGpt2Test, BadFtype) {
  std::string bytes = GoodBytes();
  PatchI32(bytes, 24, 2);
  const Status s = Rejected(bytes);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad ftype 2 at offset 24"));
  PatchI32(bytes, 24, -1);
  EXPECT_THAT(std::string(Rejected(bytes).message()), HasSubstr("bad ftype -1"));
}

TEST_F(GgmlGpt2Test, BadHparams) {
  const std::string good = GoodBytes();
  struct Case {
    std::uint64_t offset;
    std::int32_t value;
    const char* message;
  };
  for (const Case& c : {Case{4, -1, "at offset 4: n_vocab is -1"}, Case{8, 0, "at offset 8: n_ctx is 0"},
                        Case{12, 0, "at offset 12: n_embd is 0"}, Case{16, 0, "at offset 16: n_head is 0"},
                        Case{20, 0, "at offset 20: n_layer is 0"},
                        Case{16, 3, "at offset 12: n_embd 16 is not a multiple of n_head 3"},
                        Case{12, 0x40000000, "n_embd 1073741824 is too large"}}) {
    std::string bytes = good;
    PatchI32(bytes, c.offset, c.value);
    const Status s = Rejected(bytes);
    EXPECT_EQ(s.code(), StatusCode::kDataCorrupted) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
}

TEST_F(GgmlGpt2Test, VocabSizeMismatch) {
  std::string bytes = GoodBytes();
  PatchI32(bytes, 28, 299);
  const Status s = Rejected(bytes);
  EXPECT_EQ(s.code(), StatusCode::kDataCorrupted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad vocab size 299 != 300 at offset 28"));
}

TEST_F(GgmlGpt2Test, VocabLargerThanTheFileIsRefusedBeforeAllocating) {
  std::string bytes = GoodBytes();
  PatchI32(bytes, 4, 0x7fffffff);
  PatchI32(bytes, 28, 0x7fffffff);
  const Status s = Rejected(bytes);
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated file: a vocab of 2147483647 tokens at offset 32"));
}

TEST_F(GgmlGpt2Test, TokenLengthPastTheEnd) {
  std::string bytes = GoodBytes();
  // Token 1 starts after token 0's length and its one byte.
  PatchI32(bytes, 32 + 5, 0x7ffffff0);
  const Status s = Rejected(bytes);
  EXPECT_EQ(s.code(), StatusCode::kDataCorrupted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(fmt::format("truncated file: token 1 of {} bytes at offset 41", 0x7ffffff0)));
  PatchI32(bytes, 32 + 5, -1);  // a uint32: 4 GiB
  EXPECT_THAT(std::string(Rejected(bytes).message()), HasSubstr("token 1 of 4294967295 bytes"));
}

TEST_F(GgmlGpt2Test, UnknownTensor) {
  const std::string good = GoodBytes();
  for (const char* name : {"model/foo", "model/h2/ln_1/g", "model/h01/ln_1/g", "model/h0/ln_3/g", "model/h-1/ln_1/g",
                           "model/h99999999999/ln_1/g", "model/h0", ""}) {
    const Status s = Rejected(good + TensorRecord(name, 0, {16}));
    EXPECT_EQ(s.code(), StatusCode::kDataCorrupted) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(fmt::format("unknown tensor '{}' at offset {} in model file", name, good.size())));
  }
  const Status s = Rejected(good + TensorRecord(std::string(5000, 'x'), 0, {16}));
  EXPECT_THAT(std::string(s.message()), HasSubstr(fmt::format("unknown tensor at offset {}", good.size())));
  EXPECT_THAT(std::string(s.message()), HasSubstr("5000 bytes"));
  // A name from a damaged file is shown printable.
  const Status odd = Rejected(good + TensorRecord(std::string("a\n\xff", 3), 0, {16}));
  EXPECT_THAT(std::string(odd.message()), HasSubstr("unknown tensor 'a\\x0a\\xff'"));
}

TEST_F(GgmlGpt2Test, WrongElementCount) {
  const Gpt2File good = GoodDirectory();
  std::string bytes = ReadBytes(good.path);
  const std::uint64_t at = good.Find("model/ln_f/g")->header_offset;
  PatchI32(bytes, at + 12, 15);
  const Status s = Rejected(bytes);
  EXPECT_EQ(s.code(), StatusCode::kDataCorrupted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(fmt::format("tensor 'model/ln_f/g' at offset {} has wrong element count in model file: 15 "
                                    "(ne [15, 1]), expected 16 (ne [16, 1])",
                                    at)));
}

TEST_F(GgmlGpt2Test, WrongShapeWithTheRightCount) {
  const Gpt2File good = GoodDirectory();
  std::string bytes = ReadBytes(good.path);
  const std::uint64_t at = good.Find("model/h1/attn/c_attn/w")->header_offset;
  PatchI32(bytes, at + 12, 48);
  PatchI32(bytes, at + 16, 16);
  const Status s = Rejected(bytes);
  EXPECT_EQ(s.code(), StatusCode::kDataCorrupted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(fmt::format("tensor 'model/h1/attn/c_attn/w' at offset {} has wrong shape in model file: "
                                    "got [48, 16], expected [16, 48]",
                                    at)));
  // A 2-D tensor given as 1-D with its element count.
  std::string flat = ReadBytes(good.path);
  flat.resize(good.Find("model/ln_f/b")->header_offset);
  const std::string shuffled = flat + TensorRecord("model/ln_f/b", 0, {4, 4});
  EXPECT_THAT(std::string(Rejected(shuffled).message()), HasSubstr("got [4, 4], expected [16, 1]"));
}

TEST_F(GgmlGpt2Test, WrongByteSizeForTheType) {
  const Gpt2File good = GoodDirectory();
  std::string bytes = ReadBytes(good.path);
  const std::uint64_t at = good.Find("model/ln_f/g")->header_offset;
  PatchI32(bytes, at + 8, 1);  // f16 where ggml declares f32
  const Status s = Rejected(bytes);
  EXPECT_EQ(s.code(), StatusCode::kDataCorrupted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(fmt::format("tensor 'model/ln_f/g' at offset {} has wrong size in model file: got 32 bytes "
                                    "(f16), expected 64 bytes (f32)",
                                    at)));

  // And f32 where an f16 model declares f16.
  MakeGpt2Options o = Small();
  o.f16 = true;
  const Gpt2File half = WriteAndRead(o, "half.bin");
  std::string half_bytes = ReadBytes(half.path);
  const std::uint64_t wte_at = half.Find("model/wte")->header_offset;
  PatchI32(half_bytes, wte_at + 8, 0);
  EXPECT_THAT(std::string(Rejected(half_bytes).message()),
              HasSubstr(fmt::format("tensor 'model/wte' at offset {} has wrong size in model file: got 19200 bytes "
                                    "(f32), expected 9600 bytes (f16)",
                                    wte_at)));
}

TEST_F(GgmlGpt2Test, UnsupportedTtypeAndBadNdims) {
  const Gpt2File good = GoodDirectory();
  const std::string bytes = ReadBytes(good.path);
  const std::uint64_t at = good.Find("model/wpe")->header_offset;
  std::string ttype = bytes;
  PatchI32(ttype, at + 8, 7);
  const Status s = Rejected(ttype);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(std::string(s.message()), HasSubstr(fmt::format("tensor 'model/wpe' at offset {} has ttype 7", at)));

  for (std::int32_t n_dims : {0, 3, -1}) {
    std::string dims = bytes;
    PatchI32(dims, at, n_dims);
    const Status d = Rejected(dims);
    EXPECT_EQ(d.code(), StatusCode::kDataCorrupted);
    EXPECT_THAT(std::string(d.message()),
                HasSubstr(fmt::format("tensor #1 (header at offset {}): n_dims is {}, expected 1 or 2", at, n_dims)));
  }
}

TEST_F(GgmlGpt2Test, BadNameLength) {
  const Gpt2File good = GoodDirectory();
  const std::string bytes = ReadBytes(good.path);
  const std::uint64_t at = good.Find("model/wte")->header_offset;
  std::string huge = bytes;
  PatchI32(huge, at + 4, 0x7fffffff);
  const Status s = Rejected(huge);
  EXPECT_EQ(s.code(), StatusCode::kDataCorrupted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(fmt::format("truncated file: the name of tensor #0 (header at offset {}) at offset {} needs "
                                    "2147483647 bytes",
                                    at, at + 20)));
  std::string negative = bytes;
  PatchI32(negative, at + 4, -5);
  EXPECT_THAT(std::string(Rejected(negative).message()),
              HasSubstr(fmt::format("tensor #0 (header at offset {}): negative name length -5", at)));
}

TEST_F(GgmlGpt2Test, TensorGivenTwice) {
  const Gpt2File good = GoodDirectory();
  const std::string bytes = ReadBytes(good.path);
  const std::uint64_t at = good.Find("model/ln_f/b")->header_offset;
  const Status s = Rejected(bytes + bytes.substr(at));
  EXPECT_EQ(s.code(), StatusCode::kDataCorrupted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(fmt::format("tensor 'model/ln_f/b' at offset {} is given twice (first at offset {})",
                                    bytes.size(), at)));
}

TEST_F(GgmlGpt2Test, MissingTensorAtEndOfFile) {
  const Gpt2File good = GoodDirectory();
  const std::string bytes = ReadBytes(good.path);
  const std::uint64_t at = good.Find("model/ln_f/b")->header_offset;
  const Status s = Rejected(bytes.substr(0, at));
  EXPECT_EQ(s.code(), StatusCode::kDataCorrupted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(fmt::format("tensor 'model/ln_f/b' is missing: the file ends at offset {} (1 of the model's 28 "
                                    "required tensors are missing)",
                                    at)));
  // No tensors at all: the first one named.
  const Status none = Rejected(bytes.substr(0, good.Find("model/wte")->header_offset));
  EXPECT_THAT(std::string(none.message()), HasSubstr("tensor 'model/wte' is missing"));
  EXPECT_THAT(std::string(none.message()), HasSubstr("28 of the model's 28"));
  // A gap in the middle: wpe cut out.
  const std::uint64_t wpe = good.Find("model/wpe")->header_offset;
  const std::uint64_t h0 = good.Find("model/h0/ln_1/g")->header_offset;
  const Status gap = Rejected(bytes.substr(0, wpe) + bytes.substr(h0));
  EXPECT_THAT(std::string(gap.message()), HasSubstr("tensor 'model/wpe' is missing"));
  // lm_head is optional, but the tensors before it are not.
  MakeGpt2Options o = Small();
  o.lm_head = true;
  const Gpt2File untied = WriteAndRead(o, "untied.bin");
  const std::string untied_bytes = ReadBytes(untied.path);
  const std::uint64_t ln_f_b = untied.Find("model/ln_f/b")->header_offset;
  const std::uint64_t lm_head = untied.Find("model/lm_head")->header_offset;
  const Status before_head = Rejected(untied_bytes.substr(0, ln_f_b) + untied_bytes.substr(lm_head));
  EXPECT_THAT(std::string(before_head.message()), HasSubstr("tensor 'model/ln_f/b' is missing"));
}

TEST_F(GgmlGpt2Test, EveryCutIsACleanError) {
  const Gpt2File good = GoodDirectory();
  const std::string bytes = ReadBytes(good.path);
  std::set<std::uint64_t> boundaries;
  for (const auto& [name, t] : good.tensors) boundaries.insert(t.header_offset);

  // Every cut through the header, the vocab and each tensor's header; a sample through the data.
  std::set<std::uint64_t> cuts;
  for (std::uint64_t cut = 0; cut < good.Find("model/wte")->offset + 8; ++cut) cuts.insert(cut);
  for (const auto& [name, t] : good.tensors) {
    for (std::uint64_t cut = t.header_offset; cut < t.offset + 2; ++cut) cuts.insert(cut);
    cuts.insert(t.offset + t.bytes - 1);
  }
  for (std::uint64_t cut = 0; cut < bytes.size(); cut += 37) cuts.insert(cut);
  for (std::uint64_t cut : cuts) {
    SCOPED_TRACE(cut);
    const Status s = Rejected(std::string_view(bytes).substr(0, cut));
    EXPECT_EQ(s.code(), StatusCode::kDataCorrupted) << s;
    if (boundaries.count(cut) != 0) EXPECT_THAT(std::string(s.message()), HasSubstr("is missing")) << s;
    else EXPECT_THAT(std::string(s.message()), HasSubstr("truncated file")) << s;
  }
}

TEST_F(GgmlGpt2Test, DamagedBytesNeverCrashTheReader) {
  const Gpt2File good = GoodDirectory();
  const std::string bytes = ReadBytes(good.path);
  const std::uint64_t hot = good.Find("model/wte")->offset;  // the header and the vocab
  std::mt19937_64 rng(42);
  int rejected = 0;
  for (int round = 0; round < 1500; ++round) {
    std::string damaged = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const std::uint64_t at = round % 3 == 0 ? rng() % damaged.size() : rng() % hot;
      damaged[at] = static_cast<char>(rng() % 2 ? rng() : damaged[at] ^ (1u << (rng() % 8)));
    }
    if (round % 5 == 0) damaged.resize(rng() % damaged.size());
    WriteBytes(crafted_, damaged);
    auto file = ReadGpt2File(crafted_);
    if (file.ok()) continue;  // a flipped data byte is still a valid file
    ++rejected;
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(crafted_));
  }
  EXPECT_GT(rejected, 500);

  // Pure noise after a good magic.
  for (int round = 0; round < 300; ++round) {
    std::string noise = "lmgg";
    const std::size_t n = rng() % 200;
    for (std::size_t i = 0; i < n; ++i) noise.push_back(static_cast<char>(rng()));
    EXPECT_FALSE(Rejected(noise).ok());
  }
}

TEST_F(GgmlGpt2Test, OpenErrors) {
  auto absent = ReadGpt2File(Path("absent.bin"));
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(std::string(absent.status().message()), HasSubstr(Path("absent.bin")));
  EXPECT_FALSE(ReadGpt2File(dir_.string()).ok());
}

TEST_F(GgmlGpt2Test, ReadTensorErrors) {
  Gpt2File file = WriteAndRead(Small(), "model.bin");
  auto unknown = ReadGpt2TensorF32(file, "model/nothing");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("'model/nothing'"));
  // The file shrank after its directory was read.
  fs::resize_file(file.path, file.Find("model/ln_f/b")->offset + 4);
  auto shrunk = ReadGpt2TensorF32(file, "model/ln_f/b");
  ASSERT_FALSE(shrunk.ok());
  EXPECT_EQ(shrunk.status().code(), StatusCode::kDataCorrupted);
  EXPECT_THAT(std::string(shrunk.status().message()), HasSubstr("ends past the end of the file"));
  EXPECT_TRUE(ReadGpt2TensorF32(file, "model/wte").ok());
}

// ---- writer options ------------------------------------------------------------------------------

TEST_F(GgmlGpt2Test, BadOptionsNameTheOptionAndWriteNothing) {
  struct Case {
    MakeGpt2Options options;
    const char* message;
  };
  auto with = [](auto change) {
    MakeGpt2Options o = Small();
    change(o);
    return o;
  };
  const Case cases[] = {
      {with([](MakeGpt2Options& o) { o.layers = 0; }), "MakeGpt2Options.layers is 0, expected >= 1"},
      {with([](MakeGpt2Options& o) { o.embd = 0; }), "MakeGpt2Options.embd is 0, expected >= 1"},
      {with([](MakeGpt2Options& o) { o.heads = -2; }), "MakeGpt2Options.heads is -2, expected >= 1"},
      {with([](MakeGpt2Options& o) { o.ctx = 0; }), "MakeGpt2Options.ctx is 0, expected >= 1"},
      {with([](MakeGpt2Options& o) { o.vocab = 0; }), "MakeGpt2Options.vocab is 0, expected >= 1"},
      {with([](MakeGpt2Options& o) { o.heads = 5; }), "MakeGpt2Options.embd 16 is not a multiple of "
                                                      "MakeGpt2Options.heads 5"},
      {with([](MakeGpt2Options& o) { o.embd = 0x40000000, o.heads = 1; }), "MakeGpt2Options.embd 1073741824 is too "
                                                                           "large"},
      {with([](MakeGpt2Options& o) { o.vocab = 255; }), "MakeGpt2Options.vocab is 255: synthetic tokens need"},
      {with([](MakeGpt2Options& o) { o.tokens = {"a", "b"}; }), "MakeGpt2Options.tokens has 2 tokens, "
                                                                "MakeGpt2Options.vocab is 300"},
  };
  const std::string path = Path("model.bin");
  for (const Case& c : cases) {
    const Status s = WriteGpt2File(path, c.options);
    EXPECT_EQ(s.code(), StatusCode::kParamInvalid) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(s.message()), HasSubstr(path));
  }
  EXPECT_TRUE(fs::is_empty(dir_));

  const Status no_dir = WriteGpt2File(Path("absent/model.bin"), Small());
  EXPECT_FALSE(no_dir.ok());
  EXPECT_THAT(std::string(no_dir.message()), HasSubstr(Path("absent/model.bin")));
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(GgmlGpt2Test, RewritingReplacesTheFileAndLeavesNoTemporary) {
  const std::string path = Path("model.bin");
  ASSERT_TRUE(WriteGpt2File(path, Small(1)).ok());
  ASSERT_TRUE(WriteGpt2File(path, Small(2)).ok());
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"model.bin"});
  ASSERT_TRUE(WriteGpt2File(Path("seed2.bin"), Small(2)).ok());
  EXPECT_EQ(ReadBytes(path), ReadBytes(Path("seed2.bin")));
}

// ---- the reference forward pass ------------------------------------------------------------------

using gpt2_testing::Gpt2Reference;

std::vector<float> RunTokens(Gpt2Reference& model, const std::vector<int>& tokens) {
  std::vector<float> logits;
  for (std::size_t i = 0; i < tokens.size(); ++i) logits = model.Step(tokens[i], static_cast<int>(i));
  return logits;
}

TEST_F(GgmlGpt2Test, ReferenceProducesFiniteLogitsAndTheHeadMatters) {
  MakeGpt2Options o = Small();
  o.vocab = 260;
  const Gpt2File tied_file = WriteAndRead(o, "tied.bin");
  o.lm_head = true;
  const Gpt2File untied_file = WriteAndRead(o, "untied.bin");
  auto tied = Gpt2Reference::Load(tied_file);
  auto untied = Gpt2Reference::Load(untied_file);
  ASSERT_TRUE(tied.ok()) << tied.status();
  ASSERT_TRUE(untied.ok()) << untied.status();

  const std::vector<int> prompt = {72, 101, 258, 33, 7};
  for (int n_past = 0; n_past < static_cast<int>(prompt.size()); ++n_past) {
    const std::vector<float> a = tied->Step(prompt[n_past], n_past);
    const std::vector<float> b = untied->Step(prompt[n_past], n_past);
    ASSERT_EQ(a.size(), 260u);
    ASSERT_EQ(b.size(), 260u);
    for (float v : a) ASSERT_TRUE(std::isfinite(v));
    for (float v : b) ASSERT_TRUE(std::isfinite(v));
    EXPECT_NE(a, b);
    EXPECT_GT(*std::max_element(a.begin(), a.end()), *std::min_element(a.begin(), a.end()));
  }
}

TEST_F(GgmlGpt2Test, ReferenceAttendsToThePrefixThroughItsCache) {
  const Gpt2File file = WriteAndRead(Small(), "model.bin");
  auto run = [&](const std::vector<int>& tokens) {
    auto model = Gpt2Reference::Load(file);
    EXPECT_TRUE(model.ok()) << model.status();
    return RunTokens(*model, tokens);
  };
  const std::vector<float> abc = run({5, 260, 17});
  EXPECT_EQ(run({5, 260, 17}), abc);  // deterministic
  EXPECT_NE(run({6, 260, 17}), abc);  // an earlier token changes the last logits
  EXPECT_NE(run({17}), abc);          // and so does the position

  auto model = Gpt2Reference::Load(file);
  ASSERT_TRUE(model.ok());
  EXPECT_THROW(model->Step(300, 0), std::out_of_range);
  EXPECT_THROW(model->Step(0, 8), std::out_of_range);
}

// The reference decodes one token at a time through its cache; here every position is computed at
// once from the embeddings, with the causal mask spelled out, and each step's logits must agree.
TEST_F(GgmlGpt2Test, ReferenceMatchesACacheFreeComputation) {
  MakeGpt2Options o = Small();
  o.layers = 1;
  o.lm_head = true;
  const Gpt2File file = WriteAndRead(o, "model.bin");
  auto w = [&](const std::string& name) { return ReadGpt2TensorF32(file, name).value(); };
  using Vec = std::vector<double>;
  auto layer_norm = [](const Vec& x, const std::vector<float>& g, const std::vector<float>& b) {
    const double n = static_cast<double>(x.size());
    double mean = 0, var = 0;
    for (double v : x) mean += v / n;
    for (double v : x) var += (v - mean) * (v - mean) / n;
    Vec y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + 1e-5) * g[i] + b[i];
    return y;
  };
  auto affine = [](const std::vector<float>& m, const std::vector<float>& bias, const Vec& x) {
    Vec y(bias.begin(), bias.end());
    for (std::size_t r = 0; r < y.size(); ++r)
      for (std::size_t c = 0; c < x.size(); ++c) y[r] += m[r * x.size() + c] * x[c];
    return y;
  };
  const int embd = 16, heads = 4, dim = 4;
  const std::vector<int> tokens = {42, 271, 9, 42};
  const int n = static_cast<int>(tokens.size());
  const std::vector<float> wte = w("model/wte"), wpe = w("model/wpe");
  std::vector<Vec> x(n), q(n), k(n), v(n);
  for (int t = 0; t < n; ++t) {
    x[t].resize(embd);
    for (int i = 0; i < embd; ++i) x[t][i] = wte[tokens[t] * embd + i] + wpe[t * embd + i];
    const Vec qkv = affine(w("model/h0/attn/c_attn/w"), w("model/h0/attn/c_attn/b"),
                           layer_norm(x[t], w("model/h0/ln_1/g"), w("model/h0/ln_1/b")));
    q[t].assign(qkv.begin(), qkv.begin() + embd);
    k[t].assign(qkv.begin() + embd, qkv.begin() + 2 * embd);
    v[t].assign(qkv.begin() + 2 * embd, qkv.end());
  }
  auto reference = gpt2_testing::Gpt2Reference::Load(file);
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (int t = 0; t < n; ++t) {
    Vec attended(embd, 0.0);
    for (int h = 0; h < heads; ++h) {
      Vec weights(n);
      double total = 0;
      for (int s = 0; s < n; ++s) {
        double dot = 0;
        for (int d = 0; d < dim; ++d) dot += q[t][h * dim + d] * k[s][h * dim + d];
        weights[s] = s <= t ? std::exp(dot / std::sqrt(double{dim})) : 0.0;  // causal mask
        total += weights[s];
      }
      for (int s = 0; s < n; ++s)
        for (int d = 0; d < dim; ++d) attended[h * dim + d] += weights[s] / total * v[s][h * dim + d];
    }
    Vec y = x[t];
    const Vec projected = affine(w("model/h0/attn/c_proj/w"), w("model/h0/attn/c_proj/b"), attended);
    for (int i = 0; i < embd; ++i) y[i] += projected[i];
    Vec hidden = affine(w("model/h0/mlp/c_fc/w"), w("model/h0/mlp/c_fc/b"),
                        layer_norm(y, w("model/h0/ln_2/g"), w("model/h0/ln_2/b")));
    for (double& u : hidden) u = 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
    const Vec mlp = affine(w("model/h0/mlp/c_proj/w"), w("model/h0/mlp/c_proj/b"), hidden);
    for (int i = 0; i < embd; ++i) y[i] += mlp[i];
    const Vec logits = affine(w("model/lm_head"), std::vector<float>(300, 0.f),
                              layer_norm(y, w("model/ln_f/g"), w("model/ln_f/b")));

    const std::vector<float> got = reference->Step(tokens[t], t);
    ASSERT_EQ(got.size(), logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i)
      ASSERT_NEAR(got[i], logits[i], 1e-6) << "step " << t << " logit " << i;
  }
}

TEST_F(GgmlGpt2Test, ReferenceOnF16WeightsIsCloseToF32) {
  MakeGpt2Options o = Small();
  const Gpt2File f32_file = WriteAndRead(o, "f32.bin");
  o.f16 = true;
  const Gpt2File f16_file = WriteAndRead(o, "f16.bin");
  auto f32 = Gpt2Reference::Load(f32_file);
  auto f16 = Gpt2Reference::Load(f16_file);
  ASSERT_TRUE(f32.ok() && f16.ok());
  const std::vector<float> a = RunTokens(*f32, {1, 2, 3, 4});
  const std::vector<float> b = RunTokens(*f16, {1, 2, 3, 4});
  ASSERT_EQ(a.size(), b.size());
  float scale = 0;
  for (float v : a) scale = std::max(scale, std::fabs(v));
  ASSERT_GT(scale, 0.f);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 0.01f * scale) << i;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace npuflow::gpt2
