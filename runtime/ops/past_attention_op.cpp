// Past attention op: shape checks, the GQA fold and the two cuBLAS GEMMs (ops/past_attention_op.h).
#include "ops/past_attention_op.h"

#include <ATen/ATen.h>

#include <limits>

#include "orbit/common/error.h"

#include "ops/cuda_dispatch.h"
#if ORBIT_OPS_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>
#endif

namespace orbit::runtime::ops {

bool past_attention_available(const at::Device& device, at::ScalarType dtype) {
  return ORBIT_OPS_HAVE_CUDA && device.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kHalf);
}

at::Tensor past_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  ORBIT_CHECK(q.defined() && q.dim() == 3, "past_attention: q must be [R, H, d]");
  ORBIT_CHECK(
      k.defined() && k.dim() == 3 && v.defined() && v.dim() == 3 && v.size(0) == k.size(0) && v.size(1) == k.size(1),
      "past_attention: k and v must be [S, H_kv, d] and [S, H_kv, dv]");
  const int64_t R = q.size(0), H = q.size(1), d = q.size(2), S = k.size(0), Hkv = k.size(1), dv = v.size(2);
  ORBIT_CHECK(k.size(2) == d, "past_attention: k's head_dim " << k.size(2) << " != q's " << d);
  ORBIT_CHECK(Hkv > 0 && H % Hkv == 0, "past_attention: H_kv = " << Hkv << " must divide H = " << H);
  ORBIT_CHECK(R >= 1 && R <= S, "past_attention: " << R << " queries over " << S << " keys (need 1 <= R <= S)");
  ORBIT_CHECK(past_attention_available(q), "past_attention: q is " << q.scalar_type() << " on " << q.device()
                                                                   << "; needs bfloat16 or float16 on CUDA "
                                                                      "in a build with CUDA ops");
  ORBIT_CHECK(k.device() == q.device() && v.device() == q.device() && k.scalar_type() == q.scalar_type() &&
                  v.scalar_type() == q.scalar_type(),
              "past_attention: q, k and v must share device and dtype");
#if ORBIT_OPS_HAVE_CUDA
  const int64_t G = H / Hkv, M = R * G;
  const c10::cuda::CUDAGuard guard(q.device());
  const at::Tensor kc = k.contiguous(), vc = v.contiguous();
  // The G query heads of kv head h become rows of one matrix: qf[h][r·G + g] = q[r][h·G + g].
  const at::Tensor qf = q.reshape({R, Hkv, G, d}).permute({1, 0, 2, 3}).contiguous();
  at::Tensor scores = at::empty({Hkv, M, S}, q.options().dtype(at::kFloat));
  const cudaDataType type = q.scalar_type() == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();  // bound to the current stream
  const float alpha = static_cast<float>(scale), one = 1.0f, zero = 0.0f;
  // Per kv head, row-major scores [M, S] = qf_h [M, d] · k_hᵀ. In cuBLAS's column-major terms:
  // C [S, M] = Aᵀ·B with A = k_h as [d, S] (ld H_kv·d, heads d apart) and B = qf_h as [d, M].
  cublasStatus_t status = cublasGemmStridedBatchedEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(S), static_cast<int>(M), static_cast<int>(d), &alpha,
      kc.data_ptr(), type, static_cast<int>(Hkv * d), d, qf.data_ptr(), type, static_cast<int>(d), M * d, &zero,
      scores.data_ptr(), CUDA_R_32F, static_cast<int>(S), M * S, static_cast<int>(Hkv), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  ORBIT_CHECK(status == CUBLAS_STATUS_SUCCESS, "past_attention: cuBLAS scores GEMM failed (status " << status << ")");
  if (R > 1) {
    // Causality inside the tail: row r·G + g sees tail key j only when j ≤ r.
    const at::Tensor r = at::arange(R, scores.options().dtype(at::kLong));
    const at::Tensor hidden = (r.unsqueeze(0) > r.unsqueeze(1)).repeat_interleave(G, 0);  // [M, R]
    scores.narrow(2, S - R, R).masked_fill_(hidden, -std::numeric_limits<float>::infinity());
  }
  const at::Tensor p = at::softmax(scores, -1).to(q.scalar_type());
  at::Tensor out = at::empty({Hkv, M, dv}, q.options());
  // Per kv head, row-major out [M, dv] = p_h [M, S] · v_h [S, dv]: C [dv, M] = A·B with A = v_h as
  // [dv, S] (ld H_kv·dv) and B = p_h as [S, M].
  status = cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(dv), static_cast<int>(M),
                                      static_cast<int>(S), &one, vc.data_ptr(), type, static_cast<int>(Hkv * dv), dv,
                                      p.data_ptr(), type, static_cast<int>(S), M * S, &zero, out.data_ptr(), type,
                                      static_cast<int>(dv), M * dv, static_cast<int>(Hkv), CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT);
  ORBIT_CHECK(status == CUBLAS_STATUS_SUCCESS, "past_attention: cuBLAS value GEMM failed (status " << status << ")");
  return out.view({Hkv, R, G, dv}).permute({1, 0, 2, 3}).reshape({R, H * dv});
#else
  (void)scale;
  (void)dv;
  ORBIT_FAIL("past_attention: this build has no CUDA ops");
#endif
}

}  // namespace orbit::runtime::ops
