#include "benchmarks/loaded_model.h"

#include "graph/ops/op_registry.h"
#include "lowering/compiler.h"

namespace npuflow::bench {

using scheduler::DataBuffer;

StatusOr<std::unique_ptr<LoadedModel>> LoadModelForBench(StatusOr<std::unique_ptr<graph::ComputeGraph>> graph,
                                                         graph::CompileOptions options, scheduler::LoadConfig config,
                                                         int clients) {
  graph::RegisterBuiltinOps();
  if (!graph.ok()) return graph.status();
  NPUFLOW_ASSIGN_OR_RETURN(graph::CompiledModel compiled, lowering::CompileV1(std::move(*graph), options));
  auto model = std::make_shared<const graph::CompiledModel>(std::move(compiled));
  auto l = std::make_unique<LoadedModel>();
  NPUFLOW_ASSIGN_OR_RETURN(l->rt, npu_sim::Runtime::Create({.chips = {model->chip}, .workers = 2}));
  l->model = std::make_unique<scheduler::DavinciModel>(l->rt.get(), 1, model, std::move(config));
  NPUFLOW_RETURN_IF_ERROR(l->model->Init());
  for (int c = 0; c < clients; ++c) {
    scheduler::ExecuteArgs args;
    for (const graph::IoDef& io : model->inputs) {
      const std::uint64_t bytes = io.desc.bytes().value_or(0);
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, l->rt->Malloc(0, bytes, npu_sim::Placement::kHbm, "bench input"));
      std::vector<float> values(bytes / sizeof(float), 0.5f);
      NPUFLOW_RETURN_IF_ERROR(l->rt->MemcpyH2D(0, p, values.data(), bytes));
      args.inputs.push_back(DataBuffer::Device(p, bytes));
    }
    for (const graph::IoDef& io : model->outputs) {
      const std::uint64_t bytes = io.desc.bytes().value_or(0);
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr p, l->rt->Malloc(0, bytes, npu_sim::Placement::kHbm, "bench output"));
      args.outputs.push_back(DataBuffer::Device(p, bytes));
    }
    l->args.push_back(std::move(args));
  }
  return l;
}

}  // namespace npuflow::bench
