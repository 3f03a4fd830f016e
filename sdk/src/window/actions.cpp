// The serving actions (actions.h): one class each, and the registry.
#include "window/actions.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/runtime/repair.h"
#include "window/window_ops.h"

namespace orbit::detail {

// ---- the window being built ------------------------------------------------------------------------

WindowBuild::~WindowBuild() { core.pool().clear(entries); }

runtime::PastKV WindowBuild::past() {
  positions.resize(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (contents[i].empty()) contents[i] = entry_content(core, entries[i]);
    if (!positions[i].defined()) positions[i] = core.positions_for(entries[i].chunk, entries[i].length, starts[i]);
  }
  return concat_past(core.config().num_layers, contents, positions);
}

std::vector<ContextItem> WindowBuild::context() const {
  std::vector<ContextItem> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) out.push_back({e.key, e.version});
  return out;
}

std::vector<InstanceId> WindowBuild::context_ids() const {
  std::vector<InstanceId> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) out.push_back(e.id);
  return out;
}

std::vector<std::string> WindowBuild::context_keys() const {
  std::vector<std::string> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) out.push_back(e.key);
  return out;
}

// ---- shared pricing ---------------------------------------------------------------------------------

namespace {

// The patch keys of a plan input: from its signer when the planner made one (O(1)), else from the keys.
// Hashing the keys (three SHA-256 digests) is most of what planning a stored patch or a form costs, and a
// budgeted plan asks for them from several actions per instance.
const PatchKeys& keys_of(const PlanInput& in) {
  const void* context = in.signer != nullptr ? static_cast<const void*>(in.signer) : in.context;
  const std::size_t size = in.signer != nullptr ? in.signer->size() : in.context->size();
  if (!in.memo_keys.has_value() || in.memo_context != context || in.memo_size != size) {
    in.memo_keys = in.signer != nullptr ? patch_keys(in.core, in.policy, *in.chunk, *in.signer)
                                        : patch_keys(in.core, in.policy, *in.chunk, *in.context, in.prefix);
    in.memo_context = context;
    in.memo_size = size;
  }
  return *in.memo_keys;
}

}  // namespace

