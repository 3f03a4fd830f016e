// What an instance's KV *is*, as a name (docs/ARCHITECTURE.md §4, "Exact reuse"): a 128-bit digest that
// two entries share only when their KV (content channel, before RoPE) was made the same way from the same
// inputs, so equal states mean equal KV up to float rounding.
//
//   forward(key, chain)        a forward of the instance's tokens in context, behind KV whose states
//                              chain to `chain`: form, prefill, a live turn's prefill, exact reuse. A
//                              chunk's canonical at position 0 is the forward behind nothing.
//   canonical(key)             the canonical relocated behind something (blind, the window's fallbacks)
//   patched(key, patch)        the canonical plus the stored patch under store key `patch`
//   recomputed(key, chain, ..) the canonical with some tokens recomputed behind `chain` (first-k, CacheBlend)
//   kept                       the state it had (a keep changes positions only)
//
// chain(c, state) extends the chain over the window's instances one at a time (chain_0 = the empty
// chain). The exact reuse key of an instance behind a chain names the forward state there: whatever KV a
// forward computed for (key, chain) is stored under it, and a plan whose window chains to the same value
// at that instance serves it from the store instead of forwarding: the same KV, no new error. Inputs are
// content keys and store keys (SHA-256 hex), mixed with a fixed, portable function (never std::hash), so
// states and reuse keys are stable across processes and machines that share a store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "orbit/plan.h"

namespace orbit::detail {

struct KvState {
  uint64_t hi = 0, lo = 0;
  bool operator==(const KvState& o) const { return hi == o.hi && lo == o.lo; }
  bool operator!=(const KvState& o) const { return !(*this == o); }
};

KvState kv_chain(const KvState& chain, const KvState& state);
// Where a plan's chain starts: the empty chain, or (dynamic-NTK RoPE, Plan::rope_window > 0) a state naming
// the window length its forwards run at, so that KV forwarded at one length is never reused as another's.
KvState kv_window_start(int64_t rope_window);
// The content chain: the same over content keys alone (what the instances are, not how their KV was made).
KvState content_chain(const KvState& chain, const std::string& key);
KvState kv_forward(const std::string& key, const KvState& chain);
KvState kv_canonical(const std::string& key);
KvState kv_patched(const std::string& key, const std::string& patch_key);
KvState kv_recomputed(const std::string& key, const KvState& chain, int64_t tokens);

// The state a serving action leaves (StepAction `done`): kept returns `kept`; a canonical behind the
// empty chain is the forward behind nothing.
KvState kv_state_after(StepAction done, const std::string& key, const std::string& patch_key, int64_t recompute_tokens,
                       const KvState& chain, const KvState& kept);

// The store key (64 hex) of the KV a forward computes for content `key` behind `chain`.
std::string reuse_key(const std::string& key, const KvState& chain);

// Which token sequences were stored for exact reuse behind each chain, so that a forward whose leading
// tokens match one of them loads those rows instead of computing them (a radix cache's partial match).
// Each sequence is indexed twice: under its KV-state chain (the rows a forward here would compute, exactly)
// and under its content chain (rows computed behind the same content whose KV was approximated another way:
// what a forward here computes up to those approximations). Only the first kMaxTokens of a sequence are remembered (a
// longer match loads that many rows); the kMaxChains chains added last are kept, up to kPerChain sequences each (the
// newest), and the oldest chains go while the sequences hold more than kMaxTotalTokens tokens (4 bytes each: 16 MiB).
// With each sequence's store key and the nodes, the heap it holds is at most about 27 MiB, where every sequence
// is some 64 tokens (65,536 sequences: 26.3 MiB measured; 16.6 MiB at 1,024 tokens each, 11.3 MiB at one token).
// Entries whose store key was evicted since are found here and fail to load (the forward then runs).
// Thread-safe.
class ReuseIndex {
 public:
  static constexpr std::size_t kMaxChains = 8192, kPerChain = 8, kMaxTokens = 1024;
  static constexpr std::size_t kMaxTotalTokens = std::size_t{1} << 22;
  struct Match {
    std::string store_key;
    int64_t tokens = 0;  // leading tokens shared with the query (0: none)
    bool exact = true;   // found under the KV-state chain (else under the content chain only)
  };
  void add(const KvState& chain, const KvState& content, const std::string& store_key,
           const std::vector<int64_t>& tokens);
  // The sequence sharing the longest leading run with `tokens` (at most `limit`): under the state chain
  // `chain`, or, when one there is longer, under the content chain `content`.
  Match longest(const KvState& chain, const KvState& content, const std::vector<int64_t>& tokens, int64_t limit) const;
  std::size_t tokens_held() const;  // Σ the remembered sequences' tokens (at most kMaxTotalTokens)
  std::size_t sequences() const;    // the remembered sequences (at most kMaxChains · kPerChain)

 private:
  struct Hash {
    std::size_t operator()(const KvState& s) const { return static_cast<std::size_t>(s.hi ^ (s.lo * 31)); }
  };
  struct Sequence {
    std::string store_key;
    std::vector<int32_t> tokens;  // token ids (every vocabulary is far below 2^31)
  };
  void erase_chain_locked(const KvState& chain);
  void add_locked(const KvState& chain, const std::string& store_key, const std::vector<int64_t>& tokens);
  Match longest_locked(const KvState& chain, const std::vector<int64_t>& tokens, int64_t limit) const;

  mutable std::mutex mu_;
  std::unordered_map<KvState, std::vector<Sequence>, Hash> by_chain_;  // state and content chains alike
  std::deque<KvState> order_;                                          // chains in the order first added
  std::size_t total_tokens_ = 0;                                       // Σ the sequences' tokens
};

}  // namespace orbit::detail
