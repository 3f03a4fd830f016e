#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <unordered_map>

#include "apply/actions.h"
#include "apply/engine_apply_env.h"
#include "orbit/common/error.h"
#include "orbit/interrupt.h"
#include "plan/plan_seal.h"
#include "window/window_ops.h"

// apply_plan() in named parts, in the order it runs them:
//
//   check_limits      the plan's own refusal, then the window's limits re-checked on the plan's steps
//   apply_steps       per step, in window order: the entry's identity (start_entry), its KV from the
//                     step's action (run_action), then its pages kept (keep_pages) or fresh (form_pages),
//                     appended to the build (append_entry); nothing in the window changes. Before each
//                     served step, and before each layer of its forwards, an interruption point
//                     (orbit/interrupt.h): Interrupted thrown there leaves the window as it was, the build's
//                     pages released with it
//   commit            the one block that writes the window: the graph, the evicted set, the entries and
//                     the version, together and only once every step fit
//   account           the window's and the engine's counters, the prefix-cache yardstick
namespace orbit::detail {

namespace {

using Clock = std::chrono::steady_clock;
using EntryIndex = std::unordered_map<InstanceId, int64_t>;  // instance -> index into WindowState::entries

// An instance whose KV the plan formed: the graph's conditioning to write for it at commit.
struct Formed {
  InstanceId id;
  bool conditioned;  // false: canonical/blind (no conditioning)
  std::vector<InstanceId> on;
};

// The window after the plan as the steps build it, and what the commit needs besides the entries.
struct Built {
  explicit Built(EngineCore& core) : window(core) {}
  WindowBuild window;
  std::vector<InstanceId> evicted;
  std::vector<Formed> formed;
};

// The context the steps built so far: what a freshly formed entry is formed on.
struct BuildContext {
  uint64_t ctx_hash = 0, keys_hash = 0;
  int64_t ctx_tokens = 0;
  std::vector<planner::PrefixSpan> prefixes;  // the window's key prefixes after the plan (the yardstick)
};

// What the steps' actions did, summed: the report's counts and the engine's counters.
struct Tally {
  ApplyReport report;
  Counters counters;
  double encode_tokens = 0;  // counted by EngineCore::canonical() itself

