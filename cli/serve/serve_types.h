// The values the parts of `orbit serve` pass each other: the server's options, where a run's text goes
// (RunSink), and what a run answers (RunResult with its RunUsage, or an ApiError in RunOutcome).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "orbit/sync.h"
#include "orbit/sync_memo.h"
#include "orbit/window.h"
#include "serve/run/reasoning.h"
#include "serve/wire/serve_api.h"

namespace orbit::serve {

struct ServeOptions {
  std::string model;       // a llama2.c .bin or a Hugging Face directory
  std::string model_name;  // the id /v1/models lists and requests must name; "" = the path's last component
  std::string store_dir;   // "" = memory only
  std::string remote;      // a remote tier URL, or ""
  std::string policy;      // a WindowPolicy spec for every window; "" = the default policy
  // EngineOptions::stored_calibration: the engine fits its fidelity model from the calibration store_dir (else
  // the remote) holds for the model, and a calibration run (`orbit serve --calibrate-fidelity`) is written to
  // both.
  bool stored_calibration = true;
  int64_t pool_bytes = int64_t{256} << 20;
  // How long a chat request whose sync the KV pool refuses, every idle window let go, waits for a running request
  // to release its window before it is answered 503 kv_pool_full (`--pool-wait-ms`; 0: at once).
  int64_t pool_wait_ms = 30000;
  // Where the model runs and in what dtype (EngineOptions::device, ::dtype): "cpu", "cuda" or "cuda:N";
  // "float32", "bfloat16" or "float16" (CUDA only). Sessions decode together on that device.
  std::string device = "cpu";
  std::string dtype = "float32";
  int64_t device_tier_bytes = 0;  // EngineOptions::device_tier_bytes (needs a CUDA device)
  // EngineOptions::host_budget_bytes: the store's host tier, where chunks' canonicals, patches and answers' KV
  // stay for reuse after they leave the pool (least recently used out first past it).
  int64_t host_budget_bytes = int64_t{1} << 30;
  // EngineOptions::disk_budget_bytes: the store_dir's disk tier (0 = unlimited; `--store-disk-mb`).
  int64_t disk_budget_bytes = 0;
  // EngineOptions::remote_max_held_fraction: the share of disk_budget_bytes that entries kept on disk for their
  // undelivered remote writes may fill (`--remote-max-held-fraction`).
  double remote_max_held_fraction = 0.5;
  int64_t session_budget_bytes = int64_t{128} << 20;  // KV of idle sessions' windows kept resident
  int64_t max_sessions = 64;                          // resident windows at most (sessions' and anonymous)
  int64_t max_known_sessions = 4096;  // --max-known-sessions: records kept; past it the LRU not resident nor running go
  // Windows kept for requests without a session (session_table.h), resident or not: resident ones count
  // against max_sessions and session_budget_bytes as sessions' do.
  int64_t anonymous_windows = 64;
  // Responses API: responses kept for previous_response_id and GET /v1/responses/{id} (responses_store.h),
  // on disk in store_dir/serve-responses.sqlite when there is a store_dir (they survive a restart).
  int64_t max_responses = 4096;
  // Chat completions created with store true (chat_store.h): kept for GET /v1/chat/completions/{id} and the
  // list, the least recently used dropped past it; on disk in store_dir/serve-chat-completions.sqlite when
  // there is a store_dir (they survive a restart).
  int64_t max_chat_completions = 4096;
  // Stored chat completions, and stored responses, that arrive together are written in one transaction, one
  // sync of the disk for the group (ChatStoreOptions::group_commit, ResponseStoreOptions::group_commit);
  // false: one per completion or response (`--store-group-commit off`).
  bool store_group_commit = true;
  // Answers whose store write failed held in memory for a retry, bytes per store at most (ChatStoreOptions::
  // pending_bytes, ResponseStoreOptions::pending_bytes; `--store-pending-mb`); 0: none is held.
  int64_t store_pending_bytes = int64_t{64} << 20;
  // EngineOptions::max_idle_chunks: the messages' chunks kept registered once no window holds them (the
  // most recently used), so a server that sees ever new content keeps a bounded registry.
  int64_t max_idle_chunks = 4096;
  // The bounds of Window::sync's process-wide memos (orbit/sync_memo.h: renders and tokens of the lists synced,
  // one entry per new list; `--sync-memo-entries`, `--sync-memo-mb`), set when the server starts.
  SyncMemoLimits sync_memo;
  // EngineOptions::max_background_bytes (`--background-mb`): the KV queued background work (patches to form
  // from first sights, run by the idle worker only while no request waits) may hold; past it the oldest queued
  // jobs are dropped, so a server that never goes idle does not grow without end.
  int64_t background_bytes = int64_t{256} << 20;
  int64_t default_max_tokens = 256;  // when a request gives none (capped by the context)
  // /v1/completions' when a request gives none: OpenAI's legacy default (capped by the context). `--max-tokens`
  // sets both.
  int64_t default_completion_max_tokens = 16;
  // A streamed request's output decoded and not yet handed on to its client, bytes at most (`--max-unsent-kb`;
  // text and log probabilities as held in memory, decode_scheduler.h's OutputBacklog): past it the request's
  // sequences are held, no forward for them while the others decode, until the client reads (or another
  // request waits for room in the batch: then they decode on to their end, freeing their slots).
  int64_t max_unsent_bytes = int64_t{4} << 20;
  // Sequences decoding at once, at most (`--max-batch`; decode_scheduler.h): the runs past it wait in order to
  // join the batch as others end. Each running sequence holds rows in the decode batch's buffers, outside the
  // KV pool (up to the context's length, twice that while they grow), so this bounds that memory. A chat
  // request's n above it is refused (ServeLimits::max_choices is the lower of the two).
  int64_t max_batch = 256;
  int64_t chunk_min_tokens = 32;  // SyncOptions::chunk_min_tokens
  // A sync's prefill goes in pieces of at most this many tokens, a waiting decode step taking the gate between
  // two (`--prefill-chunk`; orbit/forward_pieces.h, decode_scheduler.h); 0: whole, in one gate turn.
  int64_t prefill_chunk = 256;
  // After a session's request, prefill in idle time the list its next request most likely sends (this
  // one's messages and the answer as an assistant message), so the next sync keeps the answer instead of
  // prefilling it on the critical path. Costs idle forwards (RunUsage::idle_forward_tokens); wasted, and
  // evicted by the next sync, when the client sends something else back.
  bool anticipate = true;
  // Each request's answer ends (its last bytes, a stream's [DONE]) only once the idle work it left is done on
  // its own thread (`--deterministic`; IdleWorker::run_now: background encodes, the anticipated prefill,
  // Window::idle's heals and preparations, an audit due), so the next request of a client that sends one at a
  // time always finds the same window, store and fidelity correction, and gets the same answer and usage on every
  // run, whatever the timing. Costs that work's time at the end of each answer. Concurrent requests still
  // interleave by timing: the work stops when another request waits for the model.
  bool deterministic = false;
  // A chat template (Jinja source, from --chat-template FILE) for every request instead of the model's; "" =
  // the model's, else the built-in one (kPlainChatTemplate, which renders tools and tool calls).
  std::string chat_template;
  std::string chat_template_origin;  // where it came from, for errors ("--chat-template FILE")
  // How tool calls are read from answers (orbit/tool_calls.h): "" = the format the template writes calls in
  // (Engine::tool_call_format), else "hermes", "llama3" or "mistral".
  std::string tool_call_format;
  // How a reasoning model's thinking is read out of its answers (run/reasoning.h, `--reasoning-parser`):
  // kNone leaves it in the content, as written.
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  // The fraction of chat requests read from approximate KV whose answer's first token is measured against a
  // re-prefill in idle time (audit.h): measured_kl in the metrics and the session's record, and sessions whose
  // measured loss passes their budget served exactly until it is back within it. 0 = none.
  double audit_rate = 0.1;
  // Sample requests read from exact KV too (AuditOptions::exact, `--audit-exact`): their audits measure rounding
  // only, a check of the exactness bookkeeping.
  bool audit_exact = false;
  // An audit idle time has not run by the start of the audit_owed_after-th chat request after its own is run
  // by that request, after its answer is decoded (AuditOptions::owed_after, audit.h). 0 = idle time only.
  int64_t audit_owed_after = 1;
  ServeLimits limits;
  // Fault injection for tests, as the store's IoHooks are (set from the test-only environment variable
  // ORBIT_SERVE_TEST_FAULT by cmd_serve.cpp): "run" makes every ServeCore::run throw std::runtime_error before
  // it starts, an exception no part of the request path foresees (not orbit::Error, which a run answers as
  // engine_error), so tests see what an unforeseen failure does to the answer, the metrics and the drain;
  // "stream_start" makes a streamed Responses request throw before its response.created is written
  // (responses_run.cpp); "audit" makes every fidelity audit's reads throw (AuditOptions::fail_reads);
  // "slow_head" makes every streamed completion's head go out 300 ms late (serve_generate.cpp), so a stop
  // that comes meanwhile meets answers whose stream has not started; "idle_prefill_waits" makes each anticipated
  // prefill wait, once planned, for a request to come (IdleWorker::wait_for_request), which then stops it. "" = none.
  std::string test_fault;
};

struct RunResult;

// A piece of a streamed tool call (run/tool_stream.h), as OpenAI's delta.tool_calls[] carries it: a call's
// first piece opens it (its id and name, arguments "" or, for a call read whole at the answer's end, all of
// them), each later one adds to its arguments' JSON text. A call's pieces go out in order, one call after the
// other, and its arguments pieces concatenated are RunResult::tool_calls[index].arguments.
struct ToolCallDelta {
  std::size_t index = 0;  // the call's place in RunResult::tool_calls
  bool opens = false;     // the call's first piece: id and name are set
  std::string id;
  std::string name;
  std::string arguments;  // the piece of the arguments this delta adds
};

// A streamed tool call the finished answer does not hold as it went out (run/streamed_calls.h): a client
// that concatenated the call's pieces has something else than the answer's call. The first such call.
struct ToolStreamMismatch {
  std::size_t index = 0;  // the call's place among those streamed (RunResult::tool_calls' index)
  std::string id;         // as streamed
  // "missing": the answer holds fewer calls than were opened; "name": the answer's call has another name;
  // "arguments": the arguments streamed are not a prefix of the answer's call's.
  std::string what;
  std::string name;           // as streamed
  std::string answered_name;  // the answer's call's ("" when missing)
  std::string streamed;       // the arguments streamed
  std::string answered;       // the answer's call's arguments ("" when missing)
};

// Where a run's text goes, and whether its client is still there.
struct RunSink {
  std::function<bool(const std::string& delta)> on_text;  // text as it is generated; false: the client left
  // Set (a chat request streamed with n > 1): every choice's text goes here as it is generated, with the
  // choice's index 0..n−1, and on_text is not called. Unset: only choice 0's text reaches on_text.
  std::function<bool(int64_t choice, const std::string& delta)> on_choice_text;
  // Set: each choice's result as that choice ends, while the others may still run (after the last of its
  // text, its tool calls read out; RunResult::unstreamed is what its text held back), in the order
  // decode.h states; false: the client left. Not called for a choice the client's leaving, the server's
  // closing or the engine's failure cut: the run's outcome says what happened to those.
  std::function<bool(int64_t choice, const RunResult& r)> on_choice_end;
  // Set (a streamed chat answer with tools): a choice's tool calls as they are read (run/tool_stream.h:
  // progressively where the calls are decoded under the tools' grammar), with the choice's index; false: the
  // client left. What was not sent here by a choice's end is in its RunResult::unstreamed_calls.
  std::function<bool(int64_t choice, const ToolCallDelta& delta)> on_tool_call;
  // Set (a streamed answer under a reasoning parser, run/reasoning_sink.h): a choice's reasoning as it is
  // read, with the choice's index; false: the client left. Unset: the result holds it (RunResult::reasoning).
  // A streamed chat answer's writer keeps it for the choice's next chunk and writes one (StreamExtras,
  // serve_wire.h).
  std::function<bool(int64_t choice, const std::string& delta)> on_reasoning;
  // Set (a streamed answer that asked for logprobs): each token's log probabilities, with the choice's index,
  // once the content released reaches its text (right before that piece goes to on_text / on_choice_text; a
  // token whose text was held back, before a later piece, at the latest the choice's last), so that those
  // handed on by a choice's end are its RunResult::logprobs. Unset: only the result holds them.
  std::function<void(int64_t choice, const StepLogprobs& step)> on_logprobs;
  std::function<bool()> cancelled;  // polled between forwards and while waiting
};

// One measured read.
struct AuditResult {
  int64_t request = 0;      // the session's request number (1 = its first)
  double predicted_kl = 0;  // what the server predicted for it (usage.orbit.predicted_kl)
  double measured_kl = 0;   // KL(re-prefill ‖ served) of the first answer token's distribution, nats
  bool top1_match = true;   // the two distributions' argmax agree
  double budget = 0;        // the session's KL budget
  bool within_budget() const { return measured_kl <= budget; }
  nlohmann::json to_json() const;  // {request, measured_kl, predicted_kl, top1_match, budget, within_budget}
};

// usage.orbit, and the prompt and completion counts.
struct RunUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double forward_tokens = 0;  // orbit's critical-path forward tokens for the prompt
  // The engine's radix yardstick for this request (serve_core.h): what SGLang's radix cache, shared by every
  // request and holding the KV memory orbit's pool has, would have forwarded for this prompt. The delta of
  // the window's WindowStats::radix_cache_tokens over the request; 0 for a run cancelled before it decoded.
  int64_t radix_cache_tokens = 0;
  double predicted_kl = 0;  // the window's predicted next-token KL vs a re-prefill when it is read
  // Forwarded for this prompt in idle time before it arrived: the previous answer prefilled as the session
  // would send it back (ServeOptions::anticipate). Not on the critical path, not in forward_tokens.
  double idle_forward_tokens = 0;
  std::string plan;     // e.g. "keep 4, admit 1, turn 1, evict 2"
  std::string session;  // "" for anonymous requests
  // The session's latest audit (audit.h) not yet reported: an audit runs in idle time after its request
  // answered, so it reaches the client in the usage of the session's next response (and in its record).
  std::optional<AuditResult> audit;
  // Under a reasoning parser (ServeOptions::reasoning): the generated tokens that wrote the reasoning and its
  // tags, every choice's (OpenAI's completion_tokens_details.reasoning_tokens); unset without one.
  std::optional<int64_t> reasoning_tokens;
  // Why this request was served exactly (healed before it was read), or "": "audit" when the session's
  // audited loss passed its budget.
  std::string exact;
  // The prompt was read from KV equal to a re-prefill's (every instance of the window exact after its sync, as
  // a session's first request and an append-only session's are, or healed: `exact`): nothing lost, nothing
  // audited (audit.h). Unset for a /v1/completions prompt (not tracked there; usage.orbit leaves it out).
  std::optional<bool> exact_kv;
  // The prompt tokens the server did not forward for this request (served from KV it kept, exactly or
  // approximately): prompt_tokens - forward_tokens, rounded up, within [0, prompt_tokens]. OpenAI's
  // prompt_tokens_details.cached_tokens (input_tokens_details on the Responses API).
  int64_t cached_tokens() const;
  // {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details: {cached_tokens}, orbit: {...}}
  nlohmann::json to_json() const;
};

