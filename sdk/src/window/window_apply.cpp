#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cmath>
#include <sstream>
#include <unordered_map>

#include "orbit/common/error.h"
#include "orbit/runtime/repair.h"
#include "window/window_ops.h"

namespace orbit::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Builds the window's new entries one by one; owns them until commit (destroyed under the pool lock).
struct Builder {
  EngineCore& core;
  std::vector<Entry> entries;
  std::vector<runtime::Content> contents;  // filled lazily for kept entries
  std::vector<at::Tensor> positions;
  int64_t next_position = 0;

  explicit Builder(EngineCore& c) : core(c) {}
  ~Builder() {
    std::lock_guard<std::mutex> lock(core.pool_mutex());
    entries.clear();
  }

  // The KV of every entry built so far, as a forward's past (nullptr-equivalent when empty).
  runtime::PastKV past() {
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (contents[i].empty()) contents[i] = entry_content(core, entries[i]);
    }
    return concat_past(core.config().num_layers, contents, positions);
  }

  std::vector<ContextItem> context() const {
    std::vector<ContextItem> out;
    for (const Entry& e : entries) out.push_back({e.key, e.version});
    return out;
  }
  std::vector<InstanceId> context_ids() const {
    std::vector<InstanceId> out;
    for (const Entry& e : entries) out.push_back(e.id);
    return out;
  }
  std::vector<std::string> context_keys() const {
    std::vector<std::string> out;
    for (const Entry& e : entries) out.push_back(e.key);
    return out;
  }
};

runtime::Content forward_in_context(EngineCore& core, const runtime::ForwardInput& input, Builder& b) {
  c10::InferenceMode guard;
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  if (b.entries.empty()) return core.model().forward(input, nullptr, fo).content;
  const runtime::PastKV past = b.past();
  return core.model().forward(input, &past, fo).content;
}

std::size_t leading_turns(const std::vector<Entry>& entries) {
  std::size_t n = 0;
  while (n < entries.size() && entries[n].is_turn) ++n;
  return n;
}

}  // namespace

