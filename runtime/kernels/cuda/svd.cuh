// Truncated SVD on the GPU through cuSOLVER (Jacobi SVD, cusolverDnSgesvdj): the GPU path for forming
// patches (docs/ARCHITECTURE.md §7; on CPU the reuse operator uses LAPACK through libtorch). Raw device pointers,
// an explicit stream, a status value back; never torch (docs/ARCHITECTURE.md §9).
//
// Problem: A is an n × D float32 matrix (a deficit Δ: one row per token), row-major and contiguous.
// Result: its top-m factors in the form orbit::runtime::LowRank stores (orbit/runtime/reuse.h):
//
//   A ≈ u · vt        u  [n][m]  row-major, column j = σ_j · (left singular vector j)
//                     vt [m][D]  row-major, row j    = right singular vector j (orthonormal rows)
//                     s  [m]     σ_0 ≥ σ_1 ≥ ... ≥ σ_{m-1} ≥ 0 (optional output)
//
// Column-major care: cuSOLVER is column-major, and the row-major buffer of A is, read column-major,
// the D × n matrix Aᵀ (leading dimension D). We factor that one, Aᵀ = U' Σ V'ᵀ (economy size,
// p = min(n, D)), so A = V' Σ U'ᵀ and
//
//   vt row j   = U' column j: D contiguous floats (ldu = D), so vt is one copy of U''s first m columns
//   u[t][j]    = V'[t + j·n] · σ_j: a small transpose-and-scale kernel
//
// Singular vectors are unique only up to sign (and within repeated singular values); the product
// u · vt is what callers can rely on.
//
// Ownership and threading: a TruncatedSvd owns its cuSOLVER handle, gesvdj parameters and a device
// workspace that grows to the largest problem run (never shrinks; released by the destructor). It is
// bound to the CUDA device current at its first run. Not thread-safe: one solver per thread and device.
#pragma once

#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <cstddef>
#include <cstdint>

namespace orbit::kernels::cuda {

struct SvdDims {
  int64_t rows = 0;  // n; rows · cols must fit a 32-bit int (cuSOLVER's legacy API)
  int64_t cols = 0;  // D
  int64_t rank = 0;  // m, in [0, min(rows, cols)]; 0 is a no-op
};

struct SvdOptions {
  double tolerance = 0.0;  // gesvdj stopping tolerance; 0: cuSOLVER's default (float machine precision)
  int max_sweeps = 0;      // gesvdj sweep limit; 0: cuSOLVER's default (100)
};

// Device outputs (see the layout above). u and vt are required when rank > 0; s may be nullptr.
struct SvdFactors {
  float* u = nullptr;   // [rows][rank]
  float* vt = nullptr;  // [rank][cols]
  float* s = nullptr;   // [rank]
};

enum class SvdCode {
  kOk,
  kInvalidValue,   // bad dims, a null pointer that is needed, a device other than the solver's
  kCudaError,      // a CUDA runtime call failed: `cuda` says why
  kCusolverError,  // a cuSOLVER call failed: `cusolver` says why (or gesvdj's info < 0)
  kNotConverged,   // gesvdj stopped at max_sweeps above the tolerance; the factors hold its last iterate
};

const char* svd_code_name(SvdCode code);

struct SvdStatus {
  SvdCode code = SvdCode::kOk;
  const char* step = "";  // the call or check that failed, e.g. "cusolverDnSgesvdj" ("" when ok)
  cudaError_t cuda = cudaSuccess;
  cusolverStatus_t cusolver = CUSOLVER_STATUS_SUCCESS;
  int info = 0;           // gesvdj's info: 0 converged, > 0 not converged, -i: parameter i was wrong
  int sweeps = 0;         // sweeps gesvdj executed (when it ran)
  double residual = 0.0;  // gesvdj's internal off-diagonal residual ‖E‖_F (when it ran)
  bool ok() const { return code == SvdCode::kOk; }
};

class TruncatedSvd {
 public:
  // Makes no CUDA call; the handle and workspace are created by the first run().
  explicit TruncatedSvd(const SvdOptions& options = SvdOptions());
  ~TruncatedSvd();
  TruncatedSvd(const TruncatedSvd&) = delete;
  TruncatedSvd& operator=(const TruncatedSvd&) = delete;

  // Factorises `a` (device, [rows][cols] row-major float32, not modified) into `out`. The work is
  // enqueued on `stream`; run() then waits for that stream (to read gesvdj's convergence flag), so the
  // outputs are ready when it returns. Outputs must not overlap `a` or each other.
  SvdStatus run(const float* a, const SvdDims& dims, const SvdFactors& out, cudaStream_t stream);

  // Device bytes held by the workspace now.
  size_t workspace_bytes() const { return matrices_bytes_ + work_bytes_; }

 private:
  SvdStatus ensure_handle();
  SvdStatus reserve(void** buffer, size_t* held, size_t bytes, const char* step);

  SvdOptions options_;
  cusolverDnHandle_t handle_ = nullptr;
  gesvdjInfo_t params_ = nullptr;
  int device_ = -1;
  void* matrices_ = nullptr;  // copy of A, σ, U', V', info
  size_t matrices_bytes_ = 0;
  void* work_ = nullptr;  // gesvdj's work array
  size_t work_bytes_ = 0;
};

}  // namespace orbit::kernels::cuda
