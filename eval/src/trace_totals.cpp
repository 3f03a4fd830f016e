// A policy's totals over its replayed steps, and the fastest of several timing rounds
// (trace_replay_parts.h).
#include <algorithm>
#include <cmath>

#include "orbit/common/error.h"
#include "trace_internal.h"
#include "trace_replay_parts.h"
#include "trace_yardstick.h"

namespace orbit::trace_detail {

void total_policy(PolicyReplay& out) {
  out.totals = PolicyTotals{};
  PolicyTotals& t = out.totals;
  int64_t predicted_steps = 0, planned_steps = 0;
  double planned_kl = 0;  // over every step with a plan, measured or not
  double log_sum = 0, abs_log_sum = 0;
  for (const StepResult& s : out.steps) {
    t.forward_tokens += s.forward_tokens;
    t.critical_forward_tokens += s.critical_forward_tokens;
    t.query_forward_tokens += s.query_forward_tokens;
    t.prefix_cache_tokens += s.prefix_cache_tokens;
    add_yardstick_totals(s, &t);
    t.background_forward_tokens += s.background_forward_tokens;
    t.heal_forward_tokens += s.heal_forward_tokens;
    t.prepare_forward_tokens += s.prepare_forward_tokens;
    t.check_forward_tokens += s.check_forward_tokens;
    t.fidelity_checks += s.check_kl >= 0 ? 1 : 0;
    t.fidelity_correction = s.fidelity_correction;
    t.critical_seconds += s.critical_seconds;
    t.background_seconds += s.background_seconds;
    if (s.fidelity && s.predicted_kl >= 0) {
      t.mean_predicted_kl += s.predicted_kl;
      ++predicted_steps;
    }
    if (s.predicted_kl >= 0) {
      planned_kl += s.predicted_kl;
      ++planned_steps;
    }
    t.full_prefill_tokens += s.full_prefill_tokens;
    t.decode_tokens += s.decode_tokens;
    t.seconds += s.seconds;
    t.bytes_moved += s.bytes_moved;
    t.peak_device_bytes = std::max(t.peak_device_bytes, s.peak_device_bytes);
    t.patches_formed += s.patches_formed;
    t.patch_hits += s.patch_hits;
    t.refused += s.status == "ok" ? 0 : 1;
    t.probe_unfit_steps += s.probe_unfit ? 1 : 0;
    if (s.fidelity && s.predicted_kl > kKlFloor && s.fidelity->kl > kKlFloor) {
      const double l = std::log(s.predicted_kl / s.fidelity->kl);
      log_sum += l;
      abs_log_sum += std::abs(l);
      ++t.predicted_steps;
    }
    if (s.fidelity) {
      ++t.fidelity_steps;
      t.mean_kl += s.fidelity->kl;
      t.max_kl = std::max(t.max_kl, s.fidelity->kl);
      t.mean_top1 += s.fidelity->top1;
      t.top1_rows += s.fidelity->rows;
      t.top1_misses += s.fidelity->top1_misses;
      t.near_tie_rows += s.fidelity->near_tie_rows;
      t.near_tie_misses += s.fidelity->near_tie_misses;
    }
  }
  if (predicted_steps > 0) {
    t.mean_predicted_kl /= static_cast<double>(predicted_steps);
    t.mean_predicted_steps = predicted_steps;
  } else if (t.fidelity_steps == 0 && planned_steps > 0) {
    t.mean_predicted_kl = planned_kl / static_cast<double>(planned_steps);
    t.mean_predicted_steps = planned_steps;
  }
  if (t.predicted_steps > 0) {
    t.kl_prediction_bias = std::exp(log_sum / static_cast<double>(t.predicted_steps));
    t.kl_prediction_spread = std::exp(abs_log_sum / static_cast<double>(t.predicted_steps));
  }
  if (t.fidelity_steps > 0) {
    t.mean_kl /= static_cast<double>(t.fidelity_steps);
    t.mean_top1 /= static_cast<double>(t.fidelity_steps);
  }
  t.loss_agreement = loss_agreement(out.steps);
}

void keep_fastest(PolicyReplay& into, const PolicyReplay& again, int round) {
  ORBIT_CHECK(again.steps.size() == into.steps.size(),
              "replay: round " << round << " of policy " << into.policy << " ran " << again.steps.size()
                               << " steps, the first ran " << into.steps.size());
  for (std::size_t i = 0; i < into.steps.size(); ++i) {
    StepResult& s = into.steps[i];
    const StepResult& r = again.steps[i];
    ORBIT_CHECK(r.critical_forward_tokens == s.critical_forward_tokens &&
                    r.background_forward_tokens == s.background_forward_tokens,
                "replay: round " << round << " of policy " << into.policy << " computed " << r.critical_forward_tokens
                                 << " + " << r.background_forward_tokens << " forward tokens at step " << i
                                 << ", the first round " << s.critical_forward_tokens << " + "
                                 << s.background_forward_tokens << " (the replay is not deterministic)");
    s.critical_seconds = std::min(s.critical_seconds, r.critical_seconds);
    s.background_seconds = std::min(s.background_seconds, r.background_seconds);
    s.seconds = s.critical_seconds + s.background_seconds;
  }
  total_policy(into);
}

}  // namespace orbit::trace_detail
