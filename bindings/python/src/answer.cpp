// Tool calls and JSON answers from Python: orbit.parse_tool_calls, Engine.tool_call_format, and the answer
// part of Window.generate (tools, tool_choice, response_format): the constraint the answer is decoded under
// (orbit/constraint.h) and the calls or JSON read back from it (orbit/tool_calls.h).
#include <pybind11/stl.h>

#include <string>
#include <unordered_map>

#include "answer.h"
#include "bindings.h"
#include "convert.h"
#include "orbit/answer_calls.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/tool_calls.h"

namespace orbit_py {

namespace {

using orbit::Constraint;
using orbit::ToolCallFormat;

// OpenAI's shape, ready to go back into a message list: {"id", "type": "function", "function": {"name",
// "arguments" (JSON text)}}.
py::list calls_list(const std::vector<orbit::ChatToolCall>& calls) {
  py::list out;
  for (const orbit::ChatToolCall& c : calls) {
    py::dict fn;
    fn["name"] = c.name;
    fn["arguments"] = c.arguments;
    py::dict call;
    call["id"] = c.id;
    call["type"] = "function";
    call["function"] = fn;
    out.append(call);
  }
  return out;
}

// response_format is None, a str or a dict (checked before its JSON text is made for the cache key).
void check_response_format_type(const py::object& format) {
  if (format.is_none() || py::isinstance<py::str>(format) || py::isinstance<py::dict>(format)) return;
  throw py::type_error("generate: response_format must be a str, a dict or None, got " + type_name(format));
}

// The JSON Schema a response_format names, or "" for any object: "json_object", {"type": "json_object"},
// {"type": "json_schema", "json_schema": {"schema": {...}}}, or a schema dict itself.
std::optional<std::string> response_schema(const py::object& format) {
  if (py::isinstance<py::str>(format)) {
    const std::string f = utf8_arg(format, "generate: response_format");
    if (f == "text") return std::nullopt;
    ORBIT_CHECK(f == "json_object", "generate: response_format = '"
                                        << f
                                        << "' is not 'text' or 'json_object' (or a "
                                           "{'type': 'json_schema', ...} dict, or a schema)");
    return std::string();
  }
  check_response_format_type(format);
  const py::dict d = format.cast<py::dict>();
  if (!d.contains("type") || !py::isinstance<py::str>(d["type"]))
    return json_text(d, "generate: response_format");  // a schema
  const std::string type = d["type"].cast<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return std::string();
  if (type == "json_schema") {
    if (!d.contains("json_schema") || !py::isinstance<py::dict>(d["json_schema"])) {
      throw py::value_error(
          "generate: response_format.json_schema is missing or not a dict ({'name': ..., 'schema': {...}})");
    }
    const py::dict js = d["json_schema"].cast<py::dict>();
    ORBIT_CHECK(js.contains("schema"), "generate: response_format.json_schema.schema is missing");
    return json_text(js["schema"], "generate: response_format['json_schema']['schema']");
  }
  return json_text(d, "generate: response_format");  // a schema whose own "type" is a JSON type
}

// Why the engine's model cannot write an answer `c` accepts, or "" (also without a tokenizer: generate then
// refuses the constraint itself): orbit::unwritable over its vocabulary, within the bytes its context holds.
std::string unwritable_here(const PyWindow& w, const std::shared_ptr<const Constraint>& c) {
  if (!w.engine->has_tokenizer()) return "";
  const std::shared_ptr<const orbit::TokenVocabulary> vocabulary = orbit::token_vocabulary(*w.engine);
  return orbit::unwritable(c, *vocabulary, w.engine->model_info().max_positions * vocabulary->max_token_bytes());
}

// The arguments answer_spec reads, as one string.
std::string spec_key(const py::object& tools, const py::object& tool_choice, const py::object& response_format,
                     const py::object& tool_call_format) {
  const auto text = [](const py::object& o, const char* name) -> std::string {
    if (o.is_none()) return "-";
    const std::string what = std::string("generate: ") + name;
    return py::isinstance<py::str>(o) ? "s" + utf8_arg(o, what) : "j" + json_text(o, what);
  };
  return text(tools, "tools") + "\n" + text(tool_choice, "tool_choice") + "\n" +
         text(response_format, "response_format") + "\n" + text(tool_call_format, "tool_call_format");
}

// generate's tool_choice: None (OpenAI's absent one: "auto"), "auto", "none", "required" or a tool's name, or
// OpenAI's {"type": "function", "function": {"name": ...}}. The choice, and whether it names a tool (a dict
// does even when the tool is called "auto").
struct ToolChoice {
  std::string choice;
  bool named = false;
};

ToolChoice to_tool_choice(const py::object& tool_choice) {
  if (tool_choice.is_none()) return {"auto", false};
  if (py::isinstance<py::str>(tool_choice)) {
    std::string choice = utf8_arg(tool_choice, "generate: tool_choice");
    const bool named = choice != "auto" && choice != "none" && choice != "required";
    return {std::move(choice), named};
  }
  if (!py::isinstance<py::dict>(tool_choice)) {
    throw py::type_error(
        "generate: tool_choice must be 'auto', 'none', 'required', a tool's name, {'type': 'function', "
        "'function': {'name': ...}} or None, got " +
        type_name(tool_choice));
  }
  const py::dict d = tool_choice.cast<py::dict>();
  if (d.contains("type") && !(py::isinstance<py::str>(d["type"]) && d["type"].cast<std::string>() == "function")) {
    throw py::value_error("generate: tool_choice.type = " + py::repr(d["type"]).cast<std::string>() +
                          ": only 'function' is accepted");
  }
  if (!d.contains("function") || !py::isinstance<py::dict>(d["function"])) {
    throw py::value_error("generate: tool_choice.function is missing or not a dict ({'name': ...})");
  }
  const py::dict fn = d["function"].cast<py::dict>();
  if (!fn.contains("name") || !py::isinstance<py::str>(fn["name"])) {
    throw py::value_error("generate: tool_choice.function.name is missing or not a str");
  }
  return {fn["name"].cast<std::string>(), true};
}

}  // namespace

// Each entry of `tools` (a list) is a tool: a dict, OpenAI's {"type": "function", "function": {"name", ...}} or
// the function itself, named by a non-empty str. Checked whatever tool_choice is: under "auto" a schema outside
// the constraints' subset leaves the answer free, but an entry that is no tool at all is a mistake, never
// rendered or decoded as if it were one.
// Returns the tools' names, in order.
std::vector<std::string> check_tool_entries(const py::list& tools, const std::string& caller) {
  std::vector<std::string> names;
  std::unordered_map<std::string, std::size_t> index;  // each name's tool
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string at = caller + ": tools[" + std::to_string(i) + "]";
    const py::handle tool = tools[i];
    if (!py::isinstance<py::dict>(tool)) {
      throw py::type_error(at + ": expected a tool dict ({'type': 'function', 'function': {'name': ...}}), got " +
                           type_name(tool));
    }
    const py::dict d = py::reinterpret_borrow<py::dict>(tool);
    const bool wrapped = d.contains("function");
    const py::object fn = wrapped ? py::object(d["function"]) : py::object(d);
    const std::string fn_at = wrapped ? at + ".function" : at;
    if (!py::isinstance<py::dict>(fn)) throw py::type_error(fn_at + ": expected a dict, got " + type_name(fn));
    const py::dict f = py::reinterpret_borrow<py::dict>(fn);
    if (!f.contains("name") || !py::isinstance<py::str>(f["name"]) || f["name"].cast<std::string>().empty()) {
      throw py::value_error(fn_at + ".name: expected a non-empty str (the tool's name)");
    }
    names.push_back(utf8_arg(f["name"], fn_at + ".name"));
    // As orbit serve refuses them: two tools of one name are one the model cannot tell apart (and under
    // tool_choice "auto" their calls would be read under neither's schema).
    const auto [first, added] = index.emplace(names.back(), i);
    if (!added) {
      throw py::value_error(fn_at + ".name: '" + names.back() + "' is also the name of tools[" +
                            std::to_string(first->second) + "] (tool names must be unique)");
    }
  }
  return names;
}

