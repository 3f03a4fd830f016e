#include "serve/wire/serve_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"
#include "serve/wire/call_arguments.h"
#include "serve/wire/request_invalid.h"

namespace orbit::serve {

using nlohmann::json;

namespace {

using Invalid = RequestInvalid;

std::string need_string(const json& v, const std::string& param) {
  if (!v.is_string()) invalid_field(param, std::string("expected a string, got ") + json_type_name(v));
  return v.get<std::string>();
}

double need_number(const json& v, const std::string& param, double lo, double hi, bool lo_open) {
  if (!v.is_number()) invalid_field(param, std::string("expected a number, got ") + json_type_name(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) {
    std::ostringstream range;
    range << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
    invalid_field(param, "must be in " + range.str() + ", got " + v.dump());
  }
  return x;
}

bool need_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) invalid_field(param, std::string("expected a boolean, got ") + json_type_name(v));
  return v.get<bool>();
}

int64_t need_int(const json& v, const std::string& param) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      invalid_field(param, "too large");
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  // A whole number past 64 bits (18446744073709551616) is read as a float: say so rather than "a number".
  if (v.is_number_float() && std::isfinite(v.get<double>()) && std::abs(v.get<double>()) >= 9.2e18 &&
      v.get<double>() == std::floor(v.get<double>())) {
    invalid_field(param, "too large (" + v.dump() + " is outside the 64-bit integers)");
  }
  if (!v.is_number_integer()) invalid_field(param, std::string("expected an integer, got ") + json_type_name(v));
  return v.get<int64_t>();
}

// The text of a message's content: a string, null, or text parts; an assistant's may also hold OpenAI's
// refusal parts ({"type": "refusal", "refusal": text}), which are what it said, so they are read as its text.
std::string content_text(const json& v, const std::string& param, bool assistant) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  if (!v.is_array())
    invalid_field(param, std::string("expected a string, null or an array of parts, got ") + json_type_name(v));
  std::string text;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const json& part = v[i];
    if (!part.is_object()) invalid_field(p, std::string("expected an object, got ") + json_type_name(part));
    const auto type = part.find("type");
    if (type == part.end()) invalid_field(p + ".type", "missing");
    const std::string kind = need_string(*type, p + ".type");
    const bool refusal = assistant && kind == "refusal";
    if (kind != "text" && !refusal) {
      invalid_field(p + ".type", "only text parts are accepted" + std::string(assistant ? " (and refusal parts)" : "") +
                                     " (got '" + kind + "')");
    }
    // A part's keys: OpenAI's, and prompt_cache_breakpoint, a cache hint @openai/agents puts on text parts
    // (taken and unused, as the body's prompt_cache_key is). Another key is refused by name.
    refuse_unknown_fields(part, refusal ? "type refusal" : "type text prompt_cache_breakpoint",
                          refusal ? "a refusal part" : "a text part", p + ".");
    if (const auto hint = part.find("prompt_cache_breakpoint"); hint != part.end() && !hint->is_object()) {
      invalid_field(p + ".prompt_cache_breakpoint", std::string("expected an object, got ") + json_type_name(*hint));
    }
    const char* key = refusal ? "refusal" : "text";
    const auto t = part.find(key);
    if (t == part.end()) invalid_field(p + "." + key, "missing");
    text += need_string(*t, p + "." + key);
  }
  return text;
}

