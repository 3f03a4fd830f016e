// ChatTemplate: builds the template's variables from messages and options and runs the interpreter
// (runtime/src/jinja).
#include "orbit/runtime/chat_template.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"
#include "orbit/common/sha256.h"
#include "src/jinja/ast.h"
#include "src/jinja/interpreter.h"

namespace orbit::runtime {

namespace fs = std::filesystem;
using jinja::Value;
using nlohmann::ordered_json;

struct ChatTemplate::Impl {
  jinja::Block program;
  std::string bos, eos;

  // The variables of a rendering but for messages and add_generation_prompt: bos_token, eos_token, the
  // options' tools and extra variables (parsed, checked and named in errors as render names them).
  jinja::Dict variables(const std::string& origin, const ChatRenderOptions& options) const;
  // `messages` (a list, at most kMaxJsonDepth deep but for the few levels a ChatMessage adds around its tool
  // calls' arguments) rendered with the options' variables.
  std::string render(const std::string& origin, const Value& messages, const ChatRenderOptions& options) const;
  // `messages` (whose roles are checked) rendered with `variables` (from variables()).
  std::string render_with(const std::string& origin, Value messages, bool add_generation_prompt,
                          const jinja::Dict& variables, const jinja::RenderClock& clock) const;
};

struct PreparedChat::Impl {
  std::vector<Value> messages;  // message_value of each
  jinja::Dict variables;        // ChatTemplate::Impl::variables
  std::time_t now = 0;          // ChatRenderOptions::now, else template_clock() when prepared
};

std::size_t PreparedChat::size() const { return impl_ ? impl_->messages.size() : 0; }
std::time_t PreparedChat::now() const { return impl_ ? impl_->now : template_clock(); }

namespace {

std::atomic<bool> clock_set{false};  // set_template_clock
std::atomic<int64_t> clock_time{0};  // its time, where clock_set

}  // namespace

std::string format_time(const std::string& format, std::time_t now) { return jinja::format_time(format, now); }

bool clock_reads_hold(const ClockReads& reads, std::time_t now) {
  return std::all_of(reads.begin(), reads.end(), [&](const auto& r) { return format_time(r.first, now) == r.second; });
}

std::time_t template_clock() {
  if (clock_set.load(std::memory_order_acquire)) return static_cast<std::time_t>(clock_time.load());
  return std::time(nullptr);
}

void set_template_clock(std::optional<std::time_t> now) {
  if (now) clock_time.store(static_cast<int64_t>(*now));
  clock_set.store(now.has_value(), std::memory_order_release);
}

namespace {

// JSON text read straight into the template's values (nlohmann's SAX events), with bounded nesting as
// parse_json_input (orbit/common/json_input.h) reads every untrusted document, objects' keys in the order
// written (the template sees it: tojson, items(); a repeated key keeps its first place and its last value).
// A number is what JavaScript's JSON.parse gives @huggingface/jinja: a whole number is an integer (1.0 too),
// anything else a float; but an integer too long for int64 stays exact as text: a float whose literal (Value::s)
// is printed and written by tojson as is, as Python's Jinja keeps such integers, where JavaScript would round.
class ValueReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit ValueReader(const std::string& what) : what_(what) {}
  Value take() { return std::move(result_); }

  bool null() override { return add(Value::none()); }
  bool boolean(bool b) override { return add(Value::boolean(b)); }
  bool number_integer(number_integer_t i) override { return add(Value::integer(i)); }
  bool number_unsigned(number_unsigned_t u) override {
    if (u <= static_cast<uint64_t>(INT64_MAX)) return add(Value::integer(static_cast<int64_t>(u)));
    return add(literal(static_cast<double>(u), std::to_string(u)));
  }
  bool number_float(number_float_t d, const string_t& text) override {
    // json reads an integer literal as a float only when no 64-bit integer holds it.
    const bool integer = text.find_first_not_of("-0123456789") == std::string::npos;
    if (integer) return add(literal(d, text));
    const bool whole = d >= -0x1p63 && d < 0x1p63 && std::trunc(d) == d;
    return add(whole ? Value::integer(static_cast<int64_t>(d)) : Value::floating(d));
  }
  bool string(string_t& text) override { return add(Value::string(std::move(text))); }
  bool binary(binary_t&) override { return false; }  // not in JSON text
  bool start_object(std::size_t) override { return open(true); }
  bool key(string_t& k) override {
    stack_.back().key = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    ORBIT_FAIL(what_ << " is not valid JSON: " << e.what());
  }

 private:
  struct Open {
    bool object;
    jinja::List items;
    jinja::Dict fields;
    std::string key;
  };