namespace {

// A constraint compiled without the GIL: a schema's compile may take a second, and holds no other Python thread.
template <class F>
auto without_gil(F&& compile) {
  const NativeCall release;
  return compile();
}

// A tool_choice naming a tool names one of `names`. A string names a tool or a mode, so its error lists both.
void check_named_tool(const std::string& choice, const std::vector<std::string>& names, bool from_string) {
  std::string listed;
  for (const std::string& n : names) {
    if (n == choice) return;
    listed += (listed.empty() ? "" : ", ") + n;
  }
  // ValueError, as tool_choice's other bad values raise: the argument names no tool it was given.
  throw py::value_error("generate: tool_choice: '" + choice + "' is not among the tools (" + listed + ")" +
                        (from_string ? " nor one of 'auto', 'none', 'required'" : ""));
}

// generate's tools as JSON text (a.tools_json), checked to be an array of tool dicts; their names, in order.
std::vector<std::string> read_tools(const py::object& tools, AnswerSpec& a) {
  if (!tools.is_none())
    a.tools_json =
        py::isinstance<py::str>(tools) ? utf8_arg(tools, "generate: tools") : json_text(tools, "generate: tools");
  ORBIT_CHECK(tools.is_none() || !a.tools_json.empty(), "generate: tools = '' is not a JSON array (None: no tools)");
  if (py::isinstance<py::str>(tools)) {  // a list is JSON by construction; text must be a JSON array
    bool array = false;
    try {
      array = py::isinstance<py::list>(json_module().attr("loads")(tools));
    } catch (const py::error_already_set&) {
    }
    ORBIT_CHECK(array, "generate: tools is not a JSON array of tools: " << a.tools_json.substr(0, 60));
  }
  std::vector<std::string> names;
  if (!tools.is_none()) {
    const py::object parsed = json_module().attr("loads")(a.tools_json);
    if (!py::isinstance<py::list>(parsed)) {
      throw py::type_error("generate: tools must be a list of tool dicts (or its JSON text), got " + type_name(tools));
    }
    names = check_tool_entries(parsed.cast<py::list>(), "generate");
  }
  return names;
}

AnswerSpec build_spec(const PyWindow& w, const py::object& tools, const py::object& tool_choice,
                      const py::object& response_format, const py::object& tool_call_format) {
  AnswerSpec a;
  const std::vector<std::string> names = read_tools(tools, a);
  a.tool_names = names;
  // A value no call takes is refused as such first; then arguments that do not go together raise ValueError,
  // as tool_choice's malformed values do.
  a.format = tool_call_format.is_none()
                 ? w.engine->tool_call_format()
                 : orbit::parse_tool_call_format(tool_call_format.cast<std::string>(), "generate: tool_call_format");
  if (!tool_call_format.is_none() && a.tools_json.empty()) {
    throw py::value_error("generate: tool_call_format = " + py::str(tool_call_format).cast<std::string>() +
                          " needs tools (it says how the answer's calls are read)");
  }
  const auto [choice, named] = to_tool_choice(tool_choice);
  if (a.tools_json.empty() && named && py::isinstance<py::str>(tool_choice)) {
    throw py::value_error("generate: tool_choice: '" + choice +
                          "' is not one of 'auto', 'none', 'required' (and no tools were given for it to name)");
  }
  if (a.tools_json.empty() && (named || (choice != "auto" && choice != "none"))) {
    throw py::value_error("generate: tool_choice = '" + choice + "' needs tools");
  }
  if (named && !a.tools_json.empty()) check_named_tool(choice, names, py::isinstance<py::str>(tool_choice));
  a.read_calls = !a.tools_json.empty() && (named || choice != "none");
  if (!tool_call_format.is_none() && !a.read_calls) {
    throw py::value_error("generate: tool_call_format = " + py::str(tool_call_format).cast<std::string>() +
                          " says how calls are read, and tool_choice = 'none' reads none");
  }
  if (!a.tools_json.empty() && (named || (choice != "auto" && choice != "none"))) {
    // A forced call is the whole answer: a response_format (checked first, as on its own) would shape no text.
    if (!response_format.is_none() && response_schema(response_format)) {
      throw py::value_error("generate: response_format shapes a text answer, and tool_choice = '" + choice +
                            "' makes the answer a call; leave one out (tool_choice 'auto' lets the model call or "
                            "answer in that format)");
    }
    const std::string only = named ? choice : "";
    try {
      a.constraint =
          without_gil([&] { return Constraint::tool_calls(a.tools_json, orbit::tool_call_options(a.format, only)); });
    } catch (const orbit::Error& e) {  // "tools[1].name: ...": named by the call, as response_format's are
      ORBIT_FAIL("generate: " << e.what());
    }
    a.forced_call = true;
    a.grammar_names = named ? std::vector<std::string>{choice} : names;
    const std::string why = unwritable_here(w, a.constraint);
    ORBIT_CHECK(why.empty(), "generate: tool_choice = '" << choice << "': the call cannot be written: " << why);
    return a;
  }
  if (!a.tools_json.empty() && !named && choice == "auto" && response_format.is_none() && w.engine->has_tokenizer() &&
      !orbit::tool_call_trigger(a.format).empty()) {
    // The model may answer in text or call; a call it starts is decoded under the tools' grammar. Schemas
    // outside the constraints' subset leave the answer free (nothing was asked to be enforced).
    try {
      a.constraint =
          without_gil([&] { return Constraint::tool_calls(a.tools_json, orbit::tool_call_options(a.format)); });
      a.trigger = orbit::tool_call_trigger(a.format);
    } catch (const orbit::Error&) {
      a.constraint = nullptr;
    }
    if (a.constraint && !unwritable_here(w, a.constraint).empty()) {  // a started call could not finish
      a.constraint = nullptr;
      a.trigger.clear();
    }
    if (a.constraint) a.grammar_names = names;
    return a;
  }
  if (!response_format.is_none()) {
    const std::optional<std::string> schema = response_schema(response_format);
    if (schema) {
      a.constraint = schema->empty() ? Constraint::json_object() : without_gil([&] {
        return Constraint::json_schema(*schema, {}, "generate: response_format");
      });
      a.read_json = true;
      const std::string why = unwritable_here(w, a.constraint);
      ORBIT_CHECK(why.empty(), "generate: response_format: the answer cannot be written: " << why);
    }
  }
  if (a.read_json && !a.tools_json.empty() && !named && choice == "auto") {
    // Tools and a structured final answer (an agent's turn): a call or the JSON, from the first byte. Schemas
    // outside the constraints' subset leave the JSON alone (nothing was asked of the tools).
    try {
      const auto calls =
          without_gil([&] { return Constraint::tool_calls(a.tools_json, orbit::tool_call_options(a.format)); });
      if (unwritable_here(w, calls).empty()) {
        a.constraint = Constraint::choice({calls, a.constraint});
        // Past the call mark only the calls go on; a format without one (Llama 3's bare objects) may be
        // writing the JSON where it looks like a call, so its calls are read as free text (as orbit serve's).
        if (!orbit::tool_call_trigger(a.format).empty()) {
          a.calls_or_json = true;
          a.grammar_names = names;
        }
      }
    } catch (const orbit::Error&) {
    }
  }
  return a;
}

}  // namespace

