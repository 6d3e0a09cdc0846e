// RT2.0 executors on execute graphs: every executor against a plain evaluation on random DAGs,
// control flow (If, While), failure and restore, priority order, the multi-thread executor's
// lanes and critical sections, subscribers, the automatic choice and the errors.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "graph/exe_graph/exe_graph.h"
#include "graph/exe_graph/kernel_registry.h"
#include "scheduler/v2/execution_data.h"
#include "scheduler/v2/executors.h"
#include "scheduler/v2/subscribers.h"

namespace npuflow::v2 {
namespace {

using exe::Chain;
using exe::ExeDep;
using exe::ExecuteGraph;
using exe::ExeNode;
using exe::KernelContext;
using exe::NodeKind;

// --- Test kernels.

struct ConstInfo {
  std::int64_t value;
};

StatusOr<std::shared_ptr<const void>> PrepareConst(const ExeNode& node) {
  auto it = node.attrs.find("value");
  if (it == node.attrs.end()) return Status::ParamInvalid("missing attribute 'value'");
  return std::shared_ptr<const void>(std::make_shared<ConstInfo>(ConstInfo{std::get<std::int64_t>(it->second)}));
}

std::uint32_t ConstRun(KernelContext* ctx) {
  ctx->output(0).Set<std::int64_t>(ctx->info<ConstInfo>().value);
  return exe::kKernelSuccess;
}

// out = (sum of inputs) * 31 + node id, wrapping.
std::int64_t Mix(std::int64_t sum, std::uint32_t id) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(sum) * 31u + id);
}

std::uint32_t MixRun(KernelContext* ctx) {
  std::uint64_t sum = 0;  // wrapping (unsigned: no overflow)
  for (std::uint32_t i = 0; i < ctx->num_inputs; ++i) sum += ctx->input(i).Get<std::uint64_t>();
  ctx->output(0).Set<std::int64_t>(Mix(static_cast<std::int64_t>(sum), ctx->node_id));
  return exe::kKernelSuccess;
}

// Fails when its first input's word is 1; else passes its second input through.
std::uint32_t FailIfRun(KernelContext* ctx) {
  if (ctx->input(0).Get<std::int64_t>() == 1) return ctx->Fail(Status::Failed("asked to fail"));
  ctx->output(0).Set<std::int64_t>(ctx->input(1).Get<std::int64_t>());
  return exe::kKernelSuccess;
}

std::string FailIfDump(const KernelContext* ctx) { return "ctrl=" + std::to_string(ctx->input(0).Get<std::int64_t>()); }

// Records the order nodes ran in.
std::mutex g_order_mu;
std::vector<std::uint32_t> g_order;
std::uint32_t RecordRun(KernelContext* ctx) {
  std::lock_guard<std::mutex> lock(g_order_mu);
  g_order.push_back(ctx->node_id);
  return exe::kKernelSuccess;
}

// Multi-thread probes: how many kernels of a kind run at once, at most.
struct Overlap {
  std::atomic<int> now{0};
  std::atomic<int> max{0};
  void Enter() {
    const int n = now.fetch_add(1) + 1;
    int m = max.load();
    while (n > m && !max.compare_exchange_weak(m, n)) {
    }
  }
  void Leave() { now.fetch_sub(1); }
  void Reset() { now = 0; max = 0; }
};
Overlap g_memory, g_launch, g_section, g_normal;

void Spin(std::chrono::microseconds us) {
  const auto end = std::chrono::steady_clock::now() + us;
  while (std::chrono::steady_clock::now() < end) {
  }
}

template <Overlap* kProbe>
std::uint32_t ProbeRun(KernelContext* ctx) {
  kProbe->Enter();
  Spin(std::chrono::microseconds(20));
  kProbe->Leave();
  return MixRun(ctx);
}

