// Resource recycling on load (seed 002, 3.5.1; GE_BEHAVIOUR "Resource checks on load"): when a
// device lacks the memory, streams or events a model needs, ModelManager unloads loaded models
// of that device, least recently used first, never one holding communication (HCCL-like) tasks,
// until the model fits; when only such models remain the load fails with an error naming the
// resource and the shortfall, and changes nothing. A session whose model was unloaded loads it
// again on its next RunGraph.
//
// The devices here are 910B chips shrunk by a chip JSON (npu_sim LoadChipSpec takes a path): the
// HBM capacity, max_streams and max_events are set from what the test models need.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "graph/ir/tensor_access.h"
#include "graph/ir/text_format.h"
#include "scheduler/davinci_model.h"
#include "scheduler/model_manager.h"
#include "scheduler/session.h"
#include "scheduler_testing.h"

namespace npuflow::scheduler {
namespace {

using test::CompileText;
using test::ConstNode;
using test::DataNode;
using test::Filled;
using test::ManagerOptions;

// x -> `branches` x (Relu -> Tanh) -> summed [-> HcomAllReduce] -> out, all f32[elems].
std::string GraphText(bool communication, std::int64_t elems, int branches) {
  std::string t = DataNode("x", "DT_FLOAT", {elems});
  for (int b = 0; b < branches; ++b) {
    t += fmt::format("node {{ name: \"r{0}\" op: \"Relu\" input: \"x\" }}\n", b);
    t += fmt::format("node {{ name: \"t{0}\" op: \"Tanh\" input: \"r{0}\" }}\n", b);
  }
  std::string last = "t0";
  for (int b = 1; b < branches; ++b) {
    t += fmt::format("node {{ name: \"s{0}\" op: \"Add\" input: \"{1}\" input: \"t{0}\" }}\n", b, last);
    last = fmt::format("s{}", b);
  }
  if (communication) {
    t += fmt::format("node {{ name: \"ar\" op: \"HcomAllReduce\" input: \"{}\" }}\n", last);
    last = "ar";
  }
  t += fmt::format("node {{ name: \"out\" op: \"NetOutput\" input: \"{}\" }}\n", last);
  return t;
}

std::shared_ptr<const CompiledModel> Compile(bool communication, std::int64_t elems, int branches) {
  return CompileText(GraphText(communication, elems, branches), {}, "recycle.pbtxt");
}

Tensor Input(const CompiledModel& cm, float scale) {
  return Filled(cm.inputs[0].desc, [scale](std::size_t i) { return scale * (static_cast<float>(i % 13) - 6.f); });
}

struct Limits {
  std::uint64_t free_memory;  // as the load check sees it, on the fresh device
  std::int64_t free_streams;
  std::int64_t free_events;
};

// `text` contains `number` as a whole number (not as part of a longer one).
bool NamesNumber(std::string_view text, std::uint64_t number) {
  const std::regex re(fmt::format("(^|[^0-9]){}([^0-9]|$)", number));
  return std::regex_search(std::string(text), re);
}

class SchedulerRecycle : public test::ModelManagerTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ModelManagerTest::SetUp());
    // What a fresh device holds before any model (the default stream, ...).
    auto stats = ModelManager::Get()->runtime().Stats(0);
    ASSERT_TRUE(stats.ok());
    base_memory_ = stats->memory.in_use;
    base_streams_ = static_cast<std::int64_t>(stats->streams);
    base_events_ = static_cast<std::int64_t>(stats->events);
  }

  // Restarts ModelManager on one 910B shrunk to `limits`.
  void Reinit(const Limits& limits) {
    std::ifstream in(std::string(NPUFLOW_SOURCE_DIR) + "/npu_sim/chips/910B.json");
    ASSERT_TRUE(in.good());
    nlohmann::json chip = nlohmann::json::parse(in);
    // free = capacity * 0.95 - in use
    chip["hbm_capacity_bytes"] =
        static_cast<std::uint64_t>(std::ceil(static_cast<double>(limits.free_memory + base_memory_) / 0.95));
    chip["max_streams"] = limits.free_streams + base_streams_;
    chip["max_events"] = limits.free_events + base_events_;
    const std::string path = ::testing::TempDir() + fmt::format("npuflow_recycle_{}.json", ::getpid());
    std::ofstream(path) << chip.dump(2);
    ASSERT_TRUE(ModelManager::Finalize().ok());
    Status s = ModelManager::Initialize(ManagerOptions(path));
    ASSERT_TRUE(s.ok()) << s;
    const ResourceNeeds free = mm().Free(0);
    // The device is what the test asked for (within the allocation granularity).
    EXPECT_NEAR(static_cast<double>(free.memory_bytes), static_cast<double>(limits.free_memory), 4096.0);
    EXPECT_EQ(static_cast<std::int64_t>(free.streams), limits.free_streams);
    EXPECT_EQ(static_cast<std::int64_t>(free.events), limits.free_events);
  }

  std::uint32_t Load(std::shared_ptr<const CompiledModel> m, const std::string& name, RecycleReport* report = nullptr,
                     int instances = 1) {
    ModelLoadOptions options;
    options.name = name;
    options.instances = instances;
    auto id = mm().LoadModelOnline(std::move(m), options, report);
    EXPECT_TRUE(id.ok()) << name << ": " << id.status();
    return id.value_or(0);
  }

  // Loads `m` as `name` with `instances` (its id into `id`), which makes room by unloading
  // `victim` and nothing else.
  void LoadUnloading(std::shared_ptr<const CompiledModel> m, const std::string& name, int instances,
                     std::uint32_t victim, std::uint32_t& id) {
    RecycleReport report;
    id = Load(std::move(m), name, &report, instances);
    ASSERT_NE(id, 0u);
    EXPECT_EQ(report.unloaded, std::vector<std::uint32_t>{victim});
  }

  // Loading `m` as "A" with `instances` fails with an error naming `resource` and the shortfall,
  // and unloads nothing to make room.
  void ExpectLoadFailsNamingTheShortfall(std::shared_ptr<const CompiledModel> m, int instances,
                                         const std::string& resource, std::uint64_t shortfall,
                                         const std::string& expectation) {
    ModelLoadOptions options;
    options.name = "A";
    options.instances = instances;
    RecycleReport report;
    auto a = mm().LoadModelOnline(std::move(m), options, &report);
    ASSERT_FALSE(a.ok());
    const std::string msg(a.status().message());
    EXPECT_NE(msg.find(resource), std::string::npos) << a.status();
    EXPECT_TRUE(NamesNumber(msg, shortfall)) << expectation << ": " << a.status();
    EXPECT_TRUE(report.unloaded.empty());
  }

  // Runs model `id` once (which also makes it the most recently used), checking the output.
  void Run(std::uint32_t id) {
    auto model = mm().GetModel(id);
    ASSERT_TRUE(model.ok()) << model.status();
    const Tensor x = Input((*model)->compiled(), 0.1f);
    auto out = (*model)->Execute({x}, std::chrono::seconds(30));
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 1u);
  }

  std::uint64_t base_memory_ = 0;
  std::int64_t base_streams_ = 0, base_events_ = 0;
};

