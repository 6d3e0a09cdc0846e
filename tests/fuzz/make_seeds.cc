// npuflow_fuzz_seeds OUT_DIR: writes the seed corpus and the dictionary of every fuzz target,
// made by the project's own writers, so that no binary file is kept in the repository:
//
//   OUT_DIR/seeds/<target>/<name>   valid inputs, one file each
//   OUT_DIR/dicts/<target>.dict     libFuzzer dictionaries (-dict=): magics, names, keywords
//
// ggml: WriteGpt2File (`npuflow make-gpt2`) with tiny shapes. om, om_encrypted: the graphs below
// compiled as `npuflow compile` compiles them (v1 multi- and single-stream, external weights, the
// tiling sink, RT2.0, pipeline stages) and written by WriteModelFile, plain and under FuzzKey.
// graph_text: examples/graphs, the graphs below, and each compiled graph printed back.
// meta_json: the meta.json files of compiles of the weights fixture, and ge.exec.value_bins
// texts. value_bin: the fixture's weight files, plain and encrypted. Any failure is an error:
// seeds that silently went missing would make a fuzz run look better than it is.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>

#include "base/aes_gcm.h"
#include "graph/ir/text_format.h"
#include "graph/model_file/model_file.h"
#include "graph/ops/op_registry.h"
#include "lowering/compiler.h"
#include "lowering/graph_converter.h"
#include "lowering/partition_stages.h"
#include "models/gpt2/ggml_tensors.h"
#include "synthetic/gpt2_file.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/weights_fixture.h"
#include "weights/convert.h"

namespace npuflow::fuzz {
namespace {

namespace fs = std::filesystem;

// ---- graphs ------------------------------------------------------------------------------------

// One decode step's attention over a cache, valid_len known only at run time: with
// tiling_schedule_optimize "1" it is tiled on the device (lowering/tiling_sink.h).
constexpr std::string_view kAttention = R"pb(name: "attention"
node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
node { name: "len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
       attr { key: "shape" value { shape { dim { size: 1 } } } } }
node { name: "att" op: "Attention" input: "q" input: "cache" input: "cache" input: "len" }
node { name: "out" op: "NetOutput" input: "att" }
)pb";

// If and While over subgraphs, a dynamic batch: RT2.0 only.
constexpr std::string_view kControlFlow = R"pb(name: "control_flow"
node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "shape" value { shape { dim { symbol: "n" } dim { size: 4 } } } } }
node { name: "flag" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "shape" value { shape { dim { size: 1 } } } } }
node { name: "k" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { } } } }
node { name: "y" op: "If" input: "flag" input: "x"
       attr { key: "then_branch" value { subgraph: "then" } } attr { key: "else_branch" value { subgraph: "else" } } }
node { name: "loop" op: "While" input: "y" input: "k" attr { key: "cond" value { subgraph: "cond" } }
       attr { key: "body" value { subgraph: "body" } } attr { key: "max_iterations" value { i: 8 } } }
node { name: "out" op: "NetOutput" input: "loop:0" input: "loop:1" }
subgraph { name: "then" node { name: "a" op: "Data" attr { key: "index" value { i: 0 } } }
           node { name: "t" op: "Tanh" input: "a" } node { name: "o" op: "NetOutput" input: "t" } }
subgraph { name: "else" node { name: "a" op: "Data" attr { key: "index" value { i: 0 } } }
           node { name: "m" op: "Mul" input: "a" input: "a" } node { name: "o" op: "NetOutput" input: "m" } }
subgraph { name: "cond" node { name: "v" op: "Data" attr { key: "index" value { i: 0 } } }
           node { name: "c" op: "Data" attr { key: "index" value { i: 1 } } }
           node { name: "o" op: "NetOutput" input: "c" } }
