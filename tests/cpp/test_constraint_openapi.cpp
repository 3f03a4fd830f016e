// What OpenAPI adds to JSON Schema, as tools generated from OpenAPI documents (and Pydantic, FastAPI, gRPC
// gateways) write it: the formats of numbers (int32, int64, float, ...: the range of their machine type), the
// string formats byte, binary and password, and its annotations (example, externalDocs, xml, x-* extensions),
// which constrain nothing; OpenAPI 3.0's (draft 4's) exclusive bounds written as flags; and uniqueItems over
// listed values, as Pydantic writes a set of an enum or of literals. Links orbit_constrain and Catch only.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "constraint_test_util.h"
#include "error_text.h"
#include "orbit/constraint.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Contains;

using namespace constraint_test;

namespace {

std::shared_ptr<const Constraint> typed(const char* type, const char* format) {
  return schema(nlohmann::json({{"type", type}, {"format", format}}).dump());
}

}  // namespace

TEST_CASE("openapi: an integer format admits its machine type's range and no more", "[constraint]") {
  struct Case {
    const char* format;
    std::vector<std::string> in, out;
  };
  const std::vector<Case> cases{
      {"int8", {"-128", "127", "0"}, {"-129", "128", "1000"}},
      {"uint8", {"0", "255"}, {"-1", "256"}},
      {"int16", {"-32768", "32767"}, {"-32769", "32768"}},
      {"uint16", {"0", "65535"}, {"-1", "65536"}},
      {"int32", {"-2147483648", "2147483647"}, {"-2147483649", "2147483648"}},
      {"uint32", {"0", "4294967295"}, {"-1", "4294967296"}},
      // Wider than the integers a JavaScript client reads exactly: the schema's default bounds (2^53 - 1) stay.
      {"int64", {"-9007199254740991", "9007199254740991"}, {"-9007199254740992", "9007199254740992"}},
      {"uint64", {"0", "9007199254740991"}, {"-1", "9007199254740992"}},
  };
  for (const Case& c : cases) {
    INFO("format " << c.format);
    for (const char* type : {"integer", "number"}) {  // an integer format makes a number an integer
      INFO("type " << type);
      const auto k = typed(type, c.format);
      for (const std::string& v : c.in) CHECK(k->matches(v));
      for (const std::string& v : c.out) CHECK_FALSE(k->matches(v));
      CHECK_FALSE(k->matches("1.5"));
      CHECK_FALSE(k->matches("1e2"));
    }
  }
  // Beside the schema's own bounds, the stricter of the two on each side.
  const auto bounded = schema(R"({"type": "integer", "format": "int8", "minimum": -1000, "maximum": 5})");
  CHECK(bounded->matches("-128"));
  CHECK_FALSE(bounded->matches("-129"));
  CHECK(bounded->matches("5"));
  CHECK_FALSE(bounded->matches("6"));
  // Without "type", the format says the value is a number.
  const auto typeless = schema(R"({"format": "int16"})");
  CHECK(typeless->matches("-32768"));
  CHECK_FALSE(typeless->matches("40000"));
  CHECK_FALSE(typeless->matches(R"("a")"));
  // Random walks stay in the range.
  std::mt19937 rng(11);
  for (const std::string& text : random_walks(typed("integer", "int8"), "-0123456789.e", 60, rng)) {
    const int64_t v = std::stoll(text);
    CHECK(v >= -128);
    CHECK(v <= 127);
  }
}

TEST_CASE("openapi: float keeps numbers in a float's range, double admits every number written here", "[constraint]") {
  const auto f = typed("number", "float");
  CHECK(f->matches("3.5"));
  CHECK(f->matches("-" + std::string(31, '9')));  // 32 characters (max_number_chars), without exponent
  CHECK_FALSE(f->matches("1e39"));
  CHECK_FALSE(f->matches("1e2"));
  const auto d = typed("number", "double");
  for (const char* v : {"3.5", "1e99", "-1.5E-99", "0"}) CHECK(d->matches(v));
  CHECK_FALSE(d->matches("1e100"));  // three exponent digits: never written (orbit/constraint.h)
  // Beside a bound, both apply.
  const auto positive = schema(R"({"type": "number", "format": "float", "exclusiveMinimum": 0})");
  CHECK(positive->matches("0.25"));
  CHECK_FALSE(positive->matches("0"));
}

