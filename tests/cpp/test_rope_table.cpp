// The model's RoPE table (runtime/src/rope_table.h): a gathered row is bit for bit the per-step computation
// (ops::rope_tables over rope_angles of the step's own positions), for every scaling it applies to, over
// many positions, batch shapes and table growths.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "ops/rope_op.h"
#include "orbit/runtime/rope.h"
#include "rope_table.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using orbit::runtime::RopeConfig;
using orbit::runtime::RopeScaling;
using orbit::runtime::detail::RopeTableCache;
namespace ops = orbit::runtime::ops;

namespace {

RopeConfig config_of(RopeScaling scaling, int64_t head_dim, int64_t rotary_dim) {
  RopeConfig c;
  c.head_dim = head_dim;
  c.rotary_dim = rotary_dim;
  c.theta = 10000.0;
  c.max_position_embeddings = 4096;
  c.scaling = scaling;
  if (scaling != RopeScaling::kNone) c.factor = 4.0;
  if (scaling == RopeScaling::kLlama3 || scaling == RopeScaling::kYarn) c.original_max_position_embeddings = 1024;
  return c;
}

// The per-step path forward_batch takes without the table (window_len -1: the positions' count).
ops::RopeTables per_step(const RopeConfig& c, const std::vector<int64_t>& positions, at::ScalarType dtype,
                         int64_t window_len = -1) {
  const at::Tensor p = at::tensor(at::ArrayRef<int64_t>(positions), at::kLong);
  const int64_t window = window_len >= 0 ? window_len : static_cast<int64_t>(positions.size());
  return ops::rope_tables(orbit::runtime::rope_angles(c, p, window), dtype, at::kCPU);
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && a.is_contiguous() && b.is_contiguous() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<std::size_t>(a.nbytes())) == 0;
}

// Batches of `sizes` random positions below `limit` each, then every position below `limit` at once.
void check_bitwise(const RopeConfig& c, at::ScalarType dtype, int64_t limit) {
  RopeTableCache cache;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> pick(0, limit - 1);
  int64_t largest = 0;
  for (int64_t size : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 64, 100}) {
    std::vector<int64_t> positions(static_cast<std::size_t>(size));
    for (int64_t& p : positions) p = pick(rng);
    // Growing position by position too: a table rebuilt at every size keeps its rows.
    positions.push_back(largest++);
    const auto got = cache.gather(c, positions, dtype);
    REQUIRE(got.has_value());
    const ops::RopeTables want = per_step(c, positions, dtype);
    REQUIRE(same_bits(got->cos, want.cos));
    REQUIRE(same_bits(got->sin, want.sin));
  }
  std::vector<int64_t> every(static_cast<std::size_t>(limit));
  for (int64_t p = 0; p < limit; ++p) every[static_cast<std::size_t>(p)] = p;
  const auto got = cache.gather(c, every, dtype);
  REQUIRE(got.has_value());
  const ops::RopeTables want = per_step(c, every, dtype);
  CHECK(same_bits(got->cos, want.cos));
  CHECK(same_bits(got->sin, want.sin));
  // One position at a time, as a decode step of one session reads it.
  for (int64_t p = 0; p < limit; p += 97) {
    const auto one = cache.gather(c, {p}, dtype);
    const ops::RopeTables step = per_step(c, {p}, dtype);
    REQUIRE(same_bits(one->cos, step.cos));
    REQUIRE(same_bits(one->sin, step.sin));
  }
}

}  // namespace

TEST_CASE("rope table rows are the per-step cos/sin bit for bit", "[rope][table]") {
  for (RopeScaling scaling : {RopeScaling::kNone, RopeScaling::kLinear, RopeScaling::kLlama3, RopeScaling::kYarn}) {
    for (const auto& dims : {std::pair<int64_t, int64_t>{8, 8}, {64, 64}, {128, 32}}) {
      for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
        INFO("scaling " << static_cast<int>(scaling) << " head_dim " << dims.first << " dtype " << dtype);
        check_bitwise(config_of(scaling, dims.first, dims.second), dtype, 5000);
      }
    }
  }
}

