// The sizes of one rotary-embedding call, shared by the CPU reference (kernels/cpu/rope.h) and the
// CUDA kernel (kernels/cuda/rope.cuh), so the op layer passes one value to either. Plain C++: no
// torch, no CUDA headers (docs/ARCHITECTURE.md §9).
#pragma once

#include <cstdint>

namespace orbit::kernels {

struct RopeDims {
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;    // even, in (0, head_dim]
  bool interleaved = false;  // false: half-split pairs
};

}  // namespace orbit::kernels
