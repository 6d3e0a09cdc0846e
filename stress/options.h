// The options of a stress run (`npuflow stress`, docs/stress.md): a scenario is a set of defaults
// for them, and every flag the user gives overrides its scenario's value. The resolved set is what
// a replay file keeps, so a replay needs nothing but the file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "actors/perturb.h"
#include "base/status.h"

namespace npuflow::stress {

inline constexpr int kMaxClients = 10'000;
inline constexpr int kMaxThreadClients = 256;  // --host-mode threads: one OS thread per client

// What a client may do for one request (docs/stress.md, "Requests").
enum class Action : std::uint8_t {
  kRunGraph,   // Session::RunGraph, host tensors (NnExecute behind it; RT2.0 for dynamic models)
  kAsync,      // Session::RunGraphAsync: the model's Run loop, answered through a callback
  kNnExecute,  // DavinciModel::NnExecute with device buffers (zero copy)
  kStream,     // Session::RunGraphWithStreamAsync on a user stream, then SynchronizeStream
};
inline constexpr int kActionCount = 4;
std::string_view ActionName(Action action);

struct StressOptions {
  std::string scenario = "storm";  // storm | churn | weights | faults | tiling | om
  int clients = 64;                // 1..10,000 (threads mode: 1..256)
  // The models: a count (the scenario's list, cycled) or catalog names, "mlp,dag,mlp_dynamic".
  std::string models;
  int streams = 2;                   // execution instances per model (npuflow.executionStreams), 1..64
  std::int64_t requests = 2000;      // stop after this many requests (0: no bound)
  double duration_s = 0;             // stop after this long (0: no bound); one of the two is needed
  int input_sets = 4;                // input sets per model, each with its expected outputs, 1..64
  std::uint64_t seed = 1;
  bool deterministic = false;        // one worker, FIFO delivery, clients take turns (docs/stress.md)
  std::string host_mode = "fibers";  // fibers | threads
  int host_threads = 2;              // OS threads running the client fibers, 1..64
  int workers = 0;                   // the runtime's worker threads (0: one per core)
  std::map<Action, int> mix;         // weight of each action; actions a model cannot take are skipped
  std::int64_t timeout_ms = 0;       // per execution in the runtime (npuflow.executeTimeoutMs); 0: none
  std::int64_t hang_ms = 20'000;     // a request not finished after this long is a hang (scenarios: + 5 ms a client)
  // Schedule perturbation through the delivery tap: none | random | pct.
  std::string perturb = "pct";
  actors::PerturbOptions perturbation;  // seed: the run's seed
  std::string chip = "910B";
  // Device memory: "" the chip's, "auto" small enough that loads recycle, or bytes ("96M").
  std::string device_memory;
  int churn_every = 0;        // a load/unload churn action after every N requests; 0: off
  bool weight_streaming = false;  // models with external weights, loaded while clients run
  int faults = 0;             // faults injected over the run; 0: off
  std::vector<std::string> fault_kinds = {"fail", "hang", "delay"};
  std::vector<std::string> fault_targets = {"stream", "aicore", "aicpu", "dma"};
  std::vector<int> tiling_nops;  // tiling-sink models compiled with these NOP counts (-1: prefetch_num)
  std::string om;                // a user's model file
  std::vector<std::string> input_shapes;  // --om RT2.0 models: NAME:D0,D1,...
};

// The scenarios and what each one sets.
struct ScenarioInfo {
  std::string name;
  std::string summary;
};
const std::vector<ScenarioInfo>& Scenarios();

// Which options the user gave (by flag name without dashes, e.g. "clients"), so that the
// scenario's defaults fill the others.
using GivenFlags = std::vector<std::string>;
// The scenario's defaults for every option not in `given`. Errors: an unknown scenario, naming the known ones.
Status ApplyScenario(StressOptions& options, const GivenFlags& given);

// Every option in range and consistent; errors name the option and what it accepts.
Status CheckStressOptions(const StressOptions& options);

// "rungraph=4,async=2,nnexecute=2,stream=1" (any subset; weights >= 0, one of them > 0).
StatusOr<std::map<Action, int>> ParseMix(std::string_view text);
std::string MixText(const std::map<Action, int>& mix);
// "96M", "512K", "2G", "1048576": bytes.
StatusOr<std::uint64_t> ParseBytes(std::string_view text, std::string_view option);

// The resolved options as JSON (what the replay file keeps) and back. FromJson checks every field
// and names the one that is missing or wrong.
nlohmann::json ToJson(const StressOptions& options);
StatusOr<StressOptions> OptionsFromJson(const nlohmann::json& json, std::string_view source);

}  // namespace npuflow::stress
