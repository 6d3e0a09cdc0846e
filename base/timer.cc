#include "base/timer.h"

namespace npuflow {

DeadlineTimer::DeadlineTimer() : thread_([this] { Loop(); }) {}

DeadlineTimer::~DeadlineTimer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

DeadlineTimer::Id DeadlineTimer::Schedule(Clock::duration delay, UniqueFunction<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  const Id id = next_id_++;
  const Clock::time_point at = Clock::now() + delay;
  due_.emplace(std::make_pair(at, id), std::move(fn));
  when_.emplace(id, at);
  cv_.notify_all();
  return id;
}

bool DeadlineTimer::Cancel(Id id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return false;
  due_.erase(std::make_pair(it->second, id));
  when_.erase(it);
  return true;
}

void DeadlineTimer::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto first = due_.begin();
    // A copy: Cancel may erase the entry while this thread waits.
    const Clock::time_point deadline = first->first.first;
    if (Clock::now() < deadline) {
      cv_.wait_until(lock, deadline);
      continue;
    }
    UniqueFunction<void()> fn = std::move(first->second);
    when_.erase(first->first.second);
    due_.erase(first);
    lock.unlock();
    fn();
    lock.lock();
  }
}

}  // namespace npuflow
