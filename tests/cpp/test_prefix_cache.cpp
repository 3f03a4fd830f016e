// orbit::planner's prefix-cache yardsticks (planner/prefix_cache.h): the token-granular radix cache and the
// 16-token block cache, on hand-made reads with known answers, then against naive references (every held
// prefix in a map, eviction by scanning) over random edit sequences.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/planner/prefix_cache.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using orbit::planner::BlockPrefixCache;
using orbit::planner::PrefixCacheOptions;
using orbit::planner::PrefixRead;
using orbit::planner::RadixCache;
using Tokens = std::vector<int64_t>;

namespace {

Tokens range(int64_t from, int64_t to) {  // [from, to)
  Tokens t(static_cast<std::size_t>(to - from));
  std::iota(t.begin(), t.end(), from);
  return t;
}

Tokens cat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

PrefixCacheOptions budget(int64_t tokens, int64_t block = 16) {
  PrefixCacheOptions o;
  o.capacity_tokens = tokens;
  o.block_tokens = block;
  return o;
}

}  // namespace

TEST_CASE("radix cache: reuses the longest held token prefix, generated tokens included", "[planner][cpu]") {
  RadixCache cache;
  CHECK(cache.read(range(1, 11), 8).forwarded == 8);  // 8 prompt tokens, 2 generated
  CHECK(cache.size() == 10);
  auto r = cache.read(cat(range(1, 11), {50, 51}), 12);  // the answer came back as a turn: only 50 51
  CHECK(r.reused == 10);
  CHECK(r.forwarded == 2);
  CHECK(cache.read({1, 2, 3, 9, 9}, 5).forwarded == 2);  // diverges after 3 tokens
  // A held prompt: a model call still forwards its last token for the logits; a prefill, nothing.
  CHECK(cache.read({1, 2, 3}, 3).forwarded == 1);
  CHECK(cache.read({1, 2, 3}, 3, PrefixRead::kPrefill).forwarded == 0);
  CHECK(cache.read(range(1, 11), 10).reused == 9);  // prompt and answer held: all but the prompt's last
  CHECK(cache.read({}, 0).forwarded == 0);
  CHECK(cache.match({1, 2, 3, 4, 5, 99}) == 5);
  CHECK(cache.match({1, 2, 3, 9, 9, 9}) == 5);
  CHECK(cache.size() == 14);  // 1..10 50 51, and 9 9 behind 1 2 3
  cache.verify_integrity();
  CHECK_THROWS_WITH(cache.read({1}, 2), Catch::Contains("prompt_tokens"));
  CHECK_THROWS_WITH(RadixCache(budget(-1)), Catch::Contains("capacity_tokens"));
}

TEST_CASE("radix cache: bounded, it trims the oldest leaf first, token by token", "[planner][cpu]") {
  RadixCache cache(budget(10));
  CHECK(cache.read({1, 2, 3, 4, 5, 6}, 6).forwarded == 6);
  CHECK(cache.read({7, 8, 9, 10}, 4).forwarded == 4);
  const auto r = cache.read({1, 2, 3, 11, 12}, 5);  // touches 1 2 3, adds 11 12: two tokens over
  CHECK(r.forwarded == 2);
  CHECK(r.evicted == 2);
  cache.verify_integrity();
  CHECK(cache.size() == 10);
  CHECK(cache.match({1, 2, 3, 4, 5, 6}) == 4);  // 5 6 went: the leaf read longest ago
  CHECK(cache.match({7, 8, 9, 10}) == 4);
  CHECK(cache.read({1, 2, 3, 4, 5}, 5).forwarded == 1);  // evicts 10, now the oldest leaf's tail
  CHECK(cache.match({7, 8, 9, 10}) == 3);
  CHECK(cache.read(range(100, 115), 15).evicted == 15);  // longer than the budget: keeps its first 10
  CHECK(cache.match(range(100, 115)) == 10);
  CHECK(cache.match({1}) == 0);
  cache.verify_integrity();
}

TEST_CASE("radix cache: conversation after conversation stays within its budget, nodes included", "[planner][cpu]") {
  // A server's yardstick: every request a shared system prompt, a fresh question and a short answer.
  const int64_t capacity = 2000;
  RadixCache cache(budget(capacity));
  std::mt19937 rng(7);
  const Tokens system = range(1, 21);
  for (int i = 0; i < 20000; ++i) {
    Tokens question(10 + rng() % 20);
    for (auto& t : question) t = 100 + static_cast<int64_t>(rng() % 500);
    const Tokens prompt = cat(system, question);
    const auto r = cache.read(cat(prompt, range(1000, 1008)), prompt.size());
    if (i > 0) REQUIRE(r.reused >= 20);  // the prompt everyone shares is read every time: never evicted
    REQUIRE(cache.size() <= capacity);
    REQUIRE(cache.node_slots() <= static_cast<std::size_t>(capacity) + 3);
  }
  CHECK(cache.size() > capacity - 60);  // full, less at most one read's tokens
  cache.verify_integrity();
}

