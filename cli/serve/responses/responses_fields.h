// The Responses parser's field readers (responses_api.cpp, responses_refusals.cpp): a field looked up, and
// its type checked, in a request body or an item read as ordered JSON. A check that fails throws
// RequestInvalid (request_invalid.h) naming the field, which parse_responses_request catches.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "serve/wire/request_invalid.h"

namespace orbit::serve {

using ojson = nlohmann::ordered_json;  // keys in the client's order: tool schemas are rendered in it

// In a named namespace: unity builds put several files in one translation unit.
namespace responses_parser {

// The field `name` of `object`, or nullptr when it is absent or null.
inline const ojson* field(const ojson& object, const char* name) {
  const auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

inline std::string need_string(const ojson& v, const std::string& param) {
  if (!v.is_string()) wrong_type(param, "a string", v);
  return v.get<std::string>();
}

// A required, non-empty string field.
inline std::string required_string(const ojson& object, const char* name, const std::string& at) {
  const ojson* v = field(object, name);
  if (v == nullptr) missing_field(at + "." + name);
  std::string s = need_string(*v, at + "." + name);
  if (s.empty()) empty_value(at + "." + name, LengthKind::string, "empty");
  return s;
}

inline const ojson& need_object(const ojson& v, const std::string& param) {
  if (!v.is_object()) wrong_type(param, "an object", v);
  return v;
}

}  // namespace responses_parser

}  // namespace orbit::serve
