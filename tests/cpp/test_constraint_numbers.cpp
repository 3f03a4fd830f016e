// Number bounds compiled to byte automata (sdk/src/constrain/number_language.cpp, schema_regular.h): minimum,
// maximum, their exclusive forms and multipleOf against exact decimal arithmetic on random numbers, random
// walks that never leave the range, and the refusals that name the keyword. Links orbit_constrain and Catch
// only.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
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

// Exact decimal comparison of two JSON number texts without exponent: -1, 0 or 1.
int compare_decimal(const std::string& x, const std::string& y) {
  const auto split = [](const std::string& t, bool& neg, std::string& whole, std::string& frac) {
    neg = !t.empty() && t[0] == '-';
    const std::string body = neg ? t.substr(1) : t;
    const std::size_t dot = body.find('.');
    whole = body.substr(0, dot);
    frac = dot == std::string::npos ? "" : body.substr(dot + 1);
    whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
    frac.erase(frac.find_last_not_of('0') + 1);
    if (whole.empty() && frac.empty()) neg = false;  // -0 is 0
  };
  bool nx = false, ny = false;
  std::string wx, fx, wy, fy;
  split(x, nx, wx, fx);
  split(y, ny, wy, fy);
  if (nx != ny) return nx ? -1 : 1;
  int mag = 0;
  if (wx.size() != wy.size()) {
    mag = wx.size() < wy.size() ? -1 : 1;
  } else if (wx != wy) {
    mag = wx < wy ? -1 : 1;
  } else {
    const std::size_t n = std::max(fx.size(), fy.size());
    fx.resize(n, '0');
    fy.resize(n, '0');
    mag = fx == fy ? 0 : (fx < fy ? -1 : 1);
  }
  return nx ? -mag : mag;
}

// Whether the number text x is a multiple of m (both without exponent; m > 0).
bool is_multiple(const std::string& x, const std::string& m) {
  const auto scaled = [](std::string t, std::size_t decimals) {  // |t| * 10^decimals as digits, or "" if not whole
    if (!t.empty() && t[0] == '-') t = t.substr(1);
    const std::size_t dot = t.find('.');
    std::string whole = t.substr(0, dot);
    std::string frac = dot == std::string::npos ? "" : t.substr(dot + 1);
    frac.erase(frac.find_last_not_of('0') + 1);
    if (frac.size() > decimals) return std::string();
    frac.resize(decimals, '0');
    return whole + frac;
  };
  const std::size_t dot = m.find('.');
  const std::size_t decimals = dot == std::string::npos ? 0 : m.size() - dot - 1;
  const std::string xs = scaled(x, decimals);
  if (xs.empty()) return false;
  const long mm = std::stol(scaled(m, decimals));
  long r = 0;
  for (char c : xs) r = (r * 10 + (c - '0')) % mm;
  return r == 0;
}

std::string random_number(std::mt19937& rng, bool integer) {
  std::string s = rng() % 3 == 0 ? "-" : "";
  const int whole = static_cast<int>(rng() % 4);
  s += whole == 0 ? "0" : std::to_string(1 + rng() % 9);
  for (int i = 1; i < whole; ++i) s += static_cast<char>('0' + rng() % 10);
  if (!integer && rng() % 2 == 0) {
    s += '.';
    const int frac = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < frac; ++i) s += static_cast<char>('0' + rng() % 10);
  }
  return s;
}

}  // namespace

