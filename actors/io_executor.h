// IoExecutor: where blocking file work (reads, hashing, decryption) runs, so that the workers
// that run handlers (and the simulated device's kernels) never wait behind a pread.
//
//   IoExecutor io(2);                       // two dedicated I/O threads, started by the first job
//   io.Run([file, self] { ...pread...; self.Send(ChunkDone{...}); });
//   io.Stop();                              // also done by the destructor
//
// Jobs run on `threads` dedicated OS threads, never on a oneTBB worker. Why not a second oneTBB
// task_arena: oneTBB's workers are one process-wide pool whose size is the *smallest*
// max_allowed_parallelism of all live global_controls. When another control in the process (a
// second actors::System, the weight converter, a caller's) holds it below compute + I/O slots, a
// worker blocked in the I/O arena is a worker the compute arena does not get back; with one
// compute worker, kernels then stall for the whole read (measured: docs/actors.md, "I/O jobs").
// Dedicated threads cannot be taken from the compute arena, whatever else the process does.
//
// threads == 0: a job runs inline, on the caller's thread, before Run returns (deterministic
// mode: the order of everything a job sends is then a function of the program, not of I/O
// timing). A job reports back by sending a message; it must not wait on an actor's reply (an I/O
// thread waiting on the system it serves could deadlock it) and must end on its own: Stop waits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "base/unique_function.h"

namespace npuflow::actors {

struct IoStats {
  std::uint64_t jobs_run = 0;
  std::uint64_t jobs_dropped = 0;  // queued when Stop came, destroyed without running
  std::uint64_t jobs_failed = 0;   // threw (the exception is logged)
};

class IoExecutor {
 public:
  explicit IoExecutor(int threads);
  ~IoExecutor();
  IoExecutor(const IoExecutor&) = delete;
  IoExecutor& operator=(const IoExecutor&) = delete;

  // Queues `job` (FIFO; with one thread, jobs run in the order queued). Returns false once Stop
  // has begun: the job is then destroyed without running. One lock per job: a job is a file chunk
  // (megabytes), not a message.
  bool Run(UniqueFunction<void()> job);

  // Jobs not started yet are destroyed without running; running jobs (inline ones too) finish
  // first; the threads exit. Idempotent; later Runs return false.
  void Stop();

  int threads() const { return threads_; }
  IoStats Stats() const;

 private:
  void Loop();
  void RunOne(UniqueFunction<void()>& job);

  const int threads_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // a job was queued, or Stop began
  std::condition_variable idle_cv_;  // a job ended
  std::deque<UniqueFunction<void()>> queue_;
  int running_ = 0;
  bool stopping_ = false;
  IoStats stats_;
  std::vector<std::thread> pool_;  // started by the first Run, so a system that never does I/O has none
};

}  // namespace npuflow::actors
