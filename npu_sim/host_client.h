// Host clients: who owns a piece of host virtual time.
//
// Every host API call that reaches a device advances a host clock by the chip's launch latency,
// and every synchronize merges the device's end time into it. That clock belongs to the client
// making the calls, not to whichever OS thread happens to run them:
//   - a plain host thread has one (its trace track is "host thread N"), as before;
//   - each Boost.Fiber fiber has its own ("host fiber N"), so K generations as K fibers on one
//     thread keep K clocks;
//   - an explicit HostClient (a Session, a Run loop, the weight loader, a generation) is charged
//     for every call made while a ScopedHostClient names it, on any thread or worker.
//
//   npu_sim::HostClient loader("weight loader");
//   {
//     npu_sim::ScopedHostClient scope(loader);  // calls in this scope are the loader's
//     rt->Submit(stream, tasks);
//   }
//
// A HostClient is used by one context at a time (a scope on one thread, then maybe another);
// it is not shared between threads concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "npu_sim/task.h"
#include "npu_sim/trace.h"

namespace npuflow::npu_sim {

// One client's host side, for one runtime: its clock and its trace track per device.
struct HostSide {
  std::uint64_t runtime = 0;  // the runtime this state belongs to (another one starts it afresh)
  VTime clock = 0;
  std::vector<TraceTrack*> tracks;  // per device, created on first traced call
  std::string name;                 // the trace track's name; empty: numbered by the runtime
  std::uint32_t race_agent = 0xFFFFFFFFu;  // the race detector's agent for this client (none yet)
};

class HostClient {
 public:
  explicit HostClient(std::string name) { side_.name = std::move(name); }
  HostClient(const HostClient&) = delete;
  HostClient& operator=(const HostClient&) = delete;

  const std::string& name() const { return side_.name; }
  // The clock, for the runtime it was last used with (0 before any call).
  VTime clock() const { return side_.clock; }
  // Moves the clock forward to `t` (a reply's time, a message's stamp); never backward.
  void Merge(VTime t) {
    if (t > side_.clock) side_.clock = t;
  }

 private:
  friend class Runtime;
  friend class ScopedHostClient;
  HostSide side_;
};

// Charges the host calls of the current thread (or fiber) to `client` while it lives. Scopes
// nest; the innermost wins. A scope opened in a fiber is that fiber's only: the other fibers of
// its thread do not see it while it is suspended.
class ScopedHostClient {
 public:
  explicit ScopedHostClient(HostClient& client);
  // A host side lent by a caller that waits for the answer (Runtime::CurrentHostSide): an actor
  // acting for that caller charges the caller's clock and trace track, never a worker's.
  explicit ScopedHostClient(HostSide& side);
  ~ScopedHostClient();
  ScopedHostClient(const ScopedHostClient&) = delete;
  ScopedHostClient& operator=(const ScopedHostClient&) = delete;

 private:
  HostSide* previous_;
};

}  // namespace npuflow::npu_sim