// While-loop pieces. Less: sel = (a < b); AddTo: out = a + b; Inc: out = a + 1; Copy: out = a.
std::uint32_t LessRun(KernelContext* ctx) {
  ctx->output(0).Set<std::uint64_t>(ctx->input(0).Get<std::int64_t>() < ctx->input(1).Get<std::int64_t>() ? 1 : 0);
  return exe::kKernelSuccess;
}
std::uint32_t AddToRun(KernelContext* ctx) {
  ctx->output(0).Set<std::int64_t>(ctx->input(0).Get<std::int64_t>() + ctx->input(1).Get<std::int64_t>());
  return exe::kKernelSuccess;
}
std::uint32_t IncRun(KernelContext* ctx) {
  ctx->output(0).Set<std::int64_t>(ctx->input(0).Get<std::int64_t>() + 1);
  return exe::kKernelSuccess;
}
std::uint32_t CopyRun(KernelContext* ctx) {
  ctx->output(0).Set<std::int64_t>(ctx->input(0).Get<std::int64_t>());
  return exe::kKernelSuccess;
}
std::uint32_t NopRun(KernelContext*) { return exe::kKernelSuccess; }
// A switch on its input's word: branch = word (0 or 1 for an If).
std::uint32_t PickRun(KernelContext* ctx) {
  ctx->output(0).Set<std::uint64_t>(ctx->input(0).Get<std::uint64_t>());
  return exe::kKernelSuccess;
}
std::uint32_t TwiceRun(KernelContext* ctx) {
  ctx->output(0).Set<std::int64_t>(ctx->input(0).Get<std::int64_t>() * 2);
  return exe::kKernelSuccess;
}
std::uint32_t Plus100Run(KernelContext* ctx) {
  ctx->output(0).Set<std::int64_t>(ctx->input(0).Get<std::int64_t>() + 100);
  return exe::kKernelSuccess;
}

void RegisterTestKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    exe::KernelRegister("T.Const").RunFunc(ConstRun).Prepare(PrepareConst);
    exe::KernelRegister("T.Mix").RunFunc(MixRun);
    exe::KernelRegister("T.FailIf").RunFunc(FailIfRun).ExceptionDumpInfoFiller(FailIfDump);
    exe::KernelRegister("T.Record").RunFunc(RecordRun);
    exe::KernelRegister("T.MemMix").RunFunc(ProbeRun<&g_memory>).Tag(exe::KernelTag::kMemory);
    exe::KernelRegister("T.LaunchMix").RunFunc(ProbeRun<&g_launch>).Tag(exe::KernelTag::kLaunch);
    exe::KernelRegister("T.SectionMix").RunFunc(ProbeRun<&g_section>).ConcurrentCriticalSectionKey("allocator");
    exe::KernelRegister("T.NormalMix").RunFunc(ProbeRun<&g_normal>);
    exe::KernelRegister("T.Less").RunFunc(LessRun);
    exe::KernelRegister("T.AddTo").RunFunc(AddToRun);
    exe::KernelRegister("T.Inc").RunFunc(IncRun);
    exe::KernelRegister("T.Copy").RunFunc(CopyRun);
    exe::KernelRegister("T.Nop").RunFunc(NopRun);
    exe::KernelRegister("T.Pick").RunFunc(PickRun);
    exe::KernelRegister("T.Twice").RunFunc(TwiceRun);
    exe::KernelRegister("T.Plus100").RunFunc(Plus100Run);
  });
}

class V2Executors : public ::testing::Test {
 protected:
  void SetUp() override { RegisterTestKernels(); }
};

