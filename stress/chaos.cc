// Load/unload churn and fault injection, one action per call, all choices from the run's seed.
#include <algorithm>

#include <fmt/format.h>

#include "npu_sim/units.h"
#include "scheduler/model_manager.h"
#include "stress/storm_state.h"

namespace npuflow::stress::detail {
namespace {

constexpr std::size_t kMaxForks = 2;     // per model, at once
constexpr std::size_t kMaxSessions = 2;  // churn sessions per model, at once

std::string Kind(const Status& s) {
  std::string k(StatusCodeName(s.code()));
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return k;
}

void CountChurn(StormState& s, const std::string& what, const Status& status) {
  s.Count(&StressReport::churn, status.ok() ? what : what + "_failed:" + Kind(status));
}

std::vector<std::shared_ptr<Target>> OfKind(StormState& s, int model, Target::Kind kind) {
  std::vector<std::shared_ptr<Target>> out;
  for (auto& t : s.TargetsOf(model))
    if (t->kind == kind) out.push_back(t);
  return out;
}

// Waits (as a fiber, if one) until no client holds `t` but the caller, at most hang_ms.
void Drain(StormState& s, const std::shared_ptr<Target>& t) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(s.options.hang_ms);
  while (t.use_count() > 1 && Clock::now() < deadline) Nap(std::chrono::milliseconds(1));
}

// Unloads the model behind a target (the session loads it again on its next run), as resource
// recycling does.
void Unload(StormState& s, int model, Rng& rng) {
  auto targets = s.TargetsOf(model);
  if (targets.empty() || s.models[model].v2) return;
  const auto& t = targets[rng.Below(targets.size())];
  auto loaded = t->session->GetLoadedModel(t->graph);
  if (!loaded.ok()) return CountChurn(s, "unload", loaded.status());
  CountChurn(s, "unload", scheduler::ModelManager::Get()->Unload((*loaded)->id()));
}

void Remove(StormState& s, const std::shared_ptr<Target>& fork) {
  if (!s.Unpublish(fork)) return;
  CountChurn(s, "remove", fork->session->RemoveGraph(fork->graph));
}

// A fork of the model's graph in the main session, loaded at once (recycling others if memory
// is short); clients start using it right away.
void Fork(StormState& s, int model, Rng& rng) {
  auto forks = OfKind(s, model, Target::Kind::kFork);
  if (forks.size() >= kMaxForks) return Remove(s, forks[rng.Below(forks.size())]);
  auto primaries = OfKind(s, model, Target::Kind::kPrimary);
  if (primaries.empty()) return;
  auto fork = std::make_shared<Target>(*primaries.front());
  fork->graph = s.NextGraphId();
  fork->kind = Target::Kind::kFork;
  Status st = fork->session->ForkGraph(primaries.front()->graph, fork->graph);
  CountChurn(s, "fork", st);
  if (!st.ok()) return;
  CountChurn(s, "fork_load", fork->session->LoadGraph(fork->graph));
  s.Publish(fork);  // loaded or not: a run loads it (or fails clearly) on first use
}

// The model in a session of its own: with external weights, a fresh weight manager, so the
// weights stream in again while clients already run it. The oldest such session goes.
void NewSession(StormState& s, int model, Rng& rng) {
  auto sessions = OfKind(s, model, Target::Kind::kSession);
  if (sessions.size() >= kMaxSessions) {
    const auto& old = sessions.front();
    if (s.Unpublish(old)) {
      Drain(s, old);
      CountChurn(s, "session_finalize", old->session->Finalize());
    }
  }
  auto made = scheduler::Session::Create(StormSessionOptions(s.options));
  if (!made.ok()) return CountChurn(s, "session", made.status());
  auto t = std::make_shared<Target>();
  t->session = std::shared_ptr<scheduler::Session>(std::move(*made));
  t->graph = s.NextGraphId();
  t->model = model;
  t->kind = Target::Kind::kSession;
  Status st = AddModel(*t->session, t->graph, s.models[model]);
  CountChurn(s, "session", st);
  if (!st.ok()) {
    (void)t->session->Finalize();
    return;
  }
  CountChurn(s, "session_load", t->session->LoadGraph(t->graph));
  s.Publish(t);
}

}  // namespace

