// Window policies: what a window does when the patch it needs is not stored, how patches
// are formed, and how far it trusts a patch formed under another context.
//
// Named presets (parse_policy) are what `orbit replay --policy` and the benchmarks compare:
//
//   default         what a default-constructed WindowPolicy is, and every default (Window, Engine, CLI,
//                   Python): patch:16 with a per-step fidelity budget, `patch:16:kl=<kDefaultKlBudget>`.
//                   First sight is one exact prefill in context (canonical and patch formed in the
//                   background); survivors, recalls and reorders are served by the cheapest action whose
//                   predicted KL keeps the window within the budget (bench/REPORT-agents.md measures it);
//                   idle time heals, and prepares recalls, moves and learned next lists
//                   (`:heal:prep=1:move=8:lists=3`). `default:MOD...` is that spec with each modifier given
//                   (once each) in place of the default's of the same name, or added (`default:through=0`)
//   patch[:M]       form a rank-M patch on a miss (M = 16; "full" = every singular direction; K/V: rank K for
//                   keys, V for values), reuse exact- and orbit-keyed patches, survivors kept as-is (relocation
//                   only); no budget
//   patch:M:exact   as patch:M, but every chunk whose context changed is re-conditioned (lookup, then form)
//                   and orbit patches are not used: with M = full the window equals a re-prefill to float
//                   tolerance (the oracle the tests check)
//   throughput[:kl=X]  for servers, where background compute is not free: the default's KL budget and exact
//                   reuse, but a miss is one prefill in context (no canonical encoded, no patch formed in the
//                   background; stored ones are still used) and idle time does nothing; its total forward
//                   tokens are its critical ones (bench/REPORT-radix.md's frontier); :through=F, :attend=F,
//                   :match=F and :look=F weigh kept instances as for patch (below)
//   reprefill       the ceiling: every instance whose context changed is prefilled again in context;
//                   nothing is reused except a chunk's canonical at position 0 of an empty context
//   prefix          the executing radix-cache baseline: every instance whose context changed is prefilled
//                   again, except where the KV a forward computed behind the identical sequence is stored
//                   (exact reuse, WindowPolicy::reuse_computed: chunks, turns, a generate's query and
//                   answer); nothing else is reused
//   blind           relocate canonicals, never repair (fast, approximate)
//   cacheblend:R    on a miss recompute the top R (0..1) of the chunk's tokens by KV deviation (CacheBlend)
//   firstk:K        on a miss recompute the chunk's first K tokens in context (EPIC)
//
// Every preset defers repairs to the next read (WindowPolicy::defer_repairs); `:eager` after any preset
// makes each edit repair at once instead.
// `:heal[=X]` (patch presets; part of `default`): the window is healed in idle time when its predicted KL is
// at least X (WindowPolicy::heal_when_idle, heal_min_kl);
// `:prep=N` (patch presets; part of `default`): idle time also prepares the recalls of the N chunks
// evicted last (WindowPolicy::prepare_recalls);
// `:move=N` (patch presets; part of `default`): idle time in a window that has reordered also prepares
// moving N of its chunks behind the others (WindowPolicy::prepare_moves).
// `:hinted=N` (patch presets with `:lists=N` or `:move=N`; 2 unless given, 0 = off): once N syncs in a row
// found the agent's own prepared list reaching as far as every learned one, idle time skips the learned
// lists and moves until a sync finds otherwise (WindowPolicy::trust_hints).
// `:through=F` (patch presets; 0.3 in `default`): fresh KV computed behind kept, approximate instances counts
// toward their predicted loss (WindowPolicy::read_through), in the predicted KL a budget chooses repairs by and
// an idle-time heal compares, budget or not.
// `:attend=F` (patch presets; 1 in `default`): a kept instance weighs (in that predicted KL) at least F
// times the share of the last query's attention it received (WindowPolicy::attention_weight).
// `:match=F` (patch presets; 0, off, in `default`): a kept instance weighs (in that predicted KL) at least F
// times its share of the content matches of the window's last tokens (WindowPolicy::content_weight).
// `:look=F` (patch presets; 0, off, in `default`): under a budget, a generate's query forward re-plans the
// window with each kept instance weighing at least F times that query's attention share on it, and is run
// again when that plan repairs (WindowPolicy::read_attention_weight).
// `:lookonly` (off in `default`; needs `:look=F`): that plan re-serves only the kept instances the look weighs
// above their own weight (WindowPolicy::read_attention_raised_only).
// `:check` (patch presets; off in `default`; needs `:heal`): idle-time heals measure the loss the window
// carried and the engine scales its fidelity model by what they find (WindowPolicy::self_check).
// Modifiers appended to patch presets: `:deep` (patch only layers ≥ ℓ₀ chosen from the deficit's energy),
// `:noreuse` (patch presets): turn exact reuse off (WindowPolicy::reuse_computed; for ablations),
// `:stale=D` (accept a patch formed under another context when its divergence is ≤ D instead of forming;
// under a `:kl=X` budget a stale patch is a candidate at any divergence, priced by the fidelity model, and
// `:stale=D` caps its divergence),
// `:kl=X` (a fidelity budget: per step, the window's predicted next-token KL against a re-prefill stays
// ≤ X; the planner picks per instance the cheapest serving action — keep, stored patch (exact, orbit or stale), first-k
// or CacheBlend recompute, form — that keeps the sum within X, by the engine's fidelity model, which
// Engine::calibrate() fits).
#pragma once

