// Actor runtime benchmarks: the hop (one-way, ping-pong between two actors), fan-in (2 producer
// threads -> 1 actor) and the cost of the delivery-tap hook, each against a baseline run in the
// same process:
//   - raw: two serial tbb::flow::function_nodes ping-ponging via try_put (or 2 threads putting
//     into one), in an arena set up exactly like actors::System's;
//   - flow-node mailbox: the same actors, Envelope, Context and handler path as the runtime,
//     but buffered by the flow-graph node itself instead of the runtime's Boost.Lockfree lanes.
//     This is the mailbox design the runtime did not keep; it stays here so the choice can be
//     re-measured.
#include "benchmarks/actors_bench.h"

#include <atomic>
#include <memory>
#include <thread>
#include <variant>

#include <benchmark/benchmark.h>
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include "actors/system.h"

namespace npuflow::bench {
namespace {

namespace flow = tbb::flow;
using actors::Context;

constexpr long kHops = 100'000;         // hops per benchmark iteration
constexpr long kPerProducer = 200'000;  // messages per producer thread per iteration
constexpr int kWorkers = 2;

// One-shot signal that the host thread blocks on (a futex wait), as it would on a future.
class Latch {
 public:
  void Reset() { open_.store(0, std::memory_order_relaxed); }
  void Open() {
    open_.store(1, std::memory_order_release);
    open_.notify_all();
  }
  void Wait() {
    while (open_.load(std::memory_order_acquire) == 0) open_.wait(0, std::memory_order_acquire);
  }

 private:
  std::atomic<int> open_{0};
};

// The arena actors::System uses: kWorkers workers, no slot reserved for host threads.
struct RawArena {
  explicit RawArena(int workers = kWorkers)
      : parallelism(tbb::global_control::max_allowed_parallelism, workers + 1), arena(workers, 0) {}
  tbb::global_control parallelism;
  tbb::task_arena arena;
};

// ---------------------------------------------------------------------------------------------
// Baseline: raw function_nodes. With 2 workers the idle one often steals the spawned task, so
// a hop crosses cores; with 1 worker it never can: that is raw at its best (RawHopOneWorker).
void RawHop(benchmark::State& state, int workers) {
  RawArena env(workers);
  Latch latch;
  std::unique_ptr<flow::graph> g;
  std::unique_ptr<flow::function_node<long, flow::continue_msg>> a, b;
  env.arena.execute([&] {
    g = std::make_unique<flow::graph>();
    a = std::make_unique<flow::function_node<long, flow::continue_msg>>(*g, flow::serial, [&](long left) {
      if (left == 0) latch.Open(); else b->try_put(left - 1);
      return flow::continue_msg();
    });
    b = std::make_unique<flow::function_node<long, flow::continue_msg>>(*g, flow::serial, [&](long left) {
      if (left == 0) latch.Open(); else a->try_put(left - 1);
      return flow::continue_msg();
    });
  });
  for (auto _ : state) {
    latch.Reset();
    a->try_put(kHops);
    latch.Wait();
  }
  env.arena.execute([&] {
    g->wait_for_all();
    a.reset();
    b.reset();
    g.reset();
  });
  state.SetItemsProcessed(state.iterations() * kHops);
}
void BM_RawHop(benchmark::State& state) { RawHop(state, kWorkers); }
void BM_RawHopOneWorker(benchmark::State& state) { RawHop(state, 1); }

void BM_RawFanIn(benchmark::State& state) {
  RawArena env;
  Latch latch;
  long count = 0;
  std::unique_ptr<flow::graph> g;
  std::unique_ptr<flow::function_node<long, flow::continue_msg, flow::queueing>> sink;
  env.arena.execute([&] {
    g = std::make_unique<flow::graph>();
    sink = std::make_unique<flow::function_node<long, flow::continue_msg, flow::queueing>>(
        *g, flow::serial, [&](long) {
          if (++count == 2 * kPerProducer) latch.Open();
          return flow::continue_msg();
        });
  });
  for (auto _ : state) {
    latch.Reset();
    count = 0;
    std::thread p1([&] { for (long i = 0; i < kPerProducer; ++i) sink->try_put(i); });
    std::thread p2([&] { for (long i = 0; i < kPerProducer; ++i) sink->try_put(i); });
    p1.join();
    p2.join();
    latch.Wait();
  }
  env.arena.execute([&] {
    g->wait_for_all();
    sink.reset();
    g.reset();
  });
  state.SetItemsProcessed(state.iterations() * 2 * kPerProducer);
}

// ---------------------------------------------------------------------------------------------
// The same actors on either mailbox. PeerRef is how a player reaches the other one.
struct Ball {
  static constexpr std::string_view kKind = "Ball";
  long left;
};
struct Tick {
  static constexpr std::string_view kKind = "Tick";
};

template <typename PeerRef>
class Player {
 public:
  using Message = std::variant<Ball>;
  Player(const PeerRef* peer, Latch* latch) : peer_(peer), latch_(latch) {}
  void Receive(Message& msg, Context<Message>&) {
    const long left = std::get<Ball>(msg).left;
    if (left == 0) latch_->Open(); else peer_->Send(Ball{left - 1});
  }

