// Truncated SVD through cusolverDnSgesvdj (kernels/cuda/svd.cuh states the layouts and the
// column-major reading of the row-major input).
#include "kernels/cuda/svd.cuh"

#include <climits>

namespace orbit::kernels::cuda {
namespace {

constexpr size_t kAlignment = 256;
constexpr int kScaleThreads = 256;
constexpr int64_t kScaleMaxBlocks = 1 << 16;

size_t align_up(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

SvdStatus failure(SvdCode code, const char* step) {
  SvdStatus status;
  status.code = code;
  status.step = step;
  return status;
}

SvdStatus cuda_failure(cudaError_t error, const char* step) {
  SvdStatus status = failure(SvdCode::kCudaError, step);
  status.cuda = error;
  return status;
}

SvdStatus cusolver_failure(cusolverStatus_t error, const char* step) {
  SvdStatus status = failure(SvdCode::kCusolverError, step);
  status.cusolver = error;
  return status;
}

// u[t][j] = v[t + j·ldv] · s[j] for t < rows, j < rank: V' (column-major, ldv = rows) transposed into
// row-major u with the singular values folded in. Writes are coalesced; the reads stride by ldv.
__global__ void scale_transpose_kernel(const float* v, const float* s, float* u, int64_t rows, int64_t rank,
                                       int64_t ldv) {
  const int64_t total = rows * rank;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / rank;
    const int64_t j = i - t * rank;
    u[i] = v[t + j * ldv] * s[j];
  }
}

}  // namespace

const char* svd_code_name(SvdCode code) {
  switch (code) {
    case SvdCode::kOk: return "ok";
    case SvdCode::kInvalidValue: return "invalid value";
    case SvdCode::kCudaError: return "CUDA error";
    case SvdCode::kCusolverError: return "cuSOLVER error";
    case SvdCode::kNotConverged: return "not converged";
  }
  return "unknown";
}

TruncatedSvd::TruncatedSvd(const SvdOptions& options) : options_(options) {}

TruncatedSvd::~TruncatedSvd() {
  // Errors cannot be reported from a destructor; each release is attempted regardless.
  if (matrices_ != nullptr) cudaFree(matrices_);
  if (work_ != nullptr) cudaFree(work_);
  if (params_ != nullptr) cusolverDnDestroyGesvdjInfo(params_);
  if (handle_ != nullptr) cusolverDnDestroy(handle_);
}

SvdStatus TruncatedSvd::ensure_handle() {
  int device = 0;
  const cudaError_t got = cudaGetDevice(&device);
  if (got != cudaSuccess) return cuda_failure(got, "cudaGetDevice");
  if (handle_ != nullptr) {
    if (device != device_) return failure(SvdCode::kInvalidValue, "device (the solver is bound to another device)");
    return SvdStatus();
  }
  cusolverStatus_t status = cusolverDnCreate(&handle_);
  if (status != CUSOLVER_STATUS_SUCCESS) {
    handle_ = nullptr;
    return cusolver_failure(status, "cusolverDnCreate");
  }
  const char* step = "cusolverDnCreateGesvdjInfo";
  status = cusolverDnCreateGesvdjInfo(&params_);
  if (status != CUSOLVER_STATUS_SUCCESS) params_ = nullptr;
  if (status == CUSOLVER_STATUS_SUCCESS && options_.tolerance > 0.0) {
    step = "cusolverDnXgesvdjSetTolerance";
    status = cusolverDnXgesvdjSetTolerance(params_, options_.tolerance);
  }
  if (status == CUSOLVER_STATUS_SUCCESS && options_.max_sweeps > 0) {
    step = "cusolverDnXgesvdjSetMaxSweeps";
    status = cusolverDnXgesvdjSetMaxSweeps(params_, options_.max_sweeps);
  }
  if (status != CUSOLVER_STATUS_SUCCESS) {  // leave no half-configured solver behind
    if (params_ != nullptr) cusolverDnDestroyGesvdjInfo(params_);
    params_ = nullptr;
    cusolverDnDestroy(handle_);
    handle_ = nullptr;
    return cusolver_failure(status, step);
  }
  device_ = device;
  return SvdStatus();
}

// Grows `*buffer` to at least `bytes` (contents are not kept). The previous buffer is only used by
// work that run() has already waited for, so freeing it here is safe.
SvdStatus TruncatedSvd::reserve(void** buffer, size_t* held, size_t bytes, const char* step) {
  if (bytes <= *held) return SvdStatus();
  if (*buffer != nullptr) {
    const cudaError_t freed = cudaFree(*buffer);
    *buffer = nullptr;
    *held = 0;
    if (freed != cudaSuccess) return cuda_failure(freed, "cudaFree");
  }
  const cudaError_t got = cudaMalloc(buffer, bytes);
  if (got != cudaSuccess) {
    *buffer = nullptr;
    return cuda_failure(got, step);
  }
  *held = bytes;
  return SvdStatus();
}

SvdStatus TruncatedSvd::run(const float* a, const SvdDims& dims, const SvdFactors& out, cudaStream_t stream) {
  if (dims.rows < 0 || dims.cols < 0 || dims.rank < 0) return failure(SvdCode::kInvalidValue, "dims (negative)");
  const int64_t p64 = dims.rows < dims.cols ? dims.rows : dims.cols;
  if (dims.rank > p64) return failure(SvdCode::kInvalidValue, "dims.rank (above min(rows, cols))");
  if (dims.rank == 0) return SvdStatus();
  if (dims.rows > INT_MAX || dims.cols > INT_MAX || dims.rows * dims.cols > INT_MAX)
    return failure(SvdCode::kInvalidValue, "dims (rows · cols above INT_MAX)");
  if (a == nullptr || out.u == nullptr || out.vt == nullptr) {
    return failure(SvdCode::kInvalidValue, "pointers (a, u and vt are required)");
  }

  SvdStatus status = ensure_handle();
  if (!status.ok()) return status;
  cusolverStatus_t solver = cusolverDnSetStream(handle_, stream);
  if (solver != CUSOLVER_STATUS_SUCCESS) return cusolver_failure(solver, "cusolverDnSetStream");

  // The column-major problem: Aᵀ is M × N with M = D (cols), N = n (rows), leading dimension M.
  const int m = static_cast<int>(dims.cols);
  const int n = static_cast<int>(dims.rows);
  const int p = static_cast<int>(p64);
  const size_t a_bytes = align_up(sizeof(float) * static_cast<size_t>(m) * n);
  const size_t s_bytes = align_up(sizeof(float) * static_cast<size_t>(p));
  const size_t u_bytes = align_up(sizeof(float) * static_cast<size_t>(m) * p);
  const size_t v_bytes = align_up(sizeof(float) * static_cast<size_t>(n) * p);
  const size_t info_bytes = align_up(sizeof(int));
  status = reserve(&matrices_, &matrices_bytes_, a_bytes + s_bytes + u_bytes + v_bytes + info_bytes,
                   "cudaMalloc (matrices)");
  if (!status.ok()) return status;
  char* base = static_cast<char*>(matrices_);
  float* a_work = reinterpret_cast<float*>(base);
  float* s_work = reinterpret_cast<float*>(base + a_bytes);
  float* u_work = reinterpret_cast<float*>(base + a_bytes + s_bytes);
  float* v_work = reinterpret_cast<float*>(base + a_bytes + s_bytes + u_bytes);
  int* info_work = reinterpret_cast<int*>(base + a_bytes + s_bytes + u_bytes + v_bytes);

  int lwork = 0;
  solver = cusolverDnSgesvdj_bufferSize(handle_, CUSOLVER_EIG_MODE_VECTOR, /*econ=*/1, m, n, a_work, m, s_work, u_work,
                                        m, v_work, n, &lwork, params_);
  if (solver != CUSOLVER_STATUS_SUCCESS) return cusolver_failure(solver, "cusolverDnSgesvdj_bufferSize");
  if (lwork < 0) return failure(SvdCode::kCusolverError, "cusolverDnSgesvdj_bufferSize (negative lwork)");
  status = reserve(&work_, &work_bytes_, align_up(sizeof(float) * static_cast<size_t>(lwork > 0 ? lwork : 1)),
                   "cudaMalloc (gesvdj work)");
  if (!status.ok()) return status;

  // gesvdj overwrites its input: factor a copy.
  cudaError_t error =
      cudaMemcpyAsync(a_work, a, sizeof(float) * static_cast<size_t>(m) * n, cudaMemcpyDeviceToDevice, stream);
  if (error != cudaSuccess) return cuda_failure(error, "cudaMemcpyAsync (a)");
  solver = cusolverDnSgesvdj(handle_, CUSOLVER_EIG_MODE_VECTOR, /*econ=*/1, m, n, a_work, m, s_work, u_work, m, v_work,
                             n, static_cast<float*>(work_), lwork, info_work, params_);
  if (solver != CUSOLVER_STATUS_SUCCESS) return cusolver_failure(solver, "cusolverDnSgesvdj");

  // vt = U'[:, :rank] (its columns are D contiguous floats: rows of vt); s = σ[:rank]; u = V'[:, :rank]·σ.
  const size_t rank = static_cast<size_t>(dims.rank);
  error =
      cudaMemcpyAsync(out.vt, u_work, sizeof(float) * rank * static_cast<size_t>(m), cudaMemcpyDeviceToDevice, stream);
  if (error != cudaSuccess) return cuda_failure(error, "cudaMemcpyAsync (vt)");
  if (out.s != nullptr) {
    error = cudaMemcpyAsync(out.s, s_work, sizeof(float) * rank, cudaMemcpyDeviceToDevice, stream);
    if (error != cudaSuccess) return cuda_failure(error, "cudaMemcpyAsync (s)");
  }
  const int64_t total = dims.rows * dims.rank;
  int64_t blocks = (total + kScaleThreads - 1) / kScaleThreads;
  if (blocks > kScaleMaxBlocks) blocks = kScaleMaxBlocks;
  scale_transpose_kernel<<<static_cast<unsigned>(blocks), kScaleThreads, 0, stream>>>(v_work, s_work, out.u, dims.rows,
                                                                                      dims.rank, n);
  error = cudaGetLastError();
  if (error != cudaSuccess) return cuda_failure(error, "scale_transpose_kernel launch");

  int info = 0;
  error = cudaMemcpyAsync(&info, info_work, sizeof(int), cudaMemcpyDeviceToHost, stream);
  if (error != cudaSuccess) return cuda_failure(error, "cudaMemcpyAsync (info)");
  error = cudaStreamSynchronize(stream);
  if (error != cudaSuccess) return cuda_failure(error, "cudaStreamSynchronize");

  status = SvdStatus();
  status.info = info;
  if (info < 0) {
    status.code = SvdCode::kCusolverError;
    status.step = "cusolverDnSgesvdj (info < 0: invalid parameter)";
    return status;
  }
  solver = cusolverDnXgesvdjGetSweeps(handle_, params_, &status.sweeps);
  if (solver != CUSOLVER_STATUS_SUCCESS) return cusolver_failure(solver, "cusolverDnXgesvdjGetSweeps");
  solver = cusolverDnXgesvdjGetResidual(handle_, params_, &status.residual);
  if (solver != CUSOLVER_STATUS_SUCCESS) return cusolver_failure(solver, "cusolverDnXgesvdjGetResidual");
  if (info > 0) {
    status.code = SvdCode::kNotConverged;
    status.step = "cusolverDnSgesvdj (max_sweeps reached)";
  }
  return status;
}

}  // namespace orbit::kernels::cuda
