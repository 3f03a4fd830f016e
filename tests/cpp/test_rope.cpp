// RoPE: the one angle function (orbit/runtime/rope.h) and its CPU rotation.
//
// The central property (docs/ARCHITECTURE.md §7): rotating by δ after rotating at p equals rotating at p + δ, over a
// grid of every variant. Composition alone cannot see a wrong pairing or direction, so every variant is
// also compared with an independent reference written here (HF's formulas as tensor ops, then a plain
// complex-number rotation), and the frequencies are pinned with numbers derived by hand.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/runtime/rope.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using orbit::runtime::RopeConfig;
using orbit::runtime::RopeLayout;
using orbit::runtime::RopeScaling;

namespace {

constexpr double kPi = 3.14159265358979323846;

struct Variant {
  std::string name;
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;
  int64_t max_pos = 4096;
  int64_t original = 0;
  int64_t window_len = 0;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;
};

std::vector<Variant> all_variants() {
  std::vector<Variant> v(8);
  v[0].name = "none";
  v[1] = {"linear", RopeScaling::kLinear, 4.0};
  v[2] = {"dynamic", RopeScaling::kDynamicNtk, 2.0, 2048, 0, /*window_len=*/8192};
  v[3] = {"dynamic-original", RopeScaling::kDynamicNtk, 3.0, 8192, 1024, /*window_len=*/5000};
  v[4] = {"llama3", RopeScaling::kLlama3, 8.0, 131072, 8192};
  v[5] = {"yarn", RopeScaling::kYarn, 4.0, 131072, 32768};
  v[6] = {"yarn-mscale", RopeScaling::kYarn, 40.0, 163840, 4096, 0, /*mscale=*/1.0, /*mscale_all_dim=*/0.5};
  v[7] = {"yarn-untruncated", RopeScaling::kYarn, 16.0, 65536, 4096, 0, 0.0, 0.0, /*truncate=*/false};
  return v;
}

RopeConfig make_config(const Variant& v, RopeLayout layout, int64_t head_dim, int64_t rotary_dim, double theta) {
  RopeConfig c;
  c.layout = layout;
  c.head_dim = head_dim;
  c.rotary_dim = rotary_dim;
  c.theta = theta;
  c.scaling = v.scaling;
  c.factor = v.factor;
  c.max_position_embeddings = v.max_pos;
  c.original_max_position_embeddings = v.original;
  c.mscale = v.mscale;
  c.mscale_all_dim = v.mscale_all_dim;
  c.truncate = v.truncate;
  return c;
}

std::string describe(const RopeConfig& c, const Variant& v, at::ScalarType dtype) {
  return v.name + " " + orbit::runtime::rope_layout_name(c.layout) + " rotary_dim=" + std::to_string(c.rotary_dim) +
         "/" + std::to_string(c.head_dim) + " theta=" + std::to_string(c.theta) + " " + c10::toString(dtype);
}

// ---- independent reference: HF's modeling_rope_utils.py, restated with tensor ops in float64 ----------

at::Tensor ref_default_inv_freq(double base, int64_t dim) {
  const at::Tensor exponents = at::arange(0, dim, 2, at::kDouble) / static_cast<double>(dim);
  return 1.0 / at::pow(base, exponents);
}

at::Tensor ref_inv_freq(const RopeConfig& c, int64_t seq_len) {
  const int64_t dim = c.rotary_dim;
  const double max_pos = static_cast<double>(c.original_max_position_embeddings > 0 ? c.original_max_position_embeddings
                                                                                    : c.max_position_embeddings);
  at::Tensor inv = ref_default_inv_freq(c.theta, dim);
  switch (c.scaling) {
    case RopeScaling::kNone: return inv;
    case RopeScaling::kLinear: return inv / c.factor;
    case RopeScaling::kDynamicNtk: {
      const double n = seq_len > max_pos ? static_cast<double>(seq_len) : max_pos;
      const double base = c.theta * std::pow((c.factor * n / max_pos) - (c.factor - 1), double(dim) / double(dim - 2));
      return ref_default_inv_freq(base, dim);
    }
    case RopeScaling::kLlama3: {
      const double low_wavelen = max_pos / c.low_freq_factor;
      const double high_wavelen = max_pos / c.high_freq_factor;
      const at::Tensor wavelen = 2 * kPi / inv;
      at::Tensor llama = at::where(wavelen > low_wavelen, inv / c.factor, inv);
      const at::Tensor smooth = (max_pos / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
      const at::Tensor smoothed = (1 - smooth) * llama / c.factor + smooth * llama;
      const at::Tensor medium =
          at::logical_not(wavelen < high_wavelen).logical_and(at::logical_not(wavelen > low_wavelen));
      return at::where(medium, smoothed, llama);
    }
    case RopeScaling::kYarn: {
      auto find_correction_dim = [&](double rotations) {
        return (dim * std::log(max_pos / (rotations * 2 * kPi))) / (2 * std::log(c.theta));
      };
      double low = find_correction_dim(c.beta_fast), high = find_correction_dim(c.beta_slow);
      if (c.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, double(dim - 1));
      if (low == high) high += 0.001;
      const at::Tensor ramp = ((at::arange(dim / 2, at::kDouble) - low) / (high - low)).clamp(0, 1);
      const at::Tensor extrapolation_factor = 1 - ramp;
      const at::Tensor pos_freqs = at::pow(c.theta, at::arange(0, dim, 2, at::kDouble) / double(dim));
      return (1.0 / (c.factor * pos_freqs)) * (1 - extrapolation_factor) + (1.0 / pos_freqs) * extrapolation_factor;
    }
  }
  return inv;
}

// Rotates with std::complex: pair (a, b) is z = a + i·b, multiplied by e^{i·angle}.
at::Tensor ref_rotate(const RopeConfig& c, const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv) {
  const at::Tensor xd = x.to(at::kDouble).contiguous();
  at::Tensor out = xd.clone();
  const int64_t tokens = x.size(0), heads = x.size(1), half = c.rotary_dim / 2;
  const auto xa = xd.accessor<double, 3>();
  auto oa = out.accessor<double, 3>();
  const at::Tensor pos = positions.to(at::kDouble).contiguous();
  const at::Tensor freq = inv.contiguous();
  const auto pa = pos.accessor<double, 1>();
  const auto fa = freq.accessor<double, 1>();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t ia = c.layout == RopeLayout::kInterleaved ? 2 * i : i;
        const int64_t ib = c.layout == RopeLayout::kInterleaved ? 2 * i + 1 : i + half;
        const std::complex<double> z =
            std::complex<double>(xa[t][h][ia], xa[t][h][ib]) * std::polar(1.0, pa[t] * fa[i]);
        oa[t][h][ia] = z.real();
        oa[t][h][ib] = z.imag();
      }
    }
  }
  return out;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

