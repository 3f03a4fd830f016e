// Patch-apply CUDA kernel (kernels/cuda/patch_apply.cuh) against the CPU reference
// (kernels/cpu/patch_apply.h): raw cudaMalloc buffers and an explicit stream, as the kernel tier is
// used. Covers both layouts, partial rotary, head_dim 64/80/128/512 (512: the shared-memory opt-in),
// V widths that are not multiples of the column group, ranks 0 to 130 (several rank chunks, a partial
// last one), token counts around the tile size, float32/bfloat16 canonical and target, contiguous,
// in-place and paged targets (every slot not written must keep its sentinel), and launcher errors.
// The op on CUDA tensors is compared with the op on CPU when libtorch itself has CUDA.
// Without a CUDA device the binary exits 77 and CTest reports it skipped.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "cuda_test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/patch_apply.h"
#include "kernels/cuda/patch_apply.cuh"
#include "ops/patch_apply_op.h"

namespace {

namespace kcpu = orbit::kernels::cpu;
namespace kcuda = orbit::kernels::cuda;

using orbit::test::DeviceBuffer;
using orbit::test::Stream;

// Storage element conversions (host side).
float to_float(float v) { return v; }
float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
T from_float(float v);
template <>
float from_float<float>(float v) {
  return v;
}
template <>
__nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <typename T>
const char* type_name();
template <>
const char* type_name<float>() {
  return "float32";
}
template <>
const char* type_name<__nv_bfloat16>() {
  return "bfloat16";
}

struct Case {
  int64_t n, heads, head_dim, rotary_dim, rank;
  bool rotate, interleaved;
  bool paged = false;
  int64_t page_size = 16, first_slot = 0;

