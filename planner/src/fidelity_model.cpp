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
    case Loss::kShortfall: return "shortfall";
    case Loss::kQuantized: return "quantized";
  }
  return "?";
}

double recency_weight(int64_t length, int64_t tokens_to_end) noexcept {
  if (length <= 0 || tokens_to_end <= 0) return 0.0;
  const double w = std::min(1.0, static_cast<double>(length) / static_cast<double>(tokens_to_end));
  return std::pow(w, kRecencyExponent);
}

std::vector<double> add_read_through(const std::vector<double>& weights, const std::vector<int64_t>& lengths,
                                     const std::vector<bool>& fresh, double factor) {
  ORBIT_CHECK(lengths.size() == weights.size() && fresh.size() == weights.size(),
              "add_read_through: weights, lengths and fresh differ in size ("
                  << weights.size() << ", " << lengths.size() << ", " << fresh.size() << ")");
  std::vector<double> out = weights;
  std::vector<double> start(weights.size());
  double at = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    start[i] = at;
    at += static_cast<double>(std::max<int64_t>(lengths[i], 0));
  }
  std::vector<double> share(weights.size());
  for (std::size_t j = 1; j < weights.size(); ++j) {
    // Instances far from the end carry next to no weight to pass on (recency_weight): skip them. Each one
    // passed on costs a pass over what precedes it, so a first sync of a long list (every instance fresh,
    // most of them above this cut-off) is quadratic in its length.
    if (!fresh[j] || !(factor * weights[j] > 1e-9)) continue;
    double total = 0;
    for (std::size_t i = 0; i < j; ++i) {
      share[i] = lengths[i] > 0 ? static_cast<double>(lengths[i]) / (start[j] - start[i]) : 0.0;
      total += share[i];
    }
    if (total <= 0) continue;
    for (std::size_t i = 0; i < j; ++i) out[i] = std::min(1.0, out[i] + factor * weights[j] * share[i] / total);
  }
  return out;
}

namespace {

// A token bigram as one 64-bit unit (ids are vocabulary indices, far below 2^32).
uint64_t bigram(int64_t a, int64_t b) noexcept {
  return (static_cast<uint64_t>(a) << 32) ^ static_cast<uint64_t>(b) ^ (static_cast<uint64_t>(b) >> 32);
}

// Calls f(index into `units`) for each bigram of ids[0, end) found in the sorted `units`.
template <typename F>
void for_each_unit(const std::vector<int64_t>& ids, std::size_t end, const std::vector<uint64_t>& units, F&& f) {
  for (std::size_t k = 1; k < end; ++k) {
    const uint64_t u = bigram(ids[k - 1], ids[k]);
    const auto it = std::lower_bound(units.begin(), units.end(), u);
    if (it != units.end() && *it == u) f(static_cast<std::size_t>(it - units.begin()));
  }
}

}  // namespace

std::vector<double> content_shares(const std::vector<const std::vector<int64_t>*>& tokens,
                                   const std::vector<int64_t>& lengths, int64_t reader_tokens) {
  ORBIT_CHECK(lengths.size() == tokens.size(),
              "content_shares: tokens and lengths differ in size (" << tokens.size() << ", " << lengths.size() << ")");
  ORBIT_CHECK(reader_tokens >= 0, "content_shares: reader_tokens must be >= 0, got " << reader_tokens);
  const std::size_t n = tokens.size();
  std::vector<double> out(n, 0.0);
  // before[i]: how many of instance i's ids precede the reader (the reader takes each instance's last ones).
  std::vector<std::size_t> before(n);
  std::vector<uint64_t> units;
  int64_t need = reader_tokens;
  for (std::size_t i = n; i-- > 0;) {
    const std::size_t size = tokens[i] != nullptr ? tokens[i]->size() : 0;
    const int64_t take = std::min(std::max<int64_t>(lengths[i], 0), std::max<int64_t>(need, 0));
    need -= take;
    const std::size_t in_reader = std::min(size, static_cast<std::size_t>(take));
    before[i] = size - in_reader;
    const std::vector<int64_t>* ids = tokens[i];
    for (std::size_t k = std::max<std::size_t>(before[i], 1); k < size; ++k) {
      units.push_back(bigram((*ids)[k - 1], (*ids)[k]));
    }
  }
  std::sort(units.begin(), units.end());
  units.erase(std::unique(units.begin(), units.end()), units.end());
  if (units.empty()) return out;
  std::vector<double> occ(units.size(), 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (tokens[i] != nullptr) for_each_unit(*tokens[i], before[i], units, [&](std::size_t u) { occ[u] += 1; });
  }
  const double per_unit = 1.0 / static_cast<double>(units.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (tokens[i] == nullptr) continue;
    for_each_unit(*tokens[i], before[i], units, [&](std::size_t u) { out[i] += per_unit / (occ[u] * occ[u]); });
  }
  return out;
}

