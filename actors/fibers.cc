#include "actors/fibers.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include <boost/context/detail/exception.hpp>
#include <boost/fiber/all.hpp>
#include <boost/fiber/protected_fixedsize_stack.hpp>
#include <fmt/format.h>

#include "actors/adaptive_wait.h"
#include "actors/future.h"

// GCC says __SANITIZE_ADDRESS__; clang 14 (the ASan tree's compiler) only __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define NPUFLOW_FIBERS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NPUFLOW_FIBERS_ASAN 1
#endif
#endif
#if defined(NPUFLOW_FIBERS_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace npuflow::actors {
namespace {

thread_local int tl_fiber_thread_depth = 0;

// protected_fixedsize_stack, recording the lowest address of the stack it gives a fiber.
//
// Why (AddressSanitizer builds only): Boost.Context does not tell ASan about fiber stacks, so a throw
// inside a fiber cannot unpoison the frames it unwinds (ASan: "ignoring requested
// __asan_handle_no_return"), and their stale redzones would be reported as errors by the next
// code to use that stack. The handler that catches unpoisons the free part of the stack itself,
// and a stack is unpoisoned before it is unmapped (its addresses may serve another fiber).
class RecordedStack {
 public:
  RecordedStack(std::size_t bytes, void** bottom) : inner_(bytes), bottom_(bottom) {}
  boost::context::stack_context allocate() {
    boost::context::stack_context sc = inner_.allocate();
    *bottom_ = static_cast<char*>(sc.sp) - sc.size;
    return sc;
  }
  void deallocate(boost::context::stack_context& sc) noexcept {
#if defined(NPUFLOW_FIBERS_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(static_cast<char*>(sc.sp) - sc.size, sc.size);
#endif
    inner_.deallocate(sc);
  }

 private:
  boost::fibers::protected_fixedsize_stack inner_;
  void** bottom_;
};

// After a throw was caught in a fiber: the stack below the caller's frame is free again.
[[gnu::noinline]] void UnpoisonFreeStack([[maybe_unused]] void* bottom) {
#if defined(NPUFLOW_FIBERS_ASAN)
  auto* frame = static_cast<char*>(__builtin_frame_address(0));
  if (bottom != nullptr && frame > bottom)
    ASAN_UNPOISON_MEMORY_REGION(bottom, static_cast<std::size_t>(frame - static_cast<char*>(bottom)));
#endif
}

constexpr std::size_t kMinStack = 16 * 1024;
constexpr std::size_t kMaxStack = 64 * 1024 * 1024;

Status RunBody(int i, const std::function<Status(int)>& body, void* stack_bottom) {
  try {
    return body(i);
  } catch (const boost::context::detail::forced_unwind&) {
    throw;  // Boost.Context unwinding a stack: not an error of the body
  } catch (const std::exception& e) {
    UnpoisonFreeStack(stack_bottom);
    return Status::Internal("fiber {} threw: {}", i, e.what());
  } catch (...) {
    UnpoisonFreeStack(stack_bottom);
    return Status::Internal("fiber {} threw a non-standard exception", i);
  }
}

// Runs fibers t, t + threads, t + 2 * threads, ... on the calling thread (or fiber) and joins them.
void RunShare(int t, int n, int threads, std::size_t stack_bytes, const std::function<Status(int)>& body,
              std::vector<Status>& results) {
  ScopedFiberThread mark;
  const auto mine = static_cast<std::size_t>((n - t + threads - 1) / threads);
  std::vector<boost::fibers::fiber> fibers;
  fibers.reserve(mine);
  std::vector<void*> bottoms(mine, nullptr);  // each fiber's stack, set when it is allocated
  for (int i = t; i < n; i += threads) {
    void** bottom = &bottoms[fibers.size()];
    try {
      fibers.emplace_back(std::allocator_arg, RecordedStack(stack_bytes, bottom), [&body, &results, i, bottom] {
        results[static_cast<std::size_t>(i)] = RunBody(i, body, *bottom);
      });
    } catch (const std::exception& e) {
      results[static_cast<std::size_t>(i)] =
          Status::MemoryAllocation("fiber {}: could not create it ({} bytes of stack): {}", i, stack_bytes, e.what());
    }
  }
  for (boost::fibers::fiber& f : fibers) f.join();
}

Status Summarize(const std::vector<Status>& results) {
  int failed = 0;
  const Status* first = nullptr;
  for (const Status& s : results) {
    if (s.ok()) continue;
    ++failed;
    if (first == nullptr) first = &s;
  }
  if (first == nullptr) return Status::Ok();
  const auto index = static_cast<int>(first - results.data());
  if (failed == 1) return first->WithContext(fmt::format("fiber {}", index));
  return first->WithContext(fmt::format("fiber {} (and {} more of {} fibers failed)", index, failed - 1,
                                        results.size()));
}

}  // namespace

namespace detail {

bool WaitSuspendsFiber() { return tl_fiber_thread_depth > 0 || InNonMainFiber(); }

}  // namespace detail

bool InFiber() { return detail::InNonMainFiber(); }

bool InFiberWait() { return detail::WaitSuspendsFiber(); }

namespace {
std::atomic<bool> adaptive_wait_enabled{true};
}  // namespace

void SetAdaptiveWaitEnabled(bool on) { adaptive_wait_enabled.store(on, std::memory_order_relaxed); }
bool AdaptiveWaitEnabled() { return adaptive_wait_enabled.load(std::memory_order_relaxed); }

void SpinPause(bool fiber) {
  if (fiber) {
    boost::this_fiber::yield();
  } else {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
}

ScopedFiberThread::ScopedFiberThread() { ++tl_fiber_thread_depth; }
ScopedFiberThread::~ScopedFiberThread() { --tl_fiber_thread_depth; }

Status RunFibers(int n, const FiberOptions& options, const std::function<Status(int)>& body) {
  if (n < 0) return Status::ParamInvalid("RunFibers: {} fibers: expected >= 0", n);
  if (options.threads < 1) return Status::ParamInvalid("RunFibers: {} threads: expected >= 1", options.threads);
  if (options.stack_bytes < kMinStack || options.stack_bytes > kMaxStack)
    return Status::ParamInvalid("RunFibers: a stack of {} bytes: expected {} .. {}", options.stack_bytes, kMinStack,
                                kMaxStack);
  if (!body) return Status::ParamInvalid("RunFibers: no body given");
  if (detail::InHandler()) return detail::WaitInHandlerError("RunFibers");
  if (n == 0) return Status::Ok();
  const int threads = std::min(options.threads, n);
  std::vector<Status> results(static_cast<std::size_t>(n));
  std::vector<std::thread> helpers;
  helpers.reserve(static_cast<std::size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(RunShare, t, n, threads, options.stack_bytes, std::cref(body), std::ref(results));
    } catch (const std::system_error& e) {
      for (int i = t; i < n; i += threads)
        results[static_cast<std::size_t>(i)] = Status::Failed("fiber {}: could not start host thread {}: {}", i, t,
                                                              e.what());
    }
  }
  RunShare(0, n, threads, options.stack_bytes, body, results);
  for (std::thread& h : helpers) h.join();
  return Summarize(results);
}

}  // namespace npuflow::actors
