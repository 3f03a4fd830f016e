// The tokenizer.json reader (orbit/runtime/hf_tokenizer.h) on its own: TinyStories-656K's reference
// tokenization, special tokens and tokenizer_config.json, loading by directory, incremental decoding
// (orbit/runtime/decode_stream.h) and the errors for components orbit does not read. Parity with Hugging
// Face's library on a whole corpus is test_hf_tokenizer_oracle's.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "orbit/common/error.h"
#include "orbit/runtime/decode_stream.h"
#include "orbit/runtime/hf_tokenizer.h"
#include "src/hf/bpe.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using nlohmann::json;

const fs::path kData = fs::path(ORBIT_TEST_DATA_DIR) / "tokenizers";

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// A copy of a test tokenizer.json with one field replaced, in its own directory.
fs::path edited(const std::string& name, const std::string& key, const json& value) {
  std::ifstream in(kData / "tinystories-656k/tokenizer.json");
  json j = json::parse(in);
  j[key] = value;
  const fs::path dir = fs::temp_directory_path() / ("orbit_hf_tok_" + name);
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  return dir / "tokenizer.json";
}

}  // namespace

TEST_CASE("TinyStories-656K's tokenizer.json gives the reference ids of its README", "[hf_tokenizer]") {
  const auto tok = orbit::runtime::load_hf_tokenizer((kData / "tinystories-656k").string(), 2048);
  CHECK(tok->kind() == "huggingface");
  CHECK(tok->vocab_size() == 2048);
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK(tok->encode("Once upon a time", true) == std::vector<int64_t>{1, 80, 147, 201, 282, 57});
  CHECK(tok->encode("Hello, world! 123 ünïcödé 🙂", true) ==
        std::vector<int64_t>{1, 80, 1443, 410, 555, 271, 12, 13, 14, 80, 0, 66, 0, 55, 0, 56, 0, 80, 0});
  CHECK(tok->encode("  two  spaces\nnewline", true) ==
        std::vector<int64_t>{1, 80, 80, 80, 1209, 80, 415, 53, 1499, 3, 1105, 64, 96, 57});
  CHECK(tok->encode("Once upon a time", false) == std::vector<int64_t>{80, 147, 201, 282, 57});
  // decode() leaves special tokens out; decode_ids can keep them.
  CHECK(tok->decode({1, 80, 147, 201, 282, 57}) == "Once upon a time");
  CHECK(tok->decode_ids({1, 80, 147}, false) == "<|start_story|> On");
  CHECK(tok->is_special(2));
  CHECK_FALSE(tok->is_special(80));
  CHECK(tok->piece(80) == "\xE2\x96\x81");
  CHECK_THROWS_WITH(tok->decode({5000}), Contains("token id 5000 is not in the vocabulary"));
}

TEST_CASE("decode(ids, previous) is the text the ids add after previous", "[hf_tokenizer]") {
  const auto tok = orbit::runtime::load_hf_tokenizer((kData / "tinystories-656k/tokenizer.json").string());
  const std::vector<int64_t> ids = tok->encode("Once upon a time, a girl", false);
  const std::vector<int64_t> tail(ids.begin() + 3, ids.end());
  CHECK(tok->decode({ids.begin(), ids.begin() + 3}) + tok->decode(tail, ids[2]) == tok->decode(ids));
}

TEST_CASE("DecodeStream emits whole characters only and adds up to decode()", "[hf_tokenizer]") {
  for (const char* name : {"gpt2", "minimind", "tinystories-656k"}) {
    const auto tok = orbit::runtime::load_hf_tokenizer((kData / name).string());
    for (const std::string text : {"emoji 🙂😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 and 你好，世界！",
                                   "Café naïve résumé", "plain ASCII text"}) {
      const std::vector<int64_t> ids = tok->encode(text, false);
      orbit::runtime::DecodeStream stream(*tok);
      std::string streamed;
      for (int64_t id : ids) {
        const std::string piece = stream.step(id);
        CHECK(valid_utf8(piece));
        streamed += piece;
      }
      streamed += stream.finish();
      INFO(name << ": " << text);
      CHECK(streamed == tok->decode(ids));
    }
  }
  // Byte-level GPT-2: "🙂" is four byte tokens; nothing comes out before the last.
  const auto gpt2 = orbit::runtime::load_hf_tokenizer((kData / "gpt2").string());
  const std::vector<int64_t> smile = gpt2->encode("🙂", false);
  REQUIRE(smile.size() > 1);
  orbit::runtime::DecodeStream stream(*gpt2);
  for (size_t i = 0; i + 1 < smile.size(); ++i) CHECK(stream.step(smile[i]).empty());
  CHECK(stream.step(smile.back()) == "🙂");
  // A partial character left at the end comes out as U+FFFD, never as broken UTF-8.
  orbit::runtime::DecodeStream cut(*gpt2);
  CHECK(cut.step(smile[0]).empty());
  CHECK(cut.finish() == "\xEF\xBF\xBD");
}

