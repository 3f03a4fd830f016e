// The stages of plan_layout() that place the slots, measure their context changes, and finish the plan
// (layout_planner.h). Choosing the actions is in layout_choose.cpp, the budget in layout_budget.cpp.
#include "plan/layout_planner.h"

#include <algorithm>
#include <mutex>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/planner/antecedents.h"
#include "plan/plan_seal.h"

namespace orbit::detail {

LayoutPlanner::LayoutPlanner(const WindowSnapshot& window, const Layout& layout, const PlanEnv& env)
    : window_(window),
      layout_(layout),
      env_(env),
      policy_(layout.policy != nullptr ? *layout.policy : window.options->policy),
      cost_(env.cost_model()),
      fidelity_(env.fidelity_model()),
      kv_per_token_(env.limits().kv_bytes_per_token),
      budgeted_(policy_.kl_budget > 0),
      // An edit under a deferring policy forwards nothing (its repairs wait for the next read); any other
      // operation, and any under a policy set since that does not defer, re-plans what an earlier edit
      // deferred.
      defer_(policy_.defer_repairs &&
             (layout.op == Operation::kEvict || layout.op == Operation::kSlide || layout.op == Operation::kReorder)),
      keep_(action(ServeActionId::kKeep)),
      reuse_(action(ServeActionId::kReuse)),
      context_(0) {}

Plan LayoutPlanner::run() {
  env_.check_open();
  plan_.attention = env_.attention_path();
  plan_.op = layout_.op;
  plan_.window_id = window_.id;
  plan_.window_version = window_.version;
  plan_.policy = policy_;
  plan_.cascade = layout_.cascade;
  plan_.steps.reserve(layout_.evict.size() + layout_.slots.size());
  plan_.order.reserve(layout_.slots.size());

  plan_evictions();
  place_slots();
  measure_context_changes();
  plan_.window_tokens_after = total_tokens_;
  // Dynamic-NTK RoPE past the anchor: what this plan forms is forwarded at the window's length after it.
  const planner::DynamicNtk& rope = env_.limits().dynamic_ntk;
  plan_.rope_window = rope.active() && total_tokens_ > rope.anchor ? total_tokens_ : 0;
  plan_.device_bytes_after = pages_ * window_.page_bytes;
  const ModelLimits& model = env_.limits();
  plan_.refusal = limit_refusal(layout_.op, extent_, plan_.device_bytes_after, model.max_positions,
                                model.max_positions_source, window_.options->max_bytes, &plan_.refused_capacity);

  choose_actions();
  if (budgeted_) optimize_budget();
  defer_repairs();
  finalize();
  check_pool();
  if (!plan_.refusal.empty()) {  // nothing will run
    plan_.forward_tokens = plan_.background_tokens = plan_.estimated_seconds = 0;
    plan_.bytes_moved = 0;
  }
  plan_.seal = plan_seal(plan_);
  return std::move(plan_);
}

void LayoutPlanner::plan_evictions() {
  // Old positions and the tokens each old entry loses before it (evictions), as prefix sums: O(n).
  n_old_ = window_.entries.size();
  old_position_.assign(n_old_ + 1, 0);
  for (std::size_t j = 0; j < n_old_; ++j) old_position_[j + 1] = old_position_[j] + window_.entries[j]->extent;
  removed_before_.assign(n_old_ + 1, 0);
  std::vector<int64_t> removed(n_old_, 0);
  for (int64_t idx : layout_.evict) {
    removed[static_cast<std::size_t>(idx)] = window_.entries[static_cast<std::size_t>(idx)]->length;
  }
  for (std::size_t j = 0; j < n_old_; ++j) removed_before_[j + 1] = removed_before_[j] + removed[j];

  for (int64_t idx : layout_.evict) {
    const EntryMeta& e = *window_.entries[static_cast<std::size_t>(idx)];
    PlanStep s;
    s.action = StepAction::kEvict;
    s.how = ServeActionId::kEvict;
    s.instance = e.id;
    s.chunk = e.ref();
    s.is_turn = e.is_turn;
    s.position = old_position_[static_cast<std::size_t>(idx)];
    s.exact = true;
    s.reason = e.is_turn ? "turn dropped (turns are not stored)" : "canonical stays in the store; recallable";
    plan_.steps.push_back(s);
  }
}

void LayoutPlanner::place_slots() {
  // Leading turns form the orbit prefix (they do not move under reorder).
  const std::vector<Slot>& slots = layout_.slots;
  while (prefix_ < slots.size()) {
    const Slot& sl = slots[prefix_];
    const bool turn = sl.existing >= 0 ? window_.entries[static_cast<std::size_t>(sl.existing)]->is_turn : sl.is_turn;
    if (!turn) break;
    ++prefix_;
  }
  context_ = PlanContext(prefix_);

  info_.resize(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const Slot& sl = slots[i];
    SlotInfo& si = info_[i];
    si.old = sl.existing >= 0 ? window_.entries[static_cast<std::size_t>(sl.existing)] : nullptr;
    si.chunk = si.old != nullptr ? si.old->chunk : sl.chunk;
    si.is_turn = si.old != nullptr ? si.old->is_turn : sl.is_turn;
    si.turn_tokens = si.old != nullptr ? &si.old->turn_tokens : &sl.turn_tokens;
    if (si.old != nullptr) {
      si.key = &si.old->key;
    } else if (si.is_turn) {
      si.own_key = env_.turn_key(sl.turn_tokens);
      si.key = &si.own_key;
    } else {
      si.key = &si.chunk->ref.key;
    }
    si.length = si.old != nullptr ? si.old->length
                                  : (si.is_turn ? static_cast<int64_t>(sl.turn_tokens.size()) : si.chunk->ref.length);
    si.extent = si.old != nullptr ? si.old->extent : (si.is_turn ? si.length : si.chunk->ref.extent);
    si.position = extent_;
    si.moved = si.old != nullptr && old_position_[static_cast<std::size_t>(sl.existing)] != extent_;
    extent_ += si.extent;
    total_tokens_ += si.length;
    pages_ += window_.pages_for(si.length);
  }
}

// What a reorder changes before each kept instance: content moved in front of it or away from before it
// (planner/antecedents.h). All zeros unless the kept instances change order.
std::vector<planner::AntecedentChange> LayoutPlanner::moved_antecedents() const {
  std::vector<int64_t> rank(n_old_, -1);
  for (const Slot& sl : layout_.slots) {
    if (sl.existing >= 0) rank[static_cast<std::size_t>(sl.existing)] = 0;
  }
  int64_t next = 0;
  for (int64_t& r : rank) {
    if (r >= 0) r = next++;
  }
  std::vector<planner::KeptInstance> kept;
  kept.reserve(static_cast<std::size_t>(next));
  for (std::size_t i = 0; i < layout_.slots.size(); ++i) {
    const int64_t existing = layout_.slots[i].existing;
    if (existing < 0) continue;
    kept.push_back({rank[static_cast<std::size_t>(existing)], old_position_[static_cast<std::size_t>(existing)],
                    info_[i].position, info_[i].length, info_[i].extent});
  }
  return planner::antecedent_changes(kept);
}

void LayoutPlanner::measure_context_changes() {
  const std::vector<planner::AntecedentChange> moved_context = moved_antecedents();
  // The hash of the keys before each old entry as the window holds them now, to tell a context this
  // operation changes from one an earlier edit changed (and left kept or deferred).
  std::vector<uint64_t> old_keys_before(n_old_ + 1, 0);
  for (std::size_t j = 0; j < n_old_; ++j) {
    old_keys_before[j + 1] = context_hash(old_keys_before[j], window_.entries[j]->key, 0);
  }
  uint64_t keys_hash = 0;
  int64_t inserted = 0, seen_removed = 0;
  int64_t change_at = 0;  // position (after the operation) of the latest removal or insertion so far
  std::size_t kept_index = 0;
  for (std::size_t i = 0; i < layout_.slots.size(); ++i) {
    SlotInfo& si = info_[i];
    if (si.old != nullptr) {
      const auto existing = static_cast<std::size_t>(layout_.slots[i].existing);
      const int64_t removed = removed_before_[existing];
      if (removed > seen_removed) change_at = si.position;
      seen_removed = removed;
      si.keys_same = si.old->formed_on_keys == keys_hash;
      si.changed_now = old_keys_before[existing] != keys_hash;
      const planner::AntecedentChange& moved = moved_context[kept_index++];
      const double delta = static_cast<double>(removed + inserted);
      si.jumped = static_cast<double>(moved.inserted);
      const double moved_delta = static_cast<double>(moved.inserted + moved.removed);
      si.drift = si.keys_same ? 0.0 : si.old->drift_tokens + delta + moved_delta;
      // What a reorder moves in front of it is content it never saw; what it moves behind it, content it
      // no longer sees: both change its context as an insertion or a removal there would.
      const double local =
          planner::keep_change(delta, static_cast<double>(si.position - change_at)) +
          planner::keep_change(static_cast<double>(moved.inserted), static_cast<double>(moved.inserted_gap)) +
          planner::keep_change(static_cast<double>(moved.removed), static_cast<double>(moved.removed_gap));
      si.change = si.keys_same ? 0.0 : std::min(1.0, si.old->keep_change + local);
      // The same antecedents in another order: nothing was added or removed, the keys only moved.
      if (!si.keys_same && si.drift == 0) si.change = 1.0;
      // Its antecedents reordered by this operation (their keys changed, none added, removed or moved past
      // it) or by an earlier one since it was formed: it carries an ordering loss beside any drift's.
      const bool permuted_now = si.changed_now && delta == 0 && moved_delta == 0;
      si.permuted = !si.keys_same && (si.old->permuted || permuted_now);
    } else {
      inserted += si.length;
      change_at = si.position + si.extent;
    }
    // Read only where a prediction may use it: new instances and those whose context changed (an
    // unchanged one carries what its serving action left).
    if ((si.is_turn || si.chunk != nullptr) && (si.old == nullptr || !si.keys_same)) {
      si.sensitivity = env_.chunk_sensitivity(si.is_turn ? *si.key : si.chunk->ref.key);
      // A chunk nothing has measured (never patched: a window's first chunk) is priced at the worst case
      // measured on this model, not the reference: on tinystories-656k its chunks measure 9-25x s_ref.
      // A turn stays unknown (it is measured once served, measures_turn).
      if (!si.is_turn && si.sensitivity < 0) si.sensitivity = env_.sensitivity_prior();
    }
    keys_hash = context_hash(keys_hash, *si.key, 0);
  }
}

PlanContext* LayoutPlanner::context_upto(PlanContext& ctx, std::size_t i) {
  if (ctx.keys.capacity() < layout_.slots.size()) ctx.keys.reserve(layout_.slots.size());
  for (std::size_t j = ctx.keys.size(); j < i; ++j) {
    ctx.keys.push_back(*info_[j].key);
    ctx.signer.push(ctx.keys.back());
    ctx.weights.push(ctx.keys.back(), static_cast<double>(info_[j].length));
  }
  ORBIT_CHECK(ctx.keys.size() == i,
              "internal error: plan context of slot " << i << " holds " << ctx.keys.size() << " keys");
  return &ctx;
}

PlanInput LayoutPlanner::input_for(std::size_t i, const PlanContext* ctx) const {
  const SlotInfo& si = info_[i];
  PlanInput in{env_, cost_, fidelity_, policy_};
  in.chunk = si.chunk;
  in.old = si.old;
  in.is_turn = si.is_turn;
  in.turn_tokens = si.turn_tokens;
  in.length = si.length;
  in.position = si.position;
  in.context = &ctx->keys;
  in.signer = &ctx->signer;
  in.weights = &ctx->weights;
  in.prefix = prefix_;
  in.weight = weights_[i];
  in.context_change = si.change;
  in.sensitivity = si.sensitivity;
  in.reordered = si.old != nullptr && !si.keys_same && si.drift == 0;
  in.permuted = si.permuted && !in.reordered;
  in.moved = si.moved;
  in.kv_per_token = kv_per_token_;
  in.rope_window = plan_.rope_window;
  return in;
}

int64_t LayoutPlanner::formed_window(std::size_t i, const PlanStep& s) const {
  const SlotInfo& si = info_[i];
  const StepAction a = s.action;
  if (a == StepAction::kKeep) return si.old->formed_window;
  // A canonical (alone at position 0, relocated, or with some tokens recomputed over it: those few are formed at
  // the rope window, the rest keep the canonical's) carries its own length; what this plan forwards (a
  // recompute of every token too), or loads from KV forwarded behind the same states (whose chain starts at the
  // window length, kv_window_start), the plan's rope window, else its end.
  const bool all_recomputed = a == StepAction::kRecompute && s.recompute_tokens >= si.length;
  if (a == StepAction::kCanonical || a == StepAction::kBlind || (a == StepAction::kRecompute && !all_recomputed))
    return si.extent;
  return plan_.rope_window > 0 ? plan_.rope_window : si.position + si.extent;
}

bool LayoutPlanner::short_formed(std::size_t i) const {
  const EntryMeta* old = info_[i].old;
  return old != nullptr && planner::shortfall_feature(env_.limits().dynamic_ntk, old->formed_window, total_tokens_) > 0;
}

void LayoutPlanner::add_shortfall(std::size_t i, PlanStep& s) const {
  const planner::DynamicNtk& rope = env_.limits().dynamic_ntk;
  if (!rope.active() || s.action == StepAction::kEvict) return;
  s.shortfall_kl =
      fidelity_.predict_shortfall(planner::shortfall_feature(rope, formed_window(i, s), total_tokens_), weights_[i]);
  s.predicted_kl += s.shortfall_kl;
}

void LayoutPlanner::defer_repairs() {
  // A survivor the edit would re-serve is relocated instead and marked; one deferred earlier and still
  // kept stays marked.
  deferred_.assign(info_.size(), 0);
  if (!defer_) return;
  for (std::size_t i = 0; i < info_.size(); ++i) {
    SlotInfo& si = info_[i];
    if (si.old == nullptr) continue;
    PlanStep& chosen = si.candidates[si.chosen];
    if (chosen.action == StepAction::kKeep) {
      deferred_[i] = si.old->deferred ? 1 : 0;
      continue;
    }
    const PlanInput in = input_for(i, &context_);
    PlanStep s = *keep_.plan(in);
    s.estimated_seconds = estimate_seconds(in, s);
    s.reason = (whys_[i]->empty() ? std::string("context changed") : *whys_[i]) +
               "; relocated, repair deferred to the next read (would be: " + serve_action_name(chosen.how) + ")";
    add_shortfall(i, s);
    chosen = std::move(s);
    si.prefix_why = false;  // the reason above is complete
    deferred_[i] = 1;
  }
}

int64_t LayoutPlanner::fresh_pages(const std::string& key, bool is_turn, int64_t length, StepAction action,
                                   ServeActionId how) const {
  if (action == StepAction::kKeep || action == StepAction::kEvict) return 0;
  const bool placement =
      how == ServeActionId::kCanonical || how == ServeActionId::kStoredPatch || how == ServeActionId::kBlind;
  if (placement && !is_turn && env_.placement_shares(key)) return 0;
  return window_.pages_for(length);
}

int64_t LayoutPlanner::spare_pages() const {
  int64_t needed = 0;
  for (const SlotInfo& si : info_) {
    const PlanStep& s = si.candidates[si.chosen];
    needed += fresh_pages(*si.key, si.is_turn, si.length, s.action, s.how);
  }
  return env_.pool_pages().free - needed;
}

namespace {

// Steps exact reuse may replace: those that forward the instance, and those that serve it approximately.
// A canonical (position 0), a stored conditioned KV and an eviction already are what they are.
bool reusable(StepAction a) {
  return a != StepAction::kCanonical && a != StepAction::kLoadConditioned && a != StepAction::kEvict;
}

bool forwards_in_context(StepAction a) {
  return a == StepAction::kForm || a == StepAction::kReprefill || a == StepAction::kPrefillTurn;
}

}  // namespace

void LayoutPlanner::offer_reuse(std::size_t i, const KvState& chain, const KvState& content, bool exact_before,
                                double total, int64_t* spare, PlanStep& s) {
  const SlotInfo& si = info_[i];
  if (s.deferred || !reusable(s.action)) return;
  const bool keep = s.action == StepAction::kKeep;
  // A kept instance holding that very KV stays kept; one that would load needs fresh pages the pool has.
  if (keep && (si.old->state == kv_forward(*si.key, chain) || *spare < window_.pages_for(si.length))) return;
  const std::string key = reuse_key(*si.key, chain);
  PlanInput in = input_for(i, &context_);
  in.reuse_key = &key;
  std::optional<PlanStep> r = reuse_.plan(in);
  if (!r) {
    if (forwards_in_context(s.action)) offer_partial_reuse(i, chain, content, exact_before, in, s);
    return;
  }
  r->estimated_seconds = estimate_seconds(in, *r);
  add_shortfall(i, *r);
  // Rows read back from int8 rows lose what the step they replace may not: within the budget only.
  if (r->quantized_kl > 0 && budgeted_ && total + r->predicted_kl - s.predicted_kl > policy_.kl_budget) return;
  r->reason += " (instead of " + std::string(serve_action_name(s.how)) + ")";
  if (keep) *spare -= window_.pages_for(si.length);
  s = std::move(*r);
  info_[i].prefix_why = false;
}

void LayoutPlanner::offer_partial_reuse(std::size_t i, const KvState& chain, const KvState& content, bool exact_before,
                                        const PlanInput& in, PlanStep& s) {
  const SlotInfo& si = info_[i];
  const std::vector<int64_t>* tokens =
      si.is_turn ? si.turn_tokens : (si.chunk->ref.kind == ChunkKind::kTokens ? &si.chunk->tokens : nullptr);
  if (tokens == nullptr) return;
  // Behind an exact context only rows a forward here computes (the chain's) are loaded: rows stored under the
  // same content but approximated another way (by another window, a branch, an earlier plan) would make the
  // exact window inexact at no predicted cost (to the fidelity model the step is a prefill), and a form's KV
  // becomes the chunk's exact patch. Behind approximate KV the content's rows are what a forward here
  // computes up to those approximations.
  const KvState by_content = exact_before ? chain : content;
  const ReuseIndex::Match m = env_.reuse_index().longest(chain, by_content, *tokens, si.length);
  if (m.tokens <= 0 || !env_.contains(m.store_key)) return;
  if (!m.exact) {
    s.match = PatchMatch::kStale;
    s.exact = false;
  }
  s.reuse_from = m.store_key;
  s.reused_tokens = m.tokens;
  s.forward_tokens -= static_cast<double>(m.tokens);
  s.bytes_moved += m.tokens * kv_per_token_;
  s.estimated_seconds = estimate_seconds(in, s) * s.forward_tokens / static_cast<double>(si.length) +
                        cost_.seconds_transfer(m.tokens * kv_per_token_, planner::Tier::kHost);
  s.reason += "; its first " + std::to_string(m.tokens) + " tokens from KV computed behind this same window" +
              (m.exact ? std::string() : std::string(" (its content; approximated another way)"));
}

void LayoutPlanner::offer_tail_rows(std::size_t i, const KvState& plain, double* total, PlanStep& s) {
  const SlotInfo& si = info_[i];
  if (window_.tail_formed <= 0 || plan_.rope_window <= 0 || plain != window_.tail_behind || s.deferred ||
      !forwards_in_context(s.action) || s.action == StepAction::kForm || !s.store_keys.empty() || s.reused_tokens > 0)
    return;
  const std::vector<int64_t>* tokens =
      si.is_turn ? si.turn_tokens : (si.chunk->ref.kind == ChunkKind::kTokens ? &si.chunk->tokens : nullptr);
  if (tokens == nullptr) return;
  const ReuseIndex::Match m = env_.reuse_index().longest(plain, plain, *tokens, si.length);
  if (m.tokens <= 0 || m.store_key != window_.tail_key || !env_.contains(m.store_key)) return;
  PlanStep r = s;
  r.reuse_from = m.store_key;
  r.reused_tokens = m.tokens;
  r.reused_formed_window = window_.tail_formed;
  r.forward_tokens -= static_cast<double>(m.tokens);
  r.bytes_moved += m.tokens * kv_per_token_;
  const PlanInput in = input_for(i, &context_);
  r.estimated_seconds = estimate_seconds(in, r) * r.forward_tokens / static_cast<double>(si.length) +
                        cost_.seconds_transfer(m.tokens * kv_per_token_, planner::Tier::kHost);
  // The whole instance priced as formed where the tail's first row was (the rest is formed at the window's
  // length, the answer's rows at lengths between): an upper bound.
  r.predicted_kl -= r.shortfall_kl;
  r.shortfall_kl = fidelity_.predict_shortfall(
      planner::shortfall_feature(env_.limits().dynamic_ntk, window_.tail_formed, total_tokens_), weights_[i]);
  r.predicted_kl += r.shortfall_kl;
  const double extra = r.predicted_kl - s.predicted_kl;
  if (budgeted_ && *total + extra > policy_.kl_budget) {
    s.reason += "; the read's " + std::to_string(m.tokens) + " rows before it forwarded again (formed at " +
                std::to_string(window_.tail_formed) + ", past the budget at the window's length)";
    return;
  }
  *total += extra;
  r.reason += "; its first " + std::to_string(m.tokens) + " tokens from the last read's KV (formed at " +
              std::to_string(window_.tail_formed) + ")";
  s = std::move(r);
}

void LayoutPlanner::finalize() {
  // Exactness: an instance is exact when its action is and every antecedent is. Exact reuse: each slot's
  // KV state along the window (kv_state.h), so a step can be served from KV computed behind the same states.
  bool all_exact = true;
  uint64_t ctx_hash = 0;
  // `plain`: the same states chained from the empty chain (the window's state_chain), where a read keeps its
  // rows; it differs from `chain` only by the rope window's mark.
  KvState chain = kv_window_start(plan_.rope_window), content, plain;
  int64_t spare = policy_.reuse_computed ? spare_pages() : 0;
  double total = 0;  // the plan's predicted KL as chosen, with the reuse offered so far
  for (const SlotInfo& si : info_) total += si.candidates[si.chosen].predicted_kl;
  for (std::size_t i = 0; i < info_.size(); ++i) {
    SlotInfo& si = info_[i];
    PlanStep s = std::move(si.candidates[si.chosen]);
    s.deferred = deferred_[i] != 0;
    const double chosen_kl = s.predicted_kl;
    if (policy_.reuse_computed) offer_reuse(i, chain, content, all_exact, total, &spare, s);
    total += s.predicted_kl - chosen_kl;
    if (policy_.reuse_computed) offer_tail_rows(i, plain, &total, s);
    if (si.prefix_why && !(s.action == StepAction::kKeep && is_same_[i] != 0)) s.reason = *whys_[i] + "; " + s.reason;
    s.instance = layout_.slots[i].id;
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
    // The shortfall is priced anew at every plan from the formed window, never carried.
    s.kl_per_weight = s.action == StepAction::kKeep
                          ? si.old->kl_per_weight
                          : (weights_[i] > 0 ? (s.predicted_kl - s.shortfall_kl) / weights_[i] : 0.0);
    if (s.action == StepAction::kKeep) {
      s.drift_tokens = si.drift;
      s.context_change = si.change;
      s.permuted = si.permuted;
      // Exact: formed exactly on these very antecedents, or holding the KV a forward behind them computes.
      s.exact = all_exact && ((si.old->exact_when_formed && si.old->formed_on == ctx_hash) ||
                              si.old->state == kv_forward(*si.key, chain));
      ctx_hash = context_hash(ctx_hash, *si.key, si.old->version);
    } else {
      s.exact = s.exact && all_exact;
      ctx_hash = context_hash(ctx_hash, *si.key, ~uint64_t{0} - i);
    }
    all_exact = all_exact && s.exact;
    // Rows loaded from KV no forward here computes (behind the same content only, or formed at another length)
    // make a state of their own, and what is forwarded behind them is not stored for exact reuse.
    const bool loads_other = (s.match == PatchMatch::kStale || s.reused_formed_window > 0) && s.reused_tokens > 0;
    if (policy_.reuse_computed && forwards_in_context(s.action) && s.reused_formed_window <= 0)
      s.reuse_key = reuse_key(*si.key, chain);
    // KV read back from int8 rows is a state of its own too: no forward computes it.
    const KvState state = loads_other          ? kv_patched(*si.key, s.reuse_from)
                          : s.quantized_kl > 0 ? kv_patched(*si.key, "int8:" + s.patch_key)
                                               : kv_state_after(s.action, *si.key, s.patch_key, s.recompute_tokens,
                                                                chain, si.old != nullptr ? si.old->state : KvState{});
    chain = kv_chain(chain, state);
    plain = kv_chain(plain, state);
    content = content_chain(content, *si.key);
    plan_.forward_tokens += s.forward_tokens;
    plan_.background_tokens += s.background_tokens;
    plan_.bytes_moved += s.bytes_moved;
    plan_.estimated_seconds += s.estimated_seconds;
    plan_.predicted_kl += s.predicted_kl;
    plan_.order.push_back(s.instance);
    plan_.steps.push_back(std::move(s));
  }
  plan_.exact = all_exact;
}

void LayoutPlanner::check_pool() {
  // The KV pool, shared by the engine's windows: apply() allocates fresh pages for every step that does
  // not keep its instance's pages or place a chunk whose canonical set is held already, while the old
  // entries hold theirs until it commits. A plan needing more than the pool has free now says it will be
  // refused (a capacity refusal as of planning).
  if (!plan_.refusal.empty()) return;
  int64_t new_pages = 0;
  for (const PlanStep& s : plan_.steps)
    new_pages += fresh_pages(s.chunk.key, s.is_turn, s.chunk.length, s.action, s.how);
  const PoolPages pool = env_.pool_pages();
  const int64_t free_pages = pool.free, total_pages = pool.total;
  if (new_pages <= free_pages) return;
  std::ostringstream why;
  if (new_pages > total_pages) {  // not a full pool: no eviction makes room
    why << operation_name(layout_.op) << " refused: the KV pool is too small (" << total_pages << " pages in all, "
        << free_pages << " free; this plan needs " << new_pages
        << "): give the engine a larger pool (pool_bytes) or the window less to hold";
  } else {
    why << operation_name(layout_.op) << " refused: the KV pool is full (" << free_pages << " of " << total_pages
        << " pages free; this plan needs " << new_pages << "); evict, slide or close windows";
  }
  plan_.refusal = why.str();
  plan_.refused_capacity = true;
  plan_.pool_pages_short = new_pages - free_pages;
}

Plan plan_layout(const WindowSnapshot& window, const Layout& layout, const PlanEnv& env) {
  return LayoutPlanner(window, layout, env).run();
}

}  // namespace orbit::detail
