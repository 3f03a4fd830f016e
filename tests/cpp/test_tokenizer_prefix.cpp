// Tokenizer::prefix_stable and encode_with_bytes (orbit/runtime/tokenizer.h): for every tokenizer that claims
// prefix-stability (TinyStories-656K's tokenizer.json, as tested and as bundled with the model; stories260K's
// llama2.c tokenizer; variants of the tokenizer.json that reach unk runs, dropped characters, raw and
// normalized added tokens, no normalizer and a character normalized into several), on chat renderings,
// random Unicode, whitespace runs, characters outside the vocabulary and text around added tokens, at every
// character boundary: where no token straddles the cut, the tokens of the text before it are exactly the
// tokens that end at or before it. Window::sync's cuts rest on this (tests/cpp/test_sync_cuts.cpp). And
// Tokenizer::encode_rest (the safe-cut rule) at every byte: refused inside characters and at every cut a token
// of the whole encode straddles (where BPE merges across), and where taken exactly the whole encode's tokens
// from the cut on, ids and bytes; taken at a share of the cuts (not vacuous).
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "hf/text.h"  // utf8_encode: the tokenizer's own, runtime/src
#include "orbit/common/error.h"
#include "orbit/runtime/hf_tokenizer.h"
#include "orbit/runtime/tokenizer.h"
#include "tokenizer_variants.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using nlohmann::json;
using orbit::runtime::Encoding;
using orbit::runtime::Tokenizer;
using orbit::runtime::hf::utf8_encode;
using orbit::test::tokenizer_variants::load_variant;
using orbit::test::tokenizer_variants::tinystories_json;

const fs::path kData = fs::path(ORBIT_TEST_DATA_DIR) / "tokenizers";
const fs::path kModels = fs::path(ORBIT_MODELS_DIR);

const std::vector<std::string> kWords = {"Once",  "upon", "a",    "time",    "there", "was",   "little",  "girl",
                                         "named", "Lily", "she",  "loved",   "to",    "play",  "outside", "the",
                                         "sun",   "dog",  "said", "\"Hi!\"", "ball",  "happy", "story",   "end"};

// Characters that exercise the tokenizers apart: spaces of several kinds, "▁" itself, accents (precomposed
// and combining), CJK, emoji with joiners, a private-use character (Window::sync's chunk marks), controls.
const std::vector<uint32_t> kOdd = {' ',    '\t',   '\n',   '\r',   0xA0,   0x3000,  0x2581,  0xE9,
                                    0x65,   0x301,  0x4F60, 0x597D, 0xAC00, 0x1F642, 0x200D,  0x1F468,
                                    0xE000, 0xE001, 0x0,    0x7F,   0x430,  0x627,   0x1F1EB, 0xFFFD};

std::string random_unicode(std::mt19937_64& rng, int chars) {
  std::string s;
  for (int i = 0; i < chars; ++i) {
    switch (rng() % 4) {
      case 0: s += utf8_encode(kOdd[rng() % kOdd.size()]); break;
      case 1: s += utf8_encode(0x20 + static_cast<uint32_t>(rng() % 0x5F)); break;
      case 2: s += utf8_encode(0xA0 + static_cast<uint32_t>(rng() % 0x2000)); break;
      default: s += kWords[rng() % kWords.size()] + " ";
    }
  }
  return s;
}

std::string whitespace_runs(std::mt19937_64& rng, int runs) {
  static const std::vector<std::string> kSpace = {" ", "  ", "\t", "\n", "\n\n", " \n", "\xC2\xA0", "\xE3\x80\x80"};
  std::string s;
  for (int i = 0; i < runs; ++i) {
    for (int k = static_cast<int>(rng() % 4); k >= 0; --k) s += kSpace[rng() % kSpace.size()];
    if (rng() % 3 != 0) s += kWords[rng() % kWords.size()];
  }
  return s;
}

