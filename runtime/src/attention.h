// Internal to the runtime: the attention families behind Model::forward (model.cpp drives the layer
// loop; each family turns a layer's normed hidden states into content and attends over content).
//
// A family provides:
//   content(config, weights, h)          -> LayerKV of the computed tokens (content form, see model.h)
//   queries(config, weights, h, tables)  -> the computed tokens' queries, rotated (row-wise: a batched
//                                           forward runs it once over every sequence's tokens)
//   attention(step)                      -> one sequence's [R, num_heads · v_head_dim()] before o_proj
// Keys of every token (past ‖ input) arrive in content form with their angles; a family rotates (and
// for MLA expands) them itself, so relocation is the same function as the forward's RoPE.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

#include "ops/paged_attention_op.h"
#include "ops/rope_op.h"
#include "orbit/runtime/config.h"
#include "orbit/runtime/model.h"

namespace orbit::runtime::detail {

// RMSNorm over the last dimension: x · rsqrt(mean(x²) + eps) · gain.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& gain, double eps);

// x·Wᵀ (+ b when defined): on the CPU a product of a few float32 rows takes the AVX2 kernel where it runs
// (ops/small_gemm_op.h), otherwise at::linear.
at::Tensor dense(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// SiLU of an MLP's gate [..., I], in place where it can be; returns the result. A row's values do not depend
// on how many rows share the call wherever dense() and rms_norm() take the few-rows path: ATen's elementwise
// loop computes its vector body and its scalar tail (the last numel mod twice its vector width) with different
// exp implementations, so where I is not a multiple of that, the tail's elements (which move with the row
// count) rounded otherwise (stories260K, I = 172: a decode step's logits alone and in a batch differed by
// ~3e-6). There the rows are padded to a multiple of kSiluRowFloats floats, so every element takes the
// vector body.
at::Tensor silu_gate(at::Tensor gate);

// A multiple of twice ATen's widest CPU float vector (AVX-512: 16 floats).
constexpr int64_t kSiluRowFloats = 64;

// Causal softmax attention. q: [R, H, d_k]; k: [S, H_kv, d_k]; v: [S, H_kv, d_v] (H_kv divides H; query
// head h reads kv head h / (H / H_kv)). Query r sees keys [0, query_index[r]] (int64 [R]). scale
// multiplies q·k before the softmax. Returns [R, H·d_v] in q's dtype. tail_causal: the queries are the
// last R keys (query_index[r] = S − R + r), which lets CUDA use the unmasked or plain-causal fused kernel.
// On CUDA in 16-bit dtypes a short query after a past (2 ≤ R < S, R ≤ ops::kPastAttentionMaxQueries,
// tail_causal) is ops::past_attention (cuBLAS GEMMs); other CUDA inputs with libtorch >= 2.5 go to
// at::scaled_dot_product_attention; elsewhere attend_batch (the CPU kernel or blocked bmm/softmax).
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& query_index,
                  double scale, bool tail_causal = false);

// x [T, H, head_dim] rotated by precomputed tables (ops::rope_tables of rope_angles, computed once per
// forward for every layer); float16 is rotated in float32 and rounded once.
at::Tensor rotate(const RopeConfig& rope, const at::Tensor& x, const ops::RopeTables& tables);

// rotate() written into `out` (shaped and typed like x, any strides): no tensor of its own when `out` is
// contiguous and not float16, else rotated apart and copied in.
void rotate_into(const RopeConfig& rope, const at::Tensor& out, const at::Tensor& x, const ops::RopeTables& tables);

// Whether attend() can use PyTorch's fused attention on CUDA in this build (libtorch >= 2.5).
bool fused_attention_available();

// Whether attend() takes ops::past_attention for this q over `keys` keys (see attend()).
bool uses_past_attention(const at::Tensor& q, int64_t keys, bool tail_causal);

// One layer's attention inputs for one sequence, R computed tokens over S = past + input key tokens.
struct AttentionStep {
  const ModelConfig& config;
  const LayerWeights& weights;
  const at::Tensor& q;                // the computed tokens' queries, rotated and scaled ([family]_queries)
  const LayerKV& keys;                // content of all key tokens, S rows
  const ops::RopeTables& key_tables;  // cos/sin of all key tokens' angles [S, rotary_dim/2] (undefined when paged)
  const at::Tensor& query_index;      // int64 [R]: the last key index each computed token sees
  bool tail_causal = false;           // query_index[r] = S − R + r (no partial recompute)
  // Set: the past is read in place by the paged kernel (everything but q, the tail and the scale is
  // filled in); `keys` then holds only the tokens after the paged ones (the tail), and key_tables is unused.
  const ops::PagedAttentionInputs* paged = nullptr;
};

// attend() for B sequences of R queries each: q [B, R, H, d_k], k [B, S, H_kv, d_k], v [B, S, H_kv, d_v],
// query_index [B, R]; returns [B, R, H·d_v]. For B = 1 it computes exactly what attend() computes there.
// On the CPU in float32, bfloat16 or float16 with heads of at most 32, no more queries than keys, and every query
// seeing a key: the kernel of ops/cached_attention_op.h, one query row at a time over the keys it sees;
// otherwise attend_batch_blocked.
at::Tensor attend_batch(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& query_index,
                        double scale);
// Whether attend_batch runs the CPU kernel at these head widths (key, value) and dtype on the CPU.
bool cpu_attention_kernel_takes(int64_t dk, int64_t dv, at::ScalarType dtype);
// The same by blocks of queries: batched products, a mask and a softmax over [B·H_kv, group·block, S]
// (attend_slots over the B sequences' keys as slots of S rows each). k and v may have any strides; where they
// are head-major underneath ([B, H_kv, S, d] seen through transpose(1, 2)) the products read them in place,
// otherwise they are first copied into that layout.
at::Tensor attend_batch_blocked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& query_index, double scale);

