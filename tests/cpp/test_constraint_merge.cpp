// Schemas combined keyword by keyword (sdk/src/constrain/schema_merge.cpp): allOf of several schemas and keywords
// beside $ref, anyOf, allOf and oneOf, as hand-written tool schemas and generators write them ("at least one of
// these properties", a base type extended, a tagged union with shared properties). Each admits exactly the values
// every part admits: valid and invalid instances, and the refusals of what cannot be combined exactly. Links
// orbit_constrain and Catch only.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "error_text.h"
#include "orbit/constraint.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Contains;

namespace {

std::shared_ptr<const Constraint> schema(const std::string& text) { return Constraint::json_schema(text); }

void check(const std::string& text, std::initializer_list<const char*> valid,
           std::initializer_list<const char*> invalid) {
  INFO(text);
  const auto c = schema(text);
  for (const char* v : valid) CHECK(c->matches(v));
  for (const char* v : invalid) CHECK_FALSE(c->matches(v));
}

}  // namespace

TEST_CASE("keywords beside anyOf hold in each alternative", "[constraint]") {
  // At least one of two properties, the object closed: additionalProperties and properties on the same side.
  check(R"({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
            "additionalProperties": false, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})",
        {R"({"a": "x"})", R"({"b": 1})", R"({"a": "x", "b": 2})"}, {"{}", R"({"c": 1})", R"({"b": "x"})"});
  // "type" narrows each alternative; one with no common type is dropped.
  check(R"({"type": ["string", "null"], "anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]})",
        {R"("ab")"}, {R"("abc")", "1", "null"});
  check(R"({"type": "number", "anyOf": [{"type": "integer"}]})", {"3"}, {"3.5", R"("3")"});
  check(R"({"type": "string", "anyOf": [{"format": "uuid"}, {"pattern": "^x+$"}]})",
        {R"("123e4567-e89b-12d3-a456-426614174000")", R"("xx")"}, {R"("y")", "5"});
  check(R"({"enum": ["a", "b", "c"], "anyOf": [{"enum": ["b", "d"]}]})", {R"("b")"}, {R"("a")", R"("d")"});
}

TEST_CASE("allOf of several schemas admits what all of them admit", "[constraint]") {
  // A base type extended (older Pydantic and OpenAPI write this).
  check(R"({"$defs": {"Base": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
            "allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"age": {"type": "integer"}}, "required": ["age"]}]})",
        {R"({"name": "x", "age": 3})"}, {R"({"name": "x"})", R"({"age": 3})", R"({"name": 1, "age": 3})"});
  // A property in both: its two schemas combined; bounds: the stricter.
  check(R"({"allOf": [{"properties": {"n": {"type": "number"}}}, {"properties": {"n": {"minimum": 1}}}]})",
        {R"({"n": 2})", "{}"}, {R"({"n": 0})", R"({"n": "x"})"});
  check(R"({"allOf": [{"type": "string", "minLength": 2, "maxLength": 9}, {"minLength": 3, "maxLength": 4}]})",
        {R"("abc")", R"("abcd")"}, {R"("ab")", R"("abcde")"});
  check(R"({"type": "array", "items": {"type": "integer"}, "allOf": [{"items": {"minimum": 0}}]})", {"[0, 3]"},
        {"[-1]", "[1.5]"});
}

TEST_CASE("keywords beside $ref and oneOf hold too", "[constraint]") {
  check(R"({"$defs": {"S": {"type": "string"}}, "$ref": "#/$defs/S", "maxLength": 3})", {R"("abc")"},
        {R"("abcd")", "1"});
  // A tagged union with shared properties: the tag's schemas combine, so the alternatives stay exclusive.
  check(R"({"type": "object", "properties": {"kind": {"type": "string"}, "id": {"type": "integer"}},
            "required": ["kind", "id"],
            "oneOf": [{"properties": {"kind": {"const": "a"}}}, {"properties": {"kind": {"const": "b"}}}]})",
        {R"({"kind": "a", "id": 1})", R"({"kind": "b", "id": 2})"}, {R"({"kind": "c", "id": 1})", R"({"kind": "a"})"});
}

