// Paged attention on tensor cores (the kTensorCore variant of kernels/cuda/paged_attention.cuh): the same
// operation as the CPU reference (kernels/cpu/paged_attention.h), for 16-bit dtypes (bfloat16, float16) and
// any number of queries, on sm_80 and later (mma.sync.m16n8k16). Device code only; the launcher in
// paged_attention.cuh picks it.
//
// Design (FlashAttention-2 over pages). The R·G query rows that share one kv head (G = H / H_kv query heads
// per kv head, row i = query i / G, head i % G) form the M side of the products, so a key is read, patched
// and rotated once per block for all of them.
//   grid    (splits, H_kv, ⌈R·G / 64⌉), 128 threads = 4 warps; a block owns 64 rows (16 per warp, one m16
//           tile) and a contiguous range of keys; partial results per split go to the workspace and the
//           decode kernel's combine merges them.
//   stage   a tile of 64 keys is read in place (page slot or tail), its patch rows U·Vᵀ added and its key
//           rotated to its placement position (float32, angles reduced in float64 as the reference does),
//           then rounded once to the dtype into shared memory, K and V both [key][dim]. A thread stages 8
//           rotation frequencies of a key (two 16-byte loads of K and two of V, 8 sine/cosine pairs); the
//           slots of all its keys are read before any row, so a tile costs about two memory round trips.
//           Rows are padded by 8 elements: the 8 rows a fragment load touches fall in different banks.
//   S = QKᵀ  per warp 8 n-tiles × d/16 k-steps of mma; the queries' fragments stay in registers.
//   softmax online per row in float32 (scale applied to the float32 scores; causal and split limits
//           masked to -inf), P rounded to the dtype as the A operand of
//   O += PV  d/8 n-tiles × 4 k-steps of mma into float32 accumulators; V's fragments come transposed
//           from its [key][dim] rows through ldmatrix.trans.
// Rounding differs from the float32 tiled kernel in two places, the rotated key and P, each rounded once
// to the dtype (as the gathered path and flash attention round them).
#pragma once

#ifdef __CUDACC__

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cpu/paged_attention.h"

namespace orbit::kernels::cuda::detail {

constexpr int kMmaThreads = 128;
constexpr int kMmaKeys = 64;          // keys per staged tile
constexpr int kMmaRowsPerBlock = 64;  // 16 query rows per warp

// Two floats as one 32-bit register of two 16-bit values (low half first), and the mma for that type.
__device__ __forceinline__ uint32_t mma_pack(float lo, float hi, const __nv_bfloat16*) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t mma_pack(float lo, float hi, const __half*) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// c += a·b for one m16n8k16 tile: a row-major 16×16, b column-major 16×8, c float32 16×8.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                          const __nv_bfloat16*) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                          const __half*) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ uint32_t mma_ld32(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Rotates the pair (x0, x1) by the angle of position p and frequency inv (reduced modulo 2π in float64).
__device__ __forceinline__ void mma_rotate(float& x0, float& x1, int64_t p, double inv) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  constexpr double kInvTwoPi = 0.15915494309189533576888376337251;
  double ang = static_cast<double>(p) * inv;
  ang -= kTwoPi * rint(ang * kInvTwoPi);
  float sn, cs;
  __sincosf(static_cast<float>(ang), &sn, &cs);
  const float a = x0, b = x1;
  x0 = a * cs - b * sn;
  x1 = b * cs + a * sn;
}

// Four 32-bit registers of B fragments for two n-tiles of P·V: the 8×8 blocks of V (rows = keys) at
// (keys +0, dims +0), (+8, +0), (+0, +8), (+8, +8) from `v0` (key 0, dim 0 of the 16×16 block), transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
#endif
}

constexpr int kMmaFreqs = 8;  // rotation frequencies a staging thread owns

