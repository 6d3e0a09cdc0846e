#include "apps/compile_cmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <unordered_map>
#include <vector>

#include "base/aes_gcm.h"
#include "models/gpt2/ggml_file.h"
#include "models/gpt2/decode_graph.h"
#include "graph/model_file/model_file.h"
#include "graph/ops/op_registry.h"
#include "graph/ir/text_format.h"
#include "lowering/compiler.h"
#include "lowering/drop_event.h"
#include "lowering/partition_stages.h"
#include "lowering/graph_converter.h"
#include "lowering/memory_plan.h"
#include "lowering/model_text.h"
#include "scheduler/v2/executors.h"
#include "weights/convert.h"
#include "weights/weight_dir.h"

namespace npuflow::apps {
namespace {

namespace fs = std::filesystem;

constexpr const char* kWeightSubdir = "weight";

// Every FileConstant of the root graph and its subgraphs.
std::vector<graph::Node*> FileConstants(graph::ComputeGraph& root) {
  std::vector<graph::Node*> out;
  auto collect = [&](graph::ComputeGraph& g) {
    for (graph::Node* n : g.nodes())
      if (n->type() == "FileConstant") out.push_back(n);
  };
  collect(root);
  for (graph::ComputeGraph* sub : root.subgraphs()) collect(*sub);
  return out;
}

std::string Location(const graph::Node& n) {
  auto location = n.op().AttrOr<std::string>("location", "");
  if (location.ok() && !location->empty()) return *location;
  auto file_path = n.op().AttrOr<std::string>("file_path", "");
  return file_path.ok() ? *file_path : std::string();
}

bool IsBareName(const std::string& path) { return !path.empty() && path.find('/') == std::string::npos; }

// "<model dir>/weight"
fs::path ModelWeightDir(const std::string& model_path) {
  fs::path dir = fs::path(model_path).parent_path();
  if (dir.empty()) dir = ".";
  return dir / kWeightSubdir;
}

// Where a node's weight file is: a bare name lives in the model's weight directory; anything else
// is taken as it is (relative to the working directory, as the compile read it).
fs::path ResolveWeightFile(const std::string& location, const fs::path& model_weight_dir) {
  return IsBareName(location) ? model_weight_dir / location : fs::path(location);
}

bool SameFile(const fs::path& a, const fs::path& b) {
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  if (ea || eb) return fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal();
  return ca == cb;
}

StatusOr<bool> FileIsEncrypted(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    return Status::NotFound("weight file '{}': cannot open it: {}", path.string(), std::strerror(errno));
  char head[16] = {};
  const std::size_t n = std::fread(head, 1, sizeof(head), f);
  std::fclose(f);
  return IsEncrypted(std::string_view(head, n));
}

// The file at `path` encrypted with `key` into `out` (EncryptFile writes atomically; `out` may be
// `path`). A file that is already encrypted is checked against the key and copied as it is.
Status EncryptWeightFile(const fs::path& path, const fs::path& out, const AesKey& key) {
  NPUFLOW_ASSIGN_OR_RETURN(bool encrypted, FileIsEncrypted(path));
  if (!encrypted) return EncryptFile(path.string(), out.string(), key);
  auto plain = DecryptFile(path.string(), key);
  if (!plain.ok())
    return Status::ParamInvalid("weight file '{}' is already encrypted and does not open with --encrypt-key: {}",
                                path.string(), plain.status().message());
  if (SameFile(path, out)) return Status::Ok();
  const fs::path tmp = out.string() + ".enc.tmp";
  std::error_code ec;
  fs::copy_file(path, tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(tmp, out, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return Status::Failed("weight file '{}': cannot copy it to '{}': {}", path.string(), out.string(), ec.message());
  }
  return Status::Ok();
}

// --encrypt-key: every weight file the graph's FileConstants use ends up encrypted in the model's
// weight directory, named by its bare file name. `moved` are the nodes RelocateWeightFiles moved
// there (their files are ours: encrypted in place); other files are copied encrypted, so the
// originals stay plain.
Status EncryptWeightFiles(graph::ComputeGraph& root, const std::string& model_path,
                          const std::set<const graph::Node*>& moved, const AesKey& key) {
  const fs::path weight_dir = ModelWeightDir(model_path);
  std::map<std::string, fs::path> done;  // file name in the weight dir -> the file encrypted to it
  for (graph::Node* n : FileConstants(root)) {
    const std::string location = Location(*n);
    if (location.empty()) continue;  // no file (a file_id the value bins do not name was an error earlier)
    const fs::path source = ResolveWeightFile(location, weight_dir);
    const std::string name = source.filename().string();
    if (name.empty())
      return Status::ParamInvalid("node '{}' (FileConstant): location '{}' names no file", n->name(), location);
    const fs::path dest = weight_dir / name;
    if (auto it = done.find(name); it != done.end()) {
      if (!SameFile(it->second, source))
        return Status::ParamInvalid(
            "--encrypt-key: weight files '{}' and '{}' would both be encrypted to '{}'; give them different names",
            it->second.string(), source.string(), dest.string());
    } else {
      const bool ours = moved.count(n) > 0 || IsBareName(location);
      if (!ours && SameFile(source, dest))
        return Status::ParamInvalid(
            "--encrypt-key: weight file '{}' is in the model's weight directory '{}', where its encrypted copy "
            "would replace it; keep the plain weights in another directory",
            source.string(), weight_dir.string());
      std::error_code ec;
      fs::create_directories(weight_dir, ec);
      if (ec)
        return Status::Failed("--encrypt-key: cannot create the weight directory '{}': {}", weight_dir.string(),
                              ec.message());
      NPUFLOW_RETURN_IF_ERROR(EncryptWeightFile(source, dest, key));
      done.emplace(name, source);
    }
    n->op().SetAttr("location", name);
  }
  return Status::Ok();
}

// Removes the compile's temporary weight directory when nothing but meta.json is left in it (its
// weight files moved next to the model). Never a directory the user named.
Status CleanTemporaryWeightDir(const std::string& dir, std::ostream& out) {
  std::error_code ec;
  if (!weights::IsTemporaryWeightDir(dir) || !fs::is_directory(dir, ec)) return Status::Ok();
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != weights::kMetaFileName) left.push_back(name);
  }
  if (ec) return Status::Failed("temporary weight directory '{}': cannot list it: {}", dir, ec.message());
  if (!left.empty()) {
    out << fmt::format("note: the temporary weight directory {} still holds {} file(s) ({}); kept\n", dir,
                       left.size(), fmt::join(left, ", "));
    return Status::Ok();
  }
  return weights::RemoveTemporaryWeightDir(dir);
}

std::string DescribeWeight(const weights::ExternalWeightDesc& w) {
  return fmt::format("{}  size {}  offset {}  id {}", w.path, w.size, w.offset, w.id.empty() ? "-" : w.id);
}

// What RunCompile derives from its arguments before it reads the model.
struct CompileSetup {
  graph::CompileOptions options;
  lowering::DumpRequest dump;
  weights::ValueBins value_bins;
  std::optional<AesKey> key;
  enum class Runtime { kV1, kV2, kAuto } runtime = Runtime::kAuto;
  bool writes_weights = false;  // --external_weight 1 or 2
  bool temporary_dir = false;   // ... into a temporary weight directory
  std::string weight_dir;       // absolute, without a trailing '/'; empty unless writes_weights
};

// --stream-mode, --max-parallel, --dump-after and --dump-format.
Status ParsePipelineArgs(const CompileArgs& args, std::ostream& out, CompileSetup& setup) {
  graph::CompileOptions& options = setup.options;
  options.chip = args.chip;
  if (args.stream_mode == "single") {
    options.stream_mode = graph::CompileOptions::StreamMode::kSingle;
  } else if (args.stream_mode == "multi") {
    options.stream_mode = graph::CompileOptions::StreamMode::kMulti;
  } else {
    return Status::ParamInvalid("--stream-mode '{}': expected single or multi", args.stream_mode);
  }
  options.max_parallel = args.max_parallel;
  options.tiling_schedule_optimize = args.tiling_schedule_optimize;
  options.tiling_sink_nops = args.tiling_sink_nops;
  options.tiling_sink_share = args.tiling_sink_share != 0;
  options.online = false;  // atc-like: no device, so the tiling sink's device gate is skipped
  if (args.runtime == "v1") setup.runtime = CompileSetup::Runtime::kV1;
  else if (args.runtime == "v2") setup.runtime = CompileSetup::Runtime::kV2;
  else if (args.runtime == "auto") setup.runtime = CompileSetup::Runtime::kAuto;
  else return Status::ParamInvalid("--runtime '{}': expected v1, v2 or auto", args.runtime);
  NPUFLOW_RETURN_IF_ERROR(v2::ParseExecutorType(args.executor).status());
  lowering::DumpRequest& dump = setup.dump;
  dump.after = args.dump_after;
  if (args.dump_format == "pbtxt") {
    dump.format = lowering::DumpFormat::kText;
  } else if (args.dump_format != "summary") {
    return Status::ParamInvalid("--dump-format '{}': expected summary or pbtxt", args.dump_format);
  }
  dump.sink = [&out](std::string_view pass, const std::string& text) {
    out << "# after " << pass << "\n" << text << "\n";
  };
  return Status::Ok();
}

// External weights and encryption: --external_weight, --value_bins, --encrypt-key and the weight directory.
Status ParseWeightArgs(const CompileArgs& args, CompileSetup& setup) {
  NPUFLOW_ASSIGN_OR_RETURN(weights::ExternalWeightMode mode,
                           weights::ParseExternalWeightMode(args.external_weight, "--external_weight"));
  if (!args.value_bins.empty()) {
    auto bins = weights::ParseValueBins(args.value_bins);
    if (!bins.ok()) return bins.status().WithContext("--value_bins");
    setup.value_bins = std::move(*bins);
  }
  if (!args.encrypt_key.empty()) {
    auto parsed = ParseAesKey(args.encrypt_key);
    if (!parsed.ok()) return parsed.status().WithContext("--encrypt-key");
    setup.key = *parsed;
  }
  setup.writes_weights =
      mode == weights::ExternalWeightMode::kPerWeight || mode == weights::ExternalWeightMode::kCombined;
  setup.temporary_dir = args.external_weight_dir.empty();
  if (setup.writes_weights) {
    std::string& weight_dir = setup.weight_dir;
    weight_dir = fs::absolute(weights::ResolveWeightDir(args.external_weight_dir, 0)).lexically_normal().string();
    while (weight_dir.size() > 1 && weight_dir.back() == '/') weight_dir.pop_back();
    if (setup.key && !setup.temporary_dir && SameFile(weight_dir, ModelWeightDir(args.output)))
      return Status::ParamInvalid(
          "--encrypt-key: --external_weight_dir '{}' is the model's weight directory, where the encrypted copies of "
          "the weights go (they would replace the plain files); choose another directory",
          args.external_weight_dir);
  }
  graph::CompileOptions& options = setup.options;
  options.external_weight = args.external_weight;
  options.external_weight_dir = setup.weight_dir;
  options.model_name = fs::path(args.output).stem().string();
  options.value_bins = args.value_bins;
  return Status::Ok();
}

// A ggml GPT-2 file (recognized by its magic) is imported as its decode step, its weights
// FileConstants pointing into the file; anything else is the text graph format.
StatusOr<std::unique_ptr<graph::ComputeGraph>> ReadModelGraph(const std::string& path, const std::string& name) {
  if (gpt2::IsGgmlFile(path)) {
    NPUFLOW_ASSIGN_OR_RETURN(gpt2::Gpt2File gpt2, gpt2::ReadGpt2File(path));
    return gpt2::BuildGpt2DecodeGraph(gpt2, {.name = name});
  }
  return graph::ReadGraphTextFile(path);
}

// The weight files: out of a temporary directory next to the model; encrypted with a key.
Status PlaceWeightFiles(const CompileArgs& args, const CompileSetup& setup, graph::CompiledModel& model) {
  if (model.graph == nullptr) return Status::Ok();
  std::unordered_map<const graph::Node*, std::string> before;
  for (graph::Node* n : FileConstants(*model.graph)) before.emplace(n, Location(*n));
  NPUFLOW_RETURN_IF_ERROR(weights::RelocateWeightFiles(*model.graph, args.output));
  if (!setup.key) return Status::Ok();
  std::set<const graph::Node*> moved;
  for (graph::Node* n : FileConstants(*model.graph))
    if (auto it = before.find(n); it != before.end() && it->second != Location(*n)) moved.insert(n);
  NPUFLOW_RETURN_IF_ERROR(weights::ResolveFileConstantLocations(*model.graph, setup.value_bins));
  return EncryptWeightFiles(*model.graph, args.output, moved, *setup.key);
}

// Compiles `graph`, checks the plan when asked, places the weight files and writes the model file.
// The output's directory is made if it is not there (atc does the same).
Status MakeOutputDirectory(const std::string& output) {
  if (const fs::path parent = fs::path(output).parent_path(); !parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) return Status::Failed("--output '{}': cannot create its directory: {}", output, ec.message());
  }
  return Status::Ok();
}

