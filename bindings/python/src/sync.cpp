// Messages (orbit/sync.h): Window.sync / plan_sync, Engine.render_chat / tokenize_chat / has_chat_template, and
// the SyncAction, SyncUnit, SyncPlan and SyncReport types. A message list is what a chat API takes: dicts with
// "role" and "content" (a str, None, or a list of parts: {"type": "text", "text": ...}, and chunks registered
// with the engine as {"type": "chunk", "chunk": ChunkRef} or the ChunkRef itself), and optionally "name",
// "tool_call_id", "tool_calls" (OpenAI's [{"id", "type": "function", "function": {"name", "arguments"}}],
// arguments a JSON string or a dict) and "reasoning_content" (a str: an earlier turn's thinking, which
// reasoning models' templates render).
#include <pybind11/stl.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "answer.h"
#include "bindings.h"
#include "convert.h"
#include "enums.h"
#include "field_repr.h"
#include "py_window.h"

namespace orbit_py {

namespace {

using orbit::ChatMessage;
using orbit::ChatOptions;
using orbit::ChatToolCall;
using orbit::ChunkRef;
using orbit::ContentPart;
using orbit::Engine;
using orbit::SyncAction;
using orbit::SyncOptions;
using orbit::SyncPlan;
using orbit::SyncReport;
using orbit::SyncUnit;
using orbit::Window;

std::string where(std::size_t i, const char* field) {
  return "messages[" + std::to_string(i) + "]" + (field[0] != '\0' ? std::string(".") + field : "");
}

// A str field of a message dict (None and absent: nullopt).
std::optional<std::string> str_field(const py::dict& d, const char* key, std::size_t i) {
  if (!d.contains(key) || d[key].is_none()) return std::nullopt;
  const py::object v = d[key];
  if (!py::isinstance<py::str>(v)) throw py::type_error(where(i, key) + ": expected a str, got " + type_name(v));
  return utf8_arg(v, where(i, key));
}

std::string part_where(std::size_t i, std::size_t j) { return where(i, "content") + "[" + std::to_string(j) + "]"; }

// One content part: {"type": "text", "text": str}, {"type": "chunk", "chunk": ChunkRef} or a ChunkRef.
ContentPart part_of(const py::handle part, std::size_t i, std::size_t j) {
  if (py::isinstance<ChunkRef>(part)) return ContentPart::of_chunk(part.cast<ChunkRef>());
  if (!py::isinstance<py::dict>(part)) {
    throw py::type_error(part_where(i, j) +
                         ": expected a part dict ({'type': 'text', 'text': str} or {'type': "
                         "'chunk', 'chunk': ChunkRef}) or a ChunkRef, got a " +
                         type_name(part));
  }
  const py::dict p = py::reinterpret_borrow<py::dict>(part);
  if (!p.contains("type")) throw py::value_error(part_where(i, j) + ".type is missing ('text' or 'chunk')");
  if (!py::isinstance<py::str>(p["type"])) {
    throw py::type_error(part_where(i, j) + ".type: expected 'text' or 'chunk', got a " + type_name(p["type"]));
  }
  const std::string type = p["type"].cast<std::string>();
  if (type == "text") {
    if (!p.contains("text")) throw py::value_error(part_where(i, j) + ".text: a text part needs 'text' (a str)");
    if (!py::isinstance<py::str>(p["text"])) {
      throw py::type_error(part_where(i, j) + ".text: a text part needs 'text' (a str), got a " + type_name(p["text"]));
    }
    return ContentPart::of_text(utf8_arg(p["text"], part_where(i, j) + ".text"));
  }
  if (type == "chunk") {
    if (!p.contains("chunk") || !py::isinstance<ChunkRef>(p["chunk"])) {
      throw py::type_error(part_where(i, j) +
                           ".chunk: a chunk part needs 'chunk' (a ChunkRef from engine.add_tokens, "
                           "add_text or add_embeddings)" +
                           (p.contains("chunk") ? ", got a " + type_name(p["chunk"]) : ""));
    }
    return ContentPart::of_chunk(p["chunk"].cast<ChunkRef>());
  }
  throw py::value_error(part_where(i, j) + ".type: unknown part type " + std::string(py::repr(p["type"])) +
                        " (parts are 'text' and 'chunk'; an image: register its embeddings with engine.add_embeddings "
                        "and pass the ChunkRef as a chunk part)");
}

// A message's content: a str (or None) into `content`; a list of parts into `parts`, or into `content` when
// every part is text.
// A content of None, or none at all, is "" to the template (ContentForm::kText), as orbit serve reads OpenAI's
// null: message dicts dumped from the openai client carry None on every turn of calls alone, and templates such
// as Qwen3's cannot take None (they add the content to a string).
void content_of(const py::dict& d, std::size_t i, ChatMessage& msg) {
  if (!d.contains("content") || d["content"].is_none()) return;
  const py::object c = d["content"];
  if (py::isinstance<py::str>(c)) {
    msg.content = utf8_arg(c, where(i, "content"));
    return;
  }
  if (!py::isinstance<py::list>(c) && !py::isinstance<py::tuple>(c)) {
    throw py::type_error(where(i, "content") + ": expected a str, None or a list of parts, got " + type_name(c));
  }
  std::size_t j = 0;
  for (const py::handle part : c) msg.parts.push_back(part_of(part, i, j++));
  if (std::none_of(msg.parts.begin(), msg.parts.end(), [](const ContentPart& p) { return p.chunk.has_value(); })) {
    for (const ContentPart& p : msg.parts) msg.content += p.text;
    msg.parts.clear();
  }
}

// Raises ValueError naming `at` + "." + the first key of `d` not among `known` (space-separated).
void refuse_unknown_call_keys(const py::dict& d, const std::string& known, const std::string& at) {
  for (const auto& [key, value] : d) {
    const std::string k = py::str(key).cast<std::string>();
    if ((" " + known + " ").find(" " + k + " ") == std::string::npos) {
      throw py::value_error(at + "." + k + ": unknown key (" + known + ")");
    }
  }
}

// messages[i].tool_calls[k]: OpenAI's {id, type, function: {name, arguments}} (index and
// function.parsed_arguments, which clients echo back from an answer, taken and unused, as orbit serve takes
// them) or the function's keys given flat ({id, name, arguments}). A key of neither is refused by name rather
// than dropped (a misspelt "argumnts" rendered the call with none); arguments are a str (as written) or a
// dict or list (their JSON text).
ChatToolCall tool_call_of(const py::handle call, const std::string& at) {
  if (!py::isinstance<py::dict>(call)) throw py::type_error(at + ": expected a dict, got a " + type_name(call));
  const py::dict c = py::reinterpret_borrow<py::dict>(call);
  const bool nested = c.contains("function");
  refuse_unknown_call_keys(c, nested ? "id type function index" : "id type name arguments index", at);
  if (c.contains("type") && !c["type"].is_none() &&
      (!py::isinstance<py::str>(c["type"]) || c["type"].cast<std::string>() != "function")) {
    throw py::value_error(at + ".type: only 'function' calls are read, got " + std::string(py::repr(c["type"])));
  }
  ChatToolCall t;
  if (c.contains("id") && !c["id"].is_none()) t.id = utf8_arg(py::str(c["id"]), at + ".id");
  const std::string fn_at = nested ? at + ".function" : at;
  if (nested && !py::isinstance<py::dict>(c["function"])) {
    throw py::type_error(fn_at + ": expected a dict with name and arguments, got a " + type_name(c["function"]));
  }
  const py::dict f = nested ? py::reinterpret_borrow<py::dict>(c["function"]) : c;
  if (nested) refuse_unknown_call_keys(f, "name arguments parsed_arguments", fn_at);
  if (!f.contains("name")) throw py::value_error(fn_at + ".name is missing");
  if (!py::isinstance<py::str>(f["name"])) {
    throw py::type_error(fn_at + ".name: expected a str, got a " + type_name(f["name"]));
  }
  t.name = utf8_arg(f["name"], fn_at + ".name");
  if (f.contains("arguments") && !f["arguments"].is_none()) {
    const py::object a = f["arguments"];
    if (py::isinstance<py::str>(a)) {
      t.arguments = utf8_arg(a, fn_at + ".arguments");
    } else if (py::isinstance<py::dict>(a) || py::isinstance<py::list>(a)) {
      t.arguments = json_text(a, fn_at + ".arguments");
    } else {
      throw py::type_error(fn_at + ".arguments: expected a str (JSON text) or a dict, got a " + type_name(a));
    }
  }
  return t;
}

std::vector<ChatToolCall> tool_calls_of(const py::dict& d, std::size_t i) {
  std::vector<ChatToolCall> out;
  if (!d.contains("tool_calls") || d["tool_calls"].is_none()) return out;
  const py::object calls = d["tool_calls"];
  // A list (or tuple) of calls: a call dict given alone was read key by key ("expected dicts, got a str").
  if (!py::isinstance<py::list>(calls) && !py::isinstance<py::tuple>(calls)) {
    throw py::type_error(where(i, "tool_calls") + ": expected a list of call dicts, got a " + type_name(calls));
  }
  std::size_t k = 0;
  for (const py::handle call : calls) {
    out.push_back(tool_call_of(call, where(i, "tool_calls") + "[" + std::to_string(k++) + "]"));
  }
  return out;
}

// A message dict's keys: the ones read into a ChatMessage, and those the openai client's message objects carry
// when dumped to a dict (message.model_dump(), .to_dict(): an answer appended as it came), taken while they
// hold nothing (None, an empty list) or, for `parsed`, the client's own parse of the content. Any other key,
// a misspelt "contnet" or a value the template would never see, is refused naming it: dropping it silently
// would sync a message other than the one given.
void refuse_unknown_message_keys(const py::dict& d, std::size_t i) {
  static const char* const kRead[] = {"role", "content", "name", "tool_call_id", "tool_calls", "reasoning_content"};
  static const char* const kEmptyOnly[] = {"refusal", "audio", "function_call", "annotations"};
  for (const auto& [key, value] : d) {
    if (!py::isinstance<py::str>(key)) {
      throw py::type_error(where(i, "") + ": keys must be str, got " +
                           type_name(py::reinterpret_borrow<py::object>(key)));
    }
    const std::string k = key.cast<std::string>();
    const auto is = [&k](const char* name) { return k == name; };
    if (std::any_of(std::begin(kRead), std::end(kRead), is) || k == "parsed") continue;
    if (std::any_of(std::begin(kEmptyOnly), std::end(kEmptyOnly), is)) {
      const bool empty = value.is_none() ||
                         ((py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) && py::len(value) == 0);
      if (empty) continue;
      throw py::value_error(where(i, k.c_str()) + ": taken only when None: the chat template is not given it" +
                            (k == "function_call" ? " (send the call in tool_calls)" : ""));
    }
    throw py::value_error(where(i, k.c_str()) +
                          ": unknown message key (a message has role, content, name, tool_call_id, tool_calls and "
                          "reasoning_content)");
  }
}

std::vector<ChatMessage> to_messages(const py::object& messages) {
  if (py::isinstance<py::str>(messages) || py::isinstance<py::dict>(messages) ||
      !py::isinstance<py::iterable>(messages)) {
    throw py::type_error("messages: expected a list of message dicts, got a " + type_name(messages));
  }
  std::vector<ChatMessage> out;
  std::size_t i = 0;
  for (const py::handle m : messages) {
    if (!py::isinstance<py::dict>(m)) {
      throw py::type_error(where(i, "") + ": expected a dict with 'role' and 'content', got a " + type_name(m));
    }
    const py::dict d = py::reinterpret_borrow<py::dict>(m);
    refuse_unknown_message_keys(d, i);
    ChatMessage msg;
    const std::optional<std::string> role = str_field(d, "role", i);
    if (!role) throw py::value_error(where(i, "role") + " is missing");
    if (role->empty()) throw py::value_error(where(i, "role") + " is empty");  // a message's shape, as a missing one
    msg.role = *role;
    content_of(d, i, msg);
    msg.name = str_field(d, "name", i);
    msg.tool_call_id = str_field(d, "tool_call_id", i);
    msg.reasoning_content = str_field(d, "reasoning_content", i);
    msg.tool_calls = tool_calls_of(d, i);
    out.push_back(std::move(msg));
    ++i;
  }
  return out;
}

// `tools` or `extra` (`name`) given as a str: JSON text of a list (`array`) or an object, checked here so that
// an error names the argument and the function called (`caller`) rather than the C++ option it becomes.
std::string json_argument(const py::object& value, const char* caller, const char* name, bool array) {
  const std::string text = utf8_arg(value, std::string(caller) + ": " + name);
  py::object parsed;
  try {
    parsed = py::module_::import("json").attr("loads")(value);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_ValueError) && !e.matches(PyExc_RecursionError)) throw;
    throw py::value_error(std::string(caller) + ": " + name +
                          " is not valid JSON: " + py::str(e.value()).cast<std::string>());
  }
  const bool fits = array ? py::isinstance<py::list>(parsed) : py::isinstance<py::dict>(parsed);
  if (!fits) {
    throw py::value_error(std::string(caller) + ": " + name + " must be a JSON " +
                          (array ? "array (a list of tool schemas)" : "object (a dict of template variables)") +
                          ", got JSON of type " + type_name(parsed));
  }
  return text;
}

