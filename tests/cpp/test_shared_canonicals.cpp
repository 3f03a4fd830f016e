// Shared canonicals (EngineOptions::shared_canonicals, docs/ARCHITECTURE.md §5): windows placing the same
// chunks read one canonical page set per chunk, each with its own patch factors, and give the logits the
// private patched copies give. The sharing is asserted from the pool's own counters (EngineStats::pool_*),
// structurally: one canonical set per chunk, one placement per window instance, one patch per placement.
#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/shared_pool.h"
#include "orbit/engine.h"
#include "orbit/policy.h"
#include "orbit/pool_room.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/paged_past.h"
#include "orbit/window.h"
#include "orbit_catch.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using orbit::test::max_abs_diff;
using orbit::test::random_tokens;

namespace {

constexpr int64_t kWindows = 8;
constexpr int64_t kPageSize = 16;

std::shared_ptr<Engine> open_engine(bool shared, int64_t pool_bytes = int64_t{32} << 20) {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = pool_bytes;
  o.page_size = kPageSize;
  o.background = BackgroundMode::kDeferred;
  o.shared_canonicals = shared;
  return Engine::open(o);
}

int64_t pages_for(int64_t tokens) { return (tokens + kPageSize - 1) / kPageSize; }

// Everything both engines are given: 4 chunks, and per window a distinct leading turn and an order of the
// chunks (so every placement's context, and so its patch, differs from every other window's).
struct Setup {
  std::vector<std::vector<int64_t>> chunks;
  std::vector<std::vector<int64_t>> turns;
  std::vector<std::vector<int>> orders;
  std::vector<int64_t> query;
};

Setup make_setup() {
  std::mt19937_64 rng(7);
  Setup s;
  for (int64_t n : {40, 23, 33, 17}) s.chunks.push_back(random_tokens(rng, n));
  std::vector<int> order{0, 1, 2, 3};
  for (int64_t w = 0; w < kWindows; ++w) {
    s.turns.push_back(random_tokens(rng, 5));
    s.orders.push_back(order);
    std::shuffle(order.begin(), order.end(), rng);
  }
  s.query = random_tokens(rng, 4);
  return s;
}

std::unique_ptr<Window> build(Engine& engine, const Setup& s, const std::vector<ChunkRef>& refs, int64_t w) {
  WindowOptions o;
  o.policy = parse_policy("patch:full:noreuse");  // full-rank stored patches: each instance exact
  auto window = std::make_unique<Window>(engine.new_window(o));
  window->add_turn(s.turns[static_cast<std::size_t>(w)]);
  for (int c : s.orders[static_cast<std::size_t>(w)]) window->admit(refs[static_cast<std::size_t>(c)]);
  return window;
}

// The 8 windows, built once to form each placement's patch (first sight: a prefill in context, the patch
// formed in the background), closed, and built again from the stored patches.
std::vector<std::unique_ptr<Window>> build_windows(Engine& engine, const Setup& s) {
  std::vector<ChunkRef> refs;
  for (const auto& c : s.chunks) refs.push_back(engine.add_tokens(c));
  for (int64_t w = 0; w < kWindows; ++w) build(engine, s, refs, w);
  engine.run_background();
  std::vector<std::unique_ptr<Window>> out;
  for (int64_t w = 0; w < kWindows; ++w) out.push_back(build(engine, s, refs, w));
  return out;
}

int64_t chunk_pages(const Setup& s) {
  int64_t n = 0;
  for (const auto& c : s.chunks) n += pages_for(static_cast<int64_t>(c.size()));
  return n;
}

int64_t turn_pages(const Setup& s) {
  int64_t n = 0;
  for (const auto& t : s.turns) n += pages_for(static_cast<int64_t>(t.size()));
  return n;
}

}  // namespace

