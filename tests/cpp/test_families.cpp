// The MLA (DeepSeek-V2) and M-RoPE (Qwen2-VL / Qwen2.5-VL language model) families: each runtime
// forward against an independent naive reference written here (per-token, per-head loops in float64,
// reading weights by their Hugging Face names), incremental decode through PagedSequence, the content
// channel's shapes and position-freedom, relocation, and the refusal of bad input.
// Loader, generator and config.json coverage for the two families is in test_families_loaders.cpp.
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <cmath>
#include <random>

#include "orbit/common/error.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/paged_sequence.h"
#include "orbit/runtime/rope.h"
#include "orbit/runtime/weights.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using Catch::Matchers::Contains;
using orbit::test::max_abs_diff;

namespace {

// A chunk's content computed alone at other positions: past layer 0 it attends over keys rotated to other
// angles, the same up to float32 rounding. Worst 2.9e-6 on these models (stories260K's: 1.9e-5, test_model)
// over the CPU kernels, BLAS cores and thread counts tried; a rotation moves keys by > 6 (test_reuse).
constexpr double kPositionFreeTolerance = 1e-4;

// Logits of one input forwarded in other pieces (decode steps, relocated content), or against the float32
// reference attention written here: float32 rounding, worst 1.8e-5 over the same CPU kernels, BLAS cores
// and thread counts.
constexpr double kLogitTolerance = 2e-4;

std::unique_ptr<Model> generated(const ModelConfig& config, uint64_t seed = 3) {
  orbit::test::TempDir dir;
  GeneratorOptions options;
  options.config = config;
  options.seed = seed;
  options.init_std = 0.2;
  generate_model(options, dir / "m");
  return load_model(dir / "m");
}

std::vector<int64_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < n) out.push_back(dist(rng));
  return out;
}

at::Tensor range(int64_t start, int64_t n) { return at::arange(start, start + n, at::kLong); }

std::vector<int64_t> slice(const std::vector<int64_t>& v, int64_t from, int64_t to) {
  return {v.begin() + from, v.begin() + to};
}

ForwardResult run(const Model& m, const std::vector<int64_t>& tokens, const at::Tensor& positions = {},
                  const PastKV* past = nullptr, LogitsMode mode = LogitsMode::kAll) {
  ForwardInput in;
  in.tokens = tokens;
  in.positions = positions;
  ForwardOptions o;
  o.logits = mode;
  return m.forward(in, past, o);
}

// ---- the independent reference ------------------------------------------------------------------
// Everything in float64, one token and one head at a time; weights fetched by their HF names.

at::Tensor W(const Model& m, const std::string& name) {
  return weight_slot(m.weights(), m.config(), name).to(at::kDouble);
}

// x: 1-D. x / sqrt(mean(x²) + eps) · gain.
at::Tensor ref_rms(const at::Tensor& x, const at::Tensor& gain, double eps) {
  return x / std::sqrt((x * x).mean().item<double>() + eps) * gain;
}

at::Tensor ref_silu(const at::Tensor& z) { return z / (1.0 + at::exp(-z)); }

// Rotates the pairs of a 1-D vector by angles[i]: interleaved (2i, 2i+1) or half-split (i, i + n/2).
at::Tensor ref_rotate(const at::Tensor& x, const std::vector<double>& angles, bool interleaved) {
  at::Tensor out = x.clone();
  auto in = x.accessor<double, 1>();
  auto o = out.accessor<double, 1>();
  const int64_t half = static_cast<int64_t>(angles.size());
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    const double c = std::cos(angles[static_cast<size_t>(i)]), s = std::sin(angles[static_cast<size_t>(i)]);
    o[a] = in[a] * c - in[b] * s;
    o[b] = in[a] * s + in[b] * c;
  }
  return out;
}

// Causal softmax attention for one head: q_i over keys 0..i.
at::Tensor ref_attend(const std::vector<at::Tensor>& q, const std::vector<at::Tensor>& k,
                      const std::vector<at::Tensor>& v, size_t i, double scale) {
  std::vector<double> scores;
  double top = -1e300;
  for (size_t j = 0; j <= i; ++j) {
    scores.push_back(at::dot(q[i], k[j]).item<double>() * scale);
    top = std::max(top, scores.back());
  }
  double total = 0;
  for (double& s : scores) total += (s = std::exp(s - top));
  at::Tensor out = at::zeros_like(v[0]);
  for (size_t j = 0; j <= i; ++j) out += v[j] * (scores[j] / total);
  return out;
}

