// KVPool and PagedSequence: pool invariants under random allocate/retain/release, exhaustion, misuse,
// integrity checking of corrupted state; paged sequences gathered bit-for-bit, copy-on-write forks,
// truncation, capacity refusals and random fork/append/truncate/destroy workloads.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/runtime/kv_pool.h"
#include "orbit/runtime/paged_sequence.h"

namespace orbit::runtime {

// Test hook declared a friend in kv_pool.h: corrupts private state on purpose so that the tests can
// check that verify_integrity() notices. The public API cannot reach these states, by design.
struct KVPoolTestAccess {
  static std::vector<int32_t>& ref_counts(KVPool& pool) { return pool.ref_counts_; }
  static std::vector<PageId>& free_list(KVPool& pool) { return pool.free_list_; }
};

}  // namespace orbit::runtime

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using orbit::Error;
using orbit::StatusCode;
using namespace orbit::runtime;
using Catch::Matchers::Contains;

namespace {

KVPoolOptions pool_options(int64_t layers, int64_t pages, int64_t page_size, int64_t width) {
  KVPoolOptions o;
  o.num_layers = layers;
  o.num_pages = pages;
  o.page_size = page_size;
  o.widths = {width, width};
  return o;
}

// Checks every page's ref_count against `expected` (pages absent from it must be free).
void check_ref_counts(const KVPool& pool, const std::map<PageId, int32_t>& expected) {
  int64_t live = 0;
  for (PageId p = 0; p < pool.num_pages(); ++p) {
    auto it = expected.find(p);
    const int32_t want = it == expected.end() ? 0 : it->second;
    INFO("page " << p);
    REQUIRE(pool.ref_count(p) == want);
    live += want > 0 ? 1 : 0;
  }
  REQUIRE(pool.num_live() == live);
  REQUIRE(pool.num_free() == pool.num_pages() - live);
}

// Deterministic random float tensor (independent of the torch version's RNG).
at::Tensor random_tensor(std::mt19937& rng, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  at::Tensor t = at::empty({n}, at::kFloat);
  float* data = t.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) data[i] = dist(rng);
  return t.view(shape);
}

// Expected content of one sequence: k and v as [L, T, H, d], positions.
struct Reference {
  at::Tensor k, v;
  std::vector<int64_t> positions;
};
struct Chunk {
  std::vector<LayerKV> content;
  at::Tensor positions;
};

Chunk random_chunk(std::mt19937& rng, int64_t layers, int64_t tokens, int64_t heads, int64_t head_dim) {
  Chunk c;
  for (int64_t l = 0; l < layers; ++l) {
    c.content.push_back({random_tensor(rng, {tokens, heads, head_dim}), random_tensor(rng, {tokens, heads, head_dim})});
  }
  c.positions = at::empty({tokens}, at::kLong);
  std::uniform_int_distribution<int64_t> pos(0, 100000);
  for (int64_t i = 0; i < tokens; ++i) c.positions.data_ptr<int64_t>()[i] = pos(rng);
  return c;
}

Reference empty_reference(int64_t layers, int64_t heads, int64_t head_dim) {
  return {at::zeros({layers, 0, heads, head_dim}), at::zeros({layers, 0, heads, head_dim}), {}};
}

void extend(Reference& ref, const Chunk& c) {
  std::vector<at::Tensor> ks, vs;
  for (const LayerKV& l : c.content) {
    ks.push_back(l.k);
    vs.push_back(l.v);
  }
  ref.k = at::cat({ref.k, at::stack(ks)}, 1);
  ref.v = at::cat({ref.v, at::stack(vs)}, 1);
  const int64_t* p = c.positions.data_ptr<int64_t>();
  ref.positions.insert(ref.positions.end(), p, p + c.positions.size(0));
}

void shorten(Reference& ref, int64_t length) {
  ref.k = ref.k.narrow(1, 0, length).clone();
  ref.v = ref.v.narrow(1, 0, length).clone();
  ref.positions.resize(static_cast<size_t>(length));
}

