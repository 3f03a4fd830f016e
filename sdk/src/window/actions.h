// Serving actions (docs/ARCHITECTURE.md §4): each way of making one instance's
// KV for the window after an operation is one small type with two halves:
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
//   keep            the instance's KV as it is (rotation only); approximate when its context changed
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
// Adding an action: one class in actions.cpp and one line in its registry (all_actions()).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "orbit/planner/cost_model.h"
#include "orbit/planner/fidelity_model.h"
#include "window/window_ops.h"
#include "window/window_state.h"

namespace orbit::detail {

// The window being built by apply(): entries made so far, in window order, and their KV as a past.
struct WindowBuild {
  EngineCore& core;
  std::vector<Entry> entries;
  std::vector<runtime::Content> contents;  // filled lazily for kept entries
  std::vector<int64_t> starts;             // each entry's first position
  std::vector<at::Tensor> positions;       // filled lazily from starts by past(): most applies run no forward
  int64_t next_position = 0;
  KvState chain;    // the KV-state chain over the entries built so far
  KvState content;  // their content chain

  explicit WindowBuild(EngineCore& c) : core(c) {}
  ~WindowBuild();  // destroys the entries under the pool lock
  WindowBuild(const WindowBuild&) = delete;
  WindowBuild& operator=(const WindowBuild&) = delete;

  runtime::PastKV past();  // the KV of every entry built so far, with positions
  std::vector<ContextItem> context() const;
  std::vector<InstanceId> context_ids() const;
  std::vector<std::string> context_keys() const;
};

// Everything an action's plan half may read about one instance of the window after the operation.
struct PlanInput {
  const EngineCore& core;
  const planner::CostModel& cost;
  const planner::FidelityModel& fidelity;
  const WindowPolicy& policy;
  const ChunkRecord* chunk = nullptr;  // chunks (nullptr for turns)
  const Entry* old = nullptr;          // its current entry, nullptr for a new instance
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
  bool moved = false;                                 // old: its position changes
  int64_t kv_per_token = 0;

  // The patch keys of this instance behind its context (keys_of() in actions.cpp), computed once for all
  // the actions planned on this input; valid for the signer and context length they were computed on.
  mutable std::optional<PatchKeys> memo_keys;
  mutable const void* memo_context = nullptr;
  mutable std::size_t memo_size = 0;
};

struct ApplyInput {
  EngineCore& core;
  WindowBuild& build;
  const std::string* key = nullptr;  // the instance's content key
  const Entry* old = nullptr;
  const ChunkRecord* chunk = nullptr;
  const std::vector<int64_t>* turn_tokens = nullptr;
  int64_t length = 0;
  int64_t position = 0;
  std::size_t prefix = 0;  // leading turns among build.entries
};

struct ApplyOutput {
  runtime::Content content;                // the instance's new KV (content channel); empty with keep_pages
  bool keep_pages = false;                 // keep the old entry's pages (the keep action)
  bool conditioned = false;                // its KV saw its context (the dependency graph records the edge)
  StepAction done_as = StepAction::kKeep;  // what was done (differs from the plan on a fallback)
  double forward_tokens = 0;               // critical-path token-forwards
  int64_t patch_hits = 0;
  int64_t canonicals_encoded = 0;
  int64_t bytes_moved = 0;
  int64_t background_jobs = 0;
  double encode_tokens = 0;        // of forward_tokens: canonical encodes (counted by EngineCore::canonical)
  bool approximate_reuse = false;  // leading rows loaded from KV computed behind the same content only
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
  virtual const char* id() const = 0;
  virtual StepAction category() const = 0;
  virtual std::optional<PlanStep> plan(const PlanInput& in) const = 0;
  virtual ActionFloor floor(const PlanInput&) const { return {}; }
  virtual void apply(ApplyInput& in, const PlanStep& step, ApplyOutput& out) const = 0;
};

// Every action, in the order a fidelity-budgeted plan considers them; by id (throws on an unknown id).
const std::vector<const ServeAction*>& all_actions();
const ServeAction& action(const std::string& id);

// The canonical's residence and its read/encode cost into `s` (s.needs_canonical must be set).
void price_canonical(const PlanInput& in, PlanStep& s);
// Seconds the cost model gives a step (critical path only).
double estimate_seconds(const PlanInput& in, const PlanStep& s);

}  // namespace orbit::detail