TEST_CASE("block cache: only full 16-token blocks are reused, generated blocks too", "[planner][cpu]") {
  BlockPrefixCache cache;
  CHECK(cache.read(range(0, 40), 40).forwarded == 40);
  CHECK(cache.blocks() == 2);                           // 8 tokens in a partial block are not held
  CHECK(cache.read(range(0, 48), 48).forwarded == 16);  // 32 reused; the third block recomputed
  Tokens edited = range(0, 48);
  edited[20] = 999;  // diverges mid second block: only the first is reused
  CHECK(cache.read(edited, 48).reused == 16);
  CHECK(cache.read(range(0, 10), 10).forwarded == 10);  // shorter than a block
  // A held 48-token prompt: a model call recomputes its last token, so its last block (vLLM caps a hit at
  // prompt − 1 tokens); a prefill reuses all three.
  CHECK(cache.read(range(0, 48), 48).forwarded == 16);
  CHECK(cache.read(range(0, 48), 48, PrefixRead::kPrefill).forwarded == 0);
  // 20 prompt tokens + 12 generated fill two blocks, the second half generated; the next read reuses both.
  BlockPrefixCache fresh;
  const Tokens answer = cat(range(200, 220), range(500, 512));
  CHECK(fresh.read(answer, 20).forwarded == 20);
  CHECK(fresh.read(cat(answer, {7, 7, 7}), 35).reused == 32);
  fresh.verify_integrity();
  cache.verify_integrity();
  CHECK_THROWS_WITH(BlockPrefixCache(budget(0, 0)), Catch::Contains("block_tokens"));
}

TEST_CASE("block cache: bounded, it evicts the oldest read's deepest block first", "[planner][cpu]") {
  BlockPrefixCache cache(budget(9, 4));  // 2 blocks of 4
  CHECK(cache.capacity_blocks() == 2);
  CHECK(cache.read(range(1, 9), 8).forwarded == 8);
  const auto r = cache.read(range(20, 24), 4);
  CHECK(r.evicted == 4);  // 5 6 7 8, the deeper block of the older read
  CHECK(cache.read(range(1, 9), 8).reused == 4);
  cache.verify_integrity();
  CHECK(cache.blocks() == 2);
}

TEST_CASE("prefix caches: unbounded never forwards more than bounded; radix never more than blocks", "[planner][cpu]") {
  RadixCache radix, radix_small(budget(24));
  BlockPrefixCache blocks(budget(0, 4)), blocks_small(budget(24, 4));
  std::mt19937_64 rng(5);
  int64_t r = 0, rs = 0, b = 0, bs = 0;
  Tokens prev;
  for (int i = 0; i < 200; ++i) {
    Tokens t = prev;
    t.resize(std::min<std::size_t>(t.size(), rng() % 30));
    for (std::size_t k = rng() % 8; k > 0; --k) t.push_back(static_cast<int64_t>(rng() % 3));
    const std::size_t prompt = t.size() - std::min<std::size_t>(t.size(), rng() % 4);
    const int64_t fr = radix.read(t, prompt).forwarded, fb = blocks.read(t, prompt).forwarded;
    CHECK(fr <= fb);
    r += fr;
    b += fb;
    rs += radix_small.read(t, prompt).forwarded;
    bs += blocks_small.read(t, prompt).forwarded;
    prev = rng() % 4 == 0 ? Tokens{} : t;
  }
  CHECK(r <= rs);
  CHECK(b <= bs);
  CHECK(rs > r);  // the budget bit
}

// ---- against naive references --------------------------------------------------------------------------

namespace {

bool starts_with(const Tokens& a, const Tokens& prefix) {
  return a.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), a.begin());
}

// Every held prefix with the clock of the last read through it; eviction removes, one token at a time,
// the held prefix that no other extends with the oldest clock.
struct NaiveRadix {
  int64_t capacity = 0;
  uint64_t clock = 0;
  std::map<Tokens, uint64_t> held;

  int64_t read(const Tokens& t, std::size_t prompt, bool logits) {
    ++clock;
    std::size_t m = 0;
    while (m < t.size() && held.count(Tokens(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(m + 1)))) ++m;
    for (std::size_t n = 1; n <= t.size(); ++n)
      held[Tokens(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(n))] = clock;
    while (capacity > 0 && static_cast<int64_t>(held.size()) > capacity) {
      auto victim = held.end();
      for (auto it = held.begin(); it != held.end(); ++it) {
        const auto next = std::next(it);
        const bool leaf = next == held.end() || !starts_with(next->first, it->first);
        if (leaf && (victim == held.end() || it->second < victim->second)) victim = it;
      }
      held.erase(victim);
    }
    const std::size_t reusable = logits && prompt > 0 ? prompt - 1 : prompt;
    return static_cast<int64_t>(prompt - std::min(m, reusable));
  }
};

