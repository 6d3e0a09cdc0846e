// EventTable: the device's events. A stream's wait task consumes one record of its event (now,
// or when the record comes), which is what lets a device model run again and again with the
// same record -> wait pairs. Host-side waits and queries do not consume. A latch event
// (EventKind::kLatch) is never consumed: once recorded, every wait passes until it is reset (a
// weight-ready event: each run's first reader of a weight region waits on it). A model stream's
// record ends only a wait of the same model run (RunTag): records and waits an aborted or failed
// run left behind are dropped when the model's next run meets the event.
#pragma once

#include <deque>
#include <vector>

#include "npu_sim/device.h"
#include "npu_sim/messages.h"

namespace npuflow::npu_sim {

class EventTableActor {
 public:
  using Message = EventMsg;
  explicit EventTableActor(Device* device) : device_(device) {}
  using Ctx = actors::Context<Message>;
  // One handler per message type; Receive dispatches with std::visit.
  void Receive(Message& msg, Ctx& ctx);

 private:
  void On(CreateEvent& m, Ctx& ctx);
  void On(DestroyEvent& m, Ctx& ctx);
  void On(RecordEvent& m, Ctx& ctx);
  void On(WaitEvent& m, Ctx& ctx);
  void On(QueryEvent& m, Ctx& ctx);
  void On(HostWaitEvent& m, Ctx& ctx);
  void On(ResetEvent& m, Ctx& ctx);
  void On(CancelWaits& m, Ctx& ctx);
  VTime wait_latency() const { return device_->chip().event_wait_latency_ns; }

  struct Event {
    bool live = false;
    std::vector<RunTag> pending;  // records not yet consumed by a wait task
    bool ever_recorded = false;
    bool latch = false;
    VTime last_record = 0;
    std::deque<WaitEvent> waiters;
    std::vector<actors::Replier<VTime>> host_waiters;
  };
  Event* Find(EventId id, actors::Context<Message>& ctx);
  // Drops the records and waits of runs of `now`'s model before `now`'s run: they are over.
  static void ForgetOlderRuns(Event& e, const RunTag& now);
  Device* device_;
  std::deque<Event> events_;  // deque: Event holds move-only repliers, never relocated
  std::vector<EventId> free_ids_;
};

}  // namespace npuflow::npu_sim
