// Deferred repairs (WindowPolicy::defer_repairs): an edit forwards nothing and marks the survivors it
// would re-serve; the next read or forwarding operation re-plans them once, and the window it leaves equals
// a re-prefill. Checked against the eager policy doing the same operations and against the oracle.
#include "orbit_catch.h"

#include <random>

#include "orbit/engine.h"
#include "test_helpers.h"
#include "window_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using orbit::test::kExactWindowTolerance;
using orbit::test::random_tokens;
using orbit::test::window_error;

namespace {

std::shared_ptr<Engine> open_stories() { return test::open_stories_small_pages(); }

}  // namespace

TEST_CASE("deferred repairs: an edit forwards nothing; the next read or forwarding operation repairs once",
          "[window][defer]") {
  std::mt19937_64 rng(31);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 12)), b = engine->add_tokens(random_tokens(rng, 12));
  const std::vector<int64_t> question = random_tokens(rng, 5), answer = random_tokens(rng, 6);
  const std::vector<int64_t> query = random_tokens(rng, 3);
  auto build = [&](const char* spec) {
    WindowOptions o;
    o.policy = parse_policy(spec);
    Window w = engine->new_window(o);
    w.admit(a);
    w.admit(b);
    w.add_turn(question);
    w.add_turn(answer);
    return w;
  };
  auto turn_id = [](const Window& w, std::size_t k) { return w.instances()[2 + k].id; };

  // Eager: evicting the question re-prefills the answer behind it at once, though it is evicted next.
  Window eager = build("reprefill:eager");
  CHECK(eager.evict(turn_id(eager, 0)).forward_tokens == Approx(6));
  CHECK(eager.evict(turn_id(eager, 0)).forward_tokens == 0);

  // Deferred: the answer is relocated and marked; evicting it drops the repair, which never runs.
  Window w = build("reprefill");
  const double before = w.stats().forward_tokens;
  const uint64_t v0 = w.version();
  const ApplyReport r1 = w.evict(turn_id(w, 0));
  CHECK(r1.forward_tokens == 0);
  CHECK(w.version() == v0 + 1);
  std::vector<InstanceInfo> inst = w.instances();
  REQUIRE(inst.size() == 3);
  CHECK_FALSE(inst[0].deferred);
  CHECK_FALSE(inst[1].deferred);
  CHECK(inst[2].deferred);
  CHECK_FALSE(inst[2].exact);
  CHECK(w.plan_flush().forward_tokens == Approx(6));
  CHECK(w.evict(inst[2].id).forward_tokens == 0);
  for (const InstanceInfo& i : w.instances()) CHECK_FALSE(i.deferred);
  const uint64_t v1 = w.version();
  CHECK(w.flush().forward_tokens == 0);  // nothing waits: no operation
  CHECK(w.version() == v1);
  CHECK(w.stats().forward_tokens == before);

  // A read runs what waits (counted like an operation) and sees the repaired window; a read refused for
  // its arguments runs nothing.
  w.evict(w.instances()[0].id);  // b's context changed: deferred
  REQUIRE(w.instances()[0].deferred);
  GenerateOptions bad;
  bad.top_p = 2;
  CHECK_THROWS_WITH(w.generate(query, bad), Catch::Contains("top_p"));
  CHECK_THROWS_WITH(w.disposable(w.instances()[0].id, query, 0), Catch::Contains("answer_tokens"));
  CHECK(w.instances()[0].deferred);
  const int64_t ops = w.stats().operations;
  const Plan flush_plan = w.plan_flush();
  INFO(flush_plan.describe());
  CHECK(flush_plan.op == Operation::kFlush);
  CHECK(flush_plan.count(StepAction::kCanonical) == 1);  // b, now first: its canonical is exact
  CHECK(window_error(w, query) < kExactWindowTolerance);
  CHECK(w.stats().forward_tokens > before);  // the canonical, encoded now (reprefill keeps none stored)
  CHECK(w.stats().operations == ops + 1);
  CHECK_FALSE(w.instances()[0].deferred);
  CHECK(w.instances()[0].exact);

  // A forwarding operation re-plans what waits in the same plan, and pays for it there: what the eager
  // evict paid, plus the turn.
  Window e2 = build("reprefill:eager");
  const double repair = e2.evict(e2.instances()[0].id).forward_tokens;
  CHECK(repair >= 11);  // both turns at least (b, now first, may be its stored canonical)
  Window f = build("reprefill");
  f.evict(f.instances()[0].id);  // b, both turns deferred
  const Plan p = f.plan_add_turn(question);
  CHECK(p.forward_tokens == Approx(repair + 5));
  CHECK(p.exact);
  for (const PlanStep& s : p.steps) CHECK_FALSE(s.deferred);
  f.apply(p).value();
  CHECK(window_error(f, query) < kExactWindowTolerance);

  // A fork repairs what waits first, once, in the parent: both windows share the repaired pages.
  Window parent = build("reprefill");
  parent.evict(parent.instances()[0].id);
  const double parent_before = parent.stats().forward_tokens;
  Window child = parent.fork();
  CHECK(parent.stats().forward_tokens == Approx(parent_before + repair));
  for (const InstanceInfo& i : parent.instances()) CHECK_FALSE(i.deferred);
  for (const InstanceInfo& i : child.instances()) CHECK_FALSE(i.deferred);
  CHECK(child.flush().forward_tokens == 0);
  CHECK(child.stats().shared_pages == parent.stats().shared_pages);
  CHECK(child.stats().shared_pages > 0);
  CHECK(window_error(child, query) < kExactWindowTolerance);
  const Generation g = parent.generate(query, {});
  CHECK_FALSE(g.tokens.empty());
  CHECK(window_error(parent, query) < kExactWindowTolerance);

  // Switching to an eager policy: its next edit re-serves what an earlier edit deferred, in the same plan.
  Window s = build("reprefill");
  s.evict(s.instances()[0].id);  // b and both turns wait
  s.set_policy(parse_policy("reprefill:eager"));
  const Plan ep = s.plan_evict(s.instances().back().id);  // the answer leaves; b and the question are re-served
  CHECK(ep.forward_tokens >= 5);
  CHECK(ep.exact);
  s.apply(ep).value();
  for (const InstanceInfo& i : s.instances()) CHECK_FALSE(i.deferred);
  CHECK(window_error(s, query) < kExactWindowTolerance);
}