constexpr std::int64_t kBig = 256 * 1024;  // 1 MiB tensors
constexpr std::int64_t kPlenty = 4096;  // streams / events that never run short

TEST_F(SchedulerRecycle, MemoryShortUnloadsTheLeastRecentlyUsedModel) {
  auto plain = Compile(false, kBig, 1);
  const std::uint64_t n = DavinciModel::Needs(*plain, {}).memory_bytes;
  ASSERT_GT(n, 3u * 1024 * 1024);
  ASSERT_NO_FATAL_FAILURE(Reinit({.free_memory = 2 * n + n / 2, .free_streams = kPlenty, .free_events = kPlenty}));

  const std::uint32_t a = Load(plain, "A");
  const std::uint32_t b = Load(plain, "B");
  Run(a);  // B is now the least recently used (A is older by id and by load)
  std::uint32_t c = 0;
  ASSERT_NO_FATAL_FAILURE(LoadUnloading(plain, "C", 1, b, c));
  EXPECT_TRUE(mm().IsLoaded(a));
  EXPECT_FALSE(mm().IsLoaded(b));
  EXPECT_TRUE(mm().IsLoaded(c));
  EXPECT_EQ(mm().GetModel(b).status().code(), StatusCode::kNotFound);
  Run(a);
  Run(c);

  // No shortage: nothing is unloaded.
  RecycleReport none;
  ASSERT_TRUE(mm().Unload(c).ok());
  const std::uint32_t d = Load(plain, "D", &none);
  EXPECT_TRUE(none.unloaded.empty());
  EXPECT_TRUE(mm().IsLoaded(a));
  EXPECT_TRUE(mm().IsLoaded(d));
}

