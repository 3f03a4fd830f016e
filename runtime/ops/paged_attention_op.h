// Paged attention op: checks tensors and dispatches to kernels/cuda/paged_attention.cuh on CUDA and to
// the CPU reference (kernels/cpu/paged_attention.h, slow: tests only) on CPU. See those headers for the
// operation. Internal to the runtime (Model::forward reaches it through PastKV::paged).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/paged_attention.h"

namespace orbit::runtime::ops {

// Which CUDA kernel runs (kernels/cuda/paged_attention.cuh). kAuto: the tensor-core kernel for bfloat16 and
// float16 on sm_80+ when R >= kPagedTensorCoreMinQueries, else the tiled kernel. The others force one
// (kTensorCore on float32 or an older device is an error); tests and bench_gpu compare them.
enum class PagedKernelChoice { kAuto, kTiled, kRowwise, kTensorCore };
constexpr int64_t kPagedTensorCoreMinQueries = 1;

struct PagedAttentionInputs {
  at::Tensor q;        // [R, H, d], rotated and scaled as the model needs (dtype T)
  at::Tensor k_pages;  // one layer's pool rows [rows, H_kv·d] (dtype T), contiguous
  at::Tensor v_pages;
  at::Tensor slots;   // int32 [S_p]
  at::Tensor k_tail;  // [S_t, H_kv, d] content form (dtype T); S_t ≥ R
  at::Tensor v_tail;
  at::Tensor positions;    // int64 [S_p + S_t, position_rows], token-major
  at::Tensor inv_freq;     // float64 [d/2]
  at::Tensor row_of_freq;  // int8 [d/2], or undefined (every frequency reads row 0)
  at::Tensor patch_of;     // int32 [S_p] segment index or −1, or undefined (no patches)
  at::Tensor segments;     // uint8 blob of PatchSegment[] on the same device (make_segment_table)
  bool interleaved = false;
  double scale = 1.0;
  PagedKernelChoice kernel = PagedKernelChoice::kAuto;  // CUDA only
};

// Whether the fused kernel can run these inputs on `device` in this build (CUDA kernels built and a
// CUDA libtorch): head_dim 64/128, H/H_kv ≤ 8.
bool paged_attention_available(const at::Device& device, int64_t heads, int64_t kv_heads, int64_t head_dim);

// [R, H·d] in q's dtype. Throws orbit::Error on shape/dtype/device mismatches or an unsupported device.
at::Tensor paged_attention(const PagedAttentionInputs& in);

// A segment table on `device`: the PatchSegment structs (whose pointers must be device pointers there)
// as bytes, for PagedAttentionInputs::segments.
at::Tensor make_segment_table(const std::vector<kernels::cpu::PatchSegment>& segments, const at::Device& device);

}  // namespace orbit::runtime::ops
