// bench_gpu's kernel section (bench_gpu_kernels.h).
#include "bench_gpu_kernels.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "bench_gpu_util.h"
#include "ops/cuda_dispatch.h"
#include "ops/paged_attention_op.h"
#include "ops/patch_apply_op.h"
#include "orbit/runtime/rope.h"

#if ORBIT_OPS_HAVE_CUDA
#include <cuda_bf16.h>

#include "kernels/cuda/patch_apply.cuh"
#endif

namespace orbit::bench_gpu {

namespace rt = orbit::runtime;
using nlohmann::json;

namespace {

// The relocation (+ patch) kernel alone into layer 0 of `pool`'s pages `got`, without the op's per-call
// block-table validation and upload: seconds per call {with the patch, relocation only}; 0 where this build
// or device has no CUDA bfloat16 path.
std::pair<double, double> patch_kernel_alone([[maybe_unused]] const KernelBench& s,
                                             [[maybe_unused]] const FilledPool& pool,
                                             [[maybe_unused]] const std::vector<rt::PageId>& got,
                                             [[maybe_unused]] const rt::ops::PatchApplyInputs& in) {
  double kernel_s = 0, kernel_plain_s = 0;
#if ORBIT_OPS_HAVE_CUDA
  const rt::ModelConfig& c = s.m.config();
  const c10::Device dev = s.dev;
  const int reps = s.reps;
  const int64_t n = in.canonical.size(0), D = in.canonical.size(1), rank = s.rank;
  const at::Tensor& canonical = in.canonical;
  const at::Tensor& u = in.u;
  const at::Tensor& vt = in.vt;
  if (dev.is_cuda() && s.m.dtype() == at::kBFloat16) {
    namespace kc = orbit::kernels::cuda;
    const at::Tensor table = at::tensor(at::ArrayRef<int32_t>(got), at::kInt).to(dev);
    const at::Tensor layer0 = pool.pool->storage(0).select(0, 0);
    kc::PatchDims dims;
    dims.tokens = n;
    dims.width = D;
    dims.rank = rank;
    dims.rotate = true;
    dims.head_dim = c.head_dim;
    dims.rotary_dim = c.rope.rotary_dim;
    dims.interleaved = c.rope.layout == rt::RopeLayout::kInterleaved;
    kc::PatchSource<__nv_bfloat16> src;
    src.canonical = reinterpret_cast<const __nv_bfloat16*>(canonical.data_ptr<at::BFloat16>());
    src.u = u.data_ptr<float>();
    src.vt = vt.data_ptr<float>();
    src.cos = in.tables.cos.data_ptr<float>();
    src.sin = in.tables.sin.data_ptr<float>();
    kc::PatchTarget<__nv_bfloat16> tgt;
    tgt.base = reinterpret_cast<__nv_bfloat16*>(layer0.data_ptr<at::BFloat16>());
    tgt.block_table = table.data_ptr<int32_t>();
    tgt.page_size = 16;
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev.index()).stream();
    kernel_s =
        timed_loop(dev, reps, 50, [&] { (void)kc::patch_apply<__nv_bfloat16, __nv_bfloat16>(src, tgt, dims, stream); });
    dims.rank = 0;
    kernel_plain_s =
        timed_loop(dev, reps, 50, [&] { (void)kc::patch_apply<__nv_bfloat16, __nv_bfloat16>(src, tgt, dims, stream); });
  }
#endif
  return {kernel_s, kernel_plain_s};
}

// (e) Relocation + patch apply into pool pages against a device-to-device copy of the same bytes.
json reloc_kernels(const KernelBench& s) {
  const rt::Model* m = &s.m;
  const c10::Device dev = s.dev;
  const int reps = s.reps;
  const int64_t rank = s.rank;
  const rt::ModelConfig& c = m->config();
  const int64_t n = 65536, D = c.content_k_shape().width();
  FilledPool pool = fill_pool(*m, n, 16);
  const auto opts = at::TensorOptions().device(dev).dtype(m->dtype());
  const at::Tensor canonical = at::randn({n, D}, opts);
  const at::Tensor u = at::randn({n, rank}, opts.dtype(at::kFloat)), vt = at::randn({rank, D}, opts.dtype(at::kFloat));
  std::vector<rt::PageId> got;
  (void)pool.pool->allocate(n / 16, got);
  rt::ops::PageTarget target;
  target.kind = 0;
  target.layer = 0;
  target.block_table = got;
  rt::ops::PatchApplyInputs in;
  in.canonical = canonical;
  in.u = u;
  in.vt = vt;
  in.rotate = true;
  in.rope = c.rope;
  in.positions = at::arange(1000, 1000 + n, at::kLong);
  in.tables = rt::ops::patch_rope_tables(c.rope, in.positions, m->dtype(), dev);
  const double apply_s = timed_loop(dev, reps, 20, [&] { rt::ops::patch_apply_to_pages(*pool.pool, target, in); });
  rt::ops::PatchApplyInputs plain = in;
  plain.u = at::Tensor();
  plain.vt = at::Tensor();
  const double relocate_s =
      timed_loop(dev, reps, 20, [&] { rt::ops::patch_apply_to_pages(*pool.pool, target, plain); });
  at::Tensor dst = at::empty_like(canonical);
  const double copy_s = timed_loop(dev, reps, 20, [&] { dst.copy_(canonical); });
  const auto [kernel_s, kernel_plain_s] = patch_kernel_alone(s, pool, got, in);
  std::printf("relocation+patch kernel alone %.3f ms (%.0f%% of copy), relocation alone %.3f ms (%.0f%%)\n",
              kernel_s * 1e3, kernel_s > 0 ? 100 * copy_s / kernel_s : 0.0, kernel_plain_s * 1e3,
              kernel_plain_s > 0 ? 100 * copy_s / kernel_plain_s : 0.0);
  const double bytes = 2.0 * static_cast<double>(canonical.numel() * canonical.element_size());
  std::printf(
      "reloc+patch %lld tokens x %lld: %.3f ms, %.0f GB/s; relocation alone %.3f ms; d2d copy %.3f ms, "
      "%.0f GB/s; ratio %.2f (relocation alone %.2f)\n",
      (long long)n, (long long)D, apply_s * 1e3, bytes / apply_s / 1e9, relocate_s * 1e3, copy_s * 1e3,
      bytes / copy_s / 1e9, copy_s / apply_s, copy_s / relocate_s);
  return {{"tokens", n},
          {"width", D},
          {"rank", rank},
          {"patch_apply_s", apply_s},
          {"copy_s", copy_s},
          {"bytes_read_written", bytes},
          {"fraction_of_copy_bandwidth", copy_s / apply_s},
          {"relocate_only_s", relocate_s},
          {"kernel_patch_apply_s", kernel_s},
          {"kernel_relocate_only_s", kernel_plain_s},
          {"relocate_only_fraction_of_copy_bandwidth", copy_s / relocate_s},
          {"copy_bandwidth_bytes_s", bytes / copy_s}};
}

// Paged attention inputs over the first W tokens of `pool` (one layer), R queries, no patch.
rt::ops::PagedAttentionInputs attention_inputs(const KernelBench& s, const FilledPool& pool, int64_t W, int64_t R) {
  const rt::ModelConfig& c = s.m.config();
  const int64_t D = c.content_k_shape().width();
  const auto opts = at::TensorOptions().device(s.dev).dtype(s.m.dtype());
  rt::ops::PagedAttentionInputs pa;
  pa.q = at::randn({R, c.num_heads, c.head_dim}, opts);
  pa.k_pages = pool.pool->storage(0).select(0, 0).view({-1, D});
  pa.v_pages = pool.pool->storage(1).select(0, 0).view({-1, D});
  pa.slots = pool.slots.narrow(0, 0, W).to(s.dev, at::kInt);
  pa.k_tail = at::randn({R, c.num_kv_heads, c.head_dim}, opts);
  pa.v_tail = at::randn({R, c.num_kv_heads, c.head_dim}, opts);
  pa.positions = at::arange(W + R, at::TensorOptions().device(s.dev).dtype(at::kLong)).unsqueeze(1).contiguous();
  pa.inv_freq = rt::rope_inv_freq(c.rope, 0).to(s.dev);
  pa.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  return pa;
}

// (e) The paged attention kernels alone over the longest window, one layer: R = 1, 16 and 64 queries on
// each kernel (tiled, row-wise for decode, tensor cores for 16-bit dtypes), without and with patch rows
// on every token; K/V bytes read once against the copy bandwidth of the relocation measurement.
json paged_attention_kernel(const KernelBench& s) {
  const rt::ModelConfig& c = s.m.config();
  const int64_t D = c.content_k_shape().width(), W = s.max_w;
  if (!rt::ops::paged_attention_available(s.dev, c.num_heads, c.num_kv_heads, c.head_dim)) return json::object();
  FilledPool big = fill_pool(s.m, W, 16);
  const auto fopts = at::TensorOptions().device(s.dev).dtype(at::kFloat);
  const at::Tensor uk = at::randn({W, s.rank}, fopts), vtk = at::randn({s.rank, D}, fopts);
  orbit::kernels::cpu::PatchSegment seg;
  seg.length = W;
  seg.rank_k = seg.rank_v = s.rank;
  seg.u_k = seg.u_v = uk.data_ptr<float>();
  seg.vt_k = seg.vt_v = vtk.data_ptr<float>();
  const at::Tensor patch_of = at::zeros({W}, fopts.dtype(at::kInt));
  const at::Tensor segments = rt::ops::make_segment_table({seg}, s.dev);
  const double kv_bytes = 2.0 * static_cast<double>(W * D * c10::elementSize(s.m.dtype()));
  using K = rt::ops::PagedKernelChoice;
  const bool sixteen = s.m.dtype() != at::kFloat;
  json rows = json::array();
  for (const int64_t R : {int64_t{1}, int64_t{16}, int64_t{64}}) {
    rt::ops::PagedAttentionInputs pa = attention_inputs(s, big, W, R);
    for (const auto& [kernel, name] : std::vector<std::pair<K, const char*>>{
             {K::kTiled, "tiled"}, {K::kRowwise, "rowwise"}, {K::kTensorCore, "tensor_core"}}) {
      if ((kernel == K::kRowwise && R > 1) || (kernel == K::kTensorCore && !sixteen)) continue;
      pa.kernel = kernel;
      pa.patch_of = at::Tensor();
      pa.segments = at::Tensor();
      const Timing plain = timed_loop_spread(s.dev, s.reps, 20, [&] { (void)rt::ops::paged_attention(pa); });
      pa.patch_of = patch_of;
      pa.segments = segments;
      const Timing patched = timed_loop_spread(s.dev, s.reps, 20, [&] { (void)rt::ops::paged_attention(pa); });
      std::printf("paged attention W=%lld R=%2lld %-11s %s (%.0f GB/s of K/V), patch rows on every token %s\n",
                  (long long)W, (long long)R, name, ms(plain).c_str(), kv_bytes / plain.median / 1e9,
                  ms(patched).c_str());
      json row = {{"queries", R}, {"kernel", name}, {"kv_bytes_s", kv_bytes / plain.median}};
      put(row, "time", plain);
      put(row, "patched", patched);
      rows.push_back(row);
    }
  }
  json out = {
      {"paged_attention_window_tokens", W}, {"paged_attention_kv_bytes", kv_bytes}, {"paged_attention_kernels", rows}};
  // The decode figures (R = 1) under the names earlier reports used.
  for (const json& r : rows) {
    if (r["queries"] != 1) continue;
    if (r["kernel"] == "tiled") {
      out["paged_attention_s"] = r["time_s"];
      out["paged_attention_patched_s"] = r["patched_s"];
    }
    if (r["kernel"] == "rowwise") out["paged_attention_rowwise_s"] = r["time_s"];
  }
  return out;
}

}  // namespace

json kernels_section(const KernelBench& s) {
  json reloc = reloc_kernels(s);
  reloc.update(paged_attention_kernel(s));
  return reloc;
}

}  // namespace orbit::bench_gpu
