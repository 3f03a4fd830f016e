// small_gemm_avx2 (small_gemm_avx2.h). Compiled with -mavx2 -mfma alone: as cached_attention_avx2.cpp, it
// calls no inline function or template that other files instantiate (its helpers have internal linkage).
#include "kernels/cpu/small_gemm_avx2.h"

#include <immintrin.h>

#include "kernels/cpu/avx2_lanes.h"

namespace orbit::kernels::cpu {
namespace {

using avx2::sum_lanes8;

// Lanes [0, n) of a masked load or store (0 < n < 8): the last K % 8 columns, read without touching the
// floats past a row's end; the lanes left out read as 0 and add nothing to their chains.
__m256i tail_mask(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes);
}

// Four outputs of `rows` (1 or 2) rows of x against four weight rows: y[m][n .. n+4).
void block4(const float* x, const float* const* w, const float* bias, float* y, int64_t rows, int64_t N, int64_t K,
            int64_t n) {
  __m256 a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
  const float* x0 = x;
  const float* x1 = rows == 2 ? x + K : x;
  const int64_t whole = K - K % 8;
  for (int64_t c = 0; c < whole; c += 8) {
    const __m256 p0 = _mm256_loadu_ps(x0 + c), p1 = _mm256_loadu_ps(x1 + c);
    for (int j = 0; j < 4; ++j) {
      const __m256 wj = _mm256_loadu_ps(w[j] + c);
      a[j] = _mm256_fmadd_ps(p0, wj, a[j]);
      a[4 + j] = _mm256_fmadd_ps(p1, wj, a[4 + j]);
    }
  }
  if (whole < K) {
    const __m256i m = tail_mask(K - whole);
    const __m256 p0 = _mm256_maskload_ps(x0 + whole, m), p1 = _mm256_maskload_ps(x1 + whole, m);
    for (int j = 0; j < 4; ++j) {
      const __m256 wj = _mm256_maskload_ps(w[j] + whole, m);
      a[j] = _mm256_fmadd_ps(p0, wj, a[j]);
      a[4 + j] = _mm256_fmadd_ps(p1, wj, a[4 + j]);
    }
  }
  __m256 s = sum_lanes8(a);
  if (bias != nullptr) {
    const __m128 b = _mm_loadu_ps(bias + n);
    s = _mm256_add_ps(s, _mm256_insertf128_ps(_mm256_castps128_ps256(b), b, 1));
  }
  _mm_storeu_ps(y + n, _mm256_castps256_ps128(s));
  if (rows == 2) _mm_storeu_ps(y + N + n, _mm256_extractf128_ps(s, 1));
}

// y[m][n] for one weight row (the last N % 4): the same lane-wise chain and reduction as block4.
void single(const float* x, const float* w, const float* bias, float* y, int64_t K, int64_t n) {
  __m256 a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
  const int64_t whole = K - K % 8;
  for (int64_t c = 0; c < whole; c += 8) a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(w + c), a[0]);
  if (whole < K) {
    const __m256i m = tail_mask(K - whole);
    a[0] = _mm256_fmadd_ps(_mm256_maskload_ps(x + whole, m), _mm256_maskload_ps(w + whole, m), a[0]);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, sum_lanes8(a));
  y[n] = lanes[0] + (bias != nullptr ? bias[n] : 0.0f);
}

}  // namespace

void small_gemm_avx2(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K,
                     int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  for (; n + 4 <= n_end; n += 4) {
    const float* rows[4] = {w + n * K, w + (n + 1) * K, w + (n + 2) * K, w + (n + 3) * K};
    for (int64_t m = 0; m < M; m += 2) block4(x + m * K, rows, bias, y + m * N, m + 2 <= M ? 2 : 1, N, K, n);
  }
  for (; n < n_end; ++n) {
    for (int64_t m = 0; m < M; ++m) single(x + m * K, w + n * K, bias, y + m * N, K, n);
  }
}

}  // namespace orbit::kernels::cpu
