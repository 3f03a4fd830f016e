// Window: an ordered set of chunk instances plus live turns (docs/ARCHITECTURE.md §1, §3), bound to one Engine.
//
//   window    [ turn "sys" | chunk A | chunk B | turn "user: ..." | chunk C ]   positions follow the order
//   instance  one placement of a chunk (or one live turn); ids are unique per engine
//
// Every operation is planned, then applied:
//
//   Plan p = window.plan_admit(chunk);   // const: what would happen, what it costs, exact or not
//   window.apply(p);                      // does it; a Status says why when it could not (nothing changed)
//
// or in one call: window.admit(chunk) (plan + apply). Operations:
//
//   admit(B[, at])      place B at the tail (or before instance `at`): relocate its canonical, apply a
//                       stored patch for (B, context) if one exists, else follow policy().on_miss
//   add_turn(tokens)    a live turn (user/tool text that will not be reused): prefilled in context
//   evict(i) / slide(n) drop an instance / the n oldest chunk instances; survivors are relocated and, by
//                       policy, kept as-is or re-conditioned
//   recall(B[, at])     re-admit an evicted chunk: canonical from the store (any tier), a fresh patch on
//                       its current earlier context; re-conditions the dependents the graph names
//   reorder(order)      a permutation of the instances; patches looked up by exact and orbit keys
//   place()             reorder into the order the planner finds cheapest (stored-patch hits)
//   fork()              a copy-on-write child: shares pages and patches; writes go to private pages. The
//                       child's instances keep their parent's ids (the same placements, shared).
//   sync(messages)      the window brought to the chat-template rendering of a message list (orbit/sync.h):
//                       the edits since the last sync become evictions, a reorder, recalls, admits, turns
//   prepare_sync(list)  in idle time, the list the agent expects to sync next computed exactly in a
//                       throwaway fork, its KV stored for exact reuse (the window is not changed)
//   flush()             under a deferring policy (WindowPolicy::defer_repairs), run the repairs earlier
//                       edits left for the next read now; reads and forwarding operations do it first
//
// Reading the window: logits(query), generate(query, options), disposable(instance, query) (decode with that
// instance's patch switched off). A read is const in that the window's contents, order and version stay; its
// KV and the engine's store may still change:
//   - under a deferring policy a read first runs the repairs earlier edits deferred (as flush() would): the
//     window's KV becomes what the policy makes of it, and the work counts in stats() and the engine's
//     critical-path counters like an operation's; without room for them (the pool, the window's max_bytes) the
//     read throws orbit::CapacityRefused (orbit/capacity.h), as sync does, the window unchanged;
//   - under exact reuse (WindowPolicy::reuse_computed) generate stores the KV its forwards computed behind the
//     window (the query, and the query + answer with one more decode step for the answer's last token), so a
//     later sync that appends the same turn, or the same question and answer, forwards nothing for them.
// logits, disposable, loss_by_instance and reference_logits store nothing.
//
// Thread-safety: a Window is single-threaded (one thread at a time, const reads included: a read may run
// deferred repairs; it is not locked). Different windows of one Engine may be used from different threads.
// A Window keeps its Engine alive.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "orbit/chunk.h"
#include "orbit/constraint.h"
#include "orbit/errors.h"
#include "orbit/generate.h"
#include "orbit/plan.h"
#include "orbit/policy.h"
#include "orbit/sync.h"