double keep_change(double delta_tokens, double gap_tokens) noexcept {
  if (delta_tokens <= 0) return 0.0;
  return std::pow(std::min(1.0, delta_tokens / (delta_tokens + std::max(gap_tokens, 0.0))), kKeepChangeExponent);
}

double truncation_stand_in(double rank, double full_rank) noexcept {
  if (!(full_rank > 0)) return 0.0;
  return std::pow(1.0 - std::clamp(rank / full_rank, 0.0, 1.0), 6.0);
}

FidelityModel::FidelityModel() {
  // KL per unit of f·w at the reference sensitivity: what Engine::calibrate() fits on the bundled
  // stories260K (`orbit replay tests/data/traces/lookback.json --calibrate` prints it).
  coef_ = {0.00841, 0.0274, 0.0075, 0.0396, 0.104, 0.0373, 0.0300, kShortfallCoefficient, kQuantizedCoefficient};
  reference_sensitivity_ = 7.9e-3;
  fitted_.fill(false);
}

FidelityModel FidelityModel::fit(const std::vector<FidelitySample>& samples, double reference_sensitivity) {
  ORBIT_CHECK(std::isfinite(reference_sensitivity),
              "FidelityModel::fit: reference_sensitivity must be finite, got " << reference_sensitivity);
  FidelityModel m;
  if (reference_sensitivity > 0) m.reference_sensitivity_ = reference_sensitivity;
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
    // A kind whose samples all measured no loss (or whose sums overflowed) keeps its default: a coefficient of 0
    // would predict every such action free, and no budget would ever repair it.
    const double c = xx[k] > 0 ? xy[k] / xx[k] : 0.0;
    if (std::isfinite(c) && c > 0) {
      m.coef_[k] = c;
      m.fitted_[k] = true;
    }
  }
  return m;
}

double FidelityModel::sensitivity_factor(double sensitivity) const {
  if (!(sensitivity >= 0) || !(reference_sensitivity_ > 0)) return 1.0;
  const double r = sensitivity / reference_sensitivity_;
  if (r <= 1) return std::max(std::pow(r, kSensitivityExponent), kMinSensitivityFactor);
  return std::min(r, kMaxSensitivityFactor);
}

double FidelityModel::predict(Loss kind, double feature, double share, double sensitivity) const {
  const double f = std::clamp(feature, 0.0, 1.0);
  const double s = std::clamp(share, 0.0, 1.0);
  return scale_ * coefficient(kind) * f * s * sensitivity_factor(sensitivity);
}

double FidelityModel::predict_shortfall(double feature, double share) const {
  return scale_ * coefficient(Loss::kShortfall) * std::max(feature, 0.0) * std::clamp(share, 0.0, 1.0);
}

double dynamic_ntk_scale(const DynamicNtk& rope, int64_t window) noexcept {
  if (!rope.active() || window <= rope.anchor) return 1.0;
  const double n = static_cast<double>(window) / static_cast<double>(rope.anchor);
  return std::max(1.0, rope.factor * n - rope.factor + 1.0);
}

