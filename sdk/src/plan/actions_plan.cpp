// The serving actions' planning halves (serve_actions.h): one class each, and the registry. Torch-free:
// everything here reads the PlanInput and its PlanEnv, never a model or a tensor.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "orbit/common/error.h"
#include "plan/serve_actions.h"

namespace orbit::detail {

namespace {

// The patch keys of a plan input: from its signer when the planner made one (O(1)), else from the keys.
// Hashing the keys (three SHA-256 digests) is most of what planning a stored patch or a form costs, and a
// budgeted plan asks for them from several actions per instance.
const PatchKeys& keys_of(const PlanInput& in) {
  const void* context = in.signer != nullptr ? static_cast<const void*>(in.signer) : in.context;
  const std::size_t size = in.signer != nullptr ? in.signer->size() : in.context->size();
  if (!in.memo_keys.has_value() || in.memo_context != context || in.memo_size != size) {
    in.memo_keys = in.signer != nullptr ? patch_keys(in.env.limits(), in.policy, *in.chunk, *in.signer)
                                        : patch_keys(in.env.limits(), in.policy, *in.chunk, *in.context, in.prefix);
    in.memo_context = context;
    in.memo_size = size;
  }
  return *in.memo_keys;
}

planner::Tier to_tier(StoreTier t) {
  switch (t) {
    case StoreTier::kDevice: return planner::Tier::kDevice;
    case StoreTier::kHost: return planner::Tier::kHost;
    case StoreTier::kDisk: return planner::Tier::kDisk;
    case StoreTier::kRemote: return planner::Tier::kRemote;
  }
  return planner::Tier::kDisk;
}

PlanStep base_step(ServeActionId how, StepAction category) {
  PlanStep s;
  s.how = how;
  s.action = category;
  return s;
}

void set_patch_shape(const PlanInput& in, const PatchKeys& keys, PlanStep& s) {
  s.rank_k = keys.rank_k;
  s.rank_v = keys.rank_v;
  s.variant = keys.variant;
  s.deep_only = in.policy.deep_only;
  s.deep_energy = in.policy.deep_energy;
}

}  // namespace

void price_canonical(const PlanInput& in, PlanStep& s) {
  const auto tier = in.env.canonical_residence(in.chunk->ref.key);
  if (tier.has_value()) {
    s.canonical_tier = *tier;
    s.bytes_moved += in.chunk->ref.length * in.kv_per_token;
  } else {
    s.encode_canonical = true;
    s.forward_tokens += static_cast<double>(in.chunk->ref.length);
  }
}

void price_quantization(const PlanInput& in, const std::string& store_key, double share, PlanStep& s) {
  const double error = in.env.stored_quantization(store_key);
  if (!(error > 0) || !(share > 0)) return;
  s.quantized_kl = share * in.fidelity.predict(planner::Loss::kQuantized, error, in.weight);
  s.predicted_kl += s.quantized_kl;
  s.exact = false;
  s.reason += "; read back from int8 rows";
}

namespace {

int64_t kv_bytes(const PlanInput& in) { return in.length * in.kv_per_token; }

// A floor for the actions that forward the instance's tokens in context (estimate_seconds prices them so).
ActionFloor forward_floor(const PlanInput& in, bool applicable) {
  return {applicable, 0.0, in.cost.seconds_forward(in.length, in.position)};
}

}  // namespace

double estimate_seconds(const PlanInput& in, const PlanStep& s) {
  const planner::CostModel& cost = in.cost;
  const int64_t bytes = kv_bytes(in);
  const double load =
      s.needs_canonical && !s.encode_canonical ? cost.seconds_transfer(bytes, to_tier(s.canonical_tier)) : 0.0;
  const double encode = s.encode_canonical ? cost.seconds_forward(in.length, 0) : 0.0;
  switch (s.action) {
    case StepAction::kKeep: return in.moved ? cost.seconds_relocate(bytes) : 0.0;
    case StepAction::kEvict: return 0.0;
    case StepAction::kCanonical:
    case StepAction::kBlind: return load + encode + cost.seconds_relocate(bytes);
    case StepAction::kApplyPatch: return load + encode + cost.seconds_patch_apply(bytes) + cost.seconds_relocate(bytes);
    case StepAction::kLoadConditioned:
      return cost.seconds_transfer(bytes, planner::Tier::kHost) + cost.seconds_relocate(bytes);
    case StepAction::kForm:
    case StepAction::kReprefill:
    case StepAction::kPrefillTurn: return cost.seconds_forward(in.length, in.position);
    case StepAction::kRecompute: return load + encode + cost.seconds_forward(s.recompute_tokens, in.position);
  }
  return 0.0;
}

namespace {

// kDisplacedStartFactor for the window's first instance, formed exactly at position 0 and now behind content (its
// first rows held the attention sink, planner/fidelity_model.h); 1 for every other.
double displaced_start_factor(const PlanInput& in) {
  const bool displaced_start =
      in.old != nullptr && in.old->formed_on_tokens == 0 && in.old->exact_when_formed && in.position > 0;
  return displaced_start ? planner::kDisplacedStartFactor : 1.0;
}

// The blind loss of `in` (its canonical relocated behind its context), times displaced_start_factor. A keep and a
// blind re-serve of the displaced start hold the same KV, so both are priced so.
double blind_kl(const PlanInput& in) {
  return displaced_start_factor(in) * in.fidelity.predict(planner::Loss::kBlind, 1.0, in.weight, in.sensitivity);
}

}  // namespace

double kept_kl(const PlanInput& in) {
  ORBIT_CHECK(in.old != nullptr, "internal error: a keep was priced for a new instance");
  // Recomputed from the instance's current features (never accumulated from earlier plans): what its
  // serving action left, and what the change of its context since then adds.
  double kl = in.old->kl_per_weight * in.weight;
  if (in.reordered) {
    kl += in.fidelity.predict(planner::Loss::kOrbit, 1.0, in.weight, in.sensitivity);
  } else {
    if (in.context_change > 0) {
      kl += in.fidelity.predict(planner::Loss::kKeep, in.context_change, in.weight, in.sensitivity);
    }
    // Drifted and reordered too: the order's loss adds to the drift's (a reorder after a trim is not free).
    if (in.permuted) kl += in.fidelity.predict(planner::Loss::kOrbit, 1.0, in.weight, in.sensitivity);
  }
  // Formed with nothing before it, its KV is the canonical: wherever it sits now behind content, it is
  // served blind, and loses at least what blind reuse is predicted to (the keep loss is calibrated on
  // instances that keep part of what they were formed behind; blind_kl: more at the window's start).
  if (in.old->formed_on_tokens == 0 && in.position > 0) {
    kl = std::max(kl, in.old->kl_per_weight * in.weight + blind_kl(in));
  }
  return kl;
}

HeldKv held_kv(const PlanInput& in, const PlanStep& s) {
  if (in.old == nullptr) return HeldKv::kOther;
  const std::string& key = in.old->key;
  switch (s.action) {
    case StepAction::kApplyPatch: {
      if (in.old->state == kv_patched(key, s.patch_key)) return HeldKv::kSame;
      // A form stores the patch of the KV it computed (under its exact key, EntryMeta::patch_key): the
      // canonical plus that patch is this KV when the patch is full rank, and an approximation of it when not.
      if (in.old->formed_by != StepAction::kForm || in.old->patch_key != s.patch_key) return HeldKv::kOther;
      const std::optional<PatchFacts> facts = in.env.patch_facts(in.chunk->ref.key, s.patch_key);
      return facts.has_value() && facts->exact ? HeldKv::kSame : HeldKv::kFromIt;
    }
    // The canonical relocated behind content (position > 0: the canonical action serves position 0 only).
    case StepAction::kBlind: return in.old->state == kv_canonical(key) ? HeldKv::kSame : HeldKv::kOther;
    default: return HeldKv::kOther;
  }
}

namespace {

// A re-serve of the KV the instance holds is priced as keeping it: the keep's figure carries the drift of its
// context since it was served, and re-serving the same KV repairs none of it. A stored patch formed from
// that KV serves it with the patch's truncation on top: at least as much. A blind re-serve of a canonical
// is priced at least at blind's own loss too (Blind's floor).
void price_held(const PlanInput& in, PlanStep& s) {
  switch (held_kv(in, s)) {
    case HeldKv::kSame:
      s.predicted_kl = s.action == StepAction::kBlind ? std::max(s.predicted_kl, kept_kl(in)) : kept_kl(in);
      s.reason += "; the KV it holds (priced as kept)";
      return;
    case HeldKv::kFromIt:
      s.predicted_kl = std::max(s.predicted_kl, kept_kl(in));
      s.reason += "; formed from the KV it holds (priced at least as kept)";
      return;
    case HeldKv::kOther: return;
  }
}

}  // namespace

namespace {

// ---- keep -------------------------------------------------------------------------------------------

class Keep final : public ServeAction {
 public:
  ServeActionId id() const override { return ServeActionId::kKeep; }
  StepAction category() const override { return StepAction::kKeep; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.old == nullptr) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.predicted_kl = kept_kl(in);
    return s;
  }
};

// ---- canonical ----------------------------------------------------------------------------------------

class Canonical final : public ServeAction {
 public:
  ServeActionId id() const override { return ServeActionId::kCanonical; }
  StepAction category() const override { return StepAction::kCanonical; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || !in.context->empty()) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.needs_canonical = true;
    s.exact = true;
    s.reason = "nothing precedes it: the canonical is exact";
    price_canonical(in, s);  // read from its tier, or encoded here (its first sight: a forward on the critical path)
    price_quantization(in, in.chunk->ref.key, 1.0, s);
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    return {!in.is_turn && in.position == 0, 0.0, in.cost.seconds_relocate(kv_bytes(in))};
  }
};

