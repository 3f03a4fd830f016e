// The fidelity self-check (Window::idle): the heal measures, on a probe, the KL the approximate window
// carried against the healed one; the engine learns measured / predicted from it (EngineStats::
// fidelity_correction, never below 1) and every later plan predicts that much more. The check's forwards
// are background work, never critical.
#include "orbit_catch.h"

#include <cmath>
#include <random>

#include "orbit/engine.h"
#include "orbit/planner/fidelity_model.h"
#include "test_helpers.h"
#include "window_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using orbit::test::random_tokens;

namespace {

Window window_with(Engine& engine, const char* spec) {
  WindowOptions o;
  o.policy = parse_policy(spec);
  return engine.new_window(o);
}

// Three random-token chunks and a turn, one chunk then evicted: the survivors after it are kept as they
// are (relocation only), so they carry its influence. On most draws the fidelity model over-predicts this;
// with seed 4 and the middle chunk evicted the probe measures 5.7x its prediction (found by sweeping seeds,
// evicted positions and lengths: the ratio spans 0.03x to 5.7x, which is why the planner checks itself).
struct Scenario {
  ChunkRef a, b, c;
  std::vector<int64_t> turn;
};

Scenario make_scenario(Engine& engine, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Scenario s;
  s.a = engine.add_tokens(random_tokens(rng, 24));
  s.b = engine.add_tokens(random_tokens(rng, 20));
  s.c = engine.add_tokens(random_tokens(rng, 16));
  s.turn = random_tokens(rng, 10);
  return s;
}

void fill(Engine& engine, Window& w, const Scenario& s) {
  w.admit(s.a);
  w.admit(s.b);
  w.admit(s.c);
  w.add_turn(s.turn);
  engine.run_background();
}

}  // namespace

TEST_CASE("FidelityCorrection: the largest of the last 8 measured / predicted ratios, in [1, 64]",
          "[planner][fidelity]") {
  using planner::FidelityCorrection;
  FidelityCorrection c;
  CHECK(c.factor() == 1.0);
  // The model pessimistic: nothing changes (never less careful than the model).
  CHECK(c.observe(1e-4, 1e-3));
  CHECK(c.factor() == 1.0);
  // Both negligible: says nothing, not counted.
  CHECK_FALSE(c.observe(1e-7, 1e-6));
  CHECK(c.checks() == 1);
  // Measured 8x the prediction: the factor covers it at once.
  CHECK(c.observe(8e-3, 1e-3));
  CHECK(c.factor() == Approx(8.0));
  CHECK(c.last_ratio() == Approx(8.0));
  // A smaller miss after it does not lower it ...
  CHECK(c.observe(2e-3, 1e-3));
  CHECK(c.factor() == Approx(8.0));
  // ... until the 8x miss is older than the last kRecentChecks checks: then the largest since is the factor.
  for (std::size_t i = 0; i + 2 < FidelityCorrection::kRecentChecks; ++i) c.observe(1e-4, 1e-3);
  CHECK(c.factor() == Approx(8.0));
  c.observe(1e-4, 1e-3);
  CHECK(c.factor() == Approx(2.0));
  // A prediction of nothing against a real loss: bounded.
  c.observe(1e-2, 0);
  CHECK(c.factor() == Approx(FidelityCorrection::kMaxFactor));
  // Lucky checks bring it back down once it ages out, never below 1.
  for (std::size_t i = 0; i < FidelityCorrection::kRecentChecks; ++i) c.observe(1e-6, 1e-2);
  CHECK(c.factor() == Approx(1.0));
  CHECK_FALSE(c.observe(-1, 1e-3));
  CHECK_FALSE(c.observe(std::nan(""), 1e-3));
  // The model scaled by it predicts that much more.
  const planner::FidelityModel m;
  CHECK(m.scaled(3.0).predict(planner::Loss::kKeep, 0.5, 0.5) ==
        Approx(3.0 * m.predict(planner::Loss::kKeep, 0.5, 0.5)));
  CHECK_THROWS(m.scaled(0));
}

