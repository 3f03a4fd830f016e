// Truncated SVD op: the device side of the reuse operator's factorisation (reuse.h factorize()). Checks
// the tensor and runs kernels/cuda/svd.cuh (cuSOLVER gesvdj, float32) on torch's current stream for the
// matrix's device. Available when orbit is built with ORBIT_WITH_CUDA and the libtorch in use has CUDA;
// otherwise every call reports "unavailable" (the caller falls back to LAPACK on CPU).
//
//   a    [n, D] CUDA, any floating dtype (converted to float32), need not be contiguous; not modified
//   u    [n, m] float32 on a's device, columns scaled by the singular values (descending)
//   vt   [m, D] float32 on a's device, orthonormal rows
//
// Singular vectors are unique only up to sign; u · vt is what callers can rely on. Accuracy is float32's
// (‖A − U·Vᵀ‖ within a few·max(n, D)·2⁻²⁴·‖A‖ of the best rank-m error).
//
// Threading: one solver (cuSOLVER handle and a workspace that grows to the largest problem) per thread
// and device, created on first use and kept for the thread's lifetime.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace orbit::runtime::ops {

struct SvdFactorsResult {
  bool ok = false;  // false: u and vt are undefined and `why` says why (no CUDA SVD in this build,
                    // a CUDA or cuSOLVER error, or gesvdj did not converge)
  std::string why;
  at::Tensor u;    // [n, m]
  at::Tensor vt;   // [m, D]
  int sweeps = 0;  // gesvdj sweeps run
};

// True when this build can run truncated_svd_cuda (ORBIT_WITH_CUDA and a libtorch with CUDA).
bool have_cuda_svd();

// Rank-m truncated SVD of a CUDA matrix. Throws orbit::Error for a broken contract (a not on CUDA, not
// 2-D, rank outside [1, min(n, D)], n·D beyond cuSOLVER's 32-bit sizes); solver failures are a value.
SvdFactorsResult truncated_svd_cuda(const at::Tensor& a, int64_t rank);

}  // namespace orbit::runtime::ops
