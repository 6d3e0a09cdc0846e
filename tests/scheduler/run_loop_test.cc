// The Run loop (RunGraphAsync -> ModelActor) and NnExecute under device faults, as seed 002
// (3.2, 3.3) and GE_BEHAVIOUR "v1 runtime" describe them:
//   hang + timeout       the request gets Timeout, the loop stops, later requests get an error;
//                        on the NnExecute path the call gets Timeout and the model runs again
//   end of sequence      the request gets EndOfSequence (with outputs), the loop goes on
//   another device error that request fails, the loop goes on
//   user stop            RemoveGraph / RunLoop::Stop: a normal stop, in-flight work Aborted
// Faults are injected on a stream bound to the model's device model (npu_sim InjectFault): the
// Nth task from now of that stream hangs / ends the sequence / fails, and is then consumed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"
#include "scheduler/davinci_model.h"
#include "scheduler/run_loop.h"
#include "scheduler/model_manager.h"
#include "scheduler/session.h"
#include "scheduler_testing.h"

namespace npuflow::scheduler {
namespace {

using npu_sim::FaultKind;
using npu_sim::FaultTarget;
using test::Answer;
using test::DataNode;
using test::DeviceBuffers;
using test::FilledF32;
using test::Near;

const std::string kChain = DataNode("x", "DT_FLOAT", {4, 32}) + R"pb(
  node { name: "a" op: "Relu" input: "x" }
  node { name: "b" op: "Tanh" input: "a" }
  node { name: "c" op: "Mul" input: "b" input: "x" }
  node { name: "out" op: "NetOutput" input: "c" }
)pb";

Tensor Input(float scale) {
  return FilledF32({4, 32}, [scale](std::size_t i) { return scale * (static_cast<float>(i % 17) - 8.f) / 8.f; });
}

// The same on the host: tanh(relu(x)) * x.
Tensor Expected(const Tensor& x) {
  Tensor t = graph::ZeroTensor(x.desc);
  for (std::size_t i = 0; i < 128; ++i) {
    const float v = graph::LoadF(x, i);
    graph::StoreF(t, i, std::tanh(std::max(v, 0.f)) * v);
  }
  return t;
}

::testing::AssertionResult IsExpected(const std::vector<Tensor>& outs, const Tensor& x) {
  if (outs.size() != 1) return ::testing::AssertionFailure() << outs.size() << " outputs, expected 1";
  return Near(outs[0], Expected(x));
}

// Runs `fn` on another thread and gives up (aborting the binary, with a message) if it has not
// returned in time: a deadlock must fail the test, not hang CI until its timeout.
template <typename F>
auto WithDeadline(const char* what, F fn, int seconds = 30) {
  auto f = std::async(std::launch::async, std::move(fn));
  if (f.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << what << " did not return within " << seconds << " s (deadlock?)";
    std::fprintf(stderr, "%s did not return within %d s: aborting\n", what, seconds);
    std::abort();
  }
  return f.get();
}

class SchedulerRunLoop : public test::ModelManagerTest {
 protected:
  void TearDown() override {
    session_.reset();
    ModelManagerTest::TearDown();
  }

  // A session with the chain graph (single stream) under id 1, loaded.
  void LoadChain(Options options) {
    options["ge.enableSingleStream"] = "true";
    auto session = Session::Create(options);
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = std::move(*session);
    ASSERT_TRUE(session_->AddGraph(1, graph::ParseGraphText(kChain, "chain").value()).ok());
    Status s = session_->LoadGraph(1);
    ASSERT_TRUE(s.ok()) << s;
    auto model = session_->GetLoadedModel(1);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *model;
    ASSERT_EQ(model_->compiled().streams.size(), 1u);
    ASSERT_EQ(model_->instances(), 1);
    model_stream_ = BoundStream();
  }

  // The stream bound to the device model. On this fresh device nothing but the default stream
  // (0), the model's execution stream and its bound stream has been created yet.
  int BoundStream() {
    auto stats = model_->runtime().Stats(model_->device());
    EXPECT_TRUE(stats.ok());
    std::set<int> exec;
    for (int i = 0; i < model_->instances(); ++i) exec.insert(static_cast<int>(model_->exec_stream(i).id));
    std::vector<int> bound;
    for (int id = 1; id < static_cast<int>(stats->streams); ++id)
      if (!exec.count(id)) bound.push_back(id);
    EXPECT_EQ(bound.size(), 1u) << stats->streams << " live streams";
    return bound.empty() ? -1 : bound[0];
  }