// A tool call's keys: OpenAI's (id, type, function {name, arguments}) and what clients echo back from an
// answer: index (a streamed call's place, kept by @langchain/openai's merged chunks and sent back with a call it
// could not parse) and function.parsed_arguments (the openai SDK's parse helpers and runTools add it). Both are
// the client's own copies of what it was answered, so they are taken and unused; another key is refused by name.
ChatToolCall parse_tool_call(const json& v, const std::string& param) {
  if (!v.is_object()) invalid_field(param, std::string("expected an object, got ") + json_type_name(v));
  refuse_unknown_fields(v, "id type function index", "a tool call", param + ".");
  if (v.contains("index") && !v["index"].is_null()) need_int(v["index"], param + ".index");
  ChatToolCall call;
  // Its id is what the tool message with its result names (tool_call_id), and templates render both.
  const auto id = v.find("id");
  if (id == v.end() || id->is_null()) invalid_field(param + ".id", "missing (the tool message of its result names it)");
  call.id = need_string(*id, param + ".id");
  if (call.id.empty()) invalid_field(param + ".id", "empty");
  if (v.contains("type") && need_string(v["type"], param + ".type") != "function") {
    invalid_field(param + ".type", "only 'function' tool calls are accepted");
  }
  const auto fn = v.find("function");
  if (fn == v.end() || !fn->is_object()) invalid_field(param + ".function", "missing or not an object");
  refuse_unknown_fields(*fn, "name arguments parsed_arguments", "a tool call's function", param + ".function.");
  const auto name = fn->find("name");
  if (name == fn->end()) invalid_field(param + ".function.name", "missing");
  call.name = need_string(*name, param + ".function.name");
  // Only a tool's name can be called, so a call in the history is held to the tools' rule; but "" is taken,
  // as this server answers a forced call max_tokens cut before its name began (name and arguments "").
  if (const std::string bad = name_problem(call.name, "a tool name"); !bad.empty() && !call.name.empty()) {
    invalid_field(param + ".function.name", bad);
  }
  if (fn->contains("arguments")) {
    // Templates see JSON arguments parsed (so JSON nested past the input bound is refused here), and other
    // text (a call max_tokens cut, as this server and OpenAI answer one) as a string (runtime::ChatToolCall).
    call.arguments = need_string((*fn)["arguments"], param + ".function.arguments");
    check_call_arguments(call.arguments, param + ".function.arguments");
  }
  return call;
}

// A message's keys, per role: OpenAI's (role, content, name; an assistant's refusal, audio, tool_calls and
// function_call; a tool's tool_call_id) and those the node clients in tests/node add (@langchain/openai: a
// tool message's name; @ai-sdk/openai-compatible: an assistant's reasoning_content; @openai/agents: an
// assistant's reasoning; the openai SDK's parse helpers and runTools: an assistant's parsed, the client's own
// parse of the content it was answered, taken and unused). Any other is refused by name. The chat template is
// given role, content, reasoning_content, name, tool_call_id and tool_calls, so a key it would not see is
// refused unless null rather than dropped: audio (an earlier audio answer's id) and function_call (the
// deprecated call form; send tool_calls).
void refuse_unknown_message_fields(const json& v, const std::string& role, const std::string& param) {
  const bool assistant = role == "assistant";
  const char* known = assistant        ? "role content name refusal audio tool_calls function_call reasoning_content "
                                         "reasoning parsed"
                      : role == "tool" ? "role content tool_call_id name"
                                       : "role content name";
  refuse_unknown_fields(v, known, "a" + std::string(assistant ? "n " : " ") + role + " message", param + ".");
  if (!assistant) return;
  for (const char* name : {"audio", "function_call"}) {
    const auto it = v.find(name);
    if (it == v.end() || it->is_null()) continue;
    invalid_field(param + "." + name, std::string("not accepted: the chat template would not see it (") +
                                          (name[0] == 'f' ? "send the call as tool_calls" : "leave it out or null") +
                                          ")");
  }
}

// An assistant's reasoning, the thinking an earlier turn wrote before its answer, given to the template as
// message.reasoning_content (which reasoning models' templates render): reasoning_content as
// @ai-sdk/openai-compatible and other OpenAI-compatible clients send it, or reasoning, the string @openai/agents
// sends (a reasoning item's text); both given, they must agree. Null or absent: none.
std::optional<std::string> parse_reasoning(const json& v, const std::string& param) {
  std::optional<std::string> out;
  for (const char* name : {"reasoning_content", "reasoning"}) {
    const auto it = v.find(name);
    if (it == v.end() || it->is_null()) continue;
    std::string text = need_string(*it, param + "." + name);
    if (out && *out != text) {
      invalid_field(param + ".reasoning",
                    "differs from reasoning_content: give one of them (or the same text in both)");
    }
    out = std::move(text);
  }
  return out;
}

