// The keyed LRU of compiled constraints (orbit/constraint_cache.h): a schema or tools asked for again are not
// compiled again (counted by hits and misses), what changes the grammar keys apart, the bounds drop the least
// recently used, a refusal keeps nothing, and a kept constraint masks as a fresh compile does; the languages
// fields share are built once (dfa_memo.h).
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "constrain/dfa_memo.h"
#include "constrain/grammar.h"
#include "constrain/matcher.h"
#include "constrain/regex.h"
#include "constrain/token_masks.h"
#include "orbit/common/error.h"
#include "orbit/constraint_cache.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Matchers::Contains;

namespace {

// zod's z.hostname(): format hostname beside a pattern whose lookahead bounds the length (thousands of states).
const std::string kHostname =
    nlohmann::json({{"type", "string"},
                    {"format", "hostname"},
                    {"pattern",
                     "^(?=.{1,253}\\.?$)[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\\.[a-zA-Z0-9](?:[-0-9a-zA-Z]"
                     "{0,61}[0-9a-zA-Z])?)*\\.?$"}})
        .dump();
const std::string kObject = R"({"type":"object","properties":{"a":{"type":"string","minLength":40}},"required":["a"]})";
const std::string kOther = R"({"type":"object","properties":{"b":{"type":"string","minLength":40}},"required":["b"]})";
const std::string kTools = R"([{"type":"function","function":{"name":"find","parameters":{"type":"object",)"
                           R"("properties":{"q":{"type":"string"}},"required":["q"]}}}])";

std::shared_ptr<const TokenVocabulary> bytes_vocabulary() {
  TokenBytes tb;
  for (int b = 0; b < 256; ++b) tb.text.emplace_back(std::string(1, static_cast<char>(b)));
  return TokenVocabulary::from_bytes(tb);
}

// The masks of `c` after each prefix of `text` (computing them grows the constraint's memory_bytes).
std::vector<TokenMask> masks_along(const std::shared_ptr<const Constraint>& c, const TokenVocabulary& v,
                                   const std::string& text) {
  std::vector<TokenMask> out;
  ConstraintMatcher m(c);
  out.push_back(m.mask(v));
  for (char b : text) {
    REQUIRE(m.advance(std::string(1, b)));
    out.push_back(m.mask(v));
  }
  return out;
}

}  // namespace

TEST_CASE("constraint cache: the same schema is compiled once", "[constraint_cache]") {
  ConstraintCache cache;
  const auto first = cache.json_schema(kHostname);
  const auto again = cache.json_schema(kHostname, {}, "response_format");  // `path` names errors only
  CHECK(again == first);
  const ConstraintCacheStats s = cache.stats();
  CHECK(s.misses == 1);
  CHECK(s.hits == 1);
  CHECK(s.entries == 1);
  CHECK(s.bytes >= static_cast<int64_t>(first->memory_bytes()));
  const auto tools = cache.tool_calls(kTools);
  CHECK(cache.tool_calls(kTools) == tools);
  CHECK(cache.stats().misses == 2);
  CHECK(cache.stats().hits == 2);
}

TEST_CASE("constraint cache: another schema, limits or call options is another entry", "[constraint_cache]") {
  ConstraintCache cache;
  const auto a = cache.json_schema(kObject);
  CHECK(cache.json_schema(kOther) != a);
  ConstraintLimits compact;
  compact.whitespace = Whitespace::kNone;
  const auto c = cache.json_schema(kObject, compact);
  CHECK(c != a);
  CHECK_FALSE(c->matches(R"({"a": ")" + std::string(40, 'x') + "\"}"));  // compact: no space after ':'
  ConstraintLimits shorter;
  shorter.max_string_chars = 50;
  CHECK(cache.json_schema(kObject, shorter) != a);
  ToolCallOptions two;
  two.max_calls = 2;
  ToolCallOptions qwen;
  qwen.begin = "<tool_call>\n";
  const auto one_call = cache.tool_calls(kTools);
  CHECK(cache.tool_calls(kTools, two) != one_call);
  CHECK(cache.tool_calls(kTools, qwen) != one_call);
  const ConstraintCacheStats s = cache.stats();
  CHECK(s.hits == 0);
  CHECK(s.misses == 7);
  CHECK(s.entries == 7);
}

