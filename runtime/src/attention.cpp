// Shared attention math and the GQA/MHA family (see attention.h).
#include "attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "orbit/runtime/rope.h"

namespace orbit::runtime::detail {

namespace {
// Queries are processed in blocks of this many tokens so the score matrix stays bounded
// ([num_heads, kQueryBlock, S] floats) on long prefills.
constexpr int64_t kQueryBlock = 512;
}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& gain, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * gain;
}

at::Tensor dense(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& query_index,
                  double scale) {
  const int64_t T = q.size(0), H = q.size(1), dk = q.size(2), S = k.size(0), Hkv = k.size(1), dv = v.size(2);
  const int64_t group = H / Hkv;
  // Head h uses kv head h / group: view q heads as [H_kv, group].
  at::Tensor kh = k.permute({1, 2, 0});  // [H_kv, d_k, S]
  at::Tensor vh = v.permute({1, 0, 2});  // [H_kv, S, d_v]
  at::Tensor out = at::empty({T, H * dv}, q.options());
  const at::Tensor key_index = at::arange(S, at::kLong).unsqueeze(0);  // [1, S]
  for (int64_t start = 0; start < T; start += kQueryBlock) {
    const int64_t len = std::min(kQueryBlock, T - start);
    at::Tensor qb = q.narrow(0, start, len).reshape({len, Hkv, group, dk}).permute({1, 2, 0, 3}).reshape(
        {Hkv, group * len, dk});
    at::Tensor scores = at::bmm(qb, kh).mul_(scale).view({Hkv, group, len, S});
    at::Tensor hidden = key_index > query_index.narrow(0, start, len).unsqueeze(1);  // [len, S]
    scores.masked_fill_(hidden, -std::numeric_limits<float>::infinity());
    at::Tensor probs = at::softmax(scores, -1).view({Hkv, group * len, S});
    at::Tensor ob = at::bmm(probs, vh).view({Hkv, group, len, dv}).permute({2, 0, 1, 3}).reshape({len, H * dv});
    out.narrow(0, start, len).copy_(ob);
  }
  return out;
}

LayerKV gqa_content(const ModelConfig& c, const LayerWeights& w, const at::Tensor& h) {
  const int64_t R = h.size(0);
  return {dense(h, w.wk, w.bk).view({R, c.num_kv_heads, c.head_dim}),
          dense(h, w.wv, w.bv).view({R, c.num_kv_heads, c.head_dim})};
}

at::Tensor gqa_attention(const AttentionStep& s) {
  const ModelConfig& c = s.config;
  const at::Tensor q = dense(s.h, s.weights.wq, s.weights.bq).view({s.h.size(0), c.num_heads, c.head_dim});
  // YaRN's attention factor multiplies HF's cos and sin, so the rotated dims' share of q·k grows by its
  // square while pass-through dims (partial rotary) keep theirs (rope.h). Scaling q's rotated dims by m²
  // gives exactly that.
  const double mscale = rope_attention_scaling(c.rope);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  at::Tensor q_rot = rope_rotate(c.rope, q, s.query_angles);
  if (mscale != 1.0) q_rot.narrow(2, 0, c.rope.rotary_dim).mul_(mscale * mscale);
  // Relocation on the fly: every key (past ones included) is rotated to its position here.
  return attend(q_rot, rope_rotate(c.rope, s.keys.k, s.key_angles), s.keys.v, s.query_index, scale);
}

}  // namespace orbit::runtime::detail
