#include "serve/run/answer_constraint.h"

#include <nlohmann/json.hpp>

#include "orbit/common/error.h"
#include "serve/run/schema_shape.h"

namespace orbit::serve {

namespace {

bool forces_call(const ChatRequest& r) { return r.tool_choice.mode == "required" || r.tool_choice.mode == "function"; }

// tool_choice "auto" with tools and a text answer: the model may call.
bool may_call(const ChatRequest& r) {
  return !r.tools_json.empty() && r.tool_choice.mode == "auto" && r.response_format.type == "text";
}

// tool_choice "auto" with tools and a JSON answer asked for: the answer is a call or that JSON.
bool may_call_or_answer(const ChatRequest& r) {
  return !r.tools_json.empty() && r.tool_choice.mode == "auto" && r.response_format.type != "text";
}

// What a request's constraint (or its refusal) is built from; "" when it has none. The callable tools alone do not
// say it all: allowed_tools is refused under auto where the calls would be left free (free_calls), and a refusal
// names a tool by its index in the whole list (forced_call_param), so both lists and whether allowed_tools was
// given are in the key.
std::string key_of(const ChatRequest& r) {
  const std::string calls = std::string(r.parallel_tool_calls ? "n" : "1") +
                            (r.tool_choice.allowed.empty() ? "" : " allowed") + "\n" + r.tools_json + "\n" +
                            r.callable_tools_json;
  std::string answer;
  if (r.response_format.type == "json_object") answer = "json_object";
  if (r.response_format.type == "json_schema") answer = "json_schema\n" + r.response_format.schema_json;
  // A forced call's entry holds the response_format's refusal, if any (build): the format is in its key.
  if (forces_call(r)) return "tools\n" + r.tool_choice.function + "\n" + calls + "\n" + answer;
  if (may_call(r)) return "auto tools\n" + calls;
  // The tools' JSON has no newline: the key's parts stay apart.
  return may_call_or_answer(r) ? "calls or\n" + calls + "\n" + answer : answer;
}

// Why a tool's parameters are not an arguments schema, or "": a function's arguments are a JSON object, so
// its schema is an object (or true) whose type, if given, is "object", whose properties is an object of
// schemas and whose required lists property names. Other keywords are the tool's to describe its arguments
// to the model; they are enforced, in the subset orbit/constraint.h serves, only when a call is forced.
std::string arguments_schema_problem(const nlohmann::ordered_json& p) {
  if (p.is_boolean() && p.get<bool>()) return "";
  if (!p.is_object()) return std::string("must be a JSON Schema object, got ") + p.type_name();
  const auto type = p.find("type");
  if (type != p.end() && !(type->is_string() && *type == "object")) {
    return "'type' must be \"object\" (a function's arguments are a JSON object), got " + type->dump();
  }
  const auto props = p.find("properties");
  if (props != p.end()) {
    if (!props->is_object()) return std::string("'properties' must be an object, got ") + props->type_name();
    for (const auto& [name, schema] : props->items()) {
      if (!schema.is_object() && !schema.is_boolean()) return "'properties." + name + "' must be a schema (an object)";
    }
  }
  const auto required = p.find("required");
  if (required != p.end()) {
    if (!required->is_array()) return "'required' must be an array of property names";
    for (const auto& name : *required) {
      if (!name.is_string()) return "'required' must hold property names (strings), got " + name.dump();
    }
  }
  return "";
}

// Every tool's parameters checked when the request arrives, whatever tool_choice says (400 naming
// tools[i].function.parameters): an arguments schema that is malformed, at its root or in a subschema
// (schema_shape.h), is refused at once, not only once a later request forces a call. Names are unique already (the
// parser checks them).
AnswerConstraint check_tool_schemas(const std::string& tools_json) {
  AnswerConstraint out;
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(tools_json, nullptr, false);
  if (!tools.is_array()) return out;  // the parser wrote it: not reached
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const auto fn = tools[i].find("function");
    if (fn == tools[i].end() || !fn->is_object() || !fn->contains("parameters")) continue;
    const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
    std::string problem = arguments_schema_problem((*fn)["parameters"]);
    if (!problem.empty()) problem = param + ": " + problem;
    // Its subschemas too (a keyword's path always leads the problem: the root is an object by now).
    if (problem.empty()) {
      if (const std::string shape = schema_shape_problem((*fn)["parameters"]); !shape.empty())
        problem = param + "." + shape;
    }
    if (!problem.empty()) {
      out.error = api_error(400, problem, "invalid_request_error", "invalid_function_parameters", param);
      return out;
    }
  }
  return out;
}

// A chat tool's function name; "" where it has none.
std::string tool_name(const nlohmann::json& tool) {
  const auto fn = tool.is_object() ? tool.find("function") : tool.end();
  if (!tool.is_object() || fn == tool.end() || !fn->is_object()) return "";
  const auto name = fn->find("name");
  return name != fn->end() && name->is_string() ? name->get<std::string>() : "";
}

// The index in the request's whole tools list of the tool named `name`; -1 where none is.
int64_t tool_index(const ChatRequest& r, const std::string& name) {
  const nlohmann::json tools = nlohmann::json::parse(r.tools_json, nullptr, false);
  for (std::size_t i = 0; !name.empty() && tools.is_array() && i < tools.size(); ++i) {
    if (tool_name(tools[i]) == name) return static_cast<int64_t>(i);
  }
  return -1;
}

// Where a forced call's schemas sit, for a refusal of what they ask: "tools[i].function.parameters" when the
// call can only be to one tool (tool_choice names it, or one tool is callable), else "tools".
std::string forced_call_param(const ChatRequest& r) {
  std::string name = r.tool_choice.mode == "function" ? r.tool_choice.function : "";
  if (name.empty()) {
    const nlohmann::json callable = nlohmann::json::parse(r.calls_json(), nullptr, false);
    if (callable.is_array() && callable.size() == 1) name = tool_name(callable[0]);
  }
  const int64_t i = tool_index(r, name);
  return i < 0 ? "tools" : "tools[" + std::to_string(i) + "].function.parameters";
}

// `message` with a leading path of a tool in the callable tools ("tools[k].function.parameters...", the index the
// grammar was built from) renamed to that tool's index in the request's whole list, where allowed_tools may have put
// it elsewhere; *param becomes that tool's parameters (when the path is in them) or the tool. Unchanged otherwise.
std::string in_whole_list(const ChatRequest& r, std::string message, std::string* param) {
  const std::size_t close = message.rfind("tools[", 0) == 0 ? message.find(']') : std::string::npos;
  if (close != std::string::npos && close > 6 && message.find_first_not_of("0123456789", 6) == close) {
    const nlohmann::json callable = nlohmann::json::parse(r.calls_json(), nullptr, false);
    const std::size_t k = std::stoul(message.substr(6, close - 6));
    const int64_t i = callable.is_array() && k < callable.size() ? tool_index(r, tool_name(callable[k])) : -1;
    if (i >= 0) {
      const std::string at = "tools[" + std::to_string(i) + "]";
      message.replace(0, close + 1, at);
      static const std::string kParameters = ".function.parameters";
      const std::size_t end = at.size() + kParameters.size();  // what follows: the end, '.', '[' or ':'
      const bool in_parameters = message.compare(at.size(), kParameters.size(), kParameters) == 0 &&
                                 (end == message.size() || std::string(".[:").find(message[end]) != std::string::npos);
      *param = in_parameters ? at + kParameters : at;
    }
  }
  return message;
}

// The refusal of a forced call's grammar, whose message begins with the refused tool's path in the list the
// grammar was built from, the callable tools ("tools[k].function.parameters.properties.q: 'not' is not
// supported"): named in the request's whole list, where allowed_tools may have put that tool at another index,
// the message's path and the param (the tool's parameters, or the tool) both; "tools" where no tool is named.
ApiError refused_calls(const ChatRequest& r, std::string message) {
  std::string param = "tools";
  message = in_whole_list(r, std::move(message), &param);
  return api_error(400, message, "invalid_request_error", "invalid_value", param);
}

// The param of the first tool that asks for strict arguments (function.strict true),
// "tools[i].function.strict"; "" when none does.
std::string first_strict_tool(const std::string& tools_json) {
  const nlohmann::json tools = nlohmann::json::parse(tools_json, nullptr, false);
  if (!tools.is_array()) return "";  // the parser wrote it: not reached
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const auto fn = tools[i].find("function");
    if (fn == tools[i].end() || !fn->is_object()) continue;
    const auto strict = fn->find("strict");
    if (strict != fn->end() && strict->is_boolean() && strict->get<bool>())
      return "tools[" + std::to_string(i) + "].function.strict";
  }
  return "";
}

