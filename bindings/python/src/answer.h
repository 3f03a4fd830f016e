// The answer part of Window.generate (answer.cpp): what the answer is decoded under, and what is read back.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "orbit/constraint.h"
#include "orbit/tool_calls.h"
#include "py_window.h"

namespace orbit_py {

struct AnswerSpec {
  std::string tools_json;
  orbit::ToolCallFormat format = orbit::ToolCallFormat::kHermes;
  std::shared_ptr<const orbit::Constraint> constraint;  // null: free text
  std::string trigger;       // non-empty: the constraint applies from this text on (tool_choice "auto")
  bool read_calls = false;   // tools given and tool_choice not "none": calls are read from the text
  bool forced_call = false;  // tool_choice "required" or a tool's name: the text is a call from its first byte
  bool read_json = false;    // response_format asks for JSON: the text is parsed
  // A call or the JSON from the first byte (tools under "auto" beside a JSON response_format, the tools' grammar
  // had): orbit::AnswerCallsOptions::calls_or_json.
  bool calls_or_json = false;
  // The names the tools' grammar lets a call have (the named tool, else every tool's); empty where the calls are
  // free text. orbit::AnswerCallsOptions::names.
  std::vector<std::string> grammar_names;
  // Every tool's name, the calls free or not: orbit::AnswerCallsOptions::tools.
  std::vector<std::string> tool_names;
};

// Each entry of a tools list is a tool: a dict, OpenAI's {"type": "function", "function": {"name", ...}} or the
// function itself, named by a non-empty str. Returns the names, in order; throws TypeError / ValueError naming
// `caller: tools[i]...` (caller: "generate", "sync", ...).
std::vector<std::string> check_tool_entries(const py::list& tools, const std::string& caller);

// From generate()'s tools (list of OpenAI tools, or JSON text), tool_choice ("auto", "none", "required" or a
// tool's name), response_format ("text", "json_object", a {'type': 'json_schema', 'json_schema': {'schema'}}
// dict, or a schema dict) and tool_call_format (None: the engine's template's, Engine.tool_call_format()).
// Throws orbit::Error naming the argument.
AnswerSpec answer_spec(const PyWindow& w, const py::object& tools, const py::object& tool_choice,
                       const py::object& response_format, const py::object& tool_call_format);
// Sets generation.tool_calls (list), .content (str), .tool_call_cut and .json (the parsed value or None), as
// orbit serve answers them (orbit::read_answer_calls): an answer max_tokens (or the position limit) ended inside
// a call gives that call last, as far as it was written, its name settled (the one tool it can still become,
// else left out) and no half call markup left in the content.
void read_answer(const AnswerSpec& spec, py::object& generation);

}  // namespace orbit_py
