// The schema keywords compiled to byte automata (sdk/src/constrain/schema_regular.h): pattern against
// std::regex (ECMAScript) on random strings, each format on valid and invalid values, and random walks that
// never reach a dead end (number bounds: test_constraint_numbers.cpp). Links orbit_constrain and Catch only.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "constraint_test_util.h"
#include "error_text.h"
#include "orbit/constraint.h"
#include "orbit/errors.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Contains;

using namespace constraint_test;

TEST_CASE("pattern: the same strings as std::regex_search (ECMAScript), on random strings", "[constraint]") {
  const std::vector<std::string> patterns{
      "^[a-c]{2,3}$",  "ab",          "^a|b$",      "^(?:ab|c)+d?$",     "^\\d{3}-\\d{4}$",
      "^[^ab]*$",      "^a.c$",       "^$",         "^\\w+@\\w+\\.com$", "^(a|bc){1,3}$",
      "^[A-Z][a-z]*$", "c{2}",        "^x?y*z+$",   "^[\\d.]+$",         "^\\s*\\S+$",
      "^(?<n>a)b\\1?", "^\\-\\.{2}$", "^[a\\-c]+$", "^(?:a{0,2}b){2}$",  "^[^]$",
  };
  const std::string alphabet = "abcdxyzABC019.-@ _";
  std::string printable;
  for (char b = 0x20; b < 0x7F; ++b) printable += b;
  std::mt19937 rng(7);
  for (const std::string& p : patterns) {
    INFO("pattern " << p);
    if (p.find("\\1") != std::string::npos) {
      CHECK_THAT(error_of([&] {
                   schema(nlohmann::json({{"type", "string"}, {"pattern", p}}).dump());
                 }),
                 Contains("a backreference is not supported"));
      continue;
    }
    const auto c = schema(nlohmann::json({{"type", "string"}, {"pattern", p}}).dump());
    const std::regex re(p == "^[^]$" ? "^[\\s\\S]$" : p, std::regex::ECMAScript);
    int accepted = 0;
    for (int i = 0; i < 400; ++i) {
      const std::string s = random_string(rng, alphabet, 7);
      INFO("string \"" << s << "\"");
      const bool expected = std::regex_search(s, re);
      CHECK(c->matches(quote(s)) == expected);
      accepted += expected ? 1 : 0;
    }
    // And strings the pattern builds itself: random walks end in matches std::regex agrees with.
    for (const std::string& text : random_walks(c, printable, 40, rng)) {
      const std::string s = nlohmann::json::parse(text).get<std::string>();
      INFO("walked \"" << s << "\"");
      CHECK(std::regex_search(s, re));
    }
    (void)accepted;
  }
}

TEST_CASE("pattern: characters a JSON string escapes, and non-ASCII classes", "[constraint]") {
  const auto quoted = schema(R"({"type": "string", "pattern": "^\"[a\\\\]\"$"})");
  CHECK(quoted->matches(R"("\"a\"")"));
  CHECK(quoted->matches(R"("\"\\\"")"));
  CHECK_FALSE(quoted->matches(R"("\"b\"")"));
  const auto lines = schema(R"({"type": "string", "pattern": "^a\\nb\\t$"})");
  CHECK(lines->matches(R"("a\nb\t")"));
  CHECK_FALSE(lines->matches("\"a\nb\t\""));  // raw control characters are not JSON
  const auto greek = schema(R"({"type": "string", "pattern": "^[α-ω]+é?$"})");
  CHECK(greek->matches("\"αβγ\""));
  CHECK(greek->matches("\"ωé\""));
  CHECK_FALSE(greek->matches("\"αa\""));
  const auto not_ascii = schema(R"({"type": "string", "pattern": "^[^a-z]$"})");
  CHECK(not_ascii->matches("\"€\""));
  CHECK(not_ascii->matches("\"\xF0\x9F\x98\x80\""));  // U+1F600, four bytes
  CHECK_FALSE(not_ascii->matches("\"q\""));
  CHECK_FALSE(not_ascii->matches("\"\xED\xA0\x80\""));  // a surrogate is not a character
}

TEST_CASE("pattern with minLength and maxLength: characters counted as a string counts them", "[constraint]") {
  const auto c = schema(R"({"type": "string", "pattern": "^[a-z€]*$", "minLength": 2, "maxLength": 3})");
  CHECK_FALSE(c->matches("\"a\""));
  CHECK(c->matches("\"ab\""));
  CHECK(c->matches("\"€€€\""));  // three characters, nine bytes
  CHECK_FALSE(c->matches("\"abcd\""));
  CHECK(c->min_bytes() == 4);
  std::mt19937 rng(3);
  for (const std::string& t : random_walks(c, "\"ab\xE2\x82\xAC", 60, rng)) {
    const auto s = nlohmann::json::parse(t).get<std::string>();
    std::size_t chars = 0;
    for (unsigned char b : s) chars += (b & 0xC0) != 0x80 ? 1 : 0;
    CHECK((chars >= 2 && chars <= 3));
  }
  // A pattern that needs more characters than maxLength allows admits nothing.
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "pattern": "^a{5}$", "maxLength": 3})"); }),
             Contains("schema: the shortest value allowed has 5 characters, over the limit of 3"));
  // Without maxLength a pattern's strings stop at ConstraintLimits::max_string_chars.
  ConstraintLimits small;
  small.max_string_chars = 4;
  const auto bounded = schema(R"({"type": "string", "pattern": "^a+b$"})", small);
  CHECK(bounded->matches("\"aaab\""));
  CHECK_FALSE(bounded->matches("\"aaaab\""));
  ConstraintMatcher m(bounded);
  REQUIRE(m.advance("\"aaa"));
  CHECK_FALSE(m.can_advance("a"));  // a fourth 'a' would leave no room for the 'b'
}

