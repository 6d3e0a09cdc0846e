// The .om model file: a hand-built CompiledModel round-trips field by field, and every kind of
// damaged or inconsistent file is rejected with an error naming the file and the problem; an
// encrypted file opens only with its key.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include "base/aes_gcm.h"
#include "graph/model_file/model_file.h"
#include "graph/ir/text_format.h"
#include "proto/model.pb.h"

namespace npuflow::graph {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kGraph = R"pb(
name: "tiny"
node {
  name: "x" op: "Data"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: 2 } dim { symbol: "seq" } } } }
  output { dtype: DT_FLOAT shape { dim { size: 2 } dim { symbol: "seq" } } }
}
node {
  name: "w" op: "Const"
  attr { key: "value" value { tensor { dtype: DT_FLOAT shape { dim { size: 2 } dim { size: 1 } } float_val: 0.5 float_val: -2 } } }
  output { dtype: DT_FLOAT shape { dim { size: 2 } dim { size: 1 } } }
}
node { name: "sum" op: "Add" input: "x" input: "w" attr { key: "_stream" value { i: 1 } } }
node { name: "act" op: "Relu" input: "sum" }
node { name: "out" op: "NetOutput" input: "act" input: "^w" }
)pb";

std::vector<std::uint8_t> Pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + 7 * i);
  return v;
}

CompiledModel MakeModel() {
  CompiledModel m;
  auto g = ParseGraphText(kGraph, "tiny.pbtxt");
  EXPECT_TRUE(g.ok()) << g.status();
  m.graph = std::move(g).value();
  m.options.chip = "310P";
  m.options.stream_mode = CompileOptions::StreamMode::kSingle;
  m.options.max_parallel = 3;
  m.chip = "910B";

  auto set = [&](Segment s, std::uint64_t b) { m.memory.segment_bytes[static_cast<int>(s)] = b; };
  set(Segment::kWeights, 64);
  set(Segment::kFixedFeatureMap, 128);
  set(Segment::kFeatureMap, 256);
  set(Segment::kVariables, 16);
  set(Segment::kInput, 32);
  set(Segment::kOutput, 32);
  set(Segment::kTilingData, 48);
  m.memory.tensors = {
      {.node = "w", .output = 0, .ref = {Segment::kWeights, 0}, .bytes = 8, .first_use = 0, .last_use = 1},
      {.node = "sum", .output = 0, .ref = {Segment::kFeatureMap, 64}, .bytes = 32, .first_use = 1, .last_use = 2},
      {.node = "act", .output = 0, .ref = {Segment::kOutput, 0}, .bytes = 32, .first_use = 2, .last_use = 3},
  };
  m.memory.feature_map_tensor_bytes = 96;

  StreamDef s0{.id = 0, .engine = OpEngine::kAICore};
  s0.tasks.push_back({.type = TaskType::kKernel, .node = "sum", .kernel = "npuflow.Add", .block_dim = 4,
                      .tiling_key = 7,
                      .args = {{Segment::kInput, 0}, {Segment::kWeights, 0}, {Segment::kFeatureMap, 64},
                               {Segment::kNone, 0}, {Segment::kTilingData, 16}}});
  s0.tasks.push_back({.type = TaskType::kEventRecord, .event = 1});
  StreamDef s1{.id = 3, .engine = OpEngine::kAICpu};
  s1.tasks.push_back({.type = TaskType::kEventWait, .event = 1});
  s1.tasks.push_back({.type = TaskType::kMemcpy, .node = "act", .src = {Segment::kFeatureMap, 64},
                      .dst = {Segment::kFixedFeatureMap, 96}, .bytes = 32});
  s1.tasks.push_back({.type = TaskType::kAicpuKernel, .node = "act", .kernel = "npuflow.Relu", .block_dim = 1,
                      .tiling_key = 0xFFFFFFFFFFull, .args = {{Segment::kFixedFeatureMap, 96}, {Segment::kOutput, 0}}});
  s1.tasks.push_back({.type = TaskType::kNop});
  m.streams = {s0, s1};
  m.event_count = 2;

  m.inputs = {{.name = "x",
               .desc = TensorDesc{DataType::kFloat32, Shape({Dim::Static(2), Dim::Symbolic("seq")})},
               .ref = {Segment::kInput, 0}}};
  m.outputs = {{.name = "act:0", .desc = TensorDesc{DataType::kBFloat16, Shape{2, 8}}, .ref = {Segment::kOutput, 0}}};
  m.weights = Pattern(64, 1);
  m.variables = Pattern(16, 2);
  m.tiling_data = Pattern(48, 3);
  return m;
}

