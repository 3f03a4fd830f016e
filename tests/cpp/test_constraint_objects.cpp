// Objects under additionalProperties beside properties (extra members after the declared ones, their keys
// none of the declared names), propertyNames, minProperties and maxProperties (sdk/src/constrain/
// schema_objects.cpp): valid and invalid instances, refusals naming the keyword, random walks checked by a
// validator that sees every member (repeats included) and by the exactness of the fewest bytes left, and
// token masks against brute force under a budget. Links orbit_constrain and Catch only.
#include <catch2/catch.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "constrain/byte_dfa.h"
#include "constrain/regex.h"
#include "error_text.h"
#include "orbit/constraint.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Contains;
using Json = nlohmann::json;

namespace {

std::shared_ptr<const Constraint> schema(const std::string& text, const ConstraintLimits& limits = {}) {
  return Constraint::json_schema(text, limits);
}

// The members of a JSON object's text in order, repeats kept: (key, value). The text must be an object.
std::vector<std::pair<std::string, Json>> members_of(const std::string& text) {
  std::vector<std::pair<std::string, Json>> out;
  std::size_t i = text.find('{') + 1;
  int depth = 0;
  bool in_string = false;
  std::size_t start = i;
  const auto take = [&](std::size_t end) {
    const std::string member = text.substr(start, end - start);
    if (member.find_first_not_of(' ') == std::string::npos) return;
    // The key is a string without a raw ':' after its closing quote: find the ':' after the key.
    std::size_t k = member.find('"');
    for (++k; member[k] != '"'; ++k) k += member[k] == '\\' ? 1 : 0;
    const std::size_t colon = member.find(':', k);
    out.emplace_back(Json::parse(member.substr(0, colon)).get<std::string>(), Json::parse(member.substr(colon + 1)));
  };
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '{' || c == '[') ++depth;
    if ((c == '}' || c == ']') && depth-- == 0) break;
    if (c == ',' && depth == 0) {
      take(i);
      start = i + 1;
    }
  }
  take(i);
  return out;
}

// A flat object schema's rules, for the validator below.
struct Rules {
  std::vector<std::string> declared;  // in order
  std::vector<std::string> required;
  std::function<bool(const std::string&, const Json&)> declared_value = [](const std::string&, const Json&) {
    return true;
  };
  bool extra = false;
  std::function<bool(const std::string&)> extra_key = [](const std::string&) { return true; };
  std::function<bool(const Json&)> extra_value = [](const Json&) { return true; };
  std::size_t min = 0;
  std::size_t max = 1000;
};

// Whether `text` is an instance: declared members in order, each at most once, then extra members (keys
// not declared), all values valid, required present, [min, max] members. Empty when valid, else why.
std::string invalid(const Rules& r, const std::string& text) {
  const auto members = members_of(text);
  std::size_t next = 0;  // the first declared property still allowed
  bool extras = false;
  for (const auto& [key, value] : members) {
    const auto at = std::find(r.declared.begin(), r.declared.end(), key);
    if (at != r.declared.end()) {
      const auto index = static_cast<std::size_t>(at - r.declared.begin());
      if (extras || index < next) return "declared " + key + " out of order or repeated";
      next = index + 1;
      if (!r.declared_value(key, value)) return "bad value of " + key;
      continue;
    }
    if (!r.extra || !r.extra_key(key)) return "extra key " + key + " not allowed";
    if (!r.extra_value(value)) return "bad value of extra " + key;
    extras = true;
  }
  for (const std::string& q : r.required) {
    if (std::none_of(members.begin(), members.end(), [&](const auto& m) { return m.first == q; })) {
      return "required " + q + " missing";
    }
  }
  if (members.size() < r.min || members.size() > r.max) return std::to_string(members.size()) + " members";
  return "";
}