Status CompileAndWrite(const CompileArgs& args, const CompileSetup& setup, std::unique_ptr<graph::ComputeGraph> graph,
                       std::optional<graph::CompiledModel>& model, std::ostream& out) {
  auto compiled = lowering::CompileV1(std::move(graph), setup.options, setup.dump);
  if (!compiled.ok()) return compiled.status().WithContext(args.model);
  model = std::move(*compiled);
  if (args.verify) NPUFLOW_RETURN_IF_ERROR(lowering::VerifyMemoryPlan(*model).WithContext("memory plan check"));
  if (args.debug_drop_event >= 0) {
    const auto event = static_cast<std::uint32_t>(args.debug_drop_event);
    const std::vector<std::uint32_t> needed = lowering::DroppableEvents(*model);
    NPUFLOW_RETURN_IF_ERROR(lowering::DropEventPair(*model, event));
    const bool alone = std::find(needed.begin(), needed.end(), event) != needed.end();
    out << fmt::format("debug: event {} dropped (its record and wait are NOPs now); {}\n", event,
                       alone ? "nothing else orders its record before its wait: run with --race-detect to see the race"
                             : "other events still order its record before its wait");
  }
  NPUFLOW_RETURN_IF_ERROR(MakeOutputDirectory(args.output));
  NPUFLOW_RETURN_IF_ERROR(PlaceWeightFiles(args, setup, *model));
  if (setup.writes_weights && setup.temporary_dir)
    NPUFLOW_RETURN_IF_ERROR(CleanTemporaryWeightDir(setup.weight_dir, out));
  return graph::WriteModelFile(*model, args.output, setup.key ? &*setup.key : nullptr);
}

