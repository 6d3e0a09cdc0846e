// Internal to stress/: the state a stress run's clients, chaos drivers and monitor share.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/future.h"
#include "npu_sim/runtime.h"
#include "scheduler/session.h"
#include "stress/catalog.h"
#include "stress/options.h"
#include "stress/report.h"
#include "stress/rng.h"
#include "stress/storm.h"

namespace npuflow::stress::detail {

using Clock = std::chrono::steady_clock;

// Sleeps without holding the thread's other fibers: a fiber sleeps as a fiber.
void Nap(std::chrono::milliseconds ms);

// A graph the clients may run: a model's graph in the run's main session, a fork of it there, or
// the model in a session of its own (churn). Clients hold a reference while they use it.
struct Target {
  enum class Kind : std::uint8_t { kPrimary, kFork, kSession };
  std::shared_ptr<scheduler::Session> session;
  std::uint32_t graph = 0;
  int model = 0;
  Kind kind = Kind::kPrimary;
};

// Items leased one caller at a time. A caller that finds none waits on a future: a fiber yields,
// a thread blocks; no OS lock is held across the wait.
template <typename T>
class LeasePool {
 public:
  void Add(T item) { Release(std::move(item)); }
  T Acquire() {
    for (;;) {
      actors::Future<Status> wake;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!free_.empty()) {
          T item = std::move(free_.back());
          free_.pop_back();
          return item;
        }
        waiters_.emplace_back();
        wake = waiters_.back().GetFuture();
      }
      (void)wake.Get();
    }
  }
  void Release(T item) {
    actors::Promise<Status> waiter;
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(std::move(item));
      if (!waiters_.empty()) {
        waiter = std::move(waiters_.front());
        waiters_.pop_front();
      }
    }
    if (waiter.valid()) waiter.Set(Status::Ok());
  }
  std::vector<T> TakeAll() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(free_, {});
  }

 private:
  std::mutex mu_;
  std::vector<T> free_;
  std::deque<actors::Promise<Status>> waiters_;
};

// One request while it runs (the monitor's view).
struct InFlight {
  int client = 0;
  int model = 0;
  Action action = Action::kRunGraph;
  Clock::time_point start;
  bool hung = false;  // counted as a hang by the monitor
};

// How a finished request ended.
struct Outcome {
  std::uint64_t request = 0;
  int client = 0;
  int model = 0;
  Action action = Action::kRunGraph;
  double ms = 0;
  Status status;         // the runtime's answer
  Status wrong;          // set: the outputs differ from the expected ones (how)
};

class StormState {
 public:
  StormState(const StressOptions& options, std::vector<StressModel>& models, npu_sim::Runtime& rt);

  const StressOptions& options;
  std::vector<StressModel>& models;
  npu_sim::Runtime& rt;
  npu_sim::Timeout timeout;  // per execution, for the paths that take one
  Clock::time_point started;
  std::atomic<bool> stop{false};

  // ---- targets
  void Publish(std::shared_ptr<Target> target);
  // Takes it out of the table (clients no longer pick it); false if it was not there.
  bool Unpublish(const std::shared_ptr<Target>& target);
  std::shared_ptr<Target> Pick(int model, Rng& rng) const;
  std::vector<std::shared_ptr<Target>> TargetsOf(int model) const;
  std::uint32_t NextGraphId() { return next_graph_.fetch_add(1); }

  // ---- device buffers the run owns
  std::vector<std::vector<std::vector<npu_sim::DevicePtr>>> inputs;  // [model][set][input]
  LeasePool<npu_sim::Stream> streams;

  // ---- requests
  // A ticket for the next request, or none once the run's bound is reached or it is stopping.
  std::optional<std::uint64_t> NextTicket();
  void Begin(std::uint64_t request, const InFlight& what);
  // The request's clock starts again: the time it waited for the run's own resources (a user
  // stream of the pool) is not the runtime's.
  void Restart(std::uint64_t request);
  void End(const Outcome& outcome);
  std::uint64_t finished() const { return finished_.load(std::memory_order_acquire); }
  std::uint64_t in_flight() const;
  // The monitor: marks requests older than hang_ms as hangs (once each); returns how many it marked.
  int MarkHangs();
  Progress Snapshot() const;
  // Into the report: tallies, failures, latency.
  void Fill(StressReport& report) const;
  void AddFailure(Failure failure);
  // Counters of the chaos drivers (churn actions, faults), reported as they are.
  void Count(std::map<std::string, std::uint64_t> StressReport::*field, const std::string& key, std::uint64_t n = 1);
  std::string ErrorKind(const Status& status) const;
  bool Expected(const std::string& kind, int model) const;

 private:
  mutable std::mutex targets_mu_;
  std::vector<std::vector<std::shared_ptr<Target>>> targets_;  // per model
  std::atomic<std::uint32_t> next_graph_{1};

  std::atomic<std::uint64_t> tickets_{0};
  std::atomic<std::uint64_t> finished_{0};
  mutable std::mutex mu_;  // everything below
  std::unordered_map<std::uint64_t, InFlight> in_flight_;
  StressReport tally_;  // counts, errors, by_action, by_model, failures, faults, churn
  std::vector<double> latencies_ms_;
  std::optional<Failure> slowest_;
  double slowest_ms_ = 0;
};

// The options every session of the run is made with.
scheduler::Options StormSessionOptions(const StressOptions& options);
// Adds the model to a session under `graph`: its source graph, or its compiled model.
Status AddModel(scheduler::Session& session, std::uint32_t graph, const StressModel& model);

// The four actions, against a target (requests.cc).
StatusOr<std::vector<graph::Tensor>> RunAction(StormState& state, std::uint64_t request, Action action,
                                               const Target& target, int set);

// Churn and fault injection (chaos.cc). Each step is one action; the drivers call them as the
// run's requests finish.
void ChurnStep(StormState& state, Rng& rng);
void FaultStep(StormState& state, Rng& rng);
// Retires what churn left (sessions of their own, forks): before the leak check.
Status EndChurn(StormState& state);

}  // namespace npuflow::stress::detail