TEST_CASE("constraint cache: bounded by entries and by bytes, least recently used dropped first",
          "[constraint_cache]") {
  ConstraintCacheOptions two;
  two.max_entries = 2;
  ConstraintCache by_entries(two);
  const auto a = by_entries.json_schema(kObject);
  const auto b = by_entries.json_schema(kOther);
  CHECK(by_entries.json_schema(kObject) == a);  // a is now the most recent: b goes next
  by_entries.json_schema(kHostname);
  CHECK(by_entries.stats().entries == 2);
  CHECK(by_entries.json_schema(kObject) == a);
  CHECK(by_entries.json_schema(kOther) != b);  // compiled again
  CHECK(by_entries.stats().misses == 4);

  // By bytes: room for one entry with its masks and a half; the second's masks push the first out once counted.
  const auto vocab = bytes_vocabulary();
  const std::string text = R"({"a": ")" + std::string(30, 'x');
  std::size_t one = 0;
  {
    ConstraintCache probe;
    masks_along(probe.json_schema(kObject), *vocab, text);
    one = static_cast<std::size_t>(probe.stats().bytes);
  }
  ConstraintCacheOptions budget;
  budget.max_bytes = one * 3 / 2;
  ConstraintCache by_bytes(budget);
  const auto x = by_bytes.json_schema(kObject);
  masks_along(x, *vocab, text);
  const auto y = by_bytes.json_schema(kOther);
  CHECK(by_bytes.stats().entries == 2);  // y's masks are not computed yet: both fit
  masks_along(y, *vocab, R"({"b": ")" + std::string(30, 'x'));
  const ConstraintCacheStats after = by_bytes.stats();
  CHECK(after.entries == 1);
  CHECK(after.bytes <= static_cast<int64_t>(one * 3 / 2));
  CHECK(by_bytes.json_schema(kOther) == y);
  CHECK(by_bytes.json_schema(kObject) != x);
  // An entry larger than the budget stays while it is the most recent; max_entries 0 keeps nothing.
  ConstraintCacheOptions tiny;
  tiny.max_bytes = 1;
  ConstraintCache small(tiny);
  const auto t = small.json_schema(kObject);
  CHECK(small.json_schema(kObject) == t);
  ConstraintCacheOptions none;
  none.max_entries = 0;
  ConstraintCache off(none);
  CHECK(off.json_schema(kObject) != off.json_schema(kObject));
  CHECK(off.stats().entries == 0);
  CHECK(off.stats().misses == 2);
}

TEST_CASE("constraint cache: a kept constraint masks as a fresh compile does", "[constraint_cache]") {
  ConstraintCache cache;
  const auto vocab = bytes_vocabulary();
  cache.json_schema(kHostname);
  const auto kept = cache.json_schema(kHostname);
  REQUIRE(cache.stats().hits == 1);
  const auto fresh = Constraint::json_schema(kHostname);
  for (const std::string text : {"\"example.com", "\"a-b.c0.", "\"x"}) {
    const std::vector<TokenMask> k = masks_along(kept, *vocab, text);
    const std::vector<TokenMask> f = masks_along(fresh, *vocab, text);
    REQUIRE(k.size() == f.size());
    for (std::size_t i = 0; i < k.size(); ++i) {
      INFO(text << " after " << i << " bytes");
      CHECK(k[i].bits == f[i].bits);
      CHECK(k[i].complete == f[i].complete);
    }
  }
  CHECK(kept->matches("\"example.com\""));
  CHECK_FALSE(kept->matches("\"-example.com\""));
}