void PrintCompileSummary(const CompileArgs& args, std::size_t nodes, double ms, const graph::CompiledModel& model,
                         bool encrypted, std::ostream& out) {
  std::size_t tasks = 0;
  for (const auto& s : model.streams) tasks += s.tasks.size();
  const auto& m = model.memory;
  out << fmt::format(
      "compiled {} -> {} in {:.1f} ms: {} nodes ({} after passes), {} streams, {} events, {} tasks; feature map "
      "{} bytes (all tensors: {}), weights {} bytes{}{}\n",
      args.model, args.output, ms, nodes, model.graph->node_count(), model.streams.size(), model.event_count, tasks,
      m.bytes(graph::Segment::kFeatureMap) + m.bytes(graph::Segment::kFixedFeatureMap), m.feature_map_tensor_bytes,
      m.bytes(graph::Segment::kWeights), args.verify ? "; memory plan verified" : "",
      encrypted ? "; encrypted (AES-256-GCM)" : "");
  for (const graph::TilingSinkDecision& d : model.tiling_sink) {
    if (d.marked) {
      out << fmt::format("tiling sink: node '{}' ({}) is tiled on the device (AICPU)\n", d.node, d.op_type);
    } else {
      out << fmt::format("tiling sink: node '{}' ({}) takes the dynamic path: gate '{}' failed ({})\n", d.node,
                         d.op_type, d.gate, d.why);
    }
  }
  if (model.graph == nullptr) return;
  const std::vector<weights::ExternalWeightDesc> external = weights::ListExternalWeights(*model.graph);
  if (external.empty()) return;
  std::set<std::string> files;
  std::uint64_t bytes = 0;
  for (const auto& w : external) {
    files.insert(w.path);
    bytes += w.size;
  }
  out << fmt::format("external weights: {} bytes in {} region(s) of {} file(s){}\n", bytes, external.size(),
                     files.size(), encrypted ? ", encrypted" : "");
  for (const auto& w : external) out << "  " << DescribeWeight(w) << "\n";
}

