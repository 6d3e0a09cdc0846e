// Logging: one spdlog logger per layer, levels from the NPUFLOW_LOG environment variable.
//
//   NPUFLOW_LOG=debug                 every layer at debug
//   NPUFLOW_LOG=warn,actors=trace     warn everywhere, trace for the actors layer
//
// Levels: trace, debug, info, warn, error, critical, off. The default is warn. The
// NPUFLOW_LOG_* macros test the level before evaluating their arguments, so a disabled
// statement costs one load and one compare on a hot path.
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

#include "base/status.h"

namespace npuflow::log {

enum class Layer : int { kBase, kActors, kNpuSim, kGraph, kLowering, kWeights, kScheduler, kApps, kCount };

std::string_view LayerName(Layer layer);

// The layer's logger. Created on first use with the level NPUFLOW_LOG asks for.
spdlog::logger& Get(Layer layer);

// Parses a NPUFLOW_LOG-style spec and applies it to every layer's logger. A malformed spec
// (unknown level or layer) is a ParamInvalid naming the bad part; nothing is changed then.
Status Configure(std::string_view spec);

}  // namespace npuflow::log

#define NPUFLOW_LOG_AT(layer, level, ...)                                         \
  do {                                                                            \
    auto& npuflow_logger_ = ::npuflow::log::Get(::npuflow::log::Layer::layer);    \
    if (npuflow_logger_.should_log(level)) npuflow_logger_.log(level, __VA_ARGS__); \
  } while (0)

#define NPUFLOW_LOG_TRACE(layer, ...) NPUFLOW_LOG_AT(layer, spdlog::level::trace, __VA_ARGS__)
#define NPUFLOW_LOG_DEBUG(layer, ...) NPUFLOW_LOG_AT(layer, spdlog::level::debug, __VA_ARGS__)
#define NPUFLOW_LOG_INFO(layer, ...) NPUFLOW_LOG_AT(layer, spdlog::level::info, __VA_ARGS__)
#define NPUFLOW_LOG_WARN(layer, ...) NPUFLOW_LOG_AT(layer, spdlog::level::warn, __VA_ARGS__)
#define NPUFLOW_LOG_ERROR(layer, ...) NPUFLOW_LOG_AT(layer, spdlog::level::err, __VA_ARGS__)
