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

#include "orbit/constraint.h"

using namespace orbit;
using Json = nlohmann::ordered_json;

namespace {

// ---- random schemas

class SchemaGen {
 public:
  explicit SchemaGen(uint64_t seed) : rng_(seed) {}

  Json schema(int depth) {
    const int kinds = depth >= 3 ? 7 : 11;
    switch (pick(kinds)) {
      case 0: return string_schema();
      case 1: return Json{{"type", "number"}};
      case 2: return Json{{"type", "integer"}, {"description", "a count"}};
      case 3: return Json{{"type", "boolean"}};
      case 4: return Json{{"type", "null"}};
      case 5: return enum_schema();
      case 6: return Json{{"const", value()}};
      case 7: return object_schema(depth);
      case 8: return array_schema(depth);
      case 9: return Json{{"anyOf", Json::array({schema(depth + 1), schema(depth + 1)})}};
      default: return pick(2) ? Json{{"type", Json::array({"string", "null"})}} : Json::object();
    }
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  Json string_schema() {
    Json s{{"type", "string"}};
    const int min = pick(3) == 0 ? std::vector<int>{1, 2, 20, 30}[static_cast<std::size_t>(pick(4))] : 0;
    if (min > 0) s["minLength"] = min;
    if (pick(3) == 0) s["maxLength"] = min + 3 + pick(5);
    return s;
  }

  Json value() {
    switch (pick(5)) {
      case 0: return names_[static_cast<std::size_t>(pick(static_cast<int>(names_.size())))];
      case 1: return pick(100) - 50;
      case 2: return pick(2) == 1;
      case 3: return nullptr;
      default: return Json{{"k", pick(3)}};
    }
  }

  Json enum_schema() {
    Json values = Json::array();
    const int n = 1 + pick(4);
    for (int i = 0; i < n; ++i) {
      Json v = value();
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
    return Json{{"enum", values}};
  }

  Json object_schema(int depth) {
    Json props = Json::object();
    Json required = Json::array();
    const int n = pick(4);
    for (int i = 0; i < n; ++i) {
      const std::string& name = names_[static_cast<std::size_t>(pick(static_cast<int>(names_.size())))];
      if (props.contains(name)) continue;
      props[name] = schema(depth + 1);
      if (pick(2)) required.push_back(name);
    }
    Json s{{"type", "object"}, {"properties", props}};
    if (!required.empty()) s["required"] = required;
    if (pick(2)) s["additionalProperties"] = false;
    return s;
  }

  Json array_schema(int depth) {
    Json s{{"type", "array"}, {"items", schema(depth + 1)}};
    if (pick(3) == 0) s["minItems"] = 1;
    s["maxItems"] = 1 + pick(3);
    return s;
  }

  std::mt19937_64 rng_;
  const std::vector<std::string> names_{"a", "ab", "name", "n\"q", "\xC3\xA9t\xC3\xA9", "b\\c", "x y"};
};

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

// ---- a byte-level vocabulary: every byte, then JSON-shaped pieces and random strings of realistic lengths

std::shared_ptr<const TokenVocabulary> made_up_vocabulary(uint64_t seed) {
  TokenBytes b;
  for (int c = 0; c < 256; ++c) b.text.emplace_back(std::string(1, static_cast<char>(c)));
  for (const char* p : {"{\"",  "\":",      "\": ",  "\", \"",     ", \"", "\"}", "}}", "]}",       "},",  "[\"",
                        "[{",   "true",     "false", "null",       "12",   "0.",  "e+", "-1",       "\\n", "\\u00",
                        "\\\"", "\xC3\xA9", "name",  "\"name\": ", " the", " a",  "ab", "n\\\"q\"", "x y", "b\\\\c"}) {
    b.text.emplace_back(p);
  }
  std::mt19937_64 rng(seed);
  const std::string alphabet = "{}[]\",: abcnqexy0123456789-.\\";
  for (int i = 0; i < 300; ++i) {
    const int len = 2 + static_cast<int>(rng() % 5);
    std::string s;
    for (int k = 0; k < len; ++k) s.push_back(alphabet[rng() % alphabet.size()]);
    b.text.emplace_back(s);
  }
  b.text.emplace_back(std::nullopt);  // EOS
  return TokenVocabulary::from_bytes(b);
}

// The mask by brute force: every token's bytes tried on the matcher; with a budget of `remaining` tokens,
// only those after which the shortest completion fits (unless none does).
void check_mask_brute_force(const TokenConstraint& tc, const TokenVocabulary& vocab, int64_t eos, int64_t remaining) {
  const TokenMask m = tc.allowed();
  const TokenMask budgeted = tc.allowed(remaining);
  REQUIRE(m.complete == tc.matcher().complete());
  std::vector<bool> fits(static_cast<std::size_t>(vocab.size()), false);
  bool any_fits = m.complete;
  for (int64_t id = 0; id < vocab.size(); ++id) {
    const auto& bytes = vocab.bytes(id);
    ConstraintMatcher after = tc.matcher();
    const bool ok = id != eos && bytes.has_value() && after.advance(*bytes);
    if (m.allows(id) != ok) {
      FAIL("token " << id << " (" << bytes.value_or("<none>") << ") after '" << tc.matcher().text() << "': mask "
                    << m.allows(id) << ", brute force " << ok);
    }
    fits[static_cast<std::size_t>(id)] = ok && after.min_bytes_to_complete() <= remaining;
    any_fits = any_fits || fits[static_cast<std::size_t>(id)];
  }
  for (int64_t id = 0; id < vocab.size(); ++id) {
    const bool want = any_fits ? fits[static_cast<std::size_t>(id)] : m.allows(id);
    if (budgeted.allows(id) != want) {
      FAIL("token " << id << " after '" << tc.matcher().text() << "' with " << remaining << " left: budgeted mask "
                    << budgeted.allows(id) << ", brute force " << want);
    }
  }
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

namespace {

// The budgeted mask at every budget from 0 to one past the largest need, against brute force: each allowed
// token's bytes advanced on a copy of the matcher and its fewest bytes left read (min_bytes_to_complete).
// TokenConstraint skips the per-token budget where an upper bound on every token's need fits (the state's
// bound), and skips the key log's walk of a token where its lower and upper bounds decide it: were a bound
// too low, some budget below the true need would keep a token brute force drops. Counts into `skipped` the
// budgets at or past the largest need (where the state's bound may skip) and into `cut` those that drop some
// token.
void check_every_budget(const TokenConstraint& tc, const TokenVocabulary& vocab, int64_t& skipped, int64_t& cut) {
  const TokenMask m = tc.allowed();
  std::vector<int64_t> need(static_cast<std::size_t>(vocab.size()), -1);
  int64_t most = 0;
  for (int64_t id = 0; id < vocab.size(); ++id) {
    if (!m.allows(id)) continue;
    ConstraintMatcher after = tc.matcher();
    REQUIRE(after.advance(*vocab.bytes(id)));
    need[static_cast<std::size_t>(id)] = after.min_bytes_to_complete();
    most = std::max(most, need[static_cast<std::size_t>(id)]);
  }
  for (int64_t remaining = 0; remaining <= most + 1; ++remaining) {
    const TokenMask budgeted = tc.allowed(remaining);
    bool any = m.complete;
    for (int64_t id = 0; id < vocab.size(); ++id)
      any = any || (m.allows(id) && need[static_cast<std::size_t>(id)] <= remaining);
    bool dropped = false;
    for (int64_t id = 0; id < vocab.size(); ++id) {
      const bool want = m.allows(id) && (!any || need[static_cast<std::size_t>(id)] <= remaining);
      dropped = dropped || (m.allows(id) && !want);
      if (budgeted.allows(id) != want) {
        FAIL("token " << id << " (" << *vocab.bytes(id) << ") after '" << tc.matcher().text() << "' with " << remaining
                      << " left (largest need " << most << "): budgeted mask " << budgeted.allows(id)
                      << ", brute force " << want << " (need " << need[static_cast<std::size_t>(id)] << ")");
      }
    }
    skipped += remaining >= most;
    cut += dropped;
  }
}

// One step of a random walk over a vocabulary of `n` tokens: every token's logit drawn from `noise`, the best taken.
// False (nothing taken) where no token is allowed or the best is `eos`.
bool take_random_token(TokenConstraint& tc, int64_t n, std::mt19937_64& rng, std::normal_distribution<float>& noise,
                       int64_t eos) {
  std::vector<float> logits(static_cast<std::size_t>(n));
  for (float& l : logits) l = noise(rng);
  if (tc.mask_logits(logits.data(), n) == 0) return false;
  const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  if (best == eos) return false;
  tc.accept(best);
  return true;
}

}  // namespace

namespace {

// Whether the matcher's state has a completion of at most `k` bytes, by brute force over every byte, with
// min_bytes_to_complete() (a lower bound) to cut the search: the true fewest bytes, whatever need() says.
bool completes_within(const ConstraintMatcher& m, int64_t k) {
  if (m.complete()) return true;
  if (k <= 0 || m.min_bytes_to_complete() > k) return false;
  for (int b = 0; b < 256; ++b) {
    ConstraintMatcher next = m;
    if (next.advance(std::string(1, static_cast<char>(b))) && completes_within(next, k - 1)) return true;
  }
  return false;
}

// Schemas whose states hold several stacks at once: anyOf of objects with free keys (counted or not), arrays
// and strings with lengths, nested.
class UnionGen {
 public:
  explicit UnionGen(uint64_t seed) : rng_(seed) {}

  Json schema(int depth) {
    if (depth >= 2) return leaf();
    Json alts = Json::array();
    const int n = 2 + pick(2);
    for (int i = 0; i < n; ++i) alts.push_back(pick(4) == 0 ? leaf() : pick(3) == 0 ? array(depth) : object(depth));
    return Json{{pick(2) ? "anyOf" : "oneOf", alts}};
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  Json leaf() {
    switch (pick(4)) {
      case 0: {
        Json s{{"type", "string"}};
        if (pick(2)) s["minLength"] = pick(6);
        if (pick(2)) s["maxLength"] = 6 + pick(4);
        return s;
      }
      case 1: return Json{{"type", "integer"}};
      case 2: return Json{{"enum", Json::array({"a", "abcdef", 1})}};
      default: return Json{{"type", "boolean"}};
    }
  }

  Json array(int depth) {
    Json s{{"type", "array"}, {"items", pick(2) ? leaf() : schema(depth + 1)}};
    if (pick(2)) s["minItems"] = pick(3);
    if (pick(2)) s["maxItems"] = 2 + pick(2);
    return s;
  }

  Json object(int depth) {
    Json s{{"type", "object"}};
    const int names = pick(7);
    if (names == 1) s["propertyNames"] = Json{{"maxLength", 1 + pick(2)}};
    if (names == 2) s["propertyNames"] = Json{{"enum", Json::array({"a", "b", "abcdefg"})}};
    if (names == 3) s["propertyNames"] = Json{{"pattern", "^(a|b|c|abcdefgh)$"}};
    if (names == 4) s["propertyNames"] = Json{{"minLength", 1 + pick(4)}};
    // Pattern keys of a finite longest (some characters escaped: \u0001 is 6 bytes, \" 2) and of none.
    if (names == 5) s["propertyNames"] = Json{{"pattern", "^(a|b|\"|a[\\u0001\"]{2})$"}};
    if (names == 6) s["propertyNames"] = Json{{"pattern", "^[ab]c*$"}};
    if (pick(3) == 0) s["properties"] = Json{{"a", leaf()}};
    s["additionalProperties"] = pick(3) == 0 ? schema(depth + 1) : leaf();
    if (pick(2)) s["minProperties"] = 1 + pick(3);
    if (pick(2)) s["maxProperties"] = 2 + pick(2);
    return s;
  }

  std::mt19937_64 rng_;
};

}  // namespace

TEST_CASE("anyOf of objects, arrays and strings: every budget keeps exactly the tokens that can still complete",
          "[constraint][property]") {
  // With several stacks alive, the slack formula and the state's skip bound read over the stacks: at each
  // state of random runs, the budgeted mask at every budget against brute force, and each kept token's need
  // (min_bytes_to_complete) against the true fewest bytes (completes_within), so that a need too low cannot
  // hide a token kept past the budget.
  const auto vocab = made_up_vocabulary(17);
  const int64_t eos = vocab->size() - 1;
  int64_t states = 0, skipped = 0, cut = 0, exact = 0;
  // UNION_SEEDS=n searches further (1,500 seeds: some 20 minutes here).
  const uint64_t seeds = std::getenv("UNION_SEEDS") ? std::stoull(std::getenv("UNION_SEEDS")) : 120;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    const std::string schema = UnionGen(seed).schema(0).dump();
    INFO("schema " << schema);
    ConstraintLimits limits;
    limits.max_string_chars = 10;
    limits.max_array_items = 3;
    limits.max_object_members = 4;
    limits.max_depth = 3;
    limits.whitespace = seed % 2 == 0 ? Whitespace::kNone : Whitespace::kSingleSpace;
    std::shared_ptr<const Constraint> c;
    try {
      c = Constraint::json_schema(schema, limits);
    } catch (const std::exception&) {
      continue;  // a schema the compiler refuses (no value): nothing to decode
    }
    std::mt19937_64 rng(seed);
    for (int run = 0; run < 3; ++run) {
      TokenConstraint tc(c, vocab, {.end_tokens = {eos}});
      std::normal_distribution<float> noise(0.0f, 2.0f);
      for (int step = 0; step < 40 && !tc.finished(); ++step) {
        check_every_budget(tc, *vocab, skipped, cut);
        const TokenMask m = tc.allowed();
        for (int64_t id = 0; id < vocab->size(); ++id) {  // the need the budget reads is the true one
          if (!m.allows(id) || rng() % 8 != 0) continue;
          ConstraintMatcher after = tc.matcher();
          REQUIRE(after.advance(*vocab->bytes(id)));
          const int64_t need = after.min_bytes_to_complete();
          INFO("after '" << after.text() << "' need " << need);
          REQUIRE(completes_within(after, need));
          ++exact;
        }
        ++states;
        if (!take_random_token(tc, vocab->size(), rng, noise, eos)) break;
      }
    }
  }
  INFO(states << " states, " << exact << " needs checked, " << cut << " budgets that drop tokens");
  CHECK(states > 1000);
  CHECK(cut > 1000);
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

namespace {

// A vocabulary that can close, open or spell whole each of `keys` (with and without ':' and ','), besides every
// byte and the made-up pieces.
std::shared_ptr<const TokenVocabulary> key_closing_vocabulary(const std::vector<std::string>& keys) {
  TokenBytes b;
  for (int c = 0; c < 256; ++c) b.text.emplace_back(std::string(1, static_cast<char>(c)));
  for (const char* p : {"\"", "\":", "\",\"", ",\"", "\\u0061\"", "\\u0062", "\\\"\"", "\"\"", "\",\"a\""}) {
    b.text.emplace_back(p);
  }
  for (const std::string& k : keys) {
    for (const std::string& t : {k + "\"", k + "\":", "\"" + k + "\"", "\"" + k + "\":", ",\"" + k + "\"",
                                 ",\"" + k + "\":", "\"" + k, k.substr(1) + "\"", k.substr(1) + "\":"}) {
      if (!t.empty()) b.text.emplace_back(t);
    }
  }
  b.text.emplace_back(std::nullopt);  // EOS
  return TokenVocabulary::from_bytes(b);
}

}  // namespace

TEST_CASE("short keys, some taken, spelled escaped or continued by a token: budgeted masks equal brute force",
          "[constraint][property]") {
  // The keys a token may go on with (k.substr(1) + '"') or spell escaped are counted at 3 bytes at most
  // (longest_key), yet a key the object has can make the one being written cost more: after each byte of the
  // object, the budgeted mask at every budget against brute force.
  const std::vector<std::string> keys{"a", "ab", "b", "x", "q", "qq", "abcdefgh"};
  const auto vocab = key_closing_vocabulary(keys);
  const std::string text = R"({"a":1,"\u0062":2,"x":3,"q":4,"ab":5,"qq":6})";
  ConstraintLimits limits;
  limits.whitespace = Whitespace::kNone;
  limits.max_object_members = 8;
  limits.max_string_chars = 8;
  int64_t skipped = 0, cut = 0;
  const std::vector<std::pair<std::string, std::string>> runs{
      {R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 6})", text},
      {R"({"type": "object", "propertyNames": {"maxLength": 2}})", text},
      {"json_object", text},
      // After "a", a key that begins with 'a' can only be "abcdefgh": 6 bytes more than "a", where keys are
      // counted at 3 bytes at most (the 4 shortest: maxProperties and 2 more; an enum's are all counted).
      {R"({"type": "object", "propertyNames": {"pattern": "^(a|b|c|d|abcdefgh)$"}, "maxProperties": 2,
          "additionalProperties": {"type": "integer"}})",
       R"({"a":1,"abcdefgh":2})"}};
  for (const auto& [schema, written] : runs) {
    INFO(schema);
    const auto c = schema == "json_object" ? Constraint::json_object(limits) : Constraint::json_schema(schema, limits);
    TokenConstraint tc(c, vocab, {.end_tokens = {vocab->size() - 1}});
    for (std::size_t i = 0; i < written.size(); ++i) {
      check_every_budget(tc, *vocab, skipped, cut);
      // The need the budget reads is the true fewest bytes, however far a free key must run past the
      // grammar's shortest ("a" then "bcdefgh": 7 more).
      const int64_t need = tc.matcher().min_bytes_to_complete();
      INFO("after '" << tc.matcher().text() << "' need " << need);
      REQUIRE(completes_within(tc.matcher(), need));
      tc.accept_text(written.substr(i, 1));
    }
  }
  CHECK(cut > 100);
}

TEST_CASE("a budget that binds inside a string settles its ',' tokens without walking them", "[constraint]") {
  // Inside a string value a ',' before the token's first '"' is the string's: it leaves the fewest bytes to
  // write as the token's others do, which the state's bound says without the key log's walk. The old bound,
  // (|t| + 1) * longest_key (4 here) over the grammar's fewest bytes, settled none with 3 tokens left.
  const auto vocab = made_up_vocabulary(3);
  const auto c = Constraint::json_object();
  TokenConstraint tc(c, vocab, {.end_tokens = {vocab->size() - 1}});
  tc.accept_text(R"({"a": "xy)");
  int64_t skipped = 0, cut = 0;
  check_every_budget(tc, *vocab, skipped, cut);  // every budget against brute force
  TokenConstraint fresh(c, vocab, {.end_tokens = {vocab->size() - 1}});
  fresh.accept_text(R"({"a": "xy)");
  const TokenMask all = fresh.allowed(), budgeted = fresh.allowed(3);
  int64_t commas = 0;  // allowed tokens with a ',' and no '"': string content
  for (int64_t id = 0; id < vocab->size(); ++id) {
    const auto& b = vocab->bytes(id);
    commas += all.allows(id) && b && b->find(',') != std::string::npos && b->find('"') == std::string::npos;
  }
  INFO(commas << " comma tokens; settled " << fresh.budget_counts().settled << ", walked "
              << fresh.budget_counts().walked);
  CHECK(commas > 20);
  CHECK(budgeted.count() < all.count());  // the budget binds
  CHECK(fresh.budget_counts().settled >= commas);
}

TEST_CASE("many keys written, some prefixes of others or spelled escaped: masks equal brute force at every byte",
          "[constraint][property]") {
  // Every token that would close one of the keys again (whole, from inside it, after a ',') must be refused,
  // and every other allowed: the mask against brute force after each byte of the object.
  const std::vector<std::string> keys{"a", "ab", "abc", "abcd", "b", "bc", "xy", "q", "qq"};
  const auto vocab = key_closing_vocabulary(keys);
  const int64_t eos = vocab->size() - 1;
  const std::string text = R"({"a":1,"ab":2,"abc":3,"b":4,"x\u0079":5,"\u0062c":6,"abcd":7,"q":8,"qq":9})";
  ConstraintLimits limits;
  limits.whitespace = Whitespace::kNone;
  limits.max_object_members = 16;
  limits.max_string_chars = 32;
  for (const auto& c :
       {Constraint::json_schema(R"({"type": "object", "additionalProperties": {"type": "integer"}})", limits),
        Constraint::json_object(limits)}) {
    TokenConstraint tc(c, vocab, {.end_tokens = {eos}});
    for (std::size_t i = 0; i < text.size(); ++i) {
      check_mask_brute_force(tc, *vocab, eos, 1000);
      tc.accept_text(text.substr(i, 1));
    }
    REQUIRE(tc.complete());
  }
}

TEST_CASE("a token the key log drops one alternative at keeps the budget: its need is the other alternative's",
          "[constraint][property]") {
  // After {"a":1, the token "a ends the first alternative (its keys are one character, or a and b, and a is
  // taken) but not the second, which still owes 7 members: its need is the second's, far past the grammar's
  // fewest bytes after it (the first's), and past the state's bound on what any token needs where no stack is
  // dropped. No token here leaves the first alternative by the grammar, so nothing else raises that bound.
  // Where the first's keys are a pattern of a short longest key, the state's bound is small, and only
  // repeats() (the tokens that drop a stack) keeps it from being taken; likewise for a key spelled with
  // escapes ("\u0001", "\"") that a token begins again.
  struct Run {
    const char* names;
    const char* key;    // the first key, as written
    const char* token;  // the token that begins it again
  };
  const Run runs[] = {{R"({"maxLength": 1})", R"("a")", R"("a)"},
                      {R"({"pattern": "^(a|b)$"})", R"("a")", R"("a)"},
                      {R"({"enum": ["a", "b"]})", R"("a")", R"("a)"},
                      {R"({"pattern": "^(\\u0001|b)$"})", R"("\u0001")", R"("\u0001)"},
                      {R"({"pattern": "^(\"|bcd)$"})", R"("\"")", R"("\")"},
                      {R"({"pattern": "^(\"|b)c{0,3}$"})", R"("\"ccc")", R"("\"ccc)"}};
  ConstraintLimits limits;
  limits.whitespace = Whitespace::kNone;
  limits.max_object_members = 16;
  for (const Run& r : runs) {
    TokenBytes b;
    for (const char* p : {"{", "\"", "a", "b", "c", ":", "1", ",", "}", "\\", "u", "0"}) b.text.emplace_back(p);
    b.text.emplace_back(r.token);
    b.text.emplace_back(std::nullopt);
    const auto vocab = TokenVocabulary::from_bytes(b);
    const std::string schema = std::string(R"({"anyOf": [{"type": "object", "propertyNames": )") + r.names +
                               R"(, "additionalProperties": {"type": "integer"}},
        {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 16}]})";
    INFO(schema);
    TokenConstraint tc(Constraint::json_schema(schema, limits), vocab, {.end_tokens = {vocab->size() - 1}});
    int64_t skipped = 0, cut = 0;
    for (const std::string part : {"{", r.key, ":", "1", ","}) {
      tc.accept_text(part);
      check_every_budget(tc, *vocab, skipped, cut);
    }
    ConstraintMatcher after = tc.matcher();
    REQUIRE(after.advance(r.token));
    INFO("need after " << r.token << ": " << after.min_bytes_to_complete());
    CHECK(after.min_bytes_to_complete() > 30);
    CHECK(cut > 20);
  }
}

