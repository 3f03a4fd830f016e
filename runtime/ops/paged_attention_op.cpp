// Paged attention op: tensor checks and dispatch (ops/paged_attention_op.h).
#include "ops/paged_attention_op.h"

#include <ATen/ATen.h>

#include <cstring>

#include "kernels/cpu/paged_attention.h"
#include "orbit/common/error.h"

#include "ops/cuda_dispatch.h"
#if ORBIT_OPS_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/paged_attention.cuh"
#endif

namespace orbit::runtime::ops {

namespace kcpu = orbit::kernels::cpu;

namespace {

kcpu::PagedAttentionDims dims_of(const PagedAttentionInputs& in) {
  kcpu::PagedAttentionDims d;
  d.queries = in.q.size(0);
  d.heads = in.q.size(1);
  d.head_dim = in.q.size(2);
  d.kv_heads = in.k_tail.size(1);
  d.interleaved = in.interleaved;
  d.paged_tokens = in.slots.defined() ? in.slots.size(0) : 0;
  d.tail_tokens = in.k_tail.size(0);
  d.position_rows = in.positions.size(1);
  d.scale = static_cast<float>(in.scale);
  return d;
}

void check_inputs(const PagedAttentionInputs& in) {
  ORBIT_CHECK(in.q.defined() && in.q.dim() == 3, "paged_attention: q must be [R, H, d]");
  ORBIT_CHECK(
      in.k_tail.defined() && in.k_tail.dim() == 3 && in.v_tail.defined() && in.v_tail.sizes() == in.k_tail.sizes(),
      "paged_attention: k_tail and v_tail must both be [S_t, H_kv, d]");
  const at::Device dev = in.q.device();
  const at::ScalarType t = in.q.scalar_type();
  const int64_t d = in.q.size(2), hkv = in.k_tail.size(1), width = hkv * d;
  ORBIT_CHECK(in.k_tail.size(2) == d, "paged_attention: k_tail head_dim " << in.k_tail.size(2) << " != q's " << d);
  ORBIT_CHECK(hkv > 0 && in.q.size(1) % hkv == 0, "paged_attention: H_kv must divide H");
  ORBIT_CHECK(in.k_tail.size(0) >= in.q.size(0), "paged_attention: the tail must hold the R query tokens");
  for (const at::Tensor* x : {&in.k_tail, &in.v_tail}) {
    ORBIT_CHECK(x->device() == dev && x->scalar_type() == t && x->is_contiguous(),
                "paged_attention: k_tail/v_tail must be contiguous " << t << " on " << dev);
  }
  const int64_t sp = in.slots.defined() ? in.slots.size(0) : 0;
  if (sp > 0) {
    ORBIT_CHECK(in.slots.scalar_type() == at::kInt && in.slots.device() == dev,
                "paged_attention: slots must be int32 on " << dev);
    for (const at::Tensor* x : {&in.k_pages, &in.v_pages}) {
      ORBIT_CHECK(x->defined() && x->dim() == 2 && x->size(1) == width && x->device() == dev && x->scalar_type() == t &&
                      x->is_contiguous(),
                  "paged_attention: k_pages/v_pages must be contiguous [rows, " << width << "] " << t << " on " << dev);
    }
  }
  const int64_t S = sp + in.k_tail.size(0);
  ORBIT_CHECK(in.positions.defined() && in.positions.dim() == 2 && in.positions.size(0) == S &&
                  in.positions.scalar_type() == at::kLong && in.positions.device() == dev &&
                  in.positions.is_contiguous(),
              "paged_attention: positions must be contiguous int64 [" << S << ", rows] on " << dev);
  ORBIT_CHECK(in.inv_freq.defined() && in.inv_freq.numel() == d / 2 && in.inv_freq.scalar_type() == at::kDouble &&
                  in.inv_freq.device() == dev,
              "paged_attention: inv_freq must be float64 [" << d / 2 << "] on " << dev);
  if (in.row_of_freq.defined()) {
    ORBIT_CHECK(
        in.row_of_freq.numel() == d / 2 && in.row_of_freq.scalar_type() == at::kChar && in.row_of_freq.device() == dev,
        "paged_attention: row_of_freq must be int8 [" << d / 2 << "] on " << dev);
  }
  if (in.patch_of.defined()) {
    ORBIT_CHECK(in.patch_of.numel() == sp && in.patch_of.scalar_type() == at::kInt && in.patch_of.device() == dev &&
                    in.segments.defined() && in.segments.device() == dev,
                "paged_attention: patch_of must be int32 [S_p] on " << dev << " with a segment table");
  }
}

template <typename T, typename A>
kcpu::PagedAttentionArgs<A> args_of(const PagedAttentionInputs& in, const at::Tensor& out) {
  kcpu::PagedAttentionArgs<A> a;
  auto ptr = [](const at::Tensor& x) {
    return x.defined() && x.numel() > 0 ? reinterpret_cast<const A*>(x.data_ptr<T>()) : nullptr;
  };
  a.q = ptr(in.q);
  a.k_pages = ptr(in.k_pages);
  a.v_pages = ptr(in.v_pages);
  a.slots = in.slots.defined() && in.slots.numel() > 0 ? in.slots.data_ptr<int32_t>() : nullptr;
  a.k_tail = ptr(in.k_tail);
  a.v_tail = ptr(in.v_tail);
  a.positions = in.positions.data_ptr<int64_t>();
  a.inv_freq = in.inv_freq.data_ptr<double>();
  a.row_of_freq = in.row_of_freq.defined() ? in.row_of_freq.data_ptr<int8_t>() : nullptr;
  a.patch_of = in.patch_of.defined() && in.patch_of.numel() > 0 ? in.patch_of.data_ptr<int32_t>() : nullptr;
  a.segments =
      in.segments.defined() ? reinterpret_cast<const kcpu::PatchSegment*>(in.segments.data_ptr<uint8_t>()) : nullptr;
  a.out = reinterpret_cast<A*>(out.data_ptr<T>());
  return a;
}

#if ORBIT_OPS_HAVE_CUDA
int sm_count(const at::Device& device) {
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device.index()) != cudaSuccess) {
    (void)cudaGetLastError();
    return 132;
  }
  return count;
}

