#include "serve/http/serve_http.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <regex>
#include <thread>
#include <utility>
#include <vector>

#include "orbit/common/clock.h"
#include "orbit/common/error.h"
#include "serve/http/http_front.h"
#include "serve/http/peer_watch.h"
#include "serve/http/request_count.h"
#include "serve/responses/responses_http.h"
#include "serve/run/tool_stream.h"
#include "serve/stored/chat_store_http.h"
#include "serve/stored/chat_store_wire.h"
#include "serve/stored/store_write.h"
#include "serve/wire/chunk_text.h"
#include "serve/wire/serve_wire.h"
#include "serve/wire/stream_obfuscation.h"

namespace orbit::serve {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

void reply_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

ApiError not_found(const std::string& message, const std::string& code) {
  return api_error(404, message, "not_found_error", code);
}

// The methods a known path allows ("GET, HEAD"), null for a path no route serves.
const char* allowed_methods(const std::string& path) {
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

// The metrics' endpoint label of a path.
std::string endpoint_of(const std::string& path) {
  if (path == "/v1/chat/completions") return "chat";
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/responses") return "responses";
  return "other";
}

// Whether the request's route counts it in the metrics itself, once its answer ended (a stream's status is
// known only then): a POST to a model endpoint (generate, post_responses). Every other answer is counted as
// it is written (routes()' post-routing handler).
bool counted_by_route(const httplib::Request& req) { return req.method == "POST" && endpoint_of(req.path) != "other"; }

// The session a request names: the header X-Orbit-Session, else `user`. Sets *bad on a malformed or repeated header
// (session_header).
std::string session_of(const httplib::Request& req, const std::string& user, std::optional<ApiError>* bad) {
  std::string problem;
  const std::optional<std::string> id = session_header(req, &problem);
  if (!problem.empty()) {
    *bad = api_error(400, "header X-Orbit-Session: " + problem, "invalid_request_error", "", "X-Orbit-Session");
    return "";
  }
  return id ? *id : session_for_user(user);
}

// What one generation request needs from parse to answer, shared by the handler and its stream provider.
struct Job {
  Job(ServeMetrics& metrics, std::atomic<int64_t>& in_flight, const std::string& endpoint)
      : endpoint(endpoint), count(metrics, in_flight, endpoint) {}
  std::string endpoint;  // "chat" or "completions"
  RequestCount count;    // in flight until the job is gone; counted once in the metrics (request_count.h)
  const Clock::time_point t0 = count.t0;
  ResponseIds ids;
  std::optional<ChatRequest> chat;
  std::optional<CompletionRequest> completion;
  std::string session;
  RunTicket ticket;  // checked and planned; holds a chat request's window until it runs
  std::shared_ptr<PeerWatch> watch;
  bool first_token = true;
  std::vector<bool> sent;            // per choice: a chunk of it went out (its first carries the role)
  std::optional<StoreWrite> stored;  // the write of an answer with store true (keep_if_stored)
  int64_t ended = 0;                 // streamed chat: the choices whose end was handed on
  std::string last_tail;          // streamed chat: the closing chunks of the last choice to end, for the stream's tail
  StreamExtras extras;            // streamed chat: what each choice's next chunk carries besides its text
  ChunkText chunks;               // streamed: its text chunks' events, the fields they share rendered once
  StreamObfuscation obfuscation;  // streamed: pads every chunk (stream_options.include_obfuscation)

  const SamplingRequest& sampling() const { return chat ? chat->sampling : completion->sampling; }
  // A chunk's event, padded when the stream is obfuscated (error events and [DONE] are not chunks).
  std::string chunk(const json& body) { return obfuscation.pad(sse(body)); }
  // Whether the next chunk of `choice` is its first; from then on it is not.
  bool opens(int64_t choice) {
    if (sent.size() <= static_cast<std::size_t>(choice)) sent.resize(static_cast<std::size_t>(choice) + 1, false);
    const bool first = !sent[static_cast<std::size_t>(choice)];
    sent[static_cast<std::size_t>(choice)] = true;
    return first;
  }
};

// What a streamed job writes as it runs: each choice's text, its tool calls' pieces, its end.
struct JobStream {
  std::function<bool(int64_t, const std::string&)> on_text;
  std::function<bool(int64_t, const ToolCallDelta&)> on_tool_call;  // null: the calls come whole at the end
  std::function<bool(int64_t, const RunResult&)> on_end;
};

// A streamed chat job's log probabilities and reasoning go to job.extras, for the choice's next chunk (a
// piece of reasoning makes one at once: `text` with an empty delta).
void gather_extras(Job& job, RunSink& sink, const std::function<bool(int64_t, const std::string&)>& text) {
  sink.on_logprobs = [&job](int64_t choice, const StepLogprobs& step) { job.extras.add_logprobs(choice, step); };
  sink.on_reasoning = [&job, text](int64_t choice, const std::string& delta) {
    job.extras.add_reasoning(choice, delta);
    return text(choice, "");
  };
}

// Runs the job; each choice's text goes to `out.on_text` with its index as it comes (a stream with n > 1
// streams every choice, RunSink::on_choice_text; else choice 0's only), its calls' pieces to
// `out.on_tool_call`, and each choice's result as it ends to `out.on_end` (RunSink::on_choice_end).
RunOutcome run_job(ServeCore& core, Job& job, const JobStream& out) {
  RunSink sink;
  sink.on_choice_end = out.on_end;
  sink.cancelled = [&job] { return job.watch->gone(); };
  auto first = [&] {
    if (job.first_token) core.metrics().count_first_token(job.endpoint, seconds_since(job.t0));
    job.first_token = false;
  };
  // Whether the client left is asked once per decode step, through sink.cancelled (decode.cpp), not again
  // after each piece: that was a second recv(MSG_PEEK) per token.
  auto counted = [first, on_text = out.on_text](int64_t choice, const std::string& delta) {
    first();
    return on_text(choice, delta);
  };
  if (out.on_tool_call) {
    sink.on_tool_call = [first, on_call = out.on_tool_call](int64_t choice, const ToolCallDelta& d) {
      first();
      return on_call(choice, d);
    };
  }
  if (job.sampling().stream && job.sampling().n > 1) {
    sink.on_choice_text = counted;
  } else {
    sink.on_text = [&counted](const std::string& delta) { return counted(0, delta); };
  }
  if (job.chat && job.sampling().stream) gather_extras(job, sink, counted);
  job.count.running();
  return core.run(job.ticket, sink);
}

// Keeps a chat answer the request asked to store (store: true), before the client reads its end: a retrieve
// right after the answer finds it. A cancelled run, an error, or a streamed choice that ended with the
// tool_call_stream_mismatch error is not stored (storable). The write's outcome goes in job.stored (a failure
// is counted: store_write.h).
void keep_if_stored(ServeCore& core, Job& job, const RunOutcome& out) {
  if (!job.chat || !job.chat->store || !out.result || !storable(*out.result)) return;
  job.stored = core.chat_completions().put(stored_completion(*job.chat, job.ids, *out.result));
  if (!job.stored->ok) core.metrics().count_store_write_failure("chat_completions");
}

// A non-streamed answer's Orbit-Stored header (and Orbit-Store-Error, Orbit-Store-Pending when its write failed).
void store_headers(httplib::Response& res, const Job& job) {
  if (!job.stored) return;
  for (const auto& [name, value] : store_header_fields(*job.stored)) res.set_header(name, value);
}

json final_body(const Job& job, const RunOutcome& out) {
  if (job.chat) return chat_completion(job.ids, *out.result);
  return text_completion(job.ids, out.result->text, out.result->finish_reason,
                         text_completion_usage(out.result->usage));
}

// A streamed chat choice's closing chunks: the content held back while it might have been a call, the pieces
// of its calls not streamed yet (all of them where they were read at the end), and its finish chunk; or, where
// the answer does not hold a call as it was streamed, an error event naming the call instead.
std::string choice_tail(Job& job, const RunResult& r, int64_t index) {
  if (r.tool_stream_mismatch) return sse(json::parse(error_body(tool_stream_error(*r.tool_stream_mismatch, index))));
  std::string tail;
  if (!r.unstreamed.empty()) {
    tail += job.chunk(chat_chunk(job.ids, r.unstreamed, job.opens(index), "", index, job.extras.take(index)));
  }
  for (const ToolCallDelta& d : r.unstreamed_calls) {
    tail += job.chunk(tool_call_chunk(job.ids, d, job.opens(index), index, job.extras.take(index)));
  }
  return tail + job.chunk(chat_chunk(job.ids, "", job.opens(index), r.finish_reason, index, job.extras.take(index)));
}

// A streamed chat choice that ended: its closing chunks go out now, while the others run, but the last
// choice's wait for the stream's tail, so that the answer is stored (store: true) before the client reads
// its end. False: the client left.
bool end_choice(Job& job, httplib::DataSink& sink, int64_t choice, const RunResult& r) {
  std::string tail = choice_tail(job, r, choice);
  if (++job.ended == std::max<int64_t>(1, job.sampling().n)) {
    job.last_tail = std::move(tail);
    return true;
  }
  return sink.write(tail.data(), tail.size());
}

// The stream's closing events: the last choice's closing chunks (a chat's; the others went out as they
// ended) or the completion's finish chunk, the include_usage chunk, [DONE].
std::string stream_tail(Job& job, const RunOutcome& out) {
  std::string tail;
  if (!out.result) {
    tail += sse(json::parse(error_body(out.error)));
  } else if (job.chat) {
    tail += job.last_tail;
  } else {
    tail += job.chunk(text_completion(job.ids, "", out.result->finish_reason, nullptr));
  }
  // Usage goes in one chunk only, the last one, when stream_options.include_usage asks for it (as OpenAI
  // streams it): clients that add up every chunk's usage would count it twice otherwise.
  if (out.result && job.sampling().include_usage) {
    const json usage = job.chat ? out.result->usage.to_json() : text_completion_usage(out.result->usage);
    tail += job.chunk(usage_chunk(job.ids, job.chat ? "chat.completion.chunk" : "text_completion", usage));
  }
  if (job.stored && !job.stored->ok) tail += job.chunk(store_failed_chunk(job.ids, *job.stored));
  return tail + "data: [DONE]\n\n";
}

// Parses the body, names the session and prepares the run (every check, the ones that need the model
// included: ServeCore::prepare_chat); the error to answer with, before any byte of the answer.
std::optional<ApiError> prepare(ServeCore& core, const httplib::Request& req, Job& job) {
  const ServeLimits& limits = core.options().limits;
  std::string user;
  if (job.endpoint == "chat") {
    Parsed<ChatRequest> p = parse_chat_request(req.body, limits);
    if (!p.ok()) return p.error;
    job.chat = std::move(p.value);
    user = job.chat->user;
  } else {
    Parsed<CompletionRequest> p = parse_completion_request(req.body, limits);
    if (!p.ok()) return p.error;
    job.completion = std::move(p.value);
    user = job.completion->user;
  }
  std::optional<ApiError> bad;
  job.session = session_of(req, user, &bad);
  if (bad) return bad;
  job.ticket = job.chat ? core.prepare_chat(*job.chat, job.session) : core.prepare_completion(*job.completion);
  if (!job.ticket.ok()) return job.ticket.error();
  if (job.chat && job.chat->store) {  // nothing runs for an answer its store cannot take (store_write.h)
    const StoreWrite writable = core.chat_completions().check_writable();
    if (!writable) job.ticket.refuse(store_refusal("chat completions", writable));
    if (!job.ticket.ok()) return job.ticket.error();
  }
  return std::nullopt;
}

// A streamed job: its chunks as they come, then (counted first, so a client that read the whole answer finds
// it in /metrics) the stream's tail. The caller ends the stream.
void stream_job(ServeCore& core, Job& job, httplib::DataSink& sink) {
  job.chunks = ChunkText(job.ids, job.chat ? "chat.completion.chunk" : "text_completion");
  auto on_text = [&](int64_t choice, const std::string& delta) {
    const std::string event =
        job.obfuscation.pad(job.chat ? job.chunks.chat_text(delta, job.opens(choice), choice, job.extras.take(choice))
                                     : job.chunks.completion_text(delta));
    return sink.write(event.data(), event.size());
  };
  auto on_call = [&](int64_t choice, const ToolCallDelta& d) {
    const std::string event =
        job.chunk(tool_call_chunk(job.ids, d, job.opens(choice), choice, job.extras.take(choice)));
    return sink.write(event.data(), event.size());
  };
  auto on_end = [&](int64_t choice, const RunResult& r) { return end_choice(job, sink, choice, r); };
  const RunOutcome out =
      job.chat ? run_job(core, job, JobStream{on_text, on_call, on_end}) : run_job(core, job, JobStream{on_text});
  keep_if_stored(core, job, out);
  job.count.ran(out);
  if (!out.result || out.result->finish_reason != "cancelled") {
    const std::string tail = stream_tail(job, out);
    sink.write(tail.data(), tail.size());
  }
}

}  // namespace

void HttpServer::generate(const std::string& endpoint, const httplib::Request& req, httplib::Response& res) {
  // Counted once and out of flight when the last reference goes (RequestCount), whatever ends it: a 500 when
  // an exception escapes this handler (set_error_handlers answers it) or the stream (stream_job writes it).
  auto job = std::make_shared<Job>(core_.metrics(), in_flight_, endpoint);
  auto fail = [&](const ApiError& e) {
    reply_error(res, e);
    job->count.refused(e.status);  // refused before it ran: no latency sample
  };
  if (draining_) return fail(api_error(503, "the server is shutting down", "server_error", "shutting_down"));
  if (auto bad = prepare(core_, req, *job)) return fail(*bad);
  job->ids = {(job->chat ? "chatcmpl-" : "cmpl-") + id_tag_ + "-" + std::to_string(++next_id_),
              static_cast<int64_t>(std::time(nullptr)), core_.model_name()};
  job->ids.usage_null = job->sampling().stream && job->sampling().include_usage;
  job->obfuscation = StreamObfuscation(job->sampling().stream && job->sampling().include_obfuscation);
  job->watch = std::make_shared<PeerWatch>(req.local_port, req.remote_port);
  if (!job->sampling().stream) {
    const RunOutcome out = run_job(core_, *job, JobStream{[](int64_t, const std::string&) { return true; }});
    keep_if_stored(core_, *job, out);
    if (out.result) {
      store_headers(res, *job);
      res.set_content(dump(final_body(*job, out)), "application/json");
    } else {
      reply_error(res, out.error);
    }
    job->count.ran(out);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [this, job, what = req.method + " " + req.path](std::size_t, httplib::DataSink& sink) {
        try {
          stream_job(core_, *job, sink);
        } catch (...) {  // the head (200) went out: the stream ends with the error
          job->count.failed();
          const std::string tail =
              sse(json::parse(error_body(internal_error(what, std::current_exception())))) + "data: [DONE]\n\n";
          sink.write(tail.data(), tail.size());
        }
        sink.done();
        return true;
      });
}

HttpServer::HttpServer(ServeCore& core, const HttpOptions& options) : core_(core), options_(options) {
  std::random_device entropy;
  char tag[16];
  std::snprintf(tag, sizeof tag, "%06x%06x", entropy() & 0xffffffu, entropy() & 0xffffffu);
  id_tag_ = tag;
  FrontOptions front;
  front.workers = options.threads;
  front.header_seconds = options.header_seconds;
  front.body_seconds = options.body_seconds;
  front.keep_alive_seconds = options.keep_alive_seconds;
  front.write_seconds = options.stall_seconds;
  front.min_drain_rate = options.min_drain_rate;
  front.limits.max_body_bytes = core.options().limits.max_body_bytes;
  FrontHooks hooks;
  hooks.health = [this] {
    const int status = draining_ ? 503 : 200;
    core_.metrics().count_untimed("other", status);
    return std::make_pair(status, json{{"status", draining_ ? "draining" : "ok"}}.dump());
  };
  hooks.refused = [this](const std::string& path, int status) {
    core_.metrics().count_untimed(endpoint_of(path), status);
  };
  hooks.error_body = [](int status, const std::string& message) {
    return error_body(api_error(status, message, status >= 500 ? "server_error" : "invalid_request_error"));
  };
  hooks.answer_fields = [this](const std::string& origin) { return options_.cors.answer_fields(origin); };
  hooks.stalled = [this](bool slow) { core_.metrics().count_stalled(slow); };
  server_ = std::make_unique<HttpFront>(front, hooks);
  // cpp-httplib's default sets SO_REUSEPORT, with which a second server binds a port the first listens on and
  // the kernel splits connections (and so sessions) between them; SO_REUSEADDR alone still allows a restart
  // while old connections linger in TIME_WAIT.
  server_->set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_->set_payload_max_length(core.options().limits.max_body_bytes);
  server_->set_keep_alive_max_count(100000);
  server_->set_tcp_nodelay(true);
  routes();
}

HttpServer::~HttpServer() {
  server_->stop_connections();  // its threads call back into this object
}

namespace {

// cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's library), so
// when more clients connect at once than that, the kernel drops the rest's SYNs and they connect only after
// TCP's one-second retransmit: 16 sessions opened together ran as two waves of 8. The listening socket is
// found by its port among this process's descriptors and listened on again with the system's backlog (Linux
// updates the backlog of a socket that already listens).
void widen_backlog(int port) {
  for (int fd = 0; fd < 1024; ++fd) {
    int listening = 0;
    socklen_t length = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0 || listening == 0) continue;
    sockaddr_storage address{};
    socklen_t size = sizeof address;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) continue;
    const int bound = address.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                                                    : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
}

}  // namespace

int HttpServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.host);
    ORBIT_CHECK(port > 0, "serve: --host " << options_.host
                                           << ": cannot bind any port (not an address of this host, or none free)");
  } else {
    ORBIT_CHECK(server_->bind_to_port(options_.host, port),
                "serve: --host " << options_.host << " --port " << port
                                 << ": cannot bind (in use, or not an address of this host)");
  }
  widen_backlog(port);
  return port;
}

bool HttpServer::listen() { return server_->serve(); }

bool HttpServer::drain_and_stop(const std::function<bool()>& cut_short) {
  draining_ = true;
  const auto deadline = Clock::now() + std::chrono::seconds(options_.drain_seconds);
  server_->limit_stalled_writes(std::chrono::seconds(std::min(options_.drain_stall_seconds, options_.drain_seconds)));
  bool cut = false;
  while (in_flight_ > 0 && Clock::now() < deadline && !cut) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    cut = cut_short && cut_short();
  }
  if (cut) server_->limit_stalled_writes(std::chrono::milliseconds(0));
  core_.close();
  server_->stop_listening();  // also before listen() started: listen() then returns at once
  server_->stop_connections();
  return cut;
}

void HttpServer::routes() {
  httplib::Server& s = *server_;
  // GET /health is answered by the front (http_front.h); a known path with another method is 405, OPTIONS
  // under --allow-origin excepted (answer_options).
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (refuse_unauthorized(req, res)) return httplib::Server::HandlerResponse::Handled;
    const char* allow = allowed_methods(req.path);
    if (allow == nullptr || method_allowed(allow, req.method)) return httplib::Server::HandlerResponse::Unhandled;
    if (req.method == "OPTIONS" && options_.cors.enabled()) {
      answer_options(req, res, allow);
    } else {
      refuse_method(req, res, allow);
    }
    return httplib::Server::HandlerResponse::Handled;
  });
  // Every answer written by cpp-httplib (routed, refused here, 404, streamed: before its first byte) carries
  // the CORS fields for its request's Origin; the front's own answers get them through FrontHooks. Each is
  // counted here in the metrics, but a model endpoint's POST, which its route counts once it ended.
  s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    for (const auto& [name, value] : options_.cors.answer_fields(req.get_header_value("Origin"))) {
      res.set_header(name, value);
    }
    if (res.status == 204) res.headers.erase("Content-Length");  // cpp-httplib's "0": a 204 has none (RFC 9110)
    // cpp-httplib adds "Accept-Ranges: bytes" (to HEAD answers, 0.11) before this handler runs, but Range is
    // dropped by the request reader and every answer goes whole: advertise no ranges.
    res.headers.erase("Accept-Ranges");
    // A 401 came from the pre-routing handler: the route that would count it never ran.
    if (!counted_by_route(req) || res.status == 401) core_.metrics().count_untimed(endpoint_of(req.path), res.status);
  });
  route_models_and_sessions();
  for (const char* endpoint : {"chat", "completions"}) {
    const std::string path = std::string(endpoint) == "chat" ? "/v1/chat/completions" : "/v1/completions";
    s.Post(path,
           [this, endpoint](const httplib::Request& req, httplib::Response& res) { generate(endpoint, req, res); });
  }
  route_stored_chat();
  route_responses();
  set_error_handlers();
}