namespace orbit {

class Engine;
namespace detail {
class EngineCore;
struct WindowState;
}  // namespace detail

struct WindowOptions {
  WindowPolicy policy;
  // Most KV bytes (whole pages) this window may hold; operations that would exceed it are refused
  // (Status out_of_capacity with the numbers). 0 = limited only by the engine's pool.
  int64_t max_bytes = 0;
  std::string label;
};

// One instance as the window holds it.
struct InstanceInfo {
  InstanceId id = 0;
  ChunkRef chunk;
  bool is_turn = false;
  std::vector<int64_t> turn_tokens;          // for turns
  int64_t position = 0;                      // first position
  int64_t length = 0;                        // tokens
  StepAction formed_by = StepAction::kKeep;  // how its current KV was made
  PatchMatch match = PatchMatch::kNone;
  bool exact = false;            // its KV equals a re-prefill of the current window (as far as tracked)
  bool context_changed = false;  // kept as-is although its context changed since it was formed
  bool deferred = false;         // its repair waits for the next read or forwarding operation
                                 // (WindowPolicy::defer_repairs); flush() runs it now
  std::string patch_key;
  // The share of the last generate's attention on it: its first forward's last token (the query's end),
  // averaged over heads and layers, summed over the instance's tokens; -1 before a generate read it (and
  // where the forward cannot collect it: runtime::ForwardResult::key_attention). The window's shares and
  // the query's own sum to 1.
  double attention = -1;
};

// An instance's KV as stored (content channel, keys before RoPE), copied out: per layer, row-major
// k [length, k_shape...] and v [length, v_shape...] (GQA: [n, H_kv, d] both; MLA: k_pe [n, 1, d_rope],
// c_KV [n, 1, r_kv]).
struct InstanceKV {
  int64_t length = 0;
  std::vector<int64_t> k_shape;  // per token
  std::vector<int64_t> v_shape;
  std::vector<std::vector<float>> k;  // [layer][length · Π k_shape]
  std::vector<std::vector<float>> v;
  std::vector<int32_t> pages;  // the pool pages holding it (shared pages are shared by forks)
};

struct DisposabilityReport {
  InstanceId instance = 0;
  bool disposable = false;              // the greedy answer is the same without its conditioning
  std::vector<int64_t> answer;          // greedy decode with the window as it is
  std::vector<int64_t> answer_without;  // ... with the instance's KV replaced by its canonical
  double kl_first = 0;                  // KL(as-is ‖ without) of the first answer token's distribution
};

// One instance's share of a window's fidelity loss (Window::loss_by_instance): the next-token KL after the
// query's tokens (the mean over its rows), against a re-prefill, when this instance alone is served as the
// window holds it and every other instance exactly. The losses of several instances need not add up to the window's
// (they interact), but each says what that instance's approximation costs on its own, beside what the planner
// predicted.
struct InstanceLoss {
  InstanceId instance = 0;
  std::string label;  // the chunk's label, or "turn"
  int64_t position = 0;
  int64_t length = 0;
  StepAction formed_by = StepAction::kKeep;  // how its KV was made (InstanceInfo::formed_by)
  PatchMatch match = PatchMatch::kNone;
  bool context_changed = false;  // kept as-is over a change of its context since
  double kv_change = 0;          // ‖held − exact‖ / ‖exact‖ over its KV rows, every layer, keys and values
  double measured_kl = 0;        // KL(re-prefill ‖ this instance alone approximate), nats, mean over rows
  double predicted_kl = 0;       // what the fidelity model predicts it carries (PlanStep::predicted_kl)
};

struct WindowStats {
  int64_t instances = 0;
  int64_t chunk_instances = 0;
  int64_t turns = 0;
  int64_t tokens = 0;
  int64_t device_bytes = 0;  // KV pages held (shared pages counted in every window holding them)
  int64_t shared_pages = 0;  // pages shared with another window (forks)
  // Host bytes of the window's KV kept as one contiguous past between reads (EngineOptions::window_past; 0 when
  // off, on a CUDA engine, or before a read); buffers a fork shares with its parent are counted in both.
  int64_t past_bytes = 0;
  int64_t evicted = 0;  // chunk instances evicted and recallable (the 1,024 most recent at most)
  // Σ over applied operations (the plans apply() serves, heals and idle-time preparation included), and the
  // canonical disposable() encodes when its instance's is not stored (EngineStats counts that encode too). The
  // reads' query forwards are apart from it: query_forward_tokens and logits_forward_tokens below.
  double forward_tokens = 0;
  // Of which on the critical path: what the agent waited for (heals and idle-time preparation excluded;
  // disposable's canonical encode included, as in EngineStats::critical_forward_tokens).
  double critical_forward_tokens = 0;
  // The query forwards of this window's model calls that decode (generate's prompt forward,
  // Generation::prompt_forward_tokens; disposable's query twice) and of its logits() calls, on the critical
  // path, as EngineStats counts them. critical_forward_tokens + query_forward_tokens is what the agent's
  // reads cost orbit: compare it with radix_cache_tokens below (logits() calls are in neither).
  double query_forward_tokens = 0;
  double logits_forward_tokens = 0;
  // What a prefix cache (vLLM's, SGLang's: KV reused only behind a prefix computed before) would have
  // forwarded for the same operations, counted where this window's reads would run it: at every operation
  // that leaves no repair deferred, the tokens from its first instance whose prefix the engine has not
  // held to the end (planner/prefix_ledger.h; the engine's prefixes, so a fork's shared ones are free).
  // critical_forward_tokens / prefix_cache_tokens is what this window saves against one: what
  // `orbit replay` reports against its prefix baseline, live, in the agent itself.
  double prefix_cache_tokens = 0;
  // The strongest yardstick (planner/prefix_cache.h): what SGLang's radix cache, token granular, holding
  // every call's window, query and generated tokens in the KV memory the engine's pool has, would forward
  // for this window's model calls that decode (generate, disposable; logits() probes are not counted): the
  // prompt tokens after the longest prefix it holds, the query's included. Engine-wide like the cache it
  // models, so one window's calls warm it for another's. Compare with critical_forward_tokens +
  // query_forward_tokens.
  double radix_cache_tokens = 0;
  int64_t operations = 0;
};

// What Window::idle() (or heal / prepare_recalls) did with the caller's idle time; all of it background work.
struct IdleReport {
  double predicted_kl = 0;  // the window's predicted KL before
  // Window::idle planned a heal (plan_heal): the predicted KL of the instances it would re-form (the first formed
  // approximately or over a changed context, and every one after it) was at least WindowPolicy::heal_min_kl, or
  // the sampled self-check chose the window. Not when what passes the threshold is only what the heal keeps (a
  // dynamic-NTK shortfall of content formed exactly at a shorter window).
  bool heal_planned = false;
  int64_t healed_instances = 0;    // instances heal() served again
  double heal_forward_tokens = 0;  // the heal's forwards, the tentative tail carried behind it included
  // Window::idle: why the heal the window needed did not run, or "": the KV pool had no room for the healed
  // KV beside the approximate KV it replaces (the window is left as it was; evict, slide or close windows).
  std::string heal_refused;
  // The fidelity self-check that rides on the heal (Window::idle): the KL of a probe (the window's last
  // tokens read again) on the approximate window against the same probe on the healed, exact one. -1 when
  // no check ran. Its two probe forwards are check_forward_tokens.
  bool checked = false;
  double measured_kl = -1;
  double check_forward_tokens = 0;
  // The engine's correction of its fidelity model after this call (EngineStats::fidelity_correction).
  double fidelity_correction = 1;
  int64_t recalls_prepared = 0;  // evicted chunks whose patch for a recall at the tail was formed
  // Chunks whose patch for a move behind the window's last chunk was formed; in a window synced to message
  // lists, learned lists with a message moved to the end prepared (ListMemory's move candidates).
  int64_t moves_prepared = 0;
  int64_t instances_prepared = 0;     // instances prepare_sync forwarded (their KV stored for exact reuse)
  int64_t lists_prepared = 0;         // learned next lists (or eviction sets) prepared (prepare_lists)
  double prepare_forward_tokens = 0;  // recalls, moves and prepare_sync
  // The learned lists and moves of a window synced to lists were not prepared: the agent's own hints reached
  // as far as they would have for WindowPolicy::trust_hints syncs in a row. From prepare_sync: the hint was
  // also prepared one message further (the learned lists and moves that are the hint and one message more).
  bool hints_trusted = false;
  // The learned lists and moves of a window synced to lists were not prepared: those learned from the agent's
  // last edits would not have served its syncs since (a summary made once, say, predicted again at every step;
  // WindowPolicy::prepare_lists says when they are prepared again).
  bool predictions_missed = false;
  double forward_tokens = 0;  // heal + check + prepare
  double seconds = 0;
  bool stopped = false;  // Window::idle(stop) stopped before every preparation was made
};

class Window {
 public:
  // A Window moved from holds nothing: destroy it or assign another to it; any other call on it is undefined.
  Window(Window&&) noexcept;
  Window& operator=(Window&&) noexcept;
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;
  ~Window();

