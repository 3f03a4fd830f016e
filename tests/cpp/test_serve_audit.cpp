// The fidelity audit of `orbit serve` (cli/serve/sessions/audit.h) below HTTP: which requests are sampled, the KL
// of two logit rows, audits of a session that trims its history on TinyStories-656K (each audited read's
// KL equals an independent re-measure of the same window; results reach the next usage, the session's
// record and the metrics), exact mode after a loss past budget, and audits owed by requests that leave no idle
// time.
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "orbit_catch.h"
#include "serve/serve_core.h"
#include "serve/sessions/audit.h"
#include "serve_test_util.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

using serve_test::kModel;
using serve_test::trimmed;
using serve_test::words;

struct Conversation {
  sv::ServeCore& core;
  std::string session;
  std::vector<orbit::ChatMessage> all = {{"system", "You tell short stories about " + words(1, 12) + "."}};
  std::vector<sv::RunUsage> usages;
  bool idle = true;  // idle time after each request (false: the next request follows at once)

  void step(int i, std::size_t keep) {
    all.push_back({"user", words(i + 2, 10 + i % 5)});
    const sv::RunOutcome o = core.chat(serve_test::greedy_chat(core, trimmed(all, keep)), session, {});
    REQUIRE(o.result.has_value());
    usages.push_back(o.result->usage);
    all.push_back({"assistant", o.result->text});
    if (idle) core.run_idle_work();  // the audit runs here, in idle time
  }
};

}  // namespace

TEST_CASE("serve audit: sampling, KL of logits, refusals", "[serve]") {
  sv::Auditor quarter(sv::AuditOptions{0.25});
  std::vector<bool> due;
  for (int i = 0; i < 8; ++i) due.push_back(quarter.due());
  CHECK(due == std::vector<bool>{false, false, false, true, false, false, false, true});
  sv::Auditor all(sv::AuditOptions{1});
  CHECK((all.due() && all.due()));
  sv::Auditor none(sv::AuditOptions{0});
  CHECK_FALSE(none.due());
  CHECK_THROWS_WITH(sv::Auditor(sv::AuditOptions{1.5}), Catch::Contains("--audit"));
  CHECK_FALSE(none.run_one().has_value());

  // Owed: still waiting when the owed_after-th request after its own starts (count_request counts starts).
  for (const int64_t after : {1, 2}) {
    sv::AuditOptions o{1};
    o.owed_after = after;
    sv::Auditor a(o);
    a.count_request();
    a.submit(sv::AuditCase{});
    CHECK_FALSE(a.owed());
    CHECK_FALSE(a.run_one(true).has_value());  // not owed: left waiting
    for (int64_t n = 1; n < after; ++n) a.count_request();
    CHECK_FALSE(a.owed());
    a.count_request();
    CHECK(a.owed());
  }
  sv::AuditOptions idle_only{1};
  idle_only.owed_after = 0;
  sv::Auditor never(idle_only);
  never.submit(sv::AuditCase{});
  for (int n = 0; n < 100; ++n) never.count_request();
  CHECK_FALSE(never.owed());
  sv::AuditOptions negative{1};
  negative.owed_after = -1;
  CHECK_THROWS_WITH(sv::Auditor(negative), Catch::Contains("--audit-owed-after"));

  const std::vector<float> p = {0, 1, 2}, q = {0, 1, 2}, r = {2, 1, 0};
  CHECK(sv::kl_of_logits(p.data(), q.data(), 3) == Approx(0).margin(1e-15));
  // KL by hand: softmax(p) against softmax(r).
  double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0), kl = 0;
  for (int i = 0; i < 3; ++i) kl += std::exp(static_cast<double>(p[i])) / z * (p[i] - r[i]);
  CHECK(sv::kl_of_logits(p.data(), r.data(), 3) == Approx(kl).epsilon(1e-12));
}

