#include "serve/wire/chat_parse.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "serve/wire/request_invalid.h"

namespace orbit::serve::chat_wire {

using nlohmann::json;

std::string need_string(const json& v, const std::string& param) {
  if (!v.is_string()) wrong_type(param, "a string", v);
  return v.get<std::string>();
}

double need_number(const json& v, const std::string& param, double lo, double hi, bool lo_open) {
  if (!v.is_number()) wrong_type(param, "a number", v);
  const double x = v.get<double>();
  if (std::isfinite(x) && x <= hi && x >= lo && !(lo_open && x == lo)) return x;
  std::ostringstream range;
  range << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
  const std::string message = "must be in " + range.str() + ", got " + v.dump();
  // The bound passed names the code (OpenAI's: a temperature of 3 is "decimal_above_max_value").
  if (x > hi) above_maximum(param, NumberKind::decimal, message);
  if (x <= lo) below_minimum(param, NumberKind::decimal, message);
  invalid_value(param, message);  // not a number at all (NaN): no bound passed
}

bool need_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) wrong_type(param, "a boolean", v);
  return v.get<bool>();
}

int64_t need_int(const json& v, const std::string& param) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      above_maximum(param, NumberKind::integer, "too large");
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  // A whole number past 64 bits (18446744073709551616) is read as a float: say so rather than "a number".
  if (v.is_number_float() && std::isfinite(v.get<double>()) && std::abs(v.get<double>()) >= 9.2e18 &&
      v.get<double>() == std::floor(v.get<double>())) {
    const std::string message = "too large (" + v.dump() + " is outside the 64-bit integers)";
    if (v.get<double>() < 0) below_minimum(param, NumberKind::integer, message);
    above_maximum(param, NumberKind::integer, message);
  }
  if (!v.is_number_integer()) wrong_type(param, "an integer", v);
  return v.get<int64_t>();
}

}  // namespace orbit::serve::chat_wire
