// Constrained decoding's budget and key-log properties, without a model: over made-up byte-level vocabularies,
// the budgeted mask at every budget equals brute force (each allowed token's bytes advanced and its fewest bytes
// left read), and a state's need is the true fewest bytes (found by brute force over every byte), under unions,
// taken keys, escaped keys and a pattern's long keys. Links orbit_constrain and Catch only (no torch).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "constraint_property_util.h"
#include "orbit/constraint.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using namespace constraint_property;

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

TEST_CASE("keys of every length, some taken: the state's bound holds at every budget", "[constraint][property]") {
  // Keys with texts of every length are counted where one more key than the object may hold is free
  // (Grammar::shaped_extra). Under ^(a|b|c|d|ab{20,})$ with "a" taken the key "a costs 21 more, the shortest
  // keys only 3 bytes: its count (6 * 25 bytes, 5 texts from the state after "a) is what keeps the bound above
  // the need. Under ^x*$ the keys "", "x", "xx", ... taken leave each next key one byte longer. The budgeted
  // mask at every budget against brute force checks that no token's need passes the bound.
  TokenBytes b;
  for (int c = 0; c < 256; ++c) b.text.emplace_back(std::string(1, static_cast<char>(c)));
  b.text.emplace_back(std::nullopt);
  const auto vocab = TokenVocabulary::from_bytes(b);
  ConstraintLimits limits;
  limits.whitespace = Whitespace::kNone;
  const std::vector<std::tuple<std::string, int, std::string>> runs{
      {"^(a|b|c|d|ab{20,})$", 2, R"({"a":1,"abbbbbbbbbbbbbbbbbbbbb":2})"},
      {"^x*$", 8, R"({"":1,"x":2,"xx":3,"xxx":4,"xxxx":5,"xxxxx":6,"xxxxxx":7,"xxxxxxx":8})"}};
  for (const auto& [pattern, members, text] : runs) {
    const std::string schema = Json{
        {"type", "object"},
        {"propertyNames", {{"pattern", pattern}}},
        {"maxProperties", members},
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

namespace {

// Letters in tokens of 1 to 5 bytes, more than 4096 of them, so that inside a long pattern's key or a string below
// its minLength the mask's entry lists only the tokens whose change in the fewest bytes left is other than minus
// their bytes (MaskEntry::by_length; test_constraint_cache checks the entries): escapes, a two-byte character,
// quoted pieces, digits. Every byte alone too; the last id writes none (the end token).
std::shared_ptr<const TokenVocabulary> letters_vocabulary() {
  TokenBytes b;
  for (int c = 0; c < 256; ++c) b.text.emplace_back(std::string(1, static_cast<char>(c)));
  for (char x = 'a'; x <= 'z'; ++x) {
    for (char y = 'a'; y <= 'z'; ++y) b.text.emplace_back(std::string{x, y});
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 4200; ++i) {
    std::string s(3 + rng() % 3, 'a');
    for (char& c : s) c = static_cast<char>('a' + rng() % 26);
    b.text.emplace_back(s);
  }
  for (const char* t : {"\\u0061", "\\u00", "\xC3\xA9", "\xC3\xA9t\xC3\xA9", "ab\"", "\":", "\":1", "\",\"", "\"}",
                        "12", "345", ",\"", "\\\"", "\\n"}) {
    b.text.emplace_back(t);
  }
  b.text.emplace_back(std::nullopt);
  return TokenVocabulary::from_bytes(b);
}

// Seeds from ORBIT_BY_LENGTH_SEEDS ("A-B" or "A"; default 1-2).
std::pair<uint64_t, uint64_t> by_length_seeds() {
  const char* env = std::getenv("ORBIT_BY_LENGTH_SEEDS");
  const std::string s = env != nullptr && *env != '\0' ? env : "1-2";
  const auto dash = s.find('-');
  if (dash == std::string::npos) return {std::stoull(s), std::stoull(s)};
  return {std::stoull(s.substr(0, dash)), std::stoull(s.substr(dash + 1))};
}

}  // namespace

// Random walks through long pattern keys and strings below their minLength, where the budget reads each token's
// change in the fewest bytes off the entry's by_length list instead of walking it through the grammar: at every
// step the budgeted mask at a random budget, and at every third step at every budget, against brute force (each
// token's bytes advanced on a copy of the matcher). A seed sweep by hand:
//   ORBIT_BY_LENGTH_SEEDS=1-50 build/tests/test_constraint_budgets "[by_length]"
// With the by_length changes read one byte off (minus the bytes less one) it fails within the first key.
TEST_CASE("long keys and strings below their minLength: budgeted masks read by length equal brute force",
          "[constraint][property][by_length]") {
  const auto vocab = letters_vocabulary();
  const int64_t eos = vocab->size() - 1;
  ConstraintLimits limits;
  limits.whitespace = Whitespace::kNone;
  const std::vector<std::string> schemas{
      R"({"type":"object","propertyNames":{"pattern":"^[a-z]{40}$"},"maxProperties":2,
          "additionalProperties":{"type":"integer"}})",
      R"({"type":"object","propertyNames":{"pattern":"^[a-z]{6,30}$"},"maxProperties":2,
          "additionalProperties":{"type":"string","minLength":24,"maxLength":30}})",
      R"({"type":"array","items":{"type":"string","minLength":30,"maxLength":40},"maxItems":2})"};
  const auto [first, last] = by_length_seeds();
  int64_t skipped = 0, cut = 0;  // over every walk: the budgets at every step, those that dropped some token
  for (uint64_t seed = first; seed <= last; ++seed) {
    std::mt19937_64 rng(seed);
    for (const std::string& schema : schemas) {
      INFO("seed " << seed << " schema " << schema);
      TokenConstraint tc(Constraint::json_schema(schema, limits), vocab, {.end_tokens = {eos}});
      for (int step = 0; step < 100; ++step) {
        INFO("after " << tc.matcher().text());
        check_mask_brute_force(tc, *vocab, eos, static_cast<int64_t>(rng() % 90));
        if (step % 3 == 0) check_every_budget(tc, *vocab, skipped, cut);
        const TokenMask m = tc.allowed();
        std::vector<int64_t> open, closing;  // a token that closes the object or the array one time in 16
        for (int64_t id = 0; id < eos; ++id) {
          if (m.allows(id)) (vocab->bytes(id)->find_first_of("}]") == std::string::npos ? open : closing).push_back(id);
        }
        const std::vector<int64_t>& from = open.empty() || (!closing.empty() && rng() % 16 == 0) ? closing : open;
        if (from.empty()) break;  // complete
        tc.accept(from[rng() % from.size()]);
      }
      CHECK(tc.matcher().complete());
    }
  }
  CHECK(cut > 0);
}

}  // namespace ORBIT_TEST_FILE
