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

#include "graph/ir/tensor_access.h"
#include "graph/ops/op_registry.h"
#include "lowering/compiler.h"
#include "npu_sim/runtime.h"
#include "scheduler/davinci_model.h"
#include "scheduler/model_manager.h"
#include "synthetic/graphs.h"

namespace npuflow::scheduler {
namespace {

std::vector<Tensor> Inputs(const CompiledModel& m, float seed) {
  std::vector<Tensor> in;
  for (const graph::IoDef& io : m.inputs) {
    Tensor t = graph::ZeroTensor(io.desc);
    auto* f = reinterpret_cast<float*>(t.data.data());
    for (std::size_t i = 0; i < t.data.size() / sizeof(float); ++i) f[i] = seed * static_cast<float>(i % 7) - 2.f;
    in.push_back(std::move(t));
  }
  return in;
}

TEST(ModelActorFibers, SixtyFourFibersOnOneThreadShareAModelWithOneWorker) {
  constexpr int kFibers = 64, kRuns = 8;
  graph::RegisterBuiltinOps();
  auto graph = synthetic::MakeChainGraph(6, 16);
  ASSERT_TRUE(graph.ok());
  auto compiled = lowering::CompileV1(std::move(*graph), {});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto m = std::make_shared<const CompiledModel>(std::move(*compiled));
  for (int instances : {1, 4}) {
    SCOPED_TRACE(testing::Message() << instances << " instances");
    auto rt = npu_sim::Runtime::Create({.chips = {m->chip}, .workers = 1});
    ASSERT_TRUE(rt.ok()) << rt.status();
    DavinciModel model(rt->get(), 1, m, LoadConfig{.instances = instances});
    ASSERT_TRUE(model.Init().ok());
    std::vector<std::vector<Tensor>> expected;
    for (int f = 0; f < kFibers; ++f) {
      auto out = model.Execute(Inputs(*m, 0.1f * static_cast<float>(f)));
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
            auto out = model.Execute(Inputs(*m, 0.1f * static_cast<float>(f)));
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
  graph::RegisterBuiltinOps();
  auto graph = synthetic::MakeChainGraph(6, 16);
  ASSERT_TRUE(graph.ok());
  auto compiled = lowering::CompileV1(std::move(*graph), {});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto m = std::make_shared<const CompiledModel>(std::move(*compiled));
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
        auto out = model.ok() ? (*model)->Execute(Inputs(*m, static_cast<float>(f))).status() : model.status();
        errors[f] = out.ok() ? mm.Unload(*id) : out;
      });
    for (auto& fiber : fibers) fiber.join();
  });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(120)), std::future_status::ready) << "deadlock";
  for (int f = 0; f < kFibers; ++f) EXPECT_TRUE(errors[f].ok()) << "fiber " << f << ": " << errors[f];
  EXPECT_TRUE(mm.LoadedModels().empty());
  EXPECT_TRUE(ModelManager::Finalize().ok());
}

}  // namespace
}  // namespace npuflow::scheduler