namespace {

planner::Tier to_tier(StoreTier t) {
  switch (t) {
    case StoreTier::kDevice: return planner::Tier::kDevice;
    case StoreTier::kHost: return planner::Tier::kHost;
    case StoreTier::kDisk: return planner::Tier::kDisk;
    case StoreTier::kRemote: return planner::Tier::kRemote;
  }
  return planner::Tier::kDisk;
}

PlanStep base_step(const char* how, StepAction category) {
  PlanStep s;
  s.how = how;
  s.action = category;
  return s;
}

// The step's forward of the chunk in context (critical path).
runtime::Content forward_in_context(EngineCore& core, const runtime::ForwardInput& input, WindowBuild& b) {
  c10::InferenceMode guard;
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  if (b.entries.empty()) return core.model().forward(input, nullptr, fo).content;
  const runtime::PastKV past = b.past();
  return core.model().forward(input, &past, fo).content;
}

// The instance's token ids (a turn's, a token chunk's), or null (an embedding chunk).
const std::vector<int64_t>* instance_tokens(const ApplyInput& in) {
  if (in.chunk == nullptr) return in.turn_tokens;
  return in.chunk->ref.kind == ChunkKind::kTokens ? &in.chunk->tokens : nullptr;
}

// Appends rows of KV (content at `positions`) to a past.
void append_rows(runtime::PastKV& past, const runtime::Content& rows, const at::Tensor& positions) {
  if (past.length() == 0) {
    past.layers = rows;
    past.positions = positions;
    return;
  }
  for (std::size_t l = 0; l < past.layers.size(); ++l) {
    past.layers[l].k = at::cat({past.layers[l].k, rows[l].k}, 0);
    past.layers[l].v = at::cat({past.layers[l].v, rows[l].v}, 0);
  }
  past.positions = at::cat({past.positions, positions}, -1);
}

// The step's forward of the instance in context: its leading step.reused_tokens rows loaded from the KV
// stored under step.reuse_from when the step says so and that KV is there, the rest forwarded. Adds the
// tokens forwarded to out.forward_tokens.
runtime::Content forward_reusing(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  const std::vector<int64_t>* tokens = instance_tokens(in);
  const int64_t n = in.length, k = step.reused_tokens;
  std::optional<runtime::Content> stored;
  if (k > 0 && tokens != nullptr && k <= n) stored = in.core.get_conditioned(step.reuse_from);
  if (!stored.has_value() || stored->empty() || stored->front().k.size(0) < k) {
    out.forward_tokens += static_cast<double>(n);
    const runtime::ForwardInput input = in.chunk != nullptr ? in.core.input_for(*in.chunk, in.position)
                                                            : in.core.input_for_tokens(*tokens, in.position);
    return forward_in_context(in.core, input, in.build);
  }
  c10::InferenceMode guard;
  runtime::Content head(stored->size());
  for (std::size_t l = 0; l < head.size(); ++l)
    head[l] = {(*stored)[l].k.narrow(0, 0, k), (*stored)[l].v.narrow(0, 0, k)};
  out.bytes_moved += runtime::content_bytes(head);
  ++out.patch_hits;
  out.approximate_reuse = step.match == PatchMatch::kStale;
  if (k == n) return head;
  runtime::PastKV past = in.build.entries.empty() ? runtime::PastKV{} : in.build.past();
  append_rows(past, head, in.core.positions_for(nullptr, k, in.position));
  const std::vector<int64_t> rest(tokens->begin() + k, tokens->end());
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  const runtime::Content tail =
      in.core.model().forward(in.core.input_for_tokens(rest, in.position + k), &past, fo).content;
  out.forward_tokens += static_cast<double>(n - k);
  runtime::Content all(head.size());
  for (std::size_t l = 0; l < all.size(); ++l) {
    all[l] = {at::cat({head[l].k, tail[l].k}, 0), at::cat({head[l].v, tail[l].v}, 0)};
  }
  return all;
}

runtime::Content canonical_for(ApplyInput& in, ApplyOutput& out) {
  bool encoded = false;
  int64_t bytes = 0;
  runtime::Content c = in.core.canonical(*in.chunk, &encoded, &bytes);
  if (encoded) {
    ++out.canonicals_encoded;
    out.forward_tokens += static_cast<double>(in.length);
    out.encode_tokens += static_cast<double>(in.length);
  }
  out.bytes_moved += bytes;
  return c;
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
  const auto tier = in.core.canonical_residence(in.chunk->ref.key);
  if (tier.has_value()) {
    s.canonical_tier = *tier;
    s.bytes_moved += in.chunk->ref.length * in.kv_per_token;
  } else {
    s.encode_canonical = true;
    s.forward_tokens += static_cast<double>(in.chunk->ref.length);
  }
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

// ---- keep -------------------------------------------------------------------------------------------

class Keep final : public ServeAction {
 public:
  const char* id() const override { return "keep"; }
  StepAction category() const override { return StepAction::kKeep; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.old == nullptr) return std::nullopt;
    PlanStep s = base_step(id(), category());
    // Recomputed from the instance's current features (never accumulated from earlier plans): what its
    // serving action left, and what the change of its context since then adds.
    s.predicted_kl = in.old->kl_per_weight * in.weight;
    if (in.reordered) {
      s.predicted_kl += in.fidelity.predict(planner::Loss::kOrbit, 1.0, in.weight, in.sensitivity);
    } else if (in.context_change > 0) {
      s.predicted_kl += in.fidelity.predict(planner::Loss::kKeep, in.context_change, in.weight, in.sensitivity);
    }
    return s;
  }
  void apply(ApplyInput& in, const PlanStep&, ApplyOutput& out) const override {
    ORBIT_CHECK(in.old != nullptr, "apply: plan keeps an instance this window does not hold");
    out.keep_pages = true;
    out.done_as = StepAction::kKeep;
  }
};

// ---- canonical ----------------------------------------------------------------------------------------

class Canonical final : public ServeAction {
 public:
  const char* id() const override { return "canonical"; }
  StepAction category() const override { return StepAction::kCanonical; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || !in.context->empty()) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.needs_canonical = true;
    s.exact = true;
    s.reason = "nothing precedes it: the canonical is exact";
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    return {!in.is_turn && in.position == 0, 0.0, in.cost.seconds_relocate(kv_bytes(in))};
  }
  void apply(ApplyInput& in, const PlanStep&, ApplyOutput& out) const override {
    out.content = canonical_for(in, out);
    out.done_as = StepAction::kCanonical;
  }
};

// ---- stored patch (exact, orbit, stale) ---------------------------------------------------------------