int compute_major(const at::Device& device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index()) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return major;
}

// The tensor-core kernel reads K/V rows as 16-byte vectors (rows are multiples of 8 elements).
bool rows_aligned(const PagedAttentionInputs& in) {
  for (const at::Tensor* x : {&in.k_pages, &in.v_pages, &in.k_tail, &in.v_tail}) {
    if (x->defined() && x->numel() > 0 && reinterpret_cast<uintptr_t>(x->data_ptr()) % 16 != 0) return false;
  }
  return true;
}

orbit::kernels::cuda::PagedKernel pick_kernel(const PagedAttentionInputs& in, const kcpu::PagedAttentionDims& d) {
  namespace kc = orbit::kernels::cuda;
  const bool sixteen_bit = in.q.scalar_type() == at::kBFloat16 || in.q.scalar_type() == at::kHalf;
  switch (in.kernel) {
    case PagedKernelChoice::kTiled: return kc::PagedKernel::kTiled;
    case PagedKernelChoice::kRowwise: return kc::PagedKernel::kRowwise;
    case PagedKernelChoice::kTensorCore:
      ORBIT_CHECK(sixteen_bit && compute_major(in.q.device()) >= 8,
                  "paged_attention: the tensor-core kernel needs bfloat16 or float16 on sm_80 or later, got "
                      << in.q.scalar_type() << " on compute capability " << compute_major(in.q.device()) << ".x");
      ORBIT_CHECK(rows_aligned(in),
                  "paged_attention: the tensor-core kernel reads K/V rows as 16-byte vectors: "
                  "k_pages, v_pages, k_tail and v_tail must start 16-byte aligned");
      return kc::PagedKernel::kTensorCore;
    case PagedKernelChoice::kAuto: break;
  }
  const bool mma =
      sixteen_bit && d.queries >= kPagedTensorCoreMinQueries && compute_major(in.q.device()) >= 8 && rows_aligned(in);
  return mma ? kc::PagedKernel::kTensorCore : kc::PagedKernel::kTiled;
}