TEST_CASE("tokenizer.json found in a Hugging Face directory and loaded by load_tokenizer", "[hf_tokenizer]") {
  const fs::path dir = kData / "gpt2";
  CHECK(orbit::runtime::find_tokenizer(dir.string(), 50257) == (dir / "tokenizer.json").string());
  const auto tok = orbit::runtime::load_tokenizer((dir / "tokenizer.json").string(), 50257);
  CHECK(tok->kind() == "huggingface");
  CHECK(tok->encode("Hello world", false) == std::vector<int64_t>{15496, 995});
  CHECK(tok->bos_id() == 50256);
  CHECK_THROWS_WITH(orbit::runtime::load_tokenizer(dir.string(), 1000),
                    Contains("past the model's vocabulary of 1000"));
}

TEST_CASE("unsupported tokenizer.json components fail naming the component and the file", "[hf_tokenizer]") {
  using orbit::runtime::load_hf_tokenizer;
  const fs::path n = edited("norm", "normalizer", {{"type", "Lowercase"}});
  CHECK_THROWS_WITH(load_hf_tokenizer(n.string()), Contains(n.string()) && Contains("normalizer 'Lowercase'"));
  const fs::path p = edited("pre", "pre_tokenizer", {{"type", "Whitespace"}});
  CHECK_THROWS_WITH(load_hf_tokenizer(p.string()), Contains(p.string()) && Contains("pre_tokenizer 'Whitespace'"));
  const fs::path d = edited("dec", "decoder", {{"type", "WordPiece"}});
  CHECK_THROWS_WITH(load_hf_tokenizer(d.string()), Contains(d.string()) && Contains("decoder 'WordPiece'"));
  const fs::path m = edited("model", "model", {{"type", "Unigram"}, {"vocab", json::array()}});
  CHECK_THROWS_WITH(load_hf_tokenizer(m.string()), Contains(m.string()) && Contains("model 'Unigram'"));
  const fs::path s = edited("post", "post_processor", {{"type", "Mystery"}});
  CHECK_THROWS_WITH(load_hf_tokenizer(s.string()), Contains("post_processor 'Mystery'"));
  const fs::path r = edited("regex", "pre_tokenizer",
                            {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}});
  CHECK_THROWS_WITH(load_hf_tokenizer(r.string()), Contains("does not compile"));
  CHECK_THROWS_WITH(load_hf_tokenizer((kData / "missing.json").string()), Contains("cannot open"));
  // A Replace matching the empty string: the Rust library puts its content at every empty match, which this
  // reader does not (it encoded otherwise, silently).
  for (const json& pattern : {json{{"String", ""}}, json{{"Regex", "a*"}}}) {
    const fs::path e = edited("empty", "normalizer", {{"type", "Replace"}, {"pattern", pattern}, {"content", "e"}});
    CHECK_THROWS_WITH(load_hf_tokenizer(e.string()), Contains("Replace pattern that matches the empty string"));
  }
  for (const char* name : {"norm", "pre", "dec", "model", "post", "regex", "empty"})
    fs::remove_all(fs::temp_directory_path() / (std::string("orbit_hf_tok_") + name));
}

TEST_CASE("text that is not UTF-8 is refused", "[hf_tokenizer]") {
  const auto tok = orbit::runtime::load_hf_tokenizer((kData / "gpt2").string());
  CHECK_THROWS_WITH(tok->encode(std::string("ab\xFF"), false), Contains("not valid UTF-8"));
}