TEST_CASE("prefix-cache yardstick: what a prefix cache would forward, counted at forwards and model calls",
          "[window][defer]") {
  std::mt19937_64 rng(37);
  const std::vector<int64_t> ta = random_tokens(rng, 12), tb = random_tokens(rng, 12), tc = random_tokens(rng, 12);
  const std::vector<int64_t> question = random_tokens(rng, 5), aside = random_tokens(rng, 6);
  const std::vector<int64_t> query = random_tokens(rng, 3);
  GenerateOptions one;
  one.max_tokens = 1;
  // The same operations under a policy; each on its own engine (the yardstick is engine-wide).
  struct Counts {
    std::vector<double> yardstick;  // WindowStats::prefix_cache_tokens after each operation
    double critical = 0;
    double child = 0;
    double engine = 0;
  };
  auto run = [&](const char* spec) {
    auto engine = open_stories();
    WindowOptions o;
    o.policy = parse_policy(spec);
    Window w = engine->new_window(o);
    Counts c;
    auto note = [&] { c.yardstick.push_back(w.stats().prefix_cache_tokens); };
    w.admit(engine->add_tokens(ta));
    w.admit(engine->add_tokens(tb));
    w.admit(engine->add_tokens(tc));
    note();                        // first sights
    w.evict(w.instances()[1].id);  // an edit alone
    note();
    w.add_turn(question);  // the next forward: c behind the eviction, and the turn
    note();
    w.evict(w.instances()[0].id);  // an edit, then a model call
    w.generate(query, one);
    note();
    w.generate(query, one);  // the window unchanged
    w.idle();                // idle-time work is no read
    note();
    Window child = w.fork();  // a fork reads what its parent's reads computed
    child.add_turn(aside);
    c.child = child.stats().prefix_cache_tokens;
    c.critical = w.stats().critical_forward_tokens;
    c.engine = engine->stats().prefix_cache_tokens;
    CHECK(c.engine == Approx(w.stats().prefix_cache_tokens + child.stats().prefix_cache_tokens));
    return c;
  };
  const Counts prefix = run("prefix");
  const Counts orbit_default = run("default");
  const Counts reuse = run("patch:16");
  const std::vector<double> expected = {36, 36, 36 + 12 + 5, 53 + 12 + 5, 70};
  CHECK(prefix.yardstick == expected);
  CHECK(orbit_default.yardstick == expected);
  CHECK(prefix.child == 6);
  CHECK(orbit_default.child == 6);
  CHECK(reuse.yardstick == expected);
  // Under the prefix policy the yardstick is what the window forwarded; one that reuses past a change
  // forwards less (the default, on these random tokens, spends its budget re-forming).
  CHECK(prefix.critical == Approx(70));
  CHECK(reuse.critical < prefix.critical);
}

}  // namespace ORBIT_TEST_FILE
