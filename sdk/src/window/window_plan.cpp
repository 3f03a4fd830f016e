#include <algorithm>
#include <cmath>
#include <sstream>
#include <string_view>

#include "orbit/common/error.h"
#include "orbit/planner/antecedents.h"
#include "orbit/planner/cost_model.h"
#include "orbit/planner/fidelity_model.h"
#include "window/actions.h"
#include "window/window_ops.h"

namespace orbit::detail {

namespace {

int64_t full_rank(int64_t n, int64_t width) { return std::min(n, width); }

// One instance of the window after the operation, as pass 1 sees it.
struct SlotInfo {
  const Entry* old = nullptr;
  const ChunkRecord* chunk = nullptr;
  bool is_turn = false;
  const std::vector<int64_t>* turn_tokens = nullptr;
  const std::string* key = nullptr;  // the entry's, the chunk's, or own_key (a new turn)
  std::string own_key;
  int64_t length = 0;
  int64_t extent = 0;
  int64_t position = 0;
  bool moved = false;
  bool keys_same = false;            // old: the same antecedent keys, in order, as when formed
  bool changed_now = false;          // old: this operation changes its antecedent keys
  double change = 0;                 // old: divergence of its antecedent keys from those it was formed on
  double drift = 0;                  // old: tokens removed/inserted before it, accumulated
  double sensitivity = -1;           // chunks: EngineCore::chunk_sensitivity (-1: none formed yet, turns)
  std::vector<PlanStep> candidates;  // budget: every applicable action, cheapest first
  std::size_t chosen = 0;
  bool prefix_why = false;  // candidates from enumerate: the chosen one's reason gets the slot's why in pass 3
};

bool cheaper(const PlanStep& a, const PlanStep& b) {
  if (a.estimated_seconds != b.estimated_seconds) return a.estimated_seconds < b.estimated_seconds;
  return a.predicted_kl < b.predicted_kl;
}

// The legacy chain for a slot that must be (re)served: stored first, then the policy's miss action.
PlanStep legacy_serve(const PlanInput& in, const std::string& reason) {
  const WindowPolicy& policy = in.policy;
  if (in.is_turn) return *action("prefill-turn").plan(in);
  if (in.context->empty()) return *action("canonical").plan(in);
  std::optional<PlanStep> s = action("load-conditioned").plan(in);
  if (!s) s = action("stored-patch").plan(in);
  if (!s) {
    const char* miss = "form";
    switch (policy.on_miss) {
      case MissAction::kForm: miss = "form"; break;
      case MissAction::kReprefill: miss = "prefill"; break;
      case MissAction::kBlind: miss = "blind"; break;
      case MissAction::kTokenRecompute: miss = "cacheblend"; break;
      case MissAction::kFirstK: miss = "first-k"; break;
    }
    s = action(miss).plan(in);
    ORBIT_CHECK(s.has_value(), "plan: serving action '" << miss << "' cannot serve this instance");
    s->reason = (reason.empty() ? std::string("patch miss") : reason + "; patch miss") + ": " + s->reason;
  } else if (!reason.empty()) {
    s->reason = reason + "; " + s->reason;
  }
  if (policy.cost_aware && (s->action == StepAction::kApplyPatch || s->action == StepAction::kForm)) {
    planner::ReuseOption opt;
    opt.tokens = in.length;
    opt.context_tokens = in.position;
    opt.canonical_bytes = in.length * in.kv_per_token;
    const auto tier = in.core.canonical_residence(in.chunk->ref.key);
    opt.canonical_tier = tier.has_value() && *tier == StoreTier::kDevice   ? planner::Tier::kDevice
                         : tier.has_value() && *tier == StoreTier::kHost   ? planner::Tier::kHost
                         : tier.has_value() && *tier == StoreTier::kRemote ? planner::Tier::kRemote
                                                                           : planner::Tier::kDisk;
    if (s->action == StepAction::kApplyPatch) opt.patch_bytes = opt.canonical_bytes / 4;
    opt.expected_reuse = policy.expected_reuse;
    const planner::Decision d = in.cost.choose(opt);
    if (d.action == planner::Decision::Action::kRecompute) {
      s = action("prefill").plan(in);
      s->reason = "cost model: " + d.describe();
    }
  }
  return *s;
}

}  // namespace

namespace {

PatchKeys keys_from(const EngineCore& core, const WindowPolicy& policy, const ChunkRecord& chunk,
                    const std::string& exact_sig, const std::string& orbit_sig) {
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
  k.exact = patch_key({chunk.ref.key, exact_sig, k.variant, k.rank_k, k.rank_v});
  k.orbit = patch_key({chunk.ref.key, orbit_sig, k.variant, k.rank_k, k.rank_v});
  k.conditioned = patch_key({chunk.ref.key, exact_sig, "conditioned", 0, 0});
  return k;
}

}  // namespace

PatchKeys patch_keys(const EngineCore& core, const WindowPolicy& policy, const ChunkRecord& chunk,
                     const std::vector<std::string>& context, std::size_t prefix) {
  ContextSigner signer(std::min(prefix, context.size()));
  for (const std::string& key : context) signer.push(key);
  return keys_from(core, policy, chunk, signer.exact(), signer.orbit());
}

PatchKeys patch_keys(const EngineCore& core, const WindowPolicy& policy, const ChunkRecord& chunk,
                     const ContextSigner& signer) {
  return keys_from(core, policy, chunk, signer.exact(), signer.orbit());
}

std::string limit_refusal(const WindowState& state, Operation op, int64_t extent, int64_t device_bytes,
                          bool* capacity) {
  const runtime::ModelConfig& config = state.core->config();
  *capacity = false;
  std::ostringstream why;
  if (config.max_position_embeddings > 0 && extent > config.max_position_embeddings) {
    why << operation_name(op) << " refused: the window would span " << extent
        << " positions, past the model's limit of " << config.max_position_embeddings << " (evict or slide first)";
    return why.str();
  }
  if (state.options.max_bytes > 0 && device_bytes > state.options.max_bytes) {
    *capacity = true;
    why << operation_name(op) << " refused: the window would hold " << device_bytes
        << " KV bytes, over its max_bytes budget of " << state.options.max_bytes << " (evict or slide first)";
    return why.str();
  }
  return {};
}

namespace {

// The actions a plan chooses among per instance: prefill is form's forward without storing the patch, and
// load-conditioned the prefix-cache policy's own path (legacy_serve).
bool considered(const ServeAction& a) {
  const std::string_view id = a.id();
  return id != "prefill" && id != "load-conditioned";
}

// KL removed per second added by moving an instance from (kl, seconds) to (to_kl, to_seconds): what the
// budget's upgrades are ranked by, and what an action floor's bound is compared against.
double upgrade_gain(double kl, double seconds, double to_kl, double to_seconds) {
  return (kl - to_kl) / std::max(to_seconds - seconds, 1e-9);
}

}  // namespace

Plan plan_layout(const WindowState& state, const Layout& layout) {
  EngineCore& core = *state.core;
  core.check_open();
  const WindowPolicy& policy = layout.policy != nullptr ? *layout.policy : state.options.policy;
  const planner::CostModel cost = core.cost_model();
  const planner::FidelityModel fidelity = core.fidelity_model();
  const int64_t kv_per_token = core.model_info().kv_bytes_per_token;
  const bool budgeted = policy.kl_budget > 0;
  // An edit under a deferring policy forwards nothing (its repairs wait for the next read); any other
  // operation, and any under a policy set since that does not defer, re-plans what an earlier edit deferred.
  const bool edit =
      layout.op == Operation::kEvict || layout.op == Operation::kSlide || layout.op == Operation::kReorder;
  const bool defer = policy.defer_repairs && edit;

  Plan plan;
  plan.attention = state.core->model().attention_path(1, true);
  plan.op = layout.op;
  plan.window_id = state.id;
  plan.window_version = state.version;
  plan.policy = policy;
  plan.cascade = layout.cascade;
  plan.steps.reserve(layout.evict.size() + layout.slots.size());
  plan.order.reserve(layout.slots.size());
  const ServeAction& keep = action("keep");

  // Old positions and the tokens each old entry loses before it (evictions), as prefix sums: O(n).
  const std::size_t n_old = state.entries.size();
  std::vector<int64_t> old_position(n_old + 1, 0);
  for (std::size_t j = 0; j < n_old; ++j) old_position[j + 1] = old_position[j] + state.entries[j].extent;
  std::vector<int64_t> removed_before(n_old + 1, 0);
  {
    std::vector<int64_t> removed(n_old, 0);
    for (int64_t idx : layout.evict)
      removed[static_cast<std::size_t>(idx)] = state.entries[static_cast<std::size_t>(idx)].length;
    for (std::size_t j = 0; j < n_old; ++j) removed_before[j + 1] = removed_before[j] + removed[j];
  }
  for (int64_t idx : layout.evict) {
    const Entry& e = state.entries[static_cast<std::size_t>(idx)];
    PlanStep s;
    s.action = StepAction::kEvict;
    s.how = "evict";
    s.instance = e.id;
    s.chunk = e.ref();
    s.is_turn = e.is_turn;
    s.position = old_position[static_cast<std::size_t>(idx)];
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

  // Pass 1: what each slot is, where it goes, how its context changed.
  std::vector<SlotInfo> info(layout.slots.size());
  int64_t total_tokens = 0, extent = 0, pages = 0;
  for (std::size_t i = 0; i < layout.slots.size(); ++i) {
    const Slot& sl = layout.slots[i];
    SlotInfo& si = info[i];
    si.old = sl.existing >= 0 ? &state.entries[static_cast<std::size_t>(sl.existing)] : nullptr;
    si.chunk = si.old != nullptr ? si.old->chunk : sl.chunk;
    si.is_turn = si.old != nullptr ? si.old->is_turn : sl.is_turn;
    si.turn_tokens = si.old != nullptr ? &si.old->turn_tokens : &sl.turn_tokens;
    if (si.old != nullptr) {
      si.key = &si.old->key;
    } else if (si.is_turn) {
      si.own_key = core.turn_key(sl.turn_tokens);
      si.key = &si.own_key;
    } else {
      si.key = &si.chunk->ref.key;
    }
    si.length = si.old != nullptr ? si.old->length
                                  : (si.is_turn ? static_cast<int64_t>(sl.turn_tokens.size()) : si.chunk->ref.length);
    si.extent = si.old != nullptr ? si.old->extent : (si.is_turn ? si.length : si.chunk->ref.extent);
    si.position = extent;
    si.moved = si.old != nullptr && old_position[static_cast<std::size_t>(sl.existing)] != extent;
    extent += si.extent;
    total_tokens += si.length;
    pages += state.pages_for(si.length);
  }
  // What a reorder changes before each kept instance: content moved in front of it or away from before it
  // (planner/antecedents.h). All zeros unless the kept instances change order.
  std::vector<planner::AntecedentChange> moved_context;
  {
    std::vector<int64_t> rank(n_old, -1);
    for (const Slot& sl : layout.slots)
      if (sl.existing >= 0) rank[static_cast<std::size_t>(sl.existing)] = 0;
    int64_t next = 0;
    for (int64_t& r : rank)
      if (r >= 0) r = next++;
    std::vector<planner::KeptInstance> kept;
    kept.reserve(static_cast<std::size_t>(next));
    for (std::size_t i = 0; i < layout.slots.size(); ++i) {
      const int64_t existing = layout.slots[i].existing;
      if (existing < 0) continue;
      kept.push_back({rank[static_cast<std::size_t>(existing)], old_position[static_cast<std::size_t>(existing)],
                      info[i].position, info[i].length, info[i].extent});
    }
    moved_context = planner::antecedent_changes(kept);
  }
  {
    // The hash of the keys before each old entry as the window holds them now, to tell a context this
    // operation changes from one an earlier edit changed (and left kept or deferred).
    std::vector<uint64_t> old_keys_before(n_old + 1, 0);
    for (std::size_t j = 0; j < n_old; ++j)
      old_keys_before[j + 1] = context_hash(old_keys_before[j], state.entries[j].key, 0);
    uint64_t keys_hash = 0;
    int64_t inserted = 0;
    int64_t seen_removed = 0;
    int64_t change_at = 0;  // position (after the operation) of the latest removal or insertion so far
    std::size_t kept_index = 0;
    for (std::size_t i = 0; i < layout.slots.size(); ++i) {
      SlotInfo& si = info[i];
      if (si.old != nullptr) {
        const int64_t removed = removed_before[static_cast<std::size_t>(layout.slots[i].existing)];
        if (removed > seen_removed) change_at = si.position;
        seen_removed = removed;
        si.keys_same = si.old->formed_on_keys == keys_hash;
        si.changed_now = old_keys_before[static_cast<std::size_t>(layout.slots[i].existing)] != keys_hash;
        const planner::AntecedentChange& moved = moved_context[kept_index++];
        const double delta = static_cast<double>(removed + inserted);
        const double moved_delta = static_cast<double>(moved.inserted);
        si.drift = si.keys_same ? 0.0 : si.old->drift_tokens + delta + moved_delta;
        const double local =
            planner::keep_change(delta, static_cast<double>(si.position - change_at)) +
            planner::keep_change(static_cast<double>(moved.inserted), static_cast<double>(moved.inserted_gap));
        si.change = si.keys_same ? 0.0 : std::min(1.0, si.old->keep_change + local);
        // The same antecedents in another order: nothing was added or removed, the keys only moved.
        if (!si.keys_same && si.drift == 0) si.change = 1.0;
      } else {
        inserted += si.length;
        change_at = si.position + si.extent;
      }
      // Read only where a prediction may use it: new instances and those whose context changed (an
      // unchanged one carries what its serving action left).
      if (si.chunk != nullptr && !si.is_turn && (si.old == nullptr || !si.keys_same)) {
        si.sensitivity = core.chunk_sensitivity(si.chunk->ref.key);
      }
      keys_hash = context_hash(keys_hash, *si.key, 0);
    }
  }
  plan.window_tokens_after = total_tokens;
  plan.device_bytes_after = pages * state.page_bytes();
  plan.refusal = limit_refusal(state, layout.op, extent, plan.device_bytes_after, &plan.refused_capacity);

  // Pass 2: choose an action per slot. Versions: a re-served slot's KV changes, so the exact "same
  // context" test for later slots runs on (key, version) with a fresh marker per re-served slot.
  // The keys before a slot (its context) are copied only when an action that reads them is planned, and
  // each key at most once per vector: a window of kept instances plans without copying any.
  // Its signer grows with it, so each slot's patch keys cost O(1), not a hash of its whole context.
  struct Context {
    std::vector<std::string> keys;
    ContextSigner signer;
    ContextWeights weights;
  };
  Context context{{}, ContextSigner(prefix), {}};
  auto context_upto = [&](Context& ctx, std::size_t i) -> Context* {
    if (ctx.keys.capacity() < layout.slots.size()) ctx.keys.reserve(layout.slots.size());
    for (std::size_t j = ctx.keys.size(); j < i; ++j) {
      ctx.keys.push_back(*info[j].key);
      ctx.signer.push(ctx.keys.back());
      ctx.weights.push(ctx.keys.back(), static_cast<double>(info[j].length));
    }
    ORBIT_CHECK(ctx.keys.size() == i,
                "internal error: plan context of slot " << i << " holds " << ctx.keys.size() << " keys");
    return &ctx;
  };
  uint64_t ctx_hash = 0;
  uint64_t marker = 0;
  int64_t tokens_before = 0;
  std::vector<double> weights(layout.slots.size(), 0.0);
  std::vector<char> is_same(layout.slots.size(), 0);
  auto input_for = [&](std::size_t i, const Context* ctx) {
    const SlotInfo& si = info[i];
    PlanInput in{core, cost, fidelity, policy};
    in.chunk = si.chunk;
    in.old = si.old;
    in.is_turn = si.is_turn;
    in.turn_tokens = si.turn_tokens;
    in.length = si.length;
    in.position = si.position;
    in.context = &ctx->keys;
    in.signer = &ctx->signer;
    in.weights = &ctx->weights;
    in.prefix = prefix;
    in.weight = weights[i];
    in.context_change = si.change;
    in.sensitivity = si.sensitivity;
    in.reordered = si.old != nullptr && !si.keys_same && si.drift == 0;
    in.moved = si.moved;
    in.kv_per_token = kv_per_token;
    return in;
  };
  // Every action that can serve slot i (context: the keys before it), cheapest first. Keep is left out
  // when the slot is new or a cascade forces it; other actions when it is exact already.
  auto enumerate = [&](std::size_t i, const PlanInput& in, const std::string& why) {
    const Slot& sl = layout.slots[i];
    SlotInfo& si = info[i];
    const bool same = is_same[i] != 0;
    si.candidates.clear();
    si.candidates.reserve(all_actions().size());
    si.chosen = 0;
    for (const ServeAction* a : all_actions()) {
      const std::string id = a->id();
      if (id == "keep" && (si.old == nullptr || sl.force)) continue;
      if (id != "keep" && si.old != nullptr && same && si.old->predicted_kl == 0) continue;  // exact already
      if (!considered(*a)) continue;
      std::optional<PlanStep> s = a->plan(in);
      if (!s) continue;
      s->estimated_seconds = estimate_seconds(in, *s);
      // The over-budget pass skips a slot on the strength of its actions' floors: a floor above a plan
      // would make it skip an upgrade a full enumeration takes, so every enumerated plan checks its own.
      const ActionFloor f = a->floor(in);
      ORBIT_CHECK(
          f.applicable && s->predicted_kl >= f.kl * (1 - 1e-12) && s->estimated_seconds >= f.seconds * (1 - 1e-12),
          "internal error: action " << id << " planned KL " << s->predicted_kl << " in " << s->estimated_seconds
                                    << " s, below its floor (KL " << f.kl << ", " << f.seconds << " s, applicable "
                                    << f.applicable << ")");
      // The slot's why is prefixed in pass 3, to the chosen candidate only (most are never shown).
      if (id == "keep") s->reason = same ? (si.moved ? "relocated (rotation only)" : "unchanged") : "kept as-is";
      si.candidates.push_back(std::move(*s));
    }
    si.prefix_why = !why.empty();
    ORBIT_CHECK(!si.candidates.empty(), "plan: no serving action can serve instance " << sl.id);
    std::stable_sort(si.candidates.begin(), si.candidates.end(), cheaper);
  };
  // Why each slot is re-served or kept over a change: one of a few texts shared by every slot (a window of
  // survivors behind one eviction all give the same reason), so a slot holds a pointer, not a copy.
  static const std::string kNoWhy;
  static const std::string kEarlierEdit = "context changed by an earlier edit";
  static const std::string kReformed = "an antecedent's KV was re-formed";
  const std::string changed_now =
      "context changed" + (layout.change_reason.empty() ? std::string() : ": " + layout.change_reason);
  std::vector<const std::string*> whys(layout.slots.size(), &kNoWhy);
  // `why` + `suffix`; for the shared texts above built once per plan (a slot's own reason is joined afresh).
  std::vector<std::pair<std::pair<const std::string*, const char*>, std::string>> joined;
  const auto join = [&](const std::string* why, const char* suffix) -> std::string {
    if (why != &kEarlierEdit && why != &kReformed && why != &changed_now) return *why + suffix;
    for (const auto& [k, text] : joined) {
      if (k.first == why && k.second == suffix) return text;
    }
    joined.push_back({{why, suffix}, *why + suffix});
    return joined.back().second;
  };
  for (std::size_t i = 0; i < layout.slots.size(); ++i) {
    weights[i] = planner::recency_weight(info[i].length, total_tokens - tokens_before);
    tokens_before += info[i].length;
  }
  for (std::size_t i = 0; i < layout.slots.size(); ++i) {
    const Slot& sl = layout.slots[i];
    SlotInfo& si = info[i];
    // A held instance is first planned as kept, which reads no context (Keep and estimate_seconds look at
    // the instance's own features): its input carries the context built so far, possibly shorter than i.
    // Every other path plans on context_upto(i).
    const bool held = si.old != nullptr && !sl.force;
    const PlanInput in = input_for(i, held ? &context : context_upto(context, i));

    const bool same = si.old != nullptr && si.old->formed_on == ctx_hash;
    is_same[i] = same ? 1 : 0;
    const bool redo = !defer && si.old != nullptr && si.old->deferred;
    const bool forced = sl.force || (layout.reorder_relookup && !si.keys_same) || redo;
    // Why a held instance's KV no longer fits: this operation's change before it, or (for an instance an
    // earlier edit left kept or deferred) that edit's.
    const std::string* changed = !si.changed_now && layout.op != Operation::kFlush ? &kEarlierEdit : &changed_now;
    if (!sl.reason.empty()) {
      whys[i] = &sl.reason;
    } else if (si.old != nullptr && !same) {
      whys[i] = !si.keys_same ? changed : &kReformed;
    }
    const std::string& why = *whys[i];
    if (!budgeted) {
      PlanStep s;
      if (same) {
        s = *keep.plan(in);
        s.reason = si.moved ? "relocated (rotation only)" : "unchanged";
      } else if (si.old != nullptr && !forced && policy.survivors == SurvivorAction::kKeep) {
        s = *keep.plan(in);
        s.reason = join(changed, "; kept as-is, relocation only");
      } else {
        PlanInput served = in;
        served.context = &context_upto(context, i)->keys;
        served.signer = &context.signer;
        served.weights = &context.weights;
        s = legacy_serve(served, si.old != nullptr ? why : sl.reason);
      }
      s.estimated_seconds = estimate_seconds(in, s);
      si.candidates.push_back(std::move(s));
    } else if (si.old != nullptr && !sl.force) {
      // A held instance starts kept (after a reorder keep is priced as an orbit loss: the same
      // antecedents in another order); its alternatives are enumerated only if the budget needs them.
      PlanStep s = *action("keep").plan(in);
      s.estimated_seconds = estimate_seconds(in, s);
      if (same) {
        s.reason = si.moved ? "relocated (rotation only)" : "unchanged";
      } else {
        s.reason = join(whys[i], "; kept as-is");
      }
      si.candidates.push_back(std::move(s));
    } else {
      enumerate(i, in, why);
    }
    const PlanStep& chosen = si.candidates.front();
    const bool reserved = chosen.action != StepAction::kKeep;
    ctx_hash = context_hash(ctx_hash, *si.key, reserved ? (~uint64_t{0} - ++marker) : si.old->version);
  }

  // Budget: upgrade the instance whose next cheaper-in-KL action buys the most KL per second, until the
  // window's predicted KL fits (or nothing is left to upgrade). Past that point an upgrade is still taken
  // while it removes KL at a better rate than `free_rate`: the whole budget for the price of a one-token
  // forward. A stored patch a microsecond dearer than blind reuse, say, is not worth leaving for a plan
  // that happens to fit; forming a chunk again to shave a fraction of the budget is.
  if (budgeted) {
    double total_kl = 0;
    for (const SlotInfo& si : info) total_kl += si.candidates[si.chosen].predicted_kl;
    // Each slot's best next upgrade (the most KL removed per second added, the first such candidate on a
    // tie) depends only on what that slot has chosen, so a heap of one entry per slot, refreshed for the
    // slot just upgraded, finds the window's best upgrade in O(log n) instead of a scan of every slot:
    // the same choices (ties go to the earliest slot), without the quadratic cost when many slots upgrade.
    struct Upgrade {
      double gain;
      std::size_t slot, candidate, from;  // from: the slot's choice when this entry was made
    };
    auto worse = [](const Upgrade& a, const Upgrade& b) {
      return a.gain != b.gain ? a.gain < b.gain : a.slot > b.slot;
    };
    std::vector<Upgrade> heap;
    auto push_best = [&](std::size_t i) {
      const PlanStep& cur = info[i].candidates[info[i].chosen];
      double best_gain = -1;
      std::size_t best = 0;
      for (std::size_t c = 0; c < info[i].candidates.size(); ++c) {
        const PlanStep& alt = info[i].candidates[c];
        if (alt.predicted_kl >= cur.predicted_kl) continue;
        const double gain =
            upgrade_gain(cur.predicted_kl, cur.estimated_seconds, alt.predicted_kl, alt.estimated_seconds);
        if (gain > best_gain) {
          best_gain = gain;
          best = c;
        }
      }
      if (best_gain < 0) return;
      heap.push_back({best_gain, i, best, info[i].chosen});
      std::push_heap(heap.begin(), heap.end(), worse);
    };
    for (std::size_t i = 0; i < info.size(); ++i) {
      if (info[i].candidates.size() > 1) push_best(i);
    }
    // The kept instances that carry a loss may be upgraded too: over budget to fit it, under budget when
    // the upgrade is nearly free (an exact patch a prepared move or recall stored). Enumerating every action
    // of each (store lookups, patch keys, stale comparisons) is most of a large window's planning. Each
    // is first given a bound on the gain its alternatives could offer (ActionFloor: no lookups); it is
    // enumerated only once that bound reaches the best upgrade known, so the choices are the ones a full
    // enumeration makes, and a window whose survivors lose next to nothing plans in time linear in its
    // size with a small constant.
    std::vector<std::pair<double, std::size_t>> pending;  // (gain bound, slot), highest first
    {
      Context none{{}, ContextSigner(prefix), {}};
      for (std::size_t i = 0; i < info.size(); ++i) {
        const SlotInfo& si = info[i];
        if (si.candidates.size() != 1 || si.candidates.front().action != StepAction::kKeep ||
            si.candidates.front().predicted_kl <= 0) {
          continue;
        }
        const PlanStep& kept = si.candidates.front();
        const PlanInput in = input_for(i, &none);
        double bound = 0;
        for (const ServeAction* a : all_actions()) {
          if (a->category() == StepAction::kKeep || !considered(*a)) continue;
          const ActionFloor f = a->floor(in);
          if (!f.applicable || f.kl >= kept.predicted_kl) continue;
          bound = std::max(bound, upgrade_gain(kept.predicted_kl, kept.estimated_seconds, f.kl, f.seconds));
        }
        if (bound > 0) pending.emplace_back(bound, i);
      }
      std::sort(pending.begin(), pending.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
    }
    std::size_t next_pending = 0;
    // Enumerates the pending slots whose bound is within a factor of the highest left (one pass over the
    // window's context, in slot order) and queues their best upgrades.
    auto expand = [&]() {
      const double cut = pending[next_pending].first / 16;
      std::vector<std::size_t> batch;
      while (next_pending < pending.size() && pending[next_pending].first >= cut) {
        batch.push_back(pending[next_pending++].second);
      }
      std::sort(batch.begin(), batch.end());
      Context before{{}, ContextSigner(prefix), {}};
      for (const std::size_t i : batch) {
        SlotInfo& si = info[i];
        enumerate(i, input_for(i, context_upto(before, i)), *whys[i]);
        // Keep first whatever its price: it is what the slot had, and the upgrade loop moves off it.
        for (std::size_t c = 0; c < si.candidates.size(); ++c) {
          if (si.candidates[c].action == StepAction::kKeep) si.chosen = c;
        }
        push_best(i);
      }
    };
    const double free_rate = policy.kl_budget / std::max(cost.seconds_forward(1, 0), 1e-12);
    for (;;) {
      const double known = heap.empty() ? -1.0 : heap.front().gain;
      const double bound = next_pending < pending.size() ? pending[next_pending].first : -1.0;
      const double best = std::max(known, bound);
      if (best < 0 || (total_kl <= policy.kl_budget && best < free_rate)) break;
      if (bound >= known) {
        expand();
        continue;
      }
      std::pop_heap(heap.begin(), heap.end(), worse);
      const Upgrade u = heap.back();
      heap.pop_back();
      SlotInfo& si = info[u.slot];
      if (si.chosen != u.from) continue;  // stale: the slot was upgraded since
      total_kl += si.candidates[u.candidate].predicted_kl - si.candidates[si.chosen].predicted_kl;
      si.chosen = u.candidate;
      push_best(u.slot);
    }
  }
  // Deferral: a survivor the edit would re-serve is relocated instead and marked; one deferred earlier and
  // still kept stays marked.
  std::vector<char> deferred(info.size(), 0);
  if (defer) {
    for (std::size_t i = 0; i < info.size(); ++i) {
      SlotInfo& si = info[i];
      if (si.old == nullptr) continue;
      PlanStep& chosen = si.candidates[si.chosen];
      if (chosen.action == StepAction::kKeep) {
        deferred[i] = si.old->deferred ? 1 : 0;
        continue;
      }
      const PlanInput in = input_for(i, &context);
      PlanStep s = *keep.plan(in);
      s.estimated_seconds = estimate_seconds(in, s);
      s.reason = (whys[i]->empty() ? std::string("context changed") : *whys[i]) +
                 "; relocated, repair deferred to the next read (would be: " + chosen.how + ")";
      chosen = std::move(s);
      si.prefix_why = false;  // the reason above is complete
      deferred[i] = 1;
    }
  }

  // Pass 3: exactness (an instance is exact when its action is and every antecedent is), totals.
  bool all_exact = true;
  ctx_hash = 0;
  for (std::size_t i = 0; i < info.size(); ++i) {
    SlotInfo& si = info[i];
    PlanStep s = std::move(si.candidates[si.chosen]);
    if (si.prefix_why && !(s.action == StepAction::kKeep && is_same[i] != 0)) s.reason = *whys[i] + "; " + s.reason;
    s.instance = layout.slots[i].id;
    s.position = si.position;
    s.is_turn = si.is_turn;
    if (si.is_turn) {
      s.chunk.key = *si.key;
      s.chunk.kind = ChunkKind::kTokens;
      s.chunk.length = s.chunk.extent = si.length;
      s.chunk.label = "turn";
    } else {
      s.chunk = si.chunk->ref;
    }
    s.sensitivity = si.sensitivity;
    s.deferred = deferred[i] != 0;
    s.kl_per_weight =
        s.action == StepAction::kKeep ? si.old->kl_per_weight : (weights[i] > 0 ? s.predicted_kl / weights[i] : 0.0);
    if (s.action == StepAction::kKeep) {
      s.drift_tokens = si.drift;
      s.context_change = si.change;
      s.exact = si.old->exact_when_formed && si.old->formed_on == ctx_hash && all_exact;
      ctx_hash = context_hash(ctx_hash, *si.key, si.old->version);
    } else {
      s.exact = s.exact && all_exact;
      ctx_hash = context_hash(ctx_hash, *si.key, ~uint64_t{0} - i);
    }
    all_exact = all_exact && s.exact;
    plan.forward_tokens += s.forward_tokens;
    plan.background_tokens += s.background_tokens;
    plan.bytes_moved += s.bytes_moved;
    plan.estimated_seconds += s.estimated_seconds;
    plan.predicted_kl += s.predicted_kl;
    plan.order.push_back(s.instance);
    plan.steps.push_back(std::move(s));
  }
  plan.exact = all_exact;
  // The KV pool, shared by the engine's windows: apply() allocates fresh pages for every step that does
  // not keep its instance's pages, while the old entries hold theirs until it commits. A plan needing
  // more than the pool has free now says it will be refused (a capacity refusal as of planning).
  if (plan.refusal.empty()) {
    int64_t new_pages = 0;
    for (const PlanStep& s : plan.steps) {
      if (s.action != StepAction::kKeep && s.action != StepAction::kEvict) new_pages += state.pages_for(s.chunk.length);
    }
    int64_t free_pages = 0, total_pages = 0;
    {
      std::lock_guard<std::mutex> lock(core.pool_mutex());
      free_pages = core.pool().num_free();
      total_pages = core.pool().num_pages();
    }
    if (new_pages > free_pages) {
      std::ostringstream why;
      why << operation_name(layout.op) << " refused: the KV pool is full (" << free_pages << " of " << total_pages
          << " pages free; this plan needs " << new_pages << "); evict, slide or close windows";
      plan.refusal = why.str();
      plan.refused_capacity = true;
    }
  }
  if (!plan.refusal.empty()) {  // nothing will run
    plan.forward_tokens = plan.background_tokens = plan.estimated_seconds = 0;
    plan.bytes_moved = 0;
  }
  return plan;
}

}  // namespace orbit::detail
