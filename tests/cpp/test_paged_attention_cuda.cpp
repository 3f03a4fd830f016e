// The paged-attention CUDA kernel (through its op) against the CPU reference on the same inputs:
// float32, bfloat16 and float16; head_dim 64 and 128; GQA groups 1 to 8; decode and multi-token
// queries; half-split, interleaved and M-RoPE rotation; patched segments; long pasts that split across
// many blocks; an empty paged part. And the cuBLAS attention of a short query over a long past. Exits 77 (skipped)
// without a CUDA device (catch_main_gpu.cpp).
#include "orbit_catch.h"

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "ops/paged_attention_op.h"
#include "ops/past_attention_op.h"
#include "orbit/runtime/rope.h"

namespace {

namespace rt = orbit::runtime;

struct Case {
  int64_t heads, kv_heads, head_dim, queries, paged, tail, rank;
  bool interleaved, mrope;
};

double rel_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kCPU, at::kDouble), w = want.to(at::kCPU, at::kDouble);
  return (g - w).norm().item<double>() / w.norm().item<double>();
}

void run_case(const Case& k, at::ScalarType dtype, uint64_t seed) {
  at::manual_seed(static_cast<int64_t>(seed));
  const int64_t d = k.head_dim, W = k.kv_heads * d, rows = k.paged * 2 + 8, S = k.paged + k.tail;
  rt::RopeConfig rope;
  rope.head_dim = rope.rotary_dim = d;
  rope.theta = 1e6;
  rope.layout = k.interleaved ? rt::RopeLayout::kInterleaved : rt::RopeLayout::kHalfSplit;
  rope.max_position_embeddings = 1 << 20;
  if (k.mrope) rope.mrope_section = {d / 8, d / 4, d / 2 - d / 8 - d / 4};
  // Inputs rounded to the tested dtype once, so both sides read identical values.
  auto rnd = [&](at::IntArrayRef shape, double scale = 1.0) {
    return (at::randn(shape) * scale).to(dtype).to(at::kFloat);
  };
  rt::ops::PagedAttentionInputs cpu;
  cpu.q = rnd({k.queries, k.heads, d});
  cpu.k_pages = rnd({rows, W});
  cpu.v_pages = rnd({rows, W});
  cpu.slots = at::randperm(rows, at::kLong).narrow(0, 0, k.paged).to(at::kInt);
  cpu.k_tail = rnd({k.tail, k.kv_heads, d});
  cpu.v_tail = rnd({k.tail, k.kv_heads, d});
  const at::Tensor grid = at::randint(0, 200000, {k.mrope ? 3 : 1, S}, at::kLong);
  cpu.positions = grid.t().contiguous();
  cpu.inv_freq = rt::rope_inv_freq(rope, 0);
  if (k.mrope) {
    std::vector<int8_t> rows_of;
    for (int r = 0; r < 3; ++r)
      rows_of.insert(rows_of.end(), static_cast<size_t>(rope.mrope_section[r]), static_cast<int8_t>(r));
    cpu.row_of_freq = at::tensor(at::ArrayRef<int8_t>(rows_of), at::kChar);
  }
  cpu.interleaved = k.interleaved;
  cpu.scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int64_t n = k.paged / 3;
  // Factors rounded to the dtype as well, so that a 16-bit pool's factors (held in its own type) and their
  // float32 copies are the same numbers.
  const at::Tensor uk = rnd({n, k.rank}), vtk = rnd({k.rank, W}, 0.1), uv = rnd({n, k.rank}),
                   vtv = rnd({k.rank, W}, 0.1);
  const bool patched = k.rank > 0 && n > 0;

  // as_pages: the factors in the pages' dtype (PatchSegment::factors_as_pages), else float32.
  auto segments_on = [&](const at::Device& dev, std::vector<at::Tensor>& keep, bool as_pages = false) {
    const at::ScalarType t = as_pages ? dtype : at::kFloat;
    keep = {uk.to(dev, t), vtk.to(dev, t), uv.to(dev, t), vtv.to(dev, t)};
    orbit::kernels::cpu::PatchSegment seg;
    seg.first = 2;
    seg.length = n;
    seg.rank_k = seg.rank_v = k.rank;
    seg.u_k = keep[0].data_ptr();
    seg.vt_k = keep[1].data_ptr();
    seg.u_v = keep[2].data_ptr();
    seg.vt_v = keep[3].data_ptr();
    seg.factors_as_pages = as_pages;
    return rt::ops::make_segment_table({seg}, dev);
  };
  std::vector<at::Tensor> keep_cpu, keep_gpu;
  if (patched) {
    cpu.patch_of = at::full({k.paged}, -1, at::kInt);
    cpu.patch_of.narrow(0, 2, std::min(n, k.paged - 2)).fill_(0);
    cpu.segments = segments_on(at::kCPU, keep_cpu);
  }
  const at::Tensor want = rt::ops::paged_attention(cpu);

  const at::Device dev(at::kCUDA, 0);
  rt::ops::PagedAttentionInputs gpu = cpu;
  gpu.q = cpu.q.to(dev, dtype);
  gpu.k_pages = cpu.k_pages.to(dev, dtype);
  gpu.v_pages = cpu.v_pages.to(dev, dtype);
  gpu.slots = cpu.slots.to(dev);
  gpu.k_tail = cpu.k_tail.to(dev, dtype);
  gpu.v_tail = cpu.v_tail.to(dev, dtype);
  gpu.positions = cpu.positions.to(dev);
  gpu.inv_freq = cpu.inv_freq.to(dev);
  if (cpu.row_of_freq.defined()) gpu.row_of_freq = cpu.row_of_freq.to(dev);
  if (patched) {
    gpu.patch_of = cpu.patch_of.to(dev);
    gpu.segments = segments_on(dev, keep_gpu);
  }
  using Kernel = rt::ops::PagedKernelChoice;
  std::vector<at::Tensor> keep_pages;
  for (int pass = 0; pass < (patched && dtype != at::kFloat ? 2 : 1); ++pass) {
    for (const Kernel kernel : {Kernel::kTiled, Kernel::kRowwise, Kernel::kTensorCore, Kernel::kAuto}) {
      const bool mma = kernel == Kernel::kTensorCore;
      // The second pass reads the same factors held in the pages' 16-bit type.
      if (pass == 1 && kernel == Kernel::kTiled) gpu.segments = segments_on(dev, keep_pages, true);
      if (mma && dtype == at::kFloat) {
        gpu.kernel = kernel;
        CHECK_THROWS_WITH(rt::ops::paged_attention(gpu), Catch::Matchers::Contains("needs bfloat16 or float16"));
        continue;
      }
      gpu.kernel = kernel;
      const at::Tensor got = rt::ops::paged_attention(gpu);
      REQUIRE(got.scalar_type() == dtype);
      // float32: the kernel and the reference differ only in summation order and the fast exp/sincos
      // intrinsics (a few float32 ulps). bf16/f16: the output is rounded once to the dtype (unit roundoff
      // 2^-9 / 2^-12), everything before it is float32 on identical inputs. The tensor-core kernel also
      // rounds the rotated (and patched) keys, the patched values and the probabilities once each.
      const double tol = dtype == at::kFloat      ? 2e-5
                         : dtype == at::kBFloat16 ? (mma || kernel == Kernel::kAuto ? 1.5e-2 : 8e-3)
                                                  : (mma || kernel == Kernel::kAuto ? 4e-3 : 1.5e-3);
      const double err = rel_error(got, want);
      const char* names[] = {" auto", " tiled", " rowwise", " tensor cores"};
      INFO(c10::toString(dtype) << " H " << k.heads << "/" << k.kv_heads << " d " << d << " R " << k.queries << " S_p "
                                << k.paged << " S_t " << k.tail << " rank " << k.rank
                                << (k.interleaved ? " interleaved" : "") << (k.mrope ? " mrope" : "")
                                << names[static_cast<int>(kernel)] << (pass == 1 ? " factors in dtype" : "")
                                << ": rel error " << err);
      CHECK(err < tol);
    }
  }
}

}  // namespace

