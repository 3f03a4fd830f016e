// Patch apply, CUDA kernel: raw device pointers, an explicit stream, cudaError_t back; never torch
// (docs/ARCHITECTURE.md §9). Tested against the CPU reference in kernels/cpu/patch_apply.h, whose comment states
// the operation and draws the layouts; the conventions are the same:
//
//   canonical   [n][D]                In  = float or __nv_bfloat16
//   u           [n][m], vt [m][D]     float32 (m = 0: not read, may be null); any m ≥ 0
//   cos, sin    [n][rotary_dim/2]     float32, rotate only
//   target      contiguous [n][D], or one layer's pages [num_pages][page_size][D] through a device
//               block table (row of token t: page block_table[s / page_size], slot s % page_size,
//               s = first_slot + t)                          Out = float or __nv_bfloat16
//   row_t = canonical[t] + Σ_j u[t, j]·vt[j]; keys rotate per head (interleaved or half-split pairs,
//   dims ≥ rotary_dim pass through); summed and rotated in float, rounded once to Out on store.
//
// Aliasing: exact in place on a contiguous target (base == canonical, In == Out) is allowed; any other
// overlap between the rows written and the inputs is not. Distinct tokens must map to distinct rows.
//
// Design: tiled, so that vt is read once per tile of kTileTokens tokens instead of once per token.
//
//   grid = (ceil(n / kTileTokens), column groups)     a column group is one head (rotate: pairs of a
//                                                     head stay in one block) or kColumnGroup columns
//   block (256 threads), in shared memory (float):
//     acc     [kTileTokens][G]        starts as canonical, accumulates the patch, then rotates to Out
//     u_tile  [kTileTokens][kRankChunk]
//     vt_tile [kRankChunk][G]         the rank is walked in chunks of kRankChunk (any m, no upper bound)
//
// Every global load and store walks consecutive columns with consecutive threads (coalesced); vt
// traffic is n/kTileTokens · m · D floats (mostly L2 hits) against n · D canonical values read.
// Shared memory is (2·kTileTokens·G + kTileTokens·kRankChunk)·4 bytes: 17 KiB at G = 128, 33 KiB at
// G = 256; above 48 KiB (head_dim > 376 with rotation) the launcher opts in to more, and returns the
// device's error when it has less.
//
// This header declares the launcher for every compiler (so C++ translation units can call it); the
// kernel and the launcher's body are visible to nvcc only, and patch_apply.cu instantiates them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace orbit::kernels::cuda {

struct PatchDims {
  int64_t tokens = 0;  // n
  int64_t width = 0;   // D
  int64_t rank = 0;    // m ≥ 0
  bool rotate = false;
  int64_t head_dim = 0;      // rotate only: divides width
  int64_t rotary_dim = 0;    // rotate only: even, in (0, head_dim]
  bool interleaved = false;  // rotate only; false: half-split pairs
};

template <typename In>
struct PatchSource {
  const In* canonical = nullptr;  // device [n][D]
  const float* u = nullptr;       // device [n][m]
  const float* vt = nullptr;      // device [m][D]
  const float* cos = nullptr;     // device [n][rotary_dim/2], rotate only
  const float* sin = nullptr;
};

template <typename Out>
struct PatchTarget {
  Out* base = nullptr;                   // device: contiguous [n][D] or pages [num_pages][page_size][D]
  const int32_t* block_table = nullptr;  // device; nullptr: contiguous target
  int64_t page_size = 0;                 // paged only, > 0
  int64_t first_slot = 0;                // paged only, ≥ 0
};

// Enqueues the patch apply on `stream` and returns the launch status: cudaSuccess without launching
// when n == 0; cudaErrorInvalidValue for inconsistent dims or a null pointer that is needed; otherwise
// the status of the launch (and of the shared-memory opt-in, when one is needed). Asynchronous: the
// pointers must stay valid until the stream reaches this work. Block table entries are not checked
// here (the op checks them against the pool).
template <typename In, typename Out>
cudaError_t patch_apply(const PatchSource<In>& src, const PatchTarget<Out>& target, const PatchDims& dims,
                        cudaStream_t stream);

#define ORBIT_PATCH_APPLY_DECLARE(In, Out)                                                                            \
  extern template cudaError_t patch_apply<In, Out>(const PatchSource<In>&, const PatchTarget<Out>&, const PatchDims&, \
                                                   cudaStream_t);
