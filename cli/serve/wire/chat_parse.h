// The chat and completion body parsers' shared pieces, apart from serve_api.cpp, which puts them together
// (parse_chat_request, parse_completion_request): the value checks every field goes through, and each part of
// a body parsed and checked into its type. Internal to the wire format: every function here throws
// RequestInvalid (request_invalid.h) naming the field at fault, which serve_api.cpp's entry points catch.
//   field_values.cpp     need_string, need_number, need_bool, need_int
//   chat_messages.cpp    parse_message: a chat message, its content parts and tool calls
//   sampling_fields.cpp  parse_sampling, parse_processors, parse_logprobs: the fields both endpoints share
//   chat_options.cpp     parse_tools, parse_tool_choice, parse_response_format: chat's tools and answer form
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/wire/serve_api.h"

namespace orbit::serve::chat_wire {

// `v` as a string, else a 400 naming `param`.
std::string need_string(const nlohmann::json& v, const std::string& param);
// `v` as a finite number in [lo, hi] ((lo, hi] with `lo_open`), else a 400 naming `param` and the range.
double need_number(const nlohmann::json& v, const std::string& param, double lo, double hi, bool lo_open);
// `v` as a boolean, else a 400 naming `param`.
bool need_bool(const nlohmann::json& v, const std::string& param);
// `v` as a 64-bit integer, else a 400 naming `param` (one past 64 bits is said to be too large).
int64_t need_int(const nlohmann::json& v, const std::string& param);

// messages[i] at `param` ("messages[3]"): role, content, name, reasoning, tool_call_id and tool_calls checked
// (serve_api.h lists what each role may hold); "developer" is read as "system".
ChatMessage parse_message(const nlohmann::json& v, const std::string& param);

// The sampling fields of `body` shared by both endpoints: max_tokens, temperature, top_p, seed, stop, n,
// stream and stream_options.
SamplingRequest parse_sampling(const nlohmann::json& body, const ServeLimits& limits);
// OpenAI's logit processors, shared by both endpoints: presence_penalty, frequency_penalty, logit_bias.
void parse_processors(const nlohmann::json& body, const ServeLimits& limits, SamplingRequest& s);
// Chat's logprobs (bool) and top_logprobs (0..20, needs logprobs true); with `legacy` (/v1/completions, whose
// logprobs is an integer of top tokens) any logprobs is refused, and so is top_logprobs, which it lacks.
void parse_logprobs(const nlohmann::json& body, SamplingRequest& s, bool legacy);

// tools: each {"type": "function", "function": {"name": ..., ...}}; their names, in order, each once. (Their
// parameters are checked as schemas by the server: answer_constraint.h.)
std::vector<std::string> parse_tools(const nlohmann::json& tools);
// tool_choice: "none", "auto", "required" or a named function, one of `tools`.
ToolChoice parse_tool_choice(const nlohmann::json& v, const std::vector<std::string>& tools);
// response_format: text, json_object or json_schema with its schema.
ResponseFormat parse_response_format(const nlohmann::json& v);

}  // namespace orbit::serve::chat_wire
