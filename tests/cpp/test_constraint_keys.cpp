// Repeated keys (sdk/src/constrain/key_log.h): the grammar admits `{"a": 1, "a": 2}` under a map, the decoder
// (TokenConstraint) does not. Masks and accept() against repeats in any spelling, per object; random decodes
// over a small vocabulary that never meet an empty mask and never repeat a key, where the key languages are
// finite too; and the compiler's bound on members by the number of distinct keys (test_constraint_keys_diff: the
// masks over real tokenizers' vocabularies). Links orbit_constrain and Catch only.
#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "constrain/byte_dfa.h"
#include "constrain/grammar.h"
#include "constrain/key_set.h"
#include "constrain/regex.h"
#include "constraint_property_util.h"
#include "error_text.h"
#include "orbit/constraint.h"
#include "repeated_key.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Json = nlohmann::json;

namespace {

std::shared_ptr<const Constraint> schema(const std::string& text, const ConstraintLimits& limits = {}) {
  return Constraint::json_schema(text, limits);
}

// Every byte, pieces that write several structural bytes at once (some a whole key, some two keys), then EOS.
TokenBytes vocabulary() {
  TokenBytes v;
  for (int b = 0; b < 256; ++b) v.text.emplace_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"\":", "\": ", ",\"", ", \"", "\"a\"", "\"a\":", ",\"a\":", "ab", "ac",
                            "\"x\": ", "\"\":", "\"\":1,\"\":", "a\":1,\"a\"", "\\u0061", "{\"a\":1,\"a\":"}) {
    v.text.emplace_back(piece);
  }
  v.text.emplace_back(std::nullopt);  // EOS
  return v;
}

using constraint_property::id_of;

}  // namespace

