// JSON Schema (the subset orbit/constraint.h lists) compiled into grammar nodes. Every refusal names the
// keyword and where it sits, as a dotted path under the caller's name for the schema.
#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "constrain/schema_compiler.h"
#include "constrain/schema_regular.h"
#include "orbit/common/error.h"
#include "orbit/common/json_input.h"

namespace orbit::constrain {

namespace schema {

// JSON Schema's annotations and identifiers, and OpenAPI's own annotations: example (3.0's, one value),
// externalDocs and xml (how a value is documented or serialized as XML).
const std::set<std::string>& annotations() {
  static const std::set<std::string> k{"title",       "description", "default",      "examples", "$schema",   "$id",
                                       "$anchor",     "$comment",    "deprecated",   "readOnly", "writeOnly", "$defs",
                                       "definitions", "example",     "externalDocs", "xml"};
  return k;
}

bool is_annotation(const std::string& key) { return annotations().count(key) != 0 || key.rfind("x-", 0) == 0; }

std::string brief(const Json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " items";
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " fields";
  const std::string s = v.dump();
  return s.size() <= 40 ? s : s.substr(0, 40) + "...";
}

void only_beside(const Json& s, const std::string& what, const std::set<std::string>& allowed,
                 const std::string& path) {
  for (const auto& [key, value] : s.items()) {
    if (key == what || is_annotation(key) || allowed.count(key)) continue;
    ORBIT_FAIL(path << ": '" << key << "' beside '" << what << "' is not supported");
  }
}

int64_t count_of(const Json& s, const char* key, const std::string& path) {
  const Json& v = s.at(key);
  ORBIT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0,
              path << "." << key << ": expected a non-negative integer, not " << brief(v));
  // A lower bound no answer could reach (each character, item or member takes at least a byte) is refused here,
  // naming it, rather than later as a grammar that admits no text.
  constexpr int64_t kMostMinimum = (int64_t{1} << 32) - 1;
  ORBIT_CHECK(std::string_view(key).substr(0, 3) != "min" || v.get<int64_t>() <= kMostMinimum,
              path << "." << key << ": " << v.get<int64_t>() << " is more than any answer could hold (at most "
                   << kMostMinimum << ")");
  return v.get<int64_t>();
}

namespace {

const std::set<std::string>& structural() {
  static const std::set<std::string> k{"type",
                                       "properties",
                                       "required",
                                       "additionalProperties",
                                       "items",
                                       "uniqueItems",
                                       "minItems",
                                       "maxItems",
                                       "minLength",
                                       "maxLength",
                                       "enum",
                                       "const",
                                       "anyOf",
                                       "$ref",
                                       "pattern",
                                       "format",
                                       "contentEncoding",
                                       "minimum",
                                       "maximum",
                                       "exclusiveMinimum",
                                       "exclusiveMaximum",
                                       "multipleOf",
                                       "allOf",
                                       "prefixItems",
                                       "additionalItems",
                                       "propertyNames",
                                       "oneOf",
                                       "discriminator",
                                       "minProperties",
                                       "maxProperties",
                                       "nullable"};
  return k;
}

const std::vector<const char*>& number_keywords() {
  static const std::vector<const char*> k{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
  return k;
}

bool has_number_keyword(const Json& s) {
  return std::any_of(number_keywords().begin(), number_keywords().end(), [&](const char* k) { return s.contains(k); });
}

bool has_string_keyword(const Json& s) {
  return s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") ||
         (s.contains("format") && number_format(s) == nullptr) || s.contains("contentEncoding");
}

const std::set<std::string>& type_names() {
  static const std::set<std::string> k{"object", "array", "string", "number", "integer", "boolean", "null"};
  return k;
}

// Whether `v` is a value of JSON Schema type `type`.
bool has_type(const Json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    return v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()));
  }
  return false;
}

// The types named by "type", or inferred from the keywords when it is absent (none: any value).
std::vector<std::string> types_of(const Json& s, const std::string& path) {
  std::vector<std::string> out;
  if (s.contains("type")) {
    const Json& t = s.at("type");
    std::vector<Json> names = t.is_array() ? std::vector<Json>(t.begin(), t.end()) : std::vector<Json>{t};
    ORBIT_CHECK(!names.empty(), path << ".type: an empty list of types");
    for (const Json& n : names) {
      ORBIT_CHECK(n.is_string() && type_names().count(n.get<std::string>()),
                  path << ".type: " << brief(n) << " is not a type (object, array, string, number, integer, "
                       << "boolean, null)");
      if (std::find(out.begin(), out.end(), n.get<std::string>()) == out.end()) out.push_back(n.get<std::string>());
    }
    return out;
  }
  if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties") ||
      s.contains("propertyNames") || s.contains("minProperties") || s.contains("maxProperties")) {
    out.push_back("object");
  }
  if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems") ||
      s.contains("uniqueItems")) {
    out.push_back("array");
  }
  if (has_string_keyword(s)) out.push_back("string");
  if (has_number_keyword(s) || number_format(s) != nullptr) out.push_back("number");
  return out;
}

