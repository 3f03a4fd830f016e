// Plans are self-contained and honest: a plan is tied to the window version it was made at (set_policy
// included), apply() uses only what the plan says (ranks, variant, keys, the action per instance), and a
// plan that apply() will refuse says so. Also: the serving actions' estimates, the per-step fidelity
// budget, and first sight on the critical path with canonical + patch formed in the background.
#include "orbit_catch.h"

#include <random>
#include <set>

#include "orbit/engine.h"
#include "orbit/store.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;

namespace {

std::shared_ptr<Engine> open_stories(const std::string& store_dir = "") {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{64} << 20;
  o.page_size = 4;
  o.store_dir = store_dir;
  return Engine::open(o);
}

// Background work waits for Engine::run_background().
std::shared_ptr<Engine> open_deferred() {
  EngineOptions o;
  o.model = test::stories_path();
  o.page_size = 4;
  o.background = BackgroundMode::kDeferred;
  return Engine::open(o);
}

std::vector<int64_t> random_tokens(std::mt19937_64& rng, int64_t n) {
  std::uniform_int_distribution<int64_t> d(3, 511);
  std::vector<int64_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

WindowOptions with_policy(const std::string& spec) {
  WindowOptions o;
  o.policy = parse_policy(spec);
  return o;
}

// max |logit − re-prefill logit| over every row of the query.
double distance_from_reprefill(Window& w, const std::vector<int64_t>& query) {
  return test::max_abs_diff(w.logits(query, true).values, w.reference_logits(query, true).values);
}

int64_t stored_bytes(const std::string& dir, const std::string& key) {
  for (const StoreEntryInfo& e : list_store(dir)) {
    if (e.key == key) return e.value_bytes;
  }
  return -1;
}

}  // namespace

TEST_CASE("set_policy makes an earlier plan stale: no rank-full patch under a rank-2 key", "[plan][regression]") {
  std::mt19937_64 rng(7);
  const std::vector<int64_t> ta = random_tokens(rng, 12), tb = random_tokens(rng, 12);
  test::TempDir dir;
  auto engine = open_stories(dir / "store");
  const ChunkRef a = engine->add_tokens(ta), b = engine->add_tokens(tb);
  Window w = engine->new_window(with_policy("patch:2"));
  w.admit(a);
  const Plan plan = w.plan_admit(b);
  REQUIRE(plan.steps.back().store_keys.size() >= 1);
  const std::string rank2_key = plan.steps.back().store_keys.front();
  CHECK(plan.steps.back().rank_k == 2);
  CHECK(plan.steps.back().rank_v == 2);
  const uint64_t v = w.version();
  w.set_policy(parse_policy("patch:full"));
  CHECK(w.version() != v);
  CHECK_THROWS_WITH(w.apply(plan), Catch::Contains("stale plan"));
  engine->close();
  CHECK(stored_bytes(dir / "store", rank2_key) == -1);  // nothing was stored under the plan's key
}

TEST_CASE("apply uses the plan's ranks and keys, not the window's policy", "[plan][regression]") {
  std::mt19937_64 rng(8);
  const std::vector<int64_t> ta = random_tokens(rng, 12), tb = random_tokens(rng, 12);
  test::TempDir dir;
  std::string key;
  {
    auto engine = open_stories(dir / "s1");
    const ChunkRef a = engine->add_tokens(ta), b = engine->add_tokens(tb);
    Window w = engine->new_window(with_policy("patch:2"));
    w.admit(a);
    const Plan plan = w.plan_admit(b);
    key = plan.steps.back().store_keys.front();
    // The plan carries its policy: changing the policy the plan holds would be the only way to change
    // what apply does; the window's own policy is not consulted.
    w.apply(plan).value();
    engine->run_background();  // close() cancels queued background work
    engine->close();
  }
  const int64_t bytes = stored_bytes(dir / "s1", key);
  REQUIRE(bytes > 0);
  // The same rank-2 patch formed by a second engine (keys are deterministic) has the same size; a
  // full-rank patch of this 12-token chunk is larger.
  int64_t full_bytes = 0;
  {
    auto engine = open_stories(dir / "s2");
    const ChunkRef a = engine->add_tokens(ta), b = engine->add_tokens(tb);
    Window w = engine->new_window(with_policy("patch:full"));
    w.admit(a);
    const Plan plan = w.plan_admit(b);
    const std::string full_key = plan.steps.back().store_keys.front();
    CHECK(full_key != key);
    w.apply(plan).value();
    engine->run_background();
    engine->close();
    full_bytes = stored_bytes(dir / "s2", full_key);
  }
  CHECK(full_bytes > bytes);
}

TEST_CASE("a plan past the model's positions says it will be refused, as apply does", "[plan][regression]") {
  std::mt19937_64 rng(9);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 300));
  const ChunkRef b = engine->add_tokens(random_tokens(rng, 300));
  Window w = engine->new_window();
  w.admit(a);
  const Plan plan = w.plan_admit(b);
  CHECK_FALSE(plan.refusal.empty());
  CHECK_THAT(plan.refusal, Catch::Contains("512"));
  CHECK(plan.forward_tokens == 0);
  CHECK_THAT(plan.describe(), Catch::Contains("refused"));
  const Result<ApplyReport> r = w.apply(plan);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().reason() == plan.refusal);
  CHECK(w.instances().size() == 1);

  // A single chunk longer than the model's positions (when registration accepts it at all).
  std::vector<int64_t> long_tokens(600, 5);
  ChunkRef c;
  bool registered = true;
  try {
    c = engine->add_tokens(long_tokens);
  } catch (const Error&) {
    registered = false;  // refused at registration: the plan cannot be made either
  }
  if (registered) {
    Window e = engine->new_window();
    const Plan p = e.plan_admit(c);
    CHECK_FALSE(p.refusal.empty());
    CHECK(p.forward_tokens == 0);
    CHECK_FALSE(e.apply(p).is_ok());
  }
}