TEST_CASE("a map's key: the grammar admits a repeat, the decoder refuses it in every spelling", "[constraint]") {
  const auto c = schema(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  CHECK(c->matches(R"({"a": 1, "a": 2})"));  // the grammar's language: it cannot tell keys apart
  const auto vocab = TokenVocabulary::from_bytes(vocabulary());
  const int64_t eos = vocab->size() - 1;
  const auto quote = id_of(*vocab, "\"");
  {
    TokenConstraint tc(c, vocab, {{eos}});
    tc.accept_text(R"({"a": 1, "a)");
    const TokenMask m = tc.allowed();
    CHECK_FALSE(m.allows(quote));
    CHECK_FALSE(m.allows(id_of(*vocab, "\":")));
    CHECK(m.allows(id_of(*vocab, "b")));
    CHECK(m.allows(id_of(*vocab, "ab")));
    CHECK_THROWS(tc.accept(quote));
    tc.accept(id_of(*vocab, "b"));
    tc.accept(quote);  // "ab" is new
  }
  {
    TokenConstraint tc(c, vocab, {{eos}});
    tc.accept_text(R"({"a": 1, "\u0061)");  // "a" again, escaped
    CHECK_FALSE(tc.allowed().allows(quote));
    CHECK_THROWS(tc.accept(quote));
  }
  {
    TokenConstraint tc(c, vocab, {{eos}});
    tc.accept_text(R"({"a":1)");
    const TokenMask m = tc.allowed();
    CHECK_FALSE(m.allows(id_of(*vocab, ",\"a\":")));  // a token that writes the whole key again
    CHECK(m.allows(id_of(*vocab, ",\"")));
    CHECK_THROWS(tc.accept_text(R"(,"a")"));
  }
  {
    TokenConstraint tc(c, vocab, {{eos}});  // two keys in one token
    CHECK_FALSE(tc.allowed().allows(id_of(*vocab, "{\"a\":1,\"a\":")));
    CHECK(tc.allowed().allows(id_of(*vocab, "{")));
  }
  // Keys are per object: the same key in two objects, and in an object and the one inside it.
  TokenConstraint nested(Constraint::json_object(), vocab, {{eos}});
  nested.accept_text(R"({"a": {"a": 1, "b": {"a": 2}}, "b": {"a": 3}})");
  CHECK(nested.complete());
  TokenConstraint inner(Constraint::json_object(), vocab, {{eos}});
  inner.accept_text(R"({"a": {"a": 1}, "a)");
  CHECK_FALSE(inner.allowed().allows(quote));
}

TEST_CASE("an open object's extra keys and keys from a pattern or an enum are not repeated", "[constraint]") {
  const auto vocab = TokenVocabulary::from_bytes(vocabulary());
  const int64_t eos = vocab->size() - 1;
  const auto quote = id_of(*vocab, "\"");
  const auto extra = schema(R"({"properties": {"id": {"type": "integer"}}, "additionalProperties": true})");
  TokenConstraint open(extra, vocab, {{eos}});
  open.accept_text(R"({"id": 1, "x": 2, "x)");
  CHECK_FALSE(open.allowed().allows(quote));
  // Under a pattern, "ab" and "ac" taken: after "a" no key is left, so the "a" is refused before it strands.
  const auto finite = schema(R"({"propertyNames": {"pattern": "^(ab|ac|d)$"}, "additionalProperties": true})");
  TokenConstraint few(finite, vocab, {{eos}});
  few.accept_text(R"({"ab": 1, "ac": 2, ")");
  const TokenMask m = few.allowed();
  CHECK_FALSE(m.allows(id_of(*vocab, "a")));
  CHECK(m.allows(id_of(*vocab, "d")));
  CHECK_THROWS(few.accept(id_of(*vocab, "a")));
  // Of ^[ab]{3}$'s 8 keys 7 are taken: after a new key's 'a' its 4 completions are, so 'a' is refused.
  const auto eight = schema(R"({"propertyNames": {"pattern": "^[ab]{3}$"}, "additionalProperties": true})");
  TokenConstraint last(eight, vocab, {{eos}});
  last.accept_text(R"({"aaa": 1, "aab": 1, "aba": 1, "abb": 1, "baa": 1, "bab": 1, "bba": 1, ")");
  CHECK_FALSE(last.allowed().allows(id_of(*vocab, "a")));
  CHECK_FALSE(last.allowed().allows(id_of(*vocab, "ab")));
  CHECK(last.allowed().allows(id_of(*vocab, "b")));
  // Under a maxLength of 2, "a", "aa" and "ab" taken leave nothing after a new key's 'a' (the pattern has more).
  const auto capped = schema(R"({"propertyNames": {"pattern": "^[ab]{1,4}$", "maxLength": 2}, "additionalProperties":
      true})");
  TokenConstraint full(capped, vocab, {{eos}});
  full.accept_text(R"({"a": 1, "aa": 1, "ab": 1, ")");
  CHECK_FALSE(full.allowed().allows(id_of(*vocab, "a")));
  CHECK(full.allowed().allows(id_of(*vocab, "b")));
  // "xa" and "xb" taken, "xd" is left: after "x" the key log finds it past the pattern's first range of bytes.
  const auto ranges = schema(R"({"propertyNames": {"pattern": "^x[abd]$"}, "additionalProperties": true})");
  TokenConstraint gap(ranges, vocab, {{eos}});
  gap.accept_text(R"({"xa": 1, "xb": 2, ")");
  CHECK(gap.allowed().allows(id_of(*vocab, "x")));
  gap.accept(id_of(*vocab, "x"));
  CHECK_FALSE(gap.allowed().allows(id_of(*vocab, "a")));
  CHECK(gap.allowed().allows(id_of(*vocab, "d")));
  const auto names = schema(R"({"propertyNames": {"enum": ["x", "y"]}, "additionalProperties": true})");
  TokenConstraint listed(names, vocab, {{eos}});
  listed.accept_text(R"({"y": 1, ")");
  CHECK_FALSE(listed.allowed().allows(id_of(*vocab, "y")));
  CHECK(listed.allowed().allows(id_of(*vocab, "x")));
}

