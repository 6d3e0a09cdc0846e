#include "stress/options.h"

#include <algorithm>
#include <charconv>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace npuflow::stress {
namespace {

bool Given(const GivenFlags& given, std::string_view flag) {
  return std::find(given.begin(), given.end(), flag) != given.end();
}

std::string Join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ",") + i;
  return s;
}

const std::vector<std::string> kFaultKinds = {"fail", "hang", "delay"};
const std::vector<std::string> kFaultTargets = {"stream", "aicore", "aicpu", "dma"};

}  // namespace

std::string_view ActionName(Action action) {
  switch (action) {
    case Action::kRunGraph: return "rungraph";
    case Action::kAsync: return "async";
    case Action::kNnExecute: return "nnexecute";
    case Action::kStream: return "stream";
  }
  return "?";
}

const std::vector<ScenarioInfo>& Scenarios() {
  static const std::vector<ScenarioInfo> scenarios = {
      {"storm", "inference storm: C clients x M models x K execution streams, every action, outputs checked"},
      {"churn", "the storm with models unloaded, forked, removed and reloaded under it, in a small device memory"},
      {"weights", "churn over models with external weights, loaded while their weights still stream in"},
      {"faults", "the storm with 1,000 injected faults: tasks, AICore/AICPU units and DMA copies fail, hang or are "
                 "delayed"},
      {"tiling", "tiling-sink models compiled with NOP counts around prefetch_num, under the perturbed schedule"},
      {"om", "the storm on a user's model file (--om)"},
  };
  return scenarios;
}

Status ApplyScenario(StressOptions& o, const GivenFlags& given) {
  const auto& known = Scenarios();
  if (std::none_of(known.begin(), known.end(), [&](const ScenarioInfo& s) { return s.name == o.scenario; })) {
    std::vector<std::string> names;
    for (const auto& s : known) names.push_back(s.name);
    return Status::ParamInvalid("--scenario '{}': expected one of {}", o.scenario, Join(names));
  }
  auto set = [&](std::string_view flag, auto& field, auto value) {
    if (!Given(given, flag)) field = value;
  };
  if (o.mix.empty()) o.mix = ParseMix("rungraph=4,async=2,nnexecute=2,stream=1").value();
  const std::string s = o.scenario;
  std::string models = "mlp,dag,mlp_dynamic";
  if (s == "weights") models = "weights_a,weights_b,mlp";
  if (s == "tiling") models = "attention_sink";
  if (s == "om" || !o.om.empty()) models = "om";
  set("models", o.models, models);
  if (s == "churn" || s == "weights") {
    set("churn-every", o.churn_every, 8);
    set("device-memory", o.device_memory, std::string("auto"));
  }
  if (s == "weights") set("weight-streaming", o.weight_streaming, true);
  // A request waits behind the others on a few execution instances (and Run loops): with C
  // clients, "in time" includes that queue.
  const std::int64_t queueing = 5 * static_cast<std::int64_t>(o.clients);
  set("hang-ms", o.hang_ms, std::int64_t{20'000} + queueing);
  if (s == "faults") {
    set("faults", o.faults, 1000);
    set("timeout-ms", o.timeout_ms, std::int64_t{100});
    set("hang-ms", o.hang_ms, std::int64_t{10'000} + queueing);
    set("requests", o.requests, std::int64_t{3000});
  }
  if (s == "tiling") set("tiling-nops", o.tiling_nops, std::vector<int>{0, 4, 7, -1, 12});
  return Status::Ok();
}

StatusOr<std::map<Action, int>> ParseMix(std::string_view text) {
  std::map<Action, int> mix;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) {
      if (comma == text.size()) break;
      return Status::ParamInvalid("--mix '{}': an empty item (expected ACTION=WEIGHT,...)", text);
    }
    const std::size_t eq = item.find('=');
    const std::string_view name = item.substr(0, eq);
    int weight = 1;
    if (eq != std::string_view::npos) {
      const std::string_view w = item.substr(eq + 1);
      auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), weight);
      if (w.empty() || ec != std::errc() || p != w.data() + w.size() || weight < 0 || weight > 1000)
        return Status::ParamInvalid("--mix '{}': weight '{}' of {}: expected a whole number 0..1000", text, w, name);
    }
    std::optional<Action> action;
    for (int a = 0; a < kActionCount; ++a)
      if (ActionName(static_cast<Action>(a)) == name) action = static_cast<Action>(a);
    if (!action)
      return Status::ParamInvalid("--mix '{}': unknown action '{}' (expected rungraph, async, nnexecute, stream)", text,
                                  name);
    mix[*action] = weight;
  }
  if (std::none_of(mix.begin(), mix.end(), [](const auto& kv) { return kv.second > 0; }))
    return Status::ParamInvalid("--mix '{}': no action with a weight above 0", text);
  return mix;
}

