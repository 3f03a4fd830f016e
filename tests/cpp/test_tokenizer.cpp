// The llama2.c tokenizer against committed reference ids (tests/data/tokenizer/tok512.json, made by an
// independent Python encoder, tests/python/tokenizer_reference.py), a plain rescanning merge loop on
// random text, and the file-format errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <unordered_map>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "orbit/common/error.h"
#include "orbit/runtime/tokenizer.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using orbit::runtime::Tokenizer;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

const std::string kTok512 = std::string(ORBIT_MODELS_DIR) + "/stories260K/tok512.bin";

const Tokenizer& tok512() {
  static const auto t = orbit::runtime::load_llama2c_tokenizer(kTok512, 512);
  return *t;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

std::vector<int64_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

// The scores of a llama2.c tokenizer file, read here on their own (the interface does not expose them).
std::vector<float> read_scores(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> scores;
  for (std::size_t at = 4; at + 8 <= b.size();) {
    float s;
    int32_t n;
    std::memcpy(&s, b.data() + at, 4);
    std::memcpy(&n, b.data() + at + 4, 4);
    scores.push_back(s);
    at += 8 + static_cast<std::size_t>(n);
  }
  return scores;
}

// The merge rule spelled out the slow way: rescan every adjacent pair after each merge.
std::vector<int64_t> rescanning_encode(const Tokenizer& t, const std::vector<float>& scores, const std::string& text,
                                       bool bos) {
  std::unordered_map<std::string, int64_t> ids;
  for (int64_t i = 0; i < t.vocab_size(); ++i) ids.emplace(t.piece(i), i);
  std::vector<int64_t> out;
  if (bos) out.push_back(1);
  if (!text.empty()) out.push_back(ids.at(" "));
  for (std::size_t i = 0; i < text.size();) {
    std::size_t end = i + 1;
    while (end < text.size() && end - i < 4 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    const std::string g = text.substr(i, end - i);
    if (ids.count(g)) {
      out.push_back(ids.at(g));
    } else {
      for (unsigned char c : g) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", c);
        out.push_back(ids.at(name));
      }
    }
    i = end;
  }
  while (true) {
    int64_t best = -1;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < out.size(); ++i) {
      auto it = ids.find(t.piece(out[i]) + t.piece(out[i + 1]));
      if (it != ids.end() && (best < 0 || scores[it->second] > scores[best])) {
        best = it->second;
        at = i;
      }
    }
    if (best < 0) break;
    out[at] = best;
    out.erase(out.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  return out;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string piece_record(float score, const std::string& piece) {
  std::string r(8, '\0');
  const int32_t len = static_cast<int32_t>(piece.size());
  std::memcpy(r.data(), &score, 4);
  std::memcpy(r.data() + 4, &len, 4);
  return r + piece;
}

}  // namespace

TEST_CASE("tok512: encoding equals the independent reference ids", "[tokenizer][model][cpu]") {
  const auto doc = read_json(std::string(ORBIT_TEST_DATA_DIR) + "/tokenizer/tok512.json");
  REQUIRE(doc["vocab_size"] == 512);
  REQUIRE(doc["cases"].size() >= 15);
  for (const auto& c : doc["cases"]) {
    const std::string text = c["text"];
    INFO("text: " << text);
    const std::vector<int64_t> ids = tok512().encode(text, c["bos"].get<bool>());
    CHECK(ids == ids_of(c["ids"]));
    CHECK(tok512().decode(ids) == c["decoded"].get<std::string>());
    if (c["bos"].get<bool>()) CHECK(tok512().decode(ids) == text);  // lossless round trip after BOS
  }
}

TEST_CASE("tok512: the heap merge equals a rescanning merge on random text", "[tokenizer][model][cpu]") {
  const Tokenizer& t = tok512();
  const std::vector<float> scores = read_scores(kTok512);
  REQUIRE(scores.size() == 512);
  const std::string alphabet = "  aeiou tnsrhl.,!?\"'0123456789\n\t\xc3\xa9\xe2\x80\x94\xf0\x9f\x98\x8a";
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) text.push_back(alphabet[rng() % alphabet.size()]);  // also cuts UTF-8 sequences
    INFO("round " << round);
    CHECK(t.encode(text, round % 2 == 0) == rescanning_encode(t, scores, text, round % 2 == 0));
  }
}

TEST_CASE("tok512: vocabulary, specials, pieces and decoding rules", "[tokenizer][model][cpu]") {
  const Tokenizer& t = tok512();
  CHECK(t.vocab_size() == 512);
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_id() == 2);
  CHECK(t.kind() == "llama2c");
  CHECK(t.piece(1) == "\n<s>\n");
  CHECK(t.piece(3 + 'A') == "<0x41>");
  CHECK(t.encode("", true) == std::vector<int64_t>{1});
  CHECK(t.encode("", false).empty());
  // A byte piece decodes to its raw byte; BOS and EOS to nothing; a leading space goes only after BOS.
  CHECK(t.decode({3 + 0x0A}) == "\n");
  CHECK(t.decode({1, 2}).empty());
  const std::vector<int64_t> once = t.encode("Once", false);
  CHECK(t.decode(once) == " Once");
  CHECK(t.decode(once, 1) == "Once");
  CHECK(t.decode(once, 5) == " Once");
  CHECK_THROWS_WITH(t.decode({512}), Contains("token id 512 is outside the vocabulary [0, 512)"));
  CHECK_THROWS_WITH(t.piece(-1), Contains("outside the vocabulary"));
  // The longest piece bounds the bytes a token covers (the input-size check before tokenizing).
  std::size_t longest = 1;
  for (int64_t id = 0; id < t.vocab_size(); ++id) longest = std::max(longest, t.piece(id).size());
  CHECK(t.longest_piece_bytes() == static_cast<int64_t>(longest));
  CHECK(t.longest_piece_bytes() >= 6);  // "<0x41>" and the other byte-fallback pieces
}

