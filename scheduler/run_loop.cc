#include "scheduler/run_loop.h"

#include <deque>
#include <variant>

#include <fmt/format.h>

#include "graph/ir/tensor_access.h"
#include "scheduler/model_manager.h"

namespace npuflow::scheduler {
namespace {

struct Item {
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  RunCallback done;
};

struct PushItem {
  static constexpr std::string_view kKind = "PushItem";
  std::unique_ptr<Item> item;
  npu_sim::VTime at = 0;  // the pusher's host clock: the item cannot start before it was pushed
};
struct ItemTimedOut {
  static constexpr std::string_view kKind = "ItemTimedOut";
  std::uint64_t seq = 0;
};
struct StopLoop {  // Ask<void>: answered once no item is in flight
  static constexpr std::string_view kKind = "StopLoop";
  Status why;  // Ok: stopped by the user
};
using LoopMsg = std::variant<PushItem, ItemTimedOut, StopLoop>;

}  // namespace

struct RunLoop::Shared {
  std::shared_ptr<DavinciModel> model;
  npu_sim::Runtime* rt = nullptr;
  DeadlineTimer* timer = nullptr;
  npu_sim::Timeout timeout;
  actors::Address<LoopMsg> actor;
  actors::Future<Status> share;  // the model's answer to ShareInstance, taken by the loop's actor
  mutable std::mutex mu;
  Status status;  // Ok while running
  bool running = true;

  void SetStopped(Status why) {
    std::lock_guard<std::mutex> lock(mu);
    if (!running) return;
    running = false;
    status = std::move(why);
  }
};

namespace {

class RunLoopActor {
 public:
  using Message = LoopMsg;
  explicit RunLoopActor(std::shared_ptr<RunLoop::Shared> shared)
      : shared_(std::move(shared)), client_(fmt::format("model {} run loop", shared_->model->id())) {}

  void Receive(Message& msg, actors::Context<Message>& ctx) {
    // Every host call the loop makes is its own: virtual time never depends on the worker.
    npu_sim::ScopedHostClient charge(client_);
    std::visit(
        [&](auto& m) {
          using M = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<M, PushItem>) {
            if (!m.item) {  // a nudge: the previous item finished outside a handler's context
              if (!stopped_ && !current_) StartNext(ctx);
              return;
            }
            if (stopped_) {
              m.item->done(stop_status_, {});
              return;
            }
            client_.Merge(m.at);
            queue_.push_back(std::move(m.item));
            if (!current_) StartNext(ctx);
          } else if constexpr (std::is_same_v<M, ItemTimedOut>) {
            if (!current_ || m.seq != seq_) return;  // answered in time
            const auto ms = shared_->timeout ? shared_->timeout->count() : 0;
            timed_out_ = true;
            Stop(Status::Timeout("model {}: Run loop execution did not complete within {} ms; the device model was "
                                 "aborted and the loop stopped",
                                 shared_->model->id(), ms),
                 ctx);
            TryFinishStopped(ctx.self());
          } else if constexpr (std::is_same_v<M, StopLoop>) {
            if (!stopped_)
              Stop(m.why.ok() ? Status::Aborted("model {}: Run loop stopped by the user", shared_->model->id()) : m.why,
                   ctx);
            drains_.push_back(ctx.TakeReply());
            TryFinishStopped(ctx.self());
          }
        },
        msg);
  }

 private:
  // Stops the loop: queued items get `why`; the run in flight is aborted on the device, and is
  // answered (with `why`) once the abort has completed, so nothing of it is left running when a
  // caller hears of it.
  void Stop(Status why, actors::Context<Message>& ctx) {
    stopped_ = true;
    stop_status_ = why;
    shared_->SetStopped(why);
    for (auto& item : queue_) item->done(why, {});
    queue_.clear();
    if (current_) {
      npu_sim::Runtime& rt = *shared_->rt;
      abort_pending_ = true;
      ctx.Then(rt.AbortModelAsync(shared_->model->device_model(0)), [this, self = ctx.self()](Status) {
        npu_sim::ScopedHostClient charge(client_);
        abort_pending_ = false;
        TryFinishStopped(self);
      });
      (void)rt.AbortStream(shared_->model->exec_stream(0));
    }
  }

  void TryFinishStopped(actors::Address<Message> self) {
    if (abort_pending_) return;
    if (current_ && (current_sync_done_ || timed_out_)) CompleteCurrent(stop_status_, self);
    if (!current_) {
      for (auto& d : drains_) d.Reply();
      drains_.clear();
    }
  }

