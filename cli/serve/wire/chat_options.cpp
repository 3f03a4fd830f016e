#include "serve/wire/chat_parse.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "serve/wire/request_invalid.h"

namespace orbit::serve::chat_wire {

using nlohmann::json;

// tools: each {"type": "function", "function": {"name": ..., ...}}; their names, in order, each once. (Their
// parameters are checked as schemas by the server: answer_constraint.h.)
std::vector<std::string> parse_tools(const json& tools) {
  if (!tools.is_array()) wrong_type("tools", "an array", tools);
  std::vector<std::string> names;
  std::unordered_map<std::string, std::size_t>
      index;  // each name's tool: a body of many tools is checked in linear time
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object()) wrong_type(p, "an object", t);
    if (t.contains("type") && need_string(t["type"], p + ".type") != "function") {
      unsupported_value(p + ".type", "only 'function' tools are accepted");
    }
    const auto fn = t.find("function");
    require_object(t, fn, p + ".function");
    // A key out of place (a misspelt "parameters") would give the model a tool whose arguments go unchecked.
    refuse_unknown_fields(t, "type function", p, p + ".");
    refuse_unknown_fields(*fn, "name description parameters strict", p + ".function", p + ".function.");
    const auto name = fn->find("name");
    if (name == fn->end()) missing_field(p + ".function.name");
    names.push_back(need_string(*name, p + ".function.name"));
    if (names.back().empty()) empty_value(p + ".function.name", LengthKind::string, "empty");
    check_name(names.back(), "a tool name", p + ".function.name");
    const auto [first, added] = index.emplace(names.back(), i);
    if (!added) {
      invalid_field(p + ".function.name", "'" + names.back() + "' is also the name of tools[" +
                                              std::to_string(first->second) + "] (tool names must be unique)");
    }
    // Read by the template as written: a description that is not text, or a strict that is not a boolean,
    // would reach the prompt or be taken for a setting it is not (null is the field left out).
    if (const auto d = fn->find("description"); d != fn->end() && !d->is_null())
      need_string(*d, p + ".function.description");
    if (const auto st = fn->find("strict"); st != fn->end() && !st->is_null()) need_bool(*st, p + ".function.strict");
    if (fn->contains("parameters") && !(*fn)["parameters"].is_object()) {
      wrong_type(p + ".function.parameters", "an object", (*fn)["parameters"]);
    }
  }
  return names;
}

namespace {

// tool_choice {"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}: OpenAI's way to let the model call a
// subset of the tools while the prompt keeps listing them all (its cache stays warm as the subset changes).
ToolChoice parse_allowed_tools(const json& v, const std::vector<std::string>& tools) {
  refuse_unknown_fields(v, "type allowed_tools", "tool_choice", "tool_choice.");
  const std::string at = "tool_choice.allowed_tools";
  const auto allowed = v.find("allowed_tools");
  require_object(v, allowed, at);
  refuse_unknown_fields(*allowed, "mode tools", at, at + ".");
  ToolChoice c;
  const auto mode = allowed->find("mode");
  if (mode == allowed->end()) missing_field(at + ".mode");
  c.mode = need_string(*mode, at + ".mode");
  if (c.mode != "auto" && c.mode != "required") {
    invalid_value(at + ".mode", "'" + c.mode + "' is not one of auto, required");
  }
  const auto list = allowed->find("tools");
  if (list == allowed->end()) missing_field(at + ".tools");
  if (!list->is_array()) wrong_type(at + ".tools", "an array", *list);
  if (list->empty()) empty_value(at + ".tools", LengthKind::array, "empty (allow one of the request's tools at least)");
  const std::unordered_set<std::string> known(tools.begin(), tools.end());
  std::unordered_set<std::string> listed;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string p = at + ".tools[" + std::to_string(i) + "]";
    const json& t = (*list)[i];
    if (!t.is_object()) wrong_type(p, "an object", t);
    refuse_unknown_fields(t, "type function", p, p + ".");
    if (t.contains("type") && need_string(t["type"], p + ".type") != "function") {
      unsupported_value(p + ".type", "only 'function' tools are accepted");
    }
    const auto fn = t.find("function");
    require_object(t, fn, p + ".function");
    refuse_unknown_fields(*fn, "name", p + ".function", p + ".function.");
    const auto name = fn->find("name");
    if (name == fn->end()) missing_field(p + ".function.name");
    const std::string n = need_string(*name, p + ".function.name");
    if (known.count(n) == 0) invalid_value(p + ".function.name", "'" + n + "' is not one of the request's tools");
    if (!listed.insert(n).second) invalid_value(p + ".function.name", "'" + n + "' is listed twice");
    c.allowed.push_back(n);
  }
  return c;
}

}  // namespace

