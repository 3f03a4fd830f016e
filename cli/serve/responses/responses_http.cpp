#include "serve/responses/responses_http.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "orbit/common/clock.h"
#include "serve/http/event_stream.h"
#include "serve/http/http_request_reader.h"
#include "serve/http/peer_watch.h"
#include "serve/http/request_count.h"
#include "serve/http/serve_http_route.h"
#include "serve/responses/responses_items.h"
#include "serve/responses/responses_run.h"
#include "serve/wire/serve_wire.h"

namespace orbit::serve {

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace responses_route {

using Clock = std::chrono::steady_clock;
const char* const kEndpoint = "responses";

// As every route answers an error (serve_http_route.h: a 503 kv_pool_full carries Retry-After).
void reply_error(httplib::Response& res, const ApiError& e) { serve_http_route::reply_error(res, e); }

// One request, shared by the handler and its stream provider.
struct ResponseJob {
  ResponseJob(ServeCore& core, std::atomic<int64_t>& in_flight)
      : core(core), count(core.metrics(), in_flight, kEndpoint) {}
  ResponseJob(const ResponseJob&) = delete;
  ResponseJob& operator=(const ResponseJob&) = delete;
  ~ResponseJob() { finish_call(core, call); }  // a session made for a response never stored ends (responses_run.h)
  ServeCore& core;
  RequestCount count;  // in flight until the job is gone; counted once in the metrics (request_count.h)
  const Clock::time_point t0 = count.t0;
  ResponseCall call;
  std::shared_ptr<PeerWatch> watch;
  bool first_token = true;
};

// Something of the answer went out: counts the first token. Always true: whether the client left is asked
// once per decode step, through RunSink::cancelled, not again per piece (a second recv(MSG_PEEK) per token).
bool observed(ServeCore& core, ResponseJob& job) {
  if (job.first_token) core.metrics().count_first_token(kEndpoint, seconds_since(job.t0));
  job.first_token = false;
  return true;
}

// Cancels the run when the client leaves (RunSink::cancelled); counts the first token (text or, streamed, a
// call's piece).
RunSink job_sink(ServeCore& core, ResponseJob& job, bool streamed = false) {
  job.count.running();
  RunSink sink;
  sink.cancelled = [&job] { return job.watch->gone(); };
  sink.on_text = [&core, &job](const std::string&) { return observed(core, job); };
  if (streamed) sink.on_tool_call = [&core, &job](int64_t, const ToolCallDelta&) { return observed(core, job); };
  return sink;
}

}  // namespace responses_route

namespace responses_route {

// How many times the request sent `name` with an empty value (the front names them: http_request_reader.h).
std::size_t sent_empty(const httplib::Request& req, const std::string& name) {
  std::size_t n = 0;
  const auto [first, last] = req.headers.equal_range(kEmptyFieldHeader);  // httplib compares names ignoring case
  for (auto it = first; it != last; ++it) {
    n += std::equal(name.begin(), name.end(), it->second.begin(), it->second.end(),
                    [](unsigned char a, unsigned char b) { return std::tolower(a) == std::tolower(b); });
  }
  return n;
}

}  // namespace responses_route

std::optional<std::string> session_header(const httplib::Request& req, std::string* problem) {
  const std::size_t empty = responses_route::sent_empty(req, "X-Orbit-Session");
  const std::size_t given = req.get_header_value_count("X-Orbit-Session") + empty;
  if (given == 0) return std::nullopt;
  if (given > 1) {
    *problem = "given " + std::to_string(given) + " times (more than once): a request names one session";
    return std::nullopt;
  }
  if (empty > 0) {
    *problem = "empty: name a session, or leave the header out to be served without one";
    return std::nullopt;
  }
  std::string id = req.get_header_value("X-Orbit-Session");
  *problem = session_id_problem(id);
  if (!problem->empty()) return std::nullopt;
  return id;
}

void post_responses(const ResponsesRoute& route, const httplib::Request& req, httplib::Response& res) {
  ServeCore& core = route.core;
  // Counted once and out of flight when the last reference goes (RequestCount), whatever ends it: a 500 when
  // an exception escapes this handler (the server's exception handler answers it) or the stream.
  auto job = std::make_shared<responses_route::ResponseJob>(core, route.in_flight);
  auto fail = [&](const ApiError& e) {
    responses_route::reply_error(res, e);
    job->count.refused(e.status);  // refused before it ran: not timed
  };
  if (route.draining) return fail(api_error(503, "the server is shutting down", "server_error", "shutting_down"));
  std::string problem;
  const std::optional<std::string> header = session_header(req, &problem);
  if (!problem.empty()) {
    return fail(api_error(400, "header X-Orbit-Session: " + problem, "invalid_request_error", "invalid_value",
                          "X-Orbit-Session"));
  }
  if (auto bad = prepare_response(core, req.body, header ? &*header : nullptr, job->call)) return fail(*bad);
  job->watch = std::make_shared<PeerWatch>();
  if (!job->call.request.chat.sampling.stream) {
    // A client that half-closed after its request is asked with a 100 Continue before the head (peer_watch.h).
    if (req.version == "HTTP/1.1") job->watch->probe_with_continue();
    const ResponseOutcome out = run_response(core, job->call, responses_route::job_sink(core, *job));
    if (out.run.result) {
      if (out.stored) {  // store_write.h
        for (const auto& [name, value] : store_header_fields(*out.stored)) res.set_header(name, value);
      }
      res.set_content(dump(out.body), "application/json");
    } else {
      responses_route::reply_error(res, out.run.error);
    }
    job->count.ran(out.run, /*whole=*/true);
    return;
  }
  // The sync runs before the stream's head (ServeCore::sync_ahead): a refusal there (503 kv_pool_full with
  // Retry-After) is answered as a whole response's is, not as response.failed after a 200.
  if (req.version == "HTTP/1.1") job->watch->probe_with_continue();  // as above, before the head
  job->count.running();
  if (auto refused = core.sync_ahead(job->call.ticket, [job] { return job->watch->gone(); })) {
    RunOutcome out;
    out.error = responses_error(*refused);
    responses_route::reply_error(res, out.error);
    job->count.ran(out);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  set_event_stream(req, res, [&core = route.core, job](std::size_t, httplib::DataSink& sink) {
    const auto write = [&sink](const std::string& events) { return sink.write(events.data(), events.size()); };
    // An exception out of the run ends the stream with response.failed naming it (run_response): a 500.
    // One before response.created went out (run_response lets those through) ends it with an error event.
    std::optional<ResponseOutcome> ran;
    // A client that half-closed after its request is asked with a comment event (peer_watch.h).
    job->watch->probe_with_comment(write);
    try {
      ran = run_response(core, job->call, responses_route::job_sink(core, *job, true), write);
    } catch (...) {
      job->watch->no_probe();
      job->count.failed();
      write(stream_error_event(internal_error("POST /v1/responses", std::current_exception())));
      sink.done();
      return true;
    }
    job->watch->no_probe();
    const ResponseOutcome& out = *ran;
    // Counted before the last event goes out: a client that read the whole stream finds it in /metrics.
    job->count.ran(out.run);
    if (!out.last_events.empty()) write(out.last_events);
    sink.done();
    return true;
  });
}

namespace responses_route {

ApiError unknown_response(const std::string& id) {
  return api_error(
      404,
      "no stored response '" + id + "' (never stored, stored with store false, deleted, or dropped from the store)",
      "invalid_request_error", "response_not_found");
}

// The response `id`: running (shown with status in_progress, ResponseStore::live; asked first, as a running
// one's store waits for the answer there), else stored; null when neither.
std::shared_ptr<const StoredResponse> stored_or_running(ServeCore& core, const std::string& id) {
  auto [running, shown] = core.responses().live().running(id);
  if (running) return shown;
  return core.responses().get(id);
}

}  // namespace responses_route

void get_response(ServeCore& core, const std::string& id, const httplib::Request& req, httplib::Response& res) {
  if (const std::optional<ApiError> bad = retrieve_query_problem(req.params)) {
    return responses_route::reply_error(res, *bad);
  }
  const std::shared_ptr<const StoredResponse> stored = responses_route::stored_or_running(core, id);
  if (!stored) return responses_route::reply_error(res, responses_route::unknown_response(id));
  res.set_content(stored->body, "application/json");
}

void get_input_items(ServeCore& core, const std::string& id, const httplib::Request& req, httplib::Response& res) {
  const std::shared_ptr<const StoredResponse> stored = responses_route::stored_or_running(core, id);
  if (!stored) return responses_route::reply_error(res, responses_route::unknown_response(id));
  const ItemsPage page = input_items_page(*stored, req.params);  // httplib::Params is a multimap
  if (page.error) return responses_route::reply_error(res, *page.error);
  res.set_content(dump(page.body), "application/json");
}

void post_input_tokens(ServeCore& core, const httplib::Request& req, httplib::Response& res) {
  const Parsed<int64_t> count = count_input_tokens(core, req.body);
  if (!count.ok()) return responses_route::reply_error(res, count.error);
  res.set_content(dump(nlohmann::json{{"object", "response.input_tokens"}, {"input_tokens", *count.value}}),
                  "application/json");
}

void cancel_response(ServeCore& core, const std::string& id, httplib::Response& res) {
  const bool running = core.responses().live().running(id).first;
  if (!running && !core.responses().get(id)) {
    return responses_route::reply_error(res, responses_route::unknown_response(id));
  }
  const std::string state = running ? "is still in progress, but in the foreground: its client ends it by leaving, "
                                      "and DELETE deletes it"
                                    : "has finished";
  responses_route::reply_error(res, api_error(400,
                                              "only a response created with background true can be cancelled, "
                                              "and this server runs none in the background (response '" +
                                                  id + "' " + state + ")",
                                              "invalid_request_error", "response_not_cancellable"));
}

void delete_response(ServeCore& core, const std::string& id, httplib::Response& res) {
  // One still running is deleted there: its run goes on for its client, but nothing is stored when it ends.
  const bool running = core.responses().live().erase(id);
  if (!running && !core.responses().erase(id))
    return responses_route::reply_error(res, responses_route::unknown_response(id));
  res.set_content(dump(nlohmann::json{{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json");
}

}  // namespace orbit::serve
