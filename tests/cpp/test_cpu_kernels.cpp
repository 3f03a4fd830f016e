// The AVX2/FMA CPU kernels, reached through their ops as the forward reaches them:
// - decode attention (kernels/cpu/cached_attention_avx2.h) against the portable kernel
//   (kernels/cpu/cached_attention.h) on the same buffers: GQA widths, head sizes from 8 to 128 with d_k ≠ d_v,
//   several rows per member, members that see from one key to hundreds (lengths on and off multiples of 8),
//   peaked and flat softmaxes; buffers read in place at a prefill's strides against their dense copies;
// - products of a few rows (kernels/cpu/small_gemm_avx2.h, dense()) against at::linear: the model shapes,
//   widths off multiples of 4, bias, and a row's result the same bits whatever rows share its call; their
//   outputs (and rms_norm's) reused only once nothing holds them.
// Skipped where the ops do not run these kernels (another CPU, another compiler, ORBIT_CPU_KERNELS=portable).
#include "orbit_catch.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cached_attention.h"
#include "ops/cached_attention_op.h"
#include "ops/cpu_features.h"
#include "ops/small_gemm_op.h"
#include "src/attention.h"

const char* orbit_test_skip_reason() {
  return orbit::runtime::ops::avx2_kernels_run()
             ? nullptr
             : "the CPU runs the portable kernels here (no AVX2/FMA kernels in this build or CPU, or "
               "ORBIT_CPU_KERNELS=portable)";
}

namespace {

namespace ops = orbit::runtime::ops;
namespace kcpu = orbit::kernels::cpu;

struct Case {
  int64_t heads, kv_heads, dk, dv, queries;
  std::vector<int64_t> lengths;
  double q_scale;  // larger: more peaked softmaxes
};

// Runs the op and the portable kernel on the same random buffers; returns the largest difference relative
// to 1 + |reference|, and checks that rows outside the members are left as they were.
double compare(const Case& c, uint64_t seed) {
  at::manual_seed(static_cast<int64_t>(seed));
  const int64_t B = static_cast<int64_t>(c.lengths.size()), slots = B + 2;
  int64_t capacity = 8;
  for (int64_t n : c.lengths) capacity = std::max(capacity, n + c.queries + 3);
  ops::CachedAttentionInputs in;
  in.queries = c.queries;
  in.scale = 1.0 / std::sqrt(static_cast<double>(c.dk));
  in.keys = at::randn({slots, c.kv_heads, capacity, c.dk});
  in.values = at::randn({slots, c.kv_heads, capacity, c.dv});
  const int64_t N = B * c.queries + 2;  // two rows belong to no member
  in.q = at::randn({N, c.heads, c.dk}) * c.q_scale;
  for (int64_t b = 0; b < B; ++b) {
    in.slots.push_back(slots - 1 - b);  // not in batch order
    in.lengths.push_back(c.lengths[static_cast<std::size_t>(b)]);
    in.first_row.push_back(1 + b * c.queries);
  }
  at::Tensor out = at::full({N, c.heads * c.dv}, 7.0f);
  ops::cached_attention(in, out);

  at::Tensor ref = at::full({N, c.heads * c.dv}, 7.0f);
  kcpu::CachedAttentionDims d;
  d.members = B;
  d.queries = c.queries;
  d.heads = c.heads;
  d.kv_heads = c.kv_heads;
  d.dk = c.dk;
  d.dv = c.dv;
  d.capacity = capacity;
  d.scale = static_cast<float>(in.scale);
  kcpu::CachedAttentionArgs<float> a{in.q.data_ptr<float>(), in.keys.data_ptr<float>(), in.values.data_ptr<float>(),
                                     in.slots.data(),        in.lengths.data(),         in.first_row.data(),
                                     ref.data_ptr<float>()};
  a.key_strides = {in.keys.stride(0), in.keys.stride(1), in.keys.stride(2)};
  a.value_strides = {in.values.stride(0), in.values.stride(1), in.values.stride(2)};
  kcpu::cached_attention_cpu(a, d, 0, d.items());
  CHECK(at::equal(out.narrow(0, 0, 1), ref.narrow(0, 0, 1)));
  CHECK(at::equal(out.narrow(0, N - 1, 1), ref.narrow(0, N - 1, 1)));
  CHECK(at::isfinite(out).all().item<bool>());
  return ((out - ref).abs() / (ref.abs() + 1)).max().item<double>();
}

}  // namespace

