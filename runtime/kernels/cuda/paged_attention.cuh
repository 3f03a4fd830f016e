// Paged attention over canonical pages, CUDA kernel: raw device pointers, an explicit stream,
// cudaError_t back; never torch (docs/ARCHITECTURE.md §9). The operation, the layouts and the argument structs are
// those of the CPU reference (kernels/cpu/paged_attention.h), against which it is tested: keys and
// values are read in place from the pool's pages through a per-token slot table, each placed chunk's
// low-rank patch rows U·Vᵀ are added as they are read, and every key is rotated to its placement
// position on the fly (fused relocation: a page is never rewritten when its chunk moves).
//
// Covered: head_dim 64 or 128 (rotary_dim = head_dim), H / H_kv ≤ kPagedMaxGroup, any R (the forward sends
// R <= kPagedMaxQueries here and prefill to the fused PyTorch kernels). `segments` is a device array.
//
// Design (flash-decoding): grid = (splits, H_kv, R), 128 threads = 4 warps. A block owns one kv head,
// one query and a contiguous range of keys; its warps take keys round-robin, two at a time (both
// tokens' loads in flight before either is used). One warp reads one key row of its head: lane l holds
// dims [l·E, l·E + E) (E = d/32, 8-byte loads for bf16 at d = 128), so the half-split partner of a dim
// sits in lane l ^ 16 (one shuffle) and an interleaved partner in the same lane. Each warp keeps an
// online softmax (max, sum, accumulator) for the G = H/H_kv query heads that share the kv head, so a
// key is read once for all of them. Warps merge in shared memory; blocks write (max, sum, partial
// output) per split to the workspace, and a second kernel merges the splits into out.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/paged_attention.h"

