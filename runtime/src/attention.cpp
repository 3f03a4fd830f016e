// Shared attention math and the GQA/MHA family (see attention.h).
#include "attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cached_attention_op.h"
#include "ops/cpu_features.h"
#include "ops/past_attention_op.h"
#include "ops/small_gemm_op.h"
#include "orbit/runtime/rope.h"

// PyTorch's fused attention (flash / memory-efficient kernels) with GQA and an explicit scale needs
// libtorch >= 2.5; older ones (Debian's 1.13) use the blocked path below on every device.
#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif
#if defined(TORCH_VERSION_MAJOR) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))
#define ORBIT_HAVE_SDPA 1
#else
#define ORBIT_HAVE_SDPA 0
#endif

namespace orbit::runtime::detail {

namespace {
// Queries are processed in blocks of this many tokens so the score matrix stays bounded
// ([num_heads, kQueryBlock, S] floats) on long prefills.
constexpr int64_t kQueryBlock = 512;
// The widest heads attend_batch sends to the CPU kernel (fused_cpu_attention_takes): bench_attention
// measured it 1.1x-3.3x faster than the blocked products at heads of 8, 16 and 32, and mostly slower at 64
// and 128, where the products' register blocking pays (the kernel reads each key row once per query row and
// head).
constexpr int64_t kFusedCpuMaxHeadDim = 32;

// RMSNorm of a few float32 rows on the CPU in one pass per row (five ATen ops cost more than the arithmetic
// on a decode step's rows): mean of squares in eight float32 partial sums, then x · rsqrt(mean + eps) · gain,
// each row on its own.
at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& gain, double eps) {
  const at::Tensor xc = x.contiguous();
  at::Tensor out = ops::reused_cpu_output(xc.sizes(), at::kFloat);
  const int64_t H = xc.size(-1), rows = xc.numel() / H;
  const float* in = xc.data_ptr<float>();
  const float* g = gain.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r, in += H, o += H) {
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t e = 0;
    for (; e + 8 <= H; e += 8) {
      for (int j = 0; j < 8; ++j) part[j] += in[e + j] * in[e + j];
    }
    float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    for (; e < H; ++e) sum += in[e] * in[e];
    const float scale = 1.0f / std::sqrt(sum / static_cast<float>(H) + static_cast<float>(eps));
    for (int64_t i = 0; i < H; ++i) o[i] = in[i] * scale * g[i];
  }
  return out;
}
}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& gain, double eps) {
  if (ops::avx2_kernels_run() && x.scalar_type() == at::kFloat && x.device().is_cpu() && x.dim() >= 1 &&
      x.size(-1) > 0 && x.numel() / x.size(-1) <= ops::kSmallGemmRows && gain.scalar_type() == at::kFloat &&
      gain.dim() == 1 && gain.size(0) == x.size(-1) && gain.device().is_cpu() && gain.is_contiguous()) {
    return rms_norm_rows(x, gain, eps);
  }
  if (x.scalar_type() == at::kFloat) return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * gain;
  // Reduced precision: normalise in float32 and round once, then scale by the gain in the compute dtype
  // (as transformers' Llama/Qwen2 RMSNorm does).
  const at::Tensor xf = x.to(at::kFloat);
  return gain * (xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type());
}