void ExpectSameModel(const CompiledModel& a, const CompiledModel& b) {
  ASSERT_NE(a.graph, nullptr);
  ASSERT_NE(b.graph, nullptr);
  EXPECT_EQ(PrintGraphText(*a.graph), PrintGraphText(*b.graph));
  EXPECT_EQ(a.options.chip, b.options.chip);
  EXPECT_EQ(a.options.stream_mode, b.options.stream_mode);
  EXPECT_EQ(a.options.max_parallel, b.options.max_parallel);
  EXPECT_EQ(a.chip, b.chip);
  EXPECT_EQ(a.memory.segment_bytes, b.memory.segment_bytes);
  EXPECT_EQ(a.memory.feature_map_tensor_bytes, b.memory.feature_map_tensor_bytes);
  ASSERT_EQ(a.memory.tensors.size(), b.memory.tensors.size());
  for (std::size_t i = 0; i < a.memory.tensors.size(); ++i) {
    const TensorPlacement& x = a.memory.tensors[i];
    const TensorPlacement& y = b.memory.tensors[i];
    EXPECT_EQ(x.node, y.node);
    EXPECT_EQ(x.output, y.output);
    EXPECT_EQ(x.ref, y.ref);
    EXPECT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(x.first_use, y.first_use);
    EXPECT_EQ(x.last_use, y.last_use);
  }
  ASSERT_EQ(a.streams.size(), b.streams.size());
  for (std::size_t s = 0; s < a.streams.size(); ++s) {
    EXPECT_EQ(a.streams[s].id, b.streams[s].id);
    EXPECT_EQ(a.streams[s].engine, b.streams[s].engine);
    ASSERT_EQ(a.streams[s].tasks.size(), b.streams[s].tasks.size());
    for (std::size_t t = 0; t < a.streams[s].tasks.size(); ++t) {
      const TaskDef& x = a.streams[s].tasks[t];
      const TaskDef& y = b.streams[s].tasks[t];
      EXPECT_EQ(x.type, y.type);
      EXPECT_EQ(x.node, y.node);
      EXPECT_EQ(x.kernel, y.kernel);
      EXPECT_EQ(x.block_dim, y.block_dim);
      EXPECT_EQ(x.tiling_key, y.tiling_key);
      EXPECT_EQ(x.args, y.args);
      EXPECT_EQ(x.event, y.event);
      EXPECT_EQ(x.src, y.src);
      EXPECT_EQ(x.dst, y.dst);
      EXPECT_EQ(x.bytes, y.bytes);
    }
  }
  EXPECT_EQ(a.event_count, b.event_count);
  auto same_io = [](const std::vector<IoDef>& x, const std::vector<IoDef>& y) {
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].name, y[i].name);
      EXPECT_EQ(x[i].desc, y[i].desc) << x[i].desc.ToString() << " vs " << y[i].desc.ToString();
      EXPECT_EQ(x[i].ref, y[i].ref);
    }
  };
  same_io(a.inputs, b.inputs);
  same_io(a.outputs, b.outputs);
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.variables, b.variables);
  EXPECT_EQ(a.tiling_data, b.tiling_data);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Sha256(std::string_view data) {
  unsigned char d[32];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), d, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(d), 32);
}

// A file around `payload` with a correct header: how a consistent-looking but wrong model is made.
std::string WithHeader(const std::string& payload, std::uint32_t flags = kModelFileFlagWeightsEmbedded) {
  std::string file(kModelFileMagic);
  for (int i = 0; i < 4; ++i) file.push_back(static_cast<char>((kModelFileVersion >> (8 * i)) & 0xff));
  for (int i = 0; i < 4; ++i) file.push_back(static_cast<char>((flags >> (8 * i)) & 0xff));
  const std::uint64_t n = payload.size();
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return file + Sha256(payload) + payload;
}

class ModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("npuflow_model_file_test_{}_{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                       static_cast<long>(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "tiny.om").string();
    auto bytes = SerializeModel(MakeModel());
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    good_ = *bytes;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `bytes` to the test's file and reads it back; the read must fail.
  Status ReadBack(std::string_view bytes) {
    WriteBytes(path_, bytes);
    auto m = ReadModelFile(path_);
    EXPECT_FALSE(m.ok());
    return m.ok() ? Status::Ok() : m.status();
  }
  proto::ModelDef GoodPayload() const {
    proto::ModelDef def;
    EXPECT_TRUE(def.ParseFromString(good_.substr(kModelFileHeaderBytes)));
    return def;
  }
  // Expects a DataCorrupted naming the file and containing `what`.
  void ExpectCorrupted(const Status& s, std::string_view what) {
    EXPECT_EQ(s.code(), StatusCode::kDataCorrupted) << s;
    EXPECT_EQ(s.message().substr(0, path_.size() + 2), path_ + ": ") << s;
    EXPECT_NE(s.message().find(what), std::string_view::npos) << s;
  }

  fs::path dir_;
  std::string path_;
  std::string good_;
};

TEST_F(ModelFileTest, EveryFieldRoundTrips) {
  const CompiledModel original = MakeModel();
  ASSERT_TRUE(WriteModelFile(original, path_).ok());
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
  EXPECT_EQ(ReadBytes(path_), good_);  // the file is exactly SerializeModel's bytes
  auto read = ReadModelFile(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameModel(original, *read);
  const Node* sum = read->graph->FindNode("sum");
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(sum->op().Attr<std::int64_t>("_stream").value(), 1);
  EXPECT_EQ(read->graph->FindNode("x")->outputs().at(0).ToString(), "f32[2, seq]");

  // Writing again replaces the file atomically, and reading it is deterministic.
  ASSERT_TRUE(WriteModelFile(*read, path_).ok());
  EXPECT_EQ(ReadBytes(path_), good_);

  auto parsed = ParseModel(good_, "memory");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameModel(original, *parsed);
}

// The writer stores attributes as the text format does: an empty list must read back (it was
// written as a value of no kind, and the reader called the file corrupted; found by
// fuzz_graph_text).
TEST_F(ModelFileTest, EmptyListAttributesRoundTrip) {
  CompiledModel model = MakeModel();
  model.graph->FindNode("act")->op().SetAttr("_mem", std::vector<std::string>{});
  model.graph->FindNode("act")->op().SetAttr("perm", std::vector<std::int64_t>{});
  ASSERT_TRUE(WriteModelFile(model, path_).ok());
  auto read = ReadModelFile(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->graph->FindNode("act")->op().Attr<std::vector<std::string>>("_mem").value(),
            std::vector<std::string>{});
  EXPECT_EQ(read->graph->FindNode("act")->op().Attr<std::vector<std::int64_t>>("perm").value(),
            std::vector<std::int64_t>{});
}

TEST_F(ModelFileTest, HeaderLayout) {
  ASSERT_GE(good_.size(), kModelFileHeaderBytes);
  EXPECT_EQ(good_.substr(0, 8), "NPUFLWOM");
  EXPECT_EQ(good_.substr(8, 4), std::string("\x01\x00\x00\x00", 4));   // version 1
  EXPECT_EQ(good_.substr(12, 4), std::string("\x01\x00\x00\x00", 4));  // weights embedded
  std::uint64_t payload = 0;
  for (int i = 0; i < 8; ++i) payload |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(good_[16 + i])) << (8 * i);
  EXPECT_EQ(payload, good_.size() - kModelFileHeaderBytes);
  EXPECT_EQ(good_.substr(24, 32), Sha256(good_.substr(kModelFileHeaderBytes)));
}

TEST_F(ModelFileTest, AModelWithoutGraphOrWeightsRoundTripsWithoutTheWeightsFlag) {
  CompiledModel empty;
  empty.memory.segment_bytes[static_cast<int>(Segment::kFeatureMap)] = 64;
  ASSERT_TRUE(WriteModelFile(empty, path_).ok());
  EXPECT_EQ(ReadBytes(path_).substr(12, 4), std::string("\x00\x00\x00\x00", 4));
  auto read = ReadModelFile(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->graph, nullptr);
  EXPECT_EQ(read->memory.bytes(Segment::kFeatureMap), 64u);
  EXPECT_EQ(read->options.stream_mode, CompileOptions::StreamMode::kMulti);
}

