// Future<T> / Promise<T>: the reply channel of Ask.
//
// T is status-like: Status or StatusOr<R>, so that every way a future can end (value, error,
// dropped promise, shutdown) is a value of T. A Future is waited on from a plain thread (blocks
// the thread) or from a Boost.Fiber fiber (yields to the thread's other fibers; so does the main
// context of a thread running fibers, see actors/fibers.h), and takes one
// continuation (Then) that runs on the thread that completes it.
//
// Invariants: a core is completed at most once (TryComplete claims it); the continuation, the
// thread waiter and the fiber waiter are each registered at most once, and whoever sees both
// "ready" and "registered" in the state word runs or wakes them, exactly once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include <boost/fiber/condition_variable.hpp>
#include <boost/fiber/context.hpp>

#include "base/status.h"
#include "base/unique_function.h"

namespace npuflow::actors {

template <typename T>
class Future;
template <typename T>
class Promise;

template <typename T>
struct IsStatusOr : std::false_type {};
template <typename R>
struct IsStatusOr<StatusOr<R>> : std::true_type {};
template <typename T>
inline constexpr bool kIsStatusLike = std::is_same_v<T, Status> || IsStatusOr<T>::value;

namespace detail {

// True when the caller runs inside a Boost.Fiber fiber other than the thread's main context.
bool InNonMainFiber();
// True when a wait here suspends a fiber context rather than blocking the OS thread: inside a
// fiber, or in the main context of a thread running fibers (actors/fibers.h), whose fibers must
// keep running while it waits.
bool WaitSuspendsFiber();

// True while an actor's handler (or a continuation it runs) executes on this thread. Such code
// runs on a oneTBB worker and must never wait: a blocking wait there holds a worker that the
// system needs (and deadlocks outright with one worker, as in deterministic mode).
bool InHandler();
// The name of the actor whose handler runs on this thread ("" outside handlers).
std::string CurrentActorName();
// The error a wait on a future that is not ready yet gets inside a handler; names the actor.
Status WaitInHandlerError(const char* call);

// The type-erased part of a future's shared state, as seen by the actor runtime: it can fail the
// future without knowing T, and check a reply's type.
class CoreBase {
 public:
  explicit CoreBase(const std::type_info& value_type) : value_type_(value_type) {}
  virtual ~CoreBase() = default;
  CoreBase(const CoreBase&) = delete;
  CoreBase& operator=(const CoreBase&) = delete;

  // Completes with `status` unless already completed. Returns whether this call completed it.
  virtual bool TryFail(Status status) = 0;

  bool ready() const { return (state_.load(std::memory_order_acquire) & kReady) != 0; }
  // Whether anyone besides the caller's one reference still listens (a future, or a continuation,
  // which lives in the state itself): a completer holding the last reference of a state without a
  // continuation talks to nobody.
  bool shared() const {
    return refs_.load(std::memory_order_acquire) > 1 || (state_.load(std::memory_order_acquire) & kContinuation) != 0;
  }
  const std::type_info& value_type() const { return value_type_; }

  void AddRef() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 protected:
  static constexpr std::uint32_t kClaimed = 1;        // a completer owns the value slot
  static constexpr std::uint32_t kReady = 2;          // the value is published
  static constexpr std::uint32_t kContinuation = 4;   // a continuation is registered
  static constexpr std::uint32_t kThreadWaiter = 8;   // a thread may sleep on cv_
  static constexpr std::uint32_t kFiberWaiter = 16;   // a fiber may sleep on fiber_cv_

  bool Claim() { return (state_.fetch_or(kClaimed, std::memory_order_acq_rel) & kClaimed) == 0; }

  // After the value is written: publish it, then run the continuation / wake the waiters that
  // registered before the publication. Those registering after it see kReady and don't sleep.
  void Publish() {
    std::uint32_t prev = state_.fetch_or(kReady, std::memory_order_acq_rel);
    if (prev & (kThreadWaiter | kFiberWaiter)) {
      // A waiter that registered checks ready() under mu_ until it sleeps: taking mu_ here means
      // it is either asleep (and notified below) or has not checked yet (and sees kReady).
      { std::lock_guard<std::mutex> lock(mu_); }
      if (prev & kThreadWaiter) cv_.notify_all();
      if (prev & kFiberWaiter) fiber_cv_->notify_all();
    }
    if (prev & kContinuation) RunContinuation();
  }

  virtual void RunContinuation() = 0;

