// Tiling sink figures (seed 003), each against a baseline from the same run:
//   one tiling-dependent op per inference: Attention over a 12-head, 1,024-row f32 cache at
//     valid_len 64, where valid_len = Add(len_in, 1) is computed on the device. Virtual time and
//     host interactions per inference (the benchmark thread's host clock, one inference at a time,
//     inputs and outputs in device memory; RT2.0 still copies its output into the caller's buffer
//     and launches each kernel from the host, part of what the task sink saves):
//       tiling sink     v1 task sink, ge.tiling_schedule_optimize = 1: AICPU tiling on the attached
//                       stream, task update, 8 NOPs, the kernel; one execute message
//       host tiling     RT2.0 (the dynamic path a failed gate takes): the host synchronizes, reads
//                       valid_len back, tiles, sends the parameters and launches
//       host value      RT2.0 with valid_len given by the host (no read back; the Add is on q
//                       instead, so both graphs launch the same kernels): what host tiling costs
//                       without the round trip, so the round trip itself shows
//       worst case      v1 task sink without the option, the op tiled once for S_max
//   GPT-2 117M f16 (the gpt2 area's cached model, or --model), 1 thread, 64 greedy tokens after a
//     4-token prompt: decode tok/s with the option on vs off, and Attention's virtual time per
//     token read from the device trace (gpt2_bench.cc, BM_Gpt2TilingSink).
#include "benchmarks/tiling_bench.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "benchmarks/gpt2_bench.h"
#include "benchmarks/loaded_model.h"
#include "graph/ir/tensor_access.h"
#include "lowering/graph_converter.h"
#include "npu_sim/runtime.h"
#include "scheduler/v2/model_v2_executor.h"

