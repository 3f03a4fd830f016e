// Constrained decoding's matcher (orbit/constraint.h) without a model: valid and invalid prefixes, completion,
// each schema feature, the whitespace and length rules, unsupported keywords refused with their path, tool
// calls, and token masks over a small vocabulary (including the start-of-text bytes and the end tokens).
// Links orbit_constrain and Catch only (no torch).
#include <catch2/catch.hpp>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "error_text.h"
#include "orbit/constraint.h"
#include "orbit/errors.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Contains;

namespace {

std::shared_ptr<const Constraint> schema(const std::string& text, const ConstraintLimits& limits = {}) {
  return Constraint::json_schema(text, limits);
}

// Every prefix of `text` is a valid prefix; the whole is a match.
void check_matches(const Constraint& c, const std::string& text) {
  INFO(c.describe() << " on " << text);
  for (std::size_t i = 0; i <= text.size(); ++i) {
    INFO("prefix of " << i << " bytes");
    REQUIRE(c.is_prefix(text.substr(0, i)));
  }
  CHECK(c.matches(text));
}

void check_refused(const Constraint& c, const std::string& text) {
  INFO(c.describe() << " on " << text);
  CHECK_FALSE(c.matches(text));
}

}  // namespace

TEST_CASE("json_object: any object, prefixes and completion", "[constraint]") {
  const auto c = Constraint::json_object();
  check_matches(*c, "{}");
  check_matches(*c, R"({"a": 1, "b": [true, null, "x"], "c": {"d": -1.5e+10}})");
  check_matches(*c, R"({"a":{"b":{}}})");
  CHECK(c->is_prefix(R"({"a": [1, 2)"));
  CHECK_FALSE(c->matches(R"({"a": [1, 2)"));
  check_refused(*c, "[]");             // an object, not any value
  check_refused(*c, R"({"a" : 1})");   // no space before ':'
  check_refused(*c, R"({ "a": 1 })");  // none before '}'
  check_refused(*c, "{\n}");           // no newlines
  check_refused(*c, R"({"a":  1})");   // one space at most
  check_refused(*c, R"({"a": 01})");   // JSON numbers
  check_refused(*c, R"({"a": 1,})");
  CHECK_FALSE(c->is_prefix(" {"));  // nothing before the value
  CHECK(c->min_bytes() == 2);
}

TEST_CASE("json_value and limits: depth, items, members, string and number lengths", "[constraint]") {
  ConstraintLimits l;
  l.max_depth = 2;
  l.max_array_items = 3;
  l.max_object_members = 2;
  l.max_string_chars = 4;
  l.max_number_chars = 4;
  const auto c = Constraint::json_value(l);
  check_matches(*c, "[[1]]");
  check_refused(*c, "[[[1]]]");
  check_matches(*c, "[1, 2, 3]");
  check_refused(*c, "[1, 2, 3, 4]");
  check_matches(*c, R"({"a": 1, "b": 2})");
  check_refused(*c, R"({"a": 1, "b": 2, "c": 3})");
  check_matches(*c, R"("abcd")");
  check_refused(*c, R"("abcde")");
  check_matches(*c, "-123");
  check_refused(*c, "-1234");
  check_matches(*c, "1.5");
  CHECK_FALSE(c->is_prefix("123."));  // "123.4" would be 5 characters: the dot is refused
  check_matches(*c, "true");
  check_refused(*c, "tru");
  const auto compact = Constraint::json_object({.whitespace = Whitespace::kNone});
  check_matches(*compact, R"({"a":[1,2]})");
  check_refused(*compact, R"({"a": 1})");
}

