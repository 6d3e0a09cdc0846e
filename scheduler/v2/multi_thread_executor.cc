// The multi-thread executor. Readiness is the topological executors' (counters reset when they
// reach 0), decremented atomically; ready nodes go to a oneTBB task group in the executor's arena,
// or to the memory / launch lane: a queue drained by one task at a time (whoever moves its count
// from 0 to 1 starts the drain), so a lane's kernels never overlap and keep their ready order.
#include <atomic>
#include <mutex>

#include <oneapi/tbb/concurrent_queue.h>
#include <oneapi/tbb/task_group.h>

#include "scheduler/v2/executors.h"

namespace npuflow::v2 {

namespace {

struct Lane {
  tbb::concurrent_queue<std::uint32_t> queue;
  std::atomic<std::int64_t> pending{0};
};

class MultiThreadRun {
 public:
  MultiThreadRun(ExecutionData& d, const ExecutorSubscriber* sub, bool launch_lane, tbb::task_group& tg)
      : d_(d), sub_(sub), launch_lane_(launch_lane), tg_(tg), iteration_(++d.run_state().iteration),
        sections_(d.critical_sections() > 0 ? std::make_unique<std::mutex[]>(d.critical_sections()) : nullptr) {}

  void Start() {
    Notify(ExecutorEvent::kModelStart, nullptr, exe::kKernelSuccess);
    for (std::uint32_t r : d_.roots) Dispatch(r);
  }

  // After the task group is done.
  Status Finish() {
    d_.RestoreCounters();
    if (failed_.load(std::memory_order_acquire)) return std::move(failure_);
    Notify(ExecutorEvent::kModelEnd, nullptr, exe::kKernelSuccess);
    return Status::Ok();
  }

 private:
  void Notify(ExecutorEvent event, const exe::KernelContext* node, std::uint32_t rc) {
    if (sub_) sub_->callback(sub_->arg, ExecutorEventInfo{event, d_.node_count(), iteration_, node, rc});
  }

  void Dispatch(std::uint32_t id) {
    switch (d_.tags[id]) {
      case exe::KernelTag::kMemory:
        Enqueue(memory_, id);
        return;
      case exe::KernelTag::kLaunch:
        if (launch_lane_) {
          Enqueue(launch_, id);
          return;
        }
        break;
      case exe::KernelTag::kNormal:
        break;
    }
    tg_.run([this, id] { RunNode(id); });
  }

  void Enqueue(Lane& lane, std::uint32_t id) {
    lane.queue.push(id);
    if (lane.pending.fetch_add(1, std::memory_order_acq_rel) == 0) tg_.run([this, &lane] { Drain(lane); });
  }

  // Each count was added after its push, so every pop below finds an item.
  void Drain(Lane& lane) {
    do {
      std::uint32_t id = 0;
      while (!lane.queue.try_pop(id)) {
      }
      RunNode(id);
    } while (lane.pending.fetch_sub(1, std::memory_order_acq_rel) - 1 > 0);
  }

  void RunNode(std::uint32_t id) {
    if (failed_.load(std::memory_order_acquire)) return;  // draining after a failure
    const ExecNode& node = d_.nodes[id];
    const std::int32_t section = d_.critical_section[id];
    std::uint32_t rc;
    {
      std::unique_lock<std::mutex> lock;
      if (section >= 0) lock = std::unique_lock<std::mutex>(sections_[section]);
      Notify(ExecutorEvent::kExecuteStart, node.ctx, exe::kKernelSuccess);
      rc = node.fn(node.ctx);
      Notify(ExecutorEvent::kExecuteEnd, node.ctx, rc);
    }
    if (rc != exe::kKernelSuccess) [[unlikely]] {
      Fail(d_.NodeFailure(id, rc));
      return;
    }
    std::uint32_t group = d_.group_begin[id];
    if (d_.kinds[id] == exe::NodeKind::kSwitch) [[unlikely]] {
      const std::uint64_t branch = node.ctx->output(0).word();
      if (branch >= static_cast<std::uint64_t>(d_.branches[id])) {
        Fail(Status::Internal("node '{}' ({}): picked branch {} of {}", node.ctx->node->name, node.ctx->node->kernel,
                              branch, d_.branches[id]));
        return;
      }
      group += static_cast<std::uint32_t>(branch);
    }
    for (std::uint32_t k = d_.group_offset[group], end = d_.group_offset[group + 1]; k < end; ++k) {
      const std::uint32_t s = d_.succ[k];
      std::atomic_ref<std::int32_t> count(d_.counter[s]);
      if (count.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        count.store(d_.init_counter[s], std::memory_order_relaxed);  // before s can run, so before its next decrement
        Dispatch(s);
      }
    }
  }

  void Fail(Status status) {
    std::lock_guard<std::mutex> lock(fail_mu_);
    if (failed_.load(std::memory_order_relaxed)) return;  // the first failure is the one returned
    failure_ = std::move(status);
    failed_.store(true, std::memory_order_release);
  }

  ExecutionData& d_;
  const ExecutorSubscriber* sub_;
  const bool launch_lane_;
  tbb::task_group& tg_;
  const std::uint64_t iteration_;
  std::unique_ptr<std::mutex[]> sections_;
  Lane memory_;
  Lane launch_;
  std::atomic<bool> failed_{false};
  std::mutex fail_mu_;
  Status failure_;
};

}  // namespace

MultiThreadExecutor::MultiThreadExecutor(int threads) : threads_(threads), arena_(threads, 1) {}
MultiThreadExecutor::~MultiThreadExecutor() = default;

StatusOr<std::unique_ptr<MultiThreadExecutor>> MultiThreadExecutor::Create(int threads) {
  if (threads < 2)
    return Status::ParamInvalid("the multi-thread executor needs at least 2 threads, got {}", threads);
  if (threads > 256) return Status::ParamInvalid("the multi-thread executor takes at most 256 threads, got {}", threads);
  return std::unique_ptr<MultiThreadExecutor>(new MultiThreadExecutor(threads));
}

Status MultiThreadExecutor::Execute(ExecutionData& data, const ExecutorSubscriber* subscriber) {
  Status result;
  arena_.execute([&] {
    tbb::task_group tg;
    MultiThreadRun run(data, subscriber, has_launch_worker(), tg);
    run.Start();
    tg.wait();
    result = run.Finish();
  });
  return result;
}

}  // namespace npuflow::v2