// answer_spec's results are kept in the engine's constraint cache (Engine::constraint_cache), by the arguments:
// compiling the tools' grammar or the schema, checking that the vocabulary spells it and warming its token
// masks cost milliseconds a call (about 6 ms for a tool of three fields on stories260K; zod's hostname
// pattern alone takes about 140 ms to compile), and an agent loop sends the same arguments every step.
// Refusals are not kept: they throw again; nor are calls without tools or response_format (free text). The
// build reads its arguments with the GIL held and compiles without it; no cache lock is taken.
AnswerSpec answer_spec(const PyWindow& w, const py::object& tools, const py::object& tool_choice,
                       const py::object& response_format, const py::object& tool_call_format) {
  if (tools.is_none() && response_format.is_none()) {  // free text: nothing to compile, nothing kept
    return build_spec(w, tools, tool_choice, response_format, tool_call_format);
  }
  check_response_format_type(response_format);
  const std::string key = "python generate\n" + spec_key(tools, tool_choice, response_format, tool_call_format);
  return w.engine->constraint_cache().remembered<AnswerSpec>(key, [&] {
    AnswerSpec a = build_spec(w, tools, tool_choice, response_format, tool_call_format);
    const std::size_t other = sizeof(AnswerSpec) + a.tools_json.capacity() + a.trigger.capacity();
    return orbit::Remembered<AnswerSpec>{a, a.constraint, other};
  });
}

