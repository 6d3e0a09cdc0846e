// System: the actors of one runtime, on one tbb::flow::graph in one task arena.
//
//   actors::System system({.workers = 2});
//   auto a = system.Spawn<Counter>("counter");
//   ...
//   system.Shutdown();   // also done by the destructor
//
// Host code (user threads, fibers) sends to actors and waits on futures; it never runs handlers.
// Handlers run on the system's workers and must not block: to wait for another actor, use
// Context::Then. Blocking file work (a pread, hashing, decryption) goes to RunIo: it runs on the
// system's I/O threads and reports back with a message.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include "actors/actor.h"
#include "actors/io_executor.h"
#include "base/status.h"

namespace npuflow::actors {

struct SystemOptions {
  // Worker threads that run handlers. 0: one per hardware thread.
  int workers = 0;
  // One worker and one global FIFO of deliveries: the same program gives the same message
  // order, run after run (messages from outside the system are ordered by when they are sent).
  bool deterministic = false;
  // Messages an actor takes from one sender's lane in one drain pass.
  int batch = 64;
  // Compile the delivery-tap check into the drain loop. Without it SetTap is refused; the
  // hop is then exactly the runtime's own cost (the benchmark's reference for the hook).
  bool tap_hook = true;
  // Dedicated threads for RunIo jobs (file reads, hashing, decryption), never the workers.
  // 2 by default: on a 2-core machine a 500 MB load is 1.05-1.3x faster than with 1, and a
  // kernel's latency during it is unchanged (npuflow bench weights). 0: a job runs inline on the
  // caller's thread. Deterministic mode always uses 0, so that what a job sends is ordered by the
  // program and not by I/O timing. Last, so that designated initializers elsewhere keep working.
  int io_threads = 2;
};

struct SpawnOptions {
  std::string name;
  // Hears failures of messages nobody asked about. Default: the system's (logs and counts).
  Supervisor supervisor;
};

struct SystemStats {
  std::size_t actors = 0;   // live: spawned and not retired
  std::size_t cells = 0;    // actor cells the system holds: live actors and retired ones kept for reuse
  std::size_t retired = 0;  // cells of retired actors, not reused yet (never, in deterministic mode)
  std::uint64_t handled = 0;   // messages and continuations handled
  std::uint64_t failures = 0;  // handler failures that went to a supervisor
};

class System {
 public:
  explicit System(SystemOptions options = {});
  ~System();
  System(const System&) = delete;
  System& operator=(const System&) = delete;

  // Validates options the way every npuflow entry point does.
  static Status CheckOptions(const SystemOptions& options);

  template <typename A, typename... Args>
  Address<typename A::Message> Spawn(SpawnOptions options, Args&&... args) {
    // The actor first: a constructor that throws leaves no cell half made or held.
    auto actor = std::make_unique<A>(std::forward<Args>(args)...);
    if (detail::CellBase* reused = TakeFreeCell(std::type_index(typeid(A)))) {
      // A retired actor's cell, idle and with its token held: a new actor, a new generation.
      auto* cell = static_cast<detail::CellImpl<A>*>(reused);
      if (options.name.empty()) options.name = "actor-" + std::to_string(cell->id());
      cell->Reincarnate(std::move(options.name), std::move(options.supervisor), std::move(actor));
      Address<typename A::Message> address(cell, cell->gen());
      cell->EndReuse();
      return address;
    }
    // The cell is built outside the lock: a handler may Spawn (or read Stats) meanwhile.
    const ActorId id = next_id_.fetch_add(1, std::memory_order_relaxed);
    if (options.name.empty()) options.name = "actor-" + std::to_string(id);
    auto cell = std::make_unique<detail::CellImpl<A>>(&core_, id, std::move(options.name),
                                                      std::move(options.supervisor), std::move(actor));
    Address<typename A::Message> address(cell.get(), 0);
    std::lock_guard<std::mutex> lock(cells_mu_);
    cells_.push_back(std::move(cell));
    return address;
  }
  template <typename A, typename... Args>
  Address<typename A::Message> Spawn(std::string name, Args&&... args) {
    return Spawn<A>(SpawnOptions{std::move(name), {}}, std::forward<Args>(args)...);
  }