// Under tool_choice auto, calls the tools' grammar cannot be had for (`why`) are left free: where no tool
// asked for strict arguments that is all (nothing else was asked to be enforced), where one did its promise
// cannot be kept, so the request is refused naming that tool's strict (400, code unsupported_value); so is one
// whose allowed_tools names a subset (a free answer could call any tool).
AnswerConstraint free_calls(const ChatRequest& r, const std::string& grammar_why, AnswerConstraint free) {
  AnswerConstraint out;
  std::string unused;
  const std::string why = in_whole_list(r, grammar_why, &unused);  // a tool named by its index in the request
  if (!r.tool_choice.allowed.empty()) {  // a free answer could call any tool: allowed_tools would go unheld
    out.error = api_error(400,
                          "tool_choice.allowed_tools: the calls cannot be held to the allowed tools under mode auto "
                          "here (" +
                              why + "); give mode required, or send only the allowed tools",
                          "invalid_request_error", "unsupported_value", "tool_choice.allowed_tools");
    return out;
  }
  const std::string strict = first_strict_tool(r.calls_json());
  if (strict.empty()) return free;
  out.error = api_error(400,
                        strict + ": strict arguments cannot be enforced under tool_choice auto here (" + why +
                            "); give strict false, or force the call with tool_choice",
                        "invalid_request_error", "unsupported_value", strict);
  return out;
}

}  // namespace