ExeNode Node(std::string name, std::string kernel, std::vector<int> in, std::vector<int> out) {
  ExeNode n;
  n.name = std::move(name);
  n.kernel = std::move(kernel);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

int Add(ExecuteGraph& g, ExeNode n, bool deps_from_inputs = true) {
  auto id = g.AddNode(std::move(n), deps_from_inputs);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : -1;
}

// A random DAG of Mix-like nodes (kernels drawn from `kernels`), one value per node, random
// priorities; the expected values computed in id order.
struct RandomDag {
  std::shared_ptr<ExecuteGraph> graph;
  std::vector<std::int64_t> expected;  // by node
};

RandomDag MakeRandomDag(std::uint32_t seed, int n, const std::vector<std::string>& kernels) {
  std::mt19937 rng(seed);
  RandomDag dag;
  dag.graph = std::make_shared<ExecuteGraph>("dag" + std::to_string(seed));
  for (int i = 0; i < n; ++i) {
    const int v = dag.graph->AddValue("v" + std::to_string(i));
    std::vector<int> in;
    const int fan = i == 0 ? 0 : static_cast<int>(rng() % 4);
    for (int k = 0; k < fan; ++k) in.push_back(static_cast<int>(rng() % static_cast<unsigned>(i)));
    ExeNode node = Node("n" + std::to_string(i), kernels[rng() % kernels.size()], in, {v});
    if (rng() % 3 != 0) node.priority = static_cast<std::int64_t>(rng() % 100);
    std::uint64_t wrapped = 0;  // wrapping, as MixRun
    for (int src : in) wrapped += static_cast<std::uint64_t>(dag.expected[src]);
    const auto sum = static_cast<std::int64_t>(wrapped);
    dag.expected.push_back(Mix(sum, static_cast<std::uint32_t>(i)));
    Add(*dag.graph, std::move(node));
  }
  for (int i = 0; i < n; ++i) dag.graph->AddOutput(i);
  return dag;
}

void ExpectValues(ExecutionData& d, const std::vector<std::int64_t>& expected, const std::string& what) {
  for (std::size_t i = 0; i < expected.size(); ++i)
    ASSERT_EQ(d.output(i).Get<std::int64_t>(), expected[i]) << what << ": node " << i;
}

TEST_F(V2Executors, EveryExecutorMatchesThePlainEvaluationOnRandomDags) {
  for (std::uint32_t seed = 1; seed <= 12; ++seed) {
    RandomDag dag = MakeRandomDag(seed, 50 + static_cast<int>(seed) * 37, {"T.Mix"});
    for (ExecutorType type : {ExecutorType::kSequentialPriority, ExecutorType::kTopological,
                              ExecutorType::kTopologicalPriority, ExecutorType::kTopologicalMultiThread,
                              ExecutorType::kAutomatic}) {
      auto e = ExeGraphExecutor::Create(dag.graph, type, 2 + static_cast<int>(seed % 3));
      ASSERT_TRUE(e.ok()) << e.status();
      for (int run = 0; run < 3; ++run) {  // the data is reused run after run
        ASSERT_TRUE((*e)->Execute(nullptr).ok());
        ExpectValues((*e)->data(), dag.expected, std::string(ExecutorTypeName(type)) + " seed " + std::to_string(seed));
      }
    }
  }
}

TEST_F(V2Executors, MultiThreadRoutesMemoryAndLaunchKernelsToTheirLanes) {
  for (int threads : {2, 3, 4}) {
    for (std::uint32_t seed = 1; seed <= 4; ++seed) {
      RandomDag dag = MakeRandomDag(100 + seed, 300, {"T.MemMix", "T.LaunchMix", "T.SectionMix", "T.NormalMix"});
      auto e = ExeGraphExecutor::Create(dag.graph, ExecutorType::kTopologicalMultiThread, threads);
      ASSERT_TRUE(e.ok()) << e.status();
      g_memory.Reset();
      g_launch.Reset();
      g_section.Reset();
      g_normal.Reset();
      for (int run = 0; run < 3; ++run) {
        ASSERT_TRUE((*e)->Execute(nullptr).ok());
        ExpectValues((*e)->data(), dag.expected, "threads " + std::to_string(threads));
      }
      EXPECT_EQ(g_memory.max.load(), 1) << "memory kernels overlapped, threads " << threads;
      EXPECT_EQ(g_section.max.load(), 1) << "a critical section was entered twice at once";
      if (threads > 2) {
        EXPECT_EQ(g_launch.max.load(), 1) << "launch kernels overlapped, threads " << threads;
      }
      EXPECT_LE(g_normal.max.load(), threads);
    }
  }
}

// ctrl -> FailIf in the middle of a chain; a failed run leaves nothing half-counted.
std::shared_ptr<ExecuteGraph> FailingGraph(int* ctrl_input) {
  auto g = std::make_shared<ExecuteGraph>("failing");
  *ctrl_input = g->AddInput("ctrl");
  int prev = -1;
  for (int i = 0; i < 40; ++i) {
    const int v = g->AddValue("v" + std::to_string(i));
    if (i == 20) {
      Add(*g, Node("fail_here", "T.FailIf", {*ctrl_input, prev}, {v}));
    } else {
      std::vector<int> in;
      if (prev >= 0) in.push_back(prev);
      if (i % 7 == 3) in.push_back(v - 2 >= 1 ? v - 2 : prev >= 0 ? prev : v);  // a wider shape
      if (i == 0) in.clear();
      Add(*g, Node("n" + std::to_string(i), "T.Mix", in, {v}));
    }
    prev = v;
  }
  g->AddOutput(prev);
  return g;
}

TEST_F(V2Executors, AFailureStopsTheRunNamesTheNodeAndTheNextRunIsRight) {
  for (ExecutorType type : {ExecutorType::kSequentialPriority, ExecutorType::kTopological,
                            ExecutorType::kTopologicalPriority, ExecutorType::kTopologicalMultiThread}) {
    int ctrl = 0;
    auto graph = FailingGraph(&ctrl);
    auto e = ExeGraphExecutor::Create(graph, type, 3);
    ASSERT_TRUE(e.ok()) << e.status();
    ExecutionData& d = (*e)->data();
    d.value(ctrl).Set<std::int64_t>(0);
    ASSERT_TRUE((*e)->Execute(nullptr).ok());
    const std::int64_t good = d.output(0).Get<std::int64_t>();
    d.output(0).Set<std::int64_t>(-1);

    d.value(ctrl).Set<std::int64_t>(1);
    Status s = (*e)->Execute(nullptr);
    ASSERT_FALSE(s.ok()) << ExecutorTypeName(type);
    EXPECT_EQ(s.code(), StatusCode::kFailed);
    EXPECT_NE(s.message().find("node 'fail_here' (T.FailIf): asked to fail [ctrl=1]"), std::string_view::npos) << s;
    EXPECT_EQ(d.output(0).Get<std::int64_t>(), -1) << "nodes after the failure ran";
    EXPECT_EQ(d.counter, d.init_counter) << "counters not restored";

    d.value(ctrl).Set<std::int64_t>(0);
    ASSERT_TRUE((*e)->Execute(nullptr).ok()) << ExecutorTypeName(type);
    EXPECT_EQ(d.output(0).Get<std::int64_t>(), good) << ExecutorTypeName(type);
  }
}

TEST_F(V2Executors, PriorityDecidesAmongReadyNodes) {
  auto g = std::make_shared<ExecuteGraph>("prio");
  const std::vector<std::int64_t> prios = {5, 1, exe::kNoPriority, 3, 0, 4};
  for (std::size_t i = 0; i < prios.size(); ++i) {
    ExeNode n = Node("r" + std::to_string(i), "T.Record", {}, {});
    n.priority = prios[i];
    Add(*g, std::move(n));
  }
  auto order_of = [&](ExecutorType type) {
    auto e = ExeGraphExecutor::Create(g, type);
    EXPECT_TRUE(e.ok());
    g_order.clear();
    EXPECT_TRUE((*e)->Execute(nullptr).ok());
    return g_order;
  };
  const std::vector<std::uint32_t> by_priority = {4, 1, 3, 5, 0, 2};  // no priority = largest
  EXPECT_EQ(order_of(ExecutorType::kTopologicalPriority), by_priority);
  EXPECT_EQ(order_of(ExecutorType::kSequentialPriority), by_priority);
  EXPECT_EQ(order_of(ExecutorType::kTopological), (std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5}));  // FIFO
}

