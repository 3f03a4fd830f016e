// KV states and exact reuse keys (kv_state.h).
#include "window/kv_state.h"

#include <cstdio>

#include "orbit/common/sha256.h"

namespace orbit::detail {

namespace {

enum Tag : uint64_t { kForward = 1, kCanonical = 2, kPatched = 3, kRecomputed = 4, kChain = 5 };

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

KvState kv_chain(const KvState& chain, const KvState& state) { return Lanes().add(kChain).add(chain).add(state).state(); }

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

std::string reuse_key(const std::string& key, const KvState& chain) {
  char words[40];
  std::snprintf(words, sizeof words, "%016llx%016llx", static_cast<unsigned long long>(chain.hi),
                static_cast<unsigned long long>(chain.lo));
  return sha256_hex("orbit-reuse/1\n" + key + "\n" + words);
}

}  // namespace orbit::detail