AnswerConstraint ConstraintCache::build_auto(const ChatRequest& r) const {
  AnswerConstraint out;
  out.trigger = tool_call_trigger(format_);
  if (out.trigger.empty()) return free_calls(r, "this model's tool call format has no mark a call starts with", {});
  try {
    out.constraint =
        Constraint::tool_calls(r.calls_json(), tool_call_options(format_, "", r.parallel_tool_calls ? 4 : 1));
  } catch (const Error& e) {
    return free_calls(r, e.what(), {});  // schemas outside the subset: the answer stays free
  }
  if (const std::string why = unwritable(out.constraint, *vocabulary_, max_answer_bytes_); !why.empty())
    return free_calls(r, why, {});
  out.calls_whole = true;
  return out;
}

AnswerConstraint ConstraintCache::build_calls_or_answer(const ChatRequest& r, AnswerConstraint answer) const {
  if (!answer.constraint) return answer;  // refused
  std::shared_ptr<const Constraint> calls;
  try {
    calls = Constraint::tool_calls(r.calls_json(), tool_call_options(format_, "", r.parallel_tool_calls ? 4 : 1));
  } catch (const Error& e) {
    return free_calls(r, e.what(), answer);  // schemas outside the subset (accepted under auto): the JSON answer alone
  }
  if (const std::string why = unwritable(calls, *vocabulary_, max_answer_bytes_); !why.empty())
    return free_calls(r, why, answer);
  answer.constraint = Constraint::choice({calls, answer.constraint});
  // Past the call mark only the calls' branch goes on; a format without one (Llama 3's bare objects) may be
  // writing the JSON answer where it looks like a call.
  answer.calls_whole = !tool_call_trigger(format_).empty();
  return answer;
}

AnswerConstraint ConstraintCache::build_answer_alone(const ChatRequest& r) const {
  ChatRequest json = r;
  json.tools_json.clear();
  json.callable_tools_json.clear();
  json.tool_choice = {};
  return build(json);
}

