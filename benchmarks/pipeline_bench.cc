// The pipeline area (`npuflow bench pipeline`):
//   - the stage hand-off: wall time per step of a pipeline of 4 trivial stages (one Relu on
//     f32[16] each, one device, one step at a time) against the same device work with no
//     machinery (the 4 compiled stage models and the step's H2D and D2H issued on one stream, one
//     synchronize). The difference is what the pipeline costs a step: the flow graph's hops, a
//     synchronize per stage, the step's bookkeeping. Also against a caller calling the 4 stage
//     models one after another with synchronous NnExecutes.
//   - the same pipeline with 8 steps in flight: wall time per step;
//   - GPT-2 117M f16 as a pipeline (benchmarks/gpt2_bench.cc, BM_Gpt2Pipeline).
#include "benchmarks/pipeline_bench.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "benchmarks/gpt2_bench.h"
#include "graph/ops/op_registry.h"
#include "lowering/partition_stages.h"
#include "npu_sim/chip_spec.h"
#include "scheduler/davinci_model.h"
#include "scheduler/model_manager.h"
#include "scheduler/pipeline_executor.h"
#include "synthetic/graphs.h"

namespace npuflow::bench {
namespace {

constexpr int kStages = 4;
constexpr std::int64_t kWidth = 16;

StatusOr<std::unique_ptr<scheduler::PipelineExecutor>> TrivialPipeline(int max_in_flight) {
  graph::RegisterBuiltinOps();
  NPUFLOW_ASSIGN_OR_RETURN(auto g, synthetic::MakeChainGraph(kStages, kWidth));
  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::ChipSpec chip, npu_sim::LoadChipSpec("910B"));
  NPUFLOW_ASSIGN_OR_RETURN(auto root, lowering::PartitionStages(*g, kStages, chip));
  return scheduler::PipelineExecutor::Create(*root, {.devices = 1, .max_in_flight = max_in_flight});
}

graph::Tensor Input() {
  graph::Tensor t{graph::TensorDesc{graph::DataType::kFloat32, graph::Shape{kWidth}},
                  std::vector<std::uint8_t>(kWidth * sizeof(float))};
  for (std::int64_t i = 0; i < kWidth; ++i) {
    const float v = static_cast<float>(i) / kWidth - 0.5f;
    std::memcpy(t.data.data() + i * sizeof(float), &v, sizeof(float));
  }
  return t;
}

Status WithDevices(int devices, const std::function<Status()>& body) {
  return scheduler::ModelManager::RunInitialized(
      {.chips = std::vector<std::string>(static_cast<std::size_t>(devices), "910B"), .workers = 2}, body);
}

void BM_PipelineHandOff(benchmark::State& state) {
  Status s = WithDevices(1, [&]() -> Status {
    NPUFLOW_ASSIGN_OR_RETURN(auto p, TrivialPipeline(1));
    const graph::Tensor in = Input();
    for (auto _ : state) {
      auto out = p->Execute({in});
      if (!out.ok()) return out.status();
      benchmark::DoNotOptimize(out->data());
    }
    return p->Unload();
  });
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  state.SetItemsProcessed(state.iterations());
}

void BM_PipelineInFlight(benchmark::State& state) {
  constexpr int kInFlight = 8;
  Status s = WithDevices(1, [&]() -> Status {
    NPUFLOW_ASSIGN_OR_RETURN(auto p, TrivialPipeline(kInFlight));
    const graph::Tensor in = Input();
    for (auto _ : state) {
      std::vector<actors::Future<StatusOr<std::vector<graph::Tensor>>>> futures;
      for (int i = 0; i < kInFlight; ++i) futures.push_back(p->Submit({in}));
      for (auto& f : futures) {
        auto out = f.Get();
        if (!out.ok()) return out.status();
      }
    }
    return p->Unload();
  });
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  state.SetItemsProcessed(state.iterations() * kInFlight);
}

// The same 4 stage models, loaded apart from the pipeline, on one device: `body` gets them and
// device buffers buf[0..4] (stage s reads buf[s], writes buf[s + 1]).
Status WithStageModels(const std::function<Status(const std::vector<std::shared_ptr<scheduler::DavinciModel>>&,
                                                  const std::vector<npu_sim::DevicePtr>&)>& body) {
  return WithDevices(1, [&]() -> Status {
    NPUFLOW_ASSIGN_OR_RETURN(auto p, TrivialPipeline(1));
    scheduler::ModelManager& mm = *scheduler::ModelManager::Get();
    npu_sim::Runtime& rt = mm.runtime();
    std::vector<std::shared_ptr<scheduler::DavinciModel>> models;
    std::vector<std::uint32_t> ids;
    for (int st = 0; st < kStages; ++st) {
      NPUFLOW_ASSIGN_OR_RETURN(std::uint32_t id, mm.LoadModelOnline(p->stage_model_shared(st), {}));
      ids.push_back(id);
      NPUFLOW_ASSIGN_OR_RETURN(auto m, mm.GetModel(id));
      models.push_back(std::move(m));
    }
    std::vector<npu_sim::DevicePtr> buf;
    for (int i = 0; i <= kStages; ++i) {
      NPUFLOW_ASSIGN_OR_RETURN(npu_sim::DevicePtr b, rt.Malloc(0, 64));
      buf.push_back(b);
    }
    Status s = body(models, buf);
    for (npu_sim::DevicePtr b : buf) (void)rt.Free(0, b);
    models.clear();
    for (std::uint32_t id : ids) (void)mm.Unload(id);
    (void)p->Unload();
    return s;
  });
}

// A caller calling the stages one after another: H2D, four synchronous zero-copy NnExecutes (each
// stage's output buffer the next one's input), D2H.
void BM_FunctionCallChain(benchmark::State& state) {
  Status s = WithStageModels([&](const auto& models, const auto& buf) -> Status {
    npu_sim::Runtime& rt = scheduler::ModelManager::Get()->runtime();
    const std::uint64_t bytes = kWidth * sizeof(float);
    const graph::Tensor in = Input();
    std::vector<std::uint8_t> out(bytes);
    for (auto _ : state) {
      NPUFLOW_RETURN_IF_ERROR(rt.MemcpyH2D(0, buf[0], in.data.data(), bytes));
      for (int st = 0; st < kStages; ++st) {
        scheduler::ExecuteArgs args;
        args.inputs.push_back(scheduler::DataBuffer::Device(buf[st], bytes));
        args.outputs.push_back(scheduler::DataBuffer::Device(buf[st + 1], bytes));
        NPUFLOW_RETURN_IF_ERROR(models[st]->NnExecute(args));
      }
      NPUFLOW_RETURN_IF_ERROR(rt.MemcpyD2H(0, out.data(), buf[kStages], bytes));
      benchmark::DoNotOptimize(out.data());
    }
    return Status::Ok();
  });
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  state.SetItemsProcessed(state.iterations());
}

// The same device work with no machinery at all: H2D, the four model executions and D2H issued on
// one stream, one synchronize per step.
void BM_StreamChain(benchmark::State& state) {
  Status s = WithStageModels([&](const auto& models, const auto& buf) -> Status {
    npu_sim::Runtime& rt = scheduler::ModelManager::Get()->runtime();
    const std::uint64_t bytes = kWidth * sizeof(float);
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Stream stream, rt.CreateStream(0));
    const graph::Tensor in = Input();
    std::vector<std::uint8_t> out(bytes);
    Status run;
    for (auto _ : state) {
      run = rt.MemcpyH2DAsync(stream, buf[0], in.data.data(), bytes);
      for (int st = 0; st < kStages && run.ok(); ++st)
        run = rt.ExecuteModelOnStream(models[st]->device_model(0), stream, {buf[st].value, buf[st + 1].value});
      if (run.ok()) run = rt.MemcpyD2HAsync(stream, out.data(), buf[kStages], bytes);
      if (run.ok()) run = rt.SynchronizeStream(stream);
      if (!run.ok()) break;
      benchmark::DoNotOptimize(out.data());
    }
    (void)rt.DestroyStream(stream);
    return run;
  });
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

void RegisterPipelineBenchmarks() {
  benchmark::RegisterBenchmark("BM_PipelineHandOff", BM_PipelineHandOff)->UseRealTime();
  benchmark::RegisterBenchmark("BM_PipelineInFlight", BM_PipelineInFlight)->UseRealTime();
  benchmark::RegisterBenchmark("BM_FunctionCallChain", BM_FunctionCallChain)->UseRealTime();
  benchmark::RegisterBenchmark("BM_StreamChain", BM_StreamChain)->UseRealTime();
  RegisterGpt2PipelineBenchmarks();
}

std::vector<Figure> PipelineFigures(const Results& r) {
  const double pipeline_us = NsPer(r, "BM_PipelineHandOff") / 1e3;
  const double stream_us = NsPer(r, "BM_StreamChain") / 1e3;
  std::vector<Figure> figures = {
      {"pipeline_step_us_4_trivial_stages", pipeline_us, "us", stream_us,
       "the same device work without the pipeline: H2D, the 4 stage models and D2H issued on one stream, one "
       "synchronize per step, same run",
       ""},
      {"pipeline_handoff_us_per_stage", (pipeline_us - stream_us) / kStages, "us", stream_us / kStages,
       "a stage's share of that stream chain; the figure is the pipeline's extra wall time per stage hop (its "
       "flow-graph hop, its own synchronize), same run",
       ""},
      {"pipeline_step_us_vs_synchronous_calls", pipeline_us, "us", NsPer(r, "BM_FunctionCallChain") / 1e3,
       "a caller calling the 4 stage models one after another (H2D, 4 synchronous zero-copy NnExecutes, D2H), same "
       "run",
       ""},
      {"pipeline_step_us_8_in_flight", NsPer(r, "BM_PipelineInFlight") / 1e3, "us", pipeline_us,
       "one step at a time through the same pipeline, same run", "ratio < 1"},
  };
  for (Figure& f : Gpt2PipelineFigures(r)) figures.push_back(std::move(f));
  return figures;
}

}  // namespace npuflow::bench