subgraph { name: "body" node { name: "v" op: "Data" attr { key: "index" value { i: 0 } } }
           node { name: "c" op: "Data" attr { key: "index" value { i: 1 } } }
           node { name: "one" op: "Const" attr { key: "value" value { tensor { dtype: DT_FLOAT float_val: 1 } } } }
           node { name: "r" op: "Relu" input: "v" } node { name: "d" op: "Sub" input: "c" input: "one" }
           node { name: "o" op: "NetOutput" input: "r" input: "d" } }
)pb";

// A subgraph called through PartitionedCall, a control edge, int and bool constants.
constexpr std::string_view kCall = R"pb(name: "call"
node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "shape" value { shape { dim { size: 3 } } } } }
node { name: "ids" op: "Const" attr { key: "value" value { tensor { dtype: DT_INT32 shape { dim { size: 2 } }
       int_val: 0 int_val: 2 } } } }
node { name: "mask" op: "Const" attr { key: "value" value { tensor { dtype: DT_BOOL shape { dim { size: 1 } }
       int_val: 1 } } } }
node { name: "stage0" op: "PartitionedCall" input: "x" input: "^mask"
       attr { key: "f" value { subgraph: "twice" } } }
node { name: "out" op: "NetOutput" input: "stage0" input: "ids" }
subgraph { name: "twice" node { name: "a" op: "Data" attr { key: "index" value { i: 0 } } }
           node { name: "s" op: "Add" input: "a" input: "a" } node { name: "o" op: "NetOutput" input: "s" } }
)pb";

// ---- output ------------------------------------------------------------------------------------

fs::path work_dir;  // the scratch directory of this run, removed on the way out either way

[[noreturn]] void Fail(const std::string& what, const Status& s) {
  std::cerr << "npuflow_fuzz_seeds: " << what << ": " << s.message() << "\n";
  std::error_code ignored;
  if (!work_dir.empty()) fs::remove_all(work_dir, ignored);
  std::exit(1);
}

template <typename T>
T Must(StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Fail(what, v.status());
  return std::move(*v);
}

