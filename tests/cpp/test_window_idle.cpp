// Idle-time work (Window::heal, prepare_recalls, idle): a heal leaves the window equal to a re-prefill and
// counts as background work; a prepared recall makes the recall to the tail a patch hit; neither changes
// what the window holds, and both do nothing when there is nothing to do.
#include "orbit_catch.h"

#include <random>

#include "orbit/engine.h"
#include "orbit/interrupt.h"
#include "test_helpers.h"
#include "window_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using orbit::test::kExactWindowTolerance;
using orbit::test::random_tokens;
using orbit::test::window_error;

namespace {

std::shared_ptr<Engine> open_stories() { return test::open_stories_small_pages(BackgroundMode::kDeferred); }

bool all_exact(const Window& w) {
  for (const InstanceInfo& i : w.instances()) {
    if (!i.exact) return false;
  }
  return true;
}

Window window_with(Engine& engine, const char* spec) {
  WindowOptions o;
  o.policy = parse_policy(spec);
  return engine.new_window(o);
}

}  // namespace

TEST_CASE("heal: an approximate window becomes a re-prefill's, off the critical path", "[window][idle]") {
  std::mt19937_64 rng(7);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 10)), b = engine->add_tokens(random_tokens(rng, 12)),
                 c = engine->add_tokens(random_tokens(rng, 9));
  const std::vector<int64_t> query = random_tokens(rng, 4);
  // patch:16 keeps survivors as-is (relocation only): evicting a leaves b, c and the turn approximate.
  Window w = window_with(*engine, "patch:16:eager");
  w.admit(a);
  w.admit(b);
  w.admit(c);
  w.add_turn(random_tokens(rng, 5));
  engine->run_background();
  w.evict(w.instances()[0].id);
  const std::vector<InstanceInfo> before = w.instances();
  REQUIRE(before.size() == 3);
  CHECK_FALSE(before[0].exact);
  CHECK(window_error(w, query) > 1e-3);

  const Plan p = w.plan_heal();
  CHECK(p.op == Operation::kHeal);
  CHECK(p.exact);
  // Everything from b on: b, now first, is its canonical (stored: no forward); c and the turn are formed.
  CHECK(p.forward_tokens == Approx(9 + 5));
  const EngineStats s0 = engine->stats();
  const ApplyReport r = w.heal();
  const EngineStats s1 = engine->stats();
  CHECK(r.op == Operation::kHeal);
  CHECK(r.forward_tokens == Approx(14));
  CHECK(all_exact(w));
  CHECK(window_error(w, query) < kExactWindowTolerance);
  // Background work: the critical-path counters do not move.
  CHECK(s1.critical_forward_tokens == Approx(s0.critical_forward_tokens));
  CHECK(s1.critical_seconds == Approx(s0.critical_seconds));
  CHECK(s1.background_forward_tokens - s0.background_forward_tokens == Approx(14));
  // The same instances in the same order.
  const std::vector<InstanceInfo> after = w.instances();
  REQUIRE(after.size() == before.size());
  for (std::size_t i = 0; i < after.size(); ++i) CHECK(after[i].id == before[i].id);

  // An exact window: nothing to heal, no operation.
  const uint64_t v = w.version();
  CHECK(w.plan_heal().forward_tokens == 0);
  CHECK(w.heal().forward_tokens == 0);
  CHECK(w.version() == v);
}

