#include "npu_sim/device_model.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace npuflow::npu_sim {

void DeviceModelActor::Receive(Message& msg, Ctx& ctx) {
  if (!self_.valid()) self_ = ctx.self();
  std::visit([&](auto& m) { On(m, ctx); }, msg);
}

void DeviceModelActor::On(BindModelStream& m, Ctx& ctx) {
  if (running_) {
    ctx.ReplyError(Status::ParamInvalid("device {} model {}: cannot bind stream {} while the model runs",
                                        device_->id(), id_, m.stream));
    return;
  }
  for (const auto& [sid, addr] : streams_) {
    if (sid == m.stream) {
      ctx.ReplyError(Status::ParamInvalid("device {} model {}: stream {} is already bound", device_->id(),
                                          id_, m.stream));
      return;
    }
  }
  streams_.emplace_back(m.stream, m.addr);
  ctx.Reply();
}

void DeviceModelActor::On(ExecuteModel& m, Ctx& ctx) {
  if (streams_.empty()) {
    if (device_->race) device_->race->DropTicket(m.race_ticket);
    m.on_end();
    ctx.ReplyError(Status::ParamInvalid("device {} model {}: no stream is bound", device_->id(), id_));
    return;
  }
  queue_.push_back(
      Execution{m.at, ctx.template TakeReply<VTime>(), std::move(m.io), m.on_end, m.race_ticket, m.race_requester,
                m.race_host, m.from_stream, m.from_epoch, m.from_task});
  if (!running_ && stopping_ == 0) StartNext(ctx);
}

void DeviceModelActor::On(ModelDone& m, Ctx& ctx) {
  if (!running_ || m.run != run_) return;  // a stream reporting on an aborted run
  end_ = std::max(end_, m.end);
  if (status_.ok() && !m.status.ok()) {
    status_ = std::move(m.status);
    // One stream failed: stop the others, so the run ends now rather than hanging on a
    // stream waiting for an event the failed stream will never record.
    for (const auto& [sid, addr] : streams_)
      if (sid != m.stream) addr.Send(AbortStream{status_});
  }
  if (RaceDetector* race = device_->race) {
    // The stream's run ends here: the model's next run, and this run's requester, come after it.
    race->Release(race->StreamAgent(device_->id(), m.stream), RaceDetector::ModelKey(device_->id(), id_));
  }
  if (--streams_left_ > 0) return;
  running_ = false;
  Execution done = std::move(queue_.front());
  queue_.pop_front();
  if (RaceDetector* race = device_->race) {
    race->DropTicket(done.race_ticket);
    if (done.race_requester != kNoRaceAgent) {
      race->Acquire(done.race_requester, RaceDetector::ModelKey(device_->id(), id_));
      if (done.race_host) race->Release(done.race_requester, RaceDetector::kHostWorld);
    }
  }
  done.on_end();
  if (status_.ok()) done.reply.Reply(end_); else done.reply.Fail(status_);
  if (!queue_.empty() && stopping_ == 0) StartNext(ctx);
}

void DeviceModelActor::StopRun(const Status& why) {
  const std::uint64_t run = run_;
  ++stopping_;
  // Each stream answers once it has stopped with the work it had sent to units and DMA channels
  // (StreamActor::NewEpoch); a stream that had finished its part answers at once.
  struct Join {
    std::atomic<std::size_t> left;
    actors::Address<ModelMsg> model;
    std::uint64_t run;
  };
  auto join = std::make_shared<Join>();
  join->left.store(streams_.size());
  join->model = self_;
  join->run = run;
  for (const auto& [sid, addr] : streams_)
    addr.Ask(AbortStream{why}).OnComplete([join](Status) {
      if (join->left.fetch_sub(1, std::memory_order_acq_rel) == 1) join->model.Send(RunStopped{join->run});
    });
  ++run_;  // reports of the aborted run are stale from now on
  running_ = false;
}

void DeviceModelActor::On(RunStopped&, Ctx& ctx) {
  if (RaceDetector* race = device_->race) {
    // Whoever hears of the abort knows the run is stopped: its accesses come before the
    // model's next run and every later host submission.
    for (const auto& [sid, addr] : streams_) {
      const RaceAgent agent = race->StreamAgent(device_->id(), sid);
      race->Release(agent, RaceDetector::ModelKey(device_->id(), id_));
      race->Release(agent, RaceDetector::kHostWorld);
    }
  }
  --stopping_;
  AfterStops(ctx);
}

void DeviceModelActor::AfterStops(actors::Context<Message>& ctx) {
  if (stopping_ > 0) return;
  for (auto& r : stop_waiters_) r.Reply();
  stop_waiters_.clear();
  if (!running_ && !queue_.empty()) StartNext(ctx);
}

void DeviceModelActor::On(AbortModel& m, Ctx& ctx) {
  Status why = m.why.ok() ? Status::Aborted("device {} model {}: aborted", device_->id(), id_) : m.why;
  if (running_) StopRun(why);
  for (auto& e : queue_) {
    if (device_->race) device_->race->DropTicket(e.race_ticket);
    e.on_end();
    e.reply.Fail(why);
  }
  queue_.clear();
  // Answered once no run of this model is still stopping (this one, or one stopped before).
  stop_waiters_.push_back(ctx.TakeReply());
  AfterStops(ctx);
}

// A host stream's rtModelExecute task failed or was aborted: its execution goes too (stopped if
// it runs), and the model's other executions go on. Answered once it no longer runs.
void DeviceModelActor::On(CancelExecution& m, Ctx& ctx) {
  for (std::size_t i = 0; i < queue_.size(); ++i) {
    const Execution& e = queue_[i];
    if (e.from_stream != m.from_stream || e.from_epoch != m.from_epoch || e.from_task != m.from_task) continue;
    if (i == 0 && running_) StopRun(m.why);
    Execution done = std::move(queue_[i]);
    queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
    if (device_->race) device_->race->DropTicket(done.race_ticket);
    done.on_end();
    done.reply.Fail(m.why);
    break;
  }
  stop_waiters_.push_back(ctx.TakeReply());
  AfterStops(ctx);
}

void DeviceModelActor::StartNext(actors::Context<Message>& ctx) {
  running_ = true;
  ++run_;
  streams_left_ = streams_.size();
  end_ = queue_.front().at;
  status_ = Status::Ok();
  if (RaceDetector* race = device_->race) {
    // Every stream's run starts after the request and after the model's previous run.
    for (const auto& [sid, addr] : streams_) {
      const RaceAgent agent = race->StreamAgent(device_->id(), sid);
      race->AcquireTicket(agent, queue_.front().race_ticket);
      race->Acquire(agent, RaceDetector::ModelKey(device_->id(), id_));
    }
  }
  for (const auto& [sid, addr] : streams_) addr.Send(StartModel{run_, id_, queue_.front().at, self_, queue_.front().io});
}

}  // namespace npuflow::npu_sim
