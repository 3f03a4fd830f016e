// llama2.c's tokenizer format and its encoding and decoding rules (orbit/runtime/tokenizer.h).
#include "orbit/runtime/tokenizer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <queue>
#include <unordered_map>

#include "orbit/common/error.h"
#include "orbit/common/file_kind.h"
#include "orbit/runtime/hf_tokenizer.h"
#include "src/cut_pairs.h"

namespace orbit::runtime {

namespace {

constexpr int64_t kBos = 1;
constexpr int64_t kEos = 2;

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte a "<0xNN>" piece stands for, or -1 for any other piece.
int byte_of_piece(const std::string& p) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  const int hi = hex_digit(p[3]);
  const int lo = hex_digit(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class Llama2cTokenizer final : public Tokenizer {
 public:
  Llama2cTokenizer(std::string source, std::vector<std::string> pieces, std::vector<float> scores)
      : source_(std::move(source)), pieces_(std::move(pieces)), scores_(std::move(scores)) {
    for (std::size_t i = 0; i < pieces_.size(); ++i)
      ids_.emplace(pieces_[i], static_cast<int64_t>(i));  // first id wins
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      auto it = ids_.find(name);
      byte_ids_[b] = it == ids_.end() ? -1 : it->second;
    }
    // Words merge apart when no piece holds a space after anything but a space: a merge across a
    // space that follows a non-space would make such a piece (SentencePiece vocabularies split by
    // whitespace; runs of spaces, as in "  ", may still merge).
    for (const std::string& p : pieces_) {
      for (std::size_t k = 1; k < p.size(); ++k)
        words_merge_apart_ = words_merge_apart_ && !(p[k] == ' ' && p[k - 1] != ' ');
    }
  }

  std::vector<int64_t> encode(std::string_view text, bool bos) const override {
    return encode_symbols(text, bos, nullptr, true);
  }

  // Prefix-stable: the symbols before merging are one per character (or its byte pieces) and the dummy
  // prefix, the same for a prefix as for the text left of it, and the merges are BPE's (each the best pair
  // of the moment by a score of the pair alone, the leftmost among equals), for which the argument of
  // runtime/src/hf/bpe.h (BpeModel::prefix_stable) holds; words merged apart merge as the whole would.
  bool prefix_stable() const override { return true; }
  Encoding encode_with_bytes(std::string_view text) const override {
    Encoding out;
    out.ids = encode_symbols(text, false, &out.bytes, true);
    return out;
  }

  // The rest after a cut the safe-cut rule takes (tokenizer.h): the symbols of text[at, end) without the dummy
  // prefix (which stands before byte 0 only), merged alone.
  std::optional<Encoding> encode_rest(std::string_view text, std::size_t at) const override {
    if (!separates(text, at)) return std::nullopt;
    Encoding out;
    out.ids = encode_symbols(text.substr(at), false, &out.bytes, false);
    for (TokenBytes& b : out.bytes) b.begin += at, b.end += at;
    return out;
  }

  // The rest is text[at, end)'s symbols merged alone, whatever stands before it.
  std::optional<int> cut_context(std::string_view text, std::size_t at) const override {
    if (!separates(text, at)) return std::nullopt;
    return 0;
  }

  std::string decode(const std::vector<int64_t>& ids, int64_t previous) const override {
    std::string out;
    for (int64_t id : ids) {
      check_id(id);
      if (id != kBos && id != kEos) {
        const std::string& p = pieces_[static_cast<std::size_t>(id)];
        std::size_t skip = previous == kBos && !p.empty() && p[0] == ' ' ? 1 : 0;
        const int byte = byte_of_piece(p);
        if (byte >= 0 && skip == 0) {
          out.push_back(static_cast<char>(byte));
        } else {
          out.append(p, skip, std::string::npos);
        }
      }
      previous = id;
    }
    return out;
  }

  std::string piece(int64_t id) const override {
    check_id(id);
    return pieces_[static_cast<std::size_t>(id)];
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  int64_t bos_id() const override { return vocab_size() > kBos ? kBos : -1; }
  int64_t eos_id() const override { return vocab_size() > kEos ? kEos : -1; }
  std::string kind() const override { return "llama2c"; }
  std::string source() const override { return source_; }

 private:
  void check_id(int64_t id) const {
    ORBIT_CHECK(id >= 0 && id < vocab_size(), "token id " << id << " is outside the vocabulary [0, " << vocab_size()
                                                          << ") of the tokenizer " << source_);
  }

  // Merges the best pair until none merges: the highest score, the leftmost among equal scores. A heap
  // of candidate pairs over a linked list gives the same sequence of merges as rescanning every pair
  // after each merge, in O(n log n). A candidate is stale when either side has changed since it was
  // pushed (each symbol carries a version).
  // `kept` gets the indices of the symbols left standing, plus `offset`.
  void merge(std::vector<int64_t>& symbols, std::size_t offset, std::vector<std::size_t>& kept) const {
    const std::size_t n = symbols.size();
    if (n < 2) {
      if (n == 1) kept.push_back(offset);
      return;
    }
    std::vector<int64_t> prev(n), next(n);
    std::vector<uint32_t> version(n, 0);
    std::vector<bool> alive(n, true);
    for (std::size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<int64_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
    }
    struct Candidate {
      float score;
      int64_t left, right, merged;
      uint32_t left_version, right_version;
      bool operator<(const Candidate& o) const {  // priority_queue pops the largest
        if (score != o.score) return score < o.score;
        return left > o.left;
      }
    };
    std::priority_queue<Candidate> heap;
    std::string joined;
    auto push = [&](int64_t l, int64_t r) {
      if (l < 0 || r < 0) return;
      joined = pieces_[static_cast<std::size_t>(symbols[l])];
      joined += pieces_[static_cast<std::size_t>(symbols[r])];
      auto it = ids_.find(joined);
      if (it == ids_.end()) return;
      heap.push({scores_[static_cast<std::size_t>(it->second)], l, r, it->second, version[l], version[r]});
    };
    for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<int64_t>(i), static_cast<int64_t>(i + 1));
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || version[c.left] != c.left_version ||
          version[c.right] != c.right_version) {
        continue;
      }
      symbols[c.left] = c.merged;
      ++version[c.left];
      alive[c.right] = false;
      next[c.left] = next[c.right];
      if (next[c.right] >= 0) prev[next[c.right]] = c.left;
      push(prev[c.left], c.left);
      push(c.left, next[c.left]);
    }
    std::vector<int64_t> out;
    for (int64_t i = 0; i >= 0; i = next[i]) {
      out.push_back(symbols[i]);
      kept.push_back(offset + static_cast<std::size_t>(i));
    }
    symbols = std::move(out);
  }