// A tool message's tool_call_id: required and not empty, as OpenAI has it (the template renders it beside the
// result, and it is all that ties the result to its call). Which call it names is not checked: an agent
// that trims its context drops old call messages and keeps their results (serve_api.h).
std::string parse_tool_call_id(const json& v, const std::string& param) {
  const auto id = v.find("tool_call_id");
  if (id == v.end() || id->is_null()) {
    invalid_field(param + ".tool_call_id", "missing (a tool message answers the assistant's call of that id)");
  }
  std::string out = need_string(*id, param + ".tool_call_id");
  if (out.empty()) invalid_field(param + ".tool_call_id", "empty");
  return out;
}

ChatMessage parse_message(const json& v, const std::string& param) {
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  if (!v.is_object()) invalid_field(param, std::string("expected an object, got ") + json_type_name(v));
  ChatMessage m;
  const auto role = v.find("role");
  if (role == v.end()) invalid_field(param + ".role", "missing");
  m.role = need_string(*role, param + ".role");
  if (!kRoles.count(m.role)) {
    invalid_field(param + ".role",
                  "unknown role '" + m.role + "' (expected system, developer, user, assistant or tool)");
  }
  refuse_unknown_message_fields(v, m.role, param);
  if (m.role == "developer") m.role = "system";  // OpenAI's newer name for the system prompt
  const auto content = v.find("content");
  if (content == v.end() && m.role != "assistant") invalid_field(param + ".content", "missing");
  if (content != v.end()) m.content = content_text(*content, param + ".content", m.role == "assistant");
  if (v.contains("refusal") && !v["refusal"].is_null()) m.content += need_string(v["refusal"], param + ".refusal");
  if (m.role == "assistant") m.reasoning_content = parse_reasoning(v, param);
  if (v.contains("name") && !v["name"].is_null()) {
    m.name = need_string(v["name"], param + ".name");
    if (const std::string bad = name_problem(*m.name, "a message name"); !bad.empty())
      invalid_field(param + ".name", bad);
  }
  if (m.role == "tool") m.tool_call_id = parse_tool_call_id(v, param);
  if (v.contains("tool_calls") && !v["tool_calls"].is_null()) {
    const json& calls = v["tool_calls"];
    if (!calls.is_array())
      invalid_field(param + ".tool_calls", std::string("expected an array, got ") + json_type_name(calls));
    for (std::size_t i = 0; i < calls.size(); ++i) {
      m.tool_calls.push_back(parse_tool_call(calls[i], param + ".tool_calls[" + std::to_string(i) + "]"));
    }
  }
  return m;
}

std::vector<std::string> parse_stop(const json& v, const ServeLimits& limits) {
  if (v.is_null()) return {};
  if (v.is_string()) {
    if (v.get<std::string>().empty()) invalid_field("stop", "must not be empty");
    return {v.get<std::string>()};
  }
  if (!v.is_array())
    invalid_field("stop", std::string("expected a string or an array of strings, got ") + json_type_name(v));
  if (v.size() > limits.max_stop_strings) {
    invalid_field("stop", "at most " + std::to_string(limits.max_stop_strings) + " sequences are accepted");
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    out.push_back(need_string(v[i], "stop[" + std::to_string(i) + "]"));
    if (out.back().empty()) invalid_field("stop[" + std::to_string(i) + "]", "must not be empty");
  }
  return out;
}

// max_completion_tokens, or the older max_tokens; both given, they must agree (neither is ignored).
std::optional<int64_t> parse_max_tokens(const json& body) {
  std::optional<int64_t> out;
  for (const char* name : {"max_completion_tokens", "max_tokens"}) {
    const auto it = body.find(name);
    if (it == body.end() || it->is_null()) continue;
    const int64_t n = need_int(*it, name);
    if (n < 1) invalid_field(name, "must be >= 1, got " + std::to_string(n));
    if (out && *out != n) {
      invalid_field(name, std::to_string(n) + " differs from max_completion_tokens = " + std::to_string(*out) +
                              ": give one of them (or the same value in both)");
    }
    out = n;
  }
  return out;
}

