// RunLoop: the Run loop of a resident model (seed 002, 3.2), as an actor (RunLoopActor).
//
// The actor owns the model's input queue (the DataInputer of the documents). It takes one item at
// a time: copy its inputs into the model's own input blocks, execute, synchronize with the
// timeout, copy the outputs back, hand them to the item's callback. All of that is one submission
// to the model's execution stream and one asynchronous synchronize, so the actor never blocks a
// worker thread; the timeout comes from a DeadlineTimer.
//
// Outcomes per item, as the original's loop has them:
//   success                      callback(Ok, outputs); the loop goes on
//   end of sequence (device)     callback(EndOfSequence, outputs); the loop goes on
//   another device error         callback(that error); the loop goes on
//   timeout                      the device model is aborted; this item and every queued one get
//                                a Timeout status, and the loop stops: later pushes fail with it
//   Stop() by the user           a normal stop: the item in flight is aborted and, like the
//                                queued ones, gets Aborted ("stopped by the user"); Stop returns Ok
//
// Callbacks run on an actor worker thread: they must not block. The loop is a host client of its
// own ("model N run loop"): its submissions advance its clock, never a worker's, and an item
// starts no earlier (in virtual time) than its pusher's clock when it was pushed.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "actors/system.h"
#include "base/status.h"
#include "base/timer.h"
#include "base/unique_function.h"
#include "scheduler/davinci_model.h"

namespace npuflow::scheduler {

using RunCallback = UniqueFunction<void(Status, std::vector<Tensor>)>;

class RunLoop {
 public:
  // Starts the loop of `model` on instance 0. `timeout`: per item; nullopt waits forever.
  static StatusOr<std::unique_ptr<RunLoop>> Start(std::shared_ptr<DavinciModel> model, npu_sim::Timeout timeout);
  ~RunLoop();  // Stop()

  // Queues one inference. Inputs are checked here (count, sizes; errors name the input). If the
  // loop has stopped, the callback gets the reason at once. An error returned here means the
  // callback will never be called; otherwise it is called exactly once.
  Status Push(std::vector<Tensor> inputs, RunCallback done);
  // A normal stop. Waits until the item in flight has been answered. Idempotent.
  Status Stop();
  // Ok while running; the reason it stopped otherwise (Timeout, or Aborted after Stop).
  Status status() const;
  bool running() const;

  struct Shared;  // state the actor and the timer share

 private:
  RunLoop() = default;
  std::shared_ptr<Shared> shared_;
  std::atomic<bool> released_{false};
};

}  // namespace npuflow::scheduler
