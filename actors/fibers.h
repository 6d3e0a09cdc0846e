// Fibers: many host clients (generations, sessions) on a fixed set of OS threads.
//
// RunFibers(n, {.threads = T}, body) runs body(0) .. body(n - 1) as n Boost.Fiber fibers on T OS
// threads, the caller's thread included (T - 1 new ones), and returns when all have ended. A
// fiber that waits (a Future, a weight region's load, a fiber mutex) suspends itself and lets the
// other fibers of its thread run, so 64 generations need 2 threads, not 64.
//
//   Status s = actors::RunFibers(64, {.threads = 2}, [&](int i) -> Status {
//     return DoGeneration(i);  // waits on futures: yields to the thread's other fibers
//   });
//
// Guarantees:
//   - Fiber i runs on thread i % T for its whole life (thread 0 is the caller's): fibers never
//     migrate, so a fiber's sends keep their order (order is per sending thread, docs/actors.md).
//   - Each fiber has its own stack of options.stack_bytes with a guard page below it: an overflow
//     is a clean SIGSEGV at the guard, never a write into another fiber's memory.
//   - body's error, or an exception it throws, becomes that fiber's Status; the others still run.
//     The result is OK, or the error of the lowest-numbered failed fiber, naming it.
//   - While RunFibers runs, a wait in the main context of one of its threads suspends that context
//     (the thread's fibers keep running) instead of blocking the thread.
//
// Rule: a fiber must not hold a std::mutex (or any OS-level lock) across a wait. The wait yields to
// another fiber of the same thread, which may take the same mutex: a self-deadlock of the thread.
// Hold fiber mutexes, or release the lock before waiting. (A boost::fibers::condition_variable_any
// over a std::mutex keeps the rule: it releases the mutex before the fiber sleeps; actors/future.h.)
#pragma once

#include <cstddef>
#include <functional>

#include "base/status.h"

namespace npuflow::actors {

struct FiberOptions {
  int threads = 1;                        // OS threads running the fibers, the caller's included
  std::size_t stack_bytes = 256 * 1024;   // each fiber's stack (16 KiB .. 64 MiB), plus a guard page
};

// Whether the caller runs inside a Boost.Fiber fiber (not a thread's main context).
bool InFiber();

// Marks the current thread as a fiber thread while it lives: waits in its main context suspend the
// main context (its fibers run meanwhile) instead of blocking the thread. For code that creates
// its own boost::fibers::fiber objects; RunFibers marks its threads itself. Scopes nest.
class ScopedFiberThread {
 public:
  ScopedFiberThread();
  ~ScopedFiberThread();
  ScopedFiberThread(const ScopedFiberThread&) = delete;
  ScopedFiberThread& operator=(const ScopedFiberThread&) = delete;
};

// Runs body(i) for i in [0, n) as n fibers on options.threads threads (at most n are used), and
// waits for all of them. Errors: ParamInvalid for n < 0, threads < 1, a stack size out of range or
// an empty body; Internal when called inside an actor's handler (a handler never waits).
Status RunFibers(int n, const FiberOptions& options, const std::function<Status(int)>& body);

}  // namespace npuflow::actors
