// ModelActor's handlers. The model's immutable parts (instances, their device models, streams
// and gates) are read through DavinciModel; everything that changes per execution lives here.
#include "scheduler/model_actor.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>

#include <fmt/format.h>

#include "base/logging.h"
#include "base/timer.h"
#include "scheduler/davinci_model.h"

namespace npuflow::scheduler {

class ModelActor {
 public:
  using Message = ModelMsg;
  using Ctx = actors::Context<Message>;

  explicit ModelActor(DavinciModel* model)
      : model_(model), rt_(model->rt_), in_flight_(model->instances_.size(), 0),
        gates_elided_(model->instances_.size(), false), reading_(model->instances_.size(), false),
        read_state_(std::make_unique<std::atomic<int>[]>(model->instances_.size())),
        shared_(model->instances_.size(), false) {}

  void Receive(Message& msg, Ctx& ctx) {
    if (!self_.valid()) self_ = ctx.self();
    std::visit([&](auto& m) { On(m, ctx); }, msg);
  }

 private:
  enum class Phase { kReady, kUnloading, kUnloaded };
  struct Pending {
    actors::Replier<npu_sim::VTime> reply;
    npu_sim::VTime end = 0;  // the run's, once run_done
    npu_sim::HostSide* host = nullptr;
    npu_sim::Timeout timeout;
    DeadlineTimer::Id timer = 0;
    std::uint32_t generation = 0;
    int instance = -1;
    bool live = false;
    bool staged = false;
    bool weights_settled = false;
    bool timed_out = false;   // an abort for its timeout is under way
    bool run_done = false;    // the device has answered the run
    bool abort_done = false;  // the timeout's abort has completed
    Status result;            // the run's outcome, once run_done
  };
  struct Held {
    ExecRequest req;
    actors::Replier<npu_sim::VTime> reply;
  };

  std::uint32_t id() const { return model_->id_; }
  static constexpr std::uint64_t kAnswered = ~std::uint64_t{0};  // RunDone of a run answered directly
  static std::uint64_t Ticket(std::size_t slot, std::uint32_t generation) {
    return (static_cast<std::uint64_t>(generation) << 32) | slot;
  }
  Pending* Find(std::uint64_t ticket) {
    const std::size_t slot = ticket & 0xffffffffu;
    if (slot >= pending_.size()) return nullptr;
    Pending& p = pending_[slot];
    return p.live && p.generation == (ticket >> 32) ? &p : nullptr;
  }

  // ---- executions ------------------------------------------------------------------------------
  void On(model_msg::Execute& m, Ctx& ctx) {
    if (phase_ != Phase::kReady) {
      ctx.ReplyError(Status::Aborted("model {} is unloaded", id()));
      return;
    }
    actors::Replier<npu_sim::VTime> reply = ctx.TakeReply<npu_sim::VTime>();
    if (exclusive_) {  // a host-scheduled run has the model: start when it ends
      held_.push_back(Held{std::move(m.req), std::move(reply)});
      return;
    }
    if (!waiting_.empty() && m.req.staging != nullptr) {  // behind those waiting for an instance, in arrival order
      waiting_.push_back(Held{std::move(m.req), std::move(reply)});
      return;
    }
    Start(std::move(m.req), std::move(reply), ctx);
  }

  // The caller of a run that left its outputs in place has read them: the instance is free again
  // (for the executions that waited for one, first).
  void On(model_msg::OutputsRead& m, Ctx& ctx) {
    if (m.instance < 0 || m.instance >= static_cast<int>(reading_.size()) || !reading_[m.instance]) return;
    EndReading(m.instance);
    StartWaiting(ctx);
    GrantExclusiveIfIdle();
    CheckDrained();
  }

