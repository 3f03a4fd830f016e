// Patch apply (ops/patch_apply_op.h over kernels/cpu/patch_apply.h): the fused kernel against a plain
// ATen composition in float64, canonical + u.mm(vt) then rope_rotate (orbit/runtime/rope.h) at the
// positions, over both layouts, partial rotary, ranks 0/1/16/64, K (rotate) and V (no rotate), float32
// and bfloat16 canonical and storage; into KV-pool pages through non-contiguous block tables (every
// other byte of the pool must stay as it was); and every argument error.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ops/patch_apply_op.h"
#include "orbit/common/error.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/rope.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using orbit::runtime::KVPool;
using orbit::runtime::KVPoolOptions;
using orbit::runtime::PageId;
using orbit::runtime::RopeConfig;
using orbit::runtime::RopeLayout;
using orbit::runtime::ops::PageTarget;
using orbit::runtime::ops::patch_apply;
using orbit::runtime::ops::patch_apply_out;
using orbit::runtime::ops::patch_apply_to_pages;
using orbit::runtime::ops::PatchApplyInputs;

namespace {

// Deterministic N(0, scale²) values (independent of the torch version's RNG).
at::Tensor random_tensor(std::mt19937& rng, const std::vector<int64_t>& shape, double scale = 1.0) {
  int64_t count = 1;
  for (int64_t s : shape) count *= s;
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> values(static_cast<size_t>(count));
  for (double& v : values) v = normal(rng);
  return at::tensor(values, at::kDouble).reshape(shape).to(at::kFloat);
}

struct Case {
  int64_t n = 13, heads = 3, head_dim = 16, rotary_dim = 16, rank = 16;
  RopeLayout layout = RopeLayout::kHalfSplit;
  bool rotate = true;
  at::ScalarType canonical_dtype = at::kFloat;
  at::ScalarType storage_dtype = at::kFloat;
  bool flat = false;  // canonical as [n, D] instead of [n, H, head_dim]

  int64_t width() const { return heads * head_dim; }
  std::string describe() const {
    return std::string(rotate ? "K" : "V") + " " + orbit::runtime::rope_layout_name(layout) + " rotary " +
           std::to_string(rotary_dim) + "/" + std::to_string(head_dim) + " H=" + std::to_string(heads) +
           " n=" + std::to_string(n) + " rank=" + std::to_string(rank) + " " + c10::toString(canonical_dtype) + " -> " +
           c10::toString(storage_dtype) + (flat ? " flat" : "");
  }
};

RopeConfig rope_for(const Case& c) {
  RopeConfig r;
  r.layout = c.layout;
  r.head_dim = c.head_dim;
  r.rotary_dim = c.rotary_dim;
  r.theta = 10000.0;
  return r;
}

PatchApplyInputs make_inputs(const Case& c, std::mt19937& rng) {
  PatchApplyInputs in;
  at::Tensor canonical = random_tensor(rng, {c.n, c.heads, c.head_dim}).to(c.canonical_dtype);
  in.canonical = c.flat ? canonical.reshape({c.n, c.width()}) : canonical;
  if (c.rank > 0 || c.n % 2 == 1) {  // rank 0 both as undefined factors and as [n, 0] / [0, D]
    in.u = random_tensor(rng, {c.n, c.rank}, 0.5);
    in.vt = random_tensor(rng, {c.rank, c.width()}, 0.5);
  }
  in.rotate = c.rotate;
  in.rope = rope_for(c);
  std::uniform_int_distribution<int64_t> position(0, 5000);
  std::vector<int64_t> positions(static_cast<size_t>(c.n));
  for (int64_t& p : positions) p = position(rng);  // not contiguous, not sorted
  in.positions = at::tensor(positions, at::kLong);
  return in;
}

// The composition the fused kernel replaces, in float64: [n, D].
at::Tensor expected_rows(const PatchApplyInputs& in) {
  const int64_t n = in.canonical.size(0);
  at::Tensor rows = in.canonical.to(at::kDouble).reshape({n, -1});
  if (in.u.defined()) rows = rows + in.u.to(at::kDouble).mm(in.vt.to(at::kDouble));
  if (!in.rotate) return rows;
  const at::Tensor heads = rows.reshape({n, -1, in.rope.head_dim});
  const at::Tensor angles = orbit::runtime::rope_angles(in.rope, in.positions, in.window_len);
  return orbit::runtime::rope_rotate(in.rope, heads, angles).reshape({n, -1});
}

// float32 storage: float32 arithmetic error only. bfloat16 storage: one rounding (half an ulp, at most
// 2^-8 relative) on top, so double rounding or a bfloat16 intermediate fails it.
void check_close(const at::Tensor& got_any, const at::Tensor& expected, at::ScalarType storage) {
  const at::Tensor got = got_any.to(at::kDouble).reshape(expected.sizes());
  const at::Tensor magnitude = expected.abs();
  at::Tensor tolerance;
  if (storage == at::kDouble) {
    tolerance = 1e-12 * (1.0 + magnitude);
  } else if (storage == at::kFloat) {
    tolerance = 1e-5 * (1.0 + magnitude);
  } else {
    tolerance = magnitude / 256.0 + 1e-5 * (1.0 + magnitude);
  }
  const at::Tensor excess = (got - expected).abs() - tolerance;
  const int64_t bad = (excess > 0).sum().item<int64_t>();
  INFO("max |got - expected| = " << orbit::test::max_abs_diff(got, expected) << ", elements over tolerance: " << bad);
  CHECK(bad == 0);
}

std::vector<Case> grid() {
  std::vector<Case> cases;
  const std::pair<at::ScalarType, at::ScalarType> dtypes[] = {{at::kFloat, at::kFloat},
                                                              {at::kBFloat16, at::kBFloat16},
                                                              {at::kFloat, at::kBFloat16},
                                                              {at::kBFloat16, at::kFloat}};
  bool flat = false;
  for (const auto& [canonical_dtype, storage_dtype] : dtypes) {
    for (int64_t rank : {0, 1, 16, 64}) {
      for (bool rotate : {true, false}) {
        for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
          for (int64_t rotary_dim : {16, 6}) {  // full and partial (10 dims pass through)
            Case c;
            c.rank = rank;
            c.n = rank == 0 ? (rotary_dim == 16 ? 12 : 11) : 13;  // odd n: factors [n, 0], [0, D]
            c.rotate = rotate;
            c.layout = layout;
            c.rotary_dim = rotary_dim;
            c.canonical_dtype = canonical_dtype;
            c.storage_dtype = storage_dtype;
            c.flat = flat;
            flat = !flat;
            cases.push_back(c);
          }
        }
      }
    }
  }
  return cases;
}

