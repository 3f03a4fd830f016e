// Status and Result<T>: expected failures as values (docs/ARCHITECTURE.md §8).
//
// Use these where the caller is expected to handle the outcome (a full tier, a refused admission,
// a cache miss). Bad input and broken contracts throw orbit::Error instead (error.h).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "orbit/common/error.h"

namespace orbit {

enum class StatusCode {
  kOk = 0,
  kOutOfCapacity,  // a pool or tier budget cannot hold the request (backpressure)
  kNotFound,       // a lookup missed
  kRefused,        // a policy declined the request; the reason says which
};

const char* status_code_name(StatusCode code) noexcept;

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status ok() { return Status(); }
  static Status out_of_capacity(std::string reason) { return Status(StatusCode::kOutOfCapacity, std::move(reason)); }
  static Status not_found(std::string reason) { return Status(StatusCode::kNotFound, std::move(reason)); }
  static Status refused(std::string reason) { return Status(StatusCode::kRefused, std::move(reason)); }

  bool is_ok() const noexcept { return code_ == StatusCode::kOk; }
  explicit operator bool() const noexcept { return is_ok(); }
  StatusCode code() const noexcept { return code_; }
  // Human-readable reason; empty when ok.
  const std::string& reason() const noexcept { return reason_; }
  // "out_of_capacity: <reason>" or "ok".
  std::string to_string() const;

 private:
  Status(StatusCode code, std::string reason) : code_(code), reason_(std::move(reason)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string reason_;
};

// A value or a non-ok Status. value() on a failed Result throws orbit::Error with the reason.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor): implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    ORBIT_CHECK(!status_.is_ok(), "Result: constructed from an ok Status without a value");
  }

  bool is_ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return is_ok(); }
  const Status& status() const noexcept { return status_; }

  T& value() & {
    ORBIT_CHECK(is_ok(), "Result::value() on a failed result: " << status_.to_string());
    return *value_;
  }
  const T& value() const& {
    ORBIT_CHECK(is_ok(), "Result::value() on a failed result: " << status_.to_string());
    return *value_;
  }
  T&& value() && {
    ORBIT_CHECK(is_ok(), "Result::value() on a failed result: " << status_.to_string());
    return std::move(*value_);
  }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace orbit