// A format of numbers beside a "type" without numbers, and beside one with numbers but no strings, a format
// that is not one of numbers.
void check_format_applies(const Json& s, bool strings, bool numbers, const std::string& path) {
  const Json& f = s.at("format");
  if (const NumberFormat* n = number_format(s); n != nullptr) {
    // An integer format beside "string" is a string of its digits (proto3's JSON writes 64-bit integers so).
    ORBIT_CHECK(numbers || (strings && n->integer),
                path << ".format: \"" << f.get<std::string>() << "\" applies to numbers"
                     << (n->integer ? " and strings" : "") << ", and \"type\" has none");
    return;
  }
  if (strings) return;
  ORBIT_CHECK(!numbers || !f.is_string(), path << ".format: \"" << f.get<std::string>()
                                               << "\" is not a format of numbers (supported: " << number_format_names()
                                               << ")");
  ORBIT_FAIL(path << ": 'format' applies to strings, and \"type\" has none");
}

// Refuses string and number keywords beside a "type" that has no strings or no numbers (they would
// constrain nothing).
void check_applies(const Json& s, const std::vector<std::string>& types, const std::string& path) {
  const auto has = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };
  const bool strings = has("string");
  const bool numbers = has("number") || has("integer");
  for (const char* k : {"minLength", "maxLength", "pattern", "contentEncoding"}) {
    ORBIT_CHECK(strings || !s.contains(k), path << ": '" << k << "' applies to strings, and \"type\" has none");
  }
  if (s.contains("format")) check_format_applies(s, strings, numbers, path);
  ORBIT_CHECK(has("array") || !s.contains("uniqueItems"),
              path << ": 'uniqueItems' applies to arrays, and \"type\" has none");
  for (const char* k : number_keywords()) {
    ORBIT_CHECK(numbers || !s.contains(k), path << ": '" << k << "' applies to numbers, and \"type\" has none");
  }
}

// Draft 4's and OpenAPI 3.0's exclusiveMinimum / exclusiveMaximum: a flag on minimum / maximum (zod's openapi-3.0
// target writes {"minimum": 0, "exclusiveMinimum": true} for positive()), where later drafts give the bound.
bool has_flag_bounds(const Json& s) {
  for (const char* k : {"exclusiveMinimum", "exclusiveMaximum"}) {
    const auto f = s.find(k);
    if (f != s.end() && f->is_boolean()) return true;
  }
  return false;
}

// `s` with each flag made the bound it marks: true moves minimum (maximum) to exclusiveMinimum
// (exclusiveMaximum); false is dropped. A true flag without its bound is refused, as draft 4 does.
Json with_number_bounds(const Json& s, const std::string& path) {
  Json out = s;
  for (const auto& [bound, flag] : {std::pair<const char*, const char*>{"minimum", "exclusiveMinimum"},
                                    std::pair<const char*, const char*>{"maximum", "exclusiveMaximum"}}) {
    const auto f = s.find(flag);
    if (f == s.end() || !f->is_boolean()) continue;
    out.erase(flag);
    if (!f->get<bool>()) continue;
    ORBIT_CHECK(s.contains(bound), path << "." << flag << ": true (draft 4's form) needs '" << bound << "' beside it");
    out[flag] = s.at(bound);
    out.erase(bound);
  }
  return out;
}

}  // namespace

std::vector<std::string> schema_types(const Json& s, const std::string& path) { return types_of(s, path); }

