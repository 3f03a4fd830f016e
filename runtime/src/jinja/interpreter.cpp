// The tree-walking interpreter: scopes, statements and expressions. Filters, tests and methods are in
// builtins.cpp.
#include "src/jinja/interpreter.h"

#include <cmath>
#include <optional>

#include "orbit/common/error.h"

namespace orbit::runtime::jinja {

namespace {

// A variable scope; a for loop body gets its own (as in Jinja: assignments inside a loop do not leak),
// if blocks share their parent's.
struct Scope {
  Scope* parent = nullptr;
  Dict vars;
  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      for (const auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  explicit Interpreter(const std::string& origin) : origin_(origin) {}

  Flow block(const Block& b, Scope& scope, std::string& out) {
    for (const StmtPtr& s : b) {
      const Flow f = statement(*s, scope, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  std::string where(int line) const { return origin_ + ": line " + std::to_string(line); }
  [[noreturn]] void fail(int line, const std::string& what) const { ORBIT_FAIL(where(line) << ": " << what); }

  Flow statement(const Stmt& s, Scope& scope, std::string& out);
  Flow for_loop(const Stmt& s, Scope& scope, std::string& out);
  void set(const Stmt& s, Scope& scope);
  Value eval(const Expr& e, Scope& scope);
  Value binary(const Expr& e, Scope& scope);
  Value arithmetic(const Expr& e, const Value& a, const Value& b);
  Value index(const Expr& e, const Value& target, const Value& key);
  Value slice(const Expr& e, Scope& scope);
  Value call(const Expr& e, Scope& scope);
  void args(const Expr& e, Scope& scope, List& positional, Dict& keyword) {
    for (const ExprPtr& a : e.args) positional.push_back(eval(*a, scope));
    for (const auto& [k, a] : e.kwargs) keyword.emplace_back(k, eval(*a, scope));
  }

  const std::string& origin_;
};

Flow Interpreter::statement(const Stmt& s, Scope& scope, std::string& out) {
  switch (s.kind) {
    case Stmt::Kind::kText: out += s.text; return Flow::kNormal;
    case Stmt::Kind::kOutput: out += to_output(eval(*s.expr, scope)); return Flow::kNormal;
    case Stmt::Kind::kIf: return block(truthy(eval(*s.expr, scope)) ? s.body : s.otherwise, scope, out);
    case Stmt::Kind::kFor: return for_loop(s, scope, out);
    case Stmt::Kind::kSet: set(s, scope); return Flow::kNormal;
    case Stmt::Kind::kBreak: return Flow::kBreak;
    case Stmt::Kind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Interpreter::set(const Stmt& s, Scope& scope) {
  Value v;
  if (s.expr) {
    v = eval(*s.expr, scope);
  } else {
    std::string text;
    block(s.body, scope, text);
    v = Value::string(std::move(text));
  }
  if (s.targets.size() == 1) return scope.set(s.targets[0], std::move(v));
  const Value* ns = scope.lookup(s.targets[0]);
  if (ns == nullptr || !ns->is(Value::Kind::kNamespace)) {
    fail(s.line, "'set " + s.targets[0] + "." + s.targets[1] + "': '" + s.targets[0] + "' is not a namespace()");
  }
  const_cast<Value*>(ns)->put(s.targets[1], std::move(v));  // the namespace's dict is shared
}

Flow Interpreter::for_loop(const Stmt& s, Scope& scope, std::string& out) {
  const Value iterable = eval(*s.expr, scope);
  List items;
  if (iterable.is(Value::Kind::kList)) {
    items = *iterable.list;
  } else if (iterable.is_mapping()) {
    for (const auto& kv : *iterable.dict) items.push_back(Value::string(kv.first));
  } else if (iterable.is(Value::Kind::kString)) {
    for (char c : iterable.s) items.push_back(Value::string(std::string(1, c)));
  } else {
    fail(s.line, std::string("cannot iterate over a ") + kind_name(iterable.kind));
  }
  // Bind the loop variables of one item into `body`.
  auto bind = [&](Scope& body, const Value& item) {
    if (s.targets.size() == 1) return body.set(s.targets[0], item);
    if (!item.is(Value::Kind::kList) || item.list->size() != s.targets.size()) {
      fail(s.line, "cannot unpack a " + std::string(kind_name(item.kind)) + " into " +
                       std::to_string(s.targets.size()) + " loop variables");
    }
    for (std::size_t k = 0; k < s.targets.size(); ++k) body.set(s.targets[k], (*item.list)[k]);
  };
  if (s.cond) {  // for x in items if cond: filter first, so loop.* counts the kept items
    List kept;
    for (const Value& item : items) {
      Scope probe{&scope, {}};
      bind(probe, item);
      if (truthy(eval(*s.cond, probe))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return block(s.otherwise, scope, out);
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    Scope body{&scope, {}};
    Value loop = Value::of_dict({});
    loop.put("index", Value::integer(k + 1));
    loop.put("index0", Value::integer(k));
    loop.put("revindex", Value::integer(n - k));
    loop.put("revindex0", Value::integer(n - k - 1));
    loop.put("first", Value::boolean(k == 0));
    loop.put("last", Value::boolean(k == n - 1));
    loop.put("length", Value::integer(n));
    loop.put("previtem", k > 0 ? items[static_cast<std::size_t>(k - 1)] : Value());
    loop.put("nextitem", k + 1 < n ? items[static_cast<std::size_t>(k + 1)] : Value());
    body.set("loop", std::move(loop));
    bind(body, items[static_cast<std::size_t>(k)]);
    if (block(s.body, body, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Interpreter::eval(const Expr& e, Scope& scope) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.value;
    case Expr::Kind::kName: {
      const Value* v = scope.lookup(e.name);
      return v != nullptr ? *v : Value();
    }
    case Expr::Kind::kAttr: {
      const Value target = eval(*e.a, scope);
      if (target.is_mapping()) {
        const Value* v = target.find(e.name);
        if (v != nullptr) return *v;
      }
      if (target.is(Value::Kind::kUndefined) || target.is(Value::Kind::kNone)) {
        fail(e.line, "cannot read attribute '" + e.name + "' of " + kind_name(target.kind));
      }
      return method(target, e.name, where(e.line));
    }
    case Expr::Kind::kIndex: return index(e, eval(*e.a, scope), eval(*e.b, scope));
    case Expr::Kind::kSlice: return slice(e, scope);
    case Expr::Kind::kCall: return call(e, scope);
    case Expr::Kind::kFilter: {
      const Value input = eval(*e.a, scope);
      List pos;
      Dict kw;
      args(e, scope, pos, kw);
      return apply_filter(e.name, input, pos, kw, where(e.line));
    }
    case Expr::Kind::kTest: {
      const bool r = apply_test(e.name, eval(*e.a, scope), {}, where(e.line));
      return Value::boolean(e.negated ? !r : r);
    }
    case Expr::Kind::kBinary: return binary(e, scope);
    case Expr::Kind::kNot: return Value::boolean(!truthy(eval(*e.a, scope)));
    case Expr::Kind::kNegate: {
      const Value v = eval(*e.a, scope);
      if (v.is(Value::Kind::kInt)) return Value::integer(-v.i);
      if (v.is(Value::Kind::kFloat)) return Value::floating(-v.f);
      fail(e.line, std::string("cannot negate a ") + kind_name(v.kind));
    }
    case Expr::Kind::kTernary:
      if (truthy(eval(*e.a, scope))) return eval(*e.b, scope);
      return e.c ? eval(*e.c, scope) : Value();
    case Expr::Kind::kList: {
      List items;
      for (const ExprPtr& a : e.args) items.push_back(eval(*a, scope));
      return Value::of_list(std::move(items));
    }
    case Expr::Kind::kDict: {
      Value d = Value::of_dict({});
      for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
        const Value key = eval(*e.args[k], scope);
        if (!key.is(Value::Kind::kString)) fail(e.line, "dict literal keys must be strings");
        d.put(key.s, eval(*e.args[k + 1], scope));
      }
      return d;
    }
  }
  return Value();
}

Value Interpreter::call(const Expr& e, Scope& scope) {
  const Value callee = eval(*e.a, scope);
  if (!callee.is(Value::Kind::kFunction)) {
    std::string name = e.a->kind == Expr::Kind::kName || e.a->kind == Expr::Kind::kAttr ? e.a->name : "expression";
    if (e.a->kind == Expr::Kind::kAttr) {
      fail(e.line, "unsupported method '" + name + "' (" + kind_name(callee.kind) +
                       "; supported: strip, lstrip, rstrip, split, startswith, endswith, upper, lower, title, "
                       "capitalize, replace, items, keys, values, get)");
    }
    fail(e.line, "'" + name + "' is not a function (" + kind_name(callee.kind) + ")");
  }
  List pos;
  Dict kw;
  args(e, scope, pos, kw);
  return (*callee.fn)(pos, kw);
}

Value Interpreter::index(const Expr& e, const Value& target, const Value& key) {
  if (target.is(Value::Kind::kList) || target.is(Value::Kind::kString)) {
    if (!key.is(Value::Kind::kInt))
      fail(e.line, std::string("a list index must be an integer, got ") + kind_name(key.kind));
    const int64_t n = target.is(Value::Kind::kList) ? static_cast<int64_t>(target.list->size())
                                                    : static_cast<int64_t>(target.s.size());
    const int64_t k = key.i < 0 ? n + key.i : key.i;
    if (k < 0 || k >= n) return Value();
    if (target.is(Value::Kind::kList)) return (*target.list)[static_cast<std::size_t>(k)];
    return Value::string(std::string(1, target.s[static_cast<std::size_t>(k)]));
  }
  if (target.is_mapping()) {
    if (!key.is(Value::Kind::kString)) return Value();
    const Value* v = target.find(key.s);
    if (v != nullptr) return *v;
    return method(target, key.s, where(e.line));
  }
  fail(e.line, std::string("cannot index a ") + kind_name(target.kind));
}

Value Interpreter::slice(const Expr& e, Scope& scope) {
  const Value target = eval(*e.a, scope);
  auto part = [&](const ExprPtr& p, const char* what) -> std::optional<int64_t> {
    if (!p) return std::nullopt;
    const Value v = eval(*p, scope);
    if (v.is(Value::Kind::kUndefined) || v.is(Value::Kind::kNone)) return std::nullopt;
    if (!v.is(Value::Kind::kInt)) fail(e.line, std::string("slice ") + what + " must be an integer");
    return v.i;
  };
  const auto start = part(e.b, "start"), stop = part(e.c, "stop"), step_opt = part(e.d, "step");
  const int64_t step = step_opt.value_or(1);
  if (step == 0) fail(e.line, "slice step cannot be zero");
  const bool is_list = target.is(Value::Kind::kList);
  if (!is_list && !target.is(Value::Kind::kString))
    fail(e.line, std::string("cannot slice a ") + kind_name(target.kind));
  const int64_t n = is_list ? static_cast<int64_t>(target.list->size()) : static_cast<int64_t>(target.s.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback, int64_t lo, int64_t hi) {
    if (!v) return fallback;
    int64_t x = *v < 0 ? *v + n : *v;
    return x < lo ? lo : (x > hi ? hi : x);
  };
  List items;
  std::string text;
  if (step > 0) {
    const int64_t b = clamp(start, 0, 0, n), end = clamp(stop, n, 0, n);
    for (int64_t k = b; k < end; k += step) {
      if (is_list)
        items.push_back((*target.list)[static_cast<std::size_t>(k)]);
      else
        text += target.s[static_cast<std::size_t>(k)];
    }
  } else {
    const int64_t b = clamp(start, n - 1, -1, n - 1), end = clamp(stop, -1, -1, n - 1);
    for (int64_t k = b; k > end; k += step) {
      if (is_list)
        items.push_back((*target.list)[static_cast<std::size_t>(k)]);
      else
        text += target.s[static_cast<std::size_t>(k)];
    }
  }
  return is_list ? Value::of_list(std::move(items)) : Value::string(std::move(text));
}

Value Interpreter::binary(const Expr& e, Scope& scope) {
  const Value a = eval(*e.a, scope);
  if (e.name == "and") return truthy(a) ? eval(*e.b, scope) : a;
  if (e.name == "or") return truthy(a) ? a : eval(*e.b, scope);
  const Value b = eval(*e.b, scope);
  if (e.name == "==") return Value::boolean(equal(a, b));
  if (e.name == "!=") return Value::boolean(!equal(a, b));
  const bool in = e.name == "in" || e.name == "not in";
  if (in && b.is(Value::Kind::kUndefined)) return Value::boolean(e.name == "not in");
  if (a.is(Value::Kind::kUndefined) || b.is(Value::Kind::kUndefined)) {
    fail(e.line, "cannot apply '" + e.name + "' to an undefined value");
  }
  if (a.is(Value::Kind::kNone) || b.is(Value::Kind::kNone)) fail(e.line, "cannot apply '" + e.name + "' to none");
  if (e.name == "~") return Value::string(to_output(a) + to_output(b));
  if (in) {
    bool member = false;
    if (b.is(Value::Kind::kList)) {
      for (const Value& x : *b.list) member = member || equal(x, a);
    } else if (a.is(Value::Kind::kString) && b.is(Value::Kind::kString)) {
      member = b.s.find(a.s) != std::string::npos;
    } else if (a.is(Value::Kind::kString) && b.is_mapping()) {
      member = b.find(a.s) != nullptr;
    } else {
      fail(e.line, std::string("'in' between a ") + kind_name(a.kind) + " and a " + kind_name(b.kind));
    }
    return Value::boolean(e.name == "in" ? member : !member);
  }
  return arithmetic(e, a, b);
}

Value Interpreter::arithmetic(const Expr& e, const Value& a, const Value& b) {
  const std::string& op = e.name;
  if (a.is_number() && b.is_number()) {
    const bool fl = a.is(Value::Kind::kFloat) || b.is(Value::Kind::kFloat);
    const double x = a.number(), y = b.number();
    auto num = [&](double r) { return fl ? Value::floating(r) : Value::integer(static_cast<int64_t>(r)); };
    if (op == "+") return num(x + y);
    if (op == "-") return num(x - y);
    if (op == "*") return num(x * y);
    if (op == "/") return Value::floating(x / y);
    if (op == "//") return num(std::floor(x / y));
    if (op == "%") return num(std::fmod(x, y));
    if (op == "**") return num(std::pow(x, y));
    if (op == "<") return Value::boolean(x < y);
    if (op == ">") return Value::boolean(x > y);
    if (op == "<=") return Value::boolean(x <= y);
    if (op == ">=") return Value::boolean(x >= y);
  }
  if (op == "+" && a.is(Value::Kind::kList) && b.is(Value::Kind::kList)) {
    List joined = *a.list;
    joined.insert(joined.end(), b.list->begin(), b.list->end());
    return Value::of_list(std::move(joined));
  }
  if (op == "+" && (a.is(Value::Kind::kString) || b.is(Value::Kind::kString))) {
    return Value::string(to_output(a) + to_output(b));
  }
  if (a.is(Value::Kind::kString) && b.is(Value::Kind::kString) &&
      (op == "<" || op == ">" || op == "<=" || op == ">=")) {
    const int c = a.s.compare(b.s);
    return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
  }
  fail(e.line, "unsupported operator '" + op + "' between a " + kind_name(a.kind) + " and a " + kind_name(b.kind));
}

}  // namespace

std::string render(const Block& program, const Dict& globals, const std::string& origin) {
  Scope root;
  root.vars = globals;
  add_builtin_globals(root.vars, origin);
  for (const auto& [k, v] : globals) root.set(k, v);  // caller's values win over built-ins
  std::string out;
  Interpreter(origin).block(program, root, out);
  return out;
}

}  // namespace orbit::runtime::jinja