TEST_CASE("an enum's or a looping pattern's completions are counted against the keys that begin with the key so far",
          "[constraint]") {
  const auto vocab = TokenVocabulary::from_bytes(vocabulary());
  const int64_t eos = vocab->size() - 1;
  const auto a = id_of(*vocab, "a"), ab = id_of(*vocab, "ab"), c = id_of(*vocab, "c");
  // Three names begin with "a": two taken leave one after a new key's 'a', three leave none (many other keys
  // are taken, so it is the keys that begin with '"a' that count).
  const auto names = schema(R"({"propertyNames": {"enum": ["ab", "ac", "ad", "b", "c", "d", "e", "f"]},
      "additionalProperties": true})");
  TokenConstraint two(names, vocab, {{eos}});
  two.accept_text(R"({"b": 1, "d": 1, "e": 1, "ab": 1, "ac": 1, ")");
  CHECK(two.allowed().allows(a));
  CHECK_FALSE(two.allowed().allows(ab));
  TokenConstraint three(names, vocab, {{eos}});
  three.accept_text(R"({"b": 1, "d": 1, "ab": 1, "ac": 1, "ad": 1, ")");
  CHECK_FALSE(three.allowed().allows(a));
  CHECK_FALSE(three.allowed().allows(ab));
  CHECK(three.allowed().allows(c));
  CHECK_THROWS(three.accept(a));
  // ^(ab*|c)$ within 3 characters: after 'a' the loop on 'b' leaves "a", "ab" and "abb", all taken.
  const auto loop = schema(R"({"propertyNames": {"pattern": "^(ab*|c)$", "maxLength": 3}, "additionalProperties":
      true})");
  TokenConstraint spent(loop, vocab, {{eos}});
  spent.accept_text(R"({"a": 1, "ab": 1, "abb": 1, ")");
  CHECK_FALSE(spent.allowed().allows(a));
  CHECK_FALSE(spent.allowed().allows(ab));
  CHECK(spent.allowed().allows(c));
  CHECK_THROWS(spent.accept(a));
  TokenConstraint left(loop, vocab, {{eos}});
  left.accept_text(R"({"a": 1, "abb": 1, ")");
  CHECK(left.allowed().allows(a));
  CHECK(left.allowed().allows(ab));
  left.accept(a);
  CHECK_FALSE(left.allowed().allows(id_of(*vocab, "\"")));
  CHECK(left.allowed().allows(id_of(*vocab, "b")));
}

TEST_CASE("alternatives of one object that close the same key at the same byte do not repeat it", "[constraint]") {
  // Under anyOf both objects read {"a": each as its own key; neither is the other's repeat. The map of at
  // least 3 members goes on where the few-keys object cannot ("ab" is none of its keys).
  ConstraintLimits limits;
  limits.whitespace = Whitespace::kNone;
  const auto c = schema(R"({"anyOf": [
      {"type": "object", "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": {"type": "integer"}},
      {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 3}]})",
                        limits);
  const std::string text = R"({"a":1,"ab":2,"c":3})";
  ConstraintMatcher m(c);
  for (std::size_t i = 0; i < text.size(); ++i) {
    INFO("after " << text.substr(0, i));
    REQUIRE(m.advance(text.substr(i, 1)));
  }
  CHECK(m.complete());
  ConstraintMatcher again(c);
  CHECK_FALSE((again.advance(R"({"a":1,"ab":2,"a")")));  // a repeat is still one
}

TEST_CASE("a key another alternative reads as free but this one as declared takes none of its free keys' places",
          "[constraint]") {
  // Both alternatives read the same '{', whose keys the log holds; "a" is the first's declared property and the
  // second's free key. Counted among the first's extra keys, it left its few-keys object no key for a second
  // member (refusing the "b" of {"a":0,"b":1}, which the first admits), and cost its pattern's extra keys one
  // more byte than they do ("b" taken for "a": need 7 after {"a":0, for "b":0}).
  ConstraintLimits limits;
  limits.whitespace = Whitespace::kNone;
  const auto few = schema(R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
      "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": {"type": "integer"}, "minProperties": 2},
      {"type": "object", "propertyNames": {"enum": ["a", "c"]}, "additionalProperties": {"type": "integer"}}]})",
                          limits);
  CHECK(few->matches(R"({"a":0,"b":1})"));
  const auto pattern = schema(R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
      "propertyNames": {"pattern": "^[ab]c*$"}, "additionalProperties": {"type": "integer"}, "minProperties": 2},
      {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 3}]})",
                              limits);
  const std::string text = R"({"a":0,"b":0})";
  ConstraintMatcher m(pattern);
  for (std::size_t i = 0; i < text.size(); ++i) {
    INFO("after " << m.text());
    CHECK(m.min_bytes_to_complete() == static_cast<int64_t>(text.size() - i));  // the text's rest is shortest
    REQUIRE(m.advance(text.substr(i, 1)));
  }
  CHECK(m.complete());
}