  uint64_t id() const;
  const WindowOptions& options() const;
  const WindowPolicy& policy() const;
  // Later operations follow `policy`. Bumps version(): plans made before are stale (apply throws). Throws
  // orbit::Error for a policy with a field its strategy never reads (validate_policy).
  void set_policy(const WindowPolicy& policy);

  // ---- state ----
  std::vector<InstanceInfo> instances() const;  // in window order
  std::optional<InstanceInfo> instance(InstanceId id) const;
  int64_t tokens() const;
  // The token ids the window holds, in window order: a turn's, a token chunk's, and for an embedding chunk
  // one stand-in id per row, −1 − (int(key[0:8], 16) · 2^20 + row mod 2^20): negative (never a vocabulary
  // id) and naming the content, not a token. What a prefix cache reading the window sees (the engine's
  // WindowStats::radix_cache_tokens yardstick, the trace replay's); tokens() of them.
  std::vector<int64_t> token_ids() const;
  // Chunks recall() accepts: the window's evicted chunks, the 1,024 most recent at most (past that the oldest
  // are forgotten, down to 896; admit() takes such a chunk back as new, its KV found in the store). Under
  // EngineOptions::max_idle_chunks an evicted chunk is one no window holds: it is remembered only while the engine
  // keeps it registered (an eviction counts as a use), so windows' evictions do not hold records past that bound.
  std::vector<ChunkRef> evicted() const;
  WindowStats stats() const;
  uint64_t version() const;  // bumps on every applied operation and on set_policy