// gather() must equal the reference bit for bit, in shape, dtype and positions.
void check_gather(const PagedSequence& seq, const Reference& ref) {
  REQUIRE(seq.length() == static_cast<int64_t>(ref.positions.size()));
  REQUIRE(seq.positions() == ref.positions);
  const PastKV past = seq.gather();
  REQUIRE(static_cast<int64_t>(past.layers.size()) == ref.k.size(0));
  for (size_t l = 0; l < past.layers.size(); ++l) {
    INFO("layer " << l);
    REQUIRE(past.layers[l].k.scalar_type() == at::kFloat);
    REQUIRE(past.layers[l].k.is_contiguous());
    REQUIRE(past.layers[l].k.sizes() == ref.k[static_cast<int64_t>(l)].sizes());
    REQUIRE(at::equal(past.layers[l].k, ref.k[static_cast<int64_t>(l)]));
    REQUIRE(at::equal(past.layers[l].v, ref.v[static_cast<int64_t>(l)]));
  }
  REQUIRE((past.positions.scalar_type() == at::kLong && past.positions.dim() == 1));
  const int64_t* p = past.positions.data_ptr<int64_t>();
  REQUIRE(std::vector<int64_t>(p, p + past.positions.size(0)) == ref.positions);
}

int64_t pages_for(int64_t tokens, int64_t page_size) { return (tokens + page_size - 1) / page_size; }

}  // namespace

// ---- KVPool ----------------------------------------------------------------------------------------

TEST_CASE("KVPool: options are validated, naming the field", "[kv_pool][cpu]") {
  auto bad = [](auto mutate, const char* field) {
    KVPoolOptions o = pool_options(2, 8, 4, 6);
    mutate(o);
    REQUIRE_THROWS_WITH(KVPool(o), Contains(field));
  };
  bad([](KVPoolOptions& o) { o.num_layers = 0; }, "num_layers");
  bad([](KVPoolOptions& o) { o.num_pages = 0; }, "num_pages");
  bad([](KVPoolOptions& o) { o.num_pages = int64_t(1) << 40; }, "num_pages");
  bad([](KVPoolOptions& o) { o.page_size = -1; }, "page_size");
  bad([](KVPoolOptions& o) { o.widths = {}; }, "widths");
  bad([](KVPoolOptions& o) { o.widths = {6, 0}; }, "widths[1]");
  bad([](KVPoolOptions& o) { o.dtype = at::kInt; }, "dtype");
}

TEST_CASE("KVPool: a fresh pool is free and consistent, and hands out pages of zeros", "[kv_pool][cpu]") {
  KVPoolOptions o = pool_options(3, 5, 4, 6);
  o.widths = {6, 10};
  KVPool pool(o);
  REQUIRE(pool.num_pages() == 5);
  REQUIRE(pool.num_free() == 5);
  REQUIRE(pool.num_live() == 0);
  REQUIRE(pool.num_kinds() == 2);
  REQUIRE(pool.page_bytes() == 3 * 4 * (6 + 10) * 4);
  REQUIRE(pool.storage(0).sizes() == at::IntArrayRef({3, 5, 4, 6}));
  REQUIRE(pool.storage(1).sizes() == at::IntArrayRef({3, 5, 4, 10}));
  pool.verify_integrity();
  // A CPU pool's memory is not written when it is made (a large one would be committed whole): each page is
  // zeroed as it is first handed out. NaN stands for whatever the memory held.
  for (int64_t k = 0; k < 2; ++k) pool.storage(k).fill_(std::nanf(""));

  // page() is a writable view of the storage row of that page.
  auto a = pool.allocate();
  REQUIRE(a.has_value());
  REQUIRE(*a == 0);  // fresh pools hand out ids in order
  for (int64_t k = 0; k < 2; ++k) REQUIRE(pool.storage(k).select(1, *a).eq(0.0f).all().item<bool>());
  REQUIRE(pool.storage(1).select(1, 1).isnan().all().item<bool>());  // not handed out yet: not written
  pool.page(1, 2, *a).fill_(7.0f);
  REQUIRE(pool.storage(1)[2][*a].eq(7.0f).all().item<bool>());
  REQUIRE(pool.storage(1).select(1, *a).sum().item<float>() == 7.0f * 4 * 10);
  std::vector<PageId> rest;
  REQUIRE(pool.allocate(4, rest).is_ok());
  for (PageId p : rest) {
    for (int64_t k = 0; k < 2; ++k) REQUIRE(pool.storage(k).select(1, p).eq(0.0f).all().item<bool>());
  }
  REQUIRE_THROWS_WITH(pool.page(2, 0, 0), Contains("kind"));
  REQUIRE_THROWS_WITH(pool.page(0, 3, 0), Contains("layer"));
  REQUIRE_THROWS_WITH(pool.page(0, 0, 5), Contains("out of range"));
}