  // Blocks until ready or until `deadline`; returns whether it is ready.
  bool WaitUntil(std::optional<std::chrono::steady_clock::time_point> deadline) {
    if (ready()) return true;
    if (WaitSuspendsFiber()) {
      // Only the future's owner waits, one wait at a time, so the first wait makes the fiber
      // waiter without a race; the completer reads it only after it sees kFiberWaiter.
      if (!fiber_cv_) fiber_cv_.emplace();
      state_.fetch_or(kFiberWaiter, std::memory_order_acq_rel);
      // The fiber condition variable waits on the plain mutex: it is held only for the check, and
      // the completer (a worker thread) then never enters Boost.Fiber's own mutex, whose contended
      // lock would suspend the worker in a scheduler of its own.
      std::unique_lock<std::mutex> lock(mu_);
      while (!ready()) {
        if (!deadline) {
          fiber_cv_->wait(lock);
        } else if (fiber_cv_->wait_until(lock, *deadline) == boost::fibers::cv_status::timeout) {
          return ready();
        }
      }
      return true;
    }
    state_.fetch_or(kThreadWaiter, std::memory_order_acq_rel);
    std::unique_lock<std::mutex> lock(mu_);
    while (!ready()) {
      if (!deadline) {
        cv_.wait(lock);
      } else if (cv_.wait_until(lock, *deadline) == std::cv_status::timeout) {
        return ready();
      }
    }
    return true;
  }

  std::atomic<std::uint32_t> state_{0};
  std::atomic<std::uint32_t> refs_{1};

 private:
  const std::type_info& value_type_;
  std::mutex mu_;  // guards nothing; orders a waiter's last check of ready() before its sleep
  std::condition_variable cv_;
  std::optional<boost::fibers::condition_variable_any> fiber_cv_;  // made in place by the first fiber wait
};

// An owning, intrusive reference to a core.
class CoreRef {
 public:
  CoreRef() = default;
  explicit CoreRef(CoreBase* core) : core_(core) {}  // adopts one reference
  CoreRef(const CoreRef& o) : core_(o.core_) { if (core_) core_->AddRef(); }
  CoreRef(CoreRef&& o) noexcept : core_(std::exchange(o.core_, nullptr)) {}
  CoreRef& operator=(CoreRef o) noexcept { std::swap(core_, o.core_); return *this; }
  ~CoreRef() { if (core_) core_->Release(); }
  CoreBase* get() const { return core_; }
  CoreBase* operator->() const { return core_; }
  explicit operator bool() const { return core_ != nullptr; }
  void reset() { CoreRef().swap(*this); }
  void swap(CoreRef& o) noexcept { std::swap(core_, o.core_); }

 private:
  CoreBase* core_ = nullptr;
};

template <typename T>
class Core final : public CoreBase {
 public:
  Core() : CoreBase(typeid(T)) {}

  bool TryComplete(T value) {
    if (!Claim()) return false;
    value_.emplace(std::move(value));
    Publish();
    return true;
  }
  bool TryFail(Status status) override {
    if (status.ok()) status = Status::Internal("future failed with an OK status");
    return TryComplete(T(std::move(status)));
  }

  // Precondition: ready().
  T Take() { return std::move(*value_); }
  const T& Peek() const { return *value_; }

  bool Wait(std::optional<std::chrono::steady_clock::time_point> deadline) { return WaitUntil(deadline); }

  // Registers the one continuation; runs it now if the value is already there.
  void SetContinuation(UniqueFunction<void(T&&)> fn) {
    continuation_ = std::move(fn);
    std::uint32_t prev = state_.fetch_or(kContinuation, std::memory_order_acq_rel);
    if (prev & kReady) RunContinuation();
  }

 private:
  void RunContinuation() override {
    auto fn = std::move(continuation_);
    fn(std::move(*value_));
  }
  std::optional<T> value_;
  UniqueFunction<void(T&&)> continuation_;
};

}  // namespace detail

template <typename T>
class Future {
  static_assert(kIsStatusLike<T>, "Future<T>: T must be Status or StatusOr<R>");

 public:
  using value_type = T;

  Future() = default;
  Future(Future&&) noexcept = default;
  Future& operator=(Future&&) noexcept = default;
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  // A future that is already complete.
  static Future Ready(T value) {
    Promise<T> p;
    Future f = p.GetFuture();
    p.Set(std::move(value));
    return f;
  }

  bool valid() const { return static_cast<bool>(core_); }
  bool IsReady() const { return core_ && core_->ready(); }

  // Blocks (a thread) or yields (a fiber) until the value is there, and takes it. An invalid
  // future (default-constructed, or already consumed) yields a ParamInvalid error. Inside an
  // actor's handler a future that is not ready is an Internal error, not a wait (the future stays
  // valid: chain it with Context::Then).
  T Get() {
    if (!core_) return T(Status::ParamInvalid("Future::Get on an invalid (empty or consumed) future"));
    if (!core_->ready() && detail::InHandler()) return T(detail::WaitInHandlerError("Future::Get"));
    core()->Wait(std::nullopt);
    T value = core()->Take();
    core_.reset();
    return value;
  }