TEST_CASE("pattern: unsupported constructs are refused naming them and where", "[constraint]") {
  const auto at = [](const std::string& p) {
    return error_of([&] {
      schema(nlohmann::json({{"properties", {{"x", {{"type", "string"}, {"pattern", p}}}}}}).dump());
    });
  };
  CHECK(at("a(?<=a)b") == "schema.properties.x.pattern: lookbehind is not supported at character 2 of the pattern");
  CHECK(at("(?<!a)b") == "schema.properties.x.pattern: lookbehind is not supported at character 1 of the pattern");
  CHECK(at("^(?=a(?<=a))") == "schema.properties.x.pattern: lookbehind is not supported at character 6 of the pattern");
  CHECK_THAT(at("\\bword"), Contains("a word boundary (\\b) is not supported"));
  CHECK_THAT(at("\\p{L}"), Contains("a Unicode property class (\\p) is not supported"));
  CHECK(at("a(^b)") ==
        "schema.properties.x.pattern: '^' is supported only at the start of the pattern or of a "
        "top-level alternative, not at character 3 of the pattern");
  CHECK(at("(?=^a)") ==
        "schema.properties.x.pattern: the lookahead at character 1 of the pattern: '^' is supported "
        "only at the start of the pattern or of a top-level alternative, not at character 4 of the "
        "pattern");
  CHECK_THAT(at("a{2000}"), Contains("a count over 1000"));
  CHECK_THAT(at("(ab"), Contains("a missing ')'"));
  CHECK_THAT(at("ab)"), Contains("an unmatched ')'"));
  CHECK_THAT(at("*a"), Contains("nothing to repeat"));
  CHECK_THAT(at("[b-a]"), Contains("a range out of order"));
  CHECK_THAT(at("^a$b"), Contains("schema.properties.x.pattern: admits no value"));  // '$' is the end anywhere
  CHECK_THAT(at("[]"), Contains("schema.properties.x.pattern: admits no value"));
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "pattern": 5})"); }),
             Contains("schema.pattern: expected a string, not 5"));
  CHECK_THAT(error_of([] { schema(R"({"type": "integer", "pattern": "a"})"); }),
             Contains("schema: 'pattern' applies to strings, and \"type\" has none"));
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "minimum": 1})"); }),
             Contains("schema: 'minimum' applies to numbers, and \"type\" has none"));
}

