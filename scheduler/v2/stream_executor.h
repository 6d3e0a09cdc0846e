// StreamExecutor (seed 001 section 7): one ModelV2Executor per stream, so that inferences on
// different streams keep separate state (inputs bound, iteration counts, allocators) while they
// run side by side. A recursive mutex over the map, as GE's.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "base/status.h"
#include "scheduler/v2/model_v2_executor.h"

namespace npuflow::v2 {

// Builds a fresh (not loaded) executor of the model.
using ModelV2ExecutorBuilder = std::function<StatusOr<std::unique_ptr<ModelV2Executor>>()>;

class StreamExecutor {
 public:
  explicit StreamExecutor(ModelV2ExecutorBuilder builder) : builder_(std::move(builder)) {}

  // The executor for `stream`, loaded with `arg` (whose stream is `stream`) on first use. Null when
  // building or loading failed; the error is logged and last_error() keeps it.
  ModelV2Executor* GetOrCreateLoaded(npu_sim::Stream stream, const ModelExecuteArg& arg);
  // Unloads, then forgets, the stream's executor. An unload failure keeps the entry (and returns
  // the error); a stream with no executor is a success.
  Status Erase(npu_sim::Stream stream);
  std::size_t size() const;
  Status last_error() const;

 private:
  using Key = std::pair<int, npu_sim::StreamId>;
  ModelV2ExecutorBuilder builder_;
  mutable std::recursive_mutex mu_;
  std::map<Key, std::unique_ptr<ModelV2Executor>> streams_to_executor_;
  Status last_error_;
};

}  // namespace npuflow::v2