// sum of i for i in [0, n): i = 0; acc = 0; while (i < n) { acc += i; i += 1; } out = acc.
struct WhileGraph {
  std::shared_ptr<ExecuteGraph> graph;
  int n_input = 0;
};

WhileGraph MakeWhile() {
  WhileGraph w;
  w.graph = std::make_shared<ExecuteGraph>("while");
  ExecuteGraph& g = *w.graph;
  w.n_input = g.AddInput("n");
  const int i = g.AddValue("i"), acc = g.AddValue("acc"), sel = g.AddValue("sel"), out = g.AddValue("out");
  ExeNode zero_i = Node("i0", "T.Const", {}, {i});
  zero_i.attrs["value"] = std::int64_t{0};
  ExeNode zero_acc = Node("acc0", "T.Const", {}, {acc});
  zero_acc.attrs["value"] = std::int64_t{0};
  const int a = Add(g, std::move(zero_i));
  const int b = Add(g, std::move(zero_acc));
  ExeNode enter = Node("enter", "T.Nop", {}, {});
  enter.deps = {{a, -1}, {b, -1}};
  const int enter_id = Add(g, std::move(enter));
  ExeNode head = Node("head", "T.Nop", {}, {});
  head.kind = NodeKind::kMerge;
  head.deps = {{enter_id, -1}};
  const int head_id = Add(g, std::move(head));
  ExeNode cond = Node("cond", "T.Less", {i, w.n_input}, {sel});
  cond.kind = NodeKind::kSwitch;
  cond.branches = 2;
  cond.deps = {{head_id, -1}};
  const int cond_id = Add(g, std::move(cond), false);
  ExeNode body_add = Node("acc_add", "T.AddTo", {acc, i}, {acc});
  body_add.deps = {{cond_id, 1}};
  const int add_id = Add(g, std::move(body_add), false);
  ExeNode body_inc = Node("i_inc", "T.Inc", {i}, {i});
  body_inc.deps = {{add_id, -1}};
  const int inc_id = Add(g, std::move(body_inc), false);
  EXPECT_TRUE(g.AddDep(head_id, ExeDep{inc_id, -1}).ok());  // the back edge
  ExeNode exit = Node("exit", "T.Copy", {acc}, {out});
  exit.deps = {{cond_id, 0}};
  Add(g, std::move(exit), false);
  g.AddOutput(out);
  return w;
}