  void add(const ApplyOutput& out) {
    report.forward_tokens += out.forward_tokens;
    report.patch_hits += out.patch_hits;
    report.canonicals_encoded += out.canonicals_encoded;
    report.bytes_moved += out.bytes_moved;
    report.background_jobs += out.background_jobs;
    report.patches_formed += out.patches_queued;
    counters.patch_hits += out.patch_hits;
    encode_tokens += out.encode_tokens;
  }
};

// Limits first: nothing is computed for a plan that cannot fit. The plan says so (Plan::refusal); the
// check is repeated on the plan's own steps so a hand-edited plan cannot pass.
Status check_limits(const WindowState& state, const Plan& plan) {
  if (!plan.refusal.empty()) {
    return plan.refused_capacity ? Status::out_of_capacity(plan.refusal) : Status::refused(plan.refusal);
  }
  int64_t extent = 0;
  for (const PlanStep& s : plan.steps) {
    if (s.action != StepAction::kEvict) extent += s.chunk.extent;
  }
  bool capacity = false;
  const std::string refusal =
      limit_refusal(plan.op, extent, plan.device_bytes_after, state.core->max_positions(),
                    window_position_limit_source(state.core->config()), state.options.max_bytes, &capacity);
  if (!refusal.empty()) return capacity ? Status::out_of_capacity(refusal) : Status::refused(refusal);
  return Status::ok();
}

// The entry a step serves, without its KV: its identity and sizes from its old entry when it has one,
// else from the step (a new turn) or the engine's chunk record.
Entry start_entry(EngineCore& core, const PlanStep& s, const Entry* old) {
  Entry e;
  e.id = s.instance;
  e.is_turn = s.is_turn;
  if (old != nullptr) {
    e.key = old->key;
    e.chunk = old->chunk;
    e.turn_tokens = old->turn_tokens;
    e.length = old->length;
    e.extent = old->extent;
  } else if (s.is_turn) {
    e.key = s.chunk.key;
    e.turn_tokens = s.turn_tokens;
    e.length = e.extent = static_cast<int64_t>(s.turn_tokens.size());
    core.registry().note_turn(e.key, e.length);
  } else {
    e.chunk = core.registry().record(s.chunk.key);
    e.key = s.chunk.key;
    e.length = e.chunk->ref.length;
    e.extent = e.chunk->ref.extent;
  }
  return e;
}

// Runs the step's action: the entry's KV at the build's next position, behind the entries built so far.
ApplyOutput run_action(Built& built, const PlanStep& s, const Entry& e, const Entry* old) {
  EngineApplyEnv env(built.window);
  ApplyInput in{env, ApplyTarget{}};
  in.target.key = e.key;
  in.target.chunk = e.chunk;
  in.target.turn_tokens = &e.turn_tokens;
  in.target.length = e.length;
  in.target.position = built.window.next_position;
  in.target.has_old = old != nullptr;
  ApplyOutput out;
  apply_action(in, s, out);
  return out;
}

// run_action, stopped inside a forward (an interruption point between two layers, engine/interruptible.h):
// the Interrupted passed on names the plan's operation, as the point before each instance does.
ApplyOutput run_action_named(Built& built, const PlanStep& s, const Entry& e, const Entry* old, Operation op) {
  try {
    return run_action(built, s, e, old);
  } catch (const Interrupted&) {
    throw Interrupted(operation_name(op));
  }
}

// Exact reuse: the KV of a step that forwarded its instance in context, stored under the key of the
// window as built (a reuse step that fell back to a forward stores what it computed, too).
void keep_for_reuse(EngineCore& core, const PlanStep& s, const Entry& e, const ApplyOutput& out, const KvState& chain,
                    const KvState& content) {
  const bool forwarded = out.done_as == StepAction::kForm || out.done_as == StepAction::kReprefill ||
                         out.done_as == StepAction::kPrefillTurn;
  if (!forwarded || out.approximate_reuse || content_of(out.content).empty() ||
      (s.reuse_key.empty() && s.how != ServeActionId::kReuse))
    return;
  static const std::vector<int64_t> none;
  const std::vector<int64_t>& tokens =
      e.is_turn ? e.turn_tokens : (e.chunk->ref.kind == ChunkKind::kTokens ? e.chunk->tokens : none);
  core.kv().put_reusable(reuse_key(e.key, chain), content_of(out.content), chain, content, tokens);
}

// A kept entry: the old entry's pages (forked) and what it was formed on; the step's drift and prediction.
void keep_pages(EngineCore& core, const PlanStep& s, const Entry& old, Entry& e) {
  e.kv = core.pool().fork(*old.kv);
  const InstanceId id = e.id;
  const bool is_turn = e.is_turn;
  static_cast<EntryMeta&>(e) = old;  // its identity and content are the old entry's (start_entry)
  e.id = id;
  e.is_turn = is_turn;
  e.drift_tokens = s.drift_tokens;
  e.predicted_kl = s.predicted_kl;
  e.shortfall_kl = s.shortfall_kl;
  e.keep_change = s.context_change;
  e.permuted = s.permuted;
  e.deferred = s.deferred;
}

// Whether a served KV goes into the window by reference: a placement (a chunk's canonical, with patch
// factors or without) the pool shares (SharedPool::shares). Everything else is written as a private copy.
bool placed_by_reference(EngineCore& core, const Kv& kv) {
  const TensorKv::Placement* placed = placement_of(kv);
  return placed != nullptr && core.pool().shares();
}

// The pages of a served KV: its chunk's shared canonical pages with its own patch factors (place), or a
// private copy of its rows (create; a placement's patched rows are computed here). Null when the pool is full.
std::unique_ptr<runtime::PagedSequence> make_pages(EngineCore& core, const Kv& kv, int64_t length,
                                                   SharedPool::Usage* full) {
  const runtime::ModelConfig& config = core.config();
  if (placed_by_reference(core, kv)) {
    const TensorKv::Placement& placed = *placement_of(kv);
    return core.pool().place(config, placed.key, placed.canonical, placed.patch, full);
  }
  const int64_t rows = config.position_rows();
  const at::Tensor placeholder = rows == 1 ? at::zeros({length}, at::kLong) : at::zeros({rows, length}, at::kLong);
  return core.pool().create(config, content_of(kv), placeholder, full);
}

// Dynamic-NTK RoPE: the window length whose base a served instance's content carries (EntryMeta::formed_window),
// 0 for any other model. A canonical served alone, relocated or with some tokens recomputed over it (first-k,
// CacheBlend: most rows stay canonical; the recomputed ones are formed at the rope window) carries its own
// length. A forward in context, a recompute of every token, and KV forwarded behind the same states (exact
// reuse, a stored conditioned KV; the chain starts at the rope window, kv_window_start), the plan's rope window,
// or its end when there is none; a stored patch's conditioned rows the same (assumed: the patch records no
// window). LayoutPlanner::formed_window says the same when it prices them.
int64_t formed_window(const EngineCore& core, StepAction done, const PlanStep& s, int64_t extent, int64_t rope_window) {
  if (core.config().rope.scaling != runtime::RopeScaling::kDynamicNtk) return 0;
  const bool all_recomputed = done == StepAction::kRecompute && s.recompute_tokens >= s.chunk.length;
  if (done == StepAction::kCanonical || done == StepAction::kBlind ||
      (done == StepAction::kRecompute && !all_recomputed))
    return extent;
  return rope_window > 0 ? rope_window : s.position + extent;
}

// A formed entry: a new content version formed on the context built so far, its KV in fresh pages or
// placed on its chunk's shared canonical pages (make_pages).
// Out of capacity when the shared pool cannot hold it (the window is untouched).
Status form_pages(const WindowState& state, Operation op, const PlanStep& s, const ApplyOutput& out,
                  const BuildContext& ctx, Built& built, Entry& e) {
  EngineCore& core = built.window.core;
  e.version = core.next_content_version();
  e.state = out.approximate_reuse
                ? kv_patched(e.key, s.reuse_from)
                : kv_state_after(out.done_as, e.key, s.patch_key, s.recompute_tokens, built.window.chain, KvState{});
  e.formed_on = ctx.ctx_hash;
  e.formed_on_keys = ctx.keys_hash;
  e.formed_on_tokens = ctx.ctx_tokens;
  e.exact_when_formed = s.exact && out.done_as == s.action;
  e.formed_by = out.done_as;
  e.match = out.done_as == StepAction::kApplyPatch ? s.match : PatchMatch::kNone;
  e.patch_key = !s.patch_key.empty() ? s.patch_key : (s.store_keys.empty() ? std::string() : s.store_keys.front());
  e.predicted_kl = s.predicted_kl;
  e.kl_per_weight = s.kl_per_weight;
  // Rows a read formed at its own lengths (PlanStep::reused_formed_window) carry that window's base.
  e.formed_window = out.approximate_reuse && s.reused_formed_window > 0
                        ? s.reused_formed_window
                        : formed_window(core, out.done_as, s, e.extent, built.window.rope_window);
  e.shortfall_kl = s.shortfall_kl;
  built.formed.push_back({e.id, out.conditioned, built.window.context_ids()});
  SharedPool::Usage full;
  e.kv = make_pages(core, out.content, e.length, &full);
  if (e.kv == nullptr) {
    std::ostringstream why;
    why << operation_name(op) << " refused: the KV pool is full (" << full.free << " of " << full.pages
        << " pages free; instance " << e.id << " needs " << state.pages_for(e.length)
        << "); evict, slide or close windows";
    return Status::out_of_capacity(why.str());
  }
  return Status::ok();
}

// Appends the served entry (and, when formed, its content) to the build and extends the context.
void append_entry(Built& built, BuildContext& ctx, Entry e, ApplyOutput& out) {
  WindowBuild& b = built.window;
  b.chain = kv_chain(b.chain, e.state);
  b.content = content_chain(b.content, e.key);
  ctx.ctx_hash = context_hash(ctx.ctx_hash, e.key, e.version);
  ctx.keys_hash = context_hash(ctx.keys_hash, e.key, 0);
  ctx.prefixes.push_back({ctx.keys_hash, e.length});
  ctx.ctx_tokens += e.length;
  const int64_t position = b.next_position;
  b.entries.push_back(std::move(e));
  b.contents.resize(b.entries.size());
  // A placement's rows are gathered (and patched) from its pages only if a later step forwards behind it.
  if (!out.keep_pages && !placed_by_reference(b.core, out.content)) b.contents.back() = content_of(out.content);
  b.starts.push_back(position);
  b.next_position += b.entries.back().extent;
}

// Serves every step into `built`, in window order; the window itself is not changed.
Status apply_steps(const WindowState& state, const Plan& plan, const EntryIndex& index, Built& built, BuildContext& ctx,
                   Tally& tally) {
  EngineCore& core = built.window.core;
  for (const PlanStep& s : plan.steps) {
    if (s.action == StepAction::kEvict) {
      built.evicted.push_back(s.instance);
      continue;
    }
    interruption_point(operation_name(plan.op));
    const auto it = index.find(s.instance);
    const Entry* old = it != index.end() ? &state.entries[static_cast<std::size_t>(it->second)] : nullptr;
    Entry e = start_entry(core, s, old);
    ApplyOutput out = run_action_named(built, s, e, old, plan.op);
    tally.add(out);
    keep_for_reuse(core, s, e, out, built.window.chain, built.window.content);
    built.window.queue_forms();  // after the exact KV is stored: see WindowBuild::forms
    if (out.keep_pages) {
      keep_pages(core, s, *old, e);
    } else {
      const Status st = form_pages(state, plan.op, s, out, ctx, built, e);
      if (!st.is_ok()) return st;
    }
    append_entry(built, ctx, std::move(e), out);
  }
  return Status::ok();
}

// The most recently evicted chunks a window remembers for recall. Each record holds its chunk registered, and
// a long-lived window that sees ever new content (a server's window synced with one conversation after
// another) would otherwise remember every chunk it ever evicted: records, registered chunks and the sync's
// pass over them growing without bound. A chunk forgotten here is admitted again as new when it comes back
// (its KV found in the store by its key), instead of recalled as the instance it was.
constexpr std::size_t kEvictedRemembered = 1024;

// Forgets the evicted chunks the engine let go of (EvictedInstance), then, past kEvictedRemembered, the oldest
// evictions down to 7/8 of it (so the trim comes once per many).
void forget_oldest_evictions(WindowState& state) {
  for (auto it = state.evicted.begin(); it != state.evicted.end();) {
    it = it->second.chunk.expired() ? state.evicted.erase(it) : std::next(it);
  }
  if (state.evicted.size() <= kEvictedRemembered) return;
  std::vector<uint64_t> when;
  when.reserve(state.evicted.size());
  for (const auto& [key, ev] : state.evicted) when.push_back(ev.when);
  const std::size_t keep = kEvictedRemembered * 7 / 8;
  std::nth_element(when.begin(), when.end() - static_cast<std::ptrdiff_t>(keep), when.end());
  const uint64_t oldest_kept = *(when.end() - static_cast<std::ptrdiff_t>(keep));
  for (auto it = state.evicted.begin(); it != state.evicted.end();) {
    it = it->second.when < oldest_kept ? state.evicted.erase(it) : std::next(it);
  }
}

// Commit, graph: the evicted instances leave it (chunks are remembered in the evicted set).
void commit_evictions(WindowState& state, const EntryIndex& index, const Built& built, ApplyReport& report) {
  for (InstanceId id : built.evicted) {
    const Entry& old = state.entries[static_cast<std::size_t>(index.at(id))];
    state.graph.remove_instance(id);
    if (!old.is_turn) {
      state.evicted[old.key] = EvictedInstance{id, state.eviction_clock++, old.chunk};
      state.core->registry().note_evicted(old.chunk);
    }
    report.removed.push_back(id);
  }
  forget_oldest_evictions(state);
}

// Commit, graph: the new instances join it; a recalled chunk takes back its evicted node.
void commit_additions(WindowState& state, const EntryIndex& index, const Built& built, ApplyReport& report) {
  for (const Entry& e : built.window.entries) {
    if (index.count(e.id) > 0) continue;
    report.added.push_back(e.id);
    auto ev = state.evicted.find(e.key);
    if (!e.is_turn && ev != state.evicted.end() && ev->second.id == e.id) {
      // The evicted node stays in the graph only while something's conditioning references it.
      if (state.graph.contains(e.id)) {
        state.graph.reinstate(e.id);
      } else {
        state.graph.add_instance(e.id, e.key);
      }
      state.evicted.erase(ev);
    } else {
      if (!e.is_turn) state.evicted.erase(e.key);
      state.graph.add_instance(e.id, e.key);
    }
  }
}

// Whether, after this commit, every live instance's conditioning (followed through evicted instances too) leads
// only to instances before it in the window: then no antecedent of an instance formed now can depend on it, and
// commit_conditioning need not look (a dependents() walk per formed instance, O(n²) each in a window whose every
// instance is conditioned on those before it: O(n³) for an edit that re-forms a long conversation). It holds while
// the instances already there keep their order and none comes back from eviction with its old conditioning; a
// commit that forms every instance anew restores it.
bool conditioning_in_order(const WindowState& state, const EntryIndex& index, const Built& built) {
  if (built.formed.size() == built.window.entries.size()) return true;  // each formed on those before it
  if (!state.conditioning_in_order) return false;
  int64_t last = -1;
  for (const Entry& e : built.window.entries) {
    const auto it = index.find(e.id);
    if (it == index.end()) {
      if (state.graph.contains(e.id)) return false;  // recalled: its old conditioning comes back with it
      continue;
    }
    if (it->second < last) return false;  // moved in front of an instance that was before it
    last = it->second;
  }
  return true;
}

// Commit, graph: each formed instance's conditioning, on the instances before it.
void commit_conditioning(WindowState& state, const Built& built, bool in_order) {
  EngineCore& core = built.window.core;
  for (const Formed& f : built.formed) {
    if (f.conditioned) {
      // An antecedent may itself still be conditioned on this instance's earlier KV: one kept after a
      // reorder moved it in front, or placed before a recalled chunk that conditioned it in its earlier
      // life. Its KV is left as it is (it cannot see this one now); the new conditioning leaves it out so
      // the graph stays acyclic. What is lost: a later recall of it would not cascade into this instance.
      std::vector<InstanceId> on = f.on;
      if (!in_order && state.graph.contains(f.id) && state.graph.num_live() > 0) {
        const std::vector<InstanceId> deps = state.graph.dependents(f.id);
        if (!deps.empty()) {
          const std::set<InstanceId> later(deps.begin(), deps.end());
          on.erase(std::remove_if(on.begin(), on.end(), [&](InstanceId a) { return later.count(a) > 0; }), on.end());
        }
      }
      state.graph.set_conditioning(f.id, core.next_content_version(), on);
    } else {
      state.graph.clear_conditioning(f.id);
    }
  }
}

// Commit: the graph, the evicted set, the entries and the version, together. Nothing here can fail.
void commit(WindowState& state, const Plan& plan, const EntryIndex& index, Built& built, ApplyReport& report) {
  const bool in_order = conditioning_in_order(state, index, built);
  commit_evictions(state, index, built, report);
  commit_additions(state, index, built, report);
  commit_conditioning(state, built, in_order);
  state.conditioning_in_order = in_order;
  state.entries.swap(built.window.entries);
  state.core->pool().clear(built.window.entries);  // the old entries: their pages are released under the pool lock
  ++state.version;
  ++state.operations;
  if (plan.op == Operation::kReorder) ++state.reorders;
}

// The window's and the engine's counters for the applied plan, and the prefix-cache yardstick.
void account(WindowState& state, const Plan& plan, bool background, BuildContext& ctx, Tally& tally,
             Clock::time_point start) {
  ApplyReport& report = tally.report;
  Counters& counters = tally.counters;
  state.forward_tokens += report.forward_tokens;
  if (!background && plan.op != Operation::kHeal) {
    state.critical_forward_tokens += report.forward_tokens;
    // The yardstick. A request-driven prefix cache computes when the model is called, from the first token
    // that differs, whatever was edited in between: an edit is counted with the next operation that
    // forwards (or the next generate), not on its own.
    const bool edit = plan.op == Operation::kEvict || plan.op == Operation::kSlide || plan.op == Operation::kReorder;
    if (!edit) counters.prefix_cache_tokens = charge_prefix_cache(state, &ctx.prefixes);
  }
  counters.forward_tokens = report.forward_tokens - tally.encode_tokens;
  counters.critical_forward_tokens = report.forward_tokens;
  report.device_bytes = state.device_bytes();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (background || plan.op == Operation::kHeal) {  // idle time: background work, not the critical path
    // Canonicals encoded inline were counted (as forwards) by EngineCore::canonical: background too.
    counters.background_forward_tokens = counters.forward_tokens + tally.encode_tokens;
    counters.background_seconds = report.seconds;
  } else {
    counters.critical_seconds = report.seconds;
  }
  state.core->usage().count(counters);
}

// A plan refused or interrupted part way: the window is unchanged, but the steps served before ran their forwards
// (and stored their exact KV and queued their patches, which a retry of the same plan reuses). The engine counts
// that work, as account() would have (the canonicals they encoded it counted already); the window counts nothing.
void account_unfinished(const WindowState& state, const Plan& plan, bool background, const Tally& tally,
                        Clock::time_point start) {
  Counters counters;
  counters.forward_tokens = tally.report.forward_tokens - tally.encode_tokens;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (background || plan.op == Operation::kHeal) {
    counters.background_forward_tokens = counters.forward_tokens + tally.encode_tokens;
    counters.background_seconds = seconds;
  } else {
    counters.critical_seconds = seconds;
  }
  state.core->usage().count(counters);
}

}  // namespace

Result<ApplyReport> apply_plan(WindowState& state, const Plan& plan, bool background) {
  EngineCore& core = *state.core;
  core.life().check_open();
  ORBIT_CHECK(plan.window_id == state.id,
              "apply: the plan was made by window " << plan.window_id << ", this is window " << state.id);
  ORBIT_CHECK(plan.window_version == state.version, "apply: stale plan (made at window version "
                                                        << plan.window_version << ", the window is at " << state.version
                                                        << "); plan again");
  ORBIT_CHECK(plan.seal == plan_seal(plan),
              "apply: the plan was changed after plan_*() made it (its steps, order or totals no longer match its "
              "seal); plan again instead of editing a plan");
  const auto start = Clock::now();
  const Status limits = check_limits(state, plan);
  if (!limits.is_ok()) return limits;

  EntryIndex index;
  index.reserve(state.entries.size());
  for (std::size_t i = 0; i < state.entries.size(); ++i) index[state.entries[i].id] = static_cast<int64_t>(i);
  Tally tally;
  tally.report.op = plan.op;
  Built built(core);
  built.window.kept_past = state.past;
  built.window.rope_window = plan.rope_window;
  built.window.chain = kv_window_start(plan.rope_window);
  built.window.entries.reserve(plan.steps.size());
  built.window.contents.reserve(plan.steps.size());
  built.window.starts.reserve(plan.steps.size());
  BuildContext ctx;
  ctx.prefixes.reserve(plan.order.size());
  Status served = Status::ok();
  try {
    served = apply_steps(state, plan, index, built, ctx, tally);
  } catch (...) {
    account_unfinished(state, plan, background, tally, start);
    throw;
  }
  if (!served.is_ok()) {
    account_unfinished(state, plan, background, tally, start);
    return served;
  }

  commit(state, plan, index, built, tally.report);
  // What the window no longer holds leaves its kept past (the build puts back what it read when it ends).
  if (state.past != nullptr) state.past->fit(past_keys(state));
  account(state, plan, background, ctx, tally, start);
  {
    // Committed: nothing may throw Interrupted now (the window changed), so kInline's jobs run whole.
    const InterruptScope committed(nullptr);
    core.jobs().after_apply();
  }
  return std::move(tally.report);
}

void charge_radix_cache(WindowState& state, const std::vector<int64_t>& query, const std::vector<int64_t>& generated,
                        int64_t query_forwarded) {
  std::vector<int64_t> tokens = state.token_ids();
  tokens.insert(tokens.end(), query.begin(), query.end());
  const std::size_t prompt = tokens.size();
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  Counters charged;
  charged.radix_cache_tokens = static_cast<double>(state.core->usage().radix_read(tokens, prompt));
  charged.query_forward_tokens = static_cast<double>(query_forwarded);
  state.radix_cache_tokens += charged.radix_cache_tokens;
  state.query_forward_tokens += charged.query_forward_tokens;
  state.core->usage().count(charged);
}

void charge_logits_read(WindowState& state, int64_t tokens) {
  Counters charged;
  charged.logits_forward_tokens = static_cast<double>(tokens);
  state.logits_forward_tokens += charged.logits_forward_tokens;
  state.core->usage().count(charged);
}

double charge_prefix_cache(WindowState& state, const std::vector<planner::PrefixSpan>* prefixes) {
  std::vector<planner::PrefixSpan> spans;
  if (prefixes == nullptr) {
    spans.reserve(state.entries.size());
    uint64_t prefix = 0;
    for (const Entry& e : state.entries) {
      prefix = context_hash(prefix, e.key, 0);
      spans.push_back({prefix, e.length});
    }
    prefixes = &spans;
  }
  const double tokens = static_cast<double>(state.core->usage().prefix_cache_read(*prefixes));
  state.prefix_cache_tokens += tokens;
  return tokens;
}

}  // namespace orbit::detail
