// What the request parsers throw inside themselves when a field's check fails: serve_api.cpp's (chat and
// completions) and responses_api.cpp's (Responses). Each catches RequestInvalid at its entry point and returns
// the error; it never leaves a parser.
#pragma once

#include <string>

#include "serve/wire/serve_api.h"

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

// OpenAI's `metadata`, checked at `param`: an object of at most 16 pairs, keys of at most 64 bytes, string
// values of at most 512 bytes. The chat request, the chat completion update and the Responses API check it so.
template <class Json>
void check_metadata(const Json& v, const std::string& param = "metadata") {
  if (!v.is_object()) invalid_field(param, std::string("expected an object, got ") + json_type_name(v));
  if (v.size() > 16) invalid_field(param, "at most 16 pairs are accepted");
  for (const auto& [key, value] : v.items()) {
    if (key.size() > 64) invalid_field(param, "a key is over 64 bytes");
    const std::string at = param + "." + key;
    if (!value.is_string()) invalid_field(at, std::string("expected a string, got ") + json_type_name(value));
    if (value.template get_ref<const std::string&>().size() > 512) invalid_field(at, "over 512 bytes");
  }
}

// A parameter clients send that this server does not serve, refused rather than ignored: a 400 with code
// "unsupported_parameter" naming `param`, "<param>: <what> is not supported by this server".
[[noreturn]] inline void unsupported(const std::string& param, const std::string& what) {
  throw RequestInvalid{api_error(400, param + ": " + what + " is not supported by this server", "invalid_request_error",
                                 "unsupported_parameter", param)};
}

}  // namespace orbit::serve