TEST_CASE("random decodes never meet an empty mask and never repeat a key", "[constraint]") {
  ConstraintLimits tight;
  tight.max_string_chars = 1;  // plain keys of at most one character: near their maxLength at once
  tight.max_object_members = 4;
  tight.max_depth = 2;
  const std::vector<std::pair<std::string, ConstraintLimits>> schemas{
      {R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 3})", {}},
      {R"({"propertyNames": {"pattern": "^(ab|ac|d)$"}, "additionalProperties": {"type": "null"},
           "minProperties": 2})",
       {}},
      {R"({"propertyNames": {"enum": ["x", "y", "z"]}, "additionalProperties": {"type": "null"},
           "minProperties": 3})",
       {}},
      {R"({"properties": {"a": {}}, "propertyNames": {"pattern": "^[ab]{1,2}$"}, "additionalProperties": {"type": "null"},
           "minProperties": 4})",
       {}},
      {R"({"type": "object", "minProperties": 2})", tight},
      {R"({"type": "array", "items": {"additionalProperties": {"type": "integer"}, "minProperties": 2}, "minItems": 2})",
       tight},
  };
  const auto vocab = TokenVocabulary::from_bytes(vocabulary());
  const int64_t eos = vocab->size() - 1;
  std::mt19937 rng(11);
  for (const auto& [text, limits] : schemas) {
    INFO("schema " << text);
    const auto c = schema(text, limits);
    for (int run = 0; run < 40; ++run) {
      TokenConstraint tc(c, vocab, {{eos}});
      for (int step = 0; !tc.finished(); ++step) {
        INFO("after " << tc.matcher().text());
        REQUIRE(step < 400);  // the budget below heads for the end well before
        const TokenMask m = tc.allowed(std::max(0, 300 - step));
        std::vector<int64_t> ids;
        for (int64_t id = 0; id < vocab->size(); ++id) {
          if (m.allows(id)) ids.push_back(id);
        }
        if (m.complete) ids.push_back(eos);
        REQUIRE_FALSE(ids.empty());
        const int64_t id = ids[rng() % ids.size()];
        if (id == eos) break;
        tc.accept(id);
      }
      REQUIRE(tc.complete());
      CHECK(orbit::test::repeated_key(tc.matcher().text()) == "");
    }
  }
}

