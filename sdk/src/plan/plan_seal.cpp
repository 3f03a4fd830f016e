#include "plan_seal.h"

#include <cstring>
#include <string>
#include <vector>

namespace orbit::detail {

namespace {

// A 64-bit digest over words: each word mixed in by multiply and rotate (a splitmix64 finaliser at the end).
class Digest {
 public:
  Digest& u64(uint64_t v) {
    h_ = (h_ ^ v) * 0x9E3779B97F4A7C15ull;
    h_ = (h_ << 31) | (h_ >> 33);
    return *this;
  }
  Digest& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Digest& flag(bool v) { return u64(v ? 1 : 0); }
  Digest& real(double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    return u64(bits);
  }
  Digest& text(const std::string& s) {
    u64(s.size());
    std::size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w = 0;
      std::memcpy(&w, s.data() + i, 8);
      u64(w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, s.data() + i, s.size() - i);
    return u64(tail);
  }
  Digest& ids(const std::vector<uint64_t>& v) {
    u64(v.size());
    for (uint64_t x : v) u64(x);
    return *this;
  }
  Digest& tokens(const std::vector<int64_t>& v) {
    u64(v.size());
    for (int64_t x : v) i64(x);
    return *this;
  }
  uint64_t value() const {
    uint64_t z = h_ + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t h_ = 0x6A09E667F3BCC908ull;
};

void add_chunk(Digest& d, const ChunkRef& c) {
  d.text(c.key).i64(static_cast<int64_t>(c.kind)).i64(c.length).i64(c.extent).text(c.label);
}

void add_step(Digest& d, const PlanStep& s) {
  d.i64(static_cast<int64_t>(s.action)).i64(static_cast<int64_t>(s.how)).u64(s.instance);
  add_chunk(d, s.chunk);
  d.flag(s.is_turn).i64(s.position).i64(static_cast<int64_t>(s.match)).tokens(s.turn_tokens).text(s.patch_key);
  d.u64(s.store_keys.size());
  for (const std::string& k : s.store_keys) d.text(k);
  d.text(s.reuse_key).text(s.reuse_from).i64(s.reused_tokens).i64(s.reused_formed_window);
  d.real(s.divergence).i64(s.rank_k).i64(s.rank_v).text(s.variant).flag(s.deep_only).real(s.deep_energy);
  d.i64(s.recompute_tokens).flag(s.needs_canonical).flag(s.encode_canonical);
  d.i64(static_cast<int64_t>(s.canonical_tier)).real(s.forward_tokens).real(s.background_tokens);
  d.flag(s.background_patch).flag(s.measure_sensitivity).real(s.predicted_kl).real(s.sensitivity);
  d.real(s.kl_per_weight).real(s.shortfall_kl).real(s.quantized_kl).real(s.drift_tokens).real(s.context_change);
  d.flag(s.permuted).i64(s.bytes_moved).real(s.estimated_seconds).flag(s.exact).flag(s.deferred).text(s.reason);
}

}  // namespace

uint64_t plan_seal(const Plan& plan) {
  // The layouts these fields were counted on (libstdc++'s strings and vectors, x86-64): a field added to
  // PlanStep, ChunkRef or Plan changes a size here; digest it above, then update the size.
#if defined(__GLIBCXX__) && defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI && defined(__x86_64__)
  static_assert(sizeof(ChunkRef) == 88, "ChunkRef changed: digest the new field in add_chunk");
  static_assert(sizeof(PlanStep) == 520, "PlanStep changed: digest the new field in add_step");
  static_assert(sizeof(Plan) == 448, "Plan changed: digest the new field in plan_seal");
#endif
  Digest d;
  d.i64(static_cast<int64_t>(plan.op)).u64(plan.window_id).u64(plan.window_version);
  d.u64(plan.steps.size());
  for (const PlanStep& s : plan.steps) add_step(d, s);
  d.ids(plan.order).text(plan.refusal).flag(plan.refused_capacity).i64(plan.pool_pages_short);
  d.real(plan.forward_tokens).real(plan.background_tokens).real(plan.predicted_kl).i64(plan.bytes_moved);
  d.real(plan.estimated_seconds).i64(plan.device_bytes_after).i64(plan.window_tokens_after).i64(plan.rope_window);
  d.flag(plan.exact).ids(plan.cascade).text(plan.attention);
  return d.value();
}

}  // namespace orbit::detail