// Walks `c` from the start taking random allowed bytes from `alphabet`, `walks` times. At every state the
// fewest bytes left are exact: some byte (of all 256) leaves one fewer and none leaves fewer than that. Every
// state is complete or can continue; past `max_bytes / 2` a walk heads for the end. Returns the texts.
std::vector<std::string> walks(const std::shared_ptr<const Constraint>& c, const std::string& alphabet, int count,
                               std::mt19937& rng, int max_bytes = 120) {
  std::vector<std::string> out;
  for (int w = 0; w < count; ++w) {
    ConstraintMatcher m(c);
    while (true) {
      INFO("after " << m.text());
      const int64_t left = m.min_bytes_to_complete();
      int64_t fewest = -1;
      for (int b = 0; b < 256; ++b) {
        const char ch = static_cast<char>(b);
        const int64_t after = m.min_bytes_after(std::string_view(&ch, 1));
        if (after >= 0 && (fewest < 0 || after < fewest)) fewest = after;
      }
      if (m.complete()) {
        REQUIRE(left == 0);
      } else {
        REQUIRE(fewest == left - 1);
      }
      if (m.complete() && (rng() % 4 == 0 || fewest < 0)) break;
      REQUIRE(fewest >= 0);  // not complete, or complete and extendable: some byte goes on
      std::vector<char> ok;
      for (char b : alphabet) {
        if (m.can_advance(std::string(1, b))) ok.push_back(b);
      }
      const bool hurry = static_cast<int>(m.text().size()) >= max_bytes / 2 || ok.empty();
      if (hurry) {  // the byte that leaves the fewest
        if (m.complete()) break;
        for (int b = 0; b < 256; ++b) {
          const char ch = static_cast<char>(b);
          if (m.min_bytes_after(std::string_view(&ch, 1)) == fewest) {
            REQUIRE(m.advance(std::string_view(&ch, 1)));
            break;
          }
        }
        continue;
      }
      REQUIRE(m.advance(std::string(1, ok[rng() % ok.size()])));
    }
    REQUIRE(m.complete());
    out.push_back(m.text());
  }
  return out;
}

// Brute force for a decoder's masks: the fewest bytes left after a fresh decoder takes `text`, then `bytes`
// (-1 where it refuses them: the grammar, or a repeated key).
int64_t left_after(const std::shared_ptr<const Constraint>& c, const std::shared_ptr<const TokenVocabulary>& vocab,
                   const std::string& text, const std::string& bytes) {
  TokenConstraint replay(c, vocab);
  replay.accept_text(text);
  try {
    replay.accept_text(bytes);
  } catch (const std::exception&) {
    return -1;
  }
  return replay.matcher().min_bytes_to_complete();
}

const std::string kAlphabet = "{}[]\":, abcnxyzé0123456789-\\u";

bool is_uint(const Json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; }

}  // namespace

TEST_CASE("open objects: declared properties in order, then extra members under additionalProperties", "[constraint]") {
  const auto c = schema(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                            "required": ["name"], "additionalProperties": {"type": "integer", "minimum": 0}})");
  CHECK(c->matches(R"({"name": "a"})"));
  CHECK(c->matches(R"({"name": "a", "age": -3})"));
  CHECK(c->matches(R"({"name": "a", "x": 1, "y y": 2})"));
  CHECK(c->matches(R"({"name": "a", "age": 3, "nam": 0, "namex": 1, "agee": 2})"));  // near the declared names
  CHECK_FALSE(c->matches(R"({"age": 3})"));                                          // name is required
  CHECK_FALSE(c->matches(R"({"name": "a", "name": 1})"));                            // a declared name as an extra key
  CHECK_FALSE(c->matches(R"({"name": "a", "x": 1, "age": 2})"));                     // declared ones come first
  CHECK_FALSE(c->matches(R"({"name": "a", "age": 3, "age": 4})"));                   // once
  CHECK_FALSE(c->matches(R"({"name": "a", "x": -1})"));                              // the extra value's schema
  CHECK_FALSE(c->matches(R"({"name": "a", "x": "s"})"));                             //
  CHECK_FALSE(c->matches(R"({"x": 1, "name": "a"})"));                               // extras after the declared ones
  CHECK_FALSE(c->matches(R"({"name": "a", "\u006eame": 1})"));                       // "name" spelled with an escape
  CHECK_FALSE(c->matches(R"({"name": "a", "\u0078": 1})"));                          // extra keys are canonical
  CHECK(c->min_bytes() == static_cast<int64_t>(std::string(R"({"name":""})").size()));
  ConstraintMatcher m(c);
  REQUIRE(m.advance(R"({"name": "a", "n)"));
  CHECK(m.min_bytes_to_complete() == static_cast<int64_t>(std::string(R"(":0})").size()));
  CHECK_FALSE(m.can_advance(R"(ame")"));
  CHECK(m.can_advance(R"(ame2": 5})"));
  // true: any values; a required name that properties lacks is a declared property under the extra schema.
  const auto any = schema(R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": true})");
  CHECK(any->matches(R"({"a": 1, "b": [1, {"c": null}], "c": "x"})"));
  CHECK(any->matches(R"({"b": {}})"));
  CHECK_FALSE(any->matches(R"({"a": "x"})"));
  const auto id = schema(R"({"additionalProperties": {"type": "integer"}, "required": ["id"]})");
  CHECK(id->matches(R"({"id": 1, "k": 2})"));
  CHECK_FALSE(id->matches("{}"));
  CHECK_FALSE(id->matches(R"({"id": "x"})"));
  CHECK_FALSE(id->matches(R"({"k": 2, "id": 1})"));
  // Keys with escapes: a declared name's own spelling is the only one, taken by the declared property.
  const auto escaped = schema(R"({"properties": {"a\"b": {"const": 1}, "é": {"type": "null"}, "\u001f": {}},
                                  "additionalProperties": {"type": "boolean"}})");
  CHECK(escaped->matches(R"({"a\"b": 1, "é": null, "\u001f": 0, "a\"c": true, "\u0001": false, "\n": true})"));
  CHECK_FALSE(escaped->matches(R"({"a\"b": 1, "a\"b": true})"));
  CHECK_FALSE(escaped->matches(R"({"\u00e9": true})"));  // é, escaped
  CHECK_FALSE(escaped->matches(R"({"\u001F": true})"));  // the declared "\u001f" in upper case
  CHECK_FALSE(escaped->matches(R"({"\u000a": true})"));  // "\n" is written so
  CHECK_FALSE(escaped->matches(R"({"\/": true})"));      // "/" is written so
  CHECK(escaped->matches(R"({"/": true})"));
}