// A chat as orbit's plain template (orbit/sync.h kPlainChatTemplate) and a ChatML-like one render it, with
// the added tokens of the tokenizers written in, with and without a space before them.
std::string chat(std::mt19937_64& rng, int messages, const std::vector<std::string>& specials) {
  static const std::vector<std::string> kRoles = {"system", "user", "assistant", "tool"};
  std::string s = rng() % 2 ? specials[rng() % specials.size()] : "";
  for (int m = 0; m < messages; ++m) {
    const std::string role = kRoles[rng() % kRoles.size()];
    std::string content;
    for (int w = static_cast<int>(rng() % 12); w >= 0; --w) content += (w ? " " : "") + kWords[rng() % kWords.size()];
    switch (rng() % 4) {
      case 0: s += role + ": " + content + "\n"; break;
      case 1: s += (rng() % 2 ? " " : "") + specials[rng() % specials.size()] + role + ": " + content; break;
      case 2:
        s += role + ": " + content + "<tool_call>{\"name\": \"get\", \"arguments\": {\"q\": \"" + content +
             "\"}}</tool_call>\n";
        break;
      default: s += role + ": " + random_unicode(rng, 6) + "\n";
    }
  }
  return s;
}

std::vector<std::string> texts(uint64_t seed, const std::vector<std::string>& specials) {
  std::ifstream in(kData / "corpus.json");
  std::vector<std::string> out = json::parse(in)["texts"].get<std::vector<std::string>>();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 40; ++i) out.push_back(chat(rng, 2 + static_cast<int>(rng() % 10), specials));
  for (int i = 0; i < 40; ++i) out.push_back(random_unicode(rng, 10 + static_cast<int>(rng() % 60)));
  for (int i = 0; i < 20; ++i) out.push_back(whitespace_runs(rng, 4 + static_cast<int>(rng() % 30)));
  for (const std::string& t : specials) {
    for (const std::string& around : {std::string("a"), std::string(" "), std::string("\n"), std::string("x ")})
      out.push_back(around + t + around + t + t + "story" + around);
  }
  return out;
}

bool char_boundary(const std::string& text, std::size_t at) {
  return at >= text.size() || (static_cast<unsigned char>(text[at]) & 0xC0) != 0x80;
}

struct Checked {
  std::size_t cuts = 0;     // character boundaries tried
  std::size_t decided = 0;  // of them, cuts no token straddles (where the claim says something)
  std::size_t resumed = 0;  // of them, cuts encode_rest took (the safe-cut rule)
};

// Tokenizer::encode_rest at byte `c` of `text` (whose encode_with_bytes is `e`): refused inside a character,
// at either end, and wherever a token of the whole encode straddles c (a merge across the cut); where taken,
// exactly the whole encode's tokens from c on, ids and bytes. Returns whether it was taken.
bool check_rest(const Tokenizer& tok, const std::string& text, const Encoding& e, std::size_t c) {
  const std::optional<Encoding> rest = tok.encode_rest(text, c);
  if (!rest) return false;
  INFO("encode_rest at byte " << c);
  REQUIRE(char_boundary(text, c));
  REQUIRE(c > 0);
  REQUIRE(c < text.size());
  std::size_t before = 0;
  for (const orbit::runtime::TokenBytes& b : e.bytes) {
    REQUIRE_FALSE((b.begin < c && c < b.end));  // the rule took a cut a token straddles
    before += b.end <= c ? 1 : 0;
  }
  REQUIRE(rest->ids == std::vector<int64_t>(e.ids.begin() + static_cast<std::ptrdiff_t>(before), e.ids.end()));
  REQUIRE(rest->bytes.size() == rest->ids.size());
  for (std::size_t i = 0; i < rest->bytes.size(); ++i) {
    REQUIRE(rest->bytes[i].begin == e.bytes[before + i].begin);
    REQUIRE(rest->bytes[i].end == e.bytes[before + i].end);
  }
  return true;
}