TEST_CASE("a plan over the window's byte budget says out of capacity, as apply does", "[plan]") {
  std::mt19937_64 rng(10);
  auto engine = open_stories();
  WindowOptions o;
  o.max_bytes = 1;  // below one page
  Window w = engine->new_window(o);
  const Plan plan = w.plan_admit(engine->add_tokens(random_tokens(rng, 8)));
  CHECK(plan.refused_capacity);
  CHECK_THAT(plan.refusal, Catch::Contains("max_bytes"));
  const Result<ApplyReport> r = w.apply(plan);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == StatusCode::kOutOfCapacity);
}

TEST_CASE("a plan needing more KV pool pages than are free says out of capacity, as apply does", "[plan][regression]") {
  std::mt19937_64 rng(11);
  const int64_t per_token = open_stories()->model_info().kv_bytes_per_token;
  EngineOptions o;
  o.model = test::stories_path();
  o.page_size = 4;
  o.pool_bytes = per_token * 4 * 10;  // 10 pages of 4 tokens, shared by the engine's windows
  auto engine = Engine::open(o);
  Window a = engine->new_window();
  a.admit(engine->add_tokens(random_tokens(rng, 24)));  // 6 pages
  Window b = engine->new_window();
  const ChunkRef big = engine->add_tokens(random_tokens(rng, 20));  // 5 pages: 4 are free
  const Plan plan = b.plan_admit(big);
  CHECK(plan.refused_capacity);
  CHECK_THAT(plan.refusal,
             Catch::Contains("KV pool is full") && Catch::Contains("4 of 10 pages free") && Catch::Contains("needs 5"));
  CHECK(plan.forward_tokens == 0);
  const Result<ApplyReport> r = b.apply(plan);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == StatusCode::kOutOfCapacity);
  CHECK(r.status().reason() == plan.refusal);
  CHECK(b.instances().empty());

  // Exactly the free pages fit; kept instances need none (below, b keeps its instance and admits 5 pages).
  const Plan fits = b.plan_admit(engine->add_tokens(random_tokens(rng, 16)));  // 4 pages: exactly the free ones
  CHECK(fits.refusal.empty());
  b.apply(fits).value();
  const Plan evict = a.plan_evict(a.instances().front().id);
  CHECK(evict.refusal.empty());
  a.apply(evict).value();
  const Plan now = b.plan_admit(big);  // a's 6 pages are free again
  CHECK(now.refusal.empty());
  CHECK(b.apply(now).is_ok());
}

