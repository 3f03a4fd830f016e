// The tree-walking interpreter: scopes, statements and expressions. Filters, tests and methods are in
// builtins.cpp.
#include "src/jinja/interpreter.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "orbit/common/error.h"
#include "src/jinja/text_units.h"

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

// The fields of a for loop's `loop`, in this order (previtem and nextitem last).
const std::array<const char*, 9> kLoopFields = {"index", "index0", "revindex", "revindex0", "first",
                                                "last",  "length", "previtem", "nextitem"};

// The items a for loop walks, without copying a list: a list's own (kept alive by the iterable the loop
// holds), a mapping's keys (a snapshot: a namespace may change while the loop runs), a string's code points.
class LoopItems {
 public:
  LoopItems(const Value& iterable, const Site& at) {
    if (iterable.is(Value::Kind::kList)) {
      list_ = iterable.list.get();
    } else if (iterable.is_mapping()) {
      for (const auto& kv : *iterable.dict) keys_.push_back(Value::string(kv.first));
      at.budget().work(footprint(keys_), at);
      list_ = &keys_;
    } else if (iterable.is(Value::Kind::kString)) {
      text_ = &iterable.s;
      at.budget().work((iterable.s.size() + 1) * sizeof(std::size_t), at);  // charged before it is built
      starts_ = code_point_starts(iterable.s);
    } else {
      ORBIT_FAIL(at << ": cannot iterate over a " << kind_name(iterable.kind));
    }
  }
  std::size_t size() const { return list_ != nullptr ? list_->size() : starts_.size() - 1; }
  Value operator[](std::size_t k) const {
    return list_ != nullptr ? (*list_)[k] : Value::string(text_->substr(starts_[k], starts_[k + 1] - starts_[k]));
  }

 private:
  const List* list_ = nullptr;
  List keys_;
  const std::string* text_ = nullptr;
  std::vector<std::size_t> starts_;  // a string's: where each code point begins, then its size
};

class Interpreter {
 public:
  Interpreter(const std::string& origin, RenderState& state) : origin_(origin), state_(state) {}

