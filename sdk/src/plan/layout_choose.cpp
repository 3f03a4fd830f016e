// Choosing each slot's serving action (layout_planner.h: choose_actions). Without a KL budget the policy's
// fixed chain decides (legacy_serve); with one every applicable action is enumerated and priced, and the
// budget's search (layout_budget.cpp) moves from the cheapest.
#include <algorithm>

#include "orbit/common/error.h"
#include "plan/layout_planner.h"

namespace orbit::detail {

namespace {

// Why each slot is re-served or kept over a change: a few texts shared by every slot (a window of
// survivors behind one eviction all give the same reason).
const std::string kNoWhy;
const std::string kEarlierEdit = "context changed by an earlier edit";
const std::string kReformed = "an antecedent's KV was re-formed";

// The serving action a policy names for a patch miss.
ServeActionId miss_action(MissAction on_miss) {
  switch (on_miss) {
    case MissAction::kForm: return ServeActionId::kForm;
    case MissAction::kReprefill: return ServeActionId::kPrefill;
    case MissAction::kBlind: return ServeActionId::kBlind;
    case MissAction::kTokenRecompute: return ServeActionId::kCacheBlend;
    case MissAction::kFirstK: return ServeActionId::kFirstK;
  }
  return ServeActionId::kForm;
}

// A cost-aware policy recomputes where the cost model says that is cheaper than applying a patch or
// forming one (the canonical's tier and the expected reuse decide).
void apply_cost_model(const PlanInput& in, std::optional<PlanStep>& s) {
  planner::ReuseOption opt;
  opt.tokens = in.length;
  opt.context_tokens = in.position;
  opt.canonical_bytes = in.length * in.kv_per_token;
  const auto tier = in.env.canonical_residence(in.chunk->ref.key);
  opt.canonical_tier = tier.has_value() && *tier == StoreTier::kDevice   ? planner::Tier::kDevice
                       : tier.has_value() && *tier == StoreTier::kHost   ? planner::Tier::kHost
                       : tier.has_value() && *tier == StoreTier::kRemote ? planner::Tier::kRemote
                                                                         : planner::Tier::kDisk;
  if (s->action == StepAction::kApplyPatch) opt.patch_bytes = opt.canonical_bytes / 4;
  opt.expected_reuse = in.policy.expected_reuse;
  const planner::Decision d = in.cost.choose(opt);
  if (d.action == planner::Decision::Action::kRecompute) {
    s = action(ServeActionId::kPrefill).plan(in);
    s->reason = "cost model: " + d.describe();
  }
}

// The fixed chain for a slot that must be (re)served: stored first, then the policy's miss action.
PlanStep legacy_serve(const PlanInput& in, const std::string& reason) {
  if (in.is_turn) return *action(ServeActionId::kPrefillTurn).plan(in);
  if (in.context->empty()) return *action(ServeActionId::kCanonical).plan(in);
  std::optional<PlanStep> s = action(ServeActionId::kLoadConditioned).plan(in);
  if (!s) s = action(ServeActionId::kStoredPatch).plan(in);
  if (!s) {
    const ServeActionId miss = miss_action(in.policy.on_miss);
    s = action(miss).plan(in);
    ORBIT_CHECK(s.has_value(), "plan: serving action '" << serve_action_name(miss) << "' cannot serve this instance");
    s->reason = (reason.empty() ? std::string("patch miss") : reason + "; patch miss") + ": " + s->reason;
  } else if (!reason.empty()) {
    s->reason = reason + "; " + s->reason;
  }
  if (in.policy.cost_aware && (s->action == StepAction::kApplyPatch || s->action == StepAction::kForm)) {
    apply_cost_model(in, s);
  }
  return *s;
}

}  // namespace

bool considered(const ServeAction& a, const WindowPolicy& policy, bool first_at_window) {
  const ServeActionId id = a.id();
  if (id == ServeActionId::kLoadConditioned || id == ServeActionId::kReuse) return false;
  if (first_at_window && id == ServeActionId::kPrefill) return true;
  // A policy whose miss action is a plain prefill (throughput) forms no patch: prefill stands for form.
  const bool prefills = policy.on_miss == MissAction::kReprefill;
  return prefills ? id != ServeActionId::kForm : id != ServeActionId::kPrefill;
}

std::string LayoutPlanner::join(const std::string* why, const char* suffix) {
  if (why != &kEarlierEdit && why != &kReformed && why != &changed_now_) return *why + suffix;
  for (const auto& [k, text] : joined_) {
    if (k.first == why && k.second == suffix) return text;
  }
  joined_.push_back({{why, suffix}, *why + suffix});
  return joined_.back().second;
}

void LayoutPlanner::enumerate(std::size_t i, const PlanInput& in, const std::string& why) {
  const Slot& sl = layout_.slots[i];
  SlotInfo& si = info_[i];
  const bool same = is_same_[i] != 0;
  si.candidates.clear();
  si.candidates.reserve(all_actions().size());
  si.chosen = 0;
  bool kept = false;  // keep is a candidate (all_actions() lists it first)
  for (const ServeAction* a : all_actions()) {
    const ServeActionId id = a->id();
    const bool keep = id == ServeActionId::kKeep;
    // A forced slot is served again unless it was formed on this very context (recondition forces every
    // slot, and re-conditions only those whose context changed); heal's reform makes `same` false.
    if (keep && (si.old == nullptr || (sl.force && !same))) continue;
    // Exact already; under dynamic-NTK RoPE only if it was also formed at the window's length.
    if (!keep && si.old != nullptr && same && si.old->predicted_kl == 0 && !short_formed(i)) continue;
    if (!considered(*a, policy_, i == 0 && plan_.rope_window > 0)) continue;
    std::optional<PlanStep> s = a->plan(in);
    if (!s) continue;
    // A re-serve of the very KV it holds repairs nothing: where keep is a candidate, it is not one.
    if (!keep && kept && held_kv(in, *s) == HeldKv::kSame) continue;
    kept = kept || keep;
    s->estimated_seconds = estimate_seconds(in, *s);
    // The budget's search skips a slot on the strength of its actions' floors: a floor above a plan would
    // make it skip an upgrade a full enumeration takes, so every enumerated plan checks its own.
    const ActionFloor f = a->floor(in);
    ORBIT_CHECK(
        f.applicable && s->predicted_kl >= f.kl * (1 - 1e-12) && s->estimated_seconds >= f.seconds * (1 - 1e-12),
        "internal error: action " << a->name() << " planned KL " << s->predicted_kl << " in " << s->estimated_seconds
                                  << " s, below its floor (KL " << f.kl << ", " << f.seconds << " s, applicable "
                                  << f.applicable << ")");
    // The slot's why is prefixed in finalize, to the chosen candidate only (most are never shown).
    if (keep) s->reason = same ? (si.moved ? "relocated (rotation only)" : "unchanged") : "kept as-is";
    add_shortfall(i, *s);
    si.candidates.push_back(std::move(*s));
  }
  si.prefix_why = !why.empty();
  ORBIT_CHECK(!si.candidates.empty(), "plan: no serving action can serve instance " << sl.id);
  std::stable_sort(si.candidates.begin(), si.candidates.end(), [](const PlanStep& a, const PlanStep& b) {
    if (a.estimated_seconds != b.estimated_seconds) return a.estimated_seconds < b.estimated_seconds;
    return a.predicted_kl < b.predicted_kl;
  });
}

void LayoutPlanner::choose_actions() {
  const std::size_t n = layout_.slots.size();
  weights_.assign(n, 0.0);
  is_same_.assign(n, 0);
  look_pinned_.assign(n, 0);
  whys_.assign(n, &kNoWhy);
  changed_now_ = "context changed" + (layout_.change_reason.empty() ? std::string() : ": " + layout_.change_reason);
  int64_t tokens_before = 0;
  for (std::size_t i = 0; i < n; ++i) {
    // Input embeddings (an image's or a frame's rows) come from outside the vocabulary, and a query's
    // attention to them does not fall off with distance as it does over text: measured on
    // bindings/python/examples/tool_loop.py, a 6-row screenshot 170 tokens back carried 7.7e-2 of the
    // window's 8.3e-2 KL, with a recency weight of 4e-5. They are weighted as if last.
    const bool embeddings = info_[i].chunk != nullptr && info_[i].chunk->ref.kind == ChunkKind::kEmbeddings;
    // A kept instance a reorder moved toward the tail (behind more content it never saw than now follows
    // it: a result shown again, a page gone back to) is what the next query reads: measured on the same tool
    // loop, such a message lost 4 to 20 times its recency-weighted prediction. It is weighted as if last too.
    const int64_t to_end = total_tokens_ - tokens_before - info_[i].length;
    const bool toward_tail = !info_[i].keys_same && info_[i].jumped > static_cast<double>(to_end);
    weights_[i] =
        embeddings || toward_tail ? 1.0 : planner::recency_weight(info_[i].length, total_tokens_ - tokens_before);
    // What the last query looked at, it is likely to look at again, however far back (a tool result an
    // agent's question refers to): WindowPolicy::attention_weight.
    const EntryMeta* old = info_[i].old;
    if (old != nullptr && old->attention > 0 && policy_.attention_weight > 0) {
      weights_[i] = std::max(weights_[i], std::min(1.0, policy_.attention_weight * old->attention));
    }
    // What the read being planned looks at (its own query forwarded over the window as it stands):
    // WindowPolicy::read_attention_weight, set only in a read's plan (plan_read in window_ops.h). Under
    // read_attention_raised_only, what the look does not weigh above its own weight stays as it is.
    if (old != nullptr && old->read_attention >= 0 && policy_.read_attention_weight > 0) {
      const double look = std::min(1.0, policy_.read_attention_weight * old->read_attention);
      look_pinned_[i] = policy_.read_attention_raised_only && look <= weights_[i] && !old->deferred ? 1 : 0;
      weights_[i] = std::max(weights_[i], look);
    }
    tokens_before += info_[i].length;
  }
  if (policy_.content_weight > 0) add_content_weights();
  // Fresh KV (a new turn at the tail) is computed over the kept instances' approximate KV: they are read
  // through it too (planner::add_read_through, WindowPolicy::read_through).
  if (policy_.read_through > 0) {
    std::vector<int64_t> lengths(n);
    std::vector<bool> fresh(n);
    for (std::size_t i = 0; i < n; ++i) {
      lengths[i] = info_[i].length;
      fresh[i] = info_[i].old == nullptr;
    }
    weights_ = planner::add_read_through(weights_, lengths, fresh, policy_.read_through);
  }
  // Versions: a re-served slot's KV changes, so the exact "same context" test for later slots runs on
  // (key, version) with a fresh marker per re-served slot.
  uint64_t ctx_hash = 0, marker = 0;
  for (std::size_t i = 0; i < n; ++i) choose_for_slot(i, &ctx_hash, &marker);
}

void LayoutPlanner::add_content_weights() {
  const std::size_t n = info_.size();
  std::vector<const std::vector<int64_t>*> tokens(n, nullptr);
  std::vector<int64_t> lengths(n);
  for (std::size_t i = 0; i < n; ++i) {
    const SlotInfo& si = info_[i];
    lengths[i] = si.length;
    if (si.is_turn) {
      tokens[i] = si.turn_tokens;
    } else if (si.chunk != nullptr && si.chunk->ref.kind == ChunkKind::kTokens) {
      tokens[i] = &si.chunk->tokens;
    }
  }
  const std::vector<double> share = planner::content_shares(tokens, lengths);
  for (std::size_t i = 0; i < n; ++i) {
    if (info_[i].old != nullptr && share[i] > 0) {
      weights_[i] = std::max(weights_[i], std::min(1.0, policy_.content_weight * share[i]));
    }
  }
}

void LayoutPlanner::choose_for_slot(std::size_t i, uint64_t* ctx_hash, uint64_t* marker) {
  const Slot& sl = layout_.slots[i];
  SlotInfo& si = info_[i];
  // A held instance is first planned as kept, which reads no context (Keep and estimate_seconds look at the
  // instance's own features): its input carries the context built so far, possibly shorter than i. Every
  // other path plans on context_upto(i).
  const bool held = si.old != nullptr && !sl.force;
  const PlanInput in = input_for(i, held ? &context_ : context_upto(context_, i));
  const bool same = si.old != nullptr && si.old->formed_on == *ctx_hash && !sl.reform;
  is_same_[i] = same ? 1 : 0;
  const bool redo = !defer_ && si.old != nullptr && si.old->deferred;
  const bool forced = sl.force || (layout_.reorder_relookup && !si.keys_same) || redo;
  // Why a held instance's KV no longer fits: this operation's change before it, or (for an instance an
  // earlier edit left kept or deferred) that edit's.
  const std::string* changed = !si.changed_now && layout_.op != Operation::kFlush ? &kEarlierEdit : &changed_now_;
  if (!sl.reason.empty()) {
    whys_[i] = &sl.reason;
  } else if (si.old != nullptr && !same) {
    whys_[i] = !si.keys_same ? changed : &kReformed;
  }
  if (!budgeted_) {
    si.candidates.push_back(choose_unbudgeted(i, in, same, forced, changed));
  } else if (held) {
    // A held instance starts kept (after a reorder keep is priced as an orbit loss: the same antecedents
    // in another order); its alternatives are enumerated only if the budget needs them.
    PlanStep s = *keep_.plan(in);
    s.estimated_seconds = estimate_seconds(in, s);
    s.reason = same ? (si.moved ? "relocated (rotation only)" : "unchanged") : join(whys_[i], "; kept as-is");
    add_shortfall(i, s);
    si.candidates.push_back(std::move(s));
  } else {
    enumerate(i, in, *whys_[i]);
  }
  const bool reserved = si.candidates.front().action != StepAction::kKeep;
  *ctx_hash = context_hash(*ctx_hash, *si.key, reserved ? (~uint64_t{0} - ++*marker) : si.old->version);
}

PlanStep LayoutPlanner::choose_unbudgeted(std::size_t i, const PlanInput& in, bool same, bool forced,
                                          const std::string* changed) {
  const SlotInfo& si = info_[i];
  PlanStep s;
  if (same) {
    s = *keep_.plan(in);
    s.reason = si.moved ? "relocated (rotation only)" : "unchanged";
  } else if (si.old != nullptr && !forced && policy_.survivors == SurvivorAction::kKeep) {
    s = *keep_.plan(in);
    s.reason = join(changed, "; kept as-is, relocation only");
  } else {
    PlanInput served = in;
    served.context = &context_upto(context_, i)->keys;
    served.signer = &context_.signer;
    served.weights = &context_.weights;
    s = legacy_serve(served, si.old != nullptr ? *whys_[i] : layout_.slots[i].reason);
    // The policy's chain found the very KV the instance holds (the stale patch it was served from, say): a
    // re-serve that repairs nothing, unless the slot must be served again, is the keep it equals.
    if (si.old != nullptr && !forced && held_kv(served, s) == HeldKv::kSame) {
      s = *keep_.plan(in);
      s.reason = join(changed, "; kept as-is: the stored KV found for it is the KV it holds");
    }
  }
  s.estimated_seconds = estimate_seconds(in, s);
  add_shortfall(i, s);
  return s;
}

}  // namespace orbit::detail