// RT2.0: the execute graphs in a model file of their own (no task lists, no weight relocation:
// FileConstants keep the locations they were given).
Status CompileV2AndWrite(const CompileArgs& args, const CompileSetup& setup, std::unique_ptr<graph::ComputeGraph> graph,
                         std::size_t nodes, std::chrono::steady_clock::time_point start, std::ostream& out) {
  if (setup.writes_weights)
    return Status::ParamInvalid("--external_weight {}: weight files are written for the v1 task sink; RT2.0 reads "
                                "FileConstants where they are (use --runtime v1, or leave --external_weight out)",
                                args.external_weight);
  if (args.verify) return Status::ParamInvalid("--verify checks the v1 task sink's memory plan; this model is RT2.0's");
  auto compiled = lowering::CompileV2Model(std::move(graph), setup.options, setup.dump);
  if (!compiled.ok()) return compiled.status().WithContext(args.model);
  compiled->executor = args.executor;
  NPUFLOW_RETURN_IF_ERROR(MakeOutputDirectory(args.output));
  NPUFLOW_RETURN_IF_ERROR(graph::WriteModelFile(*compiled, args.output, setup.key ? &*setup.key : nullptr));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const exe::ExecuteGraphSet& set = *compiled->execute_graphs;
  out << fmt::format("compiled {} -> {} in {:.1f} ms for RT2.0: {} nodes; Init {}, Main {}, DeInit {} "
                     "execute nodes; executor {}{}\n",
                     args.model, args.output, ms, nodes,
                     set.init->nodes().size(), set.main->nodes().size(), set.deinit->nodes().size(), args.executor,
                     setup.key ? "; encrypted (AES-256-GCM)" : "");
  return Status::Ok();
}

}  // namespace

