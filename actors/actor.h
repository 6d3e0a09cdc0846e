// Actors: typed addresses, Send / Ask, the handler's Context, and deferred replies.
//
// An actor is any class with a `Message` type and a handler:
//
//   class Counter {
//    public:
//     struct Add { int n; };
//     struct Get { static constexpr std::string_view kKind = "Get"; };
//     using Message = std::variant<Add, Get>;
//     Status Receive(Message& msg, actors::Context<Message>& ctx);   // or: void Receive(...)
//   };
//
//   auto counter = system.Spawn<Counter>("counter");
//   counter.Send(Counter::Add{2});
//   StatusOr<int> n = counter.Ask<int>(Counter::Get{}).Get();
//
// Guarantees: messages from one sender to one receiver are handled in the order sent (a sender is
// an actor, or a thread outside the system); messages from different senders have no order, even
// when one send happens before the other, so a message that must follow another sender's
// messages is sent after their replies (or after System::WaitIdle), or every sender uses
// SendInOrder / AskInOrder, whose messages share one lane and follow happens-before; an actor
// handles one message at a time; an error returned or thrown by a handler goes to the asker (or,
// for a Send, to the actor's supervisor) and the actor keeps serving; every Ask's future
// completes, at the latest when the system shuts down.
#pragma once

#include <optional>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "actors/cell.h"

namespace npuflow::actors {

template <typename R>
using ReplyType = std::conditional_t<std::is_void_v<R>, Status, StatusOr<R>>;
template <typename R>
class Replier;

// From inside a handler: an idle actor that a send of this handler woke, and that would run next on
// this thread once this actor's drain ends (a handoff), is scheduled now instead, where another
// worker may take it. For a handler whose actor goes on with long work of its own (a message it
// sent itself, drained in the same pass), so the woken actor runs beside that work, not after it.
// With one worker (the woken actors queue on this thread anyway) and outside a handler, nothing.
void SpawnHandoffNow();

namespace detail {

template <typename Msg>
struct Envelope {
  Msg msg;
  ActorId sender = kExternal;
  // The receiver's generation it was sent to (dropped if retired since), and in the top bit
  // whether it was already offered to the delivery tap: one word, so that an envelope is no
  // larger than before generations (a fan-in of small messages lost 12% to 8 more bytes).
  std::uint32_t gen_tapped = 0;
  ReplyRef reply;  // null for Send; fails the Ask if the envelope dies unanswered

  static constexpr std::uint32_t kTappedBit = 1u << 31;
  std::uint32_t gen() const { return gen_tapped & ~kTappedBit; }
  bool tapped() const { return (gen_tapped & kTappedBit) != 0; }
  void MarkTapped() { gen_tapped |= kTappedBit; }
};

// The part of a cell that depends on the message type: the mailbox and Post.
template <typename Msg>
class Cell : public CellBase {
 public:
  using Env = Envelope<Msg>;
  using CellBase::CellBase;

  // From any thread, inside or outside the system. kOrdered: into the cell's one ordered lane,
  // which every sender shares (Address::SendInOrder); a template argument, so a plain send's code
  // has no trace of it.
  template <bool kOrdered = false>
  void Post(Msg&& msg, CoreRef reply, std::uint32_t gen) {
    constexpr bool ordered = kOrdered;
    DrainThreadState& ts = ThisThread();
    // From another system's handler counts as outside: this system's shutdown must wait for it.
    const bool external = !PostingFromInside();
    if (external) core_->external_posts.fetch_add(1, std::memory_order_seq_cst);
    if (core_->stopping.load(std::memory_order_seq_cst)) {
      if (reply) {
        reply->TryFail(Status::Aborted("actor system is shut down: {} to actor '{}' not sent",
                                       KindOf(msg), NameCopy()));
      }
    } else {
      const ActorId sender = !external ? ts.current->id() : kExternal;
      if (core_->deterministic) {
        bool trigger;
        {
          std::lock_guard<std::mutex> lock(core_->det_mu);
          (ordered ? cold_->det_ordered : external ? cold_->det_external : cold_->det_queue)
              .push_back(Env{std::move(msg), sender, gen, ReplyRef(std::move(reply))});
          SystemCore::DetEntry entry;
          entry.cell = this;
          entry.external = external;
          entry.ordered = ordered;
          trigger = core_->DetEnqueue(std::move(entry), external);
        }
        if (trigger) core_->sequencer->try_put(tbb::flow::continue_msg());
      } else {
        if constexpr (kOrdered) {
          PushOrdered(Env{std::move(msg), sender, gen, ReplyRef(std::move(reply))});
        } else {
          static_cast<Lane<Env>*>(LaneFrom(ts))->Push(Env{std::move(msg), sender, gen, ReplyRef(std::move(reply))});
        }
        if (TakeToken(1)) Schedule();
      }
    }
    if (external) core_->external_posts.fetch_sub(1, std::memory_order_seq_cst);
  }

