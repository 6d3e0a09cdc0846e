#include "npu_sim/event_table.h"

#include <algorithm>

namespace npuflow::npu_sim {

EventTableActor::Event* EventTableActor::Find(EventId id, actors::Context<Message>& ctx) {
  if (id >= events_.size() || !events_[id].live) {
    ctx.ReplyError(Status::NotFound("device {}: no event {}", device_->id(), id));
    return nullptr;
  }
  return &events_[id];
}

void EventTableActor::Receive(Message& msg, Ctx& ctx) {
  std::visit([&](auto& m) { On(m, ctx); }, msg);
}

void EventTableActor::On(CreateEvent& m, Ctx& ctx) {
  EventId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<EventId>(events_.size());
    events_.emplace_back();
  }
  events_[id] = Event{};
  events_[id].live = true;
  events_[id].latch = m.latch;
  device_->live_events.fetch_add(1, std::memory_order_relaxed);
  ctx.Reply<EventId>(id);
}

void EventTableActor::On(DestroyEvent& m, Ctx& ctx) {
  Event* e = Find(m.event, ctx);
  if (!e) return;
  for (auto& w : e->waiters)
    w.stream.Send(UnitDone{w.epoch, w.task, 0,
                           Status::Aborted("device {}: event {} destroyed while a stream waited on it",
                                           device_->id(), m.event)});
  for (auto& h : e->host_waiters)
    h.Fail(Status::Aborted("device {}: event {} destroyed while the host waited on it", device_->id(), m.event));
  *e = Event{};
  free_ids_.push_back(m.event);
  device_->live_events.fetch_sub(1, std::memory_order_relaxed);
  ctx.Reply();
}

void EventTableActor::ForgetOlderRuns(Event& e, const RunTag& now) {
  if (now.model == RunTag::kUntagged) return;
  if (!e.pending.empty())
    e.pending.erase(std::remove_if(e.pending.begin(), e.pending.end(), [&](const RunTag& t) { return t.OlderThan(now); }),
                    e.pending.end());
  if (!e.waiters.empty())
    e.waiters.erase(std::remove_if(e.waiters.begin(), e.waiters.end(),
                                   [&](const WaitEvent& w) { return w.tag.OlderThan(now); }),
                    e.waiters.end());
}

void EventTableActor::On(RecordEvent& m, Ctx&) {
  if (m.event >= events_.size() || !events_[m.event].live) return;  // the stream reported it already
  Event& e = events_[m.event];
  e.ever_recorded = true;
  e.last_record = std::max(e.last_record, m.at);
  for (auto& h : e.host_waiters) h.Reply(e.last_record);
  e.host_waiters.clear();
  if (e.latch) {
    for (auto& w : e.waiters) w.stream.Send(EventFired{w.epoch, w.task, m.at + wait_latency()});
    e.waiters.clear();
    return;
  }
  ForgetOlderRuns(e, m.tag);
  for (auto it = e.waiters.begin(); it != e.waiters.end(); ++it) {
    if (!it->tag.Matches(m.tag)) continue;
    it->stream.Send(EventFired{it->epoch, it->task, m.at + wait_latency()});
    e.waiters.erase(it);
    return;
  }
  e.pending.push_back(m.tag);
}

void EventTableActor::On(WaitEvent& m, Ctx&) {
  if (m.event >= events_.size() || !events_[m.event].live) {
    m.stream.Send(UnitDone{m.epoch, m.task, 0, Status::NotFound("device {}: wait on event {}, which does not exist",
                                                               device_->id(), m.event)});
    return;
  }
  Event& e = events_[m.event];
  if (e.latch && e.ever_recorded) {
    m.stream.Send(EventFired{m.epoch, m.task, e.last_record + wait_latency()});
    return;
  }
  if (e.latch) {
    e.waiters.push_back(std::move(m));
    return;
  }
  ForgetOlderRuns(e, m.tag);
  for (auto it = e.pending.begin(); it != e.pending.end(); ++it) {
    if (!it->Matches(m.tag)) continue;
    e.pending.erase(it);
    m.stream.Send(EventFired{m.epoch, m.task, e.last_record + wait_latency()});
    return;
  }
  e.waiters.push_back(std::move(m));
}

void EventTableActor::On(QueryEvent& m, Ctx& ctx) {
  if (Event* e = Find(m.event, ctx))
    ctx.Reply<bool>(!e->pending.empty() || (e->ever_recorded && (e->latch || e->waiters.empty())));
}

void EventTableActor::On(HostWaitEvent& m, Ctx& ctx) {
  Event* e = Find(m.event, ctx);
  if (!e) return;
  if (e->ever_recorded) {
    ctx.Reply<VTime>(e->last_record);
  } else {
    e->host_waiters.push_back(ctx.template TakeReply<VTime>());
  }
}

void EventTableActor::On(ResetEvent& m, Ctx& ctx) {
  if (Event* e = Find(m.event, ctx)) {
    e->pending.clear();
    e->ever_recorded = false;
    ctx.Reply();
  }
}

void EventTableActor::On(CancelWaits& m, Ctx&) {
  for (auto& e : events_) {
    e.waiters.erase(std::remove_if(e.waiters.begin(), e.waiters.end(),
                                   [&](const WaitEvent& w) { return w.stream_id == m.stream; }),
                    e.waiters.end());
  }
}

}  // namespace npuflow::npu_sim