TEST_CASE("numbers: JSON's grammar, integers, exponents of two digits", "[constraint]") {
  const auto n = schema(R"({"type": "number"})");
  for (const char* ok : {"0", "-0", "12", "-3.25", "1e5", "1E+05", "2.5e-10", "0.0"}) check_matches(*n, ok);
  for (const char* bad : {"01", "+1", ".5", "1.", "1e", "1e+", "--1", "1e100", "-", "0x1"}) check_refused(*n, bad);
  const auto i = schema(R"({"type": "integer"})");
  check_matches(*i, "-42");
  check_refused(*i, "4.2");
  check_refused(*i, "4e2");
  // A number ends where the text does: complete, and extendable.
  ConstraintMatcher m(i);
  REQUIRE(m.advance("12"));
  CHECK(m.complete());
  CHECK(m.can_continue());
  CHECK_FALSE(m.finished());
}

TEST_CASE("strings: escapes, UTF-8, control characters, lengths in characters", "[constraint]") {
  const auto s = schema(R"({"type": "string"})");
  check_matches(*s, R"("a\"b\\c\/\b\f\n\r\t")");
  check_matches(*s, R"("\u00e9\u4E2D")");
  check_matches(*s, "\"caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80\"");
  check_refused(*s, R"("\x")");
  check_refused(*s, R"("\ud800")");           // no surrogate escapes
  check_refused(*s, "\"a\nb\"");              // a raw control character
  check_refused(*s, "\"\xC3\"");              // a cut character
  check_refused(*s, "\"\xC0\xAF\"");          // overlong
  check_refused(*s, "\"\xED\xA0\x80\"");      // a surrogate in UTF-8
  check_refused(*s, "\"\xF4\x90\x80\x80\"");  // past U+10FFFF
  const auto bounded = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  check_refused(*bounded, R"("a")");
  check_matches(*bounded, R"("ab")");
  check_matches(*bounded, "\"\xC3\xA9\xC3\xA9\xC3\xA9\"");  // 3 characters, 6 bytes
  check_matches(*bounded, R"("\n\u0041b")");
  check_refused(*bounded, R"("abcd")");
  ConstraintMatcher m(bounded);
  REQUIRE(m.advance("\"a"));
  CHECK(m.min_bytes_to_complete() == 2);  // one more character and the quote
}

TEST_CASE("objects: declared order, required, additionalProperties false, key escapes", "[constraint]") {
  const auto c = schema(R"({"type": "object",
      "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array",
                     "items": {"type": "string"}, "maxItems": 2}},
      "required": ["name", "tags"]})");
  check_matches(*c, R"({"name": "Ann", "age": 3, "tags": []})");
  check_matches(*c, R"({"name": "Ann", "tags": ["x", "y"]})");    // age is optional
  check_refused(*c, R"({"age": 3, "name": "Ann", "tags": []})");  // declared order
  check_refused(*c, R"({"name": "Ann"})");                        // tags required
  check_refused(*c, R"({"name": "Ann", "tags": [], "x": 1})");    // no other property
  check_refused(*c, R"({"name": "Ann", "name": "Bo", "tags": []})");
  check_refused(*c, R"({"name": "Ann", "tags": ["a", "b", "c"]})");
  CHECK_FALSE(c->is_prefix(R"({"tags")"));  // name is required first
  CHECK(c->min_bytes() == static_cast<int64_t>(std::string(R"({"name":"","tags":[]})").size()));
  ConstraintMatcher m(c);
  REQUIRE(m.advance(R"({"name": "A)"));
  CHECK(m.min_bytes_to_complete() == static_cast<int64_t>(std::string(R"(","tags":[]})").size()));
  // min_bytes_after(b) is advance(b) on a copy, then min_bytes_to_complete(); -1 where b cannot follow.
  for (int b = 0; b < 256; ++b) {
    const char c1 = static_cast<char>(b);
    ConstraintMatcher copy = m;
    const int64_t want = copy.advance(std::string_view(&c1, 1)) ? copy.min_bytes_to_complete() : -1;
    CHECK(m.min_bytes_after(std::string_view(&c1, 1)) == want);
  }
  CHECK(m.min_bytes_after("\", \"tags\": []}") == 0);
  CHECK(m.text() == R"({"name": "A)");  // unchanged
  const auto escaped = schema(R"({"properties": {"a\"b": {"const": 1}, "é": {"type": "null"}}})");
  check_matches(*escaped, R"({"a\"b": 1, "é": null})");
  check_matches(*escaped, "{}");
  const auto empty = schema(R"({"type": "object", "properties": {}})");
  check_matches(*empty, "{}");
  check_refused(*empty, R"({"a": 1})");
  const auto free_form = schema(R"({"type": "object"})");
  check_matches(*free_form, R"({"anything": [1]})");
}