  // ---- planning (const) ----
  // `before`: place the chunk before that instance (0 = at the tail). Throws orbit::Error for a chunk of
  // another engine, an unknown instance, or a chunk already in the window.
  Plan plan_admit(const ChunkRef& chunk, InstanceId before = 0) const;
  Plan plan_add_turn(const std::vector<int64_t>& tokens) const;
  Plan plan_evict(InstanceId instance) const;
  Plan plan_slide(int64_t chunks) const;  // evict the `chunks` oldest chunk instances (turns stay)
  Plan plan_recall(const ChunkRef& chunk, InstanceId before = 0) const;
  Plan plan_reorder(const std::vector<InstanceId>& order) const;
  Plan plan_place() const;        // the planner's cheapest order (a reorder plan)
  Plan plan_recondition() const;  // re-condition every instance whose context changed
  // Operation::kFlush: the deferred repairs; every other instance is kept, or reused where the engine stores an
  // exact KV for it in this context (the plan's exactness describes the window after it). flush() and reads run
  // it only while a repair waits; an instance left inexact with none waiting is made exact by heal().
  Plan plan_flush() const;
  // Operation::kHeal: every instance from the first one that is not exact (InstanceInfo::exact) to the end
  // served again exactly (chunks formed in context, their patches stored for it; turns prefilled again),
  // whatever the policy's budget. Keeps everything when the window is exact.
  Plan plan_heal() const;

  // Executes a plan made by this window at its current version, reading only the plan (its actions,
  // ranks, keys and policy). ok, or out_of_capacity (the pool or max_bytes cannot hold the result) /
  // refused (positions past the model's limit) with the numbers — a plan says so beforehand in
  // Plan::refusal, except for a pool that other windows filled since; on failure the window is
  // unchanged. Canonicals and patches the plan forms are queued for the engine's background work
  // (Engine::run_background); apply never waits for background work except a patch it reads that is
  // still being formed. Throws orbit::Error for a plan of another window or version.
  Result<ApplyReport> apply(const Plan& plan);