TEST_CASE("heal: only what follows the first approximate instance is formed again", "[window][idle]") {
  std::mt19937_64 rng(8);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 8)), b = engine->add_tokens(random_tokens(rng, 11)),
                 c = engine->add_tokens(random_tokens(rng, 7)), d = engine->add_tokens(random_tokens(rng, 6));
  Window w = window_with(*engine, "patch:16:eager");
  w.admit(a);
  w.admit(b);
  w.admit(c);
  w.admit(d);
  w.evict(w.instances()[2].id);  // c: a and b keep their exact KV; d is kept over the change
  const std::vector<InstanceInfo> inst = w.instances();
  REQUIRE(inst.size() == 3);
  CHECK(inst[0].exact);
  CHECK(inst[1].exact);
  CHECK_FALSE(inst[2].exact);
  const Plan p = w.plan_heal();
  CHECK(p.forward_tokens == Approx(6));
  for (const PlanStep& s : p.steps) {
    if (s.instance == inst[2].id) {
      CHECK(s.action == StepAction::kForm);
    } else {
      CHECK(s.action == StepAction::kKeep);
    }
  }
  REQUIRE(w.apply(p).is_ok());
  CHECK(all_exact(w));
  CHECK(window_error(w, random_tokens(rng, 3)) < kExactWindowTolerance);
}

TEST_CASE("heal runs the repairs an edit deferred, as background work", "[window][idle]") {
  std::mt19937_64 rng(9);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 9)), b = engine->add_tokens(random_tokens(rng, 10));
  Window w = window_with(*engine, "reprefill");  // deferring
  w.admit(a);
  w.admit(b);
  w.evict(w.instances()[0].id);
  REQUIRE(w.instances()[0].deferred);
  const double critical = engine->stats().critical_forward_tokens;
  CHECK(w.heal().forward_tokens == Approx(10));
  CHECK_FALSE(w.instances()[0].deferred);
  CHECK(all_exact(w));
  CHECK(engine->stats().critical_forward_tokens == Approx(critical));
}

TEST_CASE("prepare_recalls: a recall to the tail becomes a patch hit; the window is not changed", "[window][idle]") {
  std::mt19937_64 rng(10);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 10)), b = engine->add_tokens(random_tokens(rng, 12)),
                 c = engine->add_tokens(random_tokens(rng, 9));
  const std::vector<int64_t> query = random_tokens(rng, 4);
  Window w = window_with(*engine, "patch:16:exact");  // every context change re-conditioned
  w.admit(a);
  w.admit(b);
  w.admit(c);
  w.add_turn(random_tokens(rng, 6));
  w.evict(w.instances()[1].id);  // b
  w.flush();
  engine->run_background();
  REQUIRE(all_exact(w));

  // Without preparation, recalling b to the tail forms it in context.
  {
    Window probe = w.fork();
    CHECK(probe.plan_recall(b).forward_tokens == Approx(12));
  }
  const uint64_t v = w.version();
  const std::vector<InstanceInfo> before = w.instances();
  const EngineStats s0 = engine->stats();
  const IdleReport r = w.prepare_recalls(4);
  engine->run_background();
  const EngineStats s1 = engine->stats();
  CHECK(r.recalls_prepared == 1);  // b is the only evicted chunk
  CHECK(r.prepare_forward_tokens == Approx(12));
  CHECK(s1.critical_forward_tokens == Approx(s0.critical_forward_tokens));
  CHECK(s1.background_forward_tokens - s0.background_forward_tokens >= 12);
  CHECK(w.version() == v);
  const std::vector<InstanceInfo> after = w.instances();
  REQUIRE(after.size() == before.size());
  for (std::size_t i = 0; i < after.size(); ++i) CHECK(after[i].id == before[i].id);

  // Prepared already: nothing more to form.
  CHECK(w.prepare_recalls(4).recalls_prepared == 0);

  // The recall reads the prepared patch (exact context): no forward on the critical path, and the window
  // is as close to a re-prefill as the rank-16 patch allows.
  const Plan p = w.plan_recall(b);
  CHECK(p.forward_tokens == 0);
  bool hit = false;
  for (const PlanStep& s : p.steps) {
    if (s.action == StepAction::kApplyPatch && s.match == PatchMatch::kExact) hit = true;
  }
  CHECK(hit);
  REQUIRE(w.apply(p).is_ok());
  CHECK(window_error(w, query) < 5e-2);
  CHECK(w.instances().back().chunk.key == b.key);
}

