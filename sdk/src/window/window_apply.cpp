#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <unordered_map>

#include "orbit/common/error.h"
#include "window/actions.h"
#include "window/window_ops.h"

namespace orbit::detail {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Result<ApplyReport> apply_plan(WindowState& state, const Plan& plan, bool background) {
  EngineCore& core = *state.core;
  core.check_open();
  ORBIT_CHECK(plan.window_id == state.id,
              "apply: the plan was made by window " << plan.window_id << ", this is window " << state.id);
  ORBIT_CHECK(plan.window_version == state.version, "apply: stale plan (made at window version "
                                                        << plan.window_version << ", the window is at " << state.version
                                                        << "); plan again");
  const auto start = Clock::now();
  const runtime::ModelConfig& config = core.config();

  // Limits first: nothing is computed for a plan that cannot fit. The plan says so (Plan::refusal); the
  // check is repeated on the plan's own steps so a hand-edited plan cannot pass.
  if (!plan.refusal.empty()) {
    return plan.refused_capacity ? Status::out_of_capacity(plan.refusal) : Status::refused(plan.refusal);
  }
  int64_t extent = 0;
  std::unordered_map<InstanceId, int64_t> index;
  index.reserve(state.entries.size());
  for (std::size_t i = 0; i < state.entries.size(); ++i) index[state.entries[i].id] = static_cast<int64_t>(i);
  for (const PlanStep& s : plan.steps) {
    if (s.action != StepAction::kEvict) extent += s.chunk.extent;
  }
  bool capacity = false;
  const std::string refusal = limit_refusal(state, plan.op, extent, plan.device_bytes_after, &capacity);
  if (!refusal.empty()) return capacity ? Status::out_of_capacity(refusal) : Status::refused(refusal);

  ApplyReport report;
  report.op = plan.op;
  Counters counters;
  double encode_tokens = 0;  // counted by EngineCore::canonical() itself
  WindowBuild b(core);
  b.entries.reserve(plan.steps.size());
  b.contents.reserve(plan.steps.size());
  b.starts.reserve(plan.steps.size());
  std::vector<InstanceId> evicted;
  struct Formed {
    InstanceId id;
    bool conditioned;  // false: canonical/blind (no conditioning)
    std::vector<InstanceId> on;
  };
  std::vector<Formed> formed;
  uint64_t ctx_hash = 0, keys_hash = 0;
  std::vector<planner::PrefixSpan> prefixes;  // the window's key prefixes after the plan (the yardstick)
  prefixes.reserve(plan.order.size());
  int64_t ctx_tokens = 0;
  std::size_t leading_turns = 0;

  for (const PlanStep& s : plan.steps) {
    if (s.action == StepAction::kEvict) {
      evicted.push_back(s.instance);
      continue;
    }
    const int64_t position = b.next_position;
    Entry e;
    e.id = s.instance;
    e.is_turn = s.is_turn;
    const auto it = index.find(s.instance);
    const Entry* old = it != index.end() ? &state.entries[static_cast<std::size_t>(it->second)] : nullptr;
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
      core.note_turn(e.key, e.length);
    } else {
      e.chunk = &core.record(s.chunk.key);
      e.key = s.chunk.key;
      e.length = e.chunk->ref.length;
      e.extent = e.chunk->ref.extent;
    }

    ApplyInput in{core, b};
    in.old = old;
    in.chunk = e.chunk;
    in.turn_tokens = &e.turn_tokens;
    in.length = e.length;
    in.position = position;
    in.prefix = leading_turns;
    ApplyOutput out;
    action(s.how).apply(in, s, out);
    report.forward_tokens += out.forward_tokens;
    report.patch_hits += out.patch_hits;
    report.canonicals_encoded += out.canonicals_encoded;
    report.bytes_moved += out.bytes_moved;
    report.background_jobs += out.background_jobs;
    report.patches_formed += out.background_jobs;
    counters.patch_hits += out.patch_hits;
    encode_tokens += out.encode_tokens;

