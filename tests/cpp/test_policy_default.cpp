// The default policy and the fidelity model on the bundled stories260K: the 'default' spec is the
// default-constructed policy (a KL budget; presets carry none); agent-pattern traces are text that fills
// the model's positions; on a text agent trace the default policy costs no more critical-path forward
// tokens than the prefix cache, stays within the fidelity target, and the fidelity model's predictions
// are within a stated factor of the measured KL; reorders and recalls under a budget never build a
// dependency cycle.
#include <cmath>
#include "orbit_catch.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "orbit/engine.h"
#include "orbit/trace.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;

namespace {

std::string trace_path(const std::string& name) { return std::string(ORBIT_TEST_DATA_DIR) + "/traces/" + name; }

ReplayOptions options(std::vector<std::string> policies) {
  ReplayOptions o;
  o.engine.model = test::stories_path();
  o.engine.pool_bytes = int64_t{64} << 20;
  o.policies = std::move(policies);
  return o;
}

// A browse trace with the model's tokenizer counting text tokens (as `orbit make-trace` does).
Trace text_trace(const std::string& kind, int64_t steps, uint64_t seed) {
  EngineOptions eo;
  eo.model = test::stories_path();
  eo.pool_bytes = int64_t{1} << 20;
  const std::shared_ptr<Engine> engine = Engine::open(eo);
  MakeTraceOptions mo;
  mo.kind = kind;
  mo.steps = steps;
  mo.seed = seed;
  mo.text_tokens = [engine](const std::string& t) { return static_cast<int64_t>(engine->tokenize(t, false).size()); };
  return make_trace(mo);
}

}  // namespace

