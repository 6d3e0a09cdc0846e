// DavinciModel (seed 002, 2.4 and 3.3): Init runs the documented stages in order; after Init one
// zero-copy inference is one host interaction (task sink), against one per task when the host
// schedules the same tasks; user memory is honoured and checked; Unload releases everything.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "graph/ir/tensor_access.h"
#include "lowering/compiler.h"
#include "scheduler/davinci_model.h"
#include "scheduler/model_manager.h"
#include "scheduler/session.h"
#include "scheduler_testing.h"

namespace npuflow::scheduler {
namespace {

using graph::Segment;
using test::CompileText;
using test::ConstNode;
using test::DataNode;
using test::DeviceBuffers;
using test::FilledF32;
using test::HostArgs;
using test::ManagerOptions;
using test::ZeroOutputs;

// Two branches (multi-stream: events too) with a Const.
std::string ModelText() {
  std::vector<float> w;
  for (int i = 0; i < 16; ++i) w.insert(w.end(), {0.5f, -0.25f, 0.125f, 1.f});
  return DataNode("x", "DT_FLOAT", {8, 16}) + ConstNode("w", {16, 4}, w) + R"pb(
  node { name: "a" op: "MatMul" input: "x" input: "w" }
  node { name: "a2" op: "Relu" input: "a" }
  node { name: "b" op: "Tanh" input: "x" }
  node { name: "b2" op: "Relu" input: "b" }
  node { name: "c" op: "Softmax" input: "a2" }
  node { name: "out" op: "NetOutput" input: "c" input: "b2" }
)pb";
}

std::shared_ptr<const CompiledModel> Compile(graph::CompileOptions options = {}) {
  return CompileText(ModelText(), options, "model.pbtxt");
}

Tensor Input(float seed) {
  return FilledF32({8, 16}, [seed](std::size_t i) { return seed * (static_cast<float>(i % 7) - 3.f); });
}

class SchedulerDavinciModel : public test::ModelManagerTest {
 protected:
  // Device buffers for one input and the outputs of `m`.
  DeviceBuffers Buffers(const CompiledModel& m, const Tensor& x) {
    DeviceBuffers b(rt(), 0);
    Status s = b.Allocate({x}, m.outputs);
    EXPECT_TRUE(s.ok()) << s;
    b.args.timeout = std::chrono::seconds(30);
    return b;
  }
  std::vector<Tensor> ReadOutputs(const DeviceBuffers& b) {
    auto outs = b.ReadOutputs();
    EXPECT_TRUE(outs.ok()) << outs.status();
    return outs.value_or(std::vector<Tensor>{});
  }
};

// The synchronous wait spins through a step's expected end only where the waiting thread has a
// core of its own (fewer device workers than cores); with as many workers as cores it sleeps, as a
// spin there took a core a worker needed.
TEST(DavinciModelExecWait, SpinsOnlyWithASpareCore) {
  const actors::AdaptiveWait::Options spare = DavinciModel::ExecWaitOptions(1, 2);
  EXPECT_TRUE(spare.enabled);
  EXPECT_GT(spare.spare_core_lead, 0);
  for (auto [workers, cores] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{8, 8}}) {
    const actors::AdaptiveWait::Options none = DavinciModel::ExecWaitOptions(workers, cores);
    EXPECT_FALSE(none.enabled) << workers << " workers, " << cores << " cores";
  }
  const actors::AdaptiveWait::Options unknown = DavinciModel::ExecWaitOptions(2, 0);
  EXPECT_TRUE(unknown.enabled);
  EXPECT_EQ(unknown.spare_core_lead, 0);
}

