// Rotary position embedding, CPU reference kernel: raw pointers, header-only, no torch (docs/ARCHITECTURE.md §9).
//
// The op layer (ops/rope_op.h) checks tensors, splits tokens across threads and calls this on each
// slice by offsetting the pointers; the CUDA kernel (kernels/cuda/rope.cuh) is tested against it.
//
// Memory layout (row-major, contiguous):
//
//   x, out     [tokens][heads][head_dim]
//   cos, sin   [tokens][rotary_dim / 2]      entry (t, i): the angle of token t at frequency i
//
//   one head, head_dim = 8, rotary_dim = 6 (half = 3); p = pass-through, copied unchanged:
//
//     interleaved   | a0 b0 | a1 b1 | a2 b2 | p p |      pair i = (2i, 2i + 1)
//     half-split    | a0 a1 a2 | b0 b1 b2   | p p |      pair i = (i,  i + half)
//
//   every pair turns by its angle θ:   (a, b) -> (a·cos θ − b·sin θ,  a·sin θ + b·cos θ)
//
// Precision: values are loaded as C (the table's type: float or double), rotated in C and stored
// as T. T may be any type with static_cast to and from C (float, double, c10::BFloat16).
//
// Aliasing: `out == x` (in place) is allowed; any other overlap is not. Each pair is read before
// either of its outputs is written.
#pragma once

#include <cstdint>

#include "kernels/rope_dims.h"

namespace orbit::kernels::cpu {

using kernels::RopeDims;

namespace detail {

template <typename T, typename C>
inline void rope_rotate_head_half_split(const T* x, T* out, const C* cos, const C* sin, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const C a = static_cast<C>(x[i]);
    const C b = static_cast<C>(x[i + half]);
    out[i] = static_cast<T>(a * cos[i] - b * sin[i]);
    out[i + half] = static_cast<T>(a * sin[i] + b * cos[i]);
  }
}

template <typename T, typename C>
inline void rope_rotate_head_interleaved(const T* x, T* out, const C* cos, const C* sin, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const C a = static_cast<C>(x[2 * i]);
    const C b = static_cast<C>(x[2 * i + 1]);
    out[2 * i] = static_cast<T>(a * cos[i] - b * sin[i]);
    out[2 * i + 1] = static_cast<T>(a * sin[i] + b * cos[i]);
  }
}

}  // namespace detail

// Rotates dims.tokens tokens of x into out. Does nothing when any size is zero.
template <typename T, typename C>
void rope_rotate(const T* x, T* out, const C* cos, const C* sin, const RopeDims& dims) {
  const int64_t half = dims.rotary_dim / 2;
  for (int64_t t = 0; t < dims.tokens; ++t) {
    const C* cos_t = cos + t * half;
    const C* sin_t = sin + t * half;
    for (int64_t h = 0; h < dims.heads; ++h) {
      const int64_t row = (t * dims.heads + h) * dims.head_dim;
      const T* x_row = x + row;
      T* out_row = out + row;
      if (dims.interleaved) {
        detail::rope_rotate_head_interleaved(x_row, out_row, cos_t, sin_t, half);
      } else {
        detail::rope_rotate_head_half_split(x_row, out_row, cos_t, sin_t, half);
      }
      if (out_row != x_row) {
        for (int64_t j = dims.rotary_dim; j < dims.head_dim; ++j) out_row[j] = x_row[j];
      }
    }
  }
}

}  // namespace orbit::kernels::cpu
