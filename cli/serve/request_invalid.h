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

// A parameter clients send that this server does not serve, refused rather than ignored: a 400 with code
// "unsupported_parameter" naming `param`, "<param>: <what> is not supported by this server".
[[noreturn]] inline void unsupported(const std::string& param, const std::string& what) {
  throw RequestInvalid{api_error(400, param + ": " + what + " is not supported by this server", "invalid_request_error",
                                 "unsupported_parameter", param)};
}

}  // namespace orbit::serve
