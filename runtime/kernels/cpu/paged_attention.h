// Paged attention over canonical pages, CPU reference kernel: raw pointers, header-only, no torch
// (docs/ARCHITECTURE.md §9). The CUDA kernel (kernels/cuda/paged_attention.cuh) computes the same thing and is
// tested against this; the op (ops/paged_attention_op.h) checks tensors and dispatches.
//
// R query tokens attend over S = S_p + S_t keys of one layer (GQA: query head h reads kv head
// h / (H / H_kv)). Keys and values are held in *content form* (pre-RoPE keys, values), so a chunk's
// pages are shared by every window that places it, wherever it sits:
//
//   key s < S_p (paged)   row = slots[s] of the pages [rows][width]     (width = H_kv · d; a slot is
//                                                                         page · page_size + offset)
//                         k = k_pages[row] + U_k[i]·V_kᵀ,  v = v_pages[row] + U_v[i]·V_vᵀ
//                         where token s is row i of placed patch segment patch_of[s] (−1: none)
//   key s ≥ S_p (tail)    k = k_tail[s − S_p], v = v_tail[s − S_p]      (contiguous [S_t][width])
//   every key             rotated (fused relocation) to its placement position: pair f of head dims
//                         turns by  angle = positions[s][row_of_freq[f]] · inv_freq[f]
//                         (interleaved pairs (2f, 2f+1) or half-split pairs (f, f + d/2); rotary_dim = d)
//   query r               q [R][H][d], already rotated and scaled by the caller; sees keys
//                         s ≤ S − R + r (causal: the queries are the last R keys)
//   out [R][H][d]         softmax_s(scale · q·k_s) · v_s, accumulated in float32, stored as T
//
// Angles: the product and its reduction modulo 2π are float64 (positions of any size keep float32
// accuracy after the reduction), the sine and cosine float32.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace orbit::kernels::cpu {

// One placed chunk's low-rank patch rows (row-major): Δk[i] = u_k[i, :]·vt_k (rank_k ≥ 0),
// Δv[i] = u_v[i, :]·vt_v; i = s − first for keys s in [first, first + length). The factors are float32, or,
// with factors_as_pages, of the pages' own type T (a bfloat16 or float16 pool keeps its placements' factors
// at half the bytes); either way the products are summed in float32.
struct PatchSegment {
  int64_t first = 0;
  int64_t length = 0;
  int64_t rank_k = 0;
  int64_t rank_v = 0;
  const void* u_k = nullptr;      // [length][rank_k]
  const void* vt_k = nullptr;     // [rank_k][width]
  const void* u_v = nullptr;      // [length][rank_v]
  const void* vt_v = nullptr;     // [rank_v][width]
  bool factors_as_pages = false;  // the four factors hold T; false: float32
};

// Element i of factor `p` of segment g, as float.
template <typename T>
inline float patch_factor(const PatchSegment& g, const void* p, int64_t i) {
  return g.factors_as_pages ? static_cast<float>(static_cast<const T*>(p)[i]) : static_cast<const float*>(p)[i];
}

struct PagedAttentionDims {
  int64_t queries = 0;        // R ≥ 1
  int64_t heads = 0;          // H
  int64_t kv_heads = 0;       // H_kv, divides H
  int64_t head_dim = 0;       // d (even)
  bool interleaved = false;   // RoPE pair layout (see rope.h)
  int64_t paged_tokens = 0;   // S_p
  int64_t tail_tokens = 0;    // S_t ≥ R (the queries' own tokens are the last R of the tail)
  int64_t position_rows = 1;  // 1, or 3 for M-RoPE (t, h, w) positions
  float scale = 1.0f;         // multiplies q·k
  int64_t width() const { return kv_heads * head_dim; }
};

template <typename T>
struct PagedAttentionArgs {
  const T* q = nullptr;        // [R][H][d]
  const T* k_pages = nullptr;  // [rows][width], one layer
  const T* v_pages = nullptr;
  const int32_t* slots = nullptr;  // [S_p]
  const T* k_tail = nullptr;       // [S_t][width]
  const T* v_tail = nullptr;
  const int64_t* positions = nullptr;   // [S][position_rows], token-major
  const double* inv_freq = nullptr;     // [d/2]
  const int8_t* row_of_freq = nullptr;  // [d/2] in [0, position_rows); null: row 0 for every f
  const int32_t* patch_of = nullptr;    // [S_p] index into segments or −1; null: no patches
  const PatchSegment* segments = nullptr;
  T* out = nullptr;  // [R][H][d]
};

