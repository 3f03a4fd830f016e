// The HTTP side of `orbit serve` (cpp-httplib): routes, bodies, streaming, draining.
//
//   GET  /health                    {"status": "ok"} (503 {"status": "draining"} after SIGTERM)
//   GET  /v1/models, /v1/models/ID  the one model served
//   POST /v1/chat/completions       OpenAI chat completions; "stream": true answers in server-sent events,
//                                   one chunk per piece of text, a last chunk with finish_reason and usage,
//                                   then "data: [DONE]"
//   POST /v1/completions            OpenAI text completions (streamed the same way)
//   POST /v1/responses              OpenAI's Responses API (responses_http.h): input items, chained by
//                                   previous_response_id into the window the first response named
//   GET  /v1/responses/ID           a stored response as it was returned; DELETE forgets it (404 when not stored)
//   GET  /v1/responses/ID/input_items  its input items, a page at a time (order, limit, after)
//   GET  /v1/sessions/ID            a session's window and savings; DELETE ends it (404 for an unknown one)
//   GET  /metrics                   Prometheus text (serve_metrics.h)
// Every error is an OpenAI error body (serve_api.h) with a 4xx or 5xx status; unknown paths are 404, a
// known path with another method 405 with an Allow header (OPTIONS too, unless --allow-origin: cors.h).
// A percent-encoded slash (%2F) inside a path segment is part of that segment, never a boundary: an ID that
// holds one is an unknown id (no id holds a '/'; a model's name may), so GET /v1/chat/completions/ID%2Fmessages
// is 404 naming "ID/messages", and /v1/chat%2Fcompletions no endpoint (serve_http_route::routed_path).
// Under --allow-origin every answer, the front's included, carries the CORS fields for its request's Origin.
// A session is named by the header X-Orbit-Session, else the body's `user`.
// With API keys (api_keys.h) every /v1/* request but OPTIONS (a browser's preflight carries no credentials)
// needs `Authorization: Bearer KEY`: without it, or with a wrong key, 401 invalid_api_key with
// `WWW-Authenticate: Bearer`, counted (untimed) in orbit_requests_total. /health and /metrics stay open, as
// vLLM's and llama.cpp's health routes do.
// Connections are read by HttpFront (http_front.h) under header and body deadlines, without holding a
// worker; GET /health is answered apart from the workers, so it answers while every worker is busy.
// HttpServer is written in three files: serve_http.cpp (binding, listening, the drain), serve_routes.cpp (the
// routes, methods, CORS preflights and API keys) and serve_generate.cpp (generate: the two model endpoints).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "serve/http/api_keys.h"
#include "serve/http/cors.h"
#include "serve/serve_core.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace orbit::serve {

class HttpFront;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;         // 0: any free port (printed when listening)
  int threads = 64;        // requests answered at once (workers); connections being read or idle hold none
  int drain_seconds = 60;  // SIGTERM waits this long for requests in flight
  // During the drain, a write that makes no progress this long fails (its request ends as cancelled): a client
  // that stopped reading holds the exit this long, not the front's 60 s write timeout (http_front.h).
  int drain_stall_seconds = 5;
  // A write to a client that takes none of its answer this long fails, and the request ends as one whose
  // client left (`--stall-seconds`; FrontOptions::write_seconds); counted in orbit_stalled_clients_total.
  int stall_seconds = 60;
  // So does a write to a client that takes less than this many bytes a second over stall_seconds spent
  // waiting for it (`--min-drain-rate`; FrontOptions::min_drain_rate, drain_rate.h; 0: off); counted in
  // orbit_stalled_clients_total and orbit_slow_clients_total.
  int64_t min_drain_rate = 1024;
  int header_seconds = 10;       // a request's head must arrive within this of its first byte (else 408)
  int body_seconds = 60;         // its body within this of its head (else 408)
  int keep_alive_seconds = 120;  // an idle connection is closed after this; announced in Keep-Alive: timeout=N
  CorsPolicy cors;               // --allow-origin: which pages in a browser may read the answers (cors.h); off
  ApiKeys api_keys;              // --api-key, --api-key-file, ORBIT_API_KEY (api_keys.h); none: /v1/* is open
};

