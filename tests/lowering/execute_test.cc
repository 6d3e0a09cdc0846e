// The compiler's output runs: a CompiledModel is loaded onto the simulated device as the task sink
// would (segments allocated, MemRefs resolved, one device model, each stream's task list sent
// once, one execute), and its outputs match the reference interpreter's on the same inputs.
// Single and multi-stream, on random DAGs and on examples/graphs/mlp.pbtxt.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "graph/ops/interpreter.h"
#include "graph/model_file/model_file.h"
#include "graph/ops/op_registry.h"
#include "synthetic/graphs.h"
#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"
#include "lowering/compiler.h"
#include "lowering/memory_plan.h"
#include "npu_sim/runtime.h"

namespace npuflow::lowering {
namespace {

using graph::MemRef;
using graph::Segment;
using graph::Tensor;

// Loads and runs `model` once on a fresh device; returns its outputs.
StatusOr<std::vector<Tensor>> RunCompiled(const CompiledModel& model, const std::vector<Tensor>& inputs,
                                          bool deterministic) {
  NPUFLOW_ASSIGN_OR_RETURN(auto rt, npu_sim::Runtime::Create({.chips = {model.chip}, .deterministic = deterministic}));
  std::array<npu_sim::DevicePtr, graph::kSegmentCount> base{};
  for (int s = 1; s < graph::kSegmentCount; ++s) {
    NPUFLOW_ASSIGN_OR_RETURN(base[s], rt->Malloc(0, std::max<std::uint64_t>(model.memory.segment_bytes[s], 1)));
  }
  auto resolve = [&](const MemRef& r) -> std::uint64_t {
    return r.segment == Segment::kNone ? 0 : base[static_cast<int>(r.segment)].value + r.offset;
  };
  auto upload = [&](Segment s, const std::vector<std::uint8_t>& bytes) -> Status {
    if (bytes.empty()) return Status::Ok();
    return rt->MemcpyH2D(0, base[static_cast<int>(s)], bytes.data(), bytes.size());
  };
  NPUFLOW_RETURN_IF_ERROR(upload(Segment::kWeights, model.weights));
  NPUFLOW_RETURN_IF_ERROR(upload(Segment::kVariables, model.variables));
  NPUFLOW_RETURN_IF_ERROR(upload(Segment::kTilingData, model.tiling_data));
  for (std::size_t i = 0; i < inputs.size(); ++i)
    NPUFLOW_RETURN_IF_ERROR(
        rt->MemcpyH2D(0, npu_sim::DevicePtr{resolve(model.inputs[i].ref)}, inputs[i].data.data(), inputs[i].data.size()));

  NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Model dm, rt->CreateModel(0));
  std::vector<npu_sim::Event> events;
  for (std::uint32_t e = 0; e < model.event_count; ++e) {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Event ev, rt->CreateEvent(0));
    events.push_back(ev);
  }
  std::vector<npu_sim::Stream> created;
  for (const graph::StreamDef& sd : model.streams) {
    NPUFLOW_ASSIGN_OR_RETURN(npu_sim::Stream stream, rt->CreateStream(0));
    NPUFLOW_RETURN_IF_ERROR(rt->BindStream(dm, stream));
    created.push_back(stream);
    std::vector<npu_sim::Task> tasks;
    for (const graph::TaskDef& t : sd.tasks) {
      switch (t.type) {
        case graph::TaskType::kKernel:
        case graph::TaskType::kAicpuKernel: {
          NPUFLOW_ASSIGN_OR_RETURN(const npu_sim::KernelDef* def, npu_sim::KernelRegistry::Global().Find(t.kernel));
          std::vector<std::uint64_t> args;
          for (const MemRef& a : t.args) args.push_back(resolve(a));
          tasks.push_back(npu_sim::Task::Kernel(def, t.block_dim, std::move(args), t.tiling_key));
          tasks.back().name = t.node;
          break;
        }
        case graph::TaskType::kMemcpy: {
          npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kDeviceToDevice, t.bytes);
          c.src_dev = npu_sim::DevicePtr{resolve(t.src)};
          c.dst_dev = npu_sim::DevicePtr{resolve(t.dst)};
          tasks.push_back(c);
          break;
        }
        case graph::TaskType::kEventRecord: tasks.push_back(npu_sim::Task::Record(events.at(t.event).id)); break;
        case graph::TaskType::kEventWait: tasks.push_back(npu_sim::Task::Wait(events.at(t.event).id)); break;
        case graph::TaskType::kNop: tasks.push_back(npu_sim::Task::Nop()); break;
        case graph::TaskType::kTaskUpdate:  // the target is an earlier stream (the tiling stream is the last)
          tasks.push_back(npu_sim::Task::Update(created.at(t.target_stream).id, t.target_task,
                                                npu_sim::DevicePtr{resolve(t.block_dim_ref)},
                                                npu_sim::DevicePtr{resolve(t.tiling_key_ref)}));
          break;
      }
    }
    NPUFLOW_RETURN_IF_ERROR(rt->LoadTasks(dm, stream, std::move(tasks)));
  }
  NPUFLOW_RETURN_IF_ERROR(rt->ExecuteModel(dm, std::chrono::seconds(60)).status());
  std::vector<Tensor> outs;
  for (const graph::IoDef& io : model.outputs) {
    Tensor t = graph::ZeroTensor(io.desc);
    NPUFLOW_RETURN_IF_ERROR(rt->MemcpyD2H(0, t.data.data(), npu_sim::DevicePtr{resolve(io.ref)}, t.data.size()));
    outs.push_back(std::move(t));
  }
  return outs;
}

