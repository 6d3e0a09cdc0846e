// ModelActor: the execution state of one loaded model, as an actor (one per DavinciModel).
//
// DavinciModel::Init spawns it as its last step. From then on every execution is a message to it,
// and NnExecute / Execute / ExecuteHostScheduled / Unload are thin host-side calls that send and
// wait (a thread blocks, a Boost.Fiber fiber yields; a oneTBB worker never waits). What used to be
// guarded by a shared_mutex and atomics is the actor's state:
//
//   instances in flight   which instance runs what; a new execution takes an idle instance, else
//                         the least loaded one (plain ints: one handler at a time)
//   exclusivity           a host-scheduled run holds the model to itself; executions that arrive
//                         meanwhile wait in the actor and start when it ends
//   the weight gate       a run that started before every external weight landed is answered with
//                         "weights pending" (the caller then waits for the load's verdict); the
//                         first run of an instance that started with every weight landed turns the
//                         instance's weight gates into NOPs before it is answered, so the next run
//                         never waits on a latch again
//   answers               a run with no timeout, on an instance whose gates are gone, is answered
//                         by the device model itself: the request goes on with the caller's own
//                         reply slot (Address::Forward), so no future or continuation is made for
//                         it, and the device tells the actor the run ended (RunEndHook) just
//                         before it answers. Asking for the model alone waits, rather than fails,
//                         for such runs whose callers already have their answers
//   timeouts              the actor's timer aborts the device model (and, for a staged run, the
//                         execution stream) and answers Timeout once the abort has completed
//   unload                executions queued are failed, the ones in flight aborted and answered;
//                         the host frees the device resources only once the actor says drained
//
// Virtual time: the caller lends its host side (npu_sim::Runtime::CurrentHostSide) in the message,
// and every host call the actor makes for that execution is charged to it, never to the worker
// that runs the handler. The caller makes no host call until it has its answer.
//
// Blocking work (Init's stages, freeing) stays on the calling host thread or fiber.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/system.h"
#include "base/status.h"
#include "npu_sim/runtime.h"

namespace npuflow::scheduler {

class DavinciModel;

// Host buffers of one staged execution: inputs copied in by the caller before it sends (the
// caller may reuse its own at once), outputs written by the device straight into the caller's
// buffers through a window the caller closes before it returns (npu_sim::HostWindow): nothing
// writes them after that, whatever became of the run. Owned by the tasks while they run.
// A run whose caller waits for it (no timeout: ModelActor's direct path) instead leaves its
// outputs in the instance's own blocks (D2H copies with data_in_place) and the caller reads them
// there after the answer (Runtime::ReadInPlace): the bytes cross between cores once, into the
// cache of the thread that reads them next. The instance stays the caller's until it says so
// (model_msg::OutputsRead), so no other run writes those blocks meanwhile. Outputs of less than
// 1 KiB in all are copied into the caller's buffers by the run instead: cheaper than that exchange.
struct Staging {
  std::vector<std::vector<std::uint8_t>> in;  // per input (empty: not staged on its own)
  // Host inputs whose blocks lie together in the input segment go in as one copy: the bytes of
  // [lowest block, end of the highest) with each input at its offset, into input `block_first`'s
  // block onwards (empty: none).
  std::vector<std::uint8_t> block;
  std::size_t block_first = 0;
  std::vector<void*> out;  // the caller's output buffers (null: not a host output)
  std::vector<std::uint64_t> out_bytes;
  npu_sim::HostWindow window;
  // Set by the model actor, before the answer, when the run succeeded with its outputs left in
  // place: the instance whose blocks hold them (-1: the outputs are in the caller's buffers).
  int read_in_place = -1;
};

// One execution as a message.
struct ExecRequest {
  // Per I/O slot: the caller's device address, or 0 for "the instance's own block" (host buffers).
  std::vector<std::uint64_t> io;
  std::shared_ptr<Staging> staging;       // host buffers (null: zero copy)
  std::optional<npu_sim::Stream> stream;  // async on this user stream: answered once submitted
  npu_sim::Timeout timeout;
  npu_sim::HostSide* host = nullptr;      // the caller's host side, lent until the answer
};
namespace model_msg {
// Ask<npu_sim::VTime>: answered with the run's virtual end (0 for a run queued on the caller's
// stream), which the caller merges into its host clock. A caller that saw the model's weights
// still streaming in when it sent waits for the load's verdict after the answer.
struct Execute {
  static constexpr std::string_view kKind = "Execute";
  ExecRequest req;
};
struct TimedOut {  // internal: ticket's timeout expired
  static constexpr std::string_view kKind = "TimedOut";
  std::uint64_t ticket = 0;
};
struct RunDone {  // internal: the device answered ticket's run
  static constexpr std::string_view kKind = "RunDone";
  std::uint64_t ticket = 0;
  StatusOr<npu_sim::VTime> end;
  int instance = -1;  // of a run its caller was answered for directly (ticket is then kAnswered)
  bool in_place = false;  // ... a failed one that was to leave its outputs in place
};
// From the caller of a run that left its outputs in place (Staging::read_in_place), once it has
// read them: the instance may run again.
struct OutputsRead {
  static constexpr std::string_view kKind = "OutputsRead";
  int instance = -1;
};
// Ask<void>, from a Run loop starting on `instance`: the loop uses the instance's blocks and
// execution stream outside the actor, so no run leaves its outputs in place there any more;
// answered once no caller is still reading outputs there.
struct ShareInstance {
  static constexpr std::string_view kKind = "ShareInstance";
  int instance = 0;
};
struct AcquireExclusive {  // Ask<void>: ParamInvalid while anything else runs
  static constexpr std::string_view kKind = "AcquireExclusive";
  npu_sim::HostSide* host = nullptr;
};
struct ReleaseExclusive {
  static constexpr std::string_view kKind = "ReleaseExclusive";
  npu_sim::HostSide* host = nullptr;
};
struct Unload {  // Ask<void>: answered once nothing of the model runs any more
  static constexpr std::string_view kKind = "Unload";
  npu_sim::HostSide* host = nullptr;
};
}  // namespace model_msg

using ModelMsg = std::variant<model_msg::Execute, model_msg::TimedOut, model_msg::RunDone, model_msg::OutputsRead,
                              model_msg::ShareInstance,
                              model_msg::AcquireExclusive, model_msg::ReleaseExclusive, model_msg::Unload>;

// Spawns the actor of `model` on its runtime's actor system. The model outlives every message
// the actor handles until Unload has been answered (DavinciModel::Unload waits for that).
actors::Address<ModelMsg> SpawnModelActor(DavinciModel& model);

}  // namespace npuflow::scheduler