// The claim of Tokenizer::prefix_stable on `text`, at every character boundary, and encode_with_bytes'
// invariants. Returns what it checked; fails naming the text and the cut.
Checked check_text(const Tokenizer& tok, const std::string& text) {
  Checked done;
  const Encoding e = tok.encode_with_bytes(text);
  INFO(tok.source() << " on text '" << text << "'");
  REQUIRE(e.ids == tok.encode(text, false));
  REQUIRE(e.bytes.size() == e.ids.size());
  for (std::size_t i = 0; i < e.bytes.size(); ++i) {
    INFO("token " << i);
    REQUIRE(e.bytes[i].begin < e.bytes[i].end);
    REQUIRE(e.bytes[i].end <= text.size());
    REQUIRE(char_boundary(text, e.bytes[i].begin));
    REQUIRE(char_boundary(text, e.bytes[i].end));
    if (i > 0) {
      REQUIRE(e.bytes[i - 1].begin <= e.bytes[i].begin);
      REQUIRE(e.bytes[i - 1].end <= e.bytes[i].end);
    }
  }
  for (std::size_t c = 0; c <= text.size(); ++c) {
    if (!char_boundary(text, c)) {
      REQUIRE_FALSE(tok.encode_rest(text, c).has_value());
      continue;
    }
    ++done.cuts;
    done.resumed += check_rest(tok, text, e, c) ? 1 : 0;
    bool straddled = false;
    std::size_t before = 0;
    for (const orbit::runtime::TokenBytes& b : e.bytes) {
      straddled = straddled || (b.begin < c && c < b.end);
      before += b.end <= c ? 1 : 0;
    }
    if (straddled) continue;
    ++done.decided;
    const std::vector<int64_t> prefix = tok.encode(std::string_view(text).substr(0, c), false);
    const std::vector<int64_t> expected(e.ids.begin(), e.ids.begin() + static_cast<std::ptrdiff_t>(before));
    if (prefix != expected) FAIL("cut at byte " << c << ": the prefix's tokens differ from the text's before it");
  }
  return done;
}

void check_tokenizer(const Tokenizer& tok, const std::vector<std::string>& specials, uint64_t seed) {
  REQUIRE(tok.prefix_stable());
  Checked all;
  for (const std::string& t : texts(seed, specials)) {
    const Checked c = check_text(tok, t);
    all.cuts += c.cuts;
    all.decided += c.decided;
    all.resumed += c.resumed;
  }
  // Most cuts are decided (the claim says something there), and the safe-cut rule takes a share of them: the
  // test is not vacuous.
  INFO(tok.source() << ": " << all.decided << " of " << all.cuts << " cuts no token straddles, " << all.resumed
                    << " taken by encode_rest");
  CHECK(all.decided * 4 > all.cuts);
  CHECK(all.resumed * 20 > all.decided);
  std::printf("%s: %zu cuts, %zu no token straddles, %zu taken by encode_rest\n", tok.source().c_str(), all.cuts,
              all.decided, all.resumed);
}

const std::vector<std::string> kStorySpecials = {"<|start_story|>", "<|end_story|>", "<unk>", "<tool_call>"};

}  // namespace

TEST_CASE("TinyStories-656K's tokenizer.json is prefix-stable at every untouched cut", "[tokenizer_prefix]") {
  check_tokenizer(*orbit::runtime::load_hf_tokenizer((kData / "tinystories-656k").string()), kStorySpecials, 1);
  check_tokenizer(*orbit::runtime::load_tokenizer((kModels / "tinystories-656k").string()), kStorySpecials, 2);
}

TEST_CASE("the BPE word cache keeps each token's bytes", "[tokenizer_prefix]") {
  const auto cached = orbit::runtime::load_hf_tokenizer((kData / "tinystories-656k").string());
  ::setenv("ORBIT_BPE_CACHE_WORDS", "0", 1);
  const auto uncached = orbit::runtime::load_hf_tokenizer((kData / "tinystories-656k").string());
  ::unsetenv("ORBIT_BPE_CACHE_WORDS");
  for (const std::string& t : texts(3, kStorySpecials)) {
    for (int pass = 0; pass < 2; ++pass) {  // the second pass reads the cache
      const Encoding a = cached->encode_with_bytes(t), b = uncached->encode_with_bytes(t);
      REQUIRE(a.ids == b.ids);
      for (std::size_t i = 0; i < a.bytes.size(); ++i) {
        REQUIRE(a.bytes[i].begin == b.bytes[i].begin);
        REQUIRE(a.bytes[i].end == b.bytes[i].end);
      }
    }
  }
}

