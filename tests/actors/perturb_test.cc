// Schedule perturbation and replay (actors/perturb.h): a seeded tap reorders deliveries within
// what the runtime allows, makes the same decisions for the same seed, and a logged schedule
// replays by delivery index in deterministic mode, reporting where a run leaves it.
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "actors/perturb.h"
#include "actors/system.h"

namespace npuflow::actors {
namespace {

using namespace std::chrono_literals;

// The order in which handlers ran, across every actor: what a schedule changes.
struct HandlingLog {
  std::mutex mu;
  std::vector<std::string> entries;
  void Add(std::string s) {
    std::lock_guard<std::mutex> lock(mu);
    entries.push_back(std::move(s));
  }
};

// Each rumor fans out to two peers until its hops run out: a cascade with many interleavings.
class Gossip {
 public:
  struct Rumor {
    static constexpr std::string_view kKind = "Rumor";
    int hops;
    std::uint32_t seed;
  };
  struct Peers {
    static constexpr std::string_view kKind = "Peers";
    std::vector<Address<std::variant<Rumor, Peers>>> peers;
  };
  using Message = std::variant<Rumor, Peers>;
  Gossip(std::string name, HandlingLog* log) : name_(std::move(name)), log_(log) {}
  void Receive(Message& msg, Context<Message>&) {
    if (auto* p = std::get_if<Peers>(&msg)) {
      peers_ = p->peers;
      return;
    }
    auto& rumor = std::get<Rumor>(msg);
    log_->Add(fmt::format("{}:{}:{}", name_, rumor.hops, rumor.seed));
    if (rumor.hops == 0) return;
    std::uint32_t s = rumor.seed;
    for (int fan = 0; fan < 2; ++fan) {
      s = s * 1664525u + 1013904223u;
      peers_[s % peers_.size()].Send(Rumor{rumor.hops - 1, s});
    }
  }

 private:
  std::string name_;
  HandlingLog* log_;
  std::vector<Address<Message>> peers_;
};

struct ScriptRun {
  std::vector<std::string> handled;
  ScheduleLog schedule;
};

// Six gossips, six rumors of `hops` hops started from outside, in a deterministic system with
// `tap` installed (none: nullptr).
std::vector<std::string> RunGossip(DeliveryTap* tap, int hops = 7, std::uint32_t salt = 0) {
  System system({.deterministic = true});
  HandlingLog log;
  if (tap != nullptr) {
    EXPECT_TRUE(system.SetTap(tap).ok());
  }
  std::vector<Address<Gossip::Message>> peers;
  for (int i = 0; i < 6; ++i) peers.push_back(system.Spawn<Gossip>(fmt::format("g{}", i), fmt::format("g{}", i), &log));
  for (auto& p : peers) p.Send(Gossip::Peers{peers});
  system.WaitIdle();  // every gossip knows its peers before the first rumor (the tap may hold a Peers back)
  for (int i = 0; i < 6; ++i) peers[i].Send(Gossip::Rumor{hops, static_cast<std::uint32_t>(i) + salt});
  system.WaitIdle();
  if (tap != nullptr) {
    EXPECT_TRUE(system.SetTap(nullptr).ok());
  }
  std::lock_guard<std::mutex> lock(log.mu);
  return log.entries;
}

PerturbOptions Pct(std::uint64_t seed) {
  return {.seed = seed, .strategy = PerturbStrategy::kPct, .pct_depth = 3, .pct_window = 500, .digest = true};
}

TEST(Perturb, TheSameSeedMakesTheSameScheduleAndAnotherSeedAnother) {
  const std::vector<std::string> plain = RunGossip(nullptr);
  ASSERT_GT(plain.size(), 700u);

  PerturbTap a(Pct(11)), b(Pct(11)), c(Pct(12));
  const std::vector<std::string> first = RunGossip(&a);
  const std::vector<std::string> second = RunGossip(&b);
  const std::vector<std::string> other = RunGossip(&c);

  EXPECT_EQ(first, second) << "the same seed gave two different handling orders";
  EXPECT_EQ(a.Log().decisions, b.Log().decisions);
  EXPECT_EQ(a.Log().digest, b.Log().digest);
  EXPECT_NE(first, plain) << "the perturbation changed nothing";
  EXPECT_NE(a.Log().decisions, c.Log().decisions) << "two seeds made the same decisions";
  // Only the order changes: every rumor is still handled once.
  std::multiset<std::string> as_set(first.begin(), first.end()), plain_set(plain.begin(), plain.end());
  EXPECT_EQ(as_set, plain_set);
  EXPECT_EQ(a.Log().deliveries, plain.size() + 6) << "every delivery is offered once (+ the six Peers)";
}

TEST(Perturb, ALoggedScheduleReplaysByDeliveryIndex) {
  for (PerturbStrategy strategy : {PerturbStrategy::kPct, PerturbStrategy::kRandom}) {
    SCOPED_TRACE(std::string(PerturbStrategyName(strategy)));
    PerturbOptions o = Pct(5);
    o.strategy = strategy;
    o.delay_probability = 0.1;
    PerturbTap tap(o);
    const std::vector<std::string> original = RunGossip(&tap);
    const ScheduleLog recorded = tap.Log();
    ASSERT_FALSE(recorded.decisions.empty());

    ReplayTap replay(recorded.decisions);
    const std::vector<std::string> again = RunGossip(&replay);
    EXPECT_EQ(again, original) << "the replay handled messages in another order";
    EXPECT_TRUE(replay.CheckAgainst(recorded).ok()) << replay.CheckAgainst(recorded);
    EXPECT_EQ(replay.Log().decisions, recorded.decisions);
  }
}

TEST(Perturb, AReplayOfAnotherProgramReportsWhereItDiverged) {
  PerturbTap tap(Pct(5));
  (void)RunGossip(&tap);
  const ScheduleLog recorded = tap.Log();
  ASSERT_FALSE(recorded.decisions.empty());

  ReplayTap replay(recorded.decisions);
  (void)RunGossip(&replay, /*hops=*/7, /*salt=*/1000);  // other rumors: other receivers
  Status s = replay.CheckAgainst(recorded);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("replay diverged"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("delivery"), std::string_view::npos) << s;

  // A shorter run never reaches the later decisions: also a divergence, naming the index.
  ReplayTap short_replay(recorded.decisions);
  (void)RunGossip(&short_replay, /*hops=*/1);
  auto where = short_replay.Divergence();
  ASSERT_TRUE(where.has_value());
  EXPECT_NE(where->find("delivery"), std::string::npos) << *where;
}

TEST(Perturb, PctHoldsBackOnlyDemotedAndLowPriorityReceivers) {
  // No random delays and no low-priority share: only the receivers demoted at the change points
  // are held back, and only from their change point on, for pct_span deliveries.
  PerturbOptions o = Pct(3);
  o.delay_probability = 0;
  o.low_priority_share = 0;
  o.pct_depth = 2;
  o.pct_window = 100;
  o.pct_span = 200;
  PerturbTap tap(o);
  (void)RunGossip(&tap);
  const ScheduleLog log = tap.Log();
  ASSERT_FALSE(log.decisions.empty());
  std::set<std::string> receivers;
  for (const ScheduleDecision& d : log.decisions) {
    receivers.insert(d.receiver);
    EXPECT_EQ(d.delay, 2 * o.pct_delay);
  }
  EXPECT_LE(receivers.size(), 2u);
  EXPECT_LT(log.decisions.front().index, o.pct_window);
  EXPECT_LT(log.decisions.back().index, o.pct_window + o.pct_span);

  // With neither change points nor random delays nothing is delayed.
  o.pct_depth = 0;
  PerturbTap quiet(o);
  (void)RunGossip(&quiet);
  EXPECT_TRUE(quiet.Log().decisions.empty());
  EXPECT_GT(quiet.Log().deliveries, 0u);
}

class Sink {
 public:
  struct Item {
    int producer;
    long seq;
  };
  struct Report {};
  struct Result {
    long total = 0;
    long order_violations = 0;
    long overlaps = 0;
  };
  using Message = std::variant<Item, Report>;
  void Receive(Message& msg, Context<Message>& ctx) {
    if (inside_.fetch_add(1, std::memory_order_acq_rel) != 0) ++result_.overlaps;
    if (auto* item = std::get_if<Item>(&msg)) {
      auto [it, fresh] = last_.try_emplace(item->producer, -1);
      if (item->seq != it->second + 1) ++result_.order_violations;
      it->second = item->seq;
      ++result_.total;
    } else {
      ctx.Reply<Result>(result_);
    }
    inside_.fetch_sub(1, std::memory_order_acq_rel);
  }

