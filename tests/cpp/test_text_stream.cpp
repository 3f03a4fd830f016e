// TextStream (orbit/text_stream.h): what push() and finish() return, concatenated, is the decode of every token
// at once, for every bundled tokenizer (stories260K's llama2.c tokenizer after BOS and after nothing,
// TinyStories-656K's tokenizer.json and variants of it: every byte piece (byte fallback), a Metaspace decoder
// that drops the first token's space, added tokens; GPT-2's and MiniMind's byte-level BPE) and for decoders
// whose text of a token depends on its neighbours, cut at a stop string as the whole text would be. A push
// decodes a window of a bounded number of tokens however long the answer, and a stop string that may not end
// the answer is judged once.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "orbit/runtime/hf_tokenizer.h"
#include "orbit/runtime/tokenizer.h"
#include "orbit/text_stream.h"
#include "orbit_catch.h"
#include "tokenizer_variants.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using orbit::TextStream;
using orbit::runtime::Tokenizer;
using orbit::test::tokenizer_variants::load_variant;
using orbit::test::tokenizer_variants::tinystories_json;
using Decode = std::function<std::string(const std::vector<int64_t>&)>;

const fs::path kData = fs::path(ORBIT_TEST_DATA_DIR) / "tokenizers";
const fs::path kModels = fs::path(ORBIT_MODELS_DIR);

// Text with characters the vocabularies lack (split over byte tokens, or unknown), added tokens and runs of
// spaces, about `words` words long.
std::string odd_text(std::mt19937_64& rng, int words) {
  static const std::vector<std::string> kPieces = {"Once",
                                                   "upon",
                                                   "a time",
                                                   "there was",
                                                   "Lily",
                                                   "\"Hi!\"",
                                                   "\n\n",
                                                   "  ",
                                                   "caf\xC3\xA9",
                                                   "\xE4\xBD\xA0\xE5\xA5\xBD",
                                                   "\xF0\x9F\x99\x82",
                                                   "\xE2\x82\xAC",
                                                   "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
                                                   "e\xCC\x81",
                                                   "<|end_story|>",
                                                   "story",
                                                   "<tool_call>",
                                                   "\xE2\x96\x81",
                                                   "\t",
                                                   "The End."};
  std::string s;
  for (int i = 0; i < words; ++i) s += (rng() % 3 ? " " : "") + kPieces[rng() % kPieces.size()];
  return s;
}

struct Streamed {
  std::string pieces;  // every push's piece and finish's, concatenated
  bool stopped = false;
};

Streamed stream(const Decode& decode, const std::vector<int64_t>& tokens, const std::vector<std::string>& stops) {
  TextStream s(decode, stops);
  Streamed out;
  for (int64_t t : tokens) {
    out.pieces += s.push(t);
    if (s.stopped()) break;
  }
  out.pieces += s.finish();
  out.stopped = s.stopped();
  CHECK(out.pieces == s.released());
  return out;
}

// Streamed without stop strings, the whole decode; with a stop string taken from its last quarter (three
// ASCII letters), the whole decode before its first occurrence.
void check_exact(const Decode& decode, const std::vector<int64_t>& tokens) {
  const std::string whole = decode(tokens);
  CHECK(stream(decode, tokens, {}).pieces == whole);
  for (std::size_t at = whole.size() * 3 / 4; at + 3 <= whole.size(); ++at) {
    const std::string stop = whole.substr(at, 3);
    if (!std::all_of(stop.begin(), stop.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); }))
      continue;
    INFO("stop " << stop);
    const Streamed cut = stream(decode, tokens, {"\x01never", stop});
    CHECK(cut.stopped);
    CHECK(cut.pieces == whole.substr(0, whole.find(stop)));
    break;
  }
}

// Answers of 30 to 600 tokens: encodings of odd text, and (`random_ids`) ids drawn from the whole vocabulary.
void check_tokenizer(const Tokenizer& tok, int64_t previous, bool random_ids) {
  const Decode decode = [&tok, previous](const std::vector<int64_t>& t) { return tok.decode(t, previous); };
  std::mt19937_64 rng(7);
  for (int words : {12, 60, 300}) {
    INFO("odd text of " << words << " words");
    check_exact(decode, tok.encode(odd_text(rng, words), false));
  }
  if (!random_ids) return;
  for (std::size_t n : {40, 600}) {
    std::vector<int64_t> ids(n);
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(tok.vocab_size()));
    INFO(n << " random ids");
    check_exact(decode, ids);
  }
}

}  // namespace