// ---- stored patch (exact, orbit, stale) ---------------------------------------------------------------

// The sensitivity a stored patch of the chunk is priced at. A chunk this engine has measured no patch of
// reads as unmeasured and takes the sensitivity prior (the worst this engine has seen), yet a patch formed
// by another process, or before the store was reopened, recorded its own: a measurement of this chunk.
double stored_patch_sensitivity(const PlanInput& in, const std::optional<PatchFacts>& facts) {
  if (!facts.has_value() || facts->sensitivity < 0) return in.sensitivity;
  return in.env.chunk_sensitivity(in.chunk->ref.key) < 0 ? facts->sensitivity : in.sensitivity;
}

class StoredPatch final : public ServeAction {
 public:
  ServeActionId id() const override { return ServeActionId::kStoredPatch; }
  StepAction category() const override { return StepAction::kApplyPatch; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || in.context->empty() || !in.policy.reuse_stored || in.policy.store_conditioned)
      return std::nullopt;
    const PatchKeys& keys = keys_of(in);
    PlanStep s = base_step(id(), category());
    set_patch_shape(in, keys, s);
    s.needs_canonical = true;
    if (in.env.available(keys.exact)) {
      s.match = PatchMatch::kExact;
      s.patch_key = keys.exact;
      const std::optional<PatchFacts> facts = in.env.patch_facts(in.chunk->ref.key, keys.exact);
      const bool formed_exact = facts.has_value() && facts->exact;
      const double residual = facts.has_value() ? facts->residual : -1;
      s.exact = keys.full_rank && formed_exact;
      if (!s.exact) {
        // The share of the deficit's energy the stored factors leave out; unknown (a patch this engine
        // did not form, or not formed yet): a stand-in from the share of the rank kept, erring high.
        const int64_t full = std::min<int64_t>(in.length, in.env.limits().k_width);
        const double f = residual >= 0 ? residual
                         : keys.full_rank
                             ? 0.0
                             : planner::truncation_stand_in(static_cast<double>(std::min(keys.rank_k, keys.rank_v)),
                                                            static_cast<double>(full));
        s.predicted_kl =
            in.fidelity.predict(planner::Loss::kTruncated, f, in.weight, stored_patch_sensitivity(in, facts));
      }
      s.reason = "patch hit (exact context)";
    } else if (in.policy.use_orbit_patches && in.env.available(keys.orbit)) {
      s.match = PatchMatch::kOrbit;
      s.patch_key = keys.orbit;
      const double sensitivity = stored_patch_sensitivity(in, in.env.patch_facts(in.chunk->ref.key, keys.orbit));
      s.predicted_kl = in.fidelity.predict(planner::Loss::kOrbit, 1.0, in.weight, sensitivity);
      s.reason = "orbit patch hit (same antecedent set, other order)";
    } else if (in.policy.stale == StalePatch::kAccept || in.policy.kl_budget > 0) {
      // A patch formed under another context: `:stale=D` accepts the closest within divergence D; under a
      // fidelity budget it is one more candidate at any divergence (unless `:stale=D` caps it), priced by
      // the fidelity model's stale loss like every other approximate action. The newest kStaleRecords
      // of the chunk's patches are compared, each in the length of its own context: a chunk reused under
      // many contexts would otherwise make every plan of it scan them all.
      constexpr std::size_t kStaleRecords = 16;
      ORBIT_CHECK(in.weights != nullptr, "internal error: a stale-patch lookup was planned without context weights");
      const double cap = in.policy.stale == StalePatch::kAccept ? in.policy.max_divergence : 1.0;
      const std::optional<StaleMatch> match = in.env.closest_patch(in.chunk->ref.key, keys, *in.weights, kStaleRecords);
      if (!match.has_value() || match->divergence > cap) return std::nullopt;
      const double best = match->divergence;
      s.match = PatchMatch::kStale;
      s.patch_key = match->key;
      s.divergence = best;
      if (match->rank_k > 0 && match->rank_v > 0) {  // what is read: at least the plan's ranks, maybe more
        s.rank_k = match->rank_k;
        s.rank_v = match->rank_v;
      }
      // Divergence compares antecedent sets, so 0 is the same set in another order (the exact key would
      // have matched otherwise): one ordering's patch read under another, which loses at least what an
      // orbit patch does.
      s.predicted_kl = best > 0 ? in.fidelity.predict(planner::Loss::kStale, best, in.weight, in.sensitivity)
                                : in.fidelity.predict(planner::Loss::kOrbit, 1.0, in.weight, in.sensitivity);
      std::ostringstream why;
      why.precision(2);
      why << "stale patch (divergence " << best;
      if (in.policy.stale == StalePatch::kAccept) why << " <= " << in.policy.max_divergence;
      why << ")";
      s.reason = why.str();
    } else {
      return std::nullopt;
    }
    price_held(in, s);
    price_canonical(in, s);
    price_quantization(in, in.chunk->ref.key, 1.0, s);
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    const bool applicable = !in.is_turn && in.position > 0 && in.policy.reuse_stored && !in.policy.store_conditioned;
    const int64_t bytes = kv_bytes(in);
    return {applicable, 0.0, in.cost.seconds_patch_apply(bytes) + in.cost.seconds_relocate(bytes)};
  }
};