 private:
  std::atomic<int> inside_{0};
  std::map<int, long> last_;
  Result result_;
};

// With real threads the tap's delays still keep per-sender FIFO and one handler at a time.
TEST(Perturb, UnderThreadsEverySenderKeepsItsOrder) {
  System system({.workers = 2});
  PerturbTap tap({.seed = 9, .strategy = PerturbStrategy::kPct, .pct_window = 2000, .low_priority_share = 0.5,
                  .pct_hold = 0.5, .pct_delay = 5us, .delay_probability = 0.05, .max_delay = 20us});
  ASSERT_TRUE(system.SetTap(&tap).ok());
  auto sink = system.Spawn<Sink>("sink");
  constexpr long kPerThread = 4000;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (long i = 0; i < kPerThread; ++i) sink.Send(Sink::Item{t, i});
    });
  for (auto& th : threads) th.join();
  system.WaitIdle();
  auto result = sink.Ask<Sink::Result>(Sink::Report{}).Get();
  ASSERT_TRUE(system.SetTap(nullptr).ok());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->total, 2 * kPerThread);
  EXPECT_EQ(result->order_violations, 0);
  EXPECT_EQ(result->overlaps, 0);
  const ScheduleLog log = tap.Log();
  EXPECT_EQ(log.deliveries, static_cast<std::uint64_t>(2 * kPerThread + 1));
  EXPECT_GT(log.delayed, 0u);
  for (std::size_t i = 1; i < log.decisions.size(); ++i) EXPECT_LT(log.decisions[i - 1].index, log.decisions[i].index);
}

TEST(Perturb, BadOptionsNameTheOption) {
  EXPECT_NE(CheckPerturbOptions({.pct_depth = 65}).message().find("pct depth"), std::string_view::npos);
  EXPECT_NE(CheckPerturbOptions({.delay_probability = 1.5}).message().find("delay probability"),
            std::string_view::npos);
  EXPECT_NE(CheckPerturbOptions({.max_delay = 0ns}).message().find("max delay"), std::string_view::npos);
  EXPECT_NE(CheckPerturbOptions({.pct_hold = 2}).message().find("pct hold"), std::string_view::npos);
  EXPECT_EQ(PerturbTap::Create({.low_priority_share = -0.1}).status().code(), StatusCode::kParamInvalid);
  EXPECT_EQ(ParsePerturbStrategy("chaos").status().code(), StatusCode::kParamInvalid);
  EXPECT_EQ(ParsePerturbStrategy("pct").value(), PerturbStrategy::kPct);
}

}  // namespace
}  // namespace npuflow::actors
