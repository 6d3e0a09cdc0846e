// Internals of the actor runtime: an actor's cell (mailbox + identity + flow-graph node) and the
// system state cells share. Users include actors/system.h.
//
// Mailbox. Every (sender, receiver) pair has its own lane: an unbounded chain of Boost.Lockfree
// single-producer/single-consumer rings. A sender is an actor (it sends from inside its handler,
// one handler at a time, so it is a single producer) or a thread outside the system. One more
// lane, made on first use, is shared by every sender of SendInOrder / AskInOrder: its producers
// take a lock to push, so its order is the order in which they took it. A
// receiver-wide `pending_` counter counts queued messages; the send that moves it from 0 to 1
// owns the drain token and schedules the receiver. Whoever holds the token is the only one
// draining, which is what makes "one handler at a time" true. The drain returns the token by
// subtracting what it handled; if messages arrived meanwhile the counter stays positive and it
// keeps the token.
// A sender pushes, then counts, so a drain may handle a message before it is counted and the
// counter may dip below zero for a moment; the late increments bring it back, and the one that
// moves it from 0 to 1 schedules whatever is left, so nothing waits. While the tap has parked
// an actor, the counter carries kParkBias, so no send can take the token the timer holds; the
// parking pass settles its count before arming the timer, since the timer may fire at once.
//
// Scheduling. The receiver's drain runs as the body of its own tbb::flow::function_node. When a
// handler sends to an idle actor, that actor is not spawned but handed off: it runs on this
// thread right after the current drain (the flow graph's task bypass, one level up). A ping-pong
// between two actors then stays on one core with no task allocation; a chain of handoffs is cut
// after kMaxHandoffs and continues as a spawned task, so no actor starves the others. With one
// worker, the other actors a drain wakes queue behind the handoff too (LocalHandoffs).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <type_traits>
#include <typeindex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/lockfree/spsc_queue.hpp>
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>

#include "actors/future.h"
#include "actors/message.h"
#include "actors/tap.h"
#include "base/status.h"
#include "base/timer.h"
#include "base/unique_function.h"

namespace npuflow::actors {

class System;

// What a supervisor hears when a handler fails on a message nobody asked about (a Send), or
// when an asker already had its reply.
struct ActorFailure {
  ActorId actor;
  std::string actor_name;
  std::string kind;
  Status status;
};
using Supervisor = std::function<void(const ActorFailure&)>;

namespace detail {

class CellBase;

// State shared by all cells of one System.
struct SystemCore {
  bool deterministic = false;
  bool tap_hook = true;
  int batch = 64;
  // One worker (and not deterministic): every actor a drain wakes runs on this thread after it
  // (LocalHandoffs), as nobody else could run it in parallel.
  bool queue_handoffs = false;
  std::atomic<bool> stopping{false};
  std::atomic<DeliveryTap*> tap{nullptr};
  std::atomic<std::int64_t> external_posts{0};  // external senders between check and trigger
  std::atomic<std::uint64_t> failures{0};
  tbb::task_arena* arena = nullptr;
  tbb::flow::graph* graph = nullptr;
  Supervisor default_supervisor;

  // Deterministic mode: deliveries go through FIFOs run by one serial node. Messages sent from
  // inside the system are delivered first; a message from outside (a host thread) is taken only
  // when no inside delivery is pending, so the system runs to quiescence between outside inputs
  // and what it does is a function of the sequence of outside inputs, not of their timing.
  struct DetEntry {
    CellBase* cell = nullptr;
    bool external = false;          // the message is in the cell's external queue
    bool ordered = false;           // ... in its ordered queue (a SendInOrder; overrides external)
    UniqueFunction<void()> closure;  // set: run this in the cell instead of a message
    std::uint32_t gen = 0;           // the closure's: run only if the cell still has this generation
  };
  std::mutex det_mu;
  std::deque<DetEntry> det_internal;
  std::deque<DetEntry> det_external;
  bool det_scheduled = false;
  tbb::flow::function_node<tbb::flow::continue_msg, tbb::flow::continue_msg>* sequencer = nullptr;
  // Caller holds det_mu. Returns whether the sequencer must be triggered.
  bool DetEnqueue(DetEntry entry, bool from_outside);
  void DetRun();