std::string MixText(const std::map<Action, int>& mix) {
  std::string s;
  for (const auto& [a, w] : mix) s += fmt::format("{}{}={}", s.empty() ? "" : ",", ActionName(a), w);
  return s;
}

StatusOr<std::uint64_t> ParseBytes(std::string_view text, std::string_view option) {
  std::uint64_t value = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || p == text.data())
    return Status::ParamInvalid("{} '{}': expected a size in bytes, with an optional K, M or G (e.g. 96M)", option,
                                text);
  std::string_view rest(p, static_cast<std::size_t>(text.data() + text.size() - p));
  std::uint64_t unit = 1;
  if (rest == "K" || rest == "k") unit = 1ull << 10;
  else if (rest == "M" || rest == "m") unit = 1ull << 20;
  else if (rest == "G" || rest == "g") unit = 1ull << 30;
  else if (!rest.empty())
    return Status::ParamInvalid("{} '{}': unknown unit '{}' (expected K, M or G)", option, text, rest);
  if (value > (1ull << 50) / unit) return Status::ParamInvalid("{} '{}': too large", option, text);
  return value * unit;
}

Status CheckStressOptions(const StressOptions& o) {
  const bool threads = o.host_mode == "threads";
  if (o.host_mode != "fibers" && !threads)
    return Status::ParamInvalid("--host-mode '{}': expected fibers or threads", o.host_mode);
  const int max_clients = threads && !o.deterministic ? kMaxThreadClients : kMaxClients;
  if (o.clients < 1 || o.clients > max_clients)
    return Status::ParamInvalid("--clients {}: expected 1..{}{}", o.clients, max_clients,
                                threads ? " with --host-mode threads (one OS thread each)" : "");
  if (o.streams < 1 || o.streams > 64) return Status::ParamInvalid("--streams {}: expected 1..64", o.streams);
  if (o.requests < 0) return Status::ParamInvalid("--requests {}: expected >= 0 (0: no bound)", o.requests);
  if (!(o.duration_s >= 0) || o.duration_s > 86400)
    return Status::ParamInvalid("--duration {}: expected 0..86400 seconds (0: no bound)", o.duration_s);
  if (o.requests == 0 && o.duration_s == 0)
    return Status::ParamInvalid("--requests 0 and --duration 0: give at least one bound");
  if (o.input_sets < 1 || o.input_sets > 64)
    return Status::ParamInvalid("--input-sets {}: expected 1..64", o.input_sets);
  if (o.host_threads < 1 || o.host_threads > 64)
    return Status::ParamInvalid("--host-threads {}: expected 1..64", o.host_threads);
  if (o.workers < 0 || o.workers > 64) return Status::ParamInvalid("--workers {}: expected 0..64", o.workers);
  if (o.mix.empty() || std::none_of(o.mix.begin(), o.mix.end(), [](const auto& kv) { return kv.second > 0; }))
    return Status::ParamInvalid("--mix: no action with a weight above 0");
  if (o.timeout_ms < 0 || o.timeout_ms > 3'600'000)
    return Status::ParamInvalid("--timeout-ms {}: expected 0..3600000 (0: none)", o.timeout_ms);
  if (o.hang_ms < 1 || o.hang_ms > 3'600'000)
    return Status::ParamInvalid("--hang-ms {}: expected 1..3600000", o.hang_ms);
  if (o.timeout_ms > 0 && o.hang_ms <= o.timeout_ms)
    return Status::ParamInvalid("--hang-ms {} must exceed --timeout-ms {}: a request the runtime times out is not a "
                                "hang",
                                o.hang_ms, o.timeout_ms);
  if (o.perturb != "none" && o.perturb != "random" && o.perturb != "pct")
    return Status::ParamInvalid("--perturb '{}': expected none, random or pct", o.perturb);
  NPUFLOW_RETURN_IF_ERROR(actors::CheckPerturbOptions(o.perturbation).WithContext("--perturb"));
  if (o.device_memory != "" && o.device_memory != "auto")
    NPUFLOW_RETURN_IF_ERROR(ParseBytes(o.device_memory, "--device-memory").status());
  if (o.churn_every < 0) return Status::ParamInvalid("--churn-every {}: expected >= 0 (0: off)", o.churn_every);
  if (o.faults < 0 || o.faults > 1'000'000)
    return Status::ParamInvalid("--faults {}: expected 0..1000000", o.faults);
  if (o.faults > 0) {
    if (o.fault_kinds.empty()) return Status::ParamInvalid("--fault-kinds: empty (expected some of fail,hang,delay)");
    if (o.fault_targets.empty())
      return Status::ParamInvalid("--fault-targets: empty (expected some of stream,aicore,aicpu,dma)");
  }
  for (const auto& k : o.fault_kinds)
    if (std::find(kFaultKinds.begin(), kFaultKinds.end(), k) == kFaultKinds.end())
      return Status::ParamInvalid("--fault-kinds: unknown kind '{}' (expected {})", k, Join(kFaultKinds));
  for (const auto& t : o.fault_targets)
    if (std::find(kFaultTargets.begin(), kFaultTargets.end(), t) == kFaultTargets.end())
      return Status::ParamInvalid("--fault-targets: unknown target '{}' (expected {})", t, Join(kFaultTargets));
  const bool hangs = std::find(o.fault_kinds.begin(), o.fault_kinds.end(), "hang") != o.fault_kinds.end();
  if (o.faults > 0 && hangs && o.timeout_ms == 0)
    return Status::ParamInvalid("--faults with hang faults needs --timeout-ms > 0: a hung task ends only in the "
                                "runtime's timeout");
  for (int n : o.tiling_nops)
    if (n < -1 || n > 64)
      return Status::ParamInvalid("--tiling-nops: {} is out of range (expected 0..64, or -1 for the chip's prefetch_num)",
                                  n);
  if (o.scenario == "om" && o.om.empty()) return Status::ParamInvalid("--scenario om needs --om FILE (a model file)");
  if (!o.om.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(o.om, ec))
      return Status::NotFound("--om '{}': no such file (expected a model file written by npuflow compile)", o.om);
  }
  if (o.models.empty()) return Status::ParamInvalid("--models: empty (a count, or catalog names)");
  return Status::Ok();
}

