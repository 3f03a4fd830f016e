// The engine side of `orbit serve`, apart from HTTP: one Engine, its sessions (each a Window), the fair
// gate that runs one forward at a time, the radix yardstick and the metrics.
//
// A chat request:
//   1. its session's window (X-Orbit-Session or `user`), else an anonymous window: of a few kept for
//      requests without a session, the one whose last read shares the longest token prefix with this
//      one (so repeated prefixes are served as a radix cache would serve them), else a new one;
//   2. checks that need the model: the rendering fits the context, max_tokens within it (400 otherwise);
//   3. under the gate: Window::sync(messages) (the prompt's new messages, nothing it holds already);
//   4. generate(generation prompt): each decode step takes the gate again, so sessions interleave
//      token by token; the text streams through RunSink::on_text;
//   5. usage: prompt and completion tokens; orbit's critical-path forward tokens for the prompt (sync's
//      operations, the repairs the read ran, the generation prompt) beside radix_cache_tokens: what one
//      RadixCache shared by every request, with the KV memory of orbit's pool, would have forwarded for
//      the same prompt (planner/prefix_cache.h).
// A completion request (/v1/completions) is stateless: its prompt but the last token is one chunk (an
// identical prompt is served from the store), the last token the query.
//
// Sessions: created by the first request that names them; GET /v1/sessions/{id} reports one, DELETE ends
// it. Resident windows hold KV in the pool; when the windows of idle sessions hold more than
// ServeOptions::session_budget_bytes, or more than max_sessions are resident, the least recently used idle
// ones leave memory (their Window is closed; their chunks stay in the store, and the next request syncs a
// new window from it). Requests of one session run one at a time, in arrival order.
//
// Idle work (the engine's deferred background jobs: canonicals and patches of first sights; each session's
// answer prefilled as its next request will send it back (ServeOptions::anticipate); each session's
// Window::idle(): heals, prepared recalls and moves) runs only when no request waits for the gate.
//
// Decode is not batched: sessions take turns, one forward each (the runtime's forward takes one sequence).
// Thread-safety: every member may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "orbit/engine.h"
#include "orbit/planner/prefix_cache.h"
#include "serve/fair_gate.h"
#include "serve/serve_api.h"
#include "serve/serve_metrics.h"

namespace orbit::serve {

struct ServeOptions {
  std::string model;       // a llama2.c .bin or a Hugging Face directory
  std::string model_name;  // the id /v1/models lists and requests must name; "" = the path's last component
  std::string store_dir;   // "" = memory only
  std::string remote;      // a remote tier URL, or ""
  std::string policy;      // a WindowPolicy spec for every window; "" = the default policy
  int64_t pool_bytes = int64_t{256} << 20;
  int64_t session_budget_bytes = int64_t{128} << 20;  // KV of idle sessions' windows kept resident
  int64_t max_sessions = 64;                          // resident session windows at most
  int64_t max_known_sessions = 4096;  // session records kept; past it the oldest not resident are forgotten
  int64_t anonymous_windows = 4;      // windows kept for requests without a session
  int64_t default_max_tokens = 256;   // when a request gives none (capped by the context)
  int64_t chunk_min_tokens = 32;      // SyncOptions::chunk_min_tokens
  // After a session's request, prefill in idle time the list its next request most likely sends (this
  // one's messages and the answer as an assistant message), so the next sync keeps the answer instead of
  // prefilling it on the critical path. Costs idle forwards (RunUsage::idle_forward_tokens); wasted, and
  // evicted by the next sync, when the client sends something else back.
  bool anticipate = true;
  ServeLimits limits;
};

// Where a run's text goes, and whether its client is still there.
struct RunSink {
  std::function<bool(const std::string& delta)> on_text;  // text as it is generated; false: the client left
  std::function<bool()> cancelled;                        // polled between forwards and while waiting
};

// usage.orbit, and the prompt and completion counts.
struct RunUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double forward_tokens = 0;       // orbit's critical-path forward tokens for the prompt
  int64_t radix_cache_tokens = 0;  // the radix yardstick's, for the same prompt
  double predicted_kl = 0;         // the window's predicted next-token KL vs a re-prefill when it is read
  // Forwarded for this prompt in idle time before it arrived: the previous answer prefilled as the session
  // would send it back (ServeOptions::anticipate). Not on the critical path, not in forward_tokens.
  double idle_forward_tokens = 0;
  std::string plan;                // e.g. "keep 4, admit 1, turn 1, evict 2"
  std::string session;             // "" for anonymous requests
  nlohmann::json to_json() const;  // {prompt_tokens, completion_tokens, total_tokens, orbit: {...}}
};

struct RunResult {
  std::string text;
  std::string finish_reason;          // "stop", "length", or "cancelled" (the client left)
  std::vector<int64_t> tokens;        // generated ids (a stop token that ended the run excluded)
  int64_t prompt_forward_tokens = 0;  // of the query (generation prompt): forwarded, not served by exact reuse
  RunUsage usage;
};

// A run's result, or the error to answer with.
struct RunOutcome {
  std::optional<RunResult> result;
  ApiError error;
};