TEST_CASE("the AVX2 decode attention kernel equals the portable kernel", "[cached_attention][avx2]") {
  const std::vector<Case> cases = {
      {8, 4, 16, 16, 1, {0, 7, 8, 9, 45, 191}, 1.0},  // TinyStories-656K's heads
      {8, 8, 8, 8, 1, {0, 1, 15, 16, 17}, 1.0},       // stories260K's head size
      {8, 2, 64, 64, 3, {0, 5, 64, 300}, 1.0},        // several rows per member, G = 4
      {4, 1, 128, 128, 2, {3, 130, 257}, 1.0},        // one KV head, 128-wide
      {6, 3, 32, 16, 1, {11, 40}, 1.0},               // d_k ≠ d_v
      {4, 2, 16, 40, 2, {6, 23}, 1.0},                // d_v 40: the 32 + 8 value blocks
      {8, 4, 16, 16, 1, {0, 9, 100}, 12.0},           // peaked softmaxes (scores far below the top)
      {8, 4, 16, 16, 1, {31, 100}, 0.0},              // flat: every key weighs the same
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    INFO("heads " << c.heads << "/" << c.kv_heads << " dk " << c.dk << " dv " << c.dv << " R " << c.queries
                  << " q scale " << c.q_scale);
    CHECK(compare(c, seed++) < 2e-5);
  }
}

TEST_CASE("a row's decode attention has the same bits among many rows as alone", "[cached_attention][avx2]") {
  // d_v of 8 and 16 sum several rows' values side by side: each row must still sum its keys in its own order,
  // as a call of fewer rows than the kernel interleaves (one head of one member, R < 4) sums them.
  for (const int64_t d : {8, 16, 24}) {
    for (const int64_t R : {1, 3}) {
      INFO("d " << d << " R " << R);
      at::manual_seed(d * 10 + R);
      const std::vector<int64_t> lengths = {0, 5, 300, 17, 64, 1, 129};
      const int64_t B = static_cast<int64_t>(lengths.size()), H = 4, Ha = 2, capacity = 310;
      ops::CachedAttentionInputs all;
      all.queries = R;
      all.scale = 0.35;
      all.q = at::randn({B * R, H, d});
      all.keys = at::randn({B, Ha, capacity, d});
      all.values = at::randn({B, Ha, capacity, d});
      for (int64_t b = 0; b < B; ++b) {
        all.slots.push_back(b);
        all.lengths.push_back(lengths[static_cast<std::size_t>(b)]);
        all.first_row.push_back(b * R);
      }
      at::Tensor together = at::empty({B * R, H * d});
      ops::cached_attention(all, together);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          ops::CachedAttentionInputs one = all;
          one.q = all.q.narrow(0, b * R, R).narrow(1, h, 1).contiguous();
          one.keys = all.keys.narrow(0, b, 1).narrow(1, h / (H / Ha), 1);
          one.values = all.values.narrow(0, b, 1).narrow(1, h / (H / Ha), 1);
          one.slots = {0};
          one.lengths = {lengths[static_cast<std::size_t>(b)]};
          one.first_row = {0};
          at::Tensor alone = at::empty({R, d});
          ops::cached_attention(one, alone);
          CHECK(at::equal(alone, together.narrow(0, b * R, R).narrow(1, h * d, d)));
        }
      }
    }
  }
}

TEST_CASE("buffers read in place at other strides give what their dense copies give", "[cached_attention]") {
  // A prefill's keys [B, S, H_a, d] read as [B, H_a, S, d]: rows H_a·d apart, heads d apart.
  for (const int64_t dk : {16, 12}) {  // the AVX2 kernel and the portable one
    INFO("d " << dk);
    at::manual_seed(dk);
    const int64_t B = 3, S = 37, Ha = 4, H = 8, R = 5;
    ops::CachedAttentionInputs in;
    in.queries = R;
    in.scale = 0.3;
    in.q = at::randn({B * R, H, dk});
    in.keys = at::randn({B, S, Ha, dk}).permute({0, 2, 1, 3});
    in.values = at::randn({B, S, Ha, dk}).permute({0, 2, 1, 3});
    REQUIRE_FALSE(in.keys.is_contiguous());
    for (int64_t b = 0; b < B; ++b) {
      in.slots.push_back(b);
      in.lengths.push_back(S - R);
      in.first_row.push_back(b * R);
    }
    at::Tensor strided = at::empty({B * R, H * dk});
    ops::cached_attention(in, strided);
    ops::CachedAttentionInputs dense = in;
    dense.keys = in.keys.contiguous();
    dense.values = in.values.contiguous();
    at::Tensor want = at::empty({B * R, H * dk});
    ops::cached_attention(dense, want);
    CHECK(at::equal(strided, want));
  }
}

TEST_CASE("head sizes off multiples of 8 take the portable kernel through the op", "[cached_attention]") {
  CHECK_FALSE(ops::cached_attention_vectorised(at::kFloat, 12, 16));
  CHECK_FALSE(ops::cached_attention_vectorised(at::kFloat, 16, 20));
  CHECK_FALSE(ops::cached_attention_vectorised(at::kDouble, 16, 16));
  CHECK_FALSE(ops::cached_attention_vectorised(at::kBFloat16, 16, 16));
  CHECK(compare({4, 2, 12, 20, 2, {0, 13, 50}, 1.0}, 99) == 0.0);  // the same kernel on both sides
}