TEST_CASE("the default policy is a budgeted patch policy; presets carry no budget", "[policy]") {
  const WindowPolicy d;
  CHECK(d.kl_budget == kDefaultKlBudget);
  CHECK(d.kl_budget > 0);
  CHECK(parse_policy("default").name() == d.name());
  CHECK(parse_policy(d.name()).kl_budget == d.kl_budget);  // its name round-trips
  CHECK(WindowOptions{}.policy.kl_budget == kDefaultKlBudget);
  for (const char* spec :
       {"patch:16", "patch:16:exact", "prefix", "reprefill", "blind", "firstk:8", "cacheblend:0.3"}) {
    INFO(spec);
    CHECK(parse_policy(spec).kl_budget == 0);
  }
  CHECK(parse_policy("patch:16:kl=0.01").kl_budget == 0.01);
  // default:MOD...: the default's spec with each modifier in place of the default's of its name, or added.
  const WindowPolicy through = parse_policy("default:through=0");
  CHECK(through.read_through == 0);
  CHECK(through.kl_budget == kDefaultKlBudget);
  CHECK(through.name() == d.name() + ":through=0");
  const WindowPolicy wider = parse_policy("default:kl=0.01");
  CHECK(wider.kl_budget == 0.01);
  CHECK(wider.heal_when_idle == d.heal_when_idle);
  CHECK(wider.prepare_lists == d.prepare_lists);
  CHECK_FALSE(parse_policy("default:noreuse:lists=0").reuse_computed);
  CHECK_THROWS_WITH(parse_policy("default:noreuse"),
                    Catch::Contains("policy 'default:noreuse' stands for '" + d.name() + ":noreuse'") &&
                        Catch::Contains("':lists=N' has no effect with ':noreuse'"));
  CHECK_THROWS_WITH(parse_policy("default:8"), Catch::Contains("policy 'default:8' stands for"));
  // A modifier given twice is refused, as patch: refuses it (the second had replaced the first unsaid).
  CHECK_THROWS_WITH(parse_policy("default:kl=0.01:kl=0.02"),
                    Catch::Contains("policy 'default:kl=0.01:kl=0.02'") && Catch::Contains("'kl' is given twice"));
  CHECK_THROWS_WITH(parse_policy("default:prep=1:prep=4"), Catch::Contains("'prep' is given twice"));
  CHECK_THROWS_WITH(parse_policy("default:exact:exact"), Catch::Contains("'exact' is given twice"));
  CHECK_THROWS_WITH(parse_policy("patch: 16"), Catch::Contains("policy 'patch: 16': white space at byte 6"));
  // A field a spec sets that its preset never reads is named with the modifier that set it.
  CHECK_THROWS_WITH(parse_policy("patch:16:look=1"),
                    Catch::Contains("policy 'patch:16:look=1': ':look=F': WindowPolicy: read_attention_weight = 1"));
  CHECK_THROWS_WITH(parse_policy("patch:16:kl=0.01:look=0:lookonly"),
                    Catch::Contains("':lookonly': WindowPolicy: read_attention_raised_only"));
  // :through=F, the share of a fresh instance's weight read through what precedes it.
  CHECK(d.read_through == 0.3);  // planner::kReadThrough
  CHECK(parse_policy("patch:16:kl=0.003:through=0").read_through == 0);
  CHECK(parse_policy("patch:16:kl=0.003:through=0.5").name() == "patch:16:kl=0.003:through=0.5");
  CHECK(parse_policy(parse_policy("patch:16:kl=0.003:through=0.5").name()).read_through == 0.5);
  CHECK_THROWS_WITH(parse_policy("patch:16:kl=0.003:through=2"), Catch::Contains("through (the share"));
  CHECK_THROWS_WITH(parse_policy("patch:16:through=x"), Catch::Contains("through 'x' is not a number"));
  // :attend=F, the weight of the last query's attention on a kept instance.
  CHECK(d.attention_weight == 1.0);
  CHECK(parse_policy("patch:16:kl=0.003:attend=0").attention_weight == 0);
  CHECK(parse_policy("patch:16:kl=0.003:attend=4").name() == "patch:16:kl=0.003:attend=4");
  CHECK(parse_policy(parse_policy("patch:16:kl=0.003:attend=4").name()).attention_weight == 4);
  CHECK_THROWS_WITH(parse_policy("patch:16:kl=0.003:attend=-1"), Catch::Contains("attend (the weight"));
  CHECK_THROWS_WITH(parse_policy("patch:16:attend=x"), Catch::Contains("attend 'x' is not a number"));
  // :match=F, the weight of the window tail's content matches on a kept instance (off by default).
  CHECK(d.content_weight == 0.0);
  CHECK(parse_policy("patch:16:kl=0.003:match=2").content_weight == 2);
  CHECK(parse_policy("patch:16:kl=0.003:match=2").name() == "patch:16:kl=0.003:match=2");
  CHECK(parse_policy(parse_policy("throughput:match=0.5").name()).content_weight == 0.5);
  CHECK_THROWS_WITH(parse_policy("patch:16:kl=0.003:match=-1"), Catch::Contains("match (the weight"));
  CHECK_THROWS_WITH(parse_policy("patch:16:match=x"), Catch::Contains("match 'x' is not a number"));
  WindowPolicy bad;
  bad.content_weight = -1;
  CHECK_THROWS_WITH(validate_policy(bad), Catch::Contains("content_weight = -1 must be in [0, 1e+06]"));
  // throughput weighs kept instances as the default does, and says so in its name when it differs.
  CHECK(parse_policy("throughput:attend=0:kl=0.01").name() == "throughput:kl=0.01:attend=0");
  CHECK(parse_policy("throughput:through=0.5").read_through == 0.5);
  CHECK(parse_policy(parse_policy("throughput:through=0.5").name()).read_through == 0.5);
  CHECK_THROWS_WITH(parse_policy("throughput:heal"), Catch::Contains("'throughput' takes only :kl=X"));
}