TEST_F(V2Executors, WhileLoopsRunAgainAndAgain) {
  WhileGraph w = MakeWhile();
  ASSERT_TRUE(w.graph->Validate().ok()) << w.graph->Validate();
  for (ExecutorType type : {ExecutorType::kTopological, ExecutorType::kTopologicalPriority,
                            ExecutorType::kTopologicalMultiThread, ExecutorType::kAutomatic}) {
    auto e = ExeGraphExecutor::Create(w.graph, type, 2);
    ASSERT_TRUE(e.ok()) << e.status();
    for (std::int64_t n : {0, 1, 5, 100, 3}) {
      (*e)->data().value(w.n_input).Set<std::int64_t>(n);
      ASSERT_TRUE((*e)->Execute(nullptr).ok()) << ExecutorTypeName(type) << " n=" << n;
      EXPECT_EQ((*e)->data().output(0).Get<std::int64_t>(), n * (n - 1) / 2) << ExecutorTypeName(type) << " n=" << n;
      EXPECT_EQ((*e)->data().counter, (*e)->data().init_counter);
    }
  }
}

// out = cond ? x + 100 : x * 2, joined by a merge.
TEST_F(V2Executors, IfRunsOnlyTheChosenBranch) {
  auto g = std::make_shared<ExecuteGraph>("if");
  const int cond = g->AddInput("cond"), x = g->AddInput("x");
  const int sel = g->AddValue("sel"), out = g->AddValue("out"), final_v = g->AddValue("final");
  ExeNode pick = Node("pick", "T.Pick", {cond}, {sel});
  pick.kind = NodeKind::kSwitch;
  pick.branches = 2;
  const int pick_id = Add(*g, std::move(pick));
  ExeNode twice = Node("else_twice", "T.Twice", {x}, {out});
  twice.deps = {{pick_id, 0}};
  const int else_id = Add(*g, std::move(twice), false);
  ExeNode plus = Node("then_plus", "T.Plus100", {x}, {out});
  plus.deps = {{pick_id, 1}};
  const int then_id = Add(*g, std::move(plus), false);
  ExeNode join = Node("join", "T.Nop", {}, {});
  join.kind = NodeKind::kMerge;
  join.deps = {{else_id, -1}, {then_id, -1}};
  const int join_id = Add(*g, std::move(join));
  ExeNode copy = Node("copy", "T.Copy", {out}, {final_v});
  copy.deps = {{join_id, -1}};
  Add(*g, std::move(copy), false);
  g->AddOutput(final_v);
  for (ExecutorType type : {ExecutorType::kTopological, ExecutorType::kTopologicalPriority,
                            ExecutorType::kTopologicalMultiThread}) {
    auto e = ExeGraphExecutor::Create(g, type, 3);
    ASSERT_TRUE(e.ok()) << e.status();
    for (int round = 0; round < 6; ++round) {
      const std::int64_t c = round % 2, xv = 7 + round;
      (*e)->data().value(cond).Set<std::int64_t>(c);
      (*e)->data().value(x).Set<std::int64_t>(xv);
      ASSERT_TRUE((*e)->Execute(nullptr).ok());
      EXPECT_EQ((*e)->data().output(0).Get<std::int64_t>(), c ? xv + 100 : xv * 2) << ExecutorTypeName(type);
    }
    (*e)->data().value(cond).Set<std::int64_t>(2);  // no such branch
    Status s = (*e)->Execute(nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
    EXPECT_NE(s.message().find("node 'pick' (T.Pick): picked branch 2 of 2"), std::string_view::npos) << s;
    (*e)->data().value(cond).Set<std::int64_t>(1);
    ASSERT_TRUE((*e)->Execute(nullptr).ok()) << "usable after a bad branch";
  }
}

TEST_F(V2Executors, AutomaticChoosesByControlFlowAndLaunchCount) {
  RandomDag dag = MakeRandomDag(7, 30, {"T.Mix"});
  auto plain = ExeGraphExecutor::Create(dag.graph, ExecutorType::kAutomatic);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->type(), ExecutorType::kSequentialPriority);

  WhileGraph w = MakeWhile();
  auto few = ExeGraphExecutor::Create(w.graph, ExecutorType::kAutomatic);
  ASSERT_TRUE(few.ok());
  EXPECT_EQ((*few)->type(), ExecutorType::kTopological);

  // The same loop with 5 launch-tagged nodes before it.
  WhileGraph w5 = MakeWhile();
  for (int i = 0; i < 5; ++i) {
    const int v = w5.graph->AddValue("l" + std::to_string(i));
    Add(*w5.graph, Node("launch" + std::to_string(i), "T.LaunchMix", {}, {v}));
  }
  auto many = ExeGraphExecutor::Create(w5.graph, ExecutorType::kAutomatic);
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_EQ((*many)->type(), ExecutorType::kTopologicalPriority);
}