TEST_F(ModelFileTest, AFlippedPayloadByteFailsTheChecksum) {
  std::string bad = good_;
  bad[kModelFileHeaderBytes + 10] ^= 0x40;
  ExpectCorrupted(ReadBack(bad), "checksum mismatch: the payload's SHA-256 is ");
}

TEST_F(ModelFileTest, AWrongMagicShowsWhatWasFoundAndExpected) {
  std::string bad = good_;
  bad[0] = 'X';
  bad[7] = '\x01';
  Status s = ReadBack(bad);
  ExpectCorrupted(s, R"(not an npuflow model file: magic is "XPUFLWO\x01", expected "NPUFLWOM")");
}

TEST_F(ModelFileTest, AnUnknownVersionIsUnsupported) {
  std::string bad = good_;
  bad[8] = 99;
  Status s = ReadBack(bad);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_EQ(s.message(), path_ + ": model file format version 99 is not supported (this reader supports version 1)");
}

TEST_F(ModelFileTest, UnknownFlagsAreUnsupported) {
  std::string bad = good_;
  bad[12] = 0x03;
  Status s = ReadBack(bad);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_EQ(s.message(), path_ + ": unsupported flags 0x3 (known: 0x1 = weights embedded)");
}

TEST_F(ModelFileTest, ATruncatedHeaderGivesBothSizes) {
  ExpectCorrupted(ReadBack(good_.substr(0, 30)), "truncated: the file has 30 bytes, shorter than the 56-byte header");
  ExpectCorrupted(ReadBack(""), "truncated: the file has 0 bytes");
}

TEST_F(ModelFileTest, ATruncatedPayloadGivesBothSizes) {
  const std::size_t payload = good_.size() - kModelFileHeaderBytes;
  ExpectCorrupted(ReadBack(good_.substr(0, good_.size() - 10)),
                  fmt::format("truncated: the header announces a payload of {} bytes, the file holds {}", payload,
                              payload - 10));
}

TEST_F(ModelFileTest, TrailingBytesAreRejected) {
  const std::size_t payload = good_.size() - kModelFileHeaderBytes;
  ExpectCorrupted(ReadBack(good_ + "junk!"), fmt::format("5 trailing bytes after the {}-byte payload", payload));
}

TEST_F(ModelFileTest, AMissingFileIsNotFound) {
  const std::string missing = (dir_ / "nope.om").string();
  auto m = ReadModelFile(missing);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m.status().message(), missing + ": cannot open the model file: No such file or directory");
}

TEST_F(ModelFileTest, APayloadThatIsNotAProtobufIsCorrupted) {
  ExpectCorrupted(ReadBack(WithHeader(std::string("\xff\xff\xff\xff\xff garbage", 14))),
                  "the payload (14 bytes) is not a valid ModelDef protobuf");
}

