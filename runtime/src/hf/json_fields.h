// Reading fields of tokenizer.json objects with errors that name the file, the component and the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "orbit/common/error.h"
#include "src/hf/text.h"

namespace orbit::runtime::hf {

// The component's "type" (e.g. "ByteLevel"); throws when it has none.
inline std::string type_of(const nlohmann::json& j, const std::string& file, const char* stage) {
  ORBIT_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
              file << ": " << stage << ": an object with a string \"type\" is expected, got " << j.dump());
  return j["type"].get<std::string>();
}

// An optional field: the fallback when it is absent or null; a value of another type is refused, naming it
// (a "yes" where a boolean belongs would otherwise be read as the default without a word).
inline std::string string_field(const nlohmann::json& j, const char* key, const std::string& fallback,
                                const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  ORBIT_CHECK(j[key].is_string(), where << ": field '" << key << "' is not a string: " << j[key].dump());
  return j[key].get<std::string>();
}

inline bool bool_field(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  ORBIT_CHECK(j[key].is_boolean(), where << ": field '" << key << "' is not a boolean: " << j[key].dump());
  return j[key].get<bool>();
}

inline std::string required_string(const nlohmann::json& j, const char* key, const std::string& where) {
  ORBIT_CHECK(j.contains(key) && j[key].is_string(), where << ": field '" << key << "' missing or not a string");
  return j[key].get<std::string>();
}

// A {"String": s} or {"Regex": r} pattern as a compiled regex (a String pattern matches itself literally).
inline Regex pattern_field(const nlohmann::json& j, const std::string& where) {
  ORBIT_CHECK(j.contains("pattern") && j["pattern"].is_object(), where << ": field 'pattern' missing");
  const nlohmann::json& p = j["pattern"];
  if (p.contains("String") && p["String"].is_string()) return Regex::literal(p["String"].get<std::string>(), where);
  if (p.contains("Regex") && p["Regex"].is_string()) return Regex(p["Regex"].get<std::string>(), where);
  ORBIT_FAIL(where << ": pattern " << p.dump() << " is neither {\"String\": ...} nor {\"Regex\": ...}");
}

}  // namespace orbit::runtime::hf