std::vector<std::string> g_events_a, g_events_b, g_events_c;
void RecordEvent(void* arg, const ExecutorEventInfo& info) {
  auto* log = static_cast<std::vector<std::string>*>(arg);
  std::string e(ExecutorEventName(info.event));
  if (info.node) e += ":" + info.node->node->name;
  log->push_back(e);
}

TEST_F(V2Executors, SubscribersSeeEveryEventInOrderWithZeroOneAndThree) {
  auto g = std::make_shared<ExecuteGraph>("sub");
  const int v0 = g->AddValue("v0"), v1 = g->AddValue("v1");
  Add(*g, Node("a", "T.Mix", {}, {v0}));
  Add(*g, Node("b", "T.Mix", {v0}, {v1}));
  const std::vector<std::string> expected = {"model-start", "execute-start:a", "execute-end:a", "execute-start:b",
                                             "execute-end:b", "model-end"};
  for (ExecutorType type : {ExecutorType::kSequentialPriority, ExecutorType::kTopological,
                            ExecutorType::kTopologicalPriority, ExecutorType::kTopologicalMultiThread}) {
    auto e = ExeGraphExecutor::Create(g, type);
    ASSERT_TRUE(e.ok());
    ExecutorSubscribersScheduler scheduler;
    EXPECT_FALSE(scheduler.IsEnabled());
    EXPECT_EQ(scheduler.Working(), nullptr);
    ASSERT_TRUE((*e)->Execute(nullptr, scheduler.Working()).ok());

    g_events_a.clear();
    const int id_a = scheduler.AddSubscriber({RecordEvent, &g_events_a});
    EXPECT_TRUE(scheduler.IsEnabled());
    ASSERT_NE(scheduler.Working(), nullptr);
    EXPECT_EQ(scheduler.Working()->callback, &RecordEvent) << "one subscriber is called directly";
    ASSERT_TRUE((*e)->Execute(nullptr, scheduler.Working()).ok());
    EXPECT_EQ(g_events_a, expected) << ExecutorTypeName(type);

    g_events_a.clear();
    const int id_b = scheduler.AddSubscriber({RecordEvent, &g_events_b});
    const int id_c = scheduler.AddSubscriber({RecordEvent, &g_events_c});
    EXPECT_NE(scheduler.Working()->callback, &RecordEvent) << "several go through the fan-out";
    g_events_b.clear();
    g_events_c.clear();
    ASSERT_TRUE((*e)->Execute(nullptr, scheduler.Working()).ok());
    EXPECT_EQ(g_events_a, expected);
    EXPECT_EQ(g_events_b, expected);
    EXPECT_EQ(g_events_c, expected);

    EXPECT_TRUE(scheduler.RemoveSubscriber(id_a));
    EXPECT_TRUE(scheduler.RemoveSubscriber(id_b));
    EXPECT_TRUE(scheduler.RemoveSubscriber(id_c));
    EXPECT_FALSE(scheduler.RemoveSubscriber(id_c));
    EXPECT_FALSE(scheduler.IsEnabled()) << "back to the built-ins (off): disabled";
  }
}

