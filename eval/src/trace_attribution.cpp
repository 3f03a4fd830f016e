// Per-instance loss attribution in a replay (ReplayOptions::attribute): how each attributed instance was
// served, and the fidelity model's agreement with the measurements per way of serving.
#include <algorithm>
#include <cmath>
#include <map>

#include "orbit/trace.h"
#include "trace_internal.h"

namespace orbit {

std::string served_as(const InstanceLoss& loss) {
  if (loss.context_changed) return "kept over a context change";
  std::string name = step_action_name(loss.formed_by);
  if (loss.match != PatchMatch::kNone) name += std::string("/") + patch_match_name(loss.match);
  return name;
}

namespace trace_detail {

std::vector<LossAgreement> loss_agreement(const std::vector<StepResult>& steps) {
  struct Sums {
    LossAgreement a;
    double log_sum = 0, abs_log_sum = 0;
  };
  std::map<std::string, Sums> by;
  for (const StepResult& s : steps) {
    for (const InstanceLoss& l : s.losses) {
      const std::string name = served_as(l);
      Sums& g = by[name];
      g.a.served_as = name;
      ++g.a.instances;
      g.a.mean_measured_kl += l.measured_kl;
      g.a.mean_predicted_kl += l.predicted_kl;
      if (l.measured_kl > kKlFloor && l.predicted_kl > kKlFloor) {
        const double r = std::log(l.predicted_kl / l.measured_kl);
        g.log_sum += r;
        g.abs_log_sum += std::abs(r);
        ++g.a.compared;
      }
    }
  }
  std::vector<LossAgreement> out;
  for (auto& [name, g] : by) {
    g.a.mean_measured_kl /= static_cast<double>(g.a.instances);
    g.a.mean_predicted_kl /= static_cast<double>(g.a.instances);
    if (g.a.compared > 0) {
      g.a.bias = std::exp(g.log_sum / static_cast<double>(g.a.compared));
      g.a.spread = std::exp(g.abs_log_sum / static_cast<double>(g.a.compared));
    }
    out.push_back(g.a);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const LossAgreement& x, const LossAgreement& y) { return x.instances > y.instances; });
  return out;
}

}  // namespace trace_detail
}  // namespace orbit