// A staging thread's frequencies 8c .. 8c+7 of the head: their inverse frequencies, position rows, and
// the two 8-dim groups they rotate (half-split: pair i = (g0[i], g1[i]); interleaved: g0 holds the pairs
// of frequencies 8c .. 8c+3, g1 those of 8c+4 .. 8c+7, each pair two adjacent dims).
struct MmaFreqs {
  double inv[kMmaFreqs];
  uint32_t rows = 0;  // position row of frequency i in bits [2i, 2i + 2)
  int base0 = 0, base1 = 0;
  __device__ int row(int i) const { return static_cast<int>((rows >> (2 * i)) & 3u); }
};

template <int D>
__device__ __forceinline__ MmaFreqs mma_freqs(const double* inv_freq, const int8_t* row_of_freq, bool interleaved,
                                              int c) {
  MmaFreqs f;
#pragma unroll
  for (int i = 0; i < kMmaFreqs; ++i) {
    f.inv[i] = inv_freq[kMmaFreqs * c + i];
    if (row_of_freq != nullptr) f.rows |= static_cast<uint32_t>(row_of_freq[kMmaFreqs * c + i] & 3) << (2 * i);
  }
  f.base0 = interleaved ? 16 * c : 8 * c;
  f.base1 = interleaved ? 16 * c + 8 : D / 2 + 8 * c;
  return f;
}

// 8 consecutive 16-bit elements (16-byte aligned) as floats, and back.
template <typename T>
__device__ __forceinline__ void mma_load8(const T* p, float (&x)[8]) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int e = 0; e < 8; ++e) x[e] = pa_load(h + e);
}
template <typename T>
__device__ __forceinline__ void mma_store8(T* p, const float (&x)[8]) {
  const T* tag = nullptr;
  uint4 raw;
  raw.x = mma_pack(x[0], x[1], tag);
  raw.y = mma_pack(x[2], x[3], tag);
  raw.z = mma_pack(x[4], x[5], tag);
  raw.w = mma_pack(x[6], x[7], tag);
  *reinterpret_cast<uint4*>(p) = raw;
}

// Adds patch rows u·vt (rank n, float32) at dims [base0, base0 + 8) and [base1, base1 + 8) of column
// offset `col` to x0 and x1. Rows of vt are read as float4 where vt is 16-byte aligned (W, col and the
// bases are multiples of 8 floats), else one by one.
__device__ __forceinline__ void mma_patch16(const float* u, const float* vt, int64_t n, int64_t W, int64_t col,
                                            int base0, int base1, float (&x0)[8], float (&x1)[8]) {
  if ((reinterpret_cast<uintptr_t>(vt) & 15) != 0) {
    for (int64_t j = 0; j < n; ++j) {
      const float uj = __ldg(u + j);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        x0[e] += uj * __ldg(vt + j * W + col + base0 + e);
        x1[e] += uj * __ldg(vt + j * W + col + base1 + e);
      }
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const float uj = __ldg(u + j);
    const float4* r0 = reinterpret_cast<const float4*>(vt + j * W + col + base0);
    const float4* r1 = reinterpret_cast<const float4*>(vt + j * W + col + base1);
    const float4 a = __ldg(r0), b = __ldg(r0 + 1), c = __ldg(r1), e = __ldg(r1 + 1);
    x0[0] += uj * a.x, x0[1] += uj * a.y, x0[2] += uj * a.z, x0[3] += uj * a.w;
    x0[4] += uj * b.x, x0[5] += uj * b.y, x0[6] += uj * b.z, x0[7] += uj * b.w;
    x1[0] += uj * c.x, x1[1] += uj * c.y, x1[2] += uj * c.z, x1[3] += uj * c.w;
    x1[4] += uj * e.x, x1[5] += uj * e.y, x1[6] += uj * e.z, x1[7] += uj * e.w;
  }
}