TEST_F(V2Executors, AFailureEndsTheEventsAfterTheFailingNode) {
  int ctrl = 0;
  auto graph = FailingGraph(&ctrl);
  auto e = ExeGraphExecutor::Create(graph, ExecutorType::kSequentialPriority);
  ASSERT_TRUE(e.ok());
  (*e)->data().value(ctrl).Set<std::int64_t>(1);
  ExecutorSubscribersScheduler scheduler;
  g_events_a.clear();
  scheduler.AddSubscriber({RecordEvent, &g_events_a});
  ASSERT_FALSE((*e)->Execute(nullptr, scheduler.Working()).ok());
  ASSERT_FALSE(g_events_a.empty());
  EXPECT_EQ(g_events_a.back(), "execute-end:fail_here");
  EXPECT_EQ(std::count(g_events_a.begin(), g_events_a.end(), "model-end"), 0);
}

TEST_F(V2Executors, BuiltinProfilerAndTracerRecordEveryNode) {
  RandomDag dag = MakeRandomDag(3, 64, {"T.Mix"});
  auto e = ExeGraphExecutor::Create(dag.graph, ExecutorType::kTopologicalMultiThread, 2);
  ASSERT_TRUE(e.ok());
  ExecutorSubscribersScheduler scheduler;
  HostProfiler& profiler = scheduler.EnableProfiler();
  ExecutorTracer& tracer = scheduler.EnableTracer();
  EXPECT_EQ(scheduler.working_count(), 2u);
  for (int run = 0; run < 4; ++run) ASSERT_TRUE((*e)->Execute(nullptr, scheduler.Working()).ok());
  const auto rows = profiler.Top(1000);
  ASSERT_EQ(rows.size(), 64u);
  for (const auto& r : rows) EXPECT_EQ(r.runs, 4u) << r.node;
  EXPECT_EQ(profiler.Top(5).size(), 5u);
  EXPECT_NE(profiler.Report(3).find("T.Mix"), std::string::npos);
  EXPECT_EQ(tracer.span_count(), 4u * 64u);
  const std::string json = tracer.ToChromeTraceJson();
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("\"n63\""), std::string::npos);
  scheduler.DisableBuiltins();
  EXPECT_FALSE(scheduler.IsEnabled());
}