TEST_CASE("rope table comparison sees an angle computed another way", "[rope][table]") {
  // The bitwise comparison above is strict enough to tell the float64 angle p · inv[i] from the same angle
  // taken in float32: a table built that way would fail it (checked by building one so).
  const RopeConfig c = config_of(RopeScaling::kNone, 64, 64);
  std::vector<int64_t> positions(3000);
  for (std::size_t p = 0; p < positions.size(); ++p) positions[p] = static_cast<int64_t>(p);
  const at::Tensor p = at::tensor(at::ArrayRef<int64_t>(positions), at::kLong);
  const at::Tensor inv = orbit::runtime::rope_inv_freq(c, 0);
  const at::Tensor float_angles = (p.to(at::kFloat).unsqueeze(1) * inv.to(at::kFloat).unsqueeze(0)).to(at::kDouble);
  const ops::RopeTables other = ops::rope_tables(float_angles, at::kFloat, at::kCPU);
  RopeTableCache cache;
  const auto got = cache.gather(c, positions, at::kFloat);
  REQUIRE(got.has_value());
  CHECK_FALSE(same_bits(got->cos, other.cos));
}

TEST_CASE("rope table keeps dynamic NTK past its anchor and oversized tables on the per-step path", "[rope][table]") {
  RopeTableCache cache;
  const RopeConfig dynamic = config_of(RopeScaling::kDynamicNtk, 64, 64);  // anchored at 4096
  CHECK(RopeTableCache::applies(dynamic, 4096));
  CHECK_FALSE(RopeTableCache::applies(dynamic, 4097));
  CHECK_FALSE(cache.gather(dynamic, {0, 1, 5000}, at::kFloat, 5001).has_value());
  const RopeConfig plain = config_of(RopeScaling::kNone, 64, 64);
  // 64 MiB / (2 tables · 32 floats · 4 bytes) rows at most.
  CHECK_FALSE(cache.gather(plain, {int64_t{1} << 20}, at::kFloat).has_value());
  CHECK(cache.capacity() == 0);
  REQUIRE(cache.gather(plain, {300}, at::kFloat).has_value());
  CHECK(cache.capacity() == 301);
  REQUIRE(cache.gather(plain, {302}, at::kFloat).has_value());
  CHECK(cache.capacity() == 602);  // doubled, not grown by one
  CHECK_THROWS_WITH(cache.gather(plain, {3, -1}, at::kFloat), Catch::Contains("negative position -1"));
}

TEST_CASE("rope table rows are dynamic NTK's per-step cos/sin bit for bit at windows up to its anchor",
          "[rope][table]") {
  for (at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    const RopeConfig c = config_of(RopeScaling::kDynamicNtk, 64, 64);  // anchored at 4096
    RopeTableCache cache;
    std::vector<int64_t> positions;
    for (int64_t p = 0; p < 6000; p += 7) positions.push_back(p);  // positions past the anchor too
    for (int64_t window : {0, 1, 300, 4095, 4096}) {
      INFO("window " << window << " dtype " << dtype);
      const auto got = cache.gather(c, positions, dtype, window);
      REQUIRE(got.has_value());
      const ops::RopeTables want = per_step(c, positions, dtype, window);
      CHECK(same_bits(got->cos, want.cos));
      CHECK(same_bits(got->sin, want.sin));
    }
    // Past the anchor the frequencies differ (a table built there, or one read there, would be stale).
    const ops::RopeTables past_anchor = per_step(c, positions, dtype, 4097);
    CHECK_FALSE(same_bits(past_anchor.cos, per_step(c, positions, dtype, 4096).cos));
    CHECK_FALSE(cache.gather(c, positions, dtype, 4097).has_value());
  }
}

}  // namespace ORBIT_TEST_FILE