TEST_CASE("enum, const, type lists, anyOf, $ref, boolean and empty schemas", "[constraint]") {
  const auto e = schema(R"({"enum": ["red", "green", 1, 10, null, {"a": [1]}]})");
  for (const char* ok : {R"("red")", R"("green")", "1", "10", "null", R"({"a":[1]})"}) check_matches(*e, ok);
  check_refused(*e, R"("blue")");
  check_refused(*e, "11");
  ConstraintMatcher m(e);
  REQUIRE(m.advance("1"));
  CHECK(m.complete());
  CHECK(m.can_continue());  // "10"
  const auto typed = schema(R"({"type": "string", "enum": ["a", 1, "b"]})");
  check_matches(*typed, R"("b")");
  check_refused(*typed, "1");
  check_matches(*schema(R"({"const": "x"})"), R"("x")");
  const auto nullable = schema(R"({"type": ["string", "null"]})");
  check_matches(*nullable, "null");
  check_matches(*nullable, R"("n")");
  const auto any_of = schema(R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
      "required": ["a"]}, {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "boolean"}},
      "required": ["b"]}], "description": "either"})");
  check_matches(*any_of, R"({"a": 1})");
  check_matches(*any_of, R"({"a": "s", "b": true})");
  check_refused(*any_of, R"({"a": 1, "b": true})");
  const auto ref = schema(R"({"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}},
      "required": ["x"]}}, "type": "array", "items": {"$ref": "#/$defs/point"}})");
  check_matches(*ref, R"([{"x": 1}, {"x": 2.5}])");
  check_matches(*schema("true"), R"({"any": "value"})");
  check_matches(*schema("{}"), "[1]");
  check_matches(*schema(R"({"type": "boolean"})"), "false");
  check_matches(*schema(R"({"type": "null", "title": "nothing"})"), "null");
}

