// A differential driver of the key log's token masks (sdk/src/constrain/key_log.h): random schemas of objects
// whose keys must not repeat (declared and extra keys, propertyNames by pattern, length or names, member
// counts, objects in arrays and in anyOf), random walks over real tokenizers' vocabularies (tests/data), and at
// every step each token's mask, unbudgeted and budgeted, against the token's bytes tried on the matcher. A short
// run (three seeds) on every test; the long run, hidden, by hand after changing the key log or the token masks
// (a listing fault planted in VocabTrie::extensions_of passed seeds 1-40 of it: run a few hundred):
//   ORBIT_KEYS_DIFF_SEEDS=1-200 build/tests/test_constraint_keys_diff "[.keys-diff]"
// (ORBIT_KEYS_DIFF_BYTES: the walks' budget spread, ORBIT_KEYS_DIFF_VERBOSE: progress; ORBIT_TEST_DATA_DIR:
// another tests/data). Links orbit_constrain and Catch only.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "constraint_property_util.h"
#include "orbit/constraint.h"
#include "repeated_key.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Json = nlohmann::json;

namespace {

std::shared_ptr<const Constraint> schema(const std::string& text) { return Constraint::json_schema(text); }

}  // namespace

namespace {

// GPT-2's byte-level alphabet undone: the code point each byte was written as.
std::vector<int> byte_level_bytes() {
  std::vector<int> of(512, -1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    of[static_cast<std::size_t>(self ? b : 256 + extra++)] = b;
  }
  return of;
}

// A tokenizer.json's tokens as bytes: byte-level BPE undone, or metaspace pieces ("▁" a space, "<0xNN>" a
// byte); added tokens write none. One more id, none either, is the end token.
std::shared_ptr<const TokenVocabulary> tokenizer_json_vocabulary(const std::string& path, int64_t& eos) {
  std::ifstream in(path);
  REQUIRE(in.good());
  const Json j = Json::parse(in);
  const bool byte_level = j.at("decoder").value("type", "") == "ByteLevel";
  const std::vector<int> undo = byte_level_bytes();
  TokenBytes v;
  for (const auto& [piece, id_json] : j.at("model").at("vocab").items()) {
    const auto id = id_json.get<std::size_t>();
    if (v.text.size() <= id) v.text.resize(id + 1);
    std::string bytes;
    if (byte_level) {
      for (std::size_t i = 0; i < piece.size();) {  // UTF-8 code points, each one byte
        const auto c = static_cast<unsigned char>(piece[i]);
        const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : 3;
        int cp = n == 1 ? c : n == 2 ? c & 0x1F : c & 0x0F;
        for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(piece[i + k]) & 0x3F);
        bytes.push_back(static_cast<char>(undo.at(static_cast<std::size_t>(cp))));
        i += static_cast<std::size_t>(n);
      }
    } else if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>') {
      bytes.push_back(static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    } else {
      for (std::size_t i = 0; i < piece.size();) {
        if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {
          bytes.push_back(' ');
          i += 3;
        } else {
          bytes.push_back(piece[i++]);
        }
      }
    }
    v.text[id] = bytes;
  }
  for (const auto& added : j.value("added_tokens", Json::array())) {
    const auto id = added.at("id").get<std::size_t>();
    if (v.text.size() <= id) v.text.resize(id + 1);
    v.text[id] = std::nullopt;
  }
  eos = static_cast<int64_t>(v.text.size());
  v.text.emplace_back(std::nullopt);
  return TokenVocabulary::from_bytes(std::move(v));
}

// Schemas of objects over few short keys, so that walks write a key again often.
class KeySchemaGen {
 public:
  explicit KeySchemaGen(uint64_t seed) : rng_(seed) {}

