// The device's fault paths, one regression test per bug `npuflow stress` found there
// (docs/stress.md, "Runtime bugs found"): records and waits of a failed run stay in that run; a
// caller of a shared stream hears of its dropped tasks; aborting a stream stops the model run its
// execute task asked for; an abort returns only when no kernel or copy of the stopped work can
// still write; a copy into a buffer its owner gave up moves nothing.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "npu_sim/runtime.h"

namespace npuflow::npu_sim {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Runtime> MakeRuntime(RuntimeOptions options = {}) {
  auto rt = Runtime::Create(std::move(options));
  EXPECT_TRUE(rt.ok()) << rt.status();
  return std::move(rt).value();
}

std::uint64_t FloatBits(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

float ReadFloat(Runtime& rt, DevicePtr p) {
  float v = 0;
  EXPECT_TRUE(rt.MemcpyD2H(0, &v, p, sizeof(v)).ok());
  return v;
}

const KernelDef* Kernel(std::string_view name) { return KernelRegistry::Global().Find(name).value(); }

// A slow kernel: each block takes 20 ms of real time, then writes its index + 1 into args[0][block].
std::atomic<int> g_blocks_started{0};
std::atomic<int> g_blocks_inside{0};
Status SlowWriteRun(KernelContext& ctx) {
  g_blocks_started.fetch_add(1);
  g_blocks_inside.fetch_add(1);
  std::this_thread::sleep_for(20ms);
  DeviceMemory::Mapping keep;
  auto out = ctx.Buffer<float>(0, ctx.block_dim(), keep);
  if (out.ok()) (*out)[ctx.block_idx()] = static_cast<float>(ctx.block_idx() + 1);
  g_blocks_inside.fetch_sub(1);
  return out.status();
}
VTime SlowWriteCost(const KernelContext&, const ChipSpec&) { return 1000; }
const KernelDef* SlowWrite() {
  static const KernelDef* def = [] {
    KernelRegistry::Global().Register({"test_slow_write", Engine::kAICore, &SlowWriteRun, &SlowWriteCost, nullptr});
    return KernelRegistry::Global().Find("test_slow_write").value();
  }();
  return def;
}

// A: run 1 fails after stream a recorded its event and before stream b waited on it. Run 2's wait
// must not take that record: b stays at its wait while a hangs before its record.
TEST(FaultPaths, ARecordOfAFailedRunDoesNotEndTheNextRunsWait) {
  auto rt = MakeRuntime();
  Model m = rt->CreateModel(0).value();
  Stream a = rt->CreateStream(0).value(), b = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, a).ok());
  ASSERT_TRUE(rt->BindStream(m, b).ok());
  Event e = rt->CreateEvent(0).value();
  DevicePtr out = rt->Malloc(0, 4, Placement::kHbm, "out").value();
  ASSERT_TRUE(rt->LoadTasks(m, a, {Task::Nop(), Task::Record(e.id)}).ok());
  ASSERT_TRUE(rt->LoadTasks(m, b, {Task::Nop(), Task::Wait(e.id), Task::Kernel(Kernel("fill_f32"), 1, {out.value, 1, FloatBits(7.f)})}).ok());
  const float zero = 0;
  ASSERT_TRUE(rt->MemcpyH2D(0, out, &zero, 4).ok());
  // Run 1: b fails at its first task; a records (no wait of this run will consume it).
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kStream, b.id, Fault{FaultKind::kFail, 1}).ok());
  EXPECT_EQ(rt->ExecuteModel(m, 10s).status().code(), StatusCode::kFailed);
  rt->system().WaitIdle();
  // Run 2: a hangs before its record. b must wait; with run 1's record it would fill `out`.
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kStream, a.id, Fault{FaultKind::kHang, 2}).ok());
  EXPECT_EQ(rt->ExecuteModel(m, 100ms).status().code(), StatusCode::kTimeout);
  EXPECT_EQ(ReadFloat(*rt, out), 0.f) << "run 2's wait passed on run 1's record";
  // Run 3 runs whole.
  EXPECT_TRUE(rt->ExecuteModel(m, 10s).ok());
  EXPECT_EQ(ReadFloat(*rt, out), 7.f);
}

// B: two callers share a stream. The first caller's tasks fail; the other caller's Synchronize
// hears of it first. The first caller's SynchronizeSubmission still fails; a later caller's
// work is unaffected.
TEST(FaultPaths, ACallerOfASharedStreamHearsOfItsDroppedTasks) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kStream, s.id, Fault{FaultKind::kFail, 1}).ok());
  auto first = rt->Submit(s, {Task::Nop(), Task::Nop()});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(rt->SynchronizeStream(s, 10s).code(), StatusCode::kFailed);  // another caller heard it
  EXPECT_EQ(rt->SynchronizeSubmission(s, *first, 2, 10s).code(), StatusCode::kFailed);
  auto later = rt->Submit(s, {Task::Nop()});
  ASSERT_TRUE(later.ok());
  EXPECT_TRUE(rt->SynchronizeSubmission(s, *later, 1, 10s).ok());
  EXPECT_TRUE(rt->SynchronizeStream(s, 10s).ok()) << "the error was reported; it is not sticky";
  // The asynchronous form too.
  EXPECT_EQ(rt->SynchronizeSubmissionAsync(s, *first, 2).Get().status().code(), StatusCode::kFailed);
}