at::Tensor positions_of(const std::vector<int64_t>& values) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong));
}

}  // namespace

TEST_CASE("rotating by delta after rotating at p equals rotating at p + delta, for every variant", "[rope][cpu]") {
  // Every (p, δ) pair is one token, so one call covers the whole set.
  const std::vector<int64_t> ps = {0, 1, 17, 1000, 65536, 100000};
  const std::vector<int64_t> deltas = {1, 7, 512, 4096, 100000, -1, -1000};
  std::vector<int64_t> p_list, d_list, sum_list;
  for (int64_t p : ps) {
    for (int64_t d : deltas) {
      if (p + d < 0) continue;
      p_list.push_back(p);
      d_list.push_back(d);
      sum_list.push_back(p + d);
    }
  }
  const at::Tensor p_pos = positions_of(p_list), d_pos = positions_of(d_list), sum_pos = positions_of(sum_list);
  const int64_t tokens = static_cast<int64_t>(p_list.size()), heads = 3, head_dim = 64;
  at::manual_seed(7);
  const at::Tensor x64 = at::randn({tokens, heads, head_dim}, at::kDouble);

  int checked = 0;
  for (const Variant& v : all_variants()) {
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
      for (int64_t rotary_dim : {head_dim, head_dim / 2, head_dim / 4}) {
        for (double theta : {1e4, 1e6}) {
          for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
            const RopeConfig c = make_config(v, layout, head_dim, rotary_dim, theta);
            INFO(describe(c, v, dtype));
            const at::Tensor x = x64.to(dtype);
            const at::Tensor at_p = orbit::runtime::rope_apply(c, x, p_pos, v.window_len);
            const at::Tensor then_delta = orbit::runtime::rope_apply(c, at_p, d_pos, v.window_len);
            const at::Tensor direct = orbit::runtime::rope_apply(c, x, sum_pos, v.window_len);
            REQUIRE(direct.scalar_type() == dtype);
            const double tol = dtype == at::kFloat ? 2e-5 : 1e-9;
            CHECK(max_abs_diff(then_delta, direct) < tol);
            // Dims past rotary_dim pass through untouched.
            CHECK(at::equal(direct.narrow(2, rotary_dim, head_dim - rotary_dim),
                            x.narrow(2, rotary_dim, head_dim - rotary_dim)));
            // Against the independent reference (frequencies and rotation both re-derived here).
            if (dtype == at::kDouble) {
              const at::Tensor ref = ref_rotate(c, x, sum_pos, ref_inv_freq(c, v.window_len));
              CHECK(max_abs_diff(direct, ref) < 1e-8);
            }
            ++checked;
          }
        }
      }
    }
  }
  CHECK(checked == 8 * 2 * 3 * 2 * 2);
}

