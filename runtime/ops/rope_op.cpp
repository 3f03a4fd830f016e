// RoPE op: tensor checks and dispatch to kernels/cpu/rope.h and kernels/cuda/rope.cuh.
#include "ops/rope_op.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/rope.h"
#include "orbit/common/error.h"

#include "ops/cuda_dispatch.h"
#if ORBIT_OPS_HAVE_CUDA
#include "kernels/cuda/rope.cuh"
#endif

namespace orbit::runtime::ops {
namespace {

// Elements per thread chunk: below this, splitting across threads costs more than it saves.
constexpr int64_t kGrainElements = 1 << 15;

void check_contiguous(const at::Tensor& t, const char* name) {
  ORBIT_CHECK(t.is_contiguous(), "rope_rotate: argument '" << name << "' must be contiguous (sizes " << t.sizes()
                                                           << ", strides " << t.strides() << ")");
}

void check_no_partial_overlap(const at::Tensor& out, const at::Tensor& x) {
  const auto x_begin = reinterpret_cast<std::uintptr_t>(x.data_ptr());
  const auto out_begin = reinterpret_cast<std::uintptr_t>(out.data_ptr());
  if (x_begin == out_begin) return;  // exactly in place
  const auto bytes = static_cast<std::uintptr_t>(x.numel() * x.element_size());
  const bool disjoint = out_begin + bytes <= x_begin || x_begin + bytes <= out_begin;
  ORBIT_CHECK(disjoint, "rope_rotate: argument 'out' partially overlaps 'x' (only exact in-place is allowed)");
}

template <typename T, typename C>
void rotate_cpu(const at::Tensor& out, const at::Tensor& x, const RopeTables& tables, const kernels::RopeDims& dims) {
  const T* x_ptr = x.data_ptr<T>();
  T* out_ptr = out.data_ptr<T>();
  const C* cos_ptr = tables.cos.data_ptr<C>();
  const C* sin_ptr = tables.sin.data_ptr<C>();
  const int64_t per_token = dims.heads * dims.head_dim;
  const int64_t half = dims.rotary_dim / 2;
  const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, per_token));
  at::parallel_for(0, dims.tokens, grain, [&](int64_t begin, int64_t end) {
    kernels::RopeDims slice = dims;
    slice.tokens = end - begin;
    kernels::cpu::rope_rotate<T, C>(x_ptr + begin * per_token, out_ptr + begin * per_token, cos_ptr + begin * half,
                                    sin_ptr + begin * half, slice);
  });
}

void dispatch_cpu(const at::Tensor& out, const at::Tensor& x, const RopeTables& tables, const kernels::RopeDims& dims) {
  switch (x.scalar_type()) {
    case at::kFloat: rotate_cpu<float, float>(out, x, tables, dims); return;
    case at::kDouble: rotate_cpu<double, double>(out, x, tables, dims); return;
    case at::kBFloat16: rotate_cpu<at::BFloat16, float>(out, x, tables, dims); return;
    default: break;
  }
  ORBIT_FAIL("rope_rotate: argument 'x' has dtype " << x.scalar_type()
                                                    << "; CPU supports float32, float64 and bfloat16");
}

void dispatch_cuda(const at::Tensor& out, const at::Tensor& x, const RopeTables& tables,
                   const kernels::RopeDims& dims) {
#if ORBIT_OPS_HAVE_CUDA
  namespace kc = kernels::cuda;
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const float* cos_ptr = tables.cos.data_ptr<float>();
  const float* sin_ptr = tables.sin.data_ptr<float>();
  cudaError_t status = cudaSuccess;
  switch (x.scalar_type()) {
    case at::kFloat:
      status = kc::rope_rotate<float>(x.data_ptr<float>(), out.data_ptr<float>(), cos_ptr, sin_ptr, dims, stream);
      break;
    case at::kBFloat16:
      status = kc::rope_rotate<__nv_bfloat16>(reinterpret_cast<const __nv_bfloat16*>(x.data_ptr<at::BFloat16>()),
                                              reinterpret_cast<__nv_bfloat16*>(out.data_ptr<at::BFloat16>()), cos_ptr,
                                              sin_ptr, dims, stream);
      break;
    default:
      ORBIT_FAIL("rope_rotate: argument 'x' has dtype " << x.scalar_type() << "; CUDA supports float32 and bfloat16");
  }
  ORBIT_CHECK(status == cudaSuccess, "rope_rotate: CUDA kernel launch failed: " << cudaGetErrorString(status));
#else
  (void)out;
  (void)tables;
  (void)dims;
  ORBIT_FAIL("rope_rotate: argument 'x' is on " << x.device()
                                                << " but this build has no CUDA RoPE kernel (needs ORBIT_CUDA=ON and "
                                                   "a libtorch built with CUDA)");
#endif
}

}  // namespace

