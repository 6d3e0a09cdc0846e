#include "scheduler/v2/stream_executor.h"

#include "base/logging.h"

namespace npuflow::v2 {

ModelV2Executor* StreamExecutor::GetOrCreateLoaded(npu_sim::Stream stream, const ModelExecuteArg& arg) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const Key key{stream.device, stream.id};
  auto it = streams_to_executor_.find(key);
  if (it == streams_to_executor_.end()) {
    auto built = builder_();
    if (!built.ok()) {
      last_error_ = built.status().WithContext("StreamExecutor: building the executor");
      NPUFLOW_LOG_ERROR(kScheduler, "stream {}: {}", stream.id, last_error_.ToString());
      return nullptr;
    }
    it = streams_to_executor_.emplace(key, *std::move(built)).first;
  }
  ModelV2Executor* executor = it->second.get();
  if (executor->state() != ModelState::kLoaded) {  // new, or kept after an unload failed
    ModelExecuteArg load = arg;
    load.stream = stream;
    Status s = executor->Load(load);
    if (!s.ok()) {
      last_error_ = s.WithContext("StreamExecutor: loading the executor");
      NPUFLOW_LOG_ERROR(kScheduler, "stream {}: {}", stream.id, last_error_.ToString());
      streams_to_executor_.erase(it);
      return nullptr;
    }
  }
  return executor;
}

Status StreamExecutor::Erase(npu_sim::Stream stream) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto it = streams_to_executor_.find(Key{stream.device, stream.id});
  if (it == streams_to_executor_.end()) return Status::Ok();
  if (it->second->state() == ModelState::kLoaded) {
    Status s = it->second->UnLoad();
    if (!s.ok()) return s.WithContext("StreamExecutor::Erase");
  }
  streams_to_executor_.erase(it);
  return Status::Ok();
}

std::size_t StreamExecutor::size() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return streams_to_executor_.size();
}

Status StreamExecutor::last_error() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return last_error_;
}

}  // namespace npuflow::v2
