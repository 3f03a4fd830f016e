// The Responses API's errors: a chat check's error renamed to the field of the request it was read from
// (responses_error, by each chat message's MessageOrigin), and a function call and its outputs not paired one
// to one (call_pairing_error). Functions of values: no sockets, no server state.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "serve/wire/serve_api.h"

namespace orbit::serve {

// A function_call or function_call_output item of the input, in the input's order.
struct CallItem {
  std::size_t item = 0;  // its index in input
  std::string call_id;
  bool output = false;  // a function_call_output; else a function_call
};

// Where one chat message of a request was read from, so that a chat check's field ("messages[i]...") is named
// as the request gives it (responses_error). A message may join several items: an assistant message item, the
// function_call items after it (one per tool call) and the reasoning item before it.
struct MessageOrigin {
  enum class From {
    instructions,  // the instructions' system message
    text,          // the input given as a string
    message,       // a message item, input[item]
    output,        // a function_call_output item, input[item] (its output is the content)
    calls,         // an assistant message made for its function_call items (no message item)
  };
  From from = From::message;
  std::size_t item = 0;                  // message, output: the item's index in input
  std::optional<std::size_t> reasoning;  // the reasoning item read as its reasoning_content
  std::vector<std::size_t> calls;        // tool_calls[j] was read from input[calls[j]]
};

// A chat error (parse_chat_request's, ServeCore::prepare_chat's) in the Responses API's names: param and
// message "max_tokens" become "max_output_tokens", "response_format" "text.format", "messages" "input",
// "tools[i].function.x" "tools[i].x". A message's field "messages[i].x" becomes the field of the item that
// message i was read from, by `origins` (the request's): e.g. "messages[3].tool_calls[1].function.arguments"
// "input[5].arguments", a tool message's tool_call_id "input[k].call_id" and its content "input[k].output",
// reasoning_content the reasoning item "input[r]", the instructions' message "instructions"; a field of no
// item, or a message `origins` does not hold (none given: a conversation joined to a previous response's),
// is named "input".
ApiError responses_error(ApiError error, const std::vector<MessageOrigin>& origins = {});

// As OpenAI: every function call is answered by exactly one function_call_output after it. `items` are the
// input's calls and outputs in order; `earlier` the previous response's conversation (its assistant messages'
// tool_calls are calls made before the input, its tool messages answers already given). The 400 for the first
// violation, or nullopt:
//   an output whose call_id no call before it has (param input[i].call_id; "... no tool call found for
//   function call output with call_id 'X' ...")
//   an output of a call already answered, in the input or `earlier` (param input[i].call_id; "Duplicate
//   function_call_output for call_id 'X'. Each function_call must have exactly one matching
//   function_call_output", OpenAI's wording as clients quote it, with the items named)
//   once every output is read, a call left unanswered, `earlier`'s first, then the input's in order (param
//   input, "No tool output found for function call X.", OpenAI's error as it answers a continuation that
//   leaves a call unanswered)
// Their code is null, the one refusal of a request that carries none: OpenAI answers these with code null, and
// clients that match its errors read them as it writes them (test_serve_hardening pins the body).
std::optional<ApiError> call_pairing_error(const std::vector<CallItem>& items, const std::vector<ChatMessage>& earlier);

}  // namespace orbit::serve