TEST_CASE("number bounds: exactly the values in range, on random numbers", "[constraint]") {
  struct Bound {
    const char* key;
    const char* value;
  };
  const std::vector<std::vector<Bound>> sets{
      {{"minimum", "0"}},
      {{"minimum", "-2.5"}, {"maximum", "17.25"}},
      {{"exclusiveMinimum", "0"}, {"exclusiveMaximum", "1"}},
      {{"minimum", "0.05"}, {"exclusiveMaximum", "0.5"}},
      {{"exclusiveMinimum", "-10"}, {"maximum", "-0.125"}},
      {{"maximum", "0"}},
      {{"exclusiveMaximum", "0"}},
      {{"minimum", "99"}, {"maximum", "1000"}},
      {{"multipleOf", "0.25"}},
      {{"multipleOf", "3"}, {"minimum", "-20"}, {"maximum", "50"}},
      {{"multipleOf", "0.01"}, {"exclusiveMinimum", "1.5"}},
  };
  std::mt19937 rng(5);
  for (const bool integer : {false, true}) {
    for (const auto& set : sets) {
      nlohmann::json s{{"type", integer ? "integer" : "number"}};
      for (const Bound& b : set) s[b.key] = nlohmann::json::parse(b.value);
      INFO("schema " << s.dump());
      const auto satisfies = [&](const std::string& x) {
        for (const Bound& b : set) {
          const int cmp = compare_decimal(x, b.value);
          const std::string k = b.key;
          if ((k == "minimum" && cmp < 0) || (k == "maximum" && cmp > 0) || (k == "exclusiveMinimum" && cmp <= 0) ||
              (k == "exclusiveMaximum" && cmp >= 0) || (k == "multipleOf" && !is_multiple(x, b.value))) {
            return false;
          }
        }
        return true;
      };
      std::shared_ptr<const Constraint> c;
      const std::string error = error_of([&] { c = schema(s.dump()); });
      if (c == nullptr) {  // refused as empty: then no number is in range
        CHECK_THAT(error, Contains("admits no value"));
        for (int i = 0; i < 600; ++i) CHECK_FALSE(satisfies(random_number(rng, integer)));
        continue;
      }
      for (int i = 0; i < 600; ++i) {
        const std::string x = random_number(rng, integer);
        INFO("number " << x);
        const bool negative_zero = x[0] == '-' && compare_decimal(x, "0") == 0;
        if (negative_zero) continue;  // "-0" forms are never written under bounds (0 is)
        CHECK(c->matches(x) == satisfies(x));
      }
      for (const Bound& b : set) {  // the bound itself, exactly
        if (std::string(b.value).find('.') != std::string::npos && integer) continue;
        if (std::string(b.key) == "multipleOf") continue;
        INFO("bound " << b.value);
        CHECK(c->matches(b.value) == satisfies(b.value));
      }
      for (const std::string& x : random_walks(c, "-0123456789.", 40, rng)) {
        INFO("walked " << x);
        CHECK(satisfies(x));
      }
    }
  }
}

TEST_CASE("number bounds: an exclusive bound holds once the number is read as a double", "[constraint]") {
  // Clients read JSON numbers as doubles: a number past the bound by less than the doubles' spacing there
  // reads as the bound itself and fails it, so it is never written.
  const auto open = schema(R"({"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 1})");
  for (const char* x :
       {"0.500000000000000000000000000001", "0.50000000000000001", "0.99999999999999999", "0.9999999999999999999"}) {
    INFO(x);
    CHECK_FALSE(open->matches(x));
  }
  for (const char* x : {"0.5000000000000001", "0.50000000000000012", "0.75", "0.9999999999999999"}) {
    INFO(x);
    CHECK(open->matches(x));
  }
  // Every number a walk writes is past its bounds as a double.
  std::mt19937 rng(11);
  for (const char* bounds :
       {R"("exclusiveMinimum": 0.4, "exclusiveMaximum": 0.5)", R"("exclusiveMinimum": -0.1, "exclusiveMaximum": 0.1)",
        R"("exclusiveMinimum": 1e-12, "maximum": 2e-12)", R"("exclusiveMaximum": -3)"}) {
    const nlohmann::json s = nlohmann::json::parse(std::string("{\"type\": \"number\", ") + bounds + "}");
    const auto c = schema(s.dump());
    for (const std::string& x : random_walks(c, "-0123456789.", 40, rng)) {
      INFO(s.dump() << " walked " << x);
      const double v = std::strtod(x.c_str(), nullptr);
      if (s.contains("exclusiveMinimum")) CHECK(v > s["exclusiveMinimum"].get<double>());
      if (s.contains("exclusiveMaximum")) CHECK(v < s["exclusiveMaximum"].get<double>());
    }
  }
  // Where no written number comes that near (0's next double has hundreds of digits), the bound is exact.
  CHECK(schema(R"({"type": "number", "exclusiveMinimum": 0})")->matches("0.000000000000000000000000000001"));
  CHECK_FALSE(schema(R"({"type": "number", "exclusiveMinimum": 0})")->matches("0"));
}

