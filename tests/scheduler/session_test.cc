// Session (seed 002, section 7): graphs added, built, loaded lazily, forked, removed; user memory
// for the feature map and the weights; options checked by name; bad inputs answered with an error
// naming the input, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "graph/ops/interpreter.h"
#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"
#include "scheduler/davinci_model.h"
#include "scheduler/model_manager.h"
#include "scheduler/session.h"
#include "scheduler_testing.h"

namespace npuflow::scheduler {
namespace {

using graph::Segment;
using test::ConstNode;
using test::DataNode;
using test::FilledF32;
using test::FilledI32;
using test::ManagerOptions;
using test::VariableNode;

// x -> a = Relu(x) -> b = Add(a, a) -> c = Relu(b) -> d = Add(c, c) -> out: every intermediate
// is exact on the host (c = 2 relu(x), d = 4 relu(x)). A second output multiplies x by a Const.
std::string ChainText() {
  std::vector<double> w;
  for (int i = 0; i < 512; ++i) w.push_back(0.25 * (i % 9) - 1.0);
  return DataNode("x", "DT_FLOAT", {8, 64}) + ConstNode("w", {8, 64}, w) + R"pb(
  node { name: "a" op: "Relu" input: "x" }
  node { name: "b" op: "Add" input: "a" input: "a" }
  node { name: "c" op: "Relu" input: "b" }
  node { name: "d" op: "Add" input: "c" input: "c" }
  node { name: "e" op: "Mul" input: "x" input: "w" }
  node { name: "out" op: "NetOutput" input: "d" input: "e" }
)pb";
}
const std::string kChain = ChainText();

// A KV cache in a Variable: state that a fork must not share.
const std::string kKv = VariableNode("cache", "DT_FLOAT", {1, 4, 2}) + DataNode("row", "DT_FLOAT", {1, 1, 2}) +
                        DataNode("pos", "DT_INT32", {1}) + R"pb(
  node { name: "kv" op: "KvCacheWrite" input: "cache" input: "row" input: "pos" }
  node { name: "out" op: "NetOutput" input: "kv" }
)pb";

// Two named inputs of different types, for the bad-input tests.
const std::string kTwoInputs = DataNode("tokens_in", "DT_FLOAT", {4, 8}) + DataNode("mask_in", "DT_INT32", {5}) + R"pb(
  node { name: "mask_f" op: "Cast" input: "mask_in" attr { key: "dtype" value { type: DT_FLOAT } } }
  node { name: "t" op: "Relu" input: "tokens_in" }
  node { name: "out" op: "NetOutput" input: "t" input: "mask_f" }
)pb";

std::unique_ptr<graph::ComputeGraph> Parse(const std::string& text) {
  auto g = graph::ParseGraphText(text, "session_test.pbtxt");
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(g).value();
}

Tensor F32(graph::Shape shape, float seed) {
  return FilledF32(std::move(shape), [seed](std::size_t i) {
    return seed * (static_cast<float>(i % 11) - 5.f) + 0.125f * static_cast<float>(i % 3);
  });
}
Tensor I32(graph::Shape shape, std::int64_t v) {
  return FilledI32(std::move(shape), [v](std::size_t i) { return v + static_cast<std::int64_t>(i); });
}

// The chain's outputs by the interpreter.
std::vector<Tensor> Reference(const std::string& text, const std::map<std::string, Tensor>& feeds) {
  auto g = Parse(text);
  auto interp = graph::Interpreter::Create(*g);
  EXPECT_TRUE(interp.ok()) << interp.status();
  auto out = (*interp)->Run(feeds);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.value_or(std::vector<Tensor>{});
}

bool Contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

class SchedulerSession : public test::ModelManagerTest {};

// ---- lifecycle ------------------------------------------------------------------------------