// --audit 1 samples every request read from approximate KV; one read from exact KV (the session's first requests,
// before the trim begins) has nothing to lose and is not audited, unless --audit-exact. The policy keeps what the
// trims leave approximate (no read-through, nor the last query's attention: with either, or under the default
// policy on this model, this conversation's reads are all served exactly).
TEST_CASE("serve audit: every approximate read of a trimming session measured, reported and counted",
          "[serve][model]") {
  for (const bool audit_exact : {false, true}) {
    INFO("audit_exact " << audit_exact);
    sv::ServeOptions options;
    options.model = kModel;
    options.policy = "patch:16:kl=0.003:through=0:attend=0";
    options.audit_rate = 1;
    options.audit_exact = audit_exact;
    sv::ServeCore core(options);
    Conversation c{core, "trim"};
    for (int i = 0; i < 10; ++i) c.step(i, 6);
    int64_t approximate = 0, exact = 0;
    for (const sv::RunUsage& u : c.usages) {
      REQUIRE(u.exact_kv.has_value());
      ++(*u.exact_kv ? exact : approximate);
    }
    CHECK(exact >= 2);  // the first requests, before the trim
    CHECK(approximate >= 5);
    // Each request's usage carries the audit of the one before (audits run after the answer), if it was sampled.
    for (std::size_t i = 1; i < c.usages.size(); ++i) {
      INFO("request " << i + 1);
      const bool sampled = audit_exact || !*c.usages[i - 1].exact_kv;
      REQUIRE(c.usages[i].audit.has_value() == sampled);
      if (!sampled) continue;
      const sv::AuditResult& a = *c.usages[i].audit;
      CHECK(a.request == static_cast<int64_t>(i));
      CHECK(a.predicted_kl == c.usages[i - 1].predicted_kl);
      CHECK(a.measured_kl >= 0);
      if (*c.usages[i - 1].exact_kv) CHECK(a.measured_kl < 1e-8);
      CHECK(a.budget == Approx(orbit::kDefaultKlBudget));
    }
    const int64_t audits = audit_exact ? 10 : approximate;
    const nlohmann::json info = *core.session_info("trim");
    CHECK(info["audit"]["audits"] == audits);
    CHECK(info["audit"]["exact_kv_requests"] == exact);
    const std::string metrics = core.metrics().render(core.gauges());
    CHECK(metrics.find("orbit_audits_total " + std::to_string(audits) + "\n") != std::string::npos);
    CHECK(metrics.find("orbit_audit_measured_kl_count " + std::to_string(audits) + "\n") != std::string::npos);
    CHECK(metrics.find("orbit_exact_kv_requests_total " + std::to_string(exact) + "\n") != std::string::npos);
    core.close();
  }
}

TEST_CASE("serve audit: a loss past budget serves the session exactly, then checks again", "[serve][model]") {
  sv::ServeOptions options;
  options.model = kModel;
  options.policy = "blind";  // reuses every turn as it is, relocated only: losses far past the budget
  options.audit_rate = 1;
  sv::ServeCore core(options);
  Conversation c{core, "blind"};
  int64_t first_violation = -1;
  for (int i = 0; i < 14; ++i) {
    c.step(i, 4);
    const sv::RunUsage& u = c.usages.back();
    if (first_violation < 0 && u.audit && !u.audit->within_budget()) first_violation = u.audit->request;
  }
  REQUIRE(first_violation > 0);
  // The request after the violating one's audit ran is served exactly, for 4 requests, with nothing predicted.
  const std::size_t exact_from = static_cast<std::size_t>(first_violation) + 1;  // 1-based request number
  REQUIRE(exact_from + 4 <= c.usages.size());
  for (std::size_t n = exact_from; n < exact_from + 4; ++n) {
    INFO("request " << n);
    CHECK(c.usages[n - 1].exact == "audit");
    CHECK(c.usages[n - 1].predicted_kl == 0);
  }
  CHECK(c.usages[exact_from + 3].exact.empty());  // the recheck is served (and audited) approximately again
  const nlohmann::json info = *core.session_info("blind");
  CHECK(info["audit"]["violations"].get<int64_t>() >= 1);
  CHECK(info["audit"]["exact_requests"].get<int64_t>() >= 4);
  CHECK(core.metrics().render(core.gauges()).find("orbit_exact_requests_total") != std::string::npos);
  core.close();
}