TEST_CASE("prepare_recalls: the most recently evicted first; nothing while repairs are deferred", "[window][idle]") {
  std::mt19937_64 rng(11);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 8)), b = engine->add_tokens(random_tokens(rng, 9)),
                 c = engine->add_tokens(random_tokens(rng, 10));
  Window w = window_with(*engine, "patch:16:exact");  // survivors re-conditioned, deferred
  w.admit(a);
  w.admit(b);
  w.admit(c);
  w.evict(w.instances()[2].id);  // c (the tail: nothing after it to repair)
  w.evict(w.instances()[0].id);  // then a: b's repair is deferred
  REQUIRE(w.instances()[0].deferred);
  CHECK(w.prepare_recalls(2).recalls_prepared == 0);
  w.flush();
  engine->run_background();
  const IdleReport r = w.prepare_recalls(1);
  CHECK(r.recalls_prepared == 1);
  CHECK(r.prepare_forward_tokens == Approx(8));  // a, evicted last
  CHECK(w.plan_recall(a).forward_tokens == 0);
  CHECK(w.plan_recall(c).forward_tokens > 0);
  CHECK_THROWS_WITH(w.prepare_recalls(-1), Catch::Contains("max_chunks"));
}

TEST_CASE("idle: what the policy asks (heal, prepared recalls); nothing under a policy that asks nothing",
          "[window][idle]") {
  std::mt19937_64 rng(12);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 10)), b = engine->add_tokens(random_tokens(rng, 11)),
                 c = engine->add_tokens(random_tokens(rng, 9));
  auto build = [&](const char* spec) {
    Window w = window_with(*engine, spec);
    w.admit(a);
    w.admit(b);
    w.admit(c);
    w.evict(w.instances()[0].id);
    return w;
  };
  CHECK(WindowPolicy{}.heal_when_idle);
  CHECK(WindowPolicy{}.prepare_recalls == 1);

  Window quiet = build("patch:16");
  const uint64_t v = quiet.version();
  const IdleReport none = quiet.idle();
  CHECK(none.forward_tokens == 0);
  CHECK(none.healed_instances == 0);
  CHECK(quiet.version() == v);

  Window w = build("default");
  const IdleReport r = w.idle();
  CHECK(r.healed_instances == 2);  // b and c, kept or deferred over a's eviction
  CHECK(r.heal_forward_tokens == Approx(20));
  CHECK(r.recalls_prepared == 1);  // a
  CHECK(r.prepare_forward_tokens == Approx(10));
  CHECK(r.forward_tokens == Approx(30));
  CHECK(all_exact(w));
  CHECK(w.plan_recall(a).forward_tokens == 0);
}