TEST_CASE("tokenizer files: found beside the model, and bad files named", "[tokenizer][cpu]") {
  const fs::path dir = fs::temp_directory_path() / ("orbit-tok-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{dir};
  CHECK(orbit::runtime::find_tokenizer(std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin", 512) == kTok512);
  write_bytes(dir / "m.bin", "x");
  CHECK(orbit::runtime::find_tokenizer((dir / "m.bin").string(), 512).empty());
  write_bytes(dir / "tokenizer.bin", "x");
  CHECK(orbit::runtime::find_tokenizer((dir / "m.bin").string(), 512) == (dir / "tokenizer.bin").string());
  CHECK(orbit::runtime::find_tokenizer(dir.string(), 512).empty());  // a directory: Hugging Face

  // A small valid file in the same layout: specials, 256 bytes, two merges.
  std::string good(4, '\0');
  const int32_t max_len = 6;
  std::memcpy(good.data(), &max_len, 4);
  good += piece_record(0, "<unk>") + piece_record(0, "\n<s>\n") + piece_record(0, "\n</s>\n");
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    good += piece_record(0, name);
  }
  good += piece_record(-1, " ") + piece_record(-2, "a") + piece_record(-3, " a") + piece_record(-4, "aa");
  write_bytes(dir / "small.bin", good);
  const auto small = orbit::runtime::load_llama2c_tokenizer((dir / "small.bin").string());
  CHECK(small->vocab_size() == 263);
  // " " "a" "a" "a": " a" (score -3) merges before "aa" (-4), then the remaining "a" "a"; "b" has no piece
  // and falls back to its byte.
  CHECK(small->encode("aaa", false) == std::vector<int64_t>{261, 262});
  CHECK(small->encode("ab", true) == std::vector<int64_t>{1, 261, 3 + 'b'});
  CHECK(small->decode({1, 261, 3 + 'b'}) == "ab");
  // Words merge apart (a space after a non-space starts one) unless a piece holds such a space: with " a a"
  // in the vocabulary, the two words of "a a" merge into one piece.
  CHECK(small->encode("a a", false) == std::vector<int64_t>{261, 261});
  write_bytes(dir / "across.bin", good + piece_record(-1, " a a"));
  const auto across = orbit::runtime::load_llama2c_tokenizer((dir / "across.bin").string());
  CHECK(across->encode("a a", false) == std::vector<int64_t>{263});
  CHECK(across->encode("a aa", false) == std::vector<int64_t>{263, 260});

  CHECK_THROWS_WITH(orbit::runtime::load_llama2c_tokenizer((dir / "small.bin").string(), 512),
                    Contains("small.bin") && Contains("263 pieces but the model's vocabulary is 512"));
  CHECK_THROWS_WITH(orbit::runtime::load_llama2c_tokenizer((dir / "none.bin").string()),
                    Contains("none.bin: cannot open the tokenizer file: No such file or directory"));
  CHECK_THROWS_WITH(orbit::runtime::load_llama2c_tokenizer("/dev/null"),
                    Contains("/dev/null: the tokenizer file must be a regular file, but this is a character device"));
  write_bytes(dir / "cut.bin", good.substr(0, good.size() - 1));
  CHECK_THROWS_WITH(orbit::runtime::load_llama2c_tokenizer((dir / "cut.bin").string()),
                    Contains("cut.bin: truncated in the bytes of piece 262"));
  // Bytes past the last piece: trailing, not a truncated next piece (the message said "truncated" alone).
  write_bytes(dir / "tail.bin", good + "xyz");
  CHECK_THROWS_WITH(
      orbit::runtime::load_llama2c_tokenizer((dir / "tail.bin").string()),
      Contains("tail.bin: truncated in the score of piece 263 (or 3 trailing bytes after the last piece)"));
  CHECK_THROWS_WITH(orbit::runtime::load_llama2c_tokenizer((dir / "tail.bin").string(), 263),
                    Contains("tail.bin: 3 trailing bytes after the model's 263 pieces"));
  std::string negative = good.substr(0, 4) + piece_record(0, "abc");
  const int32_t minus = -5;
  std::memcpy(negative.data() + 8, &minus, 4);
  write_bytes(dir / "neg.bin", negative);
  CHECK_THROWS_WITH(orbit::runtime::load_llama2c_tokenizer((dir / "neg.bin").string()),
                    Contains("neg.bin: piece 0 has length -5"));
  write_bytes(dir / "zero.bin", std::string(4, '\0'));
  CHECK_THROWS_WITH(orbit::runtime::load_llama2c_tokenizer((dir / "zero.bin").string()), Contains("max_token_length"));
}

}  // namespace ORBIT_TEST_FILE
