// Values of the chat-template interpreter. Semantics follow @huggingface/jinja (the JavaScript
// implementation Hugging Face renders chat templates with), not Python's Jinja, where the two differ:
//   - lists and dicts are shared by reference (a `set` of a list aliases it), and `==` on them is identity;
//   - dicts keep insertion order (tojson and items() walk it);
//   - undefined == none is true;
//   - printing: floats with a ".0" when integral, lists and dicts as JSON (but none and booleans print as Python's,
//     "None", "True", "False": to_output below).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "src/jinja/limits.h"

namespace orbit::runtime::jinja {

struct Value;
struct Site;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order; keys unique
// A callable: positional arguments, then keyword arguments, then where it is called from.
using Function = std::function<Value(const List&, const Dict&, const Site&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };
  Kind kind = Kind::kUndefined;
  // Levels of lists, dicts and bound methods this value is made of: 0 for a scalar, 1 for a list of scalars,
  // 1 + the deepest item for a list or dict, 1 for a namespace whatever it holds (its contents can change;
  // a rendering keeps every namespace alive until it ends, see RenderState), 1 + the receiver's for a bound
  // method. Destroying a value recurses this deep, so templates may not build one past kMaxNesting.
  int depth = 0;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  // kString: the text. kFloat: "", or, for a float read from JSON for an integer literal no int64 holds, that
  // literal, which printing and tojson write as is (Python's Jinja keeps such integers exact).
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // kDict and kNamespace
  std::shared_ptr<Function> fn;

  static Value none() { return make(Kind::kNone); }
  static Value boolean(bool v) {
    Value x = make(Kind::kBool);
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x = make(Kind::kInt);
    x.i = v;
    return x;
  }
  static Value floating(double v) {
    Value x = make(Kind::kFloat);
    x.f = v;
    return x;
  }
  static Value string(std::string v) {
    Value x = make(Kind::kString);
    x.s = std::move(v);
    return x;
  }
  static Value of_list(List v) {
    Value x = make(Kind::kList);
    x.depth = 1;
    for (const Value& item : v) x.depth = std::max(x.depth, item.depth + 1);
    x.list = std::make_shared<List>(std::move(v));
    return x;
  }
  // `v`'s keys must be unique.
  static Value of_dict(Dict v, Kind kind = Kind::kDict) {
    Value x = make(kind);
    x.depth = 1;
    if (kind == Kind::kDict) {
      for (const auto& kv : v) x.depth = std::max(x.depth, kv.second.depth + 1);
    }
    x.dict = std::make_shared<Dict>(std::move(v));
    return x;
  }
  static Value function(Function f) {
    Value x = make(Kind::kFunction);
    x.fn = std::make_shared<Function>(std::move(f));
    return x;
  }
  static Value make(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }

  bool is(Kind k) const { return kind == k; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_mapping() const { return kind == Kind::kDict || kind == Kind::kNamespace; }
  double number() const { return kind == Kind::kInt ? static_cast<double>(i) : f; }
  // nullptr when absent (or not a mapping).
  const Value* find(const std::string& key) const;
  // Mapping only: replaces or appends. On a dict, only while building it (dicts are immutable once shared).
  void put(const std::string& key, Value v);
};

// What a rendering's strftime_now gave: each format string it was called with (once) and the text it returned.
using ClockReads = std::vector<std::pair<std::string, std::string>>;
// How many formats, of at most how many bytes, a rendering's reads keep; past either they end with
// kClockReadsOverflow: the empty format, which formats to "" at every time, with a text that is not "".
inline constexpr std::size_t kMaxClockReads = 32;
inline constexpr std::size_t kMaxClockFormatBytes = 256;
inline const std::pair<std::string, std::string> kClockReadsOverflow{"", "(more strftime_now formats than kept)"};

// The clock a rendering reads: the time every strftime_now call formats, and where its calls are recorded
// (null: nowhere).
struct RenderClock {
  int64_t now = 0;  // seconds since the epoch (std::time_t)
  ClockReads* reads = nullptr;
};

// One rendering's state shared by the interpreter and the built-ins: its budget, its clock, and every namespace
// it made. Namespaces are the only values a template can change after making them, so the only way to a value
// that holds itself (`set ns.me = ns`) or to an unbounded chain of values; they stay alive here until the
// rendering ends, and are then emptied one by one, which frees such cycles and never recurses deeper than
// one value's depth.
struct RenderState {
  Budget budget;
  RenderClock clock;
  std::vector<Value> namespaces;
  RenderState() = default;
  RenderState(const RenderState&) = delete;
  RenderState& operator=(const RenderState&) = delete;
  ~RenderState();
};

// Where an operation runs: the template and line its errors name, and the rendering's state. Both pointers
// outlive the call; neither is kept.
struct Site {
  const std::string* origin = nullptr;
  int line = 0;
  RenderState* state = nullptr;
  Budget& budget() const { return state->budget; }
};
// "<origin>: line <line>" (the origin alone when line is 0).
std::ostream& operator<<(std::ostream& os, const Site& at);

// What a value costs to copy or scan as an item, in bytes of work (Budget::work): its slot and its string.
inline std::size_t footprint(const Value& v) { return sizeof(Value) + v.s.size(); }
std::size_t footprint(const List& items);

const char* kind_name(Value::Kind kind);
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);  // the `==` operator
// What `{{ v }}` prints: none and booleans as Python's Jinja ("None", "True", "False"), undefined as "", numbers
// as Python's repr, lists and dicts as JSON (@huggingface/jinja's form). Throws orbit::Error naming `at` where a list
// or dict prints past kMaxStringBytes or nests past kMaxNesting (a namespace that holds itself).
std::string to_output(const Value& v, const Site& at);
struct JsonStyle {
  // 0: one line with ", " and ": "; n: newline and n spaces per level, "," and ": ". At most
  // kMaxStringBytes (the text could not hold one line more).
  std::size_t indent = 0;
};
// JSON text as JavaScript's JSON.stringify writes it; throws as to_output does, and on a function.
std::string to_json(const Value& v, const JsonStyle& style, const Site& at);

}  // namespace orbit::runtime::jinja