TEST_CASE("constraint cache: a refusal keeps nothing; a key holds one type", "[constraint_cache]") {
  ConstraintCache cache;
  const std::string bad = R"({"type":"array","uniqueItems":true})";
  for (int i = 0; i < 2; ++i) {
    CHECK_THROWS_WITH(cache.json_schema(bad, {}, "response_format"),
                      Contains("response_format: 'uniqueItems' is not supported"));
  }
  CHECK(cache.stats().misses == 2);
  CHECK(cache.stats().entries == 0);
  // remembered(): a caller's own value around a constraint, under its own key.
  const auto made = [] { return Remembered<std::string>{"kept", Constraint::json_object(), 4}; };
  CHECK(cache.remembered<std::string>("mine", made) == "kept");
  CHECK(cache.remembered<std::string>("mine", [] { return Remembered<std::string>{"other", nullptr, 0}; }) == "kept");
  CHECK_THROWS_WITH(cache.remembered<int>("mine",
                                          [] {
                                            return Remembered<int>{1, nullptr, 0};
                                          }),
                    Contains("is kept as another type of value"));
}

TEST_CASE("constraint cache: lookups from several threads share one entry", "[constraint_cache][thread]") {
  ConstraintCache cache;
  const auto vocab = bytes_vocabulary();
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const Constraint>> got(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        got[t] = cache.json_schema(i % 2 ? kObject : kOther);
        ConstraintMatcher(got[t]).mask(*vocab);  // masks grow while others recount
        cache.stats();
      }
    });
  }
  for (auto& th : threads) th.join();
  const ConstraintCacheStats s = cache.stats();
  CHECK(s.entries == 2);
  CHECK(s.hits + s.misses == 80);
  CHECK(s.misses >= 2);
  CHECK(cache.json_schema(kObject) == got[0]);
}

// A mask that allows a few tokens of a large vocabulary is held as their ids, not as a bitset of the vocabulary:
// a schema of many declared keys has one mask per state inside a key, and at a bitset each (8 KB here, 16 KB at
// 128k tokens) they overflowed the cache's 64 MiB, which then started over on every decode of that schema. Fails
// where each mask costs its bitset (memory_bytes grows by at least 8 KB a mask).
TEST_CASE("constraint cache: a mask of a few tokens costs far less than a bitset of the vocabulary",
          "[constraint_cache]") {
  TokenBytes tb;
  for (int b = 0; b < 256; ++b) tb.text.emplace_back(std::string(1, static_cast<char>(b)));
  for (int i = 256; i < 65536; ++i) tb.text.emplace_back("\x01" + std::to_string(i));  // never allowed in a key
  const auto vocab = TokenVocabulary::from_bytes(tb);
  const std::string a(20, 'a'), b(20, 'b');
  const auto c = Constraint::json_schema(R"({"type":"object","properties":{")" + a + R"(":{"type":"integer"},")" + b +
                                         R"(":{"type":"integer"}},"additionalProperties":false})");
  const std::size_t before = c->memory_bytes();
  const std::vector<TokenMask> masks = masks_along(c, *vocab, "{\"" + a.substr(0, 10));
  const std::size_t per_mask = (c->memory_bytes() - before) / masks.size();
  CHECK(per_mask < 65536 / 8 / 4);
  // Each mask is still the whole vocabulary's bitset, and inside the key allows just its next letter.
  for (std::size_t i = 0; i < masks.size(); ++i) CHECK(masks[i].bits.size() == 65536 / 64);
  for (std::size_t i = 3; i < masks.size(); ++i) {
    CHECK(masks[i].count() == 1);
    CHECK(masks[i].allows('a'));
  }
  CHECK(masks[2].count() == 2);  // after {" the first letter of either key
  CHECK(masks[2].allows('a'));
  CHECK(masks[2].allows('b'));
}

namespace {

// The states a matcher of `g` passes through along `text`, each kept once (by the masks' cache key).
std::vector<constrain::StateSet> distinct_states(const constrain::Grammar& g, const constrain::VocabTrie& trie,
                                                 const std::string& text) {
  constrain::Matcher m(g);
  constrain::MaskCache seen(g, trie, std::numeric_limits<std::size_t>::max());
  std::vector<constrain::StateSet> out;
  constrain::StateSet s;
  m.start(s);
  for (std::size_t i = 0;; ++i) {
    const std::size_t misses = seen.misses();
    seen.get(s);
    if (seen.misses() > misses) out.push_back(s);
    if (i == text.size()) break;
    constrain::StateSet next;
    REQUIRE(m.step(s, static_cast<uint8_t>(text[i]), next));
    s = next;
  }
  return out;
}

}  // namespace

