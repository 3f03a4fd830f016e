// plan_layout() (window_ops.h) as named stages over one planning state. A Layout — the window's instances
// after an operation, in order, plus what leaves — becomes a Plan in this order:
//
//   plan_evictions          one evict step per leaving entry; old positions and removed tokens as prefix sums
//   place_slots             each slot's instance, length, extent and new position; the window's totals
//   measure_context_changes per kept instance: are its antecedent keys the ones it was formed on, how far
//                           did they drift (tokens removed / inserted / moved before it), its sensitivity
//   choose_actions          per slot, the action it starts from: keep when nothing changed; without a KL
//                           budget the policy's fixed chain (choose_unbudgeted); with one the cheapest of
//                           every applicable action, kept instances starting kept
//   optimize_budget         (layout_budget.cpp, planner/budget_search.h) upgrades by KL removed per second
//                           until the budget fits
//   defer_repairs           a deferring edit relocates the survivors it would re-serve, and marks them
//   finalize                exact reuse (a step served from KV a forward computed behind the same KV
//                           states, kv_state.h), exactness along the window, each step's identity, totals
//   check_pool              refuses a plan that needs more fresh pages than the shared pool has free
//
// The planner reads a WindowSnapshot and a PlanEnv (plan_env.h: stored patches, sensitivity, the reuse
// index, free pages, the cost and fidelity models); it changes neither. Torch-free. Not thread-safe: one
// planner per plan_layout() call.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "orbit/planner/antecedents.h"
#include "orbit/planner/cost_model.h"
#include "orbit/planner/fidelity_model.h"
#include "plan/plan_env.h"
#include "plan/serve_actions.h"
#include "plan/window_meta.h"

namespace orbit::detail {

// One instance of the window after the operation, as the stages see it.
struct SlotInfo {
  const EntryMeta* old = nullptr;  // the entry it was (kept instances), or null (new)
  ChunkPtr chunk;
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
  double jumped = 0;                 // old: tokens a reorder moved in front of it (content it never saw)
  bool permuted = false;             // old: its antecedents were reordered since it was formed (EntryMeta::permuted)
  double sensitivity = -1;           // PlanEnv::chunk_sensitivity (-1: none measured yet)
  std::vector<PlanStep> candidates;  // budget: every applicable action, cheapest first
  std::size_t chosen = 0;
  bool prefix_why = false;  // candidates from enumerate: the chosen one's reason gets the slot's why in finalize
};

// The keys before a slot (its context), grown slot by slot and copied only when an action that reads them
// is planned: a window of kept instances plans without copying any. The signer grows with it, so each
// slot's patch keys cost O(1), not a hash of its whole context.
struct PlanContext {
  explicit PlanContext(std::size_t prefix) : signer(prefix) {}
  std::vector<std::string> keys;
  ContextSigner signer;
  ContextWeights weights;
};

// The actions a plan chooses among per instance: prefill is form's forward without storing the patch (the
// one a policy that prefills on a miss, throughput, takes instead of form), load-conditioned the
// store_conditioned policy's own path (the fixed chain of a policy without a budget), and reuse is offered
// by finalize, once the KV states before the instance are known.
// `first_at_window`: the window's first instance in a plan with a rope window (Plan::rope_window): its canonical
// carries the base of its own length, so a prefill at the window's length is considered whatever the policy.
bool considered(const ServeAction& a, const WindowPolicy& policy, bool first_at_window = false);

class LayoutPlanner {
 public:
  LayoutPlanner(const WindowSnapshot& window, const Layout& layout, const PlanEnv& env);
  LayoutPlanner(const LayoutPlanner&) = delete;
  LayoutPlanner& operator=(const LayoutPlanner&) = delete;

  // Runs every stage once; call once.
  Plan run();