TEST_CASE("an object has no more members than distinct keys", "[constraint]") {
  const auto at = [](const std::string& s) { return error_of([&] { schema(s); }); };
  CHECK(at(R"({"propertyNames": {"pattern": "^[ab]$"}, "minProperties": 3})") ==
        "schema.minProperties: 3 is above the 2 names propertyNames admits");
  CHECK(at(R"({"propertyNames": {"maxLength": 0}, "minProperties": 2})") ==
        "schema.minProperties: 2 is above the 1 names propertyNames admits");
  CHECK(at(R"({"properties": {"a": {}}, "propertyNames": {"pattern": "^[ab]$"}, "additionalProperties": true,
               "minProperties": 3})") ==
        "schema.minProperties: 3 is above the 2 properties the object may have (propertyNames admits no more)");
  // A declared property may only come where the ones after it and the extra keys can still reach
  // minProperties: "y" first leaves one extra key ("c") for three members.
  const auto declared = schema(R"({"properties": {"x": {}, "y": {}}, "required": ["y"], "additionalProperties": true,
                                  "propertyNames": {"enum": ["c", "x", "y"]}, "minProperties": 3})");
  CHECK_FALSE(declared->is_prefix(R"({"y)"));
  CHECK(declared->is_prefix(R"({"x": 1, "y": 2, "c)"));
  const auto two = schema(R"({"propertyNames": {"pattern": "^[ab]$"}, "additionalProperties": true})");
  CHECK(two->is_prefix(R"({"a": 1, "b": 2)"));
  CHECK_FALSE(two->is_prefix(R"({"a": 1, "b": 2,)"));  // no third key exists
  // A map's keys under a pattern are written in one spelling, as extra keys are.
  const auto cased = schema(R"({"propertyNames": {"pattern": "^.$"}, "additionalProperties": true})");
  CHECK(cased->matches(R"({"\u001f": 1})"));
  CHECK_FALSE(cased->matches(R"({"\u001F": 1})"));
}

TEST_CASE("a pattern's longest key in bytes as written: finite automata, escapes, and cycles", "[constraint]") {
  using namespace orbit::constrain;
  // The longest text of a pattern over a JSON string's content, quoted: bytes as written, escapes included.
  const auto longest = [](const std::string& pattern) {
    return longest_text_bytes(quoted(regex_dfa(pattern, RegexSyntax::kSearch, RegexText::kJsonString, "t"), "t"));
  };
  CHECK(longest("^[a-z]{1,6}$") == 8);
  CHECK(longest("^(a|b|c|d|abcdefgh)$") == 10);
  CHECK(longest("^[\\u0001-\\u0003]{2}$") == 14);  // \u0001 is 6 bytes
  CHECK(longest("^[\"\\\\\\n]{3}$") == 8);         // \" \\ \n: 2 bytes each
  CHECK(longest("^(\xC3\xA9|x){2}$") == 6);        // UTF-8: 2 bytes
  CHECK(longest("^a?b?$") == 4);
  CHECK(longest("^$") == 2);
  // Texts of every length: a cycle on an accepted path, the start's own included, or a search.
  CHECK(longest("^a+$") == std::nullopt);
  CHECK(longest("^(ab)*c$") == std::nullopt);
  CHECK(longest("^x(?:yz)*$") == std::nullopt);
  CHECK(longest("ab") == std::nullopt);
  // A cycle no accepted path holds does not count: the state after "a" in a hand-built automaton that loops
  // on 'b' and never accepts, beside "c" accepted.
  ByteDfa dead;
  dead.edges = {{{'a', 'a', 1}, {'c', 'c', 2}}, {{'b', 'b', 1}}, {}};
  dead.accepting = {0, 0, 1};
  CHECK(longest_text_bytes(dead) == 1);
  dead.edges[0].push_back({'d', 'd', 0});  // a loop on the start: unbounded
  CHECK(longest_text_bytes(dead) == std::nullopt);

  // Grammar::shaped_extra, the most bytes a key the budget's state bound counts may cost: a pattern's longest
  // key where it has one, quotes included.
  const auto shaped = [](const std::string& schema_text, int64_t max_chars) {
    ConstraintLimits limits;
    limits.max_string_chars = max_chars;
    Grammar g;
    g.root = add_json_schema(g, schema_text, limits, "schema");
    g.finish();
    return g.shaped_extra;
  };
  CHECK(shaped(R"({"propertyNames": {"pattern": "^[a-z]{1,6}$"}})", 1024) == 8);
  CHECK(shaped(R"({"propertyNames": {"pattern": "^(a|\\u0001{3})$"}})", 1024) == 20);
  CHECK(shaped(R"({"propertyNames": {"pattern": "^[a-z]{1,6}$", "maxLength": 2}})", 1024) == 8);  // a bound
  // Keys of every length: not their longest (6 * 1,024 + 2 bytes), but where one more key than the object may
  // hold is free. From each state of ^[a-z]+$, 257 keys (a map's 256 members and one) are found within 4
  // bytes ('"' and two letters, then '"'): 6 * 4, at 6 bytes a character where the key's characters run out.
  CHECK(shaped(R"({"propertyNames": {"pattern": "^[a-z]+$"}})", 1024) == 24);
  CHECK(shaped(R"({"propertyNames": {"pattern": "^[a-z]+$", "maxLength": 5}})", 1024) == 24);
  CHECK(shaped(R"({"propertyNames": {"pattern": "^[a-z]+$"}})", 10) == 24);
  // One key of each length: its 259th shortest is past the most KeyLog::need() counts (kMaxKeyExtra); with at
  // most 3 members (and a map's 2 children), the 6th from the start is '"', 5 x's and '"': 7 bytes.
  CHECK(shaped(R"({"propertyNames": {"pattern": "^x*$"}})", 1024) == kMaxKeyExtra);
  CHECK(shaped(R"({"propertyNames": {"pattern": "^x*$"}, "maxProperties": 3})", 1024) == 6 * 7);
  // An open object's extra keys leave out its declared names: "abcdefgh" is declared, "a" and "b" are left.
  CHECK(shaped(R"({"properties": {"abcdefgh": {}}, "propertyNames": {"pattern": "^(a|b|abcdefgh)$"},
                  "additionalProperties": true})",
               1024) == 3);
  CHECK(shaped(R"({"propertyNames": {"enum": ["a", "abc"]}})", 1024) == 7);  // a name's, quoted, and 2 more
  CHECK(shaped(R"({"propertyNames": {"maxLength": 3}})", 1024) == 0);        // plain strings: the bound's 6
}