// Pins the language of a large enum: each value once (compiled in linear time, no timing checked here),
// repeats and values the type drops left out, the rest of the list's order of no account.
TEST_CASE("a large enum with repeated values allows each value once, as a small one does", "[constraint]") {
  const int n = 20000;
  std::string list;
  for (int i = 0; i < n; ++i) list += "\"v" + std::to_string(i) + "\", " + std::to_string(i) + ", ";
  for (int i = n - 1; i >= 0; i -= 7) list += "\"v" + std::to_string(i) + "\", ";  // repeats, in reverse order
  const auto c = schema(R"({"type": "string", "enum": [)" + list + R"("v0"]})");
  for (int i : {0, 1, 7, 10, 999, 12345, n - 1}) check_matches(*c, "\"v" + std::to_string(i) + "\"");
  for (const char* no : {R"("v")", R"("v20000")", R"("v00")", R"("w1")", "7", R"("v1" )"}) check_refused(*c, no);
  ConstraintMatcher m(c);
  REQUIRE(m.advance(R"("v1)"));
  CHECK_FALSE(m.complete());
  REQUIRE(m.advance(R"(9999")"));
  CHECK(m.finished());
  CHECK(c->min_bytes() == 4);  // "v0"
}

TEST_CASE("unsupported keywords and bad schemas are refused with the path", "[constraint]") {
  const auto at = [](const std::string& s) {
    return error_of([&] { Constraint::json_schema(s, {}, "response_format.json_schema.schema"); });
  };
  CHECK(at(R"({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": true}}})") ==
        "response_format.json_schema.schema.properties.x: 'uniqueItems' is not supported over these items: only where "
        "each item is one of a few listed values (an enum or const, booleans; written in the order listed, each at "
        "most once)");
  CHECK_THAT(at(R"({"type": "integer", "not": {"const": 0}})"), Contains("schema: 'not' is not supported"));
  CHECK_THAT(at(R"({"type": "array", "items": {"if": {}}})"), Contains("schema.items: 'if' is not supported"));
  CHECK_THAT(
      at(R"({"anyOf": [{"type": "string", "format": "ipv5"}]})"),
      Contains("schema.anyOf[0].format: \"ipv5\" is not supported (supported: base64, base64url, binary, byte, date, "
               "date-time, duration, email, hostname, ipv4, ipv4interface, ipv6, ipv6interface, ipvanyaddress, "
               "ipvanyinterface, jwt, password, path, time, uri, uuid; another format is served "
               "beside a pattern, by the pattern)"));
  CHECK_THAT(at(R"({"properties": {"a": {}}, "additionalProperties": 1})"),
             Contains("schema.additionalProperties: expected a schema or a boolean, not 1"));
  CHECK_THAT(at(R"({"properties": {"a": {}}, "required": ["b"]})"),
             Contains("schema.required: 'b' is not in properties"));
  CHECK_THAT(at(R"({"enum": []})"), Contains("schema.enum: expected a non-empty list"));
  CHECK_THAT(at(R"({"type": "string", "minLength": 3, "maxLength": 2})"), Contains("minLength 3 is above maxLength 2"));
  CHECK_THAT(at(R"({"type": "strin"})"), Contains("schema.type: \"strin\" is not a type"));
  CHECK(at(R"({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"})") ==
        "(no error)");  // recursive, through an array: test_constraint_regular
  CHECK_THAT(at(R"({"$ref": "#/$defs/missing"})"), Contains("names nothing"));
  CHECK_THAT(at(R"({"type": "string", "anyOf": [{"type": "number"}]})"),
             Contains("schema: no schema of anyOf admits a value the keywords beside it admit"));
  CHECK_THAT(at(R"({"enum": [1], "minLength": 1})"), Contains("'minLength' beside 'enum' is not supported"));
  CHECK_THAT(at("false"), Contains("admits no value"));
  CHECK_THAT(at("{"), Contains("response_format.json_schema.schema: not valid JSON"));
  CHECK_THAT(at(R"({"type": "array", "items": [{}], "additionalItems": false, "minItems": 3})"),
             Contains("schema: minItems 3 is above the 1 items the closed tuple lists"));
  CHECK_THAT(error_of([] { Constraint::json_object({.max_depth = -1}); }), Contains("max_depth"));
}

TEST_CASE("literals, sequences and choices compose", "[constraint]") {
  const auto c = Constraint::sequence(
      {Constraint::literal("<a>"), Constraint::json_schema(R"({"type": "integer"})"), Constraint::literal("</a>")});
  check_matches(*c, "<a>12</a>");
  check_refused(*c, "<a>12");
  check_refused(*c, "<a></a>");
  // A number ends where the literal after it begins.
  CHECK(c->is_prefix("<a>1<"));
  const auto either =
      Constraint::choice({Constraint::literal("yes"), Constraint::literal("yesterday"), Constraint::json_object()});
  check_matches(*either, "yes");
  check_matches(*either, "yesterday");
  check_matches(*either, "{}");
  ConstraintMatcher m(either);
  REQUIRE(m.advance("yes"));
  CHECK(m.complete());
  CHECK(m.can_continue());
  const auto empty = Constraint::literal("");
  CHECK(ConstraintMatcher(empty).finished());
  CHECK_THAT(error_of([] { Constraint::sequence({}); }), Contains("empty list"));
  CHECK_THAT(error_of([] { Constraint::choice({nullptr}); }), Contains("item 0 is null"));
}

TEST_CASE("tool calls: one per tool, arguments by the tool's schema, only, several calls", "[constraint]") {
  const std::string tools = R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                     "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
    {"name": "free"}])";
  const auto c = Constraint::tool_calls(tools);
  check_matches(*c, R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}</tool_call>)");
  check_matches(*c, R"(<tool_call>{"name": "get_time", "arguments": {}}</tool_call>)");
  check_matches(*c, R"(<tool_call>{"name": "free", "arguments": {}}</tool_call>)");  // no parameters: none
  check_refused(*c, R"(<tool_call>{"name": "free", "arguments": {"x": [1]}}</tool_call>)");
  check_refused(*c, R"(<tool_call>{"name": "get_time", "arguments": {"city": "Paris"}}</tool_call>)");
  check_refused(*c, R"(<tool_call>{"name": "other", "arguments": {}}</tool_call>)");
  ToolCallOptions only;
  only.only = "get_time";
  check_refused(*Constraint::tool_calls(tools, only), R"(<tool_call>{"name": "free", "arguments": {}}</tool_call>)");
  ToolCallOptions two;
  two.max_calls = 2;
  two.begin = "<tool_call>\n";
  two.end = "\n</tool_call>";
  const auto c2 = Constraint::tool_calls(tools, two);
  const std::string call = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  check_matches(*c2, call);
  check_matches(*c2, call + "\n" + call);
  check_refused(*c2, call + "\n" + call + "\n" + call);
  CHECK_THAT(error_of([&] {
               ToolCallOptions o;
               o.only = "nope";
               Constraint::tool_calls(tools, o);
             }),
             Contains("'nope' is not among the tools (get_weather, get_time, free)"));
  CHECK_THAT(error_of([] {
               Constraint::tool_calls(R"([{"type": "function", "function": {"name": "f", "parameters":
                                        {"type": "object", "properties": {"q": {"type": "string", "format": "url"}}}}}])");
             }),
             Contains("tools[0].function.parameters.properties.q.format: \"url\" is not supported"));
  CHECK_THAT(error_of([] { Constraint::tool_calls(R"([{"name": "f"}, {"name": "f"}])"); }),
             Contains("names two tools"));
  // Parameters that say nothing of the arguments ({}, true, a description alone) leave any object, never
  // another value: a call's arguments are an object.
  for (const std::string p : {"{}", "true", R"({"description": "anything"})"}) {
    const auto loose = Constraint::tool_calls(R"([{"name": "f", "parameters": )" + p + "}]");
    INFO(p);
    check_matches(*loose, R"(<tool_call>{"name": "f", "arguments": {"x": "y"}}</tool_call>)");
    check_refused(*loose, R"(<tool_call>{"name": "f", "arguments": "Yes, you can."}</tool_call>)");
    check_refused(*loose, R"(<tool_call>{"name": "f", "arguments": 1}</tool_call>)");
  }
  // Arguments are read back only as an object: parameters admitting other values are narrowed to objects (an
  // optional model: ["object", "null"], or anyOf with null), and a type without "object" is refused, naming it.
  for (const std::string p : {R"({"type": ["object", "null"], "properties": {"a": {"type": "integer"}}})",
                              R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                                            {"type": "null"}]})",
                              R"({"type": "object", "nullable": true, "properties": {"a": {"type": "integer"}}})"}) {
    const auto narrowed = Constraint::tool_calls(R"([{"name": "f", "parameters": )" + p + "}]");
    INFO(p);
    check_matches(*narrowed, R"(<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>)");
    check_refused(*narrowed, R"(<tool_call>{"name": "f", "arguments": null}</tool_call>)");
  }
  for (const std::string p : {R"({"type": "integer"})", R"({"type": ["string", "null"]})"}) {
    INFO(p);
    CHECK_THAT(error_of([&] { Constraint::tool_calls(R"([{"name": "f", "parameters": )" + p + "}]"); }),
               Contains("tools[0].parameters.type: ") && Contains("excludes \"object\""));
  }
  // Parameters omitted (or null) are OpenAI's empty parameter list: the arguments are {} and nothing else.
  for (const std::string tool : {R"({"name": "f"})", R"({"name": "f", "parameters": null})"}) {
    const auto none = Constraint::tool_calls("[" + tool + "]");
    INFO(tool);
    check_matches(*none, R"(<tool_call>{"name": "f", "arguments": {}}</tool_call>)");
    check_refused(*none, R"(<tool_call>{"name": "f", "arguments": {"x": "y"}}</tool_call>)");
  }
}

