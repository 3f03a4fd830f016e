// The serving actions' apply halves (actions.h): one function each, and apply_action, which dispatches on
// the step's ServeActionId. Their planning halves are in actions_plan.cpp.
#include "apply/actions.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/runtime/repair.h"
#include "window/window_ops.h"

namespace orbit::detail {

// ---- the window being built ------------------------------------------------------------------------

WindowBuild::~WindowBuild() { core.pool().clear(entries); }

runtime::PastKV WindowBuild::past() {
  positions.resize(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (contents[i].empty()) contents[i] = entry_content(core, entries[i]);
    if (!positions[i].defined()) positions[i] = core.registry().positions_for(entries[i].chunk, entries[i].length, starts[i]);
  }
  return concat_past(core.config().num_layers, contents, positions);
}

std::vector<ContextItem> WindowBuild::context() const {
  std::vector<ContextItem> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) out.push_back({e.key, e.version});
  return out;
}

std::vector<InstanceId> WindowBuild::context_ids() const {
  std::vector<InstanceId> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) out.push_back(e.id);
  return out;
}

std::vector<std::string> WindowBuild::context_keys() const {
  std::vector<std::string> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) out.push_back(e.key);
  return out;
}

// ---- shared by the apply functions -----------------------------------------------------------------------

namespace {

// The step's forward of the chunk in context (critical path).
runtime::Content forward_in_context(EngineCore& core, const runtime::ForwardInput& input, WindowBuild& b) {
  c10::InferenceMode guard;
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  if (b.entries.empty()) return core.model().forward(input, nullptr, fo).content;
  const runtime::PastKV past = b.past();
  return core.model().forward(input, &past, fo).content;
}

// The instance's token ids (a turn's, a token chunk's), or null (an embedding chunk).
const std::vector<int64_t>* instance_tokens(const ApplyInput& in) {
  if (in.chunk == nullptr) return in.turn_tokens;
  return in.chunk->ref.kind == ChunkKind::kTokens ? &in.chunk->tokens : nullptr;
}

// Appends rows of KV (content at `positions`) to a past.
void append_rows(runtime::PastKV& past, const runtime::Content& rows, const at::Tensor& positions) {
  if (past.length() == 0) {
    past.layers = rows;
    past.positions = positions;
    return;
  }
  for (std::size_t l = 0; l < past.layers.size(); ++l) {
    past.layers[l].k = at::cat({past.layers[l].k, rows[l].k}, 0);
    past.layers[l].v = at::cat({past.layers[l].v, rows[l].v}, 0);
  }
  past.positions = at::cat({past.positions, positions}, -1);
}

// The step's forward of the instance in context: its leading step.reused_tokens rows loaded from the KV
// stored under step.reuse_from when the step says so and that KV is there, the rest forwarded. Adds the
// tokens forwarded to out.forward_tokens.
runtime::Content forward_reusing(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  const std::vector<int64_t>* tokens = instance_tokens(in);
  const int64_t n = in.length, k = step.reused_tokens;
  std::optional<runtime::Content> stored;
  if (k > 0 && tokens != nullptr && k <= n) stored = in.core.kv().get_conditioned(step.reuse_from);
  if (!stored.has_value() || stored->empty() || stored->front().k.size(0) < k) {
    out.forward_tokens += static_cast<double>(n);
    const runtime::ForwardInput input = in.chunk != nullptr ? in.core.registry().input_for(*in.chunk, in.position)
                                                            : in.core.registry().input_for_tokens(*tokens, in.position);
    return forward_in_context(in.core, input, in.build);
  }
  c10::InferenceMode guard;
  runtime::Content head(stored->size());
  for (std::size_t l = 0; l < head.size(); ++l)
    head[l] = {(*stored)[l].k.narrow(0, 0, k), (*stored)[l].v.narrow(0, 0, k)};
  out.bytes_moved += runtime::content_bytes(head);
  ++out.patch_hits;
  out.approximate_reuse = step.match == PatchMatch::kStale;
  if (k == n) return head;
  runtime::PastKV past = in.build.entries.empty() ? runtime::PastKV{} : in.build.past();
  append_rows(past, head, in.core.registry().positions_for(nullptr, k, in.position));
  const std::vector<int64_t> rest(tokens->begin() + k, tokens->end());
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  const runtime::Content tail =
      in.core.model().forward(in.core.registry().input_for_tokens(rest, in.position + k), &past, fo).content;
  out.forward_tokens += static_cast<double>(n - k);
  runtime::Content all(head.size());
  for (std::size_t l = 0; l < all.size(); ++l) {
    all[l] = {at::cat({head[l].k, tail[l].k}, 0), at::cat({head[l].v, tail[l].v}, 0)};
  }
  return all;
}

runtime::Content canonical_for(ApplyInput& in, ApplyOutput& out) {
  bool encoded = false;
  int64_t bytes = 0;
  runtime::Content c = in.core.kv().canonical(*in.chunk, &encoded, &bytes);
  if (encoded) {
    ++out.canonicals_encoded;
    out.forward_tokens += static_cast<double>(in.length);
    out.encode_tokens += static_cast<double>(in.length);
  }
  out.bytes_moved += bytes;
  return c;
}

void apply_keep(ApplyInput& in, const PlanStep&, ApplyOutput& out) {
  ORBIT_CHECK(in.old != nullptr, "apply: plan keeps an instance this window does not hold");
  out.keep_pages = true;
  out.done_as = StepAction::kKeep;
}

void apply_canonical(ApplyInput& in, const PlanStep&, ApplyOutput& out) {
  out.content = canonical_for(in, out);
  out.done_as = StepAction::kCanonical;
}

void apply_stored_patch(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  const runtime::Content canonical = canonical_for(in, out);
  std::optional<runtime::Patch> patch = in.core.kv().get_patch(step.patch_key);
  if (patch.has_value()) {
    in.core.kv().note_read_patch(in.chunk->ref.key, step.patch_key, *patch);
    out.content = runtime::apply_patch(in.core.model(), canonical, *patch);
    out.bytes_moved += patch->bytes();
    ++out.patch_hits;
    out.done_as = StepAction::kApplyPatch;
  } else {  // dropped from the store between plan and apply: prefill in context instead
    out.content = forward_in_context(in.core, in.core.registry().input_for(*in.chunk, in.position), in.build);
    out.forward_tokens += static_cast<double>(in.length);
    out.done_as = StepAction::kReprefill;
  }
  out.conditioned = true;
}

void apply_load_conditioned(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  std::optional<runtime::Content> stored = in.core.kv().get_conditioned(step.patch_key);
  if (stored.has_value()) {
    out.content = *stored;
    out.bytes_moved += runtime::content_bytes(out.content);
    ++out.patch_hits;
    out.done_as = StepAction::kLoadConditioned;
  } else {
    out.content = forward_in_context(in.core, in.core.registry().input_for(*in.chunk, in.position), in.build);
    out.forward_tokens += static_cast<double>(in.length);
    out.done_as = StepAction::kReprefill;
  }
  out.conditioned = true;
}

// The instance forwarded in context behind what the build holds (a turn's tokens, a chunk's input).
runtime::Content forward_instance(ApplyInput& in) {
  const runtime::ForwardInput input = in.chunk != nullptr ? in.core.registry().input_for(*in.chunk, in.position)
                                                          : in.core.registry().input_for_tokens(*in.turn_tokens, in.position);
  return forward_in_context(in.core, input, in.build);
}

void apply_reuse(ApplyInput& in, const PlanStep&, ApplyOutput& out) {
  // The key of the window as built (the plan's, unless an earlier step fell back to another action).
  std::optional<runtime::Content> stored = in.core.kv().get_conditioned(reuse_key(*in.key, in.build.chain));
  out.conditioned = true;
  if (stored.has_value() && !stored->empty() && stored->front().k.size(0) == in.length) {
    out.content = std::move(*stored);
    out.bytes_moved += runtime::content_bytes(out.content);
    ++out.patch_hits;
    out.done_as = StepAction::kLoadConditioned;
    return;
  }
  out.content = forward_instance(in);
  out.forward_tokens += static_cast<double>(in.length);
  out.done_as = in.chunk != nullptr ? StepAction::kReprefill : StepAction::kPrefillTurn;
}

void apply_form(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  out.content = forward_reusing(in, step, out);
  PatchJob job;
  job.chunk = in.chunk;
  job.conditioned = out.content;
  job.context = in.build.context_keys();
  job.store_keys = step.store_keys;
  job.variant = step.variant;
  job.rank_k = step.rank_k;
  job.rank_v = step.rank_v;
  job.deep_only = step.deep_only;
  job.deep_energy = step.deep_energy;
  job.full_rank = !step.deep_only &&
                  step.rank_k == std::min<int64_t>(in.length, in.core.config().content_k_shape().width()) &&
                  step.rank_v == std::min<int64_t>(in.length, in.core.config().content_v_shape().width());
  job.exact = step.exact;
  in.core.jobs().queue_patch(std::move(job));
  ++out.background_jobs;
  out.conditioned = true;
  out.done_as = StepAction::kForm;
}

void apply_prefill(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  out.content = forward_reusing(in, step, out);
  for (const std::string& k : step.store_keys) {
    PatchRecord rec;
    rec.key = k;
    rec.context = in.build.context_keys();
    rec.variant = "conditioned";
    rec.conditioned = true;
    rec.exact = step.exact;
    in.core.kv().put_conditioned(out.content, in.chunk->ref.key, rec);
  }
  out.conditioned = true;
  out.done_as = StepAction::kReprefill;
}

void apply_blind(ApplyInput& in, const PlanStep&, ApplyOutput& out) {
  out.content = canonical_for(in, out);
  out.done_as = StepAction::kBlind;
}

void apply_recompute(ApplyInput& in, const PlanStep& step, ApplyOutput& out, bool selective) {
  const runtime::Content canonical = canonical_for(in, out);
  out.done_as = StepAction::kRecompute;
  out.conditioned = true;
  const int64_t count = step.recompute_tokens;
  if (count == 0 || in.build.entries.empty()) {
    out.content = canonical;
    return;
  }
  c10::InferenceMode guard;
  const runtime::ForwardInput input = in.core.registry().input_for(*in.chunk, in.position);
  const runtime::PastKV past = in.build.past();
  double probe = 0;
  const at::Tensor idx = selective ? runtime::cacheblend_select(in.core.model(), input, past, canonical, count, &probe)
                                   : at::arange(count, at::kLong);
  out.content = runtime::recompute_tokens(in.core.model(), input, past, canonical, idx);
  out.forward_tokens += static_cast<double>(count) + probe;
}

void apply_prefill_turn(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  out.content = forward_reusing(in, step, out);
  out.conditioned = true;
  out.done_as = StepAction::kPrefillTurn;
  if (step.measure_sensitivity && in.key != nullptr) {
    in.core.jobs().queue_turn_sensitivity(*in.key, *in.turn_tokens, out.content);
    ++out.background_jobs;
  }
}

}  // namespace

void apply_action(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  switch (step.how) {
    case ServeActionId::kKeep: return apply_keep(in, step, out);
    case ServeActionId::kCanonical: return apply_canonical(in, step, out);
    case ServeActionId::kStoredPatch: return apply_stored_patch(in, step, out);
    case ServeActionId::kLoadConditioned: return apply_load_conditioned(in, step, out);
    case ServeActionId::kReuse: return apply_reuse(in, step, out);
    case ServeActionId::kBlind: return apply_blind(in, step, out);
    case ServeActionId::kFirstK: return apply_recompute(in, step, out, false);
    case ServeActionId::kCacheBlend: return apply_recompute(in, step, out, true);
    case ServeActionId::kForm: return apply_form(in, step, out);
    case ServeActionId::kPrefill: return apply_prefill(in, step, out);
    case ServeActionId::kPrefillTurn: return apply_prefill_turn(in, step, out);
    case ServeActionId::kEvict: break;
  }
  ORBIT_FAIL("apply: the plan asks '" << serve_action_name(step.how) << "' to make an instance's KV");
}

}  // namespace orbit::detail
