// The AVX2/FMA decode attention kernel (kernels/cpu/cached_attention_avx2.h), reached through the op as the
// forward reaches it, against the portable kernel (kernels/cpu/cached_attention.h) on the same buffers:
// GQA widths, head sizes from 8 to 128 with d_k ≠ d_v, several rows per member, members that see from one key
// to hundreds (lengths on and off multiples of 8), peaked and flat softmaxes. Skipped where the op does not
// run that kernel (another CPU, another compiler, ORBIT_CPU_KERNELS=portable).
#include "orbit_catch.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cached_attention.h"
#include "ops/cached_attention_op.h"

const char* orbit_test_skip_reason() {
  return orbit::runtime::ops::cached_attention_vectorised(at::kFloat, 16, 16)
             ? nullptr
             : "the CPU decode attention runs its portable kernel here (no AVX2/FMA kernel in this build or CPU)";
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

TEST_CASE("head sizes off multiples of 8 take the portable kernel through the op", "[cached_attention]") {
  CHECK_FALSE(ops::cached_attention_vectorised(at::kFloat, 12, 16));
  CHECK_FALSE(ops::cached_attention_vectorised(at::kFloat, 16, 20));
  CHECK_FALSE(ops::cached_attention_vectorised(at::kDouble, 16, 16));
  CHECK_FALSE(ops::cached_attention_vectorised(at::kBFloat16, 16, 16));
  CHECK(compare({4, 2, 12, 20, 2, {0, 13, 50}, 1.0}, 99) == 0.0);  // the same kernel on both sides
}