struct RefResult {
  at::Tensor logits;               // [T, vocab]
  std::vector<at::Tensor> keys;    // per layer [T, H, d_k]: the attended keys (rotated)
  std::vector<at::Tensor> values;  // per layer [T, H, d_v]
};

// The shared skeleton: embeddings, per layer norm -> attention(layer, h rows) -> o_proj -> MLP, head.
template <typename Attention>
RefResult ref_decoder(const Model& m, const std::vector<int64_t>& tokens, Attention attention) {
  const ModelConfig& c = m.config();
  const at::Tensor embed = W(m, "model.embed_tokens.weight");
  std::vector<at::Tensor> x;
  for (int64_t t : tokens) x.push_back(embed[t].clone());
  RefResult r;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<at::Tensor> h;
    for (const at::Tensor& xt : x) h.push_back(ref_rms(xt, W(m, p + "input_layernorm.weight"), c.rms_norm_eps));
    const std::vector<at::Tensor> heads_out = attention(p, h, r);  // per token [H·d_v]
    for (size_t t = 0; t < x.size(); ++t) {
      x[t] = x[t] + at::mv(W(m, p + "self_attn.o_proj.weight"), heads_out[t]);
      const at::Tensor g = ref_rms(x[t], W(m, p + "post_attention_layernorm.weight"), c.rms_norm_eps);
      x[t] = x[t] + at::mv(W(m, p + "mlp.down_proj.weight"), ref_silu(at::mv(W(m, p + "mlp.gate_proj.weight"), g)) *
                                                                 at::mv(W(m, p + "mlp.up_proj.weight"), g));
    }
  }
  const at::Tensor head = c.tie_word_embeddings ? embed : W(m, "lm_head.weight");
  std::vector<at::Tensor> rows;
  for (const at::Tensor& xt : x) rows.push_back(at::mv(head, ref_rms(xt, W(m, "model.norm.weight"), c.rms_norm_eps)));
  r.logits = at::stack(rows);
  return r;
}

double yarn_m(double factor, double k) { return factor <= 1.0 ? 1.0 : 0.1 * k * std::log(factor) + 1.0; }

// Inverse frequencies θ^(−2i/d), or the runtime's table for scaled RoPE (covered by test_rope).
std::vector<double> inv_freq(const RopeConfig& r) {
  std::vector<double> inv;
  if (r.scaling != RopeScaling::kNone) {
    const at::Tensor t = rope_inv_freq(r);
    for (int64_t i = 0; i < t.size(0); ++i) inv.push_back(t[i].item<double>());
    return inv;
  }
  for (int64_t i = 0; i < r.rotary_dim / 2; ++i) inv.push_back(std::pow(r.theta, -2.0 * i / r.rotary_dim));
  return inv;
}

// DeepSeek-V2 MLA, straight from the equations of MlaConfig (config.h) and HF's DeepseekV2Attention.
RefResult ref_mla(const Model& m, const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions) {
  const ModelConfig& c = m.config();
  const MlaConfig& a = c.mla;
  const int64_t H = c.num_heads, dn = a.qk_nope_head_dim, dr = a.qk_rope_head_dim, dv = a.v_head_dim;
  const std::vector<double> inv = inv_freq(c.rope);
  double rope_factor = 1.0, softmax_extra = 1.0;
  if (c.rope.scaling == RopeScaling::kYarn) {
    rope_factor = yarn_m(c.rope.factor, c.rope.mscale) / yarn_m(c.rope.factor, c.rope.mscale_all_dim);
    softmax_extra = std::pow(yarn_m(c.rope.factor, c.rope.mscale_all_dim), 2);
  }
  const double scale = softmax_extra / std::sqrt(static_cast<double>(dn + dr));
  return ref_decoder(m, tokens, [&](const std::string& p, const std::vector<at::Tensor>& h, RefResult& r) {
    const size_t T = h.size();
    std::vector<std::vector<at::Tensor>> q(H), k(H), v(H);
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> angles;
      for (double f : inv) angles.push_back(static_cast<double>(positions[t]) * f);
      at::Tensor qt = a.q_lora_rank == 0 ? at::mv(W(m, p + "self_attn.q_proj.weight"), h[t])
                                         : at::mv(W(m, p + "self_attn.q_b_proj.weight"),
                                                  ref_rms(at::mv(W(m, p + "self_attn.q_a_proj.weight"), h[t]),
                                                          W(m, p + "self_attn.q_a_layernorm.weight"), 1e-6));
      const at::Tensor ckv = at::mv(W(m, p + "self_attn.kv_a_proj_with_mqa.weight"), h[t]);
      const at::Tensor latent =
          ref_rms(ckv.slice(0, 0, a.kv_lora_rank), W(m, p + "self_attn.kv_a_layernorm.weight"), 1e-6);
      const at::Tensor k_pe = ref_rotate(ckv.slice(0, a.kv_lora_rank), angles, /*interleaved=*/true) * rope_factor;
      const at::Tensor kv = at::mv(W(m, p + "self_attn.kv_b_proj.weight"), latent);
      for (int64_t hd = 0; hd < H; ++hd) {
        const at::Tensor qh = qt.slice(0, hd * (dn + dr), (hd + 1) * (dn + dr));
        const at::Tensor q_pe = ref_rotate(qh.slice(0, dn), angles, true) * rope_factor;
        q[hd].push_back(at::cat({qh.slice(0, 0, dn), q_pe}));
        const at::Tensor kvh = kv.slice(0, hd * (dn + dv), (hd + 1) * (dn + dv));
        k[hd].push_back(at::cat({kvh.slice(0, 0, dn), k_pe}));
        v[hd].push_back(kvh.slice(0, dn));
      }
    }
    std::vector<at::Tensor> out(T), keys(T), values(T);
    for (size_t t = 0; t < T; ++t) {
      std::vector<at::Tensor> per_head, kh, vh;
      for (int64_t hd = 0; hd < H; ++hd) {
        per_head.push_back(ref_attend(q[hd], k[hd], v[hd], t, scale));
        kh.push_back(k[hd][t]);
        vh.push_back(v[hd][t]);
      }
      out[t] = at::cat(per_head);
      keys[t] = at::stack(kh);
      values[t] = at::stack(vh);
    }
    r.keys.push_back(at::stack(keys));
    r.values.push_back(at::stack(values));
    return out;
  });
}

