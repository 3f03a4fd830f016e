// `orbit serve` below HTTP: a request the KV pool refuses while a completion's window holds the pages waits for
// that window (RequestPath::waiting_for_pool, SessionTable::OutsideHold), as it waits for a chat request's. A
// completion's window is no session's: the wait saw no running request and refused at once (503 kv_pool_full).
// Nothing is timed: the completion is held in its sink until the test has seen the waiter make room.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "orbit_catch.h"
#include "serve/serve_core.h"
#include "serve/wire/serve_api.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

// Set once, waited for by another thread.
class Flag {
 public:
  void set() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      set_ = true;
    }
    changed_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return set_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool set_ = false;
};

sv::SamplingRequest greedy(int64_t max_tokens) {
  sv::SamplingRequest s;
  s.max_tokens = max_tokens;
  s.temperature = 0;
  s.logit_bias = {{1, -100}, {2, -100}};  // no BOS or EOS: the answer has text to stream
  return s;
}

// A sink whose run, at its first text, says so on `streaming` and waits for `go_on`: its window holds its
// prompt's pages from then until the run returns.
sv::RunSink held_at_first_text(Flag& streaming, Flag& go_on, bool& first) {
  sv::RunSink held;
  held.on_text = [&streaming, &go_on, &first](const std::string&) {
    if (first) {
      first = false;
      streaming.set();
      go_on.wait();
    }
    return true;
  };
  return held;
}

// A run (`run`, given a sink) on its own thread, held at its first text (held_at_first_text): constructed once it
// streams, so its window holds its pages until finish() lets it end. The destructor finishes it where finish() was
// not called (a REQUIRE that failed first).
class HeldRun {
 public:
  explicit HeldRun(std::function<sv::RunOutcome(const sv::RunSink&)> run) : run_(std::move(run)) {
    held_ = held_at_first_text(streaming_, go_on_, first_);
    thread_ = std::thread([this] { outcome_ = run_(held_); });
    streaming_.wait();
  }
  ~HeldRun() {
    if (thread_.joinable()) finish();
  }
  HeldRun(const HeldRun&) = delete;
  HeldRun& operator=(const HeldRun&) = delete;

  // Lets the run go on past its first text and waits for it to end; its outcome.
  const sv::RunOutcome& finish() {
    go_on_.set();
    thread_.join();
    return *outcome_;
  }

 private:
  Flag streaming_, go_on_;
  bool first_ = true;
  std::function<sv::RunOutcome(const sv::RunSink&)> run_;
  sv::RunSink held_;
  std::optional<sv::RunOutcome> outcome_;
  std::thread thread_;  // last: started once the members it reads are
};

// A completion of `prompt` (greedy, 4 tokens), held at its first text: its window holds its prompt's pages.
class HeldCompletion : public HeldRun {
 public:
  HeldCompletion(sv::ServeCore& core, const std::string& prompt)
      : HeldRun([&core, request = completion(core, prompt)](const sv::RunSink& sink) {
          return core.complete(request, sink);
        }) {}

 private:
  static sv::CompletionRequest completion(const sv::ServeCore& core, const std::string& prompt) {
    sv::CompletionRequest r;
    r.model = core.model_name();
    r.prompt = prompt;
    r.sampling = greedy(4);
    return r;
  }
};

// A server on stories260K with a 25-page pool (pages of 16 tokens) that waits for nothing (--pool-wait-ms 0) and
// audits every chat request (read from exact KV too: --audit-exact), in idle time only, which its held worker never
// gives: the audits wait. run_held()
// answers session "running" once (`story`: about 100 tokens, 7 pages) and holds its second request (the story again)
// at its first text, so its window holds every page of both its audits; refused() then asks for a window of about 250
// tokens (16 pages), more than the pool has free beside it, and lets the running request end.
struct AuditsWaiting {
  static sv::ServeOptions options() {
    sv::ServeOptions o;
    o.model = std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin";
    o.pool_bytes = int64_t{512} << 10;
    o.pool_wait_ms = 0;
    o.audit_rate = 1;
    o.audit_exact = true;
    o.audit_owed_after = 0;
    o.anticipate = false;
    return o;
  }