at::Tensor dense(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (ops::small_gemm_takes(x, weight, bias)) return ops::small_gemm(x, weight, bias);
  return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

at::Tensor silu_gate(at::Tensor gate) {
  const int64_t I = gate.dim() >= 1 ? gate.size(-1) : 0;
  const bool few_rows = I > 0 && gate.numel() / I <= ops::kSmallGemmRows;
  if (!ops::avx2_kernels_run() || !gate.device().is_cpu() || gate.scalar_type() != at::kFloat || !few_rows ||
      I % kSiluRowFloats == 0) {
    return at::silu_(gate);
  }
  const int64_t rows = gate.numel() / I, padded = (I + kSiluRowFloats - 1) / kSiluRowFloats * kSiluRowFloats;
  at::Tensor wide = at::empty({rows, padded}, gate.options());
  wide.narrow(1, I, padded - I).zero_();
  at::Tensor out = wide.narrow(1, 0, I);
  out.copy_(gate.reshape({rows, I}));
  at::silu_(wide);  // rows · padded elements: a multiple of the vector loop's step, no scalar tail
  return out.view(gate.sizes());
}

bool fused_attention_available() { return ORBIT_HAVE_SDPA != 0; }

at::Tensor rotate(const RopeConfig& rope, const at::Tensor& x, const ops::RopeTables& tables) {
  if (x.scalar_type() == at::kHalf)
    return ops::rope_rotate(x.to(at::kFloat).contiguous(), tables, rope.layout).to(at::kHalf);
  return ops::rope_rotate(x.contiguous(), tables, rope.layout);
}

void rotate_into(const RopeConfig& rope, const at::Tensor& out, const at::Tensor& x, const ops::RopeTables& tables) {
  // The rotation kernel writes contiguous rows of tokens: a strided `out` (a head-major slot) takes a copy.
  if (x.scalar_type() == at::kHalf || !out.is_contiguous()) {
    out.copy_(rotate(rope, x, tables));
  } else {
    ops::rope_rotate_out(out, x.contiguous(), tables, rope.layout);
  }
}

bool uses_past_attention(const at::Tensor& q, int64_t keys, bool tail_causal) {
  const int64_t R = q.size(0);
  // One query token (decode) stays fused: its value GEMM would be [dv, G] over all S keys, which cuBLAS
  // runs far slower than flash decoding (43 ms against 17 ms per token at 32k on an H200).
  return tail_causal && R >= 2 && R < keys && R <= ops::kPastAttentionMaxQueries && ops::past_attention_available(q);
}

namespace {

#if ORBIT_HAVE_SDPA
// CUDA: at::scaled_dot_product_attention. Causality as in attend(): when the queries are the last R keys
// (tail_causal), R == S is the plain causal mask and R == 1 needs none; anything else gets a boolean
// mask built from query_index.
at::Tensor attend_fused(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& query_index,
                        double scale, bool tail_causal) {
  const int64_t R = q.size(0), H = q.size(1), S = k.size(0), dv = v.size(2);
  const at::Tensor qh = q.permute({1, 0, 2}).unsqueeze(0);  // [1, H, R, dk]
  const at::Tensor kh = k.permute({1, 0, 2}).unsqueeze(0);  // [1, H_kv, S, dk]
  const at::Tensor vh = v.permute({1, 0, 2}).unsqueeze(0);
  c10::optional<at::Tensor> mask;
  bool is_causal = false;
  if (tail_causal && R == S) {
    is_causal = true;
  } else if (!(tail_causal && R == 1)) {
    const at::Tensor key_index = at::arange(S, q.options().dtype(at::kLong)).unsqueeze(0);
    mask = (key_index <= query_index.unsqueeze(1)).view({1, 1, R, S});
  }
  // Strided views are fine for the fused kernels (the head dim is contiguous): no copies of the keys.
  const at::Tensor out =
      at::scaled_dot_product_attention(qh, kh, vh, mask, 0.0, is_causal, scale, /*enable_gqa=*/k.size(1) != H);
  return out.squeeze(0).permute({1, 0, 2}).reshape({R, H * dv});
}
#endif

}  // namespace

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& query_index,
                  double scale, bool tail_causal) {
  // A short query after a past (decode, a question after a long window): GEMMs over all the keys
  // (ops/past_attention_op.h says why the fused kernels are slow there). A prefill (R == S) stays fused.
  if (uses_past_attention(q, k.size(0), tail_causal)) return ops::past_attention(q, k, v, scale);
#if ORBIT_HAVE_SDPA
  if (q.is_cuda()) return attend_fused(q, k, v, query_index, scale, tail_causal);
#else
  (void)tail_causal;
#endif
  return attend_batch(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), query_index.unsqueeze(0), scale).squeeze(0);
}

namespace {

// Where attend_batch runs on the CPU kernel: the widths and dtype allow it (cpu_attention_kernel_takes), at
// least one query and no more queries than keys, each query seeing at least one key. The kernel keeps a
// query's scores in a row of scratch: no [.., R, S] score tensor, mask or softmax temporaries, which cost
// more than the arithmetic at small heads.
bool fused_cpu_attention_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& query_index) {
  if (!q.device().is_cpu() || !cpu_attention_kernel_takes(q.size(3), v.size(3), q.scalar_type())) return false;
  if (q.size(1) == 0 || q.size(1) > k.size(1)) return false;
  return query_index.numel() > 0 && query_index.min().item<int64_t>() >= 0;
}

// attend_batch on that kernel: the keys read as B slots of S rows per kv head, query r of sequence b
// reading rows 0 .. query_index[b, r] of slot b (clamped to S − 1, as the mask of the blocked path is).
at::Tensor fused_cpu_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& query_index, double scale) {
  const int64_t B = q.size(0), R = q.size(1), H = q.size(2), S = k.size(1), dv = v.size(3);
  ops::CachedAttentionInputs in;
  in.q = q.reshape({B * R, H, q.size(3)});
  // Read in place: [B, S, H_kv, d] seen as [B, H_kv, S, d], its rows H_kv·d apart.
  in.keys = k.stride(3) == 1 ? k.permute({0, 2, 1, 3}) : k.contiguous().permute({0, 2, 1, 3});
  in.values = v.stride(3) == 1 ? v.permute({0, 2, 1, 3}) : v.contiguous().permute({0, 2, 1, 3});
  in.queries = R;
  in.scale = scale;
  const at::Tensor last = query_index.clamp_max(S - 1).to(at::kLong).contiguous();
  in.last_key.assign(last.data_ptr<int64_t>(), last.data_ptr<int64_t>() + B * R);
  for (int64_t b = 0; b < B; ++b) {
    in.slots.push_back(b);
    in.lengths.push_back(std::max<int64_t>(0, S - R));
    in.first_row.push_back(b * R);
  }
  at::Tensor out = at::empty({B * R, H * dv}, q.options());
  ops::cached_attention(in, out);
  return out.view({B, R, H * dv});
}

}  // namespace

