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

// x·weightᵀ (+ bias) as at::linear gives it, shape [..., N]; only where small_gemm_takes.
at::Tensor small_gemm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace orbit::runtime::ops