TEST_CASE("calibrate fits the fidelity model from measured deficits of every approximate action", "[plan][calibrate]") {
  auto engine = open_stories();
  const CalibrationReport r = engine->calibrate();
  CHECK(r.fidelity_samples >= 7);
  WARN("fidelity model: " << r.fidelity_model);
  // Every loss kind was fitted (none left at its default).
  CHECK(r.fidelity_model.find("(default)") == std::string::npos);
  // A budgeted plan now carries predicted KLs from it: blind reuse of a new chunk after context is lossy.
  std::mt19937_64 rng(11);
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 20)), b = engine->add_tokens(random_tokens(rng, 20));
  Window w = engine->new_window(with_policy("blind"));
  w.admit(a);
  const Plan p = w.plan_admit(b);
  CHECK(p.steps.back().action == StepAction::kBlind);
  CHECK(p.predicted_kl > 0);
}

TEST_CASE("calibrate_fidelity fits the fidelity model alone, the same on every engine of a model",
          "[plan][calibrate]") {
  auto engine = open_stories();
  CHECK(engine->fidelity_model_description().find("(default)") != std::string::npos);
  std::mt19937_64 rng(13);
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 20)), b = engine->add_tokens(random_tokens(rng, 20));
  Window w = engine->new_window();
  w.admit(a);
  const double before = w.plan_admit(b).estimated_seconds;
  const CalibrationReport r = engine->calibrate_fidelity();
  CHECK(r.fidelity_samples >= 7);
  CHECK(r.fidelity_model == engine->fidelity_model_description());
  CHECK(r.fidelity_model.find("(default)") == std::string::npos);
  // The cost model is left as it was: nothing timed, plans estimate as before.
  CHECK(r.samples == 0);
  CHECK(r.cost_model.empty());
  CHECK(w.plan_admit(b).estimated_seconds == before);
  // Seeded samples, no timing: a second engine of the model fits the same model.
  CHECK(open_stories()->calibrate_fidelity().fidelity_model == r.fidelity_model);
}

TEST_CASE("a KL budget picks the cheapest action that fits, per instance", "[plan][budget]") {
  std::mt19937_64 rng(12);
  auto engine = open_stories();
  std::vector<ChunkRef> c;
  for (int i = 0; i < 4; ++i) c.push_back(engine->add_tokens(random_tokens(rng, 24)));
  // A loose budget: nothing needs repair after the first chunk is evicted; survivors are kept.
  Window loose = engine->new_window(with_policy("patch:16:kl=10"));
  for (const auto& x : c) loose.admit(x);
  const Plan lp = loose.plan_slide(1);
  CHECK(lp.forward_tokens == 0);
  CHECK(lp.count(StepAction::kKeep) == 3);
  CHECK(lp.predicted_kl > 0);
  CHECK(lp.predicted_kl <= 10);
  // A tight budget: the survivors whose removal deficit is predicted above it are re-served exactly (at
  // once: eager; deferred, below).
  Window tight = engine->new_window(with_policy("patch:16:kl=1e-9:eager"));
  for (const auto& x : c) tight.admit(x);
  // The background thread's canonicals stored: the new first chunk's is read, not encoded, in both plans below
  // (a plan prices an encode where the canonical is not stored yet).
  engine->run_background();
  const Plan tp = tight.plan_slide(1);
  CHECK(tp.forward_tokens > 0);
  CHECK(tp.predicted_kl <= 1e-9);
  CHECK(tp.exact);
  CHECK_THAT(tp.describe(), Catch::Contains("KL~") && Catch::Contains("budget"));
  tight.apply(tp).value();
  const std::vector<int64_t> q = random_tokens(rng, 4);
  const Logits got = tight.logits(q, true), ref = tight.reference_logits(q, true);
  double m = 0;
  for (std::size_t i = 0; i < got.values.size(); ++i)
    m = std::max(m, static_cast<double>(std::abs(got.values[i] - ref.values[i])));
  CHECK(m < 1e-3);

  // Deferring (every preset's default): the slide forwards nothing and marks the survivors it would
  // re-serve; the flush re-serves them under the same budget, as the eager slide did.
  Window lazy = engine->new_window(with_policy("patch:16:kl=1e-9:noreuse"));
  for (const auto& x : c) lazy.admit(x);
  engine->run_background();
  const Plan dp = lazy.plan_slide(1);
  CHECK(dp.forward_tokens == 0);
  CHECK(dp.count(StepAction::kKeep) == 3);
  for (const PlanStep& s : dp.steps) CHECK(s.deferred == (s.action == StepAction::kKeep));
  CHECK_FALSE(dp.exact);
  CHECK_THAT(dp.describe(), Catch::Contains("repair deferred to the next read"));
  lazy.apply(dp).value();
  for (const InstanceInfo& i : lazy.instances()) CHECK(i.deferred);
  const Plan fp = lazy.plan_flush();
  CHECK(fp.op == Operation::kFlush);
  CHECK(fp.forward_tokens == Approx(tp.forward_tokens));
  CHECK(fp.predicted_kl <= 1e-9);
  CHECK(fp.exact);
  CHECK(lazy.apply(fp).value().forward_tokens == Approx(tp.forward_tokens));
  for (const InstanceInfo& i : lazy.instances()) CHECK_FALSE(i.deferred);
  const Logits lgot = lazy.logits(q, true);
  m = 0;
  for (std::size_t i = 0; i < lgot.values.size(); ++i)
    m = std::max(m, static_cast<double>(std::abs(lgot.values[i] - ref.values[i])));
  CHECK(m < 1e-3);
}