TEST_CASE("matcher state keys: equal for states with equal futures", "[constraint]") {
  const auto c = schema(R"({"type": "array", "items": {"type": "integer"}})");
  ConstraintMatcher a(c), b(c);
  REQUIRE(a.advance("[1, 22"));
  REQUIRE(b.advance("[1, 33"));
  CHECK(a.state_key() == b.state_key());
  REQUIRE(b.advance("3"));
  CHECK(a.state_key() != b.state_key());  // one more digit
  ConstraintMatcher copy = a;
  REQUIRE(copy.advance("]"));
  CHECK(copy.finished());
  CHECK_FALSE(a.complete());
  CHECK(a.text() == "[1, 22");
  CHECK_FALSE(a.advance("x"));
  CHECK(a.text() == "[1, 22");  // unchanged
}

namespace {

// A small vocabulary: every byte, some JSON pieces, a special token (no text) and an EOS.
TokenBytes small_vocabulary() {
  TokenBytes v;
  for (int b = 0; b < 256; ++b) v.text.emplace_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"{\"", "\":", "\": ", "\", \"", "true", "false", "null", "12", " the", " {", "}}", "\"}",
                            "name", "\\n", "\xC3\xA9", " x"}) {
    v.text.emplace_back(piece);
  }
  v.text.emplace_back(std::nullopt);  // special
  v.text.emplace_back(std::nullopt);  // EOS
  return v;
}