  void StartNext(actors::Context<Message>& ctx) {
    if (!shared_ready_ && !queue_.empty()) {  // the first submission waits for ShareInstance's answer
      if (share_asked_) return;
      share_asked_ = true;
      ctx.Then(std::move(shared_->share), [this, self = ctx.self()](Status) {
        shared_ready_ = true;  // an error means the model is gone: the submission says so
        self.Send(PushItem{});  // a nudge
      });
      return;
    }
    while (!queue_.empty() && !current_) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      ++seq_;
      current_sync_done_ = false;
      timed_out_ = false;
      StatusOr<std::pair<std::uint32_t, std::uint32_t>> submitted = Submit(current_);
      if (!submitted.ok()) {
        CompleteCurrent(submitted.status(), ctx.self());
        continue;
      }
      npu_sim::Runtime& rt = *shared_->rt;
      const std::uint64_t seq = seq_;
      // The stream is the model's, shared with staged runs: this item's own tasks decide its fate.
      ctx.Then(rt.SynchronizeSubmissionAsync(shared_->model->exec_stream(0), submitted->first, submitted->second),
               [this, seq, self = ctx.self()](StatusOr<npu_sim::VTime> r) {
                 npu_sim::ScopedHostClient charge(client_);
                 if (r.ok()) client_.Merge(*r);
                 if (!current_ || seq != seq_) return;  // answered already
                 current_sync_done_ = true;
                 if (stopped_) {  // the abort of a stop or timeout ended it
                   TryFinishStopped(self);
                   return;
                 }
                 // Device outcomes: end of sequence and other errors go to this item; the loop
                 // goes on.
                 CompleteCurrent(r.status(), self);
               });
      if (shared_->timeout) {
        actors::Address<Message> self = ctx.self();
        timer_ = shared_->timer->Schedule(*shared_->timeout, [self, seq] { self.Send(ItemTimedOut{seq}); });
      }
    }
  }

  // One submission: copy the inputs in, run, copy the outputs out.
  // The item's copies, run and copies back, in one submission; answers its first task's id and
  // the number of tasks.
  StatusOr<std::pair<std::uint32_t, std::uint32_t>> Submit(const std::shared_ptr<Item>& owner) {
    Item& item = *owner;
    DavinciModel& model = *shared_->model;
    const CompiledModel& m = model.compiled();
    if (model.unloaded()) return Status::Aborted("model {} is unloaded", model.id());
    NPUFLOW_RETURN_IF_ERROR(model.WeightsStatus());  // an external weight load that failed
    if (item.inputs.size() != m.inputs.size())
      return Status::ParamInvalid("model {}: {} inputs given, the model takes {}", model.id(), item.inputs.size(),
                                  m.inputs.size());
    std::vector<std::uint64_t> io = model.OwnIo(0);
    std::vector<npu_sim::Task> tasks;
    for (std::size_t i = 0; i < m.inputs.size(); ++i) {
      if (item.inputs[i].data.empty()) continue;
      npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kHostToDevice, item.inputs[i].data.size());
      c.src_host = item.inputs[i].data.data();
      c.dst_dev = npu_sim::DevicePtr{io[i]};
      c.keep_alive = owner;
      c.name = "input " + m.inputs[i].name;
      tasks.push_back(std::move(c));
    }
    tasks.push_back(
        npu_sim::Task::ModelExecute(model.device_model(0).id, std::make_shared<const std::vector<std::uint64_t>>(io)));
    item.outputs.clear();
    for (const graph::IoDef& d : m.outputs) item.outputs.push_back(graph::ZeroTensor(d.desc));
    for (std::size_t i = 0; i < m.outputs.size(); ++i) {
      if (item.outputs[i].data.empty()) continue;
      npu_sim::Task c = npu_sim::Task::Copy(npu_sim::CopyKind::kDeviceToHost, item.outputs[i].data.size());
      c.src_dev = npu_sim::DevicePtr{io[m.inputs.size() + i]};
      c.dst_host = item.outputs[i].data.data();
      c.keep_alive = owner;
      c.name = "output " + m.outputs[i].name;
      tasks.push_back(std::move(c));
    }
    model.Touch();
    const auto count = static_cast<std::uint32_t>(tasks.size());
    NPUFLOW_ASSIGN_OR_RETURN(std::uint32_t first, shared_->rt->Submit(model.exec_stream(0), std::move(tasks)));
    return std::make_pair(first, count);
  }

  void CompleteCurrent(Status s, actors::Address<Message> self) {
    if (timer_) shared_->timer->Cancel(timer_);
    timer_ = 0;
    std::shared_ptr<Item> item = std::move(current_);
    const bool with_outputs = s.ok() || s.code() == StatusCode::kEndOfSequence;
    item->done(s, with_outputs ? std::move(item->outputs) : std::vector<Tensor>{});
    // Continue from a message, where StartNext has a context.
    if (!stopped_ && !queue_.empty()) self.Send(PushItem{nullptr});
    if (!abort_pending_) {
      for (auto& d : drains_) d.Reply();
      drains_.clear();
    }
  }

  std::shared_ptr<RunLoop::Shared> shared_;
  npu_sim::HostClient client_;  // the loop's own host clock and trace track
  std::deque<std::shared_ptr<Item>> queue_;
  std::shared_ptr<Item> current_;  // shared with its copies in flight (Task::keep_alive)
  std::uint64_t seq_ = 0;
  DeadlineTimer::Id timer_ = 0;
  bool stopped_ = false;
  bool share_asked_ = false, shared_ready_ = false;  // see StartNext
  bool abort_pending_ = false;     // a stop's device abort has not completed yet
  bool current_sync_done_ = false; // the item in flight's synchronize has answered
  bool timed_out_ = false;         // the item in flight timed out
  Status stop_status_;
  std::vector<actors::Replier<void>> drains_;
};

}  // namespace