void HttpServer::refuse_method(const httplib::Request& req, httplib::Response& res, const std::string& allow) {
  const std::string methods = options_.cors.enabled() ? allow + ", OPTIONS" : allow;
  std::string message = "method " + req.method + " is not allowed on " + req.path + " (allowed: " + methods + ")";
  if (req.method == "OPTIONS" && req.has_header("Origin") && req.has_header("Access-Control-Request-Method")) {
    message +=
        "; this is a browser's CORS preflight: start the server with --allow-origin ORIGIN to let pages "
        "from ORIGIN call it";
  }
  res.set_header("Allow", methods);
  reply_error(res, api_error(405, message, "invalid_request_error", "method_not_allowed"));
}

bool HttpServer::refuse_unauthorized(const httplib::Request& req, httplib::Response& res) {
  if (!options_.api_keys.enabled() || req.method == "OPTIONS" || req.path.rfind("/v1/", 0) != 0) return false;
  const std::size_t sent = req.get_header_value_count("Authorization");
  std::optional<std::string> why = sent > 1
                                       ? std::optional<std::string>("header Authorization is given more than once")
                                       : options_.api_keys.refusal(sent == 1, req.get_header_value("Authorization"));
  if (!why) return false;
  res.set_header("WWW-Authenticate", "Bearer");
  reply_error(res, api_error(401, *why, "invalid_request_error", "invalid_api_key"));
  return true;
}

