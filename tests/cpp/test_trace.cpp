// Traces and replay (orbit/trace.h): the example traces in tests/data/traces replay on the
// bundled model; re-prefill is exact at every step; the patch policy computes fewer forward tokens than
// re-prefill on traces with look-backs; bad traces are refused naming the step and field; the JSON report
// has the documented fields; `orbit replay` and `orbit make-trace` work end to end (M-RoPE traces:
// test_trace_mrope.cpp).
#include "orbit_catch.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "orbit/trace.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using nlohmann::json;

namespace {

std::string trace_path(const std::string& name) { return std::string(ORBIT_TEST_DATA_DIR) + "/traces/" + name; }

ReplayOptions stories_options(std::vector<std::string> policies = {"patch:16"}) {
  ReplayOptions o;
  o.engine.model = test::stories_path();
  o.engine.page_size = 4;
  o.engine.pool_bytes = int64_t{32} << 20;
  o.policies = std::move(policies);
  return o;
}

// A minimal valid trace with `steps` spliced in (a JSON fragment).
std::string tiny_trace(const std::string& steps, const std::string& chunks = "") {
  return std::string(R"({"format": "orbit-trace/1", "chunks": [)") +
         R"({"name": "a", "random_tokens": 5, "seed": 1}, {"name": "b", "random_tokens": 6, "seed": 2})" + chunks +
         R"(], "steps": [)" + steps + "]}";
}

std::string refusal(const std::string& text) {
  try {
    parse_trace(text, "bad.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

const std::vector<std::string> kExamples = {"lookback.json", "web.json", "video.json", "agent.json"};

}  // namespace

TEST_CASE("example traces load, validate and round-trip through save", "[trace]") {
  test::TempDir dir;
  for (const std::string& name : kExamples) {
    INFO(name);
    const Trace t = load_trace(trace_path(name));
    CHECK(t.format == "orbit-trace/1");
    CHECK(!t.steps.empty());
    CHECK(t.source == trace_path(name));
    save_trace(t, dir / name);
    const Trace again = load_trace(dir / name);
    CHECK(trace_to_json(again) == trace_to_json(t));
  }
}

TEST_CASE("step_fidelity: KL, top-1 with float ties, and misses at the reference's near ties counted apart",
          "[trace]") {
  Logits ref, got;
  ref.rows = got.rows = 4;
  ref.vocab = got.vocab = 3;
  ref.values = {2.0f, 1.95f,        0.0f,   // a near tie (margin 0.05)...
                3.0f, 0.0f,         0.0f,   // a clear choice...
                1.0f, 0.5f,         0.0f,   // a clear choice, kept
                1.0f, 1.0f - 5e-5f, 0.0f};  // a float tie, and a near tie
  got.values = {1.9f, 2.0f, 0.0f,           // ...overturned: a miss at a near tie
                0.0f, 3.0f, 0.0f,           // ...overturned: a miss at a clear choice
                1.0f, 0.5f, 0.0f,           //
                0.9f, 1.0f, 0.0f};          // the runner-up within kTop1TieLogits: agreement
  const StepFidelity f = step_fidelity(ref, got);
  CHECK(f.rows == 4);
  CHECK(f.top1 == Approx(0.5));
  CHECK(f.top1_misses == 2);
  CHECK(f.near_tie_rows == 2);
  CHECK(f.near_tie_misses == 1);
  // Each miss names its row and how far the reference's own choice was ahead of the window's pick.
  REQUIRE(f.misses.size() == 2);
  CHECK(f.misses[0].row == 0);
  CHECK(f.misses[0].margin == Approx(0.05).margin(1e-6));
  CHECK(f.misses[0].near_tie);
  CHECK(f.misses[0].kl > 0);
  CHECK(f.misses[1].row == 1);
  CHECK(f.misses[1].margin == Approx(3.0).margin(1e-6));
  CHECK_FALSE(f.misses[1].near_tie);
  CHECK(f.misses[1].kl > f.misses[0].kl);
  CHECK(f.kl > 0);
  CHECK(step_fidelity(ref, ref).kl == Approx(0).margin(1e-12));
  CHECK(step_fidelity(ref, ref).top1_misses == 0);
  got.rows = 3;
  got.values.resize(9);
  CHECK_THROWS_WITH(step_fidelity(ref, got), Catch::Contains("step_fidelity") && Catch::Contains("shape"));
}

TEST_CASE("re-prefill is exact at every step; the patch policy forms fewer forwards on look-backs", "[trace][replay]") {
  for (const std::string& name : kExamples) {
    INFO(name);
    const ReplayReport r = replay(load_trace(trace_path(name)), stories_options());
    REQUIRE(r.policies.size() == 4);  // patch:16, then the baselines
    CHECK(r.policies[0].policy == "patch:16");
    CHECK_FALSE(r.policies[0].baseline);
    const PolicyReplay* reprefill = r.find("reprefill");
    const PolicyReplay* prefix = r.find("prefix");
    const PolicyReplay* blind = r.find("blind");
    REQUIRE(reprefill != nullptr);
    REQUIRE(prefix != nullptr);
    REQUIRE(blind != nullptr);
    CHECK(blind->baseline);
    for (const PolicyReplay& p : r.policies) {
      REQUIRE(p.steps.size() == r.steps);
      CHECK(p.totals.refused == 0);
    }
    int64_t measured = 0;
    for (const StepResult& s : reprefill->steps) {
      INFO("step " << s.index << " (" << trace_op_name(s.op) << ")");
      if (!s.fidelity) continue;
      ++measured;
      CHECK(s.fidelity->kl <= 1e-6);
      CHECK(s.fidelity->top1 == 1.0);
    }
    CHECK(measured > 0);
    CHECK(reprefill->totals.top1_misses == 0);
    // The totals' row counts are the steps' sums.
    int64_t rows = 0, misses = 0, tie_rows = 0, tie_misses = 0;
    for (const StepResult& s : blind->steps) {
      if (!s.fidelity) continue;
      rows += s.fidelity->rows;
      misses += s.fidelity->top1_misses;
      tie_rows += s.fidelity->near_tie_rows;
      tie_misses += s.fidelity->near_tie_misses;
      CHECK(s.fidelity->top1_misses == std::llround(static_cast<double>(s.fidelity->rows) * (1 - s.fidelity->top1)));
    }
    CHECK(blind->totals.top1_rows == rows);
    CHECK(blind->totals.top1_misses == misses);
    CHECK(blind->totals.near_tie_rows == tie_rows);
    CHECK(blind->totals.near_tie_misses == tie_misses);
    CHECK(tie_misses <= misses);
    CHECK(tie_rows <= rows);
    // The live yardstick (EngineStats::prefix_cache_tokens): a chunk-granular prefix cache that holds every
    // prefix it computed. The prefix baseline executes a radix cache (exact reuse of chunks, turns and
    // answers behind the same sequence): it forwards no more than re-prefill. Where no turn follows a change
    // (video) the ledger and it agree, under every policy: they read the same windows (the ledger counts no
    // query tokens, so the prefix baseline's reads' queries are left out).
    double totals = 0;
    for (const StepResult& s : prefix->steps) totals += s.prefix_cache_tokens;
    CHECK(prefix->totals.prefix_cache_tokens == Approx(totals));
    CHECK(prefix->totals.prefix_cache_tokens > 0);
    CHECK(prefix->totals.critical_forward_tokens <= reprefill->totals.critical_forward_tokens);
    if (name == "video.json") {
      for (const PolicyReplay& p : r.policies) {
        INFO(p.policy);
        CHECK(p.totals.prefix_cache_tokens ==
              Approx(prefix->totals.critical_forward_tokens - prefix->totals.query_forward_tokens));
      }
    }
    const PolicyReplay& patch = r.policies[0];
    CHECK(patch.totals.forward_tokens < reprefill->totals.forward_tokens);
    CHECK(patch.totals.forward_tokens < patch.totals.full_prefill_tokens);
    CHECK(reprefill->totals.forward_tokens <= reprefill->totals.full_prefill_tokens);
    CHECK(blind->totals.forward_tokens <= patch.totals.forward_tokens);
    // Same contents in every policy's window at every step.
    for (std::size_t i = 0; i < r.steps; ++i) {
      CHECK(patch.steps[i].window_tokens == reprefill->steps[i].window_tokens);
      CHECK(blind->steps[i].window_tokens == reprefill->steps[i].window_tokens);
    }
    // The offline bound: no policy forms fewer than the compulsory patches; LRU and the online policy
    // form at least that many.
    REQUIRE(patch.offline.has_value());
    const OfflineReport& o = *patch.offline;
    CHECK(o.demands > 0);
    CHECK(o.compulsory_formations == o.distinct_patches);
    CHECK(o.compulsory_formations <= o.belady_formations);
    CHECK(o.belady_formations <= o.lru_formations);
    CHECK(o.online_formations >= o.compulsory_formations);
    CHECK_FALSE(reprefill->offline.has_value());
  }
}

TEST_CASE("look-backs reuse stored patches: the second recall of the same context costs no forward",
          "[trace][replay]") {
  const Trace t = load_trace(trace_path("lookback.json"));
  // Eager: each reorder repairs at once, so the orbit hits of step 11 show at step 11 (deferral: below).
  ReplayOptions o = stories_options({"patch:16:eager"});
  o.baselines = false;
  o.explain = true;
  const ReplayReport r = replay(t, o);
  REQUIRE(r.policies.size() == 1);
  const PolicyReplay& p = r.policies[0];
  // Steps 14 and 16 recall doc_b behind the same context: formed once, then a hit.
  REQUIRE(t.steps[16].op == TraceOp::kRecall);
  CHECK(p.steps[14].patches_formed >= 1);
  CHECK(p.steps[16].patch_hits >= 1);
  CHECK(p.steps[16].forward_tokens < p.steps[14].forward_tokens);
  // (exact reuse: the KV formed at step 14 behind this same window, stored with its patch)
  CHECK(p.steps[16].plan.find("reuse (exact match)") != std::string::npos);
  // Critical path and background add up to the total, step by step.
  for (const StepResult& s : p.steps)
    CHECK(s.forward_tokens == Approx(s.critical_forward_tokens + s.background_forward_tokens));
  CHECK(p.totals.background_forward_tokens > 0);
  CHECK(p.totals.critical_forward_tokens < p.totals.forward_tokens);
  // The reorder back (step 11) to an order whose antecedent sets were seen finds orbit patches.
  CHECK(p.steps[11].patch_hits >= 1);
  // Forks: dropping returns to the parent's contents; commit takes the branch's.
  CHECK(p.steps[21].window_tokens == p.steps[16].window_tokens);
  CHECK(p.steps[21].branch == "main");
  CHECK(p.steps[24].branch == "main");
  CHECK(p.steps[24].window_tokens == p.steps[23].window_tokens);
  // generate / disposable report their results.
  CHECK(p.steps[6].generated.size() == 4);
  REQUIRE(p.steps[28].disposable.has_value());
  // No cache: step 27 (generate, append) re-prefills the window after it, and forwards its query.
  CHECK(p.steps[27].full_prefill_tokens ==
        static_cast<double>(p.steps[27].window_tokens + p.steps[27].yardstick_read->query.size()));
  CHECK(p.steps[28].full_prefill_tokens == static_cast<double>(p.steps[28].yardstick_read->query.size()));
}

TEST_CASE("idle time: after a generate step the window heals and prepares a recall, off the critical path",
          "[trace][replay][idle]") {
  const std::string steps = R"({"op": "turn", "tokens": [1, 22, 87, 13]}, {"op": "admit", "chunk": "a"},
      {"op": "admit", "chunk": "b"}, {"op": "admit", "chunk": "c"}, {"op": "evict", "chunk": "a"},
      {"op": "generate", "max_tokens": 2}, {"op": "recall", "chunk": "a"}, {"op": "generate", "max_tokens": 2})";
  const Trace t = parse_trace(tiny_trace(steps, R"(, {"name": "c", "random_tokens": 7, "seed": 3})"), "idle.json");
  // A budget so loose that every survivor is kept: the window the model reads is approximate. The same
  // with the default policy's heal and prepared recall (`:heal:prep=1`; this trace never reorders).
  ReplayOptions o = stories_options({"patch:16:kl=1:heal:prep=1", "patch:16:kl=1"});
  o.baselines = false;
  const ReplayReport r = replay(t, o);
  REQUIRE(r.policies.size() == 2);
  const PolicyReplay& idle = r.policies[0];
  const PolicyReplay& busy = r.policies[1];
  REQUIRE(busy.steps[5].fidelity.has_value());
  REQUIRE(busy.steps[5].fidelity->kl > 1e-6);
  // Up to the first generate both policies do the same on the critical path.
  for (std::size_t i = 0; i <= 5; ++i) {
    INFO("step " << i);
    CHECK(idle.steps[i].critical_forward_tokens == busy.steps[i].critical_forward_tokens);
    CHECK(busy.steps[i].heal_forward_tokens == 0);
    CHECK(busy.steps[i].prepare_forward_tokens == 0);
  }
  // The generate step read b and c kept over a's eviction (probed before the heal), then healed them and
  // prepared a's recall: b and c are formed again (7 + 6 tokens), a behind them (5), all background. The heal
  // also carries the window's tentative tail (the generate's 4-token probe query and its 2 generated tokens)
  // behind the healed states: no answer has failed to come back yet, so the window expects this one to.
  const StepResult& g = idle.steps[5];
  REQUIRE(g.fidelity.has_value());
  CHECK(g.fidelity->kl == Approx(busy.steps[5].fidelity->kl));
  CHECK(g.heal_forward_tokens == Approx(6 + 7 + 4 + 2));
  CHECK(g.prepare_forward_tokens == Approx(5));
  CHECK(g.background_forward_tokens >= g.heal_forward_tokens + g.prepare_forward_tokens);
  CHECK(g.forward_tokens == Approx(g.critical_forward_tokens + g.background_forward_tokens));
  // The recall to the tail reads the prepared patch: nothing forwarded on the critical path, and the
  // healed window is closer to a re-prefill than the one that kept its survivors.
  CHECK(idle.steps[6].critical_forward_tokens == 0);
  REQUIRE(idle.steps[6].fidelity.has_value());
  REQUIRE(busy.steps[6].fidelity.has_value());
  CHECK(idle.steps[6].fidelity->kl < busy.steps[6].fidelity->kl);
  CHECK(idle.totals.heal_forward_tokens == Approx(g.heal_forward_tokens + idle.steps[7].heal_forward_tokens));
  CHECK(idle.totals.prepare_forward_tokens == Approx(g.prepare_forward_tokens + idle.steps[7].prepare_forward_tokens));
  const json j = json::parse(replay_report_json(r));
  CHECK(j["policies"][0]["steps"][5]["heal_forward_tokens"].get<double>() == Approx(19));
  CHECK(j["policies"][0]["steps"][5]["prepare_forward_tokens"].get<double>() == Approx(5));
  CHECK(j["policies"][0]["totals"].contains("heal_forward_tokens"));
  CHECK(j["policies"][0]["totals"].contains("prepare_forward_tokens"));
}

TEST_CASE("deferred repairs: edits forward nothing, the next forwarding step pays once for them all",
          "[trace][replay][defer]") {
  const Trace t = load_trace(trace_path("lookback.json"));
  ReplayOptions o = stories_options({"reprefill:eager", "reprefill", "patch:16:kl=0.003"});
  o.baselines = false;
  o.explain = true;
  const ReplayReport r = replay(t, o);
  REQUIRE(r.policies.size() == 3);
  const PolicyReplay& eager = r.policies[0];
  const PolicyReplay& lazy = r.policies[1];
  const PolicyReplay& budget = r.policies[2];
  // Steps 10-12 (reorder, reorder back, evict) are edits; step 13 (a turn) is the next forwarding step.
  REQUIRE(t.steps[10].op == TraceOp::kReorder);
  REQUIRE(t.steps[12].op == TraceOp::kEvict);
  REQUIRE(t.steps[13].op == TraceOp::kTurn);
  double eager_run = 0;
  for (std::size_t i = 10; i <= 13; ++i) {
    eager_run += eager.steps[i].critical_forward_tokens;
    CHECK(lazy.steps[i].window_tokens == eager.steps[i].window_tokens);
  }
  CHECK(eager.steps[10].critical_forward_tokens > 0);
  for (std::size_t i = 10; i <= 12; ++i) {
    INFO("step " << i);
    CHECK(lazy.steps[i].critical_forward_tokens == 0);
    CHECK(lazy.steps[i].deferred > 0);
    CHECK_FALSE(lazy.steps[i].fidelity.has_value());  // never read in this state: not probed
    CHECK(eager.steps[i].deferred == 0);
  }
  // The turn repairs from the first changed position once, where the eager run re-prefilled after every
  // edit; and the window it leaves is exact.
  CHECK(lazy.steps[13].deferred == 0);
  CHECK(lazy.steps[13].critical_forward_tokens > eager.steps[13].critical_forward_tokens);
  CHECK(lazy.steps[13].critical_forward_tokens < eager_run);
  REQUIRE(lazy.steps[13].fidelity.has_value());
  CHECK(lazy.steps[13].fidelity->kl < 1e-6);
  CHECK(lazy.totals.critical_forward_tokens < eager.totals.critical_forward_tokens);
  CHECK(lazy.totals.max_kl < 1e-6);
  // A read after a deferring edit (step 20 generates after step 19 evicts) runs the repairs as a plan of its
  // own: explained, and its forwards and predicted KL are the read's step's.
  REQUIRE(t.steps[19].op == TraceOp::kEvict);
  REQUIRE(t.steps[20].op == TraceOp::kGenerate);
  CHECK(lazy.steps[19].deferred > 0);
  CHECK(lazy.steps[20].critical_forward_tokens > 0);
  CHECK(lazy.steps[20].predicted_kl == 0);  // reprefill repairs exactly
  CHECK(lazy.steps[20].plan.find("flush [reprefill]") != std::string::npos);
  CHECK(eager.steps[20].plan.find("flush") == std::string::npos);  // nothing deferred, nothing to run
  // Fewer steps are probed, and only those: every probed step of the deferring policies has nothing waiting.
  CHECK(lazy.totals.fidelity_steps < eager.totals.fidelity_steps);
  for (const PolicyReplay* p : {&lazy, &budget}) {
    for (const StepResult& s : p->steps) CHECK((s.deferred > 0) <= !s.fidelity.has_value());
  }
}

TEST_CASE("a replay can fit each engine's fidelity model alone, and plans the same every run", "[trace][replay]") {
  const Trace t = load_trace(trace_path("lookback.json"));
  ReplayOptions o = stories_options({"default"});
  o.baselines = false;
  o.fidelity = false;
  o.calibrate_fidelity = true;
  const ReplayReport a = replay(t, o), b = replay(t, o);
  const PolicyReplay& x = a.policies.at(0);
  CHECK(x.fidelity_model.find("(fitted)") != std::string::npos);
  CHECK(x.fidelity_model.find("(default)") == std::string::npos);
  CHECK(b.policies.at(0).fidelity_model == x.fidelity_model);
  REQUIRE(b.policies.at(0).steps.size() == x.steps.size());
  for (std::size_t i = 0; i < x.steps.size(); ++i) {
    CHECK(b.policies.at(0).steps[i].critical_forward_tokens == x.steps[i].critical_forward_tokens);
  }
  o.calibrate = true;
  CHECK_THROWS_WITH(replay(t, o), Catch::Contains("calibrate_fidelity needs calibrate off"));
}

TEST_CASE("timing repeats keep each step's fastest time and the first round's tokens and fidelity", "[trace][replay]") {
  const Trace t = load_trace(trace_path("lookback.json"));
  ReplayOptions once = stories_options({"patch:16"});
  once.baselines = false;
  const ReplayReport a = replay(t, once);
  ReplayOptions thrice = once;
  thrice.timing_repeats = 3;
  std::vector<std::size_t> seen;  // policy index per progress call
  thrice.progress = [&seen](std::size_t p, std::size_t, std::size_t step, std::size_t, const std::string&) {
    if (step == 0) seen.push_back(p);
  };
  const ReplayReport b = replay(t, thrice);
  CHECK(seen.size() == 3);  // three rounds of the one policy
  const PolicyReplay& x = a.policies.at(0);
  const PolicyReplay& y = b.policies.at(0);
  REQUIRE(y.steps.size() == x.steps.size());
  double critical = 0;
  for (std::size_t i = 0; i < y.steps.size(); ++i) {
    const StepResult& s = y.steps[i];
    CHECK(s.critical_forward_tokens == x.steps[i].critical_forward_tokens);
    CHECK(s.background_forward_tokens == x.steps[i].background_forward_tokens);
    CHECK(s.fidelity.has_value() == x.steps[i].fidelity.has_value());
    if (s.fidelity) CHECK(s.fidelity->kl == Approx(x.steps[i].fidelity->kl).margin(1e-9));
    CHECK(s.critical_seconds > 0);
    CHECK(s.seconds == Approx(s.critical_seconds + s.background_seconds));
    critical += s.critical_seconds;
  }
  // The totals are recomputed from the kept times.
  CHECK(y.totals.critical_seconds == Approx(critical));
  CHECK(y.totals.critical_forward_tokens == x.totals.critical_forward_tokens);
  CHECK(y.totals.mean_kl == Approx(x.totals.mean_kl).margin(1e-12));
  ReplayOptions none = once;
  none.timing_repeats = 0;
  CHECK_THROWS_WITH(replay(t, none), Catch::Contains("timing_repeats must be >= 1, got 0"));
  ReplayOptions calibrated = thrice;
  calibrated.calibrate = true;
  CHECK_THROWS_WITH(replay(t, calibrated), Catch::Contains("timing_repeats > 1 needs calibrate off"));
  // A patch capacity where no policy asked for forms a patch would size nothing.
  ReplayOptions unformed = stories_options({"blind", "cacheblend:0.5"});
  unformed.patch_capacity_bytes = 1000;
  CHECK_THROWS_WITH(replay(t, unformed), Catch::Contains("patch_capacity_bytes sizes the offline bound") &&
                                             Catch::Contains("(blind, cacheblend:0.5)"));
  CHECK_FALSE(orbit::forms_patches(parse_policy("blind")));
  CHECK(orbit::forms_patches(parse_policy("default")));
}

TEST_CASE("full-rank patches with re-conditioning stay close to re-prefill over a trace", "[trace][replay]") {
  ReplayOptions o = stories_options({"patch:full:exact"});
  o.baselines = false;
  const ReplayReport r = replay(load_trace(trace_path("lookback.json")), o);
  for (const StepResult& s : r.policies[0].steps) {
    INFO("step " << s.index << " (" << trace_op_name(s.op) << ")");
    if (s.fidelity) CHECK(s.fidelity->kl <= 1e-4);
  }
}

TEST_CASE("bad traces are refused naming the file, step, op and field", "[trace][errors]") {
  using Catch::Contains;
  CHECK_THAT(refusal(tiny_trace(R"({"op": "admit", "chunk": "a"}, {"op": "evict", "chunk": "b"})")),
             Contains("bad.json: step 1 (evict): field 'chunk': 'b' is not in the window on branch 'main'"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "admit", "chunk": "a"}, {"op": "recall", "chunk": "a"})")),
             Contains("step 1 (recall): field 'chunk': 'a' is already in the window"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "admit", "chunk": "b"}, {"op": "recall", "chunk": "a"})")),
             Contains("step 1 (recall): field 'chunk': 'a' was not evicted"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "admit", "chunk": "zz"})")),
             Contains("step 0 (admit): field 'chunk': 'zz' is not a chunk of this trace"));
  CHECK_THAT(
      refusal(tiny_trace(
          R"({"op": "admit", "chunk": "a"}, {"op": "admit", "chunk": "b"}, {"op": "reorder", "order": ["b"]})")),
      Contains("step 2 (reorder): field 'order': lists 1 chunks but the window holds 2 on branch 'main' (missing: a)"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "jump"})")), Contains("step 0: field 'op': unknown op 'jump'"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "slide", "count": 2})")),
             Contains("step 0 (slide): field 'count': 2 but the window holds 0 chunks"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "turn", "tokens": [1, "x"]})")),
             Contains("step 0 (turn): field 'tokens': item 1 (\"x\") is not a non-negative integer token id"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "turn", "tokens": [1], "chunk": "a"})")),
             Contains("step 0 (turn): field 'chunk': unknown field"));
  // A repeated key would be read as its last value alone: refused, naming the object and the key.
  CHECK_THAT(refusal(tiny_trace(R"({"op": "admit", "chunk": "a", "chunk": "b"})")),
             Contains("bad.json: steps[0]: field 'chunk': given twice in one object"));
  CHECK_THAT(refusal(R"({"format": "orbit-trace/1", "format": "orbit-trace/1", "chunks": [], "steps": []})"),
             Contains("bad.json: top level: field 'format': given twice in one object"));
  CHECK_THAT(refusal(tiny_trace("", R"(, {"name": "c", "random_tokens": 7, "seed": 3, "seed": 4})")),
             Contains("bad.json: chunks[2]: field 'seed': given twice"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "evict", "turn": 0})")),
             Contains("step 0 (evict): field 'turn': index 0 but the window holds 0 live turns"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "drop", "branch": "main"})")),
             Contains("step 0 (drop): field 'branch': 'main' cannot be dropped"));
  CHECK_THAT(refusal(tiny_trace(
                 R"({"op": "admit", "chunk": "a"}, {"op": "admit", "chunk": "b"}, {"op": "place"}, {"op": "slide"})")),
             Contains("step 3 (slide): field 'count': the chunk order after 'place' (step 2) depends on the policy"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "fork", "branch": "x"}, {"op": "commit"}, {"op": "commit"})")),
             Contains("step 2 (commit): field 'branch': 'main' cannot be committed"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "switch", "branch": "x"})")),
             Contains("step 0 (switch): field 'branch': 'x' is not a live branch"));
  CHECK_THAT(refusal(tiny_trace(R"({"op": "generate", "max_tokens": 0})")),
             Contains("step 0 (generate): field 'max_tokens': must be >= 1"));
  CHECK_THAT(refusal(tiny_trace("", R"(, {"name": "a", "tokens": [3]})")),
             Contains("chunk 2 ('a'): field 'name': 'a' is used by an earlier chunk"));
  CHECK_THAT(refusal(tiny_trace("", R"(, {"name": "c", "tokens": [3], "random_tokens": 4})")),
             Contains("chunk 2 ('c'): field 'tokens': give only one of"));
  CHECK_THAT(refusal(R"({"format": "orbit-trace/9", "chunks": [], "steps": []})"),
             Contains("bad.json: top level: field 'format': 'orbit-trace/9' is not supported"));
  CHECK_THAT(refusal(R"({"format": "orbit-trace/1", "chunks": []})"), Contains("top level: field 'steps': missing"));
  CHECK_THAT(refusal("{\"format\": "), Contains("bad.json: not valid JSON"));
  CHECK_THROWS_WITH(load_trace("/nonexistent/trace.json"), Contains("/nonexistent/trace.json: cannot open"));

  // Checks that need the model happen at replay, with the same naming.
  const Trace vocab = parse_trace(tiny_trace(R"({"op": "turn", "tokens": [1, 99999]})"), "vocab.json");
  CHECK_THROWS_WITH(
      replay(vocab, stories_options()),
      Contains("vocab.json: step 0 (turn): field 'tokens': item 1 (99999) is outside the model's vocabulary"));
  const Trace same = parse_trace(tiny_trace("", R"(, {"name": "c", "random_tokens": 5, "seed": 1})"), "same.json");
  CHECK_THROWS_WITH(replay(same, stories_options()),
                    Contains("same.json: chunk 2 ('c'): field 'tokens': same content as chunk 'a'"));
  CHECK_THROWS_WITH(replay(vocab, stories_options({"bogus"})), Contains("unknown policy 'bogus'"));
}