// ---- load a stored conditioned KV (prefix-cache baseline) ---------------------------------------------

class LoadConditioned final : public ServeAction {
 public:
  ServeActionId id() const override { return ServeActionId::kLoadConditioned; }
  StepAction category() const override { return StepAction::kLoadConditioned; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || in.context->empty() || !in.policy.store_conditioned) return std::nullopt;
    const PatchKeys& keys = keys_of(in);
    if (!in.env.contains(keys.conditioned)) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.match = PatchMatch::kExact;
    s.patch_key = keys.conditioned;
    s.exact = true;
    s.reason = "prefix hit: stored KV behind this exact context";
    price_quantization(in, keys.conditioned, 1.0, s);
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    return {!in.is_turn && in.position > 0 && in.policy.store_conditioned, 0.0, in.cost.seconds_relocate(kv_bytes(in))};
  }
};

// Whether a live turn's sensitivity is measured as it is served: once per content, where a prediction may
// later use it (a budget prices keeps by it, and a policy that forms patches in the background spends
// background forwards). At position 0 the turn's context is empty, so there is nothing to measure.
bool measures_turn(const PlanInput& in) {
  return in.policy.kl_budget > 0 && in.policy.on_miss == MissAction::kForm && in.position > 0 && in.sensitivity < 0;
}