TEST_CASE("text stream: the pieces are the whole decode, for every bundled tokenizer", "[text][cpu]") {
  SECTION("stories260K (llama2.c), after BOS and after nothing") {
    const auto tok = orbit::runtime::load_tokenizer((kModels / "stories260K/tok512.bin").string(), 512);
    check_tokenizer(*tok, 1, true);
    check_tokenizer(*tok, -1, true);
  }
  SECTION("TinyStories-656K's tokenizer.json, as bundled") {
    check_tokenizer(*orbit::runtime::load_tokenizer((kModels / "tinystories-656k").string()), -1, false);
  }
  SECTION("byte fallback with every byte piece: characters split over byte tokens") {
    json j = tinystories_json();
    int64_t id = 2048;
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      j["model"]["vocab"][name] = id++;
    }
    check_tokenizer(*load_variant("bytes", j), -1, false);
  }
  SECTION("a Metaspace decoder: the first token's space dropped") {
    json j = tinystories_json();
    j["decoder"] = {
        {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
    check_tokenizer(*load_variant("metaspace", j), -1, false);
  }
  SECTION("added tokens, one inside words") {
    json j = tinystories_json();
    j["added_tokens"].push_back({{"id", 2048}, {"content", "story"}, {"special", false}, {"normalized", true}});
    j["added_tokens"].push_back({{"id", 2049}, {"content", "<tool_call>"}, {"special", true}, {"normalized", false}});
    check_tokenizer(*load_variant("added", j), -1, false);
  }
  SECTION("byte-level BPE: GPT-2's and MiniMind's (a character's bytes over tokens, read as lossy UTF-8)") {
    for (const char* name : {"gpt2", "minimind"}) {
      INFO(name);
      check_tokenizer(*orbit::runtime::load_hf_tokenizer((kData / name).string()), -1, true);
    }
  }
}

TEST_CASE("text stream: decoders whose token's text depends on its neighbours", "[text][cpu]") {
  // Token t is the letter 'a' + t % 26, with a space after every 5th.
  const auto letter = [](int64_t t) { return std::string(1, static_cast<char>('a' + t % 26)) + (t % 5 ? "" : " "); };
  std::mt19937_64 rng(3);
  std::vector<int64_t> tokens(500);
  for (int64_t& t : tokens) t = static_cast<int64_t>(rng() % 8);  // repeats are frequent
  SECTION("a token repeating the one before it has no text (the context must be decoded with the window)") {
    check_exact(
        [&](const std::vector<int64_t>& ids) {
          std::string out;
          for (std::size_t i = 0; i < ids.size(); ++i)
            if (i == 0 || ids[i] != ids[i - 1]) out += letter(ids[i]);
          return out;
        },
        tokens);
  }
  SECTION("the first token is upper case (its text depends on where the decode starts)") {
    check_exact(
        [&](const std::vector<int64_t>& ids) {
          std::string out;
          for (int64_t t : ids) out += letter(t);
          if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
          return out;
        },
        tokens);
  }
  SECTION("every token but the last ends with '-' (its text depends on the token after it)") {
    check_exact(
        [&](const std::vector<int64_t>& ids) {
          std::string out;
          for (std::size_t i = 0; i < ids.size(); ++i) out += letter(ids[i]) + (i + 1 < ids.size() ? "-" : "");
          return out;
        },
        tokens);
  }
  SECTION("a byte-fallback run of bytes that is not yet valid UTF-8 is one U+FFFD per byte") {
    // Tokens < 256 are bytes, others a letter; runs of bytes decode as the ByteFallback decoder does.
    const Decode decode = [&](const std::vector<int64_t>& ids) {
      std::string out, run;
      const auto flush = [&] {
        const bool valid = orbit::complete_utf8_prefix(run) == run.size();  // runs here are whole characters
        for (char c : run) out += valid ? std::string(1, c) : std::string("\xEF\xBF\xBD");
        run.clear();
      };
      for (int64_t t : ids) {
        if (t < 256) {
          run += static_cast<char>(t);
        } else {
          flush();
          out += letter(t);
        }
      }
      flush();
      return out;
    };
    std::vector<int64_t> text;
    for (int i = 0; i < 200; ++i) {
      if (rng() % 3 == 0) {
        for (unsigned char c : std::string("\xF0\x9F\x99\x82\xE2\x82\xAC")) text.push_back(c);  // 🙂€
      } else {
        text.push_back(256 + static_cast<int64_t>(rng() % 26));
      }
    }
    check_exact(decode, text);
  }
}

TEST_CASE("text stream: a push decodes a bounded window, and a stop string is judged once", "[text][cpu]") {
  std::size_t longest = 0, decoded = 0;
  const Decode bytes = [&](const std::vector<int64_t>& ids) {
    longest = std::max(longest, ids.size());
    decoded += ids.size();
    std::string out;
    for (int64_t t : ids) out += static_cast<char>(t);
    return out;
  };
  TextStream s(bytes, {"<stop>"});
  for (int i = 0; i < 2000; ++i) {
    if (i == 1000) longest = decoded = 0;
    s.push('a' + i % 26);
  }
  // A window is the 2 tokens of context and 3 to 6 after the anchor; every 4 pushes the anchor moves (its
  // context decoded alone, 2 tokens, and with the 2 after it, 4): 8 tokens a push.
  CHECK(longest <= 8);
  CHECK(decoded <= 1000 * 8);
  CHECK(s.released().size() == 2000);

  // The same where the first token decodes otherwise (in upper case; Metaspace drops its space): the window
  // is decoded after context, not alone, so it extends the text and the anchor still moves.
  const Decode capital = [&](const std::vector<int64_t>& ids) {
    longest = std::max(longest, ids.size());
    std::string out;
    for (int64_t t : ids) out += static_cast<char>(t);
    if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return out;
  };
  TextStream m(capital, {});
  std::string streamed;
  for (int i = 0; i < 2000; ++i) {
    if (i == 1000) longest = 0;
    streamed += m.push('a' + i % 26);
  }
  CHECK(longest <= 8);
  CHECK(streamed + m.finish() == capital(m.tokens()));

  // A stop string that may not end the answer here, in the text again and again: each one judged once, with
  // the text before it.
  std::vector<std::string> judged;
  TextStream x(bytes, {"xy"}, [&](const std::string& before) {
    judged.push_back(before);
    return before.size() >= 900;
  });
  std::string text;
  for (int i = 0; i < 500 && !x.stopped(); ++i) {
    text += "xy";
    x.push('x');
    x.push('y');
  }
  CHECK(x.stopped());
  CHECK(x.released() == text.substr(0, 900));
  REQUIRE(judged.size() == 451);
  for (std::size_t k = 0; k < judged.size(); ++k) CHECK(judged[k] == text.substr(0, 2 * k));
}

}  // namespace ORBIT_TEST_FILE
