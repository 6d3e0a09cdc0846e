// RT2.0 executor figures (scheduler/v2/), each against a baseline from the same run:
//   sequential executor, 100,000-node chain of trivial kernels (out = in + 1 on chain words):
//     ns per node vs a plain function-pointer loop over the same {fn, ctx} array, and vs oneTBB's
//     flow graph running the same kernels as a chain of continue_nodes (the peer).
//   topological executor, random 100,000-node DAG (1-3 inputs each, from the last 64 nodes):
//     ns per node vs a bare ready-counter loop (counters, CSR successors, a FIFO, the same
//     kernels); the priority executor on the same DAG, same baseline.
//   multi-thread executor, 2 threads, a wide DAG (16 layers of 64 nodes, each reading 2 nodes of
//     the layer before) of 10 us kernels: nodes per second vs the sequential executor.
//   the same MLP (x[8, 64] -> MatMul+bias -> Gelu -> MatMul -> Tanh -> MatMul -> Softmax) on the
//     v1 task sink (DavinciModel::NnExecute: one execute message) and on RT2.0 (ModelV2Executor::
//     ExecuteSync: the host launches every kernel), inputs and outputs in device memory for both,
//     one inference at a time: host interactions and virtual time per inference (the benchmark
//     thread's host clock), RT2.0 vs the task sink; and RT2.0 with the batch unknown until run
//     time (InferShape and Tiling on the host per run) vs the same model compiled static.
#include "benchmarks/v2_bench.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <oneapi/tbb/flow_graph.h>

#include "benchmarks/loaded_model.h"
#include "graph/exe_graph/exe_graph.h"
#include "graph/exe_graph/kernel_registry.h"
#include "graph/ir/tensor_access.h"
#include "lowering/graph_converter.h"
#include "npu_sim/runtime.h"
#include "scheduler/v2/executors.h"
#include "scheduler/v2/model_v2_executor.h"

namespace npuflow::bench {
namespace {

using exe::KernelContext;

constexpr int kChainNodes = 100'000;
constexpr int kDagNodes = 100'000;
constexpr int kWideLayers = 16;
constexpr int kWideWidth = 64;
constexpr auto kWideKernel = std::chrono::microseconds(10);

std::uint32_t IncRun(KernelContext* ctx) {
  ctx->output(0).Set<std::int64_t>(ctx->num_inputs ? ctx->input(0).Get<std::int64_t>() + 1 : 1);
  return exe::kKernelSuccess;
}

std::uint32_t SumRun(KernelContext* ctx) {
  std::uint64_t sum = ctx->node_id;  // wrapping
  for (std::uint32_t i = 0; i < ctx->num_inputs; ++i) sum += ctx->input(i).Get<std::uint64_t>();
  ctx->output(0).Set<std::int64_t>(sum);
  return exe::kKernelSuccess;
}

std::uint32_t SpinRun(KernelContext* ctx) {
  const auto end = std::chrono::steady_clock::now() + kWideKernel;
  while (std::chrono::steady_clock::now() < end) {
  }
  return SumRun(ctx);
}

void RegisterKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    exe::KernelRegister("Bench.Inc").RunFunc(IncRun);
    exe::KernelRegister("Bench.Sum").RunFunc(SumRun);
    exe::KernelRegister("Bench.Spin10us").RunFunc(SpinRun);
  });
}

exe::ExeNode Node(int i, const char* kernel, std::vector<int> in, int out) {
  exe::ExeNode n;
  n.name = "n" + std::to_string(i);
  n.kernel = kernel;
  n.inputs = std::move(in);
  n.outputs = {out};
  return n;
}

std::shared_ptr<const exe::ExecuteGraph> Chain() {
  static const std::shared_ptr<const exe::ExecuteGraph> graph = [] {
    auto g = std::make_shared<exe::ExecuteGraph>("chain");
    for (int i = 0; i < kChainNodes; ++i) {
      const int v = g->AddValue("v" + std::to_string(i));
      (void)g->AddNode(Node(i, "Bench.Inc", i ? std::vector<int>{v - 1} : std::vector<int>{}, v));
    }
    g->AddOutput(kChainNodes - 1);
    return g;
  }();
  return graph;
}