  // encode(text, bos); with `bytes`, each token's bytes too (what the dummy prefix is in belongs to the
  // first character). `dummy` false: no dummy prefix (the rest of a text, encode_rest).
  std::vector<int64_t> encode_symbols(std::string_view text, bool bos, std::vector<TokenBytes>* bytes,
                                      bool dummy) const {
    std::vector<int64_t> symbols;
    std::vector<TokenBytes> at;  // at[i]: symbols[i]'s character
    // BOS takes part in merging, as in llama2.c; a vocabulary too small to hold it has none (bos_id() -1).
    if (bos && bos_id() >= 0) symbols.push_back(kBos), at.push_back({0, 0});
    if (!text.empty() && dummy) {
      auto space = ids_.find(" ");
      ORBIT_CHECK(space != ids_.end(), source_ << ": the vocabulary has no piece \" \" (the dummy prefix)");
      symbols.push_back(space->second);
      at.push_back({0, 0});  // its end: the first character's, below
    }
    // Code points: a byte that is not a continuation byte starts a group, as does any byte after a
    // group of four; continuation bytes join the group before them.
    std::size_t i = 0;
    while (i < text.size()) {
      std::size_t end = i + 1;
      while (end < text.size() && end - i < 4 && is_continuation(static_cast<unsigned char>(text[end]))) ++end;
      if (i == 0 && dummy) at.back().end = end;
      const std::string group(text.substr(i, end - i));
      auto it = ids_.find(group);
      if (it != ids_.end()) {
        symbols.push_back(it->second);
        at.push_back({i, end});
      } else {
        for (char c : group) {
          const int64_t id = byte_ids_[static_cast<unsigned char>(c)];
          ORBIT_CHECK(id >= 0, source_ << ": byte 0x" << std::hex << int(static_cast<unsigned char>(c))
                                       << " has no piece and the vocabulary has no byte-fallback piece for it");
          symbols.push_back(id);
          at.push_back({i, end});
        }
      }
      i = end;
    }
    std::vector<std::size_t> kept;  // the symbols left standing, in order
    const std::vector<int64_t> out = merge_words(symbols, kept);
    if (bytes != nullptr) {
      for (std::size_t k = 0; k < kept.size(); ++k) {
        const std::size_t last = (k + 1 < kept.size() ? kept[k + 1] : symbols.size()) - 1;
        bytes->push_back({at[kept[k]].begin, at[last].end});
      }
    }
    return out;
  }