  int64_t width() const { return heads * head_dim; }
};

std::string describe(const Case& c) {
  return std::string(c.rotate ? "K " : "V ") + (c.interleaved ? "interleaved" : "half-split") +
         " n=" + std::to_string(c.n) + " H=" + std::to_string(c.heads) + " rotary=" + std::to_string(c.rotary_dim) +
         "/" + std::to_string(c.head_dim) + " rank=" + std::to_string(c.rank) +
         (c.paged ? " paged first_slot=" + std::to_string(c.first_slot) : " contiguous");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const int64_t ranks[] = {0, 1, 17, 64, 128, 130};
  const int64_t tokens[] = {1, 15, 16, 17, 300};
  size_t i = 0;
  for (bool interleaved : {true, false}) {
    for (int64_t head_dim : {64, 128, 80}) {
      for (int64_t rotary_dim : {head_dim, head_dim / 2}) {
        out.push_back({tokens[i % 5], 4, head_dim, rotary_dim, ranks[i % 6], true, interleaved});
        ++i;
      }
    }
  }
  for (int64_t width : {1000, 96, 512}) {  // V: a partial last column group, a single narrow one, exact
    out.push_back({tokens[i % 5], 1, width, 0, ranks[i % 6], false, false});
    ++i;
  }
  out.push_back({33, 2, 512, 64, 40, true, false});  // 66.5 KiB of shared memory: the opt-in path
  Case paged_k{45, 4, 64, 32, 20, true, true, true, 16, 5};
  Case paged_v{45, 3, 80, 0, 3, false, false, true, 8, 0};
  out.push_back(paged_k);
  out.push_back(paged_v);
  // The row kernel's shapes (rank <= 16, full rotary at head_dim 64/128, V widths of 64/128 multiples),
  // across more than one block of 128 tokens and a partial last one.
  out.push_back({300, 4, 128, 128, 16, true, false});
  out.push_back({129, 2, 64, 64, 5, true, true});
  out.push_back({257, 4, 128, 128, 0, true, true});
  out.push_back({130, 1, 512, 0, 16, false, false});
  out.push_back({70, 1, 192, 0, 3, false, false});
  out.push_back({200, 4, 128, 128, 16, true, false, true, 16, 7});
  out.push_back({140, 2, 64, 64, 1, true, false, true, 8, 3});
  return out;
}

struct HostInputs {
  std::vector<float> canonical, u, vt, cos, sin;
};

// canonical is returned already rounded through In, so the reference sees exactly what the kernel reads.
template <typename In>
HostInputs make_inputs(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> angle(0.0, 2e4);
  HostInputs h;
  h.canonical.resize(static_cast<size_t>(c.n * c.width()));
  for (float& v : h.canonical) v = to_float(from_float<In>(normal(rng)));
  h.u.resize(static_cast<size_t>(c.n * c.rank));
  for (float& v : h.u) v = 0.5f * normal(rng);
  h.vt.resize(static_cast<size_t>(c.rank * c.width()));
  for (float& v : h.vt) v = 0.5f * normal(rng);
  const size_t table = static_cast<size_t>(c.n * (c.rotate ? c.rotary_dim / 2 : 0));
  h.cos.resize(table);
  h.sin.resize(table);
  for (size_t i = 0; i < table; ++i) {
    const double a = angle(rng);
    h.cos[i] = static_cast<float>(std::cos(a));
    h.sin[i] = static_cast<float>(std::sin(a));
  }
  return h;
}

// A destination layout shared by the reference and the device: rows of width D, `rows` of them,
// and the row each token lands on.
struct Layout {
  int64_t rows = 0;
  std::vector<int32_t> block_table;
  std::vector<int64_t> row_of_token;
};

Layout make_layout(const Case& c, uint32_t seed) {
  Layout l;
  if (!c.paged) {
    l.rows = c.n;
    for (int64_t t = 0; t < c.n; ++t) l.row_of_token.push_back(t);
    return l;
  }
  const int64_t pages_used = (c.first_slot + c.n + c.page_size - 1) / c.page_size;
  const int64_t num_pages = pages_used + 3;  // some pages never named by the table
  std::vector<int32_t> ids(static_cast<size_t>(num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  l.block_table.assign(ids.begin(), ids.begin() + pages_used);
  l.rows = num_pages * c.page_size;
  for (int64_t t = 0; t < c.n; ++t) {
    const int64_t s = c.first_slot + t;
    l.row_of_token.push_back(l.block_table[static_cast<size_t>(s / c.page_size)] * c.page_size + s % c.page_size);
  }
  return l;
}

template <typename In, typename Out>
void run_case(const Case& c, uint32_t seed, const Stream& stream) {
  INFO(describe(c) << " " << type_name<In>() << " -> " << type_name<Out>());
  const HostInputs h = make_inputs<In>(c, seed);
  const Layout layout = make_layout(c, seed);
  const int64_t width = c.width();

  // Sentinel-filled destination (a value no patch produces), as Out and as the reference's float.
  std::vector<Out> initial(static_cast<size_t>(layout.rows * width), from_float<Out>(-777.0f));
  std::vector<float> expected(initial.size(), -777.0f);

  kcpu::PatchDims cpu_dims;
  cpu_dims.tokens = c.n;
  cpu_dims.width = width;
  cpu_dims.rank = c.rank;
  cpu_dims.rotate = c.rotate;
  cpu_dims.head_dim = c.head_dim;
  cpu_dims.rotary_dim = c.rotary_dim;
  cpu_dims.interleaved = c.interleaved;
  kcpu::PatchSource<float, float, float> cpu_src{h.canonical.data(), h.u.data(), h.vt.data(), h.cos.data(),
                                                 h.sin.data()};
  kcpu::PatchTarget<float> cpu_target;
  cpu_target.base = expected.data();
  if (c.paged) {
    cpu_target.block_table = layout.block_table.data();
    cpu_target.page_size = c.page_size;
    cpu_target.first_slot = c.first_slot;
  }
  kcpu::patch_apply(cpu_src, cpu_target, cpu_dims);

  std::vector<In> canonical_in(h.canonical.size());
  for (size_t i = 0; i < canonical_in.size(); ++i) canonical_in[i] = from_float<In>(h.canonical[i]);
  DeviceBuffer<In> canonical(canonical_in);
  DeviceBuffer<float> u(h.u), vt(h.vt), cos(h.cos), sin(h.sin);
  DeviceBuffer<Out> out(initial);
  DeviceBuffer<int32_t> table(layout.block_table);

  kcuda::PatchDims dims;
  dims.tokens = c.n;
  dims.width = width;
  dims.rank = c.rank;
  dims.rotate = c.rotate;
  dims.head_dim = c.head_dim;
  dims.rotary_dim = c.rotary_dim;
  dims.interleaved = c.interleaved;
  kcuda::PatchSource<In> src{canonical.get(), u.get(), vt.get(), cos.get(), sin.get()};
  kcuda::PatchTarget<Out> target;
  target.base = out.get();
  if (c.paged) {
    target.block_table = table.get();
    target.page_size = c.page_size;
    target.first_slot = c.first_slot;
  }
  CUDA_REQUIRE((kcuda::patch_apply<In, Out>(src, target, dims, stream.get())));
  CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
  const std::vector<Out> got = out.download();

  std::vector<char> written(static_cast<size_t>(layout.rows), 0);
  for (int64_t row : layout.row_of_token) written[static_cast<size_t>(row)] = 1;
  size_t bad = 0, stray = 0;
  double worst = 0.0;
  for (int64_t row = 0; row < layout.rows; ++row) {
    for (int64_t col = 0; col < width; ++col) {
      const size_t i = static_cast<size_t>(row * width + col);
      const float g = to_float(got[i]);
      if (!written[static_cast<size_t>(row)]) {
        if (g != to_float(initial[i])) ++stray;
        continue;
      }
      const float e = expected[i];
      // Float: FMA contraction and nothing else differs. bf16: plus one rounding (≤ 2^-8 relative).
      float tolerance = 1e-5f * (1.0f + std::fabs(e));
      if (sizeof(Out) == 2) tolerance += std::fabs(e) / 256.0f;
      worst = std::max(worst, static_cast<double>(std::fabs(g - e)));
      if (!(std::fabs(g - e) <= tolerance)) ++bad;
    }
  }
  INFO("worst |got - expected| = " << worst);
  CHECK(bad == 0);
  CHECK(stray == 0);
}

template <typename In, typename Out>
void run_all(uint32_t seed) {
  Stream stream;
  for (const Case& c : cases()) run_case<In, Out>(c, seed++, stream);
}

}  // namespace

TEST_CASE("CUDA patch apply float32 -> float32 matches the CPU reference", "[patch_apply][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  run_all<float, float>(1);
}

TEST_CASE("CUDA patch apply bfloat16 -> bfloat16 matches the CPU reference", "[patch_apply][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  run_all<__nv_bfloat16, __nv_bfloat16>(100);
}

TEST_CASE("CUDA patch apply mixed float32/bfloat16 canonical and target", "[patch_apply][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  run_all<float, __nv_bfloat16>(200);
  run_all<__nv_bfloat16, float>(300);
}

TEST_CASE("CUDA patch apply in place on a contiguous target", "[patch_apply][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  Stream stream;
  const Case c{37, 4, 64, 32, 24, true, false};
  const HostInputs h = make_inputs<float>(c, 7);
  std::vector<float> expected(h.canonical.size());
  kcpu::PatchDims cpu_dims{c.n, c.width(), c.rank, true, c.head_dim, c.rotary_dim, false};
  kcpu::patch_apply(
      kcpu::PatchSource<float, float, float>{h.canonical.data(), h.u.data(), h.vt.data(), h.cos.data(), h.sin.data()},
      kcpu::PatchTarget<float>{expected.data()}, cpu_dims);
  DeviceBuffer<float> buffer(h.canonical), u(h.u), vt(h.vt), cos(h.cos), sin(h.sin);
  kcuda::PatchDims dims{c.n, c.width(), c.rank, true, c.head_dim, c.rotary_dim, false};
  kcuda::PatchTarget<float> target;
  target.base = buffer.get();
  CUDA_REQUIRE((kcuda::patch_apply<float, float>(
      kcuda::PatchSource<float>{buffer.get(), u.get(), vt.get(), cos.get(), sin.get()}, target, dims, stream.get())));
  CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
  const std::vector<float> got = buffer.download();
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(got[i] - expected[i])));
  CHECK(worst < 1e-4);
}

