// What the three parts of HttpServer (serve_http.h) share: serve_http.cpp (the
// listener and the drain), serve_routes.cpp (the routes, methods, CORS and API
// keys) and serve_generate.cpp (the model endpoints). In a namespace of its
// own, as the other routes' helpers are (responses_route, chat_store_route), so
// that the files build as one unit too.
#pragma once

#include <httplib.h>

#include <algorithm>
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

// The path the routes match. cpp-httplib decodes the whole path before it routes, so that an encoded slash inside a
// segment would split it ("/v1/chat/completions/ID%2Fmessages" reached ID's messages); but a '/' sent as %2F is
// no segment boundary, and no id holds one. Where a segment holds one, this is the path with each segment decoded
// on its own and its '%' and '/' encoded again ("%25", "%2F"): one segment still, which HttpServer's pre-routing
// handler routes itself (decode_url of a group its pattern captures gives the segment back); *slashed is then set.
// Else req.path as cpp-httplib decoded it.
inline std::string routed_path(const httplib::Request& req, bool* slashed = nullptr) {
  if (slashed != nullptr) *slashed = false;
  const std::string raw = req.target.substr(0, req.target.find('?'));
  std::string path;
  bool any = false;
  for (std::size_t at = 0; at <= raw.size();) {
    const std::size_t end = std::min(raw.find('/', at), raw.size());
    const std::string segment = httplib::detail::decode_url(raw.substr(at, end - at), false);
    if (at > 0) path += '/';
    for (const char c : segment) {
      any = any || c == '/';
      path += c == '%' ? "%25" : c == '/' ? "%2F" : std::string(1, c);
    }
    at = end + 1;
  }
  if (!any) return req.path;
  if (slashed != nullptr) *slashed = true;
  return path;
}

// The metrics' endpoint label of a request by its path: a model endpoint's (its POSTs, and the preflights,
// 405s and refusals of other methods there), "other" for the rest, a GET or HEAD of /v1/chat/completions
// included: that is the stored chat completions' list, not a chat request.
inline std::string endpoint_of(const std::string& method, const std::string& path) {
  if (path == "/v1/chat/completions") return method == "GET" || method == "HEAD" ? "other" : "chat";
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/responses") return "responses";
  return "other";
}

}  // namespace orbit::serve::serve_http_route