bool cpu_attention_kernel_takes(int64_t dk, int64_t dv, at::ScalarType dtype) {
  // float64 keeps the products' float64 sums (the kernel sums in float32).
  return dtype != at::kDouble && ops::cached_attention_available(c10::Device(c10::kCPU), dtype) &&
         dk <= kFusedCpuMaxHeadDim && dv <= kFusedCpuMaxHeadDim;
}

at::Tensor attend_batch(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& query_index,
                        double scale) {
  if (fused_cpu_attention_takes(q, k, v, query_index)) {
    return fused_cpu_attention(q, k, v, query_index, scale);
  }
  return attend_batch_blocked(q, k, v, query_index, scale);
}

at::Tensor attend_batch_blocked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& query_index, double scale) {
  const int64_t B = q.size(0), S = k.size(1), Hkv = k.size(2);
  // Head-major [B, H_kv, S, d]: a view where the keys lie that way already (forward_batch's wide groups),
  // otherwise a copy.
  HeadMajorSlots kv;
  kv.keys = k.permute({0, 2, 1, 3}).contiguous().view(-1);
  kv.values = v.permute({0, 2, 1, 3}).contiguous().view(-1);
  kv.heads = Hkv;
  kv.key_dim = k.size(3);
  kv.value_dim = v.size(3);
  for (int64_t b = 0; b < B; ++b) {
    kv.lengths.push_back(S);
    kv.first_rows.push_back(b * Hkv * S);
  }
  return attend_slots(q, kv, query_index, scale);
}

at::Tensor HeadMajorSlots::slot(const at::Tensor& buffer, std::size_t j, int64_t d) const {
  const int64_t S = lengths[j];
  return buffer.narrow(0, first_rows[j] * d, heads * S * d).view({heads, S, d}).transpose(0, 1);
}

namespace {

// The narrowest score row attend_slots writes: ATen's softmax sums a row shorter than its vector width lane
// by lane, and a longer one by vector lanes then a tree, so every row at least this wide (beyond the widest
// vector of floats, 16 with AVX-512) is summed one way, however many masked keys follow a sequence's own.
constexpr int64_t kMinScoreWidth = 64;

// Runs of consecutive sequences with as many keys: [first, end) pairs.
std::vector<std::pair<std::size_t, std::size_t>> equal_runs(const std::vector<int64_t>& lengths) {
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  for (std::size_t j = 0; j < lengths.size(); ++j) {
    if (runs.empty() || lengths[runs.back().first] != lengths[j]) {
      runs.emplace_back(j, j + 1);
    } else {
      runs.back().second = j + 1;
    }
  }
  return runs;
}

// Which keys each query of the block [start, start + len) does not see: past its query_index, or past its
// sequence's own keys ([B, len, W]).
at::Tensor hidden_keys(const HeadMajorSlots& kv, const at::Tensor& query_index, int64_t start, int64_t len,
                       int64_t width, bool uneven) {
  const at::TensorOptions longs = query_index.options().dtype(at::kLong);
  const at::Tensor key_index = at::arange(width, longs).view({1, 1, width});
  at::Tensor last = query_index.narrow(1, start, len);
  if (uneven) {
    std::vector<int64_t> ends;
    for (int64_t S : kv.lengths) ends.push_back(S - 1);
    last = at::minimum(last, at::tensor(ends, at::TensorOptions().dtype(at::kLong)).to(longs.device()).view({-1, 1}));
  }
  return key_index > last.unsqueeze(2);
}

}  // namespace

