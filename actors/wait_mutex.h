// WaitMutex: a mutex whose waiters wait the way futures do: a plain thread blocks, a Boost.Fiber
// fiber yields to its thread's other fibers. For host-side state held across a wait on an actor
// (a Session's graph while it builds or loads): with std::mutex, a fiber that holds it and yields
// in a Future::Get lets another fiber of the same thread block that whole thread on the lock, and
// the first fiber never resumes.
//
//   actors::WaitMutex mu;
//   std::lock_guard<actors::WaitMutex> lock(mu);   // BasicLockable
//
// Ownership passes straight from unlock to the first waiter (FIFO), so waiters are served in
// arrival order. Not for actor handlers, which must not wait at all (there, a contended lock
// falls back to spinning on the hand-over, which holds a worker).
#pragma once

#include <deque>
#include <mutex>
#include <thread>

#include "actors/future.h"

namespace npuflow::actors {

class WaitMutex {
 public:
  void lock() {
    Future<Status> handed;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!held_) {
        held_ = true;
        return;
      }
      Promise<Status> p;
      handed = p.GetFuture();
      waiters_.push_back(std::move(p));
    }
    if (detail::InHandler()) {
      while (!handed.IsReady()) std::this_thread::yield();
    }
    (void)handed.Get();  // unlock handed the mutex over
  }

  void unlock() {
    Promise<Status> next;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (waiters_.empty()) {
        held_ = false;
        return;
      }
      next = std::move(waiters_.front());
      waiters_.pop_front();
    }
    next.Set(Status::Ok());
  }

 private:
  std::mutex mu_;
  bool held_ = false;
  std::deque<Promise<Status>> waiters_;
};

}  // namespace npuflow::actors