// Qwen2-VL's language model: Qwen2 (q/k/v biases, GQA) with M-RoPE over a [3][T] position grid.
RefResult ref_mrope(const Model& m, const std::vector<int64_t>& tokens, const std::vector<std::vector<int64_t>>& grid) {
  const ModelConfig& c = m.config();
  const int64_t H = c.num_heads, Hkv = c.num_kv_heads, d = c.head_dim;
  const std::vector<double> inv = inv_freq(c.rope);
  const std::vector<int64_t>& sec = c.rope.mrope_section;
  return ref_decoder(m, tokens, [&](const std::string& p, const std::vector<at::Tensor>& h, RefResult&) {
    const size_t T = h.size();
    std::vector<std::vector<at::Tensor>> q(H), k(Hkv), v(Hkv);
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> angles;
      for (int64_t i = 0; i < static_cast<int64_t>(inv.size()); ++i) {
        const int row = i < sec[0] ? 0 : i < sec[0] + sec[1] ? 1 : 2;
        angles.push_back(static_cast<double>(grid[static_cast<size_t>(row)][t]) * inv[static_cast<size_t>(i)]);
      }
      const at::Tensor qt = at::mv(W(m, p + "self_attn.q_proj.weight"), h[t]) + W(m, p + "self_attn.q_proj.bias");
      const at::Tensor kt = at::mv(W(m, p + "self_attn.k_proj.weight"), h[t]) + W(m, p + "self_attn.k_proj.bias");
      const at::Tensor vt = at::mv(W(m, p + "self_attn.v_proj.weight"), h[t]) + W(m, p + "self_attn.v_proj.bias");
      for (int64_t hd = 0; hd < H; ++hd) q[hd].push_back(ref_rotate(qt.slice(0, hd * d, (hd + 1) * d), angles, false));
      for (int64_t hd = 0; hd < Hkv; ++hd) {
        k[hd].push_back(ref_rotate(kt.slice(0, hd * d, (hd + 1) * d), angles, false));
        v[hd].push_back(vt.slice(0, hd * d, (hd + 1) * d));
      }
    }
    std::vector<at::Tensor> out(T);
    for (size_t t = 0; t < T; ++t) {
      std::vector<at::Tensor> per_head;
      for (int64_t hd = 0; hd < H; ++hd) {
        per_head.push_back(ref_attend(q[hd], k[hd / (H / Hkv)], v[hd / (H / Hkv)], t, 1.0 / std::sqrt(double(d))));
      }
      out[t] = at::cat(per_head);
    }
    return out;
  });
}