#include <cstdint>
#include <string>

namespace orbit {

// What admit/reorder/re-condition do when no usable stored patch exists for (chunk, context).
enum class MissAction {
  kForm,            // one forward of the chunk in context: exact now, and a patch stored for next time
  kBlind,           // the canonical, relocated; no repair
  kReprefill,       // one forward in context, nothing stored (what an engine without orbit does)
  kTokenRecompute,  // CacheBlend: recompute the top `recompute_ratio` of tokens by KV deviation
  kFirstK,          // EPIC: recompute the first `first_k` tokens in context
};
const char* miss_action_name(MissAction action) noexcept;

// What happens to instances whose context changed because something before them was evicted, slid out
// or inserted (survivors).
enum class SurvivorAction {
  kKeep,         // relocation only (docs/ARCHITECTURE.md §4: near-lossless; keeps the removed chunk's influence)
  kRecondition,  // look up a patch for the new context, else the miss action
};

// A patch formed under a different context than the one at hand.
enum class StalePatch {
  kRebuild,  // without a KL budget, never use it: treat as a miss (a budget weighs the closest one's loss)
  kAccept,   // use the closest one when its divergence (below) is ≤ max_divergence
};

// The default policy's per-step KL budget (nats, the fidelity model's prediction). Chosen on the agent
// traces: the fidelity model over-predicts an unrepaired window's KL (replay reports by how much), so a
// budget above the 1e-3 measured-KL target keeps the measured KL near it at far lower cost.
inline constexpr double kDefaultKlBudget = 0.003;

struct WindowPolicy {
  // Read as written without a kl_budget. Under one (kl_budget > 0), every serving action is a candidate and the
  // budget picks: on_miss says only whether a miss forms a patch (form) or prefills (reprefill), and a survivor is
  // kept while the budget holds; on_miss blind, token_recompute or first_k and survivors recondition are refused
  // there (validate_policy), as every field the strategy never reads is.
  MissAction on_miss = MissAction::kForm;
  SurvivorAction survivors = SurvivorAction::kKeep;
  StalePatch stale = StalePatch::kRebuild;
  // Divergence of a stored patch's context from the current one: 1 − |A ∩ B| / |A ∪ B| over the two
  // antecedent multisets of content keys, weighted by tokens (0 = same set, 1 = disjoint).
  double max_divergence = 0.25;
  int64_t rank_k = 16;     // patch rank for keys; -1 = full rank (min(n, D))
  int64_t rank_v = 16;     // patch rank for values; -1 = full rank
  bool deep_only = false;  // patch only layers ≥ ℓ₀ holding `deep_energy` of the deficit
  double deep_energy = 0.9;
  bool reuse_stored = true;        // look up stored patches at all (false: the reprefill baseline)
  bool use_orbit_patches = true;   // accept a patch keyed by the antecedent *set* (reorders)
  bool cascade_on_recall = true;   // a recall re-conditions the instances the dependency graph names
  bool store_conditioned = false;  // store whole conditioned KV under its exact content context, not a patch
  // Exact reuse (docs/ARCHITECTURE.md §4): the KV every forward computes for an instance (a chunk's form or
  // prefill, a live turn, a generate's query and answer) is stored under (its content key, the KV states of
  // everything before it), in the store's tiers under their budgets; a plan serves an instance whose
  // preceding window has exactly those states again from the store: no forward and the same KV, so no new
  // error. A turn that appends what generate() produced reuses the decode's KV. On in the default policy,
  // the patch presets (`:noreuse` turns it off) and `prefix` (which serves only this way); off in the
  // other baselines (reprefill, blind, cacheblend, firstk), which model engines without it.
  bool reuse_computed = true;
  // Let the engine's cost model (Engine::calibrate) choose, per chunk, between applying a stored patch,
  // forming one and plain recompute, by estimated seconds over this use and `expected_reuse` more.
  bool cost_aware = false;
  double expected_reuse = 1.0;
  // > 0: a per-step fidelity budget (the `:kl=X` modifier): every operation plans the cheapest mix of
  // serving actions whose predicted KL (the window's, summed over instances) is ≤ kl_budget, then still
  // takes any upgrade that removes KL at a better rate than kl_budget per one-token forward (a stored patch
  // that costs a microsecond more than blind reuse). The default policy has one; every named preset but
  // `default` starts from 0 (no budget) unless it says `:kl=X`.
  double kl_budget = kDefaultKlBudget;
  // Defer repairs to the next read: an edit (evict, slide, reorder, place) relocates the survivors it
  // would re-serve and marks them deferred (InstanceInfo::deferred) instead of forwarding anything; the
  // next operation that forwards tokens (admit, add_turn, recall, re-condition, flush) or reads the window
  // (logits, generate, disposable) re-plans them first, on the window as it is then. Several edits in a
  // row cost what their combined effect costs, and work on an instance evicted before the next read is
  // never done: what a request-driven engine (one prefill per model call) gets for free. On for every
  // preset; the `:eager` modifier turns it off (every edit repairs at once, as the edit's own cost).
  bool defer_repairs = true;
  // Heal in idle time (the `:heal` modifier; on in the default policy). Where an agent waits (a tool runs,
  // the user types), Window::heal() prefills the window again from its first approximate instance: what an
  // operation's budget let it approximate lasts until the next idle period only, and the patches formed on
  // the way are stored for the contexts the window holds now. Its forwards are background work (off the
  // critical path). The policy says the window wants it; the agent's loop, which knows when it waits,
  // calls heal(). orbit::replay does after every generate step (a model call: the agent then runs the
  // tool the model asked for) and counts it in the step's background work.
  bool heal_when_idle = true;
  // ... but only when the window's predicted KL (what its approximate instances carry, by the fidelity
  // model) is at least this: a window that lost next to nothing is not prefilled again for it. 0 = heal
  // whenever an instance is not exact. The `:heal=X` modifier sets it; `:heal` keeps this default. What a
  // heal keeps does not count (a dynamic-NTK model's shortfall of exact content formed at a shorter window:
  // IdleReport::heal_planned).
  double heal_min_kl = kDefaultKlBudget / 10;
  // Self-check (`:check`; needs heal_when_idle): a heal in idle time reads a short probe (the window's last
  // token ids again) before and after, and the KL between the two is the loss the window carried; the
  // engine keeps a correction of its fidelity model from measured / predicted (planner::FidelityCorrection:
  // the largest of the last 8 checks, never below 1) and every later plan of the engine predicts that much
  // more. A window that is not exact but predicted below heal_min_kl is checked (so healed) on every 4th idle
  // call. The probe's forwards are background work. Off by default. Where the model predicts too little it
  // helps: on the Python tool loop (bindings/python/examples/tool_loop.py as it was before it prepared its
  // next list, Window::prepare_sync; seeds 4-7, not looked at while choosing the correction) 80 of 96 steps kept within
  // the budget against 44 without it, at 0.64x the prefix cache's forward tokens against 0.36x. Where the model
  // predicts too much it costs tokens for nothing: on generated agent traces of seeds 301-302 (bench/replay/heldout.py)
  // it kept 395 of 409 probed steps within the budget against 397 of 411 without, at 0.346x the radix cache's critical
  // tokens against 0.330x (the fan-out traces 0.31 -> 0.40 and 0.34 -> 0.44). A plan made more careful by it can also
  // forward more than a radix cache on a read.
  bool self_check = false;
  // In idle time (Window::idle), prepare the recalls of this many most recently evicted chunks
  // (Window::prepare_recalls: each chunk's patch formed behind the window as it is; the `:prep=N`
  // modifier, on in the default policy): a recall to the tail then costs no forward on the critical path.
  int64_t prepare_recalls = 1;
  // In idle time, prepare moving this many chunks behind the window's other chunks (Window::prepare_moves;
  // the `:move=N` modifier, on in the default policy), but only in a window that has reordered before: an
  // agent that attends by moving a chunk last (the frame a question is about, a page looked at again) then
  // pays no forward on the critical path for the moved chunk, and a window that never reorders spends no
  // idle time on it. A window synced to message lists prepares its moves as lists instead, once the agent
  // has moved a message to the end: each of the N newest messages of a class seen moving, moved to the end
  // of the last list and of each learned trimmed list (up to N * (1 + prepare_lists) lists).
  int64_t prepare_moves = 8;
  // In idle time, prepare up to this many lists the next sync may start with, learned from the lists the
  // window was synced to (Window::idle; the `:lists=N` modifier, on in the default policy): the last list
  // with the messages the agent dropped before dropped again (the oldest turn past a length, the oldest
  // screenshot for a new one), each synced exactly in a throwaway fork as Window::prepare_sync does with a
  // hint. A trim from the front then costs the next sync neither the prefix cache's re-prefill nor a kept
  // instance's loss. Needs exact reuse (reuse_computed); a window never synced to a list does nothing.
  // Each sync scores the lists (and moves) learned before it: once they missed the last syncs (after a new
  // pattern's first miss, or two misses in a new window, with no hit among the last 8 scored) idle time
  // prepares none (IdleReport::predictions_missed) until the agent shows a new pattern or a sync they would
  // have served: an edit made once, such as a summary in place of the oldest messages, is not prepared again
  // at every step.
  int64_t prepare_lists = 3;
  // Trust the agent's own hints (the `:hinted=N` modifier; 2 in every patch preset that prepares lists or
  // moves; 0 = never): once this many syncs in a row each found a list the agent prepared itself since the
  // sync before (Window::prepare_sync) reaching at least as far into the synced list (in messages from the
  // start) as every list idle time learned to prepare (prepare_lists, and the moves of prepare_moves) and as
  // the list before it, Window::idle prepares no learned lists or moves until a sync finds otherwise (no
  // hint, or a learned list that would have reached further: the next idle call prepares them again). The
  // learned lists only ever save what a hint did not prepare: while it skips them, each hint's prepare_sync
  // also prepares the learned lists and moves that are the hint and one message more (only that message
  // forwarded: the next message's head, which a sync reuses token by token), and such a list does not count
  // against the hint. With the tool loop's hint (bindings/python/examples/tool_loop.py, seed 0) the rest cost
  // 30,085 idle tokens to save none (959 critical either way). On the loop's held-out seeds 16-31 and 100-111
  // with its hint, 2 against 0 (never trust) spent 83% and 84% fewer idle tokens for 0.7% more critical ones
  // (14297 against 14203, 9812 against 9739; 5.8% and 5.6% before the hint was prepared one message further),
  // every step within the budget either way; without a hint it changes nothing.
  // Checked at each sync against what idle time would have prepared (list edits only, nothing computed).
  // Applies to a window synced to message lists; a window edited instance by instance, and the moves of a
  // window never synced, prepare as before.
  int64_t trust_hints = 2;
  // What fresh KV reads of approximate KV (the `:through=F` modifier; planner::add_read_through): an
  // instance forwarded now behind kept, approximate instances (a new turn at the tail) is computed over their
  // error, so each fresh instance passes this share of its recency weight on to what precedes it, the nearest
  // most, and a kept instance's predicted loss counts it: under a budget in the choice of repairs, and under
  // every policy in the predicted KL that decides an idle-time heal (heal_min_kl). 0 prices kept instances by the
  // query's own reading only. On the Python tool loop without hints (bindings/python/examples/tool_loop.py,
  // anticipate=False; seeds 100-111, not used to choose it) 0.3 kept 275 of 288 steps within the budget at
  // 0.30x the prefix cache's forward tokens, 0 kept 265 at 0.27x; on the shipped replay traces it cost 0.415x
  // the radix cache's critical tokens against 0.384x.
  double read_through = 0.3;
  // What the last query looked at (the `:attend=F` modifier): a kept instance's weight in the fidelity model
  // (under a budget in the choice of repairs; under every policy in the predicted KL that decides a heal) is
  // at least F times the share of the last generate's attention it received
  // (InstanceInfo::attention), wherever it sits. The recency weight alone assumes the next query reads what
  // is near it; an agent's question that refers back to a tool result far up the window reads that result,
  // and its loss there was under-predicted 1000-fold. 0 = recency alone.
  double attention_weight = 1.0;
  // What the window's tail reads by content (the `:match=F` modifier; 0, off, in the default policy): a kept
  // instance's weight in the fidelity model (as attention_weight's) is at least F times its share of the
  // window's last tokens' content matches (planner::content_shares: each token bigram of the last 32
  // positions that occurred earlier points at its earlier occurrences, a rare one most). The last query's
  // attention misses a far-back instance the next read refers to when the last query did not read it.
  // In [0, 1e6]; 0 = off.
  double content_weight = 0.0;
  // What the read itself looks at (the `:look=F` modifier; 0, off, in the default policy): a generate's first
  // forward of its query (after the repairs earlier edits deferred; it returns key_attention) re-plans the
  // window with each kept instance's weight at least F times that forward's attention share on it. When the
  // plan re-serves nothing, that forward is the answer's, at no extra cost; when it repairs, the repairs run
  // and the query is forwarded again over the repaired window, both forwards counted in the read's
  // prompt_forward_tokens (so query_forward_tokens; the radix cache's side does not look). generate_n looks
  // once before it forks, with a forward of its own. The last query's attention (attention_weight) misses a
  // far-back instance the next query reads when the last one did not. In [0, 1e6]; 0 = off.
  double read_attention_weight = 0.0;
  // With read_attention_weight (the `:lookonly` modifier; off in the default policy): the read's plan may
  // re-serve only the kept instances whose look weight (F times the query's share on them) is above the
  // weight they carry without it (recency, or the last query's attention); every other kept instance stays
  // kept, priced as before. The look then repairs what it found, not what the budget would have taken
  // anyway. A repair an earlier edit deferred is not held back.
  bool read_attention_raised_only = false;
  double recompute_ratio = 0.15;  // kTokenRecompute
  int64_t first_k = 16;           // kFirstK

