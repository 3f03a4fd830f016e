// Multi-head latent attention (DeepSeek-V2), see MlaConfig in config.h.
//
//   content (stored):   k = k_pe [R, 1, d_rope] before rotation,  v = c_KV [R, 1, r_kv] after kv_a_layernorm
//   attended:           per head h,  k_h = [k_nope_h ‖ RoPE(k_pe)],  v_h,   [k_nope_h ‖ v_h] = W_kvb,h · c_KV
//                       q_h = [q_nope_h ‖ RoPE(q_pe_h)]
//
// DeepSeek-V2's reference code permutes q_pe/k_pe from interleaved pairs to half-split before
// rotate_half; that is the interleaved layout on the stored order (RopeConfig.layout = kInterleaved),
// so stored k_pe is in checkpoint order.
//
// Two forms (MlaForm, model.h), the same attention up to float32 rounding. With W_kvb,h = [W_UK_h ; W_UV_h]:
//   naive      k_nope and v re-expanded from the latent for every key token in every layer, then attend()
//              per head: cost per key token (S·r_kv·(d_nope + d_v) per head before any score).
//   absorbed   q_nope_h·k_nope_hᵀ = (q_nope_h·W_UK_h)·c_KVᵀ and Σ p·v_h = W_UV_h·(Σ p·c_KV): multi-query
//              attention over one key head [c_KV ‖ RoPE(k_pe)] and one value head c_KV, the queries carried
//              into the latent before and the output out of it after (cost per query). The past's latent and
//              the input's are read in place, apart (no copy of S rows; only k_pe is rotated into a tensor of
//              its own). Masks, positions (RoPE of k_pe, YaRN's a² on q_pe) and the softmax scale are the
//              naive form's; scores and softmax in float32.
// mla_absorbed_cheaper (attention.h) counts the multiply-adds of both; forward_sequence.cpp picks the form.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

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

at::Tensor mla_absorbed_queries(const ModelConfig& c, const LayerWeights& w, const at::Tensor& q) {
  const MlaConfig& m = c.mla;
  const int64_t R = q.size(0), H = c.num_heads;
  // W_kvb [H·(d_nope + d_v), r_kv] per head: rows [0, d_nope) are W_UK_h, the rest W_UV_h.
  const at::Tensor w_uk = w.wkv_b.view({H, m.qk_nope_head_dim + m.v_head_dim, m.kv_lora_rank})
                              .narrow(1, 0, m.qk_nope_head_dim);  // [H, d_nope, r_kv]
  at::Tensor a = at::empty({R, H, m.kv_lora_rank + m.qk_rope_head_dim}, q.options());
  // [H, R, d_nope] · [H, d_nope, r_kv] -> the latent part of each head's queries.
  a.narrow(2, 0, m.kv_lora_rank)
      .copy_(at::bmm(q.narrow(2, 0, m.qk_nope_head_dim).transpose(0, 1), w_uk).transpose(0, 1));
  a.narrow(2, m.kv_lora_rank, m.qk_rope_head_dim).copy_(q.narrow(2, m.qk_nope_head_dim, m.qk_rope_head_dim));
  return a;
}

at::Tensor mla_absorbed_output(const ModelConfig& c, const LayerWeights& w, const at::Tensor& attended) {
  const MlaConfig& m = c.mla;
  const int64_t R = attended.size(0), H = c.num_heads;
  const at::Tensor w_uv = w.wkv_b.view({H, m.qk_nope_head_dim + m.v_head_dim, m.kv_lora_rank})
                              .narrow(1, m.qk_nope_head_dim, m.v_head_dim);  // [H, d_v, r_kv]
  // [H, R, r_kv] · [H, r_kv, d_v] -> [H, R, d_v] -> [R, H·d_v].
  const at::Tensor o = at::bmm(attended.reshape({R, H, m.kv_lora_rank}).transpose(0, 1), w_uv.transpose(1, 2));
  return o.transpose(0, 1).reshape({R, H * m.v_head_dim});
}

MlaAbsorbed mla_absorb(const ModelConfig& c, const LayerWeights& w, const at::Tensor& q, const LayerKV& content,
                       const ops::RopeTables& tables) {
  const MlaConfig& m = c.mla;
  const int64_t S = content.v.size(0);
  MlaAbsorbed a;
  a.q = mla_absorbed_queries(c, w, q);
  a.v = content.v;
  a.k = at::empty({S, 1, m.kv_lora_rank + m.qk_rope_head_dim}, content.v.options());
  a.k.narrow(2, 0, m.kv_lora_rank).copy_(content.v);
  rotate_into(c.rope, a.k.narrow(2, m.kv_lora_rank, m.qk_rope_head_dim), content.k, tables);
  return a;
}