TEST_CASE("KVPool: random allocate/retain/release against a reference model", "[kv_pool][cpu]") {
  for (uint32_t seed : {1u, 7u, 2024u}) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    KVPool pool(pool_options(1, 37, 2, 3));
    std::map<PageId, int32_t> expected;  // live pages only
    std::vector<PageId> holders;         // one entry per reference held
    int64_t refusals = 0, shares = 0;
    for (int step = 0; step < 4000; ++step) {
      const int op = std::uniform_int_distribution<int>(0, 9)(rng);
      const int64_t free_now = pool.num_pages() - static_cast<int64_t>(expected.size());
      if (op <= 2) {  // single allocate
        auto page = pool.allocate();
        REQUIRE(page.has_value() == (free_now > 0));
        if (page) {
          REQUIRE(expected.count(*page) == 0);  // never hands out a live page
          expected[*page] = 1;
          holders.push_back(*page);
        }
      } else if (op <= 4) {  // all-or-nothing multi allocate
        const int64_t count = std::uniform_int_distribution<int64_t>(0, 6)(rng);
        std::vector<PageId> out = {-5};  // existing contents must be kept
        auto status = pool.allocate(count, out);
        if (count <= free_now) {
          REQUIRE(status.is_ok());
          REQUIRE(static_cast<int64_t>(out.size()) == count + 1);
          for (size_t i = 1; i < out.size(); ++i) {
            REQUIRE(expected.count(out[i]) == 0);
            expected[out[i]] = 1;
            holders.push_back(out[i]);
          }
        } else {
          ++refusals;
          REQUIRE(status.code() == StatusCode::kOutOfCapacity);
          REQUIRE(out == std::vector<PageId>{-5});
        }
      } else if (op <= 6 && !holders.empty()) {  // share
        const PageId page = holders[std::uniform_int_distribution<size_t>(0, holders.size() - 1)(rng)];
        pool.retain(page);
        ++expected[page];
        holders.push_back(page);
        ++shares;
      } else if (!holders.empty()) {  // release one reference
        const size_t i = std::uniform_int_distribution<size_t>(0, holders.size() - 1)(rng);
        const PageId page = holders[i];
        holders[i] = holders.back();
        holders.pop_back();
        pool.release(page);
        if (--expected[page] == 0) expected.erase(page);
      }
      pool.verify_integrity();
      check_ref_counts(pool, expected);
    }
    REQUIRE(refusals > 0);  // the workload did reach exhaustion...
    REQUIRE(shares > 100);  // ...and did share pages
    for (PageId page : holders) pool.release(page);
    pool.verify_integrity();
    REQUIRE(pool.num_free() == pool.num_pages());
  }
}