class ServeCore {
 public:
  // Opens the engine (throws orbit::Error naming the model or option at fault) and starts the idle worker.
  explicit ServeCore(const ServeOptions& options);
  ~ServeCore();  // close()
  ServeCore(const ServeCore&) = delete;
  ServeCore& operator=(const ServeCore&) = delete;

  const std::string& model_name() const { return model_name_; }
  const ServeOptions& options() const { return options_; }
  int64_t context_tokens() const { return info_.max_positions; }

  // The checks that need the model, before any answer is sent: the model's name (404), the server closing
  // (503), the template accepting the messages, the prompt within the context, max_tokens within what is
  // left of it (400). Fills `prompt` with the rendering's tokens (generation prompt included).
  std::optional<ApiError> check_chat(const ChatRequest& request, std::vector<int64_t>* prompt) const;
  // Runs a checked request in `session` ("" = anonymous). An engine failure is a 500 error.
  RunOutcome chat(const ChatRequest& request, const std::vector<int64_t>& prompt, const std::string& session,
                  const RunSink& sink);
  // As check_chat for /v1/completions: `tokens` is the prompt tokenized with BOS.
  std::optional<ApiError> check_completion(const CompletionRequest& request, std::vector<int64_t>* tokens) const;
  RunOutcome complete(const CompletionRequest& request, const std::vector<int64_t>& tokens, const RunSink& sink);

  // {"id", "resident", "requests", "window": {...}, "savings": {forward_tokens, radix_cache_tokens,
  // window_prefix_cache_tokens (the window's own prefix-cache count since it was last made resident:
  // WindowStats::prefix_cache_tokens), saved_tokens, ratio}}; nullopt for an unknown session (never named,
  // ended, or forgotten past max_known_sessions).
  std::optional<nlohmann::json> session_info(const std::string& id);
  bool end_session(const std::string& id);  // false: unknown
  // Brings the resident sessions within the budget now, waiting for a window the idle worker holds. A
  // release does this without waiting (the idle worker finishes the job): call it for a deterministic state.
  void enforce_session_budget();
  nlohmann::json models() const;  // the /v1/models body

  // Runs the idle work there is now (background jobs, anticipated answers, Window::idle of the sessions
  // that asked) on this thread, until none is left or a request waits; returns the slices run. The idle
  // worker does the same on its own; this is the deterministic flush for tests and benchmarks.
  int64_t run_idle_work();

  ServeMetrics& metrics() { return metrics_; }
  MetricGauges gauges();

  // Stops taking forwards (waiting and later requests end), waits for the forward in flight, stops the
  // idle worker, closes every window and then the engine: background work queued so far is finished, so
  // the store keeps what committed requests formed. Idempotent.
  void close();

 private:
  struct Session;
  struct Slot;  // a session's window and the request's place in it
  Slot acquire_session(const std::string& id);
  Slot acquire_anonymous(const std::vector<int64_t>& prompt);
  void release(Slot& slot);
  // Sends the least recently used idle windows out of memory until the budget holds. wait = false skips
  // a window the idle worker holds (it calls this again when it lets go); true waits for it.
  void enforce_budget(bool wait);
  void forget_sessions();  // under sessions_mutex_: the records past max_known_sessions, oldest first
  RunOutcome run_chat(Slot& slot, const ChatRequest& request, const RunSink& sink);
  RunResult decode(Window& window, const std::vector<int64_t>& query, const SamplingRequest& sampling,
                   const std::string& lane, const RunSink& sink);
  std::optional<ApiError> check_lengths(int64_t prompt_tokens, const SamplingRequest& sampling) const;
  std::optional<ApiError> check_common(const std::string& model) const;
  int64_t max_tokens_for(int64_t prompt_tokens, const SamplingRequest& sampling) const;
  int64_t radix_read(const std::vector<int64_t>& tokens, std::size_t prompt_tokens);
  bool enter_gate(const std::string& lane, const RunSink& sink);
  Window new_window();
  void idle_loop();
  bool idle_slice();
  void prefill_anticipated(Session& s);  // holding the gate and s.run

  ServeOptions options_;
  std::string model_name_;
  std::shared_ptr<Engine> engine_;
  ModelInfo info_;
  WindowPolicy policy_;
  FairGate gate_;
  ServeMetrics metrics_;
  std::mutex radix_mutex_;
  planner::RadixCache radix_;
  std::mutex sessions_mutex_;  // guards the tables below (not the windows: each has its session's mutex)
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  std::vector<std::shared_ptr<Session>> anonymous_;
  uint64_t clock_ = 0;
  std::atomic<bool> closing_{false};
  std::atomic<int64_t> lanes_{0};  // unique lanes for completions
  std::mutex close_mutex_;
  bool closed_ = false;
  std::mutex idle_work_mutex_;  // one idle slice at a time (the worker's or run_idle_work's)
  std::mutex idle_mutex_;
  std::condition_variable idle_cv_;
  std::thread idle_thread_;
};

}  // namespace orbit::serve