TEST_CASE("8 windows of the same 4 chunks share one canonical page set and give the private copies' logits",
          "[window][shared]") {
  const Setup s = make_setup();
  auto shared_engine = open_engine(true);
  auto private_engine = open_engine(false);
  const auto shared = build_windows(*shared_engine, s);
  const auto copies = build_windows(*private_engine, s);

  // Every chunk instance of the second build was served from a stored patch (the contexts differ, so do
  // the patches), and both engines did the same work.
  const EngineStats a = shared_engine->stats();
  const EngineStats b = private_engine->stats();
  CHECK(a.patch_hits == kWindows * 4);
  CHECK(b.patch_hits == kWindows * 4);

  // Structure, from the pool's counters: one canonical set per chunk, read by every window's instance,
  // each carrying its own patch; the pool holds that set once plus the windows' private turns.
  const int64_t page_bytes = a.pool_bytes_used / (a.pool_pages - a.pool_free_pages);
  CHECK(a.pool_canonical_sets == 4);
  CHECK(a.pool_canonical_pages == chunk_pages(s));
  CHECK(a.pool_placements == kWindows * 4);
  CHECK(a.pool_patches == kWindows * 4);
  CHECK(a.pool_patch_bytes > 0);
  CHECK(a.pool_pages - a.pool_free_pages == chunk_pages(s) + turn_pages(s));
  // The private engine writes each placement: 8 copies of the chunks' pages, and no canonical set.
  CHECK(b.pool_canonical_sets == 0);
  CHECK(b.pool_placements == 0);
  CHECK(b.pool_patch_bytes == 0);
  CHECK(b.pool_pages - b.pool_free_pages == kWindows * chunk_pages(s) + turn_pages(s));
  CHECK(b.pool_bytes_used == kWindows * (a.pool_bytes_used - turn_pages(s) * page_bytes) + turn_pages(s) * page_bytes);

  // Same logits, same KV, same answer; and each window equals its re-prefill (full-rank patches).
  for (int64_t w = 0; w < kWindows; ++w) {
    const Window& x = *shared[static_cast<std::size_t>(w)];
    const Window& y = *copies[static_cast<std::size_t>(w)];
    CHECK(max_abs_diff(x.logits(s.query, true).values, y.logits(s.query, true).values) <= 1e-5);
    CHECK(max_abs_diff(x.logits(s.query, true).values, x.reference_logits(s.query, true).values) <= 5e-4);
    const auto xi = x.instances();
    const auto yi = y.instances();
    REQUIRE(xi.size() == yi.size());
    for (std::size_t i = 0; i < xi.size(); ++i) {
      const InstanceKV kx = x.kv(xi[i].id);
      const InstanceKV ky = y.kv(yi[i].id);
      for (std::size_t l = 0; l < kx.k.size(); ++l) {
        CHECK(max_abs_diff(kx.k[l], ky.k[l]) <= 1e-6);
        CHECK(max_abs_diff(kx.v[l], ky.v[l]) <= 1e-6);
      }
    }
    GenerateOptions g;
    g.max_tokens = 6;
    CHECK(x.generate(s.query, g).tokens == y.generate(s.query, g).tokens);
    // Each window's chunk pages are read by the other windows too.
    CHECK(x.stats().shared_pages == chunk_pages(s));
    CHECK(y.stats().shared_pages == 0);
  }
}

TEST_CASE("a pool with room for one canonical set and the turns holds every window that shares it",
          "[window][shared]") {
  // Planning counts no fresh pages for a placement whose chunk's set is held already: the last windows'
  // admits fit in the 2 pages left, where pricing each placement as a copy (3 pages for the longest chunk)
  // refused them. Without sharing the same pool cannot hold the copies.
  const Setup s = make_setup();
  const int64_t need = chunk_pages(s) + turn_pages(s);
  const int64_t page_bytes = open_engine(true)->model_info().kv_bytes_per_token * kPageSize;
  auto engine = open_engine(true, (need + 2) * page_bytes);
  const auto windows = build_windows(*engine, s);
  const EngineStats st = engine->stats();
  CHECK(st.pool_pages == need + 2);
  CHECK(st.pool_pages - st.pool_free_pages == need);
  CHECK(st.pool_placements == kWindows * 4);
  auto copies = open_engine(false, (need + 2) * page_bytes);
  CHECK_THROWS_WITH(build_windows(*copies, s), Catch::Matchers::Contains("the KV pool is full"));
}

