// attend_batch, the attention of every forward's new queries over their keys: on the CPU at heads of up to 32
// in float32 and 16-bit dtypes it runs the cached-attention kernel with a row mask (`last_key`), elsewhere
// (float64 included, whose 1e-12 check the kernel's float32 sums would fail) the blocked products. Both
// against a reference written here (each query row's softmax over the keys it sees, in float64): B sequences
// padded to one key count, GQA widths, d_k ≠ d_v, causal tails and arbitrary masks (a partial recompute's),
// float32, float64 and bfloat16; and the op refuses a row mask outside its slots.
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "ops/cached_attention_op.h"
#include "src/attention.h"

namespace {

namespace rd = orbit::runtime::detail;
namespace ops = orbit::runtime::ops;

struct Case {
  int64_t batch, queries, keys, heads, kv_heads, dk, dv;
  bool tail;  // query_index the last R keys; otherwise random visible counts
};

at::Tensor query_index_for(const Case& c) {
  if (c.tail) return at::arange(c.keys - c.queries, c.keys, at::kLong).unsqueeze(0).repeat({c.batch, 1});
  return at::randint(0, c.keys, {c.batch, c.queries}, at::kLong);
}

// [B, R, H·d_v]: row (b, r), head h = softmax(scale · q·kᵀ over keys 0..query_index[b, r]) · v, in float64.
at::Tensor reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& qi,
                     double scale) {
  const int64_t B = q.size(0), R = q.size(1), H = q.size(2), G = H / k.size(2), dv = v.size(3);
  at::Tensor out = at::zeros({B, R, H * dv}, at::kDouble);
  const at::Tensor qd = q.to(at::kDouble), kd = k.to(at::kDouble), vd = v.to(at::kDouble);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t r = 0; r < R; ++r) {
      const int64_t seen = std::min(qi[b][r].item<int64_t>(), k.size(1) - 1) + 1;
      for (int64_t h = 0; h < H; ++h) {
        const at::Tensor keys = kd[b].narrow(0, 0, seen).select(1, h / G);  // [seen, d_k]
        const at::Tensor w = at::softmax(at::mv(keys, qd[b][r][h]) * scale, 0);
        out[b][r].narrow(0, h * dv, dv).copy_(at::mv(vd[b].narrow(0, 0, seen).select(1, h / G).t(), w));
      }
    }
  }
  return out;
}

double worst(const Case& c, at::ScalarType dtype, bool blocked) {
  at::manual_seed(c.batch * 1000 + c.queries * 31 + c.keys);
  const at::Tensor q = at::randn({c.batch, c.queries, c.heads, c.dk}).to(dtype);
  const at::Tensor k = at::randn({c.batch, c.keys, c.kv_heads, c.dk}).to(dtype);
  const at::Tensor v = at::randn({c.batch, c.keys, c.kv_heads, c.dv}).to(dtype);
  const at::Tensor qi = query_index_for(c);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.dk));
  const at::Tensor got = blocked ? rd::attend_batch_blocked(q, k, v, qi, scale) : rd::attend_batch(q, k, v, qi, scale);
  REQUIRE(got.sizes() == at::IntArrayRef({c.batch, c.queries, c.heads * c.dv}));
  REQUIRE(got.scalar_type() == dtype);
  return (got.to(at::kDouble) - reference(q, k, v, qi, scale)).abs().max().item<double>();
}

const std::vector<Case> kCases = {
    {1, 1, 1, 8, 4, 16, 16, true},     // one token, no past
    {1, 7, 7, 8, 4, 16, 16, true},     // a first prefill (R = S)
    {1, 24, 200, 8, 4, 16, 16, true},  // a turn after a past: TinyStories-656K's heads
    {3, 5, 40, 8, 8, 8, 8, true},      // a batch: stories260K's heads
    {2, 9, 33, 6, 3, 32, 16, false},   // arbitrary masks, d_k ≠ d_v
    {2, 4, 17, 4, 1, 12, 20, false},   // sizes off multiples of 8 (the portable kernel)
    {1, 6, 50, 8, 2, 64, 64, true},    // wider heads: the blocked products
};

}  // namespace

TEST_CASE("attend_batch equals each row's softmax over the keys it sees, float32 and float64", "[attention]") {
  for (const Case& c : kCases) {
    INFO("B " << c.batch << " R " << c.queries << " S " << c.keys << " heads " << c.heads << "/" << c.kv_heads << " dk "
              << c.dk << " dv " << c.dv << (c.tail ? " tail" : " masked"));
    CHECK(worst(c, at::kFloat, false) < 2e-5);
    CHECK(worst(c, at::kDouble, false) < 1e-12);
    CHECK(worst(c, at::kFloat, true) < 2e-5);
  }
}

TEST_CASE("attend_batch in bfloat16 stays within its rounding", "[attention]") {
  for (const Case& c : kCases) {
    INFO("B " << c.batch << " R " << c.queries << " S " << c.keys << " dk " << c.dk);
    CHECK(worst(c, at::kBFloat16, false) < 0.05);
  }
}

TEST_CASE("the kernel and the blocked products agree where both run", "[attention]") {
  const Case c{2, 16, 120, 8, 4, 16, 16, false};
  at::manual_seed(5);
  const at::Tensor q = at::randn({c.batch, c.queries, c.heads, c.dk});
  const at::Tensor k = at::randn({c.batch, c.keys, c.kv_heads, c.dk});
  const at::Tensor v = at::randn({c.batch, c.keys, c.kv_heads, c.dv});
  const at::Tensor qi = query_index_for(c);
  const at::Tensor a = rd::attend_batch(q, k, v, qi, 0.25), b = rd::attend_batch_blocked(q, k, v, qi, 0.25);
  CHECK((a - b).abs().max().item<double>() < 2e-6);
}

TEST_CASE("the kernel refuses a row mask outside its slots", "[attention]") {
  ops::CachedAttentionInputs in;
  in.q = at::randn({2, 2, 8});
  in.keys = at::randn({1, 1, 4, 8});
  in.values = at::randn({1, 1, 4, 8});
  in.slots = {0};
  in.lengths = {2};
  in.first_row = {0};
  in.queries = 2;
  at::Tensor out = at::empty({2, 16});
  in.last_key = {1, 4};
  CHECK_THROWS_WITH(ops::cached_attention(in, out), Catch::Contains("last_key 4 is outside the 4 rows"));
  in.last_key = {1};
  CHECK_THROWS_WITH(ops::cached_attention(in, out), Catch::Contains("one entry per query row (2)"));
  in.last_key = {0, 3};
  CHECK_NOTHROW(ops::cached_attention(in, out));
}