int32_t SchemaCompiler::compile(const Json& s, const std::string& path) {
  ORBIT_CHECK(g_.nodes.size() < kMaxNodes, path << ": the schema is too large (over " << kMaxNodes << " nodes)");
  ORBIT_CHECK(depth_ < kMaxDepth, path << ": the schema nests deeper than " << kMaxDepth
                                       << " levels (members, items and $ref targets within one another)");
  const struct Nested {
    int& depth;
    explicit Nested(int& d) : depth(++d) {}
    ~Nested() { --depth; }
  } nested(depth_);
  if (s.is_boolean()) {
    ORBIT_CHECK(s.get<bool>(), path << ": the schema false admits no value");
    return add_any_value(g_, limits_);
  }
  ORBIT_CHECK(s.is_object(), path << ": a schema must be an object or a boolean, not " << brief(s));
  if (has_flag_bounds(s)) return compile(with_number_bounds(s, path), path);
  for (const auto& [key, value] : s.items()) {
    ORBIT_CHECK(structural().count(key) || is_annotation(key), path << ": '" << key << "' is not supported");
  }
  // OpenAPI's discriminator names the property that tells a union's alternatives apart: nothing to decode.
  ORBIT_CHECK(!s.contains("discriminator") || s.contains("oneOf") || s.contains("anyOf"),
              path << ": 'discriminator' is supported only beside oneOf or anyOf");
  if (s.contains("nullable")) return compile_nullable(s, path);
  for (const char* key : {"$ref", "anyOf", "allOf", "oneOf"}) {
    if (!s.contains(key)) continue;
    const bool several = std::string_view(key) == "allOf" && s.at(key).is_array() && s.at(key).size() > 1;
    if (has_siblings(s, key) || several) return compile_with_siblings(s, key, path);
  }
  if (s.contains("$ref")) return compile_ref(s, path);
  if (s.contains("anyOf")) return compile_any_of(s, path);
  if (s.contains("allOf")) return compile_all_of(s, path);
  if (s.contains("oneOf")) return compile_one_of(s, path);
  const std::vector<std::string> types = types_of(s, path);
  if (s.contains("enum") || s.contains("const")) return compile_enum(s, types, path);
  if (types.empty()) return add_any_value(g_, limits_);
  check_applies(s, types, path);
  std::vector<int32_t> alternatives;
  for (const std::string& t : types) alternatives.push_back(compile_type(s, t, path));
  if (alternatives.size() == 1) return alternatives.front();
  Node choice;
  choice.kind = NodeKind::kChoice;
  choice.children = alternatives;
  return g_.add(std::move(choice));
}

// OpenAPI 3.0's nullable (its targets in zod and others write it for "or null"): true admits null beside what the
// rest of the schema admits; false admits nothing more. Beside an enum or const, null only where it is listed
// (OpenAPI 3.0.3), so "null" joins the "type" that would drop it.
int32_t SchemaCompiler::compile_nullable(const Json& s, const std::string& path) {
  const Json& flag = s.at("nullable");
  ORBIT_CHECK(flag.is_boolean(), path << ".nullable: expected true or false, not " << brief(flag));
  Json rest = s;
  rest.erase("nullable");
  const std::vector<std::string> types = types_of(rest, path);
  const bool has_null = std::find(types.begin(), types.end(), "null") != types.end();
  if (!flag.get<bool>() || has_null) return compile(rest, path);
  if (rest.contains("enum") || rest.contains("const")) {
    if (rest.contains("type")) {
      Json listed = Json::array();
      for (const std::string& t : types) listed.push_back(t);
      listed.push_back("null");
      rest["type"] = listed;
    }
    return compile(rest, path);
  }
  const bool combined =
      rest.contains("$ref") || rest.contains("anyOf") || rest.contains("allOf") || rest.contains("oneOf");
  if (types.empty() && !combined) return compile(rest, path);  // any value: null among them
  if (combined && rest.contains("type")) {
    // nullable widens this schema's own type; what it is combined with ($ref's target, allOf's parts, each
    // alternative) still refuses null where its type leaves it out. Without a type of its own, nullable makes the
    // combination nullable (below: {"allOf": [{"$ref": ...}], "nullable": true}, OpenAPI 3.0's nullable reference).
    Json listed = Json::array();
    for (const std::string& t : types) listed.push_back(t);
    listed.push_back("null");
    rest["type"] = listed;
    return compile(rest, path);
  }
  Node choice;
  choice.kind = NodeKind::kChoice;
  choice.children = {compile(rest, path), add_literal(g_, "null")};
  return g_.add(std::move(choice));
}

int32_t SchemaCompiler::compile_type(const Json& s, const std::string& type, const std::string& path) {
  if (type == "object") return compile_object(s, path);
  if (type == "array") return compile_array(s, path);
  if (type == "string") return compile_string(s, path);
  if (type == "number" || type == "integer") return compile_number(s, type == "integer", path);
  if (type == "boolean") return add_literal_set(g_, {"true", "false"});
  return add_literal(g_, "null");
}