  Json root() {
    switch (pick(6)) {
      case 0: return Json{{"type", "array"}, {"items", object(1)}, {"maxItems", 1 + pick(3)}};
      case 1: return Json{{"anyOf", Json::array({object(1), object(1)})}};
      default: return object(0);
    }
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  const std::string& name() { return names_[static_cast<std::size_t>(pick(static_cast<int>(names_.size())))]; }

  Json leaf() {
    switch (pick(6)) {
      case 0: return Json{{"type", "null"}};
      case 1: return Json{{"type", "boolean"}};
      case 2: return Json{{"type", "string"}, {"maxLength", 3}};
      case 3: return Json{{"enum", Json::array({1, "x", nullptr})}};
      default: return Json{{"type", "integer"}};
    }
  }

  Json value(int depth) {
    if (depth >= 2) return leaf();
    switch (pick(7)) {
      case 0: return object(depth + 1);
      case 1: return Json{{"type", "array"}, {"items", object(depth + 1)}, {"maxItems", 1 + pick(3)}};
      case 2: return Json{{"anyOf", Json::array({object(depth + 1), pick(2) ? object(depth + 1) : leaf()})}};
      default: return leaf();
    }
  }

  Json property_names() {
    switch (pick(4)) {
      case 0: return Json{{"pattern", patterns_[static_cast<std::size_t>(pick(static_cast<int>(patterns_.size())))]}};
      case 1: {
        Json s{{"maxLength", 1 + pick(3)}};
        if (pick(2)) s["minLength"] = pick(2);
        return s;
      }
      case 2: {
        Json names = Json::array();
        for (int i = 1 + pick(4); i > 0; --i) {
          const std::string& n = name();
          if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
        }
        return Json{{"enum", names}};
      }
      default: return Json{{"minLength", 1 + pick(2)}};
    }
  }

  // The declared properties whose names hold under `names` (an enum takes them in instead).
  static Json holding(const Json& props, Json& names) {
    Json kept = Json::object();
    for (const auto& [n, v] : props.items()) {
      const auto chars = static_cast<int>(std::count_if(n.begin(), n.end(), [](char c) { return (c & 0xC0) != 0x80; }));
      if (names.contains("enum")) {
        if (std::find(names["enum"].begin(), names["enum"].end(), n) == names["enum"].end()) names["enum"].push_back(n);
      } else if (names.contains("pattern")) {
        if (!std::regex_search(n, std::regex(names["pattern"].get<std::string>()))) continue;
      } else if (chars > names.value("maxLength", 99) || chars < names.value("minLength", 0)) {
        continue;
      }
      kept[n] = v;
    }
    return kept;
  }

  Json object(int depth) {
    Json s{{"type", "object"}};
    Json props = Json::object();
    for (int i = pick(3); i > 0; --i) {
      const std::string& n = name();
      if (!props.contains(n)) props[n] = value(depth);
    }
    if (pick(3) != 0) {
      s["propertyNames"] = property_names();
      props = holding(props, s["propertyNames"]);
    }
    Json required = Json::array();
    for (const auto& [n, _] : props.items()) {
      if (pick(3) == 0) required.push_back(n);
    }
    if (!props.empty()) s["properties"] = props;
    if (!required.empty()) s["required"] = required;
    switch (pick(4)) {
      case 0: break;  // any extra key, any value
      case 1: s["additionalProperties"] = props.empty() ? leaf() : Json(false); break;
      default: s["additionalProperties"] = value(depth);
    }
    const int min = pick(2) ? 1 + pick(3) : 0;
    if (min > 0) s["minProperties"] = min;
    if (pick(3) == 0) s["maxProperties"] = std::max(1, min) + pick(3);
    return s;
  }

  std::mt19937_64 rng_;
  const std::vector<std::string> names_{"a", "b", "ab", "ba", "aa", "abc", "the", "\xC3\xA9", "a\"b", "x y"};
  const std::vector<std::string> patterns_{"^[ab]{1,3}$", "^(ab|ba|a|b)$",   "^a[ab]?$", "^[a-c]+$",   "^(x|ab|abc)$",
                                           "^[ab]*$",     "^(\xC3\xA9|ab)$", "^th?e?$",  "^[a-z]{2}$", "^.$"};
};

bool compiles(const std::string& text) {
  try {
    schema(text);
    return true;
  } catch (const std::exception& e) {
    if (std::getenv("ORBIT_KEYS_DIFF_VERBOSE") != nullptr) WARN("refused: " << e.what());
    return false;
  }
}

// Seeds from ORBIT_KEYS_DIFF_SEEDS ("A-B", default 1-20).
std::pair<uint64_t, uint64_t> diff_seeds() {
  const char* env = std::getenv("ORBIT_KEYS_DIFF_SEEDS");
  const std::string s = env != nullptr ? env : "1-20";
  const auto dash = s.find('-');
  if (dash == std::string::npos) return {std::stoull(s), std::stoull(s)};
  return {std::stoull(s.substr(0, dash)), std::stoull(s.substr(dash + 1))};
}

// One walk (at most 120 tokens): random allowed tokens (mostly ones with a quote or of at most two bytes, so that keys
// come often and short) within a budget of `budget` bytes; each step's masks against the matcher, one budget per step
// at random and every budget every fourth step.
void diff_walk(const TokenConstraint& start, const TokenVocabulary& vocab, int64_t eos, int64_t budget,
               std::mt19937_64& rng, int64_t& steps) {
  TokenConstraint tc = start;
  int64_t written = 0;
  for (int step = 0; step < 120 && !tc.finished(); ++step, ++steps) {
    INFO("after " << tc.matcher().text());
    const int64_t left = std::max<int64_t>(0, budget - written);
    const int64_t tried = rng() % 3 == 0 ? static_cast<int64_t>(rng() % 40) : left;
    constraint_property::check_mask_brute_force(tc, vocab, eos, tried);
    if (step % 4 == 0 && vocab.size() < 10000) {  // a budget at a time over the smaller vocabularies
      int64_t skipped = 0, cut = 0;
      constraint_property::check_every_budget(tc, vocab, skipped, cut);
    }
    const TokenMask m = tc.allowed(left);
    std::vector<int64_t> quoted, short_ones, any;
    for (int64_t id = 0; id < eos; ++id) {
      if (!m.allows(id)) continue;
      const std::string& bytes = *vocab.bytes(id);
      (bytes.find('"') != std::string::npos ? quoted : bytes.size() <= 2 ? short_ones : any).push_back(id);
    }
    const int kind = static_cast<int>(rng() % 8);
    const std::vector<int64_t>& from = kind < 3 && !quoted.empty()       ? quoted
                                       : kind < 6 && !short_ones.empty() ? short_ones
                                       : !any.empty()                    ? any
                                       : !short_ones.empty()             ? short_ones
                                                                         : quoted;
    if (from.empty()) break;
    const int64_t id = from[rng() % from.size()];
    written += static_cast<int64_t>(vocab.bytes(id)->size());
    tc.accept(id);
  }
  if (tc.matcher().complete()) CHECK(orbit::test::repeated_key(tc.matcher().text()) == "");
}

}  // namespace

