// Token masks: which tokens of a vocabulary keep a constrained text a valid prefix, computed by walking a
// trie of the vocabulary's byte strings with the matcher, and cached per matcher state.
//
// The trie is stored in preorder, flat: node i has the byte on the edge into it, its depth, the index just
// past its subtree, and the ids of the tokens whose bytes end there. A walk keeps one matcher state per
// depth; a byte the state refuses skips the node's whole subtree (every token below shares that prefix):
//
//   i:      0     1 '"'   2 'a'   3 'b'   4 ','   5 ' '
//   depth:  0     1       2       2       1       1        tokens: '"a' at 2, '"b' at 3, ',' at 4, ' ' at 5
//   end:    6     4       3       4       5       6
//
// A mask's cost is the trie nodes the walk visits: a few for structural states (after '{' only '"', '}'
// and ' ' survive the first byte), most of the trie inside a string. Masks are cached by the state's key
// with the vocabulary's longest token as horizon (matcher.h: key), so a string's body costs one walk per
// context, not one per length.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "constrain/matcher.h"

namespace orbit::constrain {

// The tokens of a vocabulary as a preorder trie (see above).
struct PreorderTrie {
  std::vector<uint8_t> byte;
  std::vector<uint16_t> depth;
  std::vector<int32_t> end;
  std::vector<int32_t> token_begin;  // node i's tokens: tokens[token_begin[i], token_begin[i + 1])
  std::vector<int32_t> tokens;
  int64_t max_len = 0;

  // The trie of `ids` (their bytes in `bytes`, non-empty).
  static PreorderTrie of(const std::vector<std::optional<std::string>>& bytes, std::vector<int32_t> ids);
};

// A vocabulary's tries. Besides the trie of every token, the trie of the tokens that are not plain string
// content: a plain token is one a JSON string's body takes whole and stays in its body after (printable
// ASCII but '"' and '\\', and whole UTF-8 characters). Inside a string at least its minLength long, a plain
// token is allowed exactly when its characters fit under maxLength, and it leaves the fewest bytes to write
// as they were; so a mask there walks only the other trie.
class VocabTrie {
 public:
  // bytes[id]: the token's bytes; nullopt or empty: not in the trie (never allowed).
  explicit VocabTrie(const std::vector<std::optional<std::string>>& bytes);

  int64_t vocab_size() const { return vocab_size_; }
  int64_t max_token_bytes() const { return all_.max_len; }
  std::size_t nodes() const { return all_.byte.size(); }
  // Appends the tokens whose bytes are a prefix of `s` (shortest first).
  void prefixes_of(std::string_view s, std::vector<int32_t>& out) const;
  // Appends the tokens whose bytes begin with `s` (in byte order).
  void extensions_of(std::string_view s, std::vector<int32_t>& out) const;
  // The tokens that hold at least `quotes` '"' bytes (1 to kMaxQuotes; more: those of kMaxQuotes), and with
  // `commas` those that hold a ',' too: ids ascending, each once. Built with the trie, so a mask step reads
  // them without copying.
  static constexpr int kMaxQuotes = 4;
  const std::vector<int32_t>& quotes_or_commas(int quotes, bool commas) const;
  // The tokens that hold a '\\' (ids ascending).
  const std::vector<int32_t>& backslashes() const { return backslashes_; }
  // The tokens that hold a '{' with a '"' after it: those that may open an object and a key in it (ids
  // ascending).
  const std::vector<int32_t>& braced_quotes() const { return braced_quotes_; }
  // The tokens that hold a '"' but are not one '"' after printable ASCII: two or more '"', a '\\', or a byte
  // outside [0x20, 0x80) before the '"' (ids ascending). Those left out write a key's text, up to their one
  // quote, as json_quote() does (KeyLog::one_quote).
  const std::vector<int32_t>& quoted_apart() const { return quoted_apart_; }
  // Where a token's quote may open a key (KeyLog::one_quote's outside objects), its bytes after the quote write
  // that key: quoted_tails() are the tokens of one '"' after printable ASCII, without a '\\', with bytes after
  // the quote, none of them a control byte (below 0x20): each writes its key as json_quote() does, which
  // leaves bytes from 0x80 up as they are; tails_apart() those quoted_apart() lists and those of one '"' with
  // a control byte after it (ids ascending). A token of one '"' as its last byte is in neither.
  const std::vector<int32_t>& quoted_tails() const { return quoted_tails_; }
  // The tokens that, read from a JSON string's body (not mid-escape), end that string with a '"' and open
  // another with a later '"' (`","`, `.","`, `"},{"`), each with the offset of the bytes after the quote that
  // opens it (its tail: `","` 3), or kOpenedWalk where the string it opens also closes within the token or
  // holds a '\\' (`":"x"`, `","\\`): ids ascending. A token that opens no string from a body (one that
  // ends it with its only '"', `…"`, `\\"`, or escapes every quote) is not listed.
  static constexpr int32_t kOpenedWalk = -1;
  const std::vector<std::pair<int32_t, int32_t>>& body_openers() const { return body_openers_; }
  // Whether token `id`, read from a JSON string's body (not mid-escape), ends that string with its first '"'
  // after bytes with no '\\' and no control byte, and opens no other string but, right after a ':' (and
  // whitespace), a value that it may close and not go past: `…"`, `":"`, `": "x"}`; not `"}, "a`,
  // `":"","`. Inside a key its first quote is then the only one that may be refused (KeyLog::one_quote).
  bool closes_only(int32_t id) const { return closes_only_[static_cast<std::size_t>(id)] != 0; }
  // Whether token `id` holds a '"' and, read from a JSON string's body (not mid-escape), escapes each of them
  // with a '\\' (`\"`, `x\":`): it writes no quote that ends the string.
  bool quotes_escaped(int32_t id) const { return quotes_escaped_[static_cast<std::size_t>(id)] != 0; }
  const std::vector<int32_t>& tails_apart() const { return tails_apart_; }
  // The most bytes a token writes up to and with its last '"' (0: no token holds one): a token that begins with
  // bytes ending in a '"' is at least that long only where they are at most this many.
  int64_t quote_reach() const { return quote_reach_; }
  // The bytes of token `id` (0 for one not in the trie); `id` in [0, vocab_size()).
  int64_t length(int32_t id) const { return lengths_[static_cast<std::size_t>(id)]; }