int64_t id_of(const TokenVocabulary& v, const std::string& bytes) {
  for (int64_t i = 0; i < v.size(); ++i) {
    if (v.bytes(i) == bytes) return i;
  }
  return -1;
}

}  // namespace

TEST_CASE("token masks: a token is allowed exactly when its bytes keep a valid prefix", "[constraint][mask]") {
  const auto vocab = TokenVocabulary::from_bytes(small_vocabulary());
  const int64_t eos = vocab->size() - 1, special = vocab->size() - 2;
  const auto c = schema(R"({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})");
  TokenConstraint tc(c, vocab, {.end_tokens = {eos}});
  for (const std::string& piece : {std::string("{\""), std::string("name"), std::string("\": "), std::string("\"")}) {
    const TokenMask m = tc.allowed();
    ConstraintMatcher brute = tc.matcher();
    for (int64_t id = 0; id < vocab->size(); ++id) {
      const auto& bytes = vocab->bytes(id);
      const bool ok = id != eos && bytes.has_value() && brute.can_advance(*bytes);
      INFO("token " << id << " after " << tc.matcher().text());
      CHECK(m.allows(id) == ok);
    }
    CHECK_FALSE(m.complete);
    tc.accept(id_of(*vocab, piece));
  }
  CHECK_FALSE(tc.allowed().allows(special));
  CHECK_THROWS_WITH(tc.accept(eos), Contains("before the text is complete"));
  CHECK_THROWS_WITH(tc.accept(id_of(*vocab, "\n")), Contains("does not continue the constrained text"));
  tc.accept(id_of(*vocab, "\"}"));
  CHECK(tc.finished());
  const TokenMask done = tc.allowed();
  CHECK(done.complete);
  CHECK(done.count() == 0);
  std::vector<float> logits(static_cast<std::size_t>(vocab->size()), 1.0f);
  CHECK(tc.mask_logits(logits.data(), vocab->size()) == 1);  // EOS alone
  CHECK(logits[static_cast<std::size_t>(eos)] == 1.0f);
  CHECK(logits[0] == -std::numeric_limits<float>::infinity());
  // The mask through ConstraintMatcher is the same and cached.
  ConstraintMatcher fresh(c);
  CHECK(fresh.mask(*vocab).bits == TokenConstraint(c, vocab).allowed().bits);
}