TEST_F(V2Executors, ErrorsNameWhatWasWrong) {
  {
    auto g = std::make_shared<ExecuteGraph>("unknown");
    Add(*g, Node("x", "T.NoSuchKernel", {}, {}));
    auto e = ExeGraphExecutor::Create(g, ExecutorType::kTopological);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
    EXPECT_NE(e.status().message().find("node 'x': no kernel 'T.NoSuchKernel'"), std::string_view::npos) << e.status();
  }
  {
    auto g = std::make_shared<ExecuteGraph>("cycle");
    const int a = Add(*g, Node("a", "T.Nop", {}, {}));
    ExeNode b = Node("b", "T.Nop", {}, {});
    b.deps = {{a, -1}};
    const int b_id = Add(*g, std::move(b));
    ASSERT_TRUE(g->AddDep(a, ExeDep{b_id, -1}).ok());
    Status s = g->Validate();
    EXPECT_EQ(s.code(), StatusCode::kParamInvalid);
    EXPECT_NE(s.message().find("a cycle passes through no merge node"), std::string_view::npos) << s;
    EXPECT_FALSE(ExeGraphExecutor::Create(g, ExecutorType::kTopological).ok());
  }
  {
    WhileGraph w = MakeWhile();
    auto e = ExeGraphExecutor::Create(w.graph, ExecutorType::kSequentialPriority);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("has control flow: the sequential executor cannot run it"),
              std::string_view::npos);
  }
  {
    auto t = ParseExecutorType("fastest");
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("--executor: 'fastest' is not an executor; expected sequential"),
              std::string_view::npos);
    for (auto type : {ExecutorType::kSequentialPriority, ExecutorType::kTopological, ExecutorType::kTopologicalPriority,
                      ExecutorType::kTopologicalMultiThread, ExecutorType::kAutomatic})
      EXPECT_EQ(*ParseExecutorType(ExecutorTypeName(type)), type);
  }
  {
    auto m = MultiThreadExecutor::Create(1);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("at least 2 threads, got 1"), std::string_view::npos);
  }
  {
    auto g = std::make_shared<ExecuteGraph>("badbranch");
    const int a = Add(*g, Node("a", "T.Nop", {}, {}));
    ExeNode b = Node("b", "T.Nop", {}, {});
    b.deps = {{a, 0}};
    Add(*g, std::move(b));
    Status s = g->Validate();
    EXPECT_NE(s.message().find("branch label 0 on its dep on 'a', which is no switch"), std::string_view::npos) << s;
  }
  {
    auto g = std::make_shared<ExecuteGraph>("noattr");
    const int v = g->AddValue("v");
    Add(*g, Node("c", "T.Const", {}, {v}));
    auto e = ExeGraphExecutor::Create(g, ExecutorType::kSequentialPriority);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("node 'c' (T.Const): missing attribute 'value'"), std::string_view::npos)
        << e.status();
  }
}

TEST_F(V2Executors, TheLastKernelRegistrationWins) {
  exe::KernelRegister("T.Replaced").RunFunc(TwiceRun);
  exe::KernelRegister("T.Replaced").RunFunc(Plus100Run);
  auto def = exe::KernelRegistry::Global().Find("T.Replaced");
  ASSERT_TRUE(def.ok());
  EXPECT_EQ((*def)->run, &Plus100Run);
  auto missing = exe::KernelRegistry::Global().Find("T.Missing");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Many executions from several threads, each on its own executor (as StreamExecutor will hold
// one per stream), under real threads.
TEST_F(V2Executors, IndependentExecutorsRunConcurrently) {
  RandomDag dag = MakeRandomDag(11, 200, {"T.Mix"});
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const ExecutorType type = t % 2 ? ExecutorType::kTopologicalMultiThread : ExecutorType::kTopological;
      auto e = ExeGraphExecutor::Create(dag.graph, type, 2);
      if (!e.ok()) {
        ++bad;
        return;
      }
      for (int run = 0; run < 50; ++run) {
        if (!(*e)->Execute(nullptr).ok()) ++bad;
        for (std::size_t i = 0; i < dag.expected.size(); ++i)
          if ((*e)->data().output(i).Get<std::int64_t>() != dag.expected[i]) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace npuflow::v2
