// Interruption points (orbit/interrupt.h): an InterruptScope's check runs before each instance a plan serves,
// and one that answers true throws orbit::Interrupted there with nothing of the plan committed; the window then
// answers as one never interrupted.
#include "orbit_catch.h"

#include <random>

#include "orbit/engine.h"
#include "orbit/interrupt.h"
#include "test_helpers.h"
#include "window_test_support.h"

using namespace orbit;
using orbit::test::random_tokens;

namespace {

// Six chunks under a deferring re-prefill, the first evicted: the next read repairs the five others (5 steps).
Window deferred_window(Engine& engine, const std::vector<ChunkRef>& chunks) {
  WindowOptions o;
  o.policy = parse_policy("reprefill");
  Window w = engine.new_window(o);
  for (const ChunkRef& c : chunks) w.admit(c);
  w.evict(w.instances().front().id);
  return w;
}

}  // namespace

TEST_CASE("an interruption point stops a plan before an instance and commits nothing", "[window][interrupt]") {
  std::mt19937_64 rng(7);
  auto engine = test::open_stories_small_pages();
  std::vector<ChunkRef> chunks;
  for (int i = 0; i < 6; ++i) chunks.push_back(engine->add_tokens(random_tokens(rng, 10)));
  const std::vector<int64_t> query = random_tokens(rng, 3);

  Window plain = deferred_window(*engine, chunks);
  const Logits want = plain.logits(query);

  Window w = deferred_window(*engine, chunks);
  const uint64_t version = w.version();
  const int64_t served = w.plan_flush().steps.size();
  REQUIRE(served == 5);
  int checks = 0;
  {
    const InterruptScope scope([&] { return ++checks == 3; });
    CHECK_THROWS_AS(w.logits(query), Interrupted);
  }
  CHECK(checks == 3);  // stopped before the third of the five repairs
  CHECK(w.version() == version);
  for (std::size_t i = 0; i < w.instances().size(); ++i) CHECK(w.instances()[i].deferred);

  // A scope whose check answers false, and no scope at all, change nothing: every instance is served.
  checks = 0;
  {
    const InterruptScope scope([&] {
      ++checks;
      return false;
    });
    const Logits got = w.logits(query);
    CHECK(got.values == want.values);
  }
  CHECK(checks == served);
  CHECK(w.version() == version + 1);
}

TEST_CASE("interrupt scopes nest: the innermost is checked, a null check hides an outer one", "[interrupt]") {
  int outer_checks = 0;
  const InterruptScope outer([&] {
    ++outer_checks;
    return true;
  });
  CHECK_THROWS_WITH(interruption_point("sync"), "sync: interrupted");
  {
    const InterruptScope inner(nullptr);
    CHECK_NOTHROW(interruption_point("sync"));
  }
  CHECK_THROWS_AS(interruption_point("sync"), Interrupted);
  CHECK(outer_checks == 2);
}