 protected:
  // Fails every queued ask with `why` and drops the rest. Returns how many were taken off.
  std::int64_t DropQueued(const Status& why) {
    std::int64_t dropped = 0;
    auto drop = [&](Env& env) {
      if (env.reply) env.reply->TryFail(why.WithContext(fmt::format("{} to actor '{}'", KindOf(env.msg), name_)));
      ++dropped;
    };
    if (held_) {
      drop(*held_);
      held_.reset();
    }
    std::optional<Env> env;
    for (LaneBase* lane = lanes_head_.load(std::memory_order_acquire); lane; lane = lane->next) {
      while (static_cast<Lane<Env>*>(lane)->Pop(env)) drop(*env);
    }
    {
      std::lock_guard<std::mutex> lock(core_->det_mu);
      for (Env& e : cold_->det_queue) drop(e);
      for (Env& e : cold_->det_external) drop(e);
      for (Env& e : cold_->det_ordered) drop(e);
      cold_->det_queue.clear();
      cold_->det_external.clear();
      cold_->det_ordered.clear();
    }
    std::lock_guard<std::mutex> lock(closure_mu_);
    dropped += static_cast<std::int64_t>(closures_.size());
    closure_count_.fetch_sub(static_cast<std::int64_t>(closures_.size()), std::memory_order_relaxed);
    closures_.clear();
    return dropped;
  }

  // Into the lane every SendInOrder shares. Out of line, so Post's common path stays small enough
  // to be inlined into the handlers that send (a ring of actors was 14% slower when it was not).
  [[gnu::noinline]] void PushOrdered(Env&& env) {
    std::lock_guard<std::mutex> lock(cold_->ordered_mu);
    Lane<Env>*& lane = cold_->ordered_lane;
    if (lane == nullptr) lane = static_cast<Lane<Env>*>(AddLane(std::make_shared<Lane<Env>>()));
    lane->Push(std::move(env));
  }

  // The lane from the current sender (an actor, or this thread) to this cell.
  LaneBase* LaneFrom(DrainThreadState& ts) {
    if (CellBase* s = ts.current) {
      const std::size_t k = uid_ % CellBase::kOutLaneSlots;
      if (s->out_slot_uid_[k] == uid_) return s->out_slot_lane_[k];
      LaneBase*& slot = s->out_lanes_[uid_];
      if (slot == nullptr) slot = AddLane(std::make_shared<Lane<Env>>());
      s->out_slot_uid_[k] = uid_;
      return s->out_slot_lane_[k] = slot;
    }
    ExternalLanes& ext = ThisThreadLanes();
    if (ext.last_uid == uid_) return ext.last_lane;
    std::shared_ptr<LaneBase>& slot = ext.lanes[uid_];
    if (!slot) {
      slot = std::make_shared<Lane<Env>>();
      AddLane(slot);
    }
    ext.last_uid = uid_;
    return ext.last_lane = slot.get();
  }

  LaneBase* AddLane(std::shared_ptr<LaneBase> lane) {
    LaneBase* raw = lane.get();
    {
      std::lock_guard<std::mutex> lock(cold_->lanes_mu);
      cold_->owned_lanes.push_back(std::move(lane));
    }
    LaneBase* head = lanes_head_.load(std::memory_order_relaxed);
    do {
      raw->next = head;
    } while (!lanes_head_.compare_exchange_weak(head, raw, std::memory_order_release,
                                                std::memory_order_relaxed));
    return raw;
  }