  // Cells of retired actors, by actor type, for Spawn to reuse (System::Retire).
  mutable std::mutex free_mu;
  std::unordered_map<std::type_index, std::vector<CellBase*>> free_cells;
  std::atomic<std::size_t> retired_cells{0};  // cells with no actor: retired and not reused yet

  // Wall-clock resumption of cells parked by the tap, on the process's timer thread
  // (base/timer.h). timer_mu_ orders ArmTimer against StopTimer: no arm after the stop.
  void ArmTimer(CellBase* cell, std::chrono::nanoseconds delay);
  void StopTimer();

 private:
  std::mutex timer_mu_;
  bool timer_stop_ = false;
  DeadlineTimer timer_;
};

// Result of one drain pass.
struct PassResult {
  std::int64_t handled = 0;  // messages and closures taken off the mailbox (counted in pending_)
  bool parked = false;       // the tap postponed the head message: keep the token, stop draining
  bool resumed = false;      // this pass delivered the message an earlier pass parked
};

// A lane: one sender's FIFO into one receiver. Producer side: only the sender. Consumer side:
// only the receiver's token holder.
class LaneBase {
 public:
  virtual ~LaneBase() = default;
  LaneBase* next = nullptr;          // receiver's lane list; written before publication only
  std::atomic<bool> closed{false};   // the producing thread exited: unlink once empty
};

template <typename Env>
class Lane final : public LaneBase {
 public:
  // Slots per ring. A lane keeps one ring for as long as it lives, so this is what an idle lane
  // costs: a GPT-2 run has ~250 lanes, which held 2.4 MB with 256 slots and hold 0.3 MB with 32.
  // A burst longer than a ring chains another (one allocation per 32 messages, freed once drained).
  static constexpr std::size_t kSegment = 32;

  Lane() : head_(new Segment()), tail_(head_) {}
  ~Lane() override {
    while (head_) delete std::exchange(head_, head_->next.load(std::memory_order_relaxed));
  }

  void Push(Env&& env) {
    Slot slot{std::move(env)};
    if (tail_->ring.push(slot)) return;
    auto* fresh = new Segment();
    fresh->ring.push(slot);
    tail_->next.store(fresh, std::memory_order_release);
    tail_ = fresh;
  }

  // Pops one envelope into `out`. Returns false when the lane is empty.
  bool Pop(std::optional<Env>& out) {
    for (;;) {
      if (head_->ring.consume_one([&](Slot& s) { out.emplace(std::move(s.env)); })) return true;
      Segment* next = head_->next.load(std::memory_order_acquire);
      if (next == nullptr) return false;
      // The producer filled head_ before linking `next`: one more look drains what it left.
      if (head_->ring.consume_one([&](Slot& s) { out.emplace(std::move(s.env)); })) return true;
      delete std::exchange(head_, next);
    }
  }

  bool Empty() const {
    return !head_->ring.read_available() && head_->next.load(std::memory_order_acquire) == nullptr;
  }

 private:
  // spsc_queue copies in and out; a Slot moves on "copy" so envelopes with move-only or heavy
  // members are moved, never copied.
  struct Slot {
    Env env;
    explicit Slot(Env&& e) : env(std::move(e)) {}
    Slot() = default;
    Slot(const Slot& o) : env(std::move(const_cast<Slot&>(o).env)) {}
    Slot& operator=(const Slot& o) {
      env = std::move(const_cast<Slot&>(o).env);
      return *this;
    }
  };
  struct Segment {
    boost::lockfree::spsc_queue<Slot, boost::lockfree::capacity<kSegment>> ring;
    std::atomic<Segment*> next{nullptr};
  };
  Segment* head_;  // consumer
  Segment* tail_;  // producer
};

// The reply slot of an envelope: an owning reference to an Ask's shared state that fails the
// Ask if the envelope is destroyed before anyone answered (so an Ask never outlives its message
// unanswered, however the message was lost).
class ReplyRef {
 public:
  ReplyRef() = default;
  explicit ReplyRef(CoreRef core) : core_(std::move(core)) {}
  ReplyRef(ReplyRef&&) noexcept = default;
  ReplyRef& operator=(ReplyRef&& o) noexcept {
    if (this != &o) {
      FailIfPending();
      core_ = std::move(o.core_);
    }
    return *this;
  }
  ~ReplyRef() { FailIfPending(); }
  explicit operator bool() const { return static_cast<bool>(core_); }
  CoreBase* operator->() const { return core_.get(); }
  CoreBase* get() const { return core_.get(); }
  CoreRef Release() { return std::move(core_); }
  void reset() {
    FailIfPending();
    core_.reset();
  }