TEST_CASE("KVPool: exhaustion is a value and changes nothing", "[kv_pool][cpu]") {
  KVPool pool(pool_options(1, 4, 2, 3));
  std::vector<PageId> held;
  REQUIRE(pool.allocate(3, held).is_ok());
  REQUIRE(held == std::vector<PageId>{0, 1, 2});

  std::vector<PageId> out = {42};
  orbit::Status status = pool.allocate(2, out);
  REQUIRE(status.code() == StatusCode::kOutOfCapacity);
  REQUIRE_THAT(status.reason(), Contains("2 pages requested") && Contains("1 free"));
  REQUIRE(out == std::vector<PageId>{42});
  REQUIRE(pool.num_free() == 1);
  pool.verify_integrity();

  REQUIRE(pool.allocate(0, out).is_ok());
  REQUIRE(out.size() == 1);
  REQUIRE(pool.allocate().value() == 3);
  REQUIRE_FALSE(pool.allocate().has_value());
  REQUIRE(pool.allocate(1, out).code() == StatusCode::kOutOfCapacity);
  REQUIRE(pool.num_free() == 0);
  REQUIRE_THROWS_WITH(pool.allocate(-1, out), Contains("count"));
  pool.verify_integrity();
}

TEST_CASE("KVPool: double free and bad ids throw and change nothing", "[kv_pool][cpu]") {
  KVPool pool(pool_options(1, 4, 2, 3));
  const PageId a = *pool.allocate();
  const PageId b = *pool.allocate();
  pool.retain(b);
  pool.release(a);
  REQUIRE_THROWS_WITH(pool.release(a), Contains("double free"));
  REQUIRE_THROWS_WITH(pool.retain(a), Contains("free"));
  for (PageId bad : {-1, 4, 1000}) {
    REQUIRE_THROWS_WITH(pool.release(bad), Contains("out of range"));
    REQUIRE_THROWS_WITH(pool.retain(bad), Contains("out of range"));
    REQUIRE_THROWS_WITH(pool.ref_count(bad), Contains("out of range"));
  }
  pool.verify_integrity();
  REQUIRE(pool.num_free() == 3);
  REQUIRE(pool.ref_count(a) == 0);
  REQUIRE(pool.ref_count(b) == 2);
  pool.release(b);
  pool.release(b);
  REQUIRE_THROWS_WITH(pool.release(b), Contains("double free"));
  REQUIRE(pool.num_free() == 4);
  pool.verify_integrity();
}

TEST_CASE("KVPool: verify_integrity reports corrupted state", "[kv_pool][cpu]") {
  auto corrupted = [](auto corrupt, const char* expected) {
    KVPool pool(pool_options(1, 6, 2, 3));
    std::vector<PageId> held;
    REQUIRE(pool.allocate(3, held).is_ok());  // pages 0..2 live, 3..5 free
    pool.retain(held[1]);
    pool.verify_integrity();
    corrupt(pool);
    REQUIRE_THROWS_AS(pool.verify_integrity(), Error);
    REQUIRE_THROWS_WITH(pool.verify_integrity(), Contains(expected));
  };
  using A = KVPoolTestAccess;
  corrupted([](KVPool& p) { A::free_list(p).push_back(A::free_list(p).front()); }, "appears twice");
  corrupted([](KVPool& p) { A::free_list(p).back() = 6; }, "out of range");
  corrupted([](KVPool& p) { A::free_list(p).back() = -1; }, "out of range");
  corrupted([](KVPool& p) { A::free_list(p).push_back(1); }, "on the free list with ref_count 2");
  corrupted([](KVPool& p) { A::ref_counts(p)[4] = 1; }, "page 4 is on the free list with ref_count 1");
  corrupted([](KVPool& p) { A::ref_counts(p)[0] = 0; }, "page 0 is off the free list with ref_count 0");
  corrupted([](KVPool& p) { A::ref_counts(p)[2] = -3; }, "ref_count -3");
  corrupted([](KVPool& p) { A::free_list(p).pop_back(); }, "off the free list with ref_count 0");  // leaked
  corrupted([](KVPool& p) { A::ref_counts(p).pop_back(); }, "reference counts");
}

// ---- PagedSequence ---------------------------------------------------------------------------------