TEST_CASE("openapi: a format that is not one of numbers, or of a type the schema lacks, is refused naming it",
          "[constraint]") {
  CHECK_THAT(error_of([] { typed("number", "decimal"); }),
             Contains("schema.format: \"decimal\" is not a format of numbers (supported: int8, uint8, int16, uint16, "
                      "int32, uint32, int64, uint64, float, double)"));
  CHECK_THAT(error_of([] { typed("string", "float"); }),
             Contains("schema.format: \"float\" applies to numbers, and \"type\" has none"));
  CHECK_THAT(error_of([] { typed("boolean", "int64"); }),
             Contains("schema.format: \"int64\" applies to numbers and strings, and \"type\" has none"));
  CHECK_THAT(error_of([] { typed("boolean", "email"); }),
             Contains("schema: 'format' applies to strings, and \"type\" has none"));
  // Beside null, the numbers keep the range.
  const auto either = schema(R"({"type": ["integer", "null"], "format": "uint8"})");
  CHECK(either->matches("255"));
  CHECK(either->matches("null"));
  CHECK_FALSE(either->matches("256"));
}

TEST_CASE("openapi: byte is base64, binary and password (and Pydantic's path) any string", "[constraint]") {
  const auto byte = typed("string", "byte");
  CHECK(byte->matches(quote("QUJD")));
  CHECK(byte->matches(quote("QUI=")));
  CHECK_FALSE(byte->matches(quote("QUJ")));  // padded to a multiple of 4
  CHECK_FALSE(byte->matches(quote("QU J")));
  for (const char* f : {"binary", "password", "path"}) {
    INFO("format " << f);
    const auto any = typed("string", f);
    for (const char* v : {"", "hunter2", "a b\n", "\xc3\xa9t\xc3\xa9"}) CHECK(any->matches(quote(v)));
    CHECK_FALSE(any->matches("1"));
    // maxLength still holds.
    const auto short_one = schema(nlohmann::json({{"type", "string"}, {"format", f}, {"maxLength", 3}}).dump());
    CHECK(short_one->matches(quote("abc")));
    CHECK_FALSE(short_one->matches(quote("abcd")));
  }
  // The list of string formats in a refusal names them.
  CHECK_THAT(error_of([] { typed("string", "file-path"); }),
             Contains("\"file-path\" is not supported (supported: base64, base64url, binary, byte, date, date-time, "
                      "duration, email, hostname, ipv4, ipv4interface, ipv6, ipv6interface, ipvanyaddress, "
                      "ipvanyinterface, jwt, password, path, time, uri, uuid;"));
}

TEST_CASE("openapi: example, externalDocs, xml, $anchor and x-* extensions are annotations", "[constraint]") {
  const std::string plain = R"({"type": "object", "properties": {"id": {"type": "integer", "maximum": 9}},
                                "required": ["id"], "additionalProperties": false})";
  const std::string annotated = R"({"type": "object", "$anchor": "top", "x-order": 1,
                                    "externalDocs": {"url": "https://example.com"}, "xml": {"name": "thing"},
                                    "properties": {"id": {"type": "integer", "maximum": 9, "example": 3,
                                                          "x-nullable": false, "x-go-name": "ID"}},
                                    "required": ["id"], "additionalProperties": false})";
  const auto a = schema(plain);
  const auto b = schema(annotated);
  for (const char* v : {R"({"id": 3})", R"({"id": 10})", R"({"id": 3, "x-order": 1})", R"({"example": 3})", "{}"}) {
    INFO(v);
    CHECK(a->matches(v) == b->matches(v));
  }
  CHECK(b->matches(R"({"id": 3})"));
  // An annotation alone constrains nothing: the schema of one is any value.
  CHECK(schema(R"({"x-internal": true})")->matches("[1, \"a\"]"));
  // A keyword that only looks like an extension is still refused.
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "xOrder": 1})"); }),
             Contains("schema: 'xOrder' is not supported"));
}

