// The window's refusals: bad input to windows and engines is refused with a message naming it (a chunk of
// another engine, an empty or out-of-vocabulary chunk, an instance a window does not hold, a stale plan, a
// plan made by another window, even one of another engine at the same version, a bad policy, a closed engine).
#include <random>
#include <string>
#include <vector>

#include "orbit/engine.h"
#include "orbit_catch.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;

namespace {

std::shared_ptr<Engine> open_stories() {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{64} << 20;
  o.page_size = 4;
  return Engine::open(o);
}

std::vector<ChunkRef> make_chunks(Engine& engine, std::mt19937_64& rng, int count) {
  std::uniform_int_distribution<int64_t> token(1, 511);
  std::vector<ChunkRef> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int64_t> t(static_cast<std::size_t>(5 + rng() % 6));
    for (auto& x : t) x = token(rng);
    ChunkOptions o;
    o.label = "c" + std::to_string(i);
    out.push_back(engine.add_tokens(t, o));
  }
  return out;
}

}  // namespace

TEST_CASE("bad input is refused with a message naming it", "[window][errors]") {
  auto engine = open_stories();
  auto other = open_stories();
  std::mt19937_64 rng(11);
  const auto c = make_chunks(*engine, rng, 2);
  const ChunkRef foreign = other->add_tokens({1, 2, 3, 99});
  Window w = engine->new_window();
  CHECK_THROWS_WITH(w.admit(foreign), Catch::Contains("not registered with this engine"));
  CHECK_THROWS_WITH(engine->add_tokens({}), Catch::Contains("empty chunk"));
  CHECK_THROWS_WITH(engine->add_tokens({1, 100000}), Catch::Contains("token 1 = 100000"));
  w.admit(c[0]);
  CHECK_THROWS_WITH(w.admit(c[0]), Catch::Contains("already in window"));
  CHECK_THROWS_WITH(w.recall(c[1]), Catch::Contains("was not evicted"));
  // A chunk in the window: nothing to recall (admit would refuse it too).
  CHECK_THROWS_WITH(w.recall(c[0]), Catch::Contains("is in window") && Catch::Contains("nothing to recall"));
  CHECK_THROWS_WITH(w.evict(12345), Catch::Contains("holds no instance 12345"));
  CHECK_THROWS_WITH(w.reorder({}), Catch::Contains("order lists 0 instances"));
  CHECK_THROWS_WITH(w.add_turn(std::vector<int64_t>{}), Catch::Contains("empty turn"));
  CHECK_THROWS_WITH(w.logits(std::vector<int64_t>{}), Catch::Contains("empty query"));
  CHECK_THROWS_WITH(w.slide(5), Catch::Contains("slide: chunks = 5"));
  const Plan stale = w.plan_admit(c[1]);
  w.add_turn({5, 6});
  CHECK_THROWS_WITH(w.apply(stale), Catch::Contains("stale plan"));
  Window other_window = engine->new_window();
  CHECK_THROWS_WITH(other_window.apply(w.plan_add_turn({7})), Catch::Contains("plan was made by window"));
  CHECK_THROWS_WITH(parse_policy("patch:0"), Catch::Contains("rank must be a positive integer"));
  CHECK_THROWS_WITH(parse_policy("bogus"), Catch::Contains("unknown policy 'bogus'"));
  EngineOptions bad;
  bad.model = "/nonexistent/model.bin";
  CHECK_THROWS_WITH(Engine::open(bad), Catch::Contains("/nonexistent/model.bin"));
  engine->close();
  CHECK_THROWS_WITH(w.admit(c[1]), Catch::Contains("engine is closed"));
}

TEST_CASE("a plan made by another engine's window is refused, not applied to this one", "[window][errors]") {
  // Two engines, each with one window at the same version: before window ids were unique in the process,
  // both were window 1 and the first's eviction plan evicted the second window's (other) chunk.
  auto first = open_stories();
  auto second = open_stories();
  const ChunkRef a = first->add_tokens({1, 5, 9, 13});
  const ChunkRef b = second->add_tokens({1, 6, 10, 14});
  Window w = first->new_window();
  Window v = second->new_window();
  w.admit(a);
  v.admit(b);
  REQUIRE(w.version() == v.version());
  CHECK(w.id() != v.id());
  CHECK_THROWS_WITH(v.apply(w.plan_evict(w.instances()[0].id)), Catch::Contains("plan was made by window"));
  REQUIRE(v.instances().size() == 1);
  CHECK(v.instances()[0].chunk.key == b.key);
}

TEST_CASE("a plan edited after planning is refused, and the window keeps what it holds", "[window][errors]") {
  // apply() reads only the plan: with its steps cleared it emptied the window and reported success, and with a
  // step's chunk swapped it admitted one chunk twice.
  auto engine = open_stories();
  std::mt19937_64 rng(12);
  const auto c = make_chunks(*engine, rng, 3);
  Window w = engine->new_window();
  w.admit(c[0]);
  w.admit(c[1]);
  const auto held = w.instances();
  Plan cleared = w.plan_admit(c[2]);
  cleared.steps.clear();
  CHECK_THROWS_WITH(w.apply(cleared), Catch::Contains("the plan was changed after plan_*() made it"));
  Plan swapped = w.plan_admit(c[2]);
  for (PlanStep& s : swapped.steps) {
    if (s.chunk == c[2]) s.chunk = c[0];
  }
  CHECK_THROWS_WITH(w.apply(swapped), Catch::Contains("plan again instead of editing"));
  Plan cheaper = w.plan_admit(c[2]);
  cheaper.forward_tokens = 0;
  CHECK_THROWS_WITH(w.apply(cheaper), Catch::Contains("changed after"));
  CHECK(w.instances().size() == held.size());
  // The plan as made (and any copy of it) applies.
  const Plan made = w.plan_admit(c[2]);
  const Plan copy = made;
  REQUIRE(w.apply(copy).is_ok());
  CHECK(w.instances().size() == held.size() + 1);
}

}  // namespace ORBIT_TEST_FILE