ChatOptions chat_options(const py::object& chat_template, const py::object& tools, const py::object& extra,
                         const char* caller) {
  // An empty string would read as "none given" in ChatOptions: the model's template, no tools, no variables.
  const std::pair<const char*, const py::object*> texts[] = {
      {"chat_template", &chat_template}, {"tools", &tools}, {"extra", &extra}};
  for (const auto& [name, value] : texts) {
    if (py::isinstance<py::str>(*value) && py::len(*value) == 0) {
      throw py::value_error(std::string(caller) + ": " + name + " is an empty str (None: " +
                            (name == std::string("chat_template") ? "the model's template)" : "none)"));
    }
  }
  // Other types: a TypeError naming the argument, not a cast error or the C++ option's complaint.
  const auto refuse = [&](const char* name, const py::object& value, const char* expected) {
    throw py::type_error(std::string(caller) + ": " + name + " must be " + expected + " or None, got " +
                         type_name(value));
  };
  if (!chat_template.is_none() && !py::isinstance<py::str>(chat_template)) {
    refuse("chat_template", chat_template, "a str (a Jinja chat template)");
  }
  if (!tools.is_none() && !py::isinstance<py::str>(tools) && !py::isinstance<py::list>(tools) &&
      !py::isinstance<py::tuple>(tools)) {
    refuse("tools", tools, "a list of tool schemas (or its JSON text)");
  }
  if (!extra.is_none() && !py::isinstance<py::str>(extra) && !py::isinstance<py::dict>(extra)) {
    refuse("extra", extra, "a dict of template variables (or its JSON text)");
  }
  ChatOptions o;
  if (!chat_template.is_none()) o.chat_template = utf8_arg(chat_template, std::string(caller) + ": chat_template");
  if (!tools.is_none()) {
    o.tools_json = py::isinstance<py::str>(tools) ? json_argument(tools, caller, "tools", true)
                                                  : json_text(tools, std::string(caller) + ": tools");
    // The template reads each entry as a tool (a dict): anything else would be rendered as nonsense.
    const py::list entries = py::module_::import("json").attr("loads")(o.tools_json).cast<py::list>();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (!py::isinstance<py::dict>(entries[i])) {
        throw py::type_error(std::string(caller) + ": tools[" + std::to_string(i) + "] must be a tool dict, got " +
                             type_name(entries[i]));
      }
    }
    check_tool_entries(entries, caller);  // each named, as generate() checks them: a nameless tool renders as none
  }
  if (!extra.is_none()) {
    o.extra_json = py::isinstance<py::str>(extra) ? json_argument(extra, caller, "extra", false)
                                                  : json_text(extra, std::string(caller) + ": extra");
  }
  return o;
}

