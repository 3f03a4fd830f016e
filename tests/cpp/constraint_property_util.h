// What the constraint property tests share (test_constraint_property.cpp, test_constraint_budgets.cpp): random
// schemas from the supported subset, a made-up byte-level vocabulary, and token masks checked against brute force
// (each token's bytes tried on the matcher), unbudgeted and at every budget.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "orbit/constraint.h"

namespace constraint_property {

using namespace orbit;
using Json = nlohmann::ordered_json;

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

// ---- a byte-level vocabulary: every byte, then JSON-shaped pieces and random strings of realistic lengths

inline std::shared_ptr<const TokenVocabulary> made_up_vocabulary(uint64_t seed) {
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

// The id of the token whose bytes are `bytes`; a test failure when the vocabulary has none.
inline int64_t id_of(const TokenVocabulary& v, const std::string& bytes) {
  for (int64_t id = 0; id < v.size(); ++id) {
    if (v.bytes(id) == bytes) return id;
  }
  FAIL("no token " << bytes);
  return -1;
}

// The mask by brute force: every token's bytes tried on the matcher; with a budget of `remaining` tokens,
// only those after which the shortest completion fits (unless none does).
inline void check_mask_brute_force(const TokenConstraint& tc, const TokenVocabulary& vocab, int64_t eos,
                                   int64_t remaining) {
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

// The budgeted mask at every budget from 0 to one past the largest need, against brute force: each allowed
// token's bytes advanced on a copy of the matcher and its fewest bytes left read (min_bytes_to_complete).
// TokenConstraint skips the per-token budget where an upper bound on every token's need fits (the state's
// bound), and skips the key log's walk of a token where its lower and upper bounds decide it: were a bound
// too low, some budget below the true need would keep a token brute force drops. Counts into `skipped` the
// budgets at or past the largest need (where the state's bound may skip) and into `cut` those that drop some
// token.
inline void check_every_budget(const TokenConstraint& tc, const TokenVocabulary& vocab, int64_t& skipped,
                               int64_t& cut) {
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
inline bool take_random_token(TokenConstraint& tc, int64_t n, std::mt19937_64& rng,
                              std::normal_distribution<float>& noise, int64_t eos) {
  std::vector<float> logits(static_cast<std::size_t>(n));
  for (float& l : logits) l = noise(rng);
  if (tc.mask_logits(logits.data(), n) == 0) return false;
  const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  if (best == eos) return false;
  tc.accept(best);
  return true;
}

}  // namespace constraint_property
