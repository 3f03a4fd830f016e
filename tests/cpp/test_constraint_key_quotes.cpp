// Repeated keys written by tokens whose one '"' closes a key (sdk/src/constrain/key_log.h: KeyLog::one_quote,
// one_quote_suspects, VocabTrie::closes_only): TokenConstraint walks such a token only where it begins with the
// rest of a logged key, so the masks here check that each repeat is still refused, in the right object, and each
// new key kept, and that the masks agree with the key log's walk of every token (against brute force). Split from
// test_constraint_keys.cpp, whose helpers schema() and id_of() are repeated here. Links orbit_constrain and Catch
// only.
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "constraint_property_util.h"
#include "orbit/constraint.h"
#include "repeated_key.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;

namespace {

std::shared_ptr<const Constraint> schema(const std::string& text, const ConstraintLimits& limits = {}) {
  return Constraint::json_schema(text, limits);
}

using constraint_property::id_of;

}  // namespace

namespace {

// Bytes, and pieces with one '"' and no '\\' (most close a key of 'a's and 'b's), some opening an object, then EOS.
std::shared_ptr<const TokenVocabulary> one_quote_vocabulary() {
  TokenBytes v;
  for (int b = 0; b < 256; ++b) v.text.emplace_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"\":", "\": ", "a\":", "b\": ", "ab\":", "ba\":", "aa\": ", "\"a", "\"b", ", \"a", ", \"b",
                            "{\"a", "{\"b", "[{\"b", "1, \"", "b\"", "\xC3\xA9\":", "\"\xC3\xA9", "\\u0061\":"}) {
    v.text.emplace_back(piece);
  }
  v.text.emplace_back(std::nullopt);  // EOS
  return TokenVocabulary::from_bytes(std::move(v));
}

}  // namespace

TEST_CASE("a token whose one quote closes a key is refused exactly where that key repeats", "[constraint]") {
  // TokenConstraint asks the key log about such a token only when its key is one the object has (KeyLog::
  // one_quote): the masks here must still refuse each repeat, in the right object, and keep each new key.
  const auto vocab = one_quote_vocabulary();
  const auto map = schema(R"({"type": "object", "additionalProperties": {"anyOf": [{"type": "integer"},
      {"type": "object", "additionalProperties": {"type": "integer"}}]}})");
  const auto at = [&](const std::shared_ptr<const Constraint>& c, const std::string& text) {
    TokenConstraint tc(c, vocab);
    tc.accept_text(text);
    return tc.allowed();
  };
  TokenMask m = at(map, R"({"ab": 1, "a)");
  CHECK_FALSE(m.allows(id_of(*vocab, "b\": ")));  // closes "ab" again
  CHECK_FALSE(m.allows(id_of(*vocab, "b\"")));
  CHECK(m.allows(id_of(*vocab, "a\":")));  // "aa" is new
  CHECK(m.allows(id_of(*vocab, "ba\":")));
  m = at(map, R"({"ab": 1, ")");
  CHECK_FALSE(m.allows(id_of(*vocab, "ab\":")));  // the whole key in one token
  CHECK(m.allows(id_of(*vocab, "ba\":")));
  CHECK(m.allows(id_of(*vocab, "\":")));  // "" is new
  m = at(map, R"({"": 1, ")");
  CHECK_FALSE(m.allows(id_of(*vocab, "\":")));
  // Keys are the object's: the inner object's "ab" is none of the outer's, and the outer's none of the inner's.
  m = at(map, R"({"aa": {"ab": 1}, "ab)");
  CHECK(m.allows(id_of(*vocab, "\":")));
  m = at(map, R"({"ab": 1, "b": {"ab": 2, "ab)");
  CHECK_FALSE(m.allows(id_of(*vocab, "\":")));
  m = at(map, R"({"ab": 1, "b": {"aa": 2, "a)");
  CHECK(m.allows(id_of(*vocab, "b\"")));
  CHECK_FALSE(m.allows(id_of(*vocab, "a\":")));
  // A key spelled with an escape, or not in ASCII, is the key it spells: "\u0061b" is "ab".
  m = at(map, R"({"\u0061b": 1, "\u00e9": 2, "a)");
  CHECK_FALSE(m.allows(id_of(*vocab, "b\"")));
  m = at(map, R"({"ab": 1, "\u0061)");  // the key's start spelled with an escape
  CHECK_FALSE(m.allows(id_of(*vocab, "b\"")));
  CHECK(m.allows(id_of(*vocab, "a\":")));
  m = at(map, R"({"ab": 1, "é": 2, ")");
  CHECK_FALSE(m.allows(id_of(*vocab, "\xC3\xA9\":")));
  m = at(map, R"({"a": 1, ")");
  CHECK_FALSE(m.allows(id_of(*vocab, "\\u0061\":")));
  CHECK(m.allows(id_of(*vocab, "b\": ")));
  // An object the token opens may have few keys: an extra key first leaves {"a"} no second member (the
  // grammar admits it; the key log does not), with keys logged in the map around it and without.
  const auto few = schema(R"({"type": "object", "additionalProperties": {"type": "array", "items": {"properties":
      {"a": {"type": "integer"}}, "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": {"type": "integer"},
      "minProperties": 2}}})");
  for (const char* text : {R"({"k": [], "j": )", R"({"k": )"}) {
    INFO("after " << text);
    m = at(few, text);
    CHECK_FALSE(m.allows(id_of(*vocab, "[{\"b")));
    TokenConstraint tc(few, vocab);
    tc.accept_text(text);
    CHECK_THROWS(tc.accept(id_of(*vocab, "[{\"b")));
    CHECK(m.allows(id_of(*vocab, "[")));
  }
  const auto few_items = schema(R"({"type": "array", "items": {"properties": {"a": {"type": "integer"}},
      "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": {"type": "integer"}, "minProperties": 2}})");
  CHECK_FALSE(at(few_items, "").allows(id_of(*vocab, "[{\"b")));  // no key anywhere yet
  // A plain key of at most one character: "a" taken, the 'a' after a new key's quote is refused already.
  const auto short_keys = schema(R"({"propertyNames": {"maxLength": 1}, "additionalProperties": {"type": "integer"}})");
  m = at(short_keys, R"({"a": 1, )");
  CHECK_FALSE(m.allows(id_of(*vocab, "\"a")));
  CHECK(m.allows(id_of(*vocab, "\"b")));
  // Keys of a pattern or of names: "ab" and "ac" taken, no key is left after a new key's 'a'.
  for (const char* names : {R"("pattern": "^(ab|ac|d)$")", R"("enum": ["ab", "ac", "d"])"}) {
    INFO("propertyNames " << names);
    const auto shaped = schema(std::string(R"({"propertyNames": {)") + names + "}}");
    m = at(shaped, R"({"ab": 1, "ac": 2, )");
    CHECK_FALSE(m.allows(id_of(*vocab, "\"a")));
    CHECK(m.allows(id_of(*vocab, "\"")));
  }
  // Inside a key of a pattern, a looping pattern or names, a token of one quote is asked only where it begins
  // with a logged key's rest: it closes that key again, or is refused before its quote where every key left
  // after its first bytes is taken ("ab" and "aa" under ^(ab|aa|b)$).
  for (const char* names : {R"("pattern": "^(ab|aa|b|ba)$")", R"("enum": ["ab", "aa", "b", "ba"])",
                            R"("pattern": "^[ab]+$")", R"("pattern": "^[ab]*$", "maxLength": 2)"}) {
    INFO("propertyNames " << names);
    const auto shaped = schema(std::string(R"({"propertyNames": {)") + names + "}}");
    m = at(shaped, R"({"ab": 1, "a)");
    CHECK_FALSE(m.allows(id_of(*vocab, "b\": ")));  // closes "ab" again
    CHECK_FALSE(m.allows(id_of(*vocab, "b\"")));
    CHECK(m.allows(id_of(*vocab, "a\":")));  // "aa" is new
    m = at(shaped, R"({"ab": 1, ")");
    CHECK_FALSE(m.allows(id_of(*vocab, "ab\":")));  // the whole key in one token
    CHECK(m.allows(id_of(*vocab, "ba\":")));
    m = at(shaped, R"({"aa": 1, "ab": 2, ")");
    CHECK_FALSE(m.allows(id_of(*vocab, "ab\":")));
    CHECK(m.allows(id_of(*vocab, "b\": ")));
    CHECK(m.allows(id_of(*vocab, "ba\":")));
    if (std::string(names).find('+') == std::string::npos && std::string(names).find('*') == std::string::npos) {
      CHECK_FALSE(m.allows(id_of(*vocab, "aa\": ")));  // refused at its first 'a': "aa" and "ab" are taken
      CHECK_FALSE(m.allows(id_of(*vocab, "a")));
    } else {
      CHECK(m.allows(id_of(*vocab, "a")));  // "aab", "aaa" (or "a" within 2 characters) are left
      CHECK_FALSE(m.allows(id_of(*vocab, "aa\": ")));
    }
  }
}