void Must(const Status& s, const std::string& what) {
  if (!s.ok()) Fail(what, s);
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(path.string(), Status::NotFound("cannot read it"));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class Corpus {
 public:
  explicit Corpus(fs::path out) : out_(std::move(out)) {}

  void Add(const std::string& target, const std::string& name, std::string_view bytes) {
    fs::create_directories(out_ / "seeds" / target);
    WriteInput(out_ / "seeds" / target / name, bytes);
    ++seeds_[target];
  }
  void AddFile(const std::string& target, const std::string& name, const fs::path& from) {
    Add(target, name, ReadAll(from));
  }
  // A dictionary: one entry per distinct word, escaped as libFuzzer reads them.
  void Dict(const std::string& target, const std::set<std::string>& words) {
    fs::create_directories(out_ / "dicts");
    std::string text;
    for (const std::string& w : words) {
      if (w.empty()) Fail("dictionary " + target, Status::Internal("an empty entry, which libFuzzer refuses"));
      std::string escaped;
      for (unsigned char c : w) {
        if (c == '"' || c == '\\') escaped += fmt::format("\\{}", static_cast<char>(c));
        else if (c >= 0x20 && c < 0x7f) escaped += static_cast<char>(c);
        else escaped += fmt::format("\\x{:02X}", c);
      }
      text += "\"" + escaped + "\"\n";
    }
    WriteInput(out_ / "dicts" / (target + ".dict"), text);
  }
  void PrintCounts() const {
    for (const auto& [target, n] : seeds_) std::cout << fmt::format("{}: {} seeds\n", target, n);
  }

 private:
  fs::path out_;
  std::map<std::string, int> seeds_;
};

// ---- ggml --------------------------------------------------------------------------------------

void GgmlSeeds(Corpus& corpus, const fs::path& work) {
  const std::vector<std::string> tokens = {"a", "b", " the", "\n", "\xe2\x82\xac", "", "ab", "\xff"};
  struct Variant {
    std::string name;
    synthetic::MakeGpt2Options options;
  };
  std::vector<Variant> variants = {
      {"f32_1layer.bin", {.layers = 1, .embd = 4, .heads = 2, .ctx = 2, .vocab = 8, .tokens = tokens}},
      {"f16_lm_head.bin",
       {.layers = 2, .embd = 4, .heads = 1, .ctx = 3, .vocab = 8, .f16 = true, .lm_head = true, .tokens = tokens}},
      {"name_order.bin",
       {.layers = 2, .embd = 4, .heads = 2, .ctx = 2, .vocab = 8, .name_order = true, .tokens = tokens}},
      {"synthetic_vocab.bin", {.layers = 1, .embd = 4, .heads = 4, .ctx = 2, .vocab = 256}},
  };
  for (const Variant& v : variants) {
    const fs::path path = work / v.name;
    Must(synthetic::WriteGpt2File(path.string(), v.options), "make-gpt2 " + v.name);
    corpus.AddFile("ggml", v.name, path);
  }
  // The magic, names, and int32 extremes for the sizes (as the file stores them, little-endian).
  using namespace std::string_literals;  // "\0..."s keeps its zero bytes
  std::set<std::string> words = {"lmgg", "model/", "model/h", "model/h1/", "model/h10/", "\xff\xff\xff\x7f"s,
                                 "\x00\x00\x00\x80"s, "\xff\xff\xff\xff"s, "\x00\x00\x01\x00"s};
  gpt2::Gpt2HParams hp{.n_vocab = 8, .n_ctx = 2, .n_embd = 4, .n_head = 2, .n_layer = 2};
  gpt2::ForEachTensor(hp, true, [&](const gpt2::TensorSpec& t) {
    words.insert(t.name);
    return true;
  });
  for (const gpt2::LayerTensor& t : gpt2::kLayerTensors) words.insert(std::string(t.suffix));
  corpus.Dict("ggml", words);
}

// ---- model files -------------------------------------------------------------------------------

struct Compiled {
  std::string name;
  graph::CompiledModel model;
};

std::unique_ptr<graph::ComputeGraph> Parse(std::string_view text, const std::string& name) {
  return Must(graph::ParseGraphText(text, name), "parsing " + name);
}

std::vector<Compiled> CompileModels(const fs::path& source, const fs::path& work) {
  const std::string mlp = ReadAll(source / "examples/graphs/mlp.pbtxt");
  const std::string mlp_dynamic = ReadAll(source / "examples/graphs/mlp_dynamic.pbtxt");
  std::vector<Compiled> out;
  auto v1 = [&](const std::string& name, std::string_view text, graph::CompileOptions options) {
    out.push_back({name, Must(lowering::CompileV1(Parse(text, name), options), "compiling " + name)});
  };
  v1("mlp_multi_stream.om", mlp, {});
  v1("mlp_single_stream.om", mlp, {.stream_mode = graph::CompileOptions::StreamMode::kSingle});
  v1("mlp_external_weights.om", mlp,
     {.external_weight = "2", .external_weight_dir = (work / "mlp_weights").string(), .model_name = "mlp"});
  v1("attention_tiling_sink.om", kAttention, {.tiling_schedule_optimize = "1"});
  v1("weights_fixture.om", kWeightsGraph, {.max_parallel = 2});
  out.push_back({"mlp_dynamic_v2.om",
                 Must(lowering::CompileV2Model(Parse(mlp_dynamic, "mlp_dynamic"), {}), "compiling mlp_dynamic")});
  out.push_back({"control_flow_v2.om",
                 Must(lowering::CompileV2Model(Parse(kControlFlow, "control_flow"), {}), "compiling control_flow")});
  out.push_back({"mlp_pipeline_2_stages.om",
                 Must(lowering::CompilePipeline(Parse(mlp, "mlp"), 2, {}), "compiling mlp in 2 stages")});
  return out;
}

void ModelSeeds(Corpus& corpus, const std::vector<Compiled>& models, const fs::path& work) {
  const AesKey key = FuzzKey();
  for (const Compiled& c : models) {
    const fs::path plain = work / c.name, encrypted = work / ("encrypted_" + c.name);
    Must(graph::WriteModelFile(c.model, plain.string()), "writing " + c.name);
    Must(graph::WriteModelFile(c.model, encrypted.string(), &key), "writing " + c.name + " encrypted");
    corpus.AddFile("om", c.name, plain);
    corpus.AddFile("om_encrypted", c.name, encrypted);
    // The readers must take what the writer wrote: a seed they refuse would fuzz nothing.
    Must(graph::ReadModelFile(encrypted.string(), &key).status(), "reading back " + c.name);
  }
  // The magics, op names, and protobuf varints of 2^32 and 2^64 - 1 (sizes and offsets that
  // overflow what they are added to or multiplied with).
  std::set<std::string> words = {std::string(graph::kModelFileMagic), std::string(kEncryptedMagic),
                                 std::string("\x80\x80\x80\x80\x10"),
                                 std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")};
  for (const std::string& op : graph::OpRegistry::Global().Types()) words.insert(op);
  corpus.Dict("om", words);
  corpus.Dict("om_encrypted", {std::string(kEncryptedMagic), std::string(graph::kModelFileMagic)});
}

// ---- graph text --------------------------------------------------------------------------------

// Every field and enum value name of the text format's messages.
void ProtoWords(const google::protobuf::Descriptor* d, std::set<std::string>& words,
                std::set<const google::protobuf::Descriptor*>& seen) {
  if (!seen.insert(d).second) return;
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    words.insert(f->name());
    if (const auto* e = f->enum_type())
      for (int v = 0; v < e->value_count(); ++v) words.insert(e->value(v)->name());
    if (const auto* m = f->message_type()) ProtoWords(m, words, seen);
  }
}

void GraphTextSeeds(Corpus& corpus, const std::vector<Compiled>& models, const fs::path& source) {
  for (const auto& entry : fs::directory_iterator(source / "examples/graphs"))
    if (entry.path().extension() == ".pbtxt")
      corpus.AddFile("graph_text", entry.path().filename().string(), entry.path());
  corpus.Add("graph_text", "attention.pbtxt", kAttention);
  corpus.Add("graph_text", "control_flow.pbtxt", kControlFlow);
  corpus.Add("graph_text", "call.pbtxt", kCall);
  corpus.Add("graph_text", "weights_fixture.pbtxt", kWeightsGraph);
  corpus.Add("graph_text", "value_bin.pbtxt", ValueBinGraphText("value.bin"));
  for (const Compiled& c : models)
    if (c.model.graph) corpus.Add("graph_text", "compiled_" + c.name + ".pbtxt", graph::PrintGraphText(*c.model.graph));
  for (const std::string_view text : {kAttention, kControlFlow, kCall})
    Must(graph::ParseGraphText(text, "seed").status(), "reading back a graph text seed");

  std::set<std::string> words = {"{", "}", ":", "\"", "^", ":1", "subgraph", "_stage", "index", "axis", "value",
                                 "then_branch", "else_branch", "cond", "body", "max_iterations", "location",
                                 "file_path", "file_id", "offset", "length", "_sha256", "original_shape",
                                 // sizes whose products overflow, or that would allocate gigabytes
                                 "100000", "2147483648", "4294967296", "9223372036854775807", "-1"};
  std::set<const google::protobuf::Descriptor*> seen;
  ProtoWords(proto::GraphDef::descriptor(), words, seen);
  for (const std::string& op : graph::OpRegistry::Global().Types()) words.insert(op);
  corpus.Dict("graph_text", words);
}

// ---- weights -----------------------------------------------------------------------------------

// In `work`, with the relative directory "w" that fuzz_meta_json uses: the meta.json of a mode-2
// compile of the fixture, of a mode-1 compile, and of both in one directory; the weight files.
void WeightSeeds(Corpus& corpus, const fs::path& work) {
  const fs::path cwd = fs::current_path();
  const fs::path dir = work / "weights";
  fs::create_directories(dir);
  if (::chdir(dir.c_str()) != 0) Fail(dir.string(), Status::Failed("cannot enter it"));
  auto convert = [&](weights::ExternalWeightMode mode, const std::string& what) {
    auto g = Parse(kWeightsGraph, "weights fixture");
    Must(weights::ConvertConstToFileConstant(
             *g, {.mode = mode, .dir = "w", .model_name = std::string(kWeightsModelName), .writers = 1})
             .status(),
         "converting the weights fixture (" + what + ")");
  };
  convert(weights::ExternalWeightMode::kCombined, "mode 2");
  corpus.AddFile("meta_json", "meta_mode2.json", "w/meta.json");
  corpus.AddFile("value_bin", "combined.bin", fs::path("w") / kCombinedFileName);
  Must(EncryptFile((fs::path("w") / kCombinedFileName).string(), "combined.enc", FuzzKey()), "encrypting");
  corpus.AddFile("value_bin", "combined_encrypted.bin", "combined.enc");
  convert(weights::ExternalWeightMode::kPerWeight, "mode 1 after mode 2");
  corpus.AddFile("meta_json", "meta_mode2_then_1.json", "w/meta.json");
  for (const auto& entry : fs::directory_iterator("w"))
    if (entry.path().filename().string().rfind("weight_", 0) == 0)
      corpus.AddFile("value_bin", entry.path().filename().string() + ".bin", entry.path());
  fs::remove_all("w");
  convert(weights::ExternalWeightMode::kPerWeight, "mode 1");
  corpus.AddFile("meta_json", "meta_mode1.json", "w/meta.json");
  if (::chdir(cwd.c_str()) != 0) Fail(cwd.string(), Status::Failed("cannot go back to it"));

  const std::string bins[] = {
      R"({"value_bins":[{"value_bin_id":"bin","value_bin_file":"w/fuzz_weight_combined"}]})",
      R"({"value_bins":[{"value_bin_id":1,"value_bin_file":"a.bin"},)"
      R"({"value_bin_id":"2","value_bin_file":"/tmp/b.bin"}]})",
      R"({"value_bins":[]})",
  };
  for (std::size_t i = 0; i < std::size(bins); ++i) {
    Must(weights::ParseValueBins(bins[i]).status(), "reading back a value_bins seed");
    corpus.Add("meta_json", fmt::format("value_bins_{}.json", i), bins[i]);
  }
  corpus.Dict("meta_json", {"{", "}", "[", "]", ":", ",", "\"", "true", "false", "null", "0", "-1", "1e400",
                            "18446744073709551616", "\\u0000", "hash_to_weight_file", "hash_to_weight_offset",
                            "value_bins", "value_bin_id", "value_bin_file", "w/fuzz_weight_combined", "w/weight_"});
  corpus.Dict("value_bin", {std::string(kEncryptedMagic)});
}

}  // namespace
}  // namespace npuflow::fuzz

int main(int argc, char** argv) {
  using namespace npuflow;
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::cerr << "usage: npuflow_fuzz_seeds OUT_DIR\n";
    return 2;
  }
  const fs::path out = fs::absolute(argv[1]);
  fs::remove_all(out / "seeds");
  fs::remove_all(out / "dicts");
  const fs::path work = fs::temp_directory_path() / ("npuflow-fuzz-seeds-" + std::to_string(::getpid()));
  fs::create_directories(work);
  fuzz::work_dir = work;
  graph::RegisterBuiltinOps();
  fuzz::Corpus corpus(out);
  fuzz::GgmlSeeds(corpus, work);
  const auto models = fuzz::CompileModels(NPUFLOW_SOURCE_DIR, work);
  fuzz::ModelSeeds(corpus, models, work);
  fuzz::GraphTextSeeds(corpus, models, NPUFLOW_SOURCE_DIR);
  fuzz::WeightSeeds(corpus, work);
  fs::remove_all(work);
  corpus.PrintCounts();
  return 0;
}
