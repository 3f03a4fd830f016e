#include "serve/responses/responses_api.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"
#include "serve/responses/responses_fields.h"
#include "serve/responses/responses_refusals.h"
#include "serve/wire/call_arguments.h"
#include "serve/wire/lone_surrogates.h"
#include "serve/wire/repeated_key.h"
#include "serve/wire/request_invalid.h"

namespace orbit::serve {

using nlohmann::json;

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace responses_parser {

using Invalid = RequestInvalid;

// A content part's keys, per type: OpenAI's, and what clients send back from an answer's output_text parts
// (annotations and logprobs as answered, and parsed, the openai SDK's parse of the text: taken and unused), and
// prompt_cache_breakpoint, a cache hint @openai/agents puts on input_text parts (taken and unused, as the body's
// prompt_cache_key is). Another key is refused by name.
void refuse_unknown_part_fields(const ojson& part, const std::string& type, const std::string& p) {
  const bool output = type == "output_text";
  refuse_unknown_fields(part,
                        type == "refusal" ? "type refusal"
                        : output          ? "type text annotations logprobs parsed"
                                          : "type text prompt_cache_breakpoint",
                        (type == "refusal" ? "a " : "an ") + type + " part", p + ".");
  const ojson* hint = field(part, "prompt_cache_breakpoint");
  if (hint != nullptr) need_object(*hint, p + ".prompt_cache_breakpoint");
}

// Text content: a string, or an array of parts of the given types, each {type, text}.
std::string text_content(const ojson& v, const std::string& param, const std::vector<std::string>& types) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) wrong_type(param, "a string or an array of parts", v);
  std::string text;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const ojson& part = need_object(v[i], p);
    const ojson* type = field(part, "type");
    if (type == nullptr) missing_field(p + ".type");
    const std::string t = need_string(*type, p + ".type");
    if (std::find(types.begin(), types.end(), t) == types.end()) {
      std::string accepted;
      for (const std::string& a : types) accepted += (accepted.empty() ? "" : " and ") + a;
      unsupported_value(p + ".type", "only " + accepted + " parts are accepted (got '" + t + "')");
    }
    refuse_unknown_part_fields(part, t, p);
    const char* key = t == "refusal" ? "refusal" : "text";  // an assistant's refusal: read as its text, as chat's
    const ojson* part_text = field(part, key);
    if (part_text == nullptr) missing_field(p + "." + key);
    text += need_string(*part_text, p + "." + key);
  }
  return text;
}

ojson message_item(const ojson& item, const std::string& p) {
  const ojson* role = field(item, "role");
  if (role == nullptr) missing_field(p + ".role");
  const std::string r = need_string(*role, p + ".role");
  if (r != "user" && r != "system" && r != "developer" && r != "assistant") {
    invalid_value(p + ".role", "unknown role '" + r + "' (expected user, system, developer or assistant)");
  }
  const ojson* content = field(item, "content");
  if (content == nullptr) missing_field(p + ".content");
  const std::vector<std::string> parts = r == "assistant"
                                             ? std::vector<std::string>{"input_text", "output_text", "refusal"}
                                             : std::vector<std::string>{"input_text", "output_text"};
  return {{"role", r}, {"content", text_content(*content, p + ".content", parts)}};
}

