// Plans (docs/ARCHITECTURE.md §3): every window operation is planned by a const `plan_*` call, then applied.
//
// A Plan is the complete list of what the operation will do to the window (per instance: kept, relocated,
// patched, formed, recomputed, evicted), with its cost estimates and whether the result is exact. It is
// self-contained: apply() reads nothing but the plan (the serving action per instance, ranks, variant,
// store keys, the policy it was made under) and the window's instances it names. It is tied to the
// window state it was made from: applying it after the window changed (an applied operation or
// set_policy) is an error (plan again). Plans are plain values: print them (describe()), log them,
// compare alternatives.
//
// Critical path vs background: what the next token waits for is the critical path (the forwards apply()
// runs). A chunk's first sight in a context is one exact in-context prefill; its canonical (the chunk
// alone) and its patch (the SVD of the difference) are formed in the background afterwards (see
// Engine::run_background). Plans count both paths.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orbit/chunk.h"
#include "orbit/policy.h"
#include "orbit/store.h"

namespace orbit {

using InstanceId = uint64_t;  // one placement of a chunk (or one live turn) in one window; unique per engine

// kFlush: the deferred repairs alone (WindowPolicy::defer_repairs), as a read runs them first.
// kHeal: the window made exact again in idle time (Window::heal); its forwards count as background work.
// kSync: a message list synced in one plan (Window::sync, orbit/sync.h): its evictions, moves, recalls, admits
// and turns together, so each instance is served once for the window they leave.
enum class Operation { kAdmit, kAddTurn, kEvict, kSlide, kRecall, kReorder, kRecondition, kFlush, kHeal, kSync };
const char* operation_name(Operation op) noexcept;  // "admit", "turn", "evict", "slide", ...

// What happens to one instance.
enum class StepAction {
  kKeep,             // content unchanged, relocated to its new place if it moved (rotation only)
  kCanonical,        // the canonical alone is exact (nothing precedes the chunk)
  kApplyPatch,       // canonical + a stored patch (exact key, orbit key or, by policy, a stale one)
  kLoadConditioned,  // a stored conditioned KV for exactly this context: exact reuse, or the prefix policy's
  kForm,             // one forward of the chunk in context; its patch is formed and stored
  kReprefill,        // one forward in context, nothing stored
  kBlind,            // the canonical relocated, no repair (approximate)
  kRecompute,        // token recompute (CacheBlend / first-k): some tokens forwarded in context
  kPrefillTurn,      // a live turn prefilled in context
  kEvict,            // the instance leaves the window (its canonical stays in the store)
};
const char* step_action_name(StepAction action) noexcept;

// The serving action that makes one instance's KV (docs/ARCHITECTURE.md §4): the planner chooses one per
// instance and apply() dispatches on it. StepAction above is its category (what kind of work it is); this is
// the action itself. Names: serve_action_name ("keep", "stored-patch", "form", ...).
enum class ServeActionId {
  kKeep,             // the KV as it is, relocated if it moved
  kCanonical,        // the canonical alone (nothing precedes the chunk)
  kStoredPatch,      // canonical + a stored patch (exact, orbit or stale key)
  kLoadConditioned,  // a stored conditioned KV behind exactly this context (the store_conditioned policy)
  kReuse,            // the KV a forward computed before behind the same KV states (exact reuse)
  kBlind,            // the canonical relocated, no repair
  kFirstK,           // the first k tokens recomputed in context (EPIC)
  kCacheBlend,       // the most deviating tokens recomputed in context (CacheBlend)
  kForm,             // one forward in context now; canonical + patch formed in the background
  kPrefill,          // one forward in context, no patch
  kPrefillTurn,      // a live turn forwarded in context
  kEvict,            // the instance leaves the window
};
const char* serve_action_name(ServeActionId id) noexcept;

// How the patch of a kApplyPatch step was found.
enum class PatchMatch { kNone, kExact, kOrbit, kStale };
const char* patch_match_name(PatchMatch match) noexcept;

struct PlanStep {
  StepAction action = StepAction::kKeep;     // the category of `how`
  ServeActionId how = ServeActionId::kKeep;  // the serving action that makes this instance's KV
  InstanceId instance = 0;
  ChunkRef chunk;  // the chunk (for a turn: kind tokens, label "turn")
  bool is_turn = false;
  int64_t position = 0;  // first position after the operation (kEvict: before)
  PatchMatch match = PatchMatch::kNone;
  std::vector<int64_t> turn_tokens;     // a new live turn's tokens
  std::string patch_key;                // the stored patch / conditioned KV read (kApplyPatch, kLoadConditioned)
  std::vector<std::string> store_keys;  // keys this step writes (kForm: exact and orbit patch keys;
                                        // kReprefill under the prefix policy: the conditioned KV)
  // Exact reuse (WindowPolicy::reuse_computed): a step that forwards the instance in context (kForm,
  // kReprefill, kPrefillTurn) keeps its KV in the store under this key, the instance's content behind the
  // KV states before it; apply() uses the key of the window as it builds it (the same unless an earlier step
  // fell back to another action). Empty: not kept. A step served *from* such KV is kLoadConditioned with
  // how "reuse" and the key in patch_key.
  std::string reuse_key;
  // Partial exact reuse (a forwarding step): the leading reused_tokens rows are loaded from the KV stored
  // under reuse_from (another sequence that started with the same tokens behind the same KV states, as a
  // radix cache matches part of a sequence); the rest are forwarded (forward_tokens counts only those).
  std::string reuse_from;
  int64_t reused_tokens = 0;
  // Dynamic-NTK RoPE past the anchor: the window length the loaded rows were formed at when it is not the
  // plan's rope window (a read's query and answer, kept by the read at its own lengths and loaded by the next
  // turn that starts with them; shortfall_kl prices it); 0: rows a forward of this plan computes.
  int64_t reused_formed_window = 0;
  double divergence = 0;  // kStale: the accepted patch's context divergence
  int64_t rank_k = 0;     // patch ranks formed/read by this step (0: no patch involved)
  int64_t rank_v = 0;
  std::string variant;     // patch variant ("full", "deep@0.9"); empty when no patch
  bool deep_only = false;  // patch only the layers holding deep_energy of the deficit
  double deep_energy = 0;
  int64_t recompute_tokens = 0;                 // kRecompute: tokens recomputed in context
  bool needs_canonical = false;                 // the canonical must be encoded or loaded
  bool encode_canonical = false;                // ... and it is not in the store: one forward of the chunk alone
  StoreTier canonical_tier = StoreTier::kHost;  // where the canonical is read from, when needed and stored
  double forward_tokens = 0;                    // token-forwards on the critical path (apply() runs them)
  double background_tokens = 0;                 // token-forwards queued for the background (canonical encode)
  bool background_patch = false;                // the patch (canonical + SVD) is formed in the background
  // A live turn prefilled (kPrefillTurn) or loaded by exact reuse (an answer a read computed, sent back)
  // under a budgeted policy that works in the background, whose content nothing measured yet: the turn's
  // sensitivity is measured afterwards (its tokens forwarded alone, background_tokens), so later plans scale
  // the loss of keeping it over a changed context by it as they do a chunk's (planner/fidelity_model.h)
  bool measure_sensitivity = false;
  double predicted_kl = 0;       // the fidelity model's next-token KL vs a re-prefill this instance
                                 // carries after the step (0 for exact actions)
  double sensitivity = -1;       // the measured sensitivity predicted_kl was scaled by (a chunk's: runtime::
                                 // Patch::sensitivity of its formed patches; a turn's: measure_sensitivity
                                 // above; planner/fidelity_model.h); for a chunk nothing has measured, the
                                 // largest patch sensitivity the engine has measured (its prior); -1 for a
                                 // turn not measured yet, any instance before anything was measured (the
                                 // model's reference), and those whose context did not change (they carry
                                 // kl_per_weight)
  double kl_per_weight = 0;      // of predicted_kl, the serving action's own loss per unit recency weight
                                 // (the instance carries it; later plans rescale it by its weight then)
  double shortfall_kl = 0;       // of predicted_kl, dynamic-NTK RoPE's: content formed in a window of another
                                 // length than the window after the plan (planner/fidelity_model.h
                                 // shortfall_feature); 0 for every other model. Not in kl_per_weight: each
                                 // plan prices it anew from the instance's formed window
  double quantized_kl = 0;       // of predicted_kl, the int8 cold tier's: the stored KV this step reads came back
                                 // from int8 rows (EngineOptions::cold_tier; planner/fidelity_model.h quantized)
  double drift_tokens = 0;       // kKeep: tokens removed or inserted before it since its KV was formed
  double context_change = 0;     // kKeep: the fidelity model's keep feature, accumulated since it was
                                 // formed (planner/fidelity_model.h keep_change; 1 after a reorder)
  bool permuted = false;         // kKeep: its antecedents were reordered since its KV was formed (it carries
                                 // the orbit loss, beside its drift's keep loss where tokens also changed)
  int64_t bytes_moved = 0;       // canonical/patch bytes read from the store for this step
  double estimated_seconds = 0;  // the engine's cost model (calibrated with Engine::calibrate)
  bool exact = false;            // this instance's KV equals a re-prefill of the window after the plan
  bool deferred = false;         // kKeep under a deferring policy: its repair waits for the next read
  std::string reason;            // why this action ("context changed: chunk 'b' evicted", "orbit hit", ...)
};

struct Plan {
  Operation op = Operation::kAdmit;
  uint64_t window_id = 0;
  uint64_t window_version = 0;    // the state this plan was made from
  WindowPolicy policy;            // the policy it was made under, for the record (describe()); apply()
                                  // reads neither it nor the window's: each step carries what it decided
  std::vector<PlanStep> steps;    // in the order apply() executes them (window order, evictions first)
  std::vector<InstanceId> order;  // the window's instances after the plan, in order
  // Non-empty: apply() will refuse this plan with exactly this reason (positions past the model's limit;
  // or capacity: the window's max_bytes, or the engine's KV pool short of the pages the plan needs, as of
  // planning; refused_capacity tells which kind). The totals below are then 0: nothing runs.
  std::string refusal;
  bool refused_capacity = false;    // the refusal is a capacity one (Status out_of_capacity)
  int64_t pool_pages_short = 0;     // a refusal for the KV pool: the pages the plan needs beyond those free as of
                                    // planning (0 for any other plan, refused or not)
  double forward_tokens = 0;        // Σ steps: critical-path token-forwards (prefill, form, recompute)
  double background_tokens = 0;     // Σ steps: token-forwards queued for the background
  double predicted_kl = 0;          // Σ steps: the fidelity model's KL vs a re-prefill after apply
  int64_t bytes_moved = 0;          // Σ steps
  double estimated_seconds = 0;     // Σ steps
  int64_t device_bytes_after = 0;   // KV pages the window holds after apply (estimate: whole pages)
  int64_t window_tokens_after = 0;  // tokens in the window after apply
  // Dynamic-NTK RoPE past its anchor: the window length this plan's forwards run at (runtime::ForwardOptions::
  // rope_window_len; window_tokens_after), so that what it forms carries the base the window after it is read
  // at, as a re-prefill's would; 0 (each forward at its own end) for every other model and window.
  int64_t rope_window = 0;
  bool exact = false;               // every instance's KV equals a re-prefill of the window after apply
  std::vector<InstanceId> cascade;  // recall: dependents re-conditioned, in topological order
  // How reads of the window (logits, generate) attend over its KV on the engine's device: the paged
  // CUDA kernel reading the pool's pages in place, or the fallback taken and why.
  std::string attention;
  // A digest of the fields above but `policy`, set by the plan_*() call that made the plan: apply() refuses a plan
  // whose fields no longer give it (one edited after planning; plan again instead of editing).
  uint64_t seal = 0;

  int64_t count(StepAction action) const;
  // One line per step (the chosen action, its predicted cost and KL, why), for logs and
  // `orbit replay --explain`.
  std::string describe() const;
};

// What apply() did (measured, not estimated).
struct ApplyReport {
  Operation op = Operation::kAdmit;
  double forward_tokens = 0;    // token-forwards apply() computed (the critical path; a heal's are background)
  int64_t background_jobs = 0;  // jobs queued for the background: patch formations, turns' sensitivity measures
  // Of them, the patch formations: each is formed and stored by background work (EngineStats::patches_formed
  // counts those formed; one dropped under max_background_bytes, or found stored already, forms none).
  int64_t patches_formed = 0;
  int64_t patch_hits = 0;  // stored patches (or conditioned KV) reused
  int64_t canonicals_encoded = 0;
  int64_t bytes_moved = 0;
  double seconds = 0;               // wall time of apply()
  int64_t device_bytes = 0;         // KV pages the window holds now
  std::vector<InstanceId> added;    // instances the operation created
  std::vector<InstanceId> removed;  // instances it evicted
};

}  // namespace orbit