TEST_CASE("PagedSequence: random chunks gather bit-for-bit", "[kv_pool][cpu]") {
  const int64_t L = 3, H = 2, D = 5, P = 4;
  for (uint32_t seed : {3u, 11u}) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    KVPool pool(pool_options(L, 64, P, H * D));
    PagedSequence seq(pool, H, D);
    Reference ref = empty_reference(L, H, D);
    check_gather(seq, ref);  // empty: [0, H, d] tensors and [0] positions
    for (int i = 0; i < 40; ++i) {
      const int64_t t = std::uniform_int_distribution<int64_t>(0, 2 * P + 3)(rng);
      Chunk c = random_chunk(rng, L, t, H, D);
      if (i % 3 == 0) {  // non-contiguous inputs are fine too
        for (LayerKV& l : c.content) l.k = l.k.transpose(0, 1).contiguous().transpose(0, 1);
      }
      REQUIRE(seq.append(c.content, c.positions).is_ok());
      extend(ref, c);
      REQUIRE(static_cast<int64_t>(seq.pages().size()) == pages_for(seq.length(), P));
      REQUIRE(pool.num_live() == static_cast<int64_t>(seq.pages().size()));
      check_gather(seq, ref);
      pool.verify_integrity();
    }
    // gather() is a copy: writing to it leaves the pool untouched.
    PastKV past = seq.gather();
    past.layers[0].k.fill_(0.0f);
    check_gather(seq, ref);
  }
}

TEST_CASE("PagedSequence: content converts to the pool dtype", "[kv_pool][cpu]") {
  KVPoolOptions o = pool_options(2, 8, 4, 6);
  o.dtype = at::kDouble;
  KVPool pool(o);
  PagedSequence seq(pool, 3, 2);
  std::mt19937 rng(5);
  Chunk c = random_chunk(rng, 2, 7, 3, 2);
  REQUIRE(seq.append(c.content, c.positions).is_ok());
  PastKV past = seq.gather();
  REQUIRE(past.layers[1].v.scalar_type() == at::kDouble);
  REQUIRE(at::equal(past.layers[1].v, c.content[1].v.to(at::kDouble)));
}

TEST_CASE("PagedSequence: fork shares pages and copies on write", "[kv_pool][cpu]") {
  const int64_t L = 2, H = 1, D = 3, P = 4;
  std::mt19937 rng(17);
  KVPool pool(pool_options(L, 16, P, H * D));
  Reference parent_ref = empty_reference(L, H, D);
  auto parent = std::make_unique<PagedSequence>(pool, H, D);
  Chunk base = random_chunk(rng, L, 5, H, D);  // pages: [full][1 of 4]
  REQUIRE(parent->append(base.content, base.positions).is_ok());
  extend(parent_ref, base);

  auto child = std::make_unique<PagedSequence>(parent->fork());
  Reference child_ref = parent_ref;
  REQUIRE(child->pages() == parent->pages());
  const PageId shared_full = parent->pages()[0], shared_tail = parent->pages()[1];
  REQUIRE(pool.ref_count(shared_full) == 2);
  REQUIRE(pool.ref_count(shared_tail) == 2);
  REQUIRE(pool.num_live() == 2);

  // The parent writes into the shared partial page and past it: it gets a private copy first.
  const at::Tensor tail_before = pool.storage(0).select(1, shared_tail).clone();
  Chunk a = random_chunk(rng, L, 6, H, D);
  REQUIRE(parent->append(a.content, a.positions).is_ok());
  extend(parent_ref, a);
  REQUIRE(parent->pages()[0] == shared_full);
  REQUIRE(parent->pages()[1] != shared_tail);
  REQUIRE(pool.ref_count(shared_tail) == 1);
  REQUIRE(pool.ref_count(parent->pages()[1]) == 1);
  REQUIRE(at::equal(pool.storage(0).select(1, shared_tail), tail_before));

  // The child now holds the old tail alone: it writes in place, then spills into a fresh page.
  Chunk b = random_chunk(rng, L, 6, H, D);
  REQUIRE(child->append(b.content, b.positions).is_ok());
  extend(child_ref, b);
  REQUIRE(child->pages()[1] == shared_tail);
  REQUIRE(child->pages().size() == 3);
  REQUIRE(pool.num_live() == 5);
  check_gather(*parent, parent_ref);
  check_gather(*child, child_ref);

  // A fork whose last page is full shares without any copy on the next append.
  auto grandchild = std::make_unique<PagedSequence>(child->fork());  // child length 11: [4][4][3 of 4]
  Reference grand_ref = child_ref;
  Chunk c = random_chunk(rng, L, 1, H, D);  // fills grandchild's copy of the tail: needs a copy
  REQUIRE(grandchild->append(c.content, c.positions).is_ok());
  extend(grand_ref, c);
  REQUIRE(grandchild->pages()[2] != child->pages()[2]);
  auto great = std::make_unique<PagedSequence>(grandchild->fork());  // length 12: all pages full
  Reference great_ref = grand_ref;
  const int64_t live_before = pool.num_live();
  Chunk d = random_chunk(rng, L, 3, H, D);
  REQUIRE(great->append(d.content, d.positions).is_ok());
  extend(great_ref, d);
  REQUIRE(pool.num_live() == live_before + 1);  // one fresh page, no copy
  for (size_t i = 0; i < 3; ++i) REQUIRE(pool.ref_count(great->pages()[i]) >= 2);
  check_gather(*grandchild, grand_ref);
  check_gather(*great, great_ref);
  check_gather(*child, child_ref);
  pool.verify_integrity();

  parent.reset();
  REQUIRE(pool.ref_count(shared_full) == 3);
  check_gather(*child, child_ref);
  child.reset();
  grandchild.reset();
  check_gather(*great, great_ref);
  great.reset();
  pool.verify_integrity();
  REQUIRE(pool.num_free() == pool.num_pages());
}

