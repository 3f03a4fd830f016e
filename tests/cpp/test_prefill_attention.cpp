// attend_batch, the attention of every forward's new queries over their keys: on the CPU at heads of up to 32
// in float32 and 16-bit dtypes it runs the cached-attention kernel with a row mask (`last_key`), elsewhere
// (float64 included, whose 1e-12 check the kernel's float32 sums would fail) the blocked products. Both
// against a reference written here (each query row's softmax over the keys it sees, in float64): B sequences
// padded to one key count, GQA widths, d_k ≠ d_v, causal tails and arbitrary masks (a partial recompute's),
// float32, float64 and bfloat16; and the op refuses a row mask outside its slots. attend_slots, sequences of
// uneven lengths in one call, gives each one its own call's numbers bit for bit.
#include "orbit_catch.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "ops/cached_attention_op.h"
#include "src/attention.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

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
  // Two float32 softmax-weighted sums over up to 120 keys in other orders: worst 5.4e-7 over the CPU
  // kernels, BLAS cores and thread counts tried; a wrong mask or scale reweighs keys whose values are of
  // order 1.
  CHECK((a - b).abs().max().item<double>() < 1e-5);
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

TEST_CASE("attend_slots: sequences of uneven lengths in one call each get their own call's numbers bit for bit",
          "[attention]") {
  // Lengths below and above the narrowest score row (64), runs of equal ones among them (one product each),
  // GQA and MHA, float32 and float64; each sequence's output equals attend_batch_blocked over its keys alone,
  // and the float64 reference.
  const std::vector<int64_t> lengths{5, 70, 70, 1, 33, 200, 33};
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    for (const auto& [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 2}, {3, 3}}) {
      for (int64_t R : {1, 3}) {
        INFO("dtype " << dtype << ", heads " << heads << " over " << kv_heads << ", R " << R);
        const int64_t dk = 48, dv = 40, B = static_cast<int64_t>(lengths.size());
        at::manual_seed(11);
        const at::TensorOptions o = at::TensorOptions().dtype(dtype);
        rd::HeadMajorSlots kv;
        kv.heads = kv_heads;
        kv.key_dim = dk;
        kv.value_dim = dv;
        int64_t rows = 0;
        for (int64_t S : lengths) {
          kv.lengths.push_back(S);
          kv.first_rows.push_back(rows);
          rows += kv_heads * S;
        }
        kv.keys = at::randn({rows * dk}, o);
        kv.values = at::randn({rows * dv}, o);
        const at::Tensor q = at::randn({B, R, heads, dk}, o);
        // Query r of a sequence of S keys sees keys 0 .. S − R + r (its first queries of a short one: all).
        std::vector<int64_t> index;
        for (int64_t S : lengths) {
          for (int64_t r = 0; r < R; ++r) index.push_back(std::max<int64_t>(0, S - R + r));
        }
        const at::Tensor qi = at::tensor(index, at::kLong).view({B, R});
        const at::Tensor together = rd::attend_slots(q, kv, qi, 0.2);
        for (int64_t j = 0; j < B; ++j) {
          INFO("sequence " << j << " of " << lengths[j] << " keys");
          const auto jj = static_cast<std::size_t>(j);
          const at::Tensor k = kv.keys_of(jj).unsqueeze(0), v = kv.values_of(jj).unsqueeze(0);
          const at::Tensor qj = q.narrow(0, j, 1), ij = qi.narrow(0, j, 1);
          const at::Tensor alone = rd::attend_batch_blocked(qj, k, v, ij, 0.2);
          CHECK(at::equal(together.narrow(0, j, 1), alone));
          const double err =
              (together.narrow(0, j, 1).to(at::kDouble) - reference(qj, k, v, ij, 0.2)).abs().max().item<double>();
          CHECK(err < (dtype == at::kDouble ? 1e-12 : 2e-5));
        }
      }
    }
  }
}

}  // namespace ORBIT_TEST_FILE