 private:
  void FailIfPending() {
    if (core_ && !core_->ready()) core_->TryFail(Status::Aborted("message dropped before it was handled"));
  }
  CoreRef core_;
};

// Lets continuations reach a cell only while it exists (Context::Then).
struct CellLink {
  std::recursive_mutex mu;
  CellBase* cell = nullptr;
};

// Per-thread state of the drain loop.
struct DrainThreadState {
  CellBase* current = nullptr;   // the actor whose handler runs on this thread
  CellBase* handoff = nullptr;   // an actor this drain woke, to run next on this thread
  bool in_drain = false;
};
DrainThreadState& ThisThread();

// Actors a drain woke beyond its one handoff, in a system with one worker: they run on this
// thread after the current chain (RunDrains), in the order they were woken, instead of as
// spawned flow-graph tasks (a task per hop is what a kernel's parts cost otherwise: a 24-block
// kernel is 24 parts). What is left when a chain ends is spawned, so nothing waits on a thread
// that goes idle. Shared by the drains nested on a thread.
struct LocalHandoffs {
  static constexpr std::uint32_t kCapacity = 256;
  CellBase* cells[kCapacity];
  std::uint32_t head = 0, tail = 0;
  bool empty() const { return head == tail; }
  bool full() const { return tail - head == kCapacity; }
  void Push(CellBase* cell) { cells[tail++ % kCapacity] = cell; }
  CellBase* Pop() { return empty() ? nullptr : cells[head++ % kCapacity]; }
};
LocalHandoffs& ThisThreadHandoffs();

// Lanes of a thread outside the system, keyed by receiver uid. Dropped (and marked closed) when
// the thread exits.
struct ExternalLanes {
  std::unordered_map<std::uint64_t, std::shared_ptr<LaneBase>> lanes;
  std::uint64_t last_uid = 0;
  LaneBase* last_lane = nullptr;
  ~ExternalLanes();
};
ExternalLanes& ThisThreadLanes();
// Bumped whenever a thread with lanes exits; receivers reap closed lanes when it moves.
std::atomic<std::uint64_t>& ClosedLaneEpoch();

std::uint64_t NextCellUid();

class CellBase {
 public:
  static constexpr int kMaxHandoffs = 128;
  static constexpr std::int64_t kParkBias = std::int64_t{1} << 40;

  CellBase(SystemCore* core, ActorId id, std::string name, Supervisor supervisor);
  const std::shared_ptr<CellLink>& link() const { return link_; }
  virtual ~CellBase();
  CellBase(const CellBase&) = delete;
  CellBase& operator=(const CellBase&) = delete;

  ActorId id() const { return id_; }
  // The actor's name, for its own handlers (and its drain): the token holder's view.
  const std::string& name() const { return name_; }
  // The name from any thread: a Spawn that reuses the cell may be renaming it.
  std::string NameCopy() const {
    std::lock_guard<std::mutex> lock(name_mu_);
    return name_;
  }
  SystemCore* core() const { return core_; }
  std::uint64_t handled() const { return handled_.load(std::memory_order_relaxed); }

  // Runs `fn` inside this actor, as if it were a message (one handler at a time). Used for
  // continuations (Context::Then). Dropped (not run) after shutdown, or if the actor is retired
  // before it runs.
  void PostClosure(UniqueFunction<void()> fn);

  // The actor's generation: bumped when it is retired. Addresses, messages and closures carry the
  // generation they were made for; one that no longer matches is dropped, never delivered to the
  // actor that reuses the cell (System::Retire).
  std::uint32_t gen() const { return gen_.load(std::memory_order_acquire); }
  // Retires the actor of generation `gen` (a no-op if it is not the current one any more): inside
  // the actor, as a closure, the generation moves on, pending continuations are cut off, the
  // actor object is destroyed and, unless the system is deterministic, the cell is offered for
  // reuse by a Spawn of the same actor type.
  void Retire(std::uint32_t gen);
  // Spawn's reuse of a retired cell: true if no drain holds it (the caller then holds its token
  // and must call EndReuse). A retired cell has no actor, so only stray messages of an old
  // generation can wake it; they are dropped.
  bool BeginReuse() {
    std::int64_t idle = 0;
    return pending_.compare_exchange_strong(idle, 1, std::memory_order_acq_rel);
  }
  void EndReuse() {
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) - 1 > 0) Spawn();  // strays arrived meanwhile
  }