  // plan + apply in one call; returns the report or throws orbit::Error with the Status's reason.
  ApplyReport admit(const ChunkRef& chunk, InstanceId before = 0);
  ApplyReport add_turn(const std::vector<int64_t>& tokens);
  // Text overloads: the text tokenized by the engine's tokenizer without BOS (a continuation; llama2.c's
  // dummy-prefix space starts it). Throw orbit::Error when the engine has no tokenizer.
  Plan plan_add_turn(std::string_view text) const;
  ApplyReport add_turn(std::string_view text);
  ApplyReport evict(InstanceId instance);
  ApplyReport slide(int64_t chunks);
  ApplyReport recall(const ChunkRef& chunk, InstanceId before = 0);
  ApplyReport reorder(const std::vector<InstanceId>& order);
  ApplyReport place();
  // Runs the deferred repairs (plan_flush + apply); with none waiting it does nothing (no operation, the
  // version stays) and returns an empty report.
  ApplyReport flush();
  // Makes the window exact again (plan_heal + apply) in time the caller would otherwise idle, e.g. while
  // the agent waits on a tool: what earlier operations approximated (kept survivors, stale patches,
  // recomputed tokens, turns prefilled after approximate KV) is re-formed, and the patches formed on the
  // way are stored for the contexts the window holds now, so a later recall or reorder finds them. Its
  // forwards count as background work (EngineStats::background_forward_tokens), not critical. It runs on
  // the calling thread and takes as long as a prefill of the window from its first approximate instance.
  // An exact window is left as it is (no operation, the version stays). Under a policy with
  // heal_when_idle, call it whenever the agent waits.
  ApplyReport heal();
  // Forms, in idle time, the patches recalls at the tail would need: for each of the `max_chunks` chunks
  // evicted most recently (evicted()), one forward of the chunk behind the window as it is now, its patch
  // stored under this context's exact and orbit keys (the window itself is not changed). A recall to the
  // end of the window before anything else changes is then a patch hit, with no forward on the critical
  // path; after small changes the patch is a close stale one a budget can price. A chunk whose patch for
  // this context is stored already costs nothing. Background work; does nothing while repairs are deferred
  // (they change the context: heal() or a read runs them). Chunks the pool has no room for are skipped.
  IdleReport prepare_recalls(int64_t max_chunks);
  // Forms, in idle time, the patches that moving a chunk of the window behind all its other chunks would
  // need (what an agent does to attend to one of them: the frame a question is about, a page looked at
  // again): for up to `max_chunks` chunk instances, nearest the last chunk first, one forward of the chunk
  // in the context such a move gives it (every other instance before it as the window holds them now), its
  // patch stored under that exact context's key (not as the antecedent set's orbit patch, which other
  // orderings would read); the window itself is not changed. That reorder is then served
  // from a stored patch with no forward on the critical path, where it would otherwise keep the chunk over
  // a context it never saw or form it again. A move whose patch is stored already costs nothing; does
  // nothing while repairs are deferred; chunks the pool has no room for are skipped. Background work.
  IdleReport prepare_moves(int64_t max_chunks);
  // Prepares, in idle time, evicting `instances` (what prepare_sync does for a message list, for a window
  // edited instance by instance): in a throwaway fork they are evicted under the executing radix baseline's
  // policy (`prefix`, repairing at once), every instance behind them prefilled exactly and its KV stored
  // for exact reuse (WindowPolicy::reuse_computed), so when this window evicts them (with nothing else
  // changed before the survivors) the survivors are served from that KV: no forward on the critical path and
  // no error. The window itself is not changed. Does nothing under a policy without exact reuse or while
  // repairs are deferred; throws orbit::Error naming an unknown instance or one given twice. Background work.
  IdleReport prepare_evictions(const std::vector<InstanceId>& instances);
  // What the policy asks of idle time, in one call: heal() under heal_when_idle when the predicted KL of the
  // instances it re-forms is at least heal_min_kl (IdleReport::heal_planned), then
  // prepare_recalls(policy().prepare_recalls), then, in a window that has
  // reordered at least once and never synced to a list, prepare_moves(policy().prepare_moves), then, in a
  // window synced to message lists, prepare_sync of up to policy().prepare_lists lists the next sync most
  // likely starts with (and, once the agent moved a message to the end, of the moves of the newest
  // policy().prepare_moves messages of the classes it moved, in the last list and in each of those): the
  // last list with the messages earlier syncs dropped (by role, content kind and age: the oldest turn, the
  // oldest screenshot) dropped again, the most frequent pattern of the last 8 syncs first (no hint needed;
  // a wrong guess costs only idle time; none while the agent's own prepare_sync hints left them nothing to
  // add for policy().trust_hints syncs in a row, IdleReport::hints_trusted); in a window never synced,
  // prepare_evictions of up to as many sets of instances, learned the same way from the instances that left between
  // idle calls. Call it whenever the agent waits (a tool runs, the user types); orbit::replay calls it after every
  // generate step. The heal checks the fidelity model on the way: the logits of a probe (the window's last 8 vocabulary
  // ids read again after it) before and after the heal; their KL is the loss the window carried, measured,
  // and the engine's correction (EngineStats::fidelity_correction) learns measured / predicted from it, so
  // later plans predict more where the model predicted too little. A window below heal_min_kl that is not
  // exact is checked (and so healed) every fourth such idle call, so under-prediction below the threshold is
  // caught too. The probe's two forwards are background work (IdleReport::check_forward_tokens). A heal the
  // KV pool has no room for is skipped, not thrown (IdleReport::heal_refused says why).
  IdleReport idle();
  // The same, stopping early when `stop()` returns true: asked inside the heal at its interruption points
  // (orbit/interrupt.h: before each instance it serves and each layer of their forwards and of the self-check's
  // first probe; a heal stopped there commits nothing, so the window is exactly as it was, nothing healed or
  // counted, and the call returns without preparing anything), then before the recalls and the moves, and before
  // each learned list or set of evictions, so a server hands the model back to a request that arrived meanwhile
  // within a layer of the heal or after the preparation under way (what was prepared stays; IdleReport::stopped
  // says it stopped). An empty `stop` never stops. The heal asks a caller's InterruptScope too: one that answers
  // true throws Interrupted as it would without a `stop`.
  IdleReport idle(const std::function<bool()>& stop);