struct RunResult {
  std::string text;  // the answer's content (without its tool calls, nor its reasoning)
  // Under a reasoning parser (ServeOptions::reasoning): the answer's reasoning ("" when it wrote none), read
  // out of the text before its content and calls are (run/reasoning.h); unset without one.
  std::optional<std::string> reasoning;
  std::vector<ChatToolCall> tool_calls;  // the calls read from the answer (ChatRequest::reads_tool_calls)
  // finish_reason "length" ended the answer inside the last of tool_calls: its arguments are the JSON text
  // written so far (not valid JSON), as OpenAI returns such a call (CutToolCall::kCall, orbit/tool_calls.h).
  bool tool_call_cut = false;
  // finish_reason "length" ended the answer inside a call whose tool could not be told yet (its name not
  // begun, or begun as several tools' names): the call was left out (orbit/answer_calls.h). With no text
  // either, the answer has no message: chat's content is null, and a response has no message item.
  bool tool_call_left_out = false;
  // parallel_tool_calls false and a free answer (no grammar held it to one call) wrote more calls: how many
  // after the first were left out of tool_calls (run/tool_stream.h).
  std::size_t tool_calls_dropped = 0;
  // Streamed runs (each streamed choice): the content held back while it might have been the start of a call,
  // sent once the choice ended (RunSink::on_choice_end).
  std::string unstreamed;
  // Streamed runs: the pieces of tool_calls not sent to RunSink::on_tool_call while the answer was generated
  // (all of them, each call whole in its opening piece, where the sink streams no calls), to send at the end.
  std::vector<ToolCallDelta> unstreamed_calls;
  // Streamed runs: a call that went out in pieces the answer does not hold (ToolStreamMismatch); then
  // unstreamed_calls is empty, the choice's stream ends with an error naming the call instead of its closing
  // chunks (chat: tool_stream_error, run/tool_stream.h; Responses: response.failed), tool_calls are the
  // answer's as parsed whole, and the answer is not stored (store: true; chat_store_wire.h's storable).
  std::optional<ToolStreamMismatch> tool_stream_mismatch;
  std::string finish_reason;          // "stop", "length", "tool_calls", or "cancelled" (the client left)
  std::vector<int64_t> tokens;        // generated ids (a stop token that ended the run excluded)
  int64_t prompt_forward_tokens = 0;  // of the query (generation prompt): forwarded, not served by exact reuse
  // With SamplingRequest::logprobs: one entry per token of `tokens` (tool-call text included), else empty.
  std::vector<StepLogprobs> logprobs;
  // SamplingRequest::logprobs: the answer carries its entries even where there are none (an empty answer, a stop
  // string at its first token): chat's choices[].logprobs is then {"content": [], ...}, not null.
  bool logprobs_asked = false;
  RunUsage usage;
  // n > 1 (SamplingRequest::n): choices 1..n−1, each as above but for `usage`, which is this one's for the
  // request (completion_tokens counting every choice). Empty for n = 1.
  std::vector<RunResult> extra_choices;
};

// Whether chat's message for `r` has content null, as OpenAI answers a call without text (also one the budget cut
// before its tool could be told) and reasoning parsers an answer that is all reasoning; a client sends such a
// message back with content null (which serve reads as "": chat_messages.cpp).
inline bool content_null(const RunResult& r) {
  return r.text.empty() && (!r.tool_calls.empty() || r.tool_call_left_out || r.reasoning.has_value());
}

// A run's result, or the error to answer with.
struct RunOutcome {
  std::optional<RunResult> result;
  ApiError error;
};

}  // namespace orbit::serve