TEST_CASE("what cannot be combined exactly is refused naming it", "[constraint]") {
  const auto refusal = [](const char* text) { return error_of([&] { schema(text); }); };
  CHECK_THAT(refusal(R"({"properties": {"a": {}}, "additionalProperties": {"type": "string"},
                         "anyOf": [{"properties": {"b": {}}}]})"),
             Contains("schema: anyOf[0] and the keywords beside it: additionalProperties of one part beside properties "
                      "of another cannot be combined"));
  // false combines: the other part's properties cannot appear (required, no object fits).
  check(R"({"properties": {"a": {}}, "additionalProperties": false, "anyOf": [{"properties": {"b": {}}}]})",
        {R"({"a": 1})", "{}"}, {R"({"b": 1})"});
  CHECK_THAT(refusal(R"({"properties": {"a": {}}, "additionalProperties": false,
                         "anyOf": [{"properties": {"b": {}}, "required": ["b"]}]})"),
             Contains("schema: no schema of anyOf admits a value the keywords beside it admit"));
  CHECK_THAT(refusal(R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})"),
             Contains("schema: allOf[1] and the keywords beside it: 'pattern' is given differently by both parts"));
  CHECK_THAT(refusal(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})"),
             Contains("schema: no value matches every schema of allOf (with the keywords beside it)"));
  CHECK_THAT(refusal(R"({"type": "string", "anyOf": [{"type": "number"}]})"),
             Contains("schema: no schema of anyOf admits a value the keywords beside it admit"));
  CHECK_THAT(refusal(R"({"prefixItems": [{}], "allOf": [{"items": {"type": "string"}}]})"),
             Contains("a tuple's items (prefixItems, additionalItems) in one part beside items of another"));
  CHECK_THAT(refusal(R"({"$defs": {"L": {"$ref": "#/$defs/L", "type": "string"}}, "$ref": "#/$defs/L",
                         "maxLength": 2})"),
             Contains("references combined more than 64 deep"));
  CHECK_THAT(refusal(R"({"type": "object", "anyOf": [{"required": ["a"]}], "uniqueItems": true})"),
             Contains("schema.anyOf[0]: 'uniqueItems' applies to arrays, and \"type\" has none"));
}

// ---- against a validator that reads each keyword on its own, as JSON Schema defines them (no combining)

namespace {

using Json = nlohmann::ordered_json;

bool has_type(const Json& v, const std::string& t) {
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v);
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "boolean") return v.is_boolean();
  return v.is_null();
}

bool valid(const Json& s, const Json& v);

bool valid_keyword(const Json& s, const std::string& k, const Json& x, const Json& v) {
  const auto count = [&] { return static_cast<double>(v.is_string() ? v.get<std::string>().size() : v.size()); };
  if (k == "type") {
    const Json types = x.is_array() ? x : Json::array({x});
    return std::any_of(types.begin(), types.end(), [&](const Json& t) { return has_type(v, t.get<std::string>()); });
  }
  if (k == "enum") return std::find(x.begin(), x.end(), v) != x.end();
  if (k == "const") return v == x;
  if (k == "minLength" || k == "maxLength") return !v.is_string() || (k[1] == 'i' ? count() >= x : count() <= x);
  if (k == "minItems" || k == "maxItems") return !v.is_array() || (k[1] == 'i' ? count() >= x : count() <= x);
  if (k == "minimum") return !v.is_number() || v.get<double>() >= x.get<double>();
  if (k == "maximum") return !v.is_number() || v.get<double>() <= x.get<double>();
  if (k == "items") return !v.is_array() || std::all_of(v.begin(), v.end(), [&](const Json& e) { return valid(x, e); });
  if (k == "required") {
    return !v.is_object() || std::all_of(x.begin(), x.end(), [&](const Json& n) { return v.contains(n); });
  }
  if (k == "properties") {
    return !v.is_object() || std::all_of(x.items().begin(), x.items().end(), [&](const auto& p) {
      return !v.contains(p.key()) || valid(p.value(), v.at(p.key()));
    });
  }
  if (k == "additionalProperties") {
    return !v.is_object() || std::all_of(v.items().begin(), v.items().end(), [&](const auto& m) {
      return (s.contains("properties") && s.at("properties").contains(m.key())) || valid(x, m.value());
    });
  }
  const auto holds = [&](const Json& branch) { return valid(branch, v); };
  if (k == "anyOf") return std::any_of(x.begin(), x.end(), holds);
  if (k == "allOf") return std::all_of(x.begin(), x.end(), holds);
  if (k == "oneOf") return std::count_if(x.begin(), x.end(), holds) == 1;
  FAIL("the validator does not know " << k);
  return false;
}

// Without "type", orbit takes the types a schema's keywords apply to (constraint.h): properties, required or
// additionalProperties an object, minLength a string, minimum a number.
bool inferred_type(const Json& s, const Json& v) {
  if (s.contains("type")) return true;
  std::vector<std::string> types;
  if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
    types.push_back("object");
  if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) types.push_back("array");
  if (s.contains("minLength") || s.contains("maxLength")) types.push_back("string");
  if (s.contains("minimum") || s.contains("maximum")) types.push_back("number");
  return types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); });
}