TEST_CASE("paged attention CUDA kernel == CPU reference", "[paged][cuda]") {
  const std::vector<Case> cases = {
      {28, 4, 128, 1, 3000, 1, 8, false, false},  // Qwen2.5-7B shape, decode over a long paged past
      {8, 8, 64, 1, 200, 1, 0, false, false},     // MHA, no patch
      {8, 1, 64, 4, 700, 4, 4, true, false},      // G = 8, interleaved, several queries
      {4, 2, 128, 3, 64, 5, 2, false, true},      // M-RoPE, a tail longer than the queries
      {14, 2, 64, 2, 0, 2, 0, false, false},      // no paged part at all
      {4, 4, 128, 16, 5000, 16, 16, false, false},
      // Query-sized inputs (the tensor-core kernel's rows span several blocks): Qwen2.5-7B's 28/4 heads
      // with R = 64; G = 8 interleaved with R = 33 (264 rows, 5 row blocks); M-RoPE with R = 40.
      {28, 4, 128, 64, 3000, 64, 8, false, false},
      {8, 1, 64, 33, 700, 40, 4, true, false},
      {4, 2, 128, 40, 64, 45, 2, false, true},
  };
  uint64_t seed = 1;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const Case& k : cases) run_case(k, dtype, seed++);
  }
}