  // The merged `symbols`; `kept` gets the indices of those left standing.
  std::vector<int64_t> merge_words(const std::vector<int64_t>& symbols, std::vector<std::size_t>& kept) const {
    if (!words_merge_apart_) {
      std::vector<int64_t> all = symbols;
      merge(all, 0, kept);
      return all;
    }
    // Word by word (a word starts at a space after a non-space): the same merges, in memory bounded by the
    // longest word rather than the text (a heap over every pair of a 20 MB text holds gigabytes).
    const int64_t space = ids_.find(" ")->second;
    std::vector<int64_t> out, word;
    out.reserve(symbols.size() / 2 + 1);
    std::size_t word_begin = 0;
    for (std::size_t i = 0; i < symbols.size(); ++i) {
      if (i > 0 && symbols[i] == space && symbols[i - 1] != space && !word.empty()) {
        merge(word, word_begin, kept);
        out.insert(out.end(), word.begin(), word.end());
        word.clear();
        word_begin = i;
      }
      word.push_back(symbols[i]);
    }
    merge(word, word_begin, kept);
    out.insert(out.end(), word.begin(), word.end());
    return out;
  }

  // The symbol string a character's merges start from, at its `last` (else first) byte: the piece of the
  // whole character, else the byte piece of that byte; nullopt where there is none (encode throws there).
  std::optional<std::string_view> symbol_of(std::string_view group, bool last) const {
    const auto it = ids_.find(std::string(group));
    if (it != ids_.end()) return std::string_view(pieces_[static_cast<std::size_t>(it->second)]);
    const int64_t id = byte_ids_[static_cast<unsigned char>(last ? group.back() : group.front())];
    if (id < 0) return std::nullopt;
    return std::string_view(pieces_[static_cast<std::size_t>(id)]);
  }

  // The safe-cut rule (tokenizer.h): `at` splits the text between two code-point groups, and no merge joins
  // a symbol ending as the left group's does to one starting as the right group's.
  bool separates(std::string_view text, std::size_t at) const {
    if (at == 0 || at >= text.size() || is_continuation(static_cast<unsigned char>(text[at]))) return false;
    std::size_t begin = at - 1;  // the group before `at`: a lead byte and at most three continuation bytes
    while (begin > 0 && at - begin < 4 && is_continuation(static_cast<unsigned char>(text[begin]))) --begin;
    if (is_continuation(static_cast<unsigned char>(text[begin]))) return false;  // not one group
    std::size_t end = at + 1;
    while (end < text.size() && end - at < 4 && is_continuation(static_cast<unsigned char>(text[end]))) ++end;
    const auto left = symbol_of(text.substr(begin, at - begin), true);
    const auto right = symbol_of(text.substr(at, end - at), false);
    return left && right && !merge_pairs().holds(*left, *right);
  }

  // Every merge's pair: for each piece, each split of it into two pieces (the merges that make it).
  const CharPairs& merge_pairs() const {
    std::call_once(pairs_once_, [this] {
      for (const std::string& p : pieces_) {
        for (std::size_t k = 1; k < p.size(); ++k) {
          if (ids_.count(p.substr(0, k)) > 0 && ids_.count(p.substr(k)) > 0) pairs_.add(p.substr(0, k), p.substr(k));
        }
      }
    });
    return pairs_;
  }

