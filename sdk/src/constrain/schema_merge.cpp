// Schemas combined keyword by keyword: allOf of several schemas, and keywords beside $ref, anyOf, allOf or oneOf
// ({"type": "object", "properties": {...}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}). Both are "the
// values every part admits"; each is compiled as one schema holding every part's keywords, where that schema
// admits exactly those values:
//   - a keyword in one part only is taken as it is (JSON Schema's keywords judge a value independently), a part's
//     types, where it has no "type", being those its keywords apply to (as such a schema compiles alone);
//   - one in both with the same value once; "type" as the types both admit (integer within number), "enum" as the
//     values both list, "required" as both lists, "properties" as both maps (a property in both: its two schemas
//     combined the same way), a lower bound (minLength, minimum, ...) as the higher, an upper bound as the lower,
//     "items" schemas combined, "allOf" lists joined;
//   - parts whose types or values admit nothing together drop that alternative (under anyOf and oneOf) or are
//     refused (a schema admitting no value);
//   - additionalProperties: false keeps an object to that part's properties: the other parts' others are dropped
//     (an object naming them in "required" then admits nothing, and is refused so); true in a part, with no part
//     closed, keeps the combined object open (absent everywhere, it is closed to the combined properties, as an
//     object without additionalProperties compiles);
//   - anything else given in both parts is refused naming it, and so are keywords whose meaning depends on another
//     part's (additionalProperties as a schema beside another part's properties, a tuple's items beside another
//     part's items): combined, they would admit other values.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "constrain/schema_compiler.h"
#include "orbit/common/error.h"