std::shared_ptr<const exe::ExecuteGraph> RandomDag() {
  static const std::shared_ptr<const exe::ExecuteGraph> graph = [] {
    std::mt19937 rng(2026);
    auto g = std::make_shared<exe::ExecuteGraph>("dag");
    for (int i = 0; i < kDagNodes; ++i) {
      const int v = g->AddValue("v" + std::to_string(i));
      std::vector<int> in;
      const int fan = i == 0 ? 0 : 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < fan; ++k) in.push_back(std::max(0, i - 1 - static_cast<int>(rng() % 64)));
      std::sort(in.begin(), in.end());
      in.erase(std::unique(in.begin(), in.end()), in.end());
      exe::ExeNode n = Node(i, "Bench.Sum", in, v);
      n.priority = static_cast<std::int64_t>(rng() % 1000);
      (void)g->AddNode(std::move(n));
    }
    return g;
  }();
  return graph;
}

std::shared_ptr<const exe::ExecuteGraph> WideDag() {
  static const std::shared_ptr<const exe::ExecuteGraph> graph = [] {
    std::mt19937 rng(7);
    auto g = std::make_shared<exe::ExecuteGraph>("wide");
    for (int layer = 0; layer < kWideLayers; ++layer) {
      for (int k = 0; k < kWideWidth; ++k) {
        const int i = layer * kWideWidth + k;
        const int v = g->AddValue("v" + std::to_string(i));
        std::vector<int> in;
        if (layer > 0) {
          const int a = (layer - 1) * kWideWidth + static_cast<int>(rng() % kWideWidth);
          const int b = (layer - 1) * kWideWidth + static_cast<int>(rng() % kWideWidth);
          in = a == b ? std::vector<int>{a} : std::vector<int>{a, b};
        }
        (void)g->AddNode(Node(i, "Bench.Spin10us", in, v));
      }
    }
    return g;
  }();
  return graph;
}

std::unique_ptr<v2::ExeGraphExecutor> MakeExecutor(std::shared_ptr<const exe::ExecuteGraph> g, v2::ExecutorType type,
                                                   benchmark::State& state) {
  RegisterKernels();
  auto e = v2::ExeGraphExecutor::Create(std::move(g), type, 2);
  if (!e.ok()) {
    state.SkipWithError(e.status().ToString().c_str());
    return nullptr;
  }
  return *std::move(e);
}

void RunExecutor(benchmark::State& state, std::shared_ptr<const exe::ExecuteGraph> g, v2::ExecutorType type) {
  auto e = MakeExecutor(g, type, state);
  if (!e) return;
  for (auto _ : state) {
    Status s = e->Execute(nullptr);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(g->nodes().size()));
}

void BM_V2SequentialChain(benchmark::State& state) { RunExecutor(state, Chain(), v2::ExecutorType::kSequentialPriority); }
void BM_V2TopologicalChain(benchmark::State& state) { RunExecutor(state, Chain(), v2::ExecutorType::kTopological); }

// The plain loop: the same kernels on the same contexts, nothing else.
void BM_PlainFunctionLoopChain(benchmark::State& state) {
  auto e = MakeExecutor(Chain(), v2::ExecutorType::kSequentialPriority, state);
  if (!e) return;
  const std::vector<v2::ExecNode> nodes = e->data().sequence;
  for (auto _ : state) {
    for (const v2::ExecNode& n : nodes) n.fn(n.ctx);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kChainNodes);
}

// The peer: oneTBB's flow graph, one continue_node per node, the same kernels and contexts.
void BM_TbbFlowGraphChain(benchmark::State& state) {
  auto e = MakeExecutor(Chain(), v2::ExecutorType::kSequentialPriority, state);
  if (!e) return;
  namespace flow = tbb::flow;
  flow::graph graph;
  std::vector<std::unique_ptr<flow::continue_node<flow::continue_msg>>> nodes;
  nodes.reserve(kChainNodes);
  for (const v2::ExecNode& n : e->data().sequence) {
    nodes.push_back(std::make_unique<flow::continue_node<flow::continue_msg>>(
        graph, [n](const flow::continue_msg&) { n.fn(n.ctx); }));
    if (nodes.size() > 1) flow::make_edge(*nodes[nodes.size() - 2], *nodes.back());
  }
  for (auto _ : state) {
    nodes.front()->try_put(flow::continue_msg());
    graph.wait_for_all();
  }
  state.SetItemsProcessed(state.iterations() * kChainNodes);
}