namespace {

// Causal attention of the last R of S keys, in double on the CPU: the reference for past_attention.
at::Tensor past_reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  const int64_t R = q.size(0), H = q.size(1), S = k.size(0), Hkv = k.size(1), G = H / Hkv;
  const at::Tensor qd = q.to(at::kCPU, at::kDouble), kd = k.to(at::kCPU, at::kDouble), vd = v.to(at::kCPU, at::kDouble);
  at::Tensor out = at::empty({R, H, v.size(2)}, qd.options());
  for (int64_t h = 0; h < H; ++h) {
    const at::Tensor scores = at::matmul(qd.select(1, h), kd.select(1, h / G).t()) * scale;  // [R, S]
    const at::Tensor key = at::arange(S, at::kLong).unsqueeze(0), last = at::arange(S - R, S, at::kLong).unsqueeze(1);
    out.select(1, h).copy_(at::matmul(at::softmax(scores.masked_fill(key > last, -INFINITY), -1), vd.select(1, h / G)));
  }
  return out.reshape({R, H * v.size(2)});
}

}  // namespace

TEST_CASE("past attention (cuBLAS GEMMs) == causal attention of the last R keys", "[past][cuda]") {
  // bfloat16/float16 inputs are exact on both sides; the GPU rounds the probabilities and the output to
  // the dtype once each (flash attention's numerics): relative L2 error ~ 2^-8 for bfloat16.
  for (const at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    for (const auto& [R, S, H, Hkv, d, dv] : std::vector<std::array<int64_t, 6>>{
             {1, 300, 8, 2, 64, 64}, {5, 300, 8, 2, 64, 64}, {16, 2000, 28, 4, 128, 128}, {3, 3, 4, 4, 32, 16}}) {
      at::manual_seed(R * 1000 + S);
      const auto opts = at::TensorOptions().device(at::kCUDA).dtype(dtype);
      const at::Tensor q = at::randn({R, H, d}, opts), k = at::randn({S, Hkv, d}, opts),
                       v = at::randn({S, Hkv, dv}, opts);
      const double scale = 1.0 / std::sqrt(static_cast<double>(d));
      const at::Tensor got = orbit::runtime::ops::past_attention(q, k, v, scale);
      REQUIRE(got.sizes() == at::IntArrayRef({R, H * dv}));
      const double err = rel_error(got, past_reference(q, k, v, scale));
      INFO(dtype << " R=" << R << " S=" << S << " H=" << H << "/" << Hkv << " rel error " << err);
      CHECK(err < (dtype == at::kBFloat16 ? 1.5e-2 : 2e-3));
    }
  }
  const at::Tensor f = at::randn({2, 4, 32}, at::TensorOptions().device(at::kCUDA));
  CHECK_THROWS_WITH(orbit::runtime::ops::past_attention(f, f, f, 1.0), Catch::Matchers::Contains("needs bfloat16"));
}