SyncOptions sync_options(int64_t chunk_min_tokens, const py::object& chat_template, const py::object& tools,
                         const py::object& extra, const char* caller) {
  if (chunk_min_tokens < 0) {
    throw py::value_error(std::string(caller) + ": chunk_min_tokens = " + std::to_string(chunk_min_tokens) +
                          " must be >= 0");
  }
  SyncOptions o;
  o.chunk_min_tokens = chunk_min_tokens;
  o.chat = chat_options(chat_template, tools, extra, caller);
  return o;
}

const char* kMessagesDoc =
    "messages: a list of dicts as a chat API takes them: 'role' and 'content' (a str, None, or a list of\n"
    "parts: {'type': 'text', 'text': ...}, or a chunk registered with this engine as {'type': 'chunk',\n"
    "'chunk': ChunkRef} or the ChunkRef itself, e.g. a screenshot from engine.add_embeddings: it stands in\n"
    "the window where the part sits, as its own chunk instance; render_chat and tokenize_chat refuse\n"
    "chunk parts), optionally 'name', 'tool_call_id', 'tool_calls' (OpenAI's form:\n"
    "[{'id', 'type': 'function', 'function': {'name', 'arguments': str or dict}}]) and 'reasoning_content' (a\n"
    "str: an earlier assistant turn's thinking, given to the template as message.reasoning_content, which\n"
    "reasoning models' templates such as Qwen3's render); any other key is a ValueError naming it, but for\n"
    "those the openai client's message objects dump (refusal, audio, function_call, annotations: taken when None\n"
    "or empty; parsed). A content of None (or none) is '' to the template, as orbit serve reads OpenAI's null\n"
    "(Qwen3's template, among others, cannot take None). chat_template: a Jinja chat\n"
    "template to use instead of the model's (None: the model's tokenizer_config.json, else the built-in plain\n"
    "one: 'role: content' lines); tools: a list of tool schemas (the template's `tools`); extra: a dict of\n"
    "further template variables (an empty str for any of the three is a ValueError: leave it None; tools and\n"
    "extra given as str must be JSON text of a list and of an object, else ValueError naming them).";

