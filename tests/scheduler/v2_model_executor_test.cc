// ModelV2Executor's states, checks and errors (GE_BEHAVIOUR.md, RT2.0), StreamExecutor under
// threads, and the allocators, on a small model whose Init puts a constant on the device, whose
// Main adds it to the input (through a scratch block from the run's allocator) and whose DeInit
// frees it.
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "graph/exe_graph/exe_graph.h"
#include "graph/exe_graph/kernel_registry.h"
#include "npu_sim/runtime.h"
#include "scheduler/v2/allocator.h"
#include "scheduler/v2/model_v2_executor.h"
#include "scheduler/v2/stream_executor.h"

namespace npuflow::v2 {
namespace {

using exe::KernelContext;

std::atomic<int> g_main_runs{0};
std::atomic<int> g_freed{0};

RunContext& Run(KernelContext* ctx) { return *static_cast<RunContext*>(ctx->args()); }

// Init: the attribute "value" into 8 bytes of device memory.
std::uint32_t ConstToDeviceRun(KernelContext* ctx) {
  RunContext& rc = Run(ctx);
  const auto value = std::get<std::int64_t>(ctx->node->attrs.at("value"));
  auto ptr = rc.runtime->Malloc(rc.device, sizeof(value), npu_sim::Placement::kHbm, "test.const");
  if (!ptr.ok()) return ctx->Fail(ptr.status());
  Status s = rc.runtime->MemcpyH2D(rc.device, *ptr, &value, sizeof(value));
  if (!s.ok()) {
    (void)rc.runtime->Free(rc.device, *ptr);
    return ctx->Fail(s);
  }
  Tensor& t = ctx->output(0).Emplace<Tensor>();
  t.addr = ptr->value;
  t.size = sizeof(value);
  return exe::kKernelSuccess;
}

// Main: out = in + const, both host int64, through a scratch block of the run's allocator.
std::uint32_t AddConstRun(KernelContext* ctx) {
  ++g_main_runs;
  RunContext& rc = Run(ctx);
  const Tensor* in = ctx->input(0).Get<Tensor*>();
  Tensor* out = ctx->input(1).Get<Tensor*>();
  const Tensor* c = ctx->input(2).Object<Tensor>();
  if (c == nullptr) return ctx->Fail(Status::Internal("the constant did not come from Init"));
  auto scratch = rc.device_allocator->Malloc(64);
  if (!scratch.ok()) return ctx->Fail(scratch.status());
  std::int64_t value = 0;
  Status s = rc.runtime->MemcpyD2H(rc.device, &value, npu_sim::DevicePtr{c->addr}, sizeof(value));
  if (s.ok()) s = rc.runtime->MemcpyH2D(rc.device, npu_sim::DevicePtr{scratch->addr}, &value, sizeof(value));
  std::int64_t back = 0;
  if (s.ok()) s = rc.runtime->MemcpyD2H(rc.device, &back, npu_sim::DevicePtr{scratch->addr}, sizeof(back));
  rc.device_allocator->Free(*scratch);
  if (!s.ok()) return ctx->Fail(s);
  std::int64_t x = 0;
  std::memcpy(&x, reinterpret_cast<const void*>(in->addr), sizeof(x));
  const std::int64_t y = x + back;
  std::memcpy(reinterpret_cast<void*>(out->addr), &y, sizeof(y));
  return exe::kKernelSuccess;
}

// DeInit: frees the constant, if Init made it (an Init that failed part-way did not make them all;
// op_kernels' FreeConst does the same).
std::uint32_t FreeDeviceRun(KernelContext* ctx) {
  RunContext& rc = Run(ctx);
  const Tensor* c = ctx->input(0).Object<Tensor>();
  if (c == nullptr) return exe::kKernelSuccess;
  Status s = rc.runtime->Free(rc.device, npu_sim::DevicePtr{c->addr});
  if (!s.ok()) return ctx->Fail(s);
  ++g_freed;
  return exe::kKernelSuccess;
}

void RegisterKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    exe::KernelRegister("T2.ConstToDevice").RunFunc(ConstToDeviceRun).Tag(exe::KernelTag::kMemory);
    exe::KernelRegister("T2.AddConst").RunFunc(AddConstRun);
    exe::KernelRegister("T2.FreeDevice").RunFunc(FreeDeviceRun).Tag(exe::KernelTag::kMemory);
  });
}