class StoredPatch final : public ServeAction {
 public:
  const char* id() const override { return "stored-patch"; }
  StepAction category() const override { return StepAction::kApplyPatch; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || in.context->empty() || !in.policy.reuse_stored || in.policy.store_conditioned)
      return std::nullopt;
    const PatchKeys& keys = keys_of(in);
    PlanStep s = base_step(id(), category());
    set_patch_shape(in, keys, s);
    s.needs_canonical = true;
    if (in.core.available(keys.exact)) {
      s.match = PatchMatch::kExact;
      s.patch_key = keys.exact;
      const std::optional<EngineCore::PatchFacts> facts = in.core.patch_facts(in.chunk->ref.key, keys.exact);
      const bool formed_exact = facts.has_value() && facts->exact;
      const double residual = facts.has_value() ? facts->residual : -1;
      s.exact = keys.full_rank && formed_exact;
      if (!s.exact) {
        // The share of the deficit's energy the stored factors leave out; unknown (a patch this engine
        // did not form, or not formed yet): a stand-in from the share of the rank kept, erring high.
        const int64_t full = std::min<int64_t>(in.length, in.core.config().content_k_shape().width());
        const double f = residual >= 0 ? residual
                         : keys.full_rank
                             ? 0.0
                             : planner::truncation_stand_in(static_cast<double>(std::min(keys.rank_k, keys.rank_v)),
                                                            static_cast<double>(full));
        s.predicted_kl = in.fidelity.predict(planner::Loss::kTruncated, f, in.weight, in.sensitivity);
      }
      s.reason = "patch hit (exact context)";
    } else if (in.policy.use_orbit_patches && in.core.available(keys.orbit)) {
      s.match = PatchMatch::kOrbit;
      s.patch_key = keys.orbit;
      s.predicted_kl = in.fidelity.predict(planner::Loss::kOrbit, 1.0, in.weight, in.sensitivity);
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
      const std::optional<EngineCore::StaleMatch> match =
          in.core.closest_patch(in.chunk->ref.key, keys.variant, *in.weights, kStaleRecords);
      if (!match.has_value() || match->divergence > cap) return std::nullopt;
      const double best = match->divergence;
      s.match = PatchMatch::kStale;
      s.patch_key = match->key;
      s.divergence = best;
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
    price_canonical(in, s);
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    const bool applicable = !in.is_turn && in.position > 0 && in.policy.reuse_stored && !in.policy.store_conditioned;
    const int64_t bytes = kv_bytes(in);
    return {applicable, 0.0, in.cost.seconds_patch_apply(bytes) + in.cost.seconds_relocate(bytes)};
  }
  void apply(ApplyInput& in, const PlanStep& step, ApplyOutput& out) const override {
    const runtime::Content canonical = canonical_for(in, out);
    std::optional<runtime::Patch> patch = in.core.get_patch(step.patch_key);
    if (patch.has_value()) {
      in.core.note_read_patch(in.chunk->ref.key, step.patch_key, *patch);
      out.content = runtime::apply_patch(in.core.model(), canonical, *patch);
      out.bytes_moved += patch->bytes();
      ++out.patch_hits;
      out.done_as = StepAction::kApplyPatch;
    } else {  // dropped from the store between plan and apply: prefill in context instead
      out.content = forward_in_context(in.core, in.core.input_for(*in.chunk, in.position), in.build);
      out.forward_tokens += static_cast<double>(in.length);
      out.done_as = StepAction::kReprefill;
    }
    out.conditioned = true;
  }
};

// ---- load a stored conditioned KV (prefix-cache baseline) ---------------------------------------------

class LoadConditioned final : public ServeAction {
 public:
  const char* id() const override { return "load-conditioned"; }
  StepAction category() const override { return StepAction::kLoadConditioned; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || in.context->empty() || !in.policy.store_conditioned) return std::nullopt;
    const PatchKeys& keys = keys_of(in);
    if (!in.core.contains(keys.conditioned)) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.match = PatchMatch::kExact;
    s.patch_key = keys.conditioned;
    s.exact = true;
    s.reason = "prefix hit: stored KV behind this exact context";
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    return {!in.is_turn && in.position > 0 && in.policy.store_conditioned, 0.0, in.cost.seconds_relocate(kv_bytes(in))};
  }
  void apply(ApplyInput& in, const PlanStep& step, ApplyOutput& out) const override {
    std::optional<runtime::Content> stored = in.core.get_conditioned(step.patch_key);
    if (stored.has_value()) {
      out.content = *stored;
      out.bytes_moved += runtime::content_bytes(out.content);
      ++out.patch_hits;
      out.done_as = StepAction::kLoadConditioned;
    } else {
      out.content = forward_in_context(in.core, in.core.input_for(*in.chunk, in.position), in.build);
      out.forward_tokens += static_cast<double>(in.length);
      out.done_as = StepAction::kReprefill;
    }
    out.conditioned = true;
  }
};