TEST_CASE("PagedSequence: truncate", "[kv_pool][cpu]") {
  const int64_t L = 2, H = 2, D = 2, P = 4;
  std::mt19937 rng(23);
  KVPool pool(pool_options(L, 8, P, H * D));
  PagedSequence seq(pool, H, D);
  Reference ref = empty_reference(L, H, D);
  Chunk c = random_chunk(rng, L, 10, H, D);
  REQUIRE(seq.append(c.content, c.positions).is_ok());
  extend(ref, c);

  REQUIRE_THROWS_WITH(seq.truncate(11), Contains("new_length"));
  REQUIRE_THROWS_WITH(seq.truncate(-1), Contains("new_length"));
  seq.truncate(10);
  REQUIRE(pool.num_live() == 3);
  seq.truncate(6);
  shorten(ref, 6);
  REQUIRE(pool.num_live() == 2);
  check_gather(seq, ref);

  // Truncating into a page shared with a fork, then appending, must not touch the fork's tokens.
  PagedSequence child = seq.fork();
  Reference child_ref = ref;
  child.truncate(5);
  shorten(child_ref, 5);
  Chunk d = random_chunk(rng, L, 2, H, D);
  REQUIRE(child.append(d.content, d.positions).is_ok());
  extend(child_ref, d);
  check_gather(seq, ref);
  check_gather(child, child_ref);

  seq.truncate(4);
  shorten(ref, 4);
  check_gather(seq, ref);
  seq.truncate(0);
  REQUIRE(seq.pages().empty());
  check_gather(seq, empty_reference(L, H, D));
  Chunk e = random_chunk(rng, L, 3, H, D);
  REQUIRE(seq.append(e.content, e.positions).is_ok());
  Reference e_ref = empty_reference(L, H, D);
  extend(e_ref, e);
  check_gather(seq, e_ref);
  pool.verify_integrity();
}