TEST_CASE("open objects under propertyNames", "[constraint]") {
  const auto c = schema(R"({"properties": {"id": {"type": "integer"}}, "propertyNames": {"pattern": "^[a-z]+$"},
                            "additionalProperties": {"type": "boolean"}})");
  CHECK(c->matches(R"({"id": 1, "ok": true, "no": false})"));
  CHECK(c->matches(R"({"ok": true})"));
  CHECK_FALSE(c->matches(R"({"id": 1, "OK": true})"));
  CHECK_FALSE(c->matches(R"({"id": 1, "id": true})"));
  CHECK_FALSE(c->matches(R"({"id": 1, "": true})"));
  // An enum of names: the declared ones are not extra keys; none left means no extra members.
  const auto listed = schema(R"({"properties": {"a": {}}, "propertyNames": {"enum": ["a", "b", "c"]},
                                 "additionalProperties": true})");
  CHECK(listed->matches(R"({"a": 1, "c": 2, "b": 3})"));
  CHECK_FALSE(listed->matches(R"({"a": 1, "a": 2})"));
  CHECK_FALSE(listed->matches(R"({"a": 1, "d": 2})"));
  // Names listed more than once, some of them declared: each extra key allowed once, no declared one extra.
  const auto repeated = schema(R"({"properties": {"a": {}, "b": {}}, "propertyNames": {"enum": ["c", "a", "c", "d",
                                   "b", "d", "a"]}, "additionalProperties": {"type": "integer"}})");
  CHECK(repeated->matches(R"({"a": 1, "b": 2, "d": 3, "c": 4})"));
  CHECK(repeated->matches(R"({"c": 4})"));
  CHECK(ConstraintMatcher(repeated).advance(R"({"a": 1, "b": 2, "d": 3, "c": 4})"));
  CHECK_FALSE(ConstraintMatcher(repeated).advance(R"({"a": 1, "b": 2, "c": 3, "c": 4})"));  // the key log
  CHECK_FALSE(repeated->matches(R"({"a": 1, "b": 2, "a": 3})"));
  CHECK_FALSE(repeated->matches(R"({"e": 1})"));
  CHECK(repeated->min_bytes() == 2);
  const auto names_only = schema(R"({"type": "object", "propertyNames": {"enum": ["x", "y", "x", "y"]},
                                     "additionalProperties": {"type": "null"}})");
  CHECK(names_only->matches(R"({"y": null, "x": null})"));
  CHECK_FALSE(ConstraintMatcher(names_only).advance(R"({"x": null, "x": null})"));
  const auto closed =
      schema(R"({"properties": {"a": {}}, "propertyNames": {"const": "a"}, "additionalProperties": true})");
  CHECK(closed->matches(R"({"a": 1})"));
  CHECK_FALSE(closed->matches(R"({"a": 1, "b": 2})"));
  // Length bounds: "ab" is declared, so the only extra key of two letters from [ab] is "ba" or "aa" or "bb".
  const auto bounded = schema(R"({"properties": {"ab": {}}, "propertyNames": {"pattern": "^[ab]+$", "minLength": 2,
                                  "maxLength": 2}, "additionalProperties": {"type": "null"}})");
  CHECK(bounded->matches(R"({"ab": 0, "ba": null, "aa": null})"));
  CHECK_FALSE(bounded->matches(R"({"a": null})"));
  CHECK_FALSE(bounded->matches(R"({"aab": null})"));
  CHECK_FALSE(bounded->matches(R"({"ab": 0, "ab": null})"));
  // A format: keys that are dates, but the declared one.
  const auto dated = schema(R"({"properties": {"2024-01-01": {"type": "string"}}, "propertyNames": {"format": "date"},
                                "additionalProperties": {"type": "number"}})");
  CHECK(dated->matches(R"({"2024-01-01": "new year", "2024-01-02": 1.5})"));
  CHECK_FALSE(dated->matches(R"({"2024-01-01": "x", "2024-01-01": 1})"));
  CHECK_FALSE(dated->matches(R"({"tomorrow": 1})"));
  // propertyNames beside a closed object checks the declared names only.
  CHECK(schema(R"({"properties": {"abc": {}}, "propertyNames": {"maxLength": 3}})")->matches(R"({"abc": 1})"));
}

