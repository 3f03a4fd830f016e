// Renders a parsed chat template with a set of global variables (messages, tools, bos_token ...).
#pragma once

#include <string>

#include "src/jinja/ast.h"
#include "src/jinja/value.h"

namespace orbit::runtime::jinja {

// Throws orbit::Error naming `origin` and the line: raise_exception(), an unknown filter, test or
// method, an operation the types do not support, or a limit of limits.h exceeded (the output past
// kMaxStringBytes, loops past kMaxIterations, work past kMaxWorkBytes, a value nested past kMaxNesting).
// `globals` nest at most kMaxNesting - 1 deep (Value::depth). strftime_now formats `clock.now` and records
// its calls in `clock.reads`.
std::string render(const Block& program, const Dict& globals, const std::string& origin, const RenderClock& clock);

// What strftime(format) gives at `now` in local time (at most 255 bytes; longer gives ""): strftime_now's text.
std::string format_time(const std::string& format, int64_t now);

// Built-ins (builtins.cpp). `at` names the template and line in error messages ("template.jinja: line
// 3") and carries the rendering's budget, which each built-in charges for what it builds or scans.
Value apply_filter(const std::string& name, const Value& input, const List& args, const Dict& kwargs, const Site& at);
bool apply_test(const std::string& name, const Value& input, const List& args, const Site& at);
// A method of a string, list or dict (s.strip, d.items ...), bound to its receiver; undefined when absent
// (as an unknown attribute is in @huggingface/jinja; calling it is then refused, naming it).
Value method(const Value& receiver, const std::string& name, const Site& at);
// The globals every template sees: raise_exception, namespace, range, strftime_now.
void add_builtin_globals(Dict& globals);

}  // namespace orbit::runtime::jinja