namespace orbit::kernels::cuda {

using cpu::PagedAttentionArgs;
using cpu::PagedAttentionDims;
using cpu::PatchSegment;

constexpr int kPagedMaxGroup = 8;

// Whether the kernel covers these dims (else the op falls back to PyTorch ops).
inline bool paged_attention_supports(const PagedAttentionDims& d) {
  return (d.head_dim == 64 || d.head_dim == 128) && d.kv_heads > 0 && d.heads % d.kv_heads == 0 &&
         d.heads / d.kv_heads <= kPagedMaxGroup && d.queries >= 1 && d.tail_tokens >= d.queries &&
         (d.position_rows == 1 || d.position_rows == 3);
}

// Two implementations of the same operation:
//   kTiled    (default) each warp stages a tile of 16 keys, patched and rotated, in shared memory; lanes
//             then score one key each against the G query heads (2 lanes per key, halves of the head
//             dims), the online softmax runs once per tile, and values are read row by row and weighted
//             by the tile's probabilities broadcast from the scoring lanes. Shuffles per key drop from
//             ~5·G to ~G and the loads of a tile are independent, so more of them are in flight.
//   kRowwise  one key at a time per warp, a warp-wide shuffle reduction per query head (kept to measure
//             against; see bench/gpu).
//   kTensorCore  bfloat16/float16 on sm_80+: every query row of a kv head (R·G of them) in one block,
//             keys staged once per block and both products on tensor cores (paged_attention_mma.cuh).
//             One read of each key serves all R queries instead of one read per query.
enum class PagedKernel { kTiled, kRowwise, kTensorCore };

// Query rows per tensor-core block, and the blocks a kv head's rows take.
constexpr int64_t kPagedMmaRows = 64;
inline int64_t paged_attention_row_blocks(const PagedAttentionDims& d) {
  return (d.queries * (d.heads / d.kv_heads) + kPagedMmaRows - 1) / kPagedMmaRows;
}

// Key splits for `sm_count` multiprocessors: enough blocks to fill the device, at least 64 keys each.
inline int64_t paged_attention_splits(const PagedAttentionDims& d, int sm_count,
                                      PagedKernel kernel = PagedKernel::kTiled) {
  const int64_t keys = d.paged_tokens + d.tail_tokens;
  const int64_t blocks =
      kernel == PagedKernel::kTensorCore ? d.kv_heads * paged_attention_row_blocks(d) : d.kv_heads * d.queries;
  int64_t splits = (4 * static_cast<int64_t>(sm_count) + blocks - 1) / blocks;
  const int64_t most = (keys + 63) / 64;
  if (splits > most) splits = most;
  return splits < 1 ? 1 : splits;
}

// Workspace floats for `splits`: R·H·splits·(d + 2).
inline int64_t paged_attention_workspace_floats(const PagedAttentionDims& d, int64_t splits) {
  return d.queries * d.heads * splits * (d.head_dim + 2);
}

// Enqueues the attention on `stream`: cudaErrorInvalidValue for dims the kernel does not cover, missing
// pointers or kTensorCore on float32, else the launch status. `splits` must come from
// paged_attention_splits for the same kernel. Asynchronous: pointers stay valid until the stream passes.
template <typename T>
cudaError_t paged_attention(const PagedAttentionArgs<T>& args, const PagedAttentionDims& dims, float* workspace,
                            int64_t splits, cudaStream_t stream, PagedKernel kernel = PagedKernel::kTiled);

#define ORBIT_PAGED_ATTENTION_DECLARE(T)                                                                          \
  extern template cudaError_t paged_attention<T>(const PagedAttentionArgs<T>&, const PagedAttentionDims&, float*, \
                                                 int64_t, cudaStream_t, PagedKernel);
ORBIT_PAGED_ATTENTION_DECLARE(float)
ORBIT_PAGED_ATTENTION_DECLARE(__nv_bfloat16)
ORBIT_PAGED_ATTENTION_DECLARE(__half)
#undef ORBIT_PAGED_ATTENTION_DECLARE

#ifdef __CUDACC__

namespace detail {

constexpr int kPagedThreads = 128;
constexpr int kPagedWarps = kPagedThreads / 32;

__device__ __forceinline__ float pa_load(const float* p) { return *p; }
__device__ __forceinline__ float pa_load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float pa_load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void pa_store(float* p, float v) { *p = v; }
__device__ __forceinline__ void pa_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void pa_store(__half* p, float v) { *p = __float2half(v); }

// E consecutive elements into floats (one vector load for E·sizeof(T) ∈ {4, 8, 16} bytes).
template <typename T, int E>
__device__ __forceinline__ void pa_load_row(const T* p, float (&x)[E]) {
#pragma unroll
  for (int e = 0; e < E; ++e) x[e] = pa_load(p + e);
}

// Element i of a patch factor of segment g: T where the segment's factors are the pages' type, else float.
template <typename T>
__device__ __forceinline__ float pa_factor(const PatchSegment& g, const void* p, int64_t i) {
  return g.factors_as_pages ? pa_load(static_cast<const T*>(p) + i) : __ldg(static_cast<const float*>(p) + i);
}

// x[0, E) += u[i, :]·vt[:, col, col + E) for one factor pair of rank n (row i's u already offset).
template <typename T, int E>
__device__ __forceinline__ void pa_add_patch(const PatchSegment& g, const void* u, int64_t ui, const void* vt,
                                             int64_t n, int64_t W, int col, float (&x)[E]) {
  for (int64_t j = 0; j < n; ++j) {
    const float uj = pa_factor<T>(g, u, ui + j);
#pragma unroll
    for (int e = 0; e < E; ++e) x[e] += uj * pa_factor<T>(g, vt, j * W + col + e);
  }
}

// One key: content row read in place (page or tail), patch rows added, rotated to its position.
template <typename T, int E>
__device__ __forceinline__ void pa_read_key(const PagedAttentionArgs<T>& a, const PagedAttentionDims& d, int64_t s,
                                            int col, float (&k)[E], float (&v)[E]) {
  const int64_t W = d.kv_heads * d.head_dim;
  const T* kr;
  const T* vr;
  if (s < d.paged_tokens) {
    const int64_t row = static_cast<int64_t>(__ldg(a.slots + s));
    kr = a.k_pages + row * W + col;
    vr = a.v_pages + row * W + col;
  } else {
    kr = a.k_tail + (s - d.paged_tokens) * W + col;
    vr = a.v_tail + (s - d.paged_tokens) * W + col;
  }
  pa_load_row<T, E>(kr, k);
  pa_load_row<T, E>(vr, v);
  if (a.patch_of != nullptr && s < d.paged_tokens) {
    const int32_t seg = __ldg(a.patch_of + s);
    if (seg >= 0) {
      const PatchSegment& g = a.segments[seg];
      const int64_t i = s - g.first;
      pa_add_patch<T, E>(g, g.u_k, i * g.rank_k, g.vt_k, g.rank_k, W, col, k);
      pa_add_patch<T, E>(g, g.u_v, i * g.rank_v, g.vt_v, g.rank_v, W, col, v);
    }
  }
}

template <int E>
__device__ __forceinline__ void pa_rotate(const PagedAttentionDims& d, const int64_t* pos_row, const double (&inv)[E],
                                          const int (&frow)[E], int lane, float (&k)[E]) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  constexpr double kInvTwoPi = 0.15915494309189533576888376337251;
  if (d.interleaved) {
#pragma unroll
    for (int e = 0; e < E; e += 2) {
      double ang = static_cast<double>(pos_row[frow[e]]) * inv[e];
      ang -= kTwoPi * rint(ang * kInvTwoPi);
      float sn, cs;
      __sincosf(static_cast<float>(ang), &sn, &cs);
      const float x0 = k[e], x1 = k[e + 1];
      k[e] = x0 * cs - x1 * sn;
      k[e + 1] = x1 * cs + x0 * sn;
    }
  } else {
    const bool first_half = lane < 16;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float partner = __shfl_xor_sync(0xffffffffu, k[e], 16);
      double ang = static_cast<double>(pos_row[frow[e]]) * inv[e];
      ang -= kTwoPi * rint(ang * kInvTwoPi);
      float sn, cs;
      __sincosf(static_cast<float>(ang), &sn, &cs);
      k[e] = first_half ? k[e] * cs - partner * sn : k[e] * cs + partner * sn;
    }
  }
}