namespace {

std::string metrics_of(sv::ServeCore& core) { return core.metrics().render(core.gauges()); }

bool has_line(const std::string& metrics, const std::string& line) {
  return metrics.find("\n" + line + "\n") != std::string::npos;
}

// `options` on TinyStories-656K with every chat request audited, read from exact KV or not (audit_exact: the tests
// below check the audits' queue, not which requests are sampled).
sv::ServeOptions audited(sv::ServeOptions options) {
  options.model = kModel;
  options.audit_rate = 1;
  options.audit_exact = true;
  return options;
}

// A server whose requests leave the idle worker no time (held off, as a decode batch holds it while it steps,
// so no audit runs in idle time), every request audited, and a conversation on it sent back to back.
struct BackToBack {
  sv::ServeCore core;
  Conversation c;

  BackToBack(sv::ServeOptions options, const std::string& session)
      : core(audited(std::move(options))), c{core, session} {
    core.hold_idle_work(true);
    c.idle = false;
  }
  ~BackToBack() {
    core.hold_idle_work(false);
    core.close();
  }
};

}  // namespace

// Before audits could be owed, none of these requests was measured (4 waited, the rest were dropped); now each
// request runs the audit of the one before once its answer is decoded, and the next one reports it.
// The idle worker runs an audit with a stop (IdleWorker::slice: a request waiting for the gate): stopped, the
// case waits again where it was, unmeasured and not failed, with its sequence, so the next request owes it as
// before and a later run measures it whole. (Before, the audit's reads could not stop: the request that came
// during them waited for both before its sync, the first token of the request the audit was owed to too.)
TEST_CASE("serve audit: an audit stopped for a request waits again, then runs whole", "[serve][model]") {
  orbit::EngineOptions eo;
  eo.model = kModel;
  const std::shared_ptr<orbit::Engine> engine = orbit::Engine::open(eo);
  orbit::Window window = engine->new_window();
  window.add_turn(engine->tokenize("Once upon a time " + words(4, 24)));
  sv::AuditOptions o{1};
  o.owed_after = 1;
  sv::Auditor a(o);
  sv::AuditCase c;
  c.fork.emplace(window.fork());
  c.query = engine->tokenize(" the", false);
  c.request = 7;
  a.submit(std::move(c));
  int64_t asked = 0;
  CHECK_FALSE(a.run_one(false, [&] { return ++asked > 0; }).has_value());
  CHECK(asked >= 1);  // the reads asked and stopped
  CHECK(a.pending());
  const std::string stopped = a.render_metrics();
  CHECK(has_line(stopped, "orbit_audits_total 0"));
  CHECK(has_line(stopped, "orbit_audits_failed_total 0"));
  CHECK(has_line(stopped, "orbit_audits_waiting 1"));
  a.count_request();  // the request that stopped it starts: the case is owed to it, as if never taken
  CHECK(a.owed());
  const auto done = a.run_one(true, [] { return false; });
  REQUIRE(done.has_value());
  CHECK(done->second.request == 7);
  CHECK(std::isfinite(done->second.measured_kl));
  CHECK_FALSE(a.pending());
  const std::string ran = a.render_metrics();
  CHECK(has_line(ran, "orbit_audits_total 1"));
  CHECK(has_line(ran, "orbit_audits_owed_total 1"));
  CHECK(has_line(ran, "orbit_audits_waiting 0"));
}

TEST_CASE("serve audit: with no idle time each audit is owed and run by the next request", "[serve][model]") {
  BackToBack b({}, "busy");
  for (int i = 0; i < 8; ++i) b.c.step(i, 6);
  const std::vector<sv::RunUsage>& usages = b.c.usages;
  for (std::size_t i = 2; i < usages.size(); ++i) {
    INFO("request " << i + 1);
    REQUIRE(usages[i].audit.has_value());
    CHECK(usages[i].audit->request == static_cast<int64_t>(i) - 1);  // run after request i's answer
    CHECK(usages[i].audit->predicted_kl == usages[i - 2].predicted_kl);
  }
  const std::string metrics = metrics_of(b.core);
  CHECK(has_line(metrics, "orbit_audits_total 7"));
  CHECK(has_line(metrics, "orbit_audits_owed_total 7"));
  CHECK(has_line(metrics, "orbit_audits_waiting 1"));  // the last request's, owed to the next one
  CHECK(has_line(metrics, "orbit_audits_dropped_total 0"));
  CHECK(has_line(metrics, "orbit_audits_dropped_for_pool_total 0"));
}

