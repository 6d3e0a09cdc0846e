#include "actors/system.h"

#include <thread>
#include <utility>

#include <boost/fiber/operations.hpp>

#include "base/logging.h"

namespace npuflow::actors {
namespace detail {

bool InNonMainFiber() {
  // context::active() sets up Boost.Fiber's per-thread scheduler on first use; it does not switch.
  boost::fibers::context* active = boost::fibers::context::active();
  return active != nullptr && !active->is_context(boost::fibers::type::main_context);
}

DrainThreadState& ThisThread() {
  thread_local DrainThreadState state;
  return state;
}

LocalHandoffs& ThisThreadHandoffs() {
  thread_local LocalHandoffs handoffs;
  return handoffs;
}

bool InHandler() {
  const DrainThreadState& ts = ThisThread();
  return ts.in_drain && ts.current != nullptr;
}

std::string CurrentActorName() {
  const DrainThreadState& ts = ThisThread();
  return ts.in_drain && ts.current != nullptr ? ts.current->name() : std::string();
}

Status WaitInHandlerError(const char* call) {
  const DrainThreadState& ts = ThisThread();
  return Status::Internal(
      "{} inside the handler of actor '{}' on a future that is not ready: a handler must not wait (it would hold a "
      "worker, and deadlock the system with one); chain the future with Context::Then instead",
      call, ts.current != nullptr ? ts.current->name() : std::string("?"));
}

std::atomic<std::uint64_t>& ClosedLaneEpoch() {
  static std::atomic<std::uint64_t> epoch{0};
  return epoch;
}

ExternalLanes::~ExternalLanes() {
  if (lanes.empty()) return;
  for (auto& [uid, lane] : lanes) lane->closed.store(true, std::memory_order_release);
  ClosedLaneEpoch().fetch_add(1, std::memory_order_relaxed);
}

ExternalLanes& ThisThreadLanes() {
  thread_local ExternalLanes lanes;
  return lanes;
}

std::uint64_t NextCellUid() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

CellBase::CellBase(SystemCore* core, ActorId id, std::string name, Supervisor supervisor)
    : core_(core), uid_(NextCellUid()), id_(id), name_(std::move(name)), supervisor_(std::move(supervisor)) {
  link_->cell = this;
}

CellBase::~CellBase() {
  std::lock_guard<std::recursive_mutex> lock(link_->mu);
  link_->cell = nullptr;
}

std::chrono::nanoseconds CellBase::AskTap(DeliveryTap* tap, const Delivery& delivery) {
  try {
    return tap->OnDelivery(delivery);
  } catch (const std::exception& e) {
    ReportFailure(delivery.kind, Status::Internal("delivery tap threw on {} to actor '{}': {}", delivery.kind,
                                                  name_, e.what()));
  } catch (...) {
    ReportFailure(delivery.kind, Status::Internal("delivery tap threw on {} to actor '{}'", delivery.kind, name_));
  }
  return std::chrono::nanoseconds(0);
}

void CellBase::Spawn() { node_->try_put(tbb::flow::continue_msg()); }

void CellBase::Schedule() {
  DrainThreadState& ts = ThisThread();
  if (PostingFromInside()) {
    if (ts.handoff == nullptr) {
      ts.handoff = this;
      return;
    }
    if (core_->queue_handoffs) {
      LocalHandoffs& local = ThisThreadHandoffs();
      if (!local.full()) {
        local.Push(this);
        return;
      }
    }
  }
  Spawn();
}

// The drain loop. The indirect call through pass_fn_ is one per pass (a batch of messages), and
// replaces the virtual execute() and task allocation that a spawned task would cost per hop.
namespace {
// Restores the thread's drain state however the drain ends: a handler that waits inside oneTBB
// may nest drains on this thread.
struct DrainScope {
  DrainThreadState& ts;
  const DrainThreadState saved;
  explicit DrainScope(DrainThreadState& state) : ts(state), saved(state) { ts = DrainThreadState{nullptr, nullptr, true}; }
  ~DrainScope() { ts = saved; }
};
}  // namespace

void CellBase::RunDrains(CellBase* cell) {
  DrainThreadState& ts = ThisThread();
  DrainScope scope(ts);
  LocalHandoffs& local = ThisThreadHandoffs();
  int hops = 0;
  while (cell != nullptr) {
    ts.current = cell;
    const PassResult r = cell->pass_fn_(cell);
    ts.current = nullptr;
    CellBase* next = std::exchange(ts.handoff, nullptr);
    if (next == nullptr) next = local.Pop();
    if (next != nullptr && next->core_ != cell->core_) {  // another system's (a nested drain): its own graph runs it
      next->Spawn();
      next = nullptr;
    }
    if (r.parked) {
      // The tap holds the head message and the timer owns the token: the pass has settled the
      // counter already, and `cell` may be draining on another thread by now.
      if (next != nullptr) next->Spawn();
      break;
    }
    // A park added kParkBias; the pass that resumes removes it here, in the same subtraction
    // that returns what the pass handled.
    const std::int64_t sub = r.handled + (r.resumed ? kParkBias : 0);
    const std::int64_t left = cell->pending_.fetch_sub(sub, std::memory_order_acq_rel) - sub;
    if (left > 0) {
      // More arrived while draining: this drain keeps the token. A woken actor is spawned so it
      // can run in parallel (with one worker, it waits its turn here).
      if (next != nullptr) {
        if (cell->core_->queue_handoffs && !local.full()) local.Push(next);
        else next->Spawn();
      }
      if (r.handled == 0 || ++hops >= kMaxHandoffs) {
        // Once shutdown has begun, what is left is swept by Shutdown itself: no respawn loop.
        if (!cell->core_->stopping.load(std::memory_order_acquire)) cell->Spawn();
        break;
      }
      continue;
    }
    if (next == nullptr) break;
    if (++hops >= kMaxHandoffs) {
      next->Spawn();
      break;
    }
    cell = next;
  }
  // The chain ends here: what this thread still holds goes to the flow graph.
  while (CellBase* left = local.Pop()) left->Spawn();
}

void CellBase::PostClosure(UniqueFunction<void()> fn) {
  // Same shutdown handshake as Cell::Post: an outside poster is counted while it posts.
  const bool external = !PostingFromInside();
  if (external) core_->external_posts.fetch_add(1, std::memory_order_seq_cst);
  struct Done {
    SystemCore* core;
    bool external;
    ~Done() {
      if (external) core->external_posts.fetch_sub(1, std::memory_order_seq_cst);
    }
  } done{core_, external};
  if (core_->stopping.load(std::memory_order_seq_cst)) return;  // dropped: the system is gone
  const std::uint32_t gen = gen_.load(std::memory_order_acquire);
  if (core_->deterministic) {
    bool trigger;
    {
      std::lock_guard<std::mutex> lock(core_->det_mu);
      SystemCore::DetEntry entry;
      entry.cell = this;
      entry.closure = std::move(fn);
      entry.gen = gen;
      trigger = core_->DetEnqueue(std::move(entry), external);
    }
    if (trigger) core_->sequencer->try_put(tbb::flow::continue_msg());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(closure_mu_);
    closures_.emplace_back(std::move(fn), gen);
  }
  closure_count_.fetch_add(1, std::memory_order_release);
  if (TakeToken(1)) Schedule();
}

std::int64_t CellBase::RunClosures() {
  std::deque<std::pair<UniqueFunction<void()>, std::uint32_t>> batch;
  {
    std::lock_guard<std::mutex> lock(closure_mu_);
    batch.swap(closures_);
  }
  const auto n = static_cast<std::int64_t>(batch.size());
  closure_count_.fetch_sub(n, std::memory_order_relaxed);
  for (auto& [fn, gen] : batch) RunClosure(fn, gen);
  return n;
}

void CellBase::RunClosure(UniqueFunction<void()>& fn, std::uint32_t gen) {
  if (gen != gen_.load(std::memory_order_relaxed)) return;  // a continuation of a retired actor
  try {
    fn();
  } catch (const std::exception& e) {
    ReportFailure("continuation", Status::Internal("actor '{}' continuation threw: {}", name_, e.what()));
  } catch (...) {
    ReportFailure("continuation", Status::Internal("actor '{}' continuation threw", name_));
  }
  handled_.store(handled_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void CellBase::Retire(std::uint32_t gen) {
  PostClosure([this, gen] {
    if (gen_.load(std::memory_order_relaxed) != gen) return;  // retired already
    // Continuations of this actor stop here: one that got through the link before it is cut was
    // posted with this generation, and is dropped once the generation moves on below.
    {
      std::lock_guard<std::recursive_mutex> lock(link_->mu);
      link_->cell = nullptr;
    }
    link_ = std::make_shared<CellLink>();
    link_->cell = this;
    gen_.store((gen + 1) & 0x7fffffffu, std::memory_order_release);  // 31 bits: an envelope's top bit is its tap mark
    DestroyActor();
    core_->retired_cells.fetch_add(1, std::memory_order_relaxed);
    if (core_->deterministic || core_->stopping.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(core_->free_mu);
    core_->free_cells[type_].push_back(this);  // reusable once this drain has let go of it
  });
}

void CellBase::ReportFailure(std::string_view kind, Status status) {
  core_->failures.fetch_add(1, std::memory_order_relaxed);
  ActorFailure failure{id_, name_, std::string(kind), std::move(status)};
  const Supervisor& supervisor = supervisor_ ? supervisor_ : core_->default_supervisor;
  try {
    if (supervisor) supervisor(failure);
  } catch (...) {
    NPUFLOW_LOG_ERROR(kActors, "supervisor of actor '{}' threw; failure was: {}", name_,
                      failure.status.ToString());
  }
}

bool SystemCore::DetEnqueue(DetEntry entry, bool from_outside) {
  (from_outside ? det_external : det_internal).push_back(std::move(entry));
  const bool trigger = !det_scheduled;
  det_scheduled = true;
  return trigger;
}

void SystemCore::DetRun() {
  DrainThreadState& ts = ThisThread();
  DrainScope scope(ts);
  for (;;) {
    DetEntry entry;
    {
      std::lock_guard<std::mutex> lock(det_mu);
      std::deque<DetEntry>& from = !det_internal.empty() ? det_internal : det_external;
      if (from.empty()) {
        det_scheduled = false;
        break;
      }
      entry = std::move(from.front());
      from.pop_front();
    }
    ts.current = entry.cell;
    entry.cell->DeliverOneDeterministic(entry);
    ts.current = nullptr;
  }
}

void SystemCore::ArmTimer(CellBase* cell, std::chrono::nanoseconds delay) {
  std::unique_lock<std::mutex> lock(timer_mu_);
  if (timer_stop_) {
    // Shutdown stopped the timer: resume at once; the pass drops what it finds.
    lock.unlock();
    cell->Spawn();
    return;
  }
  graph->reserve_wait();  // WaitIdle and Shutdown see the parked delivery as work in flight
  timer_.Schedule(delay, [this, cell] {
    cell->Spawn();
    graph->release_wait();
  });
}

void SystemCore::StopTimer() {
  std::lock_guard<std::mutex> lock(timer_mu_);
  timer_stop_ = true;
  // Parked deliveries that never resumed: their messages are dropped by the shutdown sweep. A
  // resumption already running has finished when CancelAll returns.
  for (std::size_t n = timer_.CancelAll(); n > 0; --n) graph->release_wait();
}

}  // namespace detail

Status System::CheckOptions(const SystemOptions& options) {
  if (options.workers < 0 || options.workers > 1024)
    return Status::ParamInvalid("actors: workers must be 0 (one per hardware thread) to 1024, got {}",
                                options.workers);
  if (options.batch < 1 || options.batch > 1 << 20)
    return Status::ParamInvalid("actors: batch must be 1 to 1048576, got {}", options.batch);
  if (options.io_threads < 0 || options.io_threads > 64)
    return Status::ParamInvalid("actors: io_threads must be 0 (inline) to 64, got {}", options.io_threads);
  return Status::Ok();
}

System::System(SystemOptions options) {
  if (Status status = CheckOptions(options); !status.ok()) throw std::invalid_argument(status.ToString());
  workers_ = options.deterministic ? 1
             : options.workers > 0 ? options.workers
                                   : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  io_ = std::make_unique<IoExecutor>(options.deterministic ? 0 : options.io_threads);
  core_.deterministic = options.deterministic;
  core_.tap_hook = options.tap_hook;
  core_.batch = options.batch;
  core_.queue_handoffs = workers_ == 1 && !options.deterministic;
  core_.default_supervisor = [](const ActorFailure& f) {
    NPUFLOW_LOG_ERROR(kActors, "actor '{}' failed on {}: {}", f.actor_name, f.kind, f.status.ToString());
  };
  // oneTBB gives an arena at most (max_allowed_parallelism - 1) workers, hardware threads by
  // default. Host threads stay outside the arena (they wait on futures), so the arena gets
  // all its slots from workers: ask for one more than we use.
  if (static_cast<int>(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)) <
      workers_ + 1) {
    parallelism_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                         static_cast<std::size_t>(workers_ + 1));
  }
  arena_ = std::make_unique<tbb::task_arena>(workers_, /*reserved_for_masters=*/0);
  arena_->execute([&] { graph_ = std::make_unique<tbb::flow::graph>(); });
  core_.arena = arena_.get();
  core_.graph = graph_.get();
  if (core_.deterministic) {
    sequencer_ = std::make_unique<tbb::flow::function_node<tbb::flow::continue_msg, tbb::flow::continue_msg>>(
        *graph_, tbb::flow::serial, [this](tbb::flow::continue_msg) {
          core_.DetRun();
          return tbb::flow::continue_msg();
        });
    core_.sequencer = sequencer_.get();
  }
}

System::~System() {
  Shutdown();
  std::lock_guard<std::mutex> lock(cells_mu_);
  cells_.clear();
}

void System::WaitIdle() {
  arena_->execute([&] { graph_->wait_for_all(); });
}

void System::Shutdown() {
  std::call_once(shutdown_once_, [&] {
    core_.stopping.store(true, std::memory_order_seq_cst);
    // I/O jobs not started are dropped; running ones finish (what they send now is dropped), so
    // none outlives the actor whose state it may use.
    io_->Stop();
    // A sender outside the system that passed the stopping check finishes its post first.
    while (core_.external_posts.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    core_.StopTimer();
    // Running handlers finish; drains that start now drop what they find.
    WaitIdle();
    std::lock_guard<std::mutex> lock(cells_mu_);
    const Status why = Status::Aborted("actor system shut down before delivery");
    for (auto& cell : cells_) cell->DropAll(why);
    for (auto& cell : cells_) cell->DestroyActor();
  });
}

detail::CellBase* System::TakeFreeCell(std::type_index type) {
  // Never once shutdown has begun: its sweep may be draining the cell.
  if (core_.deterministic || core_.stopping.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> lock(core_.free_mu);
  auto it = core_.free_cells.find(type);
  if (it == core_.free_cells.end()) return nullptr;
  std::vector<detail::CellBase*>& cells = it->second;
  for (std::size_t i = cells.size(); i-- > 0;) {
    detail::CellBase* cell = cells[i];
    if (!cell->BeginReuse()) continue;  // its retiring drain (or a stray message's) still runs
    cells.erase(cells.begin() + static_cast<std::ptrdiff_t>(i));
    core_.retired_cells.fetch_sub(1, std::memory_order_relaxed);
    return cell;
  }
  return nullptr;
}

void SpawnHandoffNow() {
  detail::DrainThreadState& ts = detail::ThisThread();
  if (!ts.in_drain || ts.current == nullptr || ts.handoff == nullptr || ts.current->core()->queue_handoffs) return;
  std::exchange(ts.handoff, nullptr)->Spawn();
}

SystemStats System::Stats() const {
  std::lock_guard<std::mutex> lock(cells_mu_);
  SystemStats stats;
  stats.cells = cells_.size();
  stats.retired = core_.retired_cells.load(std::memory_order_relaxed);
  stats.actors = stats.cells - stats.retired;
  for (const auto& cell : cells_) stats.handled += cell->handled();
  stats.failures = core_.failures.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace npuflow::actors