void HttpServer::answer_options(const httplib::Request& req, httplib::Response& res, const std::string& allow) {
  res.set_header("Allow", allow + ", OPTIONS");
  const std::string origin = req.get_header_value("Origin");
  const bool preflight = !origin.empty() && req.has_header("Access-Control-Request-Method");
  if (preflight && !options_.cors.allowed(origin)) {
    reply_error(
        res, api_error(403, "origin '" + origin + "' may not call this server from a browser (not in --allow-origin)",
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
  s.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != core_.model_name()) {
      return reply_error(
          res, not_found("the model '" + std::string(req.matches[1]) + "' does not exist", "model_not_found"));
    }
    res.set_content(core_.models()["data"][0].dump(), "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(core_.metrics().render(core_.gauges()), "text/plain; version=0.0.4");
  });
  s.Get(R"(/v1/sessions/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const auto info = core_.session_info(req.matches[1]);
    if (!info)
      return reply_error(res, not_found("no session '" + std::string(req.matches[1]) + "'", "session_not_found"));
    res.set_content(dump(*info), "application/json");
  });
  s.Delete(R"(/v1/sessions/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    const SessionTable::End ended = core_.end_session(id);
    if (ended == SessionTable::End::kUnknown) {
      return reply_error(res, not_found("no session '" + id + "'", "session_not_found"));
    }
    if (ended == SessionTable::End::kBusy) {
      return reply_error(res, api_error(409,
                                        "session '" + id +
                                            "' has requests running or waiting; delete it once "
                                            "they are done",
                                        "invalid_request_error", "session_busy"));
    }
    res.set_content(json{{"id", id}, {"object", "orbit.session.deleted"}, {"deleted", true}}.dump(),
                    "application/json");
  });
}