namespace {

// Seeds [first, last], the walks' budgets 20 bytes + up to `spread`.
void run_diff(uint64_t first, uint64_t last, uint64_t spread) {
  const char* dir_env = std::getenv("ORBIT_TEST_DATA_DIR");
  const std::string dir = dir_env != nullptr && *dir_env != '\0' ? dir_env : ORBIT_TEST_DATA_DIR;
  std::vector<std::pair<std::string, int64_t>> names;
  std::vector<std::shared_ptr<const TokenVocabulary>> vocabs;
  for (const char* name : {"tinystories-656k", "minimind", "gpt2"}) {
    int64_t eos = 0;
    vocabs.push_back(tokenizer_json_vocabulary(dir + "/tokenizers/" + name + "/tokenizer.json", eos));
    names.emplace_back(name, eos);
  }
  int64_t schemas = 0, refused = 0, walks = 0, steps = 0;
  for (uint64_t seed = first; seed <= last; ++seed) {
    KeySchemaGen gen(seed);
    std::string text = gen.root().dump();
    for (int retry = 0; retry < 20 && !compiles(text); ++retry) text = gen.root().dump();
    INFO("seed " << seed << " schema " << text);
    std::shared_ptr<const Constraint> c;
    try {
      c = schema(text);
    } catch (const std::exception&) {
      ++refused;
      continue;
    }
    ++schemas;
    std::mt19937_64 rng(seed);
    for (std::size_t v = 0; v < vocabs.size(); ++v) {
      INFO("vocabulary " << names[v].first);
      const int64_t eos = names[v].second;
      const TokenConstraint start(c, vocabs[v], {{eos}});
      for (int run = 0; run < (v == 2 ? 2 : 4); ++run, ++walks) {
        diff_walk(start, *vocabs[v], eos, 20 + static_cast<int64_t>(rng() % spread), rng, steps);
      }
    }
    if (std::getenv("ORBIT_KEYS_DIFF_VERBOSE") != nullptr) WARN("seed " << seed << " done, " << steps << " steps");
  }
  WARN("seeds " << first << "-" << last << ": " << schemas << " schemas (" << refused << " refused), " << walks
                << " walks, " << steps << " steps");
}

}  // namespace