TEST_CASE("format: each format on valid and invalid values", "[constraint]") {
  struct Case {
    const char* format;
    std::vector<const char*> valid;
    std::vector<const char*> invalid;
  };
  const std::vector<Case> cases{
      {"date", {"2024-02-29", "1999-12-31", "2023-04-30"}, {"2024-13-01", "2024-04-31", "2024-02-30", "24-01-01", ""}},
      {"time", {"23:59:60Z", "00:00:00.123+05:30", "12:30:00z"}, {"24:00:00Z", "12:60:00Z", "12:00:00", "1:00:00Z"}},
      {"date-time", {"2024-01-15T10:20:30Z", "2024-01-15t10:20:30.5-08:00"}, {"2024-01-15 10:20:30Z", "2024-01-15"}},
      {"duration", {"P1Y", "P3Y6M4DT12H30M5S", "P2W", "PT1M"}, {"P", "PT", "P1H", "1Y", "P1.5Y", "PT0.5S"}},
      {"email",
       {"a@b.c", "first.last+tag@example.co.uk", "x_y@d-1.org", "o'hara@example.com"},
       {"@b.c", "a@", "a..b@c.d", "a@-b.c", "a b@c.d", "a@b", "What's'@c", "a@b..c", "a@b.c."}},
      {"hostname", {"localhost", "a-1.example.com", "x"}, {"-a.com", "a-.com", "a..b", "a_b.com", ""}},
      {"ipv4", {"0.0.0.0", "255.255.255.255", "192.168.1.10"}, {"256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1.1"}},
      {"ipv6",
       {"::", "::1", "2001:db8::ff00:42:8329", "1:2:3:4:5:6:7:8", "::ffff:192.0.2.1", "fe80::"},
       {"1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", ":1", "g::1"}},
      {"uuid",
       {"123e4567-e89b-12d3-a456-426614174000", "ABCDEF01-2345-6789-abcd-ef0123456789"},
       {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400"}},
      {"uri",
       {"https://example.com/a?b=c#d", "urn:isbn:0451450523", "mailto:a@b.c", "http://x/%20"},
       {"example.com", "http://a b", "1http://x", "http://x/%2"}},
      // Canonical RFC 4648: a last partial group's pad bits are zero ("QR==" spells the byte "QQ==" does).
      {"base64",
       {"", "QQ==", "QUI=", "QUJD", "aGk/Pg==", "+/8="},
       {"QQ", "QQ=", "QR==", "QUJ=", "QUJDR", "aGk_Pg==", "Q Q="}},
      {"base64url", {"", "QQ", "QUI", "QUJD", "aGk_Pg", "-_8"}, {"Q", "QQ==", "QR", "QUJ", "QUJDR", "aGk/Pg", "QUI="}},
      {"jwt",
       {"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."},
       {"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0",      // two parts
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9..sig",                             // no payload
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.a.b",  // four parts
        "eyJhbGciOiJub25lIn0.eyJzdWIiOiIxMjM0NTY3ODkwIn0.",                      // alg none: unsigned
        "abc.def.ghi"}},
  };
  for (const Case& k : cases) {
    const auto c = schema(std::string(R"({"type": "string", "format": ")") + k.format + "\"}");
    for (const char* v : k.valid) {
      INFO(k.format << ": " << v);
      CHECK(c->matches(quote(v)));
    }
    for (const char* v : k.invalid) {
      INFO(k.format << ": " << v);
      CHECK_FALSE(c->matches(quote(v)));
    }
    std::mt19937 rng(11);
    std::string printable;
    for (char b = 0x20; b < 0x7F; ++b) printable += b;
    random_walks(c, printable, 20, rng, 400);
  }
  // contentEncoding base64 / base64url (zod writes it beside the format of its name) is that format.
  const auto encoded = schema(R"({"type": "string", "contentEncoding": "base64url"})");
  CHECK(encoded->matches("\"aGk_Pg\""));
  CHECK_FALSE(encoded->matches("\"aGk/Pg==\""));
  CHECK(schema(R"({"type": "string", "format": "base64", "contentEncoding": "base64"})")->matches("\"QQ==\""));
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "contentEncoding": "7bit"})"); }),
             Contains("schema.contentEncoding: \"7bit\" is not supported (base64 and base64url are)"));
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "format": "uuid", "contentEncoding": "base64"})"); }),
             Contains("schema.contentEncoding: \"base64\" beside format \"uuid\""));
  // emoji needs Unicode's emoji properties: refused alone (zod writes it with a \p pattern, refused too).
  CHECK_THROWS(schema(R"({"type": "string", "format": "emoji"})"));
  // format and pattern together: both hold.
  const auto both = schema(R"({"type": "string", "format": "date", "pattern": "^2024-"})");
  CHECK(both->matches("\"2024-05-01\""));
  CHECK_FALSE(both->matches("\"2023-05-01\""));
  // A format of zod's own beside the pattern that checks it (z.string().startsWith("ab"), z.e164()): the
  // pattern serves it.
  const auto starts = schema(R"({"type": "string", "format": "starts_with", "pattern": "^ab.*"})");
  CHECK(starts->matches("\"abc\""));
  CHECK_FALSE(starts->matches("\"cab\""));
  const auto phone = schema(R"({"type": "string", "format": "e164", "pattern": "^\\+[1-9]\\d{6,14}$"})");
  CHECK(phone->matches("\"+4930123456\""));
  CHECK_FALSE(phone->matches("\"4930123456\""));
}

namespace {

bool leap(int year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

int days_in(int year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && leap(year) ? 29 : kDays[month - 1];
}

std::string date_text(int year, int month, int day) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", year, month, day);
  return buf;
}

}  // namespace

