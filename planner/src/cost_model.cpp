// CostModel: fit from timings and the load-vs-patch-vs-recompute decision (see cost_model.h).
#include "orbit/planner/cost_model.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "orbit/common/error.h"

namespace orbit::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Least squares restricted to the columns in `active` (bit j = column j) of the column-scaled design;
// false when those columns are (numerically) dependent.
bool solve_active(const std::array<std::array<double, 3>, 3>& gram, const std::array<double, 3>& rhs, unsigned active,
                  std::array<double, 3>& beta) {
  int cols[3], m = 0;
  for (int j = 0; j < 3; ++j)
    if (active & (1u << j)) cols[m++] = j;
  double a[3][4];
  for (int r = 0; r < m; ++r) {
    for (int c = 0; c < m; ++c) a[r][c] = gram[cols[r]][cols[c]];
    a[r][m] = rhs[cols[r]];
  }
  for (int p = 0; p < m; ++p) {  // Gauss-Jordan with partial pivoting; columns are unit-norm
    int best = p;
    for (int r = p + 1; r < m; ++r)
      if (std::abs(a[r][p]) > std::abs(a[best][p])) best = r;
    if (std::abs(a[best][p]) < 1e-10) return false;
    for (int c = 0; c <= m; ++c) std::swap(a[p][c], a[best][c]);
    for (int r = 0; r < m; ++r) {
      if (r == p) continue;
      double f = a[r][p] / a[p][p];
      for (int c = p; c <= m; ++c) a[r][c] -= f * a[p][c];
    }
  }
  beta = {0, 0, 0};
  for (int r = 0; r < m; ++r) beta[cols[r]] = a[r][m] / a[r][r];
  return true;
}

// Non-negative least squares for seconds ≈ β0·t + β1·t·c + β2, exact: the optimum is the unconstrained
// optimum over some set of free coefficients, so try all 8 and keep the best feasible one.
std::array<double, 3> fit_forward(const std::vector<const CostSample*>& samples) {
  std::vector<std::array<double, 3>> x;
  std::vector<double> y;
  std::array<double, 3> norm = {0, 0, 0};
  for (const CostSample* s : samples) {
    double t = static_cast<double>(s->tokens), c = static_cast<double>(s->context_tokens);
    x.push_back({t, t * c, 1.0});
    y.push_back(s->seconds);
    for (int j = 0; j < 3; ++j) norm[j] += x.back()[j] * x.back()[j];
  }
  for (double& n : norm) n = std::sqrt(n);
  std::array<std::array<double, 3>, 3> gram{};
  std::array<double, 3> rhs{};
  for (size_t i = 0; i < x.size(); ++i)
    for (int j = 0; j < 3; ++j) {
      if (norm[j] == 0) continue;
      rhs[j] += x[i][j] / norm[j] * y[i];
      for (int k = 0; k < 3; ++k)
        if (norm[k] != 0) gram[j][k] += x[i][j] / norm[j] * x[i][k] / norm[k];
    }
  std::array<double, 3> best = {0, 0, 0};
  double best_residual = kInf;
  for (unsigned active = 0; active < 8; ++active) {
    bool identifiable = true;
    for (int j = 0; j < 3; ++j)
      if ((active & (1u << j)) && norm[j] == 0) identifiable = false;
    std::array<double, 3> beta{};
    if (!identifiable || !solve_active(gram, rhs, active, beta)) continue;
    bool feasible = true;
    for (int j = 0; j < 3; ++j) {
      if (norm[j] != 0) beta[j] /= norm[j];
      feasible &= beta[j] >= 0;
    }
    if (!feasible) continue;
    double residual = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      double e = y[i] - (beta[0] * x[i][0] + beta[1] * x[i][1] + beta[2] * x[i][2]);
      residual += e * e;
    }
    if (residual < best_residual) best_residual = residual, best = beta;
  }
  return best;
}