SamplingRequest parse_sampling(const json& body, const ServeLimits& limits) {
  SamplingRequest s;
  s.max_tokens = parse_max_tokens(body);
  auto field = [&](const char* name) -> const json* {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = field("temperature")) s.temperature = need_number(*v, "temperature", 0, 2, false);
  if (const json* v = field("top_p")) s.top_p = need_number(*v, "top_p", 0, 1, true);
  if (const json* v = field("seed")) s.seed = static_cast<uint64_t>(need_int(*v, "seed"));
  if (const json* v = field("stop")) s.stop = parse_stop(*v, limits);
  if (const json* v = field("n")) {
    s.n = need_int(*v, "n");
    if (s.n < 1 || s.n > limits.max_choices) {
      invalid_field("n", "must be in [1, " + std::to_string(limits.max_choices) + "], got " + v->dump());
    }
  }
  if (const json* v = field("stream")) s.stream = need_bool(*v, "stream");
  if (const json* v = field("stream_options")) {
    // As OpenAI: only beside stream true; other keys are refused by name. include_obfuscation (on unless
    // false, as OpenAI has it) pads each chunk with a random "obfuscation" field (stream_obfuscation.h).
    if (!v->is_object()) invalid_field("stream_options", std::string("expected an object, got ") + json_type_name(*v));
    if (!s.stream) invalid_field("stream_options", "only allowed when stream is true");
    for (const auto& [key, value] : v->items()) {
      if (key == "include_usage") {
        s.include_usage = need_bool(value, "stream_options.include_usage");
      } else if (key == "include_obfuscation") {
        s.include_obfuscation = need_bool(value, "stream_options.include_obfuscation");
      } else {
        invalid_field("stream_options." + key, "unknown option (include_usage and include_obfuscation are served)");
      }
    }
  }
  return s;
}

// logit_bias: {"<token id>": bias}, ids as decimal strings (OpenAI's JSON), biases in [-100, 100].
std::map<int64_t, double> parse_logit_bias(const json& v, const ServeLimits& limits) {
  if (!v.is_object()) invalid_field("logit_bias", std::string("expected an object, got ") + json_type_name(v));
  std::map<int64_t, double> out;
  for (const auto& [key, value] : v.items()) {
    const bool digits = !key.empty() && key.size() <= 18 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) invalid_field("logit_bias", "key '" + key + "' is not a token id (a decimal integer)");
    const int64_t token = std::stoll(key);
    if (limits.vocab_size > 0 && token >= limits.vocab_size) {
      invalid_field("logit_bias", "token " + key + " is outside the model's vocabulary [0, " +
                                      std::to_string(limits.vocab_size) + ")");
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) || std::abs(value.get<double>()) > 100) {
      invalid_field("logit_bias", "the bias of token " + key + " must be a number in [-100, 100], got " + value.dump());
    }
    out[token] = value.get<double>();
  }
  return out;
}

// OpenAI's logit processors, shared by both endpoints.
void parse_processors(const json& body, const ServeLimits& limits, SamplingRequest& s) {
  const auto field = [&](const char* name) -> const json* {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = field("presence_penalty")) s.presence_penalty = need_number(*v, "presence_penalty", -2, 2, false);
  if (const json* v = field("frequency_penalty"))
    s.frequency_penalty = need_number(*v, "frequency_penalty", -2, 2, false);
  if (const json* v = field("logit_bias")) s.logit_bias = parse_logit_bias(*v, limits);
}

