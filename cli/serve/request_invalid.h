// What the request parsers throw inside themselves when a field's check fails: serve_api.cpp's (chat and
// completions) and responses_api.cpp's (Responses). Each catches RequestInvalid at its entry point and returns
// the error; it never leaves a parser.
#pragma once

#include <string>

#include "serve/serve_api.h"

namespace orbit::serve {

struct RequestInvalid {
  ApiError error;
};

// A field's check failed: a 400 naming `param` ("<param>: <message>", or the message alone without one).
[[noreturn]] inline void invalid_field(const std::string& param, const std::string& message) {
  throw RequestInvalid{
      api_error(400, param.empty() ? message : param + ": " + message, "invalid_request_error", "", param)};
}

// A JSON value's type as an error names it ("a string", "an integer", "null", ...).
template <class Json>
const char* json_type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// A parameter clients send that this server does not serve, refused rather than ignored: a 400 with code
// "unsupported_parameter" naming `param`, "<param>: <what> is not supported by this server".
[[noreturn]] inline void unsupported(const std::string& param, const std::string& what) {
  throw RequestInvalid{api_error(400, param + ": " + what + " is not supported by this server", "invalid_request_error",
                                 "unsupported_parameter", param)};
}

}  // namespace orbit::serve
