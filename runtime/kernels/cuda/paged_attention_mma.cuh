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
//           then rounded once to the dtype into shared memory: K as [key][dim], V transposed [dim][key],
//           so both products read 32-bit fragments straight from shared memory (rows padded by 8 elements:
//           the 8 rows a fragment load touches fall in different banks).
//   S = QKᵀ  per warp 8 n-tiles × d/16 k-steps of mma; the queries' fragments stay in registers.
//   softmax online per row in float32 (scale applied to the float32 scores; causal and split limits
//           masked to -inf), P rounded to the dtype as the A operand of
//   O += PV  d/8 n-tiles × 4 k-steps of mma into float32 accumulators.
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

// Stages key s (< 0: padding, zeros) of kv head hk into row `kl` of the tile: this thread's two
// frequencies fp·2 and fp·2 + 1, i.e. four head dims (half-split: 2fp, 2fp+1, 2fp+d/2, 2fp+1+d/2;
// interleaved: 4fp .. 4fp+3). K goes to ks[kl][dim], V to vt[dim][kl].
template <typename T, int D, int KS, int VS>
__device__ __forceinline__ void mma_stage_key(const cpu::PagedAttentionArgs<T>& a, const cpu::PagedAttentionDims& d,
                                              int64_t s, int hk, int fp, int kl, T* ks, T* vt) {
  int dim[4];
  if (d.interleaved) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dim[e] = 4 * fp + e;
  } else {
    dim[0] = 2 * fp, dim[1] = 2 * fp + 1, dim[2] = 2 * fp + D / 2, dim[3] = 2 * fp + 1 + D / 2;
  }
  float k[4] = {0.f, 0.f, 0.f, 0.f}, v[4] = {0.f, 0.f, 0.f, 0.f};
  if (s >= 0) {
    const int64_t W = d.kv_heads * D;
    const int64_t col = static_cast<int64_t>(hk) * D;
    const T *kr, *vr;
    if (s < d.paged_tokens) {
      const int64_t row = static_cast<int64_t>(__ldg(a.slots + s));
      kr = a.k_pages + row * W + col;
      vr = a.v_pages + row * W + col;
    } else {
      kr = a.k_tail + (s - d.paged_tokens) * W + col;
      vr = a.v_tail + (s - d.paged_tokens) * W + col;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      k[e] = pa_load(kr + dim[e]);
      v[e] = pa_load(vr + dim[e]);
    }
    const int32_t seg = a.patch_of != nullptr && s < d.paged_tokens ? __ldg(a.patch_of + s) : -1;
    if (seg >= 0) {
      const cpu::PatchSegment& g = a.segments[seg];
      const int64_t i = s - g.first;
      for (int64_t j = 0; j < g.rank_k; ++j) {
        const float u = __ldg(g.u_k + i * g.rank_k + j);
#pragma unroll
        for (int e = 0; e < 4; ++e) k[e] += u * __ldg(g.vt_k + j * W + col + dim[e]);
      }
      for (int64_t j = 0; j < g.rank_v; ++j) {
        const float u = __ldg(g.u_v + i * g.rank_v + j);
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] += u * __ldg(g.vt_v + j * W + col + dim[e]);
      }
    }
    const int64_t* pos = a.positions + s * d.position_rows;
    const int f0 = 2 * fp, f1 = 2 * fp + 1;
    const int64_t p0 = pos[a.row_of_freq != nullptr ? a.row_of_freq[f0] : 0];
    const int64_t p1 = pos[a.row_of_freq != nullptr ? a.row_of_freq[f1] : 0];
    if (d.interleaved) {
      mma_rotate(k[0], k[1], p0, a.inv_freq[f0]);
      mma_rotate(k[2], k[3], p1, a.inv_freq[f1]);
    } else {
      mma_rotate(k[0], k[2], p0, a.inv_freq[f0]);
      mma_rotate(k[1], k[3], p1, a.inv_freq[f1]);
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    pa_store(ks + kl * KS + dim[e], k[e]);
    pa_store(vt + dim[e] * VS + kl, v[e]);
  }
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
  constexpr int KS = D + 8;         // ks row stride (elements)
  constexpr int VS = kMmaKeys + 8;  // vt row stride
  constexpr int TPK = D / 4;        // staging threads per key
  __shared__ __align__(16) T ks[kMmaKeys * KS];
  __shared__ __align__(16) T vt[D * VS];
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
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

  for (int64_t t0 = begin; t0 < end; t0 += kMmaKeys) {
    for (int kl = tid / TPK; kl < kMmaKeys; kl += kMmaThreads / TPK) {
      const int64_t s = t0 + kl;
      mma_stage_key<T, D, KS, VS>(a, d, s < end ? s : -1, hk, tid % TPK, kl, ks, vt);
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
      for (int n = 0; n < D / 8; ++n) {
        const T* vp = vt + (n * 8 + gq) * VS + kk * 16 + 2 * tq;
        mma_16816(o[n], pf, mma_ld32(vp), mma_ld32(vp + 8), tag);
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