TEST_CASE("a pair turns counter-clockwise: (a, b) -> (a cos - b sin, a sin + b cos)", "[rope][cpu]") {
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
    RopeConfig c;
    c.layout = layout;
    c.head_dim = 6;
    c.rotary_dim = 4;
    c.theta = 100.0;  // inv_freq = {1, 0.1}
    const int64_t b0 = layout == RopeLayout::kInterleaved ? 1 : 2;
    at::Tensor x = at::zeros({1, 1, 6}, at::kDouble);
    x[0][0][0] = 1.0;  // a of pair 0
    x[0][0][5] = 3.0;  // pass-through
    const at::Tensor y = orbit::runtime::rope_apply(c, x, positions_of({2}));
    INFO(orbit::runtime::rope_layout_name(layout));
    CHECK(y[0][0][0].item<double>() == Approx(std::cos(2.0)).margin(1e-12));
    CHECK(y[0][0][b0].item<double>() == Approx(std::sin(2.0)).margin(1e-12));
    CHECK(y[0][0][5].item<double>() == 3.0);
  }
}

TEST_CASE("rotations preserve each head's norm", "[rope][cpu]") {
  at::manual_seed(11);
  for (const Variant& v : all_variants()) {
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
      const RopeConfig c = make_config(v, layout, 128, 64, 5e5);
      INFO(describe(c, v, at::kFloat));
      const at::Tensor x = at::randn({16, 4, 128});
      const at::Tensor positions = at::randint(0, 200000, {16}, at::kLong);
      const at::Tensor y = orbit::runtime::rope_apply(c, x, positions, v.window_len);
      // float32 rotations and two 128-term norms: worst 1.8e-7 over the CPU kernels tried (AVX-512's sums);
      // a stray scaling (YaRN's attention factor) or a cos and sin of two angles (cos² + sin² off 1)
      // changes norms by orders more.
      const at::Tensor rel = (y.norm(2, {2}) - x.norm(2, {2})).abs() / x.norm(2, {2});
      CHECK(rel.max().item<double>() < 2e-6);
    }
  }
}