namespace npuflow::bench {
namespace {

constexpr std::int64_t kHeads = 12, kCacheRows = 1024, kHeadDim = 64;
constexpr std::int32_t kValidLen = 64;

graph::Tensor Filled(graph::Shape shape) {
  graph::Tensor t = graph::ZeroTensor({graph::DataType::kFloat32, std::move(shape)});
  const std::size_t n = t.data.size() / 4;
  for (std::size_t i = 0; i < n; ++i) graph::StoreF(t, i, static_cast<float>((i * 37) % 17) / 17.0f - 0.5f);
  return t;
}

// q[12, 1, 64], len_in i32[1] -> Attention(q, cache, cache, len) -> out. `device_len`: len =
// Add(len_in, 1) on the device (len_in = valid_len - 1); else len_in is valid_len itself and the
// one Add is q + 0 (the same kernels either way).
StatusOr<std::unique_ptr<graph::ComputeGraph>> AttentionGraph(bool device_len) {
  auto g = std::make_unique<graph::ComputeGraph>("bench_tiling");
  auto add = [&](const std::string& name, const std::string& type, std::vector<graph::Endpoint> in,
                 std::vector<std::pair<std::string, graph::AttrValue>> attrs = {}) -> StatusOr<graph::Node*> {
    graph::OpDesc op(name, type);
    for (auto& [k, v] : attrs) op.SetAttr(k, v);
    NPUFLOW_ASSIGN_OR_RETURN(graph::Node * n, g->AddNode(std::move(op)));
    for (const graph::Endpoint& e : in) NPUFLOW_RETURN_IF_ERROR(g->AddInput(n, e));
    return n;
  };
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * q, add("q", "Data", {}, {{"dtype", graph::DataType::kFloat32},
                                                                  {"shape", graph::Shape{kHeads, 1, kHeadDim}},
                                                                  {"index", std::int64_t{0}}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * len_in, add("len_in", "Data", {}, {{"dtype", graph::DataType::kInt32},
                                                                            {"shape", graph::Shape{1}},
                                                                            {"index", std::int64_t{1}}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * cache, add("cache", "Const", {}, {{"value", Filled(graph::Shape{kHeads, kCacheRows, kHeadDim})}}));
  graph::Node* len = len_in;
  if (device_len) {
    graph::Tensor one = graph::ZeroTensor({graph::DataType::kInt32, graph::Shape{1}});
    graph::StoreI(one, 0, 1);
    NPUFLOW_ASSIGN_OR_RETURN(graph::Node * c1, add("one", "Const", {}, {{"value", one}}));
    NPUFLOW_ASSIGN_OR_RETURN(len, add("len", "Add", {{len_in, 0}, {c1, 0}}));
  } else {
    graph::Tensor zeros = graph::ZeroTensor({graph::DataType::kFloat32, graph::Shape{kHeads, 1, kHeadDim}});
    NPUFLOW_ASSIGN_OR_RETURN(graph::Node * c0, add("zeros", "Const", {}, {{"value", zeros}}));
    NPUFLOW_ASSIGN_OR_RETURN(q, add("q_plus_0", "Add", {{q, 0}, {c0, 0}}));
  }
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * att, add("att", "Attention", {{q, 0}, {cache, 0}, {cache, 0}, {len, 0}}));
  NPUFLOW_RETURN_IF_ERROR(add("out", "NetOutput", {{att, 0}}).status());
  return g;
}

std::int32_t LenInput(bool device_len) { return device_len ? kValidLen - 1 : kValidLen; }

void RunTaskSink(benchmark::State& state, const std::string& option) {
  graph::CompileOptions co;
  co.tiling_schedule_optimize = option;
  auto loaded = LoadModelForBench(AttentionGraph(true), co, scheduler::LoadConfig{}, 1);
  if (!loaded.ok()) return state.SkipWithError(loaded.status().ToString().c_str());
  LoadedModel& l = **loaded;
  const std::int32_t len = LenInput(true);
  if (Status s = l.rt->MemcpyH2D(0, l.args[0].inputs[1].device, &len, sizeof(len)); !s.ok())
    return state.SkipWithError(s.ToString().c_str());
  PerInference(state, *l.rt, [&] { return l.model->NnExecute(l.args[0]); });
}

void BM_TilingSinkAttention(benchmark::State& state) { RunTaskSink(state, "1"); }
void BM_WorstCaseTilingAttention(benchmark::State& state) { RunTaskSink(state, ""); }

void RunHostTiling(benchmark::State& state, bool device_len) {
  auto set = lowering::CompileV2(AttentionGraph(device_len).value(), graph::CompileOptions{});
  if (!set.ok()) return state.SkipWithError(set.status().ToString().c_str());
  auto rt = npu_sim::Runtime::Create({.chips = {"910B"}, .workers = 2});
  if (!rt.ok()) return state.SkipWithError(rt.status().ToString().c_str());
  auto m = v2::ModelV2Executor::Create(*set, rt->get(), 0);
  if (!m.ok()) return state.SkipWithError(m.status().ToString().c_str());
  if (Status s = (*m)->Load(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  const std::uint64_t q_bytes = kHeads * kHeadDim * 4;
  auto q_ptr = (*rt)->Malloc(0, q_bytes, npu_sim::Placement::kHbm, "bench q");
  auto out_ptr = (*rt)->Malloc(0, q_bytes, npu_sim::Placement::kHbm, "bench output");
  if (!q_ptr.ok() || !out_ptr.ok()) return state.SkipWithError("device memory");
  std::vector<float> q_host(kHeads * kHeadDim, 0.25f);
  if (Status s = (*rt)->MemcpyH2D(0, *q_ptr, q_host.data(), q_bytes); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  // valid_len computed on the device: its input in device memory, as the task sink's benchmark
  // has it. Given by the host: a host tensor, the value tiling reads without a round trip.
  std::int32_t len = LenInput(device_len);
  auto len_ptr = (*rt)->Malloc(0, sizeof(len), npu_sim::Placement::kHbm, "bench len");
  if (!len_ptr.ok()) return state.SkipWithError("device memory");
  if (Status s = (*rt)->MemcpyH2D(0, *len_ptr, &len, sizeof(len)); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  v2::Tensor q, len_t, out;
  q.placement = out.placement = v2::TensorPlacement::kOnDeviceHbm;
  q.addr = q_ptr->value;
  q.size = q_bytes;
  q.shape.dtype = out.shape.dtype = static_cast<std::uint32_t>(graph::DataType::kFloat32);
  q.shape.rank = 3;
  q.shape.dims[0] = kHeads;
  q.shape.dims[1] = 1;
  q.shape.dims[2] = kHeadDim;
  len_t.placement = device_len ? v2::TensorPlacement::kOnDeviceHbm : v2::TensorPlacement::kOnHost;
  len_t.addr = device_len ? len_ptr->value : reinterpret_cast<std::uint64_t>(&len);
  len_t.size = sizeof(len);
  len_t.shape.dtype = static_cast<std::uint32_t>(graph::DataType::kInt32);
  len_t.shape.rank = 1;
  len_t.shape.dims[0] = 1;
  out.addr = out_ptr->value;
  out.size = q_bytes;
  v2::Tensor* ins[] = {&q, &len_t};
  v2::Tensor* outs[] = {&out};
  PerInference(state, **rt, [&] { return (*m)->ExecuteSync(ins, 2, outs, 1); });
  (void)(*m)->UnLoad();
  (void)(*rt)->Free(0, *q_ptr);
  (void)(*rt)->Free(0, *out_ptr);
  (void)(*rt)->Free(0, *len_ptr);
}

void BM_HostTilingAttention(benchmark::State& state) { RunHostTiling(state, true); }
void BM_HostValueTilingAttention(benchmark::State& state) { RunHostTiling(state, false); }

}  // namespace

void RegisterTilingBenchmarks() {
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, void (*)(benchmark::State&)>>{
           {"BM_TilingSinkAttention", BM_TilingSinkAttention},
           {"BM_HostTilingAttention", BM_HostTilingAttention},
           {"BM_HostValueTilingAttention", BM_HostValueTilingAttention},
           {"BM_WorstCaseTilingAttention", BM_WorstCaseTilingAttention}}) {
    benchmark::RegisterBenchmark(name, fn)->UseRealTime();
  }
  RegisterGpt2TilingBenchmarks();
}

std::vector<Figure> TilingFigures(const Results& r) {
  const double sink = Counter(r, "BM_TilingSinkAttention", "virtual_us_per_inference");
  const double host = Counter(r, "BM_HostTilingAttention", "virtual_us_per_inference");
  std::vector<Figure> figures = {
      {"tiling_sink_virtual_us_vs_host_tiling", sink, "us", host,
       "host tiling (RT2.0: synchronize, read valid_len back, tile, send parameters, launch), same op, same run",
       "ratio < 1"},
      {"tiling_sink_host_interactions_vs_host_tiling",
       Counter(r, "BM_TilingSinkAttention", "host_interactions_per_inference"), "calls",
       Counter(r, "BM_HostTilingAttention", "host_interactions_per_inference"), "host tiling, same op, same run", ""},
      {"host_tiling_read_back_virtual_us", host, "us", Counter(r, "BM_HostValueTilingAttention", "virtual_us_per_inference"),
       "host tiling with valid_len given by the host (no read back): the difference is the round trip", ""},
      {"tiling_sink_virtual_us_vs_worst_case", sink, "us",
       Counter(r, "BM_WorstCaseTilingAttention", "virtual_us_per_inference"),
       "v1 task sink tiled once for S_max = 1024, same op, same run", ""},
  };
  for (Figure& f : Gpt2TilingFigures(r)) figures.push_back(std::move(f));
  return figures;
}

}  // namespace npuflow::bench
