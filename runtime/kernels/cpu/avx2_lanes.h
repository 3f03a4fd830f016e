// Lane reductions shared by the files compiled with -mavx2 -mfma (cached_attention_avx2.cpp,
// small_gemm_avx2.cpp), and included by them alone: every helper is `static`, so each of those files keeps
// its own copy and no other file can end up calling an AVX2 copy through the linker.
#pragma once

#include <immintrin.h>

namespace orbit::kernels::cpu::avx2 {

// The eight sums of eight vectors' lanes, as one vector: out[j] = Σ v[j].
static inline __m256 sum_lanes8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]);  // per 128-bit half: v0 pairs, v1 pairs
  const __m256 t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // [v0..v3 low-half sums | v0..v3 high-half sums]
  const __m256 u1 = _mm256_hadd_ps(t2, t3);  // the same for v4..v7
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

}  // namespace orbit::kernels::cpu::avx2
