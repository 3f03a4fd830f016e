// Syntax tree of a chat template: statements hold expressions; every node keeps its source line for
// error messages. Built by parse() (parser.cpp), walked by the interpreter (interpreter.cpp).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/jinja/value.h"

namespace orbit::runtime::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kAttr,     // a.name
    kIndex,    // a[b]
    kSlice,    // a[b:c:d] (absent parts null)
    kCall,     // a(args, kwargs)
    kFilter,   // a | name(args, kwargs)
    kTest,     // a is [not] name(args)
    kBinary,   // a op b (name = op: + - * / // % ** ~ == != < > <= >= and or in "not in")
    kNot,      // not a
    kNegate,   // -a
    kTernary,  // b if a else c
    kList,     // [args]
    kDict      // {kwargs keys: args values}, keys as expressions in args pairs
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  int height = 1;  // 1 + the tallest operand's (a, b, c, d, args, kwargs); at most kMaxNesting
  Value value;
  std::string name;
  bool negated = false;
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Block = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // if expr: body else otherwise (elif nests an If in otherwise)
    kFor,     // for targets in expr [if cond]: body else otherwise
    kSet,     // set target = expr, or set target: body (block set); target may be ns.attr
    kBreak,
    kContinue
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  std::vector<std::string> targets;  // for: loop variables; set: name [, attribute]
  ExprPtr expr, cond;
  Block body, otherwise;
};

// Parses `source` (after the whitespace rules of HF's renderer: trim_blocks, lstrip_blocks, one trailing
// newline dropped). Throws orbit::Error naming `origin`, the line and what is unsupported or malformed, or
// where blocks and sub-expressions nest, or an expression is, deeper than kMaxNesting (limits.h). The
// tree's blocks nest, and its expressions are, at most kMaxNesting deep.
Block parse(const std::string& source, const std::string& origin);

}  // namespace orbit::runtime::jinja