  AuditsWaiting() : core(options()) {
    core.hold_idle_work(true);
    for (int i = 0; i < 20; ++i) story += " once upon a time";
  }
  ~AuditsWaiting() { core.hold_idle_work(false); }

  sv::RunOutcome ask(const std::string& session, std::vector<orbit::ChatMessage> messages,
                     const sv::RunSink& sink = {}) {
    sv::ChatRequest r;
    r.model = core.model_name();
    r.messages = std::move(messages);
    r.sampling = greedy(4);
    return core.chat(r, session, sink);
  }

  void run_held() {
    std::vector<orbit::ChatMessage> messages = {{"user", "running" + story}};
    const sv::RunOutcome answered = ask("running", messages);
    REQUIRE(answered.result);
    messages.push_back({"assistant", answered.result->text});
    messages.push_back({"user", story});
    running.emplace([this, messages](const sv::RunSink& sink) { return ask("running", messages, sink); });
  }

  sv::RunOutcome refused() {
    std::string longer;
    for (int i = 0; i < 30; ++i) longer += " the end of a story";
    sv::RunOutcome out = ask("refused", {{"user", longer}});
    REQUIRE(running->finish().result);
    REQUIRE_FALSE(out.result);
    INFO(out.error.message);
    CHECK(out.error.status == 503);
    CHECK(out.error.code == "kv_pool_full");
    return out;
  }

  bool metric(const std::string& line) {
    return core.metrics().render(core.gauges()).find("\n" + line + "\n") != std::string::npos;
  }

  sv::ServeCore core;
  std::string story;
  std::optional<HeldRun> running;
};

}  // namespace

