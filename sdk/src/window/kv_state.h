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

#include <cstdint>
#include <string>

#include "orbit/plan.h"

namespace orbit::detail {

struct KvState {
  uint64_t hi = 0, lo = 0;
  bool operator==(const KvState& o) const { return hi == o.hi && lo == o.lo; }
  bool operator!=(const KvState& o) const { return !(*this == o); }
};

KvState kv_chain(const KvState& chain, const KvState& state);
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

}  // namespace orbit::detail