 private:
  friend class MaskCache;
  // The child of trie node `node` on byte `c`, or 0 (the root, no node's child) where it has none. The root's
  // children are looked up in root_children_; a deeper node's by reading its children in order.
  std::size_t child_of(std::size_t node, char c) const;

  int64_t vocab_size_ = 0;
  PreorderTrie all_;
  PreorderTrie not_plain_;
  std::vector<uint64_t> plain_bits_;
  int64_t plain_count_ = 0;
  std::vector<uint8_t> plain_chars_;    // per id: the characters of a plain token (0: not plain)
  std::vector<uint16_t> lengths_;       // per id: its bytes (0: not in the trie)
  std::vector<int32_t> root_children_;  // per byte: the root's child on it in all_ (0: none)
  // [2 (k - 1) + commas]: the tokens with at least k '"' bytes, and with `commas` those with a ',' besides
  std::vector<std::vector<int32_t>> quoted_;
  std::vector<int32_t> backslashes_;
  std::vector<int32_t> braced_quotes_;
  std::vector<int32_t> quoted_apart_;
  std::vector<int32_t> quoted_tails_;
  std::vector<int32_t> tails_apart_;
  std::vector<std::pair<int32_t, int32_t>> body_openers_;  // (id, its tail's offset or kOpenedWalk)
  std::vector<uint8_t> closes_only_;                       // per id: closes_only()
  std::vector<uint8_t> quotes_escaped_;                    // per id: quotes_escaped()
  int64_t quote_reach_ = 0;
};

// One state's mask. `need` is the fewest bytes that complete the text from the state the mask was computed
// for (0: complete). The budget works in differences from it, which hold for every state of the same key
// (matcher.h: key) even where `need` itself differs (a string far below its minLength): `differs` lists the
// allowed tokens after which the fewest bytes left change by other than 0, as (change, token); every other
// allowed token leaves them as they were. When more than kMaxDiffers tokens change it (a string below its
// minLength, a key of a pattern such as ^[a-z]{40}$: each token shortens what is left by its own length), the
// list is kept instead of the tokens whose change is other than minus their bytes (`by_length`: every other
// allowed token of n bytes changes them by -n), where those are at most kMaxDiffers; where they are more as
// well, the list is dropped (differs_complete false) and a budget check asks the matcher per token. min_delta
// and max_delta bound the change. An entry's differs are sorted by token (MaskCache::compute sorts them), so
// delta() finds one in O(log n).
//
// The allowed tokens are held as a bitset of the vocabulary (dense), or, where fewer bytes hold them, as their
// ids ascending (ids; dense then empty): a state inside a declared key allows a handful of 128k tokens, and a
// 16 KB bitset for each such state made a schema of 200 declared 40-letter keys need ~75 MB of masks, past
// MaskCache's bound, so that a second decode of it found none cached. copy_bits writes either as a bitset.
struct MaskEntry {
  static constexpr std::size_t kMaxDiffers = 4096;
  std::vector<uint64_t> dense;  // the bitset while computing; left empty where ids holds the mask
  std::vector<int32_t> ids;
  std::size_t words = 0;  // the bitset's 64-bit words: (vocabulary size + 63) / 64
  int64_t allowed = 0;
  bool complete = false;
  int64_t need = 0;
  std::vector<std::pair<int64_t, int32_t>> differs;
  bool differs_complete = true;
  bool by_length = false;  // an allowed token `differs` does not list changes the fewest bytes by minus its bytes
  int64_t min_delta = std::numeric_limits<int64_t>::max();
  int64_t max_delta = std::numeric_limits<int64_t>::min();