TEST_CASE("masks over real vocabularies agree with the matcher under three random schemas", "[constraint]") {
  run_diff(1, 2, 120);
  run_diff(4, 4, 400);
}

TEST_CASE("masks over real vocabularies agree with the matcher under random objects of unrepeated keys",
          "[.keys-diff]") {
  const auto [first, last] = diff_seeds();
  const char* spread_env = std::getenv("ORBIT_KEYS_DIFF_BYTES");  // walks' budgets: 20 bytes + up to this many
  run_diff(first, last, spread_env != nullptr ? std::max(1ULL, std::stoull(spread_env)) : 120);
}

namespace {

// A vocabulary rich in the tokens the key log settles without a walk where a token's quote may open a key of a
// pattern or an enum (KeyLog::one_quote's outside objects, KeyLog::tail_refusable): one '"' between what may
// come before a key and the start of keys the schemas below log, and those it walks apart (two quotes, a '\\',
// a byte past ASCII after the quote). Every printable byte is a token too; the last id, none, is the end.
std::shared_ptr<const TokenVocabulary> quote_rich_vocabulary(int64_t& eos) {
  TokenBytes v;
  std::set<std::string> seen;
  const auto add = [&](const std::string& s) {
    if (seen.insert(s).second) v.text.emplace_back(s);
  };
  for (int c = 0x20; c < 0x7F; ++c) add(std::string(1, static_cast<char>(c)));
  for (const char* b : {"\xC3", "\xA9", "\xC3\xA9"}) add(b);
  const std::vector<std::string> before{"", ",", ", ", "{", "}, ", "1", "x", ": ", "\xC3\xA9", "[", "[{"};
  const std::vector<std::string> after{"",
                                       "a",
                                       "b",
                                       "ab",
                                       "ba",
                                       "aa",
                                       "abc",
                                       "abb",
                                       "bab",
                                       "th",
                                       "te",
                                       "the",
                                       "x",
                                       "x y",
                                       "\xC3\xA9",
                                       "\xC3\xA9"
                                       "a",
                                       ":",
                                       ": ",
                                       "a,",
                                       "ab:",
                                       "a}",
                                       "\\u0061",
                                       "a\\u0062",
                                       "\\\"",
                                       "\xC3"};
  for (const std::string& b : before) {
    for (const std::string& a : after) add(b + "\"" + a);
  }
  for (const char* k : {"a", "ab", "b", "ba", "abc", "the", "x"}) {
    for (const char* end : {"\"", "\":", "\": ", "\",", "\"}", "\": \""}) add(std::string("\"") + k + end);
  }
  for (const char* s : {"\",\"", "\":\"", "\", \"", "\"\"", "\\\"", "\\\\", "\"}, {\""}) add(s);
  // Tokens that, read from a string value's body, end it and open a string with a later quote (`","ab`), one
  // that also closes there (`","a"`, which may repeat a key), or holds an escape; bytes past ASCII before or
  // after a quote (`\xC3\xA9"`, `"\xC3\xA9`, written as bytes).
  for (const char* close : {"\"", "x\"", "\xC3\xA9\"", "\\\\\"", "\\\"x\""}) {
    for (const char* between : {",", ", ", "}, ", "},{", "}]"}) {
      for (const char* key : {"", "a", "ab", "abc", "b", "the", "\xC3\xA9", "\xC3", "a\"", "ab\":", "\\u0061", "a\\"}) {
        add(std::string(close) + between + "\"" + key);
      }
    }
  }
  // Escaped quotes that stay in a string, and those a '\\' does not escape, which end it (and may write a key).
  for (const char* s : {"x\\\"", "\\\":", "\\\",", " \\\"", "\\\\\"", "\\\\\\\"", "a\\\"b\"", "\\\\\", \"a\"",
                        "\\\\\",\"ab\":", "\\\\\", \"b\": \"", "\\\"\\\"", "\\u0022", "\\\\\\\", \"a\"", "\\u0061\":\"",
                        "b\\u0061\": \""}) {
    add(s);
  }
  // From inside a key: a value after its quote, then a key after the value or after the object's end.
  for (const char* s :
       {"\": \"\", \"a\"", "b\": \"\", \"a", "a\": \"\", \"a", "\": \"\", \"a", "b\":\"x\",\"b", "\":1}, \"a\"",
        "b\": 1}, \"ab", "\": \"x\"}", "\xC3\xA9\":\"", "\": \"\\\"\", \"a\"", "\":\"\\\"\"}, \"a\""}) {
    add(s);
  }
  eos = static_cast<int64_t>(v.text.size());
  v.text.emplace_back(std::nullopt);
  return TokenVocabulary::from_bytes(std::move(v));
}

}  // namespace