// A full mask cache drops part of its masks, not all of them: a decode that cycles through three times more masks
// than fit (the same schema decoded again and again) still finds some, with the cache never past its bound and
// every mask as computed. Fails where a full cache starts over (no hit after the first pass: each pass empties
// it before it comes back to a mask), and where it drops masks at random (26 of the 3 passes' 399 reads hit; the
// masks of the highest hashes kept, 95).
TEST_CASE("mask cache: when full it frees part of its room, so a cycle through more masks than fit finds some",
          "[constraint_cache]") {
  const std::string a(40, 'a'), b(40, 'b'), c(40, 'c');
  constrain::Grammar g;
  g.root = constrain::add_json_schema(g,
                                      R"({"type":"object","properties":{")" + a + R"(":{"type":"integer"},")" + b +
                                          R"(":{"type":"integer"},")" + c + R"(":{"type":"integer"}}})",
                                      ConstraintLimits{}, "schema");
  g.finish();
  std::vector<std::optional<std::string>> bytes;
  for (int x = 0; x < 256; ++x) bytes.emplace_back(std::string(1, static_cast<char>(x)));
  const constrain::VocabTrie trie(bytes);
  const std::string text = "{\"" + a + "\":1,\"" + b + "\":22,\"" + c + "\":333}";
  const std::vector<constrain::StateSet> states = distinct_states(g, trie, text);
  REQUIRE(states.size() > 100);
  constrain::MaskCache all(g, trie, std::numeric_limits<std::size_t>::max());
  for (const auto& s : states) all.get(s);
  const std::size_t bound = all.bytes() / 3;
  constrain::MaskCache cache(g, trie, bound);
  std::size_t later_hits = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const std::size_t hits = cache.hits();
    for (const auto& s : states) {
      const auto got = cache.get(s), want = all.get(s);
      CHECK(cache.bytes() <= bound);
      std::vector<uint64_t> got_bits, want_bits;
      got->copy_bits(got_bits);
      want->copy_bits(want_bits);
      CHECK(got_bits == want_bits);
      CHECK(got->need == want->need);
    }
    if (pass > 0) later_hits += cache.hits() - hits;
  }
  CHECK(later_hits >= states.size() / 2);  // of 3 passes' 3 x states.size() reads
}

