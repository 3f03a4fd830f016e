// HttpServer's routes (serve_http.h): which path serves which methods, CORS
// preflights, API keys, and the routes but the model endpoints'
// (serve_generate.cpp).
#include "serve/http/serve_http.h"

#include <httplib.h>

#include <algorithm>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "serve/http/http_front.h"
#include "serve/http/serve_http_route.h"
#include "serve/responses/responses_http.h"
#include "serve/stored/chat_store_http.h"
#include "serve/wire/serve_wire.h"

namespace orbit::serve {

using nlohmann::json;

namespace {

ApiError not_found(const std::string& message, const std::string& code) {
  return api_error(404, message, "not_found_error", code);
}

// OpenAI's endpoints that agent clients call and this server does not serve,
// with what to use instead: their 404 says so ("no such endpoint" alone reads
// as a wrong base URL). The Agents SDK's OpenAIResponsesCompactionSession
// calls responses.compact, its OpenAIConversationsSession /v1/conversations.
const char* unserved_endpoint(const std::string& path) {
  static const std::vector<std::pair<std::regex, const char*>> unserved = {
      {std::regex("/v1/responses/compact"),
       "compacting a conversation (POST /v1/responses/compact) is not served by this server; with truncation "
       "\"auto\" a response drops the oldest items that do not fit the context"},
      {std::regex("/v1/conversations(/.*)?"),
       "conversations (/v1/conversations) are not served by this server; chain responses by previous_response_id"},
  };
  for (const auto& [pattern, message] : unserved) {
    if (std::regex_match(path, pattern)) return message;
  }
  return nullptr;
}

// The methods a known path allows ("GET, HEAD"), null for a path no route
// serves.
const char* allowed_methods(const std::string& path) {
  if (unserved_endpoint(path) != nullptr) return nullptr;  // "compact" is no response id: a 404 that says why
  static const std::vector<std::pair<std::regex, const char*>> routes = {
      {std::regex("/health|/metrics|/v1/models(/.+)?"), "GET, HEAD"},
      {std::regex("/v1/responses/input_tokens|/v1/responses/[^/]+/cancel"), "POST"},
      {std::regex("/v1/sessions/[^/]+|/v1/responses/[^/]+"), "GET, HEAD, DELETE"},
      {std::regex("/v1/responses/[^/]+/input_items"), "GET, HEAD"},
      {std::regex("/v1/chat/completions/[^/]+"), "GET, HEAD, POST, DELETE"},
      {std::regex("/v1/chat/completions/[^/]+/messages"), "GET, HEAD"},
      {std::regex("/v1/chat/completions"), "GET, HEAD, POST"},
      {std::regex("/v1/completions|/v1/responses"), "POST"},
  };
  for (const auto& [pattern, allow] : routes) {
    if (std::regex_match(path, pattern)) return allow;
  }
  return nullptr;
}

bool method_allowed(const std::string& allow, const std::string& method) {
  std::size_t at = 0;
  while (at < allow.size()) {
    const std::size_t end = std::min(allow.find(", ", at), allow.size());
    if (allow.compare(at, end - at, method) == 0) return true;
    at = end + 2;
  }
  return false;
}

// Whether the request's route counts it in the metrics itself, once its answer
// ended (a stream's status is known only then): a POST to a model endpoint
// (generate, post_responses). Every other answer is counted as it is written
// (routes()' post-routing handler).
bool counted_by_route(const httplib::Request& req) {
  return req.method == "POST" &&
         serve_http_route::endpoint_of(req.method, serve_http_route::routed_path(req)) != "other";
}

// A 404's message for a path no route serves (one OpenAI serves says what to use instead).
std::string no_endpoint(const std::string& path) {
  const char* unserved = unserved_endpoint(path);
  return unserved != nullptr ? unserved : "no such endpoint";
}

// DELETE /v1/sessions/{id}.
void delete_session(ServeCore& core, const std::string& id, httplib::Response& res) {
  const SessionTable::End ended = core.end_session(id);
  if (ended == SessionTable::End::kUnknown) {
    return serve_http_route::reply_error(res, not_found("no session '" + id + "'", "session_not_found"));
  }
  if (ended == SessionTable::End::kBusy) {
    return serve_http_route::reply_error(
        res, api_error(409, "session '" + id + "' has requests running or waiting; delete it once they are done",
                       "invalid_request_error", "session_busy"));
  }
  res.set_content(json{{"id", id}, {"object", "orbit.session.deleted"}, {"deleted", true}}.dump(), "application/json");
}

}  // namespace

void HttpServer::routes() {
  httplib::Server& s = *server_;
  // GET /health is answered by the front (http_front.h); a known path with
  // another method is 405, OPTIONS under --allow-origin excepted
  // (answer_options).
  // A path with an encoded slash inside a segment is answered here, by its segments (answer_slashed), never routed
  // by cpp-httplib.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (refuse_unauthorized(req, res)) return httplib::Server::HandlerResponse::Handled;
    bool slashed = false;
    const std::string path = serve_http_route::routed_path(req, &slashed);
    const char* allow = allowed_methods(path);
    if (allow == nullptr || method_allowed(allow, req.method)) {
      // A POST's body is read after this handler: post_route answers it then.
      if (!slashed || (allow != nullptr && req.method == "POST")) return httplib::Server::HandlerResponse::Unhandled;
      answer_slashed(req, res, path);
    } else if (req.method == "OPTIONS" && options_.cors.enabled()) {
      answer_options(req, res, allow);
    } else {
      refuse_method(req, res, allow);
    }
    return httplib::Server::HandlerResponse::Handled;
  });
  // Every answer written by cpp-httplib (routed, refused here, 404, streamed:
  // before its first byte) carries the CORS fields for its request's Origin;
  // the front's own answers get them through FrontHooks. Each is counted here
  // in the metrics, but a model endpoint's POST, which its route counts once it
  // ended.
  s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    for (const auto& [name, value] : options_.cors.answer_fields(req.get_header_value("Origin"))) {
      res.set_header(name, value);
    }
    if (res.status == 204) res.headers.erase("Content-Length");  // cpp-httplib's "0": a 204 has none (RFC 9110)
    // cpp-httplib adds "Accept-Ranges: bytes" (to HEAD answers, 0.11)
    // before this handler runs, but Range is dropped by the request reader
    // and every answer goes whole: advertise no ranges.
    res.headers.erase("Accept-Ranges");
    // A 401 came from the pre-routing handler: the route that would count
    // it never ran.
    if (!counted_by_route(req) || res.status == 401)
      core_.metrics().count_untimed(serve_http_route::endpoint_of(req.method, serve_http_route::routed_path(req)),
                                    res.status);
  });
  route_models_and_sessions();
  for (const char* endpoint : {"chat", "completions"}) {
    const std::string path = std::string(endpoint) == "chat" ? "/v1/chat/completions" : "/v1/completions";
    post_route(path,
               [this, endpoint](const httplib::Request& req, httplib::Response& res) { generate(endpoint, req, res); });
  }
  route_stored_chat();
  route_responses();
  // Last: a POST no route above matched by its decoded path, which its segments may still route.
  post_route(".*", [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
  set_error_handlers();
}

void HttpServer::refuse_method(const httplib::Request& req, httplib::Response& res, const std::string& allow) {
  const std::string methods = options_.cors.enabled() ? allow + ", OPTIONS" : allow;
  std::string message = "method " + req.method + " is not allowed on " + req.path + " (allowed: " + methods + ")";
  if (req.method == "OPTIONS" && req.has_header("Origin") && req.has_header("Access-Control-Request-Method")) {
    message +=
        "; this is a browser's CORS preflight: start the server with "
        "--allow-origin ORIGIN to let pages "
        "from ORIGIN call it";
  }
  res.set_header("Allow", methods);
  serve_http_route::reply_error(res, api_error(405, message, "invalid_request_error", "method_not_allowed"));
}

void HttpServer::id_route(const std::string& method, const std::string& pattern, IdRoute::Answer answer) {
  id_routes_.push_back({method, std::regex(pattern), answer});
  auto routed = [answer](const httplib::Request& req, httplib::Response& res) {
    answer(req, res, req.matches[1].str());
  };
  httplib::Server& s = *server_;
  if (method == "GET") {
    s.Get(pattern, routed);
  } else if (method == "POST") {
    post_route(pattern, routed);
  } else {
    s.Delete(pattern, routed);
  }
}

void HttpServer::post_route(const std::string& pattern,
                            std::function<void(const httplib::Request&, httplib::Response&)> handler) {
  server_->Post(pattern, [this, handler](const httplib::Request& req, httplib::Response& res) {
    bool slashed = false;
    const std::string path = serve_http_route::routed_path(req, &slashed);
    if (slashed) return answer_slashed(req, res, path);
    handler(req, res);
  });
}

void HttpServer::answer_slashed(const httplib::Request& req, httplib::Response& res, const std::string& path) {
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  for (const IdRoute& route : id_routes_) {
    std::smatch m;
    if (route.method == method && std::regex_match(path, m, route.pattern)) {
      return route.answer(req, res, httplib::detail::decode_url(m[1].str(), false));
    }
  }
  serve_http_route::reply_error(res, not_found(no_endpoint(path), ""));
}

bool HttpServer::refuse_unauthorized(const httplib::Request& req, httplib::Response& res) {
  if (!options_.api_keys.enabled() || req.method == "OPTIONS" || req.path.rfind("/v1/", 0) != 0) return false;
  const std::size_t sent = req.get_header_value_count("Authorization");
  std::optional<std::string> why = sent > 1
                                       ? std::optional<std::string>("header Authorization is given more than once")
                                       : options_.api_keys.refusal(sent == 1, req.get_header_value("Authorization"));
  if (!why) return false;
  res.set_header("WWW-Authenticate", "Bearer");
  serve_http_route::reply_error(res, api_error(401, *why, "invalid_request_error", "invalid_api_key"));
  return true;
}

void HttpServer::answer_options(const httplib::Request& req, httplib::Response& res, const std::string& allow) {
  res.set_header("Allow", allow + ", OPTIONS");
  const std::string origin = req.get_header_value("Origin");
  const bool preflight = !origin.empty() && req.has_header("Access-Control-Request-Method");
  if (preflight && !options_.cors.allowed(origin)) {
    serve_http_route::reply_error(res, api_error(403,
                                                 "origin '" + origin +
                                                     "' may not call this server from a browser (not in "
                                                     "--allow-origin)",
                                                 "invalid_request_error", "origin_not_allowed"));
    return;
  }
  for (const auto& [name, value] :
       options_.cors.preflight_fields(origin, allow, req.get_header_value("Access-Control-Request-Headers"))) {
    res.set_header(name, value);
  }
  res.status = 204;
}

void HttpServer::route_models_and_sessions() {
  httplib::Server& s = *server_;
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(core_.models().dump(), "application/json");
  });
  id_route("GET", R"(/v1/models/(.+))", [this](const httplib::Request&, httplib::Response& res, const std::string& id) {
    if (id != core_.model_name()) {
      return serve_http_route::reply_error(res, not_found("the model '" + id + "' does not exist", "model_not_found"));
    }
    res.set_content(core_.models()["data"][0].dump(), "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(core_.metrics().render(core_.gauges()), "text/plain; version=0.0.4");
  });
  const std::string session = R"(/v1/sessions/([^/]+))";
  id_route("GET", session, [this](const httplib::Request&, httplib::Response& res, const std::string& id) {
    const auto info = core_.session_info(id);
    if (!info) return serve_http_route::reply_error(res, not_found("no session '" + id + "'", "session_not_found"));
    res.set_content(dump(*info), "application/json");
  });
  id_route("DELETE", session, [this](const httplib::Request&, httplib::Response& res, const std::string& id) {
    delete_session(core_, id, res);
  });
}

