// GPT-2 end to end on the v1 runtime: npuflow's logits against a plain C++ forward pass, greedy
// ids, concurrent streams, one device copy of the weights, and weight streaming seen in the trace.
#include "models/gpt2/engine.h"
#include "synthetic/gpt2_file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "graph/ops/op_registry.h"
#include "scheduler/model_manager.h"
#include "tests/models/gpt2_reference.h"

namespace npuflow::gpt2 {

using namespace scheduler;

namespace {

namespace fs = std::filesystem;

class Gpt2EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    graph::RegisterBuiltinOps();
    dir_ = fs::temp_directory_path() / ("npuflow_gpt2_engine_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    (void)ModelManager::Finalize();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Init(bool trace = false) {
    ASSERT_TRUE(ModelManager::Initialize({.chips = {"910B"}, .trace = trace}).ok());
  }
  std::string Make(const std::string& name, synthetic::MakeGpt2Options o) {
    const std::string path = (dir_ / name).string();
    Status s = synthetic::WriteGpt2File(path, o);
    EXPECT_TRUE(s.ok()) << s;
    return path;
  }
  fs::path dir_;
};

// max |a - b| over the logits, relative to the reference's largest magnitude.
double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 1e-6;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return err / scale;
}

int Argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

// A 16-token greedy run: every step's logits within `tol` of the reference, the same ids.
void ExpectMatchesReference(Gpt2Engine& engine, const std::string& path, double tol) {
  auto file = gpt2::ReadGpt2File(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto ref = gpt2_testing::Gpt2Reference::Load(*file);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::vector<int> prompt = {11, 257, 42};
  std::vector<float> logits;
  std::vector<int> ids_npu, ids_ref;
  int token = prompt[0];
  for (int pos = 0; pos < 16 + 2; ++pos) {
    Status st = engine.Step(0, token, pos, logits);
    ASSERT_TRUE(st.ok()) << st;
    const std::vector<float> want = ref->Step(token, pos);
    const double err = RelativeError(logits, want);
    EXPECT_LE(err, tol) << "step " << pos;
    if (pos + 1 < static_cast<int>(prompt.size())) {
      token = prompt[static_cast<std::size_t>(pos + 1)];
      continue;
    }
    ids_npu.push_back(Argmax(logits));
    ids_ref.push_back(Argmax(want));
    // The greedy step picks the same token on the device (the same position again: the KV cache
    // row it writes is the one just written).
    auto picked = engine.StepGreedy(0, token, pos);
    ASSERT_TRUE(picked.ok()) << picked.status();
    EXPECT_EQ(*picked, ids_npu.back()) << "step " << pos;
    token = ids_ref.back();  // both continue from the reference's choice
  }
  EXPECT_EQ(ids_npu, ids_ref);
  // And Generate gives the same greedy ids (on a fresh stream state: positions restart at 0).
  auto g = engine.Generate(0, prompt, 16, gpt2::SamplingOptions{.greedy = true});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->ids, ids_ref);
}

