#include "actors/io_executor.h"

#include <pthread.h>

#include <exception>

#include "base/logging.h"

namespace npuflow::actors {

IoExecutor::IoExecutor(int threads) : threads_(threads < 0 ? 0 : threads) {}

IoExecutor::~IoExecutor() { Stop(); }

bool IoExecutor::Run(UniqueFunction<void()> job) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) {
    stats_.jobs_dropped += 1;
    lock.unlock();
    return false;  // `job` is destroyed here, unrun
  }
  if (threads_ == 0) {
    // Inline: counted as running, so a concurrent Stop waits for it like for a pooled job.
    ++running_;
    lock.unlock();
    RunOne(job);
    lock.lock();
    --running_;
    stats_.jobs_run += 1;
    idle_cv_.notify_all();
    return true;
  }
  if (pool_.empty()) {
    pool_.reserve(static_cast<std::size_t>(threads_));
    for (int i = 0; i < threads_; ++i) pool_.emplace_back([this] { Loop(); });
  }
  queue_.push_back(std::move(job));
  work_cv_.notify_one();
  return true;
}

void IoExecutor::RunOne(UniqueFunction<void()>& job) {
  try {
    job();
  } catch (const std::exception& e) {
    NPUFLOW_LOG_ERROR(kActors, "an I/O job threw: {}", e.what());
    std::lock_guard<std::mutex> lock(mu_);
    stats_.jobs_failed += 1;
  } catch (...) {
    NPUFLOW_LOG_ERROR(kActors, "an I/O job threw");
    std::lock_guard<std::mutex> lock(mu_);
    stats_.jobs_failed += 1;
  }
}

void IoExecutor::Loop() {
  ::pthread_setname_np(::pthread_self(), "npuflow-io");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;  // Stop drops what is still queued
    UniqueFunction<void()> job = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    RunOne(job);
    job = {};  // its captures (a file, a device mapping) go before the job counts as ended
    lock.lock();
    --running_;
    stats_.jobs_run += 1;
    idle_cv_.notify_all();
  }
}

void IoExecutor::Stop() {
  std::deque<UniqueFunction<void()>> dropped;
  std::vector<std::thread> pool;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      dropped.swap(queue_);
      stats_.jobs_dropped += dropped.size();
      work_cv_.notify_all();
    }
    idle_cv_.wait(lock, [&] { return running_ == 0; });
    pool.swap(pool_);
  }
  for (std::thread& t : pool) t.join();
  // `dropped` is destroyed here, outside the lock: a job's captures may send or free.
}

IoStats IoExecutor::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace npuflow::actors