TEST_CASE("format date: February 29th only in leap years, on every year; every month's days", "[constraint]") {
  const auto date = schema(R"({"type": "string", "format": "date"})");
  for (int year = 0; year <= 9999; ++year) {
    INFO(year);
    CHECK(date->matches(quote(date_text(year, 2, 28))));
    CHECK(date->matches(quote(date_text(year, 2, 29))) == leap(year));
    CHECK_FALSE(date->matches(quote(date_text(year, 2, 30))));
  }
  for (const int year : {1900, 2000, 2023, 2024}) {
    for (int month = 0; month <= 13; ++month) {
      for (int day = 0; day <= 32; ++day) {
        INFO(date_text(year, month, day));
        const bool valid = month >= 1 && month <= 12 && day >= 1 && day <= days_in(year, month);
        CHECK(date->matches(quote(date_text(year, month, day))) == valid);
      }
    }
  }
  const auto stamp = schema(R"({"type": "string", "format": "date-time"})");
  CHECK(stamp->matches(quote("2000-02-29T23:59:60Z")));
  CHECK_FALSE(stamp->matches(quote("1900-02-29T00:00:00Z")));
  CHECK_FALSE(stamp->matches(quote("2023-02-29t12:00:00+01:00")));
  // A pattern that admits only dates the format refuses: nothing is left, and the error says which keywords.
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "format": "date", "pattern": "^(1900|2023)-02-29$"})"); }),
             Contains("schema: pattern and format together: admits no value"));
  const auto leap_days = schema(R"({"type": "string", "format": "date", "pattern": "^(1900|2000|2023)-02-29$"})");
  CHECK(leap_days->matches(quote("2000-02-29")));
  CHECK_FALSE(leap_days->matches(quote("1900-02-29")));
}

TEST_CASE("format: a leap second only where the time is 23:59 UTC", "[constraint]") {
  // Every local hour and minute before a second 60, under offsets either side of UTC, against the arithmetic:
  // local time less the offset, modulo a day, is 23:59 (RFC 3339 5.7). Second 59 is valid at each.
  const auto time = schema(R"({"type": "string", "format": "time"})");
  const auto stamp = schema(R"({"type": "string", "format": "date-time"})");
  const std::vector<std::pair<std::string, int>> offsets{
      {"Z", 0},      {"z", 0},       {"+00:00", 0},    {"-00:00", 0},     {"+05:30", 330}, {"-08:00", -480},
      {"+00:01", 1}, {"-00:01", -1}, {"+23:59", 1439}, {"-23:59", -1439}, {"+14:00", 840}, {"-09:45", -585}};
  const auto two = [](int n) { return std::string{static_cast<char>('0' + n / 10), static_cast<char>('0' + n % 10)}; };
  int leaps = 0;
  for (const auto& [offset, minutes] : offsets) {
    for (int h = 0; h < 24; ++h) {
      for (int m = 0; m < 60; ++m) {
        const std::string clock = two(h) + ":" + two(m) + ":";
        const bool utc_2359 = ((h * 60 + m - minutes) % 1440 + 1440) % 1440 == 23 * 60 + 59;
        leaps += utc_2359 ? 1 : 0;
        INFO(clock << "60" << offset);
        CHECK(time->matches(quote(clock + "60" + offset)) == utc_2359);
        CHECK(time->matches(quote(clock + "60.25" + offset)) == utc_2359);
        CHECK(stamp->matches(quote("2016-12-31T" + clock + "60" + offset)) == utc_2359);
        CHECK(time->matches(quote(clock + "59" + offset)));
      }
    }
  }
  CHECK(leaps == static_cast<int>(offsets.size()));  // one local minute per offset
  CHECK_FALSE(time->matches(quote("23:59:61Z")));
  CHECK_FALSE(time->matches(quote("24:59:60+01:00")));  // ajv-formats' arithmetic takes it; RFC 3339 has no hour 24
}

TEST_CASE("format with minLength and maxLength: both hold, and hostname and email are bounded as RFCs say",
          "[constraint]") {
  const auto short_ip = schema(R"({"type": "string", "format": "ipv4", "minLength": 8, "maxLength": 9})");
  CHECK(short_ip->matches(quote("10.1.1.1")));
  CHECK(short_ip->matches(quote("10.10.1.1")));
  CHECK_FALSE(short_ip->matches(quote("1.1.1.1")));
  CHECK_FALSE(short_ip->matches(quote("10.10.10.1")));
  CHECK_FALSE(short_ip->matches(quote("10.1.1.x")));
  const auto host = schema(R"({"type": "string", "format": "hostname", "maxLength": 3})");
  CHECK(host->matches(quote("a.b")));
  CHECK_FALSE(host->matches(quote("a.bc")));
  // A host name holds at most 253 characters (labels of 63 at most), under maxLength or none.
  const std::string label63(63, 'a');
  const std::string longest = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  REQUIRE(longest.size() == 253);
  for (const char* s : {R"({"type": "string", "format": "hostname"})",
                        R"({"type": "string", "format": "hostname", "maxLength": 300})"}) {
    const auto c = schema(s);
    CHECK(c->matches(quote(longest)));
    CHECK_FALSE(c->matches(quote(longest + "b")));
    CHECK_FALSE(c->matches(quote(label63 + "a.b")));
  }
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "format": "hostname", "minLength": 254})"); }),
             Contains("schema.minLength: 254 is over the 253 characters a hostname holds"));
  // An e-mail address holds at most 254 characters (RFC 5321's 256-octet path less its brackets), of them at
  // most 64 before the '@', under maxLength or none.
  const std::string local64 = std::string(31, 'a') + "." + std::string(32, 'b');
  const std::string domain189 = label63 + "." + label63 + "." + std::string(61, 'c');
  REQUIRE(local64.size() == 64);
  REQUIRE((local64 + "@" + domain189).size() == 254);
  for (const char* s :
       {R"({"type": "string", "format": "email"})", R"({"type": "string", "format": "email", "maxLength": 300})"}) {
    const auto c = schema(s);
    CHECK(c->matches(quote(local64 + "@" + domain189)));
    CHECK(c->matches(quote(local64 + "@b.co")));
    CHECK_FALSE(c->matches(quote(local64 + "@" + domain189 + "c")));  // 255 in all
    CHECK_FALSE(c->matches(quote("a" + local64 + "@b.co")));          // 65 before the '@'
    CHECK_FALSE(c->matches(quote(std::string(65, 'a') + "@b.co")));
  }
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "format": "email", "minLength": 255})"); }),
             Contains("schema.minLength: 255 is over the 254 characters an e-mail address holds"));
  CHECK(
      schema(R"({"type": "string", "format": "email", "minLength": 254})")->matches(quote(local64 + "@" + domain189)));
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "format": "uuid", "maxLength": 35})"); }),
             Contains("schema: the shortest value allowed has 36 characters, over the limit of 35"));
}

