// Patch-apply op: the serve step of the reuse operator (docs/ARCHITECTURE.md §7) for one
// layer and one stored tensor, fused with relocation and the write into the KV pool:
//
//   row_t = canonical[t] + u[t] · vt          (rank-m conditioning patch; m may be 0)
//   row_t = RoPE(p_t, row_t)                  (rotate = true: keys, MLA k_pe; values are not rotated)
//   destination row of token t = row_t        (a contiguous tensor, or pool pages via a block table)
//
// Checks tensors (errors name the argument) and dispatches by device and dtype to the raw kernels
// (docs/ARCHITECTURE.md §9): kernels/cpu/patch_apply.h on CPU (tokens split across ATen's intra-op threads) and
// kernels/cuda/patch_apply.cuh on CUDA (torch's current stream for the device; available when orbit is
// built with ORBIT_WITH_CUDA and the libtorch in use has CUDA, otherwise a clear error).
//
// dtypes: canonical and destination each float32 or bfloat16 (CPU also float64, then both float64).
// Sums and rotations run in float32 (float64 for a float64 destination) and round once on store.
// u and vt may have any floating dtype: they are converted to the compute dtype (they are small:
// (n + D)·m values against the n·D of the canonical).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "ops/rope_op.h"
#include "orbit/runtime/config.h"
#include "orbit/runtime/kv_pool.h"

namespace orbit::runtime::ops {

// One layer's canonical content of one stored tensor, its patch, and how to place it.
struct PatchApplyInputs {
  at::Tensor canonical;    // [n, D] or [n, H, head_dim]: KV(B|∅), pre-RoPE; need not be contiguous
  at::Tensor u;            // [n, m], columns scaled by the singular values; undefined: no patch
  at::Tensor vt;           // [m, D]; undefined exactly when u is
  bool rotate = false;     // keys: rotate each head after patching
  RopeConfig rope;         // rotate only: layout, head_dim (divides D), rotary_dim, theta, scaling
  at::Tensor positions;    // rotate only: [n] absolute target positions, or [3, n] (t, h, w) for M-RoPE
                           // (integer or floating, any device; see rope_angles)
  int64_t window_len = 0;  // rotate only: dynamic-NTK window length (see rope_inv_freq)
  RopeTables tables;       // rotate only, optional: precomputed cos/sin [n, rope.rotary_dim/2] of dtype
                           // rope_table_dtype(destination dtype) on the destination's device (see
                           // patch_rope_tables); when defined, positions and window_len are not used
};

// cos/sin for `positions` under `config`, ready for PatchApplyInputs::tables: computing them once
// serves every layer of a chunk (the angles do not depend on the layer).
RopeTables patch_rope_tables(const RopeConfig& config, const at::Tensor& positions, at::ScalarType destination_dtype,
                             at::Device device, int64_t window_len = 0);

// Into `out`: [n, D] or [n, H, head_dim] (D values per token), contiguous, on canonical's device.
// `out` may be the canonical tensor itself (same dtype, contiguous: in place); no other overlap with
// the inputs is allowed.
void patch_apply_out(const at::Tensor& out, const PatchApplyInputs& inputs);

// Returns a new contiguous tensor shaped and typed like inputs.canonical.
at::Tensor patch_apply(const PatchApplyInputs& inputs);

// Where in a pool the chunk goes: token t at logical slot s = first_slot + t of the block table, i.e.
// page block_table[s / page_size], slot s % page_size, of `layer` in storage(kind). Only the pages
// holding slots [first_slot, first_slot + n) are written; each must be live with ref_count 1 (a page
// shared with another holder is never written: copy it on write first) and appear once.
struct PageTarget {
  int64_t kind = 0;  // 0 = K, 1 = V for GQA/MHA pools
  int64_t layer = 0;
  std::vector<PageId> block_table;  // pages in logical order
  int64_t first_slot = 0;           // ≥ 0
};

// Into the pool's pages: the pool's storage(kind) width must be D, its dtype and device are the
// destination's. Everything else in the pool (other layers, kinds, pages, slots) is left untouched.
void patch_apply_to_pages(KVPool& pool, const PageTarget& target, const PatchApplyInputs& inputs);

}  // namespace orbit::runtime::ops
