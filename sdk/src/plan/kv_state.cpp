// KV states and exact reuse keys (kv_state.h).
#include "plan/kv_state.h"

#include <algorithm>
#include <cstdio>

#include "orbit/common/sha256.h"

namespace orbit::detail {

namespace {

enum Tag : uint64_t { kForward = 1, kCanonical = 2, kPatched = 3, kRecomputed = 4, kChain = 5, kContent = 6 };

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Two independent 64-bit lanes over a sequence of words: each absorbs a word, then mixes.
struct Lanes {
  uint64_t hi = 0x6a09e667f3bcc908ULL, lo = 0xbb67ae8584caa73bULL;
  Lanes& add(uint64_t w) {
    hi = mix(hi ^ (w + 0x9e3779b97f4a7c15ULL));
    lo = mix(lo + (w ^ 0xc2b2ae3d27d4eb4fULL) * 0x100000001b3ULL);
    return *this;
  }
  Lanes& add(const std::string& s) {
    add(static_cast<uint64_t>(s.size()));
    uint64_t w = 0;
    int n = 0;
    for (unsigned char c : s) {
      w = (w << 8) | c;
      if (++n == 8) {
        add(w);
        w = 0;
        n = 0;
      }
    }
    if (n > 0) add(w);
    return *this;
  }
  Lanes& add(const KvState& s) { return add(s.hi).add(s.lo); }
  KvState state() const { return {hi, lo}; }
};

}  // namespace

KvState kv_chain(const KvState& chain, const KvState& state) {
  return Lanes().add(kChain).add(chain).add(state).state();
}

KvState content_chain(const KvState& chain, const std::string& key) {
  return Lanes().add(kContent).add(chain).add(key).state();
}

KvState kv_forward(const std::string& key, const KvState& chain) {
  return Lanes().add(kForward).add(key).add(chain).state();
}

KvState kv_canonical(const std::string& key) { return Lanes().add(kCanonical).add(key).state(); }

KvState kv_patched(const std::string& key, const std::string& patch_key) {
  return Lanes().add(kPatched).add(key).add(patch_key).state();
}

KvState kv_recomputed(const std::string& key, const KvState& chain, int64_t tokens) {
  return Lanes().add(kRecomputed).add(key).add(chain).add(static_cast<uint64_t>(tokens)).state();
}

KvState kv_state_after(StepAction done, const std::string& key, const std::string& patch_key, int64_t recompute_tokens,
                       const KvState& chain, const KvState& kept) {
  switch (done) {
    case StepAction::kKeep: return kept;
    case StepAction::kCanonical:
    case StepAction::kBlind: return chain == KvState{} ? kv_forward(key, chain) : kv_canonical(key);
    case StepAction::kApplyPatch: return kv_patched(key, patch_key);
    case StepAction::kRecompute: return kv_recomputed(key, chain, recompute_tokens);
    case StepAction::kLoadConditioned:
    case StepAction::kForm:
    case StepAction::kReprefill:
    case StepAction::kPrefillTurn:
    case StepAction::kEvict: return kv_forward(key, chain);
  }
  return kv_forward(key, chain);
}

KvState kv_window_start(int64_t rope_window) {
  if (rope_window <= 0) return KvState{};
  return kv_forward("orbit-rope-window/" + std::to_string(rope_window), KvState{});
}

std::string reuse_key(const std::string& key, const KvState& chain) {
  char words[40];
  std::snprintf(words, sizeof words, "%016llx%016llx", static_cast<unsigned long long>(chain.hi),
                static_cast<unsigned long long>(chain.lo));
  return sha256_hex("orbit-reuse/1\n" + key + "\n" + words);
}

void ReuseIndex::add(const KvState& chain, const KvState& content, const std::string& store_key,
                     const std::vector<int64_t>& tokens) {
  if (tokens.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  add_locked(chain, store_key, tokens);
  if (content != chain) add_locked(content, store_key, tokens);
}

void ReuseIndex::erase_chain_locked(const KvState& chain) {
  const auto it = by_chain_.find(chain);
  if (it == by_chain_.end()) return;
  for (const Sequence& s : it->second) total_tokens_ -= s.tokens.size();
  by_chain_.erase(it);
}

void ReuseIndex::add_locked(const KvState& chain, const std::string& store_key, const std::vector<int64_t>& tokens) {
  const auto known = by_chain_.find(chain);
  if (known != by_chain_.end()) {
    for (const Sequence& s : known->second) {
      if (s.store_key == store_key) return;
    }
  }
  const std::size_t n = std::min(tokens.size(), kMaxTokens);
  // Room first (the oldest chains go, possibly this one), so no iterator into by_chain_ is held meanwhile.
  bool is_new = known == by_chain_.end();
  while (!order_.empty() && (total_tokens_ + n > kMaxTotalTokens || (is_new && order_.size() >= kMaxChains))) {
    const KvState oldest = order_.front();
    order_.pop_front();
    erase_chain_locked(oldest);
    is_new = is_new || oldest == chain;
  }
  auto [it, added] = by_chain_.try_emplace(chain);
  if (added) order_.push_back(chain);
  std::vector<Sequence>& list = it->second;
  if (list.size() >= kPerChain) {
    total_tokens_ -= list.front().tokens.size();
    list.erase(list.begin());
  }
  list.push_back({store_key, std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n))});
  total_tokens_ += n;
}

ReuseIndex::Match ReuseIndex::longest(const KvState& chain, const KvState& content, const std::vector<int64_t>& tokens,
                                      int64_t limit) const {
  std::lock_guard<std::mutex> lock(mu_);
  Match best = longest_locked(chain, tokens, limit);
  if (content != chain) {
    Match approx = longest_locked(content, tokens, limit);
    if (approx.tokens > best.tokens) {
      best = std::move(approx);
      best.exact = false;
    }
  }
  return best;
}

std::size_t ReuseIndex::tokens_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_tokens_;
}

std::size_t ReuseIndex::sequences() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t n = 0;
  for (const auto& [chain, held] : by_chain_) n += held.size();
  return n;
}

ReuseIndex::Match ReuseIndex::longest_locked(const KvState& chain, const std::vector<int64_t>& tokens,
                                             int64_t limit) const {
  Match best;
  const auto it = by_chain_.find(chain);
  if (it == by_chain_.end()) return best;
  const std::size_t cap_all = std::min(tokens.size(), static_cast<std::size_t>(std::max<int64_t>(limit, 0)));
  for (const Sequence& s : it->second) {
    const std::size_t cap = std::min(s.tokens.size(), cap_all);
    std::size_t n = 0;
    while (n < cap && s.tokens[n] == tokens[n]) ++n;
    if (static_cast<int64_t>(n) > best.tokens) best = {s.store_key, static_cast<int64_t>(n), true};
  }
  return best;
}

}  // namespace orbit::detail