exe::ExecuteGraphSet AddConstModel(std::int64_t constant) {
  exe::ExecuteGraphSet set;
  set.desc.inputs = {{"x", graph::TensorDesc{graph::DataType::kInt64, graph::Shape{1}}}};
  set.desc.outputs = {{"y", graph::TensorDesc{graph::DataType::kInt64, graph::Shape{1}}}};
  set.init = std::make_shared<exe::ExecuteGraph>("addc.init");
  const int c = set.init->AddValue("c");
  exe::ExeNode make;
  make.name = "const";
  make.kernel = "T2.ConstToDevice";
  make.outputs = {c};
  make.attrs["value"] = constant;
  EXPECT_TRUE(set.init->AddNode(make).ok());
  set.init->AddOutput(c);

  set.main = std::make_shared<exe::ExecuteGraph>("addc");
  const int x = set.main->AddInput("x"), y = set.main->AddInput("y"), mc = set.main->AddInput("c");
  exe::ExeNode add;
  add.name = "add";
  add.kernel = "T2.AddConst";
  add.inputs = {x, y, mc};
  EXPECT_TRUE(set.main->AddNode(add).ok());

  set.deinit = std::make_shared<exe::ExecuteGraph>("addc.deinit");
  const int dc = set.deinit->AddInput("c");
  exe::ExeNode free_node;
  free_node.name = "free_const";
  free_node.kernel = "T2.FreeDevice";
  free_node.inputs = {dc};
  EXPECT_TRUE(set.deinit->AddNode(free_node).ok());
  return set;
}

class V2ModelExecutor : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterKernels();
    npu_sim::RuntimeOptions options;
    options.workers = 2;
    rt_ = *npu_sim::Runtime::Create(options);
  }
  std::unique_ptr<npu_sim::Runtime> rt_;
};

struct HostScalar {
  std::int64_t value = 0;
  Tensor tensor;
  explicit HostScalar(std::int64_t v) : value(v) {
    tensor.placement = TensorPlacement::kOnHost;
    tensor.addr = reinterpret_cast<std::uint64_t>(&value);
    tensor.size = sizeof(value);
  }
};

TEST_F(V2ModelExecutor, EveryTransitionAndItsErrors) {
  auto made = ModelV2Executor::Create(AddConstModel(40), rt_.get(), 0);
  ASSERT_TRUE(made.ok()) << made.status();
  ModelV2Executor& m = **made;
  EXPECT_EQ(m.state(), ModelState::kInit);
  HostScalar x(2), y(0);
  Tensor* in[] = {&x.tensor};
  Tensor* out[] = {&y.tensor};

  Status s = m.ExecuteSync(in, 1, out, 1);
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.message().find("is in state Init; Execute needs state Loaded"), std::string_view::npos) << s;
  s = m.UnLoad();
  EXPECT_NE(s.message().find("UnLoad needs state Loaded"), std::string_view::npos) << s;

  ASSERT_TRUE(m.Load().ok());
  EXPECT_EQ(m.state(), ModelState::kLoaded);
  s = m.Load();
  EXPECT_NE(s.message().find("is in state Loaded; Load needs state Init"), std::string_view::npos) << s;

  const int runs_before = g_main_runs.load();
  s = m.ExecuteSync(in, 2, out, 1);
  EXPECT_NE(s.message().find("2 inputs given, model 'addc' has 1"), std::string_view::npos) << s;
  s = m.ExecuteSync(in, 1, out, 0);
  EXPECT_NE(s.message().find("0 outputs given, model 'addc' has 1"), std::string_view::npos) << s;
  Tensor* null_in[] = {nullptr};
  s = m.ExecuteSync(null_in, 1, out, 1);
  EXPECT_NE(s.message().find("input 0 ('x') is null"), std::string_view::npos) << s;
  ModelExecuteArg no_stream;
  s = m.Execute(no_stream, in, 1, out, 1);
  EXPECT_NE(s.message().find("no stream given"), std::string_view::npos) << s;
  EXPECT_EQ(g_main_runs.load(), runs_before) << "a kernel ran before the checks";

  ASSERT_TRUE(m.ExecuteSync(in, 1, out, 1).ok());
  EXPECT_EQ(y.value, 42);
  x.value = 100;
  auto stream = rt_->CreateStream(0);
  ASSERT_TRUE(stream.ok());
  ModelExecuteArg arg;
  arg.stream = *stream;
  ASSERT_TRUE(m.Execute(arg, in, 1, out, 1).ok());
  ASSERT_TRUE(rt_->SynchronizeStream(*stream).ok());
  EXPECT_EQ(y.value, 140);
  EXPECT_EQ(m.GetIterationNum(), 2u);

  const int freed = g_freed.load();
  ASSERT_TRUE(m.UnLoad().ok());
  EXPECT_EQ(m.state(), ModelState::kInit);
  EXPECT_EQ(g_freed.load(), freed + 1) << "DeInit did not run";

  ASSERT_TRUE(m.Load().ok()) << "Load again after UnLoad";
  x.value = 1;
  ASSERT_TRUE(m.ExecuteSync(in, 1, out, 1).ok());
  EXPECT_EQ(y.value, 41);
  ASSERT_TRUE(m.UnLoad().ok());
  ASSERT_TRUE(rt_->DestroyStream(*stream).ok());
}