TEST_CASE("CUDA patch apply launcher: empty input and invalid arguments", "[patch_apply][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  Stream stream;
  DeviceBuffer<float> buffer(std::vector<float>(256, 1.0f));
  kcuda::PatchSource<float> src{buffer.get(), buffer.get(), buffer.get(), buffer.get(), buffer.get()};
  kcuda::PatchTarget<float> target;
  target.base = buffer.get();
  auto status = [&](kcuda::PatchDims dims, kcuda::PatchSource<float> s, kcuda::PatchTarget<float> t) {
    return kcuda::patch_apply<float, float>(s, t, dims, stream.get());
  };
  const kcuda::PatchDims good{2, 64, 1, true, 32, 32, false};
  CHECK(status(kcuda::PatchDims{0, 64, 0, false}, kcuda::PatchSource<float>{}, target) == cudaSuccess);
  auto with = [&](auto mutate) {
    kcuda::PatchDims d = good;
    mutate(d);
    return d;
  };
  CHECK(status(with([](kcuda::PatchDims& d) { d.width = 0; }), src, target) == cudaErrorInvalidValue);
  CHECK(status(with([](kcuda::PatchDims& d) { d.rank = -1; }), src, target) == cudaErrorInvalidValue);
  CHECK(status(with([](kcuda::PatchDims& d) { d.rotary_dim = 31; }), src, target) == cudaErrorInvalidValue);
  CHECK(status(with([](kcuda::PatchDims& d) { d.rotary_dim = 34; }), src, target) == cudaErrorInvalidValue);
  CHECK(status(with([](kcuda::PatchDims& d) { d.head_dim = 48; }), src, target) == cudaErrorInvalidValue);
  kcuda::PatchSource<float> no_u = src;
  no_u.u = nullptr;
  CHECK(status(good, no_u, target) == cudaErrorInvalidValue);
  kcuda::PatchSource<float> no_cos = src;
  no_cos.cos = nullptr;
  CHECK(status(good, no_cos, target) == cudaErrorInvalidValue);
  kcuda::PatchTarget<float> bad_pages = target;
  bad_pages.block_table = reinterpret_cast<const int32_t*>(buffer.get());
  bad_pages.page_size = 0;
  CHECK(status(good, src, bad_pages) == cudaErrorInvalidValue);
  CUDA_REQUIRE(cudaStreamSynchronize(stream.get()));
  CHECK(buffer.download() == std::vector<float>(256, 1.0f));  // nothing was launched
}