TEST_CASE("a chunk moved behind content it never saw is priced by how much it passed", "[plan][budget]") {
  std::mt19937_64 rng(13);
  // Background work deferred: the three plans price the instances from the catalog their admits left, not
  // from whatever patches the engine's background thread happened to have formed by then.
  auto engine = open_deferred();
  std::vector<ChunkRef> c;
  for (int i = 0; i < 4; ++i) c.push_back(engine->add_tokens(random_tokens(rng, 24)));
  // A budget loose enough that every instance is kept: the plan shows what keeping each one costs.
  Window w = engine->new_window(with_policy("patch:16:kl=10:eager"));
  for (const auto& x : c) w.admit(x);
  const std::vector<InstanceInfo> in = w.instances();
  auto kept_kl = [&](const std::vector<InstanceId>& order, InstanceId id) {
    const Plan p = w.plan_reorder(order);
    for (const PlanStep& s : p.steps) {
      if (s.instance == id) {
        CHECK(s.action == StepAction::kKeep);
        return s.predicted_kl;
      }
    }
    FAIL("no step for the instance");
    return 0.0;
  };
  // c0 moved behind c1 (24 tokens it never saw), then behind c1, c2 and c3 (72): the second loses more,
  // and more than c3 in the first order, whose antecedents are the same set in another order (the orbit
  // loss). Priced as such a reorder, c0 would cost no more than c3 (it lost 8x the prediction on a trace).
  const std::vector<InstanceId> first = {in[1].id, in[0].id, in[2].id, in[3].id};
  const double one = kept_kl(first, in[0].id);
  const double three = kept_kl({in[1].id, in[2].id, in[3].id, in[0].id}, in[0].id);
  const double same_set = kept_kl(first, in[3].id);
  CHECK(one > 0);
  CHECK(three > one * 1.5);
  CHECK(three > same_set * 1.5);
}

