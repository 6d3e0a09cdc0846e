#include "base/timer.h"

namespace npuflow {

TimerQueue& TimerQueue::Process() {
  // A function-local static: anything that took it before it finished constructing (every
  // DeadlineTimer does) is destroyed before it, so no group outlives the thread.
  static TimerQueue queue;
  return queue;
}

TimerQueue::TimerQueue() : threads_started_(1), thread_([this] { Loop(); }) {}

TimerQueue::~TimerQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

TimerQueue::Group TimerQueue::NewGroup() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_group_++;
}

TimerQueue::Id TimerQueue::Schedule(Clock::time_point at, Group group, UniqueFunction<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  const Id id = next_id_++;
  // Only a new first deadline moves the thread's wake-up.
  const bool first = due_.empty() || at < due_.begin()->first.first;
  due_.emplace(std::make_pair(at, id), Entry{group, std::move(fn)});
  when_.emplace(id, at);
  if (first) cv_.notify_one();
  return id;
}

bool TimerQueue::Cancel(Id id, Group group) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return false;
  auto entry = due_.find(std::make_pair(it->second, id));
  if (entry->second.group != group) return false;
  due_.erase(entry);
  when_.erase(it);
  return true;
}

std::size_t TimerQueue::CancelGroup(Group group) {
  std::unique_lock<std::mutex> lock(mu_);
  std::size_t removed = 0;
  for (auto it = due_.begin(); it != due_.end();) {
    if (it->second.group != group) {
      ++it;
      continue;
    }
    when_.erase(it->first.second);
    it = due_.erase(it);
    ++removed;
  }
  if (std::this_thread::get_id() != thread_.get_id()) idle_cv_.wait(lock, [&] { return running_ != group; });
  return removed;
}

int TimerQueue::threads_started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_started_;
}

void TimerQueue::Loop() {
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
    Entry entry = std::move(first->second);
    when_.erase(first->first.second);
    due_.erase(first);
    running_ = entry.group;
    lock.unlock();
    entry.fn();
    entry.fn = {};  // what the callback captured goes before its group counts as idle
    lock.lock();
    running_ = 0;
    idle_cv_.notify_all();
  }
}

}  // namespace npuflow