  // Unlinks lanes whose producing thread exited and that are empty. Consumer only; never the
  // head, which producers may be replacing.
  void ReapClosedLanes() {
    LaneBase* prev = lanes_head_.load(std::memory_order_acquire);
    if (prev == nullptr) return;
    for (LaneBase* lane = prev->next; lane != nullptr;) {
      LaneBase* next = lane->next;
      if (lane->closed.load(std::memory_order_acquire) &&
          static_cast<Lane<Env>*>(lane)->Empty()) {
        prev->next = next;
        std::lock_guard<std::mutex> lock(cold_->lanes_mu);
        std::vector<std::shared_ptr<LaneBase>>& owned = cold_->owned_lanes;
        for (auto it = owned.begin(); it != owned.end(); ++it) {
          if (it->get() == lane) {
            owned.erase(it);
            break;
          }
        }
      } else {
        prev = lane;
      }
      lane = next;
    }
  }

  // What every drain pass reads comes first, so that with the actor pointer of CellImpl right
  // after it a pass touches few cache lines; the rest is in Cold.
  std::atomic<LaneBase*> lanes_head_{nullptr};
  std::optional<Env> held_;  // the head message the tap postponed
  struct Cold {
    std::mutex lanes_mu;
    std::vector<std::shared_ptr<LaneBase>> owned_lanes;
    std::deque<Env> det_queue;     // deterministic mode: messages from actors (guarded by det_mu)
    std::deque<Env> det_external;  // deterministic mode: messages from outside (guarded by det_mu)
    std::deque<Env> det_ordered;   // deterministic mode: ordered messages, any sender (guarded by det_mu)
    // The lane every SendInOrder shares: its producers take ordered_mu (the lane itself is a
    // single-producer ring chain), so its order is the order they took it. Made by the first
    // one; never reaped.
    std::mutex ordered_mu;
    Lane<Env>* ordered_lane = nullptr;
  };
  const std::unique_ptr<Cold> cold_ = std::make_unique<Cold>();
};

template <typename A>
class CellImpl;

// Lets an alternative mailbox (the benchmark's flow-node-buffered cell) build a Context the
// way CellImpl does, so the two mailboxes are compared with everything else equal.
struct ContextAccess;

}  // namespace detail

template <typename Msg>
class Context;

// A typed, copyable handle to an actor. Valid while its System lives.
template <typename Msg>
class Address {
 public:
  Address() = default;

  bool valid() const { return cell_ != nullptr; }
  ActorId id() const { return cell_ ? cell_->id() : kExternal; }
  // The actor's name (of the cell's current actor: a retired actor's cell may have a new one).
  std::string name() const { return cell_ ? cell_->NameCopy() : std::string(); }

  // Fire and forget. A failure while handling it goes to the receiver's supervisor.
  void Send(Msg msg) const {
    if (cell_) cell_->Post(std::move(msg), {}, gen_);
  }

  // In order across senders: the receiver handles the messages sent with SendInOrder / AskInOrder,
  // from any threads and actors, in one order, and a send that happens before another (the
  // second sender learned of the first, through a lock, a reply or a message) comes first. What a
  // device stream needs of its host submissions. No order against plain Sends: each sender's
  // plain messages keep their own lane.
  void SendInOrder(Msg msg) const {
    if (cell_) cell_->template Post<true>(std::move(msg), {}, gen_);
  }
  template <typename R = void>
  Future<ReplyType<R>> AskInOrder(Msg msg) const {
    return AskVia<R, true>(std::move(msg));
  }

  // Request / reply: the handler answers with ctx.Reply(R) (or ctx.Reply() for R = void).
  template <typename R = void>
  Future<ReplyType<R>> Ask(Msg msg) const {
    return AskVia<R, false>(std::move(msg));
  }

  // Sends `msg` with someone else's reply slot: the receiver's answer goes straight to whoever
  // asked the handler that holds `reply` (their types must agree, as for any reply). The way an
  // actor hands a request on without a future and a continuation of its own.
  template <typename R>
  void Forward(Msg msg, Replier<R> reply) const;

  friend bool operator==(const Address& a, const Address& b) { return a.cell_ == b.cell_ && a.gen_ == b.gen_; }

