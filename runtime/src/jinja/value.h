// Values of the chat-template interpreter. Semantics follow @huggingface/jinja (the JavaScript
// implementation Hugging Face renders chat templates with), not Python's Jinja, where the two differ:
//   - lists and dicts are shared by reference (a `set` of a list aliases it), and `==` on them is identity;
//   - dicts keep insertion order (tojson and items() walk it);
//   - undefined == none is true;
//   - printing: booleans as "true"/"false", floats with a ".0" when integral, lists and dicts as JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace orbit::runtime::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order; keys unique
// A callable: positional arguments, then keyword arguments.
using Function = std::function<Value(const List&, const Dict&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
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
    x.list = std::make_shared<List>(std::move(v));
    return x;
  }
  static Value of_dict(Dict v, Kind kind = Kind::kDict) {
    Value x = make(kind);
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
  void put(const std::string& key, Value v);  // mapping only: replaces or appends
};

const char* kind_name(Value::Kind kind);
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);  // the `==` operator
std::string to_output(const Value& v);       // what `{{ v }}` prints
struct JsonStyle {
  int indent = 0;  // 0: one line with ", " and ": "; n: newline and n spaces per level, "," and ": "
};
std::string to_json(const Value& v, const JsonStyle& style = {}, int depth = 0);
std::string json_quote(const std::string& s);  // as JavaScript's JSON.stringify quotes a string

}  // namespace orbit::runtime::jinja
