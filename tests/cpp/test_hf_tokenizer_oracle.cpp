// orbit's tokenizer.json reader against Hugging Face's own `tokenizers` (the Rust library, through the
// @anush008/tokenizers Node binding; tests/node/tokenizer_oracle.mjs). For every tokenizer below, the
// corpus (tests/data/tokenizers/corpus.json) is encoded with and without special tokens and decoded keeping
// and skipping special tokens, and id lists (prefixes and suffixes of the encodings, which cut characters
// in half, and random ids) are decoded: ids and text must be identical.
//
// Tokenizers: the three files in tests/data/tokenizers (GPT-2, MiniMind, TinyStories-656K) and variants of
// them built here that switch on the other supported components (Qwen2 and Llama-3 split regexes, NFC,
// ignore_merges, Digits, Metaspace, byte fallback, added-token flags).
//
// Exit status 77 (CTest SKIP_RETURN_CODE: reported as skipped) where node or the binding is missing:
// scripts/test.sh installs it into tests/node/node_modules.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/runtime/hf_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kSkip = 77;
const fs::path kData = fs::path(ORBIT_TEST_DATA_DIR) / "tokenizers";
const fs::path kNodeDir = ORBIT_NODE_DIR;

const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  ORBIT_CHECK(out.good(), p.string() << ": cannot write");
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

json byte_level(bool use_regex, bool add_prefix_space) {
  return {
      {"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json split_then_bytes(const char* pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
            byte_level(false, false)}}};
}