TEST_CASE("a reorder after a trim is priced: what it moves past an instance, and the order behind one",
          "[plan][budget]") {
  std::mt19937_64 rng(15);
  auto engine = open_deferred();
  std::vector<ChunkRef> c;
  for (int i = 0; i < 5; ++i) c.push_back(engine->add_tokens(random_tokens(rng, 24)));
  // A budget loose enough that every instance is kept: the plans show what keeping each one costs.
  Window w = engine->new_window(with_policy("patch:16:kl=10:eager"));
  for (const auto& x : c) w.admit(x);
  std::vector<InstanceInfo> in = w.instances();
  w.evict(in[1].id);   // c2, c3 and c4 kept over the removal: each has drifted
  in = w.instances();  // c0, c2, c3, c4
  const auto kept = [&](const std::vector<InstanceId>& order, InstanceId id) {
    const Plan p = w.plan_reorder(order);
    for (const PlanStep& s : p.steps) {
      if (s.instance == id) {
        CHECK(s.action == StepAction::kKeep);
        return s;
      }
    }
    FAIL("no step for the instance");
    return PlanStep{};
  };
  const std::vector<InstanceId> same = {in[0].id, in[1].id, in[2].id, in[3].id};
  const std::vector<InstanceId> swapped = {in[0].id, in[2].id, in[1].id, in[3].id};  // c3 before c2
  // c3 moved before c2: c2 now sees 24 tokens it never saw, c3 no longer sees c2 (a removal from its context,
  // once not counted), and c4 sees the same set in another order (once priced as unchanged, having drifted).
  const PlanStep c2 = kept(swapped, in[1].id), c3 = kept(swapped, in[2].id), c4 = kept(swapped, in[3].id);
  CHECK(c2.drift_tokens == kept(same, in[1].id).drift_tokens + 24);
  CHECK(c3.drift_tokens == kept(same, in[2].id).drift_tokens + 24);
  CHECK(c3.context_change == 1.0);
  CHECK(kept(same, in[2].id).context_change < 1.0);
  CHECK(c4.permuted);
  CHECK_FALSE(kept(same, in[3].id).permuted);
  CHECK(c4.predicted_kl > kept(same, in[3].id).predicted_kl * 1.5);
  // Applied, the order's loss stays with c4: a later plan that changes nothing prices it the same.
  w.reorder(swapped);
  const PlanStep later = kept(swapped, in[3].id);
  CHECK(later.permuted);
  CHECK(later.predicted_kl == Approx(c4.predicted_kl).epsilon(1e-9));
}

TEST_CASE("a stale patch of the same antecedents in another order is priced as an orbit patch and not as exact",
          "[plan][budget]") {
  std::mt19937_64 rng(14);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 16)), b = engine->add_tokens(random_tokens(rng, 16)),
                 c = engine->add_tokens(random_tokens(rng, 16));
  // :exact reads no orbit patches; :stale=0.5 accepts the closest patch within that divergence.
  Window w = engine->new_window(with_policy("patch:16:exact:stale=0.5:eager"));
  w.admit(a);
  w.admit(b);
  w.admit(c);
  engine->run_background();  // c's patch stored under (a, b)
  const std::vector<InstanceInfo> in = w.instances();
  const Plan p = w.plan_reorder({in[1].id, in[0].id, in[2].id});  // c now behind (b, a): the same set
  const PlanStep* served = nullptr;
  for (const PlanStep& s : p.steps) {
    if (s.instance == in[2].id) served = &s;
  }
  REQUIRE(served != nullptr);
  INFO(p.describe());
  CHECK(served->match == PatchMatch::kStale);
  CHECK(served->divergence == 0);
  CHECK(served->predicted_kl > 0);
  CHECK_FALSE(p.exact);
}

TEST_CASE("under the default budget a window reuses the rank-16 patch another formed behind the same context",
          "[plan][budget][regression]") {
  // The fidelity model reads a stored patch's residual (the share of its deficit left out), not the share
  // of the rank it drops: rank 16 of a 24-token chunk drops a third of the rank but almost none of the
  // deficit, so the second window pays no forward where a prefix cache would pay none either.
  std::mt19937_64 rng(21);
  auto engine = open_stories();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 24)), b = engine->add_tokens(random_tokens(rng, 24));
  WindowOptions d;  // the default policy: patch:16 under the default KL budget
  REQUIRE(d.policy.kl_budget > 0);
  d.policy.reuse_computed = false;  // exact reuse would serve b from the first window's KV (below)
  Window first = engine->new_window(WindowOptions{});
  first.admit(a);
  CHECK(first.admit(b).forward_tokens == Approx(24));  // first sight: prefill in context, patch formed after
  engine->run_background();                            // the worker thread has formed it
  REQUIRE(engine->stats().patches_formed == 1);
  Window second = engine->new_window(d);
  second.admit(a);
  const Plan p = second.plan_admit(b);
  INFO(p.describe());
  CHECK(p.steps.back().action == StepAction::kApplyPatch);
  CHECK(p.forward_tokens == 0);
  CHECK(p.predicted_kl > 0);
  CHECK(p.predicted_kl < d.policy.kl_budget / 10);
  {
    // With exact reuse (the default), the same context serves b from the KV the first window computed:
    // no forward and no predicted loss.
    Window third = engine->new_window(WindowOptions{});
    third.admit(a);
    const Plan r = third.plan_admit(b);
    INFO(r.describe());
    CHECK(r.steps.back().how == ServeActionId::kReuse);
    CHECK(r.forward_tokens == 0);
    CHECK(r.predicted_kl == 0);
    CHECK(r.exact);
  }
  second.apply(p).value();
  // Served near-exactly: the logits' distance from a re-prefill is a small part of blind reuse's.
  Window blind = engine->new_window(with_policy("blind"));
  blind.admit(a);
  blind.admit(b);
  const std::vector<int64_t> q = random_tokens(rng, 4);
  const double patched = distance_from_reprefill(second, q), unpatched = distance_from_reprefill(blind, q);
  INFO("max |logit - re-prefill|: patched " << patched << ", blind " << unpatched);
  CHECK(patched < unpatched / 4);
}