TEST_CASE("regular keywords in a tool call and in a token mask", "[constraint]") {
  const auto c = Constraint::tool_calls(R"([{"type": "function", "function": {"name": "book", "parameters":
      {"type": "object", "properties": {"day": {"type": "string", "format": "date"},
       "guests": {"type": "integer", "minimum": 1, "maximum": 12},
       "code": {"type": "string", "pattern": "^[A-Z]{3}$"}}, "required": ["day", "guests", "code"]}}}])");
  CHECK(c->matches(
      R"(<tool_call>{"name": "book", "arguments": {"day": "2025-03-01", "guests": 12, "code": "ABC"}}</tool_call>)"));
  CHECK_FALSE(c->matches(
      R"(<tool_call>{"name": "book", "arguments": {"day": "2025-03-01", "guests": 13, "code": "ABC"}}</tool_call>)"));
  CHECK_FALSE(c->matches(
      R"(<tool_call>{"name": "book", "arguments": {"day": "2025-3-1", "guests": 2, "code": "ABC"}}</tool_call>)"));
  CHECK_FALSE(c->matches(
      R"(<tool_call>{"name": "book", "arguments": {"day": "2025-03-01", "guests": 2, "code": "AB"}}</tool_call>)"));
  // Masks over a byte vocabulary agree with the matcher, token by token, along a valid text.
  TokenBytes tb;
  for (int b = 0; b < 256; ++b) tb.text.emplace_back(std::string(1, static_cast<char>(b)));
  tb.text.emplace_back(std::string("2025"));
  tb.text.emplace_back(std::string("-03-"));
  const auto vocab = TokenVocabulary::from_bytes(tb);
  TokenConstraint tc(c, vocab);
  const std::string text =
      R"(<tool_call>{"name": "book", "arguments": {"day": "2025-03-01", "guests": 7, "code": "XYZ"}}</tool_call>)";
  ConstraintMatcher m(c);
  for (char ch : text) {
    const TokenMask mask = tc.allowed();
    for (int64_t id = 0; id < vocab->size(); ++id) {
      INFO("after " << m.text() << " token " << id);
      CHECK(mask.allows(id) == m.can_advance(*vocab->bytes(id)));
    }
    tc.accept(static_cast<unsigned char>(ch));
    REQUIRE(m.advance(std::string(1, ch)));
  }
  CHECK(tc.allowed().complete);
}

