// Attention of a few query tokens over a long past, on CUDA in bfloat16 or float16: two cuBLAS GEMMs with
// float32 accumulation around a float32 softmax. Internal to the runtime (Model::forward reaches it
// through detail::attend).
//
// Why: PyTorch's fused attention parallelises over query tiles and heads, so a 16-token query after a
// 32k-token past runs one block per head, each scanning every key (28 blocks on a 132-SM GPU, most of
// it idle). As GEMMs, the G query heads of a kv head become the
// rows of one matrix ([R·G, d] against [S, d]) and cuBLAS spreads the S keys over the whole device.
//
// Numerics as flash attention's: scores summed and kept in float32 (scaled in the GEMM), softmax in
// float32, probabilities rounded once to the input dtype for the second GEMM, its sums in float32.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace orbit::runtime::ops {

// The longest query this path takes: its float32 scores are H_kv·R·G·S floats.
constexpr int64_t kPastAttentionMaxQueries = 64;

// Whether past_attention can run with q's device and dtype in this build (CUDA ops built against a
// CUDA libtorch; bfloat16 or float16).
bool past_attention_available(const at::Device& device, at::ScalarType dtype);
inline bool past_attention_available(const at::Tensor& q) {
  return q.defined() && past_attention_available(q.device(), q.scalar_type());
}

// q [R, H, d] (rotated, the model's scaling applied), k [S, H_kv, d] (rotated), v [S, H_kv, dv], all on
// one CUDA device in one 16-bit dtype, R ≤ S. The queries are the last R keys: query r sees keys
// 0 .. S − R + r. Returns [R, H·dv] in q's dtype. Throws orbit::Error on bad shapes, dtypes or devices.
at::Tensor past_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale);

}  // namespace orbit::runtime::ops