// Every held block named by the whole prefix through it; eviction removes the block with the oldest clock,
// the deepest among equals.
struct NaiveBlocks {
  int64_t capacity_blocks = 0;  // 0: unbounded
  std::size_t block = 4;
  uint64_t clock = 0;
  std::map<Tokens, std::pair<uint64_t, std::size_t>> held;  // prefix -> (clock, depth)

  int64_t read(const Tokens& t, std::size_t prompt, bool logits) {
    ++clock;
    const std::size_t reusable = logits && prompt > 0 ? prompt - 1 : prompt;
    std::size_t hits = 0;
    while ((hits + 1) * block <= reusable &&
           held.count(Tokens(t.begin(), t.begin() + static_cast<std::ptrdiff_t>((hits + 1) * block))))
      ++hits;
    for (std::size_t j = 0; (j + 1) * block <= t.size(); ++j)
      held[Tokens(t.begin(), t.begin() + static_cast<std::ptrdiff_t>((j + 1) * block))] = {clock, j};
    while (capacity_blocks > 0 && static_cast<int64_t>(held.size()) > capacity_blocks) {
      auto victim = held.begin();
      for (auto it = held.begin(); it != held.end(); ++it) {
        const auto a = it->second, v = victim->second;
        if (a.first < v.first || (a.first == v.first && a.second > v.second)) victim = it;
      }
      held.erase(victim);
    }
    return static_cast<int64_t>(prompt - hits * block);
  }
};

// A random read derived from earlier ones, as an agent's window evolves: extend, trim, edit in the middle,
// return to an old state, or start afresh; a few generated tokens at the end.
Tokens next_read(const std::vector<Tokens>& history, std::mt19937_64& rng, std::size_t* prompt) {
  Tokens t = history.empty() ? Tokens{} : history[rng() % history.size()];
  switch (rng() % 5) {
    case 0: t.resize(std::min<std::size_t>(t.size(), rng() % 20)); break;
    case 1:
      if (!t.empty()) t[rng() % t.size()] = static_cast<int64_t>(rng() % 4);
      break;
    case 2:
      if (!t.empty()) t.erase(t.begin() + static_cast<std::ptrdiff_t>(rng() % t.size()));
      break;
    case 3: t.clear(); break;
    default: break;
  }
  for (std::size_t k = rng() % 9; k > 0; --k) t.push_back(static_cast<int64_t>(rng() % 4));
  if (t.size() > 40) t.resize(40);
  *prompt = t.size() - std::min<std::size_t>(t.size(), rng() % 5);
  return t;
}

}  // namespace

TEST_CASE("radix and block caches agree with naive references on random reads", "[planner][cpu]") {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t capacity = trial % 3 == 0 ? 0 : 6 + static_cast<int64_t>(rng() % 40);
    const int64_t block = 1 + static_cast<int64_t>(rng() % 5);
    RadixCache radix(budget(capacity));
    BlockPrefixCache blocks(budget(capacity, block));
    NaiveRadix naive_radix{capacity};
    NaiveBlocks naive_blocks{capacity / block, static_cast<std::size_t>(block)};
    const bool bounded_blocks = capacity > 0;
    if (bounded_blocks && naive_blocks.capacity_blocks == 0) continue;  // a budget under one block: skip
    std::vector<Tokens> history;
    for (int i = 0; i < 80; ++i) {
      std::size_t prompt = 0;
      const Tokens t = next_read(history, rng, &prompt);
      INFO("trial " << trial << " read " << i << " capacity " << capacity << " block " << block);
      const bool logits = rng() % 3 != 0;  // model calls, and now and then a prefill
      const PrefixRead kind = logits ? PrefixRead::kLogits : PrefixRead::kPrefill;
      CHECK(radix.read(t, prompt, kind).forwarded == naive_radix.read(t, prompt, logits));
      CHECK(blocks.read(t, prompt, kind).forwarded == naive_blocks.read(t, prompt, logits));
      CHECK(radix.size() == static_cast<int64_t>(naive_radix.held.size()));
      CHECK(blocks.blocks() == static_cast<int64_t>(naive_blocks.held.size()));
      radix.verify_integrity();
      blocks.verify_integrity();
      history.push_back(t);
    }
  }
}

}  // namespace ORBIT_TEST_FILE