TEST_F(SchedulerRecycle, ModelsWithCommunicationTasksAreNeverUnloaded) {
  auto plain = Compile(false, kBig, 1);
  auto comm = Compile(true, kBig, 1);
  const std::uint64_t n = std::max(DavinciModel::Needs(*plain, {}).memory_bytes, DavinciModel::Needs(*comm, {}).memory_bytes);
  ASSERT_NO_FATAL_FAILURE(Reinit({.free_memory = 2 * n + n / 2, .free_streams = kPlenty, .free_events = kPlenty}));

  const std::uint32_t h = Load(comm, "H");
  const std::uint32_t a = Load(plain, "A");
  ASSERT_TRUE(mm().GetModel(h).value()->has_communication_tasks());
  ASSERT_FALSE(mm().GetModel(a).value()->has_communication_tasks());
  Run(a);  // H is the least recently used, but holds an all-reduce
  std::uint32_t c = 0;
  ASSERT_NO_FATAL_FAILURE(LoadUnloading(plain, "C", 1, a, c));
  EXPECT_TRUE(mm().IsLoaded(h));
  EXPECT_FALSE(mm().IsLoaded(a));
  Run(h);
}

TEST_F(SchedulerRecycle, OnlyCommunicationModelsLeftMemoryLoadFailsNamingTheShortfall) {
  auto plain = Compile(false, kBig, 1);
  auto comm = Compile(true, kBig, 1);
  const std::uint64_t nh = DavinciModel::Needs(*comm, {}).memory_bytes;
  const std::uint64_t na = DavinciModel::Needs(*plain, {}).memory_bytes;
  ASSERT_NO_FATAL_FAILURE(Reinit({.free_memory = 2 * nh + na / 2, .free_streams = kPlenty, .free_events = kPlenty}));

  const std::uint32_t h1 = Load(comm, "H1");
  const std::uint32_t h2 = Load(comm, "H2");
  const ResourceNeeds before = mm().Free(0);
  const auto in_use_before = mm().runtime().Stats(0).value().memory.in_use;
  ASSERT_LT(before.memory_bytes, na);
  ASSERT_NO_FATAL_FAILURE(ExpectLoadFailsNamingTheShortfall(
      plain, 1, "memory", na - before.memory_bytes,
      fmt::format("expected the shortfall {} bytes (needs {}, free {})", na - before.memory_bytes, na,
                  before.memory_bytes)));
  // Cleanly: the communication models stay, nothing leaked.
  EXPECT_TRUE(mm().IsLoaded(h1));
  EXPECT_TRUE(mm().IsLoaded(h2));
  EXPECT_EQ(mm().LoadedModels().size(), 2u);
  EXPECT_EQ(mm().Free(0).memory_bytes, before.memory_bytes);
  EXPECT_EQ(mm().runtime().Stats(0).value().memory.in_use, in_use_before);
  EXPECT_EQ(mm().Free(0).streams, before.streams);
  EXPECT_EQ(mm().Free(0).events, before.events);
  Run(h1);
  Run(h2);
}

TEST_F(SchedulerRecycle, StreamsShortUnloadsTheLeastRecentlyUsedModel) {
  auto plain = Compile(false, 1024, 3);
  const ResourceNeeds need = DavinciModel::Needs(*plain, {.instances = 3});
  ASSERT_GE(need.streams, 2u);
  const auto s = static_cast<std::int64_t>(need.streams);
  ASSERT_NO_FATAL_FAILURE(Reinit({.free_memory = 1ull << 30, .free_streams = 2 * s + s - 1, .free_events = kPlenty}));

  const std::uint32_t a = Load(plain, "A", nullptr, 3);
  const std::uint32_t b = Load(plain, "B", nullptr, 3);
  EXPECT_EQ(static_cast<std::int64_t>(mm().Free(0).streams), s - 1);
  Run(a);
  std::uint32_t c = 0;
  ASSERT_NO_FATAL_FAILURE(LoadUnloading(plain, "C", 3, b, c));
  EXPECT_TRUE(mm().IsLoaded(a));
  EXPECT_FALSE(mm().IsLoaded(b));
  Run(c);
}

TEST_F(SchedulerRecycle, OnlyCommunicationModelsLeftStreamsLoadFailsNamingTheShortfall) {
  auto plain = Compile(false, 1024, 3);
  auto comm = Compile(true, 1024, 3);
  const ResourceNeeds nh = DavinciModel::Needs(*comm, {});
  const ResourceNeeds na = DavinciModel::Needs(*plain, {.instances = 2});
  ASSERT_NO_FATAL_FAILURE(Reinit({.free_memory = 1ull << 30, .free_streams = static_cast<std::int64_t>(2 * nh.streams), .free_events = kPlenty}));
  const std::uint32_t h1 = Load(comm, "H1");
  const std::uint32_t h2 = Load(comm, "H2");
  ASSERT_EQ(mm().Free(0).streams, 0u);
  ASSERT_NO_FATAL_FAILURE(ExpectLoadFailsNamingTheShortfall(
      plain, 2, "stream", na.streams, fmt::format("expected the shortfall {} streams", na.streams)));
  EXPECT_TRUE(mm().IsLoaded(h1));
  EXPECT_TRUE(mm().IsLoaded(h2));
  EXPECT_EQ(mm().Free(0).streams, 0u);
}