  // Shutdown, once no drain runs: fail every queued ask, drop every queued message.
  virtual void DropAll(const Status& why) = 0;
  // Shutdown, after DropAll: destroy the actor object (its held Repliers fail their futures).
  virtual void DestroyActor() = 0;
  // Deterministic mode: deliver the head message of the entry's queue, or run its closure.
  virtual void DeliverOneDeterministic(SystemCore::DetEntry& entry) = 0;

  // The token holder's entry point: drains this actor, then those it handed off to.
  static void RunDrains(CellBase* cell);
  // Schedules this actor's drain (the caller owns the token): a handoff when the caller is a
  // drain of the same system on this thread, else a spawn in this system's graph.
  void Schedule();
  // Whether the calling thread is running a handler (or continuation) of this cell's system.
  bool PostingFromInside() const {
    const DrainThreadState& ts = ThisThread();
    return ts.in_drain && ts.current != nullptr && ts.current->core_ == core_;
  }
  // Asks the tap about a delivery; a throwing tap is reported and means "no delay".
  std::chrono::nanoseconds AskTap(DeliveryTap* tap, const Delivery& delivery);
  void Spawn();  // through the flow-graph node, never a handoff

  void ReportFailure(std::string_view kind, Status status);

 protected:
  // Runs queued closures; returns how many ran (or were dropped as of an older generation).
  std::int64_t RunClosures();
  void RunClosure(UniqueFunction<void()>& fn, std::uint32_t gen);
  bool TakeToken(std::int64_t count) {
    return pending_.fetch_add(count, std::memory_order_acq_rel) == 0;
  }

  // Read by every send and drain pass: these six share the first cache line (48 bytes with the
  // vtable pointer); pending_, which every sender writes, starts a line of its own further on.
  SystemCore* const core_;
  const std::uint64_t uid_;
  const ActorId id_;
  std::atomic<std::uint32_t> gen_{0};
  PassResult (*pass_fn_)(CellBase*) = nullptr;  // the typed drain pass: one indirect call per pass
  std::unique_ptr<tbb::flow::function_node<tbb::flow::continue_msg, tbb::flow::continue_msg>> node_;
  std::string name_;  // changes only when a Spawn reuses the cell (idle, its token held; see name_mu_)
  Supervisor supervisor_;
  std::type_index type_ = std::type_index(typeid(void));  // the actor's type, the key of its free list

  alignas(64) std::atomic<std::int64_t> pending_{0};
  std::atomic<std::uint64_t> handled_{0};  // single writer (the token holder)

  std::mutex closure_mu_;
  std::deque<std::pair<UniqueFunction<void()>, std::uint32_t>> closures_;  // with their generation
  std::atomic<std::int64_t> closure_count_{0};

  // Lanes from this actor to others (used only by this actor's token holder).
  std::shared_ptr<CellLink> link_ = std::make_shared<CellLink>();
  std::unordered_map<std::uint64_t, LaneBase*> out_lanes_;
  // In front of out_lanes_: the lanes last used, direct-mapped by the receiver's uid (an actor
  // that sends to a few others in turn, a unit to its stream and to the next parts' units, finds
  // each without a hash-map lookup on a line a kernel's data pushed out of the caches).
  // A slot is empty while its uid is 0: NextCellUid never gives 0.
  static constexpr std::size_t kOutLaneSlots = 8;
  std::array<std::uint64_t, kOutLaneSlots> out_slot_uid_{};
  std::array<LaneBase*, kOutLaneSlots> out_slot_lane_{};
  mutable std::mutex name_mu_;  // name_ is written under it (reuse) and read under it off the token

  template <typename>
  friend class Cell;
  template <typename>
  friend class CellImpl;
  friend struct SystemCore;
};

}  // namespace detail
}  // namespace npuflow::actors