namespace {

// The absorbed queries flattened [R·H, r_kv] (q_nope_h·W_UK_h) and [R·H, d_rope] (q_pe_h), contiguous.
std::pair<at::Tensor, at::Tensor> absorbed_queries(const ModelConfig& c, const LayerWeights& w, const at::Tensor& q) {
  const MlaConfig& m = c.mla;
  const int64_t R = q.size(0), H = c.num_heads;
  const at::Tensor w_uk = w.wkv_b.view({H, m.qk_nope_head_dim + m.v_head_dim, m.kv_lora_rank})
                              .narrow(1, 0, m.qk_nope_head_dim);                             // [H, d_nope, r_kv]
  const at::Tensor lat = at::bmm(q.narrow(2, 0, m.qk_nope_head_dim).transpose(0, 1), w_uk);  // [H, R, r_kv]
  return {lat.transpose(0, 1).reshape({R * H, m.kv_lora_rank}),
          q.narrow(2, m.qk_nope_head_dim, m.qk_rope_head_dim).reshape({R * H, m.qk_rope_head_dim})};
}

// The key pieces (the past's rows, then the input's) as latent [n, r_kv] and rotated k_pe [n, d_rope], read
// in place but for the rotation; `tables` covers every piece's rows in order.
std::vector<std::pair<at::Tensor, at::Tensor>> absorbed_keys(const ModelConfig& c,
                                                             const std::vector<const LayerKV*>& pieces,
                                                             const ops::RopeTables& tables) {
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  int64_t at_row = 0;
  for (const LayerKV* p : pieces) {
    const int64_t n = p->v.size(0);
    const ops::RopeTables t{tables.cos.narrow(0, at_row, n), tables.sin.narrow(0, at_row, n)};
    out.emplace_back(p->v.reshape({n, c.mla.kv_lora_rank}),
                     rotate(c.rope, p->k, t).reshape({n, c.mla.qk_rope_head_dim}));
    at_row += n;
  }
  return out;
}

}  // namespace

at::Tensor mla_absorbed_attention(const AttentionStep& s, const LayerKV* past) {
  const ModelConfig& c = s.config;
  const MlaConfig& m = c.mla;
  const int64_t R = s.q.size(0), H = c.num_heads;
  const auto [q_lat, q_pe] = absorbed_queries(c, s.weights, s.q);
  std::vector<const LayerKV*> pieces;
  if (past != nullptr) pieces.push_back(past);
  pieces.push_back(&s.keys);
  const auto keys = absorbed_keys(c, pieces, s.key_tables);
  int64_t S = 0;
  for (const auto& k : keys) S += k.first.size(0);
  // Scores [R·H, S] in float32, each piece's columns q_lat·c_KVᵀ + q_pe·RoPE(k_pe)ᵀ.
  at::Tensor scores = at::empty({R * H, S}, s.q.options().dtype(at::kFloat));
  int64_t at_row = 0;
  for (const auto& [latent, pe] : keys) {
    const int64_t n = latent.size(0);
    scores.narrow(1, at_row, n).copy_(at::addmm(at::mm(q_pe, pe.t()), q_lat, latent.t()));
    at_row += n;
  }
  scores.mul_(mla_scale(c));
  if (!s.tail_causal || R > 1) {
    // Query r sees keys [0, query_index[r]].
    const at::Tensor hidden = at::arange(S, s.query_index.options()).view({1, S}) > s.query_index.view({R, 1});
    scores.view({R, H, S}).masked_fill_(hidden.unsqueeze(1), -std::numeric_limits<float>::infinity());
  }
  const at::Tensor p = at::softmax(scores, -1).to(s.q.scalar_type());
  // Each head's softmax-weighted latent [R·H, r_kv], piece by piece.
  at::Tensor attended = at::zeros({R * H, m.kv_lora_rank}, s.q.options());
  at_row = 0;
  for (const auto& k : keys) {
    const int64_t n = k.first.size(0);
    attended.addmm_(p.narrow(1, at_row, n), k.first);
    at_row += n;
  }
  return mla_absorbed_output(c, s.weights, attended.view({R, H * m.kv_lora_rank}));
}

bool mla_absorbed_cheaper(const MlaConfig& m, int64_t queries, int64_t keys) {
  const int64_t expand = m.kv_lora_rank * (m.qk_nope_head_dim + m.v_head_dim);
  const int64_t absorbed_width = 2 * m.kv_lora_rank + m.qk_rope_head_dim;
  const int64_t naive_width = m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim;
  // In double: R·S·width overflows no int64 at real sizes, but the rule should not depend on it.
  const double r = static_cast<double>(queries), s = static_cast<double>(keys);
  return r * (static_cast<double>(expand) + s * static_cast<double>(absorbed_width - naive_width)) <
         s * static_cast<double>(expand);
}

int64_t mla_absorbed_min_past(const MlaConfig& m, int64_t queries) {
  const double expand = static_cast<double>(m.kv_lora_rank * (m.qk_nope_head_dim + m.v_head_dim));
  const double extra = static_cast<double>(2 * m.kv_lora_rank - m.qk_nope_head_dim - m.v_head_dim);
  const double r = static_cast<double>(queries);
  // Absorbed while S·(E − R·D) > R·E (mla_absorbed_cheaper): never where E ≤ R·D.
  if (queries < 1 || expand <= r * extra) return -1;
  int64_t keys = std::max<int64_t>(queries, static_cast<int64_t>(r * expand / (expand - r * extra)));
  // The bound in double may sit a key off the rule's own test: step to the first S it takes.
  while (keys > queries && mla_absorbed_cheaper(m, queries, keys - 1)) --keys;
  while (!mla_absorbed_cheaper(m, queries, keys)) ++keys;
  return keys - queries;
}

double attention_scale(const ModelConfig& c) {
  return c.attention() == AttentionKind::kMla ? mla_scale(c) : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
}

}  // namespace orbit::runtime::detail
