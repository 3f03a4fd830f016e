#include "orbit/common/status.h"

namespace orbit {

const char* status_code_name(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kOutOfCapacity: return "out_of_capacity";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kRefused: return "refused";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + reason_;
}

}  // namespace orbit