 private:
  const PeerRef* peer_;
  Latch* latch_;
};

class Counter {
 public:
  using Message = std::variant<Tick>;
  Counter(long target, Latch* latch) : target_(target), latch_(latch) {}
  void Receive(Message&, Context<Message>&) {
    if (++count_ == target_) {
      count_ = 0;
      latch_->Open();
    }
  }

 private:
  long target_;
  long count_ = 0;
  Latch* latch_;
};

// The runtime.
void RuntimeHop(benchmark::State& state, bool tap_hook) {
  using P = Player<actors::Address<std::variant<Ball>>>;
  actors::System system({.workers = kWorkers, .tap_hook = tap_hook});
  Latch latch;
  actors::Address<P::Message> peer_of_a, peer_of_b;
  auto a = system.Spawn<P>("a", &peer_of_a, &latch);
  auto b = system.Spawn<P>("b", &peer_of_b, &latch);
  peer_of_a = b;
  peer_of_b = a;
  for (auto _ : state) {
    latch.Reset();
    a.Send(Ball{kHops});
    latch.Wait();
  }
  state.SetItemsProcessed(state.iterations() * kHops);
}
void BM_ActorHop(benchmark::State& state) { RuntimeHop(state, true); }
void BM_ActorHopWithoutTapHook(benchmark::State& state) { RuntimeHop(state, false); }

void BM_ActorFanIn(benchmark::State& state) {
  actors::System system({.workers = kWorkers});
  Latch latch;
  auto sink = system.Spawn<Counter>("sink", 2 * kPerProducer, &latch);
  for (auto _ : state) {
    latch.Reset();
    std::thread p1([&] { for (long i = 0; i < kPerProducer; ++i) sink.Send(Tick{}); });
    std::thread p2([&] { for (long i = 0; i < kPerProducer; ++i) sink.Send(Tick{}); });
    p1.join();
    p2.join();
    latch.Wait();
  }
  state.SetItemsProcessed(state.iterations() * 2 * kPerProducer);
}

// The alternative mailbox: the flow-graph node buffers envelopes itself (serial, queueing).
template <typename A>
class FlowNodeCell final : public actors::detail::Cell<typename A::Message> {
 public:
  using Msg = typename A::Message;
  using Env = actors::detail::Envelope<Msg>;
  // What the node buffers: oneTBB's queues copy their items, so a copyable twin of Env.
  struct NodeItem {
    Msg msg;
    actors::ActorId sender = actors::kExternal;
    actors::detail::CoreRef reply;
  };