TEST_CASE("PagedSequence: out_of_capacity leaves everything unchanged", "[kv_pool][cpu]") {
  const int64_t L = 2, H = 1, D = 4, P = 4;
  std::mt19937 rng(29);
  KVPool pool(pool_options(L, 3, P, H * D));
  PagedSequence seq(pool, H, D);
  Reference ref = empty_reference(L, H, D);
  Chunk c = random_chunk(rng, L, 9, H, D);  // 3 pages, the last holding 1 token
  REQUIRE(seq.append(c.content, c.positions).is_ok());
  extend(ref, c);
  const at::Tensor storage_before = pool.storage(1).clone();

  Chunk big = random_chunk(rng, L, 4, H, D);  // needs one more page
  orbit::Status status = seq.append(big.content, big.positions);
  REQUIRE(status.code() == StatusCode::kOutOfCapacity);
  REQUIRE_THAT(status.reason(), Contains("4 tokens") && Contains("1 pages requested") && Contains("0 free"));
  check_gather(seq, ref);
  REQUIRE(seq.pages().size() == 3);
  REQUIRE(at::equal(pool.storage(1), storage_before));

  // The tail still has room without a copy...
  Chunk fits = random_chunk(rng, L, 3, H, D);
  // ...but not once it is shared: copy-on-write needs a page the pool does not have.
  PagedSequence child = seq.fork();
  REQUIRE(seq.append(fits.content, fits.positions).code() == StatusCode::kOutOfCapacity);
  check_gather(seq, ref);
  check_gather(child, ref);
  REQUIRE(pool.ref_count(seq.pages()[2]) == 2);
  child = PagedSequence(pool, H, D);  // move-assign releases the fork's pages
  REQUIRE(pool.ref_count(seq.pages()[2]) == 1);
  REQUIRE(seq.append(fits.content, fits.positions).is_ok());
  extend(ref, fits);
  check_gather(seq, ref);
  pool.verify_integrity();
}

TEST_CASE("PagedSequence: bad arguments throw naming them", "[kv_pool][cpu]") {
  const int64_t L = 2, H = 2, D = 3;
  KVPool pool(pool_options(L, 8, 4, H * D));
  REQUIRE_THROWS_WITH(PagedSequence(pool, 3, 3), Contains("widths"));
  REQUIRE_THROWS_WITH(PagedSequence(pool, 0, 3), Contains("num_kv_heads"));
  REQUIRE_THROWS_WITH(PagedSequence(pool, 2, 0), Contains("head_dim"));
  PagedSequence seq(pool, H, D);
  std::mt19937 rng(31);
  Chunk c = random_chunk(rng, L, 3, H, D);

  std::vector<LayerKV> one_layer = {c.content[0]};
  REQUIRE_THROWS_WITH(seq.append(one_layer, c.positions), Contains("content has 1 layers"));
  REQUIRE_THROWS_WITH(seq.append(c.content, c.positions.to(at::kInt)), Contains("positions"));
  REQUIRE_THROWS_WITH(seq.append(c.content, c.positions.narrow(0, 0, 2)), Contains("content[0].k"));
  REQUIRE_THROWS_WITH(seq.append(c.content, at::Tensor()), Contains("positions"));
  auto broken = c.content;
  broken[1].v = broken[1].v.reshape({3, 3, 2});
  REQUIRE_THROWS_WITH(seq.append(broken, c.positions), Contains("content[1].v"));
  broken = c.content;
  broken[0].k = at::Tensor();
  REQUIRE_THROWS_WITH(seq.append(broken, c.positions), Contains("content[0].k"));
  broken = c.content;
  broken[1].k = broken[1].k.to(at::kInt);
  REQUIRE_THROWS_WITH(seq.append(broken, c.positions), Contains("content[1].k"));
  REQUIRE(seq.length() == 0);
  REQUIRE(pool.num_free() == pool.num_pages());
}

