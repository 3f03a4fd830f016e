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
//                   run
//   output          {type: "message", id: "msg_...", status, role: "assistant", content: [{type:
//                   "output_text", text, annotations: []}]} when the answer has text or no call, then one
//                   {type: "function_call", id: "fc_...", call_id, name, arguments, status: "completed"} per
//                   tool call. (output_text is not on the wire: the SDKs compute it, as OpenAI sends none.)
//   usage           {input_tokens, output_tokens, total_tokens, input_tokens_details: {cached_tokens: 0},
//                   output_tokens_details: {reasoning_tokens: 0}, orbit: {...}} (orbit as in chat's usage)
//
// A stream is "event: <type>\ndata: <json>\n\n" events numbered by sequence_number from 0:
//   response.created, response.in_progress                       (the response, status in_progress)
//   response.output_item.added, response.content_part.added      (the message, at its first text)
//   response.output_text.delta ...                               (the text as it is generated)
//   response.output_text.done, response.content_part.done, response.output_item.done
//   per call: response.output_item.added, response.function_call_arguments.delta,
//             response.function_call_arguments.done, response.output_item.done
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

#include "serve/serve_types.h"
#include "serve/stored/store_write.h"
#include "serve/wire/serve_api.h"

namespace orbit::serve {

// What every body of one response shares.
struct ResponseHead {
  std::string id;  // "resp_" and hex digits
  int64_t created_at = 0;
  std::string model;
  std::string previous_response_id;  // "" = null
  nlohmann::json echo;               // ResponsesRequest::echo: the settings the response repeats

  std::string message_id() const;                 // "msg_..." (the id's digits)
  std::string call_item_id(std::size_t i) const;  // "fc_..._i" for the answer's i-th tool call
};

// {input_tokens, output_tokens, total_tokens, input_tokens_details, output_tokens_details, orbit}
nlohmann::json responses_usage(const RunUsage& usage);
// The response object: `result` null = in progress (no output, no usage).
nlohmann::json response_body(const ResponseHead& head, const RunResult* result);

// The events of one streamed response, numbered in order. Not thread-safe: one per stream.
class ResponseEvents {
 public:
  explicit ResponseEvents(ResponseHead head) : head_(std::move(head)) {}

  std::string start();                         // response.created, response.in_progress
  std::string text(const std::string& delta);  // opens the message at the first text, then its delta
  // The text's and the calls' closing events, then the response; `stored` (store true) that failed puts
  // store_notice in the response as "orbit" (store_write.h).
  std::string finish(const RunResult& result, const StoreWrite* stored = nullptr);
  std::string failed(const ApiError& error);    // response.failed
  int64_t events() const { return sequence_; }  // events written so far

 private:
  std::string event(nlohmann::json body);  // numbered and framed
  std::string open_message();

  ResponseHead head_;
  int64_t sequence_ = 0;
  bool message_open_ = false;
};

}  // namespace orbit::serve
