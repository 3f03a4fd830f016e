// validate_policy: a WindowPolicy field set to anything but its default that the policy's strategy never
// reads is refused, naming the field, its value and the policy; fields left at their defaults, every named
// preset and every spec form stay accepted; parse_policy, Engine::new_window and Window::set_policy refuse
// the same policies.
#include "orbit_catch.h"

#include <functional>
#include <string>
#include <vector>

#include "orbit/engine.h"
#include "test_helpers.h"
#include "window_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;

namespace {

// The message validate_policy throws for `p`, or "" when it accepts it.
std::string refusal(const WindowPolicy& p) {
  try {
    validate_policy(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

WindowPolicy with(const char* spec, const std::function<void(WindowPolicy&)>& change) {
  WindowPolicy p = parse_policy(spec);
  change(p);
  return p;
}

}  // namespace

TEST_CASE("every preset and spec form validates, and so does its name", "[policy]") {
  CHECK(refusal(WindowPolicy{}).empty());
  const std::vector<std::string> specs = {
      "default",
      "patch",
      "patch:full",
      "patch:8:exact",
      "patch:16:deep",
      "patch:16:noreuse",
      "patch:16:stale=0.3",
      "patch:16:kl=0.003:heal=0.01:prep=2:move=4:lists=2:through=0.5:attend=2:check",
      "patch:full:noreuse:heal:prep=1:move=8",
      "patch:16:kl=0.003:heal:prep=1:move=8:lists=3:hinted=0",
      "patch:16:lists=3:hinted=5",
      "patch:16:move=2:hinted=1",
      "throughput",
      "throughput:kl=0.01:through=0.2:attend=0",
      "reprefill",
      "prefix",
      "blind",
      "cacheblend:0.3",
      "firstk:8"};
  for (const std::string& spec : specs) {
    for (const std::string& s : {spec, spec + ":eager"}) {
      INFO(s);
      const WindowPolicy p = parse_policy(s);
      CHECK(refusal(p).empty());
      CHECK(refusal(parse_policy(p.name())).empty());
    }
  }
}

TEST_CASE("a field the strategy never reads is refused, naming the field, the value and the policy", "[policy]") {
  CHECK(refusal(with("blind", [](WindowPolicy& p) { p.first_k = 5; })) ==
        "WindowPolicy: first_k = 5 has no effect with strategy 'blind' (it applies to: on_miss first_k (firstk:K), or "
        "any policy with a kl_budget)");
  CHECK_THAT(refusal(with("blind", [](WindowPolicy& p) { p.recompute_ratio = 0.5; })),
             Catch::Contains("recompute_ratio = 0.5 has no effect with strategy 'blind'"));
  CHECK_THAT(refusal(with("patch:16", [](WindowPolicy& p) { p.first_k = 5; })),
             Catch::Contains("first_k = 5 has no effect with strategy 'patch:16'"));
  CHECK_THAT(refusal(with("firstk:8", [](WindowPolicy& p) { p.on_miss = MissAction::kBlind; })),
             Catch::Contains("first_k = 8 has no effect with strategy 'blind'"));
  CHECK_THAT(refusal(with("patch:16", [](WindowPolicy& p) { p.deep_energy = 0.5; })),
             Catch::Contains("deep_energy = 0.5 has no effect") && Catch::Contains("deep_only"));
  CHECK_THAT(refusal(with("blind", [](WindowPolicy& p) { p.stale = StalePatch::kAccept; })),
             Catch::Contains("stale = accept has no effect with strategy 'blind'") && Catch::Contains("reuse_stored"));
  CHECK_THAT(refusal(with("patch:16", [](WindowPolicy& p) { p.max_divergence = 0.5; })),
             Catch::Contains("max_divergence = 0.5 has no effect") && Catch::Contains("stale = accept"));
  CHECK_THAT(refusal(with("patch:16", [](WindowPolicy& p) { p.heal_min_kl = 0.1; })),
             Catch::Contains("heal_min_kl = 0.1 has no effect") && Catch::Contains("heal_when_idle"));
  CHECK_THAT(refusal(with("default",
                          [](WindowPolicy& p) {
                            p.heal_when_idle = false;
                            p.self_check = true;
                          })),
             Catch::Contains("self_check = true has no effect") && Catch::Contains("heal_when_idle"));
  CHECK_THAT(refusal(with("patch:16:noreuse", [](WindowPolicy& p) { p.prepare_lists = 2; })),
             Catch::Contains("prepare_lists = 2 has no effect") && Catch::Contains("reuse_computed"));
  CHECK_THAT(refusal(with("default", [](WindowPolicy& p) { p.cost_aware = true; })),
             Catch::Contains("cost_aware = true has no effect"));
  CHECK_THAT(refusal(with("blind", [](WindowPolicy& p) { p.cost_aware = true; })),
             Catch::Contains("cost_aware = true has no effect with strategy 'blind'"));
  CHECK_THAT(refusal(with("patch:16", [](WindowPolicy& p) { p.expected_reuse = 0; })),
             Catch::Contains("expected_reuse = 0 has no effect") && Catch::Contains("cost_aware"));
}

TEST_CASE("a field is accepted where its strategy reads it, or at its default", "[policy]") {
  // Under a budget the planner weighs first-k and CacheBlend recomputes for every miss action.
  CHECK(refusal(with("default", [](WindowPolicy& p) { p.first_k = 5; })).empty());
  CHECK(refusal(with("throughput", [](WindowPolicy& p) { p.recompute_ratio = 0.5; })).empty());
  CHECK(refusal(with("firstk:8", [](WindowPolicy& p) { p.first_k = 5; })).empty());
  CHECK(refusal(with("patch:16:deep", [](WindowPolicy& p) { p.deep_energy = 0.5; })).empty());
  CHECK(refusal(with("patch:16:stale=0.2", [](WindowPolicy& p) { p.max_divergence = 0.5; })).empty());
  CHECK(refusal(with("patch:16", [](WindowPolicy& p) {
          p.cost_aware = true;
          p.expected_reuse = 0;
        })).empty());
  // The patch shape is read by every window's idle-time preparation and (but for prefix and throughput) heal.
  CHECK(refusal(with("blind", [](WindowPolicy& p) { p.rank_k = p.rank_v = 4; })).empty());
  CHECK(refusal(with("reprefill", [](WindowPolicy& p) { p.deep_only = true; })).empty());
  // Defaults are accepted whatever the strategy: the default policy without exact reuse keeps lists = 3.
  const WindowPolicy noreuse = with("default", [](WindowPolicy& p) { p.reuse_computed = false; });
  CHECK(refusal(noreuse).empty());
  CHECK(noreuse.name().find(":lists") == std::string::npos);  // it has no effect there, and would not parse
  CHECK(refusal(parse_policy(noreuse.name())).empty());
  CHECK(refusal(with("blind", [](WindowPolicy& p) { p.first_k = WindowPolicy{}.first_k; })).empty());
}

TEST_CASE("parse_policy refuses a modifier the preset does not read, naming the modifier", "[policy]") {
  CHECK_THROWS_WITH(parse_policy("patch:16:check"),
                    Catch::Contains("policy 'patch:16:check': ':check' has no effect without ':heal'"));
  CHECK_THROWS_WITH(parse_policy("patch:16:noreuse:lists=3"),
                    Catch::Contains("':lists=N' has no effect with ':noreuse'"));
  CHECK(parse_policy("patch:16:heal:check").self_check);
  CHECK(parse_policy("patch:16:noreuse:lists=0").prepare_lists == 0);
  // :hinted=N skips learned lists and moves: without either it has nothing to skip.
  CHECK_THROWS_WITH(parse_policy("patch:16:hinted=2"),
                    Catch::Contains("':hinted=N' has no effect without ':lists=N' or ':move=N'"));
  CHECK_THROWS_WITH(parse_policy("patch:16:lists=3:hinted=-1"), Catch::Contains("hinted (syncs in a row"));
  CHECK_THROWS_WITH(parse_policy("patch:16:lists=3:hinted=1.5"), Catch::Contains("must be a non-negative integer"));
  CHECK_THROWS_WITH(parse_policy("patch:16:lists=3:hinted=1:hinted=2"), Catch::Contains("'hinted' is given twice"));
  CHECK(parse_policy("patch:16:lists=3:hinted=0").trust_hints == 0);
  CHECK(parse_policy("patch:16:lists=3:hinted=0").name() == "patch:16:lists=3:hinted=0");
  CHECK(parse_policy("default").trust_hints == 2);
  CHECK(parse_policy("patch:16:move=8").trust_hints == 2);  // the default, not printed
  CHECK(parse_policy("patch:16:move=8").name() == "patch:16:move=8");
  CHECK_THAT(refusal(with("patch:16", [](WindowPolicy& p) { p.trust_hints = 3; })),
             Catch::Contains("trust_hints = 3 has no effect"));
  CHECK_THAT(refusal(with("patch:16", [](WindowPolicy& p) { p.trust_hints = -1; })),
             Catch::Contains("trust_hints = -1 must be >= 0"));
}

TEST_CASE("new_window and set_policy refuse a policy with a field it never reads", "[policy][window]") {
  auto engine = test::open_stories_small_pages(BackgroundMode::kDeferred);
  WindowOptions o;
  o.policy = with("blind", [](WindowPolicy& p) { p.first_k = 5; });
  CHECK_THROWS_WITH(engine->new_window(o), Catch::Contains("first_k = 5 has no effect with strategy 'blind'"));
  Window w = engine->new_window();
  const uint64_t version = w.version();
  CHECK_THROWS_WITH(w.set_policy(with("patch:16", [](WindowPolicy& p) { p.heal_min_kl = 0.1; })),
                    Catch::Contains("heal_min_kl = 0.1 has no effect"));
  CHECK(w.version() == version);  // refused before anything changed
  CHECK(w.policy().name() == WindowPolicy{}.name());
  w.set_policy(parse_policy("blind"));
  CHECK(w.policy().name() == "blind");
}

}  // namespace ORBIT_TEST_FILE
