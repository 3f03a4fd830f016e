// Planning and applying window operations (window.h). Every public plan_* builds a Layout — the
// window's instances after the operation, in order, plus what leaves — and plan_layout() turns it into
// a Plan by choosing, per instance, the serving action (actions.h) that makes its KV:
//
//   context unchanged (same antecedents, same content versions)        keep (rotation only)
//   policy without a KL budget: new chunk, or context changed and (reorder | cascade | re-condition):
//       empty context                        canonical (exact)
//       stored patch: exact key → orbit key → (policy) stale patch     stored-patch, zero forwards
//       else the policy's miss action        form / prefill / blind / first-k / cacheblend
//     context changed, survivors kept        keep (approximate: relocation only)
//   policy with a KL budget (`:kl=X`): every applicable action is priced (cost model) and its loss
//     predicted (fidelity model); each instance starts at its cheapest, and the instance whose upgrade
//     buys the most KL per second is upgraded until the window's predicted KL fits the budget
//
// apply_plan() executes a Plan transactionally from the plan alone: new KV is built in fresh pages, and
// the window is swapped only when everything fit.
#pragma once

#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/planner/prefix_ledger.h"
#include "orbit/store.h"
#include "plan/plan_env.h"
#include "window/window_state.h"

namespace orbit {
class Window;
}  // namespace orbit

