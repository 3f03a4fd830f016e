// Multi-head latent attention (DeepSeek-V2), see MlaConfig in config.h.
//
//   content (stored):   k = k_pe [R, 1, d_rope] before rotation,  v = c_KV [R, 1, r_kv] after kv_a_layernorm
//   attended:           per head h,  k_h = [k_nope_h ‖ RoPE(k_pe)],  v_h,   [k_nope_h ‖ v_h] = W_kvb,h · c_KV
//                       q_h = [q_nope_h ‖ RoPE(q_pe_h)]
//
// DeepSeek-V2's reference code permutes q_pe/k_pe from interleaved pairs to half-split before
// rotate_half; that is the interleaved layout on the stored order (RopeConfig.layout = kInterleaved),
// so stored k_pe is in checkpoint order. This is the "naive" (non-absorbed) form: k_nope and v are
// re-expanded from the latent for every key token in every layer.
#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "attention.h"
#include "orbit/runtime/rope.h"

namespace orbit::runtime::detail {

namespace {
// HF's q_a_layernorm / kv_a_layernorm are built without an eps argument: its default, 1e-6.
constexpr double kLatentNormEps = 1e-6;
}  // namespace

LayerKV mla_content(const ModelConfig& c, const LayerWeights& w, const at::Tensor& h) {
  const MlaConfig& m = c.mla;
  const int64_t R = h.size(0);
  const at::Tensor compressed = dense(h, w.wkv_a);  // [R, r_kv + d_rope] = [c ‖ k_pe]
  const at::Tensor latent = rms_norm(compressed.narrow(1, 0, m.kv_lora_rank), w.kv_a_norm, kLatentNormEps);
  const at::Tensor k_pe = compressed.narrow(1, m.kv_lora_rank, m.qk_rope_head_dim);
  return {k_pe.contiguous().view({R, 1, m.qk_rope_head_dim}), latent.contiguous().view({R, 1, m.kv_lora_rank})};
}

at::Tensor mla_queries(const ModelConfig& c, const LayerWeights& w, const at::Tensor& h,
                       const ops::RopeTables& tables) {
  const MlaConfig& m = c.mla;
  const int64_t R = h.size(0), H = c.num_heads;
  // Queries: [R, H, d_nope + d_rope].
  const at::Tensor q_flat =
      m.q_lora_rank == 0 ? dense(h, w.wq) : dense(rms_norm(dense(h, w.wq_a), w.q_a_norm, kLatentNormEps), w.wq_b);
  const at::Tensor q = q_flat.view({R, H, c.head_dim});
  const at::Tensor q_nope = q.narrow(2, 0, m.qk_nope_head_dim);
  // YaRN's attention factor scales cos and sin of both q_pe and k_pe: the RoPE part of q·k by its square.
  const double a = rope_attention_scaling(c.rope);
  const at::Tensor q_pe = rotate(c.rope, q.narrow(2, m.qk_nope_head_dim, m.qk_rope_head_dim), tables).mul_(a * a);
  return at::cat({q_nope, q_pe}, 2);
}

namespace {

double mla_scale(const ModelConfig& c) {
  return rope_mla_softmax_scaling(c.rope) / std::sqrt(static_cast<double>(c.head_dim));
}

}  // namespace

void mla_keys_into(const ModelConfig& c, const LayerWeights& w, const LayerKV& content, const ops::RopeTables* tables,
                   const at::Tensor& k, const at::Tensor& v) {
  const MlaConfig& m = c.mla;
  const int64_t S = content.k.size(0), H = c.num_heads;
  const at::Tensor kv =
      dense(content.v.reshape({S, m.kv_lora_rank}), w.wkv_b).view({S, H, m.qk_nope_head_dim + m.v_head_dim});
  k.narrow(2, 0, m.qk_nope_head_dim).copy_(kv.narrow(2, 0, m.qk_nope_head_dim));
  v.copy_(kv.narrow(2, m.qk_nope_head_dim, m.v_head_dim));
  // k_pe is one head's, shared by every head.
  const at::Tensor pe = tables != nullptr ? rotate(c.rope, content.k, *tables) : content.k;
  k.narrow(2, m.qk_nope_head_dim, m.qk_rope_head_dim).copy_(pe.expand({S, H, m.qk_rope_head_dim}));
}

std::pair<at::Tensor, at::Tensor> mla_keys(const ModelConfig& c, const LayerWeights& w, const LayerKV& content,
                                           const ops::RopeTables* tables) {
  const int64_t S = content.k.size(0), H = c.num_heads;
  at::Tensor k = at::empty({S, H, c.head_dim}, content.v.options());
  at::Tensor v = at::empty({S, H, c.mla.v_head_dim}, content.v.options());
  mla_keys_into(c, w, content, tables, k, v);
  return {k, v};
}

at::Tensor mla_attention(const AttentionStep& s) {
  const auto [k, v] = mla_keys(s.config, s.weights, s.keys, &s.key_tables);
  return attend(s.q, k, v, s.query_index, mla_scale(s.config), s.tail_causal);
}

double attention_scale(const ModelConfig& c) {
  return c.attention() == AttentionKind::kMla ? mla_scale(c) : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
}

}  // namespace orbit::runtime::detail