TEST_CASE("token masks: the budget keeps room for the shortest completion", "[constraint][mask]") {
  const auto vocab = TokenVocabulary::from_bytes(small_vocabulary());
  const auto c = schema(R"({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})");
  TokenConstraint tc(c, vocab);
  for (const char* piece : {"{\"", "name", "\": ", "\""}) tc.accept(id_of(*vocab, piece));
  // `"}` is left: 2 bytes. With 1 token after this one only '"' or `"}` fit; with 0 only `"}`.
  TokenMask one = tc.allowed(1);
  CHECK(one.allows(id_of(*vocab, "\"")));
  CHECK(one.allows(id_of(*vocab, "\"}")));
  CHECK_FALSE(one.allows(id_of(*vocab, "a")));
  TokenMask zero = tc.allowed(0);
  CHECK(zero.count() == 1);
  CHECK(zero.allows(id_of(*vocab, "\"}")));
  CHECK(tc.allowed(100).allows(id_of(*vocab, "a")));
  // Not even one byte of room: the budget is dropped rather than allow nothing.
  tc.accept(id_of(*vocab, "a"));
  TokenConstraint shy(c, vocab);
  CHECK(shy.allowed(0).count() == shy.allowed().count());
}

TEST_CASE("token masks: start-of-text bytes apply to the first token only", "[constraint][mask]") {
  TokenBytes b = small_vocabulary();
  const int64_t space_brace =
      static_cast<int64_t>(std::find(b.text.begin(), b.text.end(), std::string(" {")) - b.text.begin());
  const int64_t space_x =
      static_cast<int64_t>(std::find(b.text.begin(), b.text.end(), std::string(" x")) - b.text.begin());
  b.at_start = {{space_brace, std::string("{")}, {space_x, std::string("x")}};
  const auto vocab = TokenVocabulary::from_bytes(b);
  const auto c = Constraint::json_object();
  TokenConstraint at_start(c, vocab, {.at_text_start = true});
  CHECK(at_start.allowed().allows(space_brace));  // it writes "{" here
  TokenConstraint mid(c, vocab);
  CHECK_FALSE(mid.allowed().allows(space_brace));  // " {": no space before the value
  at_start.accept(space_brace);
  CHECK(at_start.matcher().text() == "{");
  CHECK(at_start.allowed().allows(id_of(*vocab, " ")));
  CHECK_FALSE(at_start.allowed().allows(space_brace));
}