 private:
  template <typename>
  friend class detail::CellImpl;
  friend class System;
  template <typename>
  friend class Context;
  Address(detail::Cell<Msg>* cell, std::uint32_t gen) : cell_(cell), gen_(gen) {}
  template <typename R, bool kOrdered>
  Future<ReplyType<R>> AskVia(Msg msg) const {
    using T = ReplyType<R>;
    if (!cell_) return Future<T>::Ready(T(Status::ParamInvalid("Ask on an invalid (empty) address")));
    Promise<T> promise;
    Future<T> future = promise.GetFuture();
    cell_->template Post<kOrdered>(std::move(msg), promise.ReleaseCore(), gen_);
    return future;
  }
  detail::Cell<Msg>* cell_ = nullptr;
  std::uint32_t gen_ = 0;  // the actor's generation: a retired actor's address reaches nobody
};

// A reply taken out of a handler to be given later (e.g. when device work completes). Dropping
// it unanswered fails the asker's future; it never hangs.
template <typename R>
class Replier {
 public:
  using T = ReplyType<R>;
  Replier() = default;
  Replier(Replier&&) noexcept = default;
  Replier& operator=(Replier&&) noexcept = default;
  ~Replier() {
    if (core_) core_->TryFail(Status::Aborted("actor '{}' dropped its reply to {}", actor_, kind_));
  }

  bool valid() const { return static_cast<bool>(core_); }
  // False once the asker has dropped its future (nobody would see the reply).
  bool listened() const { return core_ && core_->shared(); }

  template <typename U = R, typename = std::enable_if_t<!std::is_void_v<U>>>
  void Reply(U value) { Complete(T(std::move(value))); }
  template <typename U = R, typename = std::enable_if_t<std::is_void_v<U>>>
  void Reply() { Complete(Status::Ok()); }
  void Fail(Status status) {
    if (core_) core_->TryFail(std::move(status));
    core_.reset();
  }

 private:
  template <typename>
  friend class Context;
  Replier(detail::CoreRef core, std::string actor, std::string kind)
      : core_(std::move(core)), actor_(std::move(actor)), kind_(std::move(kind)) {}
  void Complete(T value) {
    if (!core_) return;
    if (core_->value_type() != typeid(T)) {
      core_->TryFail(Status::Internal("actor '{}' replied to {} with the wrong type", actor_, kind_));
    } else {
      static_cast<detail::Core<T>*>(core_.get())->TryComplete(std::move(value));
    }
    core_.reset();
  }
  template <typename>
  friend class Address;
  detail::CoreRef core_;
  std::string actor_;
  std::string kind_;
};

template <typename Msg>
template <typename R>
void Address<Msg>::Forward(Msg msg, Replier<R> reply) const {
  detail::CoreRef core = std::move(reply.core_);  // the replier no longer fails it when dropped
  if (!cell_) {
    if (core) core->TryFail(Status::ParamInvalid("Forward to an invalid (empty) address"));
    return;
  }
  cell_->Post(std::move(msg), std::move(core), gen_);
}

// What a handler knows about the message it handles.
template <typename Msg>
class Context {
 public:
  ActorId sender() const { return env_->sender; }
  Address<Msg> self() const { return Address<Msg>(cell_, cell_->gen()); }
  std::string_view self_name() const { return cell_->name(); }
  bool expects_reply() const { return static_cast<bool>(env_->reply); }

  // Answers the Ask that sent this message (a no-op for a Send). R must be the asker's type:
  // a mismatch fails the asker with an Internal error naming both.
  template <typename R>
  void Reply(R value) {
    if (!env_->reply) return;
    Complete<R>(StatusOr<R>(std::move(value)));
  }
  void Reply() {
    if (!env_->reply) return;
    Complete<void>(Status::Ok());
  }
  void ReplyError(Status status) {
    if (env_->reply) env_->reply->TryFail(std::move(status));
  }

  // Takes the reply out, to answer after this handler returns.
  template <typename R = void>
  Replier<R> TakeReply() {
    return Replier<R>(env_->reply.Release(), cell_->name(), std::string(KindOf(env_->msg)));
  }

  // Runs fn(value) in this actor (one handler at a time, like a message) when `future`
  // completes: the way an actor waits for another without blocking a worker.
  template <typename T, typename F>
  void Then(Future<T> future, F fn) {
    // Through the cell's link: a future completed after the system is gone drops the
    // continuation instead of touching a destroyed cell.
    std::move(future).OnComplete([link = cell_->link(), fn = std::move(fn)](T&& value) mutable {
      std::lock_guard<std::recursive_mutex> lock(link->mu);
      if (link->cell == nullptr) return;
      link->cell->PostClosure([fn = std::move(fn), value = std::move(value)]() mutable { fn(std::move(value)); });
    });
  }