// B, the other way round: a caller whose tasks all ran hears Ok, although another caller's task
// submitted after them failed before the first caller synchronized.
TEST(FaultPaths, ACallerWhoseTasksRanIsNotFailedByAnothersLaterFailure) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kStream, s.id, Fault{FaultKind::kFail, 3}).ok());
  auto mine = rt->Submit(s, {Task::Nop(), Task::Nop()});
  auto theirs = rt->Submit(s, {Task::Nop(), Task::Nop()});  // its first task fails
  ASSERT_TRUE(mine.ok());
  ASSERT_TRUE(theirs.ok());
  EXPECT_EQ(rt->SynchronizeSubmission(s, *theirs, 2, 10s).code(), StatusCode::kFailed);
  EXPECT_TRUE(rt->SynchronizeSubmission(s, *mine, 2, 10s).ok());
}

// C: a model execute on a user stream hangs; aborting the stream stops that run, so the model
// runs again at once (it used to stay held by the hung run for good).
TEST(FaultPaths, AbortingAStreamStopsTheModelRunItsExecuteAskedFor) {
  auto rt = MakeRuntime();
  Model m = rt->CreateModel(0).value();
  Stream bound = rt->CreateStream(0).value(), user = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, bound).ok());
  ASSERT_TRUE(rt->LoadTasks(m, bound, {Task::Nop(), Task::Nop()}).ok());
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kStream, bound.id, Fault{FaultKind::kHang, 1}).ok());
  ASSERT_TRUE(rt->ExecuteModelOnStream(m, user).ok());
  EXPECT_EQ(rt->SynchronizeStream(user, 50ms).code(), StatusCode::kTimeout);
  ASSERT_TRUE(rt->AbortStream(user).ok());
  EXPECT_EQ(rt->SynchronizeStream(user, 10s).code(), StatusCode::kAborted);
  EXPECT_TRUE(rt->ExecuteModel(m, 10s).ok()) << "the aborted stream's run still holds the model";
  // The user stream serves again.
  ASSERT_TRUE(rt->ExecuteModelOnStream(m, user).ok());
  EXPECT_TRUE(rt->SynchronizeStream(user, 10s).ok());
}

// D: AbortModel returns only when no block of the stopped kernel runs, and none starts later.
TEST(FaultPaths, AnAbortReturnsWhenNothingOfTheStoppedWorkCanStillWrite) {
  auto rt = MakeRuntime({.workers = 2});  // the bound on `started` below counts a part per worker
  const KernelDef* slow = SlowWrite();
  Model m = rt->CreateModel(0).value();
  Stream s = rt->CreateStream(0).value();
  ASSERT_TRUE(rt->BindStream(m, s).ok());
  constexpr std::uint32_t kBlocks = 64;  // many more than units: most wait in the units' queues
  DevicePtr out = rt->Malloc(0, kBlocks * sizeof(float), Placement::kHbm, "out").value();
  const std::vector<float> zeros(kBlocks, 0.f);
  ASSERT_TRUE(rt->MemcpyH2D(0, out, zeros.data(), kBlocks * sizeof(float)).ok());
  ASSERT_TRUE(rt->LoadTasks(m, s, {Task::Kernel(slow, kBlocks, {out.value})}).ok());
  g_blocks_started = 0;
  auto run = rt->ExecuteModelAsync(m);
  auto queued = rt->ExecuteModelAsync(m);  // behind it: the abort fails it too
  while (g_blocks_started.load() == 0) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(rt->AbortModel(m).ok());
  EXPECT_EQ(g_blocks_inside.load(), 0) << "a block of the aborted kernel still runs";
  const int started = g_blocks_started.load();
  std::vector<float> at_abort(kBlocks), later(kBlocks);
  ASSERT_TRUE(rt->MemcpyD2H(0, at_abort.data(), out, kBlocks * sizeof(float)).ok());
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(g_blocks_started.load(), started) << "blocks of the aborted kernel started after the abort";
  ASSERT_TRUE(rt->MemcpyD2H(0, later.data(), out, kBlocks * sizeof(float)).ok());
  EXPECT_EQ(later, at_abort) << "the aborted kernel wrote after the abort returned";
  // The units stop at their next part, although a unit runs a run of parts without a pause for
  // other actors (SendKernelParts): the abort raises the streams' stop mark before its messages
  // wait for a worker (WorkGate::stop_below). About 6 blocks start (a part of 3 per worker); 58 did
  // with runs of parts and no mark.
  EXPECT_LE(started, static_cast<int>(kBlocks / 2));
  EXPECT_EQ(run.Get().status().code(), StatusCode::kAborted);
  EXPECT_EQ(queued.Get().status().code(), StatusCode::kAborted);
}