// The owed audit waits for the answer of the request it is owed to: that request's every token went out before
// the audit ran (before, it ran on the request's turn, before its sync, so its first token waited for it).
TEST_CASE("serve audit: an owed audit runs after the answer of the request that owes it", "[serve][model]") {
  BackToBack b({}, "after");
  b.c.step(0, 6);                 // its audit waits, owed to the next request
  std::vector<std::string> seen;  // /metrics as each piece of the next answer went out
  sv::ChatRequest r;
  r.model = b.core.model_name();
  r.messages = b.c.all;
  r.messages.push_back({"user", words(3, 8)});
  r.sampling.max_tokens = 6;
  r.sampling.temperature = 0;
  sv::RunSink sink;
  sink.on_text = [&](const std::string&) {
    seen.push_back(metrics_of(b.core));
    return true;
  };
  const sv::RunOutcome o = b.core.chat(r, "after", sink);
  REQUIRE(o.result.has_value());
  REQUIRE_FALSE(seen.empty());
  for (const std::string& m : seen) {
    CHECK(has_line(m, "orbit_audits_owed_total 0"));
    CHECK(has_line(m, "orbit_audits_waiting 2"));  // the first request's, and this one's own
  }
  const std::string after = metrics_of(b.core);
  CHECK(has_line(after, "orbit_audits_owed_total 1"));
  CHECK(has_line(after, "orbit_audits_total 1"));
  CHECK(has_line(after, "orbit_audits_waiting 1"));
}

TEST_CASE("serve audit: --audit-owed-after 0 leaves audits to idle time, dropped past 4 waiting", "[serve][model]") {
  sv::ServeOptions options;
  options.audit_owed_after = 0;
  BackToBack b(options, "idle-only");
  for (int i = 0; i < 6; ++i) b.c.step(i, 6);
  for (const sv::RunUsage& u : b.c.usages) CHECK_FALSE(u.audit.has_value());
  std::string metrics = metrics_of(b.core);
  CHECK(has_line(metrics, "orbit_audits_total 0"));
  CHECK(has_line(metrics, "orbit_audits_owed_total 0"));
  CHECK(has_line(metrics, "orbit_audits_waiting 4"));
  CHECK(has_line(metrics, "orbit_audits_dropped_total 2"));
  b.core.hold_idle_work(false);
  b.core.run_idle_work();  // idle time at last: the 4 waiting are measured
  b.core.hold_idle_work(true);
  metrics = metrics_of(b.core);
  CHECK(has_line(metrics, "orbit_audits_total 4"));
  CHECK(has_line(metrics, "orbit_audits_waiting 0"));
}

// A request the KV pool refuses, every idle window let go, drops the audits waiting for idle time, oldest first: a
// waiting audit's fork holds the pages it shares with its window after that window left memory, and with no
// request running there was none to wait for (the request was answered 503 kv_pool_full at once).
TEST_CASE("serve audit: a request the KV pool refuses drops the audits that hold its pages", "[serve][model]") {
  sv::ServeOptions options;
  options.audit_owed_after = 0;  // idle time only, which the held worker never gives: both audits wait
  // 32 pages of 16 tokens (TinyStories-656K's KV is 1 KiB a token): one window of ~310 tokens (20 pages) fits,
  // two do not.
  options.pool_bytes = int64_t{512} << 10;
  BackToBack b(options, "unused");
  const auto ask = [&](const std::string& session, int seed) {
    sv::ChatRequest r;
    r.model = b.core.model_name();
    r.messages = {{"user", words(seed, 300)}};
    r.sampling.max_tokens = 6;
    r.sampling.temperature = 0;
    return b.core.chat(r, session, {});
  };
  REQUIRE(ask("first", 1).result.has_value());
  CHECK(has_line(metrics_of(b.core), "orbit_audits_waiting 1"));
  const sv::RunOutcome second = ask("second", 2);
  INFO(second.error.message);
  REQUIRE(second.result.has_value());
  const std::string metrics = metrics_of(b.core);
  CHECK(has_line(metrics, "orbit_audits_dropped_for_pool_total 1"));  // the first request's
  CHECK(has_line(metrics, "orbit_audits_dropped_total 1"));
  CHECK(has_line(metrics, "orbit_audits_waiting 1"));          // the second request's own
  CHECK((*b.core.session_info("first"))["left_memory"] == 1);  // its idle window went first
}

