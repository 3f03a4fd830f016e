// y = x·Wᵀ (+ bias) for a few rows of x, float32, in AVX2 and FMA instructions (small_gemm_avx2.cpp, compiled
// for them alone; ops/small_gemm_op.cpp runs it only where the CPU has both). For decode steps: BLAS packs
// the weight matrix on every call once x has more than one row, which costs more than the product when x has
// a handful of rows; here each weight row is read once per call, straight from the weights.
//
// Each output is one 8-lane FMA chain over K in the same order whatever M and the row's place in the call,
// so a row's result does not depend on the rows batched with it.
#pragma once

#include <cstdint>

namespace orbit::kernels::cpu {

// y[m][n] = Σ_k x[m][k] · w[n][k] (+ bias[n]) for m < M and n in [n_begin, n_end); row-major and contiguous:
// x [M][K], w [N][K], y [M][N]; bias [N] or null. Any K ≥ 1 (the last K % 8 columns through masked
// loads, in the same chains); n_begin a multiple of 4.
void small_gemm_avx2(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K,
                     int64_t n_begin, int64_t n_end);

}  // namespace orbit::kernels::cpu