  // The preset in canonical spec form ("patch:16", "patch:32/8", "reprefill", ...), for reports:
  // parse_policy(spec).name() parses back to an equal policy. Fields set apart from a spec that no modifier
  // spells (survivors on a patch preset without `:exact`, reuse_stored, a kl_budget on `blind`, ...) are not in
  // it (Python's repr adds them as keywords). `:lists=N` is left out without reuse_computed, where it has no
  // effect (and parse_policy refuses it).
  std::string name() const;
};

// Refuses a policy with a field that its strategy never reads: a field left at its default (a
// default-constructed WindowPolicy's value) is always accepted; one set to another value must apply.
// Throws orbit::Error naming the field, its value and the policy (name()), and what it applies to:
//   first_k          on_miss kFirstK (firstk:K), or any policy with a kl_budget (the budget's first-k action)
//   recompute_ratio  on_miss kTokenRecompute (cacheblend:R), or any policy with a kl_budget (CacheBlend)
//   deep_energy      deep_only
//   stale = kAccept  reuse_stored without store_conditioned (stored patches are looked up)
//   max_divergence   stale = kAccept
//   heal_min_kl      heal_when_idle
//   self_check       heal_when_idle (the check rides on the idle-time heal)
//   prepare_lists    reuse_computed (a prepared list is read back by exact reuse)
//   trust_hints      prepare_moves above 0, or prepare_lists with reuse_computed (what it skips)
//   cost_aware       no kl_budget, and a miss that forms (kForm) or stored patches looked up
//   expected_reuse   cost_aware
//   read_attention_weight (above 0)  any policy with a kl_budget
//   read_attention_raised_only       read_attention_weight above 0
// Every other field is read under every strategy: rank_k, rank_v and deep_only shape the patches a
// window forms, and every window forms some (Window::prepare_recalls and prepare_moves under any policy,
// heal() under any but prefix and throughput, which prefill); read_through, attention_weight and content_weight weigh
// the predicted KL of every plan (InstanceInfo::predicted_kl, what heal_min_kl compares); use_orbit_patches
// is read by place() under any policy. parse_policy, Python's Policy() and replace(),
// Engine::new_window and Window::set_policy call it. It also refuses a number field outside the range the spec
// parser and Python's setters use (kl_budget >= 0, read_through in [0, 1], a rank positive or -1 for full, NaN
// anywhere, ...), naming the field.
void validate_policy(const WindowPolicy& policy);

// Parses a preset spec (see the list at the top). Throws orbit::Error quoting the spec and listing the
// valid forms; a modifier the preset does not read (`:check` without `:heal`, `:lists=N` with `:noreuse`) is
// refused too (validate_policy).
WindowPolicy parse_policy(const std::string& spec);
std::string policy_spec_help();

}  // namespace orbit
