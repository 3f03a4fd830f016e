// The serving actions' apply halves (actions.h): one function each, and apply_action, which dispatches on
// the step's ServeActionId. Their planning halves are in plan/actions_plan.cpp. Torch-free: every read,
// forward and store goes through the ApplyEnv.
#include "apply/actions.h"

#include <algorithm>

#include "orbit/common/error.h"

namespace orbit::detail {

// ---- shared by the apply functions -----------------------------------------------------------------------

namespace {

// The step's forward of the instance in context: its leading step.reused_tokens rows loaded from the KV
// stored under step.reuse_from when the step says so and that KV is there, the rest forwarded. Adds the
// tokens forwarded to out.forward_tokens.
Kv forward_reusing(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  const ApplyTarget& t = in.target;
  const int64_t n = t.length, k = step.reused_tokens;
  std::optional<Kv> stored;
  if (k > 0 && t.tokens() != nullptr && k <= n) stored = in.env.conditioned(step.reuse_from);
  if (!stored.has_value() || *stored == nullptr || (*stored)->rows() < k) {
    out.forward_tokens += static_cast<double>(n);
    return in.env.forward(t);
  }
  const Kv head = in.env.leading_rows(*stored, k);
  out.bytes_moved += head->bytes();
  ++out.patch_hits;
  out.approximate_reuse = step.match == PatchMatch::kStale || step.reused_formed_window > 0;
  if (k == n) return head;
  out.forward_tokens += static_cast<double>(n - k);
  return in.env.forward_rest(t, head);
}

// The chunk's canonical, read or encoded; an encode counts only the tokens it forwarded (its leading rows
// may come from KV stored behind nothing, KvStore::canonical).
Kv canonical_for(ApplyInput& in, ApplyOutput& out) {
  CanonicalRead c = in.env.canonical(*in.target.chunk);
  if (c.encoded) {
    ++out.canonicals_encoded;
    out.forward_tokens += static_cast<double>(c.forwarded_tokens);
    out.encode_tokens += static_cast<double>(c.forwarded_tokens);
  }
  out.bytes_moved += c.bytes_read;
  return std::move(c.kv);
}

void apply_keep(ApplyInput& in, const PlanStep&, ApplyOutput& out) {
  ORBIT_CHECK(in.target.has_old, "apply: plan keeps an instance this window does not hold");
  out.keep_pages = true;
  out.done_as = StepAction::kKeep;
}

void apply_canonical(ApplyInput& in, const PlanStep&, ApplyOutput& out) {
  out.content = canonical_for(in, out);
  out.done_as = StepAction::kCanonical;
}

// What the plan counted on is gone (dropped from the store between plan and apply): a prefill in context
// instead.
void fall_back_to_prefill(ApplyInput& in, ApplyOutput& out) {
  out.content = in.env.forward(in.target);
  out.forward_tokens += static_cast<double>(in.target.length);
  out.done_as = StepAction::kReprefill;
}

void apply_stored_patch(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  const Kv canonical = canonical_for(in, out);
  int64_t patch_bytes = 0;
  std::optional<Kv> patched = in.env.patched(*in.target.chunk, canonical, step.patch_key, &patch_bytes);
  if (patched.has_value()) {
    out.content = std::move(*patched);
    out.bytes_moved += patch_bytes;
    ++out.patch_hits;
    out.done_as = StepAction::kApplyPatch;
  } else {
    fall_back_to_prefill(in, out);
  }
  out.conditioned = true;
}

void apply_load_conditioned(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  std::optional<Kv> stored = in.env.conditioned(step.patch_key);
  if (stored.has_value()) {
    out.content = std::move(*stored);
    out.bytes_moved += out.content->bytes();
    ++out.patch_hits;
    out.done_as = StepAction::kLoadConditioned;
  } else {
    fall_back_to_prefill(in, out);
  }
  out.conditioned = true;
}

void apply_reuse(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  // The key of the window as built (the plan's, unless an earlier step fell back to another action).
  std::optional<Kv> stored = in.env.conditioned(reuse_key(in.target.key, in.env.chain()));
  out.conditioned = true;
  if (stored.has_value() && *stored != nullptr && (*stored)->rows() == in.target.length) {
    out.content = std::move(*stored);
    out.bytes_moved += out.content->bytes();
    ++out.patch_hits;
    out.done_as = StepAction::kLoadConditioned;
  } else {
    out.content = in.env.forward(in.target);
    out.forward_tokens += static_cast<double>(in.target.length);
    out.done_as = in.target.chunk != nullptr ? StepAction::kReprefill : StepAction::kPrefillTurn;
  }
  if (step.measure_sensitivity && in.target.turn_tokens != nullptr) {
    in.env.queue_turn_sensitivity(in.target.key, *in.target.turn_tokens, out.content);
    ++out.background_jobs;
  }
}

void apply_form(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  out.content = forward_reusing(in, step, out);
  const ModelLimits model = in.env.model();
  const int64_t n = in.target.length;
  FormJob job;
  job.chunk = in.target.chunk;
  job.conditioned = out.content;
  PatchForm& form = job.form;
  form.context = in.env.context_keys();
  form.store_keys = step.store_keys;
  form.variant = step.variant;
  form.rank_k = step.rank_k;
  form.rank_v = step.rank_v;
  form.deep_only = step.deep_only;
  form.deep_energy = step.deep_energy;
  form.full_rank =
      !step.deep_only && step.rank_k == std::min(n, model.k_width) && step.rank_v == std::min(n, model.v_width);
  form.exact = step.exact;
  in.env.queue_form(std::move(job));
  ++out.background_jobs;
  ++out.patches_queued;
  out.conditioned = true;
  out.done_as = StepAction::kForm;
}

void apply_prefill(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  out.content = forward_reusing(in, step, out);
  for (const std::string& k : step.store_keys) {
    PatchRecord rec;
    rec.key = k;
    rec.context = in.env.context_keys();
    rec.variant = "conditioned";
    rec.conditioned = true;
    rec.exact = step.exact;
    in.env.put_conditioned(out.content, in.target.chunk->ref.key, rec);
  }
  out.conditioned = true;
  out.done_as = StepAction::kReprefill;
}

void apply_blind(ApplyInput& in, const PlanStep&, ApplyOutput& out) {
  out.content = canonical_for(in, out);
  out.done_as = StepAction::kBlind;
}

void apply_recompute(ApplyInput& in, const PlanStep& step, ApplyOutput& out, bool selective) {
  const Kv canonical = canonical_for(in, out);
  out.done_as = StepAction::kRecompute;
  out.conditioned = true;
  const int64_t count = step.recompute_tokens;
  if (count == 0 || in.env.context_empty()) {
    out.content = canonical;
    return;
  }
  double probe = 0;
  out.content = in.env.recompute(in.target, canonical, count, selective, &probe);
  out.forward_tokens += static_cast<double>(count) + probe;
}

void apply_prefill_turn(ApplyInput& in, const PlanStep& step, ApplyOutput& out) {
  out.content = forward_reusing(in, step, out);
  out.conditioned = true;
  out.done_as = StepAction::kPrefillTurn;
  if (step.measure_sensitivity && in.target.turn_tokens != nullptr) {
    in.env.queue_turn_sensitivity(in.target.key, *in.target.turn_tokens, out.content);
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
