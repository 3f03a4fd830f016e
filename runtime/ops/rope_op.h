// RoPE op: checks tensors and dispatches by device and dtype to the raw kernels (docs/ARCHITECTURE.md §9).
//
//   CPU    float32, float64 and bfloat16 x (bf16 is rotated in float32 and rounded once on store);
//          tokens are split across ATen's intra-op threads.
//   CUDA   float32 and bfloat16 x, on torch's current stream for x's device; available when orbit is
//          built with ORBIT_WITH_CUDA and the libtorch in use has CUDA, otherwise a clear error.
//
// The angle side (which angle each pair turns by) lives in orbit/runtime/rope.h; this layer only
// turns angles into cos/sin tables and rotates. Callers inside the runtime use rope.h.
#pragma once

#include <ATen/core/Tensor.h>

#include "orbit/runtime/config.h"

namespace orbit::runtime::ops {

// cos and sin of per-token angles, [T, rotary_dim/2] each, contiguous, on one device.
struct RopeTables {
  at::Tensor cos;
  at::Tensor sin;
};

// The table dtype that rotates x of dtype `x_dtype`: float64 for float64 x, float32 otherwise.
at::ScalarType rope_table_dtype(at::ScalarType x_dtype);

// angles: float64 [T, rotary_dim/2] on any device. cos and sin are evaluated in float64 (so large
// positions keep their accuracy) and only then rounded to `dtype`, on `device`.
RopeTables rope_tables(const at::Tensor& angles, at::ScalarType dtype, at::Device device);

// Rotates x [T, H, head_dim] (contiguous) by the tables (dtype rope_table_dtype(x.dtype), on x's
// device); rotary_dim = 2 · tables.cos.size(1). Returns a new tensor shaped and typed like x.
at::Tensor rope_rotate(const at::Tensor& x, const RopeTables& tables, RopeLayout layout);

// Same into `out` (contiguous, shaped and typed like x, on x's device). `out` may be x itself
// (in place); partial overlap is an error.
void rope_rotate_out(const at::Tensor& out, const at::Tensor& x, const RopeTables& tables, RopeLayout layout);

}  // namespace orbit::runtime::ops