template <typename T, int E>
__global__ void __launch_bounds__(kPagedThreads)
    paged_attention_kernel(const PagedAttentionArgs<T> a, const PagedAttentionDims d, int64_t splits, float* ws) {
  constexpr int D = 32 * E;
  const int split = blockIdx.x, hk = blockIdx.y, r = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = static_cast<int>(d.heads / d.kv_heads);
  const int64_t S = d.paged_tokens + d.tail_tokens;
  const int64_t visible = S - d.queries + r + 1;
  const int64_t chunk = (S + splits - 1) / splits;
  const int64_t begin = split * chunk;
  const int64_t end = begin + chunk < visible ? begin + chunk : visible;

  __shared__ float q_s[kPagedMaxGroup][D];
  __shared__ float red_m[kPagedWarps][kPagedMaxGroup];
  __shared__ float red_l[kPagedWarps][kPagedMaxGroup];
  __shared__ float red_acc[kPagedWarps][kPagedMaxGroup][D];

  for (int i = threadIdx.x; i < group * D; i += kPagedThreads) {
    const int g = i / D, e = i % D;
    q_s[g][e] = pa_load(a.q + (static_cast<int64_t>(r) * d.heads + hk * group + g) * D + e) * d.scale;
  }
  __syncthreads();

  // This lane's dims, their RoPE frequencies and the position row each reads.
  const int col = hk * D + lane * E;
  double inv[E];
  int frow[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int dim = lane * E + e;
    const int f = d.interleaved ? dim / 2 : (dim < D / 2 ? dim : dim - D / 2);
    inv[e] = a.inv_freq[f];
    frow[e] = a.row_of_freq != nullptr ? a.row_of_freq[f] : 0;
  }
  float q[kPagedMaxGroup][E];
#pragma unroll
  for (int g = 0; g < kPagedMaxGroup; ++g) {
#pragma unroll
    for (int e = 0; e < E; ++e) q[g][e] = g < group ? q_s[g][lane * E + e] : 0.0f;
  }
  float m[kPagedMaxGroup], l[kPagedMaxGroup], acc[kPagedMaxGroup][E];
#pragma unroll
  for (int g = 0; g < kPagedMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }

  auto consume = [&](int64_t s, float(&k)[E], const float(&v)[E]) {
    pa_rotate<E>(d, a.positions + s * d.position_rows, inv, frow, lane, k);
#pragma unroll
    for (int g = 0; g < kPagedMaxGroup; ++g) {
      if (g >= group) break;
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) dot += k[e] * q[g][e];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      const float m_new = fmaxf(m[g], dot);
      const float corr = __expf(m[g] - m_new);
      const float p = __expf(dot - m_new);
      l[g] = l[g] * corr + p;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = acc[g][e] * corr + p * v[e];
      m[g] = m_new;
    }
  };

  // Two keys per iteration: both rows' loads are issued before either is consumed.
  int64_t s = begin + warp;
  for (; s + kPagedWarps < end; s += 2 * kPagedWarps) {
    float k0[E], v0[E], k1[E], v1[E];
    pa_read_key<T, E>(a, d, s, col, k0, v0);
    pa_read_key<T, E>(a, d, s + kPagedWarps, col, k1, v1);
    consume(s, k0, v0);
    consume(s + kPagedWarps, k1, v1);
  }
  if (s < end) {
    float k0[E], v0[E];
    pa_read_key<T, E>(a, d, s, col, k0, v0);
    consume(s, k0, v0);
  }

  if (lane == 0) {
    for (int g = 0; g < group; ++g) {
      red_m[warp][g] = m[g];
      red_l[warp][g] = l[g];
    }
  }