KVPoolOptions pool_options(int64_t pages, int64_t page_size, std::vector<int64_t> widths, at::ScalarType dtype) {
  KVPoolOptions o;
  o.num_layers = 3;
  o.num_pages = pages;
  o.page_size = page_size;
  o.widths = std::move(widths);
  o.dtype = dtype;
  return o;
}

// Fills every kind of the pool with random values, so that a stray write anywhere is visible.
void fill_pool(KVPool& pool, std::mt19937& rng) {
  for (int64_t kind = 0; kind < pool.num_kinds(); ++kind) {
    const at::Tensor& s = pool.storage(kind);
    s.copy_(random_tensor(rng, s.sizes().vec(), 3.0).to(s.scalar_type()));
  }
}

std::vector<at::Tensor> snapshot(const KVPool& pool) {
  std::vector<at::Tensor> out;
  for (int64_t kind = 0; kind < pool.num_kinds(); ++kind) out.push_back(pool.storage(kind).clone());
  return out;
}

// Checks pool rows of (kind, layer) written by a chunk against `expected` [n, D] and every other value
// of the pool against `before`, bit for bit.
void check_pool(const KVPool& pool, const std::vector<at::Tensor>& before, const PageTarget& target,
                const at::Tensor& expected) {
  std::vector<at::Tensor> mask;
  for (int64_t kind = 0; kind < pool.num_kinds(); ++kind) {
    const at::Tensor& s = pool.storage(kind);
    mask.push_back(at::zeros({s.size(0), s.size(1), s.size(2)}, at::kBool));
  }
  std::vector<at::Tensor> rows;
  for (int64_t t = 0; t < expected.size(0); ++t) {
    const int64_t slot = target.first_slot + t;
    const PageId page = target.block_table[static_cast<size_t>(slot / pool.page_size())];
    mask[static_cast<size_t>(target.kind)][target.layer][page][slot % pool.page_size()] = true;
    rows.push_back(pool.page(target.kind, target.layer, page)[slot % pool.page_size()]);
  }
  check_close(at::stack(rows), expected, pool.options().dtype);
  for (int64_t kind = 0; kind < pool.num_kinds(); ++kind) {
    const at::Tensor untouched = mask[static_cast<size_t>(kind)].logical_not();
    const at::Tensor now = at::masked_select(pool.storage(kind), untouched.unsqueeze(-1));
    const at::Tensor was = at::masked_select(before[static_cast<size_t>(kind)], untouched.unsqueeze(-1));
    INFO("kind " << kind << ": values outside the written rows must be unchanged");
    CHECK(at::equal(now, was));
  }
}

}  // namespace