TEST_CASE("tokenizer.json read from memory, and deep nesting refused instead of overflowing the stack",
          "[hf_tokenizer]") {
  std::ifstream in(kData / "tinystories-656k/tokenizer.json", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto from_memory = orbit::runtime::parse_hf_tokenizer(text, "", "memory.json", 2048);
  CHECK(from_memory->encode("Once upon a time", false) == std::vector<int64_t>{80, 147, 201, 282, 57});
  CHECK_THROWS_WITH(orbit::runtime::parse_hf_tokenizer("[1]", "", "memory.json"),
                    Contains("memory.json: not a JSON object"));
  CHECK_THROWS_WITH(orbit::runtime::parse_hf_tokenizer(text, "{", "memory.json"),
                    Contains("memory.json (tokenizer_config.json): not valid JSON"));
  // 100,000 nested arrays as the decoder: reading copied the value recursively and crashed.
  const std::size_t depth = 100000;
  const std::string deep =
      text.substr(0, text.rfind('}')) + R"(, "decoder": )" + std::string(depth, '[') + std::string(depth, ']') + "}";
  const fs::path dir = fs::temp_directory_path() / "orbit_hf_tok_deep";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << deep;
  CHECK_THROWS_WITH(orbit::runtime::load_hf_tokenizer((dir / "tokenizer.json").string()),
                    Contains("tokenizer.json: JSON nests deeper than 128 levels"));
  fs::remove_all(dir);
}

TEST_CASE("malformed post-processors are refused naming the file", "[hf_tokenizer]") {
  std::ifstream in(kData / "tinystories-656k/tokenizer.json");
  const json original = json::parse(in);
  const auto refused = [&](const char* key, const json& value) {
    json j = original;
    j[key] = value;
    try {
      orbit::runtime::parse_hf_tokenizer(j.dump(), "", "edited.json");
    } catch (const orbit::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // A template's special token without "ids" was read past the end of the object (a crash the fuzzer found).
  const json no_ids = {{"type", "TemplateProcessing"},
                       {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
                       {"special_tokens", {{"<s>", {{"id", "<s>"}}}}}};
  CHECK_THAT(refused("post_processor", no_ids), Contains("edited.json: post_processor TemplateProcessing: special "
                                                         "token '<s>' has no list 'ids'"));
  const json cls = {{"type", "RobertaProcessing"}, {"cls", "<s>"}, {"sep", {"</s>", 2}}};
  CHECK_THAT(refused("post_processor", cls), Contains("'cls' is not a [token, id] pair"));
}

TEST_CASE("optional fields of the wrong type and vocabulary ids given twice are refused naming them",
          "[hf_tokenizer]") {
  std::ifstream in(kData / "tinystories-656k/tokenizer.json");
  const json original = json::parse(in);
  const auto refused = [](const json& j) {
    try {
      orbit::runtime::parse_hf_tokenizer(j.dump(), "", "edited.json");
    } catch (const orbit::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // A "yes" where a boolean belongs was read as the default without a word.
  json j = original;
  j["model"]["byte_fallback"] = "yes";
  CHECK_THAT(refused(j), Contains("edited.json") && Contains("field 'byte_fallback' is not a boolean: \"yes\""));
  j = original;
  j["model"]["byte_fallback"] = nullptr;  // null is "not set", as the Python library reads it
  CHECK(refused(j) == "accepted");
  j = original;
  j["model"]["continuing_subword_prefix"] = 7;
  CHECK_THAT(refused(j), Contains("field 'continuing_subword_prefix' is not a string: 7"));
  j = original;
  j["added_tokens"] = json::array({{{"content", "<x>"}, {"special", 1}}});
  CHECK_THAT(refused(j), Contains("edited.json: added_tokens: field 'special' is not a boolean"));
  j = original;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", "false"}};
  CHECK_THAT(refused(j), Contains("pre_tokenizer ByteLevel: field 'add_prefix_space' is not a boolean"));
  // Two pieces with one id: which one decoding it gives depended on the order of a hash table.
  const json twice = {
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"c", 1}}}, {"merges", json::array()}}}};
  CHECK_THAT(refused(twice), Contains("edited.json") && Contains("have the same id 1"));
}

TEST_CASE("a vocabulary with sparse ids loads without sizing anything by its largest id", "[hf_tokenizer]") {
  // One id at 2^31 - 1: a table indexed by id took 16 GiB here (found by fuzz_hf_tokenizer).
  const json tok = {
      {"model",
       {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 2147483647}, {"ab", 5}}}, {"merges", json::array({"a b"})}}}};
  const auto tokenizer = orbit::runtime::parse_hf_tokenizer(tok.dump(), "", "sparse.json");
  CHECK(tokenizer->encode("ab", false) == std::vector<int64_t>{5});
  CHECK(tokenizer->encode("ba", false) == std::vector<int64_t>{2147483647, 0});
  CHECK(tokenizer->decode_ids({2147483647, 5}, false) == "b ab");  // no decoder: tokens joined by spaces
  CHECK(tokenizer->vocab_size() == 2147483648);  // one past the largest id, as the model's vocab must cover it
  CHECK_THROWS_WITH(tokenizer->piece(3), Contains("sparse.json: token id 3 is not in the vocabulary"));
}