TEST_CASE("generated traces are deterministic, valid, and stay within the model's positions", "[trace][make]") {
  for (const std::string kind : {"web", "video", "agent"}) {
    INFO(kind);
    MakeTraceOptions o;
    o.kind = kind;
    o.steps = 13;
    o.seed = 5;
    const Trace a = make_trace(o);
    CHECK(trace_to_json(a) == trace_to_json(make_trace(o)));
    o.seed = 6;
    CHECK(trace_to_json(a) != trace_to_json(make_trace(o)));
    std::set<std::string> ops;
    for (const TraceStep& s : a.steps) ops.insert(trace_op_name(s.op));
    CHECK(ops.count("recall") == 1);
    CHECK(ops.count("reorder") == 1);
    CHECK(ops.count("fork") == 1);
    if (kind != "video") CHECK(ops.count("slide") == 1);
  }
  MakeTraceOptions vl;
  vl.kind = "video";
  vl.position_rows = 3;
  const Trace v = make_trace(vl);
  CHECK(v.chunks.front().embeddings);
  CHECK(v.chunks.front().media.grid[0] == 1);
  CHECK_THROWS_WITH(make_trace(MakeTraceOptions{"chat"}),
                    Catch::Contains("kind 'chat' is not one of web, video, agent"));
}