TEST_CASE("patch_apply matches canonical + u·vt then RoPE, over layouts, ranks and dtypes", "[patch_apply][cpu]") {
  std::mt19937 rng(7);
  for (const Case& c : grid()) {
    INFO(c.describe());
    const PatchApplyInputs in = make_inputs(c, rng);
    const at::Tensor expected = expected_rows(in);
    at::Tensor out = at::full(in.canonical.sizes(), NAN, at::TensorOptions().dtype(c.storage_dtype));
    patch_apply_out(out, in);
    check_close(out, expected, c.storage_dtype);
    if (c.canonical_dtype == c.storage_dtype) {
      const at::Tensor returned = patch_apply(in);
      CHECK(returned.sizes() == in.canonical.sizes());
      CHECK(returned.scalar_type() == c.canonical_dtype);
      CHECK(at::equal(returned, out));
    }
  }
}

TEST_CASE("patch_apply: V ignores the RoPE config; rank 0 K is plain relocation", "[patch_apply][cpu]") {
  std::mt19937 rng(11);
  Case c;
  c.rank = 0;
  PatchApplyInputs in = make_inputs(c, rng);
  // Rank 0 with rotation is exactly RoPE on the canonical (same float formula, same tables).
  const at::Tensor relocated = orbit::runtime::rope_apply(in.rope, in.canonical, in.positions);
  CHECK(at::equal(patch_apply(in), relocated));
  // Without rotation, rank 0 is a copy, and the (invalid) RoPE config is never read.
  in.rotate = false;
  in.rope.rotary_dim = 7;
  in.positions = at::Tensor();
  CHECK(at::equal(patch_apply(in), in.canonical));
}

TEST_CASE("patch_apply: precomputed tables, M-RoPE positions, float64 and in place", "[patch_apply][cpu]") {
  std::mt19937 rng(13);
  Case c;
  c.rank = 5;
  PatchApplyInputs in = make_inputs(c, rng);
  const at::Tensor from_positions = patch_apply(in);

  PatchApplyInputs with_tables = in;
  with_tables.tables = orbit::runtime::ops::patch_rope_tables(in.rope, in.positions, at::kFloat, at::Device(at::kCPU));
  with_tables.positions = at::Tensor();
  CHECK(at::equal(patch_apply(with_tables), from_positions));

  SECTION("M-RoPE: [3, n] positions") {
    PatchApplyInputs mrope = in;
    mrope.rope.mrope_section = {2, 3, 3};  // Σ = rotary_dim / 2 = 8
    mrope.positions = at::stack({in.positions, in.positions + 7, in.positions * 2});
    check_close(patch_apply(mrope), expected_rows(mrope), at::kFloat);
  }
  SECTION("float64 canonical and destination") {
    PatchApplyInputs f64 = in;
    f64.canonical = in.canonical.to(at::kDouble);
    f64.u = in.u.to(at::kDouble);
    f64.vt = in.vt.to(at::kDouble);
    check_close(patch_apply(f64), expected_rows(f64), at::kDouble);
  }
  SECTION("in place on the canonical") {
    const at::Tensor expected = expected_rows(in);
    at::Tensor buffer = in.canonical.clone();
    PatchApplyInputs in_place = in;
    in_place.canonical = buffer;
    patch_apply_out(buffer, in_place);
    check_close(buffer, expected, at::kFloat);
    CHECK(at::equal(buffer, from_positions));
  }
  SECTION("many tokens: split across threads") {
    Case big;
    big.n = 700;
    big.heads = 4;
    big.head_dim = 64;
    big.rotary_dim = 32;
    big.rank = 32;
    const PatchApplyInputs many = make_inputs(big, rng);
    check_close(patch_apply(many), expected_rows(many), at::kFloat);
  }
}