TEST_F(ModelFileTest, SemanticErrorsNameTheFieldAndTheProblem) {
  {
    proto::ModelDef def = GoodPayload();
    def.mutable_stream(1)->mutable_task(2)->set_type(static_cast<proto::TaskTypeDef>(42));
    ExpectCorrupted(ReadBack(WithHeader(def.SerializeAsString())), "stream 3 task 2: unknown task type 42");
  }
  {
    proto::ModelDef def = GoodPayload();
    def.mutable_stream(0)->mutable_task(0)->mutable_arg(1)->set_segment(static_cast<proto::SegmentDef>(9));
    ExpectCorrupted(ReadBack(WithHeader(def.SerializeAsString())), "stream 0 task 0: unknown segment type 9");
  }
  {
    proto::ModelDef def = GoodPayload();
    def.mutable_stream(0)->mutable_task(0)->mutable_arg(2)->set_offset(999);
    ExpectCorrupted(ReadBack(WithHeader(def.SerializeAsString())),
                    "stream 0 task 0 (kernel 'sum'): arg 2: offset 999 is beyond the fm segment (256 bytes)");
  }
  {
    proto::ModelDef def = GoodPayload();
    def.mutable_memory()->mutable_tensor(1)->set_bytes(250);
    ExpectCorrupted(ReadBack(WithHeader(def.SerializeAsString())),
                    "placement of 'sum':0: 250 bytes at offset 64 run past the end of the fm segment (256 bytes)");
  }
  {
    proto::ModelDef def = GoodPayload();
    def.mutable_weights()->pop_back();
    ExpectCorrupted(ReadBack(WithHeader(def.SerializeAsString())),
                    "63 bytes of weights data, but the weights segment is 64 bytes");
  }
  {
    proto::ModelDef def = GoodPayload();
    def.mutable_variables()->append("x");
    ExpectCorrupted(ReadBack(WithHeader(def.SerializeAsString())),
                    "17 bytes of variables data, but the variables segment is 16 bytes");
  }
  {
    proto::ModelDef def = GoodPayload();
    def.mutable_tiling_data()->clear();
    ExpectCorrupted(ReadBack(WithHeader(def.SerializeAsString())),
                    "0 bytes of tiling data, but the tiling segment is 48 bytes");
  }
  {
    proto::ModelDef def = GoodPayload();
    def.mutable_stream(1)->mutable_task(0)->set_event(5);
    ExpectCorrupted(ReadBack(WithHeader(def.SerializeAsString())),
                    "stream 3 task 0 (event_wait): event 5 is out of range (the model has 2 events)");
  }
  {
    // One size fewer is a file from before the file_constant segment (see below); two fewer is damage.
    proto::ModelDef def = GoodPayload();
    def.mutable_memory()->mutable_segment_bytes()->RemoveLast();
    def.mutable_memory()->mutable_segment_bytes()->RemoveLast();
    ExpectCorrupted(ReadBack(WithHeader(def.SerializeAsString())),
                    fmt::format("the memory plan has {} segment sizes, expected {}", kSegmentCount - 2, kSegmentCount));
  }
  {
    proto::ModelDef def = GoodPayload();
    def.mutable_graph()->mutable_node(3)->set_input(0, "nowhere");
    Status s = ReadBack(WithHeader(def.SerializeAsString()));
    ExpectCorrupted(s, ": node 'act': input 'nowhere' names no node");
  }
  {
    // Weights in the payload without the flag that says so.
    Status s = ReadBack(WithHeader(GoodPayload().SerializeAsString(), /*flags=*/0));
    ExpectCorrupted(s, "the payload holds 64 bytes of weights, but the header's weights-embedded flag is clear");
  }
  {
    // A weights segment without its data and without the flag: the data is missing (external
    // weights are FileConstants in the file_constant segment, never the weights segment).
    proto::ModelDef def = GoodPayload();
    def.clear_weights();
    Status s = ReadBack(WithHeader(def.SerializeAsString(), /*flags=*/0));
    ExpectCorrupted(s, "the weights segment is 64 bytes, but its data is missing (the header's weights-embedded flag "
                       "is clear)");
    EXPECT_EQ(s.message().find("not supported"), std::string_view::npos) << s;
  }
}

