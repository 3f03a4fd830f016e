// What the request parsers throw inside themselves when a field's check fails: serve_api.cpp's (chat and
// completions) and responses_api.cpp's, with responses_refusals.cpp's (Responses). Each catches RequestInvalid
// at its entry point and returns the error; it never leaves a parser.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/common/json_error_path.h"
#include "serve/wire/serve_api.h"

namespace orbit::serve {

struct RequestInvalid {
  ApiError error;
};

// A field's value refused for how it stands with the rest of the request (stream_options without stream true,
// a tool name given twice, tool_choice "required" without tools): a 400 naming `param` ("<param>: <message>")
// with code "invalid_value", OpenAI's for a value it refuses where no narrower code fits. Every refusal of a
// request field carries a code: clients branch on it.
[[noreturn]] inline void invalid_field(const std::string& param, const std::string& message) {
  throw RequestInvalid{api_error(400, param + ": " + message, "invalid_request_error", "invalid_value", param)};
}

// A body that is not JSON, or JSON that is no object: a 400 with param null (no field is at fault) and code
// "invalid_value" (the JSON text's fault) or "invalid_type" (a JSON value that is no object).
[[noreturn]] inline void invalid_body(const std::string& message, bool wrong_json_type) {
  throw RequestInvalid{
      api_error(400, message, "invalid_request_error", wrong_json_type ? "invalid_type" : "invalid_value")};
}

// A body parse_json_input refused ("the body: not valid JSON: ..."), read again for the path of the value it
// failed in (orbit/common/json_error_path.h), which the message names ("the body: not valid JSON at temperature:
// a number is out of range ..."). As invalid_body otherwise: param null, as OpenAI's for a body it cannot parse
// (a body cut short fails in whatever field it was cut in, which is not that field's fault).
[[noreturn]] inline void invalid_json_body(const std::string& message, std::string_view body) {
  // Only for a syntax error: one for nesting (parse_json_input's scan, before any parse) would have the path read
  // through every level; a syntax error comes after the scan found the nesting within bounds.
  const std::string lead = "the body: not valid JSON";
  if (message.compare(0, lead.size(), lead) != 0) invalid_body(message, false);
  const std::string path = json_error_path(body.data(), body.data() + body.size());
  if (path.empty()) invalid_body(message, false);
  invalid_body(lead + " at " + path + message.substr(lead.size()), false);
}

// A JSON value's type as an error names it ("a string", "an integer", "null", ...).
template <class Json>
const char* json_type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// The error codes below are OpenAI's for the same refusals (its API answers a request without `messages` with
// code "missing_required_parameter", param "messages"); clients branch on them.

// A required field is absent: a 400 with code "missing_required_parameter" naming `param`, "<param>: missing",
// then `note` when there is one.
[[noreturn]] inline void missing_field(const std::string& param, const std::string& note = "") {
  throw RequestInvalid{api_error(400, param + ": missing" + (note.empty() ? "" : " " + note), "invalid_request_error",
                                 "missing_required_parameter", param)};
}

// A field of the wrong JSON type: a 400 with code "invalid_type" naming `param`, "<param>: expected <expected>,
// got <its type>".
template <class Json>
[[noreturn]] void wrong_type(const std::string& param, const char* expected, const Json& v) {
  throw RequestInvalid{api_error(400, param + ": expected " + expected + ", got " + json_type_name(v),
                                 "invalid_request_error", "invalid_type", param)};
}

// A value outside the field's values (an unknown role, a tool_choice mode): a 400 with code "invalid_value" naming
// `param`, "<param>: <message>".
[[noreturn]] inline void invalid_value(const std::string& param, const std::string& message) {
  throw RequestInvalid{api_error(400, param + ": " + message, "invalid_request_error", "invalid_value", param)};
}

// A value OpenAI's API takes and this server does not serve (a tool type other than 'function'): a 400 with code
// "unsupported_value" naming `param`, "<param>: <message>".
[[noreturn]] inline void unsupported_value(const std::string& param, const std::string& message) {
  throw RequestInvalid{api_error(400, param + ": " + message, "invalid_request_error", "unsupported_value", param)};
}

// Which kind of number a bound refused: OpenAI's codes name it ("integer_..." or "decimal_...").
enum class NumberKind { integer, decimal };

// A number under the field's least value: a 400 naming `param`, "<param>: <message>", code
// "integer_below_min_value" or "decimal_below_min_value" (OpenAI's for a max_tokens of 0, a temperature of -1).
[[noreturn]] inline void below_minimum(const std::string& param, NumberKind kind, const std::string& message) {
  throw RequestInvalid{api_error(400, param + ": " + message, "invalid_request_error",
                                 kind == NumberKind::integer ? "integer_below_min_value" : "decimal_below_min_value",
                                 param)};
}

// A number over the field's greatest value: as below_minimum, code "integer_above_max_value" or
// "decimal_above_max_value" (OpenAI's for a top_logprobs of 21, a temperature of 3).
[[noreturn]] inline void above_maximum(const std::string& param, NumberKind kind, const std::string& message) {
  throw RequestInvalid{api_error(400, param + ": " + message, "invalid_request_error",
                                 kind == NumberKind::integer ? "integer_above_max_value" : "decimal_above_max_value",
                                 param)};
}

// Which kind of value a length bound refused: a string or an array.
enum class LengthKind { string, array };

// An empty string or array where the field needs at least one byte or item: a 400 naming `param`,
// "<param>: <message>", code "empty_string" or "empty_array" (OpenAI's for messages [] and an empty tool name).
[[noreturn]] inline void empty_value(const std::string& param, LengthKind kind, const std::string& message) {
  throw RequestInvalid{api_error(400, param + ": " + message, "invalid_request_error",
                                 kind == LengthKind::string ? "empty_string" : "empty_array", param)};
}

// A string or array longer than the field takes: as empty_value, code "string_above_max_length" or
// "array_above_max_length" (OpenAI's for a tool name over 64 bytes, more tools or stop sequences than it takes).
[[noreturn]] inline void too_long(const std::string& param, LengthKind kind, const std::string& message) {
  throw RequestInvalid{api_error(400, param + ": " + message, "invalid_request_error",
                                 kind == LengthKind::string ? "string_above_max_length" : "array_above_max_length",
                                 param)};
}

// A required object, `it` found in `parent` (parent.find): missing_field when absent, wrong_type when not an object.
template <class Json, class Iterator>
void require_object(const Json& parent, const Iterator& it, const std::string& param) {
  if (it == parent.end()) missing_field(param);
  if (!it->is_object()) wrong_type(param, "an object", *it);
}

// OpenAI's `metadata`, checked at `param`: an object of at most 16 pairs, keys of at most 64 bytes, string
// values of at most 512 bytes. The chat request, the chat completion update and the Responses API check it so.
template <class Json>
void check_metadata(const Json& v, const std::string& param = "metadata") {
  if (!v.is_object()) wrong_type(param, "an object", v);
  if (v.size() > 16) invalid_value(param, "at most 16 pairs are accepted");
  for (const auto& [key, value] : v.items()) {
    if (key.size() > 64) too_long(param, LengthKind::string, "a key is over 64 bytes");
    const std::string at = param + "." + key;
    if (!value.is_string()) wrong_type(at, "a string", value);
    if (value.template get_ref<const std::string&>().size() > 512) too_long(at, LengthKind::string, "over 512 bytes");
  }
}

// Why `name` is not a name of `what` ("" when it is): 1 to 64 letters, digits, _ and -, OpenAI's rule for
// tool names (tools[].function.name, an assistant call's function.name) and message names (messages[].name).
// Other bytes would reach the chat template and the call parser: a tool name holding "</tool_call>" ended the
// call it was written in, so a tool_choice "required" answer came back as text.
inline std::string name_problem(const std::string& name, const char* what) {
  const bool ok = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (ok && !name.empty() && name.size() <= 64) return "";
  const std::string shown = name.size() > 40 ? name.substr(0, 40) + "..." : name;
  return nlohmann::json(shown).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + " is not " + what +
         ": 1 to 64 letters, digits, _ and - are (" + std::to_string(name.size()) + " bytes given)";
}

// Refuses `name` at `param` when name_problem finds it no name of `what`, with OpenAI's code for the fault:
// "empty_string" when empty, "string_above_max_length" when over 64 bytes, else "invalid_value" (bytes outside
// the pattern). The message is name_problem's.
inline void check_name(const std::string& name, const char* what, const std::string& param) {
  const std::string bad = name_problem(name, what);
  if (bad.empty()) return;
  if (name.empty()) empty_value(param, LengthKind::string, bad);
  if (name.size() > 64) too_long(param, LengthKind::string, bad);
  invalid_value(param, bad);
}

// A parameter clients send that this server does not serve, refused rather than ignored: a 400 with code
// "unsupported_parameter" naming `param`, "<param>: <what> is not supported by this server".
[[noreturn]] inline void unsupported(const std::string& param, const std::string& what) {
  throw RequestInvalid{api_error(400, param + ": " + what + " is not supported by this server", "invalid_request_error",
                                 "unsupported_parameter", param)};
}

// The names of `names`, a list separated by single spaces ("model messages stop").
inline std::vector<std::string_view> split_names(std::string_view names) {
  std::vector<std::string_view> out;
  while (!names.empty()) {
    const std::size_t space = std::min(names.find(' '), names.size());
    if (space > 0) out.push_back(names.substr(0, space));
    names.remove_prefix(std::min(space + 1, names.size()));
  }
  return out;
}

// The known name a misspelt one most likely meant: the nearest in edit distance (insertions, deletions,
// substitutions, each 1), when that distance is at most 2 and under half the name's length; "" for none.
inline std::string nearest_name(std::string_view name, const std::vector<std::string_view>& known) {
  std::string best;
  std::size_t best_distance = 3;
  for (const std::string_view k : known) {
    // Lengths further apart than 2 are further apart than 2 edits: skipped, so a long name costs nothing.
    if (name.size() > k.size() + 2 || k.size() > name.size() + 2) continue;
    std::vector<std::size_t> row(k.size() + 1);
    for (std::size_t j = 0; j <= k.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= name.size(); ++i) {
      std::size_t diagonal = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= k.size(); ++j) {
        const std::size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (name[i - 1] == k[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    if (row[k.size()] < best_distance && 2 * row[k.size()] < name.size()) {
      best_distance = row[k.size()];
      best = std::string(k);
    }
  }
  return best;
}

// A field `where` does not know, refused as OpenAI refuses one ("Unrecognized request argument supplied"):
// a 400 with code "unknown_parameter" naming it (param `at` + name), e.g. "temprature: unrecognized request
// argument (not a field of /v1/chat/completions; did you mean 'temperature'?)", so that a misspelt or
// misplaced field is never answered as if it had not been sent. `known` names, separated by spaces, every
// field that is read, refused by value or accepted as a no-op; null values are refused too (an unknown field
// has no no-op).
template <class Json>
void refuse_unknown_fields(const Json& object, std::string_view known, const std::string& where,
                           const std::string& at = "") {
  const std::vector<std::string_view> names = split_names(known);
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& name = it.key();
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    const std::string guess = nearest_name(name, names);
    const std::string hint = guess.empty() ? "" : "; did you mean '" + guess + "'?";
    // The message quotes at most 80 bytes of the name (a body may be megabytes of one key); param has all of it.
    const std::string shown = name.size() > 80 ? name.substr(0, 80) + "..." : name;
    throw RequestInvalid{api_error(400,
                                   at + shown + ": unrecognized request argument (not a field of " + where + hint + ")",
                                   "invalid_request_error", "unknown_parameter", at + name)};
  }
}

// OpenAI's prompt-cache hints, checked as the openai package types them (ChatCompletionCreateParams,
// ResponseCreateParams) and then unused: this server reuses KV by its own means (the windows and the store), so
// they change nothing here, but a value OpenAI would refuse is refused by name. prompt_cache_retention: "in_memory"
// or "24h" ("in-memory", the spelling of openai 6.30's types, is taken too); prompt_cache_options: an object of
// mode ("implicit" or "explicit") and ttl ("30m", the one value OpenAI serves), another key refused by name.
// Null is the field left out (the callers skip it).
template <class Json>
void check_prompt_cache_retention(const Json& v) {
  if (!v.is_string()) wrong_type("prompt_cache_retention", "a string", v);
  const std::string& value = v.template get_ref<const std::string&>();
  if (value != "in_memory" && value != "in-memory" && value != "24h") {
    invalid_value("prompt_cache_retention", "expected 'in_memory' or '24h', got '" + value.substr(0, 80) + "'");
  }
}

template <class Json>
void check_prompt_cache_options(const Json& v) {
  if (!v.is_object()) wrong_type("prompt_cache_options", "an object", v);
  refuse_unknown_fields(v, "mode ttl", "prompt_cache_options", "prompt_cache_options.");
  const auto value = [&v](const char* key) -> const std::string* {
    const auto it = v.find(key);
    if (it == v.end()) return nullptr;
    if (!it->is_string()) wrong_type(std::string("prompt_cache_options.") + key, "a string", *it);
    return &it->template get_ref<const std::string&>();
  };
  if (const std::string* mode = value("mode"); mode && *mode != "implicit" && *mode != "explicit") {
    invalid_value("prompt_cache_options.mode", "expected 'implicit' or 'explicit', got '" + mode->substr(0, 80) + "'");
  }
  if (const std::string* ttl = value("ttl"); ttl && *ttl != "30m") {
    invalid_value("prompt_cache_options.ttl",
                  "expected '30m' (the one lifetime OpenAI serves), got '" + ttl->substr(0, 80) + "'");
  }
}

}  // namespace orbit::serve