// Inside a key of ^[a-z]{40}$, or a string far below its minLength, each letter token shortens the fewest bytes left
// by its bytes: over 4096 tokens change them, past the differs list's bound, where a budget walked each allowed token
// through the grammar (~2 ms a step over GPT-2). The entry lists instead the tokens whose change is other than minus
// their bytes (by_length): in the string a two-byte character (-1), an escape that writes one character in 6 bytes
// (-1), one begun (+1), a '\\' (0). Each allowed token's change read off the entry is the matcher's own, and where
// fewer than 4096 change them (the key's last letters) the plain list stays. Fails where the entry drops the list
// past its bound (differs_complete false, by_length false).
TEST_CASE("mask entry: where each token writes what is left, the list keeps the other changes", "[constraint_cache]") {
  std::vector<std::optional<std::string>> bytes;
  for (int x = 0; x < 256; ++x) bytes.emplace_back(std::string(1, static_cast<char>(x)));
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) {
      for (char c = 'a'; c <= 'z'; c += 3) bytes.emplace_back(std::string{a, b, c});  // 26 * 26 * 9 = 6084
    }
  }
  for (const char* t : {"\\u0061", "\\u00", "\xC3\xA9", "ab\"", "\":", "\""}) bytes.emplace_back(t);
  const constrain::VocabTrie trie(bytes);
  ConstraintLimits limits;
  limits.whitespace = Whitespace::kNone;
  // (schema, the text walked, the bytes of it before the first state checked)
  const std::vector<std::tuple<std::string, std::string, std::size_t>> runs{
      {R"({"type":"object","propertyNames":{"pattern":"^[a-z]{40}$"},"additionalProperties":{"type":"integer"}})",
       "{\"" + std::string(39, 'q'), 3},
      {R"({"type":"string","minLength":60})", "\"" + std::string(50, 'q'), 1}};
  for (const auto& [schema, text, first] : runs) {
    constrain::Grammar g;
    g.root = constrain::add_json_schema(g, schema, limits, "schema");
    g.finish();
    constrain::Matcher m(g);
    constrain::MaskCache cache(g, trie, std::numeric_limits<std::size_t>::max());
    constrain::StateSet s, next;
    m.start(s);
    for (std::size_t i = 0; i < text.size(); ++i) {
      REQUIRE(m.step(s, static_cast<uint8_t>(text[i]), next));
      std::swap(s, next);
      if (i + 1 < first) continue;
      INFO("after " << text.substr(0, i + 1));
      const auto e = cache.get(s);
      REQUIRE(e->differs_complete);
      const bool key = text[0] == '{';
      const std::size_t letters_left = key ? 40 - (i - 1) : 60;
      CHECK(e->by_length == (letters_left >= 3));  // 26 + 676 + 6084 letter tokens fit; with 2 left, 702
      if (!key) CHECK(e->differs.size() >= 4);
      std::vector<uint64_t> allowed;
      e->copy_bits(allowed);
      for (std::size_t id = 0; id < bytes.size(); ++id) {
        if (((allowed[id / 64] >> (id % 64)) & 1) == 0) continue;
        constrain::StateSet after = s;
        for (const char c : *bytes[id]) {
          REQUIRE(m.step(after, static_cast<uint8_t>(c), next));
          std::swap(after, next);
        }
        const auto t = static_cast<int32_t>(id);
        INFO("token " << *bytes[id]);
        CHECK(m.min_bytes(after) == m.min_bytes(s) + e->delta(t, trie.length(t)));  // e->need: its key's first state's
      }
    }
  }
}

// A map's member count is keyed as a sentinel while the next horizon bytes cannot bring it near maxProperties (256
// here, ConstraintLimits::max_object_members): a member takes at least 4 bytes, so over a vocabulary whose longest
// token is 128 bytes (GPT-2's) the count is exact only from member 222 on. Counted as one member a byte, it was exact
// from member 127 on, and each member's states were masks of their own: 40 new masks a member of a 3-letter key,
// where here the members from the 10th to the 200th add none. Each state's cached mask (computed for the first
// state of its key) is the state's own: the same tokens, and the same fewest bytes after each.
TEST_CASE("mask cache: a map's member count is a sentinel while the vocabulary's longest token cannot reach its bound",
          "[constraint_cache]") {
  constrain::Grammar g;
  g.root = constrain::add_json_schema(
      g, R"({"type":"object","propertyNames":{"pattern":"^[a-z]{3}$"},"additionalProperties":{"type":"integer"}})",
      ConstraintLimits{}, "schema");
  g.finish();
  std::vector<std::optional<std::string>> bytes;
  for (int x = 0; x < 256; ++x) bytes.emplace_back(std::string(1, static_cast<char>(x)));
  bytes.emplace_back(std::string(128, ' '));  // the horizon: 128 bytes
  bytes.emplace_back("\", \"");
  bytes.emplace_back("\": 1");
  const constrain::VocabTrie trie(bytes);
  REQUIRE(trie.max_token_bytes() == 128);
  constrain::Matcher m(g);
  constrain::MaskCache cache(g, trie, std::numeric_limits<std::size_t>::max());
  std::string text = "{";
  std::vector<std::size_t> member_end;
  for (int i = 0; i < 250; ++i) {
    const std::string key{static_cast<char>('a' + i / 26 % 26), static_cast<char>('a' + i % 26), 'q'};
    text += (i == 0 ? "\"" : ", \"") + key + "\": 1";
    member_end.push_back(text.size());
  }
  text += "}";
  constrain::StateSet s, next;
  m.start(s);
  std::vector<std::size_t> misses_at;  // the cache's misses at each member's end
  for (std::size_t i = 0, member = 0; i < text.size(); ++i) {
    REQUIRE(m.step(s, static_cast<uint8_t>(text[i]), next));
    std::swap(s, next);
    const auto cached = cache.get(s);
    const constrain::MaskEntry own = cache.compute(s);
    std::vector<uint64_t> cached_bits, own_bits;
    cached->copy_bits(cached_bits);
    own.copy_bits(own_bits);
    INFO("after " << text.substr(0, i + 1));
    REQUIRE(cached_bits == own_bits);
    REQUIRE(cached->complete == own.complete);
    for (std::size_t id = 0; id < bytes.size(); ++id) {
      if (((own_bits[id / 64] >> (id % 64)) & 1) == 0) continue;
      const auto t = static_cast<int32_t>(id);
      REQUIRE(cached->delta(t, trie.length(t)) == own.delta(t, trie.length(t)));
    }
    if (member < member_end.size() && i + 1 == member_end[member]) {
      misses_at.push_back(cache.misses());
      ++member;
    }
  }
  CHECK(misses_at[200] == misses_at[10]);
  CHECK(misses_at[249] > misses_at[200]);  // near 256 members the count is exact
}