// A refused request drops only the audits whose window copies give it pages, oldest first, one at a time: alpha's
// audit shares every page with alpha's window (kept by alpha's next request), so dropping it frees none, and beta's
// (its window let go) is enough. Every waiting audit used to be dropped, oldest first, until the request fitted:
// alpha's was lost for no page.
TEST_CASE("serve audit: a request the KV pool refuses drops only the audits that give it pages", "[serve][model]") {
  sv::ServeOptions options;
  options.audit_owed_after = 0;             // idle time only, which the held worker never gives: audits wait
  options.pool_bytes = int64_t{512} << 10;  // 32 pages of 16 tokens
  BackToBack b(options, "unused");
  const auto ask = [&](const std::string& session, std::vector<orbit::ChatMessage> messages) {
    return b.core.chat(serve_test::greedy_chat(b.core, std::move(messages)), session, {});
  };
  const std::vector<orbit::ChatMessage> alpha = {{"user", words(1, 60)}};  // about 5 pages
  const sv::RunOutcome first = ask("alpha", alpha);
  REQUIRE(first.result.has_value());
  REQUIRE(ask("beta", {{"user", words(2, 250)}}).result.has_value());  // about 17 pages: 10 of 32 free
  CHECK(has_line(metrics_of(b.core), "orbit_audits_waiting 2"));
  // alpha's next turn needs about 15 pages more: beta's idle window goes, then beta's audit.
  std::vector<orbit::ChatMessage> next = alpha;
  next.push_back({"assistant", first.result->text});
  next.push_back({"user", words(3, 200)});
  const sv::RunOutcome second = ask("alpha", next);
  INFO(second.error.message);
  REQUIRE(second.result.has_value());
  CHECK((*b.core.session_info("beta"))["left_memory"] == 1);
  const std::string metrics = metrics_of(b.core);
  CHECK(has_line(metrics, "orbit_audits_dropped_for_pool_total 1"));  // beta's; alpha's was dropped too
  CHECK(has_line(metrics, "orbit_audits_dropped_total 1"));
  CHECK(has_line(metrics, "orbit_audits_waiting 2"));  // alpha's first, kept, and its second
  b.core.hold_idle_work(false);
  b.core.run_idle_work();  // idle time: the kept audit is run (measured, or failed for the pool: counted either way)
  b.core.hold_idle_work(true);
  CHECK(has_line(metrics_of(b.core), "orbit_audits_kept_for_pool_total 1"));
}

// An owed audit runs after the answer of the request that owes it, so a loss past budget it finds in its own
// session serves the session's next request exactly (as one found in idle time does).
TEST_CASE("serve audit: an owed audit past budget serves the next request exactly", "[serve][model]") {
  sv::ServeOptions options;
  options.policy = "blind";  // reuses every turn as it is, relocated only: losses far past the budget
  BackToBack b(options, "blind-busy");
  const std::vector<sv::RunUsage>& usages = b.c.usages;
  std::size_t found = 0;  // the 0-based index of the request that reported the first audit past budget
  for (int i = 0; i < 14 && found == 0; ++i) {
    b.c.step(i, 4);
    const sv::RunUsage& u = usages.back();
    if (u.audit && !u.audit->within_budget()) found = usages.size() - 1;
  }
  REQUIRE(found > 0);
  CHECK(usages[found].audit->request == static_cast<int64_t>(found) - 1);  // run after request found's answer
  CHECK(usages[found].exact == "audit");
  CHECK(usages[found].predicted_kl == 0);
}

