// ChatTemplate: builds the template's variables from messages and options and runs the interpreter
// (runtime/src/jinja).
#include "orbit/runtime/chat_template.h"

#include <nlohmann/json.hpp>

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
};

namespace {

Value from_json(const ordered_json& j) {
  switch (j.type()) {
    case ordered_json::value_t::null: return Value::none();
    case ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case ordered_json::value_t::number_integer:
    case ordered_json::value_t::number_unsigned: return Value::integer(j.get<int64_t>());
    case ordered_json::value_t::number_float: {
      const double d = j.get<double>();
      return d == static_cast<double>(static_cast<int64_t>(d)) ? Value::integer(static_cast<int64_t>(d))
                                                               : Value::floating(d);
    }
    case ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case ordered_json::value_t::array: {
      jinja::List items;
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::of_list(std::move(items));
    }
    case ordered_json::value_t::object: {
      Value d = Value::of_dict({});
      for (auto it = j.begin(); it != j.end(); ++it) d.put(it.key(), from_json(it.value()));
      return d;
    }
    default: return Value();
  }
}

ordered_json parse(const std::string& text, const std::string& what) {
  try {
    return ordered_json::parse(text);
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
  return render_json(list.dump(), options);
}

std::string ChatTemplate::render_json(const std::string& messages_json, const ChatRenderOptions& options) const {
  const ordered_json messages = parse(messages_json, origin_ + ": the messages");
  ORBIT_CHECK(messages.is_array(), origin_ << ": the messages must be a JSON array");
  for (std::size_t k = 0; k < messages.size(); ++k) {
    const auto& m = messages[k];
    ORBIT_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
                origin_ << ": message " << k << " has no role (a string)");
  }
  jinja::Dict vars;
  vars.emplace_back("messages", from_json(messages));
  vars.emplace_back("add_generation_prompt", Value::boolean(options.add_generation_prompt));
  vars.emplace_back("bos_token", Value::string(impl_->bos));
  vars.emplace_back("eos_token", Value::string(impl_->eos));
  if (!options.tools_json.empty()) {
    const ordered_json tools = parse(options.tools_json, origin_ + ": the tools");
    ORBIT_CHECK(tools.is_array(), origin_ << ": the tools must be a JSON array");
    vars.emplace_back("tools", from_json(tools));
  }
  if (!options.extra_json.empty()) {
    const ordered_json extra = parse(options.extra_json, origin_ + ": the extra variables");
    ORBIT_CHECK(extra.is_object(), origin_ << ": the extra variables must be a JSON object");
    for (auto it = extra.begin(); it != extra.end(); ++it) vars.emplace_back(it.key(), from_json(it.value()));
  }
  return jinja::render(impl_->program, vars, origin_);
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