TEST_F(SchedulerSession, BuildCompilesWithoutLoadingRunLoadsLazily) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kChain)).ok());
  EXPECT_EQ(s.AddGraph(1, Parse(kChain)).code(), StatusCode::kParamInvalid) << "an id in use";
  EXPECT_FALSE(s.GetCompiledModel(1).ok()) << "not built yet";

  const auto before = rt().Stats(0).value();
  ASSERT_TRUE(s.BuildGraph(1).ok());
  ASSERT_TRUE(s.BuildGraph(1).ok()) << "building a built graph is a no-op";
  const auto after = rt().Stats(0).value();
  EXPECT_EQ(after.memory.in_use, before.memory.in_use) << "BuildGraph takes no device memory";
  EXPECT_EQ(after.streams, before.streams);
  EXPECT_EQ(s.GetLoadedModel(1).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(ModelManager::Get()->LoadedModels().empty());

  const Tensor x = F32({8, 64}, 0.5f);
  auto out = s.RunGraph(1, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Reference(kChain, {{"x", x}}));
  auto model = s.GetLoadedModel(1);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->session_id(), s.id());
  EXPECT_TRUE(ModelManager::Get()->IsLoaded((*model)->id()));
  EXPECT_EQ(ModelManager::Get()->SessionDevices(s.id()), std::set<int>{0});

  EXPECT_EQ(s.RunGraph(2, {x}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.BuildGraph(2).code(), StatusCode::kNotFound);
  EXPECT_EQ(s.RemoveGraph(2).code(), StatusCode::kNotFound);

  ASSERT_TRUE(s.RemoveGraph(1).ok());
  EXPECT_FALSE(ModelManager::Get()->IsLoaded((*model)->id()));
  EXPECT_EQ(s.RunGraph(1, {x}).status().code(), StatusCode::kNotFound);
}

TEST_F(SchedulerSession, FinalizeUnloadsEverythingAndLaterCallsFail) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kChain)).ok());
  ASSERT_TRUE(s.AddGraph(2, Parse(kKv)).ok());
  ASSERT_TRUE(s.LoadGraph(1).ok());
  ASSERT_TRUE(s.LoadGraph(2).ok());
  EXPECT_EQ(ModelManager::Get()->LoadedModels().size(), 2u);
  const Tensor x = F32({8, 64}, 1.f);
  // An async request in flight at Finalize gets an answer.
  std::promise<Status> answered;
  auto answer = answered.get_future();
  ASSERT_TRUE(s.RunGraphAsync(1, {x}, [&answered](Status st, std::vector<Tensor>) { answered.set_value(st); }).ok());
  EXPECT_TRUE(s.Finalize().ok());
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const Status st = answer.get();
  EXPECT_TRUE(st.ok() || st.code() == StatusCode::kAborted) << st;
  EXPECT_TRUE(ModelManager::Get()->LoadedModels().empty());
  EXPECT_TRUE(s.Finalize().ok()) << "idempotent";
  EXPECT_FALSE(s.RunGraph(1, {x}).ok());
  EXPECT_FALSE(s.AddGraph(3, Parse(kChain)).ok());
}

// A finalized session's actor is retired: making and closing sessions does not grow the actor
// system, and a call on a closed session fails naming it as finalized.
TEST_F(SchedulerSession, FinalizedSessionsKeepTheActorCellsBounded) {
  const Tensor x = F32({8, 64}, 0.5f);
  auto cycle = [&] {
    auto session = Session::Create({});
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->AddGraph(1, Parse(kChain)).ok());
    auto out = (*session)->RunGraph(1, {x});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE((*session)->Finalize().ok());
    auto after = (*session)->RunGraph(1, {x});
    ASSERT_FALSE(after.ok());
    EXPECT_TRUE(Contains(after.status().message(), "finalized")) << after.status();
  };
  for (int i = 0; i < 10; ++i) cycle();  // the cells a cycle needs, once
  rt().system().WaitIdle();
  const std::size_t cells = rt().system().Stats().cells;
  for (int i = 0; i < 100; ++i) cycle();
  rt().system().WaitIdle();
  EXPECT_LE(rt().system().Stats().cells, cells + 4) << "100 more sessions";
}