  // ---- messages (orbit/sync.h) ----
  // Brings the window to the rendering of `messages` (the full list a chat API would be sent): renders it
  // with the model's chat template (or options.chat's), cuts it into one unit per message where the
  // tokens allow, and plans the operations that turn the window into those units: evictions, one
  // reorder, recalls, admits and turns, each applied under the window's policy. After it, the window's
  // tokens (its instances' tokens in order) are tokenize(render(messages)). A list the window holds
  // already applies nothing. Throws orbit::Error when the engine has no tokenizer, the template refuses
  // the list, or the rendering does not fit the model's positions (nothing applied; a rendering of more bytes
  // than positions × the tokenizer's longest piece is refused after its one render, before its messages are
  // cut, so a list far too long costs one render). Throws orbit::CapacityRefused (orbit/capacity.h) when an
  // operation is refused for capacity: bound() kPool when the engine's KV pool cannot hold it (room other
  // windows give back cures it), kWindowBytes when this window's max_bytes is what it passes (only a smaller
  // list does). The operations applied before a refused one stay, and the window is then a mix of old and new
  // that a later sync of any list brings to that list. Errors start with the function called
  // ("plan_sync: ...", "sync: ...", "prepare_sync: ..."); malformed tools or extra JSON is named as
  // ChatOptions::tools_json / extra_json.
  SyncPlan plan_sync(const std::vector<ChatMessage>& messages, const SyncOptions& options = {}) const;
  SyncReport sync(const std::vector<ChatMessage>& messages, const SyncOptions& options = {});
  // sync with the plan_sync(messages, options) of this window at its current version, so a caller that reads
  // the plan first (its tokens against a context limit, its generation prompt) renders and diffs the list
  // once. Throws orbit::Error for a plan of another window or an older version ("stale sync plan"), and as
  // sync() does when an operation is refused.
  SyncReport sync(const std::vector<ChatMessage>& messages, const SyncPlan& planned);
  // Prepares, in idle time, a list the agent expects to sync next: its rules say what they will drop when
  // the tool returns (the oldest turns past a token budget, a screenshot beyond the last few, a result
  // shown again), so it passes the list with those drops made (and whatever it knows it will add). In a
  // throwaway fork (the window itself is not changed) the list is synced under the executing radix
  // baseline's policy (`prefix`, repairing at once): every instance whose context the drops change is
  // prefilled exactly, and each forward's KV is stored for exact reuse (WindowPolicy::reuse_computed). A
  // later sync whose list starts the same way then serves those instances from that KV: no forward on the
  // critical path and no new error, where the policy would otherwise approximate them or prefill them
  // again; past the first difference the plan is the policy's as before, so a wrong guess costs only the
  // idle time. What a trim from the front of the list costs every prefix cache (everything behind it
  // prefilled again) then costs nothing when the agent reads next. Background work
  // (IdleReport::prepare_forward_tokens, instances_prepared); does nothing under a policy without exact reuse
  // (nothing would read its result). Throws orbit::Error as sync() does for a list it cannot render or place (nothing
  // computed); does nothing while repairs are deferred (they change the KV the fork would start from: a
  // read or heal() runs them); when the pool fills up on the way, what was computed stays reusable and the
  // rest is skipped. While the window trusts the agent's hints (WindowPolicy::trust_hints: idle() prepares no
  // learned lists or moves), a hint is also prepared one message further: each learned list or move idle time
  // would have prepared that is this list and one message more (a message moved to the end of the trimmed list)
  // is prepared too, its start served from this list's KV, so only that message is forwarded; the next sync reads
  // its head (the role, a tool result's label), which the message the tool returns starts with too
  // (IdleReport::hints_trusted, lists_prepared, moves_prepared count them).
  IdleReport prepare_sync(const std::vector<ChatMessage>& messages, const SyncOptions& options = {});