 private:
  template <typename>
  friend class detail::CellImpl;
  friend struct detail::ContextAccess;
  Context(detail::Cell<Msg>* cell, detail::Envelope<Msg>* env) : cell_(cell), env_(env) {}

  template <typename R>
  void Complete(ReplyType<R> value) {
    using T = ReplyType<R>;
    detail::CoreBase* core = env_->reply.get();
    if (core->value_type() != typeid(T)) {
      core->TryFail(Status::Internal("actor '{}' replied to {} with {}, the asker expects another type",
                                     cell_->name(), KindOf(env_->msg), detail::TypeName<T>()));
      return;
    }
    static_cast<detail::Core<T>*>(core)->TryComplete(std::move(value));
  }

  detail::Cell<Msg>* cell_;
  detail::Envelope<Msg>* env_;
};

namespace detail {

struct ContextAccess {
  template <typename Msg>
  static Context<Msg> Make(Cell<Msg>* cell, Envelope<Msg>* env) { return Context<Msg>(cell, env); }
};

template <typename A>
class CellImpl final : public Cell<typename A::Message> {
 public:
  using Msg = typename A::Message;
  using Env = Envelope<Msg>;
  using Base = Cell<Msg>;

  CellImpl(SystemCore* core, ActorId id, std::string name, Supervisor supervisor, std::unique_ptr<A> actor)
      : Base(core, id, std::move(name), std::move(supervisor)), actor_(std::move(actor)) {
    this->type_ = std::type_index(typeid(A));
    this->pass_fn_ = core->tap_hook ? &CellImpl::PassThunk<true> : &CellImpl::PassThunk<false>;
    this->node_ = std::make_unique<tbb::flow::function_node<tbb::flow::continue_msg, tbb::flow::continue_msg>>(
        *core->graph, tbb::flow::unlimited, [this](tbb::flow::continue_msg) {
          CellBase::RunDrains(this);
          return tbb::flow::continue_msg();
        });
  }

  A* actor() { return actor_.get(); }

  // A new actor in this retired cell; the caller holds its token (BeginReuse) and nobody else
  // can reach the cell (every address to it is of an older generation).
  void Reincarnate(std::string name, Supervisor supervisor, std::unique_ptr<A> actor) {
    {
      std::lock_guard<std::mutex> lock(this->name_mu_);
      this->name_ = std::move(name);
    }
    this->supervisor_ = std::move(supervisor);
    actor_ = std::move(actor);
  }

  void DropAll(const Status& why) override { this->DropQueued(why); }
  void DestroyActor() override { actor_.reset(); }

  void DeliverOneDeterministic(SystemCore::DetEntry& entry) override {
    if (this->core_->stopping.load(std::memory_order_acquire)) {
      this->DropQueued(Status::Aborted("actor system is shut down before delivery"));
      return;
    }
    if (entry.closure) {
      this->RunClosure(entry.closure, entry.gen);
      return;
    }
    auto& cold = *this->cold_;
    std::deque<Env>& queue = entry.ordered ? cold.det_ordered : entry.external ? cold.det_external : cold.det_queue;
    std::optional<Env> env;
    {
      std::lock_guard<std::mutex> lock(this->core_->det_mu);
      if (queue.empty()) return;
      env.emplace(std::move(queue.front()));
      queue.pop_front();
    }
    if (DeliveryTap* tap = this->core_->tap.load(std::memory_order_acquire); tap && !env->tapped()) {
      env->MarkTapped();
      if (this->AskTap(tap, Delivery{env->sender, this->id_, this->name_, KindOf(env->msg)}).count() > 0) {
        // Postponed with no wall time: back to the head of its queue, delivered from the back
        // of the delivery order. The sequencer is running, so no trigger is needed.
        std::lock_guard<std::mutex> lock(this->core_->det_mu);
        queue.push_front(std::move(*env));
        SystemCore::DetEntry again;
        again.cell = this;
        again.external = entry.external;
        again.ordered = entry.ordered;
        this->core_->DetEnqueue(std::move(again), entry.external);
        return;
      }
    }
    Deliver(*env);
  }

 private:
  template <bool kTapHook>
  static PassResult PassThunk(CellBase* cell) { return static_cast<CellImpl*>(cell)->Pass<kTapHook>(); }