// Docstrings pybind11 keeps pointers to: built once, alive for the process.
const std::string kRenderDoc =
    std::string(
        "The messages rendered with the chat template, as transformers' apply_chat_template(messages,\n"
        "add_generation_prompt=...) renders them (a str). ") +
    kMessagesDoc;
const std::string kSyncDoc =
    std::string(
        "Brings the window to the chat-template rendering of messages (the full list a chat API would be\n"
        "sent): one unit per message where the tokens allow; units the window holds are kept (moved by one\n"
        "reorder when their order changed), instances no unit matches are evicted, chunks evicted earlier are\n"
        "recalled, new units are admitted as chunks (chunk_min_tokens tokens or more, anywhere but the tail, or\n"
        "content the engine holds as a chunk already, from any window) or added as turns. Every operation is planned "
        "and applied under the window's policy. Afterwards\n"
        "the window's tokens are engine.tokenize_chat(messages, False). Returns a SyncReport; pass\n"
        "report.generation_prompt to generate() for the next assistant turn. A sync the KV pool or the window's\n"
        "max_bytes cannot hold raises CapacityError (status 'out_of_capacity'), the window unchanged. ") +
    kMessagesDoc;

// Window.<name>(messages, *, chunk_min_tokens, chat_template, tools, extra): the list and options converted,
// then call(window, messages, options) under the window's lock (sync, plan_sync, prepare_sync). A chat
// template's error names the call as its other errors do (the SDK's "sync: ChatOptions::chat_template: line 1:
// ...", "sync: chat_template: ..." in Python's words).
template <class Call>
void def_with_messages(py::class_<PyWindow>& window, const char* name, Call call, const char* doc) {
  window.def(
      name,
      [call, name](PyWindow& w, const py::object& messages, const IntArg& chunk_min_tokens,
                   const py::object& chat_template, const py::object& tools, const py::object& extra) {
        const std::vector<ChatMessage> msgs = to_messages(messages);
        const int64_t min_tokens = chunk_min_tokens.get((std::string(name) + ": chunk_min_tokens").c_str());
        const SyncOptions o = sync_options(min_tokens, chat_template, tools, extra, name);
        const std::string what = std::string("Window.") + name;
        return w.run(what.c_str(), [&](Window& x) { return call(x, msgs, o); });
      },
      py::arg("messages"), py::kw_only(), py::arg("chunk_min_tokens") = SyncOptions{}.chunk_min_tokens,
      py::arg("chat_template") = py::none(), py::arg("tools") = py::none(), py::arg("extra") = py::none(), doc);
}