nlohmann::json ToJson(const StressOptions& o) {
  nlohmann::json j;
  j["scenario"] = o.scenario;
  j["clients"] = o.clients;
  j["models"] = o.models;
  j["streams"] = o.streams;
  j["requests"] = o.requests;
  j["duration_s"] = o.duration_s;
  j["input_sets"] = o.input_sets;
  j["seed"] = o.seed;
  j["deterministic"] = o.deterministic;
  j["host_mode"] = o.host_mode;
  j["host_threads"] = o.host_threads;
  j["workers"] = o.workers;
  j["mix"] = MixText(o.mix);
  j["timeout_ms"] = o.timeout_ms;
  j["hang_ms"] = o.hang_ms;
  j["perturb"] = o.perturb;
  const actors::PerturbOptions& p = o.perturbation;
  j["pct_depth"] = p.pct_depth;
  j["pct_window"] = p.pct_window;
  j["pct_span"] = p.pct_span;
  j["low_priority_share"] = p.low_priority_share;
  j["pct_hold"] = p.pct_hold;
  j["pct_delay_ns"] = p.pct_delay.count();
  j["delay_probability"] = p.delay_probability;
  j["max_delay_ns"] = p.max_delay.count();
  j["chip"] = o.chip;
  j["device_memory"] = o.device_memory;
  j["churn_every"] = o.churn_every;
  j["weight_streaming"] = o.weight_streaming;
  j["faults"] = o.faults;
  j["fault_kinds"] = o.fault_kinds;
  j["fault_targets"] = o.fault_targets;
  j["tiling_nops"] = o.tiling_nops;
  j["om"] = o.om;
  j["input_shapes"] = o.input_shapes;
  return j;
}