  std::string source_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int64_t> ids_;
  int64_t byte_ids_[256];
  bool words_merge_apart_ = true;
  mutable std::once_flag pairs_once_;
  mutable CharPairs pairs_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int64_t expected_vocab) {
  check_regular_input(path, "the tokenizer file");  // a missing file, a directory or a device, named as such
  std::ifstream in(path, std::ios::binary);
  ORBIT_CHECK(in.good(), path << ": cannot open the tokenizer file");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ORBIT_CHECK(!in.bad(), path << ": read error");
  std::size_t at = 0;
  auto read_i32 = [&](const char* what, std::size_t index) {
    ORBIT_CHECK(at + 4 <= bytes.size(),
                path << ": truncated in " << what << " of piece " << index << " (at byte " << at << ")");
    int32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    at += 4;
    return v;
  };
  ORBIT_CHECK(bytes.size() >= 4, path << ": truncated: no max_token_length header (" << bytes.size() << " bytes)");
  int32_t max_len;
  std::memcpy(&max_len, bytes.data(), 4);
  at = 4;
  ORBIT_CHECK(max_len > 0,
              path << ": field 'max_token_length' is " << max_len << " (must be > 0): not a llama2.c tokenizer");
  std::vector<std::string> pieces;
  std::vector<float> scores;
  while (at < bytes.size()) {
    const std::size_t index = pieces.size();
    ORBIT_CHECK(expected_vocab <= 0 || static_cast<int64_t>(index) < expected_vocab,
                path << ": " << bytes.size() - at << " trailing bytes after the model's " << expected_vocab
                     << " pieces (is it this model's tokenizer?)");
    float score;
    ORBIT_CHECK(at + 4 <= bytes.size(), path << ": truncated in the score of piece " << index << " (or "
                                             << bytes.size() - at << " trailing bytes after the last piece)");
    std::memcpy(&score, bytes.data() + at, 4);
    at += 4;
    const int32_t len = read_i32("the length", index);
    ORBIT_CHECK(len >= 0 && len <= max_len, path << ": piece " << index << " has length " << len
                                                 << " (must be in [0, max_token_length = " << max_len << "])");
    ORBIT_CHECK(at + static_cast<std::size_t>(len) <= bytes.size(),
                path << ": truncated in the bytes of piece " << index);
    pieces.emplace_back(bytes.data() + at, static_cast<std::size_t>(len));
    scores.push_back(score);
    at += static_cast<std::size_t>(len);
  }
  ORBIT_CHECK(!pieces.empty(), path << ": the tokenizer holds no pieces");
  if (expected_vocab > 0) {
    ORBIT_CHECK(static_cast<int64_t>(pieces.size()) == expected_vocab,
                path << ": the tokenizer has " << pieces.size() << " pieces but the model's vocabulary is "
                     << expected_vocab << ": it belongs to another model");
  }
  return std::make_unique<Llama2cTokenizer>(path, std::move(pieces), std::move(scores));
}

std::string find_tokenizer(const std::string& model_path, int64_t vocab_size) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path model(model_path);
  const bool config = model.filename() == "config.json";  // load_model reads its directory
  if (config || fs::is_directory(model, ec)) {            // a Hugging Face model directory
    const fs::path dir = !config ? model : model.has_parent_path() ? model.parent_path() : fs::path(".");
    const fs::path json = dir / "tokenizer.json";
    return fs::is_regular_file(json, ec) ? json.string() : "";
  }
  if (!fs::is_regular_file(model, ec)) return "";
  const fs::path dir = model.has_parent_path() ? model.parent_path() : fs::path(".");
  for (const std::string& name : {"tok" + std::to_string(vocab_size) + ".bin", std::string("tokenizer.bin")}) {
    const fs::path p = dir / name;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, int64_t expected_vocab) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    ORBIT_CHECK(fs::exists(fs::path(path) / "tokenizer.json", ec),
                path << ": a directory with no tokenizer.json (expected a llama2.c tokenizer .bin, a tokenizer.json "
                        "or a directory holding one)");
    return load_hf_tokenizer(path, expected_vocab);
  }
  if (fs::path(path).extension() == ".json") return load_hf_tokenizer(path, expected_vocab);
  return load_llama2c_tokenizer(path, expected_vocab);
}

}  // namespace orbit::runtime
