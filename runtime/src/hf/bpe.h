// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}), as the Rust `tokenizers`
// library (0.22) applies it to one pre-tokenized word:
//   - ignore_merges: a word that is itself in the vocabulary is that one token;
//   - the word is cut into characters (the first without continuing_subword_prefix, the last with
//     end_of_word_suffix); a character outside the vocabulary becomes its "<0xNN>" byte tokens when
//     byte_fallback is set and all of them exist, else unk_token (adjacent unknowns fused into one when
//     fuse_unk), else nothing;
//   - then merges apply lowest rank first, the leftmost among equal ranks, until none applies.
// Words already split are kept, as the Rust library keeps them: a chat server renders and tokenizes a
// conversation's earlier messages again at every request, and most of a text's words come back. Only words of
// up to kCachedWordBytes are kept: a pre-tokenized word is short, while a longer one is a run a pre-tokenizer
// kept whole or, without a pre-tokenizer (SentencePiece-style models), a whole segment of text (a rendered
// conversation up to the next special token), which hardly comes back byte for byte and would fill the cache
// with one entry per request (Window::sync keeps a conversation's tokens itself: sync_encode.h). At most
// cache_words() words and kCacheBytes in all are kept; the cache is emptied when full, so a long-running
// process keeps the words it sees now.
// ORBIT_BPE_CACHE_WORDS, read when the model is built, sets the count (0: no cache).
// Thread-safety: tokenize may be called from several threads at once (the cache takes a lock); the rest is
// immutable once built.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/cut_pairs.h"

namespace orbit::runtime::hf {

class BpeModel {
 public:
  // Throws orbit::Error naming `file` for a model that is not BPE, a merge of unknown tokens, an unk_token
  // outside the vocabulary, or dropout (sampling is not supported).
  static std::unique_ptr<BpeModel> from_json(const nlohmann::json& model, const std::string& file);

  static constexpr std::size_t kCachedWordBytes = 256;
  static constexpr std::size_t kCacheBytes = 16 << 20;
  static constexpr std::size_t kDefaultCacheWords = 10000;

  // Bytes [begin, end) of a word.
  struct Bytes {
    uint32_t begin, end;
  };

  // Appends the ids of `word` to `out`; with `bytes`, also each token's bytes in `word` to it: from the
  // first byte of its first character to the last byte of its last (a character the model dropped, with no
  // byte fallback and no unk_token, belongs to no token; "<0xNN>" tokens of one character each cover the
  // whole character). Begins and ends never decrease from one token to the next, except where byte fallback
  // has some byte pieces, not all, and there is an unk_token: an unknown character's unk then waits, as in
  // the Rust library, for the next character that has a piece of its own (after the byte tokens between).
  void tokenize(std::string_view word, std::vector<int64_t>& out, std::vector<Bytes>* bytes = nullptr) const;

