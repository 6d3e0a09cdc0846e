// Actor runtime benchmarks: the hop (one-way, ping-pong between two actors), fan-in (2 producer
// threads -> 1 actor), a ring with one token per actor, a fan-out/fan-in of real work, and the
// cost of the delivery-tap hook, each against peers run in the same process on 2 workers:
//   - raw: two serial tbb::flow::function_nodes ping-ponging via try_put (or 2 threads putting
//     into one), in an arena set up exactly like actors::System's; for the hop also the raw side
//     with the same one-thread handoff (a 1-worker arena; lightweight nodes with task bypass);
//   - CAF: the C++ Actor Framework 0.17 (Debian's libcaf-dev), event-based actors with
//     caf::behavior and its work-stealing scheduler on 2 threads, same messages and counts;
//   - flow-node mailbox: the same actors, Envelope, Context and handler path as the runtime,
//     but buffered by the flow-graph node itself instead of the runtime's Boost.Lockfree lanes.
//     This is the mailbox design the runtime did not keep; it stays here so the choice can be
//     re-measured.
#include "benchmarks/actors_bench.h"
#include "benchmarks/model_actor_bench.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <variant>
#include <vector>

#include <caf/all.hpp>

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

// Raw with the runtime's handoff advantage: lightweight serial nodes. A lightweight node runs
// its body in the thread that puts to it when it is free, so b's body runs inside a's, and a's
// next message (queued while a was busy) comes back as the bypass task oneTBB runs next on the
// same thread: a ping-pong on one core with no task spawned per hop, which is what the
// runtime's handoff does. The first put is made from a worker (arena.enqueue) so the host
// thread never runs a body, as with the actors.
void BM_RawHopBypass(benchmark::State& state) {
  RawArena env;
  Latch latch;
  using Node = flow::function_node<long, flow::continue_msg, flow::queueing_lightweight>;
  std::unique_ptr<flow::graph> g;
  std::unique_ptr<Node> a, b;
  env.arena.execute([&] {
    g = std::make_unique<flow::graph>();
    a = std::make_unique<Node>(*g, flow::serial, [&](long left) {
      if (left == 0) latch.Open(); else b->try_put(left - 1);
      return flow::continue_msg();
    });
    b = std::make_unique<Node>(*g, flow::serial, [&](long left) {
      if (left == 0) latch.Open(); else a->try_put(left - 1);
      return flow::continue_msg();
    });
  });
  for (auto _ : state) {
    latch.Reset();
    env.arena.enqueue([&] { a->try_put(kHops); });
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
          Env env{std::move(owned.msg), owned.sender, 0, actors::detail::ReplyRef(std::move(owned.reply))};
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
    if (actors::DeliveryTap* tap = this->core_->tap.load(std::memory_order_relaxed); tap && !env.tapped()) {
      env.MarkTapped();
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

// ---------------------------------------------------------------------------------------------
// Workloads where a handoff cannot help: many messages in flight, so both workers always have
// work and keeping one thread on one chain of sends saves nothing.
//
// Ring: kRingSize actors in a circle, one token per actor, each token passed on
// kRingHopsPerToken times; a token at 0 arrives at the finish line. Throughput in hops/s.
constexpr int kRingSize = 64;
constexpr long kRingHopsPerToken = 4'000;
// Fan-out/fan-in: a coordinator deals kItems work messages round-robin to kFanWorkers workers;
// each computes Work() and sends the result back; the coordinator counts them. Items/s.
constexpr int kFanWorkers = 4;
constexpr long kItems = 20'000;
constexpr int kWorkRounds = 400;  // ~1-2 us of Work() per item

// The same work for every runtime: a dependent xorshift-multiply chain the compiler cannot fold.
[[gnu::noinline]] long Work(long x) {
  std::uint64_t h = static_cast<std::uint64_t>(x) | 1;
  for (int i = 0; i < kWorkRounds; ++i) {
    h ^= h << 13;
    h ^= h >> 7;
    h ^= h << 17;
    h *= 0x9E3779B97F4A7C15ull;
  }
  return static_cast<long>(h & 0xffff);
}

// Where ring tokens arrive: the last of `tokens` opens the latch.
struct FinishLine {
  std::atomic<int> left{0};
  Latch latch;
  void Reset(int tokens) {
    left.store(tokens, std::memory_order_relaxed);
    latch.Reset();
  }
  void Arrive() {
    if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) latch.Open();
  }
};

// The coordinator's tally: counts results, opens the latch at the last one.
struct Tally {
  long expected = kItems;
  long got = 0;
  long sum = 0;
  Latch* latch;
  void Add(long v) {
    sum += v;
    if (++got == expected) {
      got = 0;
      benchmark::DoNotOptimize(sum);
      latch->Open();
    }
  }
};

// --- raw oneTBB: serial function_nodes, try_put between them (a task per message).
void BM_RawRing(benchmark::State& state) {
  RawArena env;
  FinishLine finish;
  using Node = flow::function_node<long, flow::continue_msg, flow::queueing>;
  std::unique_ptr<flow::graph> g;
  std::vector<std::unique_ptr<Node>> ring(kRingSize);
  env.arena.execute([&] {
    g = std::make_unique<flow::graph>();
    for (int i = 0; i < kRingSize; ++i) {
      ring[i] = std::make_unique<Node>(*g, flow::serial, [&, i](long left) {
        if (left == 0) finish.Arrive(); else ring[(i + 1) % kRingSize]->try_put(left - 1);
        return flow::continue_msg();
      });
    }
  });
  for (auto _ : state) {
    finish.Reset(kRingSize);
    for (auto& node : ring) node->try_put(kRingHopsPerToken);
    finish.latch.Wait();
  }
  env.arena.execute([&] {
    g->wait_for_all();
    ring.clear();
    g.reset();
  });
  state.SetItemsProcessed(state.iterations() * kRingSize * kRingHopsPerToken);
}

void BM_RawFanOutFanIn(benchmark::State& state) {
  RawArena env;
  Latch latch;
  Tally tally{.latch = &latch};
  using Node = flow::function_node<long, flow::continue_msg, flow::queueing>;
  std::unique_ptr<flow::graph> g;
  std::unique_ptr<Node> start, collect;
  std::vector<std::unique_ptr<Node>> workers(kFanWorkers);
  env.arena.execute([&] {
    g = std::make_unique<flow::graph>();
    collect = std::make_unique<Node>(*g, flow::serial, [&](long v) {
      tally.Add(v);
      return flow::continue_msg();
    });
    for (auto& w : workers) {
      w = std::make_unique<Node>(*g, flow::serial, [&](long x) {
        collect->try_put(Work(x));
        return flow::continue_msg();
      });
    }
    start = std::make_unique<Node>(*g, flow::serial, [&](long items) {
      for (long i = 0; i < items; ++i) workers[i % kFanWorkers]->try_put(i);
      return flow::continue_msg();
    });
  });
  for (auto _ : state) {
    latch.Reset();
    start->try_put(kItems);
    latch.Wait();
  }
  env.arena.execute([&] {
    g->wait_for_all();
    start.reset();
    workers.clear();
    collect.reset();
    g.reset();
  });
  state.SetItemsProcessed(state.iterations() * kItems);
}

// --- npuflow actors.
struct Token {
  static constexpr std::string_view kKind = "Token";
  long left;
};
class RingMember {
 public:
  using Message = std::variant<Token>;
  RingMember(const actors::Address<Message>* next, FinishLine* finish) : next_(next), finish_(finish) {}
  void Receive(Message& msg, Context<Message>&) {
    const long left = std::get<Token>(msg).left;
    if (left == 0) finish_->Arrive(); else next_->Send(Token{left - 1});
  }

 private:
  const actors::Address<Message>* next_;
  FinishLine* finish_;
};

void BM_ActorRing(benchmark::State& state) {
  actors::System system({.workers = kWorkers});
  FinishLine finish;
  std::vector<actors::Address<RingMember::Message>> ring(kRingSize);
  for (int i = 0; i < kRingSize; ++i) ring[i] = system.Spawn<RingMember>("ring", &ring[(i + 1) % kRingSize], &finish);
  for (auto _ : state) {
    finish.Reset(kRingSize);
    for (auto& member : ring) member.Send(Token{kRingHopsPerToken});
    finish.latch.Wait();
  }
  state.SetItemsProcessed(state.iterations() * kRingSize * kRingHopsPerToken);
}

struct Start {
  static constexpr std::string_view kKind = "Start";
  long items;
};
struct Item {
  static constexpr std::string_view kKind = "Item";
  long value;
};
struct Result {
  static constexpr std::string_view kKind = "Result";
  long value;
};
class Coordinator {
 public:
  using Message = std::variant<Start, Result>;
  Coordinator(const std::vector<actors::Address<std::variant<Item>>>* workers, Latch* latch)
      : workers_(workers), tally_{.latch = latch} {}
  void Receive(Message& msg, Context<Message>&) {
    if (auto* result = std::get_if<Result>(&msg)) return tally_.Add(result->value);
    const long items = std::get<Start>(msg).items;
    for (long i = 0; i < items; ++i) (*workers_)[i % kFanWorkers].Send(Item{i});
  }

 private:
  const std::vector<actors::Address<std::variant<Item>>>* workers_;
  Tally tally_;
};
class FanWorker {
 public:
  using Message = std::variant<Item>;
  explicit FanWorker(const actors::Address<Coordinator::Message>* coordinator) : coordinator_(coordinator) {}
  void Receive(Message& msg, Context<Message>&) { coordinator_->Send(Result{Work(std::get<Item>(msg).value)}); }

 private:
  const actors::Address<Coordinator::Message>* coordinator_;
};

void BM_ActorFanOutFanIn(benchmark::State& state) {
  actors::System system({.workers = kWorkers});
  Latch latch;
  std::vector<actors::Address<FanWorker::Message>> workers(kFanWorkers);
  actors::Address<Coordinator::Message> coordinator = system.Spawn<Coordinator>("coordinator", &workers, &latch);
  for (auto& w : workers) w = system.Spawn<FanWorker>("worker", &coordinator);
  for (auto _ : state) {
    latch.Reset();
    coordinator.Send(Start{kItems});
    latch.Wait();
  }
  state.SetItemsProcessed(state.iterations() * kItems);
}

// --- CAF 0.17: event-based actors (caf::behavior), its work-stealing scheduler on kWorkers
// threads. Host threads use anon_send and block on the same Latch as above; payloads are the
// same longs (the fan-in's tick is an atom, the runtime's an empty struct).
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using start_atom = caf::atom_constant<caf::atom("start")>;

struct CafSystem {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  std::vector<caf::actor> spawned;  // terminated at the end, so the system can shut down
  CafSystem() {
    cfg.set("scheduler.max-threads", kWorkers);
    system = std::make_unique<caf::actor_system>(cfg);
  }
  ~CafSystem() {
    for (auto& a : spawned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    spawned.clear();
    system.reset();
  }
  template <typename F, typename... Args>
  caf::actor Spawn(F fn, Args... args) {
    spawned.push_back(system->spawn(fn, args...));
    return spawned.back();
  }
};

caf::behavior CafPlayer(caf::event_based_actor* self, const caf::actor* peer, Latch* latch) {
  return {[=](long left) {
    if (left == 0) latch->Open(); else self->send(*peer, left - 1);
  }};
}

void BM_CafHop(benchmark::State& state) {
  CafSystem caf;
  Latch latch;
  caf::actor peer_of_a, peer_of_b;
  caf::actor a = caf.Spawn(CafPlayer, &peer_of_a, &latch);
  caf::actor b = caf.Spawn(CafPlayer, &peer_of_b, &latch);
  peer_of_a = b;
  peer_of_b = a;
  for (auto _ : state) {
    latch.Reset();
    caf::anon_send(a, long{kHops});
    latch.Wait();
  }
  peer_of_a = peer_of_b = nullptr;
  state.SetItemsProcessed(state.iterations() * kHops);
}

caf::behavior CafCounter(caf::event_based_actor*, long target, Latch* latch) {
  auto count = std::make_shared<long>(0);
  return {[=](tick_atom) {
    if (++*count == target) {
      *count = 0;
      latch->Open();
    }
  }};
}

void BM_CafFanIn(benchmark::State& state) {
  CafSystem caf;
  Latch latch;
  caf::actor sink = caf.Spawn(CafCounter, 2 * kPerProducer, &latch);
  for (auto _ : state) {
    latch.Reset();
    std::thread p1([&] { for (long i = 0; i < kPerProducer; ++i) caf::anon_send(sink, tick_atom::value); });
    std::thread p2([&] { for (long i = 0; i < kPerProducer; ++i) caf::anon_send(sink, tick_atom::value); });
    p1.join();
    p2.join();
    latch.Wait();
  }
  state.SetItemsProcessed(state.iterations() * 2 * kPerProducer);
}

caf::behavior CafRingMember(caf::event_based_actor* self, const caf::actor* next, FinishLine* finish) {
  return {[=](long left) {
    if (left == 0) finish->Arrive(); else self->send(*next, left - 1);
  }};
}

void BM_CafRing(benchmark::State& state) {
  CafSystem caf;
  FinishLine finish;
  std::vector<caf::actor> ring(kRingSize);
  for (int i = 0; i < kRingSize; ++i) ring[i] = caf.Spawn(CafRingMember, &ring[(i + 1) % kRingSize], &finish);
  for (auto _ : state) {
    finish.Reset(kRingSize);
    for (auto& member : ring) caf::anon_send(member, long{kRingHopsPerToken});
    finish.latch.Wait();
  }
  ring.clear();
  state.SetItemsProcessed(state.iterations() * kRingSize * kRingHopsPerToken);
}

caf::behavior CafFanWorker(caf::event_based_actor* self, const caf::actor* coordinator) {
  return {[=](long x) { self->send(*coordinator, Work(x)); }};
}

caf::behavior CafCoordinator(caf::event_based_actor* self, const std::vector<caf::actor>* workers, Latch* latch) {
  auto tally = std::make_shared<Tally>(Tally{.latch = latch});
  return {
      [=](start_atom, long items) {
        for (long i = 0; i < items; ++i) self->send((*workers)[i % kFanWorkers], i);
      },
      [=](long v) { tally->Add(v); },
  };
}

void BM_CafFanOutFanIn(benchmark::State& state) {
  CafSystem caf;
  Latch latch;
  std::vector<caf::actor> workers(kFanWorkers);
  caf::actor coordinator = caf.Spawn(CafCoordinator, &workers, &latch);
  for (auto& w : workers) w = caf.Spawn(CafFanWorker, &coordinator);
  for (auto _ : state) {
    latch.Reset();
    caf::anon_send(coordinator, start_atom::value, long{kItems});
    latch.Wait();
  }
  workers.clear();
  coordinator = nullptr;
  state.SetItemsProcessed(state.iterations() * kItems);
}


}  // namespace

void RegisterActorBenchmarks() {
  for (auto [name, fn] : std::initializer_list<std::pair<const char*, void (*)(benchmark::State&)>>{
           {"BM_RawHop", BM_RawHop},
           {"BM_RawHopOneWorker", BM_RawHopOneWorker},
           {"BM_RawHopBypass", BM_RawHopBypass},
           {"BM_CafHop", BM_CafHop},
           {"BM_ActorHop", BM_ActorHop},
           {"BM_ActorHopWithoutTapHook", BM_ActorHopWithoutTapHook},
           {"BM_FlowNodeMailboxHop", BM_FlowNodeMailboxHop},
           {"BM_RawFanIn", BM_RawFanIn},
           {"BM_CafFanIn", BM_CafFanIn},
           {"BM_ActorFanIn", BM_ActorFanIn},
           {"BM_FlowNodeMailboxFanIn", BM_FlowNodeMailboxFanIn},
           {"BM_RawRing", BM_RawRing},
           {"BM_CafRing", BM_CafRing},
           {"BM_ActorRing", BM_ActorRing},
           {"BM_RawFanOutFanIn", BM_RawFanOutFanIn},
           {"BM_CafFanOutFanIn", BM_CafFanOutFanIn},
           {"BM_ActorFanOutFanIn", BM_ActorFanOutFanIn}}) {
    benchmark::RegisterBenchmark(name, fn)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  RegisterModelActorBenchmarks();
}

std::vector<Figure> ActorFigures(const Results& r) {
  const double raw_hop = NsPer(r, "BM_RawHop");
  const double hop = NsPer(r, "BM_ActorHop");
  const double flow_hop = NsPer(r, "BM_FlowNodeMailboxHop");
  const std::string ring = "ring of " + std::to_string(kRingSize) + " actors, a token each";
  const std::string fan = std::to_string(kItems) + " items over " + std::to_string(kFanWorkers) + " workers";
  std::vector<Figure> figures = {
      {"actor_hop", hop, "ns", raw_hop, "raw function_node ping-pong hop", "ratio <= 1.25"},
      {"actor_hop_vs_raw_best", hop, "ns", NsPer(r, "BM_RawHopOneWorker"),
       "raw ping-pong in a 1-worker arena (no stealing)", "ratio <= 1.25"},
      {"actor_hop_vs_raw_bypass", hop, "ns", NsPer(r, "BM_RawHopBypass"),
       "raw ping-pong, lightweight nodes (task bypass, one thread)", "ratio <= 1"},
      {"actor_hop_vs_caf", hop, "ns", NsPer(r, "BM_CafHop"), "CAF 0.17 ping-pong hop, 2 threads", "ratio <= 1"},
      {"tap_hook_overhead", hop, "ns", NsPer(r, "BM_ActorHopWithoutTapHook"), "hop built without the tap hook",
       "ratio < 1.02"},
      {"fan_in", Rate(r, "BM_ActorFanIn"), "msg/s", Rate(r, "BM_RawFanIn"), "raw serial function_node, 2 producers",
       "ratio >= 1"},
      {"fan_in_vs_caf", Rate(r, "BM_ActorFanIn"), "msg/s", Rate(r, "BM_CafFanIn"), "CAF 0.17 actor, 2 producers",
       "ratio >= 1"},
      {"ring_vs_caf", Rate(r, "BM_ActorRing"), "msg/s", Rate(r, "BM_CafRing"), "CAF 0.17 " + ring, "ratio >= 1"},
      {"ring_vs_raw", Rate(r, "BM_ActorRing"), "msg/s", Rate(r, "BM_RawRing"), "raw function_node " + ring,
       "ratio >= 1"},
      {"fanout_fanin_vs_caf", Rate(r, "BM_ActorFanOutFanIn"), "items/s", Rate(r, "BM_CafFanOutFanIn"),
       "CAF 0.17, " + fan, "ratio >= 1"},
      {"fanout_fanin_vs_raw", Rate(r, "BM_ActorFanOutFanIn"), "items/s", Rate(r, "BM_RawFanOutFanIn"),
       "raw function_nodes, " + fan, "ratio >= 1"},
      {"mailbox_flow_node_hop", flow_hop, "ns", raw_hop, "raw function_node ping-pong hop", "comparison"},
      {"mailbox_flow_node_fan_in", Rate(r, "BM_FlowNodeMailboxFanIn"), "msg/s", Rate(r, "BM_RawFanIn"),
       "raw serial function_node, 2 producers", "comparison"},
      {"mailbox_lockfree_vs_flow_node_hop", hop, "ns", flow_hop, "flow-node mailbox hop", "ratio < 1 keeps lockfree"},
  };
  for (Figure& f : ModelActorFigures(r)) figures.push_back(std::move(f));
  return figures;
}

}  // namespace npuflow::bench