// ---- exact reuse: the KV a forward computed before, behind the same KV states ---------------------------

// The instance forwarded in context behind what the build holds (a turn's tokens, a chunk's input).
runtime::Content forward_instance(ApplyInput& in) {
  const runtime::ForwardInput input = in.chunk != nullptr ? in.core.input_for(*in.chunk, in.position)
                                                          : in.core.input_for_tokens(*in.turn_tokens, in.position);
  return forward_in_context(in.core, input, in.build);
}

class Reuse final : public ServeAction {
 public:
  const char* id() const override { return "reuse"; }
  StepAction category() const override { return StepAction::kLoadConditioned; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.reuse_key == nullptr || !in.policy.reuse_computed || !in.core.contains(*in.reuse_key)) return std::nullopt;
    PlanStep s = base_step(id(), category());
    if (in.is_turn) s.turn_tokens = *in.turn_tokens;
    s.match = PatchMatch::kExact;
    s.patch_key = *in.reuse_key;
    s.bytes_moved = kv_bytes(in);
    s.exact = true;
    s.reason = "exact reuse: its KV computed before behind this same window";
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    return {in.policy.reuse_computed, 0.0, in.cost.seconds_relocate(kv_bytes(in))};
  }
  void apply(ApplyInput& in, const PlanStep&, ApplyOutput& out) const override {
    // The key of the window as built (the plan's, unless an earlier step fell back to another action).
    std::optional<runtime::Content> stored = in.core.get_conditioned(reuse_key(*in.key, in.build.chain));
    out.conditioned = true;
    if (stored.has_value() && !stored->empty() && stored->front().k.size(0) == in.length) {
      out.content = std::move(*stored);
      out.bytes_moved += runtime::content_bytes(out.content);
      ++out.patch_hits;
      out.done_as = StepAction::kLoadConditioned;
      return;
    }
    out.content = forward_instance(in);
    out.forward_tokens += static_cast<double>(in.length);
    out.done_as = in.chunk != nullptr ? StepAction::kReprefill : StepAction::kPrefillTurn;
  }
};

// ---- form: exact in-context prefill now, canonical + patch in the background --------------------------

class Form final : public ServeAction {
 public:
  const char* id() const override { return "form"; }
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
    if (in.policy.use_orbit_patches && !in.core.available(keys.orbit)) s.store_keys.push_back(keys.orbit);
    if (!in.core.canonical_residence(in.chunk->ref.key).has_value())
      s.background_tokens = static_cast<double>(in.length);
    s.reason = "prefill in context now; canonical + patch formed in the background";
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override { return forward_floor(in, !in.is_turn && in.position > 0); }
  void apply(ApplyInput& in, const PlanStep& step, ApplyOutput& out) const override {
    out.content = forward_reusing(in, step, out);
    PatchJob job;
    job.chunk = in.chunk;
    job.conditioned = out.content;
    job.context = in.build.context_keys();
    job.store_keys = step.store_keys;
    job.variant = step.variant;
    job.rank_k = step.rank_k;
    job.rank_v = step.rank_v;
    job.deep_only = step.deep_only;
    job.deep_energy = step.deep_energy;
    job.full_rank = !step.deep_only &&
                    step.rank_k == std::min<int64_t>(in.length, in.core.config().content_k_shape().width()) &&
                    step.rank_v == std::min<int64_t>(in.length, in.core.config().content_v_shape().width());
    job.exact = step.exact;
    in.core.queue_patch(std::move(job));
    ++out.background_jobs;
    out.conditioned = true;
    out.done_as = StepAction::kForm;
  }
};

// ---- prefill in context (re-prefill from the change point) ---------------------------------------------

class Prefill final : public ServeAction {
 public:
  const char* id() const override { return "prefill"; }
  StepAction category() const override { return StepAction::kReprefill; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || in.context->empty()) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.forward_tokens = static_cast<double>(in.length);
    s.exact = true;
    if (in.policy.store_conditioned) {
      s.store_keys.push_back(keys_of(in).conditioned);
    }
    s.reason = "prefill in context";
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override { return forward_floor(in, !in.is_turn && in.position > 0); }
  void apply(ApplyInput& in, const PlanStep& step, ApplyOutput& out) const override {
    out.content = forward_reusing(in, step, out);
    for (const std::string& k : step.store_keys) {
      PatchRecord rec;
      rec.key = k;
      rec.context = in.build.context_keys();
      rec.variant = "conditioned";
      rec.conditioned = true;
      rec.exact = step.exact;
      in.core.put_conditioned(out.content, in.chunk->ref.key, rec);
    }
    out.conditioned = true;
    out.done_as = StepAction::kReprefill;
  }
};