TEST_F(SchedulerSession, CreateNeedsModelManager) {
  ASSERT_TRUE(ModelManager::Finalize().ok());
  auto session = Session::Create({});
  EXPECT_FALSE(session.ok());
  EXPECT_FALSE(GraphLoader::UnloadModel(1).ok());
  EXPECT_EQ(ModelManager::Get(), nullptr);
  EXPECT_TRUE(ModelManager::Finalize().ok()) << "Ok when not initialized";
  ASSERT_TRUE(ModelManager::Initialize(ManagerOptions()).ok());
}

// ---- ForkGraph ------------------------------------------------------------------------------

TEST_F(SchedulerSession, ForkRunsIndependentlyAndOutlivesItsOrigin) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kChain)).ok());
  ASSERT_TRUE(s.BuildGraph(1).ok());
  ASSERT_TRUE(s.ForkGraph(1, 2).ok());

  // The fork shares the compiled model and loads on its own.
  EXPECT_EQ(s.GetCompiledModel(1).value().get(), s.GetCompiledModel(2).value().get());
  const Tensor x1 = F32({8, 64}, 0.25f), x2 = F32({8, 64}, -2.f);
  auto o1 = s.RunGraph(1, {x1});
  auto o2 = s.RunGraph(2, {x2});
  ASSERT_TRUE(o1.ok()) << o1.status();
  ASSERT_TRUE(o2.ok()) << o2.status();
  EXPECT_EQ(*o1, Reference(kChain, {{"x", x1}}));
  EXPECT_EQ(*o2, Reference(kChain, {{"x", x2}}));
  auto m1 = s.GetLoadedModel(1), m2 = s.GetLoadedModel(2);
  ASSERT_TRUE(m1.ok() && m2.ok());
  EXPECT_NE((*m1)->id(), (*m2)->id());

  // Interleaved from two threads: neither sees the other's data.
  auto other = std::async(std::launch::async, [&] {
    for (int i = 0; i < 20; ++i) {
      auto o = s.RunGraph(2, {x2});
      if (!o.ok() || *o != *o2) return false;
    }
    return true;
  });
  for (int i = 0; i < 20; ++i) {
    auto o = s.RunGraph(1, {x1});
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(*o, *o1);
  }
  EXPECT_TRUE(other.get());

  ASSERT_TRUE(s.RemoveGraph(1).ok());
  EXPECT_FALSE(ModelManager::Get()->IsLoaded((*m1)->id()));
  const Tensor x3 = F32({8, 64}, 3.f);
  auto o3 = s.RunGraph(2, {x3});
  ASSERT_TRUE(o3.ok()) << o3.status();
  EXPECT_EQ(*o3, Reference(kChain, {{"x", x3}}));
  // A fork of the fork, after the origin is gone.
  ASSERT_TRUE(s.ForkGraph(2, 3).ok());
  auto o4 = s.RunGraph(3, {x1});
  ASSERT_TRUE(o4.ok()) << o4.status();
  EXPECT_EQ(*o4, *o1);
}

TEST_F(SchedulerSession, ForkHasItsOwnVariables) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kKv)).ok());
  ASSERT_TRUE(s.BuildGraph(1).ok());
  ASSERT_TRUE(s.ForkGraph(1, 2).ok());
  const Tensor row = F32({1, 1, 2}, 1.f);
  auto o1 = s.RunGraph(1, {row, I32({1}, 0)});
  auto o1b = s.RunGraph(1, {F32({1, 1, 2}, 2.f), I32({1}, 1)});
  ASSERT_TRUE(o1.ok() && o1b.ok());
  // The fork starts from the compiled initial values, not from the origin's updated cache.
  auto o2 = s.RunGraph(2, {row, I32({1}, 3)});
  ASSERT_TRUE(o2.ok()) << o2.status();
  EXPECT_EQ(*o2, Reference(kKv, {{"row", row}, {"pos", I32({1}, 3)}}));
}

