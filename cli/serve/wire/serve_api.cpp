#include "serve/wire/serve_api.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_set>

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"
#include "serve/wire/chat_parse.h"
#include "serve/wire/lone_surrogates.h"
#include "serve/wire/repeated_key.h"
#include "serve/wire/request_invalid.h"

namespace orbit::serve {

using nlohmann::json;

namespace {

using Invalid = RequestInvalid;
using chat_wire::need_bool;
using chat_wire::need_string;
using chat_wire::parse_logprobs;
using chat_wire::parse_message;
using chat_wire::parse_processors;
using chat_wire::parse_response_format;
using chat_wire::parse_sampling;
using chat_wire::parse_tool_choice;
using chat_wire::parse_tools;

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
    invalid_json_body(e.what(), body);
  }
  if (!j.is_object()) invalid_body(std::string("the body must be a JSON object, got ") + json_type_name(j), true);
  refuse_repeated_keys(body);
  return j;
}

std::string parse_model(const json& body) {
  const auto it = body.find("model");
  if (it == body.end()) missing_field("model");
  return need_string(*it, "model");
}

std::string parse_user(const json& body) {
  const auto it = body.find("user");
  if (it == body.end() || it->is_null()) return "";
  std::string user = need_string(*it, "user");
  if (user.size() > 4096) too_long("user", LengthKind::string, "at most 4096 bytes are accepted");
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

// tools_json narrowed to the tools `allowed` names (tool_choice allowed_tools), in the request's order, as JSON
// text with each tool as the client wrote it.
std::string narrowed_tools(const std::string& tools_json, const std::vector<std::string>& allowed) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(tools_json);
  const std::unordered_set<std::string> callable(allowed.begin(), allowed.end());
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& t : tools) {
    if (callable.count(t["function"]["name"].get<std::string>()) > 0) out.push_back(t);
  }
  return out.dump();
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
    // Hints to OpenAI's own caches and abuse checks: nothing to do here, so any key or identifier string is
    // taken; the cache's retention and options are checked as OpenAI types them (request_invalid.h).
    for (const char* name : {"prompt_cache_key", "safety_identifier"}) {
      if (given(name)) need_string(body[name], name);
    }
    if (given("prompt_cache_retention")) check_prompt_cache_retention(body["prompt_cache_retention"]);
    if (given("prompt_cache_options")) check_prompt_cache_options(body["prompt_cache_options"]);
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

ChatRequest chat_request(std::string_view raw, const ServeLimits& limits) {
  const std::optional<std::string> repaired = replace_lone_surrogates(raw);  // every parse reads the same text
  const std::string_view text = repaired ? std::string_view(*repaired) : raw;
  const json body = parse_body(text, limits);
  refuse_unserved(body, true);
  refuse_unknown(body, true);
  ChatRequest r;
  r.model = parse_model(body);
  const auto messages = body.find("messages");
  if (messages == body.end()) missing_field("messages");
  if (!messages->is_array()) wrong_type("messages", "an array", *messages);
  if (messages->empty()) empty_value("messages", LengthKind::array, "must hold at least one message");
  if (messages->size() > limits.max_messages) {
    too_long("messages", LengthKind::array,
             "at most " + std::to_string(limits.max_messages) + " messages are accepted");
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
    if (!r.tool_choice.allowed.empty()) r.callable_tools_json = narrowed_tools(r.tools_json, r.tool_choice.allowed);
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

CompletionRequest completion_request(std::string_view raw, const ServeLimits& limits) {
  const std::optional<std::string> repaired = replace_lone_surrogates(raw);
  const std::string_view text = repaired ? std::string_view(*repaired) : raw;
  const json body = parse_body(text, limits);
  refuse_unserved(body, false);
  refuse_unknown(body, false);
  CompletionRequest r;
  r.model = parse_model(body);
  const auto prompt = body.find("prompt");
  if (prompt == body.end()) missing_field("prompt");
  if (prompt->is_array()) {
    if (!prompt->empty() && (*prompt)[0].is_number_integer()) {
      unsupported("prompt", "a prompt of token ids (give the prompt as text)");
    }
    // Empty, OpenAI's "empty_array"; more than one is a batch, which OpenAI serves and this server does not.
    if (prompt->empty())
      empty_value("prompt", LengthKind::array, "an array prompt must hold exactly one string (batches are not served)");
    if (prompt->size() > 1)
      unsupported_value("prompt", "an array prompt must hold exactly one string (batches are not served)");
    r.prompt = need_string((*prompt)[0], "prompt[0]");
  } else {
    r.prompt = need_string(*prompt, "prompt");
  }
  r.sampling = parse_sampling(body, limits);
  if (r.sampling.n > 1)
    unsupported_value("n", "n > 1 is served on /v1/chat/completions only, got " + std::to_string(r.sampling.n));
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
    out.error = api_error(400, std::string("malformed request: ") + e.what(), "invalid_request_error", "invalid_value");
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