TEST_CASE("token masks: the budget under minLength, where every token shortens what is left", "[constraint][mask]") {
  // More tokens than a mask lists one by one (each plain token of k characters leaves k fewer to write).
  TokenBytes b = small_vocabulary();
  std::mt19937_64 rng(3);
  std::set<std::string> seen;
  while (seen.size() < 6000) {
    std::string s;
    for (int k = 1 + static_cast<int>(rng() % 6); k > 0; --k) s.push_back(static_cast<char>('a' + rng() % 26));
    if (seen.insert(s).second) b.text.emplace_back(s);
  }
  const auto vocab = TokenVocabulary::from_bytes(b);
  const auto c = schema(R"({"type": "string", "minLength": 40})");
  TokenConstraint tc(c, vocab);
  tc.accept(id_of(*vocab, "\""));
  for (int i = 0; i < 8; ++i) tc.accept(id_of(*vocab, "a"));
  // 32 more characters and the quote: 33 bytes. With 30 tokens after this one, a token must write 3+.
  const TokenMask m = tc.allowed(30);
  int64_t checked = 0;
  for (int64_t id = 0; id < vocab->size(); ++id) {
    ConstraintMatcher after = tc.matcher();
    const auto& bytes = vocab->bytes(id);
    const bool ok = bytes.has_value() && after.advance(*bytes) && after.min_bytes_to_complete() <= 30;
    INFO("token " << id << " '" << bytes.value_or("") << "'");
    CHECK(m.allows(id) == ok);
    checked += ok ? 1 : 0;
  }
  CHECK(checked > 1000);
  CHECK(tc.allowed().count() > m.count());
}

namespace {

// A decode under `c` with logits drawn from `seed`: the text it writes.
std::string decode(const std::shared_ptr<const Constraint>& c, const std::shared_ptr<const TokenVocabulary>& vocab,
                   uint64_t seed) {
  TokenConstraint tc(c, vocab);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> logits(static_cast<std::size_t>(vocab->size()));
  for (int step = 0; step < 64 && !tc.finished(); ++step) {
    for (float& l : logits) l = u(rng);
    if (tc.mask_logits(logits.data(), vocab->size(), 63 - step) == 0) break;
    tc.accept(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return tc.matcher().text();
}

}  // namespace

TEST_CASE("one constraint and vocabulary shared by threads: the same texts as one thread", "[constraint][thread]") {
  const auto vocab = TokenVocabulary::from_bytes(small_vocabulary());
  const auto c = schema(R"({"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"},
      "n": {"type": "number"}}, "required": ["k"]}, "maxItems": 3})");
  // One thread, with a constraint of its own (its own mask cache)...
  const auto reference = schema(R"({"type": "array", "items": {"type": "object", "properties": {"k": {"type":
      "string"}, "n": {"type": "number"}}, "required": ["k"]}, "maxItems": 3})");
  std::vector<std::string> alone;
  for (uint64_t seed = 0; seed < 32; ++seed) alone.push_back(decode(reference, vocab, seed));
  // ... and four threads sharing `c` and its cache, from cold.
  std::vector<std::string> shared(32);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t seed = static_cast<uint64_t>(t); seed < 32; seed += 4) shared[seed] = decode(c, vocab, seed);
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(shared == alone);
  for (const std::string& text : shared) CHECK(c->matches(text));
}

TEST_CASE("token masks: a constraint's memory counts each mask's list of tokens that change what is left",
          "[constraint][mask]") {
  // Inside a string below its minLength every content token shortens what is left by its own length, so each
  // such mask lists (change, token) for nearly every token: 16 bytes each, where its bits are 1 bit each.
  TokenBytes b = small_vocabulary();
  std::mt19937 random(7);
  for (int i = 0; i < 2000; ++i) {
    std::string piece(2 + random() % 6, 'a');
    for (char& ch : piece) ch = static_cast<char>('a' + random() % 26);
    b.text.emplace_back(piece);
  }
  const auto vocab = TokenVocabulary::from_bytes(b);
  const auto c = schema(R"({"type": "string", "minLength": 300})");
  TokenConstraint tc(c, vocab);
  tc.accept(id_of(*vocab, "\""));
  const std::size_t before = c->memory_bytes();
  const TokenMask inside = tc.allowed();
  REQUIRE(inside.count() > 2000);
  const std::size_t grown = c->memory_bytes() - before;
  CHECK(grown >= static_cast<std::size_t>(inside.count()) * 16 * 9 / 10);
  CHECK(grown < static_cast<std::size_t>(inside.count()) * 16 * 2 + 4096);  // an estimate, not a multiple
}

}  // namespace ORBIT_TEST_FILE
