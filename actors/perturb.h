// Schedule perturbation and replay through the delivery tap (actors/tap.h).
//
// PerturbTap delays deliveries by a seeded strategy, to shake out orderings a quiet machine never
// produces: PCT-style priorities (each receiver a random priority; at `pct_depth` change points,
// drawn among the first `pct_window` deliveries, the receiver of that delivery drops below every
// other for the next `pct_span` deliveries; deliveries to low-priority receivers are held back
// now and then) plus random small delays with a probability. It can do only what a tap may: postpone a delivery. Per-sender FIFO and one
// handler at a time still hold (the tap's contract), so every schedule it makes is one the
// runtime may make by itself.
//
// Every decision is a pure function of (seed, delivery index, receiver): the same seed over the
// same delivery sequence makes the same decisions. The tap logs the deliveries it delayed
// (index, receiver, kind, delay). In deterministic mode (one worker, FIFO delivery) the delivery
// sequence of a program is fixed, so ReplayTap re-applies a log by delivery index and reports a
// divergence, the first delivery whose receiver or kind differs from the log, as such. With real
// threads the log records what happened but the order of deliveries is the machine's.
//
//   actors::PerturbTap tap(options);           // options.seed, .strategy, ...
//   system.SetTap(&tap);  ... run ...  system.SetTap(nullptr);
//   actors::ScheduleLog log = tap.Log();
//   actors::ReplayTap replay(log.decisions, {.digest = true});   // in a deterministic system
//
// In deterministic mode a delay has no wall time: a postponed delivery goes to the back of the
// delivery order, so the strategy's effect there is which deliveries it postpones.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/tap.h"
#include "base/status.h"

namespace npuflow::actors {

// One delayed delivery: its position among all deliveries the tap saw (from 0), to whom, what.
struct ScheduleDecision {
  std::uint64_t index = 0;
  std::string receiver;
  std::string kind;
  std::chrono::nanoseconds delay{0};
  friend bool operator==(const ScheduleDecision&, const ScheduleDecision&) = default;
};

// What a tap saw and did.
struct ScheduleLog {
  std::vector<ScheduleDecision> decisions;  // in delivery order
  std::uint64_t deliveries = 0;             // every delivery offered to the tap
  std::uint64_t delayed = 0;                // of which postponed (also those past the log's cap)
  // Order-dependent hash of every delivery's (receiver, kind), when the tap keeps one: two runs
  // with equal digests delivered the same messages to the same actors in the same order.
  std::optional<std::uint64_t> digest;
  bool truncated = false;  // decisions past max_log were made but not logged
};

enum class PerturbStrategy : std::uint8_t { kRandom, kPct };

struct PerturbOptions {
  std::uint64_t seed = 1;
  PerturbStrategy strategy = PerturbStrategy::kPct;
  // PCT: priority change points, drawn among the first `pct_window` deliveries; the receiver of
  // the delivery at a change point is demoted for the next `pct_span` deliveries: every delivery
  // to it then waits 2 x pct_delay.
  int pct_depth = 3;
  std::uint64_t pct_window = 100'000;
  std::uint64_t pct_span = 1000;
  // PCT: the share of receivers, by their initial priority, that are low priority; a delivery to
  // one of them waits pct_delay with probability pct_hold.
  double low_priority_share = 0.1;
  double pct_hold = 0.1;
  std::chrono::nanoseconds pct_delay = std::chrono::microseconds(20);
  // Both strategies: each delivery is also delayed with this probability, by 1 ns .. max_delay.
  double delay_probability = 0.01;
  std::chrono::nanoseconds max_delay = std::chrono::microseconds(50);
  // Decisions kept in the log; later ones are still made, and the log says it is truncated.
  std::size_t max_log = 1u << 20;
  // Keep ScheduleLog::digest. Only meaningful where deliveries have one order (deterministic
  // mode); costs a lock and a string hash per delivery.
  bool digest = false;
  // Never delay a delivery from outside the system (a host thread or fiber). Set it in
  // deterministic mode: there a postponed outside delivery is queued again behind the outside
  // inputs that arrived meanwhile, so its place would depend on the host's timing, and the run
  // would not replay (docs/actors.md).
  bool internal_only = false;
};

// Every option in range; errors name the option and the accepted values.
Status CheckPerturbOptions(const PerturbOptions& options);

// "random" | "pct" (and back).
StatusOr<PerturbStrategy> ParsePerturbStrategy(std::string_view name);
std::string_view PerturbStrategyName(PerturbStrategy strategy);

class PerturbTap final : public DeliveryTap {
 public:
  // Options must pass CheckPerturbOptions (Create checks them).
  static StatusOr<std::unique_ptr<PerturbTap>> Create(const PerturbOptions& options);
  explicit PerturbTap(const PerturbOptions& options);

  std::chrono::nanoseconds OnDelivery(const Delivery& delivery) override;

  // A copy of the log so far (safe while deliveries run).
  ScheduleLog Log() const;
  const PerturbOptions& options() const { return options_; }

 private:
  static constexpr int kMaxDepth = 64;
  std::chrono::nanoseconds Decide(std::uint64_t index, ActorId receiver);

  const PerturbOptions options_;
  std::vector<std::uint64_t> change_points_;  // sorted; change point i demotes to priority i
  // Receivers demoted at change point i (ActorId + 1; 0: not reached yet).
  std::atomic<std::uint64_t> demoted_[kMaxDepth] = {};
  std::uint64_t low_threshold_ = 0;  // a receiver's priority hash below this is low priority
  std::uint64_t hold_threshold_ = 0;  // ... and a delivery's draw below this holds it back
  std::uint64_t delay_threshold_ = 0;  // a delivery's random draw below this is delayed
  std::atomic<std::uint64_t> next_index_{0};
  std::atomic<std::uint64_t> delayed_{0};
  mutable std::mutex mu_;  // the log and the digest
  ScheduleLog log_;
};

struct ReplayOptions {
  bool digest = true;  // keep the digest of what the replay delivered (to compare with the log's)
};

// Re-applies logged decisions by delivery index. Meant for deterministic mode, where a program's
// delivery sequence is fixed: at each logged index the delivery must go to the logged receiver
// with the logged kind. The first one that does not is the divergence; from there on nothing
// more is applied (the schedule no longer describes the run).
class ReplayTap final : public DeliveryTap {
 public:
  ReplayTap(std::vector<ScheduleDecision> decisions, ReplayOptions options = {});

  std::chrono::nanoseconds OnDelivery(const Delivery& delivery) override;

  // What the replay delivered (decisions: those it applied).
  ScheduleLog Log() const;
  // The first delivery where the run left the log, if it did: "delivery 1234 went to 'stream 3'
  // (UnitDone); the log has 'stream 4' (EventFired)", or a logged decision never reached.
  std::optional<std::string> Divergence() const;
  // Whether the run matched `recorded`: every logged decision applied, and (when both have one)
  // the same number of deliveries and the same digest. The error says where it differs.
  Status CheckAgainst(const ScheduleLog& recorded) const;

 private:
  const std::vector<ScheduleDecision> decisions_;
  const ReplayOptions options_;
  mutable std::mutex mu_;
  std::size_t next_ = 0;
  std::uint64_t index_ = 0;
  ScheduleLog log_;
  std::optional<std::string> divergence_;
};

}  // namespace npuflow::actors