TEST_CASE("patch_apply_to_pages writes only the chunk's slots of the block table's pages", "[patch_apply][cpu]") {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    INFO("pool dtype " << dtype);
    std::mt19937 rng(17);
    Case k;  // K: 3 heads of 16, rotated; V: 2 heads of 16 (a pool whose kinds differ in width)
    k.n = 10;
    k.rank = 16;
    k.rotary_dim = 8;
    k.storage_dtype = dtype;
    Case v = k;
    v.heads = 2;
    v.rotate = false;
    KVPool pool(pool_options(12, 4, {k.width(), v.width()}, dtype));
    std::vector<PageId> pages;
    REQUIRE(pool.allocate(12, pages).ok());
    fill_pool(pool, rng);

    {  // page-aligned chunk
      PageTarget target;
      target.layer = 1;
      target.block_table = {9, 2, 6};  // 10 tokens: pages 9 and 2 full, page 6 slots 0-1
      for (int64_t kind : {0, 1}) {
        target.kind = kind;
        const PatchApplyInputs in = make_inputs(kind == 0 ? k : v, rng);
        const std::vector<at::Tensor> before = snapshot(pool);
        patch_apply_to_pages(pool, target, in);
        check_pool(pool, before, target, expected_rows(in));
      }
    }
    {  // chunk starting mid-page; table pages outside the range are not written
      PageTarget target;
      target.kind = 0;
      target.layer = 2;
      target.block_table = {3, 4, 0, 11, 7, 5};  // slots [6, 16): page 4 (slots 2-3), pages 0 and 11
      target.first_slot = 6;
      pool.retain(3);  // shared and outside the written range: allowed, and left alone
      const PatchApplyInputs in = make_inputs(k, rng);
      const std::vector<at::Tensor> before = snapshot(pool);
      patch_apply_to_pages(pool, target, in);
      check_pool(pool, before, target, expected_rows(in));
    }
    {  // many tokens over many pages in reverse order
      KVPool big(pool_options(40, 16, {256, 64}, dtype));
      std::vector<PageId> all;
      REQUIRE(big.allocate(40, all).ok());
      fill_pool(big, rng);
      Case many;
      many.n = 600;
      many.heads = 4;
      many.head_dim = 64;
      many.rotary_dim = 64;
      many.rank = 64;
      many.layout = RopeLayout::kInterleaved;
      many.storage_dtype = dtype;
      PageTarget target;
      target.layer = 0;
      for (PageId p = 39; p >= 2; --p) target.block_table.push_back(p);  // 38 pages for 600 tokens
      const PatchApplyInputs in = make_inputs(many, rng);
      const std::vector<at::Tensor> before = snapshot(big);
      patch_apply_to_pages(big, target, in);
      check_pool(big, before, target, expected_rows(in));
    }
  }
}