std::string si(double value, const char* unit) {
  char text[48];
  std::snprintf(text, sizeof text, "%.3g %s", value, unit);
  return text;
}

}  // namespace

const char* tier_name(Tier tier) noexcept {
  switch (tier) {
    case Tier::kDevice: return "device";
    case Tier::kHost: return "host";
    case Tier::kDisk: return "disk";
    case Tier::kRemote: return "remote";
  }
  return "?";
}

const char* action_name(Decision::Action action) noexcept {
  switch (action) {
    case Decision::Action::kLoadAndPatch: return "load+patch";
    case Decision::Action::kLoadAndForm: return "load+form";
    case Decision::Action::kRecompute: return "recompute";
  }
  return "?";
}

std::string Decision::describe() const {
  std::string out = std::string(action_name(action)) + " " + si(chosen_seconds(), "s") + " (";
  for (int a = 0; a < 3; ++a) {
    if (a == static_cast<int>(action)) continue;
    if (out.back() != '(') out += ", ";
    out += std::string(action_name(static_cast<Action>(a))) + " " + si(seconds[a], "s");
  }
  return out + ")";
}

CostModel::CostModel(const CostCoefficients& c) : c_(c) {
  for (double v : {c.forward_per_token, c.forward_per_token_context, c.forward_fixed})
    ORBIT_CHECK(std::isfinite(v) && v >= 0, "CostModel: forward coefficients must be finite and ≥ 0, got " << v);
  for (double v :
       {c.relocate_bytes_per_s, c.patch_apply_bytes_per_s, c.patch_form_bytes_per_s, c.transfer_bytes_per_s[0],
        c.transfer_bytes_per_s[1], c.transfer_bytes_per_s[2], c.transfer_remote_bytes_per_s})
    ORBIT_CHECK(std::isfinite(v) && v > 0, "CostModel: bandwidths must be finite and > 0, got " << v);
}

CostModel CostModel::fit(const std::vector<CostSample>& samples) {
  namespace k = sample_kind;
  const char* kinds[] = {k::kForward,        k::kRelocate,     k::kPatchApply,  k::kPatchForm,
                         k::kTransferDevice, k::kTransferHost, k::kTransferDisk};
  std::map<std::string, std::vector<const CostSample*>> by_kind;
  for (const char* kind : kinds) by_kind[kind];
  by_kind[k::kTransferRemote];  // optional
  for (size_t i = 0; i < samples.size(); ++i) {
    const CostSample& s = samples[i];
    auto it = by_kind.find(s.what);
    ORBIT_CHECK(it != by_kind.end(), "CostModel::fit: sample "
                                         << i << " has unknown kind '" << s.what
                                         << "' (forward, relocate, patch_apply, patch_form, transfer_device, "
                                            "transfer_host, transfer_disk, transfer_remote)");
    ORBIT_CHECK(s.tokens >= 0 && s.context_tokens >= 0 && s.bytes >= 0 && std::isfinite(s.seconds) && s.seconds >= 0,
                "CostModel::fit: sample " << i << " (" << s.what << ") has a negative or non-finite field");
    it->second.push_back(&s);
  }
  for (const char* kind : kinds) ORBIT_CHECK(!by_kind[kind].empty(), "CostModel::fit: no '" << kind << "' samples");
  auto bandwidth = [&](const char* kind) {
    double bytes = 0, seconds = 0;
    for (const CostSample* s : by_kind[kind]) bytes += static_cast<double>(s->bytes), seconds += s->seconds;
    ORBIT_CHECK(seconds > 0 && bytes > 0,
                "CostModel::fit: '" << kind << "' samples total " << bytes << " bytes in " << seconds << " s");
    return bytes / seconds;
  };
  CostCoefficients c;
  std::array<double, 3> beta = fit_forward(by_kind[k::kForward]);
  c.forward_per_token = beta[0];
  c.forward_per_token_context = beta[1];
  c.forward_fixed = beta[2];
  c.relocate_bytes_per_s = bandwidth(k::kRelocate);
  c.patch_apply_bytes_per_s = bandwidth(k::kPatchApply);
  c.patch_form_bytes_per_s = bandwidth(k::kPatchForm);
  c.transfer_bytes_per_s = {bandwidth(k::kTransferDevice), bandwidth(k::kTransferHost), bandwidth(k::kTransferDisk)};
  if (!by_kind[k::kTransferRemote].empty()) c.transfer_remote_bytes_per_s = bandwidth(k::kTransferRemote);
  return CostModel(c);
}

