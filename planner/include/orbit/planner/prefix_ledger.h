// The live chunk-granular prefix ledger (WindowStats / EngineStats::prefix_cache_tokens): what a cache that
// reuses whole instances behind a held chain of instance keys would forward for the window operations that
// forward. It sees neither queries nor generated tokens, and works in whole instances, so it is not the
// radix yardstick: planner/prefix_cache.h has the token-granular radix cache and the 16-token block cache
// (SGLang and vLLM semantics) that `orbit replay` reports as radix_tokens and block_cache_tokens.
//
// A prefix cache (vLLM's automatic prefix caching, SGLang's radix tree) reuses KV only behind a token
// prefix it computed before, and recomputes from the first token that differs to the end. A window is a
// sequence of instances with content-addressed keys, so a prefix is named by the chained hash of the keys
// through an instance. The ledger remembers the prefixes read (one per engine, so forks share them as a
// radix tree shares branches); read() returns what a prefix cache forwards to hold a window: the tokens
// from the first instance whose prefix it has not seen to the end. It forgets the least recently read
// prefixes beyond its capacity, as a cache of bounded size does.
//
// Instance granularity favours the prefix cache slightly: a block-based one (16-token pages) also
// recomputes the partial block before the first changed instance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace orbit::planner {

struct PrefixSpan {
  uint64_t prefix = 0;  // the chained hash of the window's keys up to and including this instance
  int64_t tokens = 0;   // the instance's tokens (what a prefix cache forwards for it)
};

class PrefixLedger {
 public:
  // capacity: prefixes remembered (>= 1); 65,536 by default, about 5 MB.
  explicit PrefixLedger(std::size_t capacity = std::size_t{1} << 16);

  // The tokens a prefix cache forwards to hold `window` (its instances in order); it remembers every
  // prefix of it afterwards.
  int64_t read(const std::vector<PrefixSpan>& window);

  std::size_t size() const { return lru_.size(); }
  std::size_t capacity() const { return capacity_; }

 private:
  void touch(uint64_t prefix);

  std::size_t capacity_;
  std::list<uint64_t> lru_;  // most recently read first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
};

}  // namespace orbit::planner
