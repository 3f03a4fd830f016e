// ChatTemplate: builds the template's variables from messages and options and runs the interpreter
// (runtime/src/jinja).
#include "orbit/runtime/chat_template.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"
#include "src/jinja/ast.h"
#include "src/jinja/interpreter.h"

namespace orbit::runtime {

namespace fs = std::filesystem;
using jinja::Value;
using nlohmann::ordered_json;

struct ChatTemplate::Impl {
  jinja::Block program;
  std::string bos, eos;

  // `messages` (a JSON array, at most kMaxJsonDepth deep but for the few levels a ChatMessage adds around
  // its tool calls' arguments) rendered with the options' variables.
  std::string render(const std::string& origin, const ordered_json& messages, const ChatRenderOptions& options) const;
};

namespace {

// A JSON number as JavaScript's JSON.parse gives it to @huggingface/jinja: a whole number is an integer
// (1.0 too), anything else a float. Whole numbers outside int64's range stay floats: converting them would
// be undefined.
Value number(const ordered_json& j) {
  if (j.is_number_integer() && !j.is_number_unsigned()) return Value::integer(j.get<int64_t>());
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                 : Value::floating(static_cast<double>(u));
  }
  const double d = j.get<double>();
  const bool whole = d >= -0x1p63 && d < 0x1p63 && std::trunc(d) == d;
  return whole ? Value::integer(static_cast<int64_t>(d)) : Value::floating(d);
}

// Recurses once per level: `j` comes from parse() (at most kMaxJsonDepth deep).
Value from_json(const ordered_json& j) {
  switch (j.type()) {
    case ordered_json::value_t::null: return Value::none();
    case ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case ordered_json::value_t::number_integer:
    case ordered_json::value_t::number_unsigned:
    case ordered_json::value_t::number_float: return number(j);
    case ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case ordered_json::value_t::array: {
      jinja::List items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::of_list(std::move(items));
    }
    case ordered_json::value_t::object: {
      jinja::Dict fields;  // a parsed object's keys are unique
      fields.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) fields.emplace_back(it.key(), from_json(it.value()));
      return Value::of_dict(std::move(fields));
    }
    default: return Value();
  }
}

// Outside JSON, with bounded nesting as parse_json_input (orbit/common/json_input.h) reads every untrusted
// document, but keeping the objects' key order (the template sees it: tojson, items()).
ordered_json parse(const std::string& text, const std::string& what) {
  auto bounded = [&](int depth, ordered_json::parse_event_t event, ordered_json&) {
    using Event = ordered_json::parse_event_t;
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMaxJsonDepth) {
      ORBIT_FAIL(what << ": JSON nests deeper than " << kMaxJsonDepth << " levels (arrays and objects)");
    }
    return true;
  };
  try {
    return ordered_json::parse(text, bounded);
  } catch (const nlohmann::json::exception& e) {
    ORBIT_FAIL(what << " is not valid JSON: " << e.what());
  }
}

ordered_json message_json(const ChatMessage& m, std::size_t index, const std::string& origin) {
  ORBIT_CHECK(!m.role.empty(), origin << ": message " << index << " has no role");
  ordered_json j = {{"role", m.role}, {"content", m.content}};
  if (m.name) j["name"] = *m.name;
  if (m.tool_call_id) j["tool_call_id"] = *m.tool_call_id;
  if (!m.tool_calls.empty()) {
    ordered_json calls = ordered_json::array();
    for (const ChatToolCall& c : m.tool_calls) {
      const std::string what = "message " + std::to_string(index) + ": arguments of tool call '" + c.name + "'";
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", parse(c.arguments, what)}}}});
    }
    j["tool_calls"] = std::move(calls);
  }
  return j;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string origin, std::string bos_token, std::string eos_token)
    : impl_(std::make_unique<Impl>()), origin_(std::move(origin)) {
  impl_->program = jinja::parse(source, origin_);
  impl_->bos = std::move(bos_token);
  impl_->eos = std::move(eos_token);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  ordered_json list = ordered_json::array();
  for (std::size_t k = 0; k < messages.size(); ++k) list.push_back(message_json(messages[k], k, origin_));
  return impl_->render(origin_, list, options);
}

std::string ChatTemplate::render_json(const std::string& messages_json, const ChatRenderOptions& options) const {
  const ordered_json messages = parse(messages_json, origin_ + ": the messages");
  return impl_->render(origin_, messages, options);
}

std::string ChatTemplate::Impl::render(const std::string& origin, const ordered_json& messages,
                                       const ChatRenderOptions& options) const {
  ORBIT_CHECK(messages.is_array(), origin << ": the messages must be a JSON array");
  for (std::size_t k = 0; k < messages.size(); ++k) {
    const auto& m = messages[k];
    ORBIT_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
                origin << ": message " << k << " has no role (a string)");
  }
  jinja::Dict vars;
  vars.emplace_back("messages", from_json(messages));
  vars.emplace_back("add_generation_prompt", Value::boolean(options.add_generation_prompt));
  vars.emplace_back("bos_token", Value::string(bos));
  vars.emplace_back("eos_token", Value::string(eos));
  if (!options.tools_json.empty()) {
    const ordered_json tools = parse(options.tools_json, origin + ": the tools");
    ORBIT_CHECK(tools.is_array(), origin << ": the tools must be a JSON array");
    vars.emplace_back("tools", from_json(tools));
  }
  if (!options.extra_json.empty()) {
    const ordered_json extra = parse(options.extra_json, origin + ": the extra variables");
    ORBIT_CHECK(extra.is_object(), origin << ": the extra variables must be a JSON object");
    for (auto it = extra.begin(); it != extra.end(); ++it) vars.emplace_back(it.key(), from_json(it.value()));
  }
  return jinja::render(program, vars, origin);
}

namespace {

std::string token_text(const ordered_json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"];
  return "";
}

}  // namespace

std::optional<ChatTemplate> load_chat_template(const std::string& path) {
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "tokenizer_config.json" : fs::path(path);
  ORBIT_CHECK(fs::is_regular_file(file), file.string() << ": no such file (a chat template is read from "
                                                          "tokenizer_config.json)");
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const ordered_json config = parse(text.str(), file.string());
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template")) {
        source = entry["template"].get<std::string>();
      }
    }
    ORBIT_CHECK(!source.empty(), file.string() << ": chat_template is a list without a \"default\" entry");
  } else {
    ORBIT_FAIL(file.string() << ": chat_template must be a string or a list of {name, template}");
  }
  return ChatTemplate(source, file.string() + " (chat_template)", token_text(config, "bos_token"),
                      token_text(config, "eos_token"));
}

}  // namespace orbit::runtime