// Random inputs for the model; the interpreter's outputs on them; the device's; compared.
void ExpectSameAsInterpreter(std::unique_ptr<graph::ComputeGraph> g, CompileOptions options, std::uint64_t seed,
                             bool deterministic = false) {
  // The interpreter runs its own copy: the compiler rewrites the graph it is given (fusion
  // removes nodes), and the oracle must see the graph as written.
  auto oracle = graph::ParseGraphText(graph::PrintGraphText(*g), "oracle");
  ASSERT_TRUE(oracle.ok()) << oracle.status();
  auto interp = graph::Interpreter::Create(**oracle);
  ASSERT_TRUE(interp.ok()) << interp.status();
  auto model = CompileV1(std::move(g), options);
  ASSERT_TRUE(model.ok()) << model.status();
  // Through the file and back: what runs is what was stored.
  auto bytes = graph::SerializeModel(*model);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto loaded = graph::ParseModel(*bytes, "model.om");
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<Tensor> inputs;
  std::map<std::string, Tensor> feeds;
  for (const graph::IoDef& io : loaded->inputs) {
    Tensor t = graph::ZeroTensor(io.desc);
    for (std::size_t i = 0; i < t.data.size() / 4; ++i) graph::StoreF(t, i, dist(rng));
    inputs.push_back(t);
    feeds[io.name] = t;
  }
  auto want = (*interp)->Run(feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = RunCompiled(*loaded, inputs, deterministic);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  for (std::size_t i = 0; i < got->size(); ++i) {
    ASSERT_EQ((*got)[i].desc, (*want)[i].desc);
    const std::size_t n = (*got)[i].data.size() / 4;
    for (std::size_t k = 0; k < n; ++k) {
      const float a = graph::LoadF((*got)[i], k), b = graph::LoadF((*want)[i], k);
      ASSERT_NEAR(a, b, 1e-4f + 1e-4f * std::fabs(b)) << "output " << i << " element " << k;
    }
  }
}

TEST(Execute, RandomDagsMatchTheInterpreter) {
  graph::RegisterBuiltinOps();
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    for (auto mode : {CompileOptions::StreamMode::kSingle, CompileOptions::StreamMode::kMulti}) {
      auto g = synthetic::MakeRandomDag({.nodes = 40, .inputs = 2, .max_fan_in = 2, .locality = 5, .seed = seed});
      ASSERT_TRUE(g.ok());
      CompileOptions options;
      options.stream_mode = mode;
      options.max_parallel = 1 + static_cast<int>(seed % 4);
      SCOPED_TRACE(testing::Message() << "seed " << seed << (mode == CompileOptions::StreamMode::kSingle ? " single" : " multi"));
      ExpectSameAsInterpreter(std::move(*g), options, seed);
    }
  }
}

TEST(Execute, MlpExampleMatchesTheInterpreterOnBothChips) {
  graph::RegisterBuiltinOps();
  for (const char* chip : {"910B", "310P"}) {
    auto g = graph::ReadGraphTextFile(std::string(NPUFLOW_SOURCE_DIR) + "/examples/graphs/mlp.pbtxt");
    ASSERT_TRUE(g.ok()) << g.status();
    CompileOptions options;
    options.chip = chip;
    ExpectSameAsInterpreter(std::move(*g), options, 5, /*deterministic=*/true);
  }
}

