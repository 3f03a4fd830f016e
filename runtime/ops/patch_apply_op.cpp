// Patch-apply op: tensor checks and dispatch to kernels/cpu/patch_apply.h and
// kernels/cuda/patch_apply.cuh (the header states the contract).
#include "ops/patch_apply_op.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "kernels/cpu/patch_apply.h"
#include "orbit/common/error.h"
#include "orbit/runtime/rope.h"

#include "ops/cuda_dispatch.h"
#if ORBIT_OPS_HAVE_CUDA
#include "kernels/cuda/patch_apply.cuh"
#endif

namespace orbit::runtime::ops {
namespace {

// Multiply-adds per thread chunk: below this, splitting across threads costs more than it saves.
constexpr int64_t kGrainFlops = 1 << 16;

// Validated inputs in the form the kernels read.
struct Prepared {
  at::Tensor canonical;  // [n, D], contiguous
  at::Tensor u, vt;      // compute dtype, contiguous; undefined when the rank is 0
  at::Tensor cos, sin;   // compute dtype, contiguous, on the destination's device; rotate only
  kernels::cpu::PatchDims dims;
};

// Where the rows go: contiguous rows, or one layer's pages through a block table.
struct Destination {
  at::Tensor tensor;                 // contiguous: [n, ...]; paged: [num_pages, page_size, D]
  std::vector<int32_t> block_table;  // empty: contiguous
  int64_t page_size = 0;
  int64_t first_slot = 0;
};

at::ScalarType compute_dtype(at::ScalarType destination) {
  return destination == at::kDouble ? at::kDouble : at::kFloat;
}

bool is_storage_dtype(at::ScalarType dtype) { return dtype == at::kFloat || dtype == at::kBFloat16; }

// [begin, end) bytes spanned by a tensor's elements (ATen strides are non-negative); empty for none.
std::pair<std::uintptr_t, std::uintptr_t> byte_range(const at::Tensor& t) {
  if (!t.defined() || t.numel() == 0) return {0, 0};
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto begin = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  return {begin, begin + static_cast<std::uintptr_t>((last + 1) * t.element_size())};
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  const auto ra = byte_range(a);
  const auto rb = byte_range(b);
  if (ra.first == ra.second || rb.first == rb.second) return false;
  return ra.first < rb.second && rb.first < ra.second;
}

void check_dtypes(const char* fn, at::ScalarType canonical, at::ScalarType destination, const at::Device& device) {
  const bool f64 = canonical == at::kDouble && destination == at::kDouble && device.is_cpu();
  ORBIT_CHECK(f64 || (is_storage_dtype(canonical) && is_storage_dtype(destination)),
              fn << ": argument 'canonical' (" << canonical << ") and the destination (" << destination << ") on "
                 << device << " must each be float32 or bfloat16 (on CPU also both float64)");
}

void prepare_factors(const char* fn, const PatchApplyInputs& in, int64_t n, int64_t width, at::ScalarType compute,
                     Prepared& p) {
  ORBIT_CHECK(in.u.defined() == in.vt.defined(), fn << ": argument '" << (in.u.defined() ? "vt" : "u")
                                                    << "' is undefined but '" << (in.u.defined() ? "u" : "vt")
                                                    << "' is defined (pass both factors or neither)");
  if (!in.u.defined()) return;
  const at::Device device = in.canonical.device();
  ORBIT_CHECK(in.u.dim() == 2 && in.u.size(0) == n,
              fn << ": argument 'u' must be [n=" << n << ", m], got sizes " << in.u.sizes());
  ORBIT_CHECK(in.vt.dim() == 2 && in.vt.size(1) == width,
              fn << ": argument 'vt' must be [m, D=" << width << "], got sizes " << in.vt.sizes());
  ORBIT_CHECK(in.u.size(1) == in.vt.size(0),
              fn << ": argument 'u' has rank " << in.u.size(1) << " but 'vt' has " << in.vt.size(0) << " rows");
  ORBIT_CHECK(at::isFloatingType(in.u.scalar_type()),
              fn << ": argument 'u' must be floating, got " << in.u.scalar_type());
  ORBIT_CHECK(at::isFloatingType(in.vt.scalar_type()),
              fn << ": argument 'vt' must be floating, got " << in.vt.scalar_type());
  ORBIT_CHECK(in.u.device() == device,
              fn << ": argument 'u' is on " << in.u.device() << " but 'canonical' is on " << device);
  ORBIT_CHECK(in.vt.device() == device,
              fn << ": argument 'vt' is on " << in.vt.device() << " but 'canonical' is on " << device);
  p.dims.rank = in.u.size(1);
  if (p.dims.rank == 0) return;
  p.u = in.u.to(compute).contiguous();
  p.vt = in.vt.to(compute).contiguous();
}

void prepare_rotation(const char* fn, const PatchApplyInputs& in, int64_t n, int64_t width, at::ScalarType destination,
                      const at::Device& device, Prepared& p) {
  const RopeConfig& rope = in.rope;
  ORBIT_CHECK(rope.head_dim > 0 && width % rope.head_dim == 0,
              fn << ": rope.head_dim=" << rope.head_dim << " must be positive and divide D=" << width);
  ORBIT_CHECK(in.canonical.dim() == 2 || in.canonical.size(2) == rope.head_dim,
              fn << ": argument 'canonical' " << in.canonical.sizes() << " has head_dim " << in.canonical.size(2)
                 << " but rope.head_dim=" << rope.head_dim);
  ORBIT_CHECK(
      rope.rotary_dim > 0 && rope.rotary_dim % 2 == 0 && rope.rotary_dim <= rope.head_dim,
      fn << ": rope.rotary_dim=" << rope.rotary_dim << " must be even and in (0, head_dim=" << rope.head_dim << "]");
  const at::ScalarType table_dtype = rope_table_dtype(destination);
  RopeTables tables = in.tables;
  if (tables.cos.defined() || tables.sin.defined()) {
    ORBIT_CHECK(tables.cos.defined() && tables.sin.defined(), fn << ": argument 'tables' has only one of cos/sin");
    for (const at::Tensor* t : {&tables.cos, &tables.sin}) {
      const char* name = t == &tables.cos ? "tables.cos" : "tables.sin";
      ORBIT_CHECK(t->dim() == 2 && t->size(0) == n && t->size(1) == rope.rotary_dim / 2,
                  fn << ": argument '" << name << "' must be [n=" << n << ", rotary_dim/2=" << rope.rotary_dim / 2
                     << "], got sizes " << t->sizes());
      ORBIT_CHECK(t->scalar_type() == table_dtype,
                  fn << ": argument '" << name << "' must be " << table_dtype << ", got " << t->scalar_type());
      ORBIT_CHECK(t->device() == device,
                  fn << ": argument '" << name << "' is on " << t->device() << " but the destination is on " << device);
    }
  } else {
    ORBIT_CHECK(in.positions.defined(), fn << ": argument 'positions' is undefined (rotate needs positions or tables)");
    ORBIT_CHECK((in.positions.dim() == 1 || in.positions.dim() == 2) && in.positions.size(-1) == n,
                fn << ": argument 'positions' must be [n=" << n << "] (or [3, n] for M-RoPE), got sizes "
                   << in.positions.sizes());
    tables = patch_rope_tables(rope, in.positions, destination, device, in.window_len);
  }
  p.cos = tables.cos.contiguous();
  p.sin = tables.sin.contiguous();
  p.dims.rotate = true;
  p.dims.head_dim = rope.head_dim;
  p.dims.rotary_dim = rope.rotary_dim;
  p.dims.interleaved = rope.layout == RopeLayout::kInterleaved;
}

Prepared prepare(const char* fn, const PatchApplyInputs& in, at::ScalarType destination, const at::Device& device) {
  const at::Tensor& canonical = in.canonical;
  ORBIT_CHECK(canonical.defined(), fn << ": argument 'canonical' is undefined");
  ORBIT_CHECK(canonical.dim() == 2 || canonical.dim() == 3,
              fn << ": argument 'canonical' must be [n, D] or [n, H, head_dim], got sizes " << canonical.sizes());
  ORBIT_CHECK(canonical.device() == device,
              fn << ": argument 'canonical' is on " << canonical.device() << " but the destination is on " << device);
  check_dtypes(fn, canonical.scalar_type(), destination, device);
  const int64_t n = canonical.size(0);
  const int64_t width = canonical.dim() == 2 ? canonical.size(1) : canonical.size(1) * canonical.size(2);
  ORBIT_CHECK(width > 0, fn << ": argument 'canonical' has empty rows, sizes " << canonical.sizes());

  Prepared p;
  p.canonical = canonical.reshape({n, width}).contiguous();
  p.dims.tokens = n;
  p.dims.width = width;
  prepare_factors(fn, in, n, width, compute_dtype(destination), p);
  if (in.rotate) prepare_rotation(fn, in, n, width, destination, device, p);
  return p;
}

// ---- CPU ---------------------------------------------------------------------------------------

template <typename In, typename C, typename Out>
void apply_cpu_typed(const Prepared& p, const Destination& d) {
  kernels::cpu::PatchSource<In, C, C> src;
  src.canonical = p.canonical.data_ptr<In>();
  if (p.dims.rank > 0) {
    src.u = p.u.data_ptr<C>();
    src.vt = p.vt.data_ptr<C>();
  }
  if (p.dims.rotate) {
    src.cos = p.cos.data_ptr<C>();
    src.sin = p.sin.data_ptr<C>();
  }
  kernels::cpu::PatchTarget<Out> target;
  target.base = d.tensor.data_ptr<Out>();
  if (!d.block_table.empty()) {
    target.block_table = d.block_table.data();
    target.page_size = d.page_size;
    target.first_slot = d.first_slot;
  }
  const int64_t per_token = p.dims.width * (p.dims.rank + 1);
  const int64_t grain = std::max<int64_t>(1, kGrainFlops / per_token);
  at::parallel_for(0, p.dims.tokens, grain, [&](int64_t begin, int64_t end) {
    kernels::cpu::patch_apply<In, C, C, Out>(src, target, p.dims, begin, end);
  });
}

void apply_cpu(const Prepared& p, const Destination& d) {
  const at::ScalarType in = p.canonical.scalar_type();
  const at::ScalarType out = d.tensor.scalar_type();
  if (in == at::kDouble) return apply_cpu_typed<double, double, double>(p, d);  // checked: both float64
  if (in == at::kFloat && out == at::kFloat) return apply_cpu_typed<float, float, float>(p, d);
  if (in == at::kFloat && out == at::kBFloat16) return apply_cpu_typed<float, float, at::BFloat16>(p, d);
  if (in == at::kBFloat16 && out == at::kFloat) return apply_cpu_typed<at::BFloat16, float, float>(p, d);
  if (in == at::kBFloat16 && out == at::kBFloat16) return apply_cpu_typed<at::BFloat16, float, at::BFloat16>(p, d);
  ORBIT_FAIL("patch_apply: no CPU kernel for canonical " << in << " into " << out);  // unreachable after checks
}

// ---- CUDA --------------------------------------------------------------------------------------

#if ORBIT_OPS_HAVE_CUDA
template <typename In, typename Out>
cudaError_t launch_cuda(const Prepared& p, const Destination& d, const at::Tensor& block_table, cudaStream_t stream) {
  namespace kc = kernels::cuda;
  kc::PatchSource<In> src;
  src.canonical = static_cast<const In*>(p.canonical.data_ptr());
  if (p.dims.rank > 0) {
    src.u = p.u.data_ptr<float>();
    src.vt = p.vt.data_ptr<float>();
  }
  if (p.dims.rotate) {
    src.cos = p.cos.data_ptr<float>();
    src.sin = p.sin.data_ptr<float>();
  }
  kc::PatchTarget<Out> target;
  target.base = static_cast<Out*>(d.tensor.data_ptr());
  if (block_table.defined()) {
    target.block_table = block_table.data_ptr<int32_t>();
    target.page_size = d.page_size;
    target.first_slot = d.first_slot;
  }
  kc::PatchDims dims;
  dims.tokens = p.dims.tokens;
  dims.width = p.dims.width;
  dims.rank = p.dims.rank;
  dims.rotate = p.dims.rotate;
  dims.head_dim = p.dims.head_dim;
  dims.rotary_dim = p.dims.rotary_dim;
  dims.interleaved = p.dims.interleaved;
  return kc::patch_apply<In, Out>(src, target, dims, stream);
}
#endif

void apply_cuda(const char* fn, const Prepared& p, const Destination& d) {
#if ORBIT_OPS_HAVE_CUDA
  const at::Device device = d.tensor.device();
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  at::Tensor table;
  if (!d.block_table.empty()) {
    // A blocking copy on the current stream: the host vector may go away when this returns.
    table = at::tensor(at::ArrayRef<int32_t>(d.block_table), at::TensorOptions().dtype(at::kInt)).to(device);
  }
  using bf16 = __nv_bfloat16;
  const bool in_bf16 = p.canonical.scalar_type() == at::kBFloat16;
  const bool out_bf16 = d.tensor.scalar_type() == at::kBFloat16;
  cudaError_t status = cudaSuccess;
  if (!in_bf16 && !out_bf16) status = launch_cuda<float, float>(p, d, table, stream);
  if (!in_bf16 && out_bf16) status = launch_cuda<float, bf16>(p, d, table, stream);
  if (in_bf16 && !out_bf16) status = launch_cuda<bf16, float>(p, d, table, stream);
  if (in_bf16 && out_bf16) status = launch_cuda<bf16, bf16>(p, d, table, stream);
  ORBIT_CHECK(status == cudaSuccess, fn << ": CUDA kernel launch failed: " << cudaGetErrorString(status));
#else
  (void)p;
  ORBIT_FAIL(fn << ": the destination is on " << d.tensor.device()
                << " but this build has no CUDA patch-apply kernel (needs ORBIT_CUDA=ON and a libtorch built "
                   "with CUDA)");
#endif
}

void run(const char* fn, const Prepared& p, const Destination& d) {
  if (p.dims.tokens == 0) return;
  const at::Device device = d.tensor.device();
  if (device.is_cpu()) {
    apply_cpu(p, d);
  } else if (device.is_cuda()) {
    apply_cuda(fn, p, d);
  } else {
    ORBIT_FAIL(fn << ": unsupported device " << device);
  }
}

// The rows a kernel writes must not overlap what it reads (exact in place excepted by the caller).
void check_inputs_disjoint(const char* fn, const at::Tensor& written, const Prepared& p, bool canonical_too) {
  const std::pair<const at::Tensor*, const char*> inputs[] = {
      {&p.canonical, "canonical"}, {&p.u, "u"}, {&p.vt, "vt"}, {&p.cos, "tables.cos"}, {&p.sin, "tables.sin"}};
  for (const auto& [tensor, name] : inputs) {
    if (tensor == &p.canonical && !canonical_too) continue;
    ORBIT_CHECK(!overlaps(written, *tensor), fn << ": the destination overlaps argument '" << name << "'");
  }
}

}  // namespace

RopeTables patch_rope_tables(const RopeConfig& config, const at::Tensor& positions, at::ScalarType destination_dtype,
                             at::Device device, int64_t window_len) {
  return rope_tables(rope_angles(config, positions, window_len), rope_table_dtype(destination_dtype), device);
}

void patch_apply_out(const at::Tensor& out, const PatchApplyInputs& inputs) {
  const char* fn = "patch_apply";
  ORBIT_CHECK(out.defined(), fn << ": argument 'out' is undefined");
  ORBIT_CHECK(out.is_contiguous(), fn << ": argument 'out' must be contiguous (sizes " << out.sizes() << ", strides "
                                      << out.strides() << ")");
  const Prepared p = prepare(fn, inputs, out.scalar_type(), out.device());
  const int64_t n = p.dims.tokens;
  ORBIT_CHECK((out.dim() == 2 || out.dim() == 3) && out.size(0) == n && out.numel() == n * p.dims.width,
              fn << ": argument 'out' must be [n=" << n << ", D=" << p.dims.width << "] or [n, H, head_dim], got sizes "
                 << out.sizes());
  ORBIT_CHECK(!(inputs.rotate && out.dim() == 3 && out.size(2) != inputs.rope.head_dim),
              fn << ": argument 'out' " << out.sizes() << " has head_dim " << (out.dim() == 3 ? out.size(2) : 0)
                 << " but rope.head_dim=" << inputs.rope.head_dim);
  const bool in_place = out.data_ptr() == p.canonical.data_ptr() && out.scalar_type() == p.canonical.scalar_type();
  check_inputs_disjoint(fn, out, p, /*canonical_too=*/!in_place);
  Destination d;
  d.tensor = out;
  run(fn, p, d);
}

at::Tensor patch_apply(const PatchApplyInputs& inputs) {
  ORBIT_CHECK(inputs.canonical.defined(), "patch_apply: argument 'canonical' is undefined");
  at::Tensor out =
      at::empty(inputs.canonical.sizes(), inputs.canonical.options().memory_format(at::MemoryFormat::Contiguous));
  patch_apply_out(out, inputs);
  return out;
}

void patch_apply_to_pages(KVPool& pool, const PageTarget& target, const PatchApplyInputs& inputs) {
  const char* fn = "patch_apply_to_pages";
  ORBIT_CHECK(target.kind >= 0 && target.kind < pool.num_kinds(),
              fn << ": target.kind " << target.kind << " out of range [0, " << pool.num_kinds() << ")");
  const at::Tensor& storage = pool.storage(target.kind);  // [num_layers, num_pages, page_size, width]
  ORBIT_CHECK(target.layer >= 0 && target.layer < storage.size(0),
              fn << ": target.layer " << target.layer << " out of range [0, " << storage.size(0) << ")");
  ORBIT_CHECK(storage.is_contiguous(), fn << ": the pool's storage of kind " << target.kind << " is not contiguous");
  ORBIT_CHECK(target.first_slot >= 0, fn << ": target.first_slot must be >= 0, got " << target.first_slot);
  const at::Tensor layer = storage.select(0, target.layer);  // [num_pages, page_size, width], contiguous
  const Prepared p = prepare(fn, inputs, storage.scalar_type(), storage.device());
  ORBIT_CHECK(p.dims.width == storage.size(3), fn << ": argument 'canonical' has D=" << p.dims.width
                                                  << " values per token but the pool's kind " << target.kind
                                                  << " has width " << storage.size(3));
  const int64_t n = p.dims.tokens;
  if (n == 0) return;

  const int64_t page_size = pool.page_size();
  const int64_t first_index = target.first_slot / page_size;
  const int64_t last_index = (target.first_slot + n - 1) / page_size;
  ORBIT_CHECK(static_cast<int64_t>(target.block_table.size()) > last_index,
              fn << ": argument 'block_table' has " << target.block_table.size() << " pages but slots ["
                 << target.first_slot << ", " << target.first_slot + n << ") need " << last_index + 1);
  std::vector<char> seen(static_cast<size_t>(pool.num_pages()), 0);  // O(pages), no tree: large chunks are cheap
  for (int64_t i = first_index; i <= last_index; ++i) {
    const PageId page = target.block_table[static_cast<size_t>(i)];
    ORBIT_CHECK(page >= 0 && page < pool.num_pages(), fn << ": argument 'block_table'[" << i << "] = " << page
                                                         << " is out of range [0, " << pool.num_pages() << ")");
    const int32_t refs = pool.ref_count(page);
    ORBIT_CHECK(refs > 0, fn << ": argument 'block_table'[" << i << "] = page " << page << " is free");
    ORBIT_CHECK(refs == 1, fn << ": argument 'block_table'[" << i << "] = page " << page << " is shared (ref_count "
                              << refs << "); copy it on write before writing");
    ORBIT_CHECK(!std::exchange(seen[static_cast<size_t>(page)], char{1}),
                fn << ": argument 'block_table'[" << i << "] = page " << page << " appears twice in the written range");
  }
  check_inputs_disjoint(fn, layer, p, /*canonical_too=*/true);

  Destination d;
  d.tensor = layer;
  d.block_table.assign(target.block_table.begin(), target.block_table.end());
  d.page_size = page_size;
  d.first_slot = target.first_slot;
  run(fn, p, d);
}

}  // namespace orbit::runtime::ops
