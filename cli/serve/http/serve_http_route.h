// What the three parts of HttpServer (serve_http.h) share: serve_http.cpp (the
// listener and the drain), serve_routes.cpp (the routes, methods, CORS and API
// keys) and serve_generate.cpp (the model endpoints). In a namespace of its
// own, as the other routes' helpers are (responses_route, chat_store_route), so
// that the files build as one unit too.
#pragma once

#include <httplib.h>

#include <string>

#include "serve/wire/serve_api.h"

namespace orbit::serve::serve_http_route {

// Answers `e` as an OpenAI error body with its status.
inline void reply_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  // A 503 kv_pool_full (RequestPath::engine_failure) ends when the requests running now do: OpenAI's clients
  // wait what Retry-After says before their retry.
  if (e.code == "kv_pool_full") res.set_header("Retry-After", "1");
  res.set_content(error_body(e), "application/json");
}

// The metrics' endpoint label of a path.
inline std::string endpoint_of(const std::string& path) {
  if (path == "/v1/chat/completions") return "chat";
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/responses") return "responses";
  return "other";
}

}  // namespace orbit::serve::serve_http_route