// ---- exact reuse: the KV a forward computed before, behind the same KV states ---------------------------

class Reuse final : public ServeAction {
 public:
  ServeActionId id() const override { return ServeActionId::kReuse; }
  StepAction category() const override { return StepAction::kLoadConditioned; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.reuse_key == nullptr || !in.policy.reuse_computed || !in.env.contains(*in.reuse_key)) return std::nullopt;
    PlanStep s = base_step(id(), category());
    if (in.is_turn) s.turn_tokens = *in.turn_tokens;
    s.match = PatchMatch::kExact;
    s.patch_key = *in.reuse_key;
    s.bytes_moved = kv_bytes(in);
    s.exact = true;
    s.reason = "exact reuse: its KV computed before behind this same window";
    // A turn served from rows a read computed (an answer sent back) was never prefilled as a turn: it is
    // measured from the loaded KV where a prefill would have measured it.
    s.measure_sensitivity = in.is_turn && measures_turn(in);
    if (s.measure_sensitivity) s.background_tokens = static_cast<double>(in.length);
    price_quantization(in, *in.reuse_key, 1.0, s);
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    return {in.policy.reuse_computed, 0.0, in.cost.seconds_relocate(kv_bytes(in))};
  }
};

// ---- form: exact in-context prefill now, canonical + patch in the background --------------------------