namespace {

// A vocabulary of the 256 single bytes and EOS: a run of n tokens writes n bytes.
std::shared_ptr<const TokenVocabulary> byte_vocabulary() {
  TokenBytes v;
  for (int b = 0; b < 256; ++b) v.text.emplace_back(std::string(1, static_cast<char>(b)));
  v.text.emplace_back(std::nullopt);
  return TokenVocabulary::from_bytes(v);
}

int64_t size_of(const char* text) { return static_cast<int64_t>(std::string(text).size()); }

}  // namespace

TEST_CASE("the fewest bytes count distinct keys: min_bytes, the matcher, unwritable", "[constraint]") {
  ConstraintLimits compact;
  compact.whitespace = Whitespace::kNone;
  // Three members from three keys of different lengths: with repeats {"a":null,"a":null,"a":null} would do.
  const auto three = schema(R"({"propertyNames": {"pattern": "^(a|bb|ccc)$"}, "additionalProperties": {"type": "null"},
                               "minProperties": 3})",
                            compact);
  CHECK(three->min_bytes() == size_of(R"({"a":null,"bb":null,"ccc":null})"));
  ConstraintMatcher m(three);
  REQUIRE(m.advance(R"({"a":null,)"));
  CHECK(m.min_bytes_to_complete() == size_of(R"("bb":null,"ccc":null})"));
  CHECK_FALSE(m.can_advance(R"("a")"));  // the matcher refuses a repeat, as the decoder does
  CHECK(m.min_bytes_after("\"c") == size_of(R"(cc":null,"bb":null})"));
  // A key begun is one of the keys still owed: "c" can only become "ccc", "" the shortest fresh one.
  ConstraintMatcher begun(three);
  REQUIRE(begun.advance(R"({")"));
  CHECK(begun.min_bytes_to_complete() == size_of(R"(a":null,"bb":null,"ccc":null})"));
  REQUIRE(begun.advance("c"));
  CHECK(begun.min_bytes_to_complete() == size_of(R"(cc":null,"a":null,"bb":null})"));
  // Plain string keys: "" then one-byte keys. Open objects' extra members and any object alike.
  const auto open = schema(R"({"properties": {"id": {"type": "integer"}}, "required": ["id"],
                              "additionalProperties": {"type": "null"}, "minProperties": 3})",
                           compact);
  CHECK(open->min_bytes() == size_of(R"({"id":0,"":null," ":null})"));
  CHECK(schema(R"({"type": "object", "minProperties": 2})", compact)->min_bytes() == size_of(R"({"":0," ":0})"));
  // Keys of at most one character: "", 94 of one byte, then two-byte spellings (\n, é, ...).
  const auto hundred = schema(R"({"propertyNames": {"maxLength": 1}, "additionalProperties": {"type": "null"},
                                 "minProperties": 100})",
                              compact);
  CHECK(hundred->min_bytes() == 1 + (2 + 94 * 3 + 5 * 4) + 100 * size_of(":null,"));
  // Inside a tool call: the arguments' map is not open yet, and costs its distinct keys already.
  const auto call = Constraint::tool_calls(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"m":
          {"propertyNames": {"pattern": "^(a|bb)$"}, "additionalProperties": {"type": "null"}, "minProperties": 2}},
          "required": ["m"]}}}])");
  CHECK(call->min_bytes() ==
        size_of(R"(<tool_call>{"name": "f", "arguments": {"m":{"a":null,"bb":null}}}</tool_call>)"));
  // Checked up front: a model that can write the repeated-key answer but not the distinct one is refused.
  const auto vocab = byte_vocabulary();
  const int64_t fewest = size_of(R"({"a":null,"bb":null,"ccc":null})");
  CHECK(unwritable(three, *vocab, fewest) == "");
  CHECK(unwritable(three, *vocab, fewest - 1) == "its shortest answer is " + std::to_string(fewest) +
                                                     " bytes, more than this model can write in its "
                                                     "context (at most " +
                                                     std::to_string(fewest - 1) + ")");
}