void BM_V2TopologicalDag(benchmark::State& state) { RunExecutor(state, RandomDag(), v2::ExecutorType::kTopological); }
void BM_V2PriorityDag(benchmark::State& state) { RunExecutor(state, RandomDag(), v2::ExecutorType::kTopologicalPriority); }

// The bare ready-counter loop: counters, CSR successors, a FIFO; the same kernels and contexts.
void BM_BareReadyCounterDag(benchmark::State& state) {
  auto e = MakeExecutor(RandomDag(), v2::ExecutorType::kTopological, state);
  if (!e) return;
  const v2::ExecutionData& d = e->data();
  const std::vector<v2::ExecNode> nodes = d.nodes;
  std::vector<std::uint32_t> offsets, succ;  // plain CSR, no groups
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    offsets.push_back(static_cast<std::uint32_t>(succ.size()));
    const std::uint32_t g = d.group_begin[i];
    succ.insert(succ.end(), d.succ.begin() + d.group_offset[g], d.succ.begin() + d.group_offset[g + 1]);
  }
  offsets.push_back(static_cast<std::uint32_t>(succ.size()));
  const std::vector<std::int32_t> init = d.init_counter;
  std::vector<std::int32_t> counter = init;
  // A FIFO, as the topological executor's: on this DAG it runs in about node order, which is
  // kinder to the caches than a stack (measured: a stack took 1.8x as long).
  std::vector<std::uint32_t> fifo(nodes.size());
  for (auto _ : state) {
    std::size_t head = 0, tail = 0;
    for (std::uint32_t r : d.roots) fifo[tail++] = r;
    while (head != tail) {
      const std::uint32_t id = fifo[head++];
      nodes[id].fn(nodes[id].ctx);
      for (std::uint32_t k = offsets[id]; k < offsets[id + 1]; ++k) {
        const std::uint32_t s = succ[k];
        if (--counter[s] == 0) {
          counter[s] = init[s];
          fifo[tail++] = s;
        }
      }
    }
  }
  state.SetItemsProcessed(state.iterations() * kDagNodes);
}

void BM_V2SequentialWide10us(benchmark::State& state) {
  RunExecutor(state, WideDag(), v2::ExecutorType::kSequentialPriority);
}
void BM_V2MultiThreadWide10us(benchmark::State& state) {
  RunExecutor(state, WideDag(), v2::ExecutorType::kTopologicalMultiThread);
}

// --- v1 vs RT2.0 on one MLP.

constexpr std::int64_t kMlpBatch = 8;

graph::Tensor Filled(graph::Shape shape, float scale) {
  graph::Tensor t = graph::ZeroTensor({graph::DataType::kFloat32, std::move(shape)});
  const std::size_t n = t.data.size() / 4;
  for (std::size_t i = 0; i < n; ++i) graph::StoreF(t, i, scale * static_cast<float>((i * 37) % 17) / 17.0f - scale / 2);
  return t;
}