at::Tensor attend_slots(const at::Tensor& q, const HeadMajorSlots& kv, const at::Tensor& query_index, double scale) {
  const int64_t B = q.size(0), R = q.size(1), H = q.size(2), dk = q.size(3);
  const int64_t Hkv = kv.heads, dv = kv.value_dim, group = H / Hkv;
  const int64_t longest = *std::max_element(kv.lengths.begin(), kv.lengths.end());
  // (The narrowest row is the CPU softmax's concern; elsewhere a row is its longest member's.)
  const int64_t width = q.device().is_cpu() ? std::max(longest, kMinScoreWidth) : longest;
  const auto runs = equal_runs(kv.lengths);
  // Some score columns lie after a sequence's own keys (no query_index stops before them).
  const bool uneven = width != longest || runs.size() > 1;
  at::Tensor out = at::empty({B, R, H * dv}, q.options());
  for (int64_t start = 0; start < R; start += kQueryBlock) {
    const int64_t len = std::min(kQueryBlock, R - start), rows = group * len;
    // Head h uses kv head h / group: q's heads as [H_kv, group]; each (sequence, kv head) is one matrix of
    // the batched products, its query rows group·len.
    const at::Tensor qb =
        q.narrow(1, start, len).reshape({B, len, Hkv, group, dk}).permute({0, 2, 3, 1, 4}).reshape({B * Hkv, rows, dk});
    at::Tensor scores = at::empty({B * Hkv, rows, width}, q.options());
    for (const auto& [first, end] : runs) {
      const int64_t n = static_cast<int64_t>(end - first) * Hkv, from = static_cast<int64_t>(first) * Hkv;
      const int64_t S = kv.lengths[first], row0 = kv.first_rows[first];
      const at::Tensor keys = kv.keys.narrow(0, row0 * dk, n * S * dk).view({n, S, dk}).transpose(1, 2);
      at::Tensor part = scores.narrow(0, from, n).narrow(2, 0, S);
      at::bmm_out(part, qb.narrow(0, from, n), keys);
    }
    scores.mul_(scale);
    // Keys past query_index are hidden: later input tokens, and the columns after a sequence's own keys.
    const at::Tensor hidden = hidden_keys(kv, query_index, start, len, width, uneven);
    scores.view({B, Hkv, group, len, width})
        .masked_fill_(hidden.view({B, 1, 1, len, width}), -std::numeric_limits<float>::infinity());
    const at::Tensor probs = at::softmax(scores, -1);
    at::Tensor ob = at::empty({B * Hkv, rows, dv}, q.options());
    for (const auto& [first, end] : runs) {
      const int64_t n = static_cast<int64_t>(end - first) * Hkv, from = static_cast<int64_t>(first) * Hkv;
      const int64_t S = kv.lengths[first], row0 = kv.first_rows[first];
      const at::Tensor values = kv.values.narrow(0, row0 * dv, n * S * dv).view({n, S, dv});
      at::Tensor part = ob.narrow(0, from, n);
      at::bmm_out(part, probs.narrow(0, from, n).narrow(2, 0, S), values);
    }
    out.narrow(1, start, len)
        .copy_(ob.view({B, Hkv, group, len, dv}).permute({0, 3, 1, 2, 4}).reshape({B, len, H * dv}));
  }
  return out;
}

LayerKV gqa_content(const ModelConfig& c, const LayerWeights& w, const at::Tensor& h) {
  const int64_t R = h.size(0);
  return {dense(h, w.wk, w.bk).view({R, c.num_kv_heads, c.head_dim}),
          dense(h, w.wv, w.bv).view({R, c.num_kv_heads, c.head_dim})};
}

at::Tensor gqa_queries(const ModelConfig& c, const LayerWeights& w, const at::Tensor& h,
                       const ops::RopeTables& tables) {
  const at::Tensor q = dense(h, w.wq, w.bq).view({h.size(0), c.num_heads, c.head_dim});
  // YaRN's attention factor multiplies HF's cos and sin, so the rotated dims' share of q·k grows by its
  // square while pass-through dims (partial rotary) keep theirs (rope.h). Scaling q's rotated dims by m²
  // gives exactly that.
  const double mscale = rope_attention_scaling(c.rope);
  at::Tensor q_rot = rotate(c.rope, q, tables);
  if (mscale != 1.0) q_rot.narrow(2, 0, c.rope.rotary_dim).mul_(mscale * mscale);
  return q_rot;
}

namespace {
double gqa_scale(const ModelConfig& c) { return 1.0 / std::sqrt(static_cast<double>(c.head_dim)); }
}  // namespace

at::Tensor gqa_attention(const AttentionStep& s) {
  const ModelConfig& c = s.config;
  if (s.paged != nullptr) {
    ops::PagedAttentionInputs in = *s.paged;
    in.q = s.q;
    in.k_tail = s.keys.k.contiguous();
    in.v_tail = s.keys.v.contiguous();
    in.scale = gqa_scale(c);
    return ops::paged_attention(in);
  }
  // Relocation on the fly: every key (past ones included) is rotated to its position here.
  return attend(s.q, rotate(c.rope, s.keys.k, s.key_tables), s.keys.v, s.query_index, gqa_scale(c), s.tail_causal);
}

}  // namespace orbit::runtime::detail