TEST_CASE("q.k after rotation depends only on the position difference", "[rope][cpu]") {
  at::manual_seed(5);
  for (const Variant& v : all_variants()) {
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
      const RopeConfig c = make_config(v, layout, 64, 32, 1e4);
      INFO(describe(c, v, at::kDouble));
      const at::Tensor q = at::randn({1, 2, 64}, at::kDouble).expand({5, 2, 64}).contiguous();
      const at::Tensor k = at::randn({1, 2, 64}, at::kDouble).expand({5, 2, 64}).contiguous();
      // Pairs (m, n) with the same m − n = 37 at very different absolute positions.
      const at::Tensor m = positions_of({37, 100, 5000, 77777, 150037});
      const at::Tensor n = m - 37;
      const at::Tensor dots =
          (orbit::runtime::rope_apply(c, q, m, v.window_len) * orbit::runtime::rope_apply(c, k, n, v.window_len))
              .sum(2);
      CHECK((dots - dots[0]).abs().max().item<double>() < 1e-9);
      // ...and a different difference gives a different product (the test can see positions at all).
      const at::Tensor other =
          (orbit::runtime::rope_apply(c, q, m, v.window_len) * orbit::runtime::rope_apply(c, k, m - 3, v.window_len))
              .sum(2);
      CHECK((other - dots).abs().max().item<double>() > 1e-6);
    }
  }
}

TEST_CASE("inv_freq matches HF's formulas for each scaling type", "[rope][cpu]") {
  for (const Variant& v : all_variants()) {
    for (int64_t rotary_dim : {128, 64, 32}) {
      const RopeConfig c = make_config(v, RopeLayout::kHalfSplit, 128, rotary_dim, 1e6);
      INFO(describe(c, v, at::kDouble));
      const at::Tensor inv = orbit::runtime::rope_inv_freq(c, v.window_len);
      REQUIRE(inv.scalar_type() == at::kDouble);
      REQUIRE(inv.sizes() == at::IntArrayRef({rotary_dim / 2}));
      CHECK(at::allclose(inv, ref_inv_freq(c, v.window_len), 1e-13, 0.0));
    }
  }
}

TEST_CASE("Llama-3.1 frequencies: kept above 2048-token wavelengths, divided by 8 past 8192", "[rope][cpu]") {
  // rope_scaling {factor 8, low_freq_factor 1, high_freq_factor 4, original 8192}, theta 500000, d = 128.
  // Wavelength 2π·500000^(2i/128) crosses 2048 between i = 28 and 29 and 8192 between i = 34 and 35.
  RopeConfig c;
  c.head_dim = c.rotary_dim = 128;
  c.theta = 500000.0;
  c.scaling = RopeScaling::kLlama3;
  c.factor = 8.0;
  c.low_freq_factor = 1.0;
  c.high_freq_factor = 4.0;
  c.original_max_position_embeddings = 8192;
  c.max_position_embeddings = 131072;
  const at::Tensor inv = orbit::runtime::rope_inv_freq(c);
  for (int64_t i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128.0);
    const double got = inv[i].item<double>();
    INFO("i = " << i);
    if (i <= 28) {
      CHECK(got == Approx(base).epsilon(1e-14));
    } else if (i >= 35) {
      CHECK(got == Approx(base / 8).epsilon(1e-14));
    } else {
      CHECK(got < base * (1 - 1e-6));
      CHECK(got > base / 8 * (1 + 1e-6));
      const double wavelen = 2 * kPi / base;
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      CHECK(got == Approx((1 - smooth) * base / 8 + smooth * base).epsilon(1e-14));
    }
  }
  CHECK(orbit::runtime::rope_attention_scaling(c) == 1.0);
}