TEST_CASE("minProperties and maxProperties: closed objects, open objects and maps", "[constraint]") {
  const auto two = schema(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                              "c": {"type": "integer"}}, "minProperties": 2})");
  CHECK_FALSE(two->matches("{}"));
  CHECK_FALSE(two->matches(R"({"a": 1})"));
  CHECK(two->matches(R"({"a": 1, "c": 2})"));
  CHECK(two->matches(R"({"a": 1, "b": 2, "c": 3})"));
  CHECK(two->min_bytes() == static_cast<int64_t>(std::string(R"({"a":0,"b":0})").size()));
  CHECK_FALSE(two->is_prefix(R"({"c")"));  // nothing could follow it
  CHECK_FALSE(two->is_prefix(R"({"a": 1})"));
  CHECK(two->is_prefix(R"({"b": 1, "c")"));
  const auto at_most = schema(R"({"properties": {"a": {}, "b": {}, "c": {"type": "null"}}, "required": ["c"],
                                  "maxProperties": 2})");
  CHECK(at_most->matches(R"({"a": 1, "c": null})"));
  CHECK(at_most->matches(R"({"c": null})"));
  CHECK_FALSE(at_most->matches(R"({"a": 1, "b": 2, "c": null})"));
  CHECK_FALSE(at_most->is_prefix(R"({"a": 1, "b")"));  // c must come second
  // Open: the extra members count.
  const auto open = schema(R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "integer"},
                               "minProperties": 2, "maxProperties": 3})");
  CHECK_FALSE(open->matches(R"({"a": 1})"));
  CHECK_FALSE(open->matches("{}"));
  CHECK(open->matches(R"({"a": 1, "x": 2})"));
  CHECK(open->matches(R"({"x": 1, "y": 2})"));
  CHECK(open->matches(R"({"a": 1, "x": 2, "y": 3})"));
  CHECK_FALSE(open->matches(R"({"a": 1, "x": 2, "y": 3, "z": 4})"));
  CHECK(open->min_bytes() == static_cast<int64_t>(std::string(R"({"":0," ":0})").size()));  // two keys
  ConstraintMatcher m(open);
  REQUIRE(m.advance(R"({"a": 1)"));
  CHECK(m.min_bytes_to_complete() == static_cast<int64_t>(std::string(R"(,"":0})").size()));
  CHECK_FALSE(m.can_advance("}"));
  // No declared property: every member owed is an extra one.
  const auto extras = schema(R"({"properties": {}, "additionalProperties": {"type": "null"}, "minProperties": 2})");
  CHECK(extras->min_bytes() == static_cast<int64_t>(std::string(R"({"":null," ":null})").size()));
  ConstraintMatcher first(extras);
  REQUIRE(first.advance("{"));
  CHECK(first.min_bytes_to_complete() == static_cast<int64_t>(std::string(R"("":null," ":null})").size()));
  REQUIRE(first.advance(R"("a": null,)"));
  CHECK(first.min_bytes_to_complete() == static_cast<int64_t>(std::string(R"("":null})").size()));
  // Maps.
  const auto map = schema(R"({"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1,
                              "maxProperties": 2})");
  CHECK_FALSE(map->matches("{}"));
  CHECK(map->matches(R"({"k": "v"})"));
  CHECK(map->matches(R"({"k": "v", "l": ""})"));
  CHECK_FALSE(map->matches(R"({"k": "v", "l": "", "m": ""})"));
  CHECK(map->min_bytes() == static_cast<int64_t>(std::string(R"({"":""})").size()));
  CHECK(schema(R"({"type": "object", "maxProperties": 0})")->matches("{}"));
  CHECK_FALSE(schema(R"({"type": "object", "maxProperties": 0})")->matches(R"({"a": 1})"));
  const auto any = schema(R"({"type": "object", "minProperties": 2})");
  CHECK(any->matches(R"({"a": [1], "b": {"c": null}})"));
  CHECK_FALSE(any->matches(R"({"a": [1]})"));
  const auto names = schema(R"({"propertyNames": {"enum": ["x", "y"]}, "additionalProperties": true})");
  CHECK_FALSE(names->matches(R"({"x": 1, "y": 2, "x": 3})"));  // no more members than names
}