// Engine.<name>(messages, add_generation_prompt=True, *, chat_template, tools, extra): the list and options
// converted, then call(engine, messages, add_generation_prompt, options) without the GIL (render_chat,
// tokenize_chat); a chat template's error named as the call's (the SDK's "render_chat: ...").
template <class Call>
void def_chat(py::class_<Engine, std::shared_ptr<Engine>>& engine, const char* name, Call call, const char* doc) {
  engine.def(
      name,
      [call, name](const Engine& e, const py::object& messages, const BoolArg& prompt_arg,
                   const py::object& chat_template, const py::object& tools, const py::object& extra) {
        const bool add_generation_prompt = prompt_arg.get((std::string(name) + ": add_generation_prompt").c_str());
        const std::vector<ChatMessage> msgs = to_messages(messages);
        const ChatOptions o = chat_options(chat_template, tools, extra, name);
        const NativeCall release;
        return naming_closed(name, [&] { return call(e, msgs, add_generation_prompt, o); });
      },
      py::arg("messages"), py::arg("add_generation_prompt") = true, py::kw_only(),
      py::arg("chat_template") = py::none(), py::arg("tools") = py::none(), py::arg("extra") = py::none(), doc);
}

}  // namespace

namespace {

// SyncAction: the enum, its str() and .label.
void def_sync_action(py::module_& m) {
  py::enum_<SyncAction> action(m, "SyncAction", "What Window.sync does with one unit of the rendered messages.");
  action.value("keep", SyncAction::kKeep, "An instance holds it already (kept in place, or moved by the reorder).")
      .value("admit", SyncAction::kAdmit, "A new chunk admitted.")
      .value("recall", SyncAction::kRecall, "A chunk the window evicted earlier, recalled.")
      .value("turn", SyncAction::kTurn, "A live turn added at the tail.");
  refuse_unknown_values(action);
  // As the other enums (types.cpp): str() and .label are the C++ name.
  action.attr("__str__") =
      py::cpp_function([](SyncAction a) { return std::string(orbit::sync_action_name(a)); }, py::name("__str__"),
                       py::is_method(action), "The C++ name (as SyncPlan.describe() prints it).");
  action.def_property_readonly(
      "label", [](SyncAction a) { return std::string(orbit::sync_action_name(a)); },
      "The C++ name (as SyncPlan.describe() prints it), e.g. 'recall'.");
}

// SyncUnit: one unit of the rendered messages.
void def_sync_unit(py::module_& m) {
  py::class_<SyncUnit>(m, "SyncUnit",
                       "One unit of the rendering: messages [first_message, end_message) and their tokens (read-only).")
      .def_readonly("first_message", &SyncUnit::first_message, "Index of its first message.")
      .def_readonly("end_message", &SyncUnit::end_message, "One past its last message.")
      .def_readonly("position", &SyncUnit::position, "Its first token's position in the window after sync.")
      .def_readonly("tokens", &SyncUnit::tokens,
                    "Its tokens (a slice of SyncPlan.tokens; an embedding chunk part's rows are -1).")
      .def_readonly("key", &SyncUnit::key,
                    "Content key of the tokens (a chunk's key; a turn's content key; a chunk part: its chunk's).")
      .def_property_readonly(
          "chunk", [](const SyncUnit& u) -> py::object { return u.chunk.valid() ? py::cast(u.chunk) : py::none(); },
          "A chunk part: its ChunkRef (messages[first_message]['content'][part]); None for text.")
      .def_readonly("part", &SyncUnit::part, "A chunk part: its index in the message's content list; -1 for text.")
      .def_readonly("is_turn", &SyncUnit::is_turn, "True when a live turn holds it, False for a chunk.")
      .def_readonly("action", &SyncUnit::action, "SyncAction.")
      .def_readonly("moved", &SyncUnit::moved, "keep: the reorder moved it.")
      .def_readonly("instance", &SyncUnit::instance, "The instance holding it (after sync; 0 in a plan for new units).")
      .def("__repr__", [](const SyncUnit& u) {
        std::ostringstream o;
        o << "SyncUnit(messages=[" << u.first_message << ", " << u.end_message << "), action='"
          << orbit::sync_action_name(u.action) << "', "
          << (u.is_turn         ? "turn"
              : u.chunk.valid() ? "chunk part"
                                : "chunk")
          << ", tokens=" << u.tokens.size() << ", instance=" << u.instance << ")";
        return o.str();
      });
}

// SyncPlan and SyncReport: what sync will do, and what it did.
void def_sync_plan_and_report(py::module_& m) {
  py::class_<SyncPlan>(m, "SyncPlan", "What Window.sync will do (Window.plan_sync), or did (SyncReport.plan).")
      .def_readonly("units", &SyncPlan::units, "list[SyncUnit]: the window after sync, in order.")
      .def_readonly("evict", &SyncPlan::evict, "Instance ids evicted, in window order.")
      .def_readonly("reorder", &SyncPlan::reorder, "The kept instances change order (one reorder).")
      .def_readonly("tokens", &SyncPlan::tokens,
                    "The window's tokens after sync: tokenize(render(messages)), chunk parts in place (an embedding\n"
                    "chunk's rows as -1).")
      .def_readonly("generation_prompt", &SyncPlan::generation_prompt,
                    "Tokens the template adds with add_generation_prompt (generate()'s query).")
      .def_readonly("generation_prompt_exact", &SyncPlan::generation_prompt_exact,
                    "tokens + generation_prompt == tokenize(render(messages, add_generation_prompt=True)).")
      .def_readonly("merged_boundaries", &SyncPlan::merged_boundaries,
                    "Message boundaries no unit boundary could follow (the messages share a unit).")
      .def_readonly("chat_template", &SyncPlan::chat_template,
                    "Which template rendered it: 'model', 'options' (chat_template=) or 'plain'.")
      .def(
          "count",
          [](const SyncPlan& p, const TypedArg<SyncAction>& action) {
            return p.count(action.get("SyncPlan.count: action"));
          },
          py::arg("action"), "Units with this SyncAction (TypeError naming action for another type).")
      .def("changes", &SyncPlan::changes, "False when the window holds the rendering already.")
      .def("describe", &SyncPlan::describe, "One line per unit and eviction.")
      .def("__repr__", [](const SyncPlan& p) {
        std::ostringstream o;
        o << "SyncPlan(units=" << p.units.size() << ", tokens=" << p.tokens.size()
          << ", keep=" << p.count(SyncAction::kKeep) << ", admit=" << p.count(SyncAction::kAdmit)
          << ", recall=" << p.count(SyncAction::kRecall) << ", turn=" << p.count(SyncAction::kTurn)
          << ", evict=" << p.evict.size() << ", reorder=" << (p.reorder ? "True" : "False") << ")";
        return o.str();
      });

  py::class_<SyncReport>(m, "SyncReport", "What Window.sync did: its plan, the window operations and their reports.")
      .def_readonly("plan", &SyncReport::plan, "The SyncPlan (its units carry their instance ids).")
      .def_readonly("plans", &SyncReport::plans, "list[Plan]: every window operation applied, in order.")
      .def_readonly("reports", &SyncReport::reports, "list[ApplyReport]: their reports, one per plan.")
      .def_readonly("forward_tokens", &SyncReport::forward_tokens,
                    "Critical-path token-forwards of the operations (repairs deferred to the next read count there).")
      .def_readonly("generation_prompt", &SyncReport::generation_prompt,
                    "generate()'s query for the next assistant turn (the template's generation prompt).")
      .def("__repr__", &fields_repr);
}

// SyncAction, SyncUnit, SyncPlan and SyncReport.
void def_sync_types(py::module_& m) {
  def_sync_action(m);
  def_sync_unit(m);
  def_sync_plan_and_report(m);
}

// the chat methods on Engine and Window.
void def_sync_methods(py::module_& m) {
  auto engine = py::reinterpret_borrow<py::class_<Engine, std::shared_ptr<Engine>>>(m.attr("Engine"));
  engine.def_property_readonly(
      "has_chat_template",
      [](const Engine& e) { return naming_closed("has_chat_template", [&] { return e.has_chat_template(); }); },
      "True when the model has a chat template (tokenizer_config.json of its Hugging Face directory).");
  def_chat(
      engine, "render_chat",
      [](const Engine& e, const std::vector<ChatMessage>& msgs, bool add_generation_prompt, const ChatOptions& o) {
        return e.render_chat(msgs, add_generation_prompt, o);
      },
      kRenderDoc.c_str());
  def_chat(
      engine, "tokenize_chat",
      [](const Engine& e, const std::vector<ChatMessage>& msgs, bool add_generation_prompt, const ChatOptions& o) {
        return e.tokenize_chat(msgs, add_generation_prompt, o);
      },
      "tokenize(render_chat(...)) with no special tokens added (templates write their own): what Window.sync\n"
      "puts in a window (with add_generation_prompt=False).");

  auto window = py::reinterpret_borrow<py::class_<PyWindow>>(m.attr("Window"));
  def_with_messages(
      window, "sync", [](Window& x, const std::vector<ChatMessage>& m, const SyncOptions& o) { return x.sync(m, o); },
      kSyncDoc.c_str());
  def_with_messages(
      window, "plan_sync",
      [](Window& x, const std::vector<ChatMessage>& m, const SyncOptions& o) { return x.plan_sync(m, o); },
      "What sync(messages, ...) would do, as a SyncPlan; nothing changes.");
  def_with_messages(
      window, "prepare_sync",
      [](Window& x, const std::vector<ChatMessage>& m, const SyncOptions& o) { return x.prepare_sync(m, o); },
      "In idle time (a tool runs), prepares the list the agent expects to sync next (the current one with the\n"
      "drops its rules will make when the tool returns): synced in a throwaway fork under `prefix`, each\n"
      "forward's KV stored for exact reuse, so a later sync whose list starts the same way serves those\n"
      "instances with no forward and no error. The window is not changed. Returns an IdleReport\n"
      "(prepare_forward_tokens, instances_prepared: background work). Raises OrbitError as sync() does\n"
      "for a list it cannot render or place; does nothing while repairs are deferred or without exact reuse.\n"
      "While the window trusts the agent's hints (Policy.trust_hints), the learned lists and moves that are\n"
      "this list and one message more are prepared too (only that message forwarded): the next sync reads\n"
      "its head, which the message the tool returns starts with too (IdleReport.hints_trusted, moves_prepared).");
}

}  // namespace

void init_sync(py::module_& m) {
  def_sync_types(m);
  def_sync_methods(m);
}

}  // namespace orbit_py