TEST_CASE("YaRN (Qwen: factor 4, original 32768): ramp from dim 23 to 40, attention factor", "[rope][cpu]") {
  // corr(r) = 128·ln(32768/(2π·r)) / (2·ln 1e6): corr(32) = 23.60 -> 23, corr(1) = 39.65 -> 40.
  RopeConfig c;
  c.head_dim = c.rotary_dim = 128;
  c.theta = 1e6;
  c.scaling = RopeScaling::kYarn;
  c.factor = 4.0;
  c.original_max_position_embeddings = 32768;
  c.max_position_embeddings = 131072;
  const at::Tensor inv = orbit::runtime::rope_inv_freq(c);
  for (int64_t i = 0; i < 64; ++i) {
    const double base = std::pow(1e6, -2.0 * i / 128.0);
    const double ramp = std::min(1.0, std::max(0.0, (i - 23.0) / 17.0));
    INFO("i = " << i);
    CHECK(inv[i].item<double>() == Approx(base * (1 - ramp) + base / 4 * ramp).epsilon(1e-14));
  }
  CHECK(inv[23].item<double>() == Approx(std::pow(1e6, -46.0 / 128)).epsilon(1e-14));
  CHECK(inv[40].item<double>() == Approx(std::pow(1e6, -80.0 / 128) / 4).epsilon(1e-14));
  CHECK(orbit::runtime::rope_attention_scaling(c) == Approx(0.1 * std::log(4.0) + 1).epsilon(1e-15));

  c.truncate = false;  // the ramp now runs from 23.596 to 39.651
  const double ramp31 = (31 - 23.5959476083381) / (39.6508807104171 - 23.5959476083381);
  CHECK(orbit::runtime::rope_inv_freq(c)[31].item<double>() ==
        Approx(std::pow(1e6, -62.0 / 128) * (1 - 0.75 * ramp31)).epsilon(1e-10));

  c.mscale = 1.0;  // DeepSeek form needs both
  CHECK(orbit::runtime::rope_attention_scaling(c) == Approx(0.1 * std::log(4.0) + 1).epsilon(1e-15));
  c.factor = 40.0;
  c.mscale_all_dim = 0.5;
  CHECK(orbit::runtime::rope_attention_scaling(c) == Approx(1.1557219901962608).epsilon(1e-14));
  c.attention_factor = 1.25;  // explicit wins
  CHECK(orbit::runtime::rope_attention_scaling(c) == 1.25);
  c.attention_factor = 0.0;
  c.factor = 1.0;
  c.mscale = c.mscale_all_dim = 0.0;
  CHECK(orbit::runtime::rope_attention_scaling(c) == 1.0);
}

TEST_CASE("dynamic NTK enlarges theta only past the limit, anchored on original_max when set", "[rope][cpu]") {
  RopeConfig c;
  c.head_dim = c.rotary_dim = 64;
  c.theta = 1e4;
  c.scaling = RopeScaling::kDynamicNtk;
  c.factor = 2.0;
  c.max_position_embeddings = 2048;
  RopeConfig plain = c;
  plain.scaling = RopeScaling::kNone;
  CHECK(at::equal(orbit::runtime::rope_inv_freq(c, 0), orbit::runtime::rope_inv_freq(plain)));
  CHECK(at::equal(orbit::runtime::rope_inv_freq(c, 2048), orbit::runtime::rope_inv_freq(plain)));
  // window 8192: theta' = 1e4 · (2·8192/2048 − 1)^(64/62) = 1e4 · 7^(32/31)
  const double theta8192 = 1e4 * std::pow(7.0, 32.0 / 31.0);
  CHECK(orbit::runtime::rope_inv_freq(c, 8192)[1].item<double>() ==
        Approx(std::pow(theta8192, -2.0 / 64)).epsilon(1e-14));
  CHECK(orbit::runtime::rope_inv_freq(c, 8192)[0].item<double>() == 1.0);
  c.original_max_position_embeddings = 1024;  // anchor 1024: (2·8192/1024 − 1) = 15
  CHECK(orbit::runtime::rope_inv_freq(c, 8192)[31].item<double>() ==
        Approx(std::pow(1e4 * std::pow(15.0, 32.0 / 31.0), -62.0 / 64)).epsilon(1e-13));
  CHECK(orbit::runtime::rope_attention_scaling(c) == 1.0);
}