void HttpServer::route_stored_chat() {
  httplib::Server& s = *server_;
  s.Get("/v1/chat/completions",
        [this](const httplib::Request& req, httplib::Response& res) { list_chat_completions(core_, req, res); });
  const std::string one = R"(/v1/chat/completions/([^/]+))";
  id_route("GET", one, [this](const httplib::Request& req, httplib::Response& res, const std::string& id) {
    get_chat_completion(core_, id, req, res);
  });
  id_route("GET", one + "/messages",
           [this](const httplib::Request& req, httplib::Response& res, const std::string& id) {
             list_chat_messages(core_, id, req, res);
           });
  id_route("POST", one, [this](const httplib::Request& req, httplib::Response& res, const std::string& id) {
    update_chat_completion(core_, id, req, res);
  });
  id_route("DELETE", one, [this](const httplib::Request&, httplib::Response& res, const std::string& id) {
    delete_chat_completion(core_, id, res);
  });
}

void HttpServer::route_responses() {
  post_route("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    post_responses(ResponsesRoute{core_, in_flight_, draining_}, req, res);
  });
  post_route("/v1/responses/input_tokens",
             [this](const httplib::Request& req, httplib::Response& res) { post_input_tokens(core_, req, res); });
  const std::string one = R"(/v1/responses/([^/]+))";
  id_route("POST", one + "/cancel", [this](const httplib::Request&, httplib::Response& res, const std::string& id) {
    cancel_response(core_, id, res);
  });
  id_route("GET", one, [this](const httplib::Request& req, httplib::Response& res, const std::string& id) {
    get_response(core_, id, req, res);
  });
  id_route("GET", one + "/input_items",
           [this](const httplib::Request& req, httplib::Response& res, const std::string& id) {
             get_input_items(core_, id, req, res);
           });
  id_route("DELETE", one, [this](const httplib::Request&, httplib::Response& res, const std::string& id) {
    delete_response(core_, id, res);
  });
}

void HttpServer::set_error_handlers() {
  httplib::Server& s = *server_;
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const char* type = res.status == 404   ? "not_found_error"
                       : res.status >= 500 ? "server_error"
                                           : "invalid_request_error";
    std::string message = res.status == 404 ? no_endpoint(req.path) : "HTTP status " + std::to_string(res.status);
    if (res.status == 413) message = "the request body is over the server's limit";
    res.set_content(error_body(api_error(res.status, message, type)), "application/json");
  });
  // An exception out of a route: 500 with an OpenAI error naming the request
  // and the exception (the model endpoints' RequestCount counts it; every other
  // route's answer the post-routing handler does).
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    res.headers.clear();  // what the route had set (a store's fields) belongs to
                          // an answer it did not give
    serve_http_route::reply_error(res, internal_error(req.method + " " + req.path, ep));
  });
}

}  // namespace orbit::serve