ORBIT_PATCH_APPLY_DECLARE(float, float)
ORBIT_PATCH_APPLY_DECLARE(float, __nv_bfloat16)
ORBIT_PATCH_APPLY_DECLARE(__nv_bfloat16, float)
ORBIT_PATCH_APPLY_DECLARE(__nv_bfloat16, __nv_bfloat16)
#undef ORBIT_PATCH_APPLY_DECLARE

#ifdef __CUDACC__

namespace detail {

__device__ __forceinline__ float patch_load(const float* p) { return *p; }
__device__ __forceinline__ float patch_load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void patch_store(float* p, float v) { *p = v; }
__device__ __forceinline__ void patch_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

constexpr int kPatchThreads = 256;
constexpr int kTileTokens = 16;
constexpr int kRankChunk = 16;
constexpr int kColumnGroup = 128;  // columns per block when not rotating
constexpr size_t kDefaultSharedBytes = 48 * 1024;

__device__ __forceinline__ int64_t patch_min(int64_t a, int64_t b) { return a < b ? a : b; }

inline size_t patch_shared_bytes(int64_t group) {
  return static_cast<size_t>(2 * kTileTokens * group + kTileTokens * kRankChunk) * sizeof(float);
}

template <typename Out>
__device__ __forceinline__ Out* patch_row(const PatchTarget<Out>& target, int64_t t, int64_t width) {
  if (target.block_table == nullptr) return target.base + t * width;
  const int64_t s = target.first_slot + t;
  const int64_t page = target.block_table[s / target.page_size];
  return target.base + (page * target.page_size + s % target.page_size) * width;
}

// patch_row for slots below 2^31 (the launcher checks): 32-bit division by the page size, several times
// cheaper than the 64-bit one on the GPU.
template <typename Out>
__device__ __forceinline__ Out* patch_row32(const PatchTarget<Out>& target, int64_t t, int64_t width) {
  if (target.block_table == nullptr) return target.base + t * width;
  const uint32_t s = static_cast<uint32_t>(target.first_slot + t), ps = static_cast<uint32_t>(target.page_size);
  const uint32_t index = s / ps;
  const int64_t page = target.block_table[index];
  return target.base + (page * target.page_size + (s - index * ps)) * width;
}

// One block per (token tile, column group); see the header comment for the shared-memory tiles.
// Intra-block indices are int (a tile holds kTileTokens · group elements); global ones are int64.
template <typename In, typename Out>
__global__ void __launch_bounds__(kPatchThreads)
    patch_apply_kernel(PatchSource<In> src, PatchTarget<Out> target, PatchDims dims, int group) {
  extern __shared__ float shared[];
  float* acc = shared;                                 // [kTileTokens][group]
  float* u_tile = acc + kTileTokens * group;           // [kTileTokens][kRankChunk]
  float* vt_tile = u_tile + kTileTokens * kRankChunk;  // [kRankChunk][group]

  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTileTokens;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * group;
  const int tile_tokens = static_cast<int>(patch_min(kTileTokens, dims.tokens - t0));
  const int width = static_cast<int>(patch_min(group, dims.width - c0));  // < group: last V group only
  const int elements = tile_tokens * group;

  // 1. acc = canonical (columns past `width` are zero and never stored).
  for (int e = threadIdx.x; e < elements; e += kPatchThreads) {
    const int tok = e / group;
    const int col = e - tok * group;
    acc[e] = col < width ? patch_load(src.canonical + (t0 + tok) * dims.width + c0 + col) : 0.0f;
  }

  // 2. acc += u_tile · vt_tile, chunk by chunk of the rank, in the reference's order of j.
  for (int64_t k0 = 0; k0 < dims.rank; k0 += kRankChunk) {
    const int chunk = static_cast<int>(patch_min(kRankChunk, dims.rank - k0));
    __syncthreads();  // the previous chunk's tiles have been consumed
    for (int e = threadIdx.x; e < kTileTokens * kRankChunk; e += kPatchThreads) {
      const int tok = e / kRankChunk;
      const int k = e - tok * kRankChunk;
      u_tile[e] = (tok < tile_tokens && k < chunk) ? src.u[(t0 + tok) * dims.rank + k0 + k] : 0.0f;
    }
    for (int e = threadIdx.x; e < kRankChunk * group; e += kPatchThreads) {
      const int k = e / group;
      const int col = e - k * group;
      vt_tile[e] = (k < chunk && col < width) ? src.vt[(k0 + k) * dims.width + c0 + col] : 0.0f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < elements; e += kPatchThreads) {
      const int tok = e / group;
      const int col = e - tok * group;
      const float* u_row = u_tile + tok * kRankChunk;
      float a = acc[e];
      for (int k = 0; k < chunk; ++k) a = fmaf(u_row[k], vt_tile[k * group + col], a);
      acc[e] = a;  // each element is owned by one thread across chunks: no race
    }
  }
  __syncthreads();

  // 3. Rotate (pairs of this head) and store. Work items of a token: its rotary pairs, then the
  //    columns that pass through (all of them when not rotating).
  const int half = dims.rotate ? static_cast<int>(dims.rotary_dim / 2) : 0;
  const int rotary = 2 * half;
  const int items = half + (width - rotary);
  for (int e = threadIdx.x; e < tile_tokens * items; e += kPatchThreads) {
    const int tok = e / items;
    const int item = e - tok * items;
    const int64_t t = t0 + tok;
    Out* row = patch_row(target, t, dims.width) + c0;
    const float* a_row = acc + tok * group;
    if (item < half) {
      const int ia = dims.interleaved ? 2 * item : item;
      const int ib = dims.interleaved ? 2 * item + 1 : item + half;
      const float a = a_row[ia];
      const float b = a_row[ib];
      const float c = src.cos[t * half + item];
      const float s = src.sin[t * half + item];
      patch_store(row + ia, a * c - b * s);
      patch_store(row + ib, a * s + b * c);
    } else {
      const int col = rotary + (item - half);
      patch_store(row + col, a_row[col]);
    }
  }
}

// Row kernel, the fast path for the common shapes (rank ≤ kRowMaxRank; rotating: rotary_dim = head_dim
// ∈ {64, 128}; not rotating: width a multiple of 64; every pointer aligned to its vector width; fewer
// than 65536·128 tokens): grid (column groups, token ranges of 128); one warp per token of a column
// group of 32·E columns, lane holding E consecutive columns. Each row is one
// vector load and one vector store per lane (8 bytes for bfloat16 at E = 4), its cos/sin one vector load
// each, its u row (broadcast) up front; several tokens are loaded before any is stored, so their loads
// overlap (4 without a patch, 2 with one, whose u rows take the registers). vt's columns of the group
// sit in shared memory. MaxRank = 0 instantiates pure relocation (no patch registers, more warps
// resident). The
// half-split partner of a column is in lane ^ 16 (one shuffle), an interleaved one in the same lane.
// Same sums in the same order as the tiled kernel (canonical, then fmaf over j ascending, then the
// rotation).
constexpr int kRowMaxRank = 16;
constexpr int kRowTokensPerBlock = 128;

template <int Bytes>
struct RowVec;
template <>
struct RowVec<4> {
  using type = unsigned int;
};
template <>
struct RowVec<8> {
  using type = uint2;
};
template <>
struct RowVec<16> {
  using type = uint4;
};

// E consecutive elements at p (aligned to E·sizeof(T)) as floats, in one load.
template <typename T, int E>
__device__ __forceinline__ void row_load(const T* p, float (&x)[E]) {
  using V = typename RowVec<E * sizeof(T)>::type;
  const V raw = *reinterpret_cast<const V*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < E; ++i) x[i] = patch_load(e + i);
}

