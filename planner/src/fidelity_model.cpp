#include "orbit/planner/fidelity_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "orbit/common/error.h"

namespace orbit::planner {

const char* loss_name(Loss kind) noexcept {
  switch (kind) {
    case Loss::kKeep: return "keep";
    case Loss::kBlind: return "blind";
    case Loss::kOrbit: return "orbit";
    case Loss::kStale: return "stale";
    case Loss::kTruncated: return "truncated";
    case Loss::kFirstK: return "first-k";
    case Loss::kCacheBlend: return "cacheblend";
  }
  return "?";
}

FidelityModel::FidelityModel() {
  // KL per unit of f·s, erring high, from replays of the bundled stories260K on its text traces.
  coef_ = {0.05, 0.3, 0.02, 0.1, 0.02, 0.3, 0.3};
  fitted_.fill(false);
}

FidelityModel FidelityModel::fit(const std::vector<FidelitySample>& samples) {
  FidelityModel m;
  std::array<double, kLossKinds> xy{}, xx{};
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const FidelitySample& s = samples[i];
    ORBIT_CHECK(std::isfinite(s.feature) && std::isfinite(s.kl) && s.feature >= 0 && s.kl >= 0,
                "FidelityModel::fit: sample " << i << " (" << loss_name(s.kind) << ") has feature " << s.feature
                                              << " and kl " << s.kl << "; both must be finite and >= 0");
    const auto k = static_cast<std::size_t>(s.kind);
    xy[k] += s.feature * s.kl;
    xx[k] += s.feature * s.feature;
  }
  for (std::size_t k = 0; k < xy.size(); ++k) {
    if (xx[k] > 0) {
      m.coef_[k] = xy[k] / xx[k];
      m.fitted_[k] = true;
    }
  }
  return m;
}

double FidelityModel::predict(Loss kind, double feature, double share) const {
  const double f = std::clamp(feature, 0.0, 1.0);
  const double s = std::clamp(share, 0.0, 1.0);
  return coefficient(kind) * f * s;
}

std::string FidelityModel::describe() const {
  std::ostringstream out;
  for (int k = 0; k < kLossKinds; ++k) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2e", coef_[static_cast<std::size_t>(k)]);
    out << (k ? ", " : "") << loss_name(static_cast<Loss>(k)) << " " << buf
        << (fitted_[static_cast<std::size_t>(k)] ? " (fitted)" : " (default)");
  }
  return out.str();
}

}  // namespace orbit::planner