// The process-wide memo of languages (constrain/dfa_memo.h): the fields of a schema that share a pattern, a
// format or number bounds share one automaton, each node keeping its own length bound; a language whose build
// failed is not kept, so each schema's error names its own field.
TEST_CASE("dfa memo: a language is built once and shared; a failed build keeps nothing", "[constraint_cache]") {
  int builds = 0;
  const auto build = [&] {
    ++builds;
    return constrain::regex_dfa("a+", constrain::RegexSyntax::kAnchored, constrain::RegexText::kAscii, "test");
  };
  const std::string key = "test|dfa memo|" + std::to_string(reinterpret_cast<std::uintptr_t>(&builds));
  const std::shared_ptr<const constrain::ByteDfa> first = constrain::memo_dfa(key, build);
  const std::shared_ptr<const constrain::ByteDfa> second = constrain::memo_dfa(key, build);
  CHECK(builds == 1);
  CHECK(first == second);
  CHECK(constrain::memo_part("ab") + constrain::memo_part("c") !=
        constrain::memo_part("a") + constrain::memo_part("bc"));

  // Fields of one pattern under different maxLength: one automaton, each field's bound its own.
  const auto shared = Constraint::json_schema(
      R"({"type":"object","properties":{"a":{"type":"string","pattern":"^x+$","maxLength":2},)"
      R"("b":{"type":"string","pattern":"^x+$","maxLength":5},"n":{"type":"integer","maximum":99},)"
      R"("m":{"type":"integer","maximum":99}},"required":["a","b","n","m"],"additionalProperties":false})");
  CHECK(shared->matches(R"({"a": "xx", "b": "xxxxx", "n": 99, "m": -7})"));
  CHECK_FALSE(shared->matches(R"({"a": "xxx", "b": "xxxxx", "n": 99, "m": -7})"));
  CHECK_FALSE(shared->matches(R"({"a": "xx", "b": "xxxxxx", "n": 99, "m": -7})"));
  CHECK_FALSE(shared->matches(R"({"a": "xx", "b": "xxxxx", "n": 100, "m": -7})"));
  CHECK_FALSE(shared->matches(R"({"a": "xx", "b": "xxxxx", "n": 99, "m": 100})"));

  // A pattern that cannot be built names the field of each schema that gives it, the first and the second time.
  const std::string lookbehind = R"({"type":"string","pattern":"(?<=a)b"})";
  for (const char* field : {"first", "second"}) {
    const std::string text = std::string(R"({"type":"object","properties":{")") + field + "\":" + lookbehind + "}}";
    CHECK_THROWS_WITH(Constraint::json_schema(text),
                      Contains(std::string(field) + ".pattern") && Contains("lookbehind is not supported"));
  }
}

}  // namespace ORBIT_TEST_FILE