class CountingStreams final : public StreamAllocator {
 public:
  explicit CountingStreams(npu_sim::Runtime* rt) : inner_(rt, 0) {}
  StatusOr<npu_sim::Stream> Stream(int index) override { return inner_.Stream(index); }

 private:
  BuiltinStreamAllocator inner_;
};

TEST_F(V2ModelExecutor, ResourceAllocatorsAreAllGivenOrNone) {
  auto m = *ModelV2Executor::Create(AddConstModel(1), rt_.get(), 0);
  CountingStreams streams(rt_.get());
  ModelExecuteArg arg;
  arg.external_stream_allocator = &streams;
  Status s = m->Load(arg);
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
  EXPECT_NE(s.message().find("given all together or not at all (1 of 3 given)"), std::string_view::npos) << s;
  BuiltinEventAllocator events(rt_.get(), 0);
  arg.external_event_allocator = &events;
  arg.external_notify_allocator = &events;
  EXPECT_TRUE(m->Load(arg).ok());
  EXPECT_TRUE(m->UnLoad().ok());
}

TEST_F(V2ModelExecutor, IoReusePairsAreChecked) {
  auto bad = ModelV2Executor::Create(AddConstModel(1), rt_.get(), 0, ExecutorOption{.io_reuse = "0-0"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("io reuse option '0-0': '0-0' is not a pair"), std::string_view::npos);

  auto m = *ModelV2Executor::Create(AddConstModel(5), rt_.get(), 0, ExecutorOption{.io_reuse = "0,0"});
  ASSERT_TRUE(m->Load().ok());
  HostScalar x(1), y(0);
  Tensor* in[] = {&x.tensor};
  Tensor* out[] = {&y.tensor};
  Status s = m->ExecuteSync(in, 1, out, 1);
  EXPECT_NE(s.message().find("io reuse pair 0,0: output 0 is at"), std::string_view::npos) << s;
  Tensor* same[] = {&x.tensor};
  ASSERT_TRUE(m->ExecuteSync(in, 1, same, 1).ok());  // in place
  EXPECT_EQ(x.value, 6);
  ASSERT_TRUE(m->UnLoad().ok());

  auto range = *ModelV2Executor::Create(AddConstModel(5), rt_.get(), 0, ExecutorOption{.io_reuse = "0,3"});
  ASSERT_TRUE(range->Load().ok());
  s = range->ExecuteSync(in, 1, same, 1);
  EXPECT_NE(s.message().find("io reuse pair 0,3: the model has 1 inputs and 1 outputs"), std::string_view::npos) << s;
  ASSERT_TRUE(range->UnLoad().ok());
}

TEST_F(V2ModelExecutor, AFailingInitLeavesTheModelInInit) {
  exe::ExecuteGraphSet set = AddConstModel(1);
  set.init->mutable_nodes()[0].kernel = "T2.NoSuchKernel";
  auto m = *ModelV2Executor::Create(set, rt_.get(), 0);
  Status s = m->Load();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("the Init graph"), std::string_view::npos) << s;
  EXPECT_EQ(m->state(), ModelState::kInit);
}

// An Init that fails part-way gives back what it made: here the second constant's copy fails (an
// injected fault), and the first constant's device memory is freed through DeInit. (The RT2.0
// fault campaign leaked such a 512-byte constant: docs/stress.md, F.)
TEST_F(V2ModelExecutor, AnInitThatFailsPartWayFreesWhatItMade) {
  exe::ExecuteGraphSet set = AddConstModel(1);
  const int c2 = set.init->AddValue("c2");
  exe::ExeNode make2;
  make2.name = "const2";
  make2.kernel = "T2.ConstToDevice";
  make2.outputs = {c2};
  make2.attrs["value"] = std::int64_t{2};
  ASSERT_TRUE(set.init->AddNode(make2).ok());
  set.init->AddOutput(c2);
  const int dc2 = set.deinit->AddInput("c2");
  exe::ExeNode free2;
  free2.name = "free_const2";
  free2.kernel = "T2.FreeDevice";
  free2.inputs = {dc2};
  ASSERT_TRUE(set.deinit->AddNode(free2).ok());
  set.main->AddInput("c2");  // Main takes every Init output
  const std::uint64_t before = rt_->Stats(0)->memory.in_use;
  // The default stream's second task (the second constant's copy) fails.
  ASSERT_TRUE(rt_->InjectFault(0, npu_sim::FaultTarget::kStream, 0, npu_sim::Fault{npu_sim::FaultKind::kFail, 2}).ok());
  auto m = *ModelV2Executor::Create(set, rt_.get(), 0);
  Status s = m->Load();
  EXPECT_EQ(s.code(), StatusCode::kFailed) << s;
  EXPECT_EQ(m->state(), ModelState::kInit);
  EXPECT_EQ(rt_->Stats(0)->memory.in_use, before) << "the first constant leaked";
}

