// Value helpers: truthiness, equality, printing and JSON as @huggingface/jinja does them.
#include "src/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "orbit/common/error.h"

namespace orbit::runtime::jinja {

const Value* Value::find(const std::string& key) const {
  if (!dict) return nullptr;
  for (const auto& [k, v] : *dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::put(const std::string& key, Value v) {
  for (auto& [k, old] : *dict) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict->emplace_back(key, std::move(v));
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

}  // namespace

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string to_json(const Value& v, const JsonStyle& style, int depth) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::kUndefined:
    case K::kNone: return "null";
    case K::kBool: return v.b ? "true" : "false";
    case K::kInt: return std::to_string(v.i);
    case K::kFloat: return js_number(v.f);
    case K::kString: return json_quote(v.s);
    case K::kFunction: ORBIT_FAIL("tojson: cannot convert a function to JSON");
    default: break;
  }
  const std::string item_sep = style.indent > 0 ? "," : ", ";
  const std::string pad = "\n" + std::string(static_cast<std::size_t>(style.indent * depth), ' ');
  const std::string child_pad = pad + std::string(static_cast<std::size_t>(style.indent), ' ');
  std::string out;
  if (v.kind == K::kList) {
    if (v.list->empty()) return "[]";
    out = "[";
    for (std::size_t k = 0; k < v.list->size(); ++k) {
      if (k > 0) out += item_sep;
      if (style.indent > 0) out += child_pad;
      out += to_json((*v.list)[k], style, depth + 1);
    }
    return out + (style.indent > 0 ? pad : "") + "]";
  }
  if (v.dict->empty()) return "{}";
  out = "{";
  bool first = true;
  for (const auto& [key, value] : *v.dict) {
    if (!first) out += item_sep;
    first = false;
    if (style.indent > 0) out += child_pad;
    out += json_quote(key) + ": " + to_json(value, style, depth + 1);
  }
  return out + (style.indent > 0 ? pad : "") + "}";
}

std::string to_output(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::kUndefined:
    case K::kNone: return "";
    case K::kBool: return v.b ? "true" : "false";
    case K::kInt: return std::to_string(v.i);
    case K::kFloat:
      return std::floor(v.f) == v.f && std::isfinite(v.f)
                 ? js_number(v.f) + (js_number(v.f).find('e') == std::string::npos ? ".0" : "")
                 : js_number(v.f);
    case K::kString: return v.s;
    case K::kFunction: return "[function]";
    default: return to_json(v);
  }
}

}  // namespace orbit::runtime::jinja
