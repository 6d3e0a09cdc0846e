#include "apps/compile_cmd.h"

#include <fmt/format.h>

#include <chrono>

#include "graph/model_file.h"
#include "graph/op_registry.h"
#include "graph/text_format.h"
#include "lowering/compiler.h"
#include "lowering/memory_plan.h"
#include "lowering/model_text.h"

namespace npuflow::apps {

Status RunCompile(const CompileArgs& args, std::ostream& out) {
  graph::RegisterBuiltinOps();
  graph::CompileOptions options;
  options.chip = args.chip;
  if (args.stream_mode == "single") {
    options.stream_mode = graph::CompileOptions::StreamMode::kSingle;
  } else if (args.stream_mode == "multi") {
    options.stream_mode = graph::CompileOptions::StreamMode::kMulti;
  } else {
    return Status::ParamInvalid("--stream-mode '{}': expected single or multi", args.stream_mode);
  }
  options.max_parallel = args.max_parallel;
  lowering::DumpRequest dump;
  dump.after = args.dump_after;
  if (args.dump_format == "pbtxt") {
    dump.format = lowering::DumpFormat::kText;
  } else if (args.dump_format != "summary") {
    return Status::ParamInvalid("--dump-format '{}': expected summary or pbtxt", args.dump_format);
  }
  dump.sink = [&](std::string_view pass, const std::string& text) {
    out << "# after " << pass << "\n" << text << "\n";
  };
  NPUFLOW_RETURN_IF_ERROR(lowering::CheckCompileOptions(options, args.dump_after));

  const auto start = std::chrono::steady_clock::now();
  NPUFLOW_ASSIGN_OR_RETURN(auto graph, graph::ReadGraphTextFile(args.model));
  const std::size_t nodes = graph->node_count();
  auto model = lowering::CompileV1(std::move(graph), options, dump);
  if (!model.ok()) return model.status().WithContext(args.model);
  if (args.verify) NPUFLOW_RETURN_IF_ERROR(lowering::VerifyMemoryPlan(*model).WithContext("memory plan check"));
  NPUFLOW_RETURN_IF_ERROR(graph::WriteModelFile(*model, args.output));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  std::size_t tasks = 0;
  for (const auto& s : model->streams) tasks += s.tasks.size();
  const auto& m = model->memory;
  out << fmt::format(
      "compiled {} -> {} in {:.1f} ms: {} nodes ({} after passes), {} streams, {} events, {} tasks; feature map "
      "{} bytes (all tensors: {}), weights {} bytes{}\n",
      args.model, args.output, ms, nodes, model->graph->node_count(), model->streams.size(), model->event_count, tasks,
      m.bytes(graph::Segment::kFeatureMap) + m.bytes(graph::Segment::kFixedFeatureMap), m.feature_map_tensor_bytes,
      m.bytes(graph::Segment::kWeights), args.verify ? "; memory plan verified" : "");
  return Status::Ok();
}

Status RunInfo(const std::string& path, bool tasks, bool placements, std::ostream& out) {
  graph::RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel model, graph::ReadModelFile(path));
  out << path << "\n" << lowering::DescribeModel(model);
  if (placements) out << "\n" << lowering::PrintMemoryPlan(model);
  if (tasks) out << "\n" << lowering::PrintTasks(model);
  return Status::Ok();
}

}  // namespace npuflow::apps
