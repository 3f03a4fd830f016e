// The request path of `orbit serve`: a request checked and planned (prepare_*), then run (run). The two
// halves are apart so that every check, the ones that need the model included, answers before the first
// byte of a streamed response: serve_generate.cpp prepares in its handler (a refusal is a plain JSON error)
// and runs inside the stream. request_path.cpp prepares, request_run.cpp runs; request_ticket.h is what a
// ticket holds between them.
//
// A chat request, rendered once:
//   prepare  the model and the server (404, 503); its window (session_table.h); Window::plan_sync of the
//            messages on that window, outside the gate: the rendering's tokens and generation prompt, the
//            diff against the window. Against that one plan: the template accepted the list (else 400 on
//            `messages`), prompt = tokens + generation prompt within the context and max_tokens within
//            what is left (400 context_length_exceeded), a generation prompt to generate after (400).
//            The ticket keeps the window (no other request, and no idle work, can change it, so the plan
//            stays current) and the plan.
//   run      under the gate: Window::sync(messages, plan) (applies the plan made in prepare; no second
//            rendering), then the repairs the sync deferred, planned once (plan_flush) and applied
//            (Window::apply): the KL the read then carries is that plan's. Then decode.h, and the usage.
//            A streamed request runs the sync first (sync_ahead), before its stream's head: a sync the KV pool
//            refuses is then answered as a whole answer's is (503 kv_pool_full with Retry-After), not as an
//            event after a 200; the run that follows decodes.
// A completion request (/v1/completions) is stateless: prepare tokenizes its prompt (with BOS) and checks
// it; run admits the prompt but the last token as one chunk (an identical prompt is served from the
// store) and decodes after the last token, in a window of its own. Its admit is a chat request's sync for the
// pool: it makes room and waits as a sync does (a prompt over the whole pool: 400 on `prompt`), and a streamed
// completion runs it before its stream's head (sync_ahead) too.
//
// Thread-safety: prepare and run may be called from any thread, for any number of requests at once; one
// ticket is used by one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "serve/serve_context.h"
#include "serve/serve_types.h"
#include "serve/sessions/session_table.h"
#include "serve/wire/serve_api.h"

namespace orbit::serve {

// A chat request's window, or a completion's prompt, needs more pages than the engine's whole KV pool has
// (RequestPath::check_pool_holds): even an empty pool could not hold it, so no waiting and no letting windows go
// cures it. `param`: the request's field at fault ("messages", "prompt").
class PoolTooSmall : public Error {
 public:
  PoolTooSmall(const std::string& message, std::string param, const char* source_file, int source_line)
      : Error(message, source_file, source_line), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

// A request checked and planned, holding what it runs on until RequestPath::run or its destruction (a chat
// request's window, as a WindowSlot). Move-only. Destroy it, or run it, on the thread that prepared it: it
// holds the window's mutex. The request it was prepared from must outlive it.
class RunTicket {
 public:
  RunTicket();
  explicit RunTicket(ApiError refusal);  // a refused request: run() answers `refusal`
  RunTicket(RunTicket&&) noexcept;
  RunTicket& operator=(RunTicket&&) noexcept;
  ~RunTicket();

  bool ok() const { return prepared_ != nullptr; }  // false: error() is the answer
  const ApiError& error() const { return error_; }
  // Refuses a prepared request before it runs (a check the caller makes after prepare: the store a request
  // with store true needs cannot take a write): what it held is released as if it never came (a session or
  // anonymous window it created leaves the table again), and run() answers `refusal`.
  void refuse(ApiError refusal);

 private:
  friend class RequestPath;
  struct Prepared;
  std::unique_ptr<Prepared> prepared_;
  ApiError error_;
};

class RequestPath {
 public:
  RequestPath(ServeContext& context, SessionTable& sessions) : context_(context), sessions_(sessions) {}

  // A chat request in `session` ("" = anonymous), checked and planned (see above).
  RunTicket prepare_chat(const ChatRequest& request, const std::string& session);
  RunTicket prepare_completion(const CompletionRequest& request);
  // The prompt tokens a chat request's messages and tools render to, with the checks prepare_chat makes
  // before it plans (the model's name, the tools and answer format, the template); no window is touched.
  Parsed<int64_t> count_chat_tokens(const ChatRequest& request) const;
  // Runs a prepared request and releases what its ticket held. A refused ticket answers its error; an
  // engine failure is a 500 error; a client that left ends it with finish_reason "cancelled" (counted).
  RunOutcome run(RunTicket& ticket, const RunSink& sink);
  // A prepared request's sync (a chat request's) or admit (a completion's), run now (under the gate, as run()
  // would) so that its refusal can be answered before anything of the answer is sent; run() then decodes on the
  // synced window. The error run() would answer for a failed sync (engine_failure: 503 kv_pool_full for a full
  // pool), the ticket released and refused with it; nullopt when it synced, the client left before its turn
  // (run() answers "cancelled"), or there is nothing to sync ahead (a refused ticket, a sync run already).
  std::optional<ApiError> sync_ahead(RunTicket& ticket, const std::function<bool()>& cancelled);

