// 64 generations' worth of clients as Boost.Fiber fibers on ONE host thread, against a runtime
// with ONE actor worker, all executing one model: nothing on the execution path may block a
// worker or the fibers' thread (either would deadlock here), and every answer is the one the
// same inputs give alone.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <boost/fiber/all.hpp>

#include "npu_sim/runtime.h"
#include "scheduler/davinci_model.h"
#include "scheduler/model_manager.h"
#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"
#include "scheduler/session.h"
#include "synthetic/graphs.h"
#include "scheduler_testing.h"

namespace npuflow::scheduler {
namespace {

using test::PatternInputs;

TEST(ModelActorFibers, SixtyFourFibersOnOneThreadShareAModelWithOneWorker) {
  constexpr int kFibers = 64, kRuns = 8;
  auto m = test::CompileGraph(synthetic::MakeChainGraph(6, 16));
  ASSERT_NE(m, nullptr);
  for (int instances : {1, 4}) {
    SCOPED_TRACE(testing::Message() << instances << " instances");
    auto rt = npu_sim::Runtime::Create({.chips = {m->chip}, .workers = 1});
    ASSERT_TRUE(rt.ok()) << rt.status();
    DavinciModel model(rt->get(), 1, m, LoadConfig{.instances = instances});
    ASSERT_TRUE(model.Init().ok());
    std::vector<std::vector<Tensor>> expected;
    for (int f = 0; f < kFibers; ++f) {
      auto out = model.Execute(PatternInputs(*m, 0.1f * static_cast<float>(f)));
      ASSERT_TRUE(out.ok()) << out.status();
      expected.push_back(std::move(*out));
    }
    std::vector<int> good(kFibers, 0);
    std::vector<Status> errors(kFibers);
    auto done = std::async(std::launch::async, [&] {
      std::vector<boost::fibers::fiber> fibers;
      for (int f = 0; f < kFibers; ++f)
        fibers.emplace_back([&, f] {
          for (int r = 0; r < kRuns; ++r) {
            auto out = model.Execute(PatternInputs(*m, 0.1f * static_cast<float>(f)));
            if (!out.ok()) {
              errors[f] = out.status();
              return;
            }
            good[f] += (*out)[0].data == expected[f][0].data ? 1 : 0;
          }
        });
      for (auto& fiber : fibers) fiber.join();
    });
    ASSERT_EQ(done.wait_for(std::chrono::seconds(120)), std::future_status::ready) << "deadlock";
    for (int f = 0; f < kFibers; ++f) {
      EXPECT_TRUE(errors[f].ok()) << "fiber " << f << ": " << errors[f];
      EXPECT_EQ(good[f], kRuns) << "fiber " << f;
    }
    ASSERT_TRUE(model.Unload().ok());
  }
}

// Loads through the ModelManager from fibers of one thread: the load lease is a queued message, so
// a fiber waiting for it yields; with a mutex instead, the second fiber would block the thread that
// the first one needs to finish its load.
TEST(ModelActorFibers, LoadsFromFibersOnOneThreadDoNotDeadlock) {
  constexpr int kFibers = 8;
  auto m = test::CompileGraph(synthetic::MakeChainGraph(6, 16));
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(ModelManager::Initialize({.chips = {m->chip}, .workers = 1}).ok());
  ModelManager& mm = *ModelManager::Get();
  std::vector<Status> errors(kFibers);
  auto done = std::async(std::launch::async, [&] {
    std::vector<boost::fibers::fiber> fibers;
    for (int f = 0; f < kFibers; ++f)
      fibers.emplace_back([&, f] {
        auto id = mm.LoadModelOnline(m, {});
        if (!id.ok()) {
          errors[f] = id.status();
          return;
        }
        auto model = mm.GetModel(*id);
        auto out = model.ok() ? (*model)->Execute(PatternInputs(*m, static_cast<float>(f))).status() : model.status();
        errors[f] = out.ok() ? mm.Unload(*id) : out;
      });
    for (auto& fiber : fibers) fiber.join();
  });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(120)), std::future_status::ready) << "deadlock";
  for (int f = 0; f < kFibers; ++f) EXPECT_TRUE(errors[f].ok()) << "fiber " << f << ": " << errors[f];
  EXPECT_TRUE(mm.LoadedModels().empty());
  EXPECT_TRUE(ModelManager::Finalize().ok());
}