StatusOr<std::unique_ptr<RunLoop>> RunLoop::Start(std::shared_ptr<DavinciModel> model, npu_sim::Timeout timeout) {
  ModelManager* mm = ModelManager::Get();
  if (mm == nullptr) return Status::Failed("the Run loop needs an initialized ModelManager");
  if (model == nullptr) return Status::ParamInvalid("RunLoop::Start: no model");
  if (timeout && timeout->count() <= 0) return Status::ParamInvalid("Run loop timeout must be positive, got {} ms", timeout->count());
  auto shared = std::make_shared<Shared>();
  shared->model = std::move(model);
  shared->rt = &shared->model->runtime();
  shared->timer = &mm->timer();
  shared->timeout = timeout;
  shared->model->AddRunLoop(1);
  // The loop writes instance 0's blocks: no NnExecute may leave its outputs there for its caller
  // any more. The loop's first submission waits for the answer (RunLoopActor::StartNext).
  shared->share = shared->model->ShareInstanceWithRunLoop();
  shared->actor = shared->rt->system().Spawn<RunLoopActor>(fmt::format("model{}.runloop", shared->model->id()), shared);
  // Unloading the model stops the loop before its streams go: the item in flight is aborted and,
  // like the queued ones and later pushes, answered "unloaded" (it used to submit to a destroyed
  // stream, or to one reused by another model). Weak: the loop may go first.
  const std::uint32_t id = shared->model->id();
  std::weak_ptr<Shared> weak = shared;
  const bool live = shared->model->OnUnload([weak, id] {
    if (auto s = weak.lock())
      (void)s->actor.Ask(StopLoop{Status::Aborted("model {} is unloaded: its Run loop stopped", id)}).Get();
  });
  if (!live) {
    (void)shared->actor.Ask(StopLoop{Status::Aborted("model {} is unloaded", id)}).Get();
    shared->model->AddRunLoop(-1);
    return Status::Aborted("model {} is unloaded: no Run loop can start on it", id);
  }
  std::unique_ptr<RunLoop> loop(new RunLoop());
  loop->shared_ = std::move(shared);
  return loop;
}

// The loop's actor is not retired: it may hold the last reference to its model, whose destructor
// (an Unload that waits) must not run inside a handler.
RunLoop::~RunLoop() { (void)Stop(); }

Status RunLoop::Push(std::vector<Tensor> inputs, RunCallback done) {
  if (!done) return Status::ParamInvalid("RunLoop::Push: no callback");
  const CompiledModel& m = shared_->model->compiled();
  if (inputs.size() != m.inputs.size())
    return Status::ParamInvalid("model {}: {} inputs given, the model takes {}", shared_->model->id(), inputs.size(),
                                m.inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::uint64_t want = m.inputs[i].desc.bytes().value_or(0);
    if (inputs[i].desc.dtype != m.inputs[i].desc.dtype || inputs[i].data.size() != want)
      return Status::ParamInvalid("model {}: input '{}' takes {} ({} bytes), got {} ({} bytes)", shared_->model->id(),
                                  m.inputs[i].name, m.inputs[i].desc.ToString(), want, inputs[i].desc.ToString(),
                                  inputs[i].data.size());
  }
  auto item = std::make_unique<Item>();
  item->inputs = std::move(inputs);
  item->done = std::move(done);
  shared_->actor.Send(PushItem{std::move(item), shared_->rt->HostClock()});
  return Status::Ok();
}

Status RunLoop::Stop() {
  if (!shared_) return Status::Ok();
  Status s = shared_->actor.Ask(StopLoop{}).Get();
  if (!released_.exchange(true)) shared_->model->AddRunLoop(-1);
  if (!s.ok() && s.code() != StatusCode::kAborted) return s;  // Aborted: the actor system is gone
  return Status::Ok();
}

Status RunLoop::status() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->status;
}

bool RunLoop::running() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->running;
}

}  // namespace npuflow::scheduler