TEST_CASE("idle's stop ends its heal at an interruption point, leaving the window as it was", "[window][idle]") {
  std::mt19937_64 rng(12);
  const std::vector<int64_t> a = random_tokens(rng, 10), b = random_tokens(rng, 11), c = random_tokens(rng, 9);
  // Each window on an engine of its own: a heal stores its forwards for exact reuse, which a later heal of the same
  // window on the same engine reads instead of forwarding (no layers, so no points inside them).
  auto build = [&](Engine& engine) {
    Window w = window_with(engine, "default");
    w.admit(engine.add_tokens(a));
    w.admit(engine.add_tokens(b));
    w.admit(engine.add_tokens(c));
    w.evict(w.instances()[0].id);
    return w;
  };
  const IdleReport whole = build(*open_stories()).idle();
  REQUIRE(whole.healed_instances == 2);  // b and c, each forwarded
  REQUIRE(whole.heal_forward_tokens == Approx(20));
  const auto same = [](const std::vector<InstanceInfo>& x, const std::vector<InstanceInfo>& y) {
    REQUIRE(x.size() == y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(x[i].id == y[i].id);
      CHECK(x[i].exact == y[i].exact);
      CHECK(x[i].deferred == y[i].deferred);
      CHECK(x[i].formed_by == y[i].formed_by);
      CHECK(x[i].patch_key == y[i].patch_key);
    }
  };
  // The stop answers true at its stop_at-th question (by count, not clock), for every question the heal asks
  // (before each instance it serves, before each layer of their forwards), until one comes after the heal.
  int stopped_in_heal = 0;
  int64_t layers = 0;
  for (int stop_at = 1;; ++stop_at) {
    auto engine = open_stories();
    layers = engine->model_info().num_layers;
    Window w = build(*engine);
    const uint64_t version = w.version();
    const std::vector<InstanceInfo> before = w.instances();
    const double forwarded = w.stats().forward_tokens;
    int asked = 0;
    const IdleReport r = w.idle([&] { return ++asked == stop_at; });
    if (r.healed_instances > 0) {  // the heal ran whole: the stop came after it
      CHECK(r.heal_forward_tokens == Approx(whole.heal_forward_tokens));
      break;
    }
    INFO("stopped at question " << stop_at);
    ++stopped_in_heal;
    CHECK(r.stopped);
    CHECK(r.heal_planned);
    CHECK(asked == stop_at);  // nothing asked, nor done, after it answered true
    CHECK(r.forward_tokens == 0);
    CHECK(r.recalls_prepared == 0);
    // Nothing half-applied: the window is the one before the call, and the next call heals it.
    CHECK(w.version() == version);
    CHECK(w.stats().forward_tokens == forwarded);
    same(w.instances(), before);
    const IdleReport again = w.idle();
    CHECK(again.healed_instances == 2);
    CHECK(all_exact(w));
  }
  // A point before each of the two instances, and one before each layer of each one's forward.
  CHECK(stopped_in_heal >= 2 + 2 * layers);

  // A caller's own scope (a Python caller's Ctrl-C) still stops the heal under a stop that never answers true:
  // its Interrupted is passed on, the window unchanged.
  auto engine = open_stories();
  Window w = build(*engine);
  const uint64_t version = w.version();
  const std::vector<InstanceInfo> before = w.instances();
  {
    int outer_asked = 0;
    const InterruptScope outer([&] { return ++outer_asked == 2; });
    CHECK_THROWS_AS(w.idle([] { return false; }), Interrupted);
    CHECK(outer_asked == 2);
  }
  CHECK(w.version() == version);
  same(w.instances(), before);
}

TEST_CASE("idle heals only a window whose predicted KL reaches heal_min_kl", "[window][idle]") {
  std::mt19937_64 rng(13);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 10)), b = engine->add_tokens(random_tokens(rng, 11)),
                 c = engine->add_tokens(random_tokens(rng, 9));
  // A budget loose enough that c is kept over a's eviction, carrying a predicted loss; b, first now, takes
  // its stored canonical (exact, and as cheap as keeping it: the budget takes such free upgrades).
  Window w = window_with(*engine, "patch:16:kl=1:heal=1");
  w.admit(a);
  w.admit(b);
  w.admit(c);
  engine->run_background();  // the canonicals stored: b's at position 0 is read, not encoded
  w.evict(w.instances()[0].id);
  w.flush();
  CHECK(w.instances()[0].exact);
  CHECK_FALSE(w.instances()[1].exact);
  const IdleReport below = w.idle();
  CHECK(below.predicted_kl > 0);
  CHECK(below.predicted_kl < 1);
  CHECK(below.healed_instances == 0);
  CHECK(below.forward_tokens == 0);
  CHECK_FALSE(all_exact(w));

  WindowPolicy p = w.policy();
  p.heal_min_kl = below.predicted_kl;  // reached: heals
  w.set_policy(p);
  const IdleReport at = w.idle();
  CHECK(at.predicted_kl == Approx(below.predicted_kl));
  CHECK(at.healed_instances == 1);
  CHECK(all_exact(w));
  CHECK(w.idle().predicted_kl == 0);  // exact now: nothing carried, nothing to heal

  // The spec form: `:heal` keeps the default threshold, `:heal=X` sets it; a bad one is refused by name.
  CHECK(parse_policy("patch:16:heal").heal_min_kl == WindowPolicy{}.heal_min_kl);
  CHECK(parse_policy("patch:16:heal").name() == "patch:16:heal");
  CHECK(parse_policy("patch:16:heal=0").heal_min_kl == 0);
  CHECK(parse_policy("patch:16:heal=0.01").name() == "patch:16:heal=0.01");
  CHECK(parse_policy(parse_policy("patch:16:kl=0.003:heal=0:prep=2").name()).name() ==
        "patch:16:kl=0.003:heal=0:prep=2");
  CHECK_THROWS_WITH(parse_policy("patch:16:heal=-1"), Catch::Contains("heal threshold"));
  CHECK_THROWS_WITH(parse_policy("patch:16:prep=1.5"), Catch::Contains("prep"));
}