TEST_F(SchedulerSession, ForkErrors) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kChain)).ok());
  ASSERT_TRUE(s.AddGraph(2, Parse(kChain)).ok());
  Status unbuilt = s.ForkGraph(1, 5);
  EXPECT_EQ(unbuilt.code(), StatusCode::kFailed) << unbuilt;
  EXPECT_EQ(s.RunGraph(5, {F32({8, 64}, 1.f)}).status().code(), StatusCode::kNotFound) << "a failed fork adds nothing";
  ASSERT_TRUE(s.BuildGraph(1).ok());
  Status taken = s.ForkGraph(1, 2);
  EXPECT_EQ(taken.code(), StatusCode::kParamInvalid) << taken;
  Status self = s.ForkGraph(1, 1);
  EXPECT_EQ(self.code(), StatusCode::kParamInvalid) << self;
  Status missing = s.ForkGraph(42, 6);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing;
  // Graph 2 is untouched by the refused fork onto it.
  const Tensor x = F32({8, 64}, 1.5f);
  auto o = s.RunGraph(2, {x});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o, Reference(kChain, {{"x", x}}));
}

// ---- user memory ----------------------------------------------------------------------------

TEST_F(SchedulerSession, UserFeatureMemoryBaseIsWhereTheFeatureMapLives) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kChain)).ok());
  ASSERT_TRUE(s.AddGraph(2, Parse(kChain)).ok());
  ASSERT_TRUE(s.BuildGraph(1).ok());
  const CompiledModel& cm = *s.GetCompiledModel(1).value();
  const std::uint64_t fm = cm.memory.bytes(Segment::kFeatureMap);
  ASSERT_GT(fm, 0u);

  // The last feature-map tensor written: its bytes stay in the feature map after the run.
  const graph::TensorPlacement* last = nullptr;
  for (const auto& t : cm.memory.tensors)
    if (t.ref.segment == Segment::kFeatureMap && (last == nullptr || t.first_use > last->first_use)) last = &t;
  ASSERT_NE(last, nullptr);
  ASSERT_TRUE(last->node == "a" || last->node == "b" || last->node == "c") << last->node;

  auto user = rt().Malloc(0, fm);
  ASSERT_TRUE(user.ok());
  std::vector<std::uint8_t> poison(fm, 0xAB);
  ASSERT_TRUE(rt().MemcpyH2D(0, *user, poison.data(), fm).ok());
  Status set = s.UpdateGraphFeatureMemoryBase(1, *user, fm);
  ASSERT_TRUE(set.ok()) << set;

  // Loading on user memory takes about fm bytes less of the device than loading without.
  auto in_use = [&] { return rt().Stats(0).value().memory.in_use; };
  const auto m0 = in_use();
  ASSERT_TRUE(s.LoadGraph(1).ok());
  const auto m1 = in_use();
  ASSERT_TRUE(s.LoadGraph(2).ok());
  const auto m2 = in_use();
  EXPECT_GE((m2 - m1) - (m1 - m0), fm) << "graph 1 allocated its own feature map anyway";

  const Tensor x = F32({8, 64}, 0.75f);
  auto out = s.RunGraph(1, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Reference(kChain, {{"x", x}}));

  Tensor want = graph::ZeroTensor(x.desc);
  const float factor = last->node == "a" ? 1.f : 2.f;
  for (std::size_t i = 0; i < 512; ++i) graph::StoreF(want, i, factor * std::max(graph::LoadF(x, i), 0.f));
  std::vector<std::uint8_t> got(last->bytes);
  ASSERT_EQ(last->bytes, want.data.size());
  ASSERT_TRUE(rt().MemcpyD2H(0, got.data(), npu_sim::DevicePtr{user->value + last->ref.offset}, got.size()).ok());
  EXPECT_EQ(got, want.data) << "tensor '" << last->node << "' is not in the user's feature memory";
  (void)s.RemoveGraph(1);
  EXPECT_TRUE(rt().Free(0, *user).ok()) << "the user memory is the user's";
}