template <typename T, int E>
__device__ __forceinline__ void row_store(T* p, const float (&y)[E]) {
  using V = typename RowVec<E * sizeof(T)>::type;
  V raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < E; ++i) patch_store(e + i, y[i]);
  *reinterpret_cast<V*>(p) = raw;
}

template <typename In, typename Out, int E, int MaxRank>
__global__ void __launch_bounds__(128) patch_apply_rows(PatchSource<In> src, PatchTarget<Out> target, PatchDims dims) {
  constexpr int G = 32 * E;                          // columns of the group
  constexpr int CE = E / 2;                          // interleaved: cos/sin entries per lane
  constexpr int kRowInFlight = MaxRank > 0 ? 2 : 4;  // tokens loaded before any is stored
  constexpr int UR = MaxRank > 0 ? MaxRank : 1;
  __shared__ float vt_s[MaxRank > 0 ? MaxRank : 1][G];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * G;
  const int64_t col = c0 + lane * E;
  const int rank = MaxRank > 0 ? static_cast<int>(dims.rank) : 0;
  if (MaxRank > 0) {
    for (int i = threadIdx.x; i < rank * G; i += blockDim.x) {
      const int j = i / G, c = i - j * G;
      vt_s[j][c] = src.vt[j * dims.width + c0 + c];
    }
    __syncthreads();
  }
  const int half = static_cast<int>(dims.rotary_dim / 2);
  const bool first = lane < 16;
  // This lane's first cos/sin entry within a token's table row.
  const int f0 = dims.interleaved ? lane * CE : (first ? lane : lane - 16) * E;
  const int64_t block_begin = static_cast<int64_t>(blockIdx.y) * kRowTokensPerBlock;
  const int64_t t_end = patch_min(dims.tokens, block_begin + kRowTokensPerBlock);
  for (int64_t t0 = block_begin + warp; t0 < t_end; t0 += 4 * kRowInFlight) {
    float x[kRowInFlight][E], c[kRowInFlight][E], sn[kRowInFlight][E], u[kRowInFlight][UR];
#pragma unroll
    for (int i = 0; i < kRowInFlight; ++i) {
      const int64_t t = t0 + 4 * i;
      if (t < t_end) {
        row_load<In, E>(src.canonical + t * dims.width + col, x[i]);
        if (MaxRank > 0) {
#pragma unroll
          for (int j = 0; j < UR; ++j) u[i][j] = j < rank ? __ldg(src.u + t * rank + j) : 0.0f;
        }
        if (dims.rotate) {
          if (dims.interleaved) {
            float cc[CE], ss[CE];
            row_load<float, CE>(src.cos + t * half + f0, cc);
            row_load<float, CE>(src.sin + t * half + f0, ss);
#pragma unroll
            for (int e = 0; e < E; ++e) {
              c[i][e] = cc[e / 2];
              sn[i][e] = ss[e / 2];
            }
          } else {
            row_load<float, E>(src.cos + t * half + f0, c[i]);
            row_load<float, E>(src.sin + t * half + f0, sn[i]);
          }
        }
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) x[i][e] = c[i][e] = sn[i][e] = 0.0f;
#pragma unroll
        for (int j = 0; j < UR; ++j) u[i][j] = 0.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < kRowInFlight; ++i) {
      const int64_t t = t0 + 4 * i;
      if (MaxRank > 0 && t < t_end) {
#pragma unroll
        for (int j = 0; j < UR; ++j) {
          if (j < rank) {
#pragma unroll
            for (int e = 0; e < E; ++e) x[i][e] = fmaf(u[i][j], vt_s[j][lane * E + e], x[i][e]);
          }
        }
      }
      float y[E];
      if (!dims.rotate) {
#pragma unroll
        for (int e = 0; e < E; ++e) y[e] = x[i][e];
      } else if (dims.interleaved) {
#pragma unroll
        for (int e = 0; e < E; e += 2) {
          y[e] = x[i][e] * c[i][e] - x[i][e + 1] * sn[i][e];
          y[e + 1] = x[i][e] * sn[i][e] + x[i][e + 1] * c[i][e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const float partner = __shfl_xor_sync(0xffffffffu, x[i][e], 16);  // every lane, live or not
          y[e] = first ? x[i][e] * c[i][e] - partner * sn[i][e] : partner * sn[i][e] + x[i][e] * c[i][e];
        }
      }
      if (t < t_end) row_store<Out, E>(patch_row32(target, t, dims.width) + col, y);
    }
  }
}

// Whether p is aligned to `bytes` (the row kernel's vector loads and stores need it).
inline bool patch_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace detail

template <typename In, typename Out>
cudaError_t patch_apply(const PatchSource<In>& src, const PatchTarget<Out>& target, const PatchDims& dims,
                        cudaStream_t stream) {
  if (dims.tokens < 0 || dims.width <= 0 || dims.rank < 0) return cudaErrorInvalidValue;
  if (dims.rotate && (dims.head_dim <= 0 || dims.width % dims.head_dim != 0 || dims.rotary_dim <= 0 ||
                      dims.rotary_dim % 2 != 0 || dims.rotary_dim > dims.head_dim)) {
    return cudaErrorInvalidValue;
  }
  if (target.block_table != nullptr && (target.page_size <= 0 || target.first_slot < 0)) {
    return cudaErrorInvalidValue;
  }
  if (dims.tokens == 0) return cudaSuccess;
  if (src.canonical == nullptr || target.base == nullptr) return cudaErrorInvalidValue;
  if (dims.rank > 0 && (src.u == nullptr || src.vt == nullptr)) return cudaErrorInvalidValue;
  if (dims.rotate && (src.cos == nullptr || src.sin == nullptr)) return cudaErrorInvalidValue;

  // The row kernel where it applies (see its comment), else the tiled one.
  const int64_t row_group =
      dims.rotate
          ? (dims.rotary_dim == dims.head_dim && (dims.head_dim == 64 || dims.head_dim == 128) ? dims.head_dim : 0)
          : (dims.width % 128 == 0  ? 128
             : dims.width % 64 == 0 ? 64
                                    : 0);
  if (row_group > 0 && dims.rank <= detail::kRowMaxRank && dims.width % row_group == 0) {
    const size_t e = static_cast<size_t>(row_group / 32);
    // Row starts are multiples of E elements, table rows of half = head_dim / 2 floats.
    bool aligned =
        detail::patch_aligned(src.canonical, e * sizeof(In)) && detail::patch_aligned(target.base, e * sizeof(Out));
    if (dims.rotate) {
      const size_t table_bytes = (dims.interleaved ? e / 2 : e) * sizeof(float);
      aligned = aligned && detail::patch_aligned(src.cos, table_bytes) && detail::patch_aligned(src.sin, table_bytes);
    }
    const int64_t blocks = (dims.tokens + detail::kRowTokensPerBlock - 1) / detail::kRowTokensPerBlock;
    const int64_t groups = dims.width / row_group;
    const bool slots32 = target.block_table == nullptr || target.first_slot + dims.tokens < (int64_t{1} << 31);
    // Column groups are the grid's fastest dimension: the blocks of one token range run together, so
    // its cos/sin rows (shared by every head) come from DRAM once and from L2 for the other heads.
    if (aligned && slots32 && blocks <= 65535 && groups <= 0x7fffffff) {
      const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(blocks));
      const bool patched = dims.rank > 0;
      if (row_group == 128) {
        if (patched)
          detail::patch_apply_rows<In, Out, 4, detail::kRowMaxRank><<<grid, 128, 0, stream>>>(src, target, dims);
        else
          detail::patch_apply_rows<In, Out, 4, 0><<<grid, 128, 0, stream>>>(src, target, dims);
      } else {
        if (patched)
          detail::patch_apply_rows<In, Out, 2, detail::kRowMaxRank><<<grid, 128, 0, stream>>>(src, target, dims);
        else
          detail::patch_apply_rows<In, Out, 2, 0><<<grid, 128, 0, stream>>>(src, target, dims);
      }
      return cudaGetLastError();
    }
  }
  const int64_t group =
      dims.rotate ? dims.head_dim : (dims.width < detail::kColumnGroup ? dims.width : detail::kColumnGroup);
  const int64_t groups = (dims.width + group - 1) / group;
  const int64_t tiles = (dims.tokens + detail::kTileTokens - 1) / detail::kTileTokens;
  if (groups > 65535 || tiles > 0x7fffffff || group > (1 << 20)) return cudaErrorInvalidValue;

  const size_t shared_bytes = detail::patch_shared_bytes(group);
  if (shared_bytes > detail::kDefaultSharedBytes) {
    const cudaError_t status =
        cudaFuncSetAttribute(detail::patch_apply_kernel<In, Out>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared_bytes));
    if (status != cudaSuccess) return status;
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(groups));
  detail::patch_apply_kernel<In, Out>
      <<<grid, detail::kPatchThreads, shared_bytes, stream>>>(src, target, dims, static_cast<int>(group));
  return cudaGetLastError();
}

#endif  // __CUDACC__

}  // namespace orbit::kernels::cuda