TEST_CASE("PagedSequence: move semantics", "[kv_pool][cpu]") {
  const int64_t L = 1, H = 1, D = 2;
  std::mt19937 rng(37);
  KVPool pool(pool_options(L, 8, 2, H * D));
  Chunk c = random_chunk(rng, L, 5, H, D);
  Reference ref = empty_reference(L, H, D);
  extend(ref, c);
  PagedSequence a(pool, H, D);
  REQUIRE(a.append(c.content, c.positions).is_ok());
  PagedSequence b(std::move(a));
  REQUIRE(a.length() == 0);  // NOLINT(bugprone-use-after-move): moved-from state is specified empty
  REQUIRE(a.pages().empty());
  check_gather(b, ref);
  REQUIRE(pool.num_live() == 3);

  PagedSequence d(pool, H, D);
  REQUIRE(d.append(c.content, c.positions).is_ok());
  REQUIRE(pool.num_live() == 6);
  d = std::move(b);  // d's own pages are released
  REQUIRE(pool.num_live() == 3);
  check_gather(d, ref);
  d = std::move(d);
  check_gather(d, ref);
  pool.verify_integrity();
}

TEST_CASE("PagedSequence: random fork/append/truncate/destroy keeps the pool consistent", "[kv_pool][cpu]") {
  const int64_t L = 2, H = 2, D = 2, P = 3;
  for (uint32_t seed : {41u, 97u, 1234u}) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    KVPool pool(pool_options(L, 30, P, H * D));
    std::vector<std::unique_ptr<PagedSequence>> seqs;
    std::vector<Reference> refs;
    int64_t refusals = 0, copies_checked = 0;
    for (int step = 0; step < 1500; ++step) {
      const int op = std::uniform_int_distribution<int>(0, 9)(rng);
      const size_t n = seqs.size();
      const size_t pick = n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng);
      if (n == 0 || op == 0) {  // new sequence
        seqs.push_back(std::make_unique<PagedSequence>(pool, H, D));
        refs.push_back(empty_reference(L, H, D));
      } else if (op <= 4) {  // append
        const int64_t t = std::uniform_int_distribution<int64_t>(0, 2 * P + 1)(rng);
        Chunk c = random_chunk(rng, L, t, H, D);
        const std::vector<PageId> pages_before = seqs[pick]->pages();
        const int64_t free_before = pool.num_free();
        orbit::Status status = seqs[pick]->append(c.content, c.positions);
        if (status.is_ok()) {
          extend(refs[pick], c);
        } else {
          ++refusals;
          REQUIRE(status.code() == StatusCode::kOutOfCapacity);
          REQUIRE(seqs[pick]->pages() == pages_before);
          REQUIRE(pool.num_free() == free_before);
        }
      } else if (op <= 6 && n < 12) {  // fork
        seqs.push_back(std::make_unique<PagedSequence>(seqs[pick]->fork()));
        refs.push_back(refs[pick]);
      } else if (op <= 8) {  // truncate
        const int64_t len = std::uniform_int_distribution<int64_t>(0, seqs[pick]->length())(rng);
        seqs[pick]->truncate(len);
        shorten(refs[pick], len);
      } else {  // destroy
        seqs.erase(seqs.begin() + static_cast<std::ptrdiff_t>(pick));
        refs.erase(refs.begin() + static_cast<std::ptrdiff_t>(pick));
      }
      pool.verify_integrity();
      // Every page's ref_count is the number of block tables holding it.
      std::map<PageId, int32_t> expected;
      for (const auto& s : seqs) {
        REQUIRE(static_cast<int64_t>(s->pages().size()) == pages_for(s->length(), P));
        for (PageId p : s->pages()) ++expected[p];
      }
      check_ref_counts(pool, expected);
      if (step % 10 == 0) {
        for (size_t i = 0; i < seqs.size(); ++i) check_gather(*seqs[i], refs[i]);
        copies_checked += static_cast<int64_t>(seqs.size());
      }
    }
    REQUIRE(refusals > 0);
    REQUIRE(copies_checked > 100);
    for (size_t i = 0; i < seqs.size(); ++i) check_gather(*seqs[i], refs[i]);
    seqs.clear();
    pool.verify_integrity();
    REQUIRE(pool.num_free() == pool.num_pages());
  }
}

}  // namespace ORBIT_TEST_FILE