  // Whether the model is prefix-stable over a word: when no token of `word` straddles byte c (a character
  // boundary), tokenize(word[0, c)) is exactly the tokens of `word` that end at or before c. True without
  // ignore_merges (which makes a word that is a token that one token, whatever its prefixes make), without
  // continuing_subword_prefix and end_of_word_suffix (which make a character's symbol depend on where the
  // word ends), and without the unk that waits (above: byte fallback with an unk_token and some of the
  // "<0xNN>" pieces, not all). The argument: word[0, c) starts as the same symbols as word left of c (one per
  // character, byte-fallback tokens or an unk run; a fused unk run across c would straddle c). In `word` every merge
  // joins two adjacent symbols and a joined symbol never splits, so no symbol straddles c at the end only if
  // no merge ever joined a pair across c: each merge is the lowest-ranked (leftmost among equals) pair of
  // the moment, left of c or right of it. Merges right of c leave the symbols left of c as they are, so the
  // left ones happen in `word` in the order the same rule picks them in word[0, c), where only the left
  // pairs exist; `word` stops merging only when no pair anywhere merges, so word[0, c) stops at the same
  // symbols.
  bool prefix_stable() const {
    return !ignore_merges_ && continuing_subword_prefix_.empty() && end_of_word_suffix_.empty() &&
           !(byte_fallback_ && unk_id_ && byte_pieces_ > 0 && byte_pieces_ < 256);
  }
  // The safe-cut rule's part for the model (Tokenizer::encode_rest, orbit/runtime/tokenizer.h): whether no
  // merge can join the symbols of `left` (a word's last character) to those of `right` (the next word's
  // first), in a word where they stand side by side. Each character's symbol at that side is its piece, else
  // its "<0xNN>" piece at that end (byte fallback), else unk; a merge (a, b) joins them only if a's string
  // ends as that left symbol does and b's starts as the right one does (a merged token's string is its
  // parts' strings joined), which the pairs of every merge (collected on first use) rule out. False, too,
  // where both are unk under fuse_unk (one unk would hold both) or the model drops either (no symbol).
  // Only for a prefix_stable() model.
  bool separates(std::string_view left, std::string_view right) const;
  std::size_t cache_words() const { return cache_words_; }
  void set_cache_words(std::size_t words);  // empties the cache; not while another thread tokenizes
  // How many words the cache holds now, and the bytes they count against kCacheBytes.
  std::size_t words_cached() const;
  std::size_t bytes_cached() const;

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
  // Symbols of a word not yet merged; bytes[i]: symbol i's bytes.
  std::vector<Symbol> initial_symbols(std::string_view word, std::vector<Bytes>& bytes) const;
  // Applies the merges, lowest rank first, the leftmost among equal ranks: a heap of (rank, position)
  // entries, as the Rust library's; a word of kRankListSymbols symbols or more, merge_by_rank_lists.
  void merge_all(std::vector<Symbol>& symbols) const;
  // The same merges in the same order for a long word: a list of positions per rank, each sorted once when
  // its rank comes, for a heap of every pair's entry (perf put half of the time encoding 192 KiB words in
  // the heap). Its table of ranks costs 4 bytes a merge per word, which a short word would not repay.
  void merge_by_rank_lists(std::vector<Symbol>& symbols) const;
  static constexpr std::size_t kRankListSymbols = 1024;
  // Merges symbol `pos` into its right neighbour when their pair's merge has `rank`, then offers the pairs
  // it forms with its neighbours (offer(left, right)); false (nothing changed) for a stale entry.
  template <class Offer>
  bool merge_at(std::vector<Symbol>& symbols, std::size_t pos, uint32_t rank, Offer&& offer) const;
  // tokenize without the cache
  void split(std::string_view word, std::vector<int64_t>& out, std::vector<Bytes>& bytes) const;
  struct Split {
    std::vector<int64_t> ids;
    std::vector<Bytes> bytes;
  };

  // The string a character's merges start from at its last (else first) byte; unk: whether it is unk;
  // nullopt when the model drops it.
  std::optional<std::string> symbol_of(std::string_view ch, bool last, bool& unk) const;

  std::unordered_map<std::string, uint32_t> vocab_;
  // Keyed, not indexed: ids need not be dense (Hugging Face accepts any), and a vector sized by the
  // largest id would let one entry with id 2^31 - 1 allocate 16 GiB.
  std::unordered_map<uint32_t, const std::string*> by_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<uint32_t> unk_id_;
  int64_t id_bound_ = 0;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  int byte_pieces_ = 0;  // how many of the 256 "<0xNN>" pieces the vocabulary has
  std::size_t cache_words_ = kDefaultCacheWords;
  std::vector<std::pair<uint32_t, uint32_t>> merge_parts_;  // the merges' (left, right) ids, for the pairs
  mutable std::once_flag pairs_once_;
  mutable CharPairs merge_pairs_;  // separates: every merge's (left, right) characters
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, Split> cache_;  // word -> its tokens
  mutable std::size_t cache_bytes_ = 0;                   // Σ the entries' capacities and map nodes
};

}  // namespace orbit::runtime::hf