// Hugging Face's Llama/Qwen2 attention with partial rotary and YaRN: only the first rotary_dim dims of q
// and k rotate, and HF multiplies cos and sin by the attention factor, so exactly those dims are scaled.
RefResult ref_gqa_hf(const Model& m, const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions) {
  const ModelConfig& c = m.config();
  const int64_t H = c.num_heads, Hkv = c.num_kv_heads, d = c.head_dim, rot = c.rope.rotary_dim;
  const std::vector<double> inv = inv_freq(c.rope);
  const double factor = c.rope.scaling == RopeScaling::kYarn ? yarn_m(c.rope.factor, 1.0) : 1.0;
  auto bias = [&](const std::string& name) {
    return c.attention_bias ? W(m, name)
                            : at::zeros({W(m, name.substr(0, name.size() - 4) + "weight").size(0)}, at::kDouble);
  };
  auto rotate_head = [&](const at::Tensor& x, const std::vector<double>& angles) {
    at::Tensor out = ref_rotate(x, angles, /*interleaved=*/false);  // pairs (i, i + rot/2) of the prefix
    out.slice(0, 0, rot).mul_(factor);
    return out;
  };
  return ref_decoder(m, tokens, [&](const std::string& p, const std::vector<at::Tensor>& h, RefResult&) {
    const size_t T = h.size();
    std::vector<std::vector<at::Tensor>> q(H), k(Hkv), v(Hkv);
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> angles;
      for (double f : inv) angles.push_back(static_cast<double>(positions[t]) * f);
      const at::Tensor qt = at::mv(W(m, p + "self_attn.q_proj.weight"), h[t]) + bias(p + "self_attn.q_proj.bias");
      const at::Tensor kt = at::mv(W(m, p + "self_attn.k_proj.weight"), h[t]) + bias(p + "self_attn.k_proj.bias");
      const at::Tensor vt = at::mv(W(m, p + "self_attn.v_proj.weight"), h[t]) + bias(p + "self_attn.v_proj.bias");
      for (int64_t hd = 0; hd < H; ++hd) q[hd].push_back(rotate_head(qt.slice(0, hd * d, (hd + 1) * d), angles));
      for (int64_t hd = 0; hd < Hkv; ++hd) {
        k[hd].push_back(rotate_head(kt.slice(0, hd * d, (hd + 1) * d), angles));
        v[hd].push_back(vt.slice(0, hd * d, (hd + 1) * d));
      }
    }
    std::vector<at::Tensor> out(T);
    for (size_t t = 0; t < T; ++t) {
      std::vector<at::Tensor> per_head;
      for (int64_t hd = 0; hd < H; ++hd) {
        per_head.push_back(ref_attend(q[hd], k[hd / (H / Hkv)], v[hd / (H / Hkv)], t, 1.0 / std::sqrt(double(d))));
      }
      out[t] = at::cat(per_head);
    }
    return out;
  });
}

ModelConfig mla_variant(const std::string& which) {
  ModelConfig c = generator_preset("tiny-mla");
  if (which == "no q low-rank") c.mla.q_lora_rank = 0;
  if (which == "yarn") {
    c.rope.scaling = RopeScaling::kYarn;
    c.rope.factor = 4.0;
    c.rope.mscale = 1.0;  // ≠ mscale_all_dim: the RoPE part gets a factor of its own
    c.rope.mscale_all_dim = 0.5;
    c.rope.original_max_position_embeddings = 256;
    c.rms_norm_eps = 0.05;  // the latent norms keep HF's 1e-6: a mix-up shows
  }
  return c;
}

// An image-like grid: 3 text tokens, a 2×3 patch grid at t = 3, then text again after the image.
std::vector<std::vector<int64_t>> vl_grid() {
  std::vector<std::vector<int64_t>> g(3);
  auto push = [&](int64_t t, int64_t hh, int64_t w) { g[0].push_back(t), g[1].push_back(hh), g[2].push_back(w); };
  for (int64_t i = 0; i < 3; ++i) push(i, i, i);
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t col = 0; col < 3; ++col) push(3, 3 + row, 3 + col);
  for (int64_t i = 6; i < 9; ++i) push(i, i, i);
  return g;
}

at::Tensor grid_tensor(const std::vector<std::vector<int64_t>>& g) {
  std::vector<at::Tensor> rows;
  for (const auto& row : g) rows.push_back(at::tensor(at::ArrayRef<int64_t>(row), at::kLong));
  return at::stack(rows);
}

}  // namespace