  struct Ref {
    FlowNodeCell* cell = nullptr;
    void Send(Msg msg) const {
      auto* current = actors::detail::ThisThread().current;
      cell->node_.try_put(NodeItem{std::move(msg), current ? current->id() : actors::kExternal, {}});
    }
  };

  template <typename... Args>
  FlowNodeCell(actors::detail::SystemCore* core, actors::ActorId id, Args&&... args)
      : actors::detail::Cell<Msg>(core, id, "flow-node-actor", {}),
        actor_(std::forward<Args>(args)...),
        node_(*core->graph, flow::serial, [this](const NodeItem& item) {
          // The node owns its buffered copy until the body returns: moving out of it is safe.
          auto& owned = const_cast<NodeItem&>(item);
          Env env{std::move(owned.msg), owned.sender, actors::detail::ReplyRef(std::move(owned.reply))};
          Deliver(env);
          return flow::continue_msg();
        }) {}

  void DropAll(const Status&) override {}   // the node's buffer owns undelivered envelopes
  void DestroyActor() override {}
  void DeliverOneDeterministic(actors::detail::SystemCore::DetEntry&) override {}

 private:
  // CellImpl::Deliver's path: tap hook, Context, handler, reply bookkeeping.
  void Deliver(Env& env) {
    auto& ts = actors::detail::ThisThread();
    const auto saved = ts;
    ts = actors::detail::DrainThreadState{this, nullptr, true};
    if (actors::DeliveryTap* tap = this->core_->tap.load(std::memory_order_relaxed); tap && !env.tapped) {
      env.tapped = true;
      tap->OnDelivery(actors::Delivery{env.sender, this->id_, this->name_, actors::KindOf(env.msg)});
    }
    auto ctx = actors::detail::ContextAccess::Make<Msg>(this, &env);
    actor_.Receive(env.msg, ctx);
    this->handled_.store(this->handled_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (env.reply && !env.reply->ready()) env.reply->TryFail(Status::Internal("no reply"));
    ts = saved;
  }

  A actor_;
  flow::function_node<NodeItem, flow::continue_msg, flow::queueing> node_;
};

// A SystemCore + arena + graph like actors::System's, for flow-node cells.
struct FlowNodeSystem {
  RawArena env;
  actors::detail::SystemCore core;
  std::unique_ptr<flow::graph> graph;
  FlowNodeSystem() {
    env.arena.execute([&] { graph = std::make_unique<flow::graph>(); });
    core.arena = &env.arena;
    core.graph = graph.get();
  }
  ~FlowNodeSystem() {
    env.arena.execute([&] { graph->wait_for_all(); });
  }
};

struct FlowPlayerRef;
using FlowPlayer = Player<FlowPlayerRef>;
struct FlowPlayerRef {
  FlowNodeCell<FlowPlayer>* cell = nullptr;
  void Send(Ball ball) const { FlowNodeCell<FlowPlayer>::Ref{cell}.Send(ball); }
};

void BM_FlowNodeMailboxHop(benchmark::State& state) {
  using P = FlowPlayer;
  using PlayerRef = FlowPlayerRef;
  FlowNodeSystem sys;
  Latch latch;
  PlayerRef peer_of_a, peer_of_b;
  std::unique_ptr<FlowNodeCell<P>> a, b;
  sys.env.arena.execute([&] {
    a = std::make_unique<FlowNodeCell<P>>(&sys.core, 1, &peer_of_a, &latch);
    b = std::make_unique<FlowNodeCell<P>>(&sys.core, 2, &peer_of_b, &latch);
  });
  peer_of_a.cell = b.get();
  peer_of_b.cell = a.get();
  for (auto _ : state) {
    latch.Reset();
    peer_of_b.Send(Ball{kHops});  // to a
    latch.Wait();
  }
  sys.env.arena.execute([&] { sys.graph->wait_for_all(); });
  state.SetItemsProcessed(state.iterations() * kHops);
}

void BM_FlowNodeMailboxFanIn(benchmark::State& state) {
  FlowNodeSystem sys;
  Latch latch;
  std::unique_ptr<FlowNodeCell<Counter>> sink;
  sys.env.arena.execute([&] { sink = std::make_unique<FlowNodeCell<Counter>>(&sys.core, 1, 2 * kPerProducer, &latch); });
  typename FlowNodeCell<Counter>::Ref ref{sink.get()};
  for (auto _ : state) {
    latch.Reset();
    std::thread p1([&] { for (long i = 0; i < kPerProducer; ++i) ref.Send(Tick{}); });
    std::thread p2([&] { for (long i = 0; i < kPerProducer; ++i) ref.Send(Tick{}); });
    p1.join();
    p2.join();
    latch.Wait();
  }
  sys.env.arena.execute([&] { sys.graph->wait_for_all(); });
  state.SetItemsProcessed(state.iterations() * 2 * kPerProducer);
}

double NsPer(const Results& r, const std::string& name) {
  auto it = r.find(name);
  return it == r.end() || it->second.rate <= 0 ? 0 : 1e9 / it->second.rate;
}
double Rate(const Results& r, const std::string& name) {
  auto it = r.find(name);
  return it == r.end() ? 0 : it->second.rate;
}

}  // namespace

void RegisterActorBenchmarks() {
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, void (*)(benchmark::State&)>>{
           {"BM_RawHop", BM_RawHop},
           {"BM_RawHopOneWorker", BM_RawHopOneWorker},
           {"BM_ActorHop", BM_ActorHop},
           {"BM_ActorHopWithoutTapHook", BM_ActorHopWithoutTapHook},
           {"BM_FlowNodeMailboxHop", BM_FlowNodeMailboxHop},
           {"BM_RawFanIn", BM_RawFanIn},
           {"BM_ActorFanIn", BM_ActorFanIn},
           {"BM_FlowNodeMailboxFanIn", BM_FlowNodeMailboxFanIn}}) {
    benchmark::RegisterBenchmark(name, fn)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
}

std::vector<Figure> ActorFigures(const Results& r) {
  const double raw_hop = NsPer(r, "BM_RawHop");
  const double hop = NsPer(r, "BM_ActorHop");
  const double flow_hop = NsPer(r, "BM_FlowNodeMailboxHop");
  constexpr double kCafPingPongNs = 350;  // the C++ Actor Framework on this machine, as given
  return {
      {"actor_hop", hop, "ns", raw_hop, "raw function_node ping-pong hop", "ratio <= 1.25"},
      {"actor_hop_vs_raw_best", hop, "ns", NsPer(r, "BM_RawHopOneWorker"),
       "raw ping-pong in a 1-worker arena (no stealing)", "ratio <= 1.25"},
      {"actor_hop_vs_caf", hop, "ns", kCafPingPongNs, "CAF ping-pong hop (given, 350 ns)", "ratio <= 0.333"},
      {"tap_hook_overhead", hop, "ns", NsPer(r, "BM_ActorHopWithoutTapHook"), "hop built without the tap hook",
       "ratio < 1.02"},
      {"fan_in", Rate(r, "BM_ActorFanIn"), "msg/s", Rate(r, "BM_RawFanIn"), "raw serial function_node, 2 producers",
       "ratio >= 1"},
      {"mailbox_flow_node_hop", flow_hop, "ns", raw_hop, "raw function_node ping-pong hop", "comparison"},
      {"mailbox_flow_node_fan_in", Rate(r, "BM_FlowNodeMailboxFanIn"), "msg/s", Rate(r, "BM_RawFanIn"),
       "raw serial function_node, 2 producers", "comparison"},
      {"mailbox_lockfree_vs_flow_node_hop", hop, "ns", flow_hop, "flow-node mailbox hop", "ratio < 1 keeps lockfree"},
  };
}

}  // namespace npuflow::bench