TEST_CASE("openapi: 3.0's exclusiveMinimum and exclusiveMaximum flags make minimum and maximum exclusive",
          "[constraint]") {
  // zod's openapi-3.0 target writes number().gt(0).lte(10) so.
  const auto k = schema(R"({"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 10,
                            "exclusiveMaximum": false})");
  CHECK_FALSE(k->matches("0"));
  CHECK(k->matches("0.5"));
  CHECK(k->matches("10"));
  CHECK_FALSE(k->matches("10.5"));
  const auto below = schema(R"({"type": "integer", "maximum": 3, "exclusiveMaximum": true})");
  CHECK(below->matches("2"));
  CHECK_FALSE(below->matches("3"));
  // false alone says nothing; true alone has no bound to mark.
  CHECK(schema(R"({"type": "integer", "exclusiveMinimum": false})")->matches("-5"));
  CHECK_THAT(error_of([] { schema(R"({"type": "integer", "exclusiveMinimum": true})"); }),
             Contains("schema.exclusiveMinimum: true (draft 4's form) needs 'minimum' beside it"));
  // A property named like the keyword is a property.
  const auto named = schema(R"({"type": "object", "properties": {"exclusiveMinimum": {"type": "boolean"},
                                "minimum": {"type": "integer"}}, "required": ["exclusiveMinimum", "minimum"]})");
  CHECK(named->matches(R"({"exclusiveMinimum": true, "minimum": 4})"));
}

TEST_CASE("uniqueItems over listed values: each at most once, in the order listed", "[constraint]") {
  // Pydantic writes set[Color] / set[Literal[...]] so (the values through a $ref to $defs).
  const auto colors = schema(R"({"type": "object", "properties": {"c": {"type": "array", "items": {"$ref":
      "#/$defs/Color"}, "uniqueItems": true}}, "required": ["c"], "$defs": {"Color": {"enum": ["r", "g", "b"],
      "type": "string"}}})");
  for (const char* v : {R"({"c": []})", R"({"c": ["r"]})", R"({"c": ["r", "b"]})", R"({"c": ["r", "g", "b"]})",
                        R"({"c": [ "g", "b"]})"}) {
    INFO(v);
    CHECK(colors->matches(v));
  }
  for (const char* v : {R"({"c": ["r", "r"]})", R"({"c": ["b", "r"]})", R"({"c": ["r", "g", "b", "r"]})",
                        R"({"c": ["x"]})", R"({"c": ["r",]})"}) {
    INFO(v);
    CHECK_FALSE(colors->matches(v));
  }
  // Counts, values equal as JSON compares them (1 and 1.0), booleans, objects whatever their key order.
  const auto two = schema(R"({"type": "array", "items": {"enum": [1, 2, 3, 1.0]}, "uniqueItems": true,
                              "minItems": 2, "maxItems": 2})");
  CHECK(two->matches("[1, 3]"));
  CHECK_FALSE(two->matches("[1]"));
  CHECK_FALSE(two->matches("[1, 2, 3]"));
  CHECK_FALSE(two->matches("[1, 1.0]"));
  const auto flags = schema(R"({"type": "array", "items": {"type": "boolean"}, "uniqueItems": true})");
  CHECK(flags->matches("[true, false]"));
  CHECK_FALSE(flags->matches("[true, true]"));
  const auto objects = schema(R"({"type": "array", "items": {"enum": [{"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": 3}]},
                                  "uniqueItems": true})");
  CHECK(objects->matches(R"([{"a":1,"b":2}, {"a":3}])"));
  CHECK_FALSE(objects->matches(R"([{"a":1,"b":2}, {"b":2,"a":1}])"));
  // uniqueItems false says nothing.
  CHECK(schema(R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": false})")->matches("[1, 1]"));
  // Random walks never repeat a value and keep the order.
  std::mt19937 rng(5);
  const auto five = schema(R"({"type": "array", "items": {"enum": ["a", "b", "c", "d", "e"]}, "uniqueItems": true})");
  for (const std::string& text : random_walks(five, "[]\"abcde, ", 80, rng)) {
    const nlohmann::json v = nlohmann::json::parse(text);
    for (std::size_t i = 1; i < v.size(); ++i) CHECK(v[i - 1].get<std::string>() < v[i].get<std::string>());
  }
}