// D on a host stream: after AbortStream and the Synchronize that collects it, no block runs.
TEST(FaultPaths, AnAbortedHostStreamsKernelStopsBeforeTheCollectingSynchronize) {
  auto rt = MakeRuntime({.workers = 2});
  const KernelDef* slow = SlowWrite();
  Stream s = rt->CreateStream(0).value();
  constexpr std::uint32_t kBlocks = 64;
  DevicePtr out = rt->Malloc(0, kBlocks * sizeof(float), Placement::kHbm, "out").value();
  g_blocks_started = 0;
  ASSERT_TRUE(rt->Submit(s, {Task::Kernel(slow, kBlocks, {out.value})}).ok());
  while (g_blocks_started.load() == 0) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(rt->AbortStream(s).ok());
  EXPECT_EQ(rt->SynchronizeStream(s, 10s).code(), StatusCode::kAborted);
  EXPECT_EQ(g_blocks_inside.load(), 0);
  const int started = g_blocks_started.load();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(g_blocks_started.load(), started);
  EXPECT_LE(started, static_cast<int>(kBlocks / 2));
}

// The stop mark an abort raises (WorkGate::stop_below) stops only the work that was out when it
// came: a stream or model aborted while idle, or aborted and then reused, runs its next work.
TEST(FaultPaths, AnAbortWithNothingRunningLeavesTheNextWorkToRun) {
  for (int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    auto rt = MakeRuntime({.workers = workers});
    Stream s = rt->CreateStream(0).value();
    for (int round = 0; round < 3; ++round) {
      ASSERT_TRUE(rt->AbortStream(s).ok());
      ASSERT_TRUE(rt->LaunchKernel(s, "noop", 24, {}).ok());
      EXPECT_TRUE(rt->SynchronizeStream(s, 10s).ok());
    }
    Model m = rt->CreateModel(0).value();
    Stream bound = rt->CreateStream(0).value();
    ASSERT_TRUE(rt->BindStream(m, bound).ok());
    ASSERT_TRUE(rt->LoadTasks(m, bound, {Task::Kernel(Kernel("noop"), 24, {}), Task::Nop()}).ok());
    for (int round = 0; round < 3; ++round) {
      ASSERT_TRUE(rt->AbortModel(m).ok());
      EXPECT_TRUE(rt->ExecuteModel(m, 10s).ok());
    }
  }
}

// A synchronous copy behind a hung one times out (RuntimeOptions::copy_timeout) instead of waiting
// for good, and the default stream serves the next copy (an RT2.0 load under a DMA hang fault hung
// its client for good: docs/stress.md, G).
TEST(FaultPaths, ASynchronousCopyBehindAHungOneTimesOutAndTheNextRuns) {
  auto rt = MakeRuntime({.copy_timeout = std::chrono::milliseconds(200)});
  DevicePtr p = rt->Malloc(0, 4, Placement::kHbm, "p").value();
  const float v = 3.f;
  ASSERT_TRUE(rt->InjectFault(0, FaultTarget::kStream, 0, Fault{FaultKind::kHang, 1}).ok());
  Status s = rt->MemcpyH2D(0, p, &v, 4);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
  EXPECT_NE(s.message().find("default stream was aborted"), std::string_view::npos) << s;
  ASSERT_TRUE(rt->MemcpyH2D(0, p, &v, 4).ok());
  EXPECT_EQ(ReadFloat(*rt, p), 3.f);
}

// A synchronous caller's outputs are copied straight into its buffers through a HostWindow it
// closes before it returns: a copy that comes after that moves nothing and fails, naming why.
TEST(FaultPaths, ACopyIntoAClosedHostWindowMovesNothing) {
  auto rt = MakeRuntime();
  Stream s = rt->CreateStream(0).value();
  DevicePtr p = rt->Malloc(0, 4, Placement::kHbm, "p").value();
  const float v = 7.f;
  ASSERT_TRUE(rt->MemcpyH2D(0, p, &v, 4).ok());
  auto window = std::make_shared<HostWindow>();
  float dst = -1.f;
  auto copy = [&] {
    Task c = Task::Copy(CopyKind::kDeviceToHost, 4);
    c.src_dev = p;
    c.dst_host = &dst;
    c.host_window = window.get();
    c.keep_alive = window;
    return c;
  };
  window->Close();
  auto closed = rt->Submit(s, {copy()});
  ASSERT_TRUE(closed.ok());
  Status st = rt->SynchronizeSubmission(s, *closed, 1, 10s);
  EXPECT_EQ(st.code(), StatusCode::kAborted) << st;
  EXPECT_NE(st.message().find("given up"), std::string_view::npos) << st;
  EXPECT_EQ(dst, -1.f) << "a copy wrote through a closed window";
  window->Open();
  auto open = rt->Submit(s, {copy()});
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE(rt->SynchronizeSubmission(s, *open, 1, 10s).ok());
  EXPECT_EQ(dst, 7.f);
}

}  // namespace
}  // namespace npuflow::npu_sim