TEST_CASE("a rag trace whose documents outgrow the window ranks the ones it holds", "[trace][make]") {
  // tinystories-656k's tokenizer makes the five retrieved documents longer than the window's budget:
  // admitting the last ones drops the oldest, and the rank order names only the documents left.
  test::TempDir dir;
  const std::string model = std::string(" --model ") + ORBIT_MODELS_DIR + "/tinystories-656k";
  for (const char* seed : {"1", "701", "702"}) {
    INFO("seed " << seed);
    const test::CliRun m = test::cli(std::string("make-trace --kind rag --steps 8 --seed ") + seed + model + " --out " +
                                     (dir / "rag.json"));
    INFO(m.out);
    REQUIRE(m.status == 0);
    const Trace t = load_trace(dir / "rag.json");
    int reorders = 0;
    for (const TraceStep& s : t.steps) reorders += s.op == TraceOp::kReorder;
    CHECK(reorders > 0);
  }
}

TEST_CASE("the JSON report parses and has the documented fields", "[trace][json]") {
  ReplayOptions o = stories_options({"patch:16", "cacheblend:0.15"});
  const ReplayReport r = replay(load_trace(trace_path("lookback.json")), o);
  const json j = json::parse(replay_report_json(r));
  CHECK(j.at("format") == "orbit-replay/1");
  CHECK(j.at("trace") == "lookback");
  CHECK(j.at("steps") == r.steps);
  CHECK(j.at("device") == "cpu");
  CHECK(j.at("dtype") == "float32");
  REQUIRE(j.at("policies").size() == 5);
  std::vector<std::string> names;
  for (const json& p : j.at("policies")) names.push_back(p.at("policy"));
  CHECK(names == std::vector<std::string>{"patch:16", "cacheblend:0.15", "reprefill", "prefix", "blind"});
  const json& p = j.at("policies")[0];
  for (const char* f : {"forward_tokens",
                        "critical_forward_tokens",
                        "critical_seconds",
                        "background_forward_tokens",
                        "background_seconds",
                        "mean_predicted_kl",
                        "full_prefill_tokens",
                        "seconds",
                        "bytes_moved",
                        "peak_device_bytes",
                        "patches_formed",
                        "patch_hits",
                        "mean_kl",
                        "max_kl",
                        "mean_top1",
                        "top1_rows",
                        "top1_misses",
                        "near_tie_rows",
                        "near_tie_misses",
                        "prefix_cache_tokens"}) {
    CHECK(p.at("totals").contains(f));
  }
  for (const char* f :
       {"compulsory_formations", "belady_formations", "lru_formations", "online_formations", "capacity_bytes"}) {
    CHECK(p.at("offline").contains(f));
  }
  CHECK(j.at("policies")[2].at("offline").is_null());
  for (const json& s : p.at("steps")) {
    for (const char* f :
         {"index", "op", "branch", "status", "forward_tokens", "critical_forward_tokens", "background_forward_tokens",
          "critical_seconds", "background_seconds", "predicted_kl", "full_prefill_tokens", "bytes_moved",
          "prefix_cache_tokens", "device_bytes", "peak_device_bytes", "window_tokens", "seconds", "fidelity"}) {
      CHECK(s.contains(f));
    }
  }
  CHECK(p.at("steps")[1].at("fidelity").at("rows") == 4);
  CHECK(p.at("steps")[6].at("generated").size() == 4);
  // Every top-1 miss is listed with its row, the reference's margin over the window's pick and its KL.
  int64_t listed = 0;
  for (const json& pol : j.at("policies")) {
    for (const json& s : pol.at("steps")) {
      const json& f = s.at("fidelity");
      if (f.is_null()) continue;
      const int64_t misses = f.at("top1_misses");
      if (misses == 0) {
        CHECK_FALSE(f.contains("misses"));
        continue;
      }
      REQUIRE(f.at("misses").size() == static_cast<std::size_t>(misses));
      for (const json& m : f.at("misses")) {
        CHECK(m.at("row") >= 0);
        CHECK(m.at("row") < f.at("rows"));
        CHECK(m.at("margin") > 0.0);
        CHECK(m.at("kl") >= 0.0);
      }
      listed += misses;
    }
  }
  CHECK(listed > 0);
}

