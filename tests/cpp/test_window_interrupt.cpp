// Interruption points (orbit/interrupt.h): an InterruptScope's check runs before each instance a plan serves
// and before each layer of the forwards that serve it (and in run_background, before each job and each layer
// of its forwards); one that answers true throws orbit::Interrupted there with nothing of the plan committed
// (no job lost); the window then answers as one never interrupted. Every check here stops by count, not clock.
#include "orbit_catch.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "orbit/engine.h"
#include "orbit/interrupt.h"
#include "test_helpers.h"
#include "window_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

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

// `count` chunks of `tokens` random tokens each, drawn from `rng` in turn and registered with `engine`.
std::vector<ChunkRef> random_chunks(Engine& engine, std::mt19937_64& rng, int count, int64_t tokens) {
  std::vector<ChunkRef> chunks;
  for (int i = 0; i < count; ++i) chunks.push_back(engine.add_tokens(random_tokens(rng, tokens)));
  return chunks;
}

int layers_of(const Engine& engine) { return static_cast<int>(engine.model_info().num_layers); }

// A check that counts its calls and answers true at call `stop_at` (0: never): interruption by count, not clock.
struct CountedStop {
  int calls = 0;
  int stop_at = 0;
  std::function<bool()> check() {
    return [this] { return ++calls == stop_at; };
  }
};

// `call` under a scope whose check answers true at its `stop_at`-th call: it must throw "<what>: interrupted".
// Returns how many checks it made.
int interrupted_at(int stop_at, const std::string& what, const std::function<void()>& call) {
  CountedStop stop;
  stop.stop_at = stop_at;
  const InterruptScope scope(stop.check());
  CHECK_THROWS_WITH(call(), what + ": interrupted");
  return stop.calls;
}

// How many checks `call` made under a scope whose check never answers true.
int checks_of(const std::function<void()>& call) {
  CountedStop never;
  const InterruptScope scope(never.check());
  call();
  return never.calls;
}

double max_gap(const Logits& a, const Logits& b) {
  REQUIRE(a.values.size() == b.values.size());
  double gap = 0;
  for (std::size_t i = 0; i < a.values.size(); ++i) gap = std::max(gap, std::abs(double{a.values[i]} - b.values[i]));
  return gap;
}

}  // namespace

// The engines here run background jobs inline (at the end of the apply that queued them, with the scope hidden):
// a worker thread's canonical encodes would otherwise decide, by timing, whether a plan that read a canonical
// finds it stored or encodes it (a forward, with its own points).