TEST_CASE("patch_apply op on CUDA tensors matches the op on CPU", "[patch_apply][gpu]") {
  ORBIT_SKIP_WITHOUT_CUDA();
  if (!at::hasCUDA()) {
    WARN("skipped: this libtorch has no CUDA (the op's CUDA dispatch needs one)");
    return;
  }
  using orbit::runtime::ops::PatchApplyInputs;
  at::manual_seed(5);
  PatchApplyInputs cpu;
  cpu.canonical = at::randn({70, 4, 64}).to(at::kBFloat16);
  cpu.u = at::randn({70, 32}) * 0.5;
  cpu.vt = at::randn({32, 256}) * 0.5;
  cpu.rotate = true;
  cpu.rope.layout = orbit::runtime::RopeLayout::kHalfSplit;
  cpu.rope.head_dim = 64;
  cpu.rope.rotary_dim = 64;
  cpu.positions = at::arange(1000, 1070, at::kLong);
  PatchApplyInputs gpu = cpu;
  const at::Device device(at::kCUDA, 0);
  gpu.canonical = cpu.canonical.to(device);
  gpu.u = cpu.u.to(device);
  gpu.vt = cpu.vt.to(device);
  const at::Tensor expected = orbit::runtime::ops::patch_apply(cpu).to(at::kFloat);
  const at::Tensor got = orbit::runtime::ops::patch_apply(gpu).cpu().to(at::kFloat);
  // Both round once to bf16 from float sums that differ by FMA contraction: at most one bf16 ulp apart.
  const at::Tensor excess = (got - expected).abs() - expected.abs() / 128.0 - 1e-4;
  CHECK((excess > 0).sum().item<int64_t>() == 0);
}
