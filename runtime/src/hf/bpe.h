// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}), as the Rust `tokenizers`
// library (0.22) applies it to one pre-tokenized word:
//   - ignore_merges: a word that is itself in the vocabulary is that one token;
//   - the word is cut into characters (the first without continuing_subword_prefix, the last with
//     end_of_word_suffix); a character outside the vocabulary becomes its "<0xNN>" byte tokens when
//     byte_fallback is set and all of them exist, else unk_token (adjacent unknowns fused into one when
//     fuse_unk), else nothing;
//   - then merges apply lowest rank first, the leftmost among equal ranks, until none applies.
// Words already split are kept, as the Rust library keeps them: a chat server renders and tokenizes a
// conversation's earlier messages again at every request, and most of a text's words come back. Without a
// pre-tokenizer (SentencePiece-style models) a "word" is a whole message's text, which comes back too, so
// words of up to kCachedWordBytes are kept: at most cache_words() of them and kCacheBytes of text in all;
// the cache is emptied when full, so a long-running process keeps the words it sees now.
// ORBIT_BPE_CACHE_WORDS, read when the model is built, sets the count (0: no cache).
// Thread-safety: tokenize may be called from several threads at once (the cache takes a lock); the rest is
// immutable once built.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace orbit::runtime::hf {

class BpeModel {
 public:
  // Throws orbit::Error naming `file` for a model that is not BPE, a merge of unknown tokens, an unk_token
  // outside the vocabulary, or dropout (sampling is not supported).
  static std::unique_ptr<BpeModel> from_json(const nlohmann::json& model, const std::string& file);

  static constexpr std::size_t kCachedWordBytes = 64 << 10;
  static constexpr std::size_t kCacheBytes = 16 << 20;
  static constexpr std::size_t kDefaultCacheWords = 10000;

  // Appends the ids of `word` to `out`.
  void tokenize(std::string_view word, std::vector<int64_t>& out) const;
  std::size_t cache_words() const { return cache_words_; }
  void set_cache_words(std::size_t words);  // empties the cache; not while another thread tokenizes

  std::optional<int64_t> token_to_id(const std::string& token) const;
  // The token of `id`, or nullptr for an id the vocabulary lacks.
  const std::string* id_to_token(int64_t id) const;
  // The number of entries in the vocabulary (the Rust library's get_vocab_size).
  int64_t size() const { return static_cast<int64_t>(vocab_.size()); }
  // One past the largest id in the vocabulary (above size() where ids are sparse).
  int64_t id_bound() const { return id_bound_; }

 private:
  struct Symbol {
    uint32_t id;
    int32_t prev, next;
    uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
  };
  struct Merge {
    uint32_t rank, new_id;
  };
  static uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t{a} << 32) | b; }
  std::vector<Symbol> initial_symbols(std::string_view word) const;
  void merge_all(std::vector<Symbol>& symbols) const;
  void split(std::string_view word, std::vector<int64_t>& out) const;  // tokenize without the cache

  std::unordered_map<std::string, uint32_t> vocab_;
  // Keyed, not indexed: ids need not be dense (Hugging Face accepts any), and a vector sized by the
  // largest id would let one entry with id 2^31 - 1 allocate 16 GiB.
  std::unordered_map<uint32_t, const std::string*> by_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<uint32_t> unk_id_;
  int64_t id_bound_ = 0;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::size_t cache_words_ = kDefaultCacheWords;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;  // word -> its ids
  mutable std::size_t cache_bytes_ = 0;                                  // Σ words' bytes and ids' bytes
};

}  // namespace orbit::runtime::hf