TEST_F(SchedulerDavinciModel, InitRunsTheDocumentedStagesInOrder) {
  auto compiled = Compile();
  DavinciModel model(&rt(), 1000, compiled, {});
  Status s = model.Init();
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<std::string> documented = {"InitModelMem", "InitIoNodes", "InitVariables", "InitNodes",
                                               "DoTaskSink"};
  const auto& stages = model.init_stages();
  // Each documented stage once, in this order (finer stages in between are allowed).
  std::size_t at = 0;
  for (const std::string& stage : documented) {
    EXPECT_EQ(std::count(stages.begin(), stages.end(), stage), 1) << stage;
    auto it = std::find(stages.begin() + static_cast<std::ptrdiff_t>(std::min(at, stages.size())), stages.end(), stage);
    ASSERT_NE(it, stages.end()) << stage << " missing or out of order; stages: " << ::testing::PrintToString(stages);
    at = static_cast<std::size_t>(it - stages.begin()) + 1;
  }
  auto out = model.Execute({Input(1.f)}, std::chrono::seconds(30));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(model.Unload().ok());
  EXPECT_TRUE(model.Unload().ok()) << "idempotent";
}

TEST_F(SchedulerDavinciModel, ZeroCopyNnExecuteIsOneHostInteraction) {
  for (auto mode : {graph::CompileOptions::StreamMode::kSingle, graph::CompileOptions::StreamMode::kMulti}) {
    graph::CompileOptions options;
    options.stream_mode = mode;
    auto compiled = Compile(options);
    SCOPED_TRACE(testing::Message() << compiled->streams.size() << " streams");
    auto id = ModelManager::Get()->LoadModelOnline(compiled, {});
    ASSERT_TRUE(id.ok()) << id.status();
    std::shared_ptr<DavinciModel> model = ModelManager::Get()->GetModel(*id).value();
    DeviceBuffers b = Buffers(*compiled, Input(0.5f));

    for (int run = 0; run < 3; ++run) {
      const auto before = rt().Stats(0).value().host_interactions;
      Status s = model->NnExecute(b.args);
      const auto after = rt().Stats(0).value().host_interactions;
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(after - before, 1u) << "run " << run;
    }
    const std::vector<Tensor> sunk = ReadOutputs(b);

    // The same tasks scheduled by the host: one interaction per task at least, same results.
    std::size_t tasks = 0;
    for (const auto& sd : compiled->streams) tasks += sd.tasks.size();
    DeviceBuffers h = Buffers(*compiled, Input(0.5f));
    const auto before = rt().Stats(0).value().host_interactions;
    Status s = model->ExecuteHostScheduled(h.args);
    const auto after = rt().Stats(0).value().host_interactions;
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_GE(after - before, tasks);
    EXPECT_EQ(ReadOutputs(h), sunk);
    ASSERT_TRUE(ModelManager::Get()->Unload(*id).ok());
  }
}

// Load / run / unload for a long time: the model's actor and its device models are retired at
// unload and their cells reused, so the actors a process holds stay bounded by the models live at
// once (before, every load left two actors behind: about 35 KB each cycle). A stale handle's
// execution fails as unloaded.
TEST_F(SchedulerDavinciModel, LoadAndUnloadKeepTheActorCellsBounded) {
  auto compiled = Compile();
  auto cycle = [&]() -> std::shared_ptr<DavinciModel> {
    auto id = ModelManager::Get()->LoadModelOnline(compiled, {});
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return nullptr;
    std::shared_ptr<DavinciModel> model = ModelManager::Get()->GetModel(*id).value();
    DeviceBuffers b = Buffers(*compiled, Input(0.5f));
    Status s = model->NnExecute(b.args);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(ModelManager::Get()->Unload(*id).ok());
    return model;
  };
  for (int i = 0; i < 20; ++i) cycle();  // the cells a cycle needs, once
  rt().system().WaitIdle();
  const std::size_t cells = rt().system().Stats().cells;
  std::shared_ptr<DavinciModel> stale;
  for (int i = 0; i < 300; ++i) stale = cycle();
  rt().system().WaitIdle();
  EXPECT_LE(rt().system().Stats().cells, cells + 4) << "300 more loads";
  ASSERT_NE(stale, nullptr);
  DeviceBuffers b = Buffers(*compiled, Input(0.5f));
  Status s = stale->NnExecute(b.args);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("unloaded"), std::string_view::npos) << s;
}