TEST_CASE("maps, tuples and allOf of one schema", "[constraint]") {
  // A map (Pydantic's dict[str, int], zod's record): any keys, each value under the schema.
  const auto map = schema(R"({"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}})");
  CHECK(map->matches(R"({"a": 1, "b c": 20})"));
  CHECK(map->matches("{}"));
  CHECK_FALSE(map->matches(R"({"a": -1})"));
  CHECK_FALSE(map->matches(R"({"a": "x"})"));
  CHECK(schema(R"({"type": "object", "additionalProperties": true})")->matches(R"({"a": [1, {"b": null}]})"));
  // Keys under propertyNames (zod's record writes {"type": "string"}).
  const auto keyed = schema(R"({"type": "object", "propertyNames": {"type": "string", "pattern": "^[a-z]+$"},
                                "additionalProperties": {"type": "string", "minLength": 2}})");
  CHECK(keyed->matches(R"({"ab": "xy", "c": "zzz"})"));
  CHECK_FALSE(keyed->matches(R"({"Ab": "xy"})"));
  CHECK_FALSE(keyed->matches(R"({"ab": "x"})"));
  ConstraintMatcher after_comma(keyed);
  REQUIRE(after_comma.advance(R"({"ab": "xy",)"));
  CHECK(after_comma.min_bytes_to_complete() == 9);  // "a":"xy"} : a key of one letter, a value of two
  CHECK(schema(R"({"propertyNames": {"enum": ["x", "y"]}, "additionalProperties": {"type": "integer"}})")
            ->matches(R"({"y": 1, "x": 2})"));
  CHECK_THAT(error_of([] { schema(R"({"propertyNames": {"type": "integer"}, "additionalProperties": true})"); }),
             Contains("schema.propertyNames.type: keys are strings, not \"integer\""));
  CHECK_THAT(error_of([] { schema(R"({"properties": {"abcd": {}}, "propertyNames": {"maxLength": 3}})"); }),
             Contains("schema.propertyNames: the property name \"abcd\" does not hold under it"));
  // Tuples, as 2020-12 (prefixItems) and draft-07 (a list of items) write them.
  const auto pair = schema(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                               "minItems": 2, "maxItems": 2})");
  CHECK(pair->matches(R"([1, "a"])"));
  CHECK(pair->matches(R"([1,"a"])"));
  CHECK_FALSE(pair->matches(R"(["a", 1])"));
  CHECK_FALSE(pair->matches(R"([1])"));
  CHECK_FALSE(pair->matches(R"([1, "a", 2])"));
  CHECK_FALSE(pair->matches(R"([  1, "a"])"));  // one space after '[' is allowed, not two
  CHECK(pair->matches(R"([ 1, "a"])"));
  CHECK(pair->matches(R"([ 1,"a"])"));
  const auto draft7 = schema(R"({"type": "array", "items": [{"const": true}, {"type": "null"}], "minItems": 2,
                                 "additionalItems": false})");
  CHECK(draft7->matches("[true, null]"));
  CHECK_FALSE(draft7->matches("[false, null]"));
  CHECK(schema(R"({"prefixItems": [], "maxItems": 0})")->matches("[]"));
  // Shorter ones (minItems below the list), as zod writes a tuple with optional items, and longer ones, the
  // rest under items (2020-12) or additionalItems (draft-07), as zod writes z.tuple([...], rest).
  const auto optional = schema(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}],
                                   "items": false, "minItems": 1, "maxItems": 2})");
  for (const char* text : {R"(["a"])", R"(["a", 1])", R"([ "a",2])"}) CHECK(optional->matches(text));
  for (const char* text : {"[]", R"([1])", R"(["a", 1, 2])", R"(["a", "b"])"}) CHECK_FALSE(optional->matches(text));
  const auto rest = schema(R"({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "number"},
                               "minItems": 1})");
  for (const char* text : {R"(["a"])", R"(["a", 1, 2.5, 3])"}) CHECK(rest->matches(text));
  for (const char* text : {"[]", R"(["a", "b"])", R"([1])"}) CHECK_FALSE(rest->matches(text));
  const auto open = schema(R"({"type": "array", "prefixItems": [{}, {}], "maxItems": 3})");  // any tail, 0..3 items
  for (const char* text : {"[]", "[1]", R"([1, "a", null])"}) CHECK(open->matches(text));
  CHECK_FALSE(open->matches("[1, 2, 3, 4]"));
  const auto draft7_rest = schema(R"({"type": "array", "items": [{"type": "null"}],
                                      "additionalItems": {"type": "boolean"}, "minItems": 2})");
  CHECK(draft7_rest->matches("[null, true, false]"));
  CHECK_FALSE(draft7_rest->matches("[null]"));
  CHECK_FALSE(draft7_rest->matches("[null, 1]"));
  ConstraintMatcher capped(schema(R"({"prefixItems": [{"type": "null"}], "items": {"type": "null"}})"));
  std::string nulls = "[null";
  for (int i = 1; i < 256; ++i) nulls += ",null";
  REQUIRE(capped.advance(nulls));
  CHECK_FALSE(capped.advance(",null"));  // an open tail holds at most max_array_items items in all, as arrays
  CHECK(capped.advance("]"));
  CHECK_THAT(error_of([] { schema(R"({"prefixItems": [{}], "items": false, "minItems": 2})"); }),
             Contains("schema: minItems 2 is above the 1 items the closed tuple lists"));
  CHECK_THAT(error_of([] { schema(R"({"prefixItems": [{}], "minItems": 1, "maxItems": 1, "uniqueItems": true})"); }),
             Contains("schema: 'uniqueItems' beside 'prefixItems' is not supported"));
  // allOf of one schema (a described reference): that schema; of several: combined (test_constraint_merge).
  const auto ref = schema(R"({"$defs": {"P": {"type": "string", "format": "uuid"}},
                              "properties": {"id": {"allOf": [{"$ref": "#/$defs/P"}], "description": "the id"}},
                              "required": ["id"]})");
  CHECK(ref->matches(R"({"id": "123e4567-e89b-12d3-a456-426614174000"})"));
  CHECK_FALSE(ref->matches(R"({"id": "x"})"));
  // Beside properties, additionalProperties admits extra members after them (test_constraint_objects).
  CHECK(schema(R"({"properties": {"a": {}}, "additionalProperties": {"type": "string"}})")->matches(R"({"b": "x"})"));
}

