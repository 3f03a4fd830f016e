// OpenAI's Responses API (POST /v1/responses, the default of the OpenAI Agents SDK) read into the chat
// request the server already runs: no model, no sockets, never throws (fuzzed with the chat parser by
// fuzz_serve_request). The request is rewritten as a /v1/chat/completions body and checked by
// parse_chat_request, so what chat refuses or honours (sampling ranges, tool_choice, JSON answers decoded
// under a constraint) is refused or honoured here the same way.
//
// What a request may hold:
//   model (string, required); input (required: a string, a user message, or a non-empty array of items):
//     {type?: "message", role: user | system | developer | assistant, content: a string or an array of
//       {type: "input_text" | "output_text", text}, an assistant's also {type: "refusal", refusal}, read as its
//       text as chat reads it} (id and status, as the SDKs send them back, are ignored)
//     {type: "function_call", call_id, name (a tool's name: 1 to 64 letters, digits, _ and -), arguments (text:
//       a JSON object, or what a call max_output_tokens cut had written, sent back as it was answered)}
//     {type: "function_call_output", call_id, output (a string or an array of {type: "input_text", text})}
//     {type: "reasoning", summary: [{type: "summary_text", text}], content?: [{type: "reasoning_text", text}],
//       encrypted_content?}: an earlier turn's reasoning, which must come right before the assistant message or
//       function_call it led to: its content's texts (else its summary's), joined by blank lines, are that
//       turn's reasoning_content (given to the chat template, as chat's is). encrypted_content is not read;
//       an item with no text and nothing else ("summary": [], as OpenAI returns one) is no reasoning and
//       skipped; one with no text but encrypted_content is refused naming it, and so is one not followed by
//       its turn ("input[3]: a reasoning item must come right before ...")
//     each item may also hold id and status (ignored, as above; a message also phase, a function_call also
//     parsed_arguments, the openai SDK's parse of an answer's call), as OpenAI's API documents them; a part
//     may also hold, ignored, output_text's annotations, logprobs and parsed (an answer's part sent back) or
//     input_text's prompt_cache_breakpoint (an object: @openai/agents' cache hint); any other key of an item
//     or a part is refused by name, code unknown_parameter ("input[2].cal_id: ... not a field of a
//     function_call_output item; did you mean 'call_id'?)", "input[0].content[0].txt: ...")
//   instructions (string: a system message before everything else; not carried over from a previous
//   response, as in OpenAI's API); previous_response_id (string: resolved by the server, responses_run.h);
//   store (bool, default true); tools ([{type: "function", name, description?, parameters?, strict?}], other keys
//   refused); tool_choice ("none" | "auto" | "required" | {type: "function", name} naming one of the tools |
//   {type: "allowed_tools", mode: "auto" | "required", tools: [{type: "function", name}, ...]}: calls to those only);
//   parallel_tool_calls (bool; without tools only repeated in the response, where chat refuses it); max_output_tokens
//   (integer >= 1); temperature [0, 2]; top_p [0, 1]; seed
//   (integer: as chat draws with it, the same request with the same seed answers the same);
//   presence_penalty, frequency_penalty and logit_bias (as chat takes and honours them); top_logprobs (0..20)
//   and include ["message.output_text.logprobs"]: either (top_logprobs above 0) asks for the answer's log
//   probabilities, written in output_text.logprobs and in each output_text.delta event;
//   stream (bool); stream_options ({include_obfuscation?: bool}, default true: each ".delta" event padded by a
//   random "obfuscation" field, stream_obfuscation.h); text ({format: {type:
//   "text"} | {type: "json_object"} | {type: "json_schema", name (required, as OpenAI has it: 1 to 64 letters,
//   digits, _ and -), schema, strict?}, verbosity?: "medium"}; a format key of another type's shape, e.g. a schema
//   beside type json_object, is refused naming it, code unknown_parameter); user (any string: names a session as in
//   chat); metadata (at most 16 string values, keys up to 64 bytes, values up to 512: stored and echoed);
//   prompt_cache_key and safety_identifier (hints, accepted as strings), prompt_cache_retention and
//   prompt_cache_options (hints, checked as chat's are: request_invalid.h).
// Refused rather than ignored (400 naming the field, code "unsupported_parameter"): background true,
// reasoning with an effort other than "none" (or a summary), truncation other than "disabled", any include
// item but message.output_text.logprobs (no reasoning, no hosted tools), conversation, prompt,
// max_tool_calls, service_tier other than "auto" or "default",
// context_management, text.verbosity other than "medium", and the samplers chat refuses (top_k, min_p, top_a,
// typical_p, repetition_penalty, mirostat). Chat's own fields are refused naming what to use instead (code
// "unknown_parameter"): max_tokens and max_completion_tokens (max_output_tokens), messages (input),
// response_format (text.format), logprobs (top_logprobs), functions and function_call (tools, tool_choice),
// stop and n (no equivalent). Any other field, at the top level or inside reasoning (effort, summary,
// generate_summary), text, text.format (type, name, schema, strict, description) and stream_options
// (include_obfuscation; only beside stream true), is refused as OpenAI refuses it (code "unknown_parameter", e.g.
// "text.fromat: unrecognized request argument ..."), never ignored. text.format.description (a string) is
// taken and changes nothing: the schema is not shown to the model either, the answer is held to it.
//
// Items become chat messages in order: a message item one message (developer read as system); a
// function_call item joins the assistant message right before it (its text, or the calls before it), else
// (or after a reasoning item) starts one with empty content, so consecutive calls are one assistant message
// with tool_calls; a reasoning item's text goes to the assistant message that follows it; a
// function_call_output item a tool message (tool_call_id = call_id). As OpenAI has it, each call, of the input
// or left unanswered by the previous response's conversation, must be answered by exactly one
// function_call_output after it (call_pairing_error). Every violation is an ApiError naming the field, e.g.
// "input[2].call_id: missing".
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/responses/responses_errors.h"
#include "serve/wire/serve_api.h"

namespace orbit::serve {

struct ResponsesRequest {
  // The request as chat: the instructions as a system message (when given), then the input's messages;
  // tools in the chat form ({type: "function", function: {name, description?, parameters?}}),
  // tool_choice, max_output_tokens as max_tokens, text.format as response_format. The server puts a
  // previous response's conversation between the instructions and the input (responses_run.h).
  ChatRequest chat;
  bool has_instructions = false;       // chat.messages[0] is the instructions
  std::vector<MessageOrigin> origins;  // origins[i]: where chat.messages[i] was read from
  std::string previous_response_id;    // "" when none
  bool store = true;                   // keep the response, so that a later request may name it
  // truncation "auto": a conversation past the context loses its oldest items (responses_run.h).
  bool truncate = false;
  // The input's function_call and function_call_output items, in order: paired one to one by the parser when
  // there is no previous_response_id; by the server, with that conversation's calls and answers, once it has
  // joined it (call_pairing_error).
  std::vector<CallItem> call_items;
  // What the response repeats of the request, defaults filled in: instructions, tools (as given), tool_choice,
  // parallel_tool_calls, temperature, top_p, max_output_tokens, store, metadata, text, truncation, user
  // (when given).
  nlohmann::json echo;
};

// Parse and check a /v1/responses body; never throws on any input.
Parsed<ResponsesRequest> parse_responses_request(std::string_view body, const ServeLimits& limits = {});

}  // namespace orbit::serve