class HttpServer {
 public:
  HttpServer(ServeCore& core, const HttpOptions& options);
  ~HttpServer();
  // Binds; returns the port (throws orbit::Error when it cannot bind).
  int bind();
  // Serves until drain_and_stop() (at once when that came first: a SIGTERM before the listener started
  // still ends it); returns false when the listening socket failed.
  bool listen();
  // Stops taking requests (new ones get 503), waits up to drain_seconds for those in flight, then closes the
  // core (its engine finishes the background work queued, so the store keeps it, in what is left of
  // drain_seconds; the rest is dropped) and the listener, and ends
  // listen(), whether it is running or not yet started. Any thread.
  // From its start, a write stalled for min(drain_stall_seconds, drain_seconds) fails, so a client that stopped
  // reading delays the exit by at most that. `cut_short`, when given, is asked every 10 ms while the drain
  // waits, and while the engine finishes its background work: true ends the wait at once, as if its deadline had
  // passed (an answer still running becomes a 503 server_shutdown, a stalled write fails at once, the background
  // work left is dropped). Returns whether it did.
  bool drain_and_stop(const std::function<bool()>& cut_short = nullptr);
  int64_t in_flight() const { return in_flight_; }
  // The longest the stop waits, once the core is closed, for the answers it cut to write their ending.
  static constexpr std::chrono::seconds kSettleAfterClose{2};

 private:
  void settle_after_close();         // the answers in flight write their ending (at most kSettleAfterClose)
  void routes();                     // every route, by the four below
  void route_models_and_sessions();  // /v1/models, /metrics, /v1/sessions/{id}
  void route_stored_chat();          // stored chat completions (chat_store_http.h)
  void route_responses();            // the Responses API (responses_http.h)
  void set_error_handlers();         // bodies for cpp-httplib's own errors and for exceptions
  // A known path asked with a method it does not serve: 405 with Allow (`allow`, and OPTIONS under CORS).
  void refuse_method(const httplib::Request& req, httplib::Response& res, const std::string& allow);
  // OPTIONS on a known path under --allow-origin: a preflight (Origin and Access-Control-Request-Method) from
  // an allowed origin gets 204 and the grant (cors.h), from another origin 403 origin_not_allowed; a plain
  // OPTIONS 204. Each with Allow.
  void answer_options(const httplib::Request& req, httplib::Response& res, const std::string& allow);
  // Under API keys, a /v1/* request (OPTIONS excepted) without one of them: answers 401 and returns true.
  bool refuse_unauthorized(const httplib::Request& req, httplib::Response& res);
  // A POST to /v1/chat/completions (endpoint "chat") or /v1/completions ("completions").
  void generate(const std::string& endpoint, const httplib::Request& req, httplib::Response& res);

  // A route whose path holds an id (or a model's name) in its pattern's one group.
  struct IdRoute {
    using Answer = std::function<void(const httplib::Request&, httplib::Response&, const std::string& id)>;
    std::string method;  // "GET" (which serves HEAD too), "POST" or "DELETE"
    std::regex pattern;
    Answer answer;
  };
  // Registers an IdRoute with cpp-httplib (the id: the group as it matched the decoded path) and keeps it for
  // answer_slashed.
  void id_route(const std::string& method, const std::string& pattern, IdRoute::Answer answer);
  // A request whose path (`path`: serve_http_route::routed_path) holds an encoded slash inside a segment, its method
  // allowed there: answered by the IdRoute whose pattern `path` matches, with the group decoded (an id that holds a
  // '/': the route's 404 for an unknown id), else 404 "no such endpoint". Never by the route cpp-httplib matches
  // with the path decoded whole. The pre-routing handler calls it, but for a POST, whose body cpp-httplib reads
  // after that handler: every POST route is registered through post_route, which calls it first (a last route,
  // ".*", takes a POST that no route matched by its decoded path).
  void answer_slashed(const httplib::Request& req, httplib::Response& res, const std::string& path);
  void post_route(const std::string& pattern, std::function<void(const httplib::Request&, httplib::Response&)> handler);
  std::unique_ptr<HttpFront> server_;
  ServeCore& core_;
  HttpOptions options_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> next_id_{0};
  std::vector<IdRoute> id_routes_;  // written by routes() before the server starts; read only after
  // 12 random hex digits drawn at startup: ids are "chatcmpl-<tag>-<n>", unique across restarts as well.
  std::string id_tag_;
};

}  // namespace orbit::serve