TEST_CASE("object keywords: refusals name the keyword and where", "[constraint]") {
  const auto at = [](const std::string& s) { return error_of([&] { schema(s); }); };
  CHECK(at(R"({"properties": {"a": {}, "b": {}}, "minProperties": 3})") ==
        "schema.minProperties: 3 is above the 2 properties the object may have");
  CHECK(at(R"({"properties": {"a": {}}, "required": ["a"], "maxProperties": 0})") ==
        "schema.maxProperties: 0 is below the 1 required properties");
  CHECK(at(R"({"type": "object", "minProperties": 3, "maxProperties": 2})") ==
        "schema.minProperties: 3 is above maxProperties 2");
  CHECK(at(R"({"items": {"type": "object", "minProperties": -1}})") ==
        "schema.items.minProperties: expected a non-negative integer, not -1");
  CHECK(at(R"({"properties": {"x": {"properties": {"Ab": {}}, "propertyNames": {"pattern": "^[a-z]+$"},
               "additionalProperties": true}}})") ==
        "schema.properties.x.propertyNames: the property name \"Ab\" does not hold under it");
  CHECK(at(R"({"additionalProperties": true, "required": ["é"], "propertyNames": {"maxLength": 0}})") ==
        "schema.propertyNames: the property name \"é\" does not hold under it");
  CHECK(at(R"({"properties": {"a": {}}, "propertyNames": {"enum": ["a"]}, "additionalProperties": true,
               "minProperties": 2})") == "schema.minProperties: 2 is above the 1 properties the object may have");
  CHECK(at(R"({"properties": {"a": {}}, "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": true,
               "minProperties": 3})") ==
        "schema.minProperties: 3 is above the 2 properties the object may have (propertyNames admits no more)");
  CHECK(at(R"({"propertyNames": {"enum": ["a"]}, "minProperties": 2})") ==
        "schema.minProperties: 2 is above the 1 names propertyNames admits");
  CHECK(at(R"({"properties": {"a": {}}, "required": ["b"]})") ==
        "schema.required: 'b' is not in properties (no other property may appear)");
  CHECK(at(R"({"properties": {"a": {}}, "additionalProperties": {"type": "strin"}})") ==
        "schema.additionalProperties.type: \"strin\" is not a type (object, array, string, number, integer, boolean, "
        "null)");
  CHECK(at(R"js({"properties": {"a": {}}, "additionalProperties": true, "propertyNames": {"pattern": "(?<=a)"}})js") ==
        "schema.propertyNames.pattern: lookbehind is not supported at character 1 of the pattern");
  CHECK(at(R"({"properties": {"a": {}}, "additionalProperties": true, "propertyNames": {"minimum": 1}})") ==
        "schema.propertyNames: 'minimum' is not supported for keys");
  CHECK(at(R"({"additionalProperties": true, "propertyNames": {"enum": ["a"], "maxLength": 1}})") ==
        "schema.propertyNames: 'maxLength' beside 'enum' is not supported");
  CHECK(at(R"({"additionalProperties": true, "propertyNames": {"const": ["a"]}})") ==
        "schema.propertyNames.const: keys are strings");
  CHECK(at(R"({"additionalProperties": true, "propertyNames": {"enum": []}})") ==
        "schema.propertyNames.enum: expected a non-empty list of names, not an array of 0 items");
  // A table of (declared properties + 1) x minProperties past its bound.
  Json big{{"type", "object"}, {"properties", Json::object()}, {"minProperties", 1500}};
  for (int i = 0; i < 1500; ++i) big["properties"]["p" + std::to_string(i)] = Json::object();
  CHECK(at(big.dump()) == "schema.minProperties: 1500 beside 1500 properties is too large to constrain");
}

