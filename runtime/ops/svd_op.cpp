// Truncated SVD op: tensor checks and the call into kernels/cuda/svd.cuh (ops/svd_op.h states the contract).
#include "ops/svd_op.h"

#include <ATen/ATen.h>

#include <climits>
#include <map>
#include <memory>

#include "orbit/common/error.h"

#include "ops/cuda_dispatch.h"
#if ORBIT_OPS_HAVE_CUDA
#include "kernels/cuda/svd.cuh"
#endif

namespace orbit::runtime::ops {

bool have_cuda_svd() { return ORBIT_OPS_HAVE_CUDA != 0; }

SvdFactorsResult truncated_svd_cuda(const at::Tensor& a, int64_t rank) {
  ORBIT_CHECK(a.defined() && a.dim() == 2, "truncated_svd_cuda: argument 'a' must be a 2-D [n, D] matrix");
  ORBIT_CHECK(a.is_cuda(), "truncated_svd_cuda: argument 'a' is on " << a.device() << ", expected a CUDA device");
  ORBIT_CHECK(at::isFloatingType(a.scalar_type()),
              "truncated_svd_cuda: argument 'a' must be floating, got " << a.scalar_type());
  const int64_t n = a.size(0), d = a.size(1);
  ORBIT_CHECK(rank >= 1 && rank <= std::min(n, d),
              "truncated_svd_cuda: rank " << rank << " is outside [1, min(n=" << n << ", D=" << d << ")]");
  ORBIT_CHECK(n <= INT_MAX / std::max<int64_t>(d, 1),
              "truncated_svd_cuda: n·D = " << n << "·" << d << " is beyond cuSOLVER's 32-bit sizes");
  SvdFactorsResult result;
#if ORBIT_OPS_HAVE_CUDA
  namespace kc = kernels::cuda;
  const c10::cuda::CUDAGuard guard(a.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(a.device().index()).stream();
  // One solver per thread and device (TruncatedSvd is bound to one device and not thread-safe).
  thread_local std::map<int, std::unique_ptr<kc::TruncatedSvd>> solvers;
  std::unique_ptr<kc::TruncatedSvd>& solver = solvers[a.device().index()];
  if (!solver) solver = std::make_unique<kc::TruncatedSvd>();

  const at::Tensor input = a.to(at::kFloat).contiguous();
  const auto options = input.options();
  at::Tensor u = at::empty({n, rank}, options);
  at::Tensor vt = at::empty({rank, d}, options);
  const kc::SvdStatus status = solver->run(input.data_ptr<float>(), kc::SvdDims{n, d, rank},
                                           kc::SvdFactors{u.data_ptr<float>(), vt.data_ptr<float>(), nullptr}, stream);
  result.sweeps = status.sweeps;
  if (!status.ok()) {
    result.why = std::string(kc::svd_code_name(status.code)) + " at " + status.step;
    if (status.cuda != cudaSuccess) result.why += std::string(": ") + cudaGetErrorString(status.cuda);
    return result;
  }
  result.ok = true;
  result.u = std::move(u);
  result.vt = std::move(vt);
#else
  result.why = "this build has no CUDA SVD (needs ORBIT_CUDA=ON and a libtorch built with CUDA)";
#endif
  return result;
}

}  // namespace orbit::runtime::ops
