#include "base/logging.h"

#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace npuflow::log {
namespace {

constexpr int kLayers = static_cast<int>(Layer::kCount);
constexpr std::array<std::string_view, kLayers> kLayerNames = {
    "base", "actors", "npu_sim", "graph", "lowering", "weights", "scheduler", "apps"};

std::optional<spdlog::level::level_enum> ParseLevel(std::string_view text) {
  static constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 8> kLevels = {{
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn}, {"error", spdlog::level::err},
      {"critical", spdlog::level::critical}, {"off", spdlog::level::off}}};
  for (const auto& [name, level] : kLevels)
    if (name == text) return level;
  return std::nullopt;
}

struct Registry {
  std::array<std::shared_ptr<spdlog::logger>, kLayers> loggers;

  Registry() {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    for (int i = 0; i < kLayers; ++i) {
      loggers[i] = std::make_shared<spdlog::logger>(std::string(kLayerNames[i]), sink);
      loggers[i]->set_level(spdlog::level::warn);
      loggers[i]->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
    }
    if (const char* env = std::getenv("NPUFLOW_LOG"); env != nullptr && *env != '\0') {
      Status status = Apply(env);
      if (!status.ok()) loggers[0]->warn("ignoring NPUFLOW_LOG: {}", status.message());
    }
  }

  Status Apply(std::string_view spec) {
    std::array<spdlog::level::level_enum, kLayers> levels;
    for (int i = 0; i < kLayers; ++i) levels[i] = loggers[i]->level();
    while (!spec.empty()) {
      size_t comma = spec.find(',');
      std::string_view part = spec.substr(0, comma);
      spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
      if (part.empty()) continue;
      size_t eq = part.find('=');
      std::string_view level_text = eq == std::string_view::npos ? part : part.substr(eq + 1);
      auto level = ParseLevel(level_text);
      if (!level)
        return Status::ParamInvalid(
            "NPUFLOW_LOG: unknown level '{}' (expected trace, debug, info, warn, error, critical or off)",
            level_text);
      if (eq == std::string_view::npos) {
        levels.fill(*level);
        continue;
      }
      std::string_view layer = part.substr(0, eq);
      bool found = false;
      for (int i = 0; i < kLayers; ++i) {
        if (kLayerNames[i] == layer) {
          levels[i] = *level;
          found = true;
        }
      }
      if (!found)
        return Status::ParamInvalid(
            "NPUFLOW_LOG: unknown layer '{}' (expected base, actors, npu_sim, graph, lowering, "
            "weights, scheduler or apps)",
            layer);
    }
    for (int i = 0; i < kLayers; ++i) loggers[i]->set_level(levels[i]);
    return Status::Ok();
  }
};

Registry& GetRegistry() {
  static Registry registry;
  return registry;
}

}  // namespace

std::string_view LayerName(Layer layer) { return kLayerNames[static_cast<int>(layer)]; }

spdlog::logger& Get(Layer layer) { return *GetRegistry().loggers[static_cast<int>(layer)]; }

Status Configure(std::string_view spec) { return GetRegistry().Apply(spec); }

}  // namespace npuflow::log