ToolChoice parse_tool_choice(const json& v, const std::vector<std::string>& tools) {
  ToolChoice c;
  if (v.is_object() && v.contains("type") && v["type"] == "allowed_tools") {
    c = parse_allowed_tools(v, tools);
  } else if (v.is_string()) {
    c.mode = v.get<std::string>();
    if (c.mode != "none" && c.mode != "auto" && c.mode != "required") {
      invalid_value("tool_choice", "'" + c.mode + "' is not one of none, auto, required (or a named function)");
    }
  } else if (v.is_object()) {
    if (v.contains("type") && need_string(v["type"], "tool_choice.type") != "function") {
      unsupported_value("tool_choice.type", "only 'function' and 'allowed_tools' are accepted");
    }
    const auto fn = v.find("function");
    require_object(v, fn, "tool_choice.function");
    refuse_unknown_fields(v, "type function", "tool_choice", "tool_choice.");
    refuse_unknown_fields(*fn, "name", "tool_choice.function", "tool_choice.function.");
    const auto name = fn->find("name");
    if (name == fn->end()) missing_field("tool_choice.function.name");
    c.mode = "function";
    c.function = need_string(*name, "tool_choice.function.name");
    if (std::find(tools.begin(), tools.end(), c.function) == tools.end()) {
      invalid_value("tool_choice.function.name", "'" + c.function + "' is not one of the request's tools");
    }
  } else {
    wrong_type("tool_choice", "a string or an object", v);
  }
  if ((c.mode == "required" || c.mode == "function") && tools.empty()) {
    invalid_field("tool_choice", "'" + c.mode + "' needs tools, and the request has none");
  }
  return c;
}

ResponseFormat parse_response_format(const json& v) {
  if (!v.is_object()) wrong_type("response_format", "an object", v);
  // A key elsewhere than OpenAI puts it ({"type": "json_object", "schema": ...}) would leave its schema unenforced.
  refuse_unknown_fields(v, "type json_schema", "response_format", "response_format.");
  ResponseFormat f;
  const auto type = v.find("type");
  if (type == v.end()) missing_field("response_format.type");
  f.type = need_string(*type, "response_format.type");
  if (f.type != "json_schema" && v.contains("json_schema")) {
    invalid_field("response_format.json_schema", "given with type '" + f.type + "': a schema needs type json_schema");
  }
  if (f.type == "json_schema") {
    const auto js = v.find("json_schema");
    require_object(v, js, "response_format.json_schema");
    refuse_unknown_fields(*js, "name schema strict description", "response_format.json_schema",
                          "response_format.json_schema.");
    // name is required, as OpenAI has it (a format without one is refused there too), and held to OpenAI's rule.
    const auto name = js->find("name");
    if (name == js->end()) missing_field("response_format.json_schema.name");
    f.name = need_string(*name, "response_format.json_schema.name");
    check_name(f.name, "a response format name", "response_format.json_schema.name");
    // A description is the model's guide to the format in OpenAI's API. Here the schema itself is not shown to
    // the model either: the answer is held to it while it decodes. So a description (a string, or null) is
    // taken as the clients send it (LangChain sends a schema's) and changes nothing, as documented.
    if (const auto d = js->find("description"); d != js->end() && !d->is_null()) {
      need_string(*d, "response_format.json_schema.description");
    }
    if (js->contains("strict") && !(*js)["strict"].is_null()) {
      f.strict = need_bool((*js)["strict"], "response_format.json_schema.strict");
    }
    const auto schema = js->find("schema");
    if (schema == js->end()) missing_field("response_format.json_schema.schema");
    // A JSON Schema is an object or a boolean (true: any value; false, which no value meets, is refused where
    // the schema is compiled, naming it).
    if (!schema->is_object() && !schema->is_boolean()) {
      wrong_type("response_format.json_schema.schema", "an object or a boolean", *schema);
    }
    f.schema_json = schema->dump();
  } else if (f.type != "text" && f.type != "json_object") {
    invalid_value("response_format.type", "'" + f.type + "' is not one of text, json_object, json_schema");
  }
  return f;
}

}  // namespace orbit::serve::chat_wire