TEST_F(SchedulerSession, UserFeatureMemoryTooSmallNamesRequiredAndProvided) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kChain)).ok());
  ASSERT_TRUE(s.BuildGraph(1).ok());
  const std::uint64_t fm = s.GetCompiledModel(1).value()->memory.bytes(Segment::kFeatureMap);
  auto user = rt().Malloc(0, fm);
  ASSERT_TRUE(user.ok());
  const std::uint64_t small = fm - 512;
  Status set = s.UpdateGraphFeatureMemoryBase(1, *user, small);
  Status err = set;
  if (set.ok()) err = s.RunGraph(1, {F32({8, 64}, 1.f)}).status();
  ASSERT_FALSE(err.ok());
  EXPECT_TRUE(Contains(err.message(), std::to_string(fm))) << "required " << fm << ": " << err;
  EXPECT_TRUE(Contains(err.message(), std::to_string(small))) << "provided " << small << ": " << err;
  // Nothing is left half-loaded; with enough memory the graph runs.
  EXPECT_TRUE(ModelManager::Get()->LoadedModels().empty());
  ASSERT_TRUE(s.UpdateGraphFeatureMemoryBase(1, *user, fm).ok());
  const Tensor x = F32({8, 64}, 1.f);
  auto out = s.RunGraph(1, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Reference(kChain, {{"x", x}}));
}

// User feature memory serves one execution instance: asking for more is an error, not a race.
TEST_F(SchedulerSession, UserFeatureMemoryWithSeveralExecutionStreamsIsRefused) {
  auto session = Session::Create({{"npuflow.executionStreams", "4"}});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kChain)).ok());
  ASSERT_TRUE(s.BuildGraph(1).ok());
  const std::uint64_t fm = s.GetCompiledModel(1).value()->memory.bytes(Segment::kFeatureMap);
  auto user = rt().Malloc(0, fm);
  ASSERT_TRUE(user.ok());
  Status set = s.UpdateGraphFeatureMemoryBase(1, *user, fm);
  Status err = set.ok() ? s.RunGraph(1, {F32({8, 64}, 1.f)}).status() : set;
  EXPECT_EQ(err.code(), StatusCode::kParamInvalid) << err;
  EXPECT_TRUE(ModelManager::Get()->LoadedModels().empty());
}

TEST_F(SchedulerSession, UserConstMemoryHoldsTheWeights) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kChain)).ok());
  ASSERT_TRUE(s.BuildGraph(1).ok());
  const CompiledModel& cm = *s.GetCompiledModel(1).value();
  const std::uint64_t wb = cm.memory.bytes(Segment::kWeights);
  ASSERT_GT(wb, 0u);
  auto user = rt().Malloc(0, wb);
  ASSERT_TRUE(user.ok());
  ASSERT_TRUE(s.SetGraphConstMemoryBase(1, *user, wb).ok());
  const Tensor x = F32({8, 64}, -0.5f);
  auto out = s.RunGraph(1, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, Reference(kChain, {{"x", x}}));
  EXPECT_EQ(s.GetLoadedModel(1).value()->weights_base().value, user->value);
  std::vector<std::uint8_t> got(cm.weights.size());
  ASSERT_TRUE(rt().MemcpyD2H(0, got.data(), *user, got.size()).ok());
  EXPECT_EQ(got, cm.weights);
}

// ---- options --------------------------------------------------------------------------------

TEST_F(SchedulerSession, BadOptionsAreErrorsNamingTheOption) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"npuflow.executionStreams", "0"},  {"npuflow.executionStreams", "65"},
      {"npuflow.executionStreams", "two"}, {"npuflow.executeTimeoutMs", "-5"},
      {"npuflow.executeTimeoutMs", "soon"}, {"ge.enableSingleStream", "yes"},
      {"ge.streamMaxParallelNum", "0"},    {"ge.streamMaxParallelNum", "65"},
      {"ge.exec.deviceId", "-1"},          {"ge.exec.deviceId", "x"},
      {"ge.notAnOption", "1"},
  };
  for (const auto& [name, value] : bad) {
    SCOPED_TRACE(name + "=" + value);
    auto session = Session::Create({{name, value}});
    ASSERT_FALSE(session.ok());
    EXPECT_EQ(session.status().code(), StatusCode::kParamInvalid) << session.status();
    EXPECT_TRUE(Contains(session.status().message(), name)) << session.status();
    auto parsed = ParseGraphOptions({{name, value}});
    EXPECT_FALSE(parsed.ok());
  }
  // An unknown chip: refused when the session is created, or at the latest when the graph is
  // built, naming the chip.
  {
    auto session = Session::Create({{"ge.socVersion", "Ascend9000"}});
    Status err = session.status();
    if (session.ok()) {
      ASSERT_TRUE((*session)->AddGraph(1, Parse(kChain)).ok());
      err = (*session)->BuildGraph(1);
      ADD_FAILURE() << "Session::Create accepted ge.socVersion=Ascend9000; BuildGraph says: " << err;
    }
    EXPECT_EQ(err.code(), StatusCode::kParamInvalid) << err;
    EXPECT_TRUE(Contains(err.message(), "Ascend9000")) << err;
  }
  // The same through AddGraph's options.
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Status add = (*session)->AddGraph(1, Parse(kChain), {{"npuflow.executionStreams", "0"}});
  EXPECT_EQ(add.code(), StatusCode::kParamInvalid) << add;
  EXPECT_TRUE(Contains(add.message(), "npuflow.executionStreams")) << add;
  EXPECT_EQ((*session)->RunGraph(1, {F32({8, 64}, 1.f)}).status().code(), StatusCode::kNotFound)
      << "a refused AddGraph adds nothing";
}