// --pipeline-stages K: the graph cut into K stages, each compiled for the task sink, in one file.
Status CompilePipelineAndWrite(const CompileArgs& args, const CompileSetup& setup,
                               std::unique_ptr<graph::ComputeGraph> graph, std::size_t nodes,
                               std::chrono::steady_clock::time_point start, std::ostream& out) {
  if (args.pipeline_stages < 1 || args.pipeline_stages > lowering::kMaxPipelineStages)
    return Status::ParamInvalid("--pipeline-stages {}: expected 1..{} (0: an ordinary model)", args.pipeline_stages,
                                lowering::kMaxPipelineStages);
  if (setup.runtime == CompileSetup::Runtime::kV2)
    return Status::ParamInvalid("--pipeline-stages: pipeline stages compile for the v1 task sink; --runtime v2 cannot "
                                "be combined with it");
  if (setup.writes_weights)
    return Status::Unsupported("--external_weight {} with --pipeline-stages: weight files per stage are not written "
                               "yet; keep the weights embedded (or as FileConstants) for a pipeline model",
                               args.external_weight);
  auto compiled = lowering::CompilePipeline(std::move(graph), args.pipeline_stages, setup.options, setup.dump);
  if (!compiled.ok()) return compiled.status().WithContext(args.model);
  if (args.verify)
    for (std::size_t s = 0; s < compiled->stages.size(); ++s)
      NPUFLOW_RETURN_IF_ERROR(
          lowering::VerifyMemoryPlan(*compiled->stages[s]).WithContext(fmt::format("stage {}: memory plan check", s)));
  NPUFLOW_RETURN_IF_ERROR(MakeOutputDirectory(args.output));
  NPUFLOW_RETURN_IF_ERROR(graph::WriteModelFile(*compiled, args.output, setup.key ? &*setup.key : nullptr));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out << fmt::format("compiled {} -> {} in {:.1f} ms: {} nodes in {} pipeline stages{}{}\n", args.model, args.output, ms,
                     nodes, compiled->stages.size(), args.verify ? "; memory plans verified" : "",
                     setup.key ? "; encrypted (AES-256-GCM)" : "");
  out << lowering::DescribePipeline(*compiled);
  return Status::Ok();
}

