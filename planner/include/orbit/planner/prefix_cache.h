// The prefix-cache yardsticks: what the prefix caches agent builders already run would forward for the
// same sequence of model reads. Every saving orbit states is measured against these; both are plain data
// structures over token ids (no model, no tensors), so a trace replay can run them beside a window.
//
// A *read* is one model call: a prompt (the window's tokens in order, then the query) followed by the
// tokens the model generated. Both caches
//   - reuse the longest prefix of the prompt they hold and forward the rest of the prompt
//     (PrefixCacheRead::forwarded = prompt length − reused; generated tokens are decoded by any engine and
//     are not counted);
//   - forward at least the prompt's last token on a model call (PrefixRead::kLogits, the default): the next
//     token needs its logits, so an engine recomputes it even when the whole prompt is held (SGLang matches
//     at most prompt − 1 tokens; vLLM caps a hit at prompt − 1 tokens, so in whole blocks). orbit's side
//     counts the same token: Generation::prompt_forward_tokens is at least 1, the query's last token, even
//     when exact reuse holds the rest. A read that only computes a window ahead of a call and asks for no
//     logits (PrefixRead::kPrefill: `orbit replay` charges admits and turns so) reuses all it holds;
//   - then hold every token of the read, generated ones included, so a later read whose window contains
//     this answer reuses it;
//   - stay within a KV memory budget in tokens (PrefixCacheOptions::capacity_tokens, 0 = unbounded) by
//     evicting least recently used tokens after the read, never a prefix that a held token depends on.
//
// RadixCache: SGLang's radix cache at token granularity. A compressed trie of token sequences; each node
// holds a run of tokens and the clock of the last read that touched it (matched or inserted). Eviction
// trims the tail of the leaf with the oldest clock, one token at a time. Leaf clocks are distinct (a read
// touches one root-to-node path, whose deepest untrimmed node is the only leaf it can leave), so the order
// is total and the structure deterministic.
//
// BlockPrefixCache: vLLM's automatic prefix caching. Tokens in blocks of PrefixCacheOptions::block_tokens
// (16), each block named by its parent block and its own tokens (a hash chain; here exact, so no
// collisions). Only full blocks are held and reused: a read reuses block_tokens × (leading prompt blocks
// held); the partial tail is recomputed. Eviction removes whole blocks, least recently read first and,
// within one read, the deepest first (vLLM frees a finished request's blocks tail first); a block's parent
// is therefore never evicted before it. Capacity in blocks: capacity_tokens / block_tokens (rounded down).
//
// Simplifications, stated: eviction runs after the read's insertion (the read's own tokens are the most
// recent, so only a read longer than the budget loses its own tail); a read's generated tokens are held
// whole, the last one included (an engine has its KV only after one more decode step; orbit's generate
// takes that step when it keeps the answer for reuse).
//
// Cost: O(read length) per read, plus O(log n) per evicted node or block. Not thread-safe: one owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace orbit::planner {

struct PrefixCacheOptions {
  int64_t capacity_tokens = 0;  // KV memory in tokens; 0 = unbounded; must be >= 0
  int64_t block_tokens = 16;    // BlockPrefixCache only; must be >= 1
};

// What a read asks of the model (above): kLogits, a model call, forwards at least the prompt's last token;
// kPrefill computes the prompt's KV only and reuses every held token.
enum class PrefixRead { kLogits, kPrefill };

struct PrefixCacheRead {
  int64_t reused = 0;     // prompt tokens served from the cache: [0, prompt length], and < prompt length
                          // for a kLogits read of a non-empty prompt
  int64_t forwarded = 0;  // prompt length − reused
  int64_t evicted = 0;    // tokens the budget evicted after the read
};

class RadixCache {
 public:
  explicit RadixCache(const PrefixCacheOptions& options = {});