  // Waits at most `timeout`. Returns whether the value is there (then Get does not block).
  // Inside an actor's handler it never waits: it only says whether the value is there.
  template <typename Rep, typename Period>
  bool WaitFor(std::chrono::duration<Rep, Period> timeout) {
    if (!core_) return false;
    if (detail::InHandler()) return core_->ready();
    return core()->Wait(std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout));
  }

  // Get with a time limit: a Timeout error if the value is not there in time (the future is
  // then still valid and may be waited on again).
  template <typename Rep, typename Period>
  T GetFor(std::chrono::duration<Rep, Period> timeout) {
    if (core_ && !core_->ready() && detail::InHandler()) return T(detail::WaitInHandlerError("Future::GetFor"));
    if (!WaitFor(timeout)) {
      if (!core_) return T(Status::ParamInvalid("Future::GetFor on an invalid future"));
      return T(Status::Timeout("no reply within {} ms",
                               std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()));
    }
    return Get();
  }

  // Chains `fn(T&&) -> U` (U status-like, or void for Status). It runs on the thread that
  // completes this future, or now if it is complete: it must not block. An exception from `fn`
  // becomes an Internal error of the returned future. Consumes this future.
  template <typename F>
  auto Then(F&& fn);

  // Runs `fn(T&&)` (returning void) where Then would, with no future for its result: for a
  // continuation whose outcome nobody waits on, one shared state fewer than Then (an allocation
  // and a mutex/condition-variable pair per use, on hot paths such as one per execution). An
  // exception from `fn` is dropped, as Then's would be with its future discarded. Consumes this
  // future.
  template <typename F>
  void OnComplete(F&& fn);

 private:
  template <typename>
  friend class Promise;
  explicit Future(detail::CoreRef core) : core_(std::move(core)) {}
  detail::Core<T>* core() const { return static_cast<detail::Core<T>*>(core_.get()); }
  detail::CoreRef core_;
};

template <typename T>
class Promise {
  static_assert(kIsStatusLike<T>, "Promise<T>: T must be Status or StatusOr<R>");

 public:
  Promise() : core_(new detail::Core<T>()) {}
  explicit Promise(detail::CoreRef core) : core_(std::move(core)) {}
  Promise(Promise&&) noexcept = default;
  Promise& operator=(Promise&& o) noexcept {
    if (this != &o) {
      Abandon();
      core_ = std::move(o.core_);
    }
    return *this;
  }
  // A promise dropped without a value fails its future: nobody waits forever.
  ~Promise() { Abandon(); }

  Future<T> GetFuture() { return Future<T>(core_); }

  // Completes the future. Returns false if it was already completed.
  bool Set(T value) {
    return core_ && static_cast<detail::Core<T>*>(core_.get())->TryComplete(std::move(value));
  }
  bool Fail(Status status) { return core_ && core_->TryFail(std::move(status)); }
  bool valid() const { return static_cast<bool>(core_); }

  // Hands the shared state to a completer that fails it by itself if dropped (the actor
  // runtime's envelope); this promise is left empty.
  detail::CoreRef ReleaseCore() { return std::move(core_); }

 private:
  void Abandon() {
    if (core_) core_->TryFail(Status::Aborted("promise dropped without a value (broken promise)"));
    core_.reset();
  }
  detail::CoreRef core_;
};

template <typename T>
template <typename F>
auto Future<T>::Then(F&& fn) {
  using Raw = std::invoke_result_t<F, T&&>;
  using U = std::conditional_t<std::is_void_v<Raw>, Status, Raw>;
  static_assert(kIsStatusLike<U>, "Then: the continuation must return void, Status or StatusOr<R>");
  Promise<U> next;
  Future<U> result = next.GetFuture();
  if (!core_) {
    next.Fail(Status::ParamInvalid("Future::Then on an invalid future"));
    return result;
  }
  detail::Core<T>* c = core();
  c->SetContinuation([next = std::move(next), fn = std::forward<F>(fn)](T&& value) mutable {
    try {
      if constexpr (std::is_void_v<Raw>) {
        fn(std::move(value));
        next.Set(Status::Ok());
      } else {
        next.Set(fn(std::move(value)));
      }
    } catch (const std::exception& e) {
      next.Fail(Status::Internal("future continuation threw: {}", e.what()));
    } catch (...) {
      next.Fail(Status::Internal("future continuation threw a non-standard exception"));
    }
  });
  core_.reset();
  return result;
}

template <typename T>
template <typename F>
void Future<T>::OnComplete(F&& fn) {
  static_assert(std::is_void_v<std::invoke_result_t<F, T&&>>, "OnComplete: the continuation must return void");
  if (!core_) return;
  core()->SetContinuation([fn = std::forward<F>(fn)](T&& value) mutable {
    try {
      fn(std::move(value));
    } catch (...) {
      // Nobody listens for the outcome (see above).
    }
  });
  core_.reset();
}

}  // namespace npuflow::actors