double CostModel::seconds_forward(int64_t tokens, int64_t context_tokens) const {
  if (tokens == 0) return 0;
  double t = static_cast<double>(tokens), ctx = static_cast<double>(context_tokens);
  return c_.forward_per_token * t + c_.forward_per_token_context * t * ctx + c_.forward_fixed;
}
double CostModel::seconds_relocate(int64_t bytes) const { return bytes / c_.relocate_bytes_per_s; }
double CostModel::seconds_patch_apply(int64_t bytes) const { return bytes / c_.patch_apply_bytes_per_s; }
double CostModel::seconds_patch_form(int64_t bytes) const { return bytes / c_.patch_form_bytes_per_s; }
double CostModel::seconds_transfer(int64_t bytes, Tier tier) const {
  if (tier == Tier::kRemote) return bytes / c_.transfer_remote_bytes_per_s;
  return bytes / c_.transfer_bytes_per_s[static_cast<int>(tier)];
}

Decision CostModel::choose(const ReuseOption& o) const {
  ORBIT_CHECK(o.tokens >= 0 && o.context_tokens >= 0 && o.canonical_bytes >= 0 && o.formed_patch_bytes >= 0 &&
                  o.patch_bytes.value_or(0) >= 0 && std::isfinite(o.expected_reuse) && o.expected_reuse >= 0,
              "CostModel::choose: negative or non-finite field in ReuseOption");
  const double uses = 1 + o.expected_reuse;
  const int64_t b = o.canonical_bytes;
  const double load = seconds_transfer(b, o.canonical_tier) + seconds_relocate(b);
  auto patched_use = [&](int64_t patch_bytes) {
    return load + seconds_transfer(patch_bytes, o.patch_tier) + seconds_patch_apply(b);
  };
  const double forward = seconds_forward(o.tokens, o.context_tokens);
  Decision d;
  d.seconds[0] = o.patch_bytes ? uses * patched_use(*o.patch_bytes) : kInf;
  d.seconds[1] = load + forward + seconds_patch_form(b) +
                 o.expected_reuse * patched_use(o.formed_patch_bytes > 0 ? o.formed_patch_bytes : b);
  d.seconds[2] = uses * forward;
  int best = 0;
  for (int a = 1; a < 3; ++a)
    if (d.seconds[a] < d.seconds[best]) best = a;
  d.action = static_cast<Decision::Action>(best);
  return d;
}

std::string CostModel::describe() const {
  return "forward " + si(c_.forward_per_token, "s/token") + " + " + si(c_.forward_per_token_context, "s/(token*ctx)") +
         " + " + si(c_.forward_fixed, "s") + "; relocate " + si(c_.relocate_bytes_per_s, "B/s") + "; patch apply " +
         si(c_.patch_apply_bytes_per_s, "B/s") + "; patch form " + si(c_.patch_form_bytes_per_s, "B/s") +
         "; transfer device " + si(c_.transfer_bytes_per_s[0], "B/s") + ", host " +
         si(c_.transfer_bytes_per_s[1], "B/s") + ", disk " + si(c_.transfer_bytes_per_s[2], "B/s") + ", remote " +
         si(c_.transfer_remote_bytes_per_s, "B/s");
}

}  // namespace orbit::planner