TEST_CASE("stories260K's llama2.c tokenizer is prefix-stable at every untouched cut", "[tokenizer_prefix]") {
  const auto tok = orbit::runtime::load_tokenizer((kModels / "stories260K/tok512.bin").string(), 512);
  check_tokenizer(*tok, {"<s>", "</s>"}, 4);
}

TEST_CASE("tokenizer.json variants that keep prefix-stability", "[tokenizer_prefix]") {
  SECTION("unknown characters fused into one unk") {
    json j = tinystories_json();
    j["model"]["byte_fallback"] = false;
    check_tokenizer(*load_variant("unk_fused", j), kStorySpecials, 5);
  }
  SECTION("unknown characters one unk each") {
    json j = tinystories_json();
    j["model"]["byte_fallback"] = false;
    j["model"]["fuse_unk"] = false;
    check_tokenizer(*load_variant("unk_each", j), kStorySpecials, 6);
  }
  SECTION("unknown characters dropped (no unk_token)") {
    json j = tinystories_json();
    j["model"]["byte_fallback"] = false;
    j["model"]["unk_token"] = nullptr;
    check_tokenizer(*load_variant("dropped", j), kStorySpecials, 7);
  }
  SECTION("byte fallback with every byte piece") {
    json j = tinystories_json();
    int64_t id = 2048;
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      j["model"]["vocab"][name] = id++;
    }
    check_tokenizer(*load_variant("bytes", j), kStorySpecials, 8);
  }
  SECTION("added tokens matched raw and normalized, one inside words") {
    json j = tinystories_json();
    for (json& a : j["added_tokens"]) a["normalized"] = false;
    j["added_tokens"].push_back({{"id", 2048}, {"content", "story"}, {"special", false}, {"normalized", true}});
    j["added_tokens"].push_back({{"id", 2049}, {"content", "<tool_call>"}, {"special", true}, {"normalized", false}});
    check_tokenizer(*load_variant("added", j), kStorySpecials, 9);
  }
  SECTION("no normalizer") {
    json j = tinystories_json();
    j["normalizer"] = nullptr;
    check_tokenizer(*load_variant("no_normalizer", j), kStorySpecials, 10);
  }
  SECTION("characters normalized into several, and Prepend after Replace") {
    json j = tinystories_json();
    j["normalizer"] = orbit::test::tokenizer_variants::several_normalizer();
    check_tokenizer(*load_variant("several", j), kStorySpecials, 11);
  }
}

TEST_CASE("tokenizers that are not prefix-stable say so and report no bytes", "[tokenizer_prefix]") {
  for (const char* name : {"gpt2", "minimind"}) {  // byte-level: a pre-tokenizer whose split regex looks ahead
    const auto tok = orbit::runtime::load_hf_tokenizer((kData / name).string());
    CHECK_FALSE(tok->prefix_stable());
    CHECK_THROWS_WITH(tok->encode_with_bytes("hello"), Contains("not prefix-stable"));
  }
  const auto refused = [](const std::string& name, const std::function<void(json&)>& edit) {
    json j = tinystories_json();
    edit(j);
    INFO(name);
    CHECK_FALSE(load_variant(name, j)->prefix_stable());
  };
  refused("nfc", [](json& j) {
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {j["normalizer"], {{"type", "NFC"}}}}};
  });
  refused("regex_replace", [](json& j) {
    j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "\xE2\x96\x81"}};
  });
  refused("two_char_replace", [](json& j) {
    j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "  "}}}, {"content", " "}};
  });
  refused("empty_replace", [](json& j) {
    j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", ""}};
  });
  refused("metaspace", [](json& j) {
    j["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
  });
  refused("ignore_merges", [](json& j) { j["model"]["ignore_merges"] = true; });
  refused("suffix", [](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; });
  refused("lstrip", [](json& j) { j["added_tokens"][1]["lstrip"] = true; });
  refused("rstrip", [](json& j) { j["added_tokens"][1]["rstrip"] = true; });
  refused("single_word", [](json& j) { j["added_tokens"][1]["single_word"] = true; });
  refused("some_bytes", [](json& j) { j["model"]["vocab"]["<0x0A>"] = 2048; });  // an unk would wait
}

}  // namespace ORBIT_TEST_FILE
