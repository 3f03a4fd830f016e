// The bodies of OpenAI's Responses API that `orbit serve` writes: the response object, whole or as the
// server-sent events of a stream, from a chat run's RunResult. The shapes are the `openai` client's
// (resources/responses/responses.d.ts):
//
//   {id: "resp_...", object: "response", created_at, completed_at, status, error: null, incomplete_details,
//    model, output: [message?, function_call...], usage, previous_response_id, instructions, tools,
//    tool_choice, parallel_tool_calls, temperature, top_p, max_output_tokens, store, metadata, text,
//    truncation, user?}
//   status          "completed"; "incomplete" with incomplete_details {reason: "max_output_tokens"} when the
//                   answer was cut by max_output_tokens (or the server's default); "in_progress" before the
//                   run. completed_at (Unix seconds) only when completed, else null, as OpenAI documents it
//   output          {type: "reasoning", id: "rs_...", summary: [], content: [{type: "reasoning_text", text}],
//                   status} first, under a reasoning parser when the answer has reasoning (run/reasoning.h);
//                   {type: "message", id: "msg_...", status, role: "assistant", content: [{type:
//                   "output_text", text, annotations: []}]} when the answer has text or no call, then one
//                   {type: "function_call", id: "fc_...", call_id, name, arguments, status: "completed"} per
//                   tool call. (output_text is not on the wire: the SDKs compute it, as OpenAI sends none.)
//   usage           {input_tokens, output_tokens, total_tokens, input_tokens_details: {cached_tokens},
//                   output_tokens_details: {reasoning_tokens}, orbit: {...}} (orbit as in chat's usage)
//
// A stream is "event: <type>\ndata: <json>\n\n" events numbered by sequence_number from 0:
//   response.created, response.in_progress                       (the response, status in_progress)
//   response.output_item.added, response.content_part.added      (the reasoning item, at its first piece, under
//   response.reasoning_text.delta ...                             a reasoning parser; part reasoning_text)
//   response.reasoning_text.done, response.content_part.done,    (when the message or the first call opens,
//   response.output_item.done                                     or at the end)
//   response.output_item.added, response.content_part.added      (the message, at its first text that is not
//                                                                 whitespace: the answer's text is trimmed)
//   response.output_text.delta ...                               (the text as it is generated)
//   response.output_text.done, response.content_part.done, response.output_item.done
//                                                                (when the first call opens, or at the end)
//   per call: response.output_item.added                         (status in_progress, arguments "")
//             response.function_call_arguments.delta ...         (the arguments as they are written, where
//                                                                 the calls stream: RunSink::on_tool_call;
//                                                                 else one delta with all of them at the end)
//             response.function_call_arguments.done, response.output_item.done
//                                                                (when the next call opens, or at the end)
// The pieces of each call's arguments concatenated are its arguments in the response, and a call's call_id
// is the one the response gives it.
//   response.completed or response.incomplete                    (the whole response; with store true and a
//                                                                 write that failed, "orbit": {stored: false,
//                                                                 store_error}, store_write.h)
// A run that fails after the stream began ends it with response.failed (status "failed", error {code,
// message}).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/serve_types.h"
#include "serve/stored/store_write.h"
#include "serve/wire/serve_api.h"
#include "serve/wire/stream_obfuscation.h"

namespace orbit::serve {

// What every body of one response shares.
struct ResponseHead {
  std::string id;  // "resp_" and hex digits
  int64_t created_at = 0;
  std::string model;
  std::string previous_response_id;  // "" = null
  nlohmann::json echo;               // ResponsesRequest::echo: the settings the response repeats

  std::string message_id() const;                 // "msg_..." (the id's digits)
  std::string reasoning_id() const;               // "rs_..." (the id's digits)
  std::string call_item_id(std::size_t i) const;  // "fc_..._i" for the answer's i-th tool call
};

// {input_tokens, output_tokens, total_tokens, input_tokens_details, output_tokens_details, orbit}
nlohmann::json responses_usage(const RunUsage& usage);
// The response object: `result` null = in progress (no output, no usage).
nlohmann::json response_body(const ResponseHead& head, const RunResult* result);

// The Responses stream's `error` event (OpenAI's ResponseErrorEvent: type "error", code, message, param,
// sequence_number 0) for a stream that fails before its response.created went out: there is no response yet
// for a response.failed to name.
std::string stream_error_event(const ApiError& error);

// The events of one streamed response, numbered in order. Not thread-safe: one per stream.
class ResponseEvents {
 public:
  // `obfuscation`: pads every ".delta" event (stream_options.include_obfuscation); off by default.
  explicit ResponseEvents(ResponseHead head, StreamObfuscation obfuscation = StreamObfuscation())
      : head_(std::move(head)), obfuscation_(std::move(obfuscation)) {}

  std::string start();  // response.created, response.in_progress
  // A piece of the reasoning (RunSink::on_reasoning): opens the reasoning item at the first, then its delta.
  // The item closes when the message or the first call opens, or at the end.
  std::string reasoning(const std::string& delta);
  // A token's log probabilities (RunSink::on_logprobs): the next delta of text carries them.
  void logprobs(const StepLogprobs& step) { pending_logprobs_.push_back(step); }
  // Opens the message at the first text, then its delta, with the log probabilities given since the last.
  std::string text(const std::string& delta);
  // A piece of a call (RunSink::on_tool_call): one that opens a call closes the message and the call before,
  // and adds the call's item; each adds its arguments' delta. No text follows the first call.
  std::string call(const ToolCallDelta& piece);
  // The closing events of the text and the calls, with what of result.tool_calls was not streamed, then the
  // response; `stored` (store true) that failed puts store_notice in the response as "orbit" (store_write.h).
  std::string finish(const RunResult& result, const StoreWrite* stored = nullptr);
  std::string failed(const ApiError& error);    // response.failed
  int64_t events() const { return sequence_; }  // events written so far

 private:
  std::string event(nlohmann::json body);  // numbered and framed; a ".delta" event padded when obfuscated
  std::string open_message();
  // The reasoning item's closing events (its text as streamed), `status` the item's.
  std::string close_reasoning(const std::string& status);
  std::size_t message_index() const { return reasoning_open_ ? 1 : 0; }
  // The message's closing events: `result`'s text and status, or (null) those streamed so far, "completed".
  std::string close_message(const RunResult* result);
  // The last call's closing events, `status` its status ("completed", or call_status's at the end).
  std::string close_call(const std::string& status);
  std::size_t call_index(std::size_t call) const { return message_index() + (message_open_ ? 1 : 0) + call; }

  ResponseHead head_;
  StreamObfuscation obfuscation_;
  int64_t sequence_ = 0;
  bool reasoning_open_ = false;  // the reasoning item was added (it is output 0)
  bool reasoning_closed_ = false;
  std::string reasoning_;  // its text streamed so far
  bool message_open_ = false;
  bool message_closed_ = false;
  std::string pending_;                                // whitespace before the message's first text, held back
  std::string text_;                                   // the message's text streamed so far
  nlohmann::json logprobs_ = nlohmann::json::array();  // the log probabilities sent with it
  std::vector<StepLogprobs> pending_logprobs_;         // given, not yet sent with a delta
  std::vector<ChatToolCall> calls_;                    // the calls opened, arguments as far as streamed
  bool call_open_ = false;                             // the last of calls_ is not closed yet
};

}  // namespace orbit::serve