TEST(Execute, KvCacheDecodeStepUpdatesTheVariableInPlace) {
  // One decode step: the new K/V row goes into the cache Variable at `pos`, attention reads the
  // updated cache up to `len`. The cache lives in the variables segment and is updated in place.
  const char* text = R"pb(
    node { name: "cache" op: "Variable" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } dim { size: 4 } } } } }
    node { name: "q" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
    node { name: "row" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 1 } dim { size: 4 } } } } }
    node { name: "pos" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "len" op: "Data" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "shape" value { shape { dim { size: 1 } } } } }
    node { name: "kv" op: "KvCacheWrite" input: "cache" input: "row" input: "pos" }
    node { name: "att" op: "Attention" input: "q" input: "kv" input: "kv" input: "len" }
    node { name: "out" op: "NetOutput" input: "att" input: "kv" }
  )pb";
  graph::RegisterBuiltinOps();
  auto g = graph::ParseGraphText(text, "decode.pbtxt");
  ASSERT_TRUE(g.ok()) << g.status();
  auto interp = graph::Interpreter::Create(**g);
  ASSERT_TRUE(interp.ok()) << interp.status();
  auto model = CompileV1(std::move(*g), {});
  ASSERT_TRUE(model.ok()) << model.status();
  for (const auto& t : model->memory.tensors) {
    if (t.node == "kv") {
      EXPECT_EQ(t.ref.segment, Segment::kVariables);
    }
  }

  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::map<std::string, Tensor> feeds;
  std::vector<Tensor> inputs;
  for (const graph::IoDef& io : model->inputs) {
    Tensor t = graph::ZeroTensor(io.desc);
    if (io.name == "pos") graph::StoreI(t, 0, 0);
    else if (io.name == "len") graph::StoreI(t, 0, 1);
    else for (std::size_t i = 0; i < t.data.size() / 4; ++i) graph::StoreF(t, i, dist(rng));
    feeds[io.name] = t;
    inputs.push_back(t);
  }
  auto want = (*interp)->Run(feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = RunCompiled(*model, inputs, /*deterministic=*/false);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const std::size_t n = (*got)[i].data.size() / 4;
    for (std::size_t k = 0; k < n; ++k)
      ASSERT_NEAR(graph::LoadF((*got)[i], k), graph::LoadF((*want)[i], k), 1e-5f) << "output " << i << " element " << k;
  }
}

TEST(Execute, ViewsRunNoTaskAndReadTheirInputsBytes) {
  // x's 12 floats split three ways along a last axis with nothing before it: three views at x+0,
  // x+16 and x+32. `a` reshapes a view (a view of a view), `mid` reshapes x (a view) for a Split
  // that is not contiguous (a kernel), `b` reshapes a view into a model output (a copy: an output
  // has its own block), `t` reads x beside the views.
  const char* text = R"pb(
    node { name: "d" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 1 } dim { size: 12 } } } } }
    node { name: "x" op: "Relu" input: "d" }
    node { name: "s" op: "Split" input: "x" attr { key: "axis" value { i: -1 } } attr { key: "num_split" value { i: 3 } } }
    node { name: "a" op: "Reshape" input: "s:0" attr { key: "shape" value { ints { val: 2 val: 2 } } } }
    node { name: "u" op: "Tanh" input: "a" }
    node { name: "b" op: "Reshape" input: "s:1" attr { key: "shape" value { ints { val: 4 } } } }
    node { name: "sum" op: "Add" input: "s:2" input: "s:1" }
    node { name: "t" op: "Gelu" input: "x" }
    node { name: "mid" op: "Reshape" input: "x" attr { key: "shape" value { ints { val: 2 val: 6 } } } }
    node { name: "n" op: "Split" input: "mid" attr { key: "axis" value { i: -1 } } attr { key: "num_split" value { i: 2 } } }
    node { name: "out" op: "NetOutput" input: "u" input: "b" input: "sum" input: "t" input: "n:0" input: "n:1" }
  )pb";
  graph::RegisterBuiltinOps();
  for (auto mode : {CompileOptions::StreamMode::kSingle, CompileOptions::StreamMode::kMulti}) {
    SCOPED_TRACE(mode == CompileOptions::StreamMode::kSingle ? "single stream" : "multi stream");
    CompileOptions options;
    options.stream_mode = mode;
    options.max_parallel = 3;
    auto g = graph::ParseGraphText(text, "views.pbtxt");
    ASSERT_TRUE(g.ok()) << g.status();
    auto model = CompileV1(std::move(*g), options);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_TRUE(VerifyMemoryPlan(*model).ok()) << VerifyMemoryPlan(*model);
    std::map<std::string, int> kernels;
    for (const auto& stream : model->streams)
      for (const auto& task : stream.tasks)
        if (task.type == graph::TaskType::kKernel) ++kernels[task.node];
    for (const char* view : {"s", "a", "mid"}) {
      EXPECT_EQ(kernels.count(view), 0u) << view;
      EXPECT_TRUE(model->graph->FindNode(view)->op().AttrOr<bool>("_view", false).value()) << view;
    }
    for (const char* kernel : {"x", "u", "b", "sum", "t", "n"}) EXPECT_EQ(kernels[kernel], 1) << kernel;
    std::map<std::pair<std::string, int>, MemRef> at;
    for (const auto& t : model->memory.tensors) at[{t.node, t.output}] = t.ref;
    const MemRef x = at[{"x", 0}];
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(at[(std::pair<std::string, int>{"s", k})], (MemRef{x.segment, x.offset + 16u * k})) << "s:" << k;
    EXPECT_EQ(at[(std::pair<std::string, int>{"a", 0})], x);
    EXPECT_EQ(at[(std::pair<std::string, int>{"mid", 0})], x);

    auto again = graph::ParseGraphText(text, "views.pbtxt");
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectSameAsInterpreter(std::move(*again), options, 11);
  }
}

}  // namespace
}  // namespace npuflow::lowering