template <typename T, typename A>
void run_cuda(const PagedAttentionInputs& in, const kcpu::PagedAttentionDims& d, const at::Tensor& out) {
  namespace kc = orbit::kernels::cuda;
  const c10::cuda::CUDAGuard guard(in.q.device());
  const kc::PagedKernel kernel = pick_kernel(in, d);
  const int64_t splits = kc::paged_attention_splits(d, sm_count(in.q.device()), kernel);
  at::Tensor ws = at::empty({kc::paged_attention_workspace_floats(d, splits)}, in.q.options().dtype(at::kFloat));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(in.q.device().index()).stream();
  const cudaError_t status =
      kc::paged_attention<A>(args_of<T, A>(in, out), d, ws.data_ptr<float>(), splits, stream, kernel);
  ORBIT_CHECK(status == cudaSuccess, "paged_attention: CUDA launch failed: " << cudaGetErrorString(status));
}
#endif

}  // namespace

bool paged_attention_available(const at::Device& device, int64_t heads, int64_t kv_heads, int64_t head_dim) {
#if ORBIT_OPS_HAVE_CUDA
  return device.is_cuda() && (head_dim == 64 || head_dim == 128) && kv_heads > 0 && heads % kv_heads == 0 &&
         heads / kv_heads <= kernels::cuda::kPagedMaxGroup;
#else
  (void)device;
  (void)heads;
  (void)kv_heads;
  (void)head_dim;
  return false;
#endif
}

at::Tensor paged_attention(const PagedAttentionInputs& in) {
  check_inputs(in);
  const kcpu::PagedAttentionDims d = dims_of(in);
  at::Tensor out = at::empty({d.queries, d.heads, d.head_dim}, in.q.options());
  const at::ScalarType t = in.q.scalar_type();
  if (in.q.is_cpu()) {
    const at::Tensor q = in.q.contiguous();
    PagedAttentionInputs c = in;
    c.q = q;
    switch (t) {
      case at::kFloat: kcpu::paged_attention_reference<float>(args_of<float, float>(c, out), d); break;
      case at::kBFloat16:
        kcpu::paged_attention_reference<at::BFloat16>(args_of<at::BFloat16, at::BFloat16>(c, out), d);
        break;
      default: ORBIT_FAIL("paged_attention: CPU supports float32 and bfloat16, got " << t);
    }
    return out.view({d.queries, d.heads * d.head_dim});
  }
#if ORBIT_OPS_HAVE_CUDA
  ORBIT_CHECK(in.q.is_cuda(), "paged_attention: unsupported device " << in.q.device());
  ORBIT_CHECK(kernels::cuda::paged_attention_supports(d),
              "paged_attention: the CUDA kernel covers head_dim 64/128 and H/H_kv <= 8, got head_dim "
                  << d.head_dim << ", H " << d.heads << ", H_kv " << d.kv_heads);
  PagedAttentionInputs c = in;
  c.q = in.q.contiguous();
  switch (t) {
    case at::kFloat: run_cuda<float, float>(c, d, out); break;
    case at::kBFloat16: run_cuda<at::BFloat16, __nv_bfloat16>(c, d, out); break;
    case at::kHalf: run_cuda<at::Half, __half>(c, d, out); break;
    default: ORBIT_FAIL("paged_attention: CUDA supports float32, bfloat16 and float16, got " << t);
  }
  return out.view({d.queries, d.heads * d.head_dim});
#else
  ORBIT_FAIL("paged_attention: q is on " << in.q.device()
                                         << " but this build has no CUDA paged-attention kernel (needs ORBIT_CUDA=ON "
                                            "and a libtorch built with CUDA)");
#endif
}

at::Tensor make_segment_table(const std::vector<kcpu::PatchSegment>& segments, const at::Device& device) {
  const int64_t bytes = static_cast<int64_t>(segments.size() * sizeof(kcpu::PatchSegment));
  at::Tensor host = at::empty({bytes > 0 ? bytes : 1}, at::TensorOptions().dtype(at::kByte));
  if (bytes > 0) std::memcpy(host.data_ptr<uint8_t>(), segments.data(), static_cast<size_t>(bytes));
  return host.to(device);
}

}  // namespace orbit::runtime::ops
