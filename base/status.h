// Status and StatusOr<T>: the one error type of npuflow.
//
// A Status is a code and a message. The message names the thing that was wrong and what was
// expected ("model.om: tensor 'x' has shape [2, 3], expected [3, 2]"). OK carries no message and
// costs one null pointer, so returning Status on hot paths is free when nothing fails.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace npuflow {

// The status families the runtime documents name (GE's SUCCESS, FAILED, PARAM_INVALID,
// MEMORY_ALLOCATION, INTERNAL_ERROR, END_OF_SEQUENCE, ...), plus those npuflow itself needs.
enum class StatusCode : std::uint8_t {
  kOk = 0,
  kFailed,            // generic failure
  kParamInvalid,      // bad argument, option out of range, wrong shape
  kMemoryAllocation,  // out of (device or host) memory
  kInternal,          // an invariant broke inside npuflow
  kTimeout,           // a wait ran out of time
  kAborted,           // work was stopped (abort, shutdown) before it finished
  kEndOfSequence,     // an input queue or data source is exhausted
  kNotFound,          // a named thing does not exist
  kUnsupported,       // valid request the system cannot serve
  kDataCorrupted,     // a file or buffer failed an integrity check
};

// "OK", "FAILED", "PARAM_INVALID", ...
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;  // OK
  Status(StatusCode code, std::string message);

  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;
  ~Status() = default;

  static Status Ok() { return Status(); }

#define NPUFLOW_STATUS_FACTORY(Name, Code)                                     \
  template <typename... Args>                                                  \
  static Status Name(fmt::format_string<Args...> format, Args&&... args) {     \
    return Status(StatusCode::Code, fmt::format(format, std::forward<Args>(args)...)); \
  }
  NPUFLOW_STATUS_FACTORY(Failed, kFailed)
  NPUFLOW_STATUS_FACTORY(ParamInvalid, kParamInvalid)
  NPUFLOW_STATUS_FACTORY(MemoryAllocation, kMemoryAllocation)
  NPUFLOW_STATUS_FACTORY(Internal, kInternal)
  NPUFLOW_STATUS_FACTORY(Timeout, kTimeout)
  NPUFLOW_STATUS_FACTORY(Aborted, kAborted)
  NPUFLOW_STATUS_FACTORY(EndOfSequence, kEndOfSequence)
  NPUFLOW_STATUS_FACTORY(NotFound, kNotFound)
  NPUFLOW_STATUS_FACTORY(Unsupported, kUnsupported)
  NPUFLOW_STATUS_FACTORY(DataCorrupted, kDataCorrupted)
#undef NPUFLOW_STATUS_FACTORY

  bool ok() const noexcept { return state_ == nullptr; }
  StatusCode code() const noexcept { return state_ ? state_->code : StatusCode::kOk; }
  std::string_view message() const noexcept {
    return state_ ? std::string_view(state_->message) : std::string_view();
  }

  // "TIMEOUT: stream 3 did not complete within 100 ms"; "OK" for success.
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>". OK stays OK.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<State> state_;
};

std::ostream& operator<<(std::ostream& os, const Status& status);

// Either a value or a non-OK Status. Constructing from an OK Status is an internal error (there
// would be no value), reported as such rather than crashing.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  using value_type = T;

  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::Internal("StatusOr constructed from an OK status without a value");
  }
  template <typename U = T,
            typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                        !std::is_same_v<std::decay_t<U>, Status> &&
                                        !std::is_same_v<std::decay_t<U>, StatusOr>>>
  StatusOr(U&& value) : value_(std::in_place, std::forward<U>(value)) {}  // NOLINT: implicit

  bool ok() const noexcept { return status_.ok(); }
  const Status& status() const& noexcept { return status_; }
  Status status() && noexcept { return std::move(status_); }

  // Precondition: ok(). Checked: a violated precondition throws std::logic_error naming the
  // status, which is a programming error and never a silent use of garbage.
  T& value() & { Check(); return *value_; }
  const T& value() const& { Check(); return *value_; }
  T&& value() && { Check(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  template <typename U>
  T value_or(U&& fallback) const& { return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback)); }

 private:
  void Check() const;
  Status status_;
  std::optional<T> value_;
};

[[noreturn]] void ThrowBadStatusOrAccess(const Status& status);

template <typename T>
void StatusOr<T>::Check() const {
  if (!status_.ok()) ThrowBadStatusOrAccess(status_);
}

}  // namespace npuflow

#define NPUFLOW_STATUS_CONCAT_INNER(a, b) a##b
#define NPUFLOW_STATUS_CONCAT(a, b) NPUFLOW_STATUS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define NPUFLOW_RETURN_IF_ERROR(expr)                         \
  do {                                                        \
    ::npuflow::Status npuflow_status_ = (expr);               \
    if (!npuflow_status_.ok()) return npuflow_status_;        \
  } while (0)

// `NPUFLOW_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a StatusOr, or returns its error.
#define NPUFLOW_ASSIGN_OR_RETURN(lhs, expr) \
  NPUFLOW_ASSIGN_OR_RETURN_IMPL(NPUFLOW_STATUS_CONCAT(npuflow_statusor_, __LINE__), lhs, expr)
#define NPUFLOW_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()
