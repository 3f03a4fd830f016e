// cached_attention_avx2 (cached_attention_avx2.h). This file alone is compiled with -mavx2 -mfma, so it calls
// no inline function or template that other files also instantiate (the linker keeps one copy of those, and
// it could be this file's, which needs the instructions): its helpers have internal linkage and it uses no
// standard-library templates; the caller gives it its scratch.
#include "kernels/cpu/cached_attention_avx2.h"

#include <immintrin.h>

#include "kernels/cpu/avx2_lanes.h"

namespace orbit::kernels::cpu {
namespace {

using avx2::sum_lanes8;

float sum_lanes(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float max_lanes(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// e^x for x ≤ 0, eight lanes: cached_exp's steps (kernels/cpu/cached_attention.h).
__m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256i n =
      _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(0.5f)));
  const __m256 fn = _mm256_cvtepi32_ps(n);
  const __m256 r = _mm256_add_ps(_mm256_sub_ps(x, _mm256_mul_ps(fn, _mm256_set1_ps(0.693359375f))),
                                 _mm256_mul_ps(fn, _mm256_set1_ps(2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// q·k over d = 8·chunks floats, one FMA chain.
__m256 dot_lanes(const float* q, const float* k, int64_t chunks) {
  __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(k));
  for (int64_t c = 1; c < chunks; ++c)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c), _mm256_loadu_ps(k + 8 * c), acc);
  return acc;
}

// w[s] = q·k_s for s < seen (key rows `ldk` floats apart), eight keys at a time; returns the largest.
float scores(const float* q, const float* k, int64_t seen, int64_t dk, int64_t ldk, float* w) {
  const int64_t chunks = dk / 8;
  __m256 top8 = _mm256_set1_ps(-3.0e38f);
  int64_t s = 0;
  for (; s + 8 <= seen; s += 8) {
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = dot_lanes(q, k + (s + j) * ldk, chunks);
    const __m256 sums = sum_lanes8(acc);
    _mm256_storeu_ps(w + s, sums);
    top8 = _mm256_max_ps(top8, sums);
  }
  float top = max_lanes(top8);
  for (; s < seen; ++s) {
    w[s] = sum_lanes(dot_lanes(q, k + s * ldk, chunks));
    top = w[s] > top ? w[s] : top;
  }
  return top;
}

// w[s] = e^(w[s] − top) for s < seen (the tail through a padded vector: w has 8 floats past seen); returns Σ w.
float exponentiate(float* w, int64_t seen, float top) {
  const __m256 shift = _mm256_set1_ps(top);
  __m256 total8 = _mm256_setzero_ps();
  int64_t s = 0;
  for (; s + 8 <= seen; s += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(w + s), shift));
    _mm256_storeu_ps(w + s, e);
    total8 = _mm256_add_ps(total8, e);
  }
  float total = sum_lanes(total8);
  if (s < seen) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(w + s), shift));
    float lanes[8];
    _mm256_storeu_ps(lanes, e);
    for (int64_t j = 0; s + j < seen; ++j) {
      w[s + j] = lanes[j];
      total += lanes[j];
    }
  }
  return total;
}

// out[e0, e0 + 8·V) = inv · Σ_s w[s] · v_s[e0, e0 + 8·V) (value rows `ldv` floats apart), V vectors held in
// registers across the rows.
template <int V>
void weighted_values(const float* w, const float* v, int64_t seen, int64_t ldv, int64_t e0, float inv, float* out) {
  __m256 acc[V];
  for (int c = 0; c < V; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t s = 0; s < seen; ++s) {
    const __m256 ws = _mm256_set1_ps(w[s]);
    const float* vs = v + s * ldv + e0;
    for (int c = 0; c < V; ++c) acc[c] = _mm256_fmadd_ps(ws, _mm256_loadu_ps(vs + 8 * c), acc[c]);
  }
  const __m256 scale = _mm256_set1_ps(inv);
  for (int c = 0; c < V; ++c) _mm256_storeu_ps(out + e0 + 8 * c, _mm256_mul_ps(acc[c], scale));
}

void attend_values(const float* w, const float* v, int64_t seen, int64_t dv, int64_t ldv, float inv, float* out) {
  int64_t e0 = 0;
  for (; e0 + 64 <= dv; e0 += 64) weighted_values<8>(w, v, seen, ldv, e0, inv, out);
  if (e0 + 32 <= dv) {
    weighted_values<4>(w, v, seen, ldv, e0, inv, out);
    e0 += 32;
  }
  if (e0 + 16 <= dv) {
    weighted_values<2>(w, v, seen, ldv, e0, inv, out);
    e0 += 16;
  }
  if (e0 + 8 <= dv) weighted_values<1>(w, v, seen, ldv, e0, inv, out);
}

// One query row's weighted values still to sum: its weights, value rows, keys seen, 1 / Σ weights and output.
struct ValueTask {
  const float* w;
  const float* values;
  int64_t seen;
  float inv;
  float* out;
};