// A Const kept in the weights segment (stored once, read back from there) at an offset past the
// weights is corrupted. At an offset near 2^64, offset + size wrapped around, passed the check,
// and substr threw, which ended the process. Crafted while writing fuzz_om, whose re-sealed read
// reaches this code.
TEST_F(ModelFileTest, AConstKeptInTheWeightsPastTheirEndIsCorrupted) {
  for (std::uint64_t offset : {std::uint64_t{60}, std::uint64_t{64}, ~std::uint64_t{0} - 3}) {
    proto::ModelDef def = GoodPayload();
    proto::NodeDef& w = *def.mutable_graph()->mutable_node(1);
    ASSERT_EQ(w.name(), "w");
    (*w.mutable_attr())["value"].mutable_tensor()->clear_data();
    (*w.mutable_attr())["_value_in_weights"].set_b(true);
    ASSERT_EQ(def.memory().tensor(0).node(), "w");
    def.mutable_memory()->mutable_tensor(0)->mutable_ref()->set_offset(offset);
    ExpectCorrupted(ReadBack(WithHeader(def.SerializeAsString())),
                    fmt::format("Const 'w' at weights+{} (8 bytes) ends past the weights (64 bytes)", offset));
  }
  // At offset 56 it fits: the bytes come back from the weights (the consistency checks then
  // find nothing wrong either: the placement is within the 64-byte segment).
  proto::ModelDef def = GoodPayload();
  proto::NodeDef& w = *def.mutable_graph()->mutable_node(1);
  (*w.mutable_attr())["value"].mutable_tensor()->clear_data();
  (*w.mutable_attr())["_value_in_weights"].set_b(true);
  def.mutable_memory()->mutable_tensor(0)->mutable_ref()->set_offset(56);
  WriteBytes(path_, WithHeader(def.SerializeAsString()));
  auto read = ReadModelFile(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  const std::vector<std::uint8_t> weights = Pattern(64, 1);
  EXPECT_EQ(read->graph->FindNode("w")->op().Attr<Tensor>("value")->data,
            std::vector<std::uint8_t>(weights.begin() + 56, weights.end()));
}

TEST_F(ModelFileTest, AMemoryPlanFromBeforeTheFileConstantSegmentReads) {
  proto::ModelDef def = GoodPayload();
  ASSERT_EQ(def.memory().segment_bytes_size(), kSegmentCount);
  def.mutable_memory()->mutable_segment_bytes()->RemoveLast();  // no file_constant size
  WriteBytes(path_, WithHeader(def.SerializeAsString()));
  auto m = ReadModelFile(path_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->memory.bytes(Segment::kFileConstant), 0u);
  EXPECT_EQ(m->memory.bytes(Segment::kTilingData), 48u);
}

// ---- encrypted model files -------------------------------------------------------------------------

AesKey TestKey(std::uint8_t seed) {
  AesKey key;
  for (std::size_t i = 0; i < key.bytes.size(); ++i) key.bytes[i] = static_cast<std::uint8_t>(seed + 13 * i);
  return key;
}

TEST_F(ModelFileTest, AnEncryptedModelRoundTripsWithItsKey) {
  const AesKey key = TestKey(1);
  const CompiledModel original = MakeModel();
  ASSERT_TRUE(WriteModelFile(original, path_, &key).ok());
  EXPECT_FALSE(fs::exists(path_ + ".tmp"));
  const std::string bytes = ReadBytes(path_);
  EXPECT_EQ(bytes.substr(0, 8), "NPFWENC1");
  EXPECT_TRUE(IsEncrypted(bytes));
  EXPECT_EQ(bytes.find(good_.substr(kModelFileHeaderBytes, 64)), std::string::npos);  // no plain payload
  auto plain = DecryptBytes(bytes, key, path_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, good_);  // the envelope holds exactly the plain file

  auto read = ReadModelFile(path_, &key);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameModel(original, *read);

  // A key given for a plain file is ignored.
  ASSERT_TRUE(WriteModelFile(original, path_).ok());
  EXPECT_EQ(ReadBytes(path_), good_);
  auto plain_read = ReadModelFile(path_, &key);
  ASSERT_TRUE(plain_read.ok()) << plain_read.status();
  ExpectSameModel(original, *plain_read);
}

TEST_F(ModelFileTest, AnEncryptedModelWithoutAKeyAsksForIt) {
  const AesKey key = TestKey(2);
  ASSERT_TRUE(WriteModelFile(MakeModel(), path_, &key).ok());
  auto m = ReadModelFile(path_);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kParamInvalid);
  EXPECT_EQ(m.status().message(), path_ + ": the model file is encrypted (AES-256-GCM): give its key");
  // ParseModel on the encrypted bytes says the same, naming its source.
  auto parsed = ParseModel(ReadBytes(path_), "memory");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(), "memory: the model file is encrypted (AES-256-GCM): give its key");
}

TEST_F(ModelFileTest, AWrongKeyFailsTheAuthentication) {
  const AesKey key = TestKey(3), other = TestKey(4);
  ASSERT_TRUE(WriteModelFile(MakeModel(), path_, &key).ok());
  auto m = ReadModelFile(path_, &other);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataCorrupted) << m.status();
  EXPECT_EQ(m.status().message().substr(0, path_.size() + 2), path_ + ": ") << m.status();
  EXPECT_NE(m.status().message().find("wrong key or tampered"), std::string_view::npos) << m.status();
}