TEST_CASE("serve: a request the pool refuses waits for a running completion's window", "[serve][model]") {
  sv::ServeOptions options;
  options.model = std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin";
  options.pool_bytes = int64_t{1} << 20;  // 51 pages of 16 tokens
  options.pool_wait_ms = 3600000;         // never runs out here
  sv::ServeCore core(options);
  std::string story;  // about 400 tokens: 25 pages; two such windows and a longer one do not fit together
  for (int i = 0; i < 80; ++i) story += " once upon a time";
  auto chat = [&](const std::string& session, const std::string& text) {
    sv::ChatRequest r;
    r.model = core.model_name();
    r.messages = {{"user", session + text}};
    r.sampling = greedy(4);
    return core.chat(r, session, {});
  };
  REQUIRE(chat("idle", story).result);  // an idle window, let go for the waiter below

  HeldCompletion running(core, "running" + story);

  std::string longer = story;
  for (int i = 0; i < 20; ++i) longer += " the end";
  std::optional<sv::RunOutcome> waited;
  std::thread waiter([&] { waited = chat("waiter", longer); });
  // The waiter's sync let the idle window go and still did not fit beside the completion's: it waits (it was a
  // 503 at once), until the completion ends.
  for (;;) {
    const auto idle = core.session_info("idle");
    REQUIRE(idle);
    if ((*idle)["left_memory"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a poll, not a deadline
  }
  const sv::RunOutcome& completed = running.finish();
  waiter.join();
  REQUIRE(completed.result);
  INFO((waited->result ? "" : waited->error.message));
  REQUIRE(waited->result);
  CHECK(waited->result->finish_reason == "length");
}

// A pool set through ServeOptions::pool_bytes need not be whole MiB (--pool-mb gives whole MiB only): its refusals
// name its size in KiB and pages and the --pool-mb past it. Under 1 MiB they said "--pool-mb 0".
TEST_CASE("serve: refusals name a pool under 1 MiB by its size", "[serve][model]") {
  sv::ServeOptions options;
  options.model = std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin";
  options.pool_bytes = int64_t{512} << 10;  // 25 pages of 16 tokens
  options.pool_wait_ms = 0;                 // a refusal the running window leaves no room for is a 503 at once
  options.audit_rate = 0;
  options.anticipate = false;
  sv::ServeCore core(options);
  const auto says_its_size = [](const sv::ApiError& e) {
    INFO(e.message);
    CHECK(e.message.find("512 KiB, 25 pages") != std::string::npos);
    CHECK(e.message.find("--pool-mb 1 or more") != std::string::npos);
    CHECK(e.message.find("--pool-mb 0") == std::string::npos);
  };

  // 27 messages, a unit of whole pages each: more than the whole pool, a 400 no retry cures.
  sv::ChatRequest many;
  many.model = core.model_name();
  for (int i = 0; i < 26; ++i) many.messages.push_back({i % 2 == 0 ? "user" : "assistant", ""});
  many.messages.push_back({"user", "ok"});
  many.sampling = greedy(2);
  const sv::RunOutcome too_many = core.chat(many, "many", {});
  REQUIRE_FALSE(too_many.result);
  CHECK(too_many.error.status == 400);
  CHECK(too_many.error.code == "context_length_exceeded");
  says_its_size(too_many.error);

  // A completion held in its sink holds its prompt's 13 pages; a chat request that needs 13 more is a 503.
  std::string story;  // about 200 tokens: 13 pages
  for (int i = 0; i < 40; ++i) story += " once upon a time";
  HeldCompletion running(core, "running" + story);
  sv::ChatRequest refused;
  refused.model = core.model_name();
  refused.messages = {{"user", "refused" + story}};
  refused.sampling = greedy(4);
  const sv::RunOutcome full = core.chat(refused, "refused", {});
  const sv::RunOutcome& completed = running.finish();
  REQUIRE(completed.result);
  REQUIRE_FALSE(full.result);
  CHECK(full.error.status == 503);
  CHECK(full.error.code == "kv_pool_full");
  says_its_size(full.error);
}

// With --pool-wait-ms 0 a request the pool refuses while another runs waits for nothing: it drops only the waiting
// audits whose drop gives it room (room_maker.h's drop_together), and here none does: both audits are of the running
// session, whose window holds every page of theirs. They used to be dropped, oldest first, whatever they held, before
// the 503 came anyway (orbit_audits_dropped_for_pool_total 2).
TEST_CASE("serve: with --pool-wait-ms 0 a refused request drops no audit that frees it no page", "[serve][model]") {
  AuditsWaiting a;
  a.run_held();
  CHECK(a.metric("orbit_audits_waiting 2"));
  a.refused();
  CHECK(a.metric("orbit_audits_dropped_for_pool_total 0"));
  CHECK(a.metric("orbit_audits_waiting 2"));
}

// A refused request drops no waiting audit where all of them together would still leave it short: the refusal says
// how many pages the plan lacks (orbit::CapacityRefused::pages_short), and here a small session's audit, the only one
// whose drop frees pages (its window let go), frees about one where the request lacks seven. It used to be dropped,
// for the 503 that came anyway (orbit_audits_dropped_for_pool_total 1).
TEST_CASE("serve: a refused request keeps the audits whose drop would not make it fit", "[serve][model]") {
  AuditsWaiting a;
  REQUIRE(a.ask("small", {{"user", "a cat"}}).result);  // a page or two, and its audit
  a.run_held();
  CHECK(a.metric("orbit_audits_waiting 3"));
  a.refused();
  CHECK((*a.core.session_info("small"))["left_memory"] == 1);  // its idle window was let go: that loses nothing
  CHECK(a.metric("orbit_audits_dropped_for_pool_total 0"));
  CHECK(a.metric("orbit_audits_waiting 3"));
}

}  // namespace ORBIT_TEST_FILE