TEST_CASE("under a budget a recalled chunk reuses the patch it had behind a nearly identical context",
          "[plan][budget][stale]") {
  // The story is evicted and recalled behind what it was formed on plus a one-word turn: the patch its first
  // sight stored is stale (formed under another context) but close, and a budget prices it like any other
  // approximate action. Without a budget, or under one too tight for it, the recall forms a fresh patch in
  // context.
  auto engine = open_deferred();
  const ChunkRef p = engine->add_text("You are a helper who reads stories and answers questions about them.");
  const ChunkRef a = engine->add_text("Tom saw a big red ball in the park. He ran to get it.");
  const ChunkRef story =
      engine->add_text("Once upon a time, there was a little cat. The cat liked to play with a ball in the sun.");
  const std::vector<int64_t> turn = engine->tokenize("Why", false);
  std::vector<Window> windows;
  windows.reserve(3);  // the first is read after the others are made
  const auto recall_plan = [&](const std::string& spec) {
    windows.push_back(engine->new_window(with_policy(spec)));
    Window& w = windows.back();
    w.admit(p);
    w.admit(a);
    const InstanceId s = w.admit(story).added.at(0);
    engine->run_background();  // the story's patch behind [p, a] is stored
    w.evict(s);
    w.add_turn(turn);
    const Plan plan = w.plan_recall(story);
    INFO(plan.describe());
    REQUIRE(plan.steps.back().chunk.key == story.key);
    return plan;
  };
  const Plan budgeted = recall_plan("default");
  const PlanStep& reused = budgeted.steps.back();
  CHECK(reused.action == StepAction::kApplyPatch);
  CHECK(reused.match == PatchMatch::kStale);
  CHECK(reused.divergence > 0);
  CHECK(reused.divergence < 0.15);
  CHECK(reused.forward_tokens == 0);
  CHECK(reused.predicted_kl > 0);
  CHECK(budgeted.predicted_kl <= WindowPolicy{}.kl_budget);
  CHECK_THAT(budgeted.describe(), Catch::Contains("stale patch (divergence"));
  windows.front().apply(budgeted).value();

  const Plan tight = recall_plan("patch:16:kl=1e-9");
  CHECK(tight.steps.back().action == StepAction::kForm);
  CHECK(tight.steps.back().forward_tokens == Approx(static_cast<double>(story.length)));
  const Plan unbudgeted = recall_plan("patch:16");
  CHECK(unbudgeted.steps.back().action == StepAction::kForm);
  // Under a budget blind reuse fits, the stale patch still serves: it costs a patch application more (no
  // forward) and loses far less, a better rate than the budget's worth per forward token.
  const Plan loose = recall_plan("patch:16:kl=0.1");
  CHECK(loose.steps.back().action == StepAction::kApplyPatch);
  CHECK(loose.steps.back().match == PatchMatch::kStale);
  CHECK(loose.forward_tokens == 0);

  // Served far closer to a re-prefill than the canonical alone (blind) at the same place.
  Window blind = engine->new_window(with_policy("blind"));
  blind.admit(p);
  blind.admit(a);
  blind.add_turn(turn);
  blind.admit(story);
  std::mt19937_64 rng(9);
  const std::vector<int64_t> q = random_tokens(rng, 4);
  const double reused_distance = distance_from_reprefill(windows.front(), q),
               blind_distance = distance_from_reprefill(blind, q);
  INFO("max |logit - re-prefill|: stale patch " << reused_distance << ", blind " << blind_distance);
  CHECK(reused_distance < blind_distance / 2);
}