  // One read of `tokens`, whose first `prompt_tokens` are the prompt (window + query) and the rest were
  // generated. Throws orbit::Error when prompt_tokens > tokens.size().
  PrefixCacheRead read(const std::vector<int64_t>& tokens, std::size_t prompt_tokens,
                       PrefixRead kind = PrefixRead::kLogits);
  // The longest held prefix of `tokens`, in tokens; changes nothing.
  int64_t match(const std::vector<int64_t>& tokens) const;

  int64_t size() const { return size_; }  // tokens held
  int64_t capacity() const { return capacity_; }
  // Node slots allocated, live or free for reuse: every live node holds a token, and a read adds at most
  // two nodes (a split and its new leaf) before it evicts, so a bounded cache has at most capacity + 3.
  std::size_t node_slots() const { return nodes_.size(); }
  // Throws orbit::Error naming the first broken invariant: labels non-empty and keyed by their first token,
  // parents live, clocks non-increasing from parent to child, the leaf index exactly the live childless
  // nodes, size the sum of labels and within capacity.
  void verify_integrity() const;

 private:
  struct Node {
    int32_t parent = -1;
    std::vector<int64_t> label;                     // the tokens this node adds to its parent's prefix
    std::unordered_map<int64_t, int32_t> children;  // first token of a child's label -> child
    uint64_t clock = 0;                             // the last read that touched it
    bool live = false;
  };
  int32_t make_node(int32_t parent, std::vector<int64_t> label, uint64_t clock);
  int32_t split(int32_t node, std::size_t keep);  // the first `keep` tokens become a new parent of node
  void touch(int32_t node, uint64_t clock);
  void add_child(int32_t parent, int32_t child);
  int64_t evict(int64_t tokens);

  int64_t capacity_;
  int64_t size_ = 0;
  uint64_t clock_ = 0;
  std::vector<Node> nodes_;                        // node 0 is the root (empty label); stable handles
  std::vector<int32_t> free_;                      // dead handles to reuse
  std::set<std::pair<uint64_t, int32_t>> leaves_;  // (clock, node) of the live childless non-root nodes
};

class BlockPrefixCache {
 public:
  explicit BlockPrefixCache(const PrefixCacheOptions& options = {});

  // As RadixCache::read; reused is a multiple of block_tokens (a kLogits read reuses the full blocks within
  // its first prompt − 1 tokens).
  PrefixCacheRead read(const std::vector<int64_t>& tokens, std::size_t prompt_tokens,
                       PrefixRead kind = PrefixRead::kLogits);

  int64_t blocks() const { return static_cast<int64_t>(index_.size()); }
  int64_t size() const { return blocks() * block_tokens_; }     // tokens held
  int64_t capacity_blocks() const { return capacity_blocks_; }  // 0 with capacity_tokens 0: unbounded
  // Throws orbit::Error naming the first broken invariant: every block's parent held, its depth its
  // parent's + 1, child counts right, clocks non-increasing from parent to child, the LRU index exactly
  // the held blocks, within capacity.
  void verify_integrity() const;

 private:
  struct Key {
    int32_t parent;               // -1 for a first block
    std::vector<int64_t> tokens;  // block_tokens of them
    bool operator==(const Key& o) const { return parent == o.parent && tokens == o.tokens; }
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const;
  };
  struct Block {
    Key key;
    int64_t depth = 0;  // 0 for a first block
    int64_t children = 0;
    uint64_t clock = 0;
    bool live = false;
  };
  int32_t find_or_add(int32_t parent, const int64_t* tokens, int64_t depth, bool* found);
  void touch(int32_t block, uint64_t clock);
  int64_t evict();

  bool bounded_;
  int64_t block_tokens_;
  int64_t capacity_blocks_;
  uint64_t clock_ = 0;
  std::vector<Block> blocks_;  // stable handles
  std::vector<int32_t> free_;
  std::unordered_map<Key, int32_t, KeyHash> index_;
  std::set<std::tuple<uint64_t, int64_t, int32_t>> lru_;  // (clock, −depth, block): the first is evicted next
};

}  // namespace orbit::planner