// Chat's logprobs (bool) and top_logprobs (0..20, needs logprobs true); with `legacy` (/v1/completions, whose
// logprobs is an integer of top tokens) any logprobs is refused, and so is top_logprobs, which it lacks.
void parse_logprobs(const json& body, SamplingRequest& s, bool legacy) {
  const auto field = [&](const char* name) -> const json* {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (legacy) {
    if (const json* v = field("logprobs"); v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
      unsupported("logprobs", "logprobs on /v1/completions (/v1/chat/completions serves them: logprobs: true)");
    }
    if (field("top_logprobs") != nullptr) unsupported("top_logprobs", "top_logprobs on /v1/completions");
    return;
  }
  if (const json* v = field("logprobs")) s.logprobs = need_bool(*v, "logprobs");
  if (const json* v = field("top_logprobs")) {
    const int64_t k = need_int(*v, "top_logprobs");
    if (k < 0 || k > 20) invalid_field("top_logprobs", "must be in [0, 20], got " + v->dump());
    if (k > 0 && !s.logprobs) invalid_field("top_logprobs", "needs logprobs: true");
    s.top_logprobs = static_cast<int32_t>(k);
  }
}

// tools: each {"type": "function", "function": {"name": ..., ...}}; their names, in order, each once. (Their
// parameters are checked as schemas by the server: answer_constraint.h.)
std::vector<std::string> parse_tools(const json& tools) {
  if (!tools.is_array()) invalid_field("tools", std::string("expected an array, got ") + json_type_name(tools));
  std::vector<std::string> names;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object()) invalid_field(p, std::string("expected an object, got ") + json_type_name(t));
    if (t.contains("type") && need_string(t["type"], p + ".type") != "function") {
      invalid_field(p + ".type", "only 'function' tools are accepted");
    }
    const auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) invalid_field(p + ".function", "missing or not an object");
    // A key out of place (a misspelt "parameters") would give the model a tool whose arguments go unchecked.
    refuse_unknown_fields(t, "type function", p, p + ".");
    refuse_unknown_fields(*fn, "name description parameters strict", p + ".function", p + ".function.");
    const auto name = fn->find("name");
    if (name == fn->end()) invalid_field(p + ".function.name", "missing");
    names.push_back(need_string(*name, p + ".function.name"));
    if (names.back().empty()) invalid_field(p + ".function.name", "empty");
    if (const std::string bad = name_problem(names.back(), "a tool name"); !bad.empty()) {
      invalid_field(p + ".function.name", bad);
    }
    const auto first = std::find(names.begin(), names.end(), names.back());
    if (first + 1 != names.end()) {
      invalid_field(p + ".function.name", "'" + names.back() + "' is also the name of tools[" +
                                              std::to_string(first - names.begin()) + "] (tool names must be unique)");
    }
    if (fn->contains("parameters") && !(*fn)["parameters"].is_object()) {
      invalid_field(p + ".function.parameters",
                    std::string("expected an object, got ") + json_type_name((*fn)["parameters"]));
    }
  }
  return names;
}

ToolChoice parse_tool_choice(const json& v, const std::vector<std::string>& tools) {
  ToolChoice c;
  if (v.is_string()) {
    c.mode = v.get<std::string>();
    if (c.mode != "none" && c.mode != "auto" && c.mode != "required") {
      invalid_field("tool_choice", "'" + c.mode + "' is not one of none, auto, required (or a named function)");
    }
  } else if (v.is_object()) {
    if (v.contains("type") && need_string(v["type"], "tool_choice.type") != "function") {
      invalid_field("tool_choice.type", "only 'function' is accepted");
    }
    const auto fn = v.find("function");
    if (fn == v.end() || !fn->is_object()) invalid_field("tool_choice.function", "missing or not an object");
    refuse_unknown_fields(v, "type function", "tool_choice", "tool_choice.");
    refuse_unknown_fields(*fn, "name", "tool_choice.function", "tool_choice.function.");
    const auto name = fn->find("name");
    if (name == fn->end()) invalid_field("tool_choice.function.name", "missing");
    c.mode = "function";
    c.function = need_string(*name, "tool_choice.function.name");
    if (std::find(tools.begin(), tools.end(), c.function) == tools.end()) {
      invalid_field("tool_choice.function.name", "'" + c.function + "' is not one of the request's tools");
    }
  } else {
    invalid_field("tool_choice", std::string("expected a string or an object, got ") + json_type_name(v));
  }
  if ((c.mode == "required" || c.mode == "function") && tools.empty()) {
    invalid_field("tool_choice", "'" + c.mode + "' needs tools, and the request has none");
  }
  return c;
}

