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
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "constrain/matcher.h"

namespace orbit::constrain {

class VocabTrie {
 public:
  // bytes[id]: the token's bytes; nullopt or empty: not in the trie (never allowed).
  explicit VocabTrie(const std::vector<std::optional<std::string>>& bytes);

  int64_t vocab_size() const { return vocab_size_; }
  int64_t max_token_bytes() const { return max_len_; }
  std::size_t nodes() const { return byte_.size(); }

 private:
  friend class MaskCache;
  int64_t vocab_size_ = 0;
  int64_t max_len_ = 0;
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<int32_t> end_;
  std::vector<int32_t> token_begin_;  // node i's tokens: tokens_[token_begin_[i], token_begin_[i + 1])
  std::vector<int32_t> tokens_;
};

// One state's mask. `need` is the fewest bytes that complete the text from the state (0: complete);
// `differs` lists the allowed tokens after which that number is not `need`, as (need after, token),
// sorted by need. Every other allowed token leaves exactly `need` bytes to write.
struct MaskEntry {
  std::vector<uint64_t> bits;
  int64_t allowed = 0;
  bool complete = false;
  int64_t need = 0;
  std::vector<std::pair<int64_t, int32_t>> differs;
};

// The masks of one grammar over one vocabulary. Thread-safe: lookups lock; a miss computes outside the lock
// (two threads may both compute it; the first insert wins). Holds at most max_bytes of masks, then starts
// over.
class MaskCache {
 public:
  MaskCache(const Grammar& grammar, const VocabTrie& trie, std::size_t max_bytes = std::size_t{64} << 20);
  std::shared_ptr<const MaskEntry> get(const StateSet& state) const;
  // The walk itself (uncached).
  MaskEntry compute(const StateSet& state) const;
  std::size_t hits() const;
  std::size_t misses() const;

 private:
  struct KeyHash {
    std::size_t operator()(const std::vector<uint32_t>& k) const noexcept;
  };
  const Grammar& grammar_;
  const VocabTrie& trie_;
  Matcher matcher_;
  std::size_t max_entries_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const MaskEntry>, KeyHash> entries_;
  mutable std::size_t hits_ = 0, misses_ = 0;
};

}  // namespace orbit::constrain