TEST_CASE("MLA: the forward matches an independent naive reference", "[families][cpu]") {
  for (const std::string which : {"q low-rank", "no q low-rank", "yarn"}) {
    INFO(which);
    const auto m = generated(mla_variant(which));
    const std::vector<int64_t> tokens = random_tokens(11, m->config().vocab_size, 1);
    std::vector<int64_t> positions;
    for (int64_t i = 0; i < 11; ++i) positions.push_back(7 + 3 * i);  // gaps: the rotation matters
    const ForwardResult r = run(*m, tokens, at::tensor(at::ArrayRef<int64_t>(positions), at::kLong));
    const RefResult ref = ref_mla(*m, tokens, positions);
    CHECK(ref.logits.abs().max().item<double>() > 0.5);  // not a degenerate model
    CHECK(max_abs_diff(r.logits, ref.logits) < 1e-4);
  }
}

TEST_CASE("MLA: the content channel is [k_pe | latent], position-free, and reproduces the keys and values",
          "[families][cpu]") {
  const auto m = generated(mla_variant("q low-rank"));
  const ModelConfig& c = m->config();
  const MlaConfig& a = c.mla;
  const std::vector<int64_t> tokens = random_tokens(9, c.vocab_size, 2);
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < 9; ++i) positions.push_back(i);
  const ForwardResult r = run(*m, tokens);
  const RefResult ref = ref_mla(*m, tokens, positions);
  REQUIRE(static_cast<int64_t>(r.content.size()) == c.num_layers);
  CHECK(c.content_k_shape() == ContentShape{1, a.qk_rope_head_dim});
  CHECK(c.content_v_shape() == ContentShape{1, a.kv_lora_rank});
  const at::Tensor angles = rope_angles(c.rope, range(0, 9));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    INFO("layer " << l);
    const LayerKV& kv = r.content[l];
    REQUIRE(kv.k.sizes() == at::IntArrayRef({9, 1, a.qk_rope_head_dim}));
    REQUIRE(kv.v.sizes() == at::IntArrayRef({9, 1, a.kv_lora_rank}));
    // The latent through kv_b_proj gives the attended k_nope and v of every head; k_pe rotated at its
    // position gives the shared RoPE part.
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const at::Tensor expanded =
        at::matmul(kv.v.to(at::kDouble).view({9, a.kv_lora_rank}), W(*m, p + "self_attn.kv_b_proj.weight").t())
            .view({9, c.num_heads, a.qk_nope_head_dim + a.v_head_dim});
    CHECK(max_abs_diff(expanded.narrow(2, 0, a.qk_nope_head_dim), ref.keys[l].narrow(2, 0, a.qk_nope_head_dim)) < 1e-4);
    CHECK(max_abs_diff(expanded.narrow(2, a.qk_nope_head_dim, a.v_head_dim), ref.values[l]) < 1e-4);
    const at::Tensor k_pe = rope_rotate(c.rope, kv.k, angles);
    CHECK(max_abs_diff(k_pe.expand({9, c.num_heads, a.qk_rope_head_dim}),
                       ref.keys[l].narrow(2, a.qk_nope_head_dim, a.qk_rope_head_dim)) < 1e-4);
  }
  // Position-free: the same chunk computed alone at 0.., 40.., 500.. stores the same content.
  for (int64_t shift : {40, 500}) {
    INFO("shift " << shift);
    const ForwardResult moved = run(*m, tokens, range(shift, 9));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      CHECK(max_abs_diff(moved.content[l].k, r.content[l].k) < kPositionFreeTolerance);
      CHECK(max_abs_diff(moved.content[l].v, r.content[l].v) < kPositionFreeTolerance);
    }
    CHECK(max_abs_diff(moved.logits, r.logits) < 1e-4);
  }
}