TEST_CASE("object keywords: random walks never meet a dead end, and end in instances", "[constraint]") {
  struct Case {
    const char* schema;
    Rules rules;
  };
  const auto lower = [](const std::string& k) { return std::regex_match(k, std::regex("[a-z]+")); };
  const std::vector<Case> cases{
      {R"({"properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 3}}, "required": ["b"],
          "additionalProperties": {"type": "integer", "minimum": 0}})",
       {{"a", "b"},
        {"b"},
        [](const std::string& k, const Json& v) { return k == "a" ? v.is_number_integer() : v.is_string(); },
        true,
        [](const std::string&) { return true; },
        is_uint}},
      {R"({"properties": {"a": {}, "ab": {}, "abc": {}}, "propertyNames": {"pattern": "^[a-z]+$"},
          "additionalProperties": {"type": "null"}, "minProperties": 4, "maxProperties": 6})",
       {{"a", "ab", "abc"}, {}, Rules().declared_value, true, lower, [](const Json& v) { return v.is_null(); }, 4, 6}},
      {R"({"properties": {"x": {}, "y": {}, "z": {}, "w": {}}, "required": ["z"], "minProperties": 2,
          "maxProperties": 3})",
       {{"x", "y", "z", "w"}, {"z"}, Rules().declared_value, false, Rules().extra_key, Rules().extra_value, 2, 3}},
      {R"({"properties": {"x": {}, "y": {"type": "null"}, "z": {}}, "minProperties": 2})",
       {{"x", "y", "z"}, {}, Rules().declared_value, false, Rules().extra_key, Rules().extra_value, 2, 3}},
      {R"({"properties": {"b": {}}, "propertyNames": {"enum": ["a", "b", "c"]}, "additionalProperties": true,
          "minProperties": 2})",
       {{"b"},
        {},
        Rules().declared_value,
        true,
        [](const std::string& k) { return k == "a" || k == "c"; },
        Rules().extra_value,
        2,
        3}},
      {R"({"additionalProperties": {"type": "boolean"}, "required": ["é", "u"], "maxProperties": 4})",
       {{"é", "u"},
        {"é", "u"},
        [](const std::string&, const Json& v) { return v.is_boolean(); },
        true,
        Rules().extra_key,
        [](const Json& v) { return v.is_boolean(); },
        2,
        4}},
      {R"({"properties": {}, "additionalProperties": {"type": "null"}, "minProperties": 3})",
       {{}, {}, Rules().declared_value, true, Rules().extra_key, [](const Json& v) { return v.is_null(); }, 3, 5}},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2, "maxProperties": 3})",
       {{},
        {},
        Rules().declared_value,
        true,
        Rules().extra_key,
        [](const Json& v) { return v.is_number_integer(); },
        2,
        3}},
  };
  std::mt19937 rng(17);
  for (const Case& k : cases) {
    INFO("schema " << k.schema);
    ConstraintLimits limits;
    limits.max_string_chars = 6;
    limits.max_object_members = 5;
    const auto c = schema(k.schema, limits);
    std::size_t most_members = 0, most_extras = 0;
    for (const std::string& text : walks(c, kAlphabet, 30, rng)) {
      INFO("walked " << text);
      CHECK(invalid(k.rules, text).empty());
      const auto members = members_of(text);
      const auto extras = std::count_if(members.begin(), members.end(), [&](const auto& m) {
        return std::find(k.rules.declared.begin(), k.rules.declared.end(), m.first) == k.rules.declared.end();
      });
      most_members = std::max(most_members, members.size());
      most_extras = std::max(most_extras, static_cast<std::size_t>(extras));
    }
    // The walks reach the bounds: as many members as allowed (at most 5 here), and several extra ones.
    CHECK(most_members == std::min<std::size_t>(k.rules.max, 5));
    if (k.rules.extra) CHECK(most_extras >= 2);
  }
}