TEST_F(SchedulerDavinciModel, AsyncOnAUserStream) {
  auto compiled = Compile();
  auto id = ModelManager::Get()->LoadModelOnline(compiled, {});
  ASSERT_TRUE(id.ok()) << id.status();
  std::shared_ptr<DavinciModel> model = ModelManager::Get()->GetModel(*id).value();
  DeviceBuffers sync = Buffers(*compiled, Input(2.f));
  ASSERT_TRUE(model->NnExecute(sync.args).ok());
  DeviceBuffers async = Buffers(*compiled, Input(2.f));
  auto stream = rt().CreateStream(0);
  ASSERT_TRUE(stream.ok());
  async.args.stream = *stream;
  async.args.timeout.reset();
  Status s = model->NnExecute(async.args);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(rt().SynchronizeStream(*stream, std::chrono::seconds(30)).ok());
  EXPECT_EQ(ReadOutputs(async), ReadOutputs(sync));
  // Host buffers cannot go async on a user stream.
  const std::vector<Tensor> x = {Input(1.f)};
  std::vector<Tensor> outs = ZeroOutputs(compiled->outputs);
  ExecuteArgs host = HostArgs(x, outs);
  host.stream = *stream;
  EXPECT_EQ(model->NnExecute(host).code(), StatusCode::kParamInvalid);
}

TEST_F(SchedulerDavinciModel, HostAndDeviceBuffersAlternateOnOneModel) {
  // Host runs reuse their staging (no allocation per run): a run with device buffers between them
  // stages nothing, and no run writes an earlier run's host buffers.
  auto compiled = Compile();
  auto id = ModelManager::Get()->LoadModelOnline(compiled, {});
  ASSERT_TRUE(id.ok()) << id.status();
  std::shared_ptr<DavinciModel> model = ModelManager::Get()->GetModel(*id).value();
  auto host_run = [&](float v) {
    const std::vector<Tensor> x = {Input(v)};
    std::vector<Tensor> outs = ZeroOutputs(compiled->outputs);
    Status s = model->NnExecute(HostArgs(x, outs));
    EXPECT_TRUE(s.ok()) << s;
    return outs;
  };
  for (int round = 0; round < 3; ++round) {
    const std::vector<Tensor> first = host_run(1.f);
    const std::vector<Tensor> kept = first;
    DeviceBuffers device = Buffers(*compiled, Input(2.f));
    ASSERT_TRUE(model->NnExecute(device.args).ok());
    const std::vector<Tensor> second = host_run(2.f);
    EXPECT_EQ(ReadOutputs(device), second);
    EXPECT_EQ(host_run(1.f), kept);
    EXPECT_EQ(first, kept);  // not written after its run
    EXPECT_NE(second, kept);
  }
}

TEST_F(SchedulerDavinciModel, ADiscardedOutputIsNotCopiedOutAndTheOthersAre) {
  // A greedy decode step reads its next token and leaves the logits on the device: an output given
  // as DataBuffer::Discard() is computed but not copied, and the others come back as usual.
  auto compiled = Compile();
  auto id = ModelManager::Get()->LoadModelOnline(compiled, {});
  ASSERT_TRUE(id.ok()) << id.status();
  std::shared_ptr<DavinciModel> model = ModelManager::Get()->GetModel(*id).value();
  const std::vector<Tensor> x = {Input(1.5f)};
  std::vector<Tensor> all = ZeroOutputs(compiled->outputs);
  ASSERT_TRUE(model->NnExecute(HostArgs(x, all)).ok());
  for (std::size_t keep = 0; keep < 2; ++keep) {
    SCOPED_TRACE("keeping output " + std::to_string(keep));
    std::vector<Tensor> outs = ZeroOutputs(compiled->outputs);
    const std::vector<Tensor> untouched = outs;
    ExecuteArgs args = HostArgs(x, outs);
    args.outputs[1 - keep] = DataBuffer::Discard();
    Status s = model->NnExecute(args);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(outs[keep], all[keep]);
    EXPECT_EQ(outs[1 - keep], untouched[1 - keep]);
  }
  std::vector<Tensor> outs = ZeroOutputs(compiled->outputs);
  ExecuteArgs none = HostArgs(x, outs);
  none.outputs = {DataBuffer::Discard(), DataBuffer::Discard()};
  EXPECT_TRUE(model->NnExecute(none).ok());
  // Only outputs may be discarded, and a discarded one names no buffer.
  ExecuteArgs bad_input = HostArgs(x, outs);
  bad_input.inputs[0] = DataBuffer::Discard();
  Status s = model->NnExecute(bad_input);
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.message().find("input 'x' is discarded; only an output may be"), std::string::npos) << s;
  ExecuteArgs bad_output = HostArgs(x, outs);
  bad_output.outputs[0].discard = true;
  s = model->NnExecute(bad_output);
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.message().find("is discarded but names a buffer"), std::string::npos) << s;
}