namespace {

// Six requests of a tool loop that only appends, under --audit 1 (and --audit-exact where `audit_exact`).
void append_only_tool_loop(bool audit_exact) {
  sv::ServeOptions options;
  options.model = kModel;
  options.audit_rate = 1;
  options.audit_exact = audit_exact;
  sv::ServeCore core(options);
  sv::ChatRequest r;
  r.model = core.model_name();
  r.tools_json = R"([{"type":"function","function":{"name":"look","parameters":{"type":"object"}}}])";
  r.messages = {{"system", "You tell short stories."}};
  r.sampling.max_tokens = 4;
  r.sampling.temperature = 0;
  std::vector<sv::RunUsage> usages;
  for (int i = 0; i < 6; ++i) {  // 6 requests fit the model's 512 positions
    r.messages.push_back({"user", words(i, 5)});
    if (i % 2 == 1) {
      orbit::ChatMessage call{"assistant", ""};
      call.tool_calls = {{"call_" + std::to_string(i), "look", R"({"at":")" + words(i, 1) + R"("})"}};
      orbit::ChatMessage result{"tool", words(i + 3, 6)};
      result.tool_call_id = "call_" + std::to_string(i);
      r.messages.push_back(call);
      r.messages.push_back(result);
    }
    const sv::RunOutcome o = core.chat(r, "append", {});
    INFO("request " << i + 1 << ": " << o.error.message);
    REQUIRE(o.result.has_value());
    usages.push_back(o.result->usage);
    r.messages.push_back({"assistant", o.result->text});
    core.run_idle_work();
  }
  for (std::size_t i = 0; i < usages.size(); ++i) {
    INFO("request " << i + 1 << ": " << usages[i].plan);
    CHECK(usages[i].predicted_kl == 0);
    CHECK(usages[i].plan.find("evict") == std::string::npos);
    CHECK(usages[i].exact_kv == true);
    if (i > 0 && audit_exact) {
      REQUIRE(usages[i].audit.has_value());
      CHECK(usages[i].audit->measured_kl < 1e-8);
      CHECK(usages[i].audit->top1_match);
    } else {
      CHECK_FALSE(usages[i].audit.has_value());
    }
  }
  const std::string metrics = metrics_of(core);
  CHECK(has_line(metrics, "orbit_exact_kv_requests_total 6"));
  CHECK(has_line(metrics, audit_exact ? "orbit_audits_total 6" : "orbit_audits_total 0"));
  core.close();
}

}  // namespace

// Only new messages at the end: every kept message keeps its exact KV, so nothing is predicted, each request says
// it read exact KV and none is audited; with --audit-exact the audits measure rounding only. The history holds
// tool calls and tool results, as a tool loop's does.
TEST_CASE("serve audit: an append-only tool loop through the chat template is served exactly", "[serve][model]") {
  for (const bool audit_exact : {false, true}) {
    INFO("audit_exact " << audit_exact);
    append_only_tool_loop(audit_exact);
  }
}

namespace {

// Three appended requests of session `session`, then a fourth whose request changes what the first unit renders
// (`change`: tools added, or the first user message trimmed away); idle time after each. The fourth's usage.
sv::RunUsage fourth_after(sv::ServeCore& core, const std::string& session,
                          const std::function<void(sv::ChatRequest&)>& change) {
  sv::ChatRequest r = serve_test::greedy_chat(core, {{"system", "You tell short stories."}});
  r.sampling.max_tokens = 4;
  for (int i = 0; i < 4; ++i) {
    r.messages.push_back({"user", words(i + 1, 6)});
    if (i == 3) change(r);
    const sv::RunOutcome o = core.chat(r, session, {});
    INFO("request " << i + 1 << ": " << o.error.message);
    REQUIRE(o.result.has_value());
    r.messages.push_back({"assistant", o.result->text});
    core.run_idle_work();
    if (i == 3) return o.result->usage;
  }
  return {};
}

}  // namespace