// The masks where a token's quote opens a key of a pattern or an enum that the object has logged keys of (a
// string value's closing quote then a ',' and the next key, or a ',' then a key) against each token tried on
// the matcher: a token is kept without a walk only where the bytes after its quote cannot be refused. Built
// with KeyLog::tail_refusable reading one byte less of the tail, it fails at the first schema (a token keeps
// the rest of a logged key the walk refuses). Inside strings' bodies, a token whose quotes are all escaped is
// not walked (KeyLog::in_string_bodies, VocabTrie::quotes_escaped): the texts below and the plain-key schemas
// write such tokens and those a '\\' does not escape, which close a logged key. It fails where
// quotes_escaped reads a '\\' after a '\\' as a new escape (`\\"` kept after `"\\a`), and where
// in_string_bodies takes a stack mid-escape for one in a string's body (`\"` kept after `"a\`).
// In a string value's body, tokens of two quotes or more are walked only where the string they open may be
// refused (VocabTrie::body_openers, tail_refusable), and a token of one quote with bytes past ASCII after it
// is judged by tail_refusable (VocabTrie::quoted_tails): the vocabulary's `","ab`, `\xC3\xA9","a"` kinds, the
// keys past ASCII and the texts whose values end with such tokens check them. It fails where the body's
// tails are never walked, where a string the token opens and closes is not walked, where a stack inside a
// key is read as one in a value's body (`\u0061":"` kept after a logged "a"), and where a tail past ASCII is
// never walked. Inside a key, a token whose first quote ends it and that writes no string after but the value
// after its ':' is not walked (VocabTrie::closes_only): the tokens that end a key and write a value and then a
// key (`": "", "a"`, `":1}, "a"`) and the texts that write a key beside or inside an object with a key logged
// check it. It fails where any byte may come between its two quotes, where a quote may follow the value,
// where a '\\' may come before its first quote, and where closes_only is taken outside a key.
TEST_CASE("masks agree with the matcher where a token's quote opens a pattern's or an enum's key", "[constraint]") {
  int64_t eos = 0;
  const auto vocab = quote_rich_vocabulary(eos);
  const std::string str = R"({"type": "string", "maxLength": 3})";
  // Keys past ASCII, under an enum and a pattern.
  const std::string utf8_enum =
      R"({"type": "object", "propertyNames": {"enum": ["a", "ab", "\u00e9", "\u00e9a", "the"]},
                                    "additionalProperties": {"type": "string"}})";
  const std::string utf8_pattern = R"({"type": "object", "propertyNames": {"pattern": "^(\u00e9|\u00e9a|ab|a)$"},
                                       "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "integer"}]}})";
  const std::vector<std::string> schemas{
      R"({"type": "object", "propertyNames": {"pattern": "^[ab]{1,3}$"}, "additionalProperties": )" + str + "}",
      R"({"type": "object", "propertyNames": {"enum": ["a", "ab", "abc", "b", "ba", "the"]},
          "additionalProperties": )" +
          str + "}",
      R"({"type": "object", "propertyNames": {"pattern": "^(ab|ba|a|b)$"}, "additionalProperties":
          {"type": "object", "propertyNames": {"pattern": "^a[ab]?$"}, "additionalProperties": )" +
          str + "}}",
      R"({"type": "array", "items": {"type": "object", "propertyNames": {"pattern": "^th?e?$"},
          "additionalProperties": )" +
          str + R"(}, "maxItems": 3})",
      R"({"anyOf": [{"type": "object", "propertyNames": {"pattern": "^a[ab]?$"}, "additionalProperties": )" + str +
          R"(}, {"type": "object", "propertyNames": {"enum": ["a", "ab", "ba"]}, "additionalProperties":
          {"type": "integer"}}]})",
      R"({"type": "object", "propertyNames": {"pattern": "^[ab]*$"}, "maxProperties": 6, "additionalProperties": )" +
          str + "}",
      utf8_enum,
      utf8_pattern,
      R"({"type": "object", "additionalProperties": {"type": "string"}})",
      R"({"type": "object", "propertyNames": {"maxLength": 2}, "additionalProperties": {"type": "string"}})",
      R"({"type": "array", "items": {"type": "object", "additionalProperties": {"type": "string"}}})",
      R"({"type": "object", "properties": {"x": )" + str + R"(}, "propertyNames": {"pattern": "^(x|ab|abc)$"},
          "additionalProperties": {"type": "object", "propertyNames": {"enum": ["a", "b", "ab"]}}})",
  };
  int64_t steps = 0;
  // Every prefix of texts whose values end with tokens of two quotes or more, under keys past ASCII: at each
  // byte of a value, a token that ends it and begins the next key may write the start of a logged one.
  for (const std::string& s : {utf8_enum, utf8_pattern}) {
    const std::string e = "\xC3\xA9";  // U+00E9
    for (const std::string& text :
         {"{\"" + e + "\": \"x\\\"\", \"a\": \"\\\\\", \"ab\": \"" + e + "\", \"" + e + "a\": \"w",
          "{\"ab\": \"" + e + "\",\"a\":\"x\",\"" + e + "a\": \"y\"}"}) {
      for (std::size_t n = 1; n <= text.size(); ++n, ++steps) {
        INFO("schema " << s << " text " << text.substr(0, n));
        TokenConstraint tc(schema(s), vocab, {{eos}});
        tc.accept_text(text.substr(0, n));
        constraint_property::check_mask_brute_force(tc, *vocab, eos, 1000);
      }
    }
  }
  // Every prefix of texts that write a key in an object beside or inside one with a key logged: a token that
  // ends the key may write a value and, past it or past the object's end, that logged key again
  // (`": "", "a"`, `":1}, "a"`).
  const std::vector<std::pair<std::string, std::string>> beside{
      {R"({"type": "object", "additionalProperties": {"anyOf": [{"type": "string"},
          {"type": "object", "additionalProperties": {"type": "string"}}]}})",
       R"({"a": "x", "b": {"a": "", "b)"},
      {R"({"type": "object", "additionalProperties": {"anyOf": [{"type": "integer"},
          {"type": "object", "additionalProperties": {"type": "integer"}}]}})",
       R"({"a": 1, "b": {"c)"}};
  for (const auto& [s, text] : beside) {
    for (std::size_t n = 1; n <= text.size(); ++n, ++steps) {
      INFO("schema " << s << " text " << text.substr(0, n));
      TokenConstraint tc(schema(s), vocab, {{eos}});
      tc.accept_text(text.substr(0, n));
      constraint_property::check_mask_brute_force(tc, *vocab, eos, 1000);
    }
  }
  // Every prefix of texts under an enum's keys, the budgeted mask at every budget: a token that closes a key and
  // writes the start of another in the same object (`a": "", "a`) leaves a key whose shortest completion it has
  // just taken; the budget's walk counts it among the keys taken (KeyLog::Taken::more) where need() after the
  // token reads it from the log. It fails where the enum's indexed count (fresh_words) leaves out `more`.
  for (const std::string text : {R"({"a": "x", "b": "", "ab)", R"({"the": "", "b": "x", "a)"}) {
    for (std::size_t n = 1; n <= text.size(); ++n, ++steps) {
      INFO("text " << text.substr(0, n));
      TokenConstraint tc(schema(schemas[1]), vocab, {{eos}});
      tc.accept_text(text.substr(0, n));
      int64_t skipped = 0, cut = 0;
      constraint_property::check_every_budget(tc, *vocab, skipped, cut);
    }
  }
  // Every prefix of texts whose keys hold escapes, at each byte (mid-escape included): a token that a '\\'
  // before its quote does not escape (`\\"` after `"\\a`, `\"` after `"\\a\`) closes the logged key `\a\`. The
  // last text writes a logged plain key again, where a token of two quotes (`":"`) closes it with its first.
  for (const std::string text : {R"({"a\\": "x\"", "b\"": "y\\", "a\\)", R"({"\\a\\": {"\"": "\\\""}, "\\a\\)",
                                 R"({"ab": "x\"", "b": {"a": "", "a)"}) {
    const auto plain = schema(R"({"type": "object", "additionalProperties": {"anyOf": [{"type": "string"},
                                 {"type": "object", "additionalProperties": {"type": "string"}}]}})");
    for (std::size_t n = 1; n <= text.size(); ++n, ++steps) {
      INFO("text " << text.substr(0, n));
      TokenConstraint tc(plain, vocab, {{eos}});
      tc.accept_text(text.substr(0, n));
      constraint_property::check_mask_brute_force(tc, *vocab, eos, 1000);
    }
  }
  for (std::size_t i = 0; i < schemas.size(); ++i) {
    INFO("schema " << schemas[i]);
    const TokenConstraint start(schema(schemas[i]), vocab, {{eos}});
    std::mt19937_64 rng(100 + i);
    for (int run = 0; run < 12; ++run)
      diff_walk(start, *vocab, eos, 20 + static_cast<int64_t>(rng() % 200), rng, steps);
  }
  for (uint64_t seed = 1; seed <= 12; ++seed) {  // the driver's schemas over this vocabulary
    KeySchemaGen gen(seed);
    std::string text = gen.root().dump();
    for (int retry = 0; retry < 20 && !compiles(text); ++retry) text = gen.root().dump();
    if (!compiles(text)) continue;
    INFO("seed " << seed << " schema " << text);
    const TokenConstraint start(schema(text), vocab, {{eos}});
    std::mt19937_64 rng(seed);
    for (int run = 0; run < 4; ++run) diff_walk(start, *vocab, eos, 20 + static_cast<int64_t>(rng() % 200), rng, steps);
  }
  WARN(steps << " steps over " << vocab->size() << " tokens");
}