// A function_call item as a chat tool call. Its arguments are text: a JSON object, or what a call cut by
// max_output_tokens had written (an "incomplete" item, sent back as it was answered).
ojson function_call_item(const ojson& item, const std::string& p) {
  const std::string call_id = required_string(item, "call_id", p);
  const std::string name = required_string(item, "name", p);
  check_name(name, "a tool name", p + ".name");
  const ojson* arguments = field(item, "arguments");
  if (arguments == nullptr) missing_field(p + ".arguments");
  const std::string text = need_string(*arguments, p + ".arguments");
  check_call_arguments(text, p + ".arguments");
  return {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", text}}}};
}

ojson function_call_output_item(const ojson& item, const std::string& p) {
  const std::string call_id = required_string(item, "call_id", p);
  const ojson* output = field(item, "output");
  if (output == nullptr) missing_field(p + ".output");
  return {
      {"role", "tool"}, {"tool_call_id", call_id}, {"content", text_content(*output, p + ".output", {"input_text"})}};
}

// An input item's keys, per type: those OpenAI's Responses API documents (and @openai/agents sends back from
// this server's output items); id, status, an assistant message's phase and a function_call's parsed_arguments
// (the openai SDK's parse of the arguments, on the output items of responses.parse and responses.stream) are
// read as no-ops. Any other is
// refused by name (unknown_parameter, e.g. "input[2].cal_id: ... did you mean 'call_id'?"). An unsupported
// type is left to add_input, which names the type.
void refuse_unknown_item_fields(const ojson& item, const std::string& type, const std::string& p) {
  const char* known = type == "message"                ? "type id role content status phase"
                      : type == "function_call"        ? "type id call_id name arguments status parsed_arguments"
                      : type == "function_call_output" ? "type id call_id output status"
                      : type == "reasoning"            ? "type id summary content encrypted_content status"
                                                       : nullptr;
  if (known != nullptr) refuse_unknown_fields(item, known, "a " + type + " item", p + ".");
}

// The texts of a reasoning item's parts under `key` (content: reasoning_text parts; summary: summary_text
// parts), joined by blank lines; "" where it has none.
std::string reasoning_texts(const ojson& item, const char* key, const char* type, const std::string& p) {
  const ojson* parts = field(item, key);
  if (parts == nullptr) return "";
  const std::string at = p + "." + key;
  if (!parts->is_array()) wrong_type(at, "an array", *parts);
  std::string text;
  for (std::size_t j = 0; j < parts->size(); ++j) {
    const std::string pj = at + "[" + std::to_string(j) + "]";
    const ojson& part = need_object((*parts)[j], pj);
    refuse_unknown_fields(part, "type text", std::string("a ") + type + " part", pj + ".");
    if (required_string(part, "type", pj) != type) invalid_field(pj + ".type", std::string("expected '") + type + "'");
    const ojson* t = field(part, "text");
    if (t == nullptr) missing_field(pj + ".text");
    text += (text.empty() ? "" : "\n\n") + need_string(*t, pj + ".text");
  }
  return text;
}

// A reasoning item's text, which becomes the reasoning_content of the assistant turn after it: its content
// (the reasoning as written) where it has one, else its summary. An item with neither and nothing else holds no
// reasoning at all (OpenAI returns {"type": "reasoning", "summary": []} where it summarized nothing, and clients
// send it back): nullopt, the item taken as no reasoning. One with only encrypted_content, which this server
// cannot read, is refused: the template could not be given its reasoning.
std::optional<std::string> reasoning_item(const ojson& item, const std::string& p) {
  const std::string content = reasoning_texts(item, "content", "reasoning_text", p);
  const std::string summary = reasoning_texts(item, "summary", "summary_text", p);
  const ojson* encrypted = field(item, "encrypted_content");
  if (encrypted != nullptr && !encrypted->is_null()) need_string(*encrypted, p + ".encrypted_content");
  if (!content.empty()) return content;
  if (!summary.empty()) return summary;
  if (encrypted == nullptr || encrypted->is_null()) return std::nullopt;
  invalid_field(p + ".encrypted_content",
                "a reasoning item is read by its text (content or summary), and this one has none "
                "(encrypted_content cannot be read here): leave it out");
}

// `input` read item by item into chat messages (see the header for the mapping). A reasoning item's text waits
// for the assistant turn that follows it: the next assistant message item, or a function_call, which then
// starts an assistant message of its own (the reasoning led to it, not to the message before).
// Each message's origin goes to `origins`, as it is read.
class InputReader {
 public:
  InputReader(ojson& messages, std::vector<MessageOrigin>& origins, std::vector<CallItem>& call_items)
      : messages_(messages), origins_(origins), call_items_(call_items) {}

  void add(const ojson& item, const std::string& type, std::size_t i, const std::string& p) {
    if (type == "reasoning") {
      const std::optional<std::string> text = reasoning_item(item, p);
      if (!text) return;  // no reasoning in it
      reasoning_ = reasoning_ ? *reasoning_ + "\n\n" + *text : *text;
      reasoning_at_ = i;
    } else if (type == "message") {
      messages_.push_back(message_item(item, p));
      origins_.push_back({MessageOrigin::From::message, i, std::nullopt, {}});
      if (reasoning_ && messages_.back()["role"] == "assistant") take_reasoning();
    } else if (type == "function_call") {
      ojson call = function_call_item(item, p);
      if (reasoning_ || messages_.empty() || messages_.back()["role"] != "assistant") {
        messages_.push_back({{"role", "assistant"}, {"content", ""}});
        origins_.push_back({MessageOrigin::From::calls, i, std::nullopt, {}});
        if (reasoning_) take_reasoning();
      }
      call_items_.push_back({i, call["id"].get<std::string>(), false});
      messages_.back()["tool_calls"].push_back(std::move(call));
      origins_.back().calls.push_back(i);
    } else if (type == "function_call_output") {
      messages_.push_back(function_call_output_item(item, p));
      origins_.push_back({MessageOrigin::From::output, i, std::nullopt, {}});
      call_items_.push_back({i, messages_.back()["tool_call_id"].get<std::string>(), true});
    } else {
      unsupported_value(p + ".type", "'" + type +
                                         "' items are not supported (message, function_call, function_call_output "
                                         "and reasoning are)");
    }
    if (reasoning_ && type != "reasoning") refuse_stray_reasoning();
  }

  void finish() const {
    if (reasoning_) refuse_stray_reasoning();
  }

 private:
  void take_reasoning() {
    messages_.back()["reasoning_content"] = *reasoning_;
    origins_.back().reasoning = reasoning_at_;
    reasoning_.reset();
  }

  [[noreturn]] void refuse_stray_reasoning() const {
    invalid_field("input[" + std::to_string(reasoning_at_) + "]",
                  "a reasoning item must come right before the assistant message or function_call it led to (its "
                  "text is given to the template as that turn's reasoning_content)");
  }

  ojson& messages_;
  std::vector<MessageOrigin>& origins_;  // origins_[k]: where the k-th message read here came from
  std::vector<CallItem>& call_items_;    // the function_call and function_call_output items, in order
  std::optional<std::string> reasoning_;
  std::size_t reasoning_at_ = 0;
};

// `input` as chat messages, appended to `messages` (see the header for the mapping), and their origins to
// r.origins; the function_call and function_call_output items to r.call_items.
void add_input(const ojson& input, const ServeLimits& limits, ojson& messages, ResponsesRequest& r) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    r.origins.push_back({MessageOrigin::From::text, 0, std::nullopt, {}});
    return;
  }
  if (!input.is_array()) wrong_type("input", "a string or an array of items", input);
  if (input.empty()) empty_value("input", LengthKind::array, "must hold at least one item");
  if (input.size() > limits.max_messages) {
    too_long("input", LengthKind::array, "at most " + std::to_string(limits.max_messages) + " items are accepted");
  }
  InputReader reader(messages, r.origins, r.call_items);
  for (std::size_t i = 0; i < input.size(); ++i) {
    const std::string p = "input[" + std::to_string(i) + "]";
    const ojson& item = need_object(input[i], p);
    std::string type = "message";  // a bare {role, content} is a message
    if (const ojson* t = field(item, "type")) {
      type = need_string(*t, p + ".type");
    } else if (field(item, "role") == nullptr) {
      missing_field(p + ".type");
    }
    refuse_unknown_item_fields(item, type, p);
    reader.add(item, type, i, p);
  }
  reader.finish();
}