TEST_F(SchedulerSession, OptionsParse) {
  auto o = ParseGraphOptions({{"ge.enableSingleStream", "true"},
                              {"ge.streamMaxParallelNum", "3"},
                              {"npuflow.executionStreams", "5"},
                              {"npuflow.executeTimeoutMs", "250"},
                              {"ge.exec.deviceId", "0"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->single_stream);
  EXPECT_EQ(o->max_parallel, 3);
  EXPECT_EQ(o->execution_streams, 5);
  ASSERT_TRUE(o->timeout.has_value());
  EXPECT_EQ(*o->timeout, std::chrono::milliseconds(250));
  auto none = ParseGraphOptions({{"npuflow.executeTimeoutMs", "0"}});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->timeout.has_value()) << "0 = no timeout";
  auto defaults = ParseGraphOptions({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_FALSE(defaults->single_stream);
  EXPECT_EQ(defaults->max_parallel, 8);
  EXPECT_EQ(defaults->execution_streams, 1);
  // Graph options override the session's; the rest come from the session.
  auto over = ParseGraphOptions({{"npuflow.executionStreams", "2"}}, *o);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->execution_streams, 2);
  EXPECT_TRUE(over->single_stream);
  EXPECT_EQ(over->max_parallel, 3);

  // A graph option reaches the loaded model.
  auto session = Session::Create({{"npuflow.executionStreams", "2"}});
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->AddGraph(1, Parse(kChain), {{"npuflow.executionStreams", "3"}}).ok());
  ASSERT_TRUE((*session)->AddGraph(2, Parse(kChain)).ok());
  ASSERT_TRUE((*session)->LoadGraph(1).ok());
  ASSERT_TRUE((*session)->LoadGraph(2).ok());
  EXPECT_EQ((*session)->GetLoadedModel(1).value()->instances(), 3);
  EXPECT_EQ((*session)->GetLoadedModel(2).value()->instances(), 2);
}

// ---- bad input ------------------------------------------------------------------------------

TEST_F(SchedulerSession, WrongInputsAreErrorsNamingTheInput) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kTwoInputs)).ok());
  const Tensor tokens = F32({4, 8}, 1.f);
  const Tensor mask = I32({5}, 1);

  // Count.
  auto one = s.RunGraph(1, {tokens});
  EXPECT_EQ(one.status().code(), StatusCode::kParamInvalid) << one.status();
  EXPECT_TRUE(Contains(one.status().message(), "2")) << one.status();
  auto three = s.RunGraph(1, {tokens, mask, mask});
  EXPECT_EQ(three.status().code(), StatusCode::kParamInvalid) << three.status();

  // Size: the error names the input and its expected size (20 bytes, i32[5]).
  auto small = s.RunGraph(1, {tokens, I32({4}, 1)});
  EXPECT_EQ(small.status().code(), StatusCode::kParamInvalid) << small.status();
  EXPECT_TRUE(Contains(small.status().message(), "mask_in")) << small.status();
  EXPECT_TRUE(Contains(small.status().message(), "20") || Contains(small.status().message(), "[5]")) << small.status();
  auto big = s.RunGraph(1, {F32({4, 9}, 1.f), mask});
  EXPECT_EQ(big.status().code(), StatusCode::kParamInvalid) << big.status();
  EXPECT_TRUE(Contains(big.status().message(), "tokens_in")) << big.status();
  EXPECT_TRUE(Contains(big.status().message(), "128") || Contains(big.status().message(), "[4, 8]")) << big.status();

  // The Run loop checks at submission (or answers with the error).
  std::promise<Status> answered;
  auto answer = answered.get_future();
  Status submitted = s.RunGraphAsync(1, {tokens, I32({2}, 0)},
                                     [&answered](Status st, std::vector<Tensor>) { answered.set_value(st); });
  Status async_err = submitted;
  if (submitted.ok()) {
    ASSERT_EQ(answer.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    async_err = answer.get();
  }
  EXPECT_EQ(async_err.code(), StatusCode::kParamInvalid) << async_err;
  EXPECT_TRUE(Contains(async_err.message(), "mask_in")) << async_err;

  // Nothing broke: the right inputs run.
  auto good = s.RunGraph(1, {tokens, mask});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, Reference(kTwoInputs, {{"tokens_in", tokens}, {"mask_in", mask}}));
}