  void Start(ExecRequest req, actors::Replier<npu_sim::VTime> reply, Ctx& ctx) {
    if (Status w = model_->WeightsStatus(); !w.ok()) {
      reply.Fail(std::move(w));
      return;
    }
    // Weights still streaming in: the run waits for them on the device, and its caller for the
    // load's verdict (a load that failed records its latches anyway, so as not to hang).
    const bool settled = model_->weights_landed_.load(std::memory_order_acquire);
    model_->Touch();
    npu_sim::ScopedHostClient charge(*req.host);
    if (req.stream) {  // on the caller's stream: queued behind its work, answered once submitted
      const int i = static_cast<int>(rr_++ % in_flight_.size());
      Status s = rt_->ExecuteModelOnStream(model_->instances_[i]->model, *req.stream, FillIo(i, std::move(req.io)));
      if (s.ok()) reply.Reply(npu_sim::VTime{0});
      else reply.Fail(s.WithContext(fmt::format("model {}", id())));
      return;
    }
    const int i = PickInstance(/*writes_own_blocks=*/req.staging != nullptr);
    if (i < 0) {  // every instance holds outputs its caller is still reading: start when one is read
      waiting_.push_back(Held{std::move(req), std::move(reply)});
      return;
    }
    const DavinciModel::Instance& inst = *model_->instances_[i];
    std::vector<std::uint64_t> io = FillIo(i, std::move(req.io));
    // Nothing left for the actor to do before the answer (no timer, no weights to wait for, no
    // gates to elide): the device answers the caller directly.
    const bool direct = !req.timeout && settled && (gates_elided_[i] || !model_->HasGates(i));
    if (direct && req.staging == nullptr) {
      // The request goes on with the caller's reply slot; the device calls DirectRunEnded just
      // before it answers, and the actor hears of the run afterwards only to count the instance
      // idle. One hop fewer, and no future or continuation of the actor's own, per run.
      Busy(i);
      rt_->ExecuteModelReplyTo(inst.model, std::move(io), std::move(reply),
                               npu_sim::RunEndHook{&ModelActor::DirectRunEnded, this, static_cast<std::uint64_t>(i)});
      return;
    }
    // The caller waits for this run's answer: it reads the outputs where the run leaves them
    // (unless a Run loop shares the instance, or they are under 1 KiB: ReadsInPlace).
    const bool in_place = direct && req.staging != nullptr && !shared_[i] && ReadsInPlace(*req.staging);
    actors::Future<StatusOr<npu_sim::VTime>> done;
    if (req.staging == nullptr) {
      done = rt_->ExecuteModelAsync(inst.model, std::move(io));
    } else {
      std::vector<npu_sim::Task> tasks = model_->StagedTasks(io, inst.model.id, req.staging, in_place);
      const auto count = static_cast<std::uint32_t>(tasks.size());
      auto submitted = rt_->Submit(inst.exec_stream, std::move(tasks));
      if (!submitted.ok()) {
        reply.Fail(submitted.status().WithContext(fmt::format("model {}", id())));
        return;
      }
      done = rt_->SynchronizeSubmissionAsync(inst.exec_stream, *submitted, count);
    }
    if (direct) {  // staged: the stream's synchronisation answers the caller
      Busy(i);
      if (in_place) {  // until the caller's OutputsRead, or the run's failure
        reading_[i] = true;
        read_state_[i].store(kReadRunning, std::memory_order_relaxed);  // published by the submission
      }
      // The staging lives until the caller has its answer, which comes after this writes it (the
      // caller waits for it: NnExecute refuses to run inside a handler).
      std::move(done).OnComplete([self = ctx.self(), i, model = id(), reply = std::move(reply), in_place,
                                  staging = req.staging.get(), state = &read_state_[i],
                                  answered = &answered_](StatusOr<npu_sim::VTime>&& end) mutable {
        answered->fetch_add(1, std::memory_order_release);
        int running = kReadRunning;
        if (in_place && end.ok() && !state->compare_exchange_strong(running, kReadAnswered, std::memory_order_acq_rel))
          end = Status::Aborted("the model was unloaded as the run ended; its outputs were not read");
        if (in_place && end.ok()) {
          staging->read_in_place = i;  // the caller reads the outputs, then frees the instance
        } else {
          self.Send(model_msg::RunDone{kAnswered, npu_sim::VTime{}, i, in_place});
        }
        if (end.ok()) {
          reply.Reply(*end);
        } else {
          reply.Fail(end.status().WithContext(fmt::format("model {}", model)));
        }
      });
      return;
    }
    const std::uint64_t ticket = Track(i, std::move(reply), req, settled);
    if (req.timeout) {
      pending_[ticket & 0xffffffffu].timer =
          Timer().Schedule(*req.timeout, [self = ctx.self(), ticket] { self.Send(model_msg::TimedOut{ticket}); });
    }
    // The device's answer comes back as a message (a plain post from the device model's worker; no
    // closure queue). Safe at shutdown: posts to a stopping system are dropped.
    std::move(done).OnComplete([self = ctx.self(), ticket](StatusOr<npu_sim::VTime>&& end) {
      self.Send(model_msg::RunDone{ticket, std::move(end)});
    });
  }