int32_t SchemaCompiler::compile_string(const Json& s, const std::string& path) {
  const int64_t min = s.contains("minLength") ? count_of(s, "minLength", path) : 0;
  const int64_t max =
      s.contains("maxLength") ? count_of(s, "maxLength", path) : std::max(min, limits_.max_string_chars);
  ORBIT_CHECK(min <= max, path << ": minLength " << min << " is above maxLength " << max);
  if (!s.contains("pattern") && !s.contains("format") && !s.contains("contentEncoding"))
    return add_string(g_, min, max);
  StringRules rules;
  rules.min_chars = min;
  rules.max_chars = max;
  for (const char* k : {"pattern", "format", "contentEncoding"}) {
    if (!s.contains(k)) continue;
    ORBIT_CHECK(s.at(k).is_string(), path << "." << k << ": expected a string, not " << brief(s.at(k)));
  }
  if (s.contains("pattern")) rules.pattern = s.at("pattern").get_ptr<const std::string*>();
  if (s.contains("format")) rules.format = s.at("format").get_ptr<const std::string*>();
  // contentEncoding base64 or base64url (zod writes it beside the format of its name): the text is that
  // encoding, the format of the same name. Other encodings (RFC 2045's 7bit, quoted-printable, ...) are refused.
  if (s.contains("contentEncoding")) {
    const std::string* encoding = s.at("contentEncoding").get_ptr<const std::string*>();
    ORBIT_CHECK(*encoding == "base64" || *encoding == "base64url",
                path << ".contentEncoding: \"" << *encoding << "\" is not supported (base64 and base64url are)");
    ORBIT_CHECK(rules.format == nullptr || *rules.format == *encoding, path << ".contentEncoding: \"" << *encoding
                                                                            << "\" beside format \"" << *rules.format
                                                                            << "\" (give one, or the same in both)");
    rules.format = encoding;
  }
  cap_format_chars(rules, path);
  return add_string_dfa(g_, rules, path);
}

int32_t SchemaCompiler::compile_number(const Json& s, bool integer, const std::string& path) {
  const NumberFormat* format = number_format(s);
  integer = integer || (format != nullptr && format->integer);
  const bool format_bounds = format != nullptr && format->minimum != nullptr;
  if (!integer && !has_number_keyword(s) && !format_bounds) return add_number(g_, integer, limits_.max_number_chars);
  NumberRules rules;
  rules.integer = integer;
  if (format_bounds) {
    rules.format_minimum = format->minimum;
    rules.format_maximum = format->maximum;
  }
  const auto text = [&](const char* key) -> std::optional<std::string> {
    if (!s.contains(key)) return std::nullopt;
    const Json& v = s.at(key);
    ORBIT_CHECK(v.is_number(), path << "." << key << ": expected a number, not " << brief(v));
    return v.dump();
  };
  rules.minimum = text("minimum");
  rules.maximum = text("maximum");
  rules.exclusive_minimum = text("exclusiveMinimum");
  rules.exclusive_maximum = text("exclusiveMaximum");
  rules.multiple_of = text("multipleOf");
  // An integer the schema leaves unbounded on a side stays within JavaScript's safe integers on it
  // (|n| <= 2^53 - 1): clients that read JSON numbers as doubles (every JavaScript client) would round a
  // larger one to another integer. A bound the schema gives is kept as given.
  if (integer && !rules.minimum && !rules.exclusive_minimum) rules.minimum = "-9007199254740991";
  if (integer && !rules.maximum && !rules.exclusive_maximum) rules.maximum = "9007199254740991";
  return add_number_dfa(g_, rules, limits_.max_number_chars, path);
}

int32_t SchemaCompiler::compile_enum(const Json& s, const std::vector<std::string>& types, const std::string& path) {
  const bool is_const = s.contains("const");
  ORBIT_CHECK(!(is_const && s.contains("enum")), path << ": 'enum' beside 'const' is not supported");
  only_beside(s, is_const ? "const" : "enum", {"type"}, path);
  std::vector<Json> values;
  if (is_const) {
    values.push_back(s.at("const"));
  } else {
    const Json& e = s.at("enum");
    ORBIT_CHECK(e.is_array() && !e.empty(), path << ".enum: expected a non-empty list of values, not " << brief(e));
    values.assign(e.begin(), e.end());
  }
  // Each distinct value once, in the schema's order; `seen` keeps the check linear in the list's length (a
  // search of `texts` for each value took 25 s for 100000 values).
  std::vector<std::string> texts;
  std::unordered_set<std::string> seen;
  for (const Json& v : values) {
    const bool typed =
        types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); });
    std::string text = v.dump();
    if (typed && seen.insert(text).second) texts.push_back(std::move(text));
  }
  ORBIT_CHECK(!texts.empty(), path << ": no value of '" << (is_const ? "const" : "enum") << "' has the schema's type");
  return add_literal_set(g_, texts);
}