TEST_CASE("prepare_recalls skips a chunk the window has no room for, and fails nothing", "[window][idle]") {
  std::mt19937_64 rng(14);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 12)), b = engine->add_tokens(random_tokens(rng, 12));
  WindowOptions o;
  o.policy = parse_policy("patch:16:exact");
  Window w = engine->new_window(o);
  w.admit(a);
  w.admit(b);
  w.evict(w.instances()[0].id);
  w.flush();
  // A window whose byte budget holds exactly one chunk: b in it, a evicted; a recall of a would not fit.
  o.max_bytes = w.stats().device_bytes;
  Window tight = engine->new_window(o);
  tight.admit(a);
  tight.evict(tight.instances()[0].id);
  tight.admit(b);
  REQUIRE(tight.stats().device_bytes == o.max_bytes);
  REQUIRE_FALSE(tight.plan_recall(a).refusal.empty());
  const uint64_t v = tight.version();
  const IdleReport r = tight.prepare_recalls(1);
  CHECK(r.recalls_prepared == 0);
  CHECK(r.prepare_forward_tokens == 0);
  CHECK(tight.version() == v);
  CHECK(w.prepare_recalls(1).recalls_prepared == 1);  // the same window with room
}

namespace {

// The plan step serving `id`, or null.
const PlanStep* step_for(const Plan& p, InstanceId id) {
  for (const PlanStep& s : p.steps) {
    if (s.instance == id) return &s;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("prepare_moves: moving a chunk behind the others becomes a patch hit; the window is not changed",
          "[window][idle]") {
  std::mt19937_64 rng(15);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 10)), b = engine->add_tokens(random_tokens(rng, 12)),
                 c = engine->add_tokens(random_tokens(rng, 9));
  const std::vector<int64_t> query = random_tokens(rng, 4);
  Window w = window_with(*engine, "patch:16:exact:eager");  // every context change re-conditioned at once
  w.admit(a);
  w.admit(b);
  w.admit(c);
  w.add_turn(random_tokens(rng, 6));
  engine->run_background();
  REQUIRE(all_exact(w));
  const std::vector<InstanceInfo> before = w.instances();
  const InstanceId ia = before[0].id, ib = before[1].id, ic = before[2].id, turn = before[3].id;
  // a moved behind c (the turn stays last): a now attends to b and c, which it never saw.
  const std::vector<InstanceId> order = {ib, ic, ia, turn};
  {
    const PlanStep* moved = step_for(w.plan_reorder(order), ia);
    REQUIRE(moved != nullptr);
    CHECK(moved->action == StepAction::kForm);
    CHECK(moved->forward_tokens == Approx(10));
  }

  const uint64_t v = w.version();
  const EngineStats s0 = engine->stats();
  const IdleReport r = w.prepare_moves(8);
  engine->run_background();
  const EngineStats s1 = engine->stats();
  CHECK(r.moves_prepared == 2);                        // b and a (c is the last chunk already)
  CHECK(r.prepare_forward_tokens == Approx(12 + 10));  // one forward of each, in the moved-to context
  CHECK(r.forward_tokens == Approx(r.prepare_forward_tokens));
  CHECK(s1.critical_forward_tokens == Approx(s0.critical_forward_tokens));
  CHECK(w.version() == v);
  const std::vector<InstanceInfo> after = w.instances();
  REQUIRE(after.size() == before.size());
  for (std::size_t i = 0; i < after.size(); ++i) CHECK(after[i].id == before[i].id);
  CHECK(w.prepare_moves(8).moves_prepared == 0);  // prepared already: nothing more to form
  {
    // Stored under the exact context only: under a policy that reads orbit patches, the same move after
    // c and b swap finds none (one ordering's patch is not an orbit patch) and forms a again.
    const WindowPolicy exact = w.policy();
    WindowPolicy orbit = parse_policy("patch:16:eager");
    orbit.survivors = SurvivorAction::kRecondition;
    REQUIRE(orbit.use_orbit_patches);
    w.set_policy(orbit);
    const PlanStep* other = step_for(w.plan_reorder({ic, ib, ia, turn}), ia);
    REQUIRE(other != nullptr);
    CHECK(other->match != PatchMatch::kOrbit);
    CHECK(other->forward_tokens == Approx(10));
    w.set_policy(exact);
  }

  // The move reads the prepared patch (exact context): no forward for a on the critical path, and the
  // window is as close to a re-prefill as the rank-16 patch allows.
  const Plan p = w.plan_reorder(order);
  const PlanStep* moved = step_for(p, ia);
  REQUIRE(moved != nullptr);
  CHECK(moved->action == StepAction::kApplyPatch);
  CHECK(moved->match == PatchMatch::kExact);
  CHECK(moved->forward_tokens == 0);
  REQUIRE(w.apply(p).is_ok());
  CHECK(window_error(w, query) < 1e-1);
  CHECK(w.instances()[2].id == ia);

  CHECK_THROWS_WITH(w.prepare_moves(-1), Catch::Contains("max_chunks"));
  CHECK(w.prepare_moves(0).moves_prepared == 0);
}

TEST_CASE("idle prepares moves only in a window that has reordered, and only under :move=N", "[window][idle]") {
  std::mt19937_64 rng(16);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 10)), b = engine->add_tokens(random_tokens(rng, 11)),
                 c = engine->add_tokens(random_tokens(rng, 9));
  CHECK(WindowPolicy{}.prepare_moves == 8);
  CHECK(parse_policy("patch:16").prepare_moves == 0);
  CHECK(parse_policy("patch:16:move=3").prepare_moves == 3);
  CHECK(parse_policy("patch:16:kl=0.003:move=3").name() == "patch:16:kl=0.003:move=3");
  CHECK(WindowPolicy{}.name() == "patch:16:kl=0.003:heal:prep=1:move=8:lists=3");
  CHECK_THROWS_WITH(parse_policy("patch:16:move=-1"), Catch::Contains("move"));
  CHECK_THROWS_WITH(parse_policy("patch:16:move=x"), Catch::Contains("move"));

  auto build = [&](const char* spec) {
    Window w = window_with(*engine, spec);
    w.admit(a);
    w.admit(b);
    w.admit(c);
    w.flush();
    engine->run_background();
    return w;
  };
  // Never reordered: idle prepares no move.
  Window still = build("patch:16:exact:move=8");
  CHECK(still.idle().moves_prepared == 0);
  // Reordered once (c before b): the next idle prepares moving the two chunks before the last one (b),
  // nearest first. Moving c behind b puts it back where it was admitted, a context whose patch its first
  // sight stored: nothing to form. Moving a behind b is new: one forward of a.
  Window moved = build("patch:16:exact:move=2");
  const std::vector<InstanceInfo> in = moved.instances();
  moved.reorder({in[0].id, in[2].id, in[1].id});
  moved.flush();
  engine->run_background();
  const IdleReport r = moved.idle();
  CHECK(r.moves_prepared == 1);
  CHECK(r.prepare_forward_tokens == Approx(10));
  CHECK(r.forward_tokens == Approx(r.heal_forward_tokens + r.prepare_forward_tokens));
  // Without :move=N the same window prepares nothing.
  WindowPolicy none = moved.policy();
  none.prepare_moves = 0;
  moved.set_policy(none);
  CHECK(moved.idle().moves_prepared == 0);
}

}  // namespace ORBIT_TEST_FILE
