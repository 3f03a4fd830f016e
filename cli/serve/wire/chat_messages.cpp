#include "serve/wire/chat_parse.h"

#include <set>

#include "serve/wire/call_arguments.h"
#include "serve/wire/request_invalid.h"

namespace orbit::serve::chat_wire {

using nlohmann::json;

namespace {

// What @openai/agents puts in an assistant's part besides the part's own keys. On Chat Completions it keeps the
// answer's message, less its content (a refusal part: less its refusal), as the part's providerData and sends
// that back inside the part on the next turn: {"type": "text", "text": ..., "refusal": null, "role": "assistant"}.
// These are the message's own fields, which the message itself carries (role, tool_calls, reasoning_content) or
// which say nothing (refusal or content null, audio and function_call null, annotations: what the text cites), so
// they are taken and unused, each checked as that: role "assistant", annotations and tool_calls arrays,
// reasoning_content a string or null, the others null; anything else stays refused by name.
constexpr const char* kEchoedMessageFields = "role annotations tool_calls reasoning_content audio function_call";

void check_echoed_message_fields(const json& part, bool refusal, const std::string& p) {
  for (auto it = part.begin(); it != part.end(); ++it) {
    const std::string& key = it.key();
    const json& value = it.value();
    const std::string at = p + "." + key;
    if (key == "role") {
      if (value != "assistant") invalid_field(at, "an assistant's part can only echo role 'assistant'");
    } else if (key == "annotations" || key == "tool_calls") {
      if (!value.is_array()) wrong_type(at, "an array", value);
    } else if (key == "reasoning_content") {
      if (!value.is_null() && !value.is_string()) wrong_type(at, "a string or null", value);
    } else if (key == "audio" || key == "function_call" || key == (refusal ? "content" : "refusal")) {
      if (!value.is_null()) invalid_field(at, "only null is accepted in a part (send it on the message)");
    }
  }
}

// The text of a message's content: a string or text parts; an assistant's may also be null (a message of tool
// calls) and hold OpenAI's refusal parts ({"type": "refusal", "refusal": text}), which are what it said, so they
// are read as its text. A null content on another role is refused, as OpenAI refuses it: the message says nothing.
std::string content_text(const json& v, const std::string& param, bool assistant) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null() && assistant) return "";
  if (!v.is_array()) {
    wrong_type(param, assistant ? "a string, null or an array of parts" : "a string or an array of parts", v);
  }
  std::string text;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const json& part = v[i];
    if (!part.is_object()) wrong_type(p, "an object", part);
    const auto type = part.find("type");
    if (type == part.end()) missing_field(p + ".type");
    const std::string kind = need_string(*type, p + ".type");
    const bool refusal = assistant && kind == "refusal";
    if (kind != "text" && !refusal) {
      // An image, audio or file part: OpenAI's, not served here.
      unsupported_value(p + ".type", "only text parts are accepted" +
                                         std::string(assistant ? " (and refusal parts)" : "") + " (got '" + kind +
                                         "')");
    }
    // A part's keys: OpenAI's, and prompt_cache_breakpoint, a cache hint @openai/agents puts on text parts
    // (taken and unused, as the body's prompt_cache_key is); in an assistant's, the message's fields
    // @openai/agents echoes (kEchoedMessageFields). Another key is refused by name.
    std::string known = refusal ? "type refusal" : "type text prompt_cache_breakpoint";
    if (assistant) known += std::string(" ") + kEchoedMessageFields + (refusal ? " content" : " refusal");
    refuse_unknown_fields(part, known, refusal ? "a refusal part" : "a text part", p + ".");
    if (assistant) check_echoed_message_fields(part, refusal, p);
    if (const auto hint = part.find("prompt_cache_breakpoint"); hint != part.end() && !hint->is_object()) {
      wrong_type(p + ".prompt_cache_breakpoint", "an object", *hint);
    }
    const char* key = refusal ? "refusal" : "text";
    const auto t = part.find(key);
    if (t == part.end()) missing_field(p + "." + key);
    text += need_string(*t, p + "." + key);
  }
  return text;
}

// A tool call's keys: OpenAI's (id, type, function {name, arguments}) and what clients echo back from an
// answer: index (a streamed call's place, kept by @langchain/openai's merged chunks and sent back with a call it
// could not parse) and function.parsed_arguments (the openai SDK's parse helpers and runTools add it). Both are
// the client's own copies of what it was answered, so they are taken and unused; another key is refused by name.
ChatToolCall parse_tool_call(const json& v, const std::string& param) {
  if (!v.is_object()) wrong_type(param, "an object", v);
  refuse_unknown_fields(v, "id type function index", "a tool call", param + ".");
  if (v.contains("index") && !v["index"].is_null()) need_int(v["index"], param + ".index");
  ChatToolCall call;
  // Its id is what the tool message with its result names (tool_call_id), and templates render both.
  const auto id = v.find("id");
  if (id == v.end() || id->is_null()) missing_field(param + ".id", "(the tool message of its result names it)");
  call.id = need_string(*id, param + ".id");
  if (call.id.empty()) empty_value(param + ".id", LengthKind::string, "empty");
  if (v.contains("type") && need_string(v["type"], param + ".type") != "function") {
    unsupported_value(param + ".type", "only 'function' tool calls are accepted");
  }
  const auto fn = v.find("function");
  require_object(v, fn, param + ".function");
  refuse_unknown_fields(*fn, "name arguments parsed_arguments", "a tool call's function", param + ".function.");
  const auto name = fn->find("name");
  if (name == fn->end()) missing_field(param + ".function.name");
  call.name = need_string(*name, param + ".function.name");
  // Only a tool's name can be called, so a call in the history is held to the tools' rule; but "" is taken,
  // as this server answers a forced call max_tokens cut before its name began (name and arguments "").
  if (!call.name.empty()) check_name(call.name, "a tool name", param + ".function.name");
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
    unsupported_value(param + "." + name,
                      std::string("not accepted: the chat template would not see it (") +
                          (name[0] == 'f' ? "send the call as tool_calls" : "leave it out or null") + ")");
  }
}