// mma_patch16 for factors of the pages' 16-bit type T: rows of vt read 8 at a time (16 bytes) where vt is
// 16-byte aligned, else one by one; the products summed in float32.
template <typename T>
__device__ __forceinline__ void mma_patch16_pages(const T* u, const T* vt, int64_t n, int64_t W, int64_t col, int base0,
                                                  int base1, float (&x0)[8], float (&x1)[8]) {
  const bool aligned = (reinterpret_cast<uintptr_t>(vt) & 15) == 0;
  for (int64_t j = 0; j < n; ++j) {
    const float uj = pa_load(u + j);
    float a[8], b[8];
    const T* r0 = vt + j * W + col + base0;
    const T* r1 = vt + j * W + col + base1;
    if (aligned) {
      mma_load8(r0, a);
      mma_load8(r1, b);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) a[e] = pa_load(r0 + e), b[e] = pa_load(r1 + e);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) x0[e] += uj * a[e], x1[e] += uj * b[e];
  }
}

// A segment's patch rows for key row i at this thread's dims, whichever type its factors hold.
template <typename T>
__device__ __forceinline__ void mma_add_patch(const cpu::PatchSegment& g, int64_t i, int64_t W, int64_t col, int base0,
                                              int base1, float (&k0)[8], float (&k1)[8], float (&v0)[8],
                                              float (&v1)[8]) {
  if (g.factors_as_pages) {
    mma_patch16_pages(static_cast<const T*>(g.u_k) + i * g.rank_k, static_cast<const T*>(g.vt_k), g.rank_k, W, col,
                      base0, base1, k0, k1);
    mma_patch16_pages(static_cast<const T*>(g.u_v) + i * g.rank_v, static_cast<const T*>(g.vt_v), g.rank_v, W, col,
                      base0, base1, v0, v1);
    return;
  }
  mma_patch16(static_cast<const float*>(g.u_k) + i * g.rank_k, static_cast<const float*>(g.vt_k), g.rank_k, W, col,
              base0, base1, k0, k1);
  mma_patch16(static_cast<const float*>(g.u_v) + i * g.rank_v, static_cast<const float*>(g.vt_v), g.rank_v, W, col,
              base0, base1, v0, v1);
}

// The pool row (page slot) of key s, -1 for a tail key, -2 for padding (s < 0).
template <typename T>
__device__ __forceinline__ int64_t mma_row_of(const cpu::PagedAttentionArgs<T>& a, const cpu::PagedAttentionDims& d,
                                              int64_t s) {
  if (s < 0) return -2;
  return s < d.paged_tokens ? static_cast<int64_t>(__ldg(a.slots + s)) : -1;
}

// Stages this thread's 8 frequencies of key s (row from mma_row_of) into the K and V rows of the tile.
template <typename T, int D>
__device__ __forceinline__ void mma_stage_key(const cpu::PagedAttentionArgs<T>& a, const cpu::PagedAttentionDims& d,
                                              int64_t s, int64_t row, int hk, const MmaFreqs& f, T* krow, T* vrow) {
  float k0[8], k1[8], v0[8], v1[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) k0[e] = k1[e] = v0[e] = v1[e] = 0.f;
  if (row != -2) {
    const int64_t W = d.kv_heads * D;
    const int64_t col = static_cast<int64_t>(hk) * D;
    const T* kr = row >= 0 ? a.k_pages + row * W + col : a.k_tail + (s - d.paged_tokens) * W + col;
    const T* vr = row >= 0 ? a.v_pages + row * W + col : a.v_tail + (s - d.paged_tokens) * W + col;
    mma_load8(kr + f.base0, k0);
    mma_load8(kr + f.base1, k1);
    mma_load8(vr + f.base0, v0);
    mma_load8(vr + f.base1, v1);
    const int32_t seg = a.patch_of != nullptr && row >= 0 ? __ldg(a.patch_of + s) : -1;
    if (seg >= 0) {
      const cpu::PatchSegment& g = a.segments[seg];
      mma_add_patch<T>(g, s - g.first, W, col, f.base0, f.base1, k0, k1, v0, v1);
    }
    const int64_t* pos = a.positions + s * d.position_rows;
    const int64_t p0 = pos[0];
    const int64_t p1 = d.position_rows == 3 ? pos[1] : p0, p2 = d.position_rows == 3 ? pos[2] : p0;
#pragma unroll
    for (int i = 0; i < kMmaFreqs; ++i) {
      const int r = f.row(i);
      const int64_t pi = r == 0 ? p0 : r == 1 ? p1 : p2;
      if (!d.interleaved) {
        mma_rotate(k0[i], k1[i], pi, f.inv[i]);
      } else if (i < 4) {
        mma_rotate(k0[2 * i], k0[2 * i + 1], pi, f.inv[i]);
      } else {
        mma_rotate(k1[2 * i - 8], k1[2 * i - 7], pi, f.inv[i]);
      }
    }
  }
  mma_store8(krow + f.base0, k0);
  mma_store8(krow + f.base1, k1);
  mma_store8(vrow + f.base0, v0);
  mma_store8(vrow + f.base1, v1);
}