// ---- blind ------------------------------------------------------------------------------------------

class Blind final : public ServeAction {
 public:
  const char* id() const override { return "blind"; }
  StepAction category() const override { return StepAction::kBlind; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (in.is_turn || in.context->empty()) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.needs_canonical = true;
    s.predicted_kl = in.fidelity.predict(planner::Loss::kBlind, 1.0, in.weight, in.sensitivity);
    s.reason = "blind (canonical relocated)";
    price_canonical(in, s);
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    return {!in.is_turn && in.position > 0, in.fidelity.predict(planner::Loss::kBlind, 1.0, in.weight, in.sensitivity),
            in.cost.seconds_relocate(kv_bytes(in))};
  }
  void apply(ApplyInput& in, const PlanStep&, ApplyOutput& out) const override {
    out.content = canonical_for(in, out);
    out.done_as = StepAction::kBlind;
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
      const int64_t layers = in.core.config().num_layers;
      probe = static_cast<double>(std::min<int64_t>(2, layers) * n) / static_cast<double>(layers);
    }
    s.recompute_tokens = count;
    s.forward_tokens = static_cast<double>(count) + probe;
    s.exact = count == n;
    s.predicted_kl = predicted_kl(in, count);
    s.reason = "recompute " + std::to_string(count) + " of " + std::to_string(n) + " tokens";
    price_canonical(in, s);
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override {
    const int64_t count = tokens(in.policy, in.length);
    return {!in.is_turn && in.position > 0, predicted_kl(in, count), in.cost.seconds_forward(count, in.position)};
  }
  void apply(ApplyInput& in, const PlanStep& step, ApplyOutput& out) const override {
    const runtime::Content canonical = canonical_for(in, out);
    out.done_as = StepAction::kRecompute;
    out.conditioned = true;
    const int64_t count = step.recompute_tokens;
    if (count == 0 || in.build.entries.empty()) {
      out.content = canonical;
      return;
    }
    c10::InferenceMode guard;
    const runtime::ForwardInput input = in.core.input_for(*in.chunk, in.position);
    const runtime::PastKV past = in.build.past();
    double probe = 0;
    const at::Tensor idx = selective()
                               ? runtime::cacheblend_select(in.core.model(), input, past, canonical, count, &probe)
                               : at::arange(count, at::kLong);
    out.content = runtime::recompute_tokens(in.core.model(), input, past, canonical, idx);
    out.forward_tokens += static_cast<double>(count) + probe;
  }

 protected:
  double predicted_kl(const PlanInput& in, int64_t count) const {
    const int64_t n = in.length;
    return count == n ? 0.0
                      : in.fidelity.predict(loss(), 1.0 - static_cast<double>(count) / static_cast<double>(n),
                                            in.weight, in.sensitivity);
  }
  virtual bool selective() const = 0;
  virtual planner::Loss loss() const = 0;
  virtual int64_t tokens(const WindowPolicy& p, int64_t n) const = 0;
};

class FirstK final : public Recompute {
 public:
  const char* id() const override { return "first-k"; }

 protected:
  bool selective() const override { return false; }
  planner::Loss loss() const override { return planner::Loss::kFirstK; }
  int64_t tokens(const WindowPolicy& p, int64_t n) const override { return std::min(p.first_k, n); }
};

class CacheBlend final : public Recompute {
 public:
  const char* id() const override { return "cacheblend"; }

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
  const char* id() const override { return "prefill-turn"; }
  StepAction category() const override { return StepAction::kPrefillTurn; }
  std::optional<PlanStep> plan(const PlanInput& in) const override {
    if (!in.is_turn) return std::nullopt;
    PlanStep s = base_step(id(), category());
    s.turn_tokens = *in.turn_tokens;
    s.forward_tokens = static_cast<double>(in.length);
    s.exact = true;
    s.reason = "live turn";
    return s;
  }
  ActionFloor floor(const PlanInput& in) const override { return forward_floor(in, in.is_turn); }
  void apply(ApplyInput& in, const PlanStep& step, ApplyOutput& out) const override {
    out.content = forward_reusing(in, step, out);
    out.conditioned = true;
    out.done_as = StepAction::kPrefillTurn;
  }
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

const ServeAction& action(const std::string& id) {
  for (const ServeAction* a : all_actions()) {
    if (id == a->id()) return *a;
  }
  ORBIT_FAIL("apply: the plan names an unknown serving action '" << id << "'");
}

}  // namespace orbit::detail