int32_t SchemaCompiler::compile_any_of(const Json& s, const std::string& path) {
  only_beside(s, "anyOf", {"discriminator"}, path);
  const Json& list = s.at("anyOf");
  ORBIT_CHECK(list.is_array() && !list.empty(),
              path << ".anyOf: expected a non-empty list of schemas, not " << brief(list));
  Node choice;
  choice.kind = NodeKind::kChoice;
  for (std::size_t i = 0; i < list.size(); ++i) {
    choice.children.push_back(compile(list[i], path + ".anyOf[" + std::to_string(i) + "]"));
  }
  return g_.add(std::move(choice));
}

// allOf of one schema (as older Pydantic writes a described reference): that schema. The values valid under
// several at once are not compiled.
int32_t SchemaCompiler::compile_all_of(const Json& s, const std::string& path) {
  only_beside(s, "allOf", {}, path);
  const Json& list = s.at("allOf");
  ORBIT_CHECK(list.is_array() && !list.empty(),
              path << ".allOf: expected a non-empty list of schemas, not " << brief(list));
  ORBIT_CHECK(list.size() == 1, path << ".allOf: a list of " << list.size() << " schemas is not supported (only one)");
  return compile(list[0], path + ".allOf[0]");
}

// A reference compiles its target once. A reference back into a target being compiled (a recursive schema:
// trees, nested comments) points at a placeholder that forwards to the target; it must sit inside an object
// or array the target opens (else no value could ever finish), and make() refuses a branch that only recurses.
int32_t SchemaCompiler::compile_ref(const Json& s, const std::string& path) {
  only_beside(s, "$ref", {}, path);
  const Json& ref = s.at("$ref");
  ORBIT_CHECK(ref.is_string(), path << ".$ref: expected a string, not " << brief(ref));
  const std::string r = ref.get<std::string>();
  ORBIT_CHECK(r == "#" || r.rfind("#/", 0) == 0, path << ".$ref: \"" << r << "\" is not supported (only references "
                                                      << "into this schema, such as \"#/$defs/Name\")");
  const auto done = compiled_refs_.find(r);
  if (done != compiled_refs_.end()) return done->second;
  const auto open = expanding_.find(r);
  if (open != expanding_.end()) {
    ORBIT_CHECK(containers_ > open->second.second, path << ".$ref: \"" << r << "\" refers back to itself outside "
                                                        << "any object or array (no value of it could finish)");
    used_placeholders_.insert(open->second.first);
    return open->second.first;
  }
  const Json* target = nullptr;
  try {
    target = &root_.at(Json::json_pointer(r.substr(1)));
  } catch (const nlohmann::json::exception&) {
    ORBIT_FAIL(path << ".$ref: \"" << r << "\" names nothing in the schema");
  }
  std::string target_path = root_path_;
  for (std::size_t i = 2, j; i <= r.size(); i = j + 1) {
    j = r.find('/', i);
    if (j == std::string::npos) j = r.size();
    target_path += "." + r.substr(i, j - i);
  }
  Node forward;
  forward.kind = NodeKind::kChoice;
  const int32_t placeholder = g_.add(std::move(forward));
  expanding_[r] = {placeholder, containers_};
  const int32_t node = compile(*target, target_path);
  expanding_.erase(r);
  g_.nodes[static_cast<std::size_t>(placeholder)].children = {node};
  const int32_t out = used_placeholders_.count(placeholder) ? placeholder : node;
  compiled_refs_[r] = out;
  return out;
}

}  // namespace schema

int32_t add_json_schema(Grammar& g, std::string_view schema_json, const ConstraintLimits& limits,
                        const std::string& path) {
  schema::Json schema;
  try {
    schema = schema::Json::parse(schema_json.begin(), schema_json.end(),
                                 [&](int depth, schema::Json::parse_event_t event, schema::Json&) {
                                   if ((event == schema::Json::parse_event_t::object_start ||
                                        event == schema::Json::parse_event_t::array_start) &&
                                       depth >= kMaxJsonDepth) {
                                     ORBIT_FAIL(path << ": JSON nests deeper than " << kMaxJsonDepth << " levels");
                                   }
                                   return true;
                                 });
  } catch (const nlohmann::json::exception& e) {
    ORBIT_FAIL(path << ": not valid JSON: " << e.what());
  }
  schema::SchemaCompiler compiler(g, limits, schema, path);
  return compiler.compile(schema, path);
}

}  // namespace orbit::constrain