StatusOr<StressOptions> OptionsFromJson(const nlohmann::json& j, std::string_view source) {
  if (!j.is_object()) return Status::DataCorrupted("{}: \"options\" is not an object", source);
  StressOptions o;
  auto field = [&](const char* name, auto& out) -> Status {
    auto it = j.find(name);
    if (it == j.end()) return Status::DataCorrupted("{}: options: missing field \"{}\"", source, name);
    try {
      out = it->template get<std::decay_t<decltype(out)>>();
    } catch (const std::exception& e) {
      return Status::DataCorrupted("{}: options: field \"{}\" has the wrong type ({})", source, name, e.what());
    }
    return Status::Ok();
  };
  std::string mix;
  std::int64_t pct_delay = 0, max_delay = 0;
  NPUFLOW_RETURN_IF_ERROR(field("scenario", o.scenario));
  NPUFLOW_RETURN_IF_ERROR(field("clients", o.clients));
  NPUFLOW_RETURN_IF_ERROR(field("models", o.models));
  NPUFLOW_RETURN_IF_ERROR(field("streams", o.streams));
  NPUFLOW_RETURN_IF_ERROR(field("requests", o.requests));
  NPUFLOW_RETURN_IF_ERROR(field("duration_s", o.duration_s));
  NPUFLOW_RETURN_IF_ERROR(field("input_sets", o.input_sets));
  NPUFLOW_RETURN_IF_ERROR(field("seed", o.seed));
  NPUFLOW_RETURN_IF_ERROR(field("deterministic", o.deterministic));
  NPUFLOW_RETURN_IF_ERROR(field("host_mode", o.host_mode));
  NPUFLOW_RETURN_IF_ERROR(field("host_threads", o.host_threads));
  NPUFLOW_RETURN_IF_ERROR(field("workers", o.workers));
  NPUFLOW_RETURN_IF_ERROR(field("mix", mix));
  NPUFLOW_RETURN_IF_ERROR(field("timeout_ms", o.timeout_ms));
  NPUFLOW_RETURN_IF_ERROR(field("hang_ms", o.hang_ms));
  NPUFLOW_RETURN_IF_ERROR(field("perturb", o.perturb));
  NPUFLOW_RETURN_IF_ERROR(field("pct_depth", o.perturbation.pct_depth));
  NPUFLOW_RETURN_IF_ERROR(field("pct_window", o.perturbation.pct_window));
  NPUFLOW_RETURN_IF_ERROR(field("pct_span", o.perturbation.pct_span));
  NPUFLOW_RETURN_IF_ERROR(field("low_priority_share", o.perturbation.low_priority_share));
  NPUFLOW_RETURN_IF_ERROR(field("pct_hold", o.perturbation.pct_hold));
  NPUFLOW_RETURN_IF_ERROR(field("pct_delay_ns", pct_delay));
  NPUFLOW_RETURN_IF_ERROR(field("delay_probability", o.perturbation.delay_probability));
  NPUFLOW_RETURN_IF_ERROR(field("max_delay_ns", max_delay));
  NPUFLOW_RETURN_IF_ERROR(field("chip", o.chip));
  NPUFLOW_RETURN_IF_ERROR(field("device_memory", o.device_memory));
  NPUFLOW_RETURN_IF_ERROR(field("churn_every", o.churn_every));
  NPUFLOW_RETURN_IF_ERROR(field("weight_streaming", o.weight_streaming));
  NPUFLOW_RETURN_IF_ERROR(field("faults", o.faults));
  NPUFLOW_RETURN_IF_ERROR(field("fault_kinds", o.fault_kinds));
  NPUFLOW_RETURN_IF_ERROR(field("fault_targets", o.fault_targets));
  NPUFLOW_RETURN_IF_ERROR(field("tiling_nops", o.tiling_nops));
  NPUFLOW_RETURN_IF_ERROR(field("om", o.om));
  NPUFLOW_RETURN_IF_ERROR(field("input_shapes", o.input_shapes));
  o.perturbation.pct_delay = std::chrono::nanoseconds(pct_delay);
  o.perturbation.max_delay = std::chrono::nanoseconds(max_delay);
  o.perturbation.seed = o.seed;
  auto parsed = ParseMix(mix);
  if (!parsed.ok()) return Status::DataCorrupted("{}: options: {}", source, parsed.status().message());
  o.mix = *parsed;
  if (Status s = CheckStressOptions(o); !s.ok()) return Status::DataCorrupted("{}: options: {}", source, s.message());
  return o;
}

}  // namespace npuflow::stress