TEST_CASE("MLA: incremental decode through PagedSequence equals a full prefill; relocated past is exact",
          "[families][kv_pool][cpu]") {
  const auto m = generated(mla_variant("no q low-rank"));
  const ModelConfig& c = m->config();
  const std::vector<int64_t> tokens = random_tokens(19, c.vocab_size, 3);
  const at::Tensor full = run(*m, tokens).logits;

  KVPool pool({c.num_layers, /*num_pages=*/8, /*page_size=*/4, c.content_widths(), at::kFloat});
  PagedSequence seq(pool, c);
  CHECK(seq.k_shape() == c.content_k_shape());
  const ForwardResult first = run(*m, slice(tokens, 0, 6));
  REQUIRE(seq.append(first.content, range(0, 6)).is_ok());
  for (int64_t t = 6; t < 19; ++t) {
    const PastKV past = seq.gather();
    const ForwardResult step = run(*m, {tokens[static_cast<size_t>(t)]}, {}, &past, LogitsMode::kLast);
    INFO("token " << t);
    REQUIRE(max_abs_diff(step.logits, full.narrow(0, t, 1)) < kLogitTolerance);
    REQUIRE(seq.append(step.content, range(t, 1)).is_ok());
  }
  pool.verify_integrity();
  // A GQA-shaped sequence cannot hold MLA content.
  CHECK_THROWS_WITH(PagedSequence(pool, c.num_kv_heads, c.head_dim), Contains("widths"));

  // Relocation: A's content computed alone at 0.. placed at 100.. equals a prefill of A·B at 100..
  const std::vector<int64_t> a = slice(tokens, 0, 12), b = slice(tokens, 12, 19);
  const ForwardResult reference = run(*m, tokens, range(100, 19));
  PastKV past{run(*m, a, range(0, 12), nullptr, LogitsMode::kNone).content, range(100, 12)};
  const ForwardResult tail = run(*m, b, range(112, 7), &past);
  CHECK(max_abs_diff(tail.logits, reference.logits.narrow(0, 12, 7)) < kLogitTolerance);

  // Partial recompute with the exact content cached reproduces the exact rows.
  ForwardInput in;
  in.tokens = b;
  in.positions = range(112, 7);
  ForwardOptions o;
  o.logits = LogitsMode::kAll;
  o.recompute = at::tensor({1, 4}, at::kLong);
  o.cached = tail.content;
  const ForwardResult partial = m->forward(in, &past, o);
  CHECK(max_abs_diff(partial.logits[1], tail.logits[4]) < 1e-4);

  // Past content of the GQA shape is refused naming the expected MLA shapes.
  PastKV wrong{
      std::vector<LayerKV>(static_cast<size_t>(c.num_layers), LayerKV{at::zeros({2, c.num_kv_heads, c.head_dim}),
                                                                      at::zeros({2, c.num_kv_heads, c.head_dim})}),
      range(0, 2)};
  CHECK_THROWS_WITH(run(*m, {1}, {}, &wrong), Contains("past.layers[0]") && Contains("[2, 1, 8]"));
}

TEST_CASE("M-RoPE angles: sections select coordinates, text positions are 1-D RoPE, relocation composes",
          "[families][rope][cpu]") {
  RopeConfig r;
  r.head_dim = r.rotary_dim = 16;
  r.theta = 1e4;
  r.mrope_section = {2, 3, 3};
  RopeConfig plain = r;
  plain.mrope_section.clear();
  const at::Tensor g = grid_tensor(vl_grid());  // [3, 12]
  const at::Tensor angles = rope_angles(r, g);
  REQUIRE(angles.sizes() == at::IntArrayRef({12, 8}));
  const at::Tensor inv = rope_inv_freq(plain);
  for (int64_t i = 0; i < 8; ++i) {
    const int64_t row = i < 2 ? 0 : i < 5 ? 1 : 2;
    CHECK(max_abs_diff(angles.select(1, i), g[row].to(at::kDouble) * inv[i]) < 1e-12);
  }
  // Text: t = h = w, as a grid or as 1-D positions, is ordinary RoPE.
  const at::Tensor text = range(5, 7);
  CHECK(max_abs_diff(rope_angles(r, text), rope_angles(plain, text)) == 0.0);
  CHECK(max_abs_diff(rope_angles(r, text.unsqueeze(0).expand({3, 7})), rope_angles(plain, text)) == 0.0);
  // An image patch is not: its h and w coordinates move the later frequencies.
  CHECK(max_abs_diff(angles[4], rope_angles(plain, at::tensor({3}, at::kLong))[0]) > 3e-3);  // w = 4, not 3

  // Relocation by δ on all three coordinates: rotate(rotate(x, G), δ) == rotate(x, G + δ).
  const at::Tensor x = at::randn({12, 2, 16}, at::TensorOptions().dtype(at::kDouble));
  for (int64_t delta : {1, 37, 1000}) {
    INFO("delta " << delta);
    const at::Tensor twice =
        rope_rotate(r, rope_rotate(r, x, angles), rope_angles(r, at::full({12}, delta, at::kLong)));
    CHECK(max_abs_diff(twice, rope_rotate(r, x, rope_angles(r, g + delta))) < 1e-9);
  }
  // Moving one coordinate only is a different rotation (the check above can fail).
  at::Tensor h_only = g.clone();
  h_only[1] += 5;
  CHECK(max_abs_diff(rope_rotate(r, x, rope_angles(r, h_only)), rope_rotate(r, x, rope_angles(r, g + 5))) > 1e-3);

  CHECK_THROWS_WITH(rope_angles(plain, g), Contains("positions"));
  CHECK_THROWS_WITH(rope_angles(r, g.narrow(0, 0, 2)), Contains("[3, T]"));
  RopeConfig bad = r;
  bad.mrope_section = {2, 3, 4};
  CHECK_THROWS_WITH(rope_angles(bad, text), Contains("mrope_section") && Contains("rotary_dim/2 = 8"));
}