// Inside an enum's key, a token of one quote that begins with a logged key's rest, closing quote and all, is
// walked (KeyLog::one_quote_suspects); keys whose rest is longer than any token's bytes up to its last quote
// (VocabTrie::quote_reach) are passed over, and every key of an object whose shortest key is past that. Here the
// token of the farthest quote, `abc"`, is the one that repeats "abc" from its opening quote (where "abcd" is
// still fresh, so no saturated prefix lists it): the masks at every prefix of the text against each token tried
// on the matcher. It fails where the reach is taken one byte short,
// and where the object's shortest key is not kept as keys close.
TEST_CASE("a token whose quote is the farthest in the vocabulary closes a logged key again", "[constraint]") {
  TokenBytes v;
  for (int c = 0x20; c < 0x7F; ++c) v.text.emplace_back(std::string(1, static_cast<char>(c)));
  for (const char* s : {"abc\"", "ab\"", "b\""}) v.text.emplace_back(s);
  const auto eos = static_cast<int64_t>(v.text.size());
  v.text.emplace_back(std::nullopt);
  const auto vocab = TokenVocabulary::from_bytes(std::move(v));
  const auto c = schema(R"({"type": "object", "propertyNames": {"enum": ["abc", "abcd", "ab", "b", "x"]},
                            "additionalProperties": {"type": "integer"}})");
  const std::string text = R"({"abc": 1, "b": 2, "ab": 3, "x)";
  for (std::size_t n = 1; n <= text.size(); ++n) {
    INFO("text " << text.substr(0, n));
    TokenConstraint tc(c, vocab, {{eos}});
    tc.accept_text(text.substr(0, n));
    constraint_property::check_mask_brute_force(tc, *vocab, eos, 1000);
  }
}

}  // namespace ORBIT_TEST_FILE