TEST_CASE("dense() over a few rows: the AVX2 product equals at::linear, and a row does not depend on its batch",
          "[small_gemm][avx2]") {
  namespace rt = orbit::runtime;
  struct Shape {
    int64_t n, k;
  };
  // K off multiples of 8 too (stories260K's MLP down-projection: K = 172): the last K % 8 columns masked.
  for (const Shape& sh : std::vector<Shape>{
           {2048, 128}, {384, 128}, {128, 384}, {64, 128}, {30, 16}, {7, 8}, {64, 172}, {172, 64}, {9, 3}, {5, 13}}) {
    for (int64_t M : {1, 2, 3, 5, 16}) {
      INFO("N " << sh.n << " K " << sh.k << " M " << M);
      at::manual_seed(sh.n * 31 + M);
      const at::Tensor w = at::randn({sh.n, sh.k}), b = at::randn({sh.n}), x = at::randn({M, sh.k});
      REQUIRE(ops::small_gemm_takes(x, w, b));
      const at::Tensor y = rt::detail::dense(x, w), yb = rt::detail::dense(x, w, b);
      const at::Tensor ref = at::linear(x, w), refb = at::linear(x, w, b);
      // Float32 rounding, relative to the sum of the products' magnitudes (sums cancel): each side's sum of
      // K <= 384 products errs by about sqrt(K)·2^-24 = 1.2e-6 of it, whatever order the BLAS core picks;
      // worst seen 2.6e-7 (ATen's no-AVX, AVX2 and AVX-512 kernels, BLAS cores, 1 to 8 threads). A product
      // with a wrong row or column is off by about 1/sqrt(K) of the scale.
      const at::Tensor scale = at::linear(x.abs(), w.abs()) + 1;
      CHECK(((y - ref).abs() / scale).max().item<double>() < 4e-6);
      CHECK(((yb - refb).abs() / (scale + b.abs())).max().item<double>() < 4e-6);
      for (int64_t m = 0; m < M; ++m) CHECK(at::equal(rt::detail::dense(x.narrow(0, m, 1), w, b), yb.narrow(0, m, 1)));
    }
  }
  const at::Tensor x3 = at::randn({2, 3, 64}), w3 = at::randn({24, 64});  // leading dims kept
  const at::Tensor scale3 = at::linear(x3.abs(), w3.abs()) + 1;           // the bound above's scale, K = 64
  CHECK(((rt::detail::dense(x3, w3) - at::linear(x3, w3)).abs() / scale3).max().item<double>() < 4e-6);
  CHECK(rt::detail::dense(x3, w3).sizes() == at::IntArrayRef({2, 3, 24}));
}

// The outputs of dense() and rms_norm() on these paths come from reused buffers (reused_cpu_output): a result
// still held, or whose storage a view still holds, is never written by a later call; one let go is reused.
TEST_CASE("dense() and rms_norm() reuse an output only once nothing holds it", "[small_gemm][avx2]") {
  namespace rt = orbit::runtime;
  const at::Tensor w = at::randn({23, 64}), x = at::randn({3, 64}), gain = at::randn({64});
  at::Tensor first = rt::detail::dense(x, w);
  const void* where = first.data_ptr();
  const at::Tensor want = first.clone();
  CHECK(first.use_count() == 2);  // this and the kept buffer
  at::Tensor second = rt::detail::dense(x * 2, w);
  CHECK(second.data_ptr() != where);
  at::Tensor view = first.narrow(0, 1, 1);
  first.reset();
  at::Tensor third = rt::detail::dense(x * 3, w);  // the view holds first's storage
  CHECK(third.data_ptr() != where);
  CHECK(at::equal(view, want.narrow(0, 1, 1)));
  view.reset();
  third.reset();
  CHECK(rt::detail::dense(x * 4, w).data_ptr() == where);  // let go: reused
  CHECK(at::equal(second, rt::detail::dense(x * 2, w)));
  const at::Tensor norm = rt::detail::rms_norm(x, gain, 1e-5), norm_want = norm.clone();
  CHECK(norm.use_count() == 2);
  const at::Tensor other = rt::detail::rms_norm(x * 5, gain, 1e-5);
  CHECK(other.data_ptr() != norm.data_ptr());
  CHECK(at::equal(norm, norm_want));
}

TEST_CASE("dense() leaves to BLAS what the small product does not take", "[small_gemm]") {
  const at::Tensor w = at::randn({32, 64});
  CHECK_FALSE(ops::small_gemm_takes(at::randn({ops::kSmallGemmRows + 1, 64}), w, {}));  // many rows
  CHECK_FALSE(ops::small_gemm_takes(at::randn({4, 64}).to(at::kDouble), w.to(at::kDouble), {}));
  CHECK_FALSE(ops::small_gemm_takes(at::randn({4, 64}), w.t().contiguous().t(), {}));  // weight not contiguous
  CHECK_FALSE(ops::small_gemm_takes(at::randn({4, 64}), w, at::randn({31})));          // bias of another width
  CHECK(ops::small_gemm_takes(at::randn({4, 64}), w, at::randn({32})));
}