TEST_CASE("number bounds: an integer unbounded on a side stays a safe integer there", "[constraint]") {
  // JavaScript clients read numbers as doubles, which hold every integer up to 2^53 - 1 and round past it.
  const auto plain = schema(R"({"type": "integer"})");
  for (const char* x : {"9007199254740991", "-9007199254740991", "0", "-1", "123456789012345"}) {
    INFO(x);
    CHECK(plain->matches(x));
  }
  for (const char* x : {"9007199254740992", "-9007199254740992", "12345678901234567", "99999999999999999"}) {
    INFO(x);
    CHECK_FALSE(plain->matches(x));
  }
  // One side bounded by the schema: the other stays safe; a bound given past the safe range is kept.
  const auto from_zero = schema(R"({"type": "integer", "minimum": 0})");
  CHECK(from_zero->matches("9007199254740991"));
  CHECK_FALSE(from_zero->matches("9007199254740992"));
  CHECK_FALSE(from_zero->matches("-1"));
  const auto wide = schema(R"({"type": "integer", "maximum": 100000000000000000})");
  CHECK(wide->matches("99999999999999999"));
  CHECK_FALSE(wide->matches("-9007199254740992"));
  const auto open = schema(R"({"type": "integer", "exclusiveMaximum": 10})");
  CHECK(open->matches("-9007199254740991"));
  CHECK_FALSE(open->matches("10"));
  // Numbers (not integers) keep their own limits: a double reads them as the nearest double, as it must.
  CHECK(schema(R"({"type": "number"})")->matches("12345678901234567"));
}

TEST_CASE("number bounds: refusals name the keyword", "[constraint]") {
  CHECK_THAT(error_of([] { schema(R"({"type": "number", "minimum": "1"})"); }),
             Contains("schema.minimum: expected a number, not \"1\""));
  CHECK_THAT(error_of([] { schema(R"({"type": "integer", "minimum": 2, "maximum": 1})"); }),
             Contains("schema: admits no value"));
  CHECK_THAT(error_of([] { schema(R"({"type": "integer", "exclusiveMinimum": 0.5, "exclusiveMaximum": 1})"); }),
             Contains("schema: admits no value"));
  CHECK_THAT(error_of([] { schema(R"({"type": "number", "multipleOf": 0})"); }),
             Contains("schema.multipleOf: expected a number above 0"));
  CHECK_THAT(error_of([] { schema(R"({"type": "number", "multipleOf": 123456})"); }),
             Contains("schema.multipleOf: 123456 is too fine or too large to constrain"));
  // A bound past every number that can be written is named, not blamed on its automaton.
  CHECK(error_of([] { schema(R"({"type": "integer", "minimum": 1e30})"); }) ==
        "schema.minimum: 1e+30 is above every number of at most 18 characters (the longest a number may be here)");
  CHECK(error_of([] { schema(R"({"type": "number", "minimum": 1e300})"); }) ==
        "schema.minimum: 1e+300 is above every number of at most 32 characters (the longest a number may be here)");
  CHECK(error_of([] { schema(R"({"type": "number", "exclusiveMaximum": -1e300})"); }) ==
        "schema.exclusiveMaximum: -1e+300 is below every number of at most 32 characters (the longest a number "
        "may be here)");
  ConstraintLimits wide;
  wide.max_number_chars = 400;
  CHECK(error_of([&] { schema(R"({"type": "number", "minimum": 1e300})", wide); }) ==
        "schema.minimum: 1e+300 has 301 digits before the point, over the 200 a bound may have");
  const auto far = schema(R"({"type": "number", "minimum": 1e150})", wide);
  CHECK(far->matches("1" + std::string(150, '0')));
  CHECK_FALSE(far->matches(std::string(150, '9')));
  // One bound past reach on the side that leaves every number in: the other still applies.
  const auto low = schema(R"({"type": "number", "minimum": -1e300, "maximum": 5})");
  CHECK(low->matches("-12345.5"));
  CHECK_FALSE(low->matches("6"));
  CHECK(schema(R"({"type": "integer", "exclusiveMinimum": -1e300})")->matches("-7"));
  // A bound far outside what a number of max_number_chars can write changes nothing.
  const auto huge = schema(R"({"type": "number", "maximum": 1e300})");
  CHECK(huge->matches("12345.5"));
  CHECK_FALSE(huge->matches("1e5"));  // bounded numbers are written without exponent
  // Keywords infer the type when "type" is absent.
  CHECK(schema(R"({"minimum": 1})")->matches("1.5"));
  CHECK_FALSE(schema(R"({"minimum": 1})")->matches("\"a\""));
  CHECK(schema(R"({"pattern": "^a"})")->matches("\"ab\""));
}

}  // namespace ORBIT_TEST_FILE