ResponseFormat parse_response_format(const json& v) {
  if (!v.is_object()) invalid_field("response_format", std::string("expected an object, got ") + json_type_name(v));
  // A key elsewhere than OpenAI puts it ({"type": "json_object", "schema": ...}) would leave its schema unenforced.
  refuse_unknown_fields(v, "type json_schema", "response_format", "response_format.");
  ResponseFormat f;
  const auto type = v.find("type");
  if (type == v.end()) invalid_field("response_format.type", "missing");
  f.type = need_string(*type, "response_format.type");
  if (f.type != "json_schema" && v.contains("json_schema")) {
    invalid_field("response_format.json_schema", "given with type '" + f.type + "': a schema needs type json_schema");
  }
  if (f.type == "json_schema") {
    const auto js = v.find("json_schema");
    if (js == v.end() || !js->is_object()) invalid_field("response_format.json_schema", "missing or not an object");
    refuse_unknown_fields(*js, "name schema strict description", "response_format.json_schema",
                          "response_format.json_schema.");
    if (js->contains("name")) f.name = need_string((*js)["name"], "response_format.json_schema.name");
    if (js->contains("strict") && !(*js)["strict"].is_null()) {
      f.strict = need_bool((*js)["strict"], "response_format.json_schema.strict");
    }
    const auto schema = js->find("schema");
    if (schema == js->end() || !schema->is_object())
      invalid_field("response_format.json_schema.schema", "missing or not an object");
    f.schema_json = schema->dump();
  } else if (f.type != "text" && f.type != "json_object") {
    invalid_field("response_format.type", "'" + f.type + "' is not one of text, json_object, json_schema");
  }
  return f;
}

// The body as a JSON object, or an error (size, syntax, not an object).
json parse_body(std::string_view body, const ServeLimits& limits) {
  if (body.size() > limits.max_body_bytes) {
    throw Invalid{api_error(413, "request body of " + std::to_string(body.size()) + " bytes is over the limit of " +
                                     std::to_string(limits.max_body_bytes) + " bytes")};
  }
  // Bounded nesting: tools are dumped and copied, which recurses once per level.
  json j;
  try {
    j = parse_json_input(body.data(), body.data() + body.size(), "the body");
  } catch (const Error& e) {
    invalid_field("", e.what());
  }
  if (!j.is_object()) invalid_field("", std::string("the body must be a JSON object, got ") + json_type_name(j));
  return j;
}

std::string parse_model(const json& body) {
  const auto it = body.find("model");
  if (it == body.end()) invalid_field("model", "missing");
  return need_string(*it, "model");
}

std::string parse_user(const json& body) {
  const auto it = body.find("user");
  if (it == body.end() || it->is_null()) return "";
  std::string user = need_string(*it, "user");
  if (user.size() > 4096) invalid_field("user", "at most 4096 bytes are accepted");
  return user;
}

// A field of the body as JSON text with its objects' keys in the order the client wrote them (a tool's
// schema is rendered into the prompt, and a response schema's properties are generated, in that order;
// `json` sorts keys). The body has passed parse_body's depth guard already.
std::string ordered_field(std::string_view text, const char* name, const char* path = nullptr) {
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(text.begin(), text.end(), nullptr, false);
  if (body.is_discarded() || !body.contains(name)) return "";
  if (path == nullptr) return body[name].dump();
  const nlohmann::ordered_json::json_pointer at(path);
  return body[name].contains(at) ? body[name][at].dump() : "";
}