#pragma unroll
  for (int g = 0; g < kPagedMaxGroup; ++g) {
    if (g >= group) break;
#pragma unroll
    for (int e = 0; e < E; ++e) red_acc[warp][g][lane * E + e] = acc[g][e];
  }
  __syncthreads();

  const int64_t rh_base = static_cast<int64_t>(r) * d.heads + hk * group;
  float* ws_acc = ws;
  float* ws_ml = ws + d.queries * d.heads * splits * D;
  for (int i = threadIdx.x; i < group * D; i += kPagedThreads) {
    const int g = i / D, e = i % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kPagedWarps; ++w) M = fmaxf(M, red_m[w][g]);
    float L = 0.0f, A = 0.0f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kPagedWarps; ++w) {
        const float f = __expf(red_m[w][g] - M);
        L += red_l[w][g] * f;
        A += red_acc[w][g][e] * f;
      }
    }
    const int64_t slot = (rh_base + g) * splits + split;
    ws_acc[slot * D + e] = A;
    if (e == 0) {
      ws_ml[slot * 2] = M;
      ws_ml[slot * 2 + 1] = L;
    }
  }
}

constexpr int kTile = 16;  // keys per warp tile (tiled kernel)

template <typename T, int E>
__global__ void __launch_bounds__(kPagedThreads, 4)
    paged_attention_tiled(const PagedAttentionArgs<T> a, const PagedAttentionDims d, int64_t splits, float* ws) {
  constexpr int D = 32 * E;
  constexpr int HALF = D / 2;
  const int split = blockIdx.x, hk = blockIdx.y, r = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = static_cast<int>(d.heads / d.kv_heads);
  const int64_t S = d.paged_tokens + d.tail_tokens;
  const int64_t visible = S - d.queries + r + 1;
  const int64_t chunk = (S + splits - 1) / splits;
  const int64_t begin = split * chunk;
  const int64_t end = begin + chunk < visible ? begin + chunk : visible;

  // Per warp a key tile [kTile][D + 1] (the +1 keeps rows in different banks); reused for the
  // cross-warp merge at the end.
  constexpr int kTileFloats = kTile * (D + 1);
  constexpr int kMergeFloats = kPagedMaxGroup * D;
  constexpr int kPerWarp = kTileFloats > kMergeFloats ? kTileFloats : kMergeFloats;
  __shared__ float tiles[kPagedWarps][kPerWarp];
  __shared__ float q_s[kPagedMaxGroup][D];
  __shared__ float red_m[kPagedWarps][kPagedMaxGroup];
  __shared__ float red_l[kPagedWarps][kPagedMaxGroup];

  for (int i = threadIdx.x; i < kPagedMaxGroup * D; i += kPagedThreads) {
    const int g = i / D, e = i % D;
    q_s[g][e] =
        g < group ? pa_load(a.q + (static_cast<int64_t>(r) * d.heads + hk * group + g) * D + e) * d.scale : 0.0f;
  }
  __syncthreads();

  const int col = hk * D + lane * E;
  double inv[E];
  int frow[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int dim = lane * E + e;
    const int f = d.interleaved ? dim / 2 : (dim < HALF ? dim : dim - HALF);
    inv[e] = a.inv_freq[f];
    frow[e] = a.row_of_freq != nullptr ? a.row_of_freq[f] : 0;
  }
  float m[kPagedMaxGroup], l[kPagedMaxGroup], acc[kPagedMaxGroup][E];
#pragma unroll
  for (int g = 0; g < kPagedMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }
  float* ks = tiles[warp];
  const int my_token = lane & (kTile - 1);  // scoring: lane -> key of the tile
  const int my_half = lane >> 4;            //          and half of the head dims

  for (int64_t t0 = begin + static_cast<int64_t>(warp) * kTile; t0 < end;
       t0 += static_cast<int64_t>(kPagedWarps) * kTile) {
    // 1. Keys of the tile: read in place, patched, rotated, staged as float.
#pragma unroll 4
    for (int t = 0; t < kTile; ++t) {
      const int64_t s = t0 + t;
      float k[E], v_unused[E];
      if (s < end) {
        pa_read_key<T, E>(a, d, s, col, k, v_unused);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) k[e] = 0.0f;
      }
      pa_rotate<E>(d, a.positions + (s < end ? s : begin) * d.position_rows, inv, frow, lane, k);
#pragma unroll
      for (int e = 0; e < E; ++e) ks[t * (D + 1) + lane * E + e] = k[e];
    }
    __syncwarp();
    // 2. Scores: lane (key my_token, half my_half); the halves meet with one shuffle.
    float score[kPagedMaxGroup];
#pragma unroll
    for (int g = 0; g < kPagedMaxGroup; ++g) score[g] = 0.0f;
    const float* krow = ks + my_token * (D + 1) + my_half * HALF;
#pragma unroll 8
    for (int j = 0; j < HALF; ++j) {
      const int jj = (j + my_half * 16) & (HALF - 1);  // the two halves start on different banks
      const float kv = krow[jj];
#pragma unroll
      for (int g = 0; g < kPagedMaxGroup; ++g) {
        if (g < group) score[g] += kv * q_s[g][my_half * HALF + jj];
      }
    }
    const bool valid = t0 + my_token < end;
#pragma unroll
    for (int g = 0; g < kPagedMaxGroup; ++g) {
      score[g] += __shfl_xor_sync(0xffffffffu, score[g], 16);
      if (!valid) score[g] = -INFINITY;
    }
    // 3. Online softmax, once per tile.
    float p[kPagedMaxGroup];
#pragma unroll
    for (int g = 0; g < kPagedMaxGroup; ++g) {
      float tmax = score[g];
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
      const float m_new = fmaxf(m[g], tmax);
      p[g] = m_new == -INFINITY ? 0.0f : __expf(score[g] - m_new);
      float tsum = p[g];
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) tsum += __shfl_xor_sync(0xffffffffu, tsum, o);
      const float corr = m_new == -INFINITY ? 1.0f : __expf(m[g] - m_new);
      l[g] = l[g] * corr + tsum;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] *= corr;
      m[g] = m_new;
    }
    // 4. Values row by row, weighted by the probabilities the scoring lanes hold.