bool valid(const Json& s, const Json& v) {
  if (s.is_boolean()) return s.get<bool>();
  if (!inferred_type(s, v)) return false;
  return std::all_of(s.items().begin(), s.items().end(),
                     [&](const auto& kv) { return valid_keyword(s, kv.key(), kv.value(), v); });
}

// Random parts over the properties a, b, c (always declared in that order, as the instances list them: the
// grammar writes declared properties in order).
class Parts {
 public:
  explicit Parts(uint64_t seed) : rng_(seed) {}

  Json leaf() {
    switch (pick(7)) {
      case 0: return Json{{"type", "string"}, {"maxLength", 1 + pick(3)}};
      case 1: return Json{{"type", pick(2) ? "integer" : "number"}};
      case 2: return Json{{"minimum", pick(3) - 1}};
      case 3: return Json{{"enum", Json::array({"x", 1, nullptr})}};
      case 4: return Json{{"type", Json::array({"string", "null"})}};
      case 5: return Json{{"minLength", 1}};
      default: return Json{{"enum", Json::array({1, 2})}};
    }
  }

  Json part(bool object) {
    Json s = Json::object();
    if (object && pick(2)) s["type"] = "object";
    Json props = Json::object();
    for (const char* n : {"a", "b", "c"}) {
      if (pick(3) == 0) props[n] = leaf();
    }
    if (!props.empty()) s["properties"] = props;
    Json required = Json::array();
    for (const char* n : {"a", "b", "c"}) {
      if (pick(4) == 0) required.push_back(n);
    }
    if (!required.empty()) s["required"] = required;
    // Explicit wherever there are properties: without it an object compiles closed (constraint.h), where JSON
    // Schema, and this test's validator, leave it open.
    if (!props.empty()) s["additionalProperties"] = pick(4) != 0;
    if (!object && pick(4) == 0) s = leaf();
    return s;
  }

  Json instance() {
    if (pick(6) == 0) return pick(2) ? Json("x") : Json(1);
    Json v = Json::object();
    for (const char* n : {"a", "b", "c"}) {
      if (pick(2)) v[n] = value();
    }
    return v;
  }

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

 private:
  Json value() {
    switch (pick(8)) {
      case 0: return "x";
      case 1: return "";
      case 2: return "xyz";
      case 3: return pick(4) - 1;
      case 4: return 1.5;
      case 5: return nullptr;
      case 6: return true;
      default: return 2;
    }
  }

  std::mt19937_64 rng_;
};

// Whether `c` admits the value `v`, its members in some order: the grammar writes declared properties in the
// order the (combined) schema declares them, and extra members after them.
bool matches_in_some_order(const Constraint& c, const Json& v) {
  if (!v.is_object()) return c.matches(v.dump());
  std::vector<std::string> keys;
  for (const auto& item : v.items()) keys.push_back(item.key());
  std::sort(keys.begin(), keys.end());
  do {
    Json ordered = Json::object();
    for (const std::string& k : keys) ordered[k] = v.at(k);
    if (c.matches(ordered.dump())) return true;
  } while (std::next_permutation(keys.begin(), keys.end()));
  return false;
}

}  // namespace

TEST_CASE("combined schemas admit what a keyword-by-keyword validator admits", "[constraint]") {
  int compiled = 0;
  int refused = 0;
  int admitted = 0;
  for (uint64_t seed = 1; seed <= 600; ++seed) {
    Parts gen(seed);
    Json s = gen.part(true);
    const char* key = std::vector<const char*>{"anyOf", "allOf", "oneOf"}[static_cast<std::size_t>(gen.pick(3))];
    Json list = Json::array();
    for (int i = 0, n = 1 + gen.pick(3); i < n; ++i) list.push_back(gen.part(false));
    s[key] = list;
    INFO(s.dump());
    std::shared_ptr<const Constraint> c;
    try {
      c = schema(s.dump());
    } catch (const orbit::Error& e) {
      ++refused;  // what cannot be combined exactly (or a oneOf whose alternatives may overlap)
      const std::string why = e.what();
      if (why.find("no value matches every schema of allOf") != std::string::npos ||
          why.find("admits a value the keywords beside it admit") != std::string::npos) {
        INFO(why);  // refused as admitting nothing: no value may be valid
        for (int i = 0; i < 40; ++i) CHECK_FALSE(valid(s, gen.instance()));
      }
      continue;
    }
    ++compiled;
    for (int i = 0; i < 40; ++i) {
      const Json v = gen.instance();
      INFO(v.dump());
      const bool expected = valid(s, v);
      CHECK(matches_in_some_order(*c, v) == expected);
      admitted += expected ? 1 : 0;
    }
  }
  INFO(compiled << " compiled, " << refused << " refused, " << admitted << " instances admitted");
  CHECK(compiled >= 150);
  CHECK(admitted >= 800);
}

}  // namespace ORBIT_TEST_FILE