TEST_CASE("interleaved and half-split layouts agree after permuting dims", "[rope][cpu]") {
  at::manual_seed(3);
  for (const Variant& v : all_variants()) {
    for (int64_t rotary_dim : {64, 32, 16}) {
      const int64_t head_dim = 64, half = rotary_dim / 2;
      // half-split dim i <-> interleaved dim 2i, half-split dim i + half <-> interleaved dim 2i + 1.
      std::vector<int64_t> perm(head_dim);
      for (int64_t i = 0; i < half; ++i) {
        perm[2 * i] = i;
        perm[2 * i + 1] = i + half;
      }
      for (int64_t j = rotary_dim; j < head_dim; ++j) perm[j] = j;
      const at::Tensor index = positions_of(perm);
      const RopeConfig split = make_config(v, RopeLayout::kHalfSplit, head_dim, rotary_dim, 1e4);
      const RopeConfig inter = make_config(v, RopeLayout::kInterleaved, head_dim, rotary_dim, 1e4);
      INFO(describe(split, v, at::kFloat));
      const at::Tensor x = at::randn({9, 2, head_dim});
      const at::Tensor positions = positions_of({0, 3, 99, 1024, 4095, 8191, 33000, 77777, 123456});
      const at::Tensor y_split = orbit::runtime::rope_apply(split, x, positions, v.window_len);
      const at::Tensor y_inter = orbit::runtime::rope_apply(inter, x.index_select(2, index), positions, v.window_len);
      CHECK(max_abs_diff(y_inter, y_split.index_select(2, index)) < 1e-6);
    }
  }
}

TEST_CASE("tokens split across threads rotate like the reference", "[rope][cpu]") {
  struct ThreadsGuard {
    int saved = at::get_num_threads();
    ~ThreadsGuard() { at::set_num_threads(saved); }
  } guard;
  at::set_num_threads(4);  // more chunks than the grain alone would give, even on a 1-core machine
  at::manual_seed(13);
  const Variant v = all_variants()[4];  // llama3 (a copy: all_variants() returns a temporary)
  const at::Tensor x = at::randn({3000, 14, 64});
  const at::Tensor positions = at::randint(0, 200000, {3000}, at::kLong);
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
    for (int64_t rotary_dim : {64, 32}) {
      const RopeConfig c = make_config(v, layout, 64, rotary_dim, 5e5);
      INFO(describe(c, v, at::kFloat));
      const at::Tensor y = orbit::runtime::rope_apply(c, x, positions);
      CHECK(max_abs_diff(y, ref_rotate(c, x, positions, ref_inv_freq(c, 0))) < 2e-5);
    }
  }
}

TEST_CASE("bfloat16 rotates in float32 and rounds to bfloat16 on store", "[rope][cpu]") {
  at::manual_seed(9);
  const RopeConfig c = make_config(all_variants()[4], RopeLayout::kHalfSplit, 64, 64, 5e5);
  const at::Tensor x = at::randn({32, 4, 64}).to(at::kBFloat16);
  const at::Tensor positions = at::randint(0, 100000, {32}, at::kLong);
  const at::Tensor y = orbit::runtime::rope_apply(c, x, positions);
  REQUIRE(y.scalar_type() == at::kBFloat16);
  const at::Tensor y32 = orbit::runtime::rope_apply(c, x.to(at::kFloat), positions);
  // Within one bfloat16 rounding of the float32 result (2^-8 relative), and not the float32 result itself.
  CHECK(at::allclose(y.to(at::kFloat), y32, 1.0 / 256, 1e-6));
  CHECK(max_abs_diff(y, y32) > 0);
}