#pragma unroll 4
    for (int t = 0; t < kTile; ++t) {
      const int64_t s = t0 + t;
      if (s >= end) break;  // uniform across the warp
      float k_unused[E], v[E];
      pa_read_key<T, E>(a, d, s, col, k_unused, v);
#pragma unroll
      for (int g = 0; g < kPagedMaxGroup; ++g) {
        const float pg = __shfl_sync(0xffffffffu, p[g], t);
        if (g < group) {
#pragma unroll
          for (int e = 0; e < E; ++e) acc[g][e] += pg * v[e];
        }
      }
    }
    __syncwarp();
  }

  // Merge the warps (as the row-wise kernel), reusing the tiles for the accumulators.
  __syncthreads();
  if (lane == 0) {
    for (int g = 0; g < group; ++g) {
      red_m[warp][g] = m[g];
      red_l[warp][g] = l[g];
    }
  }
#pragma unroll
  for (int g = 0; g < kPagedMaxGroup; ++g) {
    if (g >= group) break;
#pragma unroll
    for (int e = 0; e < E; ++e) tiles[warp][g * D + lane * E + e] = acc[g][e];
  }
  __syncthreads();
  const int64_t rh_base = static_cast<int64_t>(r) * d.heads + hk * group;
  float* ws_acc = ws;
  float* ws_ml = ws + d.queries * d.heads * splits * D;
  for (int i = threadIdx.x; i < group * D; i += kPagedThreads) {
    const int g = i / D, e = i % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kPagedWarps; ++w) M = fmaxf(M, red_m[w][g]);
    float L = 0.0f, A = 0.0f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kPagedWarps; ++w) {
        const float f = __expf(red_m[w][g] - M);
        L += red_l[w][g] * f;
        A += tiles[w][g * D + e] * f;
      }
    }
    const int64_t slot = (rh_base + g) * splits + split;
    ws_acc[slot * D + e] = A;
    if (e == 0) {
      ws_ml[slot * 2] = M;
      ws_ml[slot * 2 + 1] = L;
    }
  }
}