// Keys and values of B sequences of any lengths, each head-major in its own rows of two flat buffers: sequence
// j's kv head h is the S_j rows [first_rows[j] + h·S_j, first_rows[j] + (h + 1)·S_j) of `keys` seen as
// [rows, d_k] and of `values` as [rows, d_v] (S_j = lengths[j]). Sequences follow one another:
// first_rows[j + 1] = first_rows[j] + heads·S_j.
struct HeadMajorSlots {
  at::Tensor keys, values;  // 1-D, contiguous
  int64_t heads = 0;        // H_kv
  int64_t key_dim = 0, value_dim = 0;
  std::vector<int64_t> lengths, first_rows;

  // Sequence j's keys or values as a token-major writer sees them: [S_j, H_kv, d], a strided view.
  at::Tensor keys_of(std::size_t j) const { return slot(keys, j, key_dim); }
  at::Tensor values_of(std::size_t j) const { return slot(values, j, value_dim); }

 private:
  at::Tensor slot(const at::Tensor& buffer, std::size_t j, int64_t d) const;
};

// attend_batch_blocked over sequences of uneven lengths: q [B, R, H, d_k], query_index [B, R] (each at most
// S_j − 1); returns [B, R, H·d_v]. Each run of consecutive sequences with as many keys takes one batched
// product per query block (keys read in place as its transposed operand, the scores written into a buffer
// of the longest's width), one mask and softmax cover the whole batch, and the keys after a sequence's own
// are masked (their scores' exponentials are 0 and add nothing). A sequence's products and softmax have the
// shapes and order of its own call alone, so its numbers are its own bit for bit whatever the others'.
at::Tensor attend_slots(const at::Tensor& q, const HeadMajorSlots& kv, const at::Tensor& query_index, double scale);

// GQA/MHA (Llama, Qwen2, Qwen2-VL): content = pre-RoPE keys and values [R, H_kv, head_dim].
LayerKV gqa_content(const ModelConfig& config, const LayerWeights& weights, const at::Tensor& h);
// Queries of the normed hidden states h [R, hidden], rotated by `tables` ([R, rotary_dim/2]) and scaled
// as the RoPE type asks: [R, H, head_dim].
at::Tensor gqa_queries(const ModelConfig& config, const LayerWeights& weights, const at::Tensor& h,
                       const ops::RopeTables& tables);
at::Tensor gqa_attention(const AttentionStep& step);

// MLA (DeepSeek-V2): content = pre-rotation k_pe [R, 1, d_rope] and latent c_KV [R, 1, r_kv].
LayerKV mla_content(const ModelConfig& config, const LayerWeights& weights, const at::Tensor& h);
// Queries [R, H, d_nope + d_rope], q_pe rotated by `tables` and scaled.
at::Tensor mla_queries(const ModelConfig& config, const LayerWeights& weights, const at::Tensor& h,
                       const ops::RopeTables& tables);