  // RunEndHook of a run answered by the device itself (see Start): on the device model's worker,
  // before the caller has its answer, so the caller's next message finds the run counted.
  static void DirectRunEnded(void* actor, std::uint64_t instance) {
    auto* self = static_cast<ModelActor*>(actor);
    self->answered_.fetch_add(1, std::memory_order_release);
    self->self_.Send(model_msg::RunDone{kAnswered, npu_sim::VTime{}, static_cast<int>(instance)});
  }

  std::uint64_t Track(int instance, actors::Replier<npu_sim::VTime> reply, const ExecRequest& req, bool settled) {
    std::size_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = pending_.size();
      pending_.emplace_back();
    }
    Pending& p = pending_[slot];
    p.reply = std::move(reply);
    p.host = req.host;
    p.timeout = req.timeout;
    p.timer = 0;
    p.instance = instance;
    p.live = true;
    p.staged = req.staging != nullptr;
    p.weights_settled = settled;
    p.timed_out = p.run_done = p.abort_done = false;
    p.end = 0;
    p.result = Status::Ok();
    Busy(instance);
    return Ticket(slot, p.generation);
  }

  void Busy(int instance) {
    ++in_flight_[instance];
    model_->in_flight_.fetch_add(1, std::memory_order_relaxed);
  }
  void Idle(int instance) {
    --in_flight_[instance];
    model_->in_flight_.fetch_sub(1, std::memory_order_relaxed);
  }

  // The caller's io with the instance's own blocks where it gave host memory (0).
  std::vector<std::uint64_t> FillIo(int i, std::vector<std::uint64_t> io) const {
    const std::vector<std::uint64_t>& own = model_->own_io_[i];
    for (std::size_t k = 0; k < io.size() && k < own.size(); ++k)
      if (io[k] == 0) io[k] = own[k];
    return io;
  }

  // Whether the caller is to read the run's host outputs where the run leaves them: when they are
  // worth it. Below kReadInPlaceMinBytes the DMA channel's copy into the caller's buffers costs less
  // than the caller's read in place (a shared lock, a mapping, the OutputsRead message back here):
  // a greedy GPT-2 step's one token, 4 bytes.
  static bool ReadsInPlace(const Staging& staging) {
    std::uint64_t bytes = 0;
    for (std::uint64_t b : staging.out_bytes) bytes += b;
    return bytes >= kReadInPlaceMinBytes;
  }
  static constexpr std::uint64_t kReadInPlaceMinBytes = 1024;