// cos and sin of angle p·inv, reduced modulo 2π in float64.
inline void paged_angle(int64_t p, double inv, float* c, float* s) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  double a = static_cast<double>(p) * inv;
  a -= kTwoPi * std::nearbyint(a / kTwoPi);
  const float af = static_cast<float>(a);
  *c = std::cos(af);
  *s = std::sin(af);
}

// Reference: straightforward loops, float32 accumulation. T: float, or any type with static_cast to
// and from float (c10::BFloat16, c10::Half).
template <typename T>
void paged_attention_reference(const PagedAttentionArgs<T>& a, const PagedAttentionDims& d) {
  const int64_t S = d.paged_tokens + d.tail_tokens, W = d.width(), D = d.head_dim, half = D / 2;
  const int64_t group = d.heads / d.kv_heads;
  // Keys and values of every token, patched and rotated once: [S][W] float.
  std::vector<float> k(static_cast<size_t>(S * W)), v(static_cast<size_t>(S * W));
  for (int64_t s = 0; s < S; ++s) {
    const bool paged = s < d.paged_tokens;
    const T* kr = paged ? a.k_pages + static_cast<int64_t>(a.slots[s]) * W : a.k_tail + (s - d.paged_tokens) * W;
    const T* vr = paged ? a.v_pages + static_cast<int64_t>(a.slots[s]) * W : a.v_tail + (s - d.paged_tokens) * W;
    float* ko = &k[static_cast<size_t>(s * W)];
    float* vo = &v[static_cast<size_t>(s * W)];
    for (int64_t c = 0; c < W; ++c) {
      ko[c] = static_cast<float>(kr[c]);
      vo[c] = static_cast<float>(vr[c]);
    }
    const int32_t seg = paged && a.patch_of != nullptr ? a.patch_of[s] : -1;
    if (seg >= 0) {
      const PatchSegment& g = a.segments[seg];
      const int64_t i = s - g.first;
      for (int64_t c = 0; c < W; ++c) {
        float dk = 0, dv = 0;
        for (int64_t j = 0; j < g.rank_k; ++j)
          dk += patch_factor<T>(g, g.u_k, i * g.rank_k + j) * patch_factor<T>(g, g.vt_k, j * W + c);
        for (int64_t j = 0; j < g.rank_v; ++j)
          dv += patch_factor<T>(g, g.u_v, i * g.rank_v + j) * patch_factor<T>(g, g.vt_v, j * W + c);
        ko[c] += dk;
        vo[c] += dv;
      }
    }
    for (int64_t hk = 0; hk < d.kv_heads; ++hk) {
      float* x = ko + hk * D;
      for (int64_t f = 0; f < half; ++f) {
        const int64_t row = a.row_of_freq != nullptr ? a.row_of_freq[f] : 0;
        float cs, sn;
        paged_angle(a.positions[s * d.position_rows + row], a.inv_freq[f], &cs, &sn);
        const int64_t i0 = d.interleaved ? 2 * f : f, i1 = d.interleaved ? 2 * f + 1 : f + half;
        const float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * cs - x1 * sn;
        x[i1] = x1 * cs + x0 * sn;
      }
    }
  }
  std::vector<float> scores(static_cast<size_t>(S));
  for (int64_t r = 0; r < d.queries; ++r) {
    const int64_t visible = S - d.queries + r + 1;
    for (int64_t h = 0; h < d.heads; ++h) {
      const int64_t hk = h / group;
      const T* q = a.q + (r * d.heads + h) * D;
      float best = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < visible; ++s) {
        float dot = 0;
        for (int64_t e = 0; e < D; ++e) dot += static_cast<float>(q[e]) * k[static_cast<size_t>(s * W + hk * D + e)];
        scores[static_cast<size_t>(s)] = dot * d.scale;
        best = std::max(best, scores[static_cast<size_t>(s)]);
      }
      float total = 0;
      for (int64_t s = 0; s < visible; ++s) {
        scores[static_cast<size_t>(s)] = std::exp(scores[static_cast<size_t>(s)] - best);
        total += scores[static_cast<size_t>(s)];
      }
      T* o = a.out + (r * d.heads + h) * D;
      for (int64_t e = 0; e < D; ++e) {
        float acc = 0;
        for (int64_t s = 0; s < visible; ++s)
          acc += scores[static_cast<size_t>(s)] * v[static_cast<size_t>(s * W + hk * D + e)];
        o[e] = static_cast<T>(acc / total);
      }
    }
  }
}

}  // namespace orbit::kernels::cpu