// Merges the splits of one (query, head) per block: out = Σ A_i e^(m_i − M) / Σ L_i e^(m_i − M).
template <typename T>
__global__ void paged_attention_combine(const float* ws, int64_t splits, int64_t rows, int D, T* out) {
  const int64_t rh = blockIdx.x;
  const float* ws_acc = ws;
  const float* ws_ml = ws + rows * splits * D;
  float M = -INFINITY;
  for (int64_t i = 0; i < splits; ++i) M = fmaxf(M, ws_ml[(rh * splits + i) * 2]);
  for (int e = threadIdx.x; e < D; e += blockDim.x) {
    float L = 0.0f, A = 0.0f;
    for (int64_t i = 0; i < splits; ++i) {
      const float mi = ws_ml[(rh * splits + i) * 2];
      if (mi == -INFINITY) continue;
      const float f = __expf(mi - M);
      L += ws_ml[(rh * splits + i) * 2 + 1] * f;
      A += ws_acc[(rh * splits + i) * D + e] * f;
    }
    pa_store(out + rh * D + e, A / L);
  }
}

// The decode kernels (kTiled, kRowwise): one block per (split, kv head, query).
template <typename T>
void launch_simt(const PagedAttentionArgs<T>& a, const PagedAttentionDims& d, float* workspace, int64_t splits,
                 cudaStream_t stream, PagedKernel kernel) {
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(d.kv_heads), static_cast<unsigned>(d.queries));
  const bool tiled = kernel == PagedKernel::kTiled;
  if (d.head_dim == 128) {
    if (tiled)
      paged_attention_tiled<T, 4><<<grid, kPagedThreads, 0, stream>>>(a, d, splits, workspace);
    else
      paged_attention_kernel<T, 4><<<grid, kPagedThreads, 0, stream>>>(a, d, splits, workspace);
  } else {
    if (tiled)
      paged_attention_tiled<T, 2><<<grid, kPagedThreads, 0, stream>>>(a, d, splits, workspace);
    else
      paged_attention_kernel<T, 2><<<grid, kPagedThreads, 0, stream>>>(a, d, splits, workspace);
  }
}

}  // namespace detail

}  // namespace orbit::kernels::cuda

#include "kernels/cuda/paged_attention_mma.cuh"

namespace orbit::kernels::cuda {

template <typename T>
cudaError_t paged_attention(const PagedAttentionArgs<T>& a, const PagedAttentionDims& d, float* workspace,
                            int64_t splits, cudaStream_t stream, PagedKernel kernel) {
  if (!paged_attention_supports(d) || splits < 1 || workspace == nullptr || a.q == nullptr || a.out == nullptr ||
      a.positions == nullptr || a.inv_freq == nullptr || a.k_tail == nullptr || a.v_tail == nullptr ||
      (d.paged_tokens > 0 && (a.k_pages == nullptr || a.v_pages == nullptr || a.slots == nullptr)) ||
      (a.patch_of != nullptr && a.segments == nullptr) || d.kv_heads * d.queries > 65535 * 65535LL ||
      d.queries > 65535 || d.kv_heads > 65535 || splits > 2147483647LL) {
    return cudaErrorInvalidValue;
  }
  if (kernel == PagedKernel::kTensorCore) {
    if constexpr (std::is_same_v<T, float>) {
      return cudaErrorInvalidValue;
    } else {
      const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(d.kv_heads),
                      static_cast<unsigned>(paged_attention_row_blocks(d)));
      if (d.head_dim == 128)
        detail::paged_attention_mma<T, 128><<<grid, detail::kMmaThreads, 0, stream>>>(a, d, splits, workspace);
      else
        detail::paged_attention_mma<T, 64><<<grid, detail::kMmaThreads, 0, stream>>>(a, d, splits, workspace);
    }
  } else {
    detail::launch_simt(a, d, workspace, splits, stream, kernel);
  }
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  const int64_t rows = d.queries * d.heads;
  detail::paged_attention_combine<T><<<static_cast<unsigned>(rows), static_cast<unsigned>(d.head_dim), 0, stream>>>(
      workspace, splits, rows, static_cast<int>(d.head_dim), a.out);
  return cudaGetLastError();
}

#endif  // __CUDACC__

}  // namespace orbit::kernels::cuda