  int PickInstance(bool writes_own_blocks) {
    // An idle instance, else the least busy; starting points rotate so load spreads. A run that
    // writes the instance's own blocks (host buffers) never takes one whose outputs a caller is
    // still reading (-1 if that is every instance); a zero-copy run may.
    const std::size_t n = in_flight_.size();
    const std::size_t start = rr_++ % n;
    int best = -1;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = (start + k) % n;
      if (writes_own_blocks && reading_[i]) continue;
      if (in_flight_[i] == 0) return static_cast<int>(i);
      if (best < 0 || in_flight_[i] < in_flight_[static_cast<std::size_t>(best)]) best = static_cast<int>(i);
    }
    return best;
  }

  void EndReading(int i) {
    reading_[i] = false;
    Idle(i);
    answered_.fetch_sub(1, std::memory_order_relaxed);
    AnswerShareWaiters();
  }

  void On(model_msg::ShareInstance& m, Ctx& ctx) {
    if (m.instance < 0 || m.instance >= static_cast<int>(shared_.size())) {
      ctx.ReplyError(Status::ParamInvalid("model {}: no instance {}", id(), m.instance));
      return;
    }
    shared_[m.instance] = true;
    share_waiters_.push_back({m.instance, ctx.TakeReply()});
    AnswerShareWaiters();
  }

  // Run loops waiting for their instance's outputs to be read (or given up).
  void AnswerShareWaiters() {
    for (auto it = share_waiters_.begin(); it != share_waiters_.end();) {
      if (reading_[it->first]) {
        ++it;
        continue;
      }
      it->second.Reply();
      it = share_waiters_.erase(it);
    }
  }

  // Executions that waited for an instance, in arrival order, while one is free to take.
  void StartWaiting(Ctx& ctx) {
    while (!waiting_.empty() && phase_ == Phase::kReady && !exclusive_) {
      bool free = false;
      for (bool r : reading_) free = free || !r;
      if (!free) return;
      Held h = std::move(waiting_.front());
      waiting_.pop_front();
      Start(std::move(h.req), std::move(h.reply), ctx);
    }
  }

  void On(model_msg::RunDone& m, Ctx& ctx) {
    if (m.ticket == kAnswered) {  // a run its caller has already heard of
      if (m.in_place) {  // it failed: its caller reads nothing
        reading_[m.instance] = false;
        AnswerShareWaiters();
      }
      Idle(m.instance);
      answered_.fetch_sub(1, std::memory_order_relaxed);
      StartWaiting(ctx);
      GrantExclusiveIfIdle();
      CheckDrained();
      return;
    }
    Pending* p = Find(m.ticket);
    if (p == nullptr) return;
    if (p->timer != 0) (void)Timer().Cancel(p->timer);
    p->timer = 0;
    p->run_done = true;
    Idle(p->instance);
    if (m.end.ok()) {
      p->end = *m.end;  // the caller merges it into its clock
    } else {
      p->result = m.end.status().WithContext(fmt::format("model {}", id()));
    }
    if (p->timed_out) {
      if (p->abort_done) Answer(*p, TimeoutError(*p));
    } else if (!p->result.ok() || !p->weights_settled || gates_elided_[p->instance] || !model_->HasGates(p->instance)) {
      Answer(*p, p->result);
    } else {
      ElideThenAnswer(*p, m.ticket, ctx);
    }
    CheckDrained();
  }

  // After a run that started with every weight landed: the instance's gates become NOPs on the
  // device before its caller hears of the run, so the caller's next run never meets them.
  void ElideThenAnswer(Pending& p, std::uint64_t ticket, Ctx& ctx) {
    const int i = p.instance;
    gates_elided_[i] = true;
    const DavinciModel::Instance& inst = *model_->instances_[i];
    npu_sim::ScopedHostClient charge(*p.host);
    auto left = std::make_shared<std::size_t>(0);
    for (std::size_t s = 0; s < inst.streams.size() && s < inst.gates.size(); ++s)
      if (!inst.gates[s].empty()) ++*left;
    for (std::size_t s = 0; s < inst.streams.size() && s < inst.gates.size(); ++s) {
      if (inst.gates[s].empty()) continue;
      const npu_sim::Stream stream = inst.streams[s];
      ctx.Then(rt_->ElideWaitsAsync(inst.model, stream, inst.gates[s]), [this, ticket, left, stream](Status st) {
        if (!st.ok())
          NPUFLOW_LOG_WARN(kScheduler, "model {}: its weight gates on stream {} stay: {}", id(), stream.id, st.ToString());
        if (--*left == 0)
          if (Pending* q = Find(ticket)) Answer(*q, Status::Ok());
      });
    }
  }

  void On(model_msg::TimedOut& m, Ctx& ctx) {
    Pending* p = Find(m.ticket);
    if (p == nullptr || p->run_done || p->timed_out) return;  // answered in time
    p->timed_out = true;
    p->timer = 0;
    // As on hardware: nothing is left running. A staged run's copies after it go with its stream.
    const DavinciModel::Instance& inst = *model_->instances_[p->instance];
    npu_sim::ScopedHostClient charge(*p->host);
    if (p->staged) (void)rt_->AbortStream(inst.exec_stream);
    ctx.Then(rt_->AbortModelAsync(inst.model), [this, ticket = m.ticket](Status) {
      Pending* q = Find(ticket);
      if (q == nullptr) return;
      q->abort_done = true;
      if (q->run_done) Answer(*q, TimeoutError(*q));
    });
  }

  Status TimeoutError(const Pending& p) const {
    return Status::Timeout("model {}: execution did not complete within {} ms; the device model was aborted", id(),
                           p.timeout ? p.timeout->count() : 0);
  }

  void Answer(Pending& p, Status status) {
    if (status.ok()) p.reply.Reply(p.end);
    else p.reply.Fail(std::move(status));
    p.live = false;
    p.host = nullptr;
    ++p.generation;
    free_.push_back(static_cast<std::size_t>(&p - pending_.data()));
    CheckDrained();
  }

  // ---- host-scheduled runs -------------------------------------------------------------------
  void On(model_msg::AcquireExclusive&, Ctx& ctx) {
    if (phase_ != Phase::kReady) {
      ctx.ReplyError(Status::Aborted("model {} is unloaded", id()));
      return;
    }
    // Runs whose callers already have their answers (the actor has yet to hear) do not count: a
    // caller that ran the model and then asks for it alone must not be refused for its own run.
    const int running = Running();
    const int unanswered = running - answered_.load(std::memory_order_acquire);
    if (unanswered > 0 || exclusive_) {
      ctx.ReplyError(Status::ParamInvalid(
          "model {}: host-scheduled execution needs the model to itself; {} executions in flight", id(),
          unanswered + (exclusive_ ? 1 : 0)));
      return;
    }
    exclusive_ = true;
    model_->in_flight_.fetch_add(1, std::memory_order_relaxed);
    model_->Touch();
    if (running > 0) {  // granted once the actor has heard of those runs' ends
      exclusive_waiter_ = ctx.TakeReply();
      return;
    }
    ctx.Reply();
  }

  void GrantExclusiveIfIdle() {
    if (exclusive_waiter_.valid() && Running() == 0) exclusive_waiter_.Reply();
  }

  void On(model_msg::ReleaseExclusive&, Ctx& ctx) {
    if (!exclusive_) return;
    exclusive_ = false;
    model_->in_flight_.fetch_sub(1, std::memory_order_relaxed);
    StartWaiting(ctx);  // they came first
    std::deque<Held> held = std::move(held_);
    held_.clear();
    for (Held& h : held) {
      if (phase_ == Phase::kReady) Start(std::move(h.req), std::move(h.reply), ctx);
      else h.reply.Fail(Status::Aborted("model {} is unloaded", id()));
    }
    CheckDrained();
  }

  // ---- unload --------------------------------------------------------------------------------
  void On(model_msg::Unload& m, Ctx& ctx) {
    unload_waiters_.push_back(ctx.TakeReply());
    if (phase_ == Phase::kUnloaded) {
      CheckDrained();
      return;
    }
    if (phase_ == Phase::kReady) {
      phase_ = Phase::kUnloading;
      if (exclusive_waiter_.valid()) {  // asked for the model alone, not granted yet: it never will be
        exclusive_waiter_.Fail(Status::Aborted("model {} is unloaded", id()));
        exclusive_ = false;
        model_->in_flight_.fetch_sub(1, std::memory_order_relaxed);
      }
      for (Held& h : held_) h.reply.Fail(Status::Aborted("model {} is unloaded", id()));
      held_.clear();
      for (Held& h : waiting_) h.reply.Fail(Status::Aborted("model {} is unloaded", id()));
      waiting_.clear();
      // Outputs in place: the unload never waits for a caller to read them (one that never
      // does, say a fiber nobody resumes, must not hold it up). Those already answered are
      // released now: the reader finds the blocks freed or not (DavinciModel::ReadOutputsInPlace)
      // and its OutputsRead is ignored. Those still running end with their runs, whatever the
      // device does: a run that still succeeds answers Aborted instead of leaving its outputs.
      for (std::size_t i = 0; i < reading_.size(); ++i) {
        if (reading_[i] && read_state_[i].exchange(kReadUnloading, std::memory_order_acq_rel) == kReadAnswered)
          EndReading(static_cast<int>(i));
      }
      // Executions in flight end now (Aborted); they are answered as their runs come back.
      npu_sim::ScopedHostClient charge(*m.host);
      for (std::size_t i = 0; i < in_flight_.size(); ++i) {
        if (in_flight_[i] == 0) continue;
        const DavinciModel::Instance& inst = *model_->instances_[i];
        (void)rt_->AbortModelAsync(inst.model);
        (void)rt_->AbortStream(inst.exec_stream);
      }
    }
    CheckDrained();
  }

  int Running() const {
    int n = 0;
    for (int c : in_flight_) n += c;
    return n;
  }

  // Unloading and nothing runs any more: the host may free what the runs used.
  void CheckDrained() {
    if (phase_ == Phase::kReady || Running() > 0 || exclusive_) return;
    for (const Pending& p : pending_)
      if (p.live) return;  // a timed-out run still waiting for its abort
    phase_ = Phase::kUnloaded;
    for (auto& w : unload_waiters_) w.Reply();
    unload_waiters_.clear();
  }

  DeadlineTimer& Timer() {
    if (!timer_) timer_.emplace();
    return *timer_;
  }

  DavinciModel* model_;
  npu_sim::Runtime* rt_;
  actors::Address<ModelMsg> self_;  // for DirectRunEnded, which runs outside the actor
  Phase phase_ = Phase::kReady;
  std::vector<int> in_flight_;        // per instance
  std::vector<bool> gates_elided_;    // per instance
  std::size_t rr_ = 0;
  std::vector<Pending> pending_;      // by ticket slot; reused
  std::vector<std::size_t> free_;
  bool exclusive_ = false;
  std::deque<Held> held_;
  // Per instance: a run that leaves its outputs in place is in flight, or its caller is reading
  // them (Staging). read_state_ says which, between the run's answer (off the actor) and an
  // unload: kReadRunning, then kReadAnswered (the answer's) or kReadUnloading (the unload's).
  static constexpr int kReadRunning = 0, kReadAnswered = 1, kReadUnloading = 2;
  std::vector<bool> reading_;
  std::unique_ptr<std::atomic<int>[]> read_state_;
  std::vector<bool> shared_;  // per instance: a Run loop uses it too (model_msg::ShareInstance)
  std::vector<std::pair<int, actors::Replier<void>>> share_waiters_;
  std::deque<Held> waiting_;   // executions that found every instance being read
  std::vector<actors::Replier<void>> unload_waiters_;
  actors::Replier<void> exclusive_waiter_;  // AcquireExclusive waiting for answered runs to be reaped
  // Runs answered straight from the device (see Start) that the actor has not yet reaped. Written
  // by the completing worker before it answers, so a caller's next message always sees its own.
  std::atomic<int> answered_{0};
  std::optional<DeadlineTimer> timer_;  // made on the first timeout (it starts the timer thread)
};

actors::Address<ModelMsg> SpawnModelActor(DavinciModel& model) {
  return model.runtime().system().Spawn<ModelActor>(fmt::format("model{}", model.id()), &model);
}

}  // namespace npuflow::scheduler
