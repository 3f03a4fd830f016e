// Patch apply, CPU reference kernel: raw pointers, header-only, no torch (docs/ARCHITECTURE.md §9).
//
// The serve step of the reuse operator (docs/ARCHITECTURE.md §7) for one layer and one
// stored tensor (K or V, or MLA's c_KV / k_pe): for every token t of a chunk of n tokens
//
//   row_t = canonical[t, :] + Σ_{j<m} u[t, j] · vt[j, :]          (the rank-m conditioning patch)
//   row_t = rotate(row_t, cos[t, :], sin[t, :])                     (keys only: relocation)
//   target.row(t) = row_t                                           (rounded once to the target type)
//
// The op layer (ops/patch_apply_op.h) checks tensors, splits tokens across threads and calls this on
// each slice; the CUDA kernel (kernels/cuda/patch_apply.cuh) is tested against it.
//
// Memory layout (row-major, contiguous; D = width = heads · head_dim):
//
//   canonical   [n][D]                  element type In
//   u           [n][m]                  element type F; columns already scaled by the singular values
//   vt          [m][D]                  element type F (m = 0: u and vt are not read and may be null)
//   cos, sin    [n][rotary_dim / 2]     element type C; rotate only (entry (t, i): angle of pair i at p_t)
//
//   target, contiguous (block_table == nullptr):     base[t][D]
//   target, paged (the pool's storage of one layer and kind, see orbit/runtime/kv_pool.h):
//
//     base : [num_pages][page_size][D]        s = first_slot + t   (logical slot of token t)
//                                             row(t) = base[block_table[s / page_size]][s % page_size]
//
//     block_table  | 7 | 2 | 5 |    page_size = 4, first_slot = 0, n = 10:
//     tokens         0-3 4-7 8-9    -> page 7 slots 0-3, page 2 slots 0-3, page 5 slots 0-1 (2-3 untouched)
//
// Rotation: per head of head_dim values, the first rotary_dim rotate and the rest pass through, with
// the pairing of kernels/cpu/rope.h (interleaved (2i, 2i+1) or half-split (i, i + rotary_dim/2)), the
// one CPU source of truth for pairs; (a, b) -> (a·cos − b·sin, a·sin + b·cos).
//
// Precision: canonical, u and vt are loaded as C (float or double), the patch is summed in C in the
// order canonical + u[t,0]·vt[0,:] + u[t,1]·vt[1,:] + ..., rotated in C, and rounded once to Out on
// store. Types need static_cast to and from C (float, double, c10::BFloat16).
//
// Aliasing: the rows written must not overlap canonical, u, vt, cos or sin, except exact in place on
// a contiguous target (base == canonical with In == Out): each row is read whole before it is written.
// Distinct tokens must map to distinct rows (no page twice in the block table's used range).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/rope.h"

namespace orbit::kernels::cpu {

struct PatchDims {
  int64_t tokens = 0;        // n
  int64_t width = 0;         // D, values per token row
  int64_t rank = 0;          // m ≥ 0
  bool rotate = false;       // keys: rotate after patching; values: store as patched
  int64_t head_dim = 0;      // rotate only: divides width
  int64_t rotary_dim = 0;    // rotate only: even, in (0, head_dim]
  bool interleaved = false;  // rotate only; false: half-split pairs
};

template <typename In, typename F, typename C>
struct PatchSource {
  const In* canonical = nullptr;  // [n][D]
  const F* u = nullptr;           // [n][m]
  const F* vt = nullptr;          // [m][D]
  const C* cos = nullptr;         // [n][rotary_dim/2], rotate only
  const C* sin = nullptr;
};

template <typename Out>
struct PatchTarget {
  Out* base = nullptr;                   // contiguous [n][D], or one layer's pages [num_pages][page_size][D]
  const int32_t* block_table = nullptr;  // nullptr: contiguous; else page ids in logical order
  int64_t page_size = 0;                 // paged only: tokens per page, > 0
  int64_t first_slot = 0;                // paged only: logical slot of token 0, ≥ 0

  // The row token t is written to (width values).
  Out* row(int64_t t, int64_t width) const {
    if (block_table == nullptr) return base + t * width;
    const int64_t s = first_slot + t;
    const int64_t page = block_table[s / page_size];
    return base + (page * page_size + s % page_size) * width;
  }
};

// Applies the patch (and rotation) to tokens [begin, end) of the chunk, 0 ≤ begin ≤ end ≤ dims.tokens;
// end < 0 means dims.tokens. Does nothing for an empty range. Inputs are assumed valid (the op checks).
template <typename In, typename F, typename C, typename Out>
void patch_apply(const PatchSource<In, F, C>& src, const PatchTarget<Out>& target, const PatchDims& dims,
                 int64_t begin = 0, int64_t end = -1) {
  if (end < 0) end = dims.tokens;
  if (begin >= end || dims.width <= 0) return;
  const int64_t width = dims.width;
  const int64_t half = dims.rotate ? dims.rotary_dim / 2 : 0;
  std::vector<C> acc(static_cast<size_t>(width));
  for (int64_t t = begin; t < end; ++t) {
    const In* canonical_row = src.canonical + t * width;
    for (int64_t c = 0; c < width; ++c) acc[static_cast<size_t>(c)] = static_cast<C>(canonical_row[c]);
    for (int64_t j = 0; j < dims.rank; ++j) {
      const C coefficient = static_cast<C>(src.u[t * dims.rank + j]);
      const F* direction = src.vt + j * width;
      for (int64_t c = 0; c < width; ++c) acc[static_cast<size_t>(c)] += coefficient * static_cast<C>(direction[c]);
    }
    if (dims.rotate) {
      const C* cos_t = src.cos + t * half;
      const C* sin_t = src.sin + t * half;
      for (int64_t h = 0; h * dims.head_dim < width; ++h) {
        C* head = acc.data() + h * dims.head_dim;
        if (dims.interleaved) {
          detail::rope_rotate_head_interleaved<C, C>(head, head, cos_t, sin_t, half);
        } else {
          detail::rope_rotate_head_half_split<C, C>(head, head, cos_t, sin_t, half);
        }
      }
    }
    Out* out = target.row(t, width);
    for (int64_t c = 0; c < width; ++c) out[c] = static_cast<Out>(acc[static_cast<size_t>(c)]);
  }
}

}  // namespace orbit::kernels::cpu