  static Value literal(double d, std::string text) {
    Value v = Value::floating(d);
    v.s = std::move(text);
    return v;
  }
  bool open(bool object) {
    if (stack_.size() >= static_cast<std::size_t>(kMaxJsonDepth)) {
      ORBIT_FAIL(what_ << ": JSON nests deeper than " << kMaxJsonDepth << " levels (arrays and objects)");
    }
    stack_.push_back(Open{object, {}, {}, {}});
    return true;
  }
  bool close() {
    Open done = std::move(stack_.back());
    stack_.pop_back();
    return add(done.object ? Value::of_dict(std::move(done.fields)) : Value::of_list(std::move(done.items)));
  }
  bool add(Value v) {
    if (stack_.empty()) {
      result_ = std::move(v);
      return true;
    }
    Open& o = stack_.back();
    if (!o.object) {
      o.items.push_back(std::move(v));
      return true;
    }
    const auto same = std::find_if(o.fields.begin(), o.fields.end(), [&](const auto& kv) { return kv.first == o.key; });
    if (same != o.fields.end()) {
      same->second = std::move(v);
    } else {
      o.fields.emplace_back(std::move(o.key), std::move(v));
    }
    return true;
  }

  const std::string& what_;
  std::vector<Open> stack_;
  Value result_;
};

// `text` as the template's value; throws orbit::Error naming `what` when it is not JSON or nests too deeply.
Value parse_value(const std::string& text, const std::string& what) {
  ValueReader reader(what);
  nlohmann::json::sax_parse(text, &reader);
  return reader.take();
}

// A tokenizer_config.json, with bounded nesting as parse_json_input (orbit/common/json_input.h) reads every
// untrusted document, keeping the objects' key order.
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

// A call's arguments as templates see them: the JSON value they spell, or, where they are not JSON (a call cut
// by max_tokens, sent back as it was answered), their text as a string, as Hugging Face's templates take
// arguments given as a string. JSON nested too deeply is refused, naming `what`.
Value arguments_value(const std::string& text, const std::string& what) {
  if (!nlohmann::json::accept(text)) return Value::string(text);
  return parse_value(text, what);
}

Value message_value(const ChatMessage& m, std::size_t index, const std::string& origin) {
  ORBIT_CHECK(!m.role.empty(), origin << ": message " << index << " has no role");
  ORBIT_CHECK(m.content_form == ContentForm::kText || m.content.empty(),
              origin << ": message " << index << " has content text and content_form "
                     << content_form_name(m.content_form) << " (text goes with kText only)");
  jinja::Dict fields{{"role", Value::string(m.role)}};
  if (m.content_form != ContentForm::kAbsent) {
    fields.emplace_back("content", m.content_form == ContentForm::kNull ? Value::none() : Value::string(m.content));
  }
  if (m.reasoning_content) fields.emplace_back("reasoning_content", Value::string(*m.reasoning_content));
  if (m.name) fields.emplace_back("name", Value::string(*m.name));
  if (m.tool_call_id) fields.emplace_back("tool_call_id", Value::string(*m.tool_call_id));
  if (!m.tool_calls.empty()) {
    jinja::List calls;
    for (const ChatToolCall& c : m.tool_calls) {
      const std::string what = "message " + std::to_string(index) + ": arguments of tool call '" + c.name + "'";
      jinja::Dict function{{"name", Value::string(c.name)}, {"arguments", arguments_value(c.arguments, what)}};
      calls.push_back(Value::of_dict({{"id", Value::string(c.id)},
                                      {"type", Value::string("function")},
                                      {"function", Value::of_dict(std::move(function))}}));
    }
    fields.emplace_back("tool_calls", Value::of_list(std::move(calls)));
  }
  return Value::of_dict(std::move(fields));
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string origin, std::string bos_token, std::string eos_token)
    : impl_(std::make_unique<Impl>()), origin_(std::move(origin)) {
  impl_->program = jinja::parse(source, origin_);
  Sha256 key;
  key.update("orbit chat template v1").update_u64(source.size()).update(source);
  key.update_u64(bos_token.size()).update(bos_token).update_u64(eos_token.size()).update(eos_token);
  key_ = key.hex_digest();
  // strftime_now is the one global that reads anything but the variables; a template can only reach it by
  // name, so a source that never spells it cannot call it.
  deterministic_ = source.find("strftime_now") == std::string::npos;
  impl_->bos = std::move(bos_token);
  impl_->eos = std::move(eos_token);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  jinja::List list;
  for (std::size_t k = 0; k < messages.size(); ++k) list.push_back(message_value(messages[k], k, origin_));
  return impl_->render(origin_, Value::of_list(std::move(list)), options);
}

PreparedChat ChatTemplate::prepare(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  auto impl = std::make_shared<PreparedChat::Impl>();
  impl->messages.reserve(messages.size());
  for (std::size_t k = 0; k < messages.size(); ++k) impl->messages.push_back(message_value(messages[k], k, origin_));
  impl->variables = impl_->variables(origin_, options);
  impl->now = options.now ? *options.now : template_clock();
  PreparedChat out;
  out.impl_ = std::move(impl);
  return out;
}

std::string ChatTemplate::render_prefix(const PreparedChat& chat, std::size_t count, bool add_generation_prompt,
                                        ClockReads* reads) const {
  ORBIT_CHECK(count <= chat.size(),
              origin_ << ": render_prefix: count " << count << " is past the list's " << chat.size() << " messages");
  const jinja::RenderClock clock{chat.now(), reads};
  if (!chat.impl_)
    return impl_->render_with(origin_, Value::of_list({}), add_generation_prompt, impl_->variables(origin_, {}), clock);
  const std::vector<Value>& all = chat.impl_->messages;
  jinja::List prefix(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(count));
  return impl_->render_with(origin_, Value::of_list(std::move(prefix)), add_generation_prompt, chat.impl_->variables,
                            clock);
}

std::string ChatTemplate::render_json(const std::string& messages_json, const ChatRenderOptions& options) const {
  return impl_->render(origin_, parse_value(messages_json, origin_ + ": the messages"), options);
}

jinja::Dict ChatTemplate::Impl::variables(const std::string& origin, const ChatRenderOptions& options) const {
  jinja::Dict vars;
  vars.emplace_back("bos_token", Value::string(bos));
  vars.emplace_back("eos_token", Value::string(eos));
  if (!options.tools_json.empty()) {
    const std::string what = options.tools_name.empty() ? origin + ": tools_json" : options.tools_name;
    Value tools = parse_value(options.tools_json, what);
    ORBIT_CHECK(tools.is(Value::Kind::kList), what << " must be a JSON array (of tool schemas)");
    vars.emplace_back("tools", std::move(tools));
  }
  if (!options.extra_json.empty()) {
    const std::string what = options.extra_name.empty() ? origin + ": extra_json" : options.extra_name;
    const Value extra = parse_value(options.extra_json, what);
    ORBIT_CHECK(extra.is(Value::Kind::kDict), what << " must be a JSON object (of template variables)");
    for (const auto& entry : *extra.dict) {
      // A named reference, not a structured binding: lambdas may not capture bindings in C++17 (clang refuses).
      const std::string& name = entry.first;
      const Value& value = entry.second;
      // As Hugging Face's apply_chat_template: the rendering's own arguments are refused (Python raises "got
      // multiple values"), the special tokens replaced (its template kwargs update them).
      ORBIT_CHECK(name != "messages" && name != "add_generation_prompt" && name != "tools",
                  what << ": '" << name << "' is the rendering's own variable, not an extra one (give "
                       << (name == "tools"      ? "tools"
                           : name == "messages" ? "the messages"
                                                : "add_generation_prompt")
                       << " as such)");
      const auto own = std::find_if(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
      if (own != vars.end()) {
        own->second = value;
      } else {
        vars.emplace_back(name, value);
      }
    }
  }
  return vars;
}

std::string ChatTemplate::Impl::render(const std::string& origin, const Value& messages,
                                       const ChatRenderOptions& options) const {
  ORBIT_CHECK(messages.is(Value::Kind::kList), origin << ": the messages must be a JSON array");
  for (std::size_t k = 0; k < messages.list->size(); ++k) {
    const Value& m = (*messages.list)[k];
    const Value* role = m.is(Value::Kind::kDict) ? m.find("role") : nullptr;
    ORBIT_CHECK(role != nullptr && role->is(Value::Kind::kString),
                origin << ": message " << k << " has no role (a string)");
  }
  return render_with(origin, messages, options.add_generation_prompt, variables(origin, options),
                     jinja::RenderClock{options.now ? *options.now : template_clock(), nullptr});
}

std::string ChatTemplate::Impl::render_with(const std::string& origin, Value messages, bool add_generation_prompt,
                                            const jinja::Dict& variables, const jinja::RenderClock& clock) const {
  // The order templates have always seen: messages, add_generation_prompt, bos_token, eos_token, tools, extra.
  jinja::Dict vars;
  vars.reserve(variables.size() + 2);
  vars.emplace_back("messages", std::move(messages));
  vars.emplace_back("add_generation_prompt", Value::boolean(add_generation_prompt));
  vars.insert(vars.end(), variables.begin(), variables.end());
  return jinja::render(program, vars, origin, clock);
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