 private:
  void plan_evictions();
  void place_slots();
  void measure_context_changes();
  std::vector<planner::AntecedentChange> moved_antecedents() const;
  void choose_actions();
  // What the window's tail reads by content (WindowPolicy::content_weight, planner::content_shares): a floor
  // under each kept instance's weight.
  void add_content_weights();
  void choose_for_slot(std::size_t i, uint64_t* ctx_hash, uint64_t* marker);
  PlanStep choose_unbudgeted(std::size_t i, const PlanInput& in, bool same, bool forced, const std::string* changed);
  void optimize_budget();
  double kept_loss_bound(std::size_t i, const PlanContext& none) const;
  void defer_repairs();
  void finalize();
  // Replaces slot i's chosen step `s` by exact reuse when KV for its content behind `chain` is stored and
  // `s` would forward it or serve it approximately; a kept instance only while `spare` pages last; stored KV read
  // back from int8 rows only where the plan's predicted KL (`total` so far) stays within a budget.
  void offer_reuse(std::size_t i, const KvState& chain, const KvState& content, bool exact_before, double total,
                   int64_t* spare, PlanStep& s);
  int64_t spare_pages() const;  // the pool's free pages less those the chosen steps need
  // The fresh pool pages one step takes (none to keep, evict or place a chunk whose set is held).
  int64_t fresh_pages(const std::string& key, bool is_turn, int64_t length, StepAction action, ServeActionId how) const;
  // A forwarding step whose leading tokens were stored behind `chain`, or behind the same `content`
  // (ReuseIndex; the content's only behind approximate KV, not over an exact context, `exact_before`), loads them
  // instead.
  void offer_partial_reuse(std::size_t i, const KvState& chain, const KvState& content, bool exact_before,
                           const PlanInput& in, PlanStep& s);
  // Dynamic-NTK RoPE past the anchor: a forwarding step whose leading tokens are the window's tentative tail
  // (WindowSnapshot::tail_key: a read's query and answer, formed at the read's own lengths behind the window's
  // states, `plain` the chain of those states from the empty chain) loads them instead, their shortfall priced
  // from tail_formed, when the plan's predicted KL (`*total`, updated) stays within the budget; else it
  // forwards them at the window's length. A form or a step that stores conditioned KV forwards them (what they
  // store is taken as formed at the plan's rope window).
  void offer_tail_rows(std::size_t i, const KvState& plain, double* total, PlanStep& s);
  void check_pool();

  // Extends `ctx` with the keys of slots [ctx.keys.size(), i) and returns it.
  PlanContext* context_upto(PlanContext& ctx, std::size_t i);
  PlanInput input_for(std::size_t i, const PlanContext* ctx) const;
  // Every action that can serve slot i, cheapest first, into info_[i].candidates. Keep is left out when
  // the slot is new or a cascade forces it; other actions when it is exact already.
  void enumerate(std::size_t i, const PlanInput& in, const std::string& why);
  // Dynamic-NTK RoPE (ModelLimits::dynamic_ntk): what serving slot i by `s` is predicted to lose because its
  // content was formed in a window of another length than the window after the plan (planner::
  // shortfall_feature): a kept instance's formed window (EntryMeta::formed_window), a forward's end, a
  // canonical's own length. Sets s.shortfall_kl and adds it to s.predicted_kl; 0 for every other model.
  void add_shortfall(std::size_t i, PlanStep& s) const;
  // The window length slot i's content carries when served by `s` (apply_plan.cpp's formed_window says the
  // same for what it serves).
  int64_t formed_window(std::size_t i, const PlanStep& s) const;
  // Whether kept slot i's content was formed at a window length that prices a loss read at the window's length
  // after the plan (always false but under dynamic-NTK RoPE).
  bool short_formed(std::size_t i) const;
  // `why` + `suffix`, built once per plan for the texts many slots share.
  std::string join(const std::string* why, const char* suffix);

  const WindowSnapshot& window_;
  const Layout& layout_;
  const PlanEnv& env_;
  const WindowPolicy& policy_;
  const planner::CostModel cost_;
  const planner::FidelityModel fidelity_;
  const int64_t kv_per_token_;
  const bool budgeted_;
  const bool defer_;  // an edit under a deferring policy: its repairs wait for the next read
  const ServeAction& keep_;
  const ServeAction& reuse_;

  Plan plan_;
  std::size_t n_old_ = 0;
  std::vector<int64_t> old_position_;    // [n_old + 1] prefix sums of the old entries' extents
  std::vector<int64_t> removed_before_;  // [n_old + 1] tokens evicted before each old entry
  std::size_t prefix_ = 0;               // leading turns: the orbit prefix (fixed under reorder)
  std::vector<SlotInfo> info_;
  int64_t total_tokens_ = 0, extent_ = 0, pages_ = 0;
  PlanContext context_;
  std::vector<double> weights_;  // recency weight per slot
  std::vector<char> is_same_;    // the slot's old KV fits its context exactly (same keys and versions)
  // WindowPolicy::read_attention_raised_only, in a read's plan: a kept slot whose look weight is not above
  // its own weight (nor a deferred repair). The budget's search never re-serves it (kept_loss_bound 0).
  std::vector<char> look_pinned_;
  std::vector<char> deferred_;
  // Why each slot is re-served or kept over a change: one of a few shared texts, so a slot holds a pointer.
  std::vector<const std::string*> whys_;
  std::string changed_now_;
  std::vector<std::pair<std::pair<const std::string*, const char*>, std::string>> joined_;
};

}  // namespace orbit::detail