  Flow block(const Block& b, Scope& scope, std::string& out) {
    for (const StmtPtr& s : b) {
      const Flow f = statement(*s, scope, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  // One statement or expression under evaluation, for as long as it lives: counted as a step, and as a
  // level of nesting. parse() already bounds blocks and expression heights to kMaxNesting each; this holds
  // a tree to that however it was made.
  class Deeper {
   public:
    Deeper(Interpreter& in, int line) : in_(in) {
      in_.budget().step(in_.at(line));
      if (++in_.depth_ > 2 * kMaxNesting) {
        in_.fail(line, "evaluation nests deeper than " + std::to_string(2 * kMaxNesting) +
                           " levels (blocks and expressions together)");
      }
    }
    ~Deeper() { --in_.depth_; }
    Deeper(const Deeper&) = delete;
    Deeper& operator=(const Deeper&) = delete;

   private:
    Interpreter& in_;
  };

  Site at(int line) const { return Site{&origin_, line, &state_}; }
  [[noreturn]] void fail(int line, const std::string& what) const { ORBIT_FAIL(at(line) << ": " << what); }
  Budget& budget() const { return state_.budget; }

  Flow statement(const Stmt& s, Scope& scope, std::string& out);
  Flow for_loop(const Stmt& s, Scope& scope, std::string& out);
  void set(const Stmt& s, Scope& scope);
  // Appends rendered text; refused where the text would pass kMaxStringBytes.
  void emit(std::string& out, const std::string& text, int line);
  Value eval(const Expr& e, Scope& scope);
  Value evaluate(const Expr& e, Scope& scope);
  // A list or dict the template built, refused past kMaxNesting levels.
  Value built(Value v, int line);
  Value binary(const Expr& e, Scope& scope);
  Value arithmetic(const Expr& e, const Value& a, const Value& b);
  Value integer_result(const Expr& e, double r);
  Value concatenate(const Expr& e, const Value& a, const Value& b);  // `~`, or `+` with a string
  Value index(const Expr& e, const Value& target, const Value& key);
  Value slice(const Expr& e, Scope& scope);
  Value call(const Expr& e, Scope& scope);
  void args(const Expr& e, Scope& scope, List& positional, Dict& keyword) {
    for (const ExprPtr& a : e.args) positional.push_back(eval(*a, scope));
    for (const auto& [k, a] : e.kwargs) keyword.emplace_back(k, eval(*a, scope));
  }

  const std::string& origin_;
  RenderState& state_;
  int depth_ = 0;  // Deeper
};

Flow Interpreter::statement(const Stmt& s, Scope& scope, std::string& out) {
  const Deeper level(*this, s.line);
  switch (s.kind) {
    case Stmt::Kind::kText: emit(out, s.text, s.line); return Flow::kNormal;
    case Stmt::Kind::kOutput: emit(out, to_output(eval(*s.expr, scope), at(s.line)), s.line); return Flow::kNormal;
    case Stmt::Kind::kIf: return block(truthy(eval(*s.expr, scope)) ? s.body : s.otherwise, scope, out);
    case Stmt::Kind::kFor: return for_loop(s, scope, out);
    case Stmt::Kind::kSet: set(s, scope); return Flow::kNormal;
    case Stmt::Kind::kBreak: return Flow::kBreak;
    case Stmt::Kind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Interpreter::emit(std::string& out, const std::string& text, int line) {
  if (text.size() > kMaxStringBytes - out.size()) {
    fail(line, "the output exceeds the limit of " + std::to_string(kMaxStringBytes) + " bytes");
  }
  budget().work(text.size(), at(line));
  out += text;
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
  const Value iterable = eval(*s.expr, scope);  // holds the list the loop walks
  const LoopItems items(iterable, at(s.line));
  // Bind the loop variables of one item into `body`.
  auto bind = [&](Scope& body, const Value& item) {
    if (s.targets.size() == 1) return body.set(s.targets[0], item);
    if (!item.is(Value::Kind::kList) || item.list->size() != s.targets.size()) {
      fail(s.line, "cannot unpack a " + std::string(kind_name(item.kind)) + " into " +
                       std::to_string(s.targets.size()) + " loop variables");
    }
    for (std::size_t k = 0; k < s.targets.size(); ++k) body.set(s.targets[k], (*item.list)[k]);
  };
  // for x in items if cond: filter first, so loop.* counts the kept items.
  std::vector<std::size_t> kept;
  if (s.cond) {
    for (std::size_t k = 0; k < items.size(); ++k) {
      budget().iterate(1, at(s.line));
      Scope probe{&scope, {}};
      bind(probe, items[k]);
      if (truthy(eval(*s.cond, probe))) kept.push_back(k);
    }
  }
  const int64_t n = static_cast<int64_t>(s.cond ? kept.size() : items.size());
  auto item = [&](int64_t k) {
    if (k < 0 || k >= n) return Value();
    return items[s.cond ? kept[static_cast<std::size_t>(k)] : static_cast<std::size_t>(k)];
  };
  if (n == 0) return block(s.otherwise, scope, out);
  // One scope and one `loop` dict for every iteration, emptied and refilled: allocating them afresh costs
  // more than the rest of an iteration. A dict the body kept (set ns.l = loop) is left to it and replaced.
  Scope body{&scope, {}};
  body.vars.emplace_back("loop", Value());
  for (int64_t k = 0; k < n; ++k) {
    budget().iterate(1, at(s.line));
    body.vars.resize(1);  // the previous iteration's variables go
    Value current = item(k);
    Value& loop = body.vars[0].second;
    if (!loop.dict || loop.dict.use_count() != 1) {
      Dict named;
      for (const char* name : kLoopFields) named.emplace_back(name, Value());
      loop = Value::of_dict(std::move(named));
    }
    Dict& fields = *loop.dict;
    fields[0].second = Value::integer(k + 1);
    fields[1].second = Value::integer(k);
    fields[2].second = Value::integer(n - k);
    fields[3].second = Value::integer(n - k - 1);
    fields[4].second = Value::boolean(k == 0);
    fields[5].second = Value::boolean(k == n - 1);
    fields[6].second = Value::integer(n);
    fields[7].second = item(k - 1);
    fields[8].second = item(k + 1);
    loop.depth = 1 + std::max({0, fields[7].second.depth, fields[8].second.depth});
    budget().work(current.s.size() + fields[7].second.s.size() + fields[8].second.s.size(), at(s.line));  // copied
    bind(body, current);
    if (block(s.body, body, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Interpreter::eval(const Expr& e, Scope& scope) {
  const Deeper level(*this, e.line);
  Value v = evaluate(e, scope);
  if (v.is(Value::Kind::kString)) budget().work(v.s.size(), at(e.line));  // built or copied
  return v;
}

Value Interpreter::built(Value v, int line) {
  if (v.depth > kMaxNesting) {
    fail(line,
         "a value nests deeper than " + std::to_string(kMaxNesting) + " levels (lists and dicts inside each other)");
  }
  std::size_t bytes = sizeof(Value);
  if (v.is(Value::Kind::kList)) bytes += footprint(*v.list);
  if (v.is(Value::Kind::kDict)) {
    for (const auto& [k, x] : *v.dict) bytes += k.size() + footprint(x);
  }
  budget().work(bytes, at(line));
  return v;
}

Value Interpreter::evaluate(const Expr& e, Scope& scope) {
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
      return method(target, e.name, at(e.line));
    }
    case Expr::Kind::kIndex: return index(e, eval(*e.a, scope), eval(*e.b, scope));
    case Expr::Kind::kSlice: return slice(e, scope);
    case Expr::Kind::kCall: return call(e, scope);
    case Expr::Kind::kFilter: {
      const Value input = eval(*e.a, scope);
      List pos;
      Dict kw;
      args(e, scope, pos, kw);
      return apply_filter(e.name, input, pos, kw, at(e.line));
    }
    case Expr::Kind::kTest: {
      const bool r = apply_test(e.name, eval(*e.a, scope), {}, at(e.line));
      return Value::boolean(e.negated ? !r : r);
    }
    case Expr::Kind::kBinary: return binary(e, scope);
    case Expr::Kind::kNot: return Value::boolean(!truthy(eval(*e.a, scope)));
    case Expr::Kind::kNegate: {
      const Value v = eval(*e.a, scope);
      if (v.is(Value::Kind::kInt)) {
        if (v.i == INT64_MIN) fail(e.line, "the integer -(" + std::to_string(v.i) + ") is out of the 64-bit range");
        return Value::integer(-v.i);
      }
      if (v.is(Value::Kind::kFloat)) return Value::floating(-v.f);
      fail(e.line, std::string("cannot negate a ") + kind_name(v.kind));
    }
    case Expr::Kind::kTernary:
      if (truthy(eval(*e.a, scope))) return eval(*e.b, scope);
      return e.c ? eval(*e.c, scope) : Value();
    case Expr::Kind::kList: {
      List items;
      for (const ExprPtr& a : e.args) items.push_back(eval(*a, scope));
      return built(Value::of_list(std::move(items)), e.line);
    }
    case Expr::Kind::kDict: {
      Value d = Value::of_dict({});
      for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
        const Value key = eval(*e.args[k], scope);
        if (!key.is(Value::Kind::kString)) fail(e.line, "dict literal keys must be strings");
        d.put(key.s, eval(*e.args[k + 1], scope));
      }
      return built(std::move(d), e.line);
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
  return (*callee.fn)(pos, kw, at(e.line));
}

Value Interpreter::index(const Expr& e, const Value& target, const Value& key) {
  if (target.is(Value::Kind::kList) || target.is(Value::Kind::kString)) {
    if (!key.is(Value::Kind::kInt))
      fail(e.line, std::string("a list index must be an integer, got ") + kind_name(key.kind));
    if (target.is(Value::Kind::kString)) {  // by code point; the bytes read to find it are charged
      std::size_t scanned = 0;
      const auto span = code_point_at(target.s, key.i, &scanned);
      budget().work(scanned, at(e.line));
      return span ? Value::string(target.s.substr(span->first, span->second - span->first)) : Value();
    }
    const int64_t n = static_cast<int64_t>(target.list->size());
    const int64_t k = key.i < 0 ? n + key.i : key.i;
    if (k < 0 || k >= n) return Value();
    return (*target.list)[static_cast<std::size_t>(k)];
  }
  if (target.is_mapping()) {
    if (!key.is(Value::Kind::kString)) return Value();
    const Value* v = target.find(key.s);
    if (v != nullptr) return *v;
    return method(target, key.s, at(e.line));
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
  std::vector<std::size_t> starts;  // a string is sliced by code point: where each begins (charged)
  if (!is_list) {
    budget().work((target.s.size() + 1) * sizeof(std::size_t), at(e.line));
    starts = code_point_starts(target.s);
  }
  const int64_t n = is_list ? static_cast<int64_t>(target.list->size()) : static_cast<int64_t>(starts.size()) - 1;
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback, int64_t lo, int64_t hi) {
    if (!v) return fallback;
    int64_t x = *v < 0 ? *v + n : *v;
    return x < lo ? lo : (x > hi ? hi : x);
  };
  // First index, and how many indexes at `step` apart stay on the near side of the end (in unsigned
  // arithmetic: a step may be anything from INT64_MIN to INT64_MAX).
  int64_t first = 0;
  uint64_t count = 0;
  if (step > 0) {
    first = clamp(start, 0, 0, n);
    const int64_t end = clamp(stop, n, 0, n);
    if (first < end) count = (static_cast<uint64_t>(end - first) - 1) / static_cast<uint64_t>(step) + 1;
  } else {
    first = clamp(start, n - 1, -1, n - 1);
    const int64_t end = clamp(stop, -1, -1, n - 1);
    if (first > end) count = (static_cast<uint64_t>(first - end) - 1) / (0 - static_cast<uint64_t>(step)) + 1;
  }
  List items;
  std::string text;
  for (uint64_t j = 0, k = static_cast<uint64_t>(first); j < count; ++j, k += static_cast<uint64_t>(step)) {
    if (is_list)
      items.push_back((*target.list)[k]);
    else
      text.append(target.s, starts[k], starts[k + 1] - starts[k]);
  }
  if (is_list) {
    budget().work(footprint(items), at(e.line));  // the strings copied
    return Value::of_list(std::move(items));
  }
  return Value::string(std::move(text));
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
  // '~' prints both sides as Python's Jinja does: None as "None", an undefined value as "".
  if (e.name == "~") return concatenate(e, a, b);
  if (a.is(Value::Kind::kUndefined) || b.is(Value::Kind::kUndefined)) {
    fail(e.line, "cannot apply '" + e.name + "' to an undefined value");
  }
  if (a.is(Value::Kind::kNone) || b.is(Value::Kind::kNone)) fail(e.line, "cannot apply '" + e.name + "' to none");
  if (in) {
    bool member = false;
    if (b.is(Value::Kind::kList)) {
      budget().work(b.list->size() * sizeof(Value), at(e.line));  // scanned
      for (const Value& x : *b.list) member = member || equal(x, a);
    } else if (a.is(Value::Kind::kString) && b.is(Value::Kind::kString)) {
      budget().work(b.s.size() + a.s.size(), at(e.line));  // scanned
      member = find_text(b.s, a.s) != std::string::npos;
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
    // In double precision, as @huggingface/jinja computes (JavaScript numbers); an integer result must fit
    // in 64 bits.
    const bool fl = a.is(Value::Kind::kFloat) || b.is(Value::Kind::kFloat);
    const double x = a.number(), y = b.number();
    auto num = [&](double r) { return fl ? Value::floating(r) : integer_result(e, r); };
    if (op == "+") return num(x + y);
    if (op == "-") return num(x - y);
    if (op == "*") return num(x * y);
    if (op == "/") return Value::floating(x / y);
    if ((op == "//" || op == "%") && !fl && y == 0) fail(e.line, "integer division or modulo by zero");
    if (op == "//") return num(std::floor(x / y));
    if (op == "%") return num(std::fmod(x, y));
    if (op == "**") {
      if (x == 0 && y < 0) fail(e.line, "0 cannot be raised to a negative power");
      const double r = std::pow(x, y);
      if (!std::isfinite(r)) fail(e.line, "'**' gives no finite real number");
      return fl || y < 0 ? Value::floating(r) : integer_result(e, r);
    }
    if (op == "<") return Value::boolean(x < y);
    if (op == ">") return Value::boolean(x > y);
    if (op == "<=") return Value::boolean(x <= y);
    if (op == ">=") return Value::boolean(x >= y);
  }
  if (op == "+" && a.is(Value::Kind::kList) && b.is(Value::Kind::kList)) {
    budget().work(footprint(*a.list) + footprint(*b.list), at(e.line));
    List joined = *a.list;
    joined.insert(joined.end(), b.list->begin(), b.list->end());
    return Value::of_list(std::move(joined));
  }
  if (op == "+" && (a.is(Value::Kind::kString) || b.is(Value::Kind::kString))) return concatenate(e, a, b);
  if (a.is(Value::Kind::kString) && b.is(Value::Kind::kString) &&
      (op == "<" || op == ">" || op == "<=" || op == ">=")) {
    const int c = a.s.compare(b.s);
    return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
  }
  fail(e.line, "unsupported operator '" + op + "' between a " + kind_name(a.kind) + " and a " + kind_name(b.kind));
}

Value Interpreter::integer_result(const Expr& e, double r) {
  // Converting a double outside int64's range (or NaN) to int64 is undefined; refuse it instead.
  if (!(r >= -0x1p63 && r < 0x1p63)) fail(e.line, "the integer result of '" + e.name + "' is out of the 64-bit range");
  return Value::integer(static_cast<int64_t>(r));
}

Value Interpreter::concatenate(const Expr& e, const Value& a, const Value& b) {
  const Site here = at(e.line);
  // Strings are used in place; anything else is printed first.
  std::string printed_a, printed_b;
  if (!a.is(Value::Kind::kString)) printed_a = to_output(a, here);
  if (!b.is(Value::Kind::kString)) printed_b = to_output(b, here);
  const std::string& head = a.is(Value::Kind::kString) ? a.s : printed_a;
  const std::string& tail = b.is(Value::Kind::kString) ? b.s : printed_b;
  check_string_size(head.size() + tail.size(), ("'" + e.name + "'").c_str(), here);
  std::string text;
  text.reserve(head.size() + tail.size());
  text += head;
  text += tail;
  return Value::string(std::move(text));
}

}  // namespace

std::string render(const Block& program, const Dict& globals, const std::string& origin, const RenderClock& clock) {
  RenderState state;  // outlives every value of the rendering (declared first: destroyed last)
  state.clock = clock;
  Scope root;
  root.vars = globals;
  add_builtin_globals(root.vars);
  for (const auto& [k, v] : globals) root.set(k, v);  // caller's values win over built-ins
  std::string out;
  Interpreter(origin, state).block(program, root, out);
  return out;
}

}  // namespace orbit::runtime::jinja
