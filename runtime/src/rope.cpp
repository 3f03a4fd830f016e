// RoPE angles (Hugging Face transformers' modeling_rope_utils.py, re-derived in float64) and rotation.
//
// Notation: d = rotary_dim, i in [0, d/2), θ = theta, s = factor,
//           L = original_max_position_embeddings if set (> 0), else max_position_embeddings.
//
//   default   inv[i] = θ^(−2i/d)
//   linear    inv[i] = θ^(−2i/d) / s
//   dynamic   n = max(window_len, L)
//             θ' = θ · ((s·n/L) − (s − 1))^(d/(d−2));   inv[i] = θ'^(−2i/d)        (n = L gives θ' = θ)
//   llama3    λ_lo = L / low_freq_factor,  λ_hi = L / high_freq_factor,  λ[i] = 2π / inv0[i]
//             λ < λ_hi:  inv0        λ > λ_lo:  inv0 / s
//             otherwise: (1 − g)·inv0/s + g·inv0,   g = (L/λ − low_freq_factor) / (high − low)
//   yarn      corr(r) = d · ln(L / (2π·r)) / (2 ln θ)
//             lo = corr(beta_fast), hi = corr(beta_slow); truncate: lo = ⌊lo⌋, hi = ⌈hi⌉
//             lo = max(lo, 0), hi = min(hi, d − 1); hi += 0.001 if lo == hi
//             ramp[i] = clamp((i − lo)/(hi − lo), 0, 1)
//             inv[i] = inv0[i]/s · ramp[i] + inv0[i] · (1 − ramp[i])
//             attention factor: attention_factor if set (> 0); else, with m(s, k) = 1 if s ≤ 1 else
//             0.1·k·ln(s) + 1: m(s, mscale)/m(s, mscale_all_dim) if both mscale and mscale_all_dim
//             are set (non-zero), else m(s, 1).
//
// Deliberate differences from HF: everything is float64 (HF rounds inv_freq to float32); the yarn
// factor is the configured one (current HF; transformers ≤ 4.4x replaced it by max_pos/original when
// original_max_position_embeddings was present — the loader decides which number goes in `factor`).
#include "orbit/runtime/rope.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/rope_op.h"
#include "orbit/common/error.h"