TEST_CASE("object keywords: random schemas, random walks end in instances", "[constraint]") {
  using Ordered = nlohmann::ordered_json;  // properties in the order Rules lists them
  struct Value {
    Ordered schema;
    std::function<bool(const Json&)> valid;
  };
  const std::vector<Value> values{
      {{{"type", "null"}}, [](const Json& v) { return v.is_null(); }},
      {{{"type", "integer"}}, [](const Json& v) { return v.is_number_integer(); }},
      {{{"type", "string"}, {"maxLength", 2}}, [](const Json& v) { return v.is_string(); }},
      {Ordered::object(), [](const Json&) { return true; }},
  };
  const std::vector<std::string> pool{"a", "ab", "b", "\xC3\xA9", "x y", "a\"b", "\x01"};
  std::mt19937 rng(23);
  const auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  for (int i = 0; i < 150; ++i) {
    Ordered s{{"type", "object"}, {"properties", Ordered::object()}};
    Rules r;
    std::vector<std::size_t> kinds;
    for (std::size_t k = 0, n = pick(4); k < n; ++k) {
      const std::string& name = pool[pick(pool.size())];
      if (std::find(r.declared.begin(), r.declared.end(), name) != r.declared.end()) continue;
      kinds.push_back(pick(values.size()));
      s["properties"][name] = values[kinds.back()].schema;
      r.declared.push_back(name);
      if (pick(2) == 0) r.required.push_back(name);
    }
    if (!r.required.empty()) s["required"] = r.required;
    r.declared_value = [&values, kinds, names = r.declared](const std::string& key, const Json& v) {
      const auto at = static_cast<std::size_t>(std::find(names.begin(), names.end(), key) - names.begin());
      return values[kinds[at]].valid(v);
    };
    const std::size_t open = pick(4);  // absent, false, true, a schema
    if (open == 1) s["additionalProperties"] = false;
    if (open >= 2) {
      const std::size_t v = pick(values.size());
      s["additionalProperties"] = open == 2 ? Ordered(true) : values[v].schema;
      r.extra = true;
      r.extra_value = open == 2 ? values[3].valid : values[v].valid;
    }
    std::size_t most = open >= 2 ? std::max<std::size_t>(4, r.declared.size()) : r.declared.size();
    const std::size_t names = pick(3);  // none, a pattern, a list
    if (names == 1) {
      s["propertyNames"] = {{"pattern", "^[^A-Z]*$"}};
      r.extra_key = [](const std::string& k) { return std::none_of(k.begin(), k.end(), ::isupper); };
    } else if (names == 2) {
      Ordered list = Ordered::array({"c", "d"});
      for (const std::string& d : r.declared) list.push_back(d);
      s["propertyNames"] = {{"enum", list}};
      r.extra_key = [](const std::string& k) { return k == "c" || k == "d"; };
      if (r.extra) most = std::min(most, r.declared.size() + 2);
    }
    r.min = pick(2) == 0 ? pick(most + 1) : 0;
    r.max = most;
    if (pick(2) == 0) {
      r.max = std::max({r.min, r.required.size(), pick(most + 1)});
      s["maxProperties"] = r.max;
    }
    if (r.min > 0) s["minProperties"] = r.min;
    INFO("schema " << s.dump());
    ConstraintLimits limits;
    limits.max_string_chars = 4;
    limits.max_object_members = 4;
    limits.whitespace = i % 2 == 0 ? Whitespace::kNone : Whitespace::kSingleSpace;
    const auto c = schema(s.dump(), limits);
    for (const std::string& text : walks(c, kAlphabet, 10, rng, 80)) {
      INFO("walked " << text);
      CHECK(invalid(r, text).empty());
    }
  }
}

