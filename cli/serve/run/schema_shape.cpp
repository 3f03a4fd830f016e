#include "serve/run/schema_shape.h"

#include <array>
#include <set>
#include <string_view>

namespace orbit::serve {

using nlohmann::ordered_json;

// Helpers in a named namespace: unity builds put several files in one translation unit.
namespace schema_shape {

std::string at(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

std::string problem(const std::string& path, const std::string& what) {
  return (path.empty() ? "" : path + ": ") + what;
}

bool is_type_name(const ordered_json& v) {
  static const std::set<std::string, std::less<>> kTypes = {"object",  "array",   "string", "number",
                                                            "integer", "boolean", "null"};
  return v.is_string() && kTypes.count(v.get_ref<const std::string&>()) > 0;
}

std::string type_problem(const ordered_json& t, const std::string& path) {
  const std::string kWant = " (object, array, string, number, integer, boolean or null)";
  if (t.is_string()) return is_type_name(t) ? "" : problem(path, t.dump() + " is not a JSON Schema type" + kWant);
  if (!t.is_array() || t.empty()) return problem(path, "must be a type name or a non-empty list of them" + kWant);
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (!is_type_name(t[i]))
      return problem(path + "[" + std::to_string(i) + "]", t[i].dump() + " is not a JSON Schema type" + kWant);
  }
  return "";
}

std::string walk(const ordered_json& s, const std::string& path);

std::string map_of_schemas(const ordered_json& v, const std::string& path) {
  if (!v.is_object()) return problem(path, std::string("must be an object of schemas, got ") + v.type_name());
  for (const auto& [name, sub] : v.items()) {
    if (std::string p = walk(sub, at(path, name)); !p.empty()) return p;
  }
  return "";
}

std::string list_of_schemas(const ordered_json& v, const std::string& path, bool non_empty) {
  if (!v.is_array() || (non_empty && v.empty()))
    return problem(path, std::string("must be a ") + (non_empty ? "non-empty " : "") + "list of schemas");
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (std::string p = walk(v[i], path + "[" + std::to_string(i) + "]"); !p.empty()) return p;
  }
  return "";
}

std::string value_problem(const std::string& key, const ordered_json& v, const std::string& path) {
  static const std::array<std::string_view, 6> kCounts = {"minLength", "maxLength",     "minItems",
                                                          "maxItems",  "minProperties", "maxProperties"};
  static const std::array<std::string_view, 3> kNumbers = {"minimum", "maximum", "multipleOf"};
  for (std::string_view k : kCounts) {
    if (key == k && !(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)))
      return problem(path, "must be a count (an integer >= 0), got " + v.dump());
  }
  for (std::string_view k : kNumbers) {
    if (key == k && !v.is_number()) return problem(path, "must be a number, got " + v.dump());
  }
  if ((key == "exclusiveMinimum" || key == "exclusiveMaximum") && !v.is_number() && !v.is_boolean())
    return problem(path, "must be a number, got " + v.dump());
  if (key == "multipleOf" && v.get<double>() <= 0) return problem(path, "must be greater than 0, got " + v.dump());
  if (key == "pattern" && !v.is_string()) return problem(path, "must be a regular expression (a string)");
  if (key == "enum" && !v.is_array()) return problem(path, "must be a list of values");
  if (key == "uniqueItems" && !v.is_boolean()) return problem(path, "must be true or false");
  if (key == "required") {
    if (!v.is_array()) return problem(path, "must be a list of property names");
    for (const auto& name : v) {
      if (!name.is_string()) return problem(path, "must hold property names (strings), got " + name.dump());
    }
  }
  return "";
}

std::string walk(const ordered_json& s, const std::string& path) {
  if (s.is_boolean()) return "";
  if (!s.is_object())
    return problem(path, std::string("must be a schema (an object or a boolean), got ") + s.type_name());
  for (const auto& [key, v] : s.items()) {
    const std::string p = at(path, key);
    std::string found;
    if (key == "type") {
      found = type_problem(v, p);
    } else if (key == "properties" || key == "patternProperties" || key == "$defs" || key == "definitions" ||
               key == "dependentSchemas") {
      found = map_of_schemas(v, p);
    } else if (key == "anyOf" || key == "oneOf" || key == "allOf") {
      found = list_of_schemas(v, p, true);
    } else if (key == "prefixItems") {
      found = list_of_schemas(v, p, false);
    } else if (key == "items") {
      found = v.is_array() ? list_of_schemas(v, p, false) : walk(v, p);  // a list: draft 4's tuple form
    } else if (key == "not" || key == "if" || key == "then" || key == "else" || key == "contains" ||
               key == "propertyNames" || key == "additionalProperties" || key == "additionalItems" ||
               key == "unevaluatedProperties" || key == "unevaluatedItems") {
      found = walk(v, p);
    } else {
      found = value_problem(key, v, p);
    }
    if (!found.empty()) return found;
  }
  return "";
}

}  // namespace schema_shape

std::string schema_shape_problem(const ordered_json& schema) { return schema_shape::walk(schema, ""); }

}  // namespace orbit::serve