namespace orbit::detail {

// plan_layout(snapshot(state), layout, EnginePlanEnv(*state.core)) (plan_env.h).
Plan plan_layout(const WindowState& state, const Layout& layout);
// background: idle-time work (a heal, a prepared recall): its forwards and time count as background, not
// critical (a kHeal plan always does).
Result<ApplyReport> apply_plan(WindowState& state, const Plan& plan, bool background = false);
// What a prefix cache forwards to hold the window as it is now (the engine's planner::PrefixLedger: the
// tokens from the first instance whose prefix it has not held), added to WindowState::prefix_cache_tokens
// and returned. apply_plan counts it after every critical-path operation but an edit (passing the
// prefixes it hashed on the way: `prefixes`, in window order); generate, before the model call.
double charge_prefix_cache(WindowState& state, const std::vector<planner::PrefixSpan>* prefixes = nullptr);
// A model call that decodes on the window (generate, disposable), once it answered: both sides of the radix
// comparison. Through the engine's radix yardstick (EngineCore::radix_read): the window's token ids, the query,
// then what was generated; the prompt tokens it forwards go to WindowState::radix_cache_tokens. And the query
// tokens the call forwarded (`query_forwarded`) to WindowState::query_forward_tokens. Both to the engine's
// counters, in one count.
void charge_radix_cache(WindowState& state, const std::vector<int64_t>& query, const std::vector<int64_t>& generated,
                        int64_t query_forwarded);
// A Window::logits() call's query forward (`tokens`), to WindowState::logits_forward_tokens and the engine's.
void charge_logits_read(WindowState& state, int64_t tokens);
// The instances `plan` serves again (any action but a keep).
inline int64_t served_again(const Plan& plan) {
  int64_t n = 0;
  for (const PlanStep& s : plan.steps) n += s.action != StepAction::kKeep ? 1 : 0;
  return n;
}
// The first entry plan_heal re-forms (entries.size() when none): the first that was formed approximately or
// whose context changed since (every one after it is re-formed too, its context then being re-formed). The
// entries before it are kept as they are, with whatever they carry (a dynamic-NTK shortfall: EntryMeta::
// shortfall_kl).
std::size_t heal_from(const WindowState& state);
// The report of an apply the caller expects to succeed; throws orbit::Error with the refusal's reason.
inline ApplyReport must(Result<ApplyReport> r) {
  ORBIT_CHECK(r.is_ok(), r.status().reason());
  return std::move(r).value();
}
// The window's entries as they stand, each its own slot, for an operation of kind `op` to edit (the plan_*
// builders, the read's look).
Layout current_layout(const WindowState& s, Operation op);
// The window as it is, re-planned: the repairs earlier edits deferred (WindowPolicy::defer_repairs).
Plan plan_flush(const WindowState& state);
// Runs them when there are any (a read does, first); throws naming `what` when they cannot run, leaving the
// window as it was: orbit::CapacityRefused when the pool or the window's max_bytes has no room for them (as
// Window::sync does), orbit::Error otherwise.
void run_deferred(WindowState& state, const char* what);
// The read's own look (WindowPolicy::read_attention_weight). looks_before_read: the window's policy asks for
// it (above 0, under a kl_budget) and the window holds something. replan_for_read: each entry's share of the
// read's query attention (`shares`, attention_by_entry; may be empty) becomes its EntryMeta::read_attention
// for one re-plan of the window as it is (a flush), applied when it serves anything again or repairs were
// deferred; true when the applied plan changed the window's cached rows (some entry's KV state or length:
// a plan that re-serves an instance with the KV it holds changes none); the shares are cleared before the
// plan is applied (they weigh this plan only); throws orbit::Error naming `what` when the repairs cannot
// run. A decode looks with its query's own first forward (decode_batch.cpp) and forwards the query again
// only when the rows it read changed.
// plan_read (generate_n, before it forks): without the look it is run_deferred; with it, `query` is forwarded
// over the window as it stands (key_attention; a forward of its own, its rows not kept) and the window
// re-planned by replan_for_read. Returns the look's query tokens (0: none), which the caller counts with the
// read's own (Generation::prompt_forward_tokens, so query_forward_tokens).
bool looks_before_read(const WindowState& state);
bool replan_for_read(WindowState& state, const std::vector<double>& shares, const char* what);
int64_t plan_read(WindowState& state, const std::vector<int64_t>& query, const char* what);
// Each entry's share of a forward's key attention (runtime::ForwardResult::key_attention, the window's tokens
// first), in window order; empty when `mass` is undefined or shorter than the window.
std::vector<double> attention_by_entry(const WindowState& state, const at::Tensor& mass);
// The policy of idle-time preparation forks (Window::prepare_sync, learned drops): the executing radix
// baseline's (`prefix`: every instance whose context changed is prefilled again, the KV of each forward
// stored for exact reuse), repairing at once, so that what it computes is the exact KV of the prepared
// window, stored under its own chains.
WindowPolicy anticipation_policy();
// Whether the agent's hints are trusted (WindowPolicy::trust_hints): a window synced to lists, under a policy that
// prepares learned lists or moves, whose HintWatch streak reached trust_hints. Window::idle then prepares none.
bool hints_trusted(const WindowState& state);
// While the hints are trusted, after Window::prepare_sync prepared the agent's hint `hint` (with `options`): the
// learned lists and moves idle time would prepare (ListMemory::predict, predict_moves) that are the hint and one
// message more (list_memory.h's one_past(): a message moved to the end of the trimmed list), each prepared as
// prepare_sync prepares a list. The hint's KV serves their start, so only that message is forwarded; what the
// next sync reads of it is its head, which the message that comes next shares (the role, a tool result's
// label) and no hint holds. Counted into `out` (lists_prepared, moves_prepared, instances and
// tokens). Nothing when the hints are not trusted (idle time prepares every learned list then).
void prepare_past_hint(Window& w, WindowState& state, const std::vector<ChatMessage>& hint, const SyncOptions& options,
                       IdleReport& out);

// The tentative tail (WindowState::tail). keep_tail: after a generate on `state`, records the read's query
// followed by its answer (or the query alone) as the tail, when keep_read_for_reuse stored that sequence
// behind the window's states; else clears it. carry_tail: after an operation moved the window's KV states
// from `before` to new ones without changing its content (a heal), forwards the tail's tokens behind the
// window as it is now and stores them for exact reuse under its new chain, so the next sync or append
// reuses them as it would have before. When the window's answers come back as turns of their own
// (WindowState::answers_return_as_turns), such a turn is then served by exact reuse and never prefilled, so the
// carry also measures the tail's sensitivity as that turn, as a prefill-turn would (once per content, under a
// KL budget that forms patches: one more forward of its tokens alone). Background work (idle time): counted in
// the window's and engine's forward tokens, never the critical path. Returns the tokens forwarded (0: no tail behind
// `before`, no exact reuse, the window's answers do not come back, or past the model's positions, in which case the
// tail is dropped). settle_tail: after an operation that added content, records whether the tail came back
// (an entry's tokens start with it: WindowState::answers_return; a turn's are exactly its tokens:
// answers_return_as_turns) and drops it.
void keep_tail(WindowState& state, const std::vector<int64_t>& query, const std::vector<int64_t>& answer);
double carry_tail(WindowState& state, const KvState& before);
void settle_tail(WindowState& state);

// The fidelity self-check (Window::idle). The logits of every row of `probe` (vocabulary ids) read after
// the window's KV as it holds it, at the positions right after the window; nothing is stored or counted
// (the caller counts its probe.size() forwards as background). No deferred repair is run first.
Logits probe_logits(const WindowState& state, const std::vector<int64_t>& probe);
// Mean over rows of KL(softmax(exact) ‖ softmax(approx)), nats, float64 (runtime::mean_kl).
double probe_kl(const Logits& exact, const Logits& approx);

}  // namespace orbit::detail