TEST_CASE("M-RoPE model: the forward over a position grid matches an independent naive reference", "[families][cpu]") {
  const auto m = generated(generator_preset("tiny-qwen2-vl"));
  const std::vector<int64_t> tokens = random_tokens(12, m->config().vocab_size, 4);
  const auto grid = vl_grid();
  const RefResult ref = ref_mrope(*m, tokens, grid);
  CHECK(ref.logits.abs().max().item<double>() > 0.5);
  CHECK(max_abs_diff(run(*m, tokens, grid_tensor(grid)).logits, ref.logits) < 1e-4);

  // Embeddings (the caller's vision tower output) with the grid give the same logits.
  ForwardInput in;
  in.embeddings = m->embed(tokens);
  in.positions = grid_tensor(grid);
  ForwardOptions o;
  o.logits = LogitsMode::kAll;
  CHECK(max_abs_diff(m->forward(in, nullptr, o).logits, ref.logits) < 1e-4);
  // The grid matters: treating the image patches as text positions changes the logits.
  CHECK(max_abs_diff(run(*m, tokens, range(0, 12)).logits, ref.logits) > 1e-3);
}

TEST_CASE("M-RoPE model fed text positions equals Qwen2 with the same weights", "[families][cpu]") {
  const auto vl = generated(generator_preset("tiny-qwen2-vl"));
  ModelConfig qwen2 = vl->config();
  qwen2.arch = Arch::kQwen2;
  qwen2.rope.mrope_section.clear();
  const Model plain(qwen2, vl->weights(), "test: tiny-qwen2-vl as qwen2");
  CHECK(plain.fingerprint() != vl->fingerprint());
  const std::vector<int64_t> tokens = random_tokens(10, qwen2.vocab_size, 5);
  const at::Tensor expected = run(plain, tokens, range(3, 10)).logits;
  CHECK(max_abs_diff(run(*vl, tokens, range(3, 10)).logits, expected) < 1e-6);
  CHECK(max_abs_diff(run(*vl, tokens, range(3, 10).unsqueeze(0).expand({3, 10}).contiguous()).logits, expected) < 1e-6);
}

TEST_CASE("M-RoPE model: decode over a 3-row PagedSequence equals a full prefill; content is position-free",
          "[families][kv_pool][cpu]") {
  const auto m = generated(generator_preset("tiny-qwen2-vl"));
  const ModelConfig& c = m->config();
  const std::vector<int64_t> tokens = random_tokens(12, c.vocab_size, 6);
  const at::Tensor grid = grid_tensor(vl_grid());
  const ForwardResult full = run(*m, tokens, grid);

  KVPool pool({c.num_layers, /*num_pages=*/8, /*page_size=*/4, c.content_widths(), at::kFloat});
  PagedSequence seq(pool, c);
  REQUIRE(seq.position_rows() == 3);
  REQUIRE(seq.append(run(*m, slice(tokens, 0, 5), grid.narrow(1, 0, 5)).content, grid.narrow(1, 0, 5)).is_ok());
  for (int64_t t = 5; t < 12; ++t) {
    const PastKV past = seq.gather();
    REQUIRE(past.positions.sizes() == at::IntArrayRef({3, t}));
    const ForwardResult step =
        run(*m, {tokens[static_cast<size_t>(t)]}, grid.narrow(1, t, 1), &past, LogitsMode::kLast);
    INFO("token " << t);
    REQUIRE(max_abs_diff(step.logits, full.logits.narrow(0, t, 1)) < 1e-4);
    REQUIRE(seq.append(step.content, grid.narrow(1, t, 1)).is_ok());
  }
  CHECK(at::equal(seq.gather().positions, grid));
  // Text appended as 1-D positions is stored as t = h = w; truncation drops whole triples.
  REQUIRE(seq.append(run(*m, {3}, range(12, 1), nullptr, LogitsMode::kNone).content, range(12, 1)).is_ok());
  CHECK(at::equal(seq.gather().positions.select(1, 12), at::full({3}, 12, at::kLong)));
  seq.truncate(10);
  CHECK(seq.positions().size() == 30u);
  CHECK(at::equal(seq.gather().positions, grid.narrow(1, 0, 10)));
  pool.verify_integrity();

  // Position-free: the content of a chunk computed alone at G equals its content at G + δ.
  for (int64_t delta : {1, 200}) {
    const ForwardResult moved = run(*m, tokens, grid + delta);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      CHECK(max_abs_diff(moved.content[l].k, full.content[l].k) < kPositionFreeTolerance);
      CHECK(max_abs_diff(moved.content[l].v, full.content[l].v) < kPositionFreeTolerance);
    }
  }
  // Relocation: A's content computed alone at its grid, placed at grid + 50 behind B, equals a
  // prefill of A·B at grid + 50.
  const at::Tensor moved_grid = grid + 50;
  const ForwardResult reference = run(*m, tokens, moved_grid);
  PastKV past{run(*m, slice(tokens, 0, 8), grid.narrow(1, 0, 8), nullptr, LogitsMode::kNone).content,
              moved_grid.narrow(1, 0, 8)};
  const ForwardResult tail = run(*m, slice(tokens, 8, 12), moved_grid.narrow(1, 8, 4), &past);
  CHECK(max_abs_diff(tail.logits, reference.logits.narrow(0, 8, 4)) < 1e-4);
}

