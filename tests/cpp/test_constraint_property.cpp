// Constrained decoding's property test, without a model: random schemas from the supported subset, random
// logits masked by TokenConstraint over a made-up byte-level vocabulary, sampling until the text completes.
// Every completed text must parse as JSON and validate against its schema (a small validator below), every
// mask must equal the brute-force answer (each token's bytes tried on the matcher), and every run must
// complete within its token budget. Links orbit_constrain and Catch only (no torch).

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "constraint_property_util.h"
#include "orbit/constraint.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using namespace constraint_property;

namespace {

// ---- a validator of the subset

std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

bool valid(const Json& schema, const Json& v, std::string& why);

bool valid_type(const Json& s, const std::string& type, const Json& v, std::string& why) {
  if (type == "string") {
    if (!v.is_string()) return false;
    const std::size_t n = code_points(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<std::size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<std::size_t>()) return false;
    return true;
  }
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number_integer();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "array") {
    if (!v.is_array()) return false;
    if (s.contains("minItems") && v.size() < s["minItems"].get<std::size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<std::size_t>()) return false;
    for (const Json& item : v) {
      if (s.contains("items") && !valid(s["items"], item, why)) return false;
    }
    return true;
  }
  if (type == "object") {
    if (!v.is_object()) return false;
    if (!s.contains("properties")) return true;
    const Json& props = s["properties"];
    std::size_t last = 0;  // properties come in declared order
    for (const auto& [key, value] : v.items()) {
      std::size_t index = 0;
      for (auto it = props.begin(); it != props.end(); ++it, ++index) {
        if (it.key() == key) break;
      }
      if (index == props.size() || index < last) {
        why = "property " + key + " unknown or out of order";
        return false;
      }
      last = index;
      if (!valid(props[key], value, why)) return false;
    }
    for (const Json& r : s.value("required", Json::array())) {
      if (!v.contains(r.get<std::string>())) {
        why = "required " + r.get<std::string>() + " missing";
        return false;
      }
    }
    return true;
  }
  return false;
}

bool valid(const Json& schema, const Json& v, std::string& why) {
  if (schema.contains("anyOf")) {
    for (const Json& alt : schema["anyOf"]) {
      if (valid(alt, v, why)) return true;
    }
    return false;
  }
  if (schema.contains("const")) return v == schema["const"];
  if (schema.contains("enum"))
    return std::find(schema["enum"].begin(), schema["enum"].end(), v) != schema["enum"].end();
  if (!schema.contains("type")) return true;
  const Json& t = schema["type"];
  if (t.is_string()) return valid_type(schema, t.get<std::string>(), v, why);
  for (const Json& one : t) {
    if (valid_type(schema, one.get<std::string>(), v, why)) return true;
  }
  return false;
}
}  // namespace

TEST_CASE("random schemas: every sampled completion parses and validates; masks equal brute force",
          "[constraint][property]") {
  const auto vocab = made_up_vocabulary(7);
  const int64_t eos = vocab->size() - 1;
  int completed = 0, stopped_by_eos = 0;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    SchemaGen gen(seed);
    const Json schema = gen.schema(0);
    INFO("seed " << seed << " schema " << schema.dump());
    ConstraintLimits limits;
    limits.max_string_chars = 12;
    limits.max_array_items = 4;
    limits.max_object_members = 3;
    limits.max_depth = 3;
    limits.whitespace = seed % 3 == 0 ? Whitespace::kNone : Whitespace::kSingleSpace;
    const auto c = Constraint::json_schema(schema.dump(), limits);
    std::mt19937_64 rng(seed * 7919);
    for (int run = 0; run < 4; ++run) {
      // A budget of the shortest text plus some slack: the run must complete within it.
      const int64_t budget = c->min_bytes() + static_cast<int64_t>(rng() % 40);
      TokenConstraint tc(c, vocab, {.end_tokens = {eos}});
      std::normal_distribution<float> noise(0.0f, 2.0f);
      bool ended = false;
      for (int64_t step = 0; step < budget && !tc.finished(); ++step) {
        if (step % 3 == 0) check_mask_brute_force(tc, *vocab, eos, budget - step - 1);
        std::vector<float> logits(static_cast<std::size_t>(vocab->size()));
        for (float& l : logits) l = noise(rng);
        REQUIRE(tc.mask_logits(logits.data(), vocab->size(), budget - step - 1) > 0);
        const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
        tc.accept(best);
        if (best == eos) {
          ended = true;
          ++stopped_by_eos;
          break;
        }
      }
      INFO("text " << tc.matcher().text() << " budget " << budget);
      REQUIRE((ended || tc.complete()));
      Json parsed;
      REQUIRE_NOTHROW(parsed = Json::parse(tc.matcher().text()));
      std::string why;
      INFO("parsed " << parsed.dump());
      REQUIRE(valid(schema, parsed, why));
      ++completed;
    }
  }
  CHECK(completed == 1600);
  CHECK(stopped_by_eos > 0);
}