namespace orbit::runtime {
namespace {

constexpr double kPi = 3.14159265358979323846;

// L: the context length the scaled variants are anchored to.
int64_t anchor_length(const RopeConfig& c) {
  return c.original_max_position_embeddings > 0 ? c.original_max_position_embeddings : c.max_position_embeddings;
}

void validate(const RopeConfig& c, int64_t window_len) {
  check_rope_config(c);
  ORBIT_CHECK(window_len >= 0, "rope: argument 'window_len' must be >= 0, got " << window_len);
}

// θ^(−2i/d) for i in [0, d/2).
std::vector<double> base_inv_freq(double theta, int64_t dim) {
  std::vector<double> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    inv[static_cast<size_t>(i)] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  return inv;
}

std::vector<double> dynamic_inv_freq(const RopeConfig& c, int64_t window_len) {
  const double d = static_cast<double>(c.rotary_dim);
  const double anchor = static_cast<double>(anchor_length(c));
  const double n = std::max(static_cast<double>(window_len), anchor);
  const double theta = c.theta * std::pow((c.factor * n / anchor) - (c.factor - 1.0), d / (d - 2.0));
  return base_inv_freq(theta, c.rotary_dim);
}

std::vector<double> llama3_inv_freq(const RopeConfig& c) {
  std::vector<double> inv = base_inv_freq(c.theta, c.rotary_dim);
  const double anchor = static_cast<double>(anchor_length(c));
  const double low_freq_wavelen = anchor / c.low_freq_factor;
  const double high_freq_wavelen = anchor / c.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2.0 * kPi / f;
    if (wavelen < high_freq_wavelen) continue;  // high frequency: kept
    if (wavelen > low_freq_wavelen) {           // low frequency: interpolated by the factor
      f /= c.factor;
      continue;
    }
    const double smooth = (anchor / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
    f = (1.0 - smooth) * f / c.factor + smooth * f;
  }
  return inv;
}

std::vector<double> yarn_inv_freq(const RopeConfig& c) {
  const double d = static_cast<double>(c.rotary_dim);
  const double anchor = static_cast<double>(anchor_length(c));
  // The (fractional) dimension index whose wavelength fits `rotations` times into the anchor length.
  auto correction_dim = [&](double rotations) {
    return d * std::log(anchor / (rotations * 2.0 * kPi)) / (2.0 * std::log(c.theta));
  };
  double low = correction_dim(c.beta_fast);
  double high = correction_dim(c.beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, d - 1.0);
  if (low == high) high += 0.001;  // HF's guard against a zero-width ramp

  std::vector<double> inv = base_inv_freq(c.theta, c.rotary_dim);
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = inv[i];
    const double interpolation = inv[i] / c.factor;
    inv[i] = interpolation * ramp + extrapolation * (1.0 - ramp);
  }
  return inv;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

at::Tensor rope_inv_freq(const RopeConfig& config, int64_t window_len) {
  validate(config, window_len);
  std::vector<double> inv;
  switch (config.scaling) {
    case RopeScaling::kNone: inv = base_inv_freq(config.theta, config.rotary_dim); break;
    case RopeScaling::kLinear:
      inv = base_inv_freq(config.theta, config.rotary_dim);
      for (double& f : inv) f /= config.factor;
      break;
    case RopeScaling::kDynamicNtk: inv = dynamic_inv_freq(config, window_len); break;
    case RopeScaling::kLlama3: inv = llama3_inv_freq(config); break;
    case RopeScaling::kYarn: inv = yarn_inv_freq(config); break;
  }
  at::Tensor out = at::empty({static_cast<int64_t>(inv.size())}, at::TensorOptions().dtype(at::kDouble));
  std::copy(inv.begin(), inv.end(), out.data_ptr<double>());
  return out;
}

double rope_attention_scaling(const RopeConfig& config) {
  validate(config, 0);
  if (config.scaling != RopeScaling::kYarn) return 1.0;
  if (config.attention_factor > 0) return config.attention_factor;
  if (config.mscale != 0 && config.mscale_all_dim != 0) {
    return yarn_mscale(config.factor, config.mscale) / yarn_mscale(config.factor, config.mscale_all_dim);
  }
  return yarn_mscale(config.factor, 1.0);
}

double rope_mla_softmax_scaling(const RopeConfig& config) {
  validate(config, 0);
  if (config.scaling != RopeScaling::kYarn || config.mscale_all_dim == 0) return 1.0;
  const double m = yarn_mscale(config.factor, config.mscale_all_dim);
  return m * m;
}

at::Tensor rope_angles(const RopeConfig& config, const at::Tensor& positions, int64_t window_len) {
  ORBIT_CHECK(positions.defined(), "rope_angles: argument 'positions' is undefined");
  const bool grid = config.is_mrope() && positions.dim() == 2;
  ORBIT_CHECK(positions.dim() == 1 || (grid && positions.size(0) == 3),
              "rope_angles: argument 'positions' must be 1-D [T]"
                  << (config.is_mrope() ? " or an M-RoPE grid [3, T]" : "") << ", got sizes " << positions.sizes());
  const at::ScalarType dtype = positions.scalar_type();
  ORBIT_CHECK(at::isFloatingType(dtype) || at::isIntegralType(dtype, /*includeBool=*/false),
              "rope_angles: argument 'positions' must be an integer or floating tensor, got " << dtype);
  const at::Tensor inv = rope_inv_freq(config, window_len).to(positions.device());
  // angle(p, i) = p · inv[i] in float64: linear in p up to one rounding (≈1e-16 relative), so an angle
  // for p + δ matches the sum of the angles for p and δ far below float32 resolution.
  if (!grid) return positions.to(at::kDouble).unsqueeze(1) * inv.unsqueeze(0);
  // M-RoPE: frequency i reads row c(i) of the grid.
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(inv.size(0)));
  for (int64_t row = 0; row < 3; ++row) rows.insert(rows.end(), static_cast<size_t>(config.mrope_section[row]), row);
  const at::Tensor row_of_freq = at::tensor(at::ArrayRef<int64_t>(rows), at::kLong).to(positions.device());
  const at::Tensor coordinate = positions.to(at::kDouble).index_select(0, row_of_freq).t();  // [T, rotary_dim/2]
  return coordinate * inv.unsqueeze(0);
}

at::Tensor rope_rotate(const RopeConfig& config, const at::Tensor& x, const at::Tensor& angles) {
  validate(config, 0);
  ORBIT_CHECK(x.defined(), "rope_rotate: argument 'x' is undefined");
  ORBIT_CHECK(x.dim() == 3 && x.size(2) == config.head_dim,
              "rope_rotate: argument 'x' must be [T, H, head_dim=" << config.head_dim << "], got sizes " << x.sizes());
  ORBIT_CHECK(angles.defined(), "rope_rotate: argument 'angles' is undefined");
  ORBIT_CHECK(angles.dim() == 2 && angles.size(0) == x.size(0) && angles.size(1) == config.rotary_dim / 2,
              "rope_rotate: argument 'angles' must be [T=" << x.size(0) << ", rotary_dim/2=" << config.rotary_dim / 2
                                                           << "], got sizes " << angles.sizes());
  const ops::RopeTables tables = ops::rope_tables(angles, ops::rope_table_dtype(x.scalar_type()), x.device());
  return ops::rope_rotate(x.contiguous(), tables, config.layout);
}

at::Tensor rope_apply(const RopeConfig& config, const at::Tensor& x, const at::Tensor& positions, int64_t window_len) {
  return rope_rotate(config, x, rope_angles(config, positions, window_len));
}

}  // namespace orbit::runtime