TEST_CASE("invalid configs and arguments throw, naming the field", "[rope][cpu]") {
  RopeConfig ok;
  ok.head_dim = ok.rotary_dim = 64;
  REQUIRE_NOTHROW(orbit::runtime::rope_inv_freq(ok));
  auto bad = [&](auto edit) {
    RopeConfig c = ok;
    edit(c);
    return c;
  };
  using Catch::Contains;
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(bad([](RopeConfig& c) { c.rotary_dim = 63; })),
                    Contains("rotary_dim"));
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(bad([](RopeConfig& c) { c.rotary_dim = 66; })),
                    Contains("rotary_dim"));
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(bad([](RopeConfig& c) { c.rotary_dim = 0; })),
                    Contains("rotary_dim"));
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(bad([](RopeConfig& c) { c.head_dim = 0; })), Contains("head_dim"));
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(bad([](RopeConfig& c) { c.theta = 0; })), Contains("theta"));
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(bad([](RopeConfig& c) { c.theta = -5; })), Contains("theta"));
  for (RopeScaling s : {RopeScaling::kLinear, RopeScaling::kDynamicNtk, RopeScaling::kLlama3, RopeScaling::kYarn}) {
    INFO(orbit::runtime::rope_scaling_name(s));
    CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(bad([&](RopeConfig& c) {
                        c.scaling = s;
                        c.factor = 0.5;
                        c.max_position_embeddings = 4096;
                      })),
                      Contains("factor"));
  }
  const RopeConfig llama3 = bad([](RopeConfig& c) {
    c.scaling = RopeScaling::kLlama3;
    c.factor = 8;
  });
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(llama3), Contains("original_max_position_embeddings"));
  RopeConfig llama3_freq = llama3;
  llama3_freq.original_max_position_embeddings = 8192;
  llama3_freq.high_freq_factor = 1.0;  // == low_freq_factor
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(llama3_freq), Contains("high_freq_factor"));
  RopeConfig yarn = bad([](RopeConfig& c) {
    c.scaling = RopeScaling::kYarn;
    c.factor = 4;
  });
  CHECK_THROWS_WITH(orbit::runtime::rope_attention_scaling(yarn), Contains("original_max_position_embeddings"));
  yarn.original_max_position_embeddings = 4096;
  yarn.beta_fast = 0.5;  // < beta_slow
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(yarn), Contains("beta_fast"));
  yarn.beta_fast = 32;
  yarn.mscale = -1;
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(yarn), Contains("mscale"));
  RopeConfig dynamic = bad([](RopeConfig& c) {
    c.scaling = RopeScaling::kDynamicNtk;
    c.factor = 2;
  });
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(dynamic, 8192), Contains("max_position_embeddings"));
  dynamic.max_position_embeddings = 2048;
  CHECK_THROWS_WITH(orbit::runtime::rope_inv_freq(dynamic, -1), Contains("window_len"));
  CHECK_THROWS_AS(orbit::runtime::rope_inv_freq(bad([](RopeConfig& c) { c.rotary_dim = 7; })), orbit::Error);

  // Arguments of rope_angles / rope_rotate.
  const at::Tensor x = at::randn({4, 2, 64});
  const at::Tensor angles = orbit::runtime::rope_angles(ok, at::arange(4, at::kLong));
  CHECK(angles.sizes() == at::IntArrayRef({4, 32}));
  CHECK_THROWS_WITH(orbit::runtime::rope_angles(ok, at::zeros({2, 2}, at::kLong)), Contains("positions"));
  CHECK_THROWS_WITH(orbit::runtime::rope_angles(ok, at::zeros({2}, at::kBool)), Contains("positions"));
  CHECK_THROWS_WITH(orbit::runtime::rope_rotate(ok, x.view({4, 128}), angles), Contains("'x'"));
  CHECK_THROWS_WITH(orbit::runtime::rope_rotate(ok, at::randn({4, 2, 32}), angles), Contains("head_dim"));
  CHECK_THROWS_WITH(orbit::runtime::rope_rotate(ok, x, angles.to(at::kFloat)), Contains("angles"));
  CHECK_THROWS_WITH(orbit::runtime::rope_rotate(ok, x, angles.narrow(0, 0, 3)), Contains("angles"));
  CHECK_THROWS_WITH(orbit::runtime::rope_rotate(ok, x.to(at::kInt), angles), Contains("'x'"));
  CHECK_THROWS_WITH(orbit::runtime::rope_rotate(ok, x.to(at::kHalf), angles), Contains("dtype"));
  // A strided x (a view into a fused projection) is accepted and equals the contiguous result.
  const at::Tensor fused = at::randn({4, 2, 128});
  const at::Tensor view = fused.narrow(2, 0, 64);
  CHECK(at::equal(orbit::runtime::rope_rotate(ok, view, angles),
                  orbit::runtime::rope_rotate(ok, view.contiguous(), angles)));
  // Zero tokens is a no-op, not an error.
  CHECK(orbit::runtime::rope_apply(ok, at::randn({0, 2, 64}), at::zeros({0}, at::kLong)).size(0) == 0);
}

}  // namespace ORBIT_TEST_FILE