TEST_F(SchedulerSession, WrongBuffersForNnExecuteAreErrors) {
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, Parse(kTwoInputs)).ok());
  ASSERT_TRUE(s.LoadGraph(1).ok());
  std::shared_ptr<DavinciModel> model = s.GetLoadedModel(1).value();
  const Tensor tokens = F32({4, 8}, 1.f);
  const Tensor mask = I32({5}, 1);
  std::vector<Tensor> outs = {graph::ZeroTensor(model->compiled().outputs[0].desc),
                              graph::ZeroTensor(model->compiled().outputs[1].desc)};
  auto good = [&] {
    ExecuteArgs a;
    a.inputs = {DataBuffer::Host(tokens.data.data(), tokens.data.size()), DataBuffer::Host(mask.data.data(), 20)};
    a.outputs = {DataBuffer::Host(outs[0].data.data(), outs[0].data.size()),
                 DataBuffer::Host(outs[1].data.data(), outs[1].data.size())};
    a.timeout = std::chrono::seconds(30);
    return a;
  };
  {
    ExecuteArgs a = good();
    a.inputs[1].bytes = 16;
    Status st = model->NnExecute(a);
    EXPECT_EQ(st.code(), StatusCode::kParamInvalid) << st;
    EXPECT_TRUE(Contains(st.message(), "mask_in")) << st;
    EXPECT_TRUE(Contains(st.message(), "20")) << st;
  }
  {
    ExecuteArgs a = good();
    a.inputs.pop_back();
    EXPECT_EQ(model->NnExecute(a).code(), StatusCode::kParamInvalid);
  }
  {
    ExecuteArgs a = good();
    a.outputs[0].bytes = 4;
    Status st = model->NnExecute(a);
    EXPECT_EQ(st.code(), StatusCode::kParamInvalid) << st;
    EXPECT_TRUE(Contains(st.message(), "128")) << st;
  }
  {
    ExecuteArgs a = good();
    a.outputs.clear();
    EXPECT_EQ(model->NnExecute(a).code(), StatusCode::kParamInvalid);
  }
  {
    ExecuteArgs a = good();
    a.inputs[0] = DataBuffer{};  // neither host nor device memory
    a.inputs[0].bytes = tokens.data.size();
    Status st = model->NnExecute(a);
    EXPECT_FALSE(st.ok());
    EXPECT_TRUE(Contains(st.message(), "tokens_in")) << st;
  }
  {
    // Execute (host tensors) with an input missing.
    auto r = model->Execute({tokens});
    EXPECT_EQ(r.status().code(), StatusCode::kParamInvalid) << r.status();
  }
  ExecuteArgs a = good();
  Status st = model->NnExecute(a);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(outs, Reference(kTwoInputs, {{"tokens_in", tokens}, {"mask_in", mask}}));
}

}  // namespace
}  // namespace npuflow::scheduler