json added(const std::string& content, bool special, bool normalized) {
  return {{"id", 0},         {"content", content},       {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

struct Case {
  std::string name;
  fs::path file;  // a tokenizer.json
};

// The tokenizers under test: the committed files, and variants written into `dir`.
std::vector<Case> cases(const fs::path& dir) {
  std::vector<Case> out = {{"gpt2", kData / "gpt2/tokenizer.json"},
                           {"minimind", kData / "minimind/tokenizer.json"},
                           {"tinystories-656k", kData / "tinystories-656k/tokenizer.json"}};
  const auto variant = [&](const std::string& name, const json& j) {
    fs::create_directories(dir / name);
    write_file(dir / name / "tokenizer.json", j.dump());
    out.push_back({name, dir / name / "tokenizer.json"});
  };
  const json minimind = read_json(kData / "minimind/tokenizer.json");
  json v = minimind;
  v["normalizer"] = {{"type", "NFC"}};
  v["pre_tokenizer"] = split_then_bytes(kQwen2Split);
  variant("minimind+qwen2-split+nfc", v);
  v = minimind;
  v["pre_tokenizer"] = split_then_bytes(kLlama3Split);
  v["model"]["ignore_merges"] = true;
  variant("minimind+llama3-split+ignore_merges", v);
  v = minimind;
  v["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true, false)}}};
  variant("minimind+digits", v);

  json gpt2 = read_json(kData / "gpt2/tokenizer.json");
  gpt2["pre_tokenizer"] = byte_level(true, true);
  json mask = added("<mask>", true, false);
  mask["lstrip"] = true;
  json hello = added("hello", false, false);
  hello["single_word"] = true;
  json world = added("world", false, true);
  world["rstrip"] = true;
  gpt2["added_tokens"].push_back(mask);
  gpt2["added_tokens"].push_back(hello);
  gpt2["added_tokens"].push_back(world);
  gpt2["added_tokens"].push_back(added("<|im_start|>", true, true));
  variant("gpt2+prefix-space+added-flags", gpt2);

  const json stories = read_json(kData / "tinystories-656k/tokenizer.json");
  v = stories;
  v["normalizer"] = nullptr;
  v["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
  v["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
  variant("tinystories+metaspace", v);
  v = stories;
  const int64_t base = static_cast<int64_t>(v["model"]["vocab"].size());
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v["model"]["vocab"][name] = base + b;
  }
  variant("tinystories+byte-fallback", v);
  // Merges listed out of rank order (the Rust library takes any order): a merge's new pairs can then rank
  // below it, which a long word's rank lists (hf/bpe.h, merge_by_rank_lists) must still merge first.
  v = stories;
  json& merges = v["model"]["merges"];
  std::mt19937 shuffle(5);
  std::shuffle(merges.begin(), merges.end(), shuffle);
  variant("tinystories+shuffled-merges", v);
  // One merge ranked below the merge that makes its left token: in "ababab" each "ab" then joins the "a" after
  // it before the next "a b" merges (the long "abab..." text), which rank lists that merged a rank's every
  // position first would not.
  v = stories;
  v["model"]["vocab"]["aba"] = base;
  json reordered = json::array({"ab a", "a b"});
  for (const json& m : stories["model"]["merges"])
    if (m != "a b") reordered.push_back(m);
  v["model"]["merges"] = reordered;
  variant("tinystories+merge-below-its-part", v);
  return out;
}

// Words longer than BpeModel::kRankListSymbols (1,024) symbols, which merge by rank lists instead of a heap:
// story text (one word for TinyStories, without a pre-tokenizer), and runs a pre-tokenizer keeps whole
// (letters, digits, spaces, a repeated pair).
json long_texts() {
  std::string story;
  while (story.size() < 6000) story += "Once upon a time, there was a little girl named Lily. She liked to play. ";
  std::mt19937 rng(3);
  std::string letters(5000, 'a'), digits(3000, '0');
  for (char& c : letters) c = static_cast<char>('a' + rng() % 26);
  for (char& c : digits) c = static_cast<char>('0' + rng() % 10);
  std::string pairs;
  while (pairs.size() < 4000) pairs += "ab";
  return json::array({story, letters, digits, std::string(3000, ' '), pairs, "x" + std::string(2500, ' ') + "y"});
}

// Id lists to decode: halves of each encoding (cutting characters apart), random ids, random low ids.
json id_lists(const json& encodings, int64_t vocab, uint32_t seed) {
  json lists = json::array();
  for (const json& e : encodings) {
    const std::vector<int64_t> ids = e["ids_plain"];
    for (size_t cut = 1; cut < ids.size(); cut += std::max<size_t>(1, ids.size() / 3)) {
      lists.push_back(std::vector<int64_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut)));
      lists.push_back(std::vector<int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(cut), ids.end()));
    }
  }
  std::mt19937 rng(seed);
  for (int n = 0; n < 200; ++n) {
    std::vector<int64_t> ids(1 + rng() % 8);
    const int64_t range = n % 2 == 0 ? vocab : std::min<int64_t>(vocab, 400);
    for (auto& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(range));
    lists.push_back(ids);
  }
  return lists;
}

// Runs the oracle on `request`; the parsed answer, or nullopt-like null when it failed.
json run_oracle(const fs::path& tokenizer, const json& request, const fs::path& dir, int* status) {
  const fs::path req = dir / "request.json", answer = dir / "answer.json";
  write_file(req, request.dump());
  const std::string cmd = "node " + shell_quote((kNodeDir / "tokenizer_oracle.mjs").string()) + " " +
                          shell_quote(tokenizer.string()) + " " + shell_quote(req.string()) + " > " +
                          shell_quote(answer.string());
  const int rc = std::system(cmd.c_str());
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (*status != 0) return nullptr;
  return read_json(answer);
}

struct Tally {
  size_t strings = 0, ids = 0, failures = 0;
};

void expect(bool ok, Tally& t, const std::string& what) {
  if (ok) return;
  if (++t.failures <= 20) std::cerr << "MISMATCH " << what << "\n";
}

std::string show(const json& j) { return j.dump(-1, ' ', true); }

Tally compare(const Case& c, const json& texts, const fs::path& dir, int* status) {
  const auto tok = orbit::runtime::load_hf_tokenizer(c.file.string());
  // First pass: the encodings alone, to derive id lists from them.
  json request = {{"texts", texts}, {"id_lists", json::array()}};
  const json first = run_oracle(c.file, request, dir, status);
  if (first.is_null()) return {};
  request["id_lists"] = id_lists(first["encode"], tok->vocab_size(), 23);
  const json ref = run_oracle(c.file, request, dir, status);
  if (ref.is_null()) return {};
  Tally t;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i];
    const json& r = ref["encode"][i];
    const std::string where = c.name + " text " + show(texts[i]);
    const std::vector<int64_t> ids = tok->encode(text, true), plain = tok->encode(text, false);
    expect(json(ids) == r["ids"], t, where + ": ids " + json(ids).dump() + " vs HF " + r["ids"].dump());
    expect(json(plain) == r["ids_plain"], t,
           where + ": ids (no specials) " + json(plain).dump() + " vs HF " + r["ids_plain"].dump());
    const std::vector<int64_t> hf_ids = r["ids"];
    expect(tok->decode_ids(hf_ids, false) == r["text"], t,
           where + ": decoded " + show(tok->decode_ids(hf_ids, false)) + " vs HF " + show(r["text"]));
    expect(
        tok->decode_ids(hf_ids, true) == r["text_skip"], t,
        where + ": decoded (skip specials) " + show(tok->decode_ids(hf_ids, true)) + " vs HF " + show(r["text_skip"]));
    t.strings += 1;
    t.ids += ids.size() + plain.size();
  }
  for (size_t i = 0; i < request["id_lists"].size(); ++i) {
    const std::vector<int64_t> ids = request["id_lists"][i];
    const json& r = ref["decode"][i];
    const std::string where = c.name + " decode " + json(ids).dump();
    expect(tok->decode_ids(ids, false) == r["text"], t,
           where + ": " + show(tok->decode_ids(ids, false)) + " vs HF " + show(r["text"]));
    expect(tok->decode_ids(ids, true) == r["text_skip"], t,
           where + " (skip specials): " + show(tok->decode_ids(ids, true)) + " vs HF " + show(r["text_skip"]));
    t.ids += ids.size();
  }
  return t;
}

}  // namespace

