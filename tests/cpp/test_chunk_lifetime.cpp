// How long an engine keeps a chunk registered (EngineOptions::max_idle_chunks, chunk_registry.h): by
// default for its life; with a bound, the most recently added or used (an eviction is a use), plus every
// chunk a window holds placed and every chunk a queued background job needs; a window's evicted chunk stays
// recallable while the engine keeps it. A forgotten chunk's
// ref is refused naming the option, and adding its tokens again brings it back under the same key, its
// stored KV found again.
#include "orbit_catch.h"

#include <algorithm>
#include <random>

#include "orbit/engine.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;

namespace {

std::shared_ptr<Engine> open_bounded(int64_t max_idle_chunks, BackgroundMode background = BackgroundMode::kThread) {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{16} << 20;
  o.page_size = 4;
  o.max_idle_chunks = max_idle_chunks;
  o.background = background;
  return Engine::open(o);
}

std::vector<int64_t> tokens_of(std::mt19937_64& rng, int64_t n) {
  std::uniform_int_distribution<int64_t> d(1, 511);
  std::vector<int64_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

double window_error(const Window& w, const std::vector<int64_t>& query) {
  const Logits a = w.logits(query, true), b = w.reference_logits(query, true);
  double m = 0;
  for (std::size_t i = 0; i < a.values.size(); ++i)
    m = std::max(m, static_cast<double>(std::abs(a.values[i] - b.values[i])));
  return m;
}

}  // namespace

TEST_CASE("a bounded registry forgets chunks nothing holds; adding them again brings them back", "[engine][chunks]") {
  auto engine = open_bounded(2);
  std::mt19937_64 rng(1);
  const std::vector<int64_t> ta = tokens_of(rng, 12);
  const ChunkRef a = engine->add_tokens(ta);
  const ChunkRef b = engine->add_tokens(tokens_of(rng, 12));
  const ChunkRef c = engine->add_tokens(tokens_of(rng, 12));
  CHECK(engine->stats().chunks == 2);
  CHECK_THROWS_WITH(engine->chunk(a.key), Catch::Contains("max_idle_chunks") && Catch::Contains(a.key.substr(0, 16)));
  Window w = engine->new_window(WindowOptions{});
  CHECK_THROWS_WITH(w.admit(a), Catch::Contains("max_idle_chunks"));
  CHECK(engine->chunk(b.key) == b);
  const ChunkRef again = engine->add_tokens(ta);
  CHECK(again.key == a.key);
  w.admit(again);
  CHECK_THROWS_WITH(w.admit(c), Catch::Contains("max_idle_chunks"));  // b was used since, c was not
  w.admit(b);
  CHECK(window_error(w, {5, 6}) <= 5e-4);
  const auto listed = engine->chunks();
  CHECK(listed.size() == static_cast<std::size_t>(engine->stats().chunks));
  CHECK_THROWS_WITH(open_bounded(-1), Catch::Contains("max_idle_chunks"));
}

// Admits x and y, registers other chunks, evicts and recalls x, registers more: the window's logits.
// `held_key` gets x's key.
std::vector<float> window_walk(Engine& engine, std::string* held_key) {
  std::mt19937_64 rng(2);
  WindowOptions o;
  o.policy = parse_policy("patch:full:noreuse");
  Window w = engine.new_window(o);
  const ChunkRef x = engine.add_tokens(tokens_of(rng, 10), ChunkOptions{"x", false});
  *held_key = x.key;
  w.admit(x);
  w.admit(engine.add_tokens(tokens_of(rng, 10), ChunkOptions{"y", false}));  // y's patch job is queued
  for (int i = 0; i < 5; ++i) (void)engine.add_tokens(tokens_of(rng, 8));
  CHECK(engine.chunk(x.key) == x);  // in use by the window
  w.evict(w.instances().front().id);
  REQUIRE(w.evicted().size() == 1);  // the eviction is a use: x is the most recent
  CHECK(w.evicted().front() == x);
  w.recall(x);
  for (int i = 0; i < 5; ++i) (void)engine.add_tokens(tokens_of(rng, 8));
  CHECK(engine.chunk(x.key) == x);      // placed again: the window holds it
  CHECK(engine.run_background() >= 1);  // the queued jobs ran on records nothing else names
  return w.logits({7, 8, 9}, true).values;
}

TEST_CASE("what a window holds placed, and what a queued job needs, stays registered", "[engine][chunks]") {
  auto bounded = open_bounded(1, BackgroundMode::kDeferred);
  auto unbounded = open_bounded(0, BackgroundMode::kDeferred);
  std::string held_key, same_key;
  const std::vector<float> logits = window_walk(*bounded, &held_key);
  CHECK(logits == window_walk(*unbounded, &same_key));  // forgetting others changes nothing in the window
  (void)bounded->add_tokens({3, 4, 5});
  CHECK_THROWS_WITH(bounded->chunk(held_key), Catch::Contains("max_idle_chunks"));  // the window is gone
  CHECK(bounded->stats().chunks == 1);
  CHECK(unbounded->chunk(same_key).key == same_key);
}

TEST_CASE("a window's evictions hold no chunk past max_idle_chunks; the last ones stay recallable",
          "[engine][chunks]") {
  // A window synced with one conversation after another (a server's anonymous window) evicts a chunk per list:
  // each evicted chunk was held for recall, 1,024 per window, past the bound the engine was given.
  for (const int64_t bound : {int64_t{4}, int64_t{0}}) {
    CAPTURE(bound);
    auto engine = open_bounded(bound, BackgroundMode::kInline);
    std::mt19937_64 rng(5);
    Window w = engine->new_window(WindowOptions{});
    std::vector<ChunkRef> chunks;
    for (int i = 0; i < 20; ++i) {
      chunks.push_back(engine->add_tokens(tokens_of(rng, 6)));
      w.admit(chunks.back());
      w.evict(w.instances().front().id);
    }
    const std::vector<ChunkRef> evicted = w.evicted();
    CHECK(w.stats().evicted == static_cast<int64_t>(evicted.size()));
    if (bound == 0) {
      CHECK(evicted.size() == 20);
      continue;
    }
    CHECK(engine->stats().chunks <= bound);
    CHECK(evicted.size() == static_cast<std::size_t>(bound));
    CHECK(std::find(evicted.begin(), evicted.end(), chunks.back()) != evicted.end());
    CHECK_THROWS_WITH(w.recall(chunks.front()), Catch::Contains("max_idle_chunks"));
    w.recall(chunks.back());  // the last evicted is kept, and comes back as its instance
    CHECK(w.instances().size() == 1);
    CHECK(w.instances().front().chunk == chunks.back());
  }
}

TEST_CASE("by default every chunk stays registered for the engine's life", "[engine][chunks]") {
  auto engine = open_bounded(0);
  std::mt19937_64 rng(3);
  std::vector<ChunkRef> refs;
  for (int i = 0; i < 40; ++i) refs.push_back(engine->add_tokens(tokens_of(rng, 6)));
  CHECK(engine->stats().chunks == 40);
  for (const ChunkRef& r : refs) CHECK(engine->chunk(r.key) == r);
}

// A window that admits `n` new chunks one after another: each first sight in context leaves a patch job queued
// (BackgroundMode::kDeferred: nothing runs them here).
Window admit_new_chunks(Engine& engine, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  WindowOptions o;
  o.policy = parse_policy("patch:full:noreuse");
  Window w = engine.new_window(o);
  for (int i = 0; i < n; ++i) w.admit(engine.add_tokens(tokens_of(rng, 10)));
  return w;
}

TEST_CASE("queued background work past max_background_bytes drops the oldest jobs and lets their chunks go",
          "[engine][chunks][background]") {
  // A deferred queue nobody runs (a server that never goes idle) holds every first sight's KV without a bound.
  auto unbounded = open_bounded(1, BackgroundMode::kDeferred);
  { Window w = admit_new_chunks(*unbounded, 6, 4); }
  const EngineStats all = unbounded->stats();
  REQUIRE(all.background_pending >= 4);
  CHECK(all.background_dropped == 0);
  const int64_t per_job = all.background_pending_bytes / all.background_pending;
  REQUIRE(per_job > 0);

  // Bounded to two jobs' KV: the oldest are dropped as new ones come, the chunks only they held are let go.
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{16} << 20;
  o.page_size = 4;
  o.max_idle_chunks = 1;
  o.background = BackgroundMode::kDeferred;
  o.max_background_bytes = 2 * per_job;
  auto bounded = Engine::open(o);
  { Window w = admit_new_chunks(*bounded, 6, 4); }
  const EngineStats some = bounded->stats();
  CHECK(some.background_pending_bytes <= o.max_background_bytes);
  CHECK(some.background_pending == 2);
  CHECK(some.background_dropped == all.background_pending - 2);
  CHECK(some.chunks < all.chunks);  // the dropped jobs' chunks are forgotten (max_idle_chunks 1)

  // The same chunks again: a plan that counted on a dropped job's patch finds it missing and still serves them.
  Window again = admit_new_chunks(*bounded, 6, 4);
  CHECK(window_error(again, {5, 6}) <= 5e-4);
  CHECK(bounded->run_background() >= 1);
  CHECK(bounded->stats().background_pending_bytes == 0);

  o.max_background_bytes = -1;
  CHECK_THROWS_WITH(Engine::open(o), Catch::Contains("max_background_bytes"));
}

}  // namespace ORBIT_TEST_FILE
