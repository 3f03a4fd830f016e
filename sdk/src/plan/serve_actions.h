// Serving actions (docs/ARCHITECTURE.md §4), their planning half: each way of making one instance's KV for
// the window after an operation (orbit::ServeActionId) is one small type here, and one apply function in
// actions.h (the half that runs forwards; apply_action dispatches on the id):
//
//   plan(PlanInput)            const, metadata only: a PlanStep with the action, its estimated seconds
//                              (the engine's cost model), critical-path and background forward tokens,
//                              bytes read, the fidelity model's predicted KL, whether the result is exact,
//                              and everything apply needs (keys, ranks, variant, token counts); nullopt
//                              when the action cannot serve this instance (no stored patch, a turn, ...)
//   apply(ApplyInput, step)    makes the KV from the step alone (never from the window's policy)
//   floor(PlanInput)           optional: the least KL and fewest seconds any plan of it could give, with
//                              no lookups (ActionFloor); lets an over-budget plan skip the survivors
//                              no action could improve enough to matter
//
//   keep            the instance's KV as it is (rotation only); approximate when its context changed. Any
//                   other action that would serve it the very KV it holds is priced as this (held_kv)
//   canonical       nothing precedes the chunk: its canonical is exact
//   stored-patch    canonical + a stored patch: exact key, orbit key, or a stale one (formed under another
//                   context: the policy's `:stale=D`, or any under a KL budget, which prices its loss)
//   load-conditioned  a stored conditioned KV behind exactly this context (WindowPolicy::store_conditioned)
//   reuse           the KV a forward computed before behind the same KV states (kv_state.h): no forward,
//                   the same KV; the planner's last pass (LayoutPlanner::finalize) chooses it, never enumerate
//   form            one exact in-context prefill (the critical path); canonical + patch queued for the
//                   background, stored under the step's keys
//   prefill         one exact in-context prefill, nothing stored but (prefix baseline) the conditioned KV;
//                   served instance by instance from the change point, this is re-prefill
//   blind           the canonical relocated, no repair
//   first-k         the first k tokens recomputed in context over the canonical (EPIC)
//   cacheblend      the top r of tokens by KV deviation recomputed in context (CacheBlend)
//   prefill-turn    a live turn prefilled in context
//
// Adding an action: an id in orbit/plan.h, one class in actions_plan.cpp with a line in its registry
// (all_actions()), and its apply function in actions.cpp.
//
// Torch-free (part of the planning library, window_meta.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "orbit/planner/cost_model.h"
#include "orbit/planner/fidelity_model.h"
#include "plan/plan_env.h"
#include "plan/window_meta.h"

namespace orbit::detail {

// Everything an action's plan half may read about one instance of the window after the operation.
struct PlanInput {
  const PlanEnv& env;
  const planner::CostModel& cost;
  const planner::FidelityModel& fidelity;
  const WindowPolicy& policy;
  ChunkPtr chunk;                  // chunks (null for turns)
  const EntryMeta* old = nullptr;  // its current entry, nullptr for a new instance
  bool is_turn = false;
  const std::vector<int64_t>* turn_tokens = nullptr;  // turns
  int64_t length = 0;
  int64_t position = 0;                               // its first position (= tokens of context before it)
  const std::vector<std::string>* context = nullptr;  // ordered content keys before it
  const std::string* reuse_key = nullptr;             // the reuse action: the key of its KV behind the states
                                                      // before it (kv_state.h), when the planner offers it
  const ContextSigner* signer = nullptr;              // those keys signed (constructed with `prefix`); or nullptr
  const ContextWeights* weights = nullptr;            // those keys weighted by tokens (stale-patch divergence)
  std::size_t prefix = 0;                             // leading turns of that context (fixed under reorder)
  double weight = 0;                                  // recency_weight: length / tokens from its start to the end
  double context_change = 0;                          // old: keep_change of its drift since formed (fidelity_model.h)
  double sensitivity = -1;                            // chunks: its patches' sensitivity (-1: unknown, turns)
  bool reordered = false;                             // old: the same antecedents as formed on, in another order
  bool permuted = false;                              // old: drifted, and its antecedents reordered since formed
  bool moved = false;                                 // old: its position changes
  int64_t kv_per_token = 0;
  int64_t rope_window = 0;  // Plan::rope_window: the window length its forwards run at (0: each one's own end)

  // The patch keys of this instance behind its context (keys_of() in actions.cpp), computed once for all
  // the actions planned on this input; valid for the signer and context length they were computed on.
  mutable std::optional<PatchKeys> memo_keys;
  mutable const void* memo_context = nullptr;
  mutable std::size_t memo_size = 0;
};

// The least KL and the fewest estimated seconds any plan of an action could give an instance, found without
// reading its context or the store (PlanInput::context may be short here; the instance is the window's
// first iff in.position == 0). A budgeted plan enumerates a kept instance's alternatives only once this
// bound says one of them could be its next upgrade. The default claims nothing (always worth enumerating):
// correct for any action, only slower.
struct ActionFloor {
  bool applicable = true;  // false: the action can never serve this instance
  double kl = 0;
  double seconds = 0;
};

class ServeAction {
 public:
  virtual ~ServeAction() = default;
  virtual ServeActionId id() const = 0;
  const char* name() const { return serve_action_name(id()); }
  virtual StepAction category() const = 0;
  virtual std::optional<PlanStep> plan(const PlanInput& in) const = 0;
  virtual ActionFloor floor(const PlanInput&) const { return {}; }
};

// Every action, in the order a fidelity-budgeted plan considers them; one by id.
const std::vector<const ServeAction*>& all_actions();
const ServeAction& action(ServeActionId id);

// What keeping the instance as it is is predicted to lose (the keep action's price): what its serving action
// left, rescaled by its weight now, plus what the change of its context since then adds. in.old must be set.
double kept_kl(const PlanInput& in);

// Whether step `s` would serve the instance the KV it holds already (kv_state.h: equal states, equal KV):
//   kSame    the same KV: the stored patch it was served from (exact, orbit or stale alike), the exact
//            (full-rank) patch a form stored of the KV it computed, or its canonical again when it holds it
//            (blind). Nothing is repaired; the keep gives the same KV for fewer seconds
//   kFromIt  a truncated patch a form stored of the KV it holds: that KV with the truncation's loss on top
//   kOther   anything else, and every new instance
// Only actions whose result does not depend on the KV before it are recognised (a stored patch, blind);
// a forward or a recompute is judged by the planner's context tests instead. StoredPatch and Blind price a
// kSame step as the keep (Blind: at least its own loss) and a kFromIt one at least as the keep; a plan
// never chooses a kSame step where it could keep (LayoutPlanner::enumerate, choose_unbudgeted).
enum class HeldKv { kOther, kSame, kFromIt };
HeldKv held_kv(const PlanInput& in, const PlanStep& s);

// The canonical's residence and its read/encode cost into `s` (s.needs_canonical must be set).
void price_canonical(const PlanInput& in, PlanStep& s);
// What reading the stored KV under `store_key` adds when it came back from int8 rows (PlanEnv::stored_quantization):
// the fidelity model's quantized loss on `share` of its rows into s.quantized_kl and s.predicted_kl; s is then not
// exact. Nothing for exact KV.
void price_quantization(const PlanInput& in, const std::string& store_key, double share, PlanStep& s);
// Seconds the cost model gives a step (critical path only).
double estimate_seconds(const PlanInput& in, const PlanStep& s);

}  // namespace orbit::detail