// The query fragment pair at dims [c, c + 2) of a query row (null: a padding row, zeros).
template <typename T>
__device__ __forceinline__ uint32_t mma_q_pair(const T* row, int c) {
  return row != nullptr ? mma_ld32(row + c) : 0u;
}

template <typename T, int D>
__global__ void __launch_bounds__(kMmaThreads)
    paged_attention_mma(const cpu::PagedAttentionArgs<T> a, const cpu::PagedAttentionDims d, int64_t splits,
                        float* ws) {
  constexpr int KS = D + 8;                 // K and V row stride (elements)
  constexpr int TPK = D / (2 * kMmaFreqs);  // staging threads per key
  constexpr int KPP = kMmaThreads / TPK;    // keys staged per pass
  constexpr int PASSES = kMmaKeys / KPP;
  __shared__ __align__(16) T ks[kMmaKeys * KS];
  __shared__ __align__(16) T vs[kMmaKeys * KS];
  const T* tag = nullptr;

  const int split = blockIdx.x, hk = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gq = lane >> 2, tq = lane & 3;  // fragment row (and row + 8), column pair
  const int64_t group = d.heads / d.kv_heads;
  const int64_t rows_total = d.queries * group;
  const int64_t S = d.paged_tokens + d.tail_tokens;
  const int64_t chunk = (S + splits - 1) / splits;
  const int64_t begin = static_cast<int64_t>(split) * chunk;
  // The block's last row sees the most keys; nothing after its last visible key is read.
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.z) * kMmaRowsPerBlock;
  const int64_t last_row =
      block_row0 + kMmaRowsPerBlock - 1 < rows_total ? block_row0 + kMmaRowsPerBlock - 1 : rows_total - 1;
  const int64_t visible = S - d.queries + last_row / group + 1;
  const int64_t end = begin + chunk < visible ? begin + chunk : visible;

  // This thread's two rows: A = row0 + gq, B = row0 + gq + 8; their query rows and last visible keys.
  const int64_t row_a = block_row0 + warp * 16 + gq, row_b = row_a + 8;
  auto q_row = [&](int64_t row) -> const T* {
    if (row >= rows_total) return nullptr;
    return a.q + ((row / group) * d.heads + hk * group + row % group) * D;
  };
  const T* qa_row = q_row(row_a);
  const T* qb_row = q_row(row_b);
  const int64_t lim_a = row_a < rows_total ? S - d.queries + row_a / group : -1;
  const int64_t lim_b = row_b < rows_total ? S - d.queries + row_b / group : -1;
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    qf[kk][0] = mma_q_pair(qa_row, kk * 16 + 2 * tq);
    qf[kk][1] = mma_q_pair(qb_row, kk * 16 + 2 * tq);
    qf[kk][2] = mma_q_pair(qa_row, kk * 16 + 8 + 2 * tq);
    qf[kk][3] = mma_q_pair(qb_row, kk * 16 + 8 + 2 * tq);
  }
  const MmaFreqs freqs = mma_freqs<D>(a.inv_freq, a.row_of_freq, d.interleaved, tid % TPK);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

  for (int64_t t0 = begin; t0 < end; t0 += kMmaKeys) {
    // Every key's slot first (PASSES loads in flight), then the rows.
    int64_t rows[PASSES];
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
      const int64_t s = t0 + p * KPP + tid / TPK;
      rows[p] = mma_row_of(a, d, s < end ? s : -1);
    }
