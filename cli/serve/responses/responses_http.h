// POST /v1/responses over HTTP (cpp-httplib): the route serve_routes.cpp registers. The request is prepared
// in the handler (a refusal is a plain JSON error with its status) and run whole, or inside the stream
// (text/event-stream, the events of responses_wire.h). A session is named by the header X-Orbit-Session,
// else the body's `user`, else the response chain (responses_run.h). Counted in the metrics under the
// endpoint "responses". GET and DELETE /v1/responses/{id} read and forget a stored one (responses_store.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "serve/serve_core.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace orbit::serve {

// What the route shares with the server (references to the HttpServer's members, which outlive it).
struct ResponsesRoute {
  ServeCore& core;
  std::atomic<int64_t>& in_flight;    // requests being answered (the drain waits for them)
  const std::atomic<bool>& draining;  // new requests get 503
};

// The session the header X-Orbit-Session names: nullopt without the header. *problem is set (and nullopt
// returned) when the header is given more than once, even with one value, is sent empty ("X-Orbit-Session:",
// which the front names: http_request_reader.h), or is not a session id (session_id_problem): each would
// otherwise serve the request on a session it did not mean (an empty one, on none).
std::optional<std::string> session_header(const httplib::Request& req, std::string* problem);

void post_responses(const ResponsesRoute& route, const httplib::Request& req, httplib::Response& res);
// GET /v1/responses/{id}: the response object as it was returned (404 response_not_found when it is not stored);
// one with store true still running: the response with status "in_progress" and no output yet, as
// response.created showed it (ResponseStore::live); a query asking for more (stream=true, include, ...) is a 400
// naming it (responses_items.h).
void get_response(ServeCore& core, const std::string& id, const httplib::Request& req, httplib::Response& res);
// GET /v1/responses/{id}/input_items: its input as items, a page at a time (responses_items.h); a running one's too.
void get_input_items(ServeCore& core, const std::string& id, const httplib::Request& req, httplib::Response& res);
// POST /v1/responses/input_tokens: {"object": "response.input_tokens", "input_tokens": N}
// (count_input_tokens, responses_run.h).
void post_input_tokens(ServeCore& core, const httplib::Request& req, httplib::Response& res);
// POST /v1/responses/{id}/cancel: only a response created with background true can be cancelled, and this
// server runs none in the background (a 400 for a stored or running response, 404 for an unknown one); a
// response being streamed ends when its client closes the connection.
void cancel_response(ServeCore& core, const std::string& id, httplib::Response& res);
// DELETE /v1/responses/{id}: {"id", "object": "response", "deleted": true}; 404 when it is not stored. A stored
// response that continued it keeps its conversation. One with store true still running is deleted too: its run
// goes on for its client, nothing is stored when it ends, and a GET is a 404 from now on.
void delete_response(ServeCore& core, const std::string& id, httplib::Response& res);

}  // namespace orbit::serve