TEST_CASE("a policy built field by field is held to the ranges the spec parser and Python use", "[policy]") {
  const auto refused = [](auto set, const char* text) {
    WindowPolicy p;
    set(p);
    CHECK_THROWS_WITH(validate_policy(p), Catch::Contains(text));
  };
  refused([](WindowPolicy& p) { p.kl_budget = -0.1; }, "kl_budget = -0.1 must be in [0, 1e+09]");
  refused([](WindowPolicy& p) { p.kl_budget = std::nan(""); }, "kl_budget = nan");
  refused([](WindowPolicy& p) { p.attention_weight = -1; }, "attention_weight = -1 must be in [0, 1e+06]");
  refused([](WindowPolicy& p) { p.read_attention_weight = std::nan(""); }, "read_attention_weight = nan");
  refused([](WindowPolicy& p) { p.read_through = 1.5; }, "read_through = 1.5 must be in [0, 1]");
  refused([](WindowPolicy& p) { p.recompute_ratio = 0; }, "recompute_ratio = 0 must be in (0, 1]");
  refused([](WindowPolicy& p) { p.deep_energy = 0; }, "deep_energy = 0 must be in (0, 1]");
  refused([](WindowPolicy& p) { p.max_divergence = 2; }, "max_divergence = 2 must be in [0, 1]");
  refused([](WindowPolicy& p) { p.heal_min_kl = -1; }, "heal_min_kl = -1");
  refused([](WindowPolicy& p) { p.rank_k = 0; }, "rank_k = 0 must be a positive int or -1");
  refused([](WindowPolicy& p) { p.rank_v = -2; }, "rank_v = -2 must be a positive int or -1");
  refused([](WindowPolicy& p) { p.prepare_lists = -1; }, "prepare_lists = -1 must be >= 0");
  refused([](WindowPolicy& p) { p.first_k = 0; }, "first_k = 0 must be >= 1");
  refused([](WindowPolicy& p) { p.expected_reuse = -1; }, "expected_reuse = -1");
  refused([](WindowPolicy& p) { p.on_miss = static_cast<orbit::MissAction>(99); },
          "WindowPolicy: on_miss = 99 is none of its values (0 to 4)");
  refused([](WindowPolicy& p) { p.survivors = static_cast<orbit::SurvivorAction>(-1); }, "survivors = -1 is none");
  refused([](WindowPolicy& p) { p.stale = static_cast<orbit::StalePatch>(2); }, "stale = 2 is none of its values");
  // Every preset and the default pass.
  for (const char* spec : {"default", "throughput", "patch:16", "patch:full", "reprefill", "prefix", "blind",
                           "cacheblend:0.15", "firstk:16"}) {
    CHECK_NOTHROW(validate_policy(parse_policy(spec)));
  }
}

TEST_CASE("every preset defers repairs; ':eager' turns it off and round-trips", "[policy][defer]") {
  CHECK(WindowPolicy{}.defer_repairs);
  for (const char* spec : {"default", "patch:16", "patch:16:exact", "patch:full:kl=0.01", "prefix", "reprefill",
                           "blind", "firstk:8", "cacheblend:0.3"}) {
    INFO(spec);
    const WindowPolicy p = parse_policy(spec);
    CHECK(p.defer_repairs);
    CHECK(p.name().find("eager") == std::string::npos);
    const WindowPolicy e = parse_policy(std::string(spec) + ":eager");
    CHECK_FALSE(e.defer_repairs);
    CHECK(e.name() == p.name() + ":eager");
    const WindowPolicy again = parse_policy(e.name());
    CHECK_FALSE(again.defer_repairs);
    CHECK(again.name() == e.name());
    CHECK(again.kl_budget == e.kl_budget);
    CHECK(again.on_miss == e.on_miss);
  }
  CHECK_THROWS_WITH(parse_policy("eager"), Catch::Contains("unknown policy 'eager'"));
  CHECK_THROWS_WITH(parse_policy("prefix:eager:eager"), Catch::Contains("':eager' is given twice"));
  CHECK_THROWS_WITH(parse_policy("prefix:eager:8"), Catch::Contains("'prefix' takes no arguments"));
  // The spec's own range is the policy's: 0 was said to be allowed there and then refused by the field check.
  for (const char* spec : {"cacheblend:0", "cacheblend:2", "cacheblend:-0.5"}) {
    CHECK_THROWS_WITH(parse_policy(spec), Catch::Contains("ratio must be in (0, 1]"));
  }
  for (const char* spec : {"firstk:0", "firstk:-1", "firstk:1.5"}) {
    CHECK_THROWS_WITH(parse_policy(spec), Catch::Contains("K must be a positive integer"));
  }
  CHECK(parse_policy("cacheblend:1").recompute_ratio == 1);
  CHECK(parse_policy("firstk:1").first_k == 1);
}

