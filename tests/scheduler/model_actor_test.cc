// The ModelActor (scheduler/model_actor.h): every execution is a message to the model's actor,
// charged to its caller's host clock (never to the worker that ran the handler), and Unload drains
// through it: an execution in flight is aborted and answered before anything is freed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "npu_sim/runtime.h"
#include "scheduler/davinci_model.h"
#include "synthetic/graphs.h"
#include "scheduler_testing.h"

namespace npuflow::scheduler {
namespace {

using test::PatternInputs;

std::shared_ptr<const CompiledModel> Chain() { return test::CompileGraph(synthetic::MakeChainGraph(6, 16)); }

int CountOf(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ModelActor, AnExecutionIsChargedToItsCallersHostClockAndTrack) {
  auto compiled = Chain();
  auto rt = npu_sim::Runtime::Create({.chips = {compiled->chip}, .workers = 2, .trace = true});
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto model = std::make_unique<DavinciModel>(rt->get(), 1, compiled, LoadConfig{.instances = 2});
  ASSERT_TRUE(model->Init().ok());
  const npu_sim::VTime latency = 1;  // at least: every host call costs the chip's launch latency
  // Two host threads, each with its own clock: each execution moves only its caller's clock.
  std::vector<npu_sim::VTime> before(2), after(2);
  std::vector<Status> status(2);
  auto client = [&](int c) {
    before[c] = (*rt)->HostClock();
    for (int i = 0; i < 5 && status[c].ok(); ++i) status[c] = model->Execute(PatternInputs(*compiled, 1.f + c)).status();
    after[c] = (*rt)->HostClock();
  };
  const npu_sim::VTime loader = (*rt)->HostClock();  // Init's calls were this thread's
  std::thread a(client, 0), b(client, 1);
  a.join();
  b.join();
  for (int c = 0; c < 2; ++c) {
    ASSERT_TRUE(status[c].ok()) << status[c];
    EXPECT_GE(after[c], before[c] + 5 * latency) << "client " << c << ": its runs were not charged to it";
  }
  EXPECT_EQ((*rt)->HostClock(), loader) << "this thread made no host call meanwhile";
  ASSERT_TRUE(model->Unload().ok());
  // The executions appear on the callers' tracks only: no track for an actor worker.
  const std::string trace = (*rt)->trace().ToJson();
  EXPECT_EQ(CountOf(trace, "\"execute model\""), 0) << "staged runs are submissions, not model executes";
  EXPECT_GE(CountOf(trace, "\"submit\""), 10);
  EXPECT_EQ(CountOf(trace, "\"name\":\"host thread"), 3) << "the loading thread and the two clients, no worker";
  EXPECT_EQ((*rt)->unattributed_host_calls(), 0u);
}

TEST(ModelActor, UnloadAbortsTheExecutionInFlightAndAnswersItFirst) {
  auto compiled = Chain();
  auto rt = npu_sim::Runtime::Create({.chips = {compiled->chip}, .workers = 2});
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto model = std::make_unique<DavinciModel>(rt->get(), 1, compiled, LoadConfig{});
  ASSERT_TRUE(model->Init().ok());
  ASSERT_TRUE(model->Execute(PatternInputs(*compiled, 1.f)).ok());
  // Every stream of the device hangs on its next task: the next run never ends by itself.
  const auto streams = (*rt)->Stats(0).value().streams;
  for (int id = 1; id < static_cast<int>(streams); ++id)
    (void)(*rt)->InjectFault(0, npu_sim::FaultTarget::kStream, id, {npu_sim::FaultKind::kHang, 1});
  std::atomic<bool> returned{false};
  Status hung;
  std::thread caller([&] {
    hung = model->Execute(PatternInputs(*compiled, 2.f)).status();
    returned = true;
  });
  for (int i = 0; i < 2000 && !model->busy(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(model->busy()) << "the execution never started";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(returned.load()) << "the hung run returned by itself: " << hung;
  Status s = model->Unload();
  EXPECT_TRUE(s.ok()) << s;
  caller.join();
  EXPECT_EQ(hung.code(), StatusCode::kAborted) << hung;
  auto late = model->Execute(PatternInputs(*compiled, 3.f));
  EXPECT_EQ(late.status().code(), StatusCode::kAborted) << late.status();
  EXPECT_NE(late.status().message().find("unloaded"), std::string::npos) << late.status();
}

// A run with no timeout is answered straight from the device's completion, and the actor counts
// the instance idle only afterwards. A caller that asks for the model alone right after its own
// run must still get it (waiting for the actor to catch up), never "executions in flight".
TEST(ModelActor, AHostScheduledRunRightAfterTheCallersOwnRunIsNeverRefused) {
  auto compiled = Chain();
  auto rt = npu_sim::Runtime::Create({.chips = {compiled->chip}, .workers = 2});
  ASSERT_TRUE(rt.ok()) << rt.status();
  DavinciModel model(rt->get(), 1, compiled, LoadConfig{.instances = 2});
  ASSERT_TRUE(model.Init().ok());
  const std::vector<Tensor> inputs = PatternInputs(*compiled, 1.25f);
  std::vector<Tensor> sunk = test::ZeroOutputs(compiled->outputs), hosted = test::ZeroOutputs(compiled->outputs);
  const ExecuteArgs sunk_args = test::HostArgs(inputs, sunk), hosted_args = test::HostArgs(inputs, hosted);
  for (int i = 0; i < 200; ++i) {
    Status s = model.NnExecute(sunk_args);
    ASSERT_TRUE(s.ok()) << "round " << i << ": " << s;
    s = model.ExecuteHostScheduled(hosted_args);
    ASSERT_TRUE(s.ok()) << "round " << i << ": " << s;
    ASSERT_EQ(sunk[0].data, hosted[0].data) << "round " << i;
  }
  // Another caller's run that has not been answered still makes it a ParamInvalid.
  const auto streams = (*rt)->Stats(0).value().streams;
  for (int id = 1; id < static_cast<int>(streams); ++id)
    (void)(*rt)->InjectFault(0, npu_sim::FaultTarget::kStream, id, {npu_sim::FaultKind::kHang, 1});
  Status hung;
  std::thread other([&] { hung = model.NnExecute(sunk_args); });
  for (int i = 0; i < 2000 && !model.busy(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(model.busy());
  Status refused = model.ExecuteHostScheduled(hosted_args);
  EXPECT_EQ(refused.code(), StatusCode::kParamInvalid) << refused;
  EXPECT_TRUE(model.Unload().ok());
  other.join();
  EXPECT_EQ(hung.code(), StatusCode::kAborted) << hung;
}

TEST(ModelActor, TheCallerPathStaysSelectableAndAnUnknownPathIsAnError) {
  auto compiled = Chain();
  auto rt = npu_sim::Runtime::Create({.chips = {compiled->chip}, .workers = 2});
  ASSERT_TRUE(rt.ok()) << rt.status();
  LoadConfig caller;
  caller.execute_path = ExecutePath::kCallerThread;
  DavinciModel old_path(rt->get(), 1, compiled, caller);
  ASSERT_TRUE(old_path.Init().ok());
  DavinciModel actor_path(rt->get(), 2, compiled, LoadConfig{});
  ASSERT_TRUE(actor_path.Init().ok());
  auto a = old_path.Execute(PatternInputs(*compiled, 1.5f));
  auto b = actor_path.Execute(PatternInputs(*compiled, 1.5f));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)[0].data, (*b)[0].data) << "both paths compute the same outputs";

  setenv("NPUFLOW_EXECUTE_PATH", "threads", 1);
  DavinciModel bad(rt->get(), 3, compiled, LoadConfig{});
  Status s = bad.Init();
  unsetenv("NPUFLOW_EXECUTE_PATH");
  EXPECT_EQ(s.code(), StatusCode::kParamInvalid) << s;
  EXPECT_NE(s.message().find("NPUFLOW_EXECUTE_PATH"), std::string::npos) << s;
  EXPECT_NE(s.message().find("threads"), std::string::npos) << s;
}

}  // namespace
}  // namespace npuflow::scheduler