// A read of messages kept behind a first turn the sync formed anew (tools added: they render into the system turn,
// as a handoff's other instructions do) is audited whatever the rate: the fidelity model prices those keeps by
// the tokens changed alone and misses by content. A trim, kept behind the same first turn, is sampled by the rate.
TEST_CASE("serve audit: a read kept behind a new system turn is audited whatever the rate", "[serve][model]") {
  sv::ServeOptions options;
  options.model = kModel;
  options.policy = "patch:16:kl=0.003:through=0:attend=0";  // keeps what the edits leave approximate
  options.audit_rate = 0.01;                                // the rate alone samples the 100th approximate read
  {
    sv::ServeCore core(options);
    const sv::RunUsage u = fourth_after(core, "handoff", [](sv::ChatRequest& r) {
      r.tools_json = R"([{"type":"function","function":{"name":"look","parameters":{"type":"object"}}}])";
    });
    INFO(u.plan);
    CHECK(u.exact_kv == false);
    CHECK(u.plan.find("keep") != std::string::npos);
    CHECK(has_line(metrics_of(core), "orbit_audits_total 1"));
    CHECK((*core.session_info("handoff"))["audit"]["audits"] == 1);
    core.close();
  }
  {
    sv::ServeCore core(options);
    const sv::RunUsage u = fourth_after(core, "trim", [](sv::ChatRequest& r) {
      r.messages.erase(r.messages.begin() + 1, r.messages.begin() + 3);  // the first exchange
    });
    INFO(u.plan);
    CHECK(u.exact_kv == false);
    CHECK(has_line(metrics_of(core), "orbit_audits_total 0"));
    core.close();
  }
  options.audit_rate = 0;  // --audit 0 audits nothing, this read either
  sv::ServeCore core(options);
  fourth_after(core, "none", [](sv::ChatRequest& r) {
    r.tools_json = R"([{"type":"function","function":{"name":"look","parameters":{"type":"object"}}}])";
  });
  CHECK(has_line(metrics_of(core), "orbit_audits_total 0"));
  core.close();
}

TEST_CASE("serve audit: a loss the model under-predicted raises the engine's fidelity correction", "[serve][model]") {
  sv::ServeOptions options;
  options.model = kModel;
  // A budget, and no idle-time self-checks of its own; neither read-through nor the last query's attention,
  // so the trims leave approximate reads to audit (with either, this conversation's reads are served exactly
  // and the audits say nothing).
  options.policy = "patch:16:kl=0.003:through=0:attend=0";
  options.audit_rate = 1;
  sv::ServeCore core(options);
  REQUIRE(core.engine().stats().fidelity_correction == 1);
  Conversation c{core, "corrected"};
  double worst = 0;
  for (int i = 0; i < 10; ++i) {
    c.step(i, 4);
    const sv::RunUsage& u = c.usages.back();
    if (u.audit && u.audit->predicted_kl > 0) worst = std::max(worst, u.audit->measured_kl / u.audit->predicted_kl);
  }
  const orbit::EngineStats stats = core.engine().stats();
  CHECK(stats.fidelity_checks >= 5);  // the audits of reads not exact (exact ones are negligible on both sides)
  if (worst > 1) {
    CHECK(stats.fidelity_correction > 1);  // an under-prediction among the last 8 raised it
  } else {
    CHECK(stats.fidelity_correction == 1);  // the model erred high: never made less careful
  }
  core.close();
}

// An audit whose reads throw (a pool that cannot hold the re-prefill, say; here the test fault) is counted in
// orbit_audits_failed_total and logged; the request that ran it, owed, is answered all the same.
TEST_CASE("serve audit: an owed audit that fails is counted and its request answered", "[serve][model]") {
  sv::ServeOptions options;
  options.test_fault = "audit";
  BackToBack b(options, "failing");
  for (int i = 0; i < 3; ++i) b.c.step(i, 6);
  for (const sv::RunUsage& u : b.c.usages) CHECK_FALSE(u.audit.has_value());
  const std::string metrics = metrics_of(b.core);
  CHECK(has_line(metrics, "orbit_audits_failed_total 2"));  // requests 2 and 3 ran the audits owed to them
  CHECK(has_line(metrics, "orbit_audits_owed_total 2"));
  CHECK(has_line(metrics, "orbit_audits_total 0"));
  CHECK(has_line(metrics, "orbit_audits_waiting 1"));
}

}  // namespace ORBIT_TEST_FILE