TEST_CASE("self-check: a window measured worse than predicted raises the correction; later plans predict more",
          "[window][idle][fidelity]") {
  auto engine = test::open_stories_small_pages(BackgroundMode::kDeferred);
  const Scenario sc = make_scenario(*engine, 4);
  // heal=0: any approximate window is healed (and checked) in idle time. noreuse: the twin would otherwise
  // load the KV the heal computed (exact reuse) and predict nothing.
  Window w = window_with(*engine, "patch:16:heal=0:noreuse:check:eager");
  fill(*engine, w, sc);
  Window twin = window_with(*engine, "patch:16:heal=0:noreuse:check:eager");
  fill(*engine, twin, sc);
  const InstanceId middle = twin.instances()[1].id;
  const double planned_before = twin.plan_evict(middle).predicted_kl;
  REQUIRE(planned_before > 0);
  CHECK(engine->stats().fidelity_correction == 1.0);

  w.evict(w.instances()[1].id);
  const EngineStats s0 = engine->stats();
  const WindowStats w0 = w.stats();
  const IdleReport r = w.idle();
  const EngineStats s1 = engine->stats();
  REQUIRE(r.checked);
  CHECK(r.healed_instances > 0);
  CHECK(r.predicted_kl > 0);
  // The scenario's premise: the model predicted less than the probe measured.
  REQUIRE(r.measured_kl > r.predicted_kl);
  CHECK(r.fidelity_correction > 1.0);
  CHECK(s1.fidelity_correction == Approx(r.fidelity_correction));
  CHECK(s1.fidelity_checks == s0.fidelity_checks + 1);
  // The check's two probes (the window's last 8 ids, before and after the heal): background, never critical.
  CHECK(r.check_forward_tokens == Approx(16));
  CHECK(r.forward_tokens == Approx(r.heal_forward_tokens + r.check_forward_tokens + r.prepare_forward_tokens));
  CHECK(s1.check_forward_tokens - s0.check_forward_tokens == Approx(16));
  CHECK(s1.critical_forward_tokens == Approx(s0.critical_forward_tokens));
  CHECK(s1.background_forward_tokens - s0.background_forward_tokens ==
        Approx(r.heal_forward_tokens + r.check_forward_tokens));
  CHECK(w.stats().critical_forward_tokens == Approx(w0.critical_forward_tokens));
  CHECK(w.stats().forward_tokens - w0.forward_tokens == Approx(r.heal_forward_tokens + r.check_forward_tokens));

  // The same edit planned again in the twin now predicts the correction's share more.
  const double planned_after = twin.plan_evict(middle).predicted_kl;
  CHECK(planned_after == Approx(planned_before * r.fidelity_correction).epsilon(1e-6));
  CHECK(engine->fidelity_model_description().find("correction x") != std::string::npos);
}

TEST_CASE("self-check: below heal_min_kl, a window that is not exact is checked every fourth idle call",
          "[window][idle][fidelity]") {
  auto engine = test::open_stories_small_pages(BackgroundMode::kDeferred);
  const Scenario sc = make_scenario(*engine, 12);
  // A threshold no prediction reaches: only the sampled check heals.
  Window w = window_with(*engine, "patch:16:heal=10:check:eager");
  fill(*engine, w, sc);
  w.evict(w.instances()[0].id);
  const double critical = engine->stats().critical_forward_tokens;
  for (int i = 0; i < 3; ++i) {
    const IdleReport r = w.idle();
    CHECK_FALSE(r.checked);
    CHECK(r.healed_instances == 0);
    CHECK(r.check_forward_tokens == 0);
  }
  const IdleReport r = w.idle();
  CHECK(r.checked);
  CHECK(r.healed_instances > 0);
  CHECK(r.measured_kl >= 0);
  CHECK(r.check_forward_tokens == Approx(16));
  CHECK(engine->stats().critical_forward_tokens == Approx(critical));
  // Healed: exact, nothing predicted, nothing more to check.
  const IdleReport again = w.idle();
  CHECK(again.predicted_kl == 0);
  CHECK_FALSE(again.checked);
}

TEST_CASE("self-check is opt-in: without :check an idle heal measures nothing and the correction stays 1",
          "[window][idle][fidelity]") {
  auto engine = test::open_stories_small_pages(BackgroundMode::kDeferred);
  const Scenario sc = make_scenario(*engine, 4);
  Window w = window_with(*engine, "patch:16:heal=0:noreuse:eager");
  CHECK_FALSE(w.policy().self_check);
  CHECK(parse_policy("patch:16:heal:check").self_check);
  CHECK(parse_policy(parse_policy("patch:16:kl=0.003:heal:check").name()).self_check);
  CHECK_FALSE(parse_policy("default").self_check);
  fill(*engine, w, sc);
  w.evict(w.instances()[1].id);
  const IdleReport r = w.idle();
  CHECK(r.healed_instances > 0);
  CHECK_FALSE(r.checked);
  CHECK(r.check_forward_tokens == 0);
  CHECK(engine->stats().fidelity_checks == 0);
  CHECK(engine->stats().fidelity_correction == 1.0);
}

}  // namespace ORBIT_TEST_FILE
