#include <algorithm>

#include "orbit/common/error.h"
#include "orbit/planner/prefix_cache.h"

namespace orbit::planner {

std::size_t BlockPrefixCache::KeyHash::operator()(const Key& k) const {
  // FNV-1a over the parent handle and the tokens: buckets only (keys compare exactly).
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(static_cast<uint32_t>(k.parent));
  h *= 1099511628211ull;
  for (int64_t t : k.tokens) {
    h ^= static_cast<uint64_t>(t);
    h *= 1099511628211ull;
  }
  return static_cast<std::size_t>(h);
}

BlockPrefixCache::BlockPrefixCache(const PrefixCacheOptions& options)
    : bounded_(options.capacity_tokens > 0),
      block_tokens_(options.block_tokens),
      capacity_blocks_(options.block_tokens > 0 ? options.capacity_tokens / options.block_tokens : 0) {
  ORBIT_CHECK(options.capacity_tokens >= 0,
              "BlockPrefixCache: capacity_tokens = " << options.capacity_tokens << " must be >= 0 (0 = unbounded)");
  ORBIT_CHECK(options.block_tokens >= 1,
              "BlockPrefixCache: block_tokens = " << options.block_tokens << " must be >= 1");
}

int32_t BlockPrefixCache::find_or_add(int32_t parent, const int64_t* tokens, int64_t depth, bool* found) {
  Key key{parent, std::vector<int64_t>(tokens, tokens + block_tokens_)};
  const auto it = index_.find(key);
  *found = it != index_.end();
  if (*found) return it->second;
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<int32_t>(blocks_.size());
    blocks_.emplace_back();
  }
  Block& b = blocks_[id];
  b.key = key;
  b.depth = depth;
  b.children = 0;
  b.clock = 0;
  b.live = true;
  if (parent >= 0) ++blocks_[parent].children;
  index_.emplace(std::move(key), id);
  lru_.insert({0, -depth, id});
  return id;
}

void BlockPrefixCache::touch(int32_t block, uint64_t clock) {
  Block& b = blocks_[block];
  lru_.erase({b.clock, -b.depth, block});
  b.clock = clock;
  lru_.insert({clock, -b.depth, block});
}

PrefixCacheRead BlockPrefixCache::read(const std::vector<int64_t>& tokens, std::size_t prompt_tokens, PrefixRead kind) {
  ORBIT_CHECK(prompt_tokens <= tokens.size(), "BlockPrefixCache::read: prompt_tokens = " << prompt_tokens
                                                                                         << " past the read's "
                                                                                         << tokens.size() << " tokens");
  const uint64_t now = ++clock_;
  const int64_t bt = block_tokens_;
  // Blocks a hit may cover: within the prompt, and for a model call within its first prompt − 1 tokens (the
  // last one is recomputed for its logits, as vLLM caps a full hit).
  const int64_t reusable =
      static_cast<int64_t>(prompt_tokens) - (kind == PrefixRead::kLogits && prompt_tokens > 0 ? 1 : 0);
  const int64_t prompt_blocks = reusable / bt;
  const int64_t all_blocks = static_cast<int64_t>(tokens.size()) / bt;
  int64_t hits = 0;  // leading prompt blocks held
  bool chain = true;
  int32_t parent = -1;
  for (int64_t j = 0; j < all_blocks; ++j) {
    bool found = false;
    parent = find_or_add(parent, tokens.data() + j * bt, j, &found);
    chain = chain && found;
    if (chain && j < prompt_blocks) ++hits;
    touch(parent, now);
  }
  PrefixCacheRead out;
  out.reused = hits * bt;
  out.forwarded = static_cast<int64_t>(prompt_tokens) - out.reused;
  if (bounded_) {
    while (blocks() > capacity_blocks_) out.evicted += evict();
  }
  return out;
}

// Removes the least recently read block (the deepest of its read): a leaf, since a block's parent was read
// whenever it was.
int64_t BlockPrefixCache::evict() {
  const int32_t id = std::get<2>(*lru_.begin());
  Block& b = blocks_[id];
  ORBIT_CHECK(b.children == 0, "BlockPrefixCache: the LRU block " << id << " still has " << b.children << " children");
  lru_.erase(lru_.begin());
  if (b.key.parent >= 0) --blocks_[b.key.parent].children;
  index_.erase(b.key);
  b.live = false;
  free_.push_back(id);
  return block_tokens_;
}

void BlockPrefixCache::verify_integrity() const {
  std::vector<int64_t> children(blocks_.size(), 0);
  std::size_t live = 0;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    if (!b.live) continue;
    ++live;
    const int32_t id = static_cast<int32_t>(i);
    ORBIT_CHECK(static_cast<int64_t>(b.key.tokens.size()) == block_tokens_,
                "BlockPrefixCache: block " << i << " is not full");
    const auto it = index_.find(b.key);
    ORBIT_CHECK(it != index_.end() && it->second == id, "BlockPrefixCache: block " << i << " is not indexed");
    ORBIT_CHECK(lru_.count({b.clock, -b.depth, id}) == 1, "BlockPrefixCache: block " << i << " is not in the LRU");
    if (b.key.parent < 0) {
      ORBIT_CHECK(b.depth == 0, "BlockPrefixCache: first block " << i << " at depth " << b.depth);
      continue;
    }
    ORBIT_CHECK(static_cast<std::size_t>(b.key.parent) < blocks_.size() && blocks_[b.key.parent].live,
                "BlockPrefixCache: block " << i << " has no held parent");
    const Block& p = blocks_[b.key.parent];
    ORBIT_CHECK(b.depth == p.depth + 1, "BlockPrefixCache: block " << i << " at the wrong depth");
    ORBIT_CHECK(b.clock <= p.clock, "BlockPrefixCache: block " << i << " read after its parent");
    ++children[b.key.parent];
  }
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    ORBIT_CHECK(!blocks_[i].live || blocks_[i].children == children[i], "BlockPrefixCache: block "
                                                                            << i << " counts " << blocks_[i].children
                                                                            << " children, has " << children[i]);
  }
  ORBIT_CHECK(live == index_.size() && live == lru_.size(), "BlockPrefixCache: " << live << " blocks, " << index_.size()
                                                                                 << " indexed, " << lru_.size()
                                                                                 << " in the LRU");
  ORBIT_CHECK(!bounded_ || blocks() <= capacity_blocks_,
              "BlockPrefixCache: " << blocks() << " blocks past capacity " << capacity_blocks_);
}

}  // namespace orbit::planner