TEST_CASE("a chunk's predicted loss follows how much its KV depends on its context, once a patch measures it",
          "[plan][budget]") {
  // Story text that starts afresh ("Once upon a time...") leans on what precedes it far less than random
  // ids do. Until a chunk's patch is formed its sensitivity is unknown and the fidelity model's reference
  // stands in; once formed, the same keep after the same eviction is predicted by the measured one.
  std::mt19937_64 rng(5);
  auto engine = open_deferred();
  const ChunkRef p = engine->add_text("You are a helper who reads stories and answers questions about them.");
  const ChunkRef x = engine->add_text("Tom saw a big red ball in the park. He ran to get it.");
  const ChunkRef story =
      engine->add_text("Once upon a time, there was a little cat. The cat liked to play with a ball in the sun.");
  const ChunkRef noise = engine->add_tokens(random_tokens(rng, story.length));
  // Each window sees its chunks first (exact prefills; their patches queued), then plans evicting x under a
  // budget that keeps every survivor.
  struct Held {
    Window w;
    InstanceId x;
    ChunkRef last;
  };
  const auto hold = [&](const ChunkRef& last) {
    Window w = engine->new_window(WindowOptions{});
    w.admit(p);
    const InstanceId xi = w.admit(x).added.at(0);
    w.admit(last);
    w.set_policy(parse_policy("patch:16:kl=1"));
    return Held{std::move(w), xi, last};
  };
  const auto kept_step = [](const Held& h) {
    const Plan plan = h.w.plan_evict(h.x);
    INFO(plan.describe());
    for (const PlanStep& s : plan.steps) {
      if (s.chunk.key == h.last.key) {
        REQUIRE(s.action == StepAction::kKeep);
        return s;
      }
    }
    FAIL("no step for the last chunk");
    return PlanStep{};
  };
  const auto kept_prediction = [&](const Held& h) { return kept_step(h).predicted_kl; };
  const Held with_story = hold(story), with_noise = hold(noise);
  REQUIRE(engine->stats().background_pending > 0);
  const double story_before = kept_prediction(with_story), noise_before = kept_prediction(with_noise);
  CHECK(story_before > 0);
  CHECK(story_before == Approx(noise_before).epsilon(1e-9));  // same features, sensitivity unknown for both
  CHECK(kept_step(with_story).sensitivity == -1);
  engine->run_background();  // forms the patches: each measures its chunk's sensitivity
  const double story_after = kept_prediction(with_story), noise_after = kept_prediction(with_noise);
  CHECK(story_after > 0);
  CHECK(story_after < story_before);       // below the reference: text that starts afresh
  CHECK(story_after < noise_after / 1.5);  // random ids depend on their context more
  CHECK(kept_step(with_story).sensitivity > 0);
  CHECK(kept_step(with_story).sensitivity < kept_step(with_noise).sensitivity);
  CHECK_THAT(with_story.w.plan_evict(with_story.x).describe(), Catch::Contains("(sensitivity "));
}

TEST_CASE("an engine prices a stored patch another engine formed by the residual and sensitivity stored with it",
          "[plan][budget][store]") {
  test::TempDir dir;
  const std::string system = "You are a helper who reads stories and answers questions about them.";
  const std::string text = "Once upon a time, there was a little cat. The cat liked to play with a ball in the sun.";
  // Serving the story behind the system text from its stored patch: the predicted KL of that step.
  const auto patch_prediction = [&](Engine& engine) {
    const ChunkRef p = engine.add_text(system), story = engine.add_text(text);
    WindowOptions patched;
    patched.policy.reuse_computed = false;  // the story from its patch, not from the stored KV
    Window w = engine.new_window(patched);
    w.admit(p);
    const Plan plan = w.plan_admit(story);
    INFO(plan.describe());
    REQUIRE(plan.steps.back().action == StepAction::kApplyPatch);
    const double kl = plan.steps.back().predicted_kl;
    w.apply(plan).value();
    return kl;
  };
  double formed = 0;
  {
    auto first = open_stories(dir / "store");
    Window w = first->new_window(WindowOptions{});  // (stores the story's KV behind the system text, too)
    w.admit(first->add_text(system));
    w.admit(first->add_text(text));  // first sight: exact prefill, its patch formed in the background
    first->run_background();
    formed = patch_prediction(*first);  // this engine formed the patch: it knows its residual and sensitivity
    first->close();
  }
  auto engine = open_stories(dir / "store");
  // Before reading the patch the engine priced it by the truncation stand-in and its sensitivity prior (the
  // story, text that starts afresh, then cost over 25% more); now by what the store recorded with it.
  const double stored = patch_prediction(*engine);
  CHECK(formed > 0);
  CHECK(stored == Approx(formed).epsilon(1e-6));
  CHECK(patch_prediction(*engine) == Approx(stored));  // read again: the same value, not counted twice
}