Result<ApplyReport> apply_plan(WindowState& state, const Plan& plan) {
  EngineCore& core = *state.core;
  core.check_open();
  ORBIT_CHECK(plan.window_id == state.id,
              "apply: the plan was made by window " << plan.window_id << ", this is window " << state.id);
  ORBIT_CHECK(plan.window_version == state.version,
              "apply: stale plan (made at window version " << plan.window_version << ", the window is at "
                                                          << state.version << "); plan again");
  const auto start = Clock::now();
  const runtime::ModelConfig& config = core.config();
  const WindowPolicy& policy = state.options.policy;

  // Limits first: nothing is computed for a plan that cannot fit.
  int64_t extent = 0;
  std::unordered_map<InstanceId, int64_t> index;
  for (std::size_t i = 0; i < state.entries.size(); ++i) index[state.entries[i].id] = static_cast<int64_t>(i);
  for (const PlanStep& s : plan.steps) {
    if (s.action != StepAction::kEvict) extent += s.chunk.extent;
  }
  if (config.max_position_embeddings > 0 && extent > config.max_position_embeddings) {
    std::ostringstream why;
    why << operation_name(plan.op) << " refused: the window would span " << extent
        << " positions, past the model's limit of " << config.max_position_embeddings << " (evict or slide first)";
    return Status::refused(why.str());
  }
  if (state.options.max_bytes > 0 && plan.device_bytes_after > state.options.max_bytes) {
    std::ostringstream why;
    why << operation_name(plan.op) << " refused: the window would hold " << plan.device_bytes_after
        << " KV bytes, over its max_bytes budget of " << state.options.max_bytes << " (evict or slide first)";
    return Status::out_of_capacity(why.str());
  }

  ApplyReport report;
  report.op = plan.op;
  Counters counters;
  double encode_tokens = 0;  // counted by EngineCore::canonical() itself
  Builder b(core);
  std::vector<InstanceId> evicted;
  struct Formed {
    InstanceId id;
    bool conditioned;  // false: canonical/blind (no conditioning)
    std::vector<InstanceId> on;
  };
  std::vector<Formed> formed;

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
    at::Tensor pos = core.positions_for(e.chunk, e.length, position);

    if (s.action == StepAction::kKeep) {
      ORBIT_CHECK(old != nullptr, "apply: plan keeps instance " << s.instance << ", which this window does not hold");
      {
        std::lock_guard<std::mutex> lock(core.pool_mutex());
        e.kv = std::make_unique<runtime::PagedSequence>(old->kv->fork());
      }
      e.version = old->version;
      e.formed_on = old->formed_on;
      e.exact_when_formed = old->exact_when_formed;
      e.formed_by = old->formed_by;
      e.match = old->match;
      e.patch_key = old->patch_key;
      b.entries.push_back(std::move(e));
      b.contents.emplace_back();
      b.positions.push_back(pos);
      b.next_position += b.entries.back().extent;
      continue;
    }

    // Everything else makes new KV for this instance.
    runtime::Content content;
    runtime::Content canonical;
    StepAction action = s.action;
    if (s.needs_canonical) {
      bool encoded = false;
      int64_t bytes = 0;
      canonical = core.canonical(*e.chunk, &encoded, &bytes);
      if (encoded) {
        ++report.canonicals_encoded;
        report.forward_tokens += static_cast<double>(e.length);
        encode_tokens += static_cast<double>(e.length);
      }
      report.bytes_moved += bytes;
    }
    const std::size_t prefix = leading_turns(b.entries);
    if (action == StepAction::kApplyPatch) {
      std::optional<runtime::Patch> patch = core.get_patch(s.patch_key);
      if (patch.has_value()) {
        content = runtime::apply_patch(core.model(), canonical, *patch);
        report.bytes_moved += patch->bytes();
        ++report.patch_hits;
        ++counters.patch_hits;
      } else {
        action = StepAction::kForm;  // evicted from the store between plan and apply
      }
    }
    if (action == StepAction::kLoadConditioned) {
      std::optional<runtime::Content> stored = core.get_conditioned(s.patch_key);
      if (stored.has_value()) {
        content = *stored;
        report.bytes_moved += runtime::content_bytes(content);
        ++report.patch_hits;
        ++counters.patch_hits;
      } else {
        action = StepAction::kReprefill;
      }
    }
    switch (action) {
      case StepAction::kCanonical:
      case StepAction::kBlind:
        content = canonical;
        break;
      case StepAction::kForm: {
        const runtime::ForwardInput in = core.input_for(*e.chunk, position);
        content = forward_in_context(core, in, b);
        report.forward_tokens += static_cast<double>(e.length);
        if (canonical.empty()) canonical = core.canonical(*e.chunk);
        const std::vector<std::string> ctx = b.context_keys();
        const PatchKeys keys = patch_keys(core, policy, *e.chunk, ctx, prefix);
        const runtime::Content delta = runtime::deficit(content, canonical);
        runtime::PatchOptions po;
        po.rank_k = keys.rank_k;
        po.rank_v = keys.rank_v;
        if (policy.deep_only) po.first_layer = runtime::choose_first_layer(delta, policy.deep_energy);
        const runtime::Patch patch = runtime::form_patch(core.model(), delta, po);
        std::vector<std::string> store_keys = s.store_keys;
        if (store_keys.empty()) store_keys.push_back(keys.exact);
        for (const std::string& k : store_keys) {
          PatchRecord rec;
          rec.key = k;
          rec.context = ctx;
          rec.variant = keys.variant;
          rec.exact = s.exact && keys.full_rank && k == keys.exact;
          core.put_patch(patch, e.key, rec);
        }
        ++report.patches_formed;
        ++counters.patches_formed;
        break;
      }
      case StepAction::kReprefill: {
        const runtime::ForwardInput in = core.input_for(*e.chunk, position);
        content = forward_in_context(core, in, b);
        report.forward_tokens += static_cast<double>(e.length);
        for (const std::string& k : s.store_keys) {
          PatchRecord rec;
          rec.key = k;
          rec.context = b.context_keys();
          rec.variant = "conditioned";
          rec.conditioned = true;
          rec.exact = s.exact;
          core.put_conditioned(content, e.key, rec);
        }
        break;
      }
      case StepAction::kRecompute: {
        const runtime::ForwardInput in = core.input_for(*e.chunk, position);
        const int64_t n = e.length;
        const int64_t count =
            policy.on_miss == MissAction::kFirstK
                ? std::min(policy.first_k, n)
                : std::min<int64_t>(n, static_cast<int64_t>(std::ceil(policy.recompute_ratio * static_cast<double>(n) - 1e-9)));
        if (count == 0 || b.entries.empty()) {
          content = canonical;
          break;
        }
        c10::InferenceMode guard;
        const runtime::PastKV past = b.past();
        double probe = 0;
        const at::Tensor idx = policy.on_miss == MissAction::kFirstK
                                   ? at::arange(count, at::kLong)
                                   : runtime::cacheblend_select(core.model(), in, past, canonical, count, &probe);
        content = runtime::recompute_tokens(core.model(), in, past, canonical, idx);
        report.forward_tokens += static_cast<double>(count) + probe;
        break;
      }
      case StepAction::kPrefillTurn: {
        const runtime::ForwardInput in = core.input_for_tokens(e.turn_tokens, position);
        content = forward_in_context(core, in, b);
        report.forward_tokens += static_cast<double>(e.length);
        break;
      }
      case StepAction::kApplyPatch:
      case StepAction::kLoadConditioned:
        break;  // content set above
      case StepAction::kKeep:
      case StepAction::kEvict:
        ORBIT_FAIL("apply: unexpected step " << step_action_name(action));
    }

    e.version = core.next_content_version();
    e.formed_on = b.context();
    e.exact_when_formed = s.exact && action == s.action;
    e.formed_by = action;
    e.match = action == StepAction::kApplyPatch ? s.match : PatchMatch::kNone;
    e.patch_key = !s.patch_key.empty() ? s.patch_key : (s.store_keys.empty() ? std::string() : s.store_keys.front());
    formed.push_back({e.id, action != StepAction::kCanonical && action != StepAction::kBlind, b.context_ids()});
    {
      std::lock_guard<std::mutex> lock(core.pool_mutex());
      e.kv = std::make_unique<runtime::PagedSequence>(core.pool(), config);
      const int64_t rows = config.position_rows();
      at::Tensor placeholder = rows == 1 ? at::zeros({e.length}, at::kLong) : at::zeros({rows, e.length}, at::kLong);
      Status st = e.kv->append(content, placeholder);
      if (!st.is_ok()) {
        e.kv.reset();
        std::ostringstream why;
        why << operation_name(plan.op) << " refused: the KV pool is full (" << core.pool().num_free() << " of "
            << core.pool().num_pages() << " pages free; instance " << e.id << " needs "
            << state.pages_for(e.length) << "); evict, slide or close windows";
        return Status::out_of_capacity(why.str());
      }
    }
    b.entries.push_back(std::move(e));
    b.contents.push_back(std::move(content));
    b.positions.push_back(pos);
    b.next_position += b.entries.back().extent;
  }

  // Commit: the graph, the evicted set, the entries.
  for (InstanceId id : evicted) {
    const Entry& old = state.entries[static_cast<std::size_t>(index.at(id))];
    state.graph.remove_instance(id);
    if (!old.is_turn) state.evicted[old.key] = id;
    report.removed.push_back(id);
  }
  for (const Entry& e : b.entries) {
    if (index.count(e.id) > 0) continue;
    report.added.push_back(e.id);
    auto ev = state.evicted.find(e.key);
    if (!e.is_turn && ev != state.evicted.end() && ev->second == e.id) {
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
      state.graph.set_conditioning(f.id, core.next_content_version(), f.on);
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
  state.forward_tokens += report.forward_tokens;
  counters.forward_tokens = report.forward_tokens - encode_tokens;
  core.count(counters);
  report.device_bytes = state.device_bytes();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace orbit::detail