Status RunCompile(const CompileArgs& args, std::ostream& out) {
  graph::RegisterBuiltinOps();
  CompileSetup setup;
  NPUFLOW_RETURN_IF_ERROR(ParsePipelineArgs(args, out, setup));
  NPUFLOW_RETURN_IF_ERROR(ParseWeightArgs(args, setup));
  NPUFLOW_RETURN_IF_ERROR(lowering::CheckCompileOptions(setup.options));

  const auto start = std::chrono::steady_clock::now();
  NPUFLOW_ASSIGN_OR_RETURN(std::unique_ptr<graph::ComputeGraph> graph,
                           ReadModelGraph(args.model, setup.options.model_name));
  const std::size_t nodes = graph->node_count();
  if (args.debug_drop_event < -1 || args.debug_drop_event > 0xFFFFFFFFll)
    return Status::ParamInvalid("--debug-drop-event {}: expected an event number (0 or more)", args.debug_drop_event);
  if (args.debug_drop_event >= 0 && args.pipeline_stages != 0)
    return Status::ParamInvalid("--debug-drop-event: not with --pipeline-stages (drop the event from one stage's model)");
  if (args.pipeline_stages != 0) return CompilePipelineAndWrite(args, setup, std::move(graph), nodes, start, out);
  if (args.dump_after == lowering::kPartitionStagesPass)
    return Status::ParamInvalid("--dump-after {}: only with --pipeline-stages K", lowering::kPartitionStagesPass);
  const bool v2 = setup.runtime == CompileSetup::Runtime::kV2 ||
                  (setup.runtime == CompileSetup::Runtime::kAuto && lowering::NeedsRuntimeV2(*graph));
  if (v2 && args.debug_drop_event >= 0)
    return Status::ParamInvalid("--debug-drop-event: RT2.0 models have no compiled events (this model compiles for "
                                "RT2.0; use --runtime v1)");
  if (v2) {
    if (setup.writes_weights && setup.temporary_dir && weights::IsTemporaryWeightDir(setup.weight_dir))
      (void)weights::RemoveTemporaryWeightDir(setup.weight_dir);
    return CompileV2AndWrite(args, setup, std::move(graph), nodes, start, out);
  }
  NPUFLOW_RETURN_IF_ERROR(lowering::CheckCompileOptions(setup.options, args.dump_after));
  std::optional<graph::CompiledModel> model;
  if (Status built = CompileAndWrite(args, setup, std::move(graph), model, out); !built.ok()) {
    // Nothing refers to what a failed compile left in its temporary directory.
    std::error_code ec;
    if (setup.writes_weights && setup.temporary_dir && weights::IsTemporaryWeightDir(setup.weight_dir) &&
        fs::exists(setup.weight_dir, ec))
      (void)weights::RemoveTemporaryWeightDir(setup.weight_dir);
    return built;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  PrintCompileSummary(args, nodes, ms, *model, setup.key.has_value(), out);
  return Status::Ok();
}

Status RunInfo(const std::string& path, bool tasks, bool placements, std::ostream& out, const std::string& key_text) {
  graph::RegisterBuiltinOps();
  std::optional<AesKey> key;
  if (!key_text.empty()) {
    auto parsed = ParseAesKey(key_text);
    if (!parsed.ok()) return parsed.status().WithContext("--key");
    key = *parsed;
  }
  auto encrypted = FileIsEncrypted(path);
  const bool is_encrypted = encrypted.ok() && *encrypted;
  if (is_encrypted && !key)
    return Status::ParamInvalid("{}: the model file is encrypted (AES-256-GCM): give its key with --key", path);
  NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel model, graph::ReadModelFile(path, key ? &*key : nullptr));
  out << path << (is_encrypted ? " (encrypted, AES-256-GCM)" : "") << "\n";
  if (!model.stages.empty()) {
    out << lowering::DescribePipeline(model);
    for (std::size_t s = 0; s < model.stages.size(); ++s) {
      out << fmt::format("--- stage {}\n", s) << lowering::DescribeModel(*model.stages[s]);
      if (placements) out << "\n" << lowering::PrintMemoryPlan(*model.stages[s]);
      if (tasks) out << "\n" << lowering::PrintTasks(*model.stages[s]);
    }
    return Status::Ok();
  }
  if (model.execute_graphs) {
    out << fmt::format("runtime: RT2.0{} (executor {})\n", model.streams.empty() ? "" : " and the v1 task sink",
                       model.executor.empty() ? "auto" : model.executor)
        << lowering::PrintExecuteGraphs(*model.execute_graphs, tasks);
    if (model.streams.empty()) return Status::Ok();
  }
  out << lowering::DescribeModel(model);
  if (model.graph != nullptr) {
    const std::vector<weights::ExternalWeightDesc> external = weights::ListExternalWeights(*model.graph);
    if (external.empty()) {
      out << "external weight files: none\n";
    } else {
      const fs::path weight_dir = ModelWeightDir(path);
      out << fmt::format("external weight files: {} region(s)\n", external.size());
      for (const auto& w : external) {
        const fs::path file = ResolveWeightFile(w.path, weight_dir);
        std::error_code ec;
        std::string where;
        if (!fs::exists(file, ec)) where = fmt::format("  (missing: {})", file.string());
        else if (IsBareName(w.path)) where = fmt::format("  ({})", file.string());
        out << "  " << DescribeWeight(w) << where << "\n";
        out << fmt::format("    FileConstant nodes: {}\n", fmt::join(w.nodes, ", "));
      }
    }
  }
  if (placements) out << "\n" << lowering::PrintMemoryPlan(model);
  if (tasks) out << "\n" << lowering::PrintTasks(model);
  return Status::Ok();
}

}  // namespace npuflow::apps
