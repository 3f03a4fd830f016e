// HttpServer::generate (serve_http.h): a POST to /v1/chat/completions or
// /v1/completions, parsed, prepared, run and answered whole or streamed.
#include "serve/http/serve_http.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "orbit/common/clock.h"
#include "serve/http/event_stream.h"
#include "serve/http/peer_watch.h"
#include "serve/http/request_count.h"
#include "serve/http/serve_http_route.h"
#include "serve/responses/responses_http.h"
#include "serve/run/tool_stream.h"
#include "serve/stored/chat_store_wire.h"
#include "serve/stored/live_answers.h"
#include "serve/stored/store_write.h"
#include "serve/wire/chunk_text.h"
#include "serve/wire/serve_wire.h"
#include "serve/wire/stream_obfuscation.h"

namespace orbit::serve {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// The session a request names: the header X-Orbit-Session, else `user`. Sets
// *bad on a malformed or repeated header (session_header).
std::string session_of(const httplib::Request& req, const std::string& user, std::optional<ApiError>* bad) {
  std::string problem;
  const std::optional<std::string> id = session_header(req, &problem);
  if (!problem.empty()) {
    *bad = api_error(400, "header X-Orbit-Session: " + problem, "invalid_request_error", "invalid_value",
                     "X-Orbit-Session");
    return "";
  }
  return id ? *id : session_for_user(user);
}

// What one generation request needs from parse to answer, shared by the handler
// and its stream provider.
struct Job {
  Job(ServeMetrics& metrics, std::atomic<int64_t>& in_flight, const std::string& endpoint)
      : endpoint(endpoint), count(metrics, in_flight, endpoint) {}
  std::string endpoint;  // "chat" or "completions"
  RequestCount count;    // in flight until the job is gone; counted once in the
                         // metrics (request_count.h)
  const Clock::time_point t0 = count.t0;
  ResponseIds ids;
  std::optional<ChatRequest> chat;
  std::optional<CompletionRequest> completion;
  std::string session;
  RunTicket ticket;  // checked and planned; holds a chat request's window until
                     // it runs
  std::shared_ptr<PeerWatch> watch;
  bool first_token = true;
  std::vector<bool> sent;            // per choice: its opening chunk went out (open)
  std::optional<StoreWrite> stored;  // the write of an answer with store true (keep_if_stored)
  std::string stored_body;           // ... its body when not streamed, the answer's too (written once)
  LiveAnswers<void>::Hold live;      // store true: registered as being generated until keep_if_stored
  int64_t ended = 0;                 // streamed chat: the choices whose end was handed on
  std::string last_tail;             // streamed chat: the closing chunks of the last choice
                                     // to end, for the stream's tail
  StreamExtras extras;               // streamed chat: what each choice's next chunk carries
                                     // besides its text
  ChunkText chunks;                  // streamed: its text chunks' events, the fields they share
                                     // rendered once
  StreamObfuscation obfuscation;     // streamed: pads every chunk
                                     // (stream_options.include_obfuscation)