// tools in the chat form; each must be a function with a name no other tool has.
ojson chat_tools(const ojson& tools) {
  if (!tools.is_array()) wrong_type("tools", "an array", tools);
  ojson out = ojson::array();
  std::unordered_map<std::string, std::size_t> index;  // each name's tool: many tools are checked in linear time
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const ojson& t = need_object(tools[i], p);
    const ojson* type = field(t, "type");
    if (type == nullptr) missing_field(p + ".type");
    const std::string kind = need_string(*type, p + ".type");
    if (kind != "function") unsupported_value(p + ".type", "only 'function' tools are accepted (got '" + kind + "')");
    // Another key (defer_loading, output_schema, a misspelt parameters) asks for what would not happen.
    refuse_unknown_fields(t, "type name description parameters strict", p, p + ".");
    const std::string name = required_string(t, "name", p);
    if (const auto [first, added] = index.emplace(name, i); !added) {
      invalid_field(p + ".name", "'" + name + "' is also the name of tools[" + std::to_string(first->second) +
                                     "] (tool names must be unique)");
    }
    ojson fn = {{"name", name}};
    if (const ojson* d = field(t, "description")) fn["description"] = need_string(*d, p + ".description");
    if (const ojson* params = field(t, "parameters")) fn["parameters"] = need_object(*params, p + ".parameters");
    // Carried into the chat tool: under tool_choice auto a strict tool whose grammar cannot be had is refused
    // (naming tools[i].strict), as on chat, rather than decoded free behind an echo that says strict.
    if (const ojson* strict = field(t, "strict")) {
      if (!strict->is_boolean()) wrong_type(p + ".strict", "a boolean", *strict);
      fn["strict"] = *strict;
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice {"type": "allowed_tools", "mode", "tools": [{"type": "function", "name"}, ...]} as chat's
// {"type": "allowed_tools", "allowed_tools": {"mode", "tools": [{"type": "function", "function": {"name"}}]}}.
// @langchain/openai sends chat's shape to this API too; it is read the same (each param named as sent). The
// mode and names are checked here, so that a refusal names this request's field.
ojson chat_allowed_tools(const ojson& choice, const ojson& tools) {
  const ojson* nested = field(choice, "allowed_tools");
  const std::string at = nested != nullptr ? "tool_choice.allowed_tools" : "tool_choice";
  refuse_unknown_fields(choice, nested != nullptr ? "type allowed_tools" : "type mode tools", "tool_choice",
                        "tool_choice.");
  const ojson& body = nested != nullptr ? need_object(*nested, at) : choice;
  if (nested != nullptr) refuse_unknown_fields(body, "mode tools", at, at + ".");
  const ojson* mode = field(body, "mode");
  if (mode == nullptr) missing_field(at + ".mode");
  const std::string m = need_string(*mode, at + ".mode");
  if (m != "auto" && m != "required") invalid_value(at + ".mode", "'" + m + "' is not one of auto, required");
  const ojson* list = field(body, "tools");
  if (list == nullptr) missing_field(at + ".tools");
  if (!list->is_array()) wrong_type(at + ".tools", "an array", *list);
  if (list->empty()) empty_value(at + ".tools", LengthKind::array, "empty (allow one of the request's tools at least)");
  std::unordered_set<std::string> known, listed;
  for (const ojson& tool : tools) known.insert(tool["function"]["name"].get<std::string>());
  ojson allowed = ojson::array();
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string p = at + ".tools[" + std::to_string(i) + "]";
    const ojson& t = need_object((*list)[i], p);
    const ojson* fn = field(t, "function");  // chat's shape
    refuse_unknown_fields(t, fn != nullptr ? "type function" : "type name", p, p + ".");
    const std::string kind = required_string(t, "type", p);
    if (kind != "function") unsupported_value(p + ".type", "only 'function' tools are accepted (got '" + kind + "')");
    if (fn != nullptr)
      refuse_unknown_fields(need_object(*fn, p + ".function"), "name", p + ".function", p + ".function.");
    const std::string where = fn != nullptr ? p + ".function" : p;
    const std::string name = required_string(fn != nullptr ? *fn : t, "name", where);
    if (known.count(name) == 0) invalid_value(where + ".name", "'" + name + "' is not one of the request's tools");
    if (!listed.insert(name).second) invalid_value(where + ".name", "'" + name + "' is listed twice");
    allowed.push_back({{"type", "function"}, {"function", {{"name", name}}}});
  }
  return {{"type", "allowed_tools"}, {"allowed_tools", {{"mode", m}, {"tools", std::move(allowed)}}}};
}

ojson chat_tool_choice(const ojson& v, const ojson& tools) {
  if (v.is_string()) return v;  // none, auto or required: chat checks which
  const ojson& choice = need_object(v, "tool_choice");
  const ojson* type = field(choice, "type");
  if (type == nullptr) missing_field("tool_choice.type");
  const std::string kind = need_string(*type, "tool_choice.type");
  if (kind == "allowed_tools") return chat_allowed_tools(choice, tools);
  if (kind != "function") {
    unsupported_value("tool_choice.type", "only 'function' and 'allowed_tools' are accepted (got '" + kind + "')");
  }
  const std::string name = required_string(choice, "name", "tool_choice");
  const bool known =
      std::any_of(tools.begin(), tools.end(), [&](const ojson& t) { return t["function"]["name"] == name; });
  if (!known) invalid_value("tool_choice.name", "'" + name + "' is not one of the request's tools");
  return {{"type", "function"}, {"function", {{"name", name}}}};
}

// text.format as chat's response_format; text.verbosity other than "medium" is refused.
ojson chat_response_format(const ojson& text) {
  need_object(text, "text");
  refuse_unknown_fields(text, "format verbosity", "text", "text.");
  if (const ojson* verbosity = field(text, "verbosity")) {
    if (need_string(*verbosity, "text.verbosity") != "medium") unsupported("text.verbosity", "a verbosity");
  }
  const ojson* format = field(text, "format");
  if (format == nullptr) return {{"type", "text"}};
  need_object(*format, "text.format");
  refuse_unknown_fields(*format, "type name schema strict description", "text.format", "text.format.");
  const ojson* type = field(*format, "type");
  if (type == nullptr) missing_field("text.format.type");
  const std::string kind = need_string(*type, "text.format.type");
  if (kind == "text" || kind == "json_object") {
    // A schema (or its name, strict, description) beside another type would be dropped unenforced: the
    // format is one of three shapes, as in OpenAI's API, and only json_schema's has them (chat refuses the same).
    refuse_unknown_fields(*format, "type", "text.format of type " + kind, "text.format.");
    return {{"type", kind}};
  }
  if (kind != "json_schema")
    invalid_value("text.format.type", "'" + kind + "' is not one of text, json_object, json_schema");
  const ojson* schema = field(*format, "schema");
  if (schema == nullptr) missing_field("text.format.schema");
  if (!schema->is_object() && !schema->is_boolean())
    wrong_type("text.format.schema", "an object or a boolean", *schema);
  ojson js = {{"schema", *schema}};
  // Checked here, not left to chat's parser, so that errors name text.format's fields (as chat does its own).
  const std::string name = required_string(*format, "name", "text.format");
  check_name(name, "a response format name", "text.format.name");
  js["name"] = name;
  // A description (a string) is taken and changes nothing: the schema is not shown to the model either, the
  // answer is held to it while it decodes (as chat's response_format).
  if (const ojson* d = field(*format, "description"); d != nullptr && !d->is_string()) {
    wrong_type("text.format.description", "a string", *d);
  }
  if (const ojson* strict = field(*format, "strict")) {
    if (!strict->is_boolean()) wrong_type("text.format.strict", "a boolean", *strict);
    js["strict"] = *strict;
  }
  return {{"type", "json_schema"}, {"json_schema", std::move(js)}};
}

json metadata(const ojson& body) {
  const ojson* v = field(body, "metadata");
  if (v == nullptr) return json::object();
  check_metadata(*v);
  return json(*v);
}

// The sampling fields, copied to the chat body under chat's names (chat checks their ranges).
void copy_sampling(const ojson& body, ojson& chat) {
  if (const ojson* v = field(body, "max_output_tokens")) {
    if (!v->is_number_integer() && !v->is_number_unsigned()) {
      wrong_type("max_output_tokens", "an integer", *v);
    }
    if (v->is_number_integer() && v->get<int64_t>() < 1)
      below_minimum("max_output_tokens", NumberKind::integer, "must be >= 1, got " + v->dump());
    chat["max_tokens"] = *v;
  }
  for (const char* name : {"temperature", "top_p", "seed", "stream", "user", "presence_penalty", "frequency_penalty",
                           "logit_bias", "top_logprobs"}) {
    if (const ojson* v = field(body, name)) chat[name] = *v;
  }
  if (const ojson* v = field(body, "stream_options")) {
    if (const ojson* o = field(*v, "include_obfuscation")) chat["stream_options"] = {{"include_obfuscation", *o}};
  }
  // Chat refuses parallel_tool_calls without tools, as OpenAI's chat does; a response has the setting whether or
  // not it has tools (it is repeated in the response), so without tools it is checked here and only repeated.
  if (const ojson* v = field(body, "parallel_tool_calls")) {
    if (chat.contains("tools")) {
      chat["parallel_tool_calls"] = *v;
    } else if (!v->is_boolean()) {
      wrong_type("parallel_tool_calls", "a boolean", *v);
    }
  }
  // Log probabilities: asked for by include "message.output_text.logprobs", or by top_logprobs above 0.
  const ojson* include = field(body, "include");
  const bool included =
      include != nullptr && std::find(include->begin(), include->end(), kIncludeLogprobs) != include->end();
  const ojson* top = field(body, "top_logprobs");
  if (included || (top != nullptr && top->is_number() && top->get<double>() > 0)) chat["logprobs"] = true;
}

// The settings the response repeats, defaults filled in.
json echo_of(const ojson& body, const ojson& chat, const ResponsesRequest& r) {
  const auto or_default = [&](const char* name, json fallback) {
    const ojson* v = field(body, name);
    return v == nullptr ? fallback : json(*v);
  };
  json echo = {{"instructions", or_default("instructions", nullptr)},
               {"tools", or_default("tools", json::array())},
               {"tool_choice", or_default("tool_choice", "auto")},
               {"parallel_tool_calls", or_default("parallel_tool_calls", true)},
               {"temperature", r.chat.sampling.temperature},
               {"top_p", r.chat.sampling.top_p},
               {"max_output_tokens", chat.contains("max_tokens") ? json(chat["max_tokens"]) : json(nullptr)},
               {"store", r.store},
               {"metadata", metadata(body)},
               {"truncation", r.truncate ? "auto" : "disabled"},
               {"top_logprobs", r.chat.sampling.top_logprobs},
               {"text", {{"format", json::object()}}}};
  const ojson* text = field(body, "text");
  const ojson* format = text == nullptr ? nullptr : field(*text, "format");
  echo["text"]["format"] = format == nullptr ? json{{"type", "text"}} : json(*format);
  if (!r.chat.user.empty()) echo["user"] = r.chat.user;
  return echo;
}

ResponsesRequest responses_request(std::string_view raw, const ServeLimits& limits) {
  const std::optional<std::string> repaired = replace_lone_surrogates(raw);  // lone_surrogates.h
  const std::string_view text = repaired ? std::string_view(*repaired) : raw;
  if (text.size() > limits.max_body_bytes) {
    throw Invalid{api_error(413, "request body of " + std::to_string(text.size()) + " bytes is over the limit of " +
                                     std::to_string(limits.max_body_bytes) + " bytes")};
  }
  ojson body;
  try {
    parse_json_input(text.data(), text.data() + text.size(), "the body");  // refuses deep nesting first
    body = ojson::parse(text.begin(), text.end());
  } catch (const Error& e) {
    invalid_json_body(e.what(), text);
  }
  if (!body.is_object()) invalid_body(std::string("the body must be a JSON object, got ") + json_type_name(body), true);
  refuse_repeated_keys(text);
  refuse_unsupported(body);

  ResponsesRequest r;
  if (field(body, "model") == nullptr) missing_field("model");
  ojson chat = {{"model", body["model"]}, {"messages", ojson::array()}};
  if (const ojson* v = field(body, "instructions")) {
    chat["messages"].push_back({{"role", "system"}, {"content", need_string(*v, "instructions")}});
    r.origins.push_back({MessageOrigin::From::instructions, 0, std::nullopt, {}});
    r.has_instructions = true;
  }
  const ojson* input = field(body, "input");
  if (input == nullptr) missing_field("input");
  add_input(*input, limits, chat["messages"], r);
  // An empty array is no tools; anything else is read as tools (`{}` is refused there, not taken for none).
  if (const ojson* v = field(body, "tools"); v != nullptr && !(v->is_array() && v->empty())) {
    chat["tools"] = chat_tools(*v);
  }
  if (const ojson* v = field(body, "tool_choice")) {
    chat["tool_choice"] = chat_tool_choice(*v, chat.contains("tools") ? chat["tools"] : ojson::array());
  }
  if (const ojson* v = field(body, "text")) chat["response_format"] = chat_response_format(*v);
  copy_sampling(body, chat);
  if (const ojson* v = field(body, "previous_response_id")) {
    r.previous_response_id = need_string(*v, "previous_response_id");
    if (r.previous_response_id.empty()) empty_value("previous_response_id", LengthKind::string, "empty");
  }
  if (r.previous_response_id.empty()) {
    if (auto unpaired = call_pairing_error(r.call_items, {})) throw Invalid{*unpaired};
  }
  if (const ojson* v = field(body, "store")) {
    if (!v->is_boolean()) wrong_type("store", "a boolean", *v);
    r.store = v->get<bool>();
  }
  if (const ojson* v = field(body, "truncation"); v != nullptr && v->is_string()) r.truncate = *v == "auto";

  ServeLimits inner = limits;  // the input was checked against the limits above; chat adds what it wrote
  inner.max_body_bytes = std::numeric_limits<std::size_t>::max();
  inner.max_messages = std::numeric_limits<std::size_t>::max();
  Parsed<ChatRequest> parsed = parse_chat_request(chat.dump(), inner);
  if (!parsed.ok()) throw Invalid{responses_error(parsed.error, r.origins)};
  r.chat = std::move(*parsed.value);
  r.echo = echo_of(body, chat, r);
  return r;
}

}  // namespace responses_parser

Parsed<ResponsesRequest> parse_responses_request(std::string_view body, const ServeLimits& limits) {
  Parsed<ResponsesRequest> out;
  try {
    out.value = responses_parser::responses_request(body, limits);
  } catch (const responses_parser::Invalid& e) {
    out.error = e.error;
  } catch (const std::exception& e) {  // nlohmann type errors the checks above did not foresee
    out.error = api_error(400, std::string("malformed request: ") + e.what(), "invalid_request_error", "invalid_value");
  }
  return out;
}

}  // namespace orbit::serve
