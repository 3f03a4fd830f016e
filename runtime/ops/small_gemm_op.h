// dense()'s CPU path for a few rows (kernels/cpu/small_gemm_avx2.h): the checks that pick it, and the call.
// Internal to the runtime.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace orbit::runtime::ops {

// The most rows of x the kernel takes; more rows go to BLAS, whose packing pays for itself from about there.
constexpr int64_t kSmallGemmRows = 16;

// Whether small_gemm takes these: AVX2 kernels running (ops/cpu_features.h); x, weight (and bias, when
// defined) float32 on the CPU; weight [N, K] contiguous (any K ≥ 1); x [..., K] with at most
// kSmallGemmRows rows; bias [N] contiguous.
bool small_gemm_takes(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// An uninitialised contiguous CPU tensor of `shape` and `dtype`, for a caller that writes every element: one
// of this thread's kept buffers (up to 32) that nothing else holds any more (neither the tensor nor a view
// of its storage), else a new one, kept (up to 1 MiB) in a free buffer's place or while fewer than 32 are
// kept. Spares a decode step's small products and norms an allocation each; a result held (a logit row,
// returned content) is never handed out again while held.
at::Tensor reused_cpu_output(at::IntArrayRef shape, at::ScalarType dtype);

// x·weightᵀ (+ bias) as at::linear gives it, shape [..., N], in a reused_cpu_output buffer; only where
// small_gemm_takes.
at::Tensor small_gemm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace orbit::runtime::ops