  template <bool kTapHook>
  PassResult Pass() {
    PassResult r;
    if (this->core_->stopping.load(std::memory_order_acquire)) {
      r.resumed = this->held_.has_value();  // a parked message's bias goes with it
      r.handled = this->DropQueued(Status::Aborted("actor system is shut down before delivery"));
      return r;
    }
    if (this->closure_count_.load(std::memory_order_acquire) > 0) r.handled += this->RunClosures();
    if (this->held_) {
      Env env = std::move(*this->held_);
      this->held_.reset();
      r.resumed = true;
      Deliver(env);
      ++r.handled;
    }
    DeliveryTap* tap = kTapHook ? this->core_->tap.load(std::memory_order_acquire) : nullptr;
    const int batch = this->core_->batch;
    std::optional<Env> env;
    for (LaneBase* lane = this->lanes_head_.load(std::memory_order_acquire); lane; lane = lane->next) {
      auto* typed = static_cast<Lane<Env>*>(lane);
      for (int n = 0; n < batch && typed->Pop(env); ++n) {
        if (this->core_->stopping.load(std::memory_order_relaxed)) {
          // Shutdown began: the handler that ran finishes, no new one starts.
          env.reset();  // its reply fails through the envelope
          r.handled += 1 + this->DropQueued(Status::Aborted("actor system shut down before delivery"));
          return r;
        }
        if (kTapHook && tap != nullptr && !env->tapped()) {
          env->MarkTapped();
          auto delay = this->AskTap(tap, Delivery{env->sender, this->id_, this->name_, KindOf(env->msg)});
          // No parking once shutdown has begun: the timer is (or is about to be) gone.
          if (delay.count() > 0 && !this->core_->stopping.load(std::memory_order_acquire)) {
            this->held_.emplace(std::move(*env));
            env.reset();
            // Everything this pass owes the counter is settled before the timer can fire: once
            // armed, the resumed drain owns the actor and this one must not touch it again. The
            // bias keeps sends from taking the token meanwhile; the resumed pass removes it.
            this->pending_.fetch_add(CellBase::kParkBias - r.handled - (r.resumed ? CellBase::kParkBias : 0),
                                     std::memory_order_acq_rel);
            r = PassResult{0, true, false};
            this->core_->ArmTimer(this, delay);
            return r;
          }
        }
        Deliver(*env);
        env.reset();
        ++r.handled;
      }
    }
    if (std::uint64_t epoch = ClosedLaneEpoch().load(std::memory_order_relaxed); epoch != reaped_epoch_) {
      reaped_epoch_ = epoch;
      this->ReapClosedLanes();
    }
    return r;
  }

  void Deliver(Env& env) {
    if (env.gen() != this->gen_.load(std::memory_order_relaxed)) {  // sent to an actor since retired
      if (env.reply) env.reply->TryFail(Status::Aborted("actor '{}' is retired: {} not delivered", this->name_, KindOf(env.msg)));
      env.reply.reset();
      return;
    }
    Context<Msg> ctx(this, &env);
    Status status;
    try {
      if constexpr (std::is_same_v<decltype(actor_->Receive(env.msg, ctx)), void>) {
        actor_->Receive(env.msg, ctx);
      } else {
        status = actor_->Receive(env.msg, ctx);
      }
    } catch (const std::exception& e) {
      status = Status::Internal("actor '{}' threw while handling {}: {}", this->name_, KindOf(env.msg), e.what());
    } catch (...) {
      status = Status::Internal("actor '{}' threw a non-standard exception while handling {}", this->name_,
                                KindOf(env.msg));
    }
    this->handled_.store(this->handled_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (env.reply) {
      if (!status.ok()) {
        if (!env.reply->TryFail(status)) this->ReportFailure(KindOf(env.msg), std::move(status));
      } else if (!env.reply->ready()) {
        env.reply->TryFail(Status::Internal("actor '{}' returned from {} without replying", this->name_,
                                            KindOf(env.msg)));
      }
      env.reply.reset();
    } else if (!status.ok()) {
      this->ReportFailure(KindOf(env.msg), std::move(status));
    }
  }

  std::unique_ptr<A> actor_;
  std::uint64_t reaped_epoch_ = 0;
};

}  // namespace detail
}  // namespace npuflow::actors