    if (out.keep_pages) {
      {
        std::lock_guard<std::mutex> lock(core.pool_mutex());
        e.kv = std::make_unique<runtime::PagedSequence>(old->kv->fork());
      }
      e.version = old->version;
      e.formed_on = old->formed_on;
      e.formed_on_keys = old->formed_on_keys;
      e.formed_on_tokens = old->formed_on_tokens;
      e.drift_tokens = s.drift_tokens;
      e.exact_when_formed = old->exact_when_formed;
      e.formed_by = old->formed_by;
      e.match = old->match;
      e.patch_key = old->patch_key;
      e.predicted_kl = s.predicted_kl;
      e.kl_per_weight = old->kl_per_weight;
      e.keep_change = s.context_change;
      e.deferred = s.deferred;
    } else {
      e.version = core.next_content_version();
      e.formed_on = ctx_hash;
      e.formed_on_keys = keys_hash;
      e.formed_on_tokens = ctx_tokens;
      e.exact_when_formed = s.exact && out.done_as == s.action;
      e.formed_by = out.done_as;
      e.match = out.done_as == StepAction::kApplyPatch ? s.match : PatchMatch::kNone;
      e.patch_key = !s.patch_key.empty() ? s.patch_key : (s.store_keys.empty() ? std::string() : s.store_keys.front());
      e.predicted_kl = s.predicted_kl;
      e.kl_per_weight = s.kl_per_weight;
      formed.push_back({e.id, out.conditioned, b.context_ids()});
      std::lock_guard<std::mutex> lock(core.pool_mutex());
      e.kv = std::make_unique<runtime::PagedSequence>(core.pool(), config);
      const int64_t rows = config.position_rows();
      at::Tensor placeholder = rows == 1 ? at::zeros({e.length}, at::kLong) : at::zeros({rows, e.length}, at::kLong);
      Status st = e.kv->append(out.content, placeholder);
      if (!st.is_ok()) {
        e.kv.reset();
        std::ostringstream why;
        why << operation_name(plan.op) << " refused: the KV pool is full (" << core.pool().num_free() << " of "
            << core.pool().num_pages() << " pages free; instance " << e.id << " needs " << state.pages_for(e.length)
            << "); evict, slide or close windows";
        return Status::out_of_capacity(why.str());
      }
    }
    ctx_hash = context_hash(ctx_hash, e.key, e.version);
    keys_hash = context_hash(keys_hash, e.key, 0);
    prefixes.push_back({keys_hash, e.length});
    ctx_tokens += e.length;
    if (leading_turns == b.entries.size() && e.is_turn) ++leading_turns;
    b.entries.push_back(std::move(e));
    b.contents.resize(b.entries.size());
    if (!out.keep_pages) b.contents.back() = std::move(out.content);
    b.starts.push_back(position);
    b.next_position += b.entries.back().extent;
  }

  // Commit: the graph, the evicted set, the entries.
  for (InstanceId id : evicted) {
    const Entry& old = state.entries[static_cast<std::size_t>(index.at(id))];
    state.graph.remove_instance(id);
    if (!old.is_turn) state.evicted[old.key] = EvictedInstance{id, static_cast<uint64_t>(state.operations)};
    report.removed.push_back(id);
  }
  for (const Entry& e : b.entries) {
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
  for (const Formed& f : formed) {
    if (f.conditioned) {
      // An antecedent may itself still be conditioned on this instance's earlier KV: one kept after a
      // reorder moved it in front, or placed before a recalled chunk that conditioned it in its earlier
      // life. Its KV is left as it is (it cannot see this one now); the new conditioning leaves it out so
      // the graph stays acyclic. What is lost: a later recall of it would not cascade into this instance.
      std::vector<InstanceId> on = f.on;
      if (state.graph.contains(f.id) && state.graph.num_live() > 0) {
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
  {
    std::lock_guard<std::mutex> lock(core.pool_mutex());
    state.entries.swap(b.entries);
    b.entries.clear();  // the old entries: their pages are released here, under the lock
  }
  ++state.version;
  ++state.operations;
  if (plan.op == Operation::kReorder) ++state.reorders;
  state.forward_tokens += report.forward_tokens;
  if (!background && plan.op != Operation::kHeal) {
    state.critical_forward_tokens += report.forward_tokens;
    // The yardstick. A request-driven prefix cache computes when the model is called, from the first token
    // that differs, whatever was edited in between: an edit is counted with the next operation that
    // forwards (or the next generate), not on its own.
    const bool edit = plan.op == Operation::kEvict || plan.op == Operation::kSlide || plan.op == Operation::kReorder;
    if (!edit) counters.prefix_cache_tokens = charge_prefix_cache(state, &prefixes);
  }
  counters.forward_tokens = report.forward_tokens - encode_tokens;
  counters.critical_forward_tokens = report.forward_tokens;
  report.device_bytes = state.device_bytes();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (background || plan.op == Operation::kHeal) {  // idle time: background work, not the critical path
    // Canonicals encoded inline were counted (as forwards) by EngineCore::canonical: background too.
    counters.background_forward_tokens = counters.forward_tokens + encode_tokens;
    counters.background_seconds = report.seconds;
  } else {
    counters.critical_seconds = report.seconds;
  }
  core.count(counters);
  core.after_apply();
  return report;
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
  const double tokens = static_cast<double>(state.core->prefix_cache_read(*prefixes));
  state.prefix_cache_tokens += tokens;
  return tokens;
}

}  // namespace orbit::detail