StatusOr<std::unique_ptr<graph::ComputeGraph>> Mlp(graph::Dim batch) {
  auto g = std::make_unique<graph::ComputeGraph>("bench_mlp");
  auto add = [&](const std::string& name, const std::string& type, std::vector<graph::Endpoint> in,
                 std::vector<std::pair<std::string, graph::AttrValue>> attrs = {}) -> StatusOr<graph::Node*> {
    graph::OpDesc op(name, type);
    for (auto& [k, v] : attrs) op.SetAttr(k, v);
    NPUFLOW_ASSIGN_OR_RETURN(graph::Node * n, g->AddNode(std::move(op)));
    for (const graph::Endpoint& e : in) NPUFLOW_RETURN_IF_ERROR(g->AddInput(n, e));
    return n;
  };
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * x, add("x", "Data", {}, {{"dtype", graph::DataType::kFloat32},
                                                                  {"shape", graph::Shape({batch, graph::Dim::Static(64)})}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * w1, add("w1", "Const", {}, {{"value", Filled(graph::Shape{64, 128}, 0.2f)}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * b1, add("b1", "Const", {}, {{"value", Filled(graph::Shape{128}, 0.1f)}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * w2, add("w2", "Const", {}, {{"value", Filled(graph::Shape{128, 64}, 0.2f)}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * w3, add("w3", "Const", {}, {{"value", Filled(graph::Shape{64, 16}, 0.2f)}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * h1, add("h1", "MatMul", {{x, 0}, {w1, 0}, {b1, 0}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * g1, add("g1", "Gelu", {{h1, 0}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * h2, add("h2", "MatMul", {{g1, 0}, {w2, 0}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * t2, add("t2", "Tanh", {{h2, 0}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * h3, add("h3", "MatMul", {{t2, 0}, {w3, 0}}));
  NPUFLOW_ASSIGN_OR_RETURN(graph::Node * sm, add("probs", "Softmax", {{h3, 0}}, {{"axis", std::int64_t{-1}}}));
  NPUFLOW_RETURN_IF_ERROR(add("out", "NetOutput", {{sm, 0}}).status());
  return g;
}

void BM_V1MlpTaskSink(benchmark::State& state) {
  auto loaded = LoadModelForBench(Mlp(graph::Dim::Static(kMlpBatch)), {}, scheduler::LoadConfig{}, 1);
  if (!loaded.ok()) return state.SkipWithError(loaded.status().ToString().c_str());
  LoadedModel& l = **loaded;
  PerInference(state, *l.rt, [&] { return l.model->NnExecute(l.args[0]); });
}

void RunMlpV2(benchmark::State& state, graph::Dim batch) {
  auto set = lowering::CompileV2(Mlp(batch).value(), graph::CompileOptions{});
  if (!set.ok()) return state.SkipWithError(set.status().ToString().c_str());
  auto rt = npu_sim::Runtime::Create({.chips = {"910B"}, .workers = 2});
  if (!rt.ok()) return state.SkipWithError(rt.status().ToString().c_str());
  auto m = v2::ModelV2Executor::Create(*set, rt->get(), 0);
  if (!m.ok()) return state.SkipWithError(m.status().ToString().c_str());
  if (Status s = (*m)->Load(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  // Device input and output, as the task sink's benchmark has.
  const std::uint64_t in_bytes = kMlpBatch * 64 * 4, out_bytes = kMlpBatch * 16 * 4;
  auto in_ptr = (*rt)->Malloc(0, in_bytes, npu_sim::Placement::kHbm, "bench input");
  auto out_ptr = (*rt)->Malloc(0, out_bytes, npu_sim::Placement::kHbm, "bench output");
  if (!in_ptr.ok() || !out_ptr.ok()) return state.SkipWithError("device memory");
  v2::Tensor in, out;
  in.placement = out.placement = v2::TensorPlacement::kOnDeviceHbm;
  in.addr = in_ptr->value;
  in.size = in_bytes;
  in.shape.dtype = out.shape.dtype = static_cast<std::uint32_t>(graph::DataType::kFloat32);
  in.shape.rank = 2;
  in.shape.dims[0] = kMlpBatch;
  in.shape.dims[1] = 64;
  out.addr = out_ptr->value;
  out.size = out_bytes;
  v2::Tensor* ins[] = {&in};
  v2::Tensor* outs[] = {&out};
  PerInference(state, **rt, [&] { return (*m)->ExecuteSync(ins, 1, outs, 1); });
  (void)(*m)->UnLoad();
  (void)(*rt)->Free(0, *in_ptr);
  (void)(*rt)->Free(0, *out_ptr);
}

void BM_V2MlpHostDriven(benchmark::State& state) { RunMlpV2(state, graph::Dim::Static(kMlpBatch)); }
void BM_V2MlpDynamicBatch(benchmark::State& state) { RunMlpV2(state, graph::Dim::Symbolic("batch")); }

double WallUs(const Results& r, const std::string& bench) {
  auto it = r.find(bench);
  return it == r.end() ? 0 : it->second.real_ns / 1e3;
}

}  // namespace

void RegisterV2Benchmarks() {
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, void (*)(benchmark::State&)>>{
           {"BM_V2SequentialChain", BM_V2SequentialChain},
           {"BM_PlainFunctionLoopChain", BM_PlainFunctionLoopChain},
           {"BM_TbbFlowGraphChain", BM_TbbFlowGraphChain},
           {"BM_V2TopologicalChain", BM_V2TopologicalChain},
           {"BM_V2TopologicalDag", BM_V2TopologicalDag},
           {"BM_V2PriorityDag", BM_V2PriorityDag},
           {"BM_BareReadyCounterDag", BM_BareReadyCounterDag},
           {"BM_V2SequentialWide10us", BM_V2SequentialWide10us},
           {"BM_V2MultiThreadWide10us", BM_V2MultiThreadWide10us}}) {
    benchmark::RegisterBenchmark(name, fn)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  // Per inference: times stay in nanoseconds (WallUs).
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, void (*)(benchmark::State&)>>{
           {"BM_V1MlpTaskSink", BM_V1MlpTaskSink},
           {"BM_V2MlpHostDriven", BM_V2MlpHostDriven},
           {"BM_V2MlpDynamicBatch", BM_V2MlpDynamicBatch}}) {
    benchmark::RegisterBenchmark(name, fn)->UseRealTime();
  }
}

std::vector<Figure> V2Figures(const Results& r) {
  const double seq = NsPer(r, "BM_V2SequentialChain");
  const double topo = NsPer(r, "BM_V2TopologicalDag");
  return {
      {"v2_sequential_ns_per_node", seq, "ns", NsPer(r, "BM_PlainFunctionLoopChain"),
       "plain function-pointer loop over the same 100k-node chain, same run", "ratio <= 2"},
      {"v2_sequential_vs_tbb_flow_graph", seq, "ns", NsPer(r, "BM_TbbFlowGraphChain"),
       "oneTBB flow graph, a continue_node per node, same chain and kernels, same run", "ratio < 1"},
      {"v2_topological_chain_ns_per_node", NsPer(r, "BM_V2TopologicalChain"), "ns",
       NsPer(r, "BM_PlainFunctionLoopChain"), "plain function-pointer loop, same chain, same run", ""},
      {"v2_topological_ns_per_node", topo, "ns", NsPer(r, "BM_BareReadyCounterDag"),
       "bare ready-counter loop over the same random 100k-node DAG, same run", "ratio <= 1.5"},
      {"v2_priority_ns_per_node", NsPer(r, "BM_V2PriorityDag"), "ns", NsPer(r, "BM_BareReadyCounterDag"),
       "bare ready-counter loop (no priorities), same DAG, same run", ""},
      {"v2_multithread_wide_nodes_per_s", Rate(r, "BM_V2MultiThreadWide10us"), "nodes/s",
       Rate(r, "BM_V2SequentialWide10us"), "sequential executor, same wide DAG of 10 us kernels, same run",
       "ratio >= 1.7"},
      {"mlp_host_interactions_v2_vs_task_sink", Counter(r, "BM_V2MlpHostDriven", "host_interactions_per_inference"),
       "calls", Counter(r, "BM_V1MlpTaskSink", "host_interactions_per_inference"),
       "v1 task sink (NnExecute), same MLP, device I/O, same run: what the task sink saves", ""},
      {"mlp_virtual_us_v2_vs_task_sink", Counter(r, "BM_V2MlpHostDriven", "virtual_us_per_inference"), "us",
       Counter(r, "BM_V1MlpTaskSink", "virtual_us_per_inference"), "v1 task sink, same MLP, same run", ""},
      {"mlp_wall_us_v2_vs_task_sink", WallUs(r, "BM_V2MlpHostDriven"), "us", WallUs(r, "BM_V1MlpTaskSink"),
       "v1 task sink, same MLP, same run", ""},
      {"mlp_v2_dynamic_vs_static_wall_us", WallUs(r, "BM_V2MlpDynamicBatch"), "us", WallUs(r, "BM_V2MlpHostDriven"),
       "RT2.0 with the batch known at compile time (InferShape/Tiling folded), same run", ""},
  };
}

}  // namespace npuflow::bench
