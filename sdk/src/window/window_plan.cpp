#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/planner/cost_model.h"
#include "window/window_ops.h"

namespace orbit::detail {

namespace {

// A version no committed content has: marks an antecedent whose KV this plan re-forms.
constexpr uint64_t kReformed = ~uint64_t{0};

int64_t full_rank(int64_t n, int64_t width) { return std::min(n, width); }

planner::Tier to_tier(StoreTier t) {
  switch (t) {
    case StoreTier::kDevice: return planner::Tier::kDevice;
    case StoreTier::kHost: return planner::Tier::kHost;
    case StoreTier::kDisk: return planner::Tier::kDisk;
  }
  return planner::Tier::kDisk;
}

// The cost model's estimate of one step (seconds).
double estimate(const planner::CostModel& cost, const PlanStep& s, int64_t length, int64_t context,
                int64_t kv_per_token, bool moved) {
  const int64_t bytes = length * kv_per_token;
  const double load = s.needs_canonical && !s.encode_canonical ? cost.seconds_transfer(bytes, to_tier(s.canonical_tier)) : 0.0;
  const double encode = s.encode_canonical ? cost.seconds_forward(length, 0) : 0.0;
  switch (s.action) {
    case StepAction::kKeep: return moved ? cost.seconds_relocate(bytes) : 0.0;
    case StepAction::kEvict: return 0.0;
    case StepAction::kCanonical:
    case StepAction::kBlind: return load + encode + cost.seconds_relocate(bytes);
    case StepAction::kApplyPatch: return load + encode + cost.seconds_patch_apply(bytes) + cost.seconds_relocate(bytes);
    case StepAction::kLoadConditioned: return cost.seconds_transfer(bytes, planner::Tier::kHost) + cost.seconds_relocate(bytes);
    case StepAction::kForm: return load + encode + cost.seconds_forward(length, context) + cost.seconds_patch_form(bytes);
    case StepAction::kReprefill:
    case StepAction::kPrefillTurn: return cost.seconds_forward(length, context);
    case StepAction::kRecompute:
      return load + encode + cost.seconds_forward(static_cast<int64_t>(s.forward_tokens) - (s.encode_canonical ? length : 0), context);
  }
  return 0.0;
}

bool moved(const Slot& sl, const std::vector<int64_t>& old_position, int64_t position) {
  return sl.existing >= 0 && old_position[static_cast<std::size_t>(sl.existing)] != position;
}

struct Planned {
  PlanStep step;
  std::string key;
  uint64_t version = 0;  // kReformed when this plan re-forms it
  int64_t extent = 0;
  int64_t length = 0;
};

}  // namespace

PatchKeys patch_keys(const EngineCore& core, const WindowPolicy& policy, const ChunkRecord& chunk,
                     const std::vector<std::string>& context, std::size_t prefix) {
  const runtime::ModelConfig& c = core.config();
  const int64_t n = chunk.ref.length;
  const int64_t dk = c.content_k_shape().width();
  const int64_t dv = c.content_v_shape().width();
  PatchKeys k;
  k.rank_k = policy.rank_k < 0 ? full_rank(n, dk) : std::min(policy.rank_k, full_rank(n, dk));
  k.rank_v = policy.rank_v < 0 ? full_rank(n, dv) : std::min(policy.rank_v, full_rank(n, dv));
  k.full_rank = !policy.deep_only && k.rank_k == full_rank(n, dk) && k.rank_v == full_rank(n, dv);
  std::ostringstream variant;
  variant << (policy.deep_only ? "deep" : "full");
  if (policy.deep_only) variant << "@" << policy.deep_energy;
  k.variant = variant.str();
  const std::string exact_sig = exact_signature(context);
  k.exact = patch_key({chunk.ref.key, exact_sig, k.variant, k.rank_k, k.rank_v});
  const std::vector<std::string> pre(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(std::min(prefix, context.size())));
  const std::vector<std::string> ante(context.begin() + static_cast<std::ptrdiff_t>(std::min(prefix, context.size())), context.end());
  k.orbit = patch_key({chunk.ref.key, orbit_signature(pre, ante), k.variant, k.rank_k, k.rank_v});
  k.conditioned = patch_key({chunk.ref.key, exact_sig, "conditioned", 0, 0});
  return k;
}

double context_divergence(const EngineCore& core, const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::map<std::string, std::pair<int64_t, int64_t>> counts;
  for (const auto& k : a) ++counts[k].first;
  for (const auto& k : b) ++counts[k].second;
  double lo = 0, hi = 0;
  for (const auto& [key, c] : counts) {
    const double w = static_cast<double>(core.key_length(key));
    lo += w * static_cast<double>(std::min(c.first, c.second));
    hi += w * static_cast<double>(std::max(c.first, c.second));
  }
  return hi == 0 ? 0.0 : 1.0 - lo / hi;
}

Plan plan_layout(const WindowState& state, const Layout& layout) {
  EngineCore& core = *state.core;
  core.check_open();
  const WindowPolicy& policy = state.options.policy;
  const runtime::ModelConfig& config = core.config();

  Plan plan;
  plan.attention = state.core->model().attention_path(1, true);
  plan.op = layout.op;
  plan.window_id = state.id;
  plan.window_version = state.version;
  plan.cascade = layout.cascade;

  int64_t position = 0;
  for (int64_t idx : layout.evict) {
    const Entry& e = state.entries[static_cast<std::size_t>(idx)];
    PlanStep s;
    s.action = StepAction::kEvict;
    s.instance = e.id;
    s.chunk = e.ref();
    s.is_turn = e.is_turn;
    int64_t p = 0;
    for (int64_t j = 0; j < idx; ++j) p += state.entries[static_cast<std::size_t>(j)].extent;
    s.position = p;
    s.exact = true;
    s.reason = e.is_turn ? "turn dropped (turns are not stored)" : "canonical stays in the store; recallable";
    plan.steps.push_back(s);
  }

  // Leading turns form the orbit prefix (they do not move under reorder).
  std::size_t prefix = 0;
  while (prefix < layout.slots.size()) {
    const Slot& sl = layout.slots[prefix];
    const bool turn = sl.existing >= 0 ? state.entries[static_cast<std::size_t>(sl.existing)].is_turn : sl.is_turn;
    if (!turn) break;
    ++prefix;
  }

  const planner::CostModel cost = core.cost_model();
  const int64_t kv_per_token = core.model_info().kv_bytes_per_token;
  std::vector<int64_t> old_position(state.entries.size(), 0);
  for (std::size_t j = 1; j < state.entries.size(); ++j) old_position[j] = old_position[j - 1] + state.entries[j - 1].extent;

  std::vector<Planned> done;
  bool all_exact = true;
  int64_t pages = 0;
  for (std::size_t i = 0; i < layout.slots.size(); ++i) {
    const Slot& sl = layout.slots[i];
    Planned pl;
    PlanStep& s = pl.step;
    s.instance = sl.id;
    s.position = position;
    std::vector<std::string> ctx_keys;
    std::vector<ContextItem> ctx;
    bool ctx_exact = true;
    for (const Planned& d : done) {
      ctx_keys.push_back(d.key);
      ctx.push_back({d.key, d.version});
      ctx_exact = ctx_exact && d.step.exact;
    }

    const Entry* old = sl.existing >= 0 ? &state.entries[static_cast<std::size_t>(sl.existing)] : nullptr;
    const ChunkRecord* chunk = old != nullptr ? old->chunk : sl.chunk;
    const bool is_turn = old != nullptr ? old->is_turn : sl.is_turn;
    pl.key = old != nullptr ? old->key : (is_turn ? core.turn_key(sl.turn_tokens) : chunk->ref.key);
    pl.length = old != nullptr ? old->length : (is_turn ? static_cast<int64_t>(sl.turn_tokens.size()) : chunk->ref.length);
    pl.extent = old != nullptr ? old->extent : (is_turn ? pl.length : chunk->ref.extent);
    s.is_turn = is_turn;
    if (is_turn) {
      s.chunk.key = pl.key;
      s.chunk.kind = ChunkKind::kTokens;
      s.chunk.length = s.chunk.extent = pl.length;
      s.chunk.label = "turn";
    } else {
      s.chunk = chunk->ref;
    }

    bool relook = old == nullptr;
    if (old != nullptr) {
      std::vector<std::string> old_keys;
      for (const auto& c : old->formed_on) old_keys.push_back(c.key);
      const bool same = old->formed_on == ctx;
      const bool keys_changed = old_keys != ctx_keys;
      if (same) {
        s.action = StepAction::kKeep;
        s.exact = old->exact_when_formed;
        s.reason = old_position[static_cast<std::size_t>(sl.existing)] != position ? "relocated (rotation only)" : "unchanged";
      } else if (sl.force || (layout.reorder_relookup && keys_changed) ||
                 policy.survivors == SurvivorAction::kRecondition) {
        relook = true;
        if (s.reason.empty()) {
          s.reason = !sl.reason.empty() ? sl.reason
                     : keys_changed      ? "context changed" + (layout.change_reason.empty() ? "" : ": " + layout.change_reason)
                                         : "an antecedent's KV was re-formed";
        }
      } else {
        s.action = StepAction::kKeep;
        s.exact = false;
        s.reason = "context changed" + (layout.change_reason.empty() ? "" : " (" + layout.change_reason + ")") +
                   "; kept as-is, relocation only";
      }
    }

    if (relook) {
      if (is_turn) {
        s.action = StepAction::kPrefillTurn;
        s.turn_tokens = old != nullptr ? old->turn_tokens : sl.turn_tokens;
        s.forward_tokens = static_cast<double>(pl.length);
        s.exact = ctx_exact;
        if (s.reason.empty()) s.reason = "live turn";
      } else if (ctx_keys.empty()) {
        s.action = StepAction::kCanonical;
        s.needs_canonical = true;
        s.exact = true;
        if (s.reason.empty()) s.reason = "nothing precedes it: the canonical is exact";
      } else {
        const PatchKeys keys = patch_keys(core, policy, *chunk, ctx_keys, prefix);
        bool found = false;
        if (policy.store_conditioned && core.contains(keys.conditioned)) {
          s.action = StepAction::kLoadConditioned;
          s.match = PatchMatch::kExact;
          s.patch_key = keys.conditioned;
          s.exact = ctx_exact;
          s.reason = "prefix hit: stored KV behind this exact context";
          found = true;
        }
        if (!found && policy.reuse_stored && !policy.store_conditioned) {
          if (core.contains(keys.exact)) {
            s.action = StepAction::kApplyPatch;
            s.match = PatchMatch::kExact;
            s.patch_key = keys.exact;
            bool formed_exact = false;
            for (const PatchRecord& r : core.patches_of(chunk->ref.key)) {
              if (r.key == keys.exact) formed_exact = r.exact;
            }
            s.exact = ctx_exact && keys.full_rank && formed_exact;
            s.reason = "patch hit (exact context)";
            found = true;
          } else if (policy.use_orbit_patches && core.contains(keys.orbit)) {
            s.action = StepAction::kApplyPatch;
            s.match = PatchMatch::kOrbit;
            s.patch_key = keys.orbit;
            s.reason = "orbit patch hit (same antecedent set, other order)";
            found = true;
          } else if (policy.stale == StalePatch::kAccept) {
            double best = 2;
            std::string best_key;
            for (const PatchRecord& r : core.patches_of(chunk->ref.key)) {
              if (r.conditioned || r.variant != keys.variant) continue;
              const double d = context_divergence(core, r.context, ctx_keys);
              if (d < best && core.contains(r.key)) {
                best = d;
                best_key = r.key;
              }
            }
            if (!best_key.empty() && best <= policy.max_divergence) {
              s.action = StepAction::kApplyPatch;
              s.match = PatchMatch::kStale;
              s.patch_key = best_key;
              s.divergence = best;
              std::ostringstream why;
              why << "stale patch accepted (divergence " << best << " <= " << policy.max_divergence << ")";
              s.reason = why.str();
              found = true;
            }
          }
        }
        if (found) {
          s.needs_canonical = s.action == StepAction::kApplyPatch;
        } else {
          const double n = static_cast<double>(pl.length);
          const std::string miss = s.reason.empty() ? "patch miss" : s.reason + "; patch miss";
          switch (policy.on_miss) {
            case MissAction::kForm:
              s.action = StepAction::kForm;
              s.needs_canonical = true;
              s.forward_tokens = n;
              s.exact = ctx_exact;
              s.store_keys.push_back(keys.exact);
              if (policy.use_orbit_patches && !core.contains(keys.orbit)) s.store_keys.push_back(keys.orbit);
              s.reason = miss + ": form the patch (one forward in context)";
              break;
            case MissAction::kReprefill:
              s.action = StepAction::kReprefill;
              s.forward_tokens = n;
              s.exact = ctx_exact;
              if (policy.store_conditioned) s.store_keys.push_back(keys.conditioned);
              s.reason = miss + ": prefill in context";
              break;
            case MissAction::kBlind:
              s.action = StepAction::kBlind;
              s.needs_canonical = true;
              s.exact = false;
              s.reason = miss + ": blind (canonical relocated)";
              break;
            case MissAction::kTokenRecompute:
            case MissAction::kFirstK: {
              s.action = StepAction::kRecompute;
              s.needs_canonical = true;
              const int64_t len = pl.length;
              int64_t count = policy.on_miss == MissAction::kFirstK
                                  ? std::min(policy.first_k, len)
                                  : std::min<int64_t>(len, static_cast<int64_t>(std::ceil(policy.recompute_ratio * static_cast<double>(len) - 1e-9)));
              double probe = 0;
              if (policy.on_miss == MissAction::kTokenRecompute && count > 0 && count < len) {
                probe = static_cast<double>(std::min<int64_t>(2, config.num_layers) * len) / static_cast<double>(config.num_layers);
              }
              s.forward_tokens = static_cast<double>(count) + probe;
              s.exact = ctx_exact && count == len;
              s.reason = miss + ": recompute " + std::to_string(count) + " of " + std::to_string(len) + " tokens";
              break;
            }
          }
        }
      }
      if (policy.cost_aware && !is_turn && (s.action == StepAction::kApplyPatch || s.action == StepAction::kForm)) {
        planner::ReuseOption opt;
        opt.tokens = pl.length;
        opt.context_tokens = position;
        opt.canonical_bytes = pl.length * kv_per_token;
        const auto tier = core.canonical_residence(chunk->ref.key);
        opt.canonical_tier = to_tier(tier.value_or(StoreTier::kDisk));
        if (s.action == StepAction::kApplyPatch) opt.patch_bytes = opt.canonical_bytes / 4;
        opt.expected_reuse = policy.expected_reuse;
        const planner::Decision d = cost.choose(opt);
        if (d.action == planner::Decision::Action::kRecompute) {
          s.action = StepAction::kReprefill;
          s.match = PatchMatch::kNone;
          s.patch_key.clear();
          s.store_keys.clear();
          s.needs_canonical = false;
          s.forward_tokens = static_cast<double>(pl.length);
          s.exact = ctx_exact;
          s.reason = "cost model: " + d.describe();
        }
      }
      if (s.needs_canonical) {
        const auto tier = core.canonical_residence(chunk->ref.key);
        if (tier.has_value()) {
          s.canonical_tier = *tier;
          s.bytes_moved += chunk->ref.length * core.model_info().kv_bytes_per_token;
        } else {
          s.encode_canonical = true;
          s.forward_tokens += static_cast<double>(chunk->ref.length);
        }
      }
      pl.version = kReformed;
    } else {
      pl.version = old->version;
    }
    s.estimated_seconds = estimate(cost, s, pl.length, position, kv_per_token, moved(sl, old_position, position));
    position += pl.extent;
    pages += state.pages_for(pl.length);
    all_exact = all_exact && s.exact;
    plan.forward_tokens += s.forward_tokens;
    plan.bytes_moved += s.bytes_moved;
    plan.estimated_seconds += s.estimated_seconds;
    plan.order.push_back(s.instance);
    plan.window_tokens_after += pl.length;
    done.push_back(pl);
  }
  for (Planned& d : done) plan.steps.push_back(std::move(d.step));
  plan.device_bytes_after = pages * state.page_bytes();
  plan.exact = all_exact;
  return plan;
}

}  // namespace orbit::detail