void ChurnStep(StormState& s, Rng& rng) {
  const int model = static_cast<int>(rng.Below(s.models.size()));
  // With streaming weights, new sessions are what reload them: twice as likely.
  const int choices = s.options.weight_streaming ? 5 : 4;
  switch (rng.Below(choices)) {
    case 0: return Unload(s, model, rng);
    case 1: return Fork(s, model, rng);
    case 2: {
      auto forks = OfKind(s, model, Target::Kind::kFork);
      if (forks.empty()) return Fork(s, model, rng);
      return Remove(s, forks[rng.Below(forks.size())]);
    }
    default: return NewSession(s, model, rng);
  }
}

void FaultStep(StormState& s, Rng& rng) {
  const std::string& target = s.options.fault_targets[rng.Below(s.options.fault_targets.size())];
  const std::string& kind = s.options.fault_kinds[rng.Below(s.options.fault_kinds.size())];
  npu_sim::Fault fault;
  fault.kind = kind == "fail" ? npu_sim::FaultKind::kFail
               : kind == "hang" ? npu_sim::FaultKind::kHang
                                : npu_sim::FaultKind::kDelay;
  fault.nth = 1 + rng.Below(3);
  fault.delay = static_cast<npu_sim::VTime>(1000 + rng.Below(500'000));  // 1 us .. 0.5 ms of device time
  auto chip = s.rt.chip(0);
  if (!chip.ok()) return s.Count(&StressReport::faults, "not_placed");
  npu_sim::FaultTarget where = npu_sim::FaultTarget::kStream;
  std::uint64_t units = 0;
  if (target == "aicore") where = npu_sim::FaultTarget::kAICore, units = (*chip)->aicore_count;
  if (target == "aicpu") where = npu_sim::FaultTarget::kAICpu, units = (*chip)->aicpu_count;
  if (target == "dma") where = npu_sim::FaultTarget::kDma, units = (*chip)->dma_channels;
  const auto stats = s.rt.Stats(0);
  // A random live stream: the models' bound streams, their execution streams, the run's user
  // streams. Stream ids are dense from 1 (destroyed ones are reused), so a few tries find one.
  if (target == "stream") units = 1 + (stats.ok() ? stats->streams : 0) + 8;
  // A unit runs kernels only as some stream's home or next to it (npu_sim::HomeUnit): three faults
  // in four go to the home of a stream that has run a kernel, so that most of them fire.
  std::uint32_t homes = 0;
  if (stats.ok())
    homes = where == npu_sim::FaultTarget::kAICore ? stats->aicore_homes
            : where == npu_sim::FaultTarget::kAICpu ? stats->aicpu_homes
                                                    : 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    int index = static_cast<int>(rng.Below(units));
    if (homes > 0 && rng.Below(4) != 0)
      index = static_cast<int>(npu_sim::HomeUnit(static_cast<std::uint32_t>(rng.Below(homes)),
                                                 static_cast<std::uint32_t>(units)));
    if (where == npu_sim::FaultTarget::kStream) index += 1;  // never the default stream
    if (s.rt.InjectFault(0, where, index, fault).ok()) {
      s.Count(&StressReport::faults, "injected");
      s.Count(&StressReport::faults, "kind:" + kind);
      s.Count(&StressReport::faults, "target:" + target);
      return;
    }
  }
  s.Count(&StressReport::faults, "not_placed");
}

Status EndChurn(StormState& s) {
  Status first;
  for (int m = 0; m < static_cast<int>(s.models.size()); ++m) {
    for (auto& t : s.TargetsOf(m)) {
      if (t->kind == Target::Kind::kPrimary || !s.Unpublish(t)) continue;
      Drain(s, t);
      Status st = t->kind == Target::Kind::kFork ? t->session->RemoveGraph(t->graph) : t->session->Finalize();
      if (first.ok() && !st.ok()) first = st.WithContext(fmt::format("stress: retiring a churn target of {}", s.models[m].name));
    }
  }
  return first;
}

}  // namespace npuflow::stress::detail
