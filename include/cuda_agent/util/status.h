// Status and StatusOr: expected failures as values (CONVENTIONS.md §5).
//
// I/O, parsing, subprocesses and RPCs return a Status whose message names the
// thing and the value ("task data/x.py: no class Model"). Bugs are CA_CHECK
// failures that stop the process with file and line.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace cuda_agent {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from the user: file, line, value
  kNotFound,            // a named file, key or object does not exist
  kFailedPrecondition,  // the host or state cannot do this (no GPU, no namespaces)
  kDeadlineExceeded,    // a wall-clock limit ran out
  kUnavailable,         // transient infrastructure failure; may be retried
  kCancelled,           // the caller gave up
  kResourceExhausted,   // a limit was reached (queue, workspaces); try later or elsewhere
  kInternal,            // a broken invariant of infrastructure (worker died)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: config.yaml:3: unknown key 'foo'".
  std::string ToString() const;
  // Returns a copy whose message is "prefix: message".
  Status WithContext(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Holds a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Internal("StatusOr constructed from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace cuda_agent

// Assertion for bugs (never for bad input): prints file and line and aborts.
#define CA_CHECK(cond)                                                     \
  do {                                                                     \
    if (!(cond)) ::cuda_agent::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (0)
#define CA_CHECK_MSG(cond, msg)                                               \
  do {                                                                        \
    if (!(cond)) ::cuda_agent::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

// Propagates a non-OK Status from an expression returning Status.
#define CA_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::cuda_agent::Status _ca_status = (expr); \
    if (!_ca_status.ok()) return _ca_status;  \
  } while (0)

#define CA_CONCAT_INNER(a, b) a##b
#define CA_CONCAT(a, b) CA_CONCAT_INNER(a, b)
// `CA_ASSIGN_OR_RETURN(auto x, F());` unwraps a StatusOr or returns its status.
#define CA_ASSIGN_OR_RETURN(lhs, expr) CA_ASSIGN_OR_RETURN_IMPL(CA_CONCAT(_ca_or_, __LINE__), lhs, expr)
#define CA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
