// A POST /v1/responses below HTTP: parsed (responses_api.h), joined to the conversation it continues, put
// in its window, prepared (ServeCore::prepare_chat: every refusal before any byte), then run, answered
// (responses_wire.h) and stored (responses_store.h).
//
// The conversation: the instructions (a system message), then the stored conversation of
// previous_response_id (400 previous_response_not_found, as OpenAI answers it, for an id never stored, stored with
// store false, deleted, or dropped from the store; 400 previous_response_in_progress for one still running: it
// has no answer to continue yet), then the request's input. With truncation "auto", a conversation whose
// prompt would leave less than the answer's room in the context loses its oldest items (after the leading system and
// developer messages, never the last one, and a tool result whose call was dropped goes with it) until it fits: the
// room is max_output_tokens when given, else the server's default max_tokens, at most a quarter of the context. The
// window then evicts what was dropped and keeps the rest in place. What the input held is stored whole all the same, so
// a later request chained to this one starts from all of it.
//
// The window (the session the chat request runs in), first that applies:
//   1. the header X-Orbit-Session, else the request's `user` (session_for_user), as for chat;
//   2. previous_response_id: the session of the response it names, so a chain runs in one window and
//      each request syncs only what is new, with no session configured;
//   3. a stored response whose conversation (as the model read it, with its answer) the request's messages
//      begin with (ResponseStore::continued_by): its session, so an agent that resends its whole history
//      lands in the window that holds it;
//   4. a new session named by this response's id (store true), so that requests chained to it find it;
//      with store false, one of the anonymous windows.
//
// Thread-safety: one ResponseCall per request, used by one thread (it holds its window from prepare to
// run); any number at once.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "serve/responses/responses_api.h"
#include "serve/responses/responses_store.h"
#include "serve/responses/responses_wire.h"
#include "serve/serve_core.h"
#include "serve/stored/store_write.h"

namespace orbit::serve {

// One request from prepare to answer. It is prepared in place and never moves (its ticket points at
// request.chat).
struct ResponseCall {
  ResponseCall() = default;
  ResponseCall(const ResponseCall&) = delete;
  ResponseCall& operator=(const ResponseCall&) = delete;

  ResponsesRequest request;  // after prepare, request.chat.messages is the whole conversation
  ResponseHead head;
  std::shared_ptr<StoredResponse> previous;  // what previous_response_id named; null when none
  std::size_t input_begin = 0;               // request.chat.messages[input_begin..]: this request's input
  // When truncation dropped any of the input's items: the input as the request gave it (stored whole).
  std::optional<std::vector<ChatMessage>> whole_input;
  std::string session;  // the window it runs in ("" = anonymous)
  RunTicket ticket;
  bool store_tried = false;  // its answer went to the store (taken, or held for a retry)
  // Store true: registered as running from its prepare until its run ended (ResponseStore::live).
  LiveAnswers<StoredResponse>::Hold live;
};

// Once the call is over (run, refused, or never run): releases its ticket and, where the call's session was
// made for this response alone (named by its id: store true, no X-Orbit-Session, user or previous response)
// and no answer went to the store (the client left, the run failed), ends that session. Nothing can name it
// again (the id names no stored response), and its record would stay known until max_known_sessions pushed
// it out: a record for every cancelled response, each taking the place of a session a client still uses.
void finish_call(ServeCore& core, ResponseCall& call);

// Parses `body`, joins the conversation, names the window and prepares the run. `header_session` is the
// X-Orbit-Session header's value (already checked), or null. Returns the error to answer with, before any
// byte of the answer (statuses as chat's; previous_response_id unknown 400 previous_response_not_found, or
// still running 400 previous_response_in_progress; with store true, a store that cannot take a write 507,
// store_write.h). A prepared response with store true is registered as running (ResponseCall::live).
std::optional<ApiError> prepare_response(ServeCore& core, std::string_view body, const std::string* header_session,
                                         ResponseCall& call);

// POST /v1/responses/input_tokens: the tokens the request's input reads as a response (the instructions,
// the conversation of previous_response_id, the input, the tools, as `usage.input_tokens` counts them;
// with truncation "auto", what is left after it),
// checked as POST /v1/responses checks it; nothing runs and no window is touched. The body takes only what
// shapes the input (model, which defaults to the served one, input, instructions, previous_response_id,
// tools, tool_choice, parallel_tool_calls, text, reasoning, truncation); any other field is a 400 naming it.
Parsed<int64_t> count_input_tokens(ServeCore& core, std::string_view body);

struct ResponseOutcome {
  RunOutcome run;                    // the chat run: its result, or the error to answer with
  nlohmann::json body;               // the response object; null when the run failed
  std::optional<StoreWrite> stored;  // store true and run to its end: whether the store took it
  // Streamed: the stream's last events (response.completed or .incomplete with the items' closing events
  // before it, or response.failed), which the caller writes once it has counted the request, so that a
  // client that read the whole stream finds it in /metrics; "" for a cancelled run or a whole answer.
  std::string last_events;
};

// Runs a prepared call. `events` set: the request streams, and the events (responses_wire.h) go to it as
// they come, response.created first (false: the client left), all but the last ones
// (ResponseOutcome::last_events, for the caller to write); a cancelled run has no last event. A streamed
// run that throws once response.created went out ends as response.failed (run.error: internal_error, a 500);
// an exception before it, and any of a whole one, escapes to the caller (the stream's error event:
// stream_error_event; the route's exception handler: a 500 answer). `sink.on_text`
// and `sink.on_tool_call` observe the generated text and calls (the calls reach the events as they are written
// where they are decoded under the tools' grammar, answer_constraint.h) and `sink.cancelled` is polled, as for chat. A
// response that ran to its end (not cancelled) is stored (store true) before its last event is written, so a request
// chained to it right away finds it, unless a DELETE came while it ran; either way it is no longer running once this
// returns (ResponseCall::live); a failed write is counted and said in the last event (store_write.h). A
// streamed response whose answer does not hold a call as it was streamed (RunResult::tool_stream_mismatch)
// ends with response.failed naming the call (tool_stream_error, run/tool_stream.h) and is not stored.
ResponseOutcome run_response(ServeCore& core, ResponseCall& call, const RunSink& sink,
                             const std::function<bool(const std::string&)>& events = nullptr);

}  // namespace orbit::serve