at::Tensor mla_attention(const AttentionStep& step);
// Keys [S, H, d_nope + d_rope] and values [S, H, d_v] of S key tokens in content form, expanded from the
// latent; k_pe rotated by `tables` ([S, rotary_dim/2]), or left unrotated when null.
std::pair<at::Tensor, at::Tensor> mla_keys(const ModelConfig& config, const LayerWeights& weights,
                                           const LayerKV& content, const ops::RopeTables* tables);
// mla_keys written into k [S, H, d_nope + d_rope] and v [S, H, d_v] (any strides: rows of a batch's slot),
// with no key or value tensor of its own; the same numbers as mla_keys.
void mla_keys_into(const ModelConfig& config, const LayerWeights& weights, const LayerKV& content,
                   const ops::RopeTables* tables, const at::Tensor& k, const at::Tensor& v);

// The absorbed form (MlaForm::kAbsorbed, model.h) as multi-query attention over the latent: one shared key
// head [c_KV ‖ RoPE(k_pe)] of width r_kv + d_rope and value head c_KV (r_kv), the queries carried into the latent
// per head (q_nope_h·W_UK_h), the attended latent carried out per head by W_UV_h afterwards.
struct MlaAbsorbed {
  at::Tensor q;  // [R, H, r_kv + d_rope]: [q_nope_h·W_UK_h ‖ q_pe_h] (q_pe as mla_queries rotated and scaled it)
  at::Tensor k;  // [S, 1, r_kv + d_rope]: [c_KV ‖ RoPE(k_pe)]
  at::Tensor v;  // [S, 1, r_kv]: c_KV
};
// Queries q [R, H, d_nope + d_rope] (mla_queries) carried into the latent: [R, H, r_kv + d_rope] =
// [q_nope_h·W_UK_h ‖ q_pe_h], contiguous (MlaAbsorbed::q).
at::Tensor mla_absorbed_queries(const ModelConfig& config, const LayerWeights& weights, const at::Tensor& q);
// The attended latent [R, H·r_kv] (each head's Σ p·c_KV) carried out per head by W_UV_h: [R, H·d_v].
at::Tensor mla_absorbed_output(const ModelConfig& config, const LayerWeights& weights, const at::Tensor& attended);
// The absorbed operands of queries q [R, H, d_nope + d_rope] (mla_queries) over key content (S rows), k_pe
// rotated by `tables` ([S, rotary_dim/2]).
MlaAbsorbed mla_absorb(const ModelConfig& config, const LayerWeights& weights, const at::Tensor& q,
                       const LayerKV& content, const ops::RopeTables& tables);
// Attention in the absorbed form, [R, H·d_v] as mla_attention: the same query_index, scale and RoPE, the
// scores and softmax in float32, then W_UV per head. step.keys holds the input tokens' content (T rows) after
// `past` (P rows, or null); both are read in place, never joined, their k_pe rotated by step.key_tables
// ([P + T, rotary_dim/2]). The CPU path of a forward (not for a paged step).
at::Tensor mla_absorbed_attention(const AttentionStep& step, const LayerKV* past);
// Whether the absorbed form takes fewer multiply-adds than the naive one for R queries over S keys, per head:
//   naive     S·r_kv·(d_nope + d_v)  (expanding k_nope, v)  +  R·S·(d_nope + d_rope + d_v)  (scores, output)
//   absorbed  R·r_kv·(d_nope + d_v)  (q·W_UK, W_UV·o)       +  R·S·(2·r_kv + d_rope)
// i.e. R·(E + S·(A − N)) < S·E with E = r_kv·(d_nope + d_v), A = 2·r_kv + d_rope, N = d_nope + d_rope + d_v.
// DeepSeek-V2(-Lite) (r_kv 512, d_nope 128, d_rope 64, d_v 128): absorbed while R < 131072·S / (131072 + 768·S),
// up to 170 queries for long pasts; a prefill (R = S) stays naive whenever A ≥ N.
bool mla_absorbed_cheaper(const MlaConfig& mla, int64_t queries, int64_t keys);
// The shortest past (keys − queries) over which mla_absorbed_cheaper takes `queries` queries absorbed (it does
// over every longer one), or -1 where it never does (queries ≥ E / D with D = A − N > 0).
int64_t mla_absorbed_min_past(const MlaConfig& mla, int64_t queries);

// The factor q·k is multiplied by before the softmax: 1/sqrt(head_dim), MLA's with its YaRN softmax scaling.
double attention_scale(const ModelConfig& config);

}  // namespace orbit::runtime::detail