// A session's graphs used from fibers of one thread, with one actor worker: the first runs of a
// graph all need it built and loaded, so all but one wait for its lease (a queued message to the
// session's actor: the waiting fibers yield); later runs of the loaded graph take no lease.
TEST(ModelActorFibers, SessionGraphsFromFibersOnOneThread) {
  constexpr int kFibers = 16, kRuns = 4;
  graph::RegisterBuiltinOps();
  auto m = test::CompileGraph(synthetic::MakeChainGraph(6, 16));
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(ModelManager::Initialize({.chips = {m->chip}, .workers = 1}).ok());
  {
    auto session = Session::Create({});
    ASSERT_TRUE(session.ok()) << session.status();
    Session& s = **session;
    for (std::uint32_t g : {1u, 2u}) {
      auto graph = synthetic::MakeChainGraph(6, 16);
      ASSERT_TRUE(graph.ok());
      ASSERT_TRUE(s.AddGraph(g, std::move(*graph)).ok());
    }
    std::vector<Status> errors(kFibers);
    std::vector<std::vector<std::vector<Tensor>>> got(kFibers);
    auto done = std::async(std::launch::async, [&] {
      std::vector<boost::fibers::fiber> fibers;
      for (int f = 0; f < kFibers; ++f)
        fibers.emplace_back([&, f] {
          for (int r = 0; r < kRuns && errors[f].ok(); ++r) {
            auto out = s.RunGraph(1 + f % 2, PatternInputs(*m, static_cast<float>(f + r)));
            if (out.ok()) got[f].push_back(std::move(*out));
            else errors[f] = out.status();
          }
        });
      for (auto& fiber : fibers) fiber.join();
    });
    ASSERT_EQ(done.wait_for(std::chrono::seconds(120)), std::future_status::ready) << "deadlock";
    for (int f = 0; f < kFibers; ++f) {
      ASSERT_TRUE(errors[f].ok()) << "fiber " << f << ": " << errors[f];
      for (int r = 0; r < kRuns; ++r) {
        auto want = s.RunGraph(1 + f % 2, PatternInputs(*m, static_cast<float>(f + r)));
        ASSERT_TRUE(want.ok()) << want.status();
        EXPECT_EQ(got[f][r], *want) << "fiber " << f << " run " << r;
      }
    }
    EXPECT_EQ(ModelManager::Get()->LoadedModels().size(), 2u) << "each graph loaded once";
    EXPECT_TRUE(s.RemoveGraph(1).ok());
    EXPECT_EQ(s.RunGraph(1, PatternInputs(*m, 1.f)).status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(s.Finalize().ok());
  }
  EXPECT_TRUE(ModelManager::Finalize().ok());
}

// An RT2.0 graph (an unknown batch) from more fibers of one thread than it has instances: a
// fiber that finds every instance busy waits for one as a fiber. It blocked the thread on a
// condition variable, so the fiber holding the instance never ran again (npuflow stress found it).
TEST(ModelActorFibers, Rt2GraphFromMoreFibersThanInstancesOnOneThread) {
  constexpr int kFibers = 8, kRuns = 4;
  graph::RegisterBuiltinOps();
  const char* text = R"pb(
    node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { symbol: "n" } dim { size: 4 } } } } }
    node { name: "a" op: "Relu" input: "x" }
    node { name: "b" op: "Tanh" input: "a" }
    node { name: "out" op: "NetOutput" input: "b" }
  )pb";
  ASSERT_TRUE(ModelManager::Initialize({.chips = {"910B"}, .workers = 1}).ok());
  {
    auto session = Session::Create({{"npuflow.executionStreams", "2"}});
    ASSERT_TRUE(session.ok()) << session.status();
    Session& s = **session;
    ASSERT_TRUE(s.AddGraph(1, *graph::ParseGraphText(text, "dynamic")).ok());
    ASSERT_TRUE(s.LoadGraph(1).ok());
    auto input = [](int f, int r) {
      return test::FilledF32(graph::Shape{1 + f % 3, 4}, [f, r](std::size_t i) { return 0.1f * (f - r) + 0.01f * i - 0.2f; });
    };
    std::vector<Status> errors(kFibers);
    std::vector<std::vector<std::vector<Tensor>>> got(kFibers);
    auto done = std::async(std::launch::async, [&] {
      std::vector<boost::fibers::fiber> fibers;
      for (int f = 0; f < kFibers; ++f)
        fibers.emplace_back([&, f] {
          for (int r = 0; r < kRuns && errors[f].ok(); ++r) {
            auto out = s.RunGraph(1, {input(f, r)});
            if (out.ok()) got[f].push_back(std::move(*out));
            else errors[f] = out.status();
          }
        });
      for (auto& fiber : fibers) fiber.join();
    });
    ASSERT_EQ(done.wait_for(std::chrono::seconds(120)), std::future_status::ready) << "deadlock";
    for (int f = 0; f < kFibers; ++f) {
      ASSERT_TRUE(errors[f].ok()) << "fiber " << f << ": " << errors[f];
      for (int r = 0; r < kRuns; ++r) {
        auto want = s.RunGraph(1, {input(f, r)});
        ASSERT_TRUE(want.ok()) << want.status();
        EXPECT_EQ(got[f][r], *want) << "fiber " << f << " run " << r;
      }
    }
    EXPECT_TRUE(s.Finalize().ok());
  }
  EXPECT_TRUE(ModelManager::Finalize().ok());
}

}  // namespace
}  // namespace npuflow::scheduler