AnswerConstraint ConstraintCache::build(const ChatRequest& r) const {
  if (may_call(r)) return build_auto(r);
  if (forces_call(r) && r.response_format.type != "text") {
    // OpenAI accepts a response_format beside a forced call, whose answer is the call (no text for the format
    // to shape); its schema is still checked, as it would be without the tools.
    AnswerConstraint answer = build_answer_alone(r);
    if (answer.error) return answer;
  }
  if (may_call_or_answer(r)) return build_calls_or_answer(r, build_answer_alone(r));
  AnswerConstraint out;
  const bool call = forces_call(r);
  const std::string param = call                                      ? "tool_choice"
                            : r.response_format.type == "json_object" ? "response_format.type"
                                                                      : "response_format.json_schema.schema";
  try {
    if (call) {
      const std::string only = r.tool_choice.mode == "function" ? r.tool_choice.function : "";
      out.constraint =
          Constraint::tool_calls(r.calls_json(), tool_call_options(format_, only, r.parallel_tool_calls ? 4 : 1));
    } else if (r.response_format.type == "json_object") {
      out.constraint = Constraint::json_object();
    } else {
      out.constraint = Constraint::json_schema(r.response_format.schema_json, {}, "response_format.json_schema.schema");
    }
  } catch (const Error& e) {
    out.error =
        call ? refused_calls(r, e.what()) : api_error(400, e.what(), "invalid_request_error", "invalid_value", param);
    out.constraint = nullptr;
    return out;
  }
  const std::string why = unwritable(out.constraint, *vocabulary_, max_answer_bytes_);
  if (!why.empty()) {
    // A forced call too long for the context is its tools' schemas' doing (a huge minLength), not tool_choice's;
    // one the vocabulary cannot write stays tool_choice's (forcing a call is what this model cannot do).
    const bool too_long = ConstraintMatcher(out.constraint).min_bytes_to_complete() > max_answer_bytes_;
    const std::string where = call && too_long ? forced_call_param(r) : param;
    out.error = api_error(400, where + ": " + why, "invalid_request_error", "unsupported_value", where);
    out.constraint = nullptr;
  }
  out.calls_whole = call && out.constraint != nullptr;
  return out;
}

AnswerConstraint ConstraintCache::for_request(const ChatRequest& request, const std::optional<std::string>& after) {
  if (!request.tools_json.empty()) {
    AnswerConstraint checked =
        remembered("tool schemas\n" + request.tools_json, [&] { return check_tool_schemas(request.tools_json); });
    if (checked.error) return checked;
  }
  const std::string key = key_of(request);
  if (key.empty()) return {};
  AnswerConstraint from_start = remembered(key, [&] { return build(request); });
  if (!after || !from_start.constraint || !from_start.trigger.empty()) return from_start;
  // The key's first line names no other entry's kind; `after` holds no newline.
  return remembered("after\n" + *after + "\n" + key, [&] { return after_text(from_start, *after); });
}

AnswerConstraint ConstraintCache::after_text(AnswerConstraint answer, const std::string& after) {
  std::vector<std::shared_ptr<const Constraint>> ways;
  for (const char* gap : {"", " ", "\n", "\n\n"}) {
    ways.push_back(Constraint::sequence({Constraint::literal(after + gap), answer.constraint}));
  }
  answer.constraint = Constraint::choice(ways);
  answer.trigger = after;
  return answer;
}

AnswerConstraint ConstraintCache::remembered(const std::string& key, const std::function<AnswerConstraint()>& make) {
  return kept_.remembered<AnswerConstraint>(key, [&] {
    AnswerConstraint out = make();
    // What the entry holds beside its constraint's bytes: the answer itself, its trigger and refusal texts.
    std::size_t other = sizeof(AnswerConstraint) + out.trigger.capacity();
    if (out.error) {
      const ApiError& e = *out.error;
      other += sizeof(ApiError) + e.message.capacity() + e.type.capacity() + e.param.capacity() + e.code.capacity();
    }
    return Remembered<AnswerConstraint>{out, out.constraint, other};
  });
}

ConstraintCache::Usage ConstraintCache::usage() {
  const ConstraintCacheStats s = kept_.stats();
  Usage u;
  u.bytes = static_cast<std::size_t>(s.bytes);
  u.entries = static_cast<std::size_t>(s.entries);
  u.hits = s.hits;
  u.misses = s.misses;
  return u;
}

}  // namespace orbit::serve