TEST_F(SchedulerDavinciModel, SmallHostOutputsAreCopiedByTheRunNotReadInPlace) {
  // This model's two outputs are 640 bytes in all: under 1 KiB the run's own D2H copies fill the
  // caller's buffers (no read in place, no instance held for the caller), with the same results.
  // (The model actor's path only: the caller's never reads in place. SchedulerConcurrency's
  // HostBufferCallsOnOneInstanceEachReadTheirOwnOutputs reads 3 KiB in place.)
  if (DefaultExecutePath().value_or(ExecutePath::kActor) != ExecutePath::kActor)
    GTEST_SKIP() << "the caller's path never reads outputs in place";
  auto compiled = Compile();
  std::uint64_t bytes = 0;
  for (const auto& o : compiled->outputs) bytes += o.desc.bytes().value_or(0);
  ASSERT_LT(bytes, 1024u);
  auto id = ModelManager::Get()->LoadModelOnline(compiled, {});
  ASSERT_TRUE(id.ok()) << id.status();
  std::shared_ptr<DavinciModel> model = ModelManager::Get()->GetModel(*id).value();
  std::vector<Tensor> first;
  for (int run = 0; run < 20; ++run) {
    const std::vector<Tensor> x = {Input(0.5f + static_cast<float>(run % 2))};
    std::vector<Tensor> outs = ZeroOutputs(compiled->outputs);
    Status s = model->NnExecute(HostArgs(x, outs));
    ASSERT_TRUE(s.ok()) << s;
    if (run == 0) first = outs;
    if (run % 2 == 0) EXPECT_EQ(outs, first) << "run " << run;
    else EXPECT_NE(outs, first) << "run " << run;
  }
  EXPECT_EQ(model->outputs_read_in_place(), 0u);
}

TEST_F(SchedulerDavinciModel, UserFeatureMemoryTooSmallFailsInitNamingBothSizes) {
  auto compiled = Compile();
  const std::uint64_t fm = compiled->memory.bytes(Segment::kFeatureMap);
  ASSERT_GT(fm, 512u);
  auto user = rt().Malloc(0, fm);
  ASSERT_TRUE(user.ok());
  const auto in_use = rt().Stats(0).value().memory.in_use;
  const auto streams = rt().Stats(0).value().streams;
  LoadConfig config;
  config.feature_memory_base = *user;
  config.feature_memory_size = fm - 512;
  DavinciModel model(&rt(), 1001, compiled, config);
  Status s = model.Init();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(std::to_string(fm)), std::string_view::npos) << s;
  EXPECT_NE(s.message().find(std::to_string(fm - 512)), std::string_view::npos) << s;
  // A failed Init releases what it took.
  EXPECT_EQ(rt().Stats(0).value().memory.in_use, in_use);
  EXPECT_EQ(rt().Stats(0).value().streams, streams);

  config.feature_memory_size = fm;
  DavinciModel ok_model(&rt(), 1002, compiled, config);
  Status ok = ok_model.Init();
  ASSERT_TRUE(ok.ok()) << ok;
  EXPECT_TRUE(ok_model.Execute({Input(1.f)}, std::chrono::seconds(30)).ok());
  // With user memory the model allocates less than its needs by the feature map.
  const auto used = rt().Stats(0).value().memory.in_use - in_use;
  EXPECT_LE(used + fm, DavinciModel::Needs(*compiled, {}).memory_bytes + 4096);
}