TEST_CASE("a fork reads the same canonical pages, and the sets go when no window holds them", "[window][shared]") {
  const Setup s = make_setup();
  auto engine = open_engine(true);
  auto windows = build_windows(*engine, s);
  const EngineStats before = engine->stats();
  Window child = windows.front()->fork();
  const EngineStats forked = engine->stats();
  CHECK(forked.pool_canonical_sets == 4);
  CHECK(forked.pool_placements == before.pool_placements + 4);
  CHECK(forked.pool_patches == before.pool_patches);  // the fork carries its parent's factors
  CHECK(forked.pool_free_pages == before.pool_free_pages);
  CHECK(max_abs_diff(child.logits(s.query).values, windows.front()->logits(s.query).values) == 0);

  windows.clear();
  CHECK(engine->stats().pool_canonical_sets == 4);  // the fork still reads them
  child.evict(child.instances().back().id);
  const EngineStats one_left = engine->stats();
  CHECK(one_left.pool_canonical_sets == 3);  // the chunk it evicted was read by no one else
  CHECK(one_left.pool_placements == 3);
  { Window gone = std::move(child); }
  const EngineStats none = engine->stats();
  CHECK(none.pool_canonical_sets == 0);
  CHECK(none.pool_placements == 0);
  CHECK(none.pool_patches == 0);
  CHECK(none.pool_free_pages == none.pool_pages);
}

// orbit::pages_freed_by_closing (orbit/pool_room.h) counts what closing windows really gives back: nothing while
// another window holds the pages; a chunk's canonical set once its last placement is among them, unless the caller
// places that chunk again; what two forks share only together. Each count is checked against the pool's free pages
// after the close.
TEST_CASE("pages_freed_by_closing counts the pages a close gives back, canonical sets included", "[window][shared]") {
  std::mt19937_64 rng(11);
  auto engine = open_engine(true);
  const ChunkRef chunk = engine->add_tokens(random_tokens(rng, 40));  // 3 pages, placed from its canonical
  const std::vector<int64_t> turn = random_tokens(rng, 20);           // 2 pages of its own
  const auto freed = [](std::vector<const Window*> closing, std::vector<std::string> placed_again = {}) {
    return pages_freed_by_closing(PoolRoomQuery{std::move(closing), std::move(placed_again)});
  };
  auto window = std::make_unique<Window>(engine->new_window());
  window->admit(chunk);
  window->add_turn(turn);
  REQUIRE(window->instances().front().formed_by == StepAction::kCanonical);
  REQUIRE(engine->stats().pool_canonical_sets == 1);
  Window first = window->fork(), second = window->fork();
  CHECK(freed({}) == 0);
  CHECK(freed({&first}) == 0);  // the window and the other fork hold every page
  CHECK(freed({&first, &second}) == 0);
  CHECK(freed({window.get(), &first, &second}) == pages_for(40) + pages_for(20));
  window.reset();
  CHECK(freed({&first}) == 0);  // the other fork still holds them
  CHECK(freed({&first, &second}) == pages_for(40) + pages_for(20));
  CHECK(freed({&first, &second}, {chunk.key}) == pages_for(20));  // the set, placed again, is written anew
  CHECK_THROWS_WITH(freed({&first, &first}), Catch::Contains("twice"));
  CHECK_THROWS_WITH(freed({&first, nullptr}), Catch::Contains("null"));

  { Window gone = std::move(second); }
  const int64_t counted = freed({&first});
  CHECK(counted == pages_for(40) + pages_for(20));  // the last placement of the set, and the turn's own pages
  const int64_t free_before = engine->stats().pool_free_pages;
  { Window gone = std::move(first); }
  CHECK(engine->stats().pool_free_pages - free_before == counted);
  CHECK(engine->stats().pool_canonical_sets == 0);
}