TEST_CASE("attribution: each approximate instance's own loss per step, summed up per way of serving",
          "[trace][replay][fidelity]") {
  ReplayOptions o = stories_options({"patch:16"});
  o.attribute = true;
  const ReplayReport r = replay(load_trace(trace_path("lookback.json")), o);
  const PolicyReplay* exact = r.find("reprefill");
  const PolicyReplay* blind = r.find("blind");
  REQUIRE(exact != nullptr);
  REQUIRE(blind != nullptr);
  for (const StepResult& s : exact->steps) CHECK(s.losses.empty());  // nothing approximate to attribute
  CHECK(exact->totals.loss_agreement.empty());
  int64_t attributed = 0;
  for (const StepResult& s : blind->steps) {
    if (!s.fidelity) CHECK(s.losses.empty());
    for (const InstanceLoss& l : s.losses) {
      CHECK(l.kv_change > 1e-6);
      CHECK(l.measured_kl >= 0);
      ++attributed;
    }
    // With a single approximate instance its own loss is the step's.
    if (s.fidelity && s.losses.size() == 1) CHECK(s.losses[0].measured_kl == Approx(s.fidelity->kl).epsilon(1e-3));
  }
  REQUIRE(attributed > 0);
  int64_t grouped = 0;
  for (const LossAgreement& g : blind->totals.loss_agreement) {
    grouped += g.instances;
    CHECK(g.compared <= g.instances);
    if (g.compared > 0) CHECK(g.spread >= 1.0);
  }
  CHECK(grouped == attributed);
  const json j = json::parse(replay_report_json(r));
  const json* bj = nullptr;
  for (const json& p : j.at("policies")) {
    if (p.at("policy") == "blind") bj = &p;
  }
  REQUIRE(bj != nullptr);
  CHECK(bj->at("totals").at("loss_agreement").size() == blind->totals.loss_agreement.size());
  bool any = false;
  for (const json& s : bj->at("steps")) {
    if (!s.contains("instance_losses")) continue;
    any = true;
    for (const char* f :
         {"instance", "label", "position", "length", "served_as", "kv_change", "measured_kl", "predicted_kl"}) {
      CHECK(s.at("instance_losses")[0].contains(f));
    }
  }
  CHECK(any);
}

