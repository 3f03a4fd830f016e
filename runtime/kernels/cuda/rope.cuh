// Rotary position embedding, CUDA kernel: raw device pointers, an explicit stream, cudaError_t back;
// never torch (docs/ARCHITECTURE.md §9). Tested against the CPU reference in kernels/cpu/rope.h, whose comment
// draws the layouts; the convention is the same:
//
//   x, out     [tokens][heads][head_dim]            T = float or __nv_bfloat16, contiguous
//   cos, sin   [tokens][rotary_dim / 2]             float32, contiguous
//   interleaved pairs (2i, 2i + 1); half-split pairs (i, i + rotary_dim/2); dims >= rotary_dim copied
//   (a, b) -> (a·cos − b·sin, a·sin + b·cos), computed in float, rounded once to T on store
//
// `out == x` (in place) is allowed; any other overlap is not.
//
// This header declares the launcher for every compiler (so C++ translation units can call it); the
// kernel and the launcher's body are visible to nvcc only, and rope.cu instantiates them for float
// and __nv_bfloat16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/rope_dims.h"

namespace orbit::kernels::cuda {

using kernels::RopeDims;

// Enqueues the rotation on `stream` and returns the launch status (cudaSuccess, without launching,
// when there is nothing to do; cudaErrorInvalidValue for inconsistent dims). Asynchronous: the
// pointers must stay valid until the stream reaches this work.
template <typename T>
cudaError_t rope_rotate(const T* x, T* out, const float* cos, const float* sin, const RopeDims& dims,
                        cudaStream_t stream);

extern template cudaError_t rope_rotate<float>(const float*, float*, const float*, const float*, const RopeDims&,
                                               cudaStream_t);
extern template cudaError_t rope_rotate<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, const float*, const float*,
                                                       const RopeDims&, cudaStream_t);

#ifdef __CUDACC__

namespace detail {

__device__ __forceinline__ float rope_load(const float* p) { return *p; }
__device__ __forceinline__ float rope_load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void rope_store(float* p, float v) { *p = v; }
__device__ __forceinline__ void rope_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

constexpr int kRopeLanes = 32;        // threads along one (token, head) row
constexpr int kRopeRowsPerBlock = 4;  // rows per block (blockDim = 32 x 4)
constexpr int64_t kRopeMaxBlocks = 1 << 20;

// One warp-wide row of threads per (token, head). Work items of a row: the rotary_dim/2 pairs, then
// the head_dim − rotary_dim pass-through dims (skipped in place). Rows are grid-strided.
template <typename T>
__global__ void rope_rotate_kernel(const T* x, T* out, const float* cos, const float* sin, RopeDims dims) {
  const int64_t half = dims.rotary_dim / 2;
  const int64_t pass = (x == out) ? 0 : dims.head_dim - dims.rotary_dim;
  const int64_t rows = dims.tokens * dims.heads;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRopeRowsPerBlock + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kRopeRowsPerBlock) {
    const int64_t token = row / dims.heads;
    const T* x_row = x + row * dims.head_dim;
    T* out_row = out + row * dims.head_dim;
    const float* cos_t = cos + token * half;
    const float* sin_t = sin + token * half;
    for (int64_t item = threadIdx.x; item < half + pass; item += kRopeLanes) {
      if (item < half) {
        const int64_t ia = dims.interleaved ? 2 * item : item;
        const int64_t ib = dims.interleaved ? 2 * item + 1 : item + half;
        const float a = rope_load(x_row + ia);
        const float b = rope_load(x_row + ib);
        const float c = cos_t[item];
        const float s = sin_t[item];
        rope_store(out_row + ia, a * c - b * s);
        rope_store(out_row + ib, a * s + b * c);
      } else {
        const int64_t j = dims.rotary_dim + (item - half);
        out_row[j] = x_row[j];
      }
    }
  }
}

}  // namespace detail

template <typename T>
cudaError_t rope_rotate(const T* x, T* out, const float* cos, const float* sin, const RopeDims& dims,
                        cudaStream_t stream) {
  if (dims.tokens < 0 || dims.heads < 0 || dims.rotary_dim <= 0 || dims.rotary_dim % 2 != 0 ||
      dims.rotary_dim > dims.head_dim) {
    return cudaErrorInvalidValue;
  }
  const int64_t rows = dims.tokens * dims.heads;
  if (rows == 0) return cudaSuccess;
  int64_t blocks = (rows + detail::kRopeRowsPerBlock - 1) / detail::kRopeRowsPerBlock;
  if (blocks > detail::kRopeMaxBlocks) blocks = detail::kRopeMaxBlocks;
  const dim3 block(detail::kRopeLanes, detail::kRopeRowsPerBlock);
  detail::rope_rotate_kernel<T><<<static_cast<unsigned>(blocks), block, 0, stream>>>(x, out, cos, sin, dims);
  return cudaGetLastError();
}

#endif  // __CUDACC__

}  // namespace orbit::kernels::cuda