namespace {

// Random float32 factors of rank `rank` for the first `rows` rows of every layer (K and V).
std::shared_ptr<const runtime::Patch> random_patch(const runtime::ModelConfig& c, int64_t rows, int64_t rank,
                                                   uint64_t seed) {
  at::manual_seed(seed);
  auto p = std::make_shared<runtime::Patch>();
  p->length = rows;
  const std::vector<int64_t> widths = c.content_widths();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    p->k.push_back({at::randn({rows, rank}) * 0.1, at::randn({rank, widths[0]})});
    p->v.push_back({at::randn({rows, rank}) * 0.1, at::randn({rank, widths[1]})});
  }
  return p;
}

runtime::Content random_content(const runtime::ModelConfig& c, int64_t rows, uint64_t seed) {
  at::manual_seed(seed);
  runtime::Content out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    out.push_back({at::randn({rows, c.num_kv_heads, c.head_dim}), at::randn({rows, c.num_kv_heads, c.head_dim})});
  }
  return out;
}

}  // namespace

TEST_CASE("a paged read of placements carries each one's factors at its rows, as gather adds them",
          "[window][shared]") {
  const runtime::ModelConfig c = runtime::load_model(test::stories_path())->config();
  runtime::KVPoolOptions po;
  po.num_layers = c.num_layers;
  po.num_pages = 64;
  po.page_size = kPageSize;
  po.widths = c.content_widths();
  orbit::detail::SharedPool pool(po);
  const int64_t rows = c.position_rows();
  const auto positions = [&](int64_t n) {
    return rows == 1 ? at::zeros({n}, at::kLong) : at::zeros({rows, n}, at::kLong);
  };
  const runtime::Content a = random_content(c, 37, 1), b = random_content(c, 20, 2), turn = random_content(c, 9, 3);

  // A private turn, chunk a placed twice with different patches (one covering only its first rows), chunk
  // b placed without a patch, and a fork of the first placement: every kind of sequence a window holds.
  std::vector<std::unique_ptr<runtime::PagedSequence>> seqs;
  seqs.push_back(pool.create(c, turn, positions(9)));
  seqs.push_back(pool.place(c, "a", a, random_patch(c, 37, 4, 11)));
  seqs.push_back(pool.place(c, "b", b, nullptr));
  seqs.push_back(pool.place(c, "a", a, random_patch(c, 30, 2, 12)));
  seqs.push_back(pool.fork(*seqs[1]));
  for (const auto& s : seqs) REQUIRE(s != nullptr);
  CHECK(pool.sharing().canonical_sets == 2);
  CHECK(pool.sharing().patches == 2);  // float32 on the pool's device already: kept, not copied

  std::vector<const runtime::PagedSequence*> order;
  for (const auto& s : seqs) order.push_back(s.get());
  const auto paged = pool.paged(order);
  REQUIRE(paged->patches.size() == 3);
  CHECK(paged->patches[0].first == 9);
  CHECK(paged->patches[1].first == 9 + 37 + 20);
  CHECK(paged->patches[2].first == 9 + 37 + 20 + 37);
  const std::vector<runtime::LayerKV> read = runtime::materialize(c, *paged, c10::Device(c10::kCPU), at::kFloat);
  int64_t first = 0;
  for (const auto& s : seqs) {
    const runtime::PastKV want = pool.gather(*s);
    const int64_t n = s->length();
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const auto& got = read[static_cast<std::size_t>(l)];
      const auto& w = want.layers[static_cast<std::size_t>(l)];
      CHECK(max_abs_diff(got.k.narrow(0, first, n).reshape(w.k.sizes()), w.k) <= 1e-6);
      CHECK(max_abs_diff(got.v.narrow(0, first, n).reshape(w.v.sizes()), w.v) <= 1e-6);
    }
    first += n;
  }
  // The patches change what is read: the placements of a differ from each other and from b's canonical.
  CHECK(max_abs_diff(read[0].k.narrow(0, 9, 30), read[0].k.narrow(0, 9 + 37 + 20, 30)) > 1e-3);
  for (auto& s : seqs) pool.destroy(s);
  CHECK(pool.sharing().canonical_sets == 0);
}

}  // namespace ORBIT_TEST_FILE