// attend_values for kCachedAttentionValueRows rows of d_v = 8·V (V of 1 or 2, where one row's sum is one or two FMA
// chains, each waiting on the last: latency-bound), their chains interleaved so that the core runs them side by side.
// Each row's sum still runs over its keys in order from zero, as weighted_values's does, so every output is
// the same to the bit as attend_values's.
template <int V>
void attend_values_together(const ValueTask* t, int64_t ldv) {
  __m256 acc[kCachedAttentionValueRows][V];
  int64_t common = t[0].seen;
  for (int i = 0; i < kCachedAttentionValueRows; ++i) {
    for (int c = 0; c < V; ++c) acc[i][c] = _mm256_setzero_ps();
    common = t[i].seen < common ? t[i].seen : common;
  }
  for (int64_t s = 0; s < common; ++s) {
    for (int i = 0; i < kCachedAttentionValueRows; ++i) {
      const __m256 ws = _mm256_set1_ps(t[i].w[s]);
      const float* vs = t[i].values + s * ldv;
      for (int c = 0; c < V; ++c) acc[i][c] = _mm256_fmadd_ps(ws, _mm256_loadu_ps(vs + 8 * c), acc[i][c]);
    }
  }
  for (int i = 0; i < kCachedAttentionValueRows; ++i) {
    for (int64_t s = common; s < t[i].seen; ++s) {
      const __m256 ws = _mm256_set1_ps(t[i].w[s]);
      const float* vs = t[i].values + s * ldv;
      for (int c = 0; c < V; ++c) acc[i][c] = _mm256_fmadd_ps(ws, _mm256_loadu_ps(vs + 8 * c), acc[i][c]);
    }
    const __m256 scale = _mm256_set1_ps(t[i].inv);
    for (int c = 0; c < V; ++c) _mm256_storeu_ps(t[i].out + 8 * c, _mm256_mul_ps(acc[i][c], scale));
  }
}

// The pending rows' values: kCachedAttentionValueRows of them interleaved, fewer one at a time.
void flush_values(const ValueTask* t, int pending, int64_t dv, int64_t ldv) {
  if (pending == kCachedAttentionValueRows && dv == 8) return attend_values_together<1>(t, ldv);
  if (pending == kCachedAttentionValueRows && dv == 16) return attend_values_together<2>(t, ldv);
  for (int i = 0; i < pending; ++i) attend_values(t[i].w, t[i].values, t[i].seen, dv, ldv, t[i].inv, t[i].out);
}

// Keys seen by query row r of member b: cached_seen, written out (this file instantiates no template another
// file uses).
int64_t seen_by(const CachedAttentionArgs<float>& a, const CachedAttentionDims& d, int64_t b, int64_t r) {
  return a.last_key != nullptr ? a.last_key[b * d.queries + r] + 1 : a.lengths[b] + r + 1;
}

}  // namespace

void cached_attention_avx2(const CachedAttentionArgs<float>& a, const CachedAttentionDims& d, int64_t begin,
                           int64_t end, float* scratch) {
  const int64_t G = d.heads / d.kv_heads;
  const CachedAttentionStrides& ks = a.key_strides;
  const CachedAttentionStrides& vs = a.value_strides;
  // Narrow values (d_v of 8 or 16) wait for kCachedAttentionValueRows rows, each row's weights in its own
  // stretch of the scratch, as long as the most keys a row of these items sees (and 8 floats of padding).
  const bool together = d.dv <= 16;
  int64_t stretch = 0;
  for (int64_t item = begin; together && item < end; ++item) {
    for (int64_t r = 0; r < d.queries; ++r) {
      const int64_t need = seen_by(a, d, item / d.heads, r) + 8;
      stretch = need > stretch ? need : stretch;
    }
  }
  float* query = scratch;
  ValueTask pending[kCachedAttentionValueRows];
  int count = 0;
  const __m256 scale = _mm256_set1_ps(d.scale);
  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / d.heads, h = item % d.heads;
    // CachedAttentionStrides::at, written out.
    const float* keys = a.keys + a.slots[b] * ks.slot + (h / G) * ks.head;
    const float* values = a.values + a.slots[b] * vs.slot + (h / G) * vs.head;
    for (int64_t r = 0; r < d.queries; ++r) {
      const int64_t row = a.first_row[b] + r;
      const int64_t seen = seen_by(a, d, b, r);
      const float* qr = a.q + (row * d.heads + h) * d.dk;
      float* w = scratch + d.dk + count * stretch;
      for (int64_t e = 0; e < d.dk; e += 8) _mm256_storeu_ps(query + e, _mm256_mul_ps(_mm256_loadu_ps(qr + e), scale));
      const float top = scores(query, keys, seen, d.dk, ks.row, w);
      const float total = exponentiate(w, seen, top);
      pending[count++] = {w, values, seen, 1.0f / total, a.out + (row * d.heads + h) * d.dv};
      if (!together || count == kCachedAttentionValueRows) {
        flush_values(pending, count, d.dv, vs.row);
        count = 0;
      }
    }
  }
  flush_values(pending, count, d.dv, vs.row);
}

}  // namespace orbit::kernels::cpu