at::ScalarType rope_table_dtype(at::ScalarType x_dtype) { return x_dtype == at::kDouble ? at::kDouble : at::kFloat; }

RopeTables rope_tables(const at::Tensor& angles, at::ScalarType dtype, at::Device device) {
  ORBIT_CHECK(angles.defined(), "rope_tables: argument 'angles' is undefined");
  ORBIT_CHECK(angles.dim() == 2,
              "rope_tables: argument 'angles' must be [T, rotary_dim/2], got sizes " << angles.sizes());
  ORBIT_CHECK(angles.scalar_type() == at::kDouble,
              "rope_tables: argument 'angles' must be float64 (see rope_angles), got " << angles.scalar_type());
  ORBIT_CHECK(dtype == at::kFloat || dtype == at::kDouble,
              "rope_tables: table dtype must be float32 or float64, got " << dtype);
  const at::Tensor on_device = angles.to(device);
  RopeTables tables;
  tables.cos = at::cos(on_device).to(dtype).contiguous();
  tables.sin = at::sin(on_device).to(dtype).contiguous();
  return tables;
}

void rope_rotate_out(const at::Tensor& out, const at::Tensor& x, const RopeTables& tables, RopeLayout layout) {
  ORBIT_CHECK(x.defined(), "rope_rotate: argument 'x' is undefined");
  ORBIT_CHECK(x.dim() == 3, "rope_rotate: argument 'x' must be [T, H, head_dim], got sizes " << x.sizes());
  ORBIT_CHECK(tables.cos.defined() && tables.sin.defined(), "rope_rotate: argument 'tables' has undefined cos/sin");
  ORBIT_CHECK(tables.cos.dim() == 2 && tables.cos.sizes() == tables.sin.sizes(),
              "rope_rotate: tables 'cos' " << tables.cos.sizes() << " and 'sin' " << tables.sin.sizes()
                                           << " must both be [T, rotary_dim/2]");
  const int64_t tokens = x.size(0);
  const int64_t half = tables.cos.size(1);
  ORBIT_CHECK(tables.cos.size(0) == tokens, "rope_rotate: tables have " << tables.cos.size(0)
                                                                        << " rows but argument 'x' has " << tokens
                                                                        << " tokens");
  ORBIT_CHECK(half > 0 && 2 * half <= x.size(2), "rope_rotate: rotary_dim " << 2 * half
                                                                            << " (from the tables) must be in (0, "
                                                                            << "head_dim=" << x.size(2) << "]");
  const at::ScalarType table_dtype = rope_table_dtype(x.scalar_type());
  ORBIT_CHECK(tables.cos.scalar_type() == table_dtype && tables.sin.scalar_type() == table_dtype,
              "rope_rotate: tables must be " << table_dtype << " for argument 'x' of dtype " << x.scalar_type()
                                             << ", got " << tables.cos.scalar_type());
  ORBIT_CHECK(tables.cos.device() == x.device() && tables.sin.device() == x.device(),
              "rope_rotate: tables are on " << tables.cos.device() << " but argument 'x' is on " << x.device());
  ORBIT_CHECK(
      out.defined() && out.sizes() == x.sizes() && out.scalar_type() == x.scalar_type() && out.device() == x.device(),
      "rope_rotate: argument 'out' must match 'x' (sizes " << x.sizes() << ", " << x.scalar_type() << ", " << x.device()
                                                           << ")");
  check_contiguous(x, "x");
  check_contiguous(out, "out");
  check_contiguous(tables.cos, "cos");
  check_contiguous(tables.sin, "sin");
  if (x.numel() == 0) return;
  check_no_partial_overlap(out, x);

  kernels::RopeDims dims;
  dims.tokens = tokens;
  dims.heads = x.size(1);
  dims.head_dim = x.size(2);
  dims.rotary_dim = 2 * half;
  dims.interleaved = layout == RopeLayout::kInterleaved;
  if (x.device().is_cpu()) {
    dispatch_cpu(out, x, tables, dims);
  } else if (x.device().is_cuda()) {
    dispatch_cuda(out, x, tables, dims);
  } else {
    ORBIT_FAIL("rope_rotate: argument 'x' is on unsupported device " << x.device());
  }
}

at::Tensor rope_rotate(const at::Tensor& x, const RopeTables& tables, RopeLayout layout) {
  ORBIT_CHECK(x.defined(), "rope_rotate: argument 'x' is undefined");
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  rope_rotate_out(out, x, tables, layout);
  return out;
}

}  // namespace orbit::runtime::ops