// Parameters other servers take that change what is sampled or returned, which this one does not serve: a
// request that gives one a value other than its no-op is refused naming it, never answered as if it were
// not there. (Fields that change nothing in the answer, e.g. service_tier auto, are accepted.)
void refuse_unserved(const json& body, bool chat) {
  const auto given = [&](const char* name) { return body.contains(name) && !body[name].is_null(); };
  for (const char* name : {"top_k", "min_p", "top_a", "typical_p", "repetition_penalty", "mirostat"}) {
    if (given(name)) unsupported(name, std::string("sampling by ") + name + " (give temperature and top_p)");
  }
  if (chat) {
    if (given("functions") || given("function_call")) {
      unsupported(given("functions") ? "functions" : "function_call", "legacy function calling (give tools)");
    }
    for (const char* name : {"audio", "prediction", "web_search_options"}) {
      if (given(name)) unsupported(name, name);
    }
    if (given("modalities") && body["modalities"] != json::array({"text"})) {
      unsupported("modalities", "an output other than text");
    }
    if (given("reasoning_effort") && body["reasoning_effort"] != "none") unsupported("reasoning_effort", "reasoning");
    if (given("verbosity") && body["verbosity"] != "medium") unsupported("verbosity", "a verbosity other than medium");
    // Hints to OpenAI's own caches and abuse checks: nothing to do here, so any string is taken.
    for (const char* name : {"prompt_cache_key", "prompt_cache_retention", "safety_identifier"}) {
      if (given(name)) need_string(body[name], name);
    }
    if (given("prompt_cache_options") && !body["prompt_cache_options"].is_object()) {
      invalid_field("prompt_cache_options",
                    std::string("expected an object, got ") + json_type_name(body["prompt_cache_options"]));
    }
  } else {
    if (given("echo") && body["echo"] != false) unsupported("echo", "echoing the prompt");
    if (given("best_of") && body["best_of"] != 1) unsupported("best_of", "best_of other than 1");
    if (given("suffix") && body["suffix"] != "") unsupported("suffix", "a suffix (insertion)");
  }
  if (given("service_tier") && body["service_tier"] != "auto" && body["service_tier"] != "default") {
    unsupported("service_tier", "a service tier other than auto or default");
  }
}

// Every top-level field each endpoint reads, refuses by value (refuse_unserved, parse_logprobs) or takes as a
// no-op; any other is refused by name (refuse_unknown_fields), as OpenAI refuses it.
constexpr std::string_view kChatFields =
    "model messages max_tokens max_completion_tokens temperature top_p seed stop n stream stream_options user tools "
    "tool_choice parallel_tool_calls response_format presence_penalty frequency_penalty logit_bias logprobs "
    "top_logprobs store metadata service_tier modalities reasoning_effort verbosity prompt_cache_key "
    "prompt_cache_retention prompt_cache_options safety_identifier functions function_call audio prediction "
    "web_search_options top_k min_p top_a typical_p repetition_penalty mirostat";
constexpr std::string_view kCompletionFields =
    "model prompt max_tokens max_completion_tokens temperature top_p seed stop n stream stream_options user "
    "presence_penalty frequency_penalty logit_bias logprobs top_logprobs echo best_of suffix service_tier top_k "
    "min_p top_a typical_p repetition_penalty mirostat";

void refuse_unknown(const json& body, bool chat) {
  if (chat) {
    refuse_unknown_fields(body, kChatFields, "/v1/chat/completions");
    return;
  }
  // Chat's own fields, sent here, would be dropped: name the endpoint that serves them.
  for (const char* name : {"messages", "tools", "tool_choice", "parallel_tool_calls", "response_format", "store",
                           "metadata", "modalities", "reasoning_effort", "verbosity"}) {
    if (body.contains(name)) {
      throw Invalid{api_error(400,
                              std::string(name) +
                                  ": a /v1/chat/completions field, not one of /v1/completions (send the request "
                                  "there to have it served)",
                              "invalid_request_error", "unknown_parameter", name)};
    }
  }
  refuse_unknown_fields(body, kCompletionFields, "/v1/completions");
}

// store and metadata (the metadata is checked whether or not the completion is stored, as OpenAI does).
void parse_store(const json& body, ChatRequest& r) {
  if (body.contains("store") && !body["store"].is_null()) r.store = need_bool(body["store"], "store");
  if (body.contains("metadata") && !body["metadata"].is_null()) {
    check_metadata(body["metadata"]);
    for (const auto& [key, value] : body["metadata"].items()) r.metadata[key] = value.get<std::string>();
  }
  if (r.store) r.messages_json = body["messages"].dump();
}