// An assistant's reasoning, the thinking an earlier turn wrote before its answer, given to the template as
// message.reasoning_content (which reasoning models' templates render): reasoning_content as
// @ai-sdk/openai-compatible and other OpenAI-compatible clients send it, or reasoning, the string @openai/agents
// sends (a reasoning item's text); both given, they must agree. Null or absent: none. A part's reasoning_content
// (@openai/agents' copy of the answer's, kEchoedMessageFields, checked a string or null by content_text) is the
// same turn's reasoning: on Chat Completions that copy is how the Agents SDK sends it back, so it is read as
// the message's, and must agree with the message's own when both are given.
std::optional<std::string> parse_reasoning(const json& v, const std::string& param) {
  std::optional<std::string> out;
  const auto take = [&](const json& value, const std::string& at, const char* differs) {
    if (value.is_null()) return;
    std::string text = need_string(value, at);
    if (out && *out != text) invalid_field(at, differs);
    out = std::move(text);
  };
  for (const char* name : {"reasoning_content", "reasoning"}) {
    if (const auto it = v.find(name); it != v.end()) {
      take(*it, param + "." + name, "differs from reasoning_content: give one of them (or the same text in both)");
    }
  }
  const auto content = v.find("content");
  if (content == v.end() || !content->is_array()) return out;
  for (std::size_t i = 0; i < content->size(); ++i) {
    const json& part = (*content)[i];
    if (const auto it = part.find("reasoning_content"); it != part.end()) {
      take(*it, param + ".content[" + std::to_string(i) + "].reasoning_content",
           "differs from the message's reasoning: give one of them (or the same text in each)");
    }
  }
  return out;
}

// A tool message's tool_call_id: required and not empty, as OpenAI has it (the template renders it beside the
// result, and it is all that ties the result to its call). Which call it names is not checked: an agent
// that trims its context drops old call messages and keeps their results (serve_api.h).
std::string parse_tool_call_id(const json& v, const std::string& param) {
  const auto id = v.find("tool_call_id");
  if (id == v.end() || id->is_null()) {
    missing_field(param + ".tool_call_id", "(a tool message answers the assistant's call of that id)");
  }
  std::string out = need_string(*id, param + ".tool_call_id");
  if (out.empty()) empty_value(param + ".tool_call_id", LengthKind::string, "empty");
  return out;
}

}  // namespace

ChatMessage parse_message(const json& v, const std::string& param) {
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  if (!v.is_object()) wrong_type(param, "an object", v);
  ChatMessage m;
  const auto role = v.find("role");
  if (role == v.end()) missing_field(param + ".role");
  m.role = need_string(*role, param + ".role");
  if (!kRoles.count(m.role)) {
    invalid_value(param + ".role",
                  "unknown role '" + m.role + "' (expected system, developer, user, assistant or tool)");
  }
  refuse_unknown_message_fields(v, m.role, param);
  if (m.role == "developer") m.role = "system";  // OpenAI's newer name for the system prompt
  const auto content = v.find("content");
  if (content == v.end() && m.role != "assistant") missing_field(param + ".content");
  // An assistant's null or left-out content is "" to the template, not None (ContentForm::kText): OpenAI's
  // clients send null on every turn of calls alone, and templates such as Qwen3's cannot take None (they add
  // the content to a string); llama.cpp's server likewise gives "" to a template that renders tool calls.
  if (content != v.end()) m.content = content_text(*content, param + ".content", m.role == "assistant");
  if (v.contains("refusal") && !v["refusal"].is_null()) m.content += need_string(v["refusal"], param + ".refusal");
  if (m.role == "assistant") m.reasoning_content = parse_reasoning(v, param);
  if (v.contains("name") && !v["name"].is_null()) {
    m.name = need_string(v["name"], param + ".name");
    check_name(*m.name, "a message name", param + ".name");
  }
  if (m.role == "tool") m.tool_call_id = parse_tool_call_id(v, param);
  if (v.contains("tool_calls") && !v["tool_calls"].is_null()) {
    const json& calls = v["tool_calls"];
    if (!calls.is_array()) wrong_type(param + ".tool_calls", "an array", calls);
    for (std::size_t i = 0; i < calls.size(); ++i) {
      m.tool_calls.push_back(parse_tool_call(calls[i], param + ".tool_calls[" + std::to_string(i) + "]"));
    }
  }
  return m;
}

}  // namespace orbit::serve::chat_wire