TEST_CASE("background modes: deferred work waits for run_background, a read of a queued patch runs it",
          "[plan][background]") {
  std::mt19937_64 rng(13);
  auto engine = open_deferred();
  const ChunkRef a = engine->add_tokens(random_tokens(rng, 16)), b = engine->add_tokens(random_tokens(rng, 16));
  Window w = engine->new_window(with_policy("patch:full:noreuse"));
  w.admit(a);
  const ApplyReport first = w.admit(b);
  CHECK(first.forward_tokens == Approx(16));  // the in-context prefill only
  CHECK(engine->stats().background_pending == 1);
  CHECK(engine->stats().patches_formed == 0);
  // A second window needs that very patch: the plan counts it as a hit and apply runs the queued job.
  Window v = engine->new_window(with_policy("patch:full:noreuse"));
  v.admit(a);
  const Plan p = v.plan_admit(b);
  CHECK(p.steps.back().action == StepAction::kApplyPatch);
  const ApplyReport second = v.apply(p).value();
  CHECK(second.patch_hits == 1);
  CHECK(engine->stats().background_pending == 0);
  CHECK(engine->stats().patches_formed == 1);
  // Closing with work queued cancels it and returns.
  const ChunkRef c = engine->add_tokens(random_tokens(rng, 16));
  w.admit(c);
  CHECK(engine->stats().background_pending == 1);
  engine->close();
  CHECK(engine->closed());
}

TEST_CASE("a plan's reasons name the operation that changed an instance's context", "[plan][explain]") {
  // When a is evicted, b (first now) takes its stored canonical, exact and free, and c is kept as-is; admitting d
  // after them changes nothing before them, so the admit's plan blames the earlier edit for c and calls b
  // unchanged, while admitting d before b blames that admit.
  auto engine = open_deferred();
  const ChunkRef a = engine->add_text("Tom saw a big red ball in the park.");
  const ChunkRef b = engine->add_text("He ran to get it and fell down.");
  const ChunkRef c = engine->add_text("His mom came and helped him up.");
  const ChunkRef d = engine->add_text("They went home and had some cake.");
  Window w = engine->new_window(with_policy("patch:16:kl=1:eager"));
  const InstanceId ia = w.admit(a).added.at(0);
  const InstanceId ib = w.admit(b).added.at(0);
  w.admit(c);
  // The canonicals formed (deferred background work): b's at position 0 is then read, not encoded.
  engine->run_background();
  w.evict(ia);
  const auto reason_of = [](const Plan& p, const ChunkRef& chunk) {
    for (const PlanStep& s : p.steps) {
      if (s.chunk.key == chunk.key && s.action != StepAction::kEvict) return s.reason;
    }
    FAIL("no step for the chunk");
    return std::string();
  };
  const Plan admit = w.plan_admit(d);
  INFO(admit.describe());
  CHECK_THAT(reason_of(admit, b), Catch::Contains("unchanged"));
  CHECK_THAT(reason_of(admit, c), Catch::Contains("context changed by an earlier edit"));
  CHECK_THAT(admit.describe(), !Catch::Contains("inserted before it"));
  const Plan before_b = w.plan_admit(d, ib);
  INFO(before_b.describe());
  CHECK_THAT(reason_of(before_b, b), Catch::Contains("inserted before it"));
  CHECK_THAT(reason_of(before_b, c), Catch::Contains("inserted before it"));
}

}  // namespace ORBIT_TEST_FILE