TEST_CASE("a budget of exactly the fewest bytes finishes every run with distinct keys", "[constraint]") {
  ConstraintLimits compact;
  compact.whitespace = Whitespace::kSingleSpace;  // spaces the budget must leave out
  compact.max_string_chars = 3;
  const std::vector<std::string> schemas{
      R"({"propertyNames": {"pattern": "^(a|bb|ccc|dddd)$"}, "additionalProperties": {"type": "null"},
          "minProperties": 3})",
      R"({"properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "null"}, "minProperties": 4})",
      R"({"type": "array", "items": {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 3},
          "minItems": 2})",
      R"({"properties": {"m": {"propertyNames": {"enum": ["x", "yy", "zzz"]}, "additionalProperties": true,
          "minProperties": 2}}, "required": ["m"]})",
      // Every key of one byte spent: the last five are two bytes long (the count of min_bytes' test above).
      R"({"propertyNames": {"maxLength": 1}, "additionalProperties": {"type": "null"}, "minProperties": 100})",
  };
  const auto vocab = byte_vocabulary();
  const int64_t eos = vocab->size() - 1;
  std::mt19937 rng(5);
  for (const std::string& text : schemas) {
    INFO("schema " << text);
    const auto c = schema(text, compact);
    const int64_t budget = c->min_bytes();
    for (int run = 0; run < (budget > 200 ? 3 : 30); ++run) {
      TokenConstraint tc(c, vocab, {{eos}});
      std::vector<float> logits(static_cast<std::size_t>(vocab->size()));
      for (int64_t step = 0; step < budget && !tc.finished(); ++step) {
        INFO("after " << tc.matcher().text());
        for (float& l : logits) l = static_cast<float>(rng() % 1000);
        REQUIRE(tc.mask_logits(logits.data(), vocab->size(), budget - step - 1) > 0);
        const int64_t id = std::max_element(logits.begin(), logits.end()) - logits.begin();
        if (id == eos) break;
        tc.accept(id);
      }
      INFO("text " << tc.matcher().text());
      REQUIRE(tc.complete());
      CHECK(static_cast<int64_t>(tc.matcher().text().size()) == budget);
      CHECK(orbit::test::repeated_key(tc.matcher().text()) == "");
    }
  }
}

namespace {

// Bytes, and pieces that close a key and open the next in one token, so that keys close inside tokens.
std::shared_ptr<const TokenVocabulary> key_state_vocabulary() {
  TokenBytes v;
  for (int b = 0; b < 256; ++b) v.text.emplace_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"\":", "\": ", ", \"", "\"a\": ", "\"bb\": ", "a\": 1, \"", "b\": 2, \"b", "\": 3, \"aa"}) {
    v.text.emplace_back(piece);
  }
  return TokenVocabulary::from_bytes(std::move(v));
}

// The masks of `kept` (advanced token by token: its key log's per-object state kept up as keys close) against
// those of a constraint given the whole text at once (the state counted from its keys), at no budget and at
// every budget around the fewest bytes left.
void same_masks(const std::shared_ptr<const Constraint>& c, const std::shared_ptr<const TokenVocabulary>& vocab,
                const TokenConstraint& kept) {
  TokenConstraint scratch(c, vocab);
  if (!kept.matcher().text().empty()) scratch.accept_text(kept.matcher().text());
  const int64_t need = scratch.matcher().min_bytes_to_complete();
  REQUIRE(kept.matcher().min_bytes_to_complete() == need);
  for (int64_t r = -1; r <= need + 6; r = r < 0 ? std::max<int64_t>(0, need - 2) : r + 1) {
    INFO("after " << kept.matcher().text() << ", budget " << r);
    REQUIRE(kept.allowed(r).bits == scratch.allowed(r).bits);
  }
}

}  // namespace

