// The engine side of `orbit serve`, apart from HTTP: one Engine, its sessions (each a Window), the fair
// gate that runs one forward at a time, and the metrics. ServeCore is the facade HttpServer (serve_http.h) and
// cmd_serve.cpp use; the work is done by parts with one job each, sharing a ServeContext
// (serve_context.h: the engine, options, gate, metrics):
//
//   SessionTable  session_table.h  which window a request runs on (sessions, anonymous windows), which stay
//                                  resident (the LRU budget), which records are forgotten
//   RequestPath   request_path.h   a request checked and planned (prepare_*: its one rendering), then run:
//                                  sync with that plan and the deferred repairs under the gate, decode
//                                  (decode.h), usage
//   IdleWorker    idle_worker.h    background jobs, anticipated answers, Window::idle, while no request waits
//
// A request is two calls, so that a refusal answers before any streamed byte: prepare_chat (or
// prepare_completion) returns a RunTicket, refused with the error to answer or holding the request's
// window and plan; run(ticket) runs it. chat() and complete() do both.
//
// usage.orbit (RunUsage):
//   forward_tokens      orbit's critical-path forward tokens for the prompt: the sync's operations, the
//                       repairs it deferred, the generation prompt the read forwarded.
//   radix_cache_tokens  the radix yardstick, one per request, and the engine's: what SGLang's radix cache,
//                       token granular, holding every model call's window, query and generated tokens in the
//                       KV memory the engine's pool has, engine-wide (so shared by every request), would have
//                       forwarded for this request's prompt (planner/prefix_cache.h). The server keeps no
//                       cache of its own: it reports the delta of the window's WindowStats::radix_cache_tokens
//                       over the request, which the engine adds at Window::generate (the window's tokens,
//                       the query, the tokens generated). For a chat request those are the rendering's
//                       tokens, the generation prompt and the answer; for a completion, the prompt and the
//                       answer. 0 for a run cancelled before it decoded.
//
// Sessions: created by the first request that names them (X-Orbit-Session or `user`); GET
// /v1/sessions/{id} reports one, DELETE ends it; requests of one session run one at a time, in arrival
// order. Idle sessions past ServeOptions::session_budget_bytes or max_sessions leave memory (their chunks
// stay in the store). Decode is batched (decode_scheduler.h): every session's pending token is one row of
// one forward per step, sequences joining and leaving between steps; a chat request's n > 1 choices are
// forks of its window decoded in that batch.
//
// Thread-safety: every member may be called from any thread; a RunTicket is used by the thread that
// prepared it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "serve/compute/idle_worker.h"
#include "serve/responses/responses_store.h"
#include "serve/run/request_path.h"
#include "serve/serve_context.h"
#include "serve/serve_metrics.h"
#include "serve/serve_types.h"
#include "serve/sessions/session_table.h"
#include "serve/stored/chat_store.h"
#include "serve/stored/store_retry.h"
#include "serve/wire/serve_api.h"

namespace orbit::serve {

class ServeCore {
 public:
  // Opens the engine (throws orbit::Error naming the model or option at fault) and starts the idle worker.
  explicit ServeCore(const ServeOptions& options);
  ~ServeCore();  // close()
  ServeCore(const ServeCore&) = delete;
  ServeCore& operator=(const ServeCore&) = delete;

  const std::string& model_name() const { return context_.model_name; }
  const ServeOptions& options() const { return context_.options; }
  int64_t context_tokens() const { return context_.info.max_positions; }
  const std::string& device() const { return context_.info.device; }  // e.g. "cpu", "cuda:0"
  const std::string& dtype() const { return context_.info.dtype; }    // e.g. "float32", "bfloat16"