class Form final : public ServeAction {
 public:
  ServeActionId id() const override { return ServeActionId::kForm; }
  StepAction category() const override { return StepAction::kForm; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || in.context->empty()) return std::nullopt;
    const PatchKeys& keys = keys_of(in);
    PlanStep s = base_step(id(), category());
    set_patch_shape(in, keys, s);
    s.forward_tokens = static_cast<double>(in.length);
    s.exact = true;
    s.background_patch = true;
    s.store_keys.push_back(keys.exact);
    if (in.policy.use_orbit_patches && !in.env.available(keys.orbit)) s.store_keys.push_back(keys.orbit);
    if (!in.env.canonical_residence(in.chunk->ref.key).has_value())
      s.background_tokens = static_cast<double>(in.length);
    s.reason = "prefill in context now; canonical + patch formed in the background";
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override { return forward_floor(in, !in.is_turn && in.position > 0); }
};

// ---- prefill in context (re-prefill from the change point) ---------------------------------------------

class Prefill final : public ServeAction {
 public:
  ServeActionId id() const override { return ServeActionId::kPrefill; }
  StepAction category() const override { return StepAction::kReprefill; }
  // Also the window's first chunk when the plan forwards at the window's length (dynamic-NTK RoPE past its
  // anchor), where its canonical carries the base of its own length.
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    const bool first = in.context->empty();
    if (in.is_turn || (first && in.rope_window <= 0)) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.forward_tokens = static_cast<double>(in.length);
    s.exact = true;
    if (in.policy.store_conditioned && !first) {
      s.store_keys.push_back(keys_of(in).conditioned);
    }
    s.reason = first ? "prefill at the window's length (dynamic-NTK RoPE)" : "prefill in context";
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    return forward_floor(in, !in.is_turn && (in.position > 0 || in.rope_window > 0));
  }
};

// ---- blind ------------------------------------------------------------------------------------------

class Blind final : public ServeAction {
 public:
  ServeActionId id() const override { return ServeActionId::kBlind; }
  StepAction category() const override { return StepAction::kBlind; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || in.context->empty()) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.needs_canonical = true;
    s.predicted_kl = blind_kl(in);
    s.reason = "blind (canonical relocated)";
    price_held(in, s);
    price_canonical(in, s);
    price_quantization(in, in.chunk->ref.key, 1.0, s);
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    return {!in.is_turn && in.position > 0, blind_kl(in), in.cost.seconds_relocate(kv_bytes(in))};
  }
};

// ---- token recompute: first-k (EPIC) and CacheBlend ----------------------------------------------------