TEST_F(SchedulerDavinciModel, UnloadReleasesEverythingAndFailsLaterExecutes) {
  const auto before = rt().Stats(0).value();
  auto compiled = Compile();
  ModelLoadOptions three;
  three.instances = 3;
  auto id = ModelManager::Get()->LoadModelOnline(compiled, three);
  ASSERT_TRUE(id.ok()) << id.status();
  std::shared_ptr<DavinciModel> model = ModelManager::Get()->GetModel(*id).value();
  ASSERT_TRUE(model->Execute({Input(1.f)}, std::chrono::seconds(30)).ok());
  const auto loaded = rt().Stats(0).value();
  const ResourceNeeds need = DavinciModel::Needs(*compiled, {.instances = 3});
  EXPECT_EQ(loaded.streams - before.streams, need.streams);
  EXPECT_EQ(loaded.events - before.events, need.events);
  EXPECT_GE(loaded.memory.in_use - before.memory.in_use, need.memory_bytes);
  EXPECT_LE(loaded.memory.in_use - before.memory.in_use, need.memory_bytes + 64 * 512);

  ASSERT_TRUE(ModelManager::Get()->Unload(*id).ok());
  const auto after = rt().Stats(0).value();
  EXPECT_EQ(after.memory.in_use, before.memory.in_use);
  EXPECT_EQ(after.streams, before.streams);
  EXPECT_EQ(after.events, before.events);
  // The caller still holds the model: running it is an error, not a crash.
  auto late = model->Execute({Input(1.f)}, std::chrono::seconds(5));
  EXPECT_FALSE(late.ok());
  EXPECT_EQ(ModelManager::Get()->Unload(*id).code(), StatusCode::kNotFound);
}

TEST_F(SchedulerDavinciModel, SharedWeightsAreOneCopyFreedWithTheLastUser) {
  auto compiled = Compile();
  ModelLoadOptions options;
  options.share_weights = true;
  auto a = ModelManager::Get()->LoadModelOnline(compiled, options);
  auto b = ModelManager::Get()->LoadModelOnline(compiled, options);
  ASSERT_TRUE(a.ok() && b.ok());
  auto ma = ModelManager::Get()->GetModel(*a).value();
  auto mb = ModelManager::Get()->GetModel(*b).value();
  EXPECT_EQ(ma->weights_base().value, mb->weights_base().value);
  auto ra = ma->Execute({Input(1.f)}, std::chrono::seconds(30));
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(ModelManager::Get()->Unload(*a).ok());
  auto rb = mb->Execute({Input(1.f)}, std::chrono::seconds(30));
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(*ra, *rb);
  std::vector<std::uint8_t> w(compiled->weights.size());
  ASSERT_TRUE(rt().MemcpyD2H(0, w.data(), mb->weights_base(), w.size()).ok());
  EXPECT_EQ(w, compiled->weights);
}

TEST_F(SchedulerDavinciModel, GraphLoaderWithoutModelManagerNamesIt) {
  ASSERT_TRUE(ModelManager::Finalize().ok());
  auto id = GraphLoader::LoadModelOnline(Compile(), {});
  ASSERT_FALSE(id.ok());
  const std::string_view msg = id.status().message();
  EXPECT_TRUE(msg.find("ModelManager") != msg.npos || msg.find("Initialize") != msg.npos) << id.status();
  EXPECT_FALSE(GraphLoader::ExecuteModel(1, {}).ok());
  ASSERT_TRUE(ModelManager::Initialize(ManagerOptions()).ok());
}

}  // namespace
}  // namespace npuflow::scheduler