TEST_CASE("the BPE word cache gives the ids the merges give, at any capacity", "[hf_tokenizer]") {
  // Byte-level words (GPT-2's pre-tokenizer splits at spaces) and SentencePiece-style ones (the whole text
  // is one word): every word split with the cache, a cache of 3 (emptied again and again), and none.
  for (const char* name : {"gpt2", "tinystories-656k"}) {
    INFO(name);
    std::ifstream in(kData / name / "tokenizer.json");
    const json model = json::parse(in)["model"];
    const auto cached = orbit::runtime::hf::BpeModel::from_json(model, name);
    const auto small = orbit::runtime::hf::BpeModel::from_json(model, name);
    const auto plain = orbit::runtime::hf::BpeModel::from_json(model, name);
    CHECK(cached->cache_words() == orbit::runtime::hf::BpeModel::kDefaultCacheWords);
    small->set_cache_words(3);
    plain->set_cache_words(0);
    const std::string space = std::string(name) == "gpt2" ? "\u0120" : "\u2581";
    std::vector<std::string> words;
    for (const char* w : {"hello", "world", "story", "tokenizer", "Lily", "played", "outside", "a", "the"}) {
      words.push_back(w);
      words.push_back(space + w);
    }
    words.push_back(std::string(orbit::runtime::hf::BpeModel::kCachedWordBytes + 7, 'a'));  // never cached
    for (int round = 0; round < 3; ++round) {  // the second and third rounds hit the caches
      for (const std::string& w : words) {
        std::vector<int64_t> a, b, c;
        cached->tokenize(w, a);
        small->tokenize(w, b);
        plain->tokenize(w, c);
        CHECK(a == c);
        CHECK(b == c);
        CHECK_FALSE(c.empty());
      }
    }
    // Ids are appended after what `out` holds, from the cache as from the merges.
    std::vector<int64_t> out = {-1};
    cached->tokenize("hello", out);
    std::vector<int64_t> expected = {-1};
    plain->tokenize("hello", expected);
    CHECK(out == expected);
  }
}

TEST_CASE("ORBIT_BPE_CACHE_WORDS sets the cache and is refused naming itself when malformed", "[hf_tokenizer]") {
  std::ifstream in(kData / "gpt2/tokenizer.json");
  const json model = json::parse(in)["model"];
  setenv("ORBIT_BPE_CACHE_WORDS", "12", 1);
  CHECK(orbit::runtime::hf::BpeModel::from_json(model, "gpt2")->cache_words() == 12);
  for (const char* bad : {"", "-1", "ten", "12x", "100000001"}) {
    setenv("ORBIT_BPE_CACHE_WORDS", bad, 1);
    CHECK_THROWS_WITH(orbit::runtime::hf::BpeModel::from_json(model, "gpt2"), Contains("ORBIT_BPE_CACHE_WORDS"));
  }
  unsetenv("ORBIT_BPE_CACHE_WORDS");
}

TEST_CASE("the BPE word cache keeps short words and no long ones", "[hf_tokenizer]") {
  // A pre-tokenized word is short; a long one (a whole segment of text without a pre-tokenizer, as
  // TinyStories-656K's, or a long run one keeps whole) hardly comes back, and kept it would take an entry per
  // request. A 300-byte word is past the bound (kCachedWordBytes) and is split anew each time, giving the same ids.
  using orbit::runtime::hf::BpeModel;
  for (const char* name : {"gpt2", "tinystories-656k"}) {
    INFO(name);
    std::ifstream in(kData / name / "tokenizer.json");
    const json model = json::parse(in)["model"];
    const auto bpe = BpeModel::from_json(model, name);
    REQUIRE(bpe->words_cached() == 0);
    std::string sentence;
    while (sentence.size() < 300) sentence += "Once upon a time there was a little girl named Lily. ";
    sentence.resize(300);
    std::vector<int64_t> first, again;
    bpe->tokenize(sentence, first);
    CHECK(bpe->words_cached() == 0);
    CHECK(bpe->bytes_cached() == 0);
    bpe->tokenize(sentence, again);
    CHECK(again == first);
    CHECK(bpe->words_cached() == 0);
    std::vector<int64_t> word;
    bpe->tokenize("hello", word);
    CHECK(bpe->words_cached() == 1);
    CHECK(bpe->bytes_cached() > 0);
    bpe->tokenize(std::string(BpeModel::kCachedWordBytes, 'a'), word);  // at the bound: kept
    CHECK(bpe->words_cached() == 2);
  }
}

}  // namespace ORBIT_TEST_FILE