TEST_CASE("one-byte tokens and a pattern's long key: the state's bound counts what the key may cost",
          "[constraint][property]") {
  // With tokens of one byte, the state's bound allows (1 + 1) * longest_key (3 here) for what keys add after a
  // token; "a" taken under ^(a|b|c|d|abcdefgh)$ makes the key "a costs 7 more (Grammar::shaped_extra, the
  // pattern's longest key: 10 bytes). Under ^(a|b|c|d|a\u0001{3})$ it costs 18 more, its longest key 21 bytes
  // as written but 6 counted in characters: a bound that counted characters would keep the token 'a' with
  // fewer tokens left than its 22 bytes. With texts of every length the key is counted at maxLength.
  TokenBytes b;
  for (int c = 0; c < 256; ++c) b.text.emplace_back(std::string(1, static_cast<char>(c)));
  b.text.emplace_back(std::nullopt);
  const auto vocab = TokenVocabulary::from_bytes(b);
  ConstraintLimits limits;
  limits.whitespace = Whitespace::kNone;
  limits.max_string_chars = 16;
  const std::vector<std::pair<std::string, std::string>> runs{
      {R"(^(a|b|c|d|abcdefgh)$)", R"({"a":1,"abcdefgh":2})"},
      {R"(^(a|b|c|d|a\u0001{3})$)", R"({"a":1,"a\u0001\u0001\u0001":2})"},
      {R"(^(a|b|c|d|a["\\]{3})$)", R"({"a":1,"a\"\\\"":2})"},
      {R"(^(a|b|c|d|ab(cdefgh)+)$)", R"({"a":1,"abcdefghcdefgh":2})"}};
  for (const auto& [pattern, text] : runs) {
    const std::string schema = Json{
        {"type", "object"},
        {"propertyNames", {{"pattern", pattern}}},
        {"maxProperties", 2},
        {"additionalProperties",
         {{"type", "integer"}}}}.dump();
    INFO(schema);
    const auto c = Constraint::json_schema(schema, limits);
    REQUIRE(c->matches(text));
    TokenConstraint tc(c, vocab, {.end_tokens = {vocab->size() - 1}});
    int64_t skipped = 0, cut = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
      check_every_budget(tc, *vocab, skipped, cut);
      tc.accept_text(text.substr(i, 1));
    }
    CHECK(cut > 10);
  }
}