class Recompute : public ServeAction {
 public:
  StepAction category() const override { return StepAction::kRecompute; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || in.context->empty()) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.needs_canonical = true;
    const int64_t n = in.length;
    const int64_t count = tokens(in.policy, n);
    double probe = 0;
    if (selective() && count > 0 && count < n) {
      const int64_t layers = in.env.limits().num_layers;
      probe = static_cast<double>(std::min<int64_t>(2, layers) * n) / static_cast<double>(layers);
    }
    s.recompute_tokens = count;
    s.forward_tokens = static_cast<double>(count) + probe;
    s.exact = count == n;
    s.predicted_kl = predicted_kl(in, count);
    s.reason = "recompute " + std::to_string(count) + " of " + std::to_string(n) + " tokens";
    price_canonical(in, s);
    // The recomputed rows are formed anew; those left canonical keep the canonical's rounding.
    price_quantization(in, in.chunk->ref.key, 1.0 - static_cast<double>(count) / static_cast<double>(n), s);
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    const int64_t count = tokens(in.policy, in.length);
    return {!in.is_turn && in.position > 0, predicted_kl(in, count), in.cost.seconds_forward(count, in.position)};
  }

 protected:
  // The tokens left canonical keep their loss; those of the displaced start keep its second attention sink
  // (displaced_start_factor: a recompute of 2 of its 13 tokens measured 5.2e-3 where 1.2e-4 was predicted).
  double predicted_kl(const PlanInput& in, int64_t count) const {
    const int64_t n = in.length;
    return count == n ? 0.0
                      : displaced_start_factor(in) *
                            in.fidelity.predict(loss(), 1.0 - static_cast<double>(count) / static_cast<double>(n),
                                                in.weight, in.sensitivity);
  }
  virtual bool selective() const = 0;
  virtual planner::Loss loss() const = 0;
  virtual int64_t tokens(const WindowPolicy& p, int64_t n) const = 0;
};

class FirstK final : public Recompute {
 public:
  ServeActionId id() const override { return ServeActionId::kFirstK; }

 protected:
  bool selective() const override { return false; }
  planner::Loss loss() const override { return planner::Loss::kFirstK; }
  int64_t tokens(const WindowPolicy& p, int64_t n) const override { return std::min(p.first_k, n); }
};

class CacheBlend final : public Recompute {
 public:
  ServeActionId id() const override { return ServeActionId::kCacheBlend; }

 protected:
  bool selective() const override { return true; }
  planner::Loss loss() const override { return planner::Loss::kCacheBlend; }
  int64_t tokens(const WindowPolicy& p, int64_t n) const override {
    return std::min<int64_t>(n, static_cast<int64_t>(std::ceil(p.recompute_ratio * static_cast<double>(n) - 1e-9)));
  }
};

// ---- a live turn ------------------------------------------------------------------------------------------

class PrefillTurn final : public ServeAction {
 public:
  ServeActionId id() const override { return ServeActionId::kPrefillTurn; }
  StepAction category() const override { return StepAction::kPrefillTurn; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (!in.is_turn) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.turn_tokens = *in.turn_tokens;
    s.forward_tokens = static_cast<double>(in.length);
    s.exact = true;
    s.reason = "live turn";
    s.measure_sensitivity = measures_turn(in);
    if (s.measure_sensitivity) s.background_tokens = static_cast<double>(in.length);
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override { return forward_floor(in, in.is_turn); }
};

}  // namespace

const std::vector<const ServeAction*>& all_actions() {
  static const Keep keep;
  static const Canonical canonical;
  static const StoredPatch stored;
  static const LoadConditioned conditioned;
  static const Blind blind;
  static const FirstK first_k;
  static const CacheBlend cacheblend;
  static const Form form;
  static const Prefill prefill;
  static const PrefillTurn turn;
  static const Reuse reuse;
  static const std::vector<const ServeAction*> all = {&keep,    &canonical,  &stored, &conditioned, &reuse, &blind,
                                                      &first_k, &cacheblend, &form,   &prefill,     &turn};
  return all;
}

const ServeAction& action(ServeActionId id) {
  for (const ServeAction* a : all_actions()) {
    if (a->id() == id) return *a;
  }
  ORBIT_FAIL("plan: no serving action has id " << static_cast<int>(id) << " (" << serve_action_name(id) << ")");
}

}  // namespace orbit::detail