TEST_CASE("uniqueItems elsewhere is refused naming what is missing", "[constraint]") {
  CHECK_THAT(error_of([] { schema(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true})"); }),
             Contains("schema: 'uniqueItems' is not supported over these items: only where each item is one of a few "
                      "listed values"));
  CHECK_THAT(
      error_of([] { schema(R"({"type": "array", "items": {"enum": ["a"]}, "uniqueItems": true, "minItems": 2})"); }),
      Contains("schema: minItems 2 is above the 1 distinct values the items admit (uniqueItems)"));
  CHECK_THAT(error_of([] { schema(R"({"type": "object", "uniqueItems": true})"); }),
             Contains("schema: 'uniqueItems' applies to arrays, and \"type\" has none"));
  CHECK_THAT(error_of([] { schema(R"({"type": "array", "items": {"enum": ["a"]}, "uniqueItems": 1})"); }),
             Contains("schema.uniqueItems: expected true or false, not 1"));
  // Without "type", uniqueItems says the value is an array.
  CHECK(schema(R"({"items": {"const": "a"}, "uniqueItems": true})")->matches(R"(["a"])"));
  CHECK_FALSE(schema(R"({"items": {"const": "a"}, "uniqueItems": true})")->matches(R"("a")"));
}

TEST_CASE("openapi: an integer format on a string is the integer's digits, over the whole range", "[constraint]") {
  // proto3's JSON (gRPC gateways, Google's APIs) writes 64-bit integers as strings: read exactly, so no
  // safe-integer bound.
  const auto i64 = typed("string", "int64");
  for (const char* v : {"-9223372036854775808", "9223372036854775807", "0", "-1", "42"}) {
    INFO(v);
    CHECK(i64->matches(quote(v)));
  }
  for (const char* v : {"9223372036854775808", "-9223372036854775809", "01", "1.5", "1e3", "", " 1", "+1"}) {
    INFO(v);
    CHECK_FALSE(i64->matches(quote(v)));
  }
  CHECK_FALSE(i64->matches("42"));  // a number where the schema says string
  const auto u64 = typed("string", "uint64");
  CHECK(u64->matches(quote("18446744073709551615")));
  CHECK_FALSE(u64->matches(quote("18446744073709551616")));
  CHECK_FALSE(u64->matches(quote("-1")));
  // Beside "integer" too, each type its own way; beside a pattern, both.
  const auto either = schema(R"({"type": ["integer", "string"], "format": "int32"})");
  CHECK(either->matches("7"));
  CHECK(either->matches(quote("2147483647")));
  CHECK_FALSE(either->matches(quote("2147483648")));
  const auto patterned = schema(R"({"type": "string", "format": "int64", "pattern": "^[1-9]"})");
  CHECK(patterned->matches(quote("17")));
  CHECK_FALSE(patterned->matches(quote("-17")));
  // A map keyed by such integers (proto3's map<int64, V>).
  const auto map = schema(R"({"type": "object", "propertyNames": {"format": "int64"},
                              "additionalProperties": {"type": "boolean"}})");
  CHECK(map->matches(R"({"-5": true, "12": false})"));
  CHECK_FALSE(map->matches(R"({"a": true})"));
}

TEST_CASE("pydantic: ipvanyaddress and the interface formats", "[constraint]") {
  const auto any = typed("string", "ipvanyaddress");
  for (const char* v : {"192.168.0.1", "::1", "2001:db8::8a2e:370:7334", "::ffff:10.0.0.1"})
    CHECK(any->matches(quote(v)));
  for (const char* v : {"256.1.1.1", "1.2.3", "::1/64", "gggg::1", ""}) CHECK_FALSE(any->matches(quote(v)));
  const auto v4 = typed("string", "ipv4interface");
  for (const char* v : {"10.0.0.1", "10.0.0.1/0", "10.0.0.1/24", "10.0.0.1/32"}) CHECK(v4->matches(quote(v)));
  for (const char* v : {"10.0.0.1/33", "10.0.0.1/024", "10.0.0.1/", "::1/8"}) CHECK_FALSE(v4->matches(quote(v)));
  const auto v6 = typed("string", "ipv6interface");
  for (const char* v : {"::1", "fe80::1/64", "::/0", "2001:db8::/128"}) CHECK(v6->matches(quote(v)));
  for (const char* v : {"::1/129", "fe80::1/064", "10.0.0.1/8"}) CHECK_FALSE(v6->matches(quote(v)));
  const auto either = typed("string", "ipvanyinterface");
  CHECK(either->matches(quote("10.0.0.1/8")));
  CHECK(either->matches(quote("fe80::1/64")));
  CHECK_FALSE(either->matches(quote("10.0.0.1/64")));
}

}  // namespace ORBIT_TEST_FILE