  struct ChatSync;         // what a chat request's sync leaves for its decode (request_ticket.h)
  struct CompletionAdmit;  // what a completion's admit leaves for its decode (request_ticket.h)

 private:
  std::optional<ApiError> check_model(const std::string& model) const;
  std::optional<ApiError> check_lengths(int64_t prompt_tokens, const SamplingRequest& sampling,
                                        const std::string& prompt_param) const;
  // The answer's log-probability entries within ServeLimits::max_answer_logprobs (400 naming n, max_tokens and
  // top_logprobs otherwise).
  std::optional<ApiError> check_logprobs(int64_t prompt_tokens, const SamplingRequest& sampling) const;
  ApiError plan_refusal(const ChatRequest& request, const ChatOptions& chat, const std::string& why) const;
  // An engine error as the 500 answered for it ("the engine failed: ..."). A sync refused for capacity
  // (orbit::CapacityRefused: the KV pool cannot hold this request's window beside the windows requests are
  // using, every idle one let go already, sync_making_room) is a 503 kv_pool_full (Retry-After: 1,
  // serve_http_route.h): the pages come back as the running requests end, and OpenAI's clients retry a 503
  // after the Retry-After; its message names this server's pool size (--pool-mb N, or in KiB and pages for a pool
  // ServeOptions::pool_bytes set to no whole MiB) and what to raise in place of the SDK's advice. A refusal
  // for the window's own max_bytes (CapacityRefused::Bound::kWindowBytes) is a 400 on messages: no waiting cures it.
  // PoolTooSmall (the window the request needs is more than the whole pool: check_pool_holds) is a 400
  // context_length_exceeded on messages (a completion's: on prompt) naming the pool's size the same way: no retry
  // cures it.
  ApiError engine_failure(const Error& e) const;
  ApiError run_failure(const Error& e) const;  // engine_failure, or 503 server_shutdown once the server closes
  std::optional<ApiError> read_reasoning(const ChatRequest& request, RunTicket::Prepared& p);
  // A chat request's run: sync_chat under the gate, decode_chat, then its usage and the session's record.
  RunOutcome run_chat(RunTicket::Prepared& p, const RunSink& sink);
  bool sync_chat(RunTicket::Prepared& p, const RunSink& sink, ChatSync& out);
  void sync_first(RunTicket::Prepared& p, const RunSink& sink);              // sync_chat into p.synced (or p.left)
  SyncReport sync_making_room(RunTicket::Prepared& p, WindowStats& before);  // sync_chat's; see request_run.cpp
  // `attempt` (a sync or an admit under the gate; false: the client left) tried until the pool holds it, waiting
  // for running requests up to --pool-wait-ms; see request_run.cpp. `self`: the requester's session, null for a
  // completion; `placed_again`: the chunk keys it places (room_maker.h's drop_together). False: the client left.
  bool waiting_for_pool(const Session* self, const std::vector<std::string>& placed_again,
                        const std::function<bool()>& cancelled, const std::function<bool()>& attempt);
  // A completion's prompt admitted to a window of its own, waiting for the pool as sync_first does: p.admitted
  // (or p.left).
  void admit_first(RunTicket::Prepared& p, const RunSink& sink);
  bool admit_completion(RunTicket::Prepared& p, const std::string& lane, Window& window, const RunSink& sink);
  // Throws PoolTooSmall (naming `param`) when units of these sizes (in tokens; each in whole pages of its own)
  // need more pages than the whole KV pool has; `what` names them ("this conversation's window").
  void check_pool_holds(const std::vector<int64_t>& units, const std::string& what, const std::string& param) const;
  RunResult decode_chat(RunTicket::Prepared& p, const std::vector<int64_t>& generation_prompt, const RunSink& sink);
  RunOutcome run_completion(RunTicket::Prepared& p, const RunSink& sink);
  void queue_audit(std::shared_ptr<Session> s, int64_t request, const std::vector<int64_t>& query, double predicted_kl);
  void report_mismatch(const ToolStreamMismatch& m, int64_t choice);

  ServeContext& context_;
  SessionTable& sessions_;
  std::atomic<int64_t> lanes_{0};  // unique gate lanes for completions
};

}  // namespace orbit::serve