  // The change in the fewest bytes left after allowed token `id` of `length` bytes: its entry in `differs`, else
  // 0, or with by_length -length. Only where differs_complete.
  int64_t delta(int32_t id, int64_t length) const;
  // The change after an allowed token of `length` bytes that `differs` does not list: 0, or with by_length -length.
  int64_t unlisted(int64_t length) const { return by_length ? -length : 0; }
  // Replaces `out` with the allowed tokens as a bitset of `words` words.
  void copy_bits(std::vector<uint64_t>& out) const;
  // Keeps the allowed tokens as ids where that takes fewer bytes than the bitset (MaskCache::compute's last step).
  void compact();
};

struct ByLengthDiffers;

// The masks of one grammar over one vocabulary. Thread-safe: lookups lock; a miss computes outside the lock
// (two threads may both compute it; the first insert wins). Holds at most max_bytes, counted by
// entry_bytes (every mask's key, bits or ids and differs list, and the map's node). When a new mask would
// pass that, a quarter of max_bytes is freed by dropping the masks whose keys hash lowest (make_room): the
// masks kept are a fixed set, unrelated to when each was computed or read, so a decode that cycles through
// more masks than fit (the same schema decoded again) finds that set each time, where emptying the cache or
// dropping the least recently used would leave it none. At the default 64 MiB that is ~4,000 dense masks of a
// 128k vocabulary, or far more sparse ones.
class MaskCache {
 public:
  MaskCache(const Grammar& grammar, const VocabTrie& trie, std::size_t max_bytes = kDefaultMaxBytes);
  static constexpr std::size_t kDefaultMaxBytes = std::size_t{64} << 20;
  std::shared_ptr<const MaskEntry> get(const StateSet& state) const;
  // The walk itself (uncached).
  MaskEntry compute(const StateSet& state) const;
  // The bytes the cache holds now (the sum of entry_bytes over its entries); at most max_bytes.
  std::size_t bytes() const;
  // What one cached mask costs: its key's and the entry's containers (capacities), the entry, its shared_ptr's
  // control block and the hash map's node.
  static std::size_t entry_bytes(const std::vector<uint32_t>& key, const MaskEntry& entry);

 private:
  // Walks `trie` from `state`, adding what it allows to `e` and to `by_length` (token_masks.cpp).
  void walk(const PreorderTrie& trie, const StateSet& state, MaskEntry& e, ByLengthDiffers& by_length) const;

 public:
  std::size_t hits() const;
  std::size_t misses() const;

 private:
  struct KeyHash {
    std::size_t operator()(const std::vector<uint32_t>& k) const noexcept;
  };
  const VocabTrie& trie_;
  Matcher matcher_;
  std::size_t max_bytes_;
  mutable std::mutex mutex_;
  mutable std::size_t bytes_ = 0;  // Σ entry_bytes over entries_
  mutable std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const MaskEntry>, KeyHash> entries_;
  mutable std::size_t hits_ = 0, misses_ = 0;
  // Drops entries until `cost` more bytes leave at least a quarter of max_bytes free. Holds mutex_.
  void make_room(std::size_t cost) const;
};

}  // namespace orbit::constrain