namespace ORBIT_TEST_FILE {

TEST_CASE("a part's nullable widens that part alone; bounds past 2^53 are compared exactly", "[constraint]") {
  // The second part's type leaves null out: the combination refuses it (OpenAPI 3.0.3's nullable).
  check(R"({"allOf": [{"type": "string", "nullable": true}, {"type": "string", "maxLength": 3}]})", {R"("abc")"},
        {"null", R"("abcd")"});
  check(R"({"$defs": {"S": {"type": "string", "maxLength": 3}}, "type": "string", "nullable": true,
            "allOf": [{"$ref": "#/$defs/S"}]})",
        {R"("ab")"}, {"null"});
  // Both parts nullable, or a nullable reference without a type of its own: null stays.
  check(R"({"allOf": [{"type": "string", "nullable": true}, {"type": ["string", "null"], "maxLength": 3}]})",
        {R"("abc")", "null"}, {R"("abcd")"});
  check(R"({"$defs": {"S": {"type": "string"}}, "allOf": [{"$ref": "#/$defs/S"}], "nullable": true})",
        {R"("ab")", "null"}, {"1"});
  // 9007199254740993 and 9007199254740992 are one double: the stricter bound is found exactly.
  check(R"({"allOf": [{"type": "integer", "minimum": 9007199254740993},
                      {"minimum": 9007199254740992, "maximum": 9007199254740993}]})",
        {"9007199254740993"}, {"9007199254740992"});
  check(R"({"allOf": [{"type": "integer", "maximum": 9007199254740992}, {"maximum": 9007199254740993}]})",
        {"9007199254740992"}, {"9007199254740993"});
}

TEST_CASE("what one schema may cost is bounded before it is paid", "[constraint]") {
  // anyOf beside many keywords: each alternative would copy them (refused before the copies are made).
  nlohmann::json wide = {
      {"type", "object"}, {"properties", nlohmann::json::object()}, {"anyOf", nlohmann::json::array()}};
  for (int i = 0; i < 400; ++i) {
    const std::string name = "p" + std::to_string(i);
    wide["properties"][name] = {{"type", "integer"}};
    wide["anyOf"].push_back({{"required", {name}}});
  }
  CHECK_THAT(error_of([&] { schema(wide.dump()); }),
             Contains("anyOf's 400 schemas, each combined with the") && Contains("too large"));
  // A chain of references nests no deeper in the text, but each is a level of the compile: bounded.
  nlohmann::json chain = {{"$defs", nlohmann::json::object()}, {"$ref", "#/$defs/d0"}};
  for (int i = 0; i < 2000; ++i)
    chain["$defs"]["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  chain["$defs"]["d2000"] = {{"type", "integer"}};
  CHECK_THAT(error_of([&] { schema(chain.dump()); }), Contains("the schema nests deeper than 128 levels"));
  nlohmann::json objects = {{"$defs", nlohmann::json::object()}, {"$ref", "#/$defs/d0"}};
  for (int i = 0; i < 2000; ++i) {
    objects["$defs"]["d" + std::to_string(i)] = {
        {"type", "object"},
        {"properties", {{"x", {{"$ref", "#/$defs/d" + std::to_string(i + 1)}}}}},
        {"required", {"x"}}};
  }
  objects["$defs"]["d2000"] = {{"type", "integer"}};
  CHECK_THAT(error_of([&] { schema(objects.dump()); }), Contains("nests deeper than 128 levels"));
  // Distinct patterns, each near the automaton bound alone: together past the schema's bound, refused naming
  // where it was reached (before building the rest).
  nlohmann::json patterns = {{"type", "object"}, {"properties", nlohmann::json::object()}};
  for (int i = 0; i < 40; ++i) {
    patterns["properties"]["p" + std::to_string(i)] = {{"type", "string"},
                                                       {"pattern", "^" + std::to_string(i) + "[ab]*a[ab]{14}$"}};
  }
  CHECK_THAT(error_of([&] { schema(patterns.dump()); }),
             Contains("too complex to constrain together") && Contains("schema.properties.p"));
  // oneOf checks every pair of its schemas: at most 1024 of them.
  nlohmann::json many = {{"oneOf", nlohmann::json::array()}};
  for (int i = 0; i < 1025; ++i) many["oneOf"].push_back({{"const", i}});
  CHECK_THAT(error_of([&] { schema(many.dump()); }), Contains("oneOf: 1025 schemas, over the 1024"));
  many["oneOf"].erase(1024);
  CHECK(schema(many.dump())->matches("1023"));
}

}  // namespace ORBIT_TEST_FILE
