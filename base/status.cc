#include "base/status.h"

#include <stdexcept>

namespace npuflow {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kFailed: return "FAILED";
    case StatusCode::kParamInvalid: return "PARAM_INVALID";
    case StatusCode::kMemoryAllocation: return "MEMORY_ALLOCATION";
    case StatusCode::kInternal: return "INTERNAL_ERROR";
    case StatusCode::kTimeout: return "TIMEOUT";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kEndOfSequence: return "END_OF_SEQUENCE";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kUnsupported: return "UNSUPPORTED";
    case StatusCode::kDataCorrupted: return "DATA_CORRUPTED";
  }
  return "UNKNOWN";
}

Status::Status(StatusCode code, std::string message) {
  // An OK code never carries state: ok() is exactly "state_ == nullptr".
  if (code != StatusCode::kOk) state_ = std::make_unique<State>(State{code, std::move(message)});
}

Status::Status(const Status& other)
    : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
  return *this;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(state_->code));
  if (!state_->message.empty()) {
    out += ": ";
    out += state_->message;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return Status();
  return Status(state_->code, fmt::format("{}: {}", context, state_->message));
}

std::ostream& operator<<(std::ostream& os, const Status& status) { return os << status.ToString(); }

void ThrowBadStatusOrAccess(const Status& status) {
  throw std::logic_error("StatusOr::value() on an error: " + status.ToString());
}

}  // namespace npuflow
