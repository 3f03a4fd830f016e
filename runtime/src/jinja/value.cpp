// Value helpers: truthiness, equality, printing and JSON as @huggingface/jinja does them.
#include "src/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "orbit/common/error.h"
#include "orbit/common/json_string.h"

namespace orbit::runtime::jinja {

const Value* Value::find(const std::string& key) const {
  if (!dict) return nullptr;
  for (const auto& [k, v] : *dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::put(const std::string& key, Value v) {
  if (kind == Kind::kDict) depth = std::max(depth, v.depth + 1);
  for (auto& [k, old] : *dict) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict->emplace_back(key, std::move(v));
}

RenderState::~RenderState() {
  // Each namespace's contents are destroyed apart from the namespace: any namespace they hold is still
  // referenced from `namespaces`, so no destructor runs into another, however they nest or loop.
  for (Value& ns : namespaces) {
    Dict contents;
    contents.swap(*ns.dict);
  }
}

std::ostream& operator<<(std::ostream& os, const Site& at) {
  os << *at.origin;
  if (at.line > 0) os << ": line " << at.line;
  return os;
}

std::size_t footprint(const List& items) {
  std::size_t n = 0;
  for (const Value& v : items) n += footprint(v);
  return n;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kUndefined: return "undefined";
    case Value::Kind::kNone: return "none";
    case Value::Kind::kBool: return "boolean";
    case Value::Kind::kInt: return "integer";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "string";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "namespace";
    case Value::Kind::kFunction: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.b;
    case Value::Kind::kInt: return v.i != 0;
    case Value::Kind::kFloat: return v.f != 0 && !std::isnan(v.f);
    case Value::Kind::kString: return !v.s.empty();
    case Value::Kind::kList: return !v.list->empty();
    case Value::Kind::kDict: return !v.dict->empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction: return true;
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  const bool a_null = a.kind == K::kUndefined || a.kind == K::kNone;
  const bool b_null = b.kind == K::kUndefined || b.kind == K::kNone;
  if (a_null || b_null) return a_null && b_null;
  if (a.is_number() && b.is_number()) return a.number() == b.number();
  if (a.kind == K::kBool && b.kind == K::kBool) return a.b == b.b;
  if (a.kind == K::kString && b.kind == K::kString) return a.s == b.s;
  if (a.kind == K::kList && b.kind == K::kList) return a.list == b.list;
  if (a.is_mapping() && b.is_mapping()) return a.dict == b.dict;
  return false;
}

namespace {

// JavaScript's Number -> string for the values templates print (shortest round trip).
std::string js_number(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::string(buf, r.ptr);
}

// Writes JSON text, refusing to nest past kMaxNesting or to grow past kMaxStringBytes.
class JsonWriter {
 public:
  JsonWriter(const JsonStyle& style, const Site& at) : style_(style), at_(at) {
    if (style_.indent > kMaxStringBytes) {
      ORBIT_FAIL(at_ << ": tojson: an indent of " << style_.indent << " spaces is over the limit of " << kMaxStringBytes
                     << " bytes of text");
    }
  }

  void value(const Value& v, int depth) {
    using K = Value::Kind;
    switch (v.kind) {
      case K::kUndefined:
      case K::kNone: return append("null");
      case K::kBool: return append(v.b ? "true" : "false");
      case K::kInt: return append(std::to_string(v.i));
      case K::kFloat: return append(v.s.empty() ? js_number(v.f) : v.s);
      case K::kString: return append_quoted(v.s);
      case K::kFunction: ORBIT_FAIL(at_ << ": tojson: cannot convert a function to JSON");
      default: break;
    }
    if (depth >= kMaxNesting) {
      ORBIT_FAIL(at_ << ": a value nests deeper than " << kMaxNesting
                     << " levels where it is printed (a namespace that holds itself?)");
    }
    const bool is_list = v.kind == K::kList;
    if (is_list ? v.list->empty() : v.dict->empty()) return append(is_list ? "[]" : "{}");
    append(is_list ? "[" : "{");
    const std::size_t n = is_list ? v.list->size() : v.dict->size();
    for (std::size_t k = 0; k < n; ++k) {
      if (k > 0) append(style_.indent > 0 ? "," : ", ");
      if (style_.indent > 0) newline(depth + 1);
      if (is_list) {
        value((*v.list)[k], depth + 1);
      } else {
        append_quoted((*v.dict)[k].first);
        append(": ");
        value((*v.dict)[k].second, depth + 1);
      }
    }
    if (style_.indent > 0) newline(depth);
    append(is_list ? "]" : "}");
  }

  std::string take() {
    at_.budget().work(out_.size(), at_);
    return std::move(out_);
  }

 private:
  void append(const std::string& s) {
    check_string_size(out_.size() + s.size(), "printing a value as JSON", at_);
    out_ += s;
  }
  void append_quoted(const std::string& s) {
    check_string_size(out_.size() + json_string_size(s), "printing a value as JSON", at_);
    append_json_string(out_, s, InvalidUtf8::kCopy);
  }
  void newline(int depth) {
    const std::size_t pad = style_.indent * static_cast<std::size_t>(depth);  // < 2^26 * 2^8: no overflow
    check_string_size(out_.size() + 1 + pad, "printing a value as JSON", at_);
    out_ += '\n';
    out_.append(pad, ' ');
  }

  const JsonStyle& style_;
  const Site& at_;
  std::string out_;
};

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style, const Site& at) {
  JsonWriter w(style, at);
  w.value(v, 0);
  return w.take();
}

std::string to_output(const Value& v, const Site& at) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::kUndefined: return "";
    // As Python's Jinja prints them (transformers and the Python servers render with it), where @huggingface/jinja
    // writes "" and "true": a message's content of None prints "None".
    case K::kNone: return "None";
    case K::kBool: return v.b ? "True" : "False";
    case K::kInt: return std::to_string(v.i);
    case K::kFloat:
      if (!v.s.empty()) return v.s;
      return std::floor(v.f) == v.f && std::isfinite(v.f)
                 ? js_number(v.f) + (js_number(v.f).find('e') == std::string::npos ? ".0" : "")
                 : js_number(v.f);
    case K::kString: return v.s;
    case K::kFunction: return "[function]";
    default: return to_json(v, {}, at);
  }
}

}  // namespace orbit::runtime::jinja