TEST_CASE("M-RoPE model: bad position grids are refused naming the argument", "[families][errors][cpu]") {
  const auto m = generated(generator_preset("tiny-qwen2-vl"));
  const std::vector<int64_t> tokens{1, 2, 3, 4};
  CHECK_THROWS_WITH(run(*m, tokens, at::zeros({3, 5}, at::kLong)),
                    Contains("input.positions") && Contains("position grid has 5 columns for 4 tokens"));
  CHECK_THROWS_WITH(run(*m, tokens, at::zeros({2, 4}, at::kLong)), Contains("3 rows"));
  // The limit applies to every coordinate: an h beyond max_position_embeddings is refused.
  at::Tensor grid = at::zeros({3, 4}, at::kLong);
  grid[1][2] = m->config().max_position_embeddings;
  CHECK_THROWS_WITH(run(*m, tokens, grid), Contains("position 1024") && Contains("max_position_embeddings"));
  grid[1][2] = -1;
  CHECK_THROWS_WITH(run(*m, tokens, grid), Contains("negative"));
  // A past whose grid disagrees with its content length.
  const ForwardResult r = run(*m, tokens, {}, nullptr, LogitsMode::kNone);
  PastKV past{r.content, at::zeros({3, 4}, at::kLong)};
  CHECK_NOTHROW(run(*m, {5}, {}, &past));
  past.positions = at::zeros({3, 3}, at::kLong);
  CHECK_THROWS_WITH(run(*m, {5}, {}, &past), Contains("past.layers[0]"));
  // A GQA model without M-RoPE takes no grid.
  ModelConfig qwen2 = m->config();
  qwen2.arch = Arch::kQwen2;
  qwen2.rope.mrope_section.clear();
  const Model plain(qwen2, m->weights(), "test");
  CHECK_THROWS_WITH(run(plain, tokens, at::zeros({3, 4}, at::kLong)), Contains("input.positions must be [T=4]"));
  // PagedSequence: grids only with 3 position rows.
  KVPool pool({qwen2.num_layers, 4, 4, qwen2.content_widths(), at::kFloat});
  PagedSequence one_row(pool, plain.config());
  CHECK_THROWS_WITH(one_row.append(r.content, at::zeros({3, 4}, at::kLong)), Contains("positions"));
  CHECK_THROWS_WITH(PagedSequence(pool, qwen2.content_k_shape(), qwen2.content_v_shape(), 2),
                    Contains("position_rows"));
}

TEST_CASE("GQA with partial rotary and YaRN matches Hugging Face's attention: only rotated dims are scaled",
          "[families][cpu]") {
  ModelConfig config = generator_preset("tiny-qwen2");  // head_dim 16, q/k/v biases
  config.rope.rotary_dim = 8;                           // partial_rotary_factor 0.5
  config.rope.scaling = RopeScaling::kYarn;
  config.rope.factor = 4.0;  // attention factor 0.1·ln 4 + 1 ≈ 1.139
  config.rope.original_max_position_embeddings = 256;
  const auto m = generated(config);
  const std::vector<int64_t> tokens = random_tokens(11, config.vocab_size, 9);
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < 11; ++i) positions.push_back(40 + 3 * i);  // gapped: rotation, not order, matters
  const RefResult reference = ref_gqa_hf(*m, tokens, positions);
  const ForwardResult runtime = run(*m, tokens, at::tensor(at::ArrayRef<int64_t>(positions), at::kLong));
  CHECK(max_abs_diff(runtime.logits, reference.logits) < kLogitTolerance);
}

}  // namespace ORBIT_TEST_FILE
