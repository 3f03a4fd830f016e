// Decode attention over a DecodeCache's buffers (orbit/runtime/decode_cache.h), CPU kernel: raw pointers,
// header-only, no torch. Every member of a batch reads only its own slot's rows, so a batch of sequences of
// different lengths costs the rows they hold, with no padding, mask or temporary:
//
//   keys    [slots][H_a][capacity][d_k]   rotated (attention form); values [slots][H_a][capacity][d_v]; each
//           row's elements consecutive, the rows, heads and slots at any strides (CachedAttentionStrides)
//   member b   slot slots[b], lengths[b] rows before this forward, R new rows already written after them
//   query      q row first_row[b] + r of [N][H][d_k] (rotated, unscaled); query head h reads kv head h / G,
//              G = H / H_a, and sees rows 0 .. lengths[b] + r of its slot, or 0 .. last_key[b·R + r] when
//              last_key is given (a prefill's queries over keys laid out as slots: any causal mask by rows)
//   out        row first_row[b] + r of [N][H][d_v]: softmax_s(scale · q·k_s) · v_s, float32 sums, stored as T
//
// Work is split into (member, query head) items, [begin, end) per call, so a caller may run ranges in parallel.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace orbit::kernels::cpu {

struct CachedAttentionDims {
  int64_t members = 0;   // B
  int64_t queries = 0;   // R ≥ 1 per member
  int64_t heads = 0;     // H (query heads)
  int64_t kv_heads = 0;  // H_a, divides H
  int64_t dk = 0, dv = 0;
  int64_t capacity = 0;  // rows per slot and head in the buffers
  float scale = 1.0f;    // multiplies q·k
  int64_t items() const { return members * heads; }
};

// Element strides of one buffer between slots, kv heads and rows (a row's elements are consecutive). The
// dense layout [slots][H_a][capacity][d] is {H_a·capacity·d, capacity·d, d}; a prefill's keys [B][S][H_a][d]
// read in place are {S·H_a·d, d, H_a·d}.
struct CachedAttentionStrides {
  int64_t slot = 0, head = 0, row = 0;
  int64_t at(int64_t slot_index, int64_t head_index) const { return slot_index * slot + head_index * head; }
};

template <typename T>
struct CachedAttentionArgs {
  const T* q = nullptr;                // [N][H][d_k]
  const T* keys = nullptr;             // [slots][H_a][capacity][d_k], one layer
  const T* values = nullptr;           // [slots][H_a][capacity][d_v]
  const int64_t* slots = nullptr;      // [B]
  const int64_t* lengths = nullptr;    // [B]: rows before this forward
  const int64_t* first_row = nullptr;  // [B]: the member's first row of q and out
  T* out = nullptr;                    // [N][H][d_v]
  const int64_t* last_key = nullptr;   // [B·R] or null: the last row each query sees (< capacity)
  CachedAttentionStrides key_strides, value_strides;
};

// Rows query r of member b sees.
template <typename T>
inline int64_t cached_seen(const CachedAttentionArgs<T>& a, int64_t queries, int64_t b, int64_t r) {
  return a.last_key != nullptr ? a.last_key[b * queries + r] + 1 : a.lengths[b] + r + 1;
}

// q·k over n elements in eight independent float32 sums (a single running sum is one long dependency chain
// the compiler may not vectorise).
template <typename T>
inline float cached_dot(const float* q, const T* k, int64_t n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t e = 0;
  for (; e + 8 <= n; e += 8) {
    for (int j = 0; j < 8; ++j) part[j] += q[e + j] * static_cast<float>(k[e + j]);
  }
  float dot = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; e < n; ++e) dot += q[e] * static_cast<float>(k[e]);
  return dot;
}

// e^x for x ≤ 0 within a few float32 ulps (Cephes' expf: x = n·ln2 + r, a degree-6 polynomial for e^r, 2^n
// from the exponent bits), in operations a loop over scores vectorises (std::exp is a call per element).
inline float cached_exp(float x) {
  x = std::max(x, -87.0f);
  const int32_t n = static_cast<int32_t>(x * 1.44269504088896341f - 0.5f);  // round(x / ln2) for x ≤ 0
  const float fn = static_cast<float>(n);
  const float r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// One query row over `seen` key rows: acc [d_v] = Σ_s w_s · v_s / Σ_s w_s, w_s = e^(q·k_s − max); `w` holds
// `seen` floats of scratch. Restrict pointers let the compiler keep acc in registers and vectorise each loop.
template <typename T>
void cached_attend_row(const float* __restrict q, const T* __restrict k, const T* __restrict v, int64_t seen,
                       const CachedAttentionDims& d, int64_t k_row, int64_t v_row, float* __restrict w,
                       float* __restrict acc) {
  for (int64_t s = 0; s < seen; ++s) w[s] = cached_dot(q, k + s * k_row, d.dk);
  float top = w[0];
  for (int64_t s = 1; s < seen; ++s) top = w[s] > top ? w[s] : top;
  for (int64_t s = 0; s < seen; ++s) w[s] = cached_exp(w[s] - top);
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t s = 0;
  for (; s + 8 <= seen; s += 8) {
    for (int j = 0; j < 8; ++j) part[j] += w[s + j];
  }
  float total = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  for (; s < seen; ++s) total += w[s];
  for (int64_t e = 0; e < d.dv; ++e) acc[e] = 0;
  for (int64_t t = 0; t < seen; ++t) {
    const T* __restrict vs = v + t * v_row;
    for (int64_t e = 0; e < d.dv; ++e) acc[e] += w[t] * static_cast<float>(vs[e]);
  }
  const float inv = 1.0f / total;
  for (int64_t e = 0; e < d.dv; ++e) acc[e] *= inv;
}

// Items [begin, end) of d.items(): item i is member i / H, query head i % H.
template <typename T>
void cached_attention_cpu(const CachedAttentionArgs<T>& a, const CachedAttentionDims& d, int64_t begin, int64_t end) {
  const int64_t G = d.heads / d.kv_heads;
  std::vector<float> w, acc(static_cast<std::size_t>(d.dv)), query(static_cast<std::size_t>(d.dk));
  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / d.heads, h = item % d.heads;
    const T* keys = a.keys + a.key_strides.at(a.slots[b], h / G);
    const T* values = a.values + a.value_strides.at(a.slots[b], h / G);
    for (int64_t r = 0; r < d.queries; ++r) {
      const int64_t row = a.first_row[b] + r, seen = cached_seen(a, d.queries, b, r);
      const T* qr = a.q + (row * d.heads + h) * d.dk;
      for (int64_t e = 0; e < d.dk; ++e) query[static_cast<std::size_t>(e)] = static_cast<float>(qr[e]) * d.scale;
      w.resize(static_cast<std::size_t>(seen));
      cached_attend_row(query.data(), keys, values, seen, d, a.key_strides.row, a.value_strides.row, w.data(),
                        acc.data());
      T* o = a.out + (row * d.heads + h) * d.dv;
      for (int64_t e = 0; e < d.dv; ++e) o[e] = static_cast<T>(acc[static_cast<std::size_t>(e)]);
    }
  }
}

}  // namespace orbit::kernels::cpu