  void Inject(FaultKind kind, std::uint64_t nth = 1) {
    Status s = model_->runtime().InjectFault(model_->device(), FaultTarget::kStream, model_stream_, {kind, nth});
    ASSERT_TRUE(s.ok()) << s;
  }

  // Waits until the device has started `n` more kernels than `before` (a run is in flight).
  void WaitForKernels(std::uint64_t before, std::uint64_t n) {
    for (int i = 0; i < 3000; ++i) {
      if (KernelsExecuted() >= before + n) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ADD_FAILURE() << "the run did not start on the device";
  }
  std::uint64_t KernelsExecuted() { return model_->runtime().Stats(model_->device()).value().kernels_executed; }

  // RunGraphAsync, answered into `answer`. Returns the submission's status.
  Status Async(const Tensor& x, Answer& answer) { return session_->RunGraphAsync(1, {x}, answer.Callback()); }

  std::unique_ptr<Session> session_;
  std::shared_ptr<DavinciModel> model_;
  int model_stream_ = -1;
};

TEST_F(SchedulerRunLoop, AsyncRunsAndAnswersInOrder) {
  LoadChain({});
  std::vector<std::unique_ptr<Answer>> answers;
  for (int i = 0; i < 8; ++i) {
    answers.push_back(std::make_unique<Answer>());
    ASSERT_TRUE(Async(Input(0.5f + i), *answers.back()).ok());
  }
  for (int i = 0; i < 8; ++i) {
    std::pair<Status, std::vector<Tensor>> r;
    ASSERT_TRUE(answers[i]->Wait(r));
    ASSERT_TRUE(r.first.ok()) << r.first;
    EXPECT_TRUE(IsExpected(r.second, Input(0.5f + i))) << "request " << i;
    EXPECT_EQ(answers[i]->calls(), 1);
  }
}

TEST_F(SchedulerRunLoop, HangTimesOutAndStopsTheLoop) {
  LoadChain({{"npuflow.executeTimeoutMs", "200"}});
  Answer ok;
  ASSERT_TRUE(Async(Input(1.f), ok).ok());
  std::pair<Status, std::vector<Tensor>> r;
  ASSERT_TRUE(ok.Wait(r));
  ASSERT_TRUE(r.first.ok()) << r.first;
  EXPECT_TRUE(IsExpected(r.second, Input(1.f)));

  Inject(FaultKind::kHang);
  Answer hung, queued;
  ASSERT_TRUE(Async(Input(2.f), hung).ok());
  Status queued_submit = Async(Input(3.f), queued);
  ASSERT_TRUE(hung.Wait(r));
  EXPECT_EQ(r.first.code(), StatusCode::kTimeout) << r.first;
  // The queued request: Timeout too (or refused at submission if the loop had already stopped).
  if (queued_submit.ok()) {
    ASSERT_TRUE(queued.Wait(r));
    EXPECT_EQ(r.first.code(), StatusCode::kTimeout) << r.first;
  } else {
    EXPECT_EQ(queued_submit.code(), StatusCode::kTimeout) << queued_submit;
  }

  // The loop has stopped: a later request gets an error, never a run.
  Answer later;
  Status later_submit = Async(Input(4.f), later);
  if (later_submit.ok()) {
    ASSERT_TRUE(later.Wait(r));
    EXPECT_FALSE(r.first.ok()) << "a request after the loop stopped on a timeout ran";
    EXPECT_EQ(r.first.code(), StatusCode::kTimeout) << r.first;
  } else {
    EXPECT_EQ(later_submit.code(), StatusCode::kTimeout) << later_submit;
  }
  EXPECT_EQ(hung.calls(), 1);
  EXPECT_LE(later.calls(), 1);
  // Removing the graph after that is still a clean stop.
  Status rm = WithDeadline("RemoveGraph", [&] { return session_->RemoveGraph(1); });
  EXPECT_TRUE(rm.ok()) << rm;
}

TEST_F(SchedulerRunLoop, EndOfSequenceIsReportedAndTheLoopGoesOn) {
  LoadChain({{"npuflow.executeTimeoutMs", "5000"}});
  Inject(FaultKind::kEndOfSequence);
  Answer eos;
  ASSERT_TRUE(Async(Input(1.f), eos).ok());
  std::pair<Status, std::vector<Tensor>> r;
  ASSERT_TRUE(eos.Wait(r));
  EXPECT_EQ(r.first.code(), StatusCode::kEndOfSequence) << r.first;
  EXPECT_EQ(r.second.size(), 1u) << "end of sequence comes with the model's outputs";

  for (float scale : {2.f, 3.f}) {
    Answer next;
    ASSERT_TRUE(Async(Input(scale), next).ok());
    ASSERT_TRUE(next.Wait(r));
    ASSERT_TRUE(r.first.ok()) << r.first;
    EXPECT_TRUE(IsExpected(r.second, Input(scale)));
  }
}

TEST_F(SchedulerRunLoop, DeviceErrorFailsThatRequestOnly) {
  LoadChain({{"npuflow.executeTimeoutMs", "5000"}});
  Inject(FaultKind::kFail, 2);  // the second task of the next run
  Answer failed, next;
  ASSERT_TRUE(Async(Input(1.f), failed).ok());
  ASSERT_TRUE(Async(Input(2.f), next).ok());
  std::pair<Status, std::vector<Tensor>> r;
  ASSERT_TRUE(failed.Wait(r));
  EXPECT_FALSE(r.first.ok());
  EXPECT_NE(r.first.code(), StatusCode::kTimeout) << r.first;
  EXPECT_NE(r.first.code(), StatusCode::kEndOfSequence) << r.first;
  ASSERT_TRUE(next.Wait(r));
  ASSERT_TRUE(r.first.ok()) << r.first;
  EXPECT_TRUE(IsExpected(r.second, Input(2.f)));
}

TEST_F(SchedulerRunLoop, RemoveGraphStopsTheLoopNormally) {
  LoadChain({});  // no timeout: only the stop ends the hung request
  Answer warm;
  ASSERT_TRUE(Async(Input(1.f), warm).ok());
  std::pair<Status, std::vector<Tensor>> r;
  ASSERT_TRUE(warm.Wait(r));
  ASSERT_TRUE(r.first.ok()) << r.first;

  // The second task of the next run hangs: once its first kernel has started, the run is on
  // the device.
  Inject(FaultKind::kHang, 2);
  const std::uint64_t kernels = KernelsExecuted();
  Answer hung, queued;
  ASSERT_TRUE(Async(Input(2.f), hung).ok());
  ASSERT_TRUE(Async(Input(3.f), queued).ok());
  WaitForKernels(kernels, 1);
  Status rm = WithDeadline("RemoveGraph with a hung request", [&] { return session_->RemoveGraph(1); });
  EXPECT_TRUE(rm.ok()) << rm;
  ASSERT_TRUE(hung.Wait(r));
  EXPECT_EQ(r.first.code(), StatusCode::kAborted) << r.first;
  ASSERT_TRUE(queued.Wait(r));
  EXPECT_EQ(r.first.code(), StatusCode::kAborted) << r.first;
  EXPECT_EQ(hung.calls(), 1);
  EXPECT_EQ(queued.calls(), 1);
  EXPECT_EQ(session_->RunGraph(1, {Input(1.f)}).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(ModelManager::Get()->IsLoaded(model_->id()));
}

TEST_F(SchedulerRunLoop, RunLoopStopIsANormalStop) {
  LoadChain({});
  auto loop = RunLoop::Start(model_, std::nullopt);
  ASSERT_TRUE(loop.ok()) << loop.status();
  EXPECT_TRUE((*loop)->running());
  EXPECT_TRUE((*loop)->status().ok());

  Answer first;
  ASSERT_TRUE((*loop)->Push({Input(1.f)}, first.Callback()).ok());
  std::pair<Status, std::vector<Tensor>> r;
  ASSERT_TRUE(first.Wait(r));
  ASSERT_TRUE(r.first.ok()) << r.first;
  EXPECT_TRUE(IsExpected(r.second, Input(1.f)));

  Inject(FaultKind::kHang, 2);
  const std::uint64_t kernels = KernelsExecuted();
  Answer hung;
  ASSERT_TRUE((*loop)->Push({Input(2.f)}, hung.Callback()).ok());
  WaitForKernels(kernels, 1);  // in flight on the device, hung on its second task
  Status stop = WithDeadline("RunLoop::Stop with a hung request", [&] { return (*loop)->Stop(); });
  EXPECT_TRUE(stop.ok()) << stop;
  ASSERT_TRUE(hung.Wait(r, 5)) << "Stop returned before the item in flight was answered";
  EXPECT_EQ(r.first.code(), StatusCode::kAborted) << r.first;
  EXPECT_NE(r.first.message().find("stopped by the user"), std::string_view::npos) << r.first;
  EXPECT_FALSE((*loop)->running());
  EXPECT_EQ((*loop)->status().code(), StatusCode::kAborted) << (*loop)->status();
  EXPECT_TRUE((*loop)->Stop().ok()) << "Stop is idempotent";

  // After the stop a push is answered at once with the reason.
  Answer after;
  Status pushed = (*loop)->Push({Input(3.f)}, after.Callback());
  if (pushed.ok()) {
    ASSERT_TRUE(after.Wait(r));
    EXPECT_EQ(r.first.code(), StatusCode::kAborted) << r.first;
  } else {
    EXPECT_EQ(pushed.code(), StatusCode::kAborted) << pushed;
  }

  // A normal stop leaves the model usable; the fault was consumed by the aborted run.
  auto out = model_->Execute({Input(4.f)}, std::chrono::seconds(30));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(IsExpected(*out, Input(4.f)));
}

TEST_F(SchedulerRunLoop, LoopTimeoutFromRunLoopStartStopsIt) {
  LoadChain({});
  auto loop = RunLoop::Start(model_, std::chrono::milliseconds(200));
  ASSERT_TRUE(loop.ok()) << loop.status();
  Inject(FaultKind::kHang);
  Answer hung;
  ASSERT_TRUE((*loop)->Push({Input(2.f)}, hung.Callback()).ok());
  std::pair<Status, std::vector<Tensor>> r;
  ASSERT_TRUE(hung.Wait(r));
  EXPECT_EQ(r.first.code(), StatusCode::kTimeout) << r.first;
  // The loop stops on its own after a timeout; wait for the state to settle.
  for (int i = 0; i < 300 && (*loop)->running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE((*loop)->running());
  EXPECT_EQ((*loop)->status().code(), StatusCode::kTimeout) << (*loop)->status();
  Answer after;
  Status pushed = (*loop)->Push({Input(3.f)}, after.Callback());
  if (pushed.ok()) {
    ASSERT_TRUE(after.Wait(r));
    EXPECT_EQ(r.first.code(), StatusCode::kTimeout) << r.first;
  } else {
    EXPECT_EQ(pushed.code(), StatusCode::kTimeout) << pushed;
  }
  EXPECT_TRUE(WithDeadline("RunLoop::Stop after a timeout", [&] { return (*loop)->Stop(); }).ok());
}

// Unloading a model whose Run loop is running stops the loop first: the item in flight (here one
// hung on the device) and later pushes get Aborted naming the unload. The loop used to go on
// submitting to the unloaded model's destroyed execution stream ("npu_sim: no device -1", or a
// stream id another model reuses); npuflow stress --scenario weights found it.
TEST_F(SchedulerRunLoop, UnloadingTheModelStopsItsRunLoopFirst) {
  LoadChain({});
  auto loop = RunLoop::Start(model_, std::nullopt);
  ASSERT_TRUE(loop.ok()) << loop.status();
  Answer first;
  ASSERT_TRUE((*loop)->Push({Input(1.f)}, first.Callback()).ok());
  std::pair<Status, std::vector<Tensor>> r;
  ASSERT_TRUE(first.Wait(r));
  ASSERT_TRUE(r.first.ok()) << r.first;

  Inject(FaultKind::kHang);
  Answer hung;
  ASSERT_TRUE((*loop)->Push({Input(2.f)}, hung.Callback()).ok());
  Status unloaded = WithDeadline("Unload with a Run loop in flight",
                                 [&] { return ModelManager::Get()->Unload(model_->id()); });
  EXPECT_TRUE(unloaded.ok()) << unloaded;
  ASSERT_TRUE(hung.Wait(r));
  EXPECT_EQ(r.first.code(), StatusCode::kAborted) << r.first;
  EXPECT_NE(r.first.message().find("unloaded"), std::string_view::npos) << r.first;
  EXPECT_FALSE((*loop)->running());

  Answer later;
  Status pushed = (*loop)->Push({Input(3.f)}, later.Callback());
  if (pushed.ok()) {
    ASSERT_TRUE(later.Wait(r));
    pushed = r.first;
  }
  EXPECT_EQ(pushed.code(), StatusCode::kAborted) << pushed;
  EXPECT_NE(pushed.message().find("unloaded"), std::string_view::npos) << pushed;
  EXPECT_TRUE((*loop)->Stop().ok());
  EXPECT_EQ(RunLoop::Start(model_, std::nullopt).status().code(), StatusCode::kAborted);

  // The session loads the graph again, with a Run loop of its own.
  Answer again;
  ASSERT_TRUE(Async(Input(4.f), again).ok());
  ASSERT_TRUE(again.Wait(r));
  ASSERT_TRUE(r.first.ok()) << r.first;
  EXPECT_TRUE(IsExpected(r.second, Input(4.f)));
}

// ---- NnExecute / RunGraph: a timeout fails the call, the model runs again ---------------------

TEST_F(SchedulerRunLoop, RunGraphTimeoutThenRunsAgain) {
  LoadChain({{"npuflow.executeTimeoutMs", "200"}});
  auto out = session_->RunGraph(1, {Input(1.f)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(IsExpected(*out, Input(1.f)));

  Inject(FaultKind::kHang);
  auto hung = WithDeadline("RunGraph on a hung model", [&] { return session_->RunGraph(1, {Input(2.f)}); });
  EXPECT_EQ(hung.status().code(), StatusCode::kTimeout) << hung.status();

  for (float scale : {3.f, 4.f}) {
    out = session_->RunGraph(1, {Input(scale)});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(IsExpected(*out, Input(scale)));
  }
}

TEST_F(SchedulerRunLoop, ZeroCopyNnExecuteTimeoutThenRunsAgain) {
  LoadChain({});
  const Tensor x = Input(1.5f);
  DeviceBuffers io(model_->runtime(), 0);
  Status allocated = io.Allocate({x}, model_->compiled().outputs);
  ASSERT_TRUE(allocated.ok()) << allocated;
  ExecuteArgs& args = io.args;
  args.timeout = std::chrono::milliseconds(200);

  Inject(FaultKind::kHang);
  Status hung = WithDeadline("NnExecute on a hung model", [&] { return model_->NnExecute(args); });
  EXPECT_EQ(hung.code(), StatusCode::kTimeout) << hung;

  args.timeout = std::chrono::seconds(30);
  Status again = model_->NnExecute(args);
  ASSERT_TRUE(again.ok()) << again;
  auto got = io.ReadOutputs();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(IsExpected(*got, x));

  // Execute (host tensors) with its own timeout: the same.
  Inject(FaultKind::kHang);
  auto hung2 = WithDeadline("Execute on a hung model",
                            [&] { return model_->Execute({x}, std::chrono::milliseconds(200)); });
  EXPECT_EQ(hung2.status().code(), StatusCode::kTimeout) << hung2.status();
  auto fine = model_->Execute({x}, std::chrono::seconds(30));
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_TRUE(IsExpected(*fine, x));
}

// Host buffers: the output's D2H copy is queued behind a hung kernel when the call times out. The
// call returns Timeout and the caller's output buffer is never written afterwards (its window is
// closed before NnExecute returns); the same buffers then run again.
TEST_F(SchedulerRunLoop, HostBufferNnExecuteTimeoutLeavesTheOutputAlone) {
  LoadChain({});
  const Tensor x = Input(2.5f);
  const float kUntouched = -1234.5f;
  std::vector<float> out(128, kUntouched);
  ExecuteArgs args;
  args.inputs = {DataBuffer::Host(x.data.data(), x.data.size())};
  args.outputs = {DataBuffer::Host(out.data(), out.size() * sizeof(float))};
  args.timeout = std::chrono::milliseconds(200);

  Inject(FaultKind::kHang);  // the first kernel: the output's copy waits behind it
  Status hung = WithDeadline("NnExecute with host buffers on a hung model", [&] { return model_->NnExecute(args); });
  EXPECT_EQ(hung.code(), StatusCode::kTimeout) << hung;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [&](float v) { return v == kUntouched; }))
      << "the output was written although the call timed out before its copy";

  args.timeout = std::chrono::seconds(30);
  Status again = model_->NnExecute(args);
  ASSERT_TRUE(again.ok()) << again;
  Tensor got = graph::ZeroTensor(x.desc);
  std::memcpy(got.data.data(), out.data(), got.data.size());
  EXPECT_TRUE(IsExpected({got}, x));
}

// A device error on the NnExecute path is that call's error; end of sequence keeps its code.
TEST_F(SchedulerRunLoop, RunGraphReportsDeviceErrorsAndEndOfSequence) {
  LoadChain({{"npuflow.executeTimeoutMs", "5000"}});
  Inject(FaultKind::kEndOfSequence);
  auto eos = session_->RunGraph(1, {Input(1.f)});
  EXPECT_EQ(eos.status().code(), StatusCode::kEndOfSequence) << eos.status();
  Inject(FaultKind::kFail);
  auto failed = session_->RunGraph(1, {Input(1.f)});
  EXPECT_FALSE(failed.ok());
  auto out = session_->RunGraph(1, {Input(2.f)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(IsExpected(*out, Input(2.f)));
}

}  // namespace
}  // namespace npuflow::scheduler