double shortfall_feature(const DynamicNtk& rope, int64_t formed_window, int64_t read_window) noexcept {
  if (!rope.active() || formed_window <= 0 || read_window <= 0) return 0.0;
  const double d = std::log(dynamic_ntk_scale(rope, read_window) / dynamic_ntk_scale(rope, formed_window));
  return d * d;
}

FidelityModel FidelityModel::blend(const FidelityModel& from, const FidelityModel& to, double weight) {
  ORBIT_CHECK(std::isfinite(weight) && weight >= 0 && weight <= 1,
              "FidelityModel::blend: weight must be in [0, 1], got " << weight);
  // A side that is not a positive finite number (no fit could make one: fit() keeps the default) leaves the other.
  const auto usable = [](double v) { return std::isfinite(v) && v > 0; };
  const auto mix = [&](double a, double b) {
    if (!usable(a) || !usable(b)) return usable(a) ? a : b;
    return std::pow(a, 1 - weight) * std::pow(b, weight);
  };
  FidelityModel m;
  for (std::size_t k = 0; k < m.coef_.size(); ++k) {
    m.coef_[k] = mix(from.coef_[k], to.coef_[k]);
    m.fitted_[k] = to.fitted_[k];
  }
  m.reference_sensitivity_ = mix(from.reference_sensitivity_, to.reference_sensitivity_);
  return m;
}

FidelityModel FidelityModel::with_coefficient_of(Loss kind, const FidelityModel& other) const {
  FidelityModel m = *this;
  const auto k = static_cast<std::size_t>(kind);
  m.coef_[k] = other.coef_[k];
  m.fitted_[k] = other.fitted_[k];
  return m;
}

FidelityModel FidelityModel::scaled(double scale) const {
  ORBIT_CHECK(std::isfinite(scale) && scale > 0, "FidelityModel::scaled: scale must be finite and > 0, got " << scale);
  FidelityModel m = *this;
  m.scale_ = scale;
  return m;
}

bool FidelityCorrection::observe(double measured_kl, double predicted_kl_unscaled) {
  if (!std::isfinite(measured_kl) || !std::isfinite(predicted_kl_unscaled) || measured_kl < 0 ||
      predicted_kl_unscaled < 0) {
    return false;
  }
  if (measured_kl < kNegligibleKl && predicted_kl_unscaled < kNegligibleKl) return false;
  // A prediction of (almost) nothing against a measured loss is a large miss, bounded like any other.
  const double floor = kNegligibleKl / 10;
  const double ratio = std::max(measured_kl, floor) / std::max(predicted_kl_unscaled, floor);
  const double max_log = std::log(kMaxFactor);
  recent_log_ratio_[static_cast<std::size_t>(checks_) % kRecentChecks] = std::clamp(std::log(ratio), 0.0, max_log);
  last_ratio_ = ratio;
  ++checks_;
  return true;
}

double FidelityCorrection::factor() const {
  // Unrecorded slots hold 0 (a factor of 1), which the clamp would give them anyway.
  return std::exp(*std::max_element(recent_log_ratio_.begin(), recent_log_ratio_.end()));
}

std::string FidelityModel::describe() const {
  std::ostringstream out;
  for (int k = 0; k < kLossKinds; ++k) {
    const bool named_when_fitted = static_cast<Loss>(k) == Loss::kShortfall || static_cast<Loss>(k) == Loss::kQuantized;
    if (named_when_fitted && !fitted_[static_cast<std::size_t>(k)]) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2e", coef_[static_cast<std::size_t>(k)]);
    out << (k ? ", " : "") << loss_name(static_cast<Loss>(k)) << " " << buf
        << (fitted_[static_cast<std::size_t>(k)] ? " (fitted)" : " (default)");
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2e", reference_sensitivity_);
  out << ", s_ref " << buf;
  if (scale_ != 1.0) {
    std::snprintf(buf, sizeof buf, "%.2f", scale_);
    out << ", correction x" << buf;
  }
  return out.str();
}

}  // namespace orbit::planner