TEST_CASE("agent-pattern traces are text sized by the tokenizer to the model's positions", "[trace][text]") {
  EngineOptions eo;
  eo.model = test::stories_path();
  eo.pool_bytes = int64_t{1} << 20;
  const std::shared_ptr<Engine> engine = Engine::open(eo);
  for (const char* kind : {"browse", "coding", "videoqa", "fanout", "rag"}) {
    INFO(kind);
    const Trace t = text_trace(kind, 4, 3);
    CHECK(trace_to_json(t) == trace_to_json(text_trace(kind, 4, 3)));  // deterministic by seed
    CHECK(trace_to_json(t) != trace_to_json(text_trace(kind, 4, 4)));
    CHECK(t.probe.kind == TokenSource::Kind::kText);
    for (const TraceChunk& c : t.chunks) {
      CHECK(c.tokens.kind == TokenSource::Kind::kText);
      CHECK(c.tokens.text.find(' ') != std::string::npos);  // words, not ids
    }
    for (const TraceStep& s : t.steps) {
      if (s.op == TraceOp::kTurn) CHECK(s.tokens.kind == TokenSource::Kind::kText);
    }
  }
  // The budget is the model's positions - 24: the window gets close to it (a token upper bound would
  // leave it near a third full) and never past it.
  const Trace t = text_trace("browse", 8, 1);
  std::map<std::string, int64_t> size;
  for (const TraceChunk& c : t.chunks)
    size[c.name] = static_cast<int64_t>(engine->tokenize(c.tokens.text, false).size());
  int64_t most = 0, now = 0;
  std::vector<std::pair<std::string, int64_t>> window;  // (chunk name or "", tokens)
  for (const TraceStep& s : t.steps) {
    if (s.op == TraceOp::kAdmit || s.op == TraceOp::kRecall) window.push_back({s.chunk, size[s.chunk]});
    if (s.op == TraceOp::kTurn)
      window.push_back({"", static_cast<int64_t>(engine->tokenize(s.tokens.text, false).size())});
    if (s.op == TraceOp::kSlide) {
      for (auto it = window.begin(); it != window.end(); ++it) {
        if (!it->first.empty()) {
          window.erase(it);
          break;
        }
      }
    }
    if (s.op == TraceOp::kEvict) {
      int64_t seen = 0;
      for (auto it = window.begin(); it != window.end(); ++it) {
        if ((!s.chunk.empty() && it->first == s.chunk) || (s.chunk.empty() && it->first.empty() && seen++ == s.turn)) {
          window.erase(it);
          break;
        }
      }
    }
    now = 0;
    for (const auto& w : window) now += w.second;
    most = std::max(most, now);
  }
  CHECK(most <= 512 - 24);
  CHECK(most >= 400);
}

TEST_CASE(
    "the default policy on a text agent trace: no costlier than the prefix cache, within the KL target, "
    "predictions within 20x of the measurement",
    "[policy][replay][slow]") {
  Trace t = text_trace("browse", 5, 2);
  t.source = "browse-5-seed2";
  const ReplayReport r = replay(t, options({"default", "patch:16"}));
  const PolicyReplay* d = r.find(WindowPolicy{}.name());
  const PolicyReplay* prefix = r.find("prefix");
  const PolicyReplay* plain = r.find("patch:16");
  REQUIRE(d != nullptr);
  REQUIRE(prefix != nullptr);
  REQUIRE(plain != nullptr);
  // Cost: the critical path never costs more than the prefix cache's in total, and it is cheaper.
  CHECK(d->totals.critical_forward_tokens < prefix->totals.critical_forward_tokens);
  // Fidelity: the targets the default is built for.
  REQUIRE(d->totals.fidelity_steps > 0);
  CHECK(d->totals.mean_kl <= 1e-3);
  CHECK(d->totals.mean_top1 >= 0.99);
  // Calibration: over the steps that lose fidelity, the fidelity model's predictions are, on geometric
  // average, within 20x of the measured KL, for the budgeted and the unbudgeted patch policy alike.
  for (const PolicyReplay* p : {d, plain}) {
    INFO(p->policy << ": bias " << p->totals.kl_prediction_bias << " over " << p->totals.predicted_steps << " steps");
    REQUIRE(p->totals.predicted_steps > 0);
    CHECK(p->totals.kl_prediction_bias <= 20.0);
    CHECK(p->totals.kl_prediction_bias >= 1.0 / 20.0);
    CHECK(p->totals.kl_prediction_spread >= 1.0);
  }
  CHECK(d->fidelity_model.find("keep") != std::string::npos);
}

TEST_CASE("budgeted plans over reorders, recalls and forks never close a dependency cycle", "[policy][replay][slow]") {
  // The shipped videoqa and fanout traces reorder frames, set them aside and recall them, and fork; under
  // a KL budget kept and re-formed instances mix. Cost only (no fidelity forwards): this is about the graph.
  for (const char* name : {"agent_videoqa.json", "agent_fanout.json"}) {
    INFO(name);
    ReplayOptions o = options({"default", "patch:16:kl=0.0005"});
    o.fidelity = false;
    o.baselines = false;
    const ReplayReport r = replay(load_trace(trace_path(name)), o);
    for (const PolicyReplay& p : r.policies) CHECK(p.totals.refused == 0);
  }
}

}  // namespace ORBIT_TEST_FILE