TEST_CASE("patch_apply: argument errors name the argument", "[patch_apply][cpu]") {
  std::mt19937 rng(19);
  Case c;
  c.rank = 4;
  const PatchApplyInputs good = make_inputs(c, rng);
  auto bad = [&](auto mutate) {
    PatchApplyInputs in = good;
    mutate(in);
    return in;
  };
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.canonical = at::Tensor(); })),
                    Contains("'canonical'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.canonical = in.canonical.flatten(); })),
                    Contains("'canonical'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.canonical = in.canonical.to(at::kInt); })),
                    Contains("'canonical'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.vt = at::Tensor(); })), Contains("'vt'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.u = at::Tensor(); })), Contains("'u'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.u = in.u.narrow(0, 0, 5); })), Contains("'u'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.vt = in.vt.narrow(1, 0, 40); })), Contains("'vt'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.u = in.u.narrow(1, 0, 3); })), Contains("rank"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.u = in.u.to(at::kLong); })), Contains("'u'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.positions = at::Tensor(); })),
                    Contains("'positions'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.positions = in.positions.narrow(0, 0, 4); })),
                    Contains("'positions'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.rope.head_dim = 20; })), Contains("head_dim"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.rope.head_dim = 24; })),  // divides D = 48
                    Contains("rope.head_dim=24"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.rope.rotary_dim = 7; })), Contains("rotary_dim"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) { in.rope.rotary_dim = 18; })), Contains("rotary_dim"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) {
                      in.tables = orbit::runtime::ops::patch_rope_tables(in.rope, in.positions.narrow(0, 0, 12),
                                                                         at::kFloat, at::Device(at::kCPU));
                    })),
                    Contains("'tables.cos'"));
  CHECK_THROWS_WITH(patch_apply(bad([](PatchApplyInputs& in) {
                      in.tables = orbit::runtime::ops::patch_rope_tables(in.rope, in.positions, at::kDouble,
                                                                         at::Device(at::kCPU));
                    })),
                    Contains("'tables.cos'"));
  // Destinations.
  CHECK_THROWS_WITH(patch_apply_out(at::empty({13, 47}), good), Contains("'out'"));
  CHECK_THROWS_WITH(patch_apply_out(at::empty({48, 13}).t(), good), Contains("'out'"));
  CHECK_THROWS_WITH(patch_apply_out(at::empty({13, 48}, at::kDouble), good), Contains("'canonical'"));
  CHECK_THROWS_WITH(patch_apply_out(at::empty({13, 48}, at::kHalf), good), Contains("bfloat16"));
  {
    const at::Tensor buffer = at::zeros({14 * 48});
    PatchApplyInputs shifted = good;
    shifted.canonical = buffer.narrow(0, 0, 13 * 48).view({13, 3, 16});
    CHECK_THROWS_WITH(patch_apply_out(buffer.narrow(0, 48, 13 * 48).view({13, 48}), shifted),
                      Contains("overlaps argument 'canonical'"));
    PatchApplyInputs aliased = good;  // u read from the last 52 values of the buffer written
    aliased.u = buffer.narrow(0, 14 * 48 - 52, 52).view({13, 4});
    CHECK_THROWS_WITH(patch_apply_out(buffer.narrow(0, 48, 13 * 48).view({13, 48}), aliased),
                      Contains("overlaps argument 'u'"));
  }

  // Pages.
  KVPool pool(pool_options(6, 4, {48, 32}, at::kFloat));
  std::vector<PageId> pages;
  REQUIRE(pool.allocate(5, pages).ok());  // page 5 stays free
  fill_pool(pool, rng);
  const std::vector<at::Tensor> before = snapshot(pool);
  auto target = [](std::vector<PageId> table, int64_t kind = 0, int64_t layer = 0, int64_t first_slot = 0) {
    PageTarget t;
    t.kind = kind;
    t.layer = layer;
    t.block_table = std::move(table);
    t.first_slot = first_slot;
    return t;
  };
  CHECK_THROWS_WITH(patch_apply_to_pages(pool, target({0, 1, 2, 3}, 2), good), Contains("target.kind"));
  CHECK_THROWS_WITH(patch_apply_to_pages(pool, target({0, 1, 2, 3}, 0, 3), good), Contains("target.layer"));
  CHECK_THROWS_WITH(patch_apply_to_pages(pool, target({0, 1, 2, 3}, 0, 0, -1), good), Contains("target.first_slot"));
  CHECK_THROWS_WITH(patch_apply_to_pages(pool, target({0, 1, 2, 3}, 1), good), Contains("width"));
  CHECK_THROWS_WITH(patch_apply_to_pages(pool, target({0, 1, 2}), good), Contains("'block_table'"));
  CHECK_THROWS_WITH(patch_apply_to_pages(pool, target({0, 1, 2, 3}, 0, 0, 4), good), Contains("'block_table'"));
  CHECK_THROWS_WITH(patch_apply_to_pages(pool, target({0, 1, 6, 3}), good), Contains("out of range"));
  CHECK_THROWS_WITH(patch_apply_to_pages(pool, target({0, 1, 5, 3}), good), Contains("is free"));
  CHECK_THROWS_WITH(patch_apply_to_pages(pool, target({0, 1, 2, 1}), good), Contains("twice"));
  pool.retain(2);
  CHECK_THROWS_WITH(patch_apply_to_pages(pool, target({0, 1, 2, 3}), good), Contains("shared"));
  CHECK_THROWS_WITH(
      patch_apply_to_pages(pool, target({0, 1, 4, 3}), bad([](PatchApplyInputs& in) { in.positions = at::Tensor(); })),
      Contains("'positions'"));
  for (int64_t kind = 0; kind < pool.num_kinds(); ++kind) {
    INFO("a rejected call writes nothing (kind " << kind << ")");
    CHECK(at::equal(pool.storage(kind), before[static_cast<size_t>(kind)]));
  }
  pool.verify_integrity();
}

}  // namespace ORBIT_TEST_FILE