TEST_CASE("object keywords: token masks equal brute force (repeated keys refused) and runs finish within their budget",
          "[constraint]") {
  TokenBytes tb;
  for (int b = 0; b < 256; ++b) tb.text.emplace_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"{\"", "\":", "\": ", ", \"", "\"}", "name", "\"name\": ", "ab", "\\u00", "\\u0061",
                        "x\":", "abc\"", "null", "true", "12", "\"a\": 1, \"b", "\": null", ", \"c", "null}"}) {
    tb.text.emplace_back(std::string(p));
  }
  const auto vocab = TokenVocabulary::from_bytes(tb);
  const std::vector<const char*> schemas{
      R"({"properties": {"name": {"type": "string", "maxLength": 4}, "a": {"type": "integer"}}, "required": ["name"],
          "additionalProperties": {"type": "integer"}, "maxProperties": 4})",
      R"({"properties": {"a": {}, "ab": {}, "abc": {}}, "propertyNames": {"pattern": "^[a-c]+$"},
          "additionalProperties": {"type": "null"}, "minProperties": 3})",
      R"({"additionalProperties": {"type": "boolean"}, "minProperties": 2, "maxProperties": 5})",
      // Many members of one shape: states that differ only in their count, below and at minProperties.
      R"({"properties": {"a": {"type": "null"}}, "additionalProperties": {"type": "null"}, "minProperties": 3})",
  };
  std::mt19937_64 rng(3);
  for (const char* s : schemas) {
    INFO("schema " << s);
    ConstraintLimits limits;
    limits.max_string_chars = 5;
    const auto c = schema(s, limits);
    for (int run = 0; run < 8; ++run) {
      const int64_t budget = c->min_bytes() + static_cast<int64_t>(rng() % 60);
      TokenConstraint tc(c, vocab);
      std::normal_distribution<float> noise(0.0f, 2.0f);
      for (int64_t step = 0; step < budget && !tc.complete(); ++step) {
        const int64_t remaining = budget - step - 1;
        // Brute force: each token's bytes on the matcher; within the budget unless no token is.
        const TokenMask mask = tc.allowed(remaining);
        const TokenMask unbudgeted = tc.allowed();
        std::vector<bool> valid(static_cast<std::size_t>(vocab->size())), fits(valid.size());
        bool any_fits = false;
        for (int64_t id = 0; id < vocab->size(); ++id) {
          const int64_t left = left_after(c, vocab, tc.matcher().text(), *vocab->bytes(id));
          valid[static_cast<std::size_t>(id)] = left >= 0;
          fits[static_cast<std::size_t>(id)] = left >= 0 && left <= remaining;
          any_fits = any_fits || fits[static_cast<std::size_t>(id)];
        }
        for (int64_t id = 0; id < vocab->size(); ++id) {
          INFO("after " << tc.matcher().text() << " token " << *vocab->bytes(id) << " with " << remaining << " left");
          REQUIRE(unbudgeted.allows(id) == valid[static_cast<std::size_t>(id)]);
          REQUIRE(mask.allows(id) == (any_fits ? fits : valid)[static_cast<std::size_t>(id)]);
        }
        std::vector<float> logits(static_cast<std::size_t>(vocab->size()));
        for (float& l : logits) l = noise(rng);
        REQUIRE(tc.mask_logits(logits.data(), vocab->size(), remaining) > 0);
        tc.accept(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      INFO("text " << tc.matcher().text() << " budget " << budget);
      REQUIRE(tc.complete());
      CHECK(c->matches(tc.matcher().text()));
    }
  }
}

TEST_CASE("byte automata: without() leaves out a finite set of texts", "[constraint]") {
  using namespace orbit::constrain;
  const ByteDfa ab = regex_dfa("^[ab]{0,3}$", RegexSyntax::kAnchored, RegexText::kAscii, "t");
  const std::optional<ByteDfa> rest = without(ab, {"", "ab", "b", "aba", "zz"}, "t");
  REQUIRE(rest.has_value());
  std::vector<std::string> all{""};
  for (std::size_t i = 0; i < all.size() && all[i].size() < 4; ++i) {
    for (const char c : {'a', 'b'}) all.push_back(all[i] + c);
  }
  for (const std::string& t : all) {
    INFO("text \"" << t << "\"");
    const bool left_out = t.empty() || t == "ab" || t == "b" || t == "aba";
    CHECK(accepts(*rest, t) == (t.size() <= 3 && !left_out));
  }
  for (std::size_t q = 0; q < rest->size(); ++q) CHECK(rest->min_bytes[q] < (int64_t{1} << 40));  // pruned
  CHECK(rest->min_bytes[0] == 1);                                                                 // "a"
  const ByteDfa one = regex_dfa("^(?:x|yy)$", RegexSyntax::kAnchored, RegexText::kAscii, "t");
  CHECK_FALSE(without(one, {"x", "yy"}, "t").has_value());
  CHECK(accepts(*without(one, {"x"}, "t"), "yy"));
  CHECK_FALSE(accepts(*without(one, {"x"}, "t"), "x"));
}

}  // namespace ORBIT_TEST_FILE