TEST_F(SchedulerRecycle, EventsShortUnloadsTheLeastRecentlyUsedModel) {
  auto plain = Compile(false, 1024, 3);
  const ResourceNeeds need = DavinciModel::Needs(*plain, {.instances = 2});
  ASSERT_GE(need.events, 1u) << "the three-branch graph in multi-stream mode synchronizes with events";
  const auto e = static_cast<std::int64_t>(need.events);
  ASSERT_NO_FATAL_FAILURE(Reinit({.free_memory = 1ull << 30, .free_streams = kPlenty, .free_events = 2 * e + e - 1}));

  const std::uint32_t a = Load(plain, "A", nullptr, 2);
  const std::uint32_t b = Load(plain, "B", nullptr, 2);
  EXPECT_EQ(static_cast<std::int64_t>(mm().Free(0).events), e - 1);
  Run(a);
  std::uint32_t c = 0;
  ASSERT_NO_FATAL_FAILURE(LoadUnloading(plain, "C", 2, b, c));
  EXPECT_TRUE(mm().IsLoaded(a));
  EXPECT_FALSE(mm().IsLoaded(b));
  Run(c);
}

TEST_F(SchedulerRecycle, OnlyCommunicationModelsLeftEventsLoadFailsNamingTheShortfall) {
  auto plain = Compile(false, 1024, 3);
  auto comm = Compile(true, 1024, 3);
  const ResourceNeeds nh = DavinciModel::Needs(*comm, {});
  const ResourceNeeds na = DavinciModel::Needs(*plain, {.instances = 2});
  ASSERT_GE(na.events, 1u);
  ASSERT_NO_FATAL_FAILURE(Reinit({.free_memory = 1ull << 30, .free_streams = kPlenty, .free_events = static_cast<std::int64_t>(2 * nh.events)}));
  const std::uint32_t h1 = Load(comm, "H1");
  const std::uint32_t h2 = Load(comm, "H2");
  ASSERT_EQ(mm().Free(0).events, 0u);
  ASSERT_NO_FATAL_FAILURE(ExpectLoadFailsNamingTheShortfall(
      plain, 2, "event", na.events, fmt::format("expected the shortfall {} events", na.events)));
  EXPECT_TRUE(mm().IsLoaded(h1));
  EXPECT_TRUE(mm().IsLoaded(h2));
  EXPECT_EQ(mm().Free(0).events, 0u);
  Run(h1);
}

// A model in use (its Run loop started) is not unloaded to make room, even when it is the least
// recently used.
TEST_F(SchedulerRecycle, ModelsInUseAreNotUnloaded) {
  auto plain = Compile(false, kBig, 1);
  const std::uint64_t n = DavinciModel::Needs(*plain, {}).memory_bytes;
  ASSERT_NO_FATAL_FAILURE(Reinit({.free_memory = 2 * n + n / 2, .free_streams = kPlenty, .free_events = kPlenty}));
  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, graph::ParseGraphText(GraphText(false, kBig, 1), "g").value()).ok());
  std::promise<Status> answered;
  auto answer = answered.get_future();
  ASSERT_TRUE(s.RunGraphAsync(1, {Input(*plain, 0.2f)}, [&answered](Status st, std::vector<Tensor>) {
                 answered.set_value(st);
               }).ok());
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  ASSERT_TRUE(answer.get().ok());
  const std::uint32_t looped = s.GetLoadedModel(1).value()->id();

  const std::uint32_t x = Load(plain, "X");
  Run(x);  // the session's model is now the least recently used, but its loop runs
  std::uint32_t y = 0;
  ASSERT_NO_FATAL_FAILURE(LoadUnloading(plain, "Y", 1, x, y));
  EXPECT_TRUE(mm().IsLoaded(looped));
  ASSERT_TRUE(s.RemoveGraph(1).ok());
}