TEST_F(V2ModelExecutor, StreamExecutorFromEightThreadsOnFourStreams) {
  std::vector<npu_sim::Stream> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(*rt_->CreateStream(0));
  std::atomic<int> builds{0};
  StreamExecutor se([&]() -> StatusOr<std::unique_ptr<ModelV2Executor>> {
    ++builds;
    return ModelV2Executor::Create(AddConstModel(1000), rt_.get(), 0);
  });
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const npu_sim::Stream stream = streams[t % 4];
      for (int i = 0; i < 40; ++i) {
        ModelExecuteArg arg;
        arg.stream = stream;
        ModelV2Executor* m = se.GetOrCreateLoaded(stream, arg);
        if (m == nullptr) {
          ++bad;
          return;
        }
        HostScalar x(t * 100 + i), y(-1);
        Tensor* in[] = {&x.tensor};
        Tensor* out[] = {&y.tensor};
        if (!m->Execute(arg, in, 1, out, 1).ok() || !rt_->SynchronizeStream(stream).ok()) ++bad;
        if (y.value != t * 100 + i + 1000) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(se.size(), 4u);
  EXPECT_EQ(builds.load(), 4);
  const int freed = g_freed.load();
  for (const auto& s : streams) EXPECT_TRUE(se.Erase(s).ok());
  EXPECT_EQ(g_freed.load(), freed + 4);
  EXPECT_EQ(se.size(), 0u);
  EXPECT_TRUE(se.Erase(streams[0]).ok()) << "erasing an unknown stream succeeds";
  for (const auto& s : streams) EXPECT_TRUE(rt_->DestroyStream(s).ok());
}

TEST_F(V2ModelExecutor, StreamExecutorReportsABuilderFailureAsNull) {
  StreamExecutor se([]() -> StatusOr<std::unique_ptr<ModelV2Executor>> {
    return Status::ParamInvalid("no model today");
  });
  auto stream = *rt_->CreateStream(0);
  ModelExecuteArg arg;
  arg.stream = stream;
  EXPECT_EQ(se.GetOrCreateLoaded(stream, arg), nullptr);
  EXPECT_NE(se.last_error().message().find("no model today"), std::string_view::npos);
  EXPECT_EQ(se.size(), 0u);
  ASSERT_TRUE(rt_->DestroyStream(stream).ok());
}

TEST_F(V2ModelExecutor, CachingAllocatorReusesAndReleasesOnlyWhenAsked) {
  CachingMemAllocator a(rt_.get(), 0, TensorPlacement::kOnDeviceHbm, "test.cache");
  auto b1 = a.Malloc(1000);
  ASSERT_TRUE(b1.ok());
  EXPECT_EQ(b1->size, 1024u);
  a.Free(*b1);
  auto b2 = a.Malloc(900);
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(b2->addr, b1->addr) << "a cached block of the right size is reused";
  auto big = a.Malloc(4096);
  ASSERT_TRUE(big.ok());
  EXPECT_NE(big->addr, b1->addr);
  a.Free(*b2);
  a.Free(*big);
  auto stats = a.stats();
  EXPECT_EQ(stats.device_mallocs, 2u);
  EXPECT_EQ(stats.reuses, 1u);
  EXPECT_EQ(stats.cached_bytes, 1024u + 4096u);
  EXPECT_EQ(stats.in_use_bytes, 0u);
  ASSERT_TRUE(a.ReleaseCached().ok());
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  auto small = a.Malloc(10);  // 512: the 4096 block would waste more than half
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->size, 512u);
  EXPECT_FALSE(a.Malloc(std::uint64_t{1} << 50).ok()) << "more than the device has";
  a.Free(*small);
}

}  // namespace
}  // namespace npuflow::v2