  // A copy-on-write child (O(pages) reference counts). The child has its own id and version. Repairs an
  // edit deferred stay deferred in both under exact reuse (WindowPolicy::reuse_computed): whichever reads
  // first runs them, the other loads what it computed; without exact reuse they run first (in this window,
  // as a read would), so the two share the repaired pages.
  Window fork() const;

  // ---- reading (const: contents, order and version stay; see "Reading the window" above) ----
  // Next-token logits after each token of `query` (live tokens after the window; nothing is stored).
  // all_rows = false: only the last row. Throws on an empty query, ids outside the vocabulary, or a query
  // whose positions after the window's pass the model's limit (ModelInfo::max_positions). generate() throws
  // the same; a decode that reaches the limit ends with stop_reason "position_limit".
  Logits logits(const std::vector<int64_t>& query, bool all_rows = false) const;
  Generation generate(const std::vector<int64_t>& query, const GenerateOptions& options = {}) const;
  // Text overloads (the query tokenized without BOS, as add_turn(text)); Generation::text is the answer.
  Logits logits(std::string_view query, bool all_rows = false) const;
  Generation generate(std::string_view query, const GenerateOptions& options = {}) const;
  // n answers to one query, decoded together (orbit/decode_batch.h): the window's deferred repairs run, then
  // it is forked n − 1 times (copy-on-write: the branches share its pages, read once) and the n branches
  // decode in one forward per step, the query forwarded once for all of them, each with its own tokens and
  // seed (answer i draws with answer_seed(options.seed, i); at temperature 0 every answer is the greedy one). The forks
  // are dropped at the end. n = 1 is generate(). Throws orbit::Error for n < 1 or n > kMaxGenerateN (each
  // branch is a fork, in host memory before the first step: a million took over 20 GB), and as generate() does.
  static constexpr int64_t kMaxGenerateN = 1024;
  // The seed answer i of generate_n draws with: seed + i·2³². Apart by 2³², so that the answers of seeds
  // s and s + 1 are never the same ones (with seed + i, answer 1 of seed s was answer 0 of seed s + 1).
  static constexpr uint64_t answer_seed(uint64_t seed, int64_t i) { return seed + (static_cast<uint64_t>(i) << 32); }
  std::vector<Generation> generate_n(const std::vector<int64_t>& query, int64_t n,
                                     const GenerateOptions& options = {}) const;
  // Greedy-decodes answer_tokens after `query` with the instance as it is and with its canonical KV. Throws
  // orbit::Error naming answer_tokens, before anything runs, when it is < 1 or the decodes would run past the
  // model's positions (the window's, the query's and answer_tokens - 1 fed back).
  DisposabilityReport disposable(InstanceId instance, const std::vector<int64_t>& query,
                                 int64_t answer_tokens = 4) const;
  // Each instance's own share of the window's fidelity loss after `query` (as logits(query, true) and
  // reference_logits(query, true) compare, averaged over the rows): for every
  // instance whose held KV differs from a re-prefill's (relative change above 1e-6), the KL when it alone
  // is served as held. One forward of the whole window plus one of the query per such instance; runs a
  // deferred repair first, as a read does. In window order; exact instances are left out. Throws on an
  // empty query or ids outside the vocabulary.
  std::vector<InstanceLoss> loss_by_instance(const std::vector<int64_t>& query) const;

  // The window's KV as a re-prefill of the same contents in the same order would give it, and the
  // logits of `query` after it: the reference every fidelity measure compares against (one forward of
  // the whole window; nothing is stored).
  Logits reference_logits(const std::vector<int64_t>& query, bool all_rows = false) const;

  // An instance's stored KV (for inspection and tests), as stored: a deferred repair is not run first
  // (InstanceInfo::deferred says one waits). Throws for an unknown instance.
  InstanceKV kv(InstanceId instance) const;

 private:
  friend class Engine;
  friend class DecodeBatch;
  friend class detail::EngineCore;
  explicit Window(std::unique_ptr<detail::WindowState> state);
  std::unique_ptr<detail::WindowState> state_;
};

}  // namespace orbit
