#include "lowering/model_text.h"

#include <fmt/format.h>

#include <map>
#include <sstream>

namespace npuflow::lowering {
namespace {

using graph::Segment;

std::string Ref(const graph::MemRef& r) {
  if (r.segment == Segment::kNone) return "none";
  return fmt::format("{}+{}", graph::SegmentName(r.segment), r.offset);
}

constexpr Segment kSegments[] = {Segment::kWeights,   Segment::kFixedFeatureMap, Segment::kFeatureMap,
                                 Segment::kVariables, Segment::kInput,           Segment::kOutput,
                                 Segment::kTilingData};

std::string Summary(const graph::CompiledModel& model) {
  const auto& m = model.memory;
  std::string out = "segment    bytes\n";
  for (Segment s : kSegments) out += fmt::format("{:<10} {}\n", graph::SegmentName(s), m.bytes(s));
  const std::uint64_t peak = m.bytes(Segment::kFeatureMap) + m.bytes(Segment::kFixedFeatureMap);
  const double pct = m.feature_map_tensor_bytes ? 100.0 * peak / m.feature_map_tensor_bytes : 0.0;
  out += fmt::format("feature map peak {} bytes (fixed {} + refreshable {}) vs {} bytes for all its tensors ({:.1f}%)\n",
                     peak, m.bytes(Segment::kFixedFeatureMap), m.bytes(Segment::kFeatureMap),
                     m.feature_map_tensor_bytes, pct);
  return out;
}

std::string TaskLine(const graph::TaskDef& t) {
  switch (t.type) {
    case graph::TaskType::kKernel:
    case graph::TaskType::kAicpuKernel: {
      std::string args;
      for (const graph::MemRef& r : t.args) args += (args.empty() ? "" : ", ") + Ref(r);
      const std::string block_dim = t.block_dim == graph::kTilingSinkBlockDim ? std::string("0xFFFFFFFF (tiling sink)")
                                                                                : std::to_string(t.block_dim);
      return fmt::format("{} {} {} block_dim={} tiling_key={} args=[{}]", graph::TaskTypeName(t.type), t.node,
                         t.kernel, block_dim, t.tiling_key, args);
    }
    case graph::TaskType::kMemcpy:
      return fmt::format("memcpy {} {} -> {} ({} bytes)", t.node, Ref(t.src), Ref(t.dst), t.bytes);
    case graph::TaskType::kEventRecord:
    case graph::TaskType::kEventWait:
      return fmt::format("{} e{} ({})", graph::TaskTypeName(t.type), t.event, t.node);
    case graph::TaskType::kNop: return t.node.empty() ? "nop" : fmt::format("nop ({})", t.node);
    case graph::TaskType::kTaskUpdate:
      return fmt::format("task_update {}: stream {} task {}, block_dim at {}, tiling_key at {}", t.node,
                         t.target_stream, t.target_task, Ref(t.block_dim_ref), Ref(t.tiling_key_ref));
  }
  return "?";
}

}  // namespace

std::string PrintMemoryPlan(const graph::CompiledModel& model) {
  std::string out = "memory plan\n" + Summary(model);
  for (const graph::TensorPlacement& t : model.memory.tensors)
    out += fmt::format("  {}:{} {} {} bytes, live {}..{}\n", t.node, t.output, Ref(t.ref), t.bytes, t.first_use,
                       t.last_use);
  return out;
}

std::string PrintTasks(const graph::CompiledModel& model) {
  std::string out;
  for (const graph::StreamDef& s : model.streams) {
    out += fmt::format("stream {} ({}{}): {} tasks\n", s.id, graph::OpEngineName(s.engine),
                       s.name.empty() ? "" : ", " + s.name, s.tasks.size());
    for (std::size_t i = 0; i < s.tasks.size(); ++i) out += fmt::format("  {} {}\n", i, TaskLine(s.tasks[i]));
  }
  return out;
}

std::string DescribeModel(const graph::CompiledModel& model) {
  std::string out;
  const char* mode = model.options.stream_mode == graph::CompileOptions::StreamMode::kSingle ? "single" : "multi";
  out += fmt::format("model {}: chip {}, stream mode {}, max parallel {}\n", model.graph ? model.graph->name() : "?",
                     model.chip, mode, model.options.max_parallel);
  out += fmt::format("\ninputs ({}):\n", model.inputs.size());
  for (const graph::IoDef& io : model.inputs) out += fmt::format("  {} {} at {}\n", io.name, io.desc.ToString(), Ref(io.ref));
  out += fmt::format("outputs ({}):\n", model.outputs.size());
  for (const graph::IoDef& io : model.outputs) out += fmt::format("  {} {} at {}\n", io.name, io.desc.ToString(), Ref(io.ref));

  if (model.graph) {
    std::map<std::string, int> by_type;
    for (const graph::Node* n : model.graph->nodes()) ++by_type[n->type()];
    out += fmt::format("\nnodes ({}):", model.graph->node_count());
    for (const auto& [type, count] : by_type) out += fmt::format(" {} {}", type, count);
    out += "\n";
    for (const graph::Node* n : model.graph->nodes()) {
      auto stream = n->op().AttrOr<std::int64_t>("_stream", -1);
      std::string outs;
      for (const graph::TensorDesc& d : n->outputs()) outs += (outs.empty() ? "" : ", ") + d.ToString();
      out += fmt::format("  {} {} -> {}{}\n", n->name(), n->type(), outs.empty() ? "()" : outs,
                         stream.ok() && *stream >= 0 ? fmt::format(" on stream {}", *stream) : "");
    }
  }

  out += fmt::format("\nstreams ({}), events {}:\n", model.streams.size(), model.event_count);
  {
    // What one execution runs: the tasks of every stream, and the kernel blocks AICore dispatches
    // (a tiling-sink kernel's block count is decided on the device: counted as one).
    std::map<graph::TaskType, int> counts;
    std::size_t tasks = 0, blocks = 0;
    for (const graph::StreamDef& s : model.streams) {
      tasks += s.tasks.size();
      for (const graph::TaskDef& t : s.tasks) {
        ++counts[t.type];
        if (t.type == graph::TaskType::kKernel) blocks += t.block_dim == graph::kTilingSinkBlockDim ? 1 : t.block_dim;
      }
    }
    std::string parts;
    for (const auto& [type, count] : counts) parts += fmt::format(", {} {}", graph::TaskTypeName(type), count);
    out += fmt::format("  per execution: {} tasks{}; {} AICore kernel blocks\n", tasks, parts, blocks);
  }
  for (const graph::StreamDef& s : model.streams) {
    std::map<graph::TaskType, int> counts;
    for (const graph::TaskDef& t : s.tasks) ++counts[t.type];
    std::string parts;
    for (const auto& [type, count] : counts) parts += fmt::format(", {} {}", graph::TaskTypeName(type), count);
    out += fmt::format("  stream {} ({}): {} tasks{}\n", s.id, graph::OpEngineName(s.engine), s.tasks.size(), parts);
  }
  out += "\nmemory plan:\n" + Summary(model);
  return out;
}

std::string CommentLines(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out += (line.empty() ? "#" : "# " + line) + "\n";
  return out;
}

}  // namespace npuflow::lowering