TEST_CASE("orbit replay and orbit make-trace end to end", "[trace][cli]") {
  test::TempDir dir;
  const std::string model = " --model " + test::stories_path();
  const test::CliRun r =
      test::cli("replay " + trace_path("lookback.json") + model + " --json " + (dir / "r.json") + " --quiet");
  INFO(r.out);
  REQUIRE(r.status == 0);
  // Without --policy: the default policy, by its spec name.
  CHECK_THAT(r.out, Catch::Contains(WindowPolicy{}.name() + " vs. the baselines"));
  CHECK_THAT(r.out, Catch::Contains("fidelity model vs measured KL"));
  CHECK_THAT(r.out, Catch::Contains("offline bound"));
  std::ifstream in(dir / "r.json");
  const json j = json::parse(in);
  CHECK(j.at("policies").size() == 4);

  const test::CliRun m =
      test::cli("make-trace --kind agent --steps 4 --seed 3" + model + " --out " + (dir / "agent.json"));
  INFO(m.out);
  REQUIRE(m.status == 0);
  const test::CliRun r2 =
      test::cli("replay " + (dir / "agent.json") + model + " --policy firstk:4 --no-fidelity --json -");
  REQUIRE(r2.status == 0);
  const json j2 = json::parse(r2.out.substr(r2.out.find('{')));
  CHECK(j2.at("policies")[0].at("policy") == "firstk:4");
  CHECK(j2.at("policies")[0].at("steps")[0].at("fidelity").is_null());

  const test::CliRun bad = test::cli("replay " + trace_path("lookback.json") + model + " --policy nope");
  CHECK(bad.status == 1);
  CHECK_THAT(bad.out, Catch::Contains("--policy: policy 'nope': unknown policy 'nope'"));
  const test::CliRun attributed =
      test::cli("replay " + trace_path("lookback.json") + model + " --policy patch:16 --attribute --explain --quiet");
  INFO(attributed.out);
  CHECK(attributed.status == 0);
  CHECK_THAT(attributed.out, Catch::Contains("each approximate instance alone (measured vs predicted KL):"));
  CHECK_THAT(attributed.out, Catch::Contains("each approximate instance alone (--attribute), by how it was served"));
  const test::CliRun badattr =
      test::cli("replay " + trace_path("lookback.json") + model + " --attribute --no-fidelity");
  CHECK(badattr.status == 1);
  CHECK_THAT(badattr.out, Catch::Contains("argument '--attribute' needs the fidelity probes"));
  const test::CliRun badrepeat = test::cli("replay " + trace_path("lookback.json") + model + " --repeat 0");
  CHECK(badrepeat.status == 1);
  CHECK_THAT(badrepeat.out, Catch::Contains("argument '--repeat' must be in [1, 100], got 0"));
  {
    std::ofstream out(dir / "bad.json");
    out << tiny_trace(R"({"op": "evict", "chunk": "a"})");
  }
  const test::CliRun badtrace = test::cli("replay " + (dir / "bad.json") + model);
  CHECK(badtrace.status == 1);
  CHECK_THAT(badtrace.out, Catch::Contains("bad.json: step 0 (evict): field 'chunk': 'a' is not in the window"));
}

}  // namespace ORBIT_TEST_FILE
