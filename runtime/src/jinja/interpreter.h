// Renders a parsed chat template with a set of global variables (messages, tools, bos_token ...).
#pragma once

#include <string>

#include "src/jinja/ast.h"
#include "src/jinja/value.h"

namespace orbit::runtime::jinja {

// Throws orbit::Error naming `origin` and the line: raise_exception(), an unknown filter, test or
// method, an operation the types do not support.
std::string render(const Block& program, const Dict& globals, const std::string& origin);

// Built-ins (builtins.cpp). `where` prefixes error messages ("template.jinja: line 3").
Value apply_filter(const std::string& name, const Value& input, const List& args, const Dict& kwargs,
                   const std::string& where);
bool apply_test(const std::string& name, const Value& input, const List& args, const std::string& where);
// A method of a string, list or dict (s.strip, d.items ...), bound to its receiver; undefined when absent
// (as an unknown attribute is in @huggingface/jinja; calling it is then refused, naming it).
Value method(const Value& receiver, const std::string& name, const std::string& where);
// The globals every template sees: raise_exception, namespace, range, strftime_now.
void add_builtin_globals(Dict& globals, const std::string& where);

}  // namespace orbit::runtime::jinja