void read_answer(const AnswerSpec& a, py::object& generation) {
  std::string text = generation.attr("text").cast<std::string>();
  generation.attr("tool_calls") = py::list();
  generation.attr("content") = text;
  generation.attr("json") = py::none();
  generation.attr("tool_call_cut") = false;
  if (a.read_calls) {
    const std::string stop = generation.attr("stop_reason").cast<std::string>();
    const bool ran_out = stop == "max_tokens" || stop == "position_limit";
    orbit::AnswerCallsOptions how;
    how.format = a.format;
    how.forced = a.forced_call;
    how.calls_or_json = a.calls_or_json;
    how.names = a.grammar_names;
    how.tools = a.tool_names;
    const orbit::AnswerCalls r = orbit::read_answer_calls(text, ran_out, how);
    generation.attr("tool_calls") = calls_list(r.read.calls);
    generation.attr("content") = r.read.content;
    generation.attr("tool_call_cut") = r.read.cut;
  }
  if (a.read_json && py::len(generation.attr("tool_calls")) == 0) {  // a call is no JSON answer
    try {
      generation.attr("json") = json_module().attr("loads")(text);
    } catch (const py::error_already_set&) {
      generation.attr("json") = py::none();  // cut by max_tokens: the text says where
    }
  }
}

void init_answer(py::module_& m) {
  using orbit::ConstraintCacheStats;
  py::class_<ConstraintCacheStats>(m, "ConstraintCacheStats",
                                   "The engine's cache of compiled constraints (EngineStats.constraint_cache).")
      .def_readonly("entries", &ConstraintCacheStats::entries, "Constraints kept.")
      .def_readonly("bytes", &ConstraintCacheStats::bytes,
                    "Bytes they hold (grammars and token masks, recounted now; past max_bytes the least recently "
                    "used are dropped first).")
      .def_readonly("hits", &ConstraintCacheStats::hits, "Lookups answered without compiling.")
      .def_readonly("misses", &ConstraintCacheStats::misses, "Lookups that compiled (refusals included).")
      .def_readonly("max_entries", &ConstraintCacheStats::max_entries, "Entries kept at most (64).")
      .def_readonly("max_bytes", &ConstraintCacheStats::max_bytes, "Bytes kept at most (256 MiB).")
      .def("__repr__", [](const ConstraintCacheStats& s) {
        return "ConstraintCacheStats(entries=" + std::to_string(s.entries) + ", bytes=" + std::to_string(s.bytes) +
               ", hits=" + std::to_string(s.hits) + ", misses=" + std::to_string(s.misses) + ")";
      });
  auto engine = py::reinterpret_borrow<py::class_<orbit::Engine, std::shared_ptr<orbit::Engine>>>(m.attr("Engine"));
  engine.def(
      "tool_call_format",
      [](const orbit::Engine& e, const py::object& chat_template) {
        orbit::ChatOptions o;
        if (!chat_template.is_none()) {
          if (!py::isinstance<py::str>(chat_template)) {
            throw py::type_error("tool_call_format: chat_template: expected a str or None, got " +
                                 type_name(chat_template));
          }
          o.chat_template = utf8_arg(chat_template, "tool_call_format: chat_template");
        }
        const NativeCall release;
        return naming_closed("tool_call_format",
                             [&] { return std::string(orbit::tool_call_format_name(e.tool_call_format(o))); });
      },
      py::kw_only(), py::arg("chat_template") = py::none(),
      "The format the chat template in use (the model's, chat_template, else the built-in one) writes tool calls\n"
      "in: 'hermes', 'llama3' or 'mistral' (read off how it renders an assistant message holding a call).");
  m.def(
      "parse_tool_calls",
      [](const StrArg& text, const StrArg& format, const BoolArg& cut_arg) {
        const bool cut = cut_arg.get("parse_tool_calls: cut");
        const orbit::ToolCallParse r = orbit::parse_tool_calls(
            text.get("parse_tool_calls: text"),
            orbit::parse_tool_call_format(format.get("parse_tool_calls: format"), "parse_tool_calls: format"),
            cut ? orbit::CutToolCall::kCall : orbit::CutToolCall::kContent);
        py::dict out;
        out["content"] = r.content;
        out["tool_calls"] = calls_list(r.calls);
        out["malformed"] = r.malformed;
        out["cut"] = r.cut;
        return out;
      },
      py::arg("text"), py::arg("format") = "hermes", py::kw_only(), py::arg("cut") = false,
      "The tool calls in a model's text written in `format` ('hermes': <tool_call>{json}</tool_call>; 'llama3':\n"
      "the answer a JSON call; 'mistral': [TOOL_CALLS] [...]): {'content': the text that is not a call,\n"
      "'tool_calls': [{'id', 'type': 'function', 'function': {'name', 'arguments'}}], 'malformed': something\n"
      "started like a call but was not one (left in content), 'cut': the last call is cut short}. With\n"
      "cut=True (for a text max_tokens ended), a call the text ends inside is the last of 'tool_calls', as far\n"
      "as it was written (its arguments not valid JSON), as OpenAI returns one; else it stays content.");
}

}  // namespace orbit_py
