// Decode attention over a DecodeCache's buffers on the CPU: tensor checks and dispatch to the raw-pointer
// kernel (kernels/cpu/cached_attention.h). Internal to the runtime (forward_batch's cached groups reach it
// through cached_attention.cpp; on other devices they attend with ATen ops instead). attention.cpp's
// attend_batch sends short CPU prefills here too, their keys read in place as slots (rows at the strides the prefill
// holds them), with `last_key`.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

namespace orbit::runtime::ops {

struct CachedAttentionInputs {
  at::Tensor q;                    // [N, H, d_k] rotated, unscaled, on the CPU
  at::Tensor keys;                 // one layer's [slots, H_a, capacity, d_k], q's dtype; each row contiguous
  at::Tensor values;               // [slots, H_a, capacity, d_v]; each row contiguous (other strides any)
  std::vector<int64_t> slots;      // per member
  std::vector<int64_t> lengths;    // per member: its slot's rows before this forward
  std::vector<int64_t> first_row;  // per member: its first of `queries` consecutive rows of q and out
  int64_t queries = 0;             // R ≥ 1
  double scale = 1.0;              // multiplies q·k
  // Empty, or one per query row (member-major, [B·R]): the last row of its slot the query sees, in
  // [0, capacity), instead of lengths + r; a prefill's causal mask (attend_batch's query_index).
  std::vector<int64_t> last_key;
};

// Whether the kernel takes q's device and dtype (CPU; float32, float64, bfloat16 or float16).
bool cached_attention_available(const c10::Device& device, at::ScalarType dtype);

// Whether cached_attention runs the AVX2/FMA kernel (kernels/cpu/cached_attention_avx2.h) for these: float32,
// d_k and d_v multiples of 8, and AVX2 kernels running (ops/cpu_features.h); otherwise the portable kernel
// (kernels/cpu/cached_attention.h).
bool cached_attention_vectorised(at::ScalarType dtype, int64_t dk, int64_t dv);

// Writes every member's rows of `out` ([N, H·d_v], contiguous, q's dtype); other rows are left as they are.
// Throws orbit::Error on bad shapes, dtypes or devices.
void cached_attention(const CachedAttentionInputs& in, at::Tensor& out);

}  // namespace orbit::runtime::ops