int main() {
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    std::cout << "SKIPPED: node is not installed (scripts/test.sh installs Node.js and the oracle package)\n";
    return kSkip;
  }
  if (!fs::exists(kNodeDir / "node_modules" / "@anush008" / "tokenizers")) {
    std::cout << "SKIPPED: " << (kNodeDir / "node_modules").string()
              << " has no @anush008/tokenizers (npm install --prefix tests/node; scripts/test.sh does)\n";
    return kSkip;
  }
  const fs::path dir = fs::temp_directory_path() / ("orbit_hf_oracle_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  json texts = read_json(kData / "corpus.json")["texts"];
  for (const json& t : long_texts()) texts.push_back(t);
  size_t failures = 0, strings = 0, ids = 0;
  for (const Case& c : cases(dir)) {
    int status = 0;
    Tally t;
    try {
      t = compare(c, texts, dir, &status);
    } catch (const std::exception& e) {
      std::cerr << "FAIL " << c.name << ": " << e.what() << "\n";
      ++failures;
      continue;
    }
    if (status == 3) {
      std::cout << "SKIPPED: the Node binding of tokenizers does not load here\n";
      fs::remove_all(dir);
      return kSkip;
    }
    if (status != 0) {
      std::cerr << "FAIL " << c.name << ": the oracle exited with status " << status << "\n";
      ++failures;
      continue;
    }
    std::cout << (t.failures ? "FAIL " : "ok   ") << c.name << ": " << t.strings << " strings, " << t.ids
              << " ids compared, " << t.failures << " mismatches\n";
    failures += t.failures;
    strings += t.strings;
    ids += t.ids;
  }
  fs::remove_all(dir);
  std::cout << (failures ? "FAILED" : "PASSED") << ": " << strings << " strings and " << ids
            << " ids compared with Hugging Face tokenizers, " << failures << " mismatches\n";
  return failures ? 1 : 0;
}