TEST_CASE("nullable (OpenAPI 3.0): true admits null beside the schema's values, false nothing more", "[constraint]") {
  const auto name = schema(R"({"type": "object", "properties": {"a": {"type": "number", "nullable": true}},
                               "required": ["a"], "additionalProperties": false})");  // zod's openapi-3.0 target
  for (const char* text : {R"({"a": 1.5})", R"({"a": null})"}) CHECK(name->matches(text));
  CHECK_FALSE(name->matches(R"({"a": "x"})"));
  CHECK_FALSE(schema(R"({"type": "string", "nullable": false})")->matches("null"));
  CHECK(schema(R"({"type": ["string", "null"], "nullable": true})")->matches("null"));
  // Beside an enum, null only where it is listed (OpenAPI 3.0.3).
  CHECK_FALSE(schema(R"({"type": "string", "enum": ["a"], "nullable": true})")->matches("null"));
  CHECK(schema(R"({"type": "string", "enum": ["a", null], "nullable": true})")->matches("null"));
  const auto ref = schema(R"({"$defs": {"P": {"type": "integer"}}, "allOf": [{"$ref": "#/$defs/P"}],
                              "nullable": true})");
  for (const char* text : {"3", "null"}) CHECK(ref->matches(text));
  CHECK(schema(R"({"nullable": true})")->matches("null"));
  CHECK_THAT(error_of([] { schema(R"({"type": "string", "nullable": "yes"})"); }),
             Contains("schema.nullable: expected true or false, not \"yes\""));
}

TEST_CASE("oneOf: compiled when no value can match two alternatives, refused naming the pair otherwise",
          "[constraint]") {
  // Pydantic's discriminated union: alternatives by $ref, told apart by a required const.
  const auto pets = schema(R"({"$defs": {
      "Cat": {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
              "required": ["kind", "lives"]},
      "Dog": {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
              "required": ["kind"]}},
    "type": "object", "properties": {"pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
      "discriminator": {"propertyName": "kind", "mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}}}},
    "required": ["pet"]})");
  CHECK(pets->matches(R"({"pet": {"kind": "cat", "lives": 9}})"));
  CHECK(pets->matches(R"({"pet": {"kind": "dog"}})"));
  CHECK_FALSE(pets->matches(R"({"pet": {"kind": "dog", "lives": 9}})"));
  CHECK_FALSE(pets->matches(R"({"pet": {"kind": "cow"}})"));
  // zod's discriminatedUnion, typed consts; different types; different enums.
  CHECK(
      schema(R"({"oneOf": [{"type": "object", "properties": {"k": {"type": "string", "const": "a"}}, "required": ["k"]},
                            {"type": "object", "properties": {"k": {"type": "string", "const": "b"}}, "required": ["k"]}]})")
          ->matches(R"({"k": "b"})"));
  const auto typed =
      schema(R"({"oneOf": [{"type": "string", "format": "date"}, {"type": "integer"}, {"type": "null"}]})");
  CHECK(typed->matches("\"2024-01-02\""));
  CHECK(typed->matches("12"));
  CHECK(typed->matches("null"));
  CHECK(schema(R"({"oneOf": [{"enum": ["a", "b"]}, {"enum": ["c"]}]})")->matches("\"c\""));
  // zod 4's xor of strict objects: each requires a key the other forbids (it was refused as an overlap).
  const auto xor_objects = schema(R"({"oneOf": [
      {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": false},
      {"type": "object", "properties": {"b": {"type": "number"}}, "required": ["b"], "additionalProperties": false}]})");
  CHECK(xor_objects->matches(R"({"a": "x"})"));
  CHECK(xor_objects->matches(R"({"b": 2})"));
  CHECK_FALSE(xor_objects->matches(R"({"a": "x", "b": 2})"));
  // Overlaps are refused, naming the pair.
  const auto at = [](const std::string& s) { return error_of([&] { schema(s); }); };
  CHECK_THAT(at(R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})"),
             Contains("schema.oneOf: [0] and [1] may match the same value"));
  CHECK_THAT(at(R"({"oneOf": [{"type": "string"}, {"type": "null"}, {"type": "string", "maxLength": 2}]})"),
             Contains("schema.oneOf: [0] and [2] may match the same value"));
  CHECK_THAT(at(R"({"oneOf": [{"properties": {"k": {"const": 1}}}, {"properties": {"k": {"const": 2}}}]})"),
             Contains("may match the same value"));  // k not required: {} matches both
  CHECK_THAT(at(R"({"oneOf": [{}, {"type": "string"}]})"), Contains("[0] and [1] may match the same value"));
  // A key required on one side and merely absent (not forbidden) on the other: {"a": 1} matches both.
  CHECK_THAT(at(R"({"oneOf": [{"type": "object", "properties": {"a": {}}, "required": ["a"]},
                              {"type": "object", "properties": {"b": {}}}]})"),
             Contains("[0] and [1] may match the same value"));
  CHECK_THAT(at(R"({"oneOf": [{"type": "object", "properties": {"a": {}}, "required": ["a"]},
                              {"type": "object", "patternProperties": {"^a$": {}}, "additionalProperties": false}]})"),
             Contains("[0] and [1] may match the same value"));
  CHECK_THAT(at(R"({"oneOf": [{"type": ["object", "string"], "properties": {"k": {"const": 1}}, "required": ["k"]},
                              {"type": ["object", "string"], "properties": {"k": {"const": 2}}, "required": ["k"]}]})"),
             Contains("[0] and [1] may match the same value"));  // any string matches both
  CHECK_THAT(at(R"({"type": "object", "discriminator": {"propertyName": "k"}})"),
             Contains("schema: 'discriminator' is supported only beside oneOf or anyOf"));
}