  // Retires an actor its owner is done with (a model unloaded, a session closed), so that a
  // process that spawns and retires actors for hours keeps as many cells as it ever had live
  // actors, not one per actor it ever spawned. Asynchronous: the actor finishes the handler it
  // runs, then is destroyed inside its own drain, as if that were a message; the next Spawn of
  // the same actor type reuses the cell (its lanes and flow-graph node). Messages queued for it
  // or sent to `address` (or any copy) afterwards are dropped, an Ask failing with Aborted; its
  // pending continuations are dropped. Retiring twice, or an address of an older generation, is
  // a no-op. In deterministic mode cells are not reused (the actor is still destroyed).
  template <typename Msg>
  void Retire(const Address<Msg>& address) {
    if (address.cell_ != nullptr) address.cell_->Retire(address.gen_);
  }

  // Installs (or, with nullptr, removes) the delivery tap. The tap must outlive its
  // installation; remove it before destroying it, and only while no message is in flight.
  Status SetTap(DeliveryTap* tap) {
    if (!core_.tap_hook && tap != nullptr)
      return Status::Unsupported("actors: this system was built with tap_hook = false; SetTap needs it");
    core_.tap.store(tap, std::memory_order_release);
    return Status::Ok();
  }

  // Replaces the default supervisor. Call before spawning.
  void SetDefaultSupervisor(Supervisor supervisor) { core_.default_supervisor = std::move(supervisor); }

  // Blocks until no message is queued or being handled (messages sent meanwhile from outside
  // may or may not be included). Must not be called from a handler.
  void WaitIdle();

  // Stops delivering: every queued Ask fails with Aborted, queued Sends are dropped, actors are
  // destroyed (a Replier they held fails its future), later Sends are dropped and later Asks
  // fail at once. Waits for running handlers; never waits for a queued message. Idempotent.
  // Must not be called from a handler.
  void Shutdown();
  bool stopped() const { return core_.stopping.load(std::memory_order_acquire); }

  // Runs `job` on an I/O thread (inline when io_threads is 0), never on a worker: the way a
  // handler does blocking file work without holding a worker. The job reports back by sending
  // a message (to the actor that asked, typically); it must not wait on an actor and must end on
  // its own. Returns false once Shutdown has begun (the job is destroyed without running).
  // Shutdown destroys jobs not started yet and waits for running ones before it destroys actors,
  // so a job may refer to its actor's state while that actor waits for the job's report.
  bool RunIo(UniqueFunction<void()> job) { return io_->Run(std::move(job)); }

  SystemStats Stats() const;
  IoStats io_stats() const { return io_->Stats(); }
  int workers() const { return workers_; }
  int io_threads() const { return io_->threads(); }
  bool deterministic() const { return core_.deterministic; }
  tbb::flow::graph& graph() { return *graph_; }
  tbb::task_arena& arena() { return *arena_; }

 private:
  int workers_;
  std::unique_ptr<tbb::global_control> parallelism_;
  std::unique_ptr<tbb::task_arena> arena_;
  std::unique_ptr<tbb::flow::graph> graph_;
  std::unique_ptr<IoExecutor> io_;
  std::unique_ptr<tbb::flow::function_node<tbb::flow::continue_msg, tbb::flow::continue_msg>> sequencer_;
  detail::SystemCore core_;
  // A free cell of actor type `type` whose token this call now holds, or null.
  detail::CellBase* TakeFreeCell(std::type_index type);

  mutable std::mutex cells_mu_;
  std::atomic<ActorId> next_id_{1};
  std::vector<std::unique_ptr<detail::CellBase>> cells_;
  std::once_flag shutdown_once_;
};

}  // namespace npuflow::actors