  const SamplingRequest& sampling() const { return chat ? chat->sampling : completion->sampling; }
  // A chunk's event, padded when the stream is obfuscated (error events and
  // [DONE] are not chunks).
  std::string chunk(const json& body) { return obfuscation.pad(sse(body)); }
  // The opening chunk of a streamed chat's `choice` where none went out yet, else "": the role alone
  // (delta {"role": "assistant", "content": ""}, logprobs null), as OpenAI opens each choice. Its text, calls
  // and log probabilities follow in later chunks: a client that builds the answer from its chunks
  // (openai-node's stream helper) starts a choice's logprobs list with its first chunk's and then appends
  // that chunk's again, so a first token's entry there would be counted twice.
  std::string open(int64_t choice) {
    if (sent.size() <= static_cast<std::size_t>(choice)) sent.resize(static_cast<std::size_t>(choice) + 1, false);
    if (sent[static_cast<std::size_t>(choice)]) return "";
    sent[static_cast<std::size_t>(choice)] = true;
    return chunk(chat_chunk(ids, "", true, "", choice));
  }
};

// What a streamed job writes as it runs: each choice's text, its tool calls'
// pieces, its end.
struct JobStream {
  std::function<bool(int64_t, const std::string&)> on_text;
  std::function<bool(int64_t, const ToolCallDelta&)> on_tool_call;  // null: the calls come whole at the end
  std::function<bool(int64_t, const RunResult&)> on_end;
};

// A streamed chat job's log probabilities and reasoning go to job.extras, for
// the choice's next chunk (a piece of reasoning makes one at once: `text` with
// an empty delta).
void gather_extras(Job& job, RunSink& sink, const std::function<bool(int64_t, const std::string&)>& text) {
  sink.on_logprobs = [&job](int64_t choice, const StepLogprobs& step) { job.extras.add_logprobs(choice, step); };
  sink.on_reasoning = [&job, text](int64_t choice, const std::string& delta) {
    job.extras.add_reasoning(choice, delta);
    return text(choice, "");
  };
}

// Runs the job; each choice's text goes to `out.on_text` with its index as it
// comes (a stream with n > 1 streams every choice, RunSink::on_choice_text;
// else choice 0's only), its calls' pieces to `out.on_tool_call`, and each
// choice's result as it ends to `out.on_end` (RunSink::on_choice_end).
RunOutcome run_job(ServeCore& core, Job& job, const JobStream& out) {
  RunSink sink;
  sink.on_choice_end = out.on_end;
  sink.cancelled = [&job] { return job.watch->gone(); };
  auto first = [&] {
    if (job.first_token) core.metrics().count_first_token(job.endpoint, seconds_since(job.t0));
    job.first_token = false;
  };
  // Whether the client left is asked once per decode step, through
  // sink.cancelled (decode.cpp), not again after each piece: that was a second
  // recv(MSG_PEEK) per token.
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

// Keeps a chat answer the request asked to store (store: true), before the
// client reads its end: a retrieve right after the answer finds it. A cancelled
// run, an error, or a streamed choice that ended with the
// tool_call_stream_mismatch error is not stored (storable). The write's outcome
// goes in job.stored (a failure is counted: store_write.h).
void keep_if_stored(ServeCore& core, Job& job, const RunOutcome& out) {
  // Not stored, either, when a DELETE came while it ran (job.live, live_answers.h).
  if (job.chat && job.chat->store && out.result && storable(*out.result) && job.live.begin_store()) {
    StoredCompletion completion = stored_completion(*job.chat, job.ids, *out.result);
    job.stored = core.chat_completions().put(completion);
    if (!job.stored->ok) core.metrics().count_store_write_failure("chat_completions");
    if (!job.sampling().stream) job.stored_body = std::move(completion.body);  // the answer's body as well
  }
  job.live.end();  // stored, or never will be
}

// A non-streamed answer's Orbit-Stored header (and Orbit-Store-Error,
// Orbit-Store-Pending when its write failed).
void store_headers(httplib::Response& res, const Job& job) {
  if (!job.stored) return;
  for (const auto& [name, value] : store_header_fields(*job.stored)) res.set_header(name, value);
}

std::string final_body(Job& job, const RunOutcome& out) {
  if (!job.stored_body.empty()) return std::move(job.stored_body);  // the same text, written for the store
  if (job.chat) return chat_completion_text(job.ids, *out.result);
  return dump(
      text_completion(job.ids, out.result->text, out.result->finish_reason, text_completion_usage(out.result->usage)));
}

// A streamed chat choice's closing chunks: the content held back while it might
// have been a call, the pieces of its calls not streamed yet (all of them where
// they were read at the end), and its finish chunk; or, where the answer does
// not hold a call as it was streamed, an error event naming the call instead.
std::string choice_tail(Job& job, const RunResult& r, int64_t index) {
  if (r.tool_stream_mismatch) return sse(json::parse(error_body(tool_stream_error(*r.tool_stream_mismatch, index))));
  std::string tail = job.open(index);
  if (!r.unstreamed.empty()) {
    tail += job.chunk(chat_chunk(job.ids, r.unstreamed, false, "", index, job.extras.take(index)));
  }
  for (const ToolCallDelta& d : r.unstreamed_calls) {
    tail += job.chunk(tool_call_chunk(job.ids, d, index, job.extras.take(index)));
  }
  return tail + job.chunk(chat_chunk(job.ids, "", false, r.finish_reason, index, job.extras.take(index)));
}

// A streamed chat choice that ended: its closing chunks go out now, while the
// others run, but the last choice's wait for the stream's tail, so that the
// answer is stored (store: true) before the client reads its end. False: the
// client left.
bool end_choice(Job& job, httplib::DataSink& sink, int64_t choice, const RunResult& r) {
  std::string tail = choice_tail(job, r, choice);
  if (++job.ended == std::max<int64_t>(1, job.sampling().n)) {
    job.last_tail = std::move(tail);
    return true;
  }
  return sink.write(tail.data(), tail.size());
}

// The stream's closing events: the last choice's closing chunks (a chat's; the
// others went out as they ended) or the completion's finish chunk, the
// include_usage chunk, [DONE].
std::string stream_tail(Job& job, const RunOutcome& out) {
  std::string tail;
  if (!out.result) {
    tail += sse(json::parse(error_body(out.error)));
  } else if (job.chat) {
    tail += job.last_tail;
  } else {
    tail += job.chunk(text_completion(job.ids, "", out.result->finish_reason, nullptr));
  }
  // Usage goes in one chunk only, the last one, when
  // stream_options.include_usage asks for it (as OpenAI streams it): clients
  // that add up every chunk's usage would count it twice otherwise.
  if (out.result && job.sampling().include_usage) {
    const json usage = job.chat ? out.result->usage.to_json() : text_completion_usage(out.result->usage);
    tail += job.chunk(usage_chunk(job.ids, job.chat ? "chat.completion.chunk" : "text_completion", usage));
  }
  if (job.stored && !job.stored->ok) tail += job.chunk(store_failed_chunk(job.ids, *job.stored));
  return tail + "data: [DONE]\n\n";
}

// Parses the body, names the session and prepares the run (every check, the
// ones that need the model included: ServeCore::prepare_chat); the error to
// answer with, before any byte of the answer.
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
  if (job.chat && job.chat->store) {  // nothing runs for an answer its store
                                      // cannot take (store_write.h)
    const StoreWrite writable = core.chat_completions().check_writable();
    if (!writable) job.ticket.refuse(store_refusal("chat completions", writable));
    if (!job.ticket.ok()) return job.ticket.error();
  }
  return std::nullopt;
}

// A streamed job: its chunks as they come, then (counted first, so a client
// that read the whole answer finds it in /metrics) the stream's tail. The
// caller ends the stream.
void stream_job(ServeCore& core, Job& job, httplib::DataSink& sink) {
  job.chunks = ChunkText(job.ids, job.chat ? "chat.completion.chunk" : "text_completion");
  auto on_text = [&](int64_t choice, const std::string& delta) {
    const std::string event =
        job.chat ? job.open(choice) + job.obfuscation.pad(job.chunks.chat_text(delta, choice, job.extras.take(choice)))
                 : job.obfuscation.pad(job.chunks.completion_text(delta));
    return sink.write(event.data(), event.size());
  };
  auto on_call = [&](int64_t choice, const ToolCallDelta& d) {
    const std::string event =
        job.open(choice) + job.chunk(tool_call_chunk(job.ids, d, choice, job.extras.take(choice)));
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

// A streamed request's sync (a chat request's) or prompt's admit (a completion's), run before the stream's head
// (ServeCore::sync_ahead): a refusal there (503 kv_pool_full with Retry-After for a full KV pool, 400 for a prompt
// over the whole pool, 500 engine_error) is answered as the whole answer's is, not as an event after a 200. False
// when it was answered so.
bool sync_ahead(ServeCore& core, const httplib::Request& req, Job& job, httplib::Response& res) {
  // A client that half-closed after its request is asked with a 100 Continue before the head (peer_watch.h).
  if (req.version == "HTTP/1.1") job.watch->probe_with_continue();
  job.count.running();  // timed from here, as a run is
  const std::optional<ApiError> refused = core.sync_ahead(job.ticket, [&job] { return job.watch->gone(); });
  if (!refused) return true;
  serve_http_route::reply_error(res, *refused);
  RunOutcome out;
  out.error = *refused;
  job.count.ran(out);
  return false;
}

}  // namespace

void HttpServer::generate(const std::string& endpoint, const httplib::Request& req, httplib::Response& res) {
  // Counted once and out of flight when the last reference goes (RequestCount),
  // whatever ends it: a 500 when an exception escapes this handler
  // (set_error_handlers answers it) or the stream (stream_job writes it).
  auto job = std::make_shared<Job>(core_.metrics(), in_flight_, endpoint);
  auto fail = [&](const ApiError& e) {
    serve_http_route::reply_error(res, e);
    job->count.refused(e.status);  // refused before it ran: no latency sample
  };
  if (draining_) return fail(api_error(503, "the server is shutting down", "server_error", "shutting_down"));
  if (auto bad = prepare(core_, req, *job)) return fail(*bad);
  job->watch = std::make_shared<PeerWatch>();
  if (job->sampling().stream && !sync_ahead(core_, req, *job, res)) return;
  job->ids = {(job->chat ? "chatcmpl-" : "cmpl-") + id_tag_ + "-" + std::to_string(++next_id_),
              static_cast<int64_t>(std::time(nullptr)), core_.model_name()};
  job->ids.usage_null = job->sampling().stream && job->sampling().include_usage;
  // Known as being generated until it is stored (GET answers 409, DELETE deletes it: live_answers.h).
  if (job->chat && job->chat->store) job->live = core_.chat_completions().live().begin(job->ids.id, nullptr);
  job->obfuscation = StreamObfuscation(job->sampling().stream && job->sampling().include_obfuscation);
  if (!job->sampling().stream) {
    // A client that half-closed after its request is asked with a 100 Continue before the head (peer_watch.h).
    if (req.version == "HTTP/1.1") job->watch->probe_with_continue();
    const RunOutcome out = run_job(core_, *job, JobStream{[](int64_t, const std::string&) { return true; }});
    keep_if_stored(core_, *job, out);
    if (out.result) {
      store_headers(res, *job);
      res.body = final_body(*job, out);  // moved, where set_content would copy it (a body may be tens of MB)
      res.set_header("Content-Type", "application/json");
    } else {
      serve_http_route::reply_error(res, out.error);
    }
    job->count.ran(out, /*whole=*/true);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  set_event_stream(req, res, [this, job, what = req.method + " " + req.path](std::size_t, httplib::DataSink& sink) {
    // A client that half-closed after its request is asked with a comment event (peer_watch.h).
    job->watch->probe_with_comment(
        [&sink](const std::string& bytes) { return sink.write(bytes.data(), bytes.size()); });
    try {
      stream_job(core_, *job, sink);
    } catch (...) {  // the head (200) went out: the stream ends with the error
      job->count.failed();
      const std::string tail =
          sse(json::parse(error_body(internal_error(what, std::current_exception())))) + "data: [DONE]\n\n";
      sink.write(tail.data(), tail.size());
    }
    job->watch->no_probe();
    sink.done();
    return true;
  });
  // ServeOptions::test_fault, tests only: the head (written once this handler returns) goes out late.
  if (core_.options().test_fault == "slow_head") std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

}  // namespace orbit::serve