ChatRequest chat_request(std::string_view text, const ServeLimits& limits) {
  const json body = parse_body(text, limits);
  refuse_unserved(body, true);
  refuse_unknown(body, true);
  ChatRequest r;
  r.model = parse_model(body);
  const auto messages = body.find("messages");
  if (messages == body.end()) invalid_field("messages", "missing");
  if (!messages->is_array())
    invalid_field("messages", std::string("expected an array, got ") + json_type_name(*messages));
  if (messages->empty()) invalid_field("messages", "must hold at least one message");
  if (messages->size() > limits.max_messages) {
    invalid_field("messages", "at most " + std::to_string(limits.max_messages) + " messages are accepted");
  }
  for (std::size_t i = 0; i < messages->size(); ++i) {
    r.messages.push_back(parse_message((*messages)[i], "messages[" + std::to_string(i) + "]"));
  }
  r.sampling = parse_sampling(body, limits);
  parse_processors(body, limits, r.sampling);
  parse_logprobs(body, r.sampling, false);
  r.user = parse_user(body);
  if (body.contains("tools") && !body["tools"].is_null()) {
    r.tool_names = parse_tools(body["tools"]);
    if (!body["tools"].empty()) r.tools_json = ordered_field(text, "tools");
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    r.tool_choice = parse_tool_choice(body["tool_choice"], r.tool_names);
  }
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    r.parallel_tool_calls = need_bool(body["parallel_tool_calls"], "parallel_tool_calls");
    // Without tools it would change nothing: OpenAI refuses it there, and so does this server.
    if (r.tool_names.empty()) invalid_field("parallel_tool_calls", "only allowed when tools are specified");
  }
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    r.response_format = parse_response_format(body["response_format"]);
    if (r.response_format.type == "json_schema") {
      r.response_format.schema_json = ordered_field(text, "response_format", "/json_schema/schema");
    }
  }
  parse_store(body, r);
  return r;
}

CompletionRequest completion_request(std::string_view text, const ServeLimits& limits) {
  const json body = parse_body(text, limits);
  refuse_unserved(body, false);
  refuse_unknown(body, false);
  CompletionRequest r;
  r.model = parse_model(body);
  const auto prompt = body.find("prompt");
  if (prompt == body.end()) invalid_field("prompt", "missing");
  if (prompt->is_array()) {
    if (!prompt->empty() && (*prompt)[0].is_number_integer()) {
      unsupported("prompt", "a prompt of token ids (give the prompt as text)");
    }
    if (prompt->size() != 1)
      invalid_field("prompt", "an array prompt must hold exactly one string (batches are not served)");
    r.prompt = need_string((*prompt)[0], "prompt[0]");
  } else {
    r.prompt = need_string(*prompt, "prompt");
  }
  r.sampling = parse_sampling(body, limits);
  if (r.sampling.n > 1)
    invalid_field("n", "n > 1 is served on /v1/chat/completions only, got " + std::to_string(r.sampling.n));
  parse_processors(body, limits, r.sampling);
  parse_logprobs(body, r.sampling, true);
  r.user = parse_user(body);
  return r;
}

template <typename T, typename F>
Parsed<T> guarded(F&& parse) {
  Parsed<T> out;
  try {
    out.value = parse();
  } catch (const Invalid& e) {
    out.error = e.error;
  } catch (const std::exception& e) {  // nlohmann type errors the checks above did not foresee
    out.error = api_error(400, std::string("malformed request: ") + e.what());
  }
  return out;
}

}  // namespace

ApiError api_error(int status, std::string message, std::string type, std::string code, std::string param) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

std::string error_body(const ApiError& error) {
  json e = {{"message", error.message},
            {"type", error.type},
            {"param", error.param.empty() ? json(nullptr) : json(error.param)},
            {"code", error.code.empty() ? json(nullptr) : json(error.code)}};
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiError internal_error(const std::string& what_failed, const std::exception_ptr& ep) {
  std::string message = what_failed + " failed: internal error";
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& x) {
    message += std::string(": ") + x.what();
  } catch (...) {  // not a std::exception: nothing more to say
  }
  return api_error(500, message, "server_error", "internal_error");
}

Parsed<ChatRequest> parse_chat_request(std::string_view body, const ServeLimits& limits) {
  return guarded<ChatRequest>([&] { return chat_request(body, limits); });
}

Parsed<CompletionRequest> parse_completion_request(std::string_view body, const ServeLimits& limits) {
  return guarded<CompletionRequest>([&] { return completion_request(body, limits); });
}

}  // namespace orbit::serve