namespace orbit::constrain::schema {

namespace {

constexpr int kMostMerges = 64;  // nested combinations ($ref chains through siblings) before a refusal

// The keywords of `s` that constrain values (annotations and discriminator left out).
// How many JSON values `j` holds, itself included.
std::size_t json_values(const Json& j) {
  std::size_t n = 1;
  if (j.is_structured()) {
    for (const Json& v : j) n += json_values(v);
  }
  return n;
}

Json constraining(const Json& s) {
  Json out = Json::object();
  for (const auto& [key, value] : s.items()) {
    if (!is_annotation(key) && key != "discriminator") out[key] = value;
  }
  return out;
}

std::vector<std::string> type_list(const Json& t, const std::string& path) {
  std::vector<std::string> out;
  for (const Json& n : t.is_array() ? t : Json::array({t})) {
    ORBIT_CHECK(n.is_string(), path << ".type: " << brief(n) << " is not a type");
    out.push_back(n.get<std::string>());
  }
  return out;
}

// The types both lists admit (an integer is a number), in b's order; empty when none.
Json common_types(const Json& a, const Json& b, const std::string& path) {
  const std::vector<std::string> ta = type_list(a, path);
  Json out = Json::array();
  for (const std::string& t : type_list(b, path)) {
    const bool in_a = std::find(ta.begin(), ta.end(), t) != ta.end();
    const bool integer_of_number = t == "integer" && std::find(ta.begin(), ta.end(), "number") != ta.end();
    const bool number_of_integer = t == "number" && std::find(ta.begin(), ta.end(), "integer") != ta.end();
    const std::string kept = in_a || integer_of_number ? t : number_of_integer ? "integer" : "";
    if (!kept.empty() && std::find(out.begin(), out.end(), kept) == out.end()) out.push_back(kept);
  }
  return out;
}

bool lower_bound(const std::string& k) {
  return k == "minLength" || k == "minItems" || k == "minProperties" || k == "minimum" || k == "exclusiveMinimum";
}
bool upper_bound(const std::string& k) {
  return k == "maxLength" || k == "maxItems" || k == "maxProperties" || k == "maximum" || k == "exclusiveMaximum";
}

// Which parts give a keyword of a group: 1 (a), 2 (b), 3 (both), 0 (neither).
int sides(const Json& a, const Json& b, std::initializer_list<const char*> keys) {
  int out = 0;
  for (const char* k : keys) out |= (a.contains(k) ? 1 : 0) | (b.contains(k) ? 2 : 0);
  return out;
}

bool closed(const Json& s) {
  return s.contains("additionalProperties") && s.at("additionalProperties").is_boolean() &&
         !s.at("additionalProperties").get<bool>();
}

// additionalProperties: true is no constraint: left out, so it combines with any properties.
void drop_open(Json& s) {
  if (s.contains("additionalProperties") && s.at("additionalProperties") == Json(true)) s.erase("additionalProperties");
}

// Refuses keywords whose meaning depends on a keyword of the other part. additionalProperties: false is combined
// (closed_members): its members are its own properties alone, whatever the other part declares.
void check_dependent(const Json& a, const Json& b, const std::string& where) {
  const int extra = sides(a, b, {"additionalProperties"});
  const int declared = sides(a, b, {"properties"});
  const bool exact =
      (closed(a) || !a.contains("additionalProperties")) && (closed(b) || !b.contains("additionalProperties"));
  ORBIT_CHECK(exact || extra == 0 || declared == 0 || (extra == declared && extra != 3),
              where << ": additionalProperties of one part beside properties of another cannot be combined (each "
                       "part's additionalProperties applies to its own properties; only false combines)");
  const bool tuple = a.contains("prefixItems") || b.contains("prefixItems") || a.contains("additionalItems") ||
                     b.contains("additionalItems") || (a.contains("items") && a.at("items").is_array()) ||
                     (b.contains("items") && b.at("items").is_array());
  const int items = sides(a, b, {"items", "prefixItems", "additionalItems"});
  ORBIT_CHECK(!tuple || items != 3,
              where << ": a tuple's items (prefixItems, additionalItems) in one part beside items of another cannot "
                       "be combined");
}

// A part without "type" admits the types its keywords apply to (constraint.h: {"properties": ...} is an object):
// made explicit before combining, so that another part's "type" cannot widen it ({"type": "integer"} beside it
// admits nothing, not every integer).
void with_inferred_type(Json& s, const std::string& where) {
  if (s.contains("type")) return;
  const std::vector<std::string> types = schema_types(s, where);
  if (types.empty()) return;
  s["type"] = types.size() == 1 ? Json(types.front()) : Json(types);
}

// A part's OpenAPI nullable made a type of its own (true: "null" joins its types; false: nothing more), so that
// it widens that part alone: another part with a type of its own that leaves null out still refuses it. A part
// without a type keeps nullable (compile_nullable reads it on the combination).
void with_nullable_typed(Json& s, const std::string& where) {
  const auto nullable = s.find("nullable");
  if (nullable == s.end() || !s.contains("type") || !nullable->is_boolean()) return;
  if (nullable->get<bool>()) {
    std::vector<std::string> types = type_list(s.at("type"), where);
    if (std::find(types.begin(), types.end(), "null") == types.end()) types.push_back("null");
    s["type"] = types;
  }
  s.erase("nullable");
}

// A number exactly: an integer beyond 2^53 compared as a double would equal its neighbours.
long double exact_number(const Json& j) {
  if (j.is_number_unsigned()) return static_cast<long double>(j.get<uint64_t>());
  if (j.is_number_integer()) return static_cast<long double>(j.get<int64_t>());
  return static_cast<long double>(j.get<double>());
}

// With additionalProperties: false in a or b, the names an object of both may have: the properties every closed
// part declares (nullopt when neither is closed).
std::optional<std::set<std::string>> closed_members(const Json& a, const Json& b) {
  std::optional<std::set<std::string>> out;
  for (const Json* s : {&a, &b}) {
    if (!closed(*s)) continue;
    std::set<std::string> names;
    if (s->contains("properties") && s->at("properties").is_object()) {
      for (const auto& item : s->at("properties").items()) {
        if (!out || out->count(item.key())) names.insert(item.key());
      }
    }
    out = std::move(names);
  }
  return out;
}

// The combined object's members: with a closed part (`members`: the names it allows), the other properties
// cannot appear, nor can one no value fits (false); where no extra member may appear either, they are left out.
// nullopt when such a property is required: no object fits.
std::optional<Json> settle_members(Json s, const std::optional<std::set<std::string>>& members) {
  std::set<std::string> required;
  if (s.contains("required") && s.at("required").is_array()) {
    for (const Json& name : s.at("required")) {
      if (name.is_string()) required.insert(name.get<std::string>());
    }
  }
  if (members &&
      std::any_of(required.begin(), required.end(), [&](const std::string& n) { return !members->count(n); }))
    return std::nullopt;
  if (!s.contains("properties") || !s.at("properties").is_object()) return s;
  const bool closed_object = members || !s.contains("additionalProperties");
  Json kept = Json::object();
  for (const auto& item : s.at("properties").items()) {
    const bool absent = (members && !members->count(item.key())) || item.value() == Json(false);
    if (!absent || !closed_object) {
      kept[item.key()] = item.value();  // false beside extra members: refused when compiled, naming it
    } else if (required.count(item.key())) {
      return std::nullopt;
    }
  }
  s["properties"] = std::move(kept);
  return s;
}

}  // namespace

// The schema a "$ref" names (one step: the target may hold a $ref of its own).
const Json& SchemaCompiler::target_of(const Json& ref, const std::string& where) const {
  ORBIT_CHECK(ref.is_string() && (ref.get<std::string>() == "#" || ref.get<std::string>().rfind("#/", 0) == 0),
              where << ": $ref " << brief(ref) << " is not supported (only references into this schema, such as "
                    << "\"#/$defs/Name\")");
  try {
    return root_.at(Json::json_pointer(ref.get<std::string>().substr(1)));
  } catch (const nlohmann::json::exception&) {
    ORBIT_FAIL(where << ": $ref \"" << ref.get<std::string>() << "\" names nothing in the schema");
  }
}

bool has_siblings(const Json& s, const std::string& key) {
  if (!s.is_object()) return false;
  return std::any_of(s.items().begin(), s.items().end(), [&](const auto& item) {
    return item.key() != key && item.key() != "discriminator" && !is_annotation(item.key());
  });
}

// A member's schemas x and y combined: one schema (so a oneOf can still tell its alternatives apart by a tag
// property), or, where they admit no value together, allOf of both (refused when compiled, naming it).
Json SchemaCompiler::both(const Json& x, const Json& y, const std::string& where) {
  std::optional<Json> merged = merge_schemas(x, y, where);
  return merged ? *merged : Json{{"allOf", Json::array({x, y})}};
}

// One keyword given by both parts, combined (nullopt: the parts admit no value together).
std::optional<Json> SchemaCompiler::merge_keyword(const std::string& k, const Json& x, const Json& y,
                                                  const std::string& where) {
  if (x == y) return x;
  if (k == "type") {
    Json common = common_types(x, y, where);
    if (common.empty()) return std::nullopt;
    return common.size() == 1 ? common.front() : common;
  }
  if (k == "enum" && x.is_array() && y.is_array()) {
    Json out = Json::array();
    for (const Json& v : y) {
      if (std::find(x.begin(), x.end(), v) != x.end()) out.push_back(v);
    }
    if (out.empty()) return std::nullopt;
    return out;
  }
  if (k == "const") return std::nullopt;  // two different values
  if ((k == "required" || k == "allOf") && x.is_array() && y.is_array()) {
    Json out = x;
    for (const Json& v : y) {
      if (k == "allOf" || std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    return out;
  }
  if (k == "properties" && x.is_object() && y.is_object()) {  // a property no value fits: false (settle_members)
    Json out = x;
    for (const auto& [name, schema] : y.items()) {
      if (!out.contains(name)) {
        out[name] = schema;
        continue;
      }
      std::optional<Json> merged = merge_schemas(out[name], schema, where + ": properties." + name);
      out[name] = merged ? std::move(*merged) : Json(false);
    }
    return out;
  }
  if (k == "items" && x.is_object() && y.is_object()) return both(x, y, where + ": items");
  if ((lower_bound(k) || upper_bound(k)) && x.is_number() && y.is_number()) {
    const long double ex = exact_number(x), ey = exact_number(y);
    const bool x_stricter = lower_bound(k) ? ex > ey : ex < ey;
    return x_stricter ? x : y;
  }
  ORBIT_FAIL(where << ": '" << k << "' is given differently by both parts (" << brief(x) << " and " << brief(y)
                   << "), which cannot be combined");
}

// The schema admitting the values both a and b admit (nullopt: none), `where` naming the two in errors.
std::optional<Json> SchemaCompiler::merge_schemas(const Json& a, const Json& b, const std::string& where) {
  if (a.is_boolean()) return a.get<bool>() ? std::optional<Json>(b) : std::nullopt;
  if (b.is_boolean()) return b.get<bool>() ? std::optional<Json>(a) : std::nullopt;
  ORBIT_CHECK(a.is_object() && b.is_object(), where << ": a schema must be an object or a boolean");
  if (b.contains("$ref")) {  // b is its target with b's other keywords
    ORBIT_CHECK(++merges_ <= kMostMerges, where << ": references combined more than " << kMostMerges << " deep");
    Json rest = constraining(b);
    rest.erase("$ref");
    std::optional<Json> target = merge_schemas(rest, target_of(b.at("$ref"), where), where);
    --merges_;
    return target ? merge_schemas(a, *target, where) : std::nullopt;
  }
  if (a.contains("$ref")) return merge_schemas(b, a, where);
  Json out = constraining(a);
  Json other = constraining(b);
  const bool open = out.value("additionalProperties", Json(false)) == Json(true) ||
                    other.value("additionalProperties", Json(false)) == Json(true);
  drop_open(out);
  drop_open(other);
  with_inferred_type(out, where);
  with_inferred_type(other, where);
  with_nullable_typed(out, where);
  with_nullable_typed(other, where);
  check_dependent(out, other, where);
  const std::optional<std::set<std::string>> members = closed_members(out, other);
  for (const auto& [k, value] : other.items()) {
    if (!out.contains(k)) {
      out[k] = value;
      continue;
    }
    std::optional<Json> merged = merge_keyword(k, out[k], value, where);
    if (!merged) return std::nullopt;
    out[k] = std::move(*merged);
  }
  if (members) {
    out["additionalProperties"] = false;
  } else if (open && !out.contains("additionalProperties")) {
    out["additionalProperties"] = true;  // a part's open object stays open (absent, the object would be closed)
  }
  return settle_members(std::move(out), members);
}

// s's `key` ($ref, anyOf, allOf or oneOf) with the keywords beside it: each alternative of anyOf / oneOf
// combined with them (those admitting nothing with them dropped), allOf's schemas and $ref's target combined with
// them and one another.
int32_t SchemaCompiler::compile_with_siblings(const Json& s, const std::string& key, const std::string& path) {
  ORBIT_CHECK(combining_ < kMostMerges, path << ": combinations nested more than " << kMostMerges << " deep");
  ++combining_;
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{combining_};
  Json rest = constraining(s);
  rest.erase(key);
  if (key == "$ref" || key == "allOf") {
    Json parts = Json::array();
    if (key == "$ref") {
      parts.push_back(Json{{"$ref", s.at("$ref")}});
    } else {
      const Json& list = s.at("allOf");
      ORBIT_CHECK(list.is_array() && !list.empty(),
                  path << ".allOf: expected a non-empty list of schemas, not " << brief(list));
      parts = list;
    }
    std::optional<Json> merged = rest;
    for (std::size_t i = 0; i < parts.size() && merged; ++i) {
      const std::string part = key == "$ref" ? "$ref" : "allOf[" + std::to_string(i) + "]";
      merged = merge_schemas(*merged, parts[i], path + ": " + part + " and the keywords beside it");
    }
    ORBIT_CHECK(merged, path << ": no value matches "
                             << (key == "$ref" ? "both $ref's target and the keywords beside it"
                                               : "every schema of allOf (with the keywords beside it)"));
    return compile(*merged, path);
  }
  const Json& list = s.at(key);
  ORBIT_CHECK(list.is_array() && !list.empty(),
              path << "." << key << ": expected a non-empty list of schemas, not " << brief(list));
  // Each alternative gets a copy of the keywords beside it: bounded before they are made.
  const std::size_t beside = json_values(rest);
  ORBIT_CHECK(beside * list.size() <= kMaxNodes,
              path << ": " << key << "'s " << list.size() << " schemas, each combined with the " << beside
                   << " JSON values of the keywords beside it, make a schema too large (over " << kMaxNodes
                   << "): move those keywords into fewer alternatives");
  Json alternatives = Json::array();
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string part = key + "[" + std::to_string(i) + "]";
    std::optional<Json> merged = merge_schemas(rest, list[i], path + ": " + part + " and the keywords beside it");
    if (merged) alternatives.push_back(std::move(*merged));
  }
  ORBIT_CHECK(!alternatives.empty(),
              path << ": no schema of " << key << " admits a value the keywords beside it admit");
  Json combined = Json::object();
  combined[key] = std::move(alternatives);
  if (s.contains("discriminator")) combined["discriminator"] = s.at("discriminator");
  return compile(combined, path);
}

}  // namespace orbit::constrain::schema