TEST_CASE("after many keys, the key log's kept state gives the masks counted from scratch", "[constraint][property]") {
  // Maps whose need depends on which keys are taken (a pattern of few keys, plain keys of one character), an
  // open object with few extra keys, and one '{' read by two alternatives with different key nodes.
  const std::vector<std::string> schemas{
      R"({"type": "object", "propertyNames": {"pattern": "^[ab]{1,3}$"}, "minProperties": 10,
          "additionalProperties": {"type": "integer"}})",
      R"({"type": "object", "minProperties": 40, "additionalProperties": {"type": "integer", "minimum": 0,
          "maximum": 9}})",
      R"({"type": "object", "properties": {"x": {"type": "integer"}}, "minProperties": 4,
          "propertyNames": {"enum": ["x", "a", "bb", "ccc", "dddd"]}, "additionalProperties": {"type": "integer"}})",
      R"({"anyOf": [{"type": "object", "propertyNames": {"pattern": "^[ab]{1,3}$"}, "minProperties": 6,
          "additionalProperties": {"type": "integer"}}, {"type": "object", "properties": {"a": {"type": "integer"}},
          "minProperties": 8, "additionalProperties": {"type": "integer"}}]})",
      R"({"type": "array", "minItems": 3, "items": {"type": "object", "minProperties": 5,
          "propertyNames": {"pattern": "^[ab]{1,2}$"}, "additionalProperties": {"type": "integer"}}})"};
  const auto vocab = key_state_vocabulary();
  for (std::size_t s = 0; s < schemas.size(); ++s) {
    const auto c = schema(schemas[s]);
    for (uint64_t seed = 0; seed < 4; ++seed) {
      std::mt19937_64 rng(seed * 31 + s);
      TokenConstraint kept(c, vocab);
      // A run of 20 tokens past the fewest bytes, each token's mask budgeted: many short keys, then the end.
      const int64_t budget = kept.matcher().min_bytes_to_complete() + 20;
      for (int64_t step = 0; step < budget && !kept.matcher().complete(); ++step) {
        same_masks(c, vocab, kept);
        std::vector<int64_t> ids;
        const TokenMask mask = kept.allowed(budget - step - 1);
        for (int64_t id = 0; id < vocab->size(); ++id) {
          if (mask.allows(id)) ids.push_back(id);
        }
        REQUIRE(!ids.empty());
        TokenConstraint ahead = kept;  // shares the log's keys until it adds one: `kept` must not see it
        ahead.accept(ids[rng() % ids.size()]);
        same_masks(c, vocab, kept);
        kept = std::move(ahead);
      }
      INFO("schema " << s << ", seed " << seed << ": " << kept.matcher().text());
      CHECK(kept.matcher().complete());
    }
  }
}

// The key log's sorted set of keys (constrain/key_set.h) against std::set<std::string>: the same strings in the
// same order (bytes past ASCII after the others, as std::string orders them), the same bounds and counts, through
// blocks it grows and in a copy (which holds its strings in a block of its own) after the original is gone.
TEST_CASE("the key log's key set orders and finds its strings as std::set does", "[constraint]") {
  std::mt19937_64 rng(5);
  const std::string alphabet = std::string("\"ab~") + "\x7F\x80\xC3\xFF";
  const auto random_text = [&](std::size_t most) {
    std::string s;
    for (std::size_t n = rng() % (most + 1); n > 0; --n) s.push_back(alphabet[rng() % alphabet.size()]);
    return s;
  };
  for (int run = 0; run < 20; ++run) {
    std::set<std::string> want;
    auto keys = std::make_unique<constrain::KeySet>();
    for (int i = 0; i < 300; ++i) {
      const std::string s = random_text(i % 7 == 0 ? 600 : 6);  // some past a first block's bytes
      CHECK(keys->insert(s) == want.insert(s).second);
    }
    const constrain::KeySet copy = *keys;
    keys.reset();  // the copy's views are into its own bytes
    REQUIRE(copy.size() == want.size());
    CHECK(std::equal(copy.begin(), copy.end(), want.begin(), want.end()));
    for (int probe = 0; probe < 200; ++probe) {
      const std::string p = random_text(5);
      CHECK(copy.count(p) == want.count(p));
      CHECK(copy.lower_bound(p) - copy.begin() == std::distance(want.begin(), want.lower_bound(p)));
      CHECK(copy.upper_bound(p) - copy.begin() == std::distance(want.begin(), want.upper_bound(p)));
    }
  }
  constrain::KeySet keys;
  CHECK(keys.insert(""));
  CHECK_FALSE(keys.insert(""));
  CHECK(keys.count("") == 1);
  keys.clear();
  CHECK(keys.empty());
  CHECK(keys.insert("\"a\""));
  CHECK(*keys.begin() == "\"a\"");
}

}  // namespace ORBIT_TEST_FILE
