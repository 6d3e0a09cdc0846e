// DeviceModelActor: the rtModel of the documents. Streams are bound to it and given their task
// lists once; one ExecuteModel message then runs every bound stream's list, and the host hears
// only the completion (or the first error). Executions queue; AbortModel stops the bound
// streams and fails the running and queued executions.
#pragma once

#include <deque>
#include <vector>

#include "npu_sim/device.h"
#include "npu_sim/messages.h"

namespace npuflow::npu_sim {

class DeviceModelActor {
 public:
  using Message = ModelMsg;
  DeviceModelActor(Device* device, std::uint32_t id) : device_(device), id_(id) {}
  using Ctx = actors::Context<Message>;
  // One handler per message type; Receive dispatches with std::visit.
  void Receive(Message& msg, Ctx& ctx);

 private:
  void On(BindModelStream& m, Ctx& ctx);
  void On(ExecuteModel& m, Ctx& ctx);
  void On(ModelDone& m, Ctx& ctx);
  void On(AbortModel& m, Ctx& ctx);
  void On(CancelExecution& m, Ctx& ctx);
  void On(RunStopped& m, Ctx& ctx);
  // Stops the running execution's streams; its reports are stale from now on. Until every
  // stream has stopped (with its units' work: RunStopped), no run starts and no abort is
  // answered: nothing of the stopped run may touch memory the caller or the next run uses.
  void StopRun(const Status& why);
  // Answers the aborts waiting for stopped runs and starts the next execution, once nothing stops.
  void AfterStops(actors::Context<Message>& ctx);
  struct Execution {
    VTime at;
    actors::Replier<VTime> reply;
    std::shared_ptr<const std::vector<std::uint64_t>> io;
    RunEndHook on_end;
    std::uint32_t race_ticket = 0;
    std::uint32_t race_requester = 0xFFFFFFFFu;
    bool race_host = false;
    StreamId from_stream = 0xFFFFFFFFu;  // ExecuteModel::from_*: the stream task that asked
    std::uint64_t from_epoch = 0;
    std::uint32_t from_task = 0;
  };
  void StartNext(actors::Context<Message>& ctx);

  Device* device_;
  std::uint32_t id_;
  actors::Address<ModelMsg> self_;
  std::vector<std::pair<StreamId, StreamAddr>> streams_;
  std::deque<Execution> queue_;
  bool running_ = false;
  std::size_t stopping_ = 0;  // stopped runs whose streams have not all stopped yet
  std::vector<actors::Replier<void>> stop_waiters_;  // AbortModel / CancelExecution askers
  std::uint64_t run_ = 0;
  std::size_t streams_left_ = 0;
  VTime end_ = 0;
  Status status_;
};

}  // namespace npuflow::npu_sim