void HttpServer::route_stored_chat() {
  httplib::Server& s = *server_;
  s.Get("/v1/chat/completions",
        [this](const httplib::Request& req, httplib::Response& res) { list_chat_completions(core_, req, res); });
  s.Get(R"(/v1/chat/completions/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    get_chat_completion(core_, req.matches[1], req, res);
  });
  s.Get(R"(/v1/chat/completions/([^/]+)/messages)", [this](const httplib::Request& req, httplib::Response& res) {
    list_chat_messages(core_, req.matches[1], req, res);
  });
  s.Post(R"(/v1/chat/completions/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    update_chat_completion(core_, req.matches[1], req, res);
  });
  s.Delete(R"(/v1/chat/completions/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    delete_chat_completion(core_, req.matches[1], res);
  });
}

void HttpServer::route_responses() {
  httplib::Server& s = *server_;
  s.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    post_responses(ResponsesRoute{core_, in_flight_, draining_}, req, res);
  });
  s.Post("/v1/responses/input_tokens",
         [this](const httplib::Request& req, httplib::Response& res) { post_input_tokens(core_, req, res); });
  s.Post(R"(/v1/responses/([^/]+)/cancel)",
         [this](const httplib::Request& req, httplib::Response& res) { cancel_response(core_, req.matches[1], res); });
  s.Get(R"(/v1/responses/([^/]+))",
        [this](const httplib::Request& req, httplib::Response& res) { get_response(core_, req.matches[1], req, res); });
  s.Get(R"(/v1/responses/([^/]+)/input_items)", [this](const httplib::Request& req, httplib::Response& res) {
    get_input_items(core_, req.matches[1], req, res);
  });
  s.Delete(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    delete_response(core_, req.matches[1], res);
  });
}

void HttpServer::set_error_handlers() {
  httplib::Server& s = *server_;
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    const char* type = res.status == 404   ? "not_found_error"
                       : res.status >= 500 ? "server_error"
                                           : "invalid_request_error";
    std::string message = res.status == 404 ? "no such endpoint" : "HTTP status " + std::to_string(res.status);
    if (res.status == 413) message = "the request body is over the server's limit";
    res.set_content(error_body(api_error(res.status, message, type)), "application/json");
  });
  // An exception out of a route: 500 with an OpenAI error naming the request and the exception (the model
  // endpoints' RequestCount counts it; every other route's answer the post-routing handler does).
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    res.headers.clear();  // what the route had set (a store's fields) belongs to an answer it did not give
    reply_error(res, internal_error(req.method + " " + req.path, ep));
  });
}

}  // namespace orbit::serve