  // The checks, before any answer is sent: the model's name (404), the server closing (503), the template
  // accepting the messages, the prompt within the context, max_tokens within what is left of it (400).
  // A chat request in `session` ("" = anonymous) gets its window and its one SyncPlan here. `request` must
  // outlive the ticket.
  RunTicket prepare_chat(const ChatRequest& request, const std::string& session);
  RunTicket prepare_completion(const CompletionRequest& request);
  // The prompt tokens of a chat request (RequestPath::count_chat_tokens): no window, nothing run.
  Parsed<int64_t> count_chat_tokens(const ChatRequest& request) const { return requests_.count_chat_tokens(request); }
  // Runs a prepared request (a refused ticket answers its error). An engine failure is a 500 error. Then, once
  // its answer is decoded (before a stream's usage and end), an audit owed to it (audit.h), if one is.
  RunOutcome run(RunTicket& ticket, const RunSink& sink);
  // A prepared request's sync (a chat request's; a completion's admit), run before a stream's head
  // (RequestPath::sync_ahead): the error to answer in place of the stream (503 kv_pool_full with Retry-After for a
  // full KV pool), or nullopt (run() decodes next).
  std::optional<ApiError> sync_ahead(RunTicket& ticket, const std::function<bool()>& cancelled) {
    return requests_.sync_ahead(ticket, cancelled);
  }
  // prepare + run.
  RunOutcome chat(const ChatRequest& request, const std::string& session, const RunSink& sink);
  RunOutcome complete(const CompletionRequest& request, const RunSink& sink);

  // {"id", "resident", "requests", "window": {...}, "savings": {forward_tokens, radix_cache_tokens (Σ the
  // requests' usage.orbit.radix_cache_tokens), window_prefix_cache_tokens (the window's own prefix-cache
  // count since it was last made resident: WindowStats::prefix_cache_tokens), saved_tokens, ratio}};
  // nullopt for an unknown session (never named, ended, or forgotten past max_known_sessions).
  std::optional<nlohmann::json> session_info(const std::string& id) { return sessions_.info(id); }
  SessionTable::End end_session(const std::string& id) { return sessions_.end(id); }  // SessionTable::end
  // Brings the resident sessions within the budget now, waiting for a window the idle worker holds. A
  // release does this without waiting (the idle worker finishes the job): call it for a deterministic state.
  void enforce_session_budget() { sessions_.enforce_budget(true); }
  nlohmann::json models() const;  // the /v1/models body

  // Runs the idle work there is now (background jobs, anticipated answers, Window::idle of the sessions
  // that asked) on this thread, until none is left or a request waits; returns the slices run. The idle
  // worker does the same on its own; this is the deterministic flush for tests and benchmarks.
  int64_t run_idle_work() { return idle_.run_now(); }
  // Holds the idle worker off (true) or lets it go again (false); holds nest. As a decode batch does while it
  // steps (FairGate::hold_idle): for tests and benchmarks of requests that leave the server no idle time, as
  // requests sent back to back do. Requests are not held.
  void hold_idle_work(bool hold) { context_.gate.hold_idle(hold); }

  // The responses kept for the Responses API's previous_response_id (responses_run.h).
  ResponseStore& responses() { return responses_; }
  // The chat completions kept by store: true (chat_store.h; the HTTP routes put and read them).
  ChatStore& chat_completions() { return chat_completions_; }

  ServeMetrics& metrics() { return context_.metrics; }
  MetricGauges gauges();
  Engine& engine() { return *context_.engine; }  // for tests and benchmarks: its stats

  // Stops taking forwards (waiting and later requests end), waits for the forward in flight, stops the
  // idle worker, closes every window and then the engine: background work queued so far is finished, so
  // the store keeps what committed requests formed (with a --store or --remote, for at most
  // engine_close.finish_seconds and until engine_close.stop answers true; what is left is dropped and counted on
  // stderr). Then the answers whose store write failed and are held for a retry get a last try
  // (ChatStore::drain_pending, ResponseStore's), and each still unwritten is named on stderr (kept in the
  // store's journal of held answers for the next start, or lost). Idempotent: a later call reports nothing.
  CloseReport close(const CloseOptions& engine_close = {});

 private:
  // The engine's close under `options`, its queued background work named on stderr before and what it dropped
  // after (with a persistent store: without one nothing is run or worth naming).
  CloseReport close_engine(const CloseOptions& options);
  void run_owed_audit();  // after a run: the oldest audit if it is owed (audit.h), on a gate turn of its own

  ServeContext context_;  // first: the parts below hold references to it
  SessionTable sessions_;
  RequestPath requests_;
  IdleWorker idle_;
  ResponseStore responses_;
  ChatStore chat_completions_;
  // Retries the stores' held writes while the server is idle (store_retry.h); after the stores: it uses them.
  static constexpr std::chrono::milliseconds kStoreRetryPeriod{1000};
  StoreRetryThread store_retry_;
  std::mutex close_mutex_;
  bool closed_ = false;
};

}  // namespace orbit::serve
