// PolicyRun (trace_policy_run.h): a step's accounting. Plans applied with their cost and demands, deferred
// repairs flushed before a read, the counters split into critical and background, the yardsticks, the
// fidelity probe, and the agent's idle time after a model call.
#include <algorithm>

#include "orbit/common/clock.h"
#include "trace_policy_run.h"

namespace orbit::trace_detail {

void PolicyRun::apply(const Plan& plan, std::size_t index, StepResult* r) {
  if (options_.explain) r->plan += plan.describe();
  const Result<ApplyReport> applied = current().apply(plan);
  if (!applied.is_ok()) {
    r->status = applied.status().to_string();
    return;
  }
  const ApplyReport& a = applied.value();
  r->predicted_kl = plan.predicted_kl;
  r->patches_formed += a.patches_formed;
  r->patch_hits += a.patch_hits;
  r->canonicals_encoded += a.canonicals_encoded;
  r->bytes_moved += a.bytes_moved;
  if (forms_patches(policy_)) log_demands(plan, policy_, info_, index, &demands_);
}

void PolicyRun::flush_deferred(std::size_t index, StepResult* r) {
  for (const InstanceInfo& x : current().instances()) {
    if (x.deferred) {
      apply(current().plan_flush(), index, r);
      return;
    }
  }
}

void PolicyRun::use_idle_time(StepResult* r) {
  const EngineStats before = engine_->stats();
  const auto t0 = Clock::now();
  const IdleReport idle = current().idle();
  engine_->run_background();
  const EngineStats after = engine_->stats();
  r->heal_forward_tokens = idle.heal_forward_tokens;
  r->prepare_forward_tokens = idle.prepare_forward_tokens;
  r->check_forward_tokens = idle.check_forward_tokens;
  r->check_kl = idle.measured_kl;
  r->background_forward_tokens += after.background_forward_tokens - before.background_forward_tokens;
  r->forward_tokens += after.forward_tokens - before.forward_tokens;
  r->background_seconds += seconds_since(t0);
  r->seconds = r->critical_seconds + r->background_seconds;
  r->patches_formed += after.patches_formed - before.patches_formed;
}

void PolicyRun::account(const EngineStats& before, Clock::time_point t0, StepResult* r) {
  r->critical_seconds = seconds_since(t0);
  const EngineStats mid = engine_->stats();
  const auto t1 = Clock::now();
  engine_->run_background();
  r->background_seconds = seconds_since(t1);
  const EngineStats after = engine_->stats();
  r->seconds = r->critical_seconds + r->background_seconds;
  // The engine counts what plans forward; a read's query forwards are the window's, counted here.
  r->critical_forward_tokens = mid.critical_forward_tokens - before.critical_forward_tokens + r->query_forward_tokens;
  r->prefix_cache_tokens = mid.prefix_cache_tokens - before.prefix_cache_tokens;
  r->background_forward_tokens = after.background_forward_tokens - mid.background_forward_tokens;
  r->forward_tokens = after.forward_tokens - before.forward_tokens + r->query_forward_tokens;
  r->patches_formed = after.patches_formed - before.patches_formed;
  Window& w = current();
  r->branch = current_;
  r->window_tokens = w.tokens();
  r->window_bytes = w.stats().device_bytes;
  r->device_bytes = engine_->stats().pool_bytes_used;
  peak_ = std::max(peak_, r->device_bytes);
  r->peak_device_bytes = peak_;
}

StepResult PolicyRun::step(std::size_t i) {
  const TraceStep& s = trace_.steps[i];
  StepResult r;
  r.index = i;
  r.op = s.op;
  const std::vector<int64_t>& query = resolved_.step_tokens[i].empty() ? resolved_.probe : resolved_.step_tokens[i];
  const EngineStats before = engine_->stats();
  yardstick_.before(s, current());
  const auto t0 = Clock::now();
  const bool mutated = run_op(s, i, query, &r);
  account(before, t0, &r);
  Window& w = current();
  if (mutated && r.status == "ok") r.full_prefill_tokens = static_cast<double>(r.window_tokens);
  // A model call's query: forwarded whole without a cache (the window was re-prefilled at the step that
  // changed it).
  if (r.status == "ok" && (s.op == TraceOp::kGenerate || s.op == TraceOp::kDisposable)) {
    r.full_prefill_tokens += static_cast<double>(query.size());
  }
  for (const InstanceInfo& x : w.instances()) r.deferred += x.deferred ? 1 : 0;
  const auto kept = s.append ? transcript_->find(i) : transcript_->end();
  yardstick_.after(s, w, query, kept != transcript_->end() ? kept->second : r.generated, &r);
  const bool fits = r.window_tokens + static_cast<int64_t>(resolved_.probe.size()) <= info_.max_positions;
  r.probe_unfit = options_.fidelity && r.window_tokens > 0 && !fits;
  if (options_.fidelity && r.window_tokens > 0 && fits && r.deferred == 0) {
    r.fidelity = step_fidelity(w.reference_logits(resolved_.probe, true), w.logits(resolved_.probe, true));
    if (options_.attribute) r.losses = w.loss_by_instance(resolved_.probe);
  }
  if (s.op == TraceOp::kGenerate && r.status == "ok" &&
      (policy_.heal_when_idle || policy_.prepare_recalls > 0 || policy_.prepare_moves > 0)) {
    use_idle_time(&r);
  }
  r.fidelity_correction = engine_->stats().fidelity_correction;
  return r;
}

}  // namespace orbit::trace_detail