#pragma unroll 2
    for (int p = 0; p < PASSES; ++p) {
      const int kl = p * KPP + tid / TPK;
      mma_stage_key<T, D>(a, d, t0 + kl, rows[p], hk, freqs, ks + kl * KS, vs + kl * KS);
    }
    __syncthreads();

    // S = Q·Kᵀ for 64 keys: 8 n-tiles of 8 keys.
    float sc[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const T* kp = ks + (n * 8 + gq) * KS + kk * 16 + 2 * tq;
        mma_16816(sc[n], qf[kk], mma_ld32(kp), mma_ld32(kp + 8), tag);
      }
    }
    // Scale, mask, online softmax (rows A and B; the 4 threads of a row meet by shuffles).
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const int64_t key = t0 + n * 8 + 2 * tq + (e & 1);
        const bool valid = key < end && key <= (r == 0 ? lim_a : lim_b);
        sc[n][e] = valid ? sc[n][e] * d.scale : -INFINITY;
        tmax[r] = fmaxf(tmax[r], sc[n][e]);
      }
    }
    float corr[2], tsum[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
      tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
      const float m_new = fmaxf(m[r], tmax[r]);
      corr[r] = m_new == -INFINITY ? 1.f : __expf(m[r] - m_new);
      m[r] = m_new;
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        sc[n][e] = m[r] == -INFINITY ? 0.f : __expf(sc[n][e] - m[r]);
        tsum[r] += sc[n][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tsum[r] += __shfl_xor_sync(0xffffffffu, tsum[r], 1);
      tsum[r] += __shfl_xor_sync(0xffffffffu, tsum[r], 2);
      l[r] = l[r] * corr[r] + tsum[r];
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= corr[0], o[n][1] *= corr[0];
      o[n][2] *= corr[1], o[n][3] *= corr[1];
    }
    // O += P·V: P's accumulator layout is the A fragment of 4 k-steps of 16 keys.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t pf[4] = {mma_pack(sc[2 * kk][0], sc[2 * kk][1], tag), mma_pack(sc[2 * kk][2], sc[2 * kk][3], tag),
                              mma_pack(sc[2 * kk + 1][0], sc[2 * kk + 1][1], tag),
                              mma_pack(sc[2 * kk + 1][2], sc[2 * kk + 1][3], tag)};
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * KS + n * 16 + (lane >> 4) * 8);
        mma_16816(o[2 * n], pf, b[0], b[1], tag);
        mma_16816(o[2 * n + 1], pf, b[2], b[3], tag);
      }
    }
    __syncthreads();
  }

  // Partial (max, sum, unnormalised output) of this split, in the decode kernel's workspace layout.
  float* ws_acc = ws;
  float* ws_ml = ws + d.queries * d.heads * splits * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = r == 0 ? row_a : row_b;
    if (row >= rows_total) continue;
    const int64_t rh = (row / group) * d.heads + hk * group + row % group;
    const int64_t slot = rh * splits + split;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      ws_acc[slot * D + n * 8 + 2 * tq] = o[n][2 * r];
      ws_acc[slot * D + n * 8 + 2 * tq + 1] = o[n][2 * r + 1];
    }
    if (tq == 0) {
      ws_ml[slot * 2] = m[r];
      ws_ml[slot * 2 + 1] = l[r];
    }
  }
}

}  // namespace orbit::kernels::cuda::detail

#endif  // __CUDACC__