// Weight sharing under recycling: when the model that holds shared weights is unloaded to make
// room for another user of the same weights, the newcomer must not be left on freed weights.
TEST_F(SchedulerRecycle, SharedWeightsSurviveRecyclingTheirLastUser) {
  std::vector<double> w;
  for (int i = 0; i < 128 * 128; ++i) w.push_back(0.001 * ((i * 37) % 101) - 0.05);
  const std::string text = DataNode("x", "DT_FLOAT", {1024, 128}) + ConstNode("w", {128, 128}, w) + R"pb(
    node { name: "m" op: "MatMul" input: "x" input: "w" }
    node { name: "r" op: "Relu" input: "m" }
    node { name: "out" op: "NetOutput" input: "r" }
  )pb";
  std::shared_ptr<const CompiledModel> model = CompileText(text, {}, "shared.pbtxt");
  ASSERT_NE(model, nullptr);
  const std::uint64_t n = DavinciModel::Needs(*model, {}).memory_bytes;
  LoadConfig shared_config;
  shared_config.shared_weights = npu_sim::DevicePtr{1};  // any: the needs without the weights
  const std::uint64_t ns = DavinciModel::Needs(*model, shared_config).memory_bytes;
  ASSERT_LT(ns, n);
  // A alone fits; A and B (sharing A's weights) do not: B's load unloads A, the weights' last user.
  ASSERT_NO_FATAL_FAILURE(Reinit({.free_memory = n + ns / 2, .free_streams = kPlenty, .free_events = kPlenty}));

  ModelLoadOptions options;
  options.share_weights = true;
  options.name = "A";
  auto a = mm().LoadModelOnline(model, options);
  ASSERT_TRUE(a.ok()) << a.status();
  const Tensor x = Input(*model, 0.01f);
  auto want = mm().GetModel(*a).value()->Execute({x}, std::chrono::seconds(30));
  ASSERT_TRUE(want.ok()) << want.status();

  options.name = "B";
  RecycleReport report;
  auto b = mm().LoadModelOnline(model, options, &report);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(report.unloaded, std::vector<std::uint32_t>{*a});
  std::shared_ptr<DavinciModel> mb = mm().GetModel(*b).value();
  auto got = mb->Execute({x}, std::chrono::seconds(30));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, *want);
  std::vector<std::uint8_t> weights(model->weights.size());
  Status read = mm().runtime().MemcpyD2H(0, weights.data(), mb->weights_base(), weights.size());
  EXPECT_TRUE(read.ok()) << "B's weights are not live device memory: " << read;
  EXPECT_EQ(weights, model->weights) << "B's weights were overwritten";
  Status unload = mm().Unload(*b);
  EXPECT_TRUE(unload.ok()) << unload;
  EXPECT_EQ(mm().runtime().Stats(0).value().memory.in_use, base_memory_) << "everything freed, once";
}

// A session's model unloaded for another one is loaded again on the session's next RunGraph.
TEST_F(SchedulerRecycle, RecycledSessionModelReloadsOnTheNextRunGraph) {
  auto plain = Compile(false, kBig, 1);
  const std::uint64_t n = DavinciModel::Needs(*plain, {}).memory_bytes;
  ASSERT_NO_FATAL_FAILURE(Reinit({.free_memory = 2 * n + n / 2, .free_streams = kPlenty, .free_events = kPlenty}));

  auto session = Session::Create({});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.AddGraph(1, graph::ParseGraphText(GraphText(false, kBig, 1), "g").value()).ok());
  const Tensor x = Input(*plain, 0.3f);
  auto first = s.RunGraph(1, {x});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::uint32_t m1 = s.GetLoadedModel(1).value()->id();
  EXPECT_EQ(DavinciModel::Needs(s.GetLoadedModel(1).value()->compiled(), {}).memory_bytes, n);

  const std::uint32_t x_id = Load(plain, "X");
  Run(x_id);
  std::uint32_t y_id = 0;
  ASSERT_NO_FATAL_FAILURE(LoadUnloading(plain, "Y", 1, m1, y_id));
  EXPECT_FALSE(mm().IsLoaded(m1));
  EXPECT_EQ(s.GetLoadedModel(1).status().code(), StatusCode::kNotFound);

  auto again = s.RunGraph(1, {x});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *first);
  auto reloaded = s.GetLoadedModel(1);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_TRUE(mm().IsLoaded((*reloaded)->id()));
  EXPECT_EQ(static_cast<int>(mm().IsLoaded(x_id)) + static_cast<int>(mm().IsLoaded(y_id)), 1)
      << "the reload made room by unloading exactly one of the other two";
}

}  // namespace
}  // namespace npuflow::scheduler