TEST_CASE("masks of tokens that close a key with their one quote agree with the key log's walk", "[constraint]") {
  // Random decodes that mostly take the pieces (keys of 'a's and 'b's, so keys often come again), each mask
  // unbudgeted and budgeted against every token's bytes tried on the matcher.
  const std::vector<std::string> schemas{
      R"({"type": "object", "additionalProperties": {"anyOf": [{"type": "integer"},
          {"type": "object", "additionalProperties": {"type": "integer"}}]}})",
      R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "integer"}, "minProperties": 3})",
      R"({"type": "object", "additionalProperties": {"type": "array", "items": {"properties": {"a": {"type": "integer"}},
          "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": {"type": "integer"}, "minProperties": 2}}})",
      R"({"anyOf": [{"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2},
          {"type": "object", "additionalProperties": {"type": "string"}}]})",
      R"({"propertyNames": {"pattern": "^[ab]{2,4}$"}, "additionalProperties": {"type": "integer"}})",
      R"({"propertyNames": {"enum": ["a", "aa", "ab", "aab", "aba", "b", "ba"]}, "additionalProperties": {"type":
          "integer"}})",
      R"({"propertyNames": {"pattern": "^(ab*|ba*)$", "maxLength": 3}, "additionalProperties": {"type": "integer"}})"};
  const auto vocab = one_quote_vocabulary();
  const int64_t eos = vocab->size() - 1;
  std::mt19937_64 rng(5);
  for (const std::string& text : schemas) {
    INFO("schema " << text);
    const auto c = schema(text);
    for (int run = 0; run < 12; ++run) {
      TokenConstraint tc(c, vocab, {{eos}});
      for (int step = 0; step < 40 && !tc.finished(); ++step) {
        constraint_property::check_mask_brute_force(tc, *vocab, eos, 60 - step);
        const TokenMask m = tc.allowed(60 - step);
        std::vector<int64_t> pieces, any;
        for (int64_t id = 0; id < eos; ++id) {
          if (m.allows(id)) (id >= 256 ? pieces : any).push_back(id);
        }
        const std::vector<int64_t>& from = !pieces.empty() && rng() % 4 != 0 ? pieces : any;
        if (from.empty()) break;
        tc.accept(from[rng() % from.size()]);
      }
      if (tc.matcher().complete()) CHECK(orbit::test::repeated_key(tc.matcher().text()) == "");
    }
  }
}

}  // namespace ORBIT_TEST_FILE