TEST_CASE("recursive $ref: trees through objects and arrays; left recursion and endless values refused",
          "[constraint]") {
  // A tree (Pydantic's self-referencing model): children are nodes.
  const auto tree = schema(R"({"$defs": {"Node": {"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 8},
      "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "maxItems": 3}},
      "required": ["name"], "additionalProperties": false}}, "$ref": "#/$defs/Node"})");
  CHECK(tree->matches(R"({"name": "a"})"));
  CHECK(tree->matches(R"({"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}, {"name": "d"}]})"));
  CHECK_FALSE(tree->matches(R"({"name": "a", "children": [{"children": []}]})"));
  CHECK(tree->min_bytes() == static_cast<int64_t>(std::string(R"({"name":""})").size()));
  std::mt19937 rng(9);
  std::string printable;
  for (char b = 0x20; b < 0x7F; ++b) printable += b;
  for (const std::string& t : random_walks(tree, printable, 30, rng, 300)) CHECK(nlohmann::json::parse(t).is_object());
  // The root itself ("#"), through anyOf: an expression of numbers and nested sums.
  const auto expr = schema(R"({"anyOf": [{"type": "integer"}, {"type": "object", "properties": {
      "sum": {"type": "array", "items": {"$ref": "#"}, "minItems": 2, "maxItems": 2}}, "required": ["sum"]}]})");
  CHECK(expr->matches(R"({"sum": [1, {"sum": [2, 3]}]})"));
  CHECK_FALSE(expr->matches(R"({"sum": [1]})"));
  const auto at = [](const std::string& s) { return error_of([&] { schema(s); }); };
  CHECK_THAT(at(R"({"$defs": {"A": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}]}}, "$ref": "#/$defs/A"})"),
             Contains("schema.$defs.A.anyOf[0].$ref: \"#/$defs/A\" refers back to itself outside any object or array"));
  CHECK_THAT(at(R"({"$defs": {"A": {"type": "object", "properties": {"next": {"$ref": "#/$defs/A"}},
                   "required": ["next"]}}, "$ref": "#/$defs/A"})"),
             Contains("has a part no answer can finish: a recursive $ref whose every value holds another"));
  // A minimum no answer could reach is refused naming it, not as a recursive $ref.
  const std::string too_long = at(R"({"type": "string", "minLength": 1000000000000000})");
  CHECK_THAT(too_long, Contains("schema.minLength: 1000000000000000 is more than any answer could hold"));
  CHECK_THAT(too_long, !Contains("$ref"));
  // Minimums within that bound whose product runs past any length (4e9 items of 4e9 characters) are refused as a
  // part no answer can finish: the array's shortest text saturates instead of overflowing.
  CHECK_THAT(at(R"({"type": "array", "minItems": 4000000000, "items": {"type": "string", "minLength": 4000000000}})"),
             Contains("minimums (minLength, minItems, minProperties) whose shortest text is 2^40 bytes or more"));
}

TEST_CASE("pattern: what a request could send to hold a thread or the stack is refused quickly", "[constraint]") {
  const auto at = [](const std::string& p) {
    return error_of([&] { schema(nlohmann::json({{"type", "string"}, {"pattern", p}}).dump()); });
  };
  CHECK_THAT(at(std::string(5000, '(') + std::string(5000, ')')), Contains("groups nested deeper than 100"));
  CHECK_THAT(at("^(a{1000}){1000}$"), Contains("too complex to constrain"));
  // An automaton that grows exponentially (the n-th character from the end is an 'a'): stopped by the
  // state or work bound, not computed.
  CHECK_THAT(at("^[ab]*a[ab]{40}$"), Contains("too complex to constrain"));
  CHECK_THAT(at(".{0,1000}x.{0,1000}"), Contains("too complex to constrain"));
}

}  // namespace ORBIT_TEST_FILE