TEST_CASE("json_object under random logits: every completion is an object", "[constraint][property]") {
  const auto vocab = made_up_vocabulary(11);
  const int64_t eos = vocab->size() - 1;
  ConstraintLimits limits;
  limits.max_depth = 4;
  limits.max_string_chars = 8;
  const auto c = Constraint::json_object(limits);
  std::mt19937_64 rng(5);
  for (int run = 0; run < 100; ++run) {
    TokenConstraint tc(c, vocab, {.end_tokens = {eos}});
    const int64_t budget = 60;
    std::normal_distribution<float> noise(0.0f, 3.0f);
    for (int64_t step = 0; step < budget && !tc.finished(); ++step) {
      std::vector<float> logits(static_cast<std::size_t>(vocab->size()));
      for (float& l : logits) l = noise(rng);
      REQUIRE(tc.mask_logits(logits.data(), vocab->size(), budget - step - 1) > 0);
      tc.accept(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    INFO(tc.matcher().text());
    REQUIRE(tc.complete());
    CHECK(Json::parse(tc.matcher().text()).is_object());
  }
}

TEST_CASE("budgeted masks at every budget equal brute force: the budget's skip bounds hold", "[constraint][property]") {
  const auto vocab = made_up_vocabulary(13);
  const int64_t eos = vocab->size() - 1;
  // Schemas whose keys the key log holds (free keys, few keys, names), then random ones.
  std::vector<std::string> schemas{
      R"({"type": "object", "additionalProperties": {"type": "integer"}})",
      R"({"type": "object", "propertyNames": {"enum": ["a", "ab", "abc"]}, "minProperties": 2})",
      R"({"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": {"type": "boolean"},
          "minProperties": 2, "maxProperties": 3})",
      R"({"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}},
          "minItems": 2})",
      "{}",
      // Short keys (the longest a key is counted at is 3 bytes) that a key's next bytes may make cost up to 6
      // more: one-character keys, escaped or not, owed members, and a few-keys enum whose short keys are
      // spent before its long one.
      R"({"type": "object", "propertyNames": {"maxLength": 1}, "additionalProperties": {"type": "integer"},
          "minProperties": 3})",
      R"({"type": "object", "propertyNames": {"pattern": "^(a|b|c|d|abcdefgh)$"}, "maxProperties": 2,
          "additionalProperties": {"type": "integer"}})",
      R"({"type": "object", "propertyNames": {"enum": ["a", "b", "c", "abcdefgh"]}, "maxProperties": 2,
          "additionalProperties": {"type": "integer"}})",
      R"({"anyOf": [{"type": "object", "propertyNames": {"enum": ["a", "ab"]}, "additionalProperties": {"type": "integer"}},
          {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 3}]})",
      // Pattern keys the state's bound counts at their longest (escapes as written) or, with texts of every
      // length, at maxLength characters.
      R"({"type": "object", "propertyNames": {"pattern": "^(a|b|c|\\u0001|a\\u0001{3})$"}, "maxProperties": 3,
          "additionalProperties": {"type": "integer"}})",
      R"({"type": "object", "propertyNames": {"pattern": "^(a|b|\"|a[\"\\\\]{1,2})$"}, "minProperties": 2,
          "additionalProperties": {"type": "integer"}})",
      R"({"type": "object", "propertyNames": {"pattern": "^[ab]c*$"}, "maxProperties": 3,
          "additionalProperties": {"type": "integer"}})",
      // Formats (regular languages, finite or not, up to the 10 characters a string is given here).
      R"({"type": "object", "properties": {"d": {"type": "string", "format": "date"},
          "t": {"type": "string", "format": "time"}, "p": {"type": "string", "format": "duration"}},
          "required": ["d"]})",
      R"({"type": "array", "items": {"anyOf": [{"type": "string", "format": "ipv6"},
          {"type": "object", "properties": {"v4": {"type": "string", "format": "ipv4"}}}]}, "minItems": 1})",
      R"({"type": "object", "properties": {"e": {"type": "string", "format": "email"},
          "h": {"type": "string", "format": "hostname", "maxLength": 6}}, "required": ["e", "h"]})"};
  for (uint64_t seed = 1; seed <= 200; ++seed) schemas.push_back(SchemaGen(seed * 31).schema(0).dump());
  int64_t states = 0, skipped = 0, cut = 0;
  for (std::size_t k = 0; k < schemas.size(); ++k) {
    INFO("schema " << schemas[k]);
    ConstraintLimits limits;
    limits.max_string_chars = 10;
    limits.max_array_items = 4;
    limits.max_object_members = 4;
    limits.max_depth = 3;
    limits.whitespace = k % 2 == 0 ? Whitespace::kNone : Whitespace::kSingleSpace;
    const auto c = Constraint::json_schema(schemas[k], limits);
    std::mt19937_64 rng(k + 1);
    for (int run = 0; run < 4; ++run) {
      TokenConstraint tc(c, vocab, {.end_tokens = {eos}});
      std::normal_distribution<float> noise(0.0f, 2.0f);
      for (int step = 0; step < 60 && !tc.finished(); ++step) {
        check_every_budget(tc, *vocab, skipped, cut);
        ++states;
        if (!take_random_token(tc, vocab->size(), rng, noise, eos)) break;
      }
    }
  }
  INFO(states << " states, " << skipped << " budgets at or past the largest need, " << cut << " that drop tokens");
  CHECK(states > 5000);
  CHECK(skipped > 5000);
  CHECK(cut > 5000);
}

}  // namespace ORBIT_TEST_FILE