TEST_CASE("an interruption point stops a plan before an instance and commits nothing", "[window][interrupt]") {
  std::mt19937_64 rng(7);
  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  const std::vector<ChunkRef> chunks = random_chunks(*engine, rng, 6, 10);
  const std::vector<int64_t> query = random_tokens(rng, 3);

  Window plain = deferred_window(*engine, chunks);
  const Logits want = plain.logits(query);

  Window w = deferred_window(*engine, chunks);
  const uint64_t version = w.version();
  const Plan flush = w.plan_flush();
  const int64_t served = flush.steps.size();
  REQUIRE(served == 5);
  // One point before each repair, then one before each layer of its forward (the repair at the front reads its
  // canonical: no forward).
  const int layers = layers_of(*engine);
  std::vector<int> first_point;  // each repair's point before it, counted from 1
  int points = 0;
  for (const PlanStep& s : flush.steps) {
    REQUIRE(!s.encode_canonical);
    first_point.push_back(points + 1);
    points += 1 + (s.forward_tokens > 0 ? layers : 0);
  }
  REQUIRE(points > served);
  const int before_third = first_point[2];
  // Stopped before the third of the five repairs.
  CHECK(interrupted_at(before_third, "flush", [&] { (void)w.logits(query); }) == before_third);
  CHECK(w.version() == version);
  for (std::size_t i = 0; i < w.instances().size(); ++i) CHECK(w.instances()[i].deferred);

  // A scope whose check answers false, and no scope at all, change nothing: every instance is served.
  Logits got;
  CHECK(checks_of([&] { got = w.logits(query); }) == points + layers);  // then one before each layer of the query's
  CHECK(got.values == want.values);
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

TEST_CASE("a long turn's forward stops between two layers and commits nothing", "[window][interrupt]") {
  std::mt19937_64 rng(11);
  const std::vector<int64_t> turn = random_tokens(rng, 300);
  const std::vector<int64_t> query = random_tokens(rng, 3);

  // One instance, one forward: an interruption point before the instance and one before each layer.
  auto counted = test::open_stories_small_pages(BackgroundMode::kInline);
  const int layers = layers_of(*counted);
  REQUIRE(layers >= 3);
  Window want = counted->new_window();
  CHECK(checks_of([&] { want.add_turn(turn); }) == 1 + layers);

  // Stopped before the middle layer (a fresh engine: nothing stored for exact reuse).
  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  Window w = engine->new_window();
  const uint64_t version = w.version();
  const int64_t free_pages = engine->stats().pool_free_pages;
  const int mid = 1 + 1 + layers / 2;  // the point before the instance, then layers 0 .. layers/2 - 1 ran
  CHECK(interrupted_at(mid, "turn", [&] { w.add_turn(turn); }) == mid);  // no point after the one that answered true
  CHECK(w.version() == version);
  CHECK(w.instances().empty());
  CHECK(w.tokens() == 0);
  CHECK(engine->stats().pool_free_pages == free_pages);  // the build's pages went back
  CHECK(engine->stats().forward_tokens == 0);            // nothing counted: nothing of it happened

  // The same call later runs whole, as on an engine never interrupted.
  w.add_turn(turn);
  CHECK(w.tokens() == want.tokens());
  CHECK(max_gap(w.logits(query), want.logits(query)) <= 1e-6);
}

TEST_CASE("a deferred repair's forward stops between two layers", "[window][interrupt]") {
  // logits() runs the repairs an earlier edit deferred: each is a forward, now with a point per layer too.
  std::mt19937_64 rng(12);
  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  const int layers = layers_of(*engine);
  const std::vector<ChunkRef> chunks = random_chunks(*engine, rng, 6, 40);
  const std::vector<int64_t> query = random_tokens(rng, 3);

  Window w = deferred_window(*engine, chunks);  // the first window to run these repairs: nothing to reuse
  const uint64_t version = w.version();
  const std::size_t repairs = w.plan_flush().steps.size();
  REQUIRE(repairs == 5);
  // The third point: before the first repair, then inside the first forward, the first repair's (a canonical
  // read that must encode) or the second's (a re-prefill); an instance point only without layer points.
  CHECK(interrupted_at(3, "flush", [&] { (void)w.logits(query); }) == 3);
  CHECK(w.version() == version);
  for (const auto& instance : w.instances()) CHECK(instance.deferred);

  // Run whole later: a point before each repair and one before each layer of each forward, at least the
  // four re-prefills' layers.
  Logits got;
  CHECK(checks_of([&] { got = w.logits(query); }) >= static_cast<int>(repairs) + 4 * layers);
  CHECK(w.version() == version + 1);
  CHECK(max_gap(got, deferred_window(*engine, chunks).logits(query)) <= 1e-6);
}

TEST_CASE("run_background stops before a job or inside its forward, and loses no job", "[background][interrupt]") {
  std::mt19937_64 rng(13);
  auto engine = test::open_stories_small_pages(BackgroundMode::kDeferred);
  const int layers = layers_of(*engine);
  const std::vector<ChunkRef> chunks = random_chunks(*engine, rng, 2, 60);
  WindowOptions o;
  o.policy = parse_policy("patch:full:noreuse");
  Window a = engine->new_window(o);
  a.admit(chunks[0]);
  a.admit(chunks[1]);  // queues one job: the canonical encode of chunks[1] (a forward), then its patch
  REQUIRE(engine->stats().background_pending == 1);

  // Before the job: nothing taken.
  const auto run = [&] { engine->run_background(); };
  interrupted_at(1, "run_background", run);
  CHECK(engine->stats().background_pending == 1);

  // Inside the job's forward, before its layer 1: the job goes back to the queue, not counted as failed.
  CHECK(interrupted_at(1 + 2, "run_background", run) == 1 + 2);
  EngineStats st = engine->stats();
  CHECK(st.background_pending == 1);
  CHECK(st.background_failed == 0);
  CHECK(st.patches_formed == 0);

  // Inside the patch's SVD, before layer 1's factorization (after the point before the job, the encode's layers
  // and layer 0's): the job goes back again; the canonical it encoded whole stays stored.
  CHECK(interrupted_at(1 + layers + 2, "run_background", run) == 1 + layers + 2);
  st = engine->stats();
  CHECK(st.background_pending == 1);
  CHECK(st.background_failed == 0);
  CHECK(st.patches_formed == 0);

  // A later call runs it whole: one point before the job, one per layer of its SVD (the canonical is stored).
  CHECK(checks_of([&] { CHECK(engine->run_background() == 1); }) == 1 + layers);
  st = engine->stats();
  CHECK(st.background_pending == 0);
  CHECK(st.background_failed == 0);
  CHECK(st.patches_formed == 1);
  // Its patch serves the next window with no forward, as a job never interrupted would.
  Window b = engine->new_window(o);
  b.admit(chunks[0]);
  const Plan plan = b.plan_admit(chunks[1]);
  REQUIRE(plan.steps.size() == 2);
  CHECK(plan.steps[1].action == StepAction::kApplyPatch);
  CHECK(plan.forward_tokens == 0);
}

namespace {

// What a read must leave as it was when it is interrupted: the window's state and what it and the engine count.
struct ReadSnapshot {
  uint64_t version;
  int64_t tokens;
  std::size_t instances;
  int64_t free_pages;
  double window_forward_tokens;
  double engine_forward_tokens;
  double window_query_tokens;  // the reads' query forwards, logits' included, and the radix yardstick's count
  double engine_query_tokens;
  double radix_tokens;
};

ReadSnapshot snapshot(const Engine& engine, const Window& w) {
  return {w.version(),
          w.tokens(),
          w.instances().size(),
          engine.stats().pool_free_pages,
          w.stats().forward_tokens,
          engine.stats().forward_tokens,
          w.stats().query_forward_tokens + w.stats().logits_forward_tokens,
          engine.stats().query_forward_tokens + engine.stats().logits_forward_tokens,
          engine.stats().radix_cache_tokens};
}

void check_unchanged(const ReadSnapshot& before, const ReadSnapshot& now) {
  CHECK(now.version == before.version);
  CHECK(now.tokens == before.tokens);
  CHECK(now.instances == before.instances);
  CHECK(now.free_pages == before.free_pages);
  CHECK(now.window_forward_tokens == before.window_forward_tokens);
  CHECK(now.engine_forward_tokens == before.engine_forward_tokens);
  CHECK(now.window_query_tokens == before.window_query_tokens);
  CHECK(now.engine_query_tokens == before.engine_query_tokens);
  CHECK(now.radix_tokens == before.radix_tokens);
}

}  // namespace

TEST_CASE("a long query's forward in logits and generate stops between two layers", "[window][interrupt]") {
  // The query's forward (its tokens after the window's) has a point before each layer; a decode step's does not.
  std::mt19937_64 rng(13);
  const std::vector<int64_t> turn = random_tokens(rng, 20);
  const std::vector<int64_t> query = random_tokens(rng, 300);
  GenerateOptions go;
  go.max_tokens = 4;

  auto reference = test::open_stories_small_pages(BackgroundMode::kInline);
  const int layers = layers_of(*reference);
  REQUIRE(layers >= 3);
  Window want = reference->new_window();
  want.add_turn(turn);
  const Logits want_logits = want.logits(query);
  const Generation want_answer = want.generate(query, go);

  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  Window w = engine->new_window();
  w.add_turn(turn);
  const ReadSnapshot before = snapshot(*engine, w);

  // logits: no repairs deferred, so the only points are the query forward's, one per layer.
  const int mid = 1 + layers / 2;  // layers 0 .. layers/2 - 1 ran
  CHECK(interrupted_at(mid, "forward", [&] { (void)w.logits(query); }) == mid);
  check_unchanged(before, snapshot(*engine, w));

  // generate: stopped the same way inside the query's forward, before any token.
  CHECK(interrupted_at(mid, "forward", [&] { (void)w.generate(query, go); }) == mid);
  check_unchanged(before, snapshot(*engine, w));

  // Later calls run whole, as on an engine never interrupted; the decode's four steps add no points.
  CHECK(max_gap(w.logits(query), want_logits) <= 1e-6);
  Generation got;
  CHECK(checks_of([&] { got = w.generate(query, go); }) == layers);
  CHECK(got.tokens == want_answer.tokens);
  CHECK(got.prompt_forward_tokens == want_answer.prompt_forward_tokens);
}

TEST_CASE("disposable's greedy decodes stop between two layers", "[window][interrupt]") {
  // Each forward of its two greedy decodes (the query's, then each answer token's) has a point before each layer.
  std::mt19937_64 rng(14);
  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  const int layers = layers_of(*engine);
  REQUIRE(layers >= 3);
  const std::vector<ChunkRef> chunks = random_chunks(*engine, rng, 2, 30);
  const std::vector<int64_t> query = random_tokens(rng, 40);
  const int64_t answer_tokens = 3;
  WindowOptions o;
  o.policy = parse_policy("patch:4");
  Window w = engine->new_window(o);
  w.admit(chunks[0]);
  const InstanceId target = w.admit(chunks[1]).added.front();
  const DisposabilityReport want = w.disposable(target, query, answer_tokens);  // every canonical stored now
  const ReadSnapshot before = snapshot(*engine, w);

  // Inside the second decode's query forward: the first decode's forwards ran whole, then half its layers.
  const int mid = static_cast<int>(answer_tokens) * layers + 1 + layers / 2;
  CHECK(interrupted_at(mid, "forward", [&] { (void)w.disposable(target, query, answer_tokens); }) == mid);
  check_unchanged(before, snapshot(*engine, w));

  // Run whole later: a point before each layer of each of the 2 x answer_tokens forwards, and the same report.
  DisposabilityReport got;
  CHECK(checks_of([&] { got = w.disposable(target, query, answer_tokens); }) ==
        2 * static_cast<int>(answer_tokens) * layers);
  CHECK(got.answer == want.answer);
  CHECK(got.answer_without == want.answer_without);
  CHECK(got.kl_first == want.kl_first);
  CHECK(w.stats().query_forward_tokens == Approx(before.window_query_tokens + 2.0 * query.size()));
}

TEST_CASE("loss_by_instance's reference forward and its per-instance reads stop between two layers",
          "[window][interrupt]") {
  std::mt19937_64 rng(15);
  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  const int layers = layers_of(*engine);
  REQUIRE(layers >= 3);
  const std::vector<ChunkRef> chunks = random_chunks(*engine, rng, 3, 30);
  const std::vector<int64_t> query = random_tokens(rng, 5);
  WindowOptions o;
  o.policy = parse_policy("blind");  // the chunks after the first are relocated canonicals: approximate
  Window w = engine->new_window(o);
  for (const ChunkRef& c : chunks) w.admit(c);
  const std::vector<InstanceLoss> want = w.loss_by_instance(query);
  REQUIRE(want.size() == 2);  // each approximate instance: a read of its own after the reference forward
  const ReadSnapshot before = snapshot(*engine, w);

  // Counted whole: the reference forward's layers, then each approximate instance's read.
  const int whole = checks_of([&] { (void)w.loss_by_instance(query); });
  CHECK(whole == layers * (1 + static_cast<int>(want.size())));

  // Inside the reference forward (the window re-prefilled), then inside the last instance's read.
  for (const int stop_at : {1 + layers / 2, whole - 1}) {
    INFO("stop at point " << stop_at);
    CHECK(interrupted_at(stop_at, "forward", [&] { (void)w.loss_by_instance(query); }) == stop_at);
    check_unchanged(before, snapshot(*engine, w));
  }
  // reference_logits shares the reference forward.
  CHECK(interrupted_at(2, "forward", [&] { (void)w.reference_logits(query); }) == 2);

  const std::vector<InstanceLoss> got = w.loss_by_instance(query);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].instance == want[i].instance);
    CHECK(got[i].measured_kl == want[i].measured_kl);
    CHECK(got[i].kv_change == want[i].kv_change);
  }
}

}  // namespace ORBIT_TEST_FILE

namespace ORBIT_TEST_FILE {

TEST_CASE("a fidelity calibration stops before an arm and fits nothing", "[calibrate][interrupt]") {
  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  const std::string before = engine->fidelity_model_description();
  // Seven arms a seed, each after one point: the 1st point stops before any forward, the 9th inside seed 2.
  const int stop_at = GENERATE(1, 9);
  int seeds_reported = 0;
  CHECK(interrupted_at(stop_at, "calibrate_fidelity",
                       [&] { engine->calibrate_fidelity([&](int64_t, int64_t) { ++seeds_reported; }); }) == stop_at);
  CHECK(seeds_reported == (stop_at > 7 ? 1 : 0));
  CHECK(engine->fidelity_calibration() == "default");
  CHECK(engine->fidelity_model_description() == before);
  // The whole calibration makes 3 seeds x 7 points and then fits.
  CHECK(checks_of([&] { engine->calibrate_fidelity(); }) == 21);
  CHECK(engine->fidelity_calibration() == "calibrated");
}

}  // namespace ORBIT_TEST_FILE