TEST_F(ModelFileTest, ATamperedEncryptedByteFailsTheAuthentication) {
  const AesKey key = TestKey(5);
  ASSERT_TRUE(WriteModelFile(MakeModel(), path_, &key).ok());
  const std::string sealed = ReadBytes(path_);
  // A ciphertext byte, the tag's last byte, the IV: each fails the tag check.
  for (std::size_t at : {kEncryptedHeaderBytes + 100, sealed.size() - 1, std::size_t{10}}) {
    std::string bad = sealed;
    bad[at] ^= 0x01;
    WriteBytes(path_, bad);
    auto m = ReadModelFile(path_, &key);
    ASSERT_FALSE(m.ok()) << "byte " << at;
    EXPECT_EQ(m.status().code(), StatusCode::kDataCorrupted) << m.status();
    EXPECT_NE(m.status().message().find(path_), std::string_view::npos) << m.status();
    EXPECT_NE(m.status().message().find("wrong key or tampered"), std::string_view::npos) << m.status();
  }
  // Cut short: the envelope says how long it must be.
  WriteBytes(path_, sealed.substr(0, sealed.size() - 20));
  auto cut = ReadModelFile(path_, &key);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kDataCorrupted) << cut.status();
}

TEST_F(ModelFileTest, TheWriterRejectsAnInconsistentModelAndNamesThePath) {
  CompiledModel m = MakeModel();
  m.weights.pop_back();
  Status s = WriteModelFile(m, path_);
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_EQ(s.message(), path_ + ": 63 bytes of weights data, but the weights segment is 64 bytes");
  EXPECT_FALSE(fs::exists(path_));

  CompiledModel bad_enum = MakeModel();
  bad_enum.streams[0].tasks[0].type = static_cast<TaskType>(200);
  EXPECT_NE(SerializeModel(bad_enum).status().message().find("compiled model: stream 0: unknown task type 200"),
            std::string_view::npos)
      << SerializeModel(bad_enum).status();
}

TEST_F(ModelFileTest, WriteErrorsNameThePath) {
  const std::string nowhere = (dir_ / "no_such_dir" / "m.om").string();
  Status s = WriteModelFile(MakeModel(), nowhere);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().substr(0, nowhere.size() + 2), nowhere + ": ") << s;
  EXPECT_NE(s.message().find("No such file or directory"), std::string_view::npos) << s;

  // A directory in the way of the rename: the temporary file is cleaned up.
  const std::string blocked = (dir_ / "blocked.om").string();
  fs::create_directories(fs::path(blocked) / "child");
  Status r = WriteModelFile(MakeModel(), blocked);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find(blocked + ": cannot rename"), std::string_view::npos) << r;
  EXPECT_FALSE(fs::exists(blocked + ".tmp"));
}

}  // namespace
}  // namespace npuflow::graph

namespace npuflow::graph {
namespace {

// A Const whose bytes are in the weights segment is stored once; reading gives it back whole.
TEST(ModelFileWeights, ConstValuesAreStoredOnceAndRestored) {
  std::vector<float> values(4096);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.25f;
  CompiledModel m;
  m.graph = std::make_unique<ComputeGraph>("weights");
  OpDesc w("w", "Const");
  Tensor t{TensorDesc{DataType::kFloat32, Shape{4096}}, {}};
  t.data.resize(values.size() * 4);
  std::memcpy(t.data.data(), values.data(), t.data.size());
  w.SetAttr("value", t);
  Node* node = m.graph->AddNode(w).value();
  node->outputs() = {t.desc};
  m.memory.segment_bytes[static_cast<int>(Segment::kWeights)] = t.data.size();
  m.memory.tensors = {{.node = "w", .output = 0, .ref = {Segment::kWeights, 0}, .bytes = t.data.size()}};
  m.weights = t.data;
  auto bytes = SerializeModel(m);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_LT(bytes->size(), t.data.size() + 1024);  // once, not twice
  auto back = ParseModel(*bytes, "weights.om");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->graph->FindNode("w")->op().Attr<Tensor>("value").value(), t);
  EXPECT_FALSE(back->graph->FindNode("w")->op().HasAttr("_value_in_weights"));
}

}  // namespace
}  // namespace npuflow::graph