TEST_F(Gpt2EngineTest, F32LogitsMatchThePlainForwardPass) {
  Init();
  const std::string path = Make("f32.bin", {.layers = 2, .embd = 64, .heads = 4, .ctx = 32, .vocab = 300, .seed = 3});
  auto engine = Gpt2Engine::Create(path, {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  ExpectMatchesReference(**engine, path, 1e-4);
}

TEST_F(Gpt2EngineTest, F16LogitsMatchThePlainForwardPass) {
  Init();
  const std::string path =
      Make("f16.bin", {.layers = 3, .embd = 96, .heads = 6, .ctx = 32, .vocab = 320, .f16 = true, .seed = 4});
  auto engine = Gpt2Engine::Create(path, {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  ExpectMatchesReference(**engine, path, 2e-3);
}

// The decode step is one stream with no event tasks (its side branches are too small to pay for
// an event pair), unless the session asks for several; and a generation reports its decode steps'
// wall time, the kernels' share of it and the DMA copies' (each step copies its logits out), and
// each step's own overhead.
TEST_F(Gpt2EngineTest, TheDecodeStepIsOneStreamWithoutEventsAndReportsItsKernelTime) {
  Init();
  const std::string path = Make("one.bin", {.layers = 2, .embd = 64, .heads = 4, .ctx = 32, .vocab = 300, .seed = 3});
  auto engine = Gpt2Engine::Create(path, {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->decode_model().streams.size(), 1u);
  EXPECT_EQ((*engine)->decode_model().event_count, 0u);
  auto g = (*engine)->Generate(0, std::vector<int>{11}, 8, gpt2::SamplingOptions{.greedy = true});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->ids.size(), 8u);
  EXPECT_EQ(g->decode_steps, 7);  // the steps after the first generated token
  EXPECT_GT(g->decode_kernel_wall_ms, 0);
  EXPECT_GT(g->decode_copy_wall_ms, 0);
  EXPECT_LT(g->decode_copy_wall_ms, g->decode_step_wall_ms) << "a step's copies run inside it, one after another";
  // Each step's own overhead, one per decode step; together they are the total's (float sums).
  ASSERT_EQ(g->decode_step_overhead_us.size(), 7u);
  double each_us = 0;
  for (float us : g->decode_step_overhead_us) each_us += us;
  EXPECT_NEAR(each_us, (g->decode_step_wall_ms - g->decode_kernel_wall_ms) * 1e3,
              1e-3 * g->decode_step_wall_ms * 1e3 + 1.0);
  engine->reset();

  auto multi = Gpt2Engine::Create(path, {.session_options = {{"ge.enableSingleStream", "false"}}});
  ASSERT_TRUE(multi.ok()) << multi.status();
  EXPECT_GT((*multi)->decode_model().streams.size(), 1u);
  EXPECT_GT((*multi)->decode_model().event_count, 0u);
}

TEST_F(Gpt2EngineTest, SeparateLmHeadIsUsed) {
  Init();
  const std::string path =
      Make("head.bin", {.layers = 1, .embd = 32, .heads = 2, .ctx = 32, .vocab = 260, .seed = 5, .lm_head = true});
  auto engine = Gpt2Engine::Create(path, {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  ExpectMatchesReference(**engine, path, 1e-4);
}

TEST_F(Gpt2EngineTest, ConcurrentStreamsGiveEachStreamsOwnIdsAndShareTheWeights) {
  Init();
  const std::string path = Make("k4.bin", {.layers = 2, .embd = 64, .heads = 4, .ctx = 48, .vocab = 300, .seed = 6});
  const std::vector<std::vector<int>> prompts = {{1, 2, 3}, {200, 7}, {42}, {99, 98, 97, 96, 95}};
  const std::vector<gpt2::SamplingOptions> samplings = {gpt2::SamplingOptions{.greedy = true},
                                                  gpt2::SamplingOptions{.top_k = 5, .top_p = 0.9f, .temp = 0.8f, .seed = 1},
                                                  gpt2::SamplingOptions{.greedy = true},
                                                  gpt2::SamplingOptions{.top_k = 40, .top_p = 1.f, .temp = 1.f, .seed = 9}};
  // Alone: one stream, one generation after the other.
  std::vector<std::vector<int>> alone;
  std::uint64_t one_stream_memory = 0;
  {
    auto engine = Gpt2Engine::Create(path, {.streams = 1});
    ASSERT_TRUE(engine.ok()) << engine.status();
    ASSERT_TRUE((*engine)->WaitForWeights().ok());
    one_stream_memory = ModelManager::Get()->runtime().Stats(0)->memory.in_use;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      auto g = (*engine)->Generate(0, prompts[i], 12, samplings[i]);
      ASSERT_TRUE(g.ok()) << g.status();
      alone.push_back(g->ids);
    }
  }
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    auto engine = Gpt2Engine::Create(path, {.streams = 4});
    ASSERT_TRUE(engine.ok()) << engine.status();
    // One OS thread per generation: this test runs under ThreadSanitizer, which cannot follow fibers
    // (models_gpt2_fiber_test covers the fiber path).
    auto gens = (*engine)->GenerateConcurrently(prompts, 12, samplings, {}, {.mode = HostOptions::Mode::kThreads});
    ASSERT_TRUE(gens.ok()) << gens.status();
    for (std::size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ((*gens)[i].ids, alone[i]) << "stream " << i;
    // Memory: three more models add their KV caches and activations, not the weights again.
    const std::uint64_t four = ModelManager::Get()->runtime().Stats(0)->memory.in_use;
    auto file = gpt2::ReadGpt2File(path);
    ASSERT_TRUE(file.ok());
    const std::uint64_t weights = file->weight_bytes();
    const std::uint64_t kv = 2ull * file->hparams.n_layer * file->hparams.n_ctx * file->hparams.n_embd * 4;
    ASSERT_GT(four, one_stream_memory);
    const std::uint64_t growth = four - one_stream_memory;
    EXPECT_GE(growth, 3 * kv);
    EXPECT_LT(growth, 3 * kv + weights) << "a second copy of the weights";
    auto m0 = (*engine)->session().GetLoadedModel((*engine)->graph_id(0));
    auto m3 = (*engine)->session().GetLoadedModel((*engine)->graph_id(3));
    ASSERT_TRUE(m0.ok() && m3.ok());
    ASSERT_EQ((*m0)->external_weights().size(), (*m3)->external_weights().size());
    for (std::size_t i = 0; i < (*m0)->external_weights().size(); ++i) {
      EXPECT_EQ((*m0)->external_weights()[i].address, (*m3)->external_weights()[i].address);
      EXPECT_FALSE((*m3)->external_weights()[i].copied_here);
    }
  }
}

TEST_F(Gpt2EngineTest, BadInputsAreErrorsNotCrashes) {
  Init();
  const std::string path = Make("bad.bin", {.layers = 1, .embd = 32, .heads = 2, .ctx = 8, .vocab = 260, .seed = 7});
  auto engine = Gpt2Engine::Create(path, {.streams = 2});
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<float> logits;
  EXPECT_EQ((*engine)->Step(0, 260, 0, logits).code(), StatusCode::kParamInvalid);
  EXPECT_EQ((*engine)->Step(0, -1, 0, logits).code(), StatusCode::kParamInvalid);
  EXPECT_EQ((*engine)->Step(0, 1, 8, logits).code(), StatusCode::kParamInvalid);
  EXPECT_EQ((*engine)->Step(2, 1, 0, logits).code(), StatusCode::kParamInvalid);
  EXPECT_FALSE((*engine)->Generate(0, std::vector<int>{}, 4, {}).ok());
  EXPECT_FALSE((*engine)->Generate(0, std::vector<int>(9, 1), 4, {}).ok());  // longer than n_ctx
  EXPECT_FALSE((*engine)->Generate(0, std::vector<int>{1}, 4, gpt2::SamplingOptions{.top_k = 0}).ok());
  // Generation stops at the end of the context.
  auto g = (*engine)->Generate(1, std::vector<int>{1, 2, 3}, 100, gpt2::SamplingOptions{.greedy = true});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->ids.size(), 6u);  // positions 0..7: 3 prompt tokens, the last step at position 7
  EXPECT_EQ(Gpt2Engine::Create((dir_ / "missing.bin").string(), {}).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(Gpt2Engine::Create(path, {.streams = 0}).ok());
}

// The trace: the first kernel of layer 0 starts (virtual time) before the last weight chunk has
// landed, so compute overlaps the weights still streaming in.
class Gpt2StreamingTest : public Gpt2EngineTest, public ::testing::WithParamInterface<bool> {};

// With the tensors in make-gpt2's order (embeddings first) and in ggml's converter order (sorted by
// name: the embeddings last): the loader goes by the model's first use, not the file's order.
TEST_P(Gpt2StreamingTest, LayerZeroComputesWhileLaterWeightsStreamIn) {
  Init(/*trace=*/true);
  // ~40 MB of f32 weights over 8 layers: the later layers land well after layer 0's.
  const std::string path = Make("stream.bin", {.layers = 8, .embd = 384, .heads = 6, .ctx = 16, .vocab = 512, .seed = 8,
                                               .name_order = GetParam()});
  auto engine = Gpt2Engine::Create(path, {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<float> logits;
  ASSERT_TRUE((*engine)->Step(0, 1, 0, logits).ok());
  const std::string trace_path = (dir_ / "trace.json").string();
  ASSERT_TRUE(ModelManager::Get()->runtime().WriteTrace(trace_path).ok());
  std::ifstream in(trace_path);
  nlohmann::json trace = nlohmann::json::parse(in);
  const auto& events = trace.is_array() ? trace : trace["traceEvents"];
  double last_chunk_end = -1, first_h0_kernel = -1;
  for (const auto& e : events) {
    if (!e.contains("ts") || !e.contains("name")) continue;
    const std::string name = e["name"];
    const double ts = e["ts"].get<double>(), dur = e.contains("dur") ? e["dur"].get<double>() : 0;
    if (name == "weight chunk") last_chunk_end = std::max(last_chunk_end, ts + dur);
    // Kernel events are named after their node: layer 0's are "h0/...".
    if (name.rfind("h0/", 0) == 0 && (first_h0_kernel < 0 || ts < first_h0_kernel)) first_h0_kernel = ts;
  }
  ASSERT_GE(last_chunk_end, 0) << "no copy events in the trace";
  ASSERT_GE(first_h0_kernel, 0) << "no layer-0 kernel in the trace";
  EXPECT_LT(first_h0_kernel, last_chunk_end);
}

INSTANTIATE_TEST_SUITE_P(FileOrders, Gpt2StreamingTest, ::testing::Bool());

// The weight gates (waits on the regions' latches) run until a step has started with every
// weight landed; after that step they are NOPs on the device, and the results do not change.
TEST_F(Gpt2EngineTest, WeightGatesAreElidedOnceEveryWeightHasLanded) {
  Init(/*trace=*/true);
  const std::string path = Make("gates.bin", {.layers = 2, .embd = 64, .heads = 2, .ctx = 8, .vocab = 300, .seed = 4});
  auto engine = Gpt2Engine::Create(path, {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE((*engine)->WaitForWeights().ok());
  auto gates_in_trace = [&]() -> int {
    const std::string trace_path = (dir_ / "gates.json").string();
    EXPECT_TRUE(ModelManager::Get()->runtime().WriteTrace(trace_path).ok());
    std::ifstream in(trace_path);
    nlohmann::json trace = nlohmann::json::parse(in);
    const auto& events = trace.is_array() ? trace : trace["traceEvents"];
    int n = 0;
    for (const auto& e : events)
      if (e.contains("name") && e["name"].get<std::string>().rfind("weights ready: ", 0) == 0) ++n;
    return n;
  };
  std::vector<float> first, again;
  ASSERT_TRUE((*engine)->Step(0, 5, 0, first).ok());
  const int gates = gates_in_trace();
  EXPECT_GT(gates, 0);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*engine)->Step(0, 5, 0, again).ok());
    EXPECT_EQ(again, first);
  }
  EXPECT_EQ(gates_in_trace(), gates);
}

// Issue 16: virtual time is a function of the inputs. In deterministic mode, the same GPT-2 run
// with weight streaming on gives a byte-identical trace twice in one process; a run with other
// inputs gives another trace (so the comparison can fail).
class Gpt2DeterminismTest : public Gpt2EngineTest {
 protected:
  std::string RunOnce(const std::string& path, std::vector<int> prompt) {
    EXPECT_TRUE(ModelManager::Initialize({.chips = {"910B"}, .deterministic = true, .trace = true}).ok());
    std::string trace;
    {
      auto engine = Gpt2Engine::Create(path, {});
      EXPECT_TRUE(engine.ok()) << engine.status();
      if (engine.ok()) {
        auto g = (*engine)->Generate(0, prompt, 4, {});
        EXPECT_TRUE(g.ok()) << g.status();
        trace = ModelManager::Get()->runtime().trace().ToJson();
        EXPECT_EQ(ModelManager::Get()->runtime().unattributed_host_calls(), 0u)
            << "an actor made host calls on a worker's clock";
      }
    }
    EXPECT_TRUE(ModelManager::Finalize().ok());
    return trace;
  }
};

TEST_F(Gpt2DeterminismTest, TheSameRunGivesAByteIdenticalTraceTwice) {
  // ~40 MB of f32 weights: several 10 MiB chunks still streaming when the first step starts.
  const std::string path = Make("det.bin", {.layers = 8, .embd = 384, .heads = 6, .ctx = 16, .vocab = 512, .seed = 8});
  const std::string first = RunOnce(path, {1, 2, 3});
  const std::string second = RunOnce(path, {1, 2, 3});
  ASSERT_FALSE(first.empty());
  EXPECT_NE(first.find("weight chunk"), std::string::npos) << "the weights did not stream";
  EXPECT_NE(first.find("\"name\":\"weight loader\""), std::string::npos) << "the loader has no host track of its own";
  EXPECT_EQ(first.find("\"name\":\"host thread 1\""), std::string::npos) << "a worker's host calls were traced";
  EXPECT_EQ(first.find("wall_us"), std::string::npos) << "deterministic traces carry no wall time";
  if (first != second) {
    std::size_t at = 0;
    while (at < first.size() && at < second.size() && first[at] == second[at]) ++at;
    const std::size_t from = first.rfind('\n', at) == std::string::npos ? 0 : first.rfind('\n', at) + 1;
    ADD_FAILURE() << "two identical runs gave different traces (" << first.size() << " and " << second.size()
                  << " bytes); first difference at byte " << at << ":\n  " << first.substr(from, at - from + 120)
                  << "\n  " << second.substr(from, at - from + 120);
  }
  // A longer prompt is one more step: another trace (kernel timing does not depend on values).
  const std::string other = RunOnce(path, {1, 2, 3, 4});
  EXPECT_TRUE(first != other) << "another run gave the same trace: the comparison cannot fail";
}


}  // namespace
}  // namespace npuflow::gpt2
