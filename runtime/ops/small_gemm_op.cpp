// dense()'s CPU path for a few rows (ops/small_gemm_op.h).
#include "ops/small_gemm_op.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "ops/cpu_features.h"
#include "orbit/common/error.h"
#if defined(ORBIT_CPU_AVX2_KERNELS)
#include "kernels/cpu/small_gemm_avx2.h"
#endif

namespace orbit::runtime::ops {

namespace {

// The per-thread buffers reused_cpu_output hands out, at most this many.
constexpr std::size_t kReusedBuffers = 32;
// Larger outputs (a long vocabulary's logits) are not kept: their allocation is small beside their product.
constexpr int64_t kReusedBytes = int64_t{1} << 20;

// Free: nothing but the list holds the tensor, and no view shares its storage.
bool free_buffer(const at::Tensor& t) { return t.use_count() == 1 && t.storage().use_count() == 1; }

}  // namespace

at::Tensor reused_cpu_output(at::IntArrayRef shape, at::ScalarType dtype) {
  thread_local std::vector<at::Tensor> buffers;
  at::Tensor* spare = nullptr;
  for (at::Tensor& t : buffers) {
    if (!free_buffer(t)) continue;
    if (t.scalar_type() == dtype && t.sizes() == shape) return t;
    if (spare == nullptr) spare = &t;
  }
  at::Tensor made = at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kCPU));
  if (static_cast<int64_t>(made.nbytes()) > kReusedBytes) return made;
  if (spare != nullptr) {
    *spare = made;
  } else if (buffers.size() < kReusedBuffers) {
    buffers.push_back(made);
  }
  return made;
}

bool small_gemm_takes(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!avx2_kernels_run()) return false;
  if (!x.device().is_cpu() || x.scalar_type() != at::kFloat || x.dim() < 1) return false;
  if (!weight.device().is_cpu() || weight.scalar_type() != at::kFloat || weight.dim() != 2 || !weight.is_contiguous())
    return false;
  const int64_t K = weight.size(1);
  if (K == 0 || x.size(-1) != K || x.numel() / K > kSmallGemmRows) return false;
  return !bias.defined() || (bias.device().is_cpu() && bias.scalar_type() == at::kFloat && bias.dim() == 1 &&
                             bias.size(0) == weight.size(0) && bias.is_contiguous());
}

at::Tensor small_gemm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  ORBIT_CHECK(small_gemm_takes(x, weight, bias), "small_gemm: inputs it does not take (see small_gemm_takes)");
  const int64_t N = weight.size(0), K = weight.size(1), M = x.numel() / K;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  at::Tensor y = reused_cpu_output(shape, at::kFloat);
  if (M == 0 || N == 0) return y;
#if defined(ORBIT_CPU_AVX2_KERNELS)
  const at::Tensor xc = x.contiguous();
  const float* xp = xc.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // Blocks of four weight rows; a thread takes at least ~32K multiply-adds.
  const int64_t blocks = (N + 3) / 4, grain = std::max<int64_t>(1, 32768 / (4 * K * M));
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    kernels::cpu::small_gemm_avx2(xp, wp, bp, yp, M, N, K, 4 * begin, std::min(N, 4 * end));
  });
#endif
  return y;
}

}  // namespace orbit::runtime::ops
