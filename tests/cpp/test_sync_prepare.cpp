// Window::prepare_sync: a list the agent expects to sync next, computed exactly in idle time in a throwaway
// fork, so that the sync after it serves what a trim from the front moved from exact KV (no forward, no error).
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "orbit/common/error.h"
#include "sync_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using namespace orbit::test::sync_support;

namespace {

// A conversation of `turns` user/assistant messages of 12-word sentences after a system prompt.
std::vector<ChatMessage> conversation(int turns, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ChatMessage> m = {msg("system", "You tell short stories.")};
  for (int i = 0; i < turns; ++i) m.push_back(msg(i % 2 == 0 ? "user" : "assistant", sentence(rng, 12)));
  return m;
}

bool all_exact(const Window& w) {
  const std::vector<InstanceInfo> is = w.instances();
  return std::all_of(is.begin(), is.end(), [](const InstanceInfo& i) { return i.exact; });
}

float max_error_against_reference(Window& w, const std::vector<int64_t>& query) {
  const Logits held = w.logits(query, true);
  const Logits reference = w.reference_logits(query, true);
  float worst = 0;
  for (std::size_t k = 0; k < held.values.size(); ++k)
    worst = std::max(worst, std::abs(held.values[k] - reference.values[k]));
  return worst;
}

}  // namespace

TEST_CASE("prepare_sync: a trim from the front prepared in idle time is served from exact KV", "[sync]") {
  std::shared_ptr<Engine> engine = open_engine();
  Window w = engine->new_window();  // the default policy: it keeps survivors of a trim approximately
  const SyncOptions o = options();
  std::vector<ChatMessage> messages = conversation(6, 7);
  SyncReport r = w.sync(messages, o);
  (void)w.logits(r.generation_prompt);  // a read: the window is settled, nothing deferred
  REQUIRE(all_exact(w));

  // The agent's rule will drop the oldest message after the system prompt when the tool returns.
  std::vector<ChatMessage> trimmed = messages;
  trimmed.erase(trimmed.begin() + 1);
  std::vector<ChatMessage> next = trimmed;
  next.push_back(msg("tool", "the dog found the red ball."));

  // Without preparation (a fork, so the window itself stays as it is): the survivors are kept as they were.
  {
    Window plain = w.fork();
    (void)plain.sync(next, o);
    (void)plain.flush();
    CHECK_FALSE(all_exact(plain));
  }

  const uint64_t version = w.version();
  const std::vector<InstanceInfo> before = w.instances();
  const EngineStats stats_before = engine->stats();
  const IdleReport p = w.prepare_sync(trimmed, o);
  const EngineStats stats_after = engine->stats();
  // All but the system prompt, less any survivor the unprepared fork above re-served exactly (stored for
  // exact reuse: the preparation reuses it instead of forwarding it again).
  CHECK(p.instances_prepared >= 1);
  CHECK(p.instances_prepared <= static_cast<int64_t>(trimmed.size()) - 1);
  CHECK(p.prepare_forward_tokens > 0);
  CHECK(p.forward_tokens == p.prepare_forward_tokens);
  // Background work, and the window is untouched.
  CHECK(stats_after.background_forward_tokens - stats_before.background_forward_tokens == p.prepare_forward_tokens);
  CHECK(stats_after.critical_forward_tokens == stats_before.critical_forward_tokens);
  CHECK(w.version() == version);
  REQUIRE(w.instances().size() == before.size());

  // The sync after it: every survivor from exact KV, only the new message forwarded, and the window exact.
  r = w.sync(next, o);
  require_window_is_rendering(*engine, w, next, o);
  const int64_t new_tokens = w.instances().back().length;
  CHECK(r.forward_tokens + w.flush().forward_tokens == static_cast<double>(new_tokens));
  CHECK(all_exact(w));
  CHECK(max_error_against_reference(w, r.generation_prompt) <= 1e-4f);

  // Preparing the list the window holds already costs nothing.
  const IdleReport again = w.prepare_sync(next, o);
  CHECK(again.prepare_forward_tokens == 0);
}

TEST_CASE("prepare_sync: a list it cannot render throws; deferred repairs or no exact reuse do nothing", "[sync]") {
  std::shared_ptr<Engine> engine = open_engine();
  const SyncOptions o = options();
  const std::vector<ChatMessage> messages = conversation(4, 11);
  std::vector<ChatMessage> trimmed = messages;
  trimmed.erase(trimmed.begin() + 1);

  Window w = engine->new_window();
  (void)w.sync(messages, o);
  (void)w.flush();
  std::vector<ChatMessage> bad = trimmed;
  bad.push_back(msg("", "a message without a role"));
  const uint64_t version = w.version();
  CHECK_THROWS_AS(w.prepare_sync(bad, o), Error);
  CHECK(w.version() == version);

  // Repairs deferred by an edit: the fork would start from KV the next read changes.
  (void)w.evict(w.instances().at(2).id);
  const IdleReport deferred = w.prepare_sync(trimmed, o);
  CHECK(deferred.prepare_forward_tokens == 0);
  CHECK(deferred.instances_prepared == 0);

  // Without exact reuse nothing would read what it computed.
  WindowOptions noreuse;
  noreuse.policy = parse_policy("patch:16:noreuse");
  Window n = engine->new_window(noreuse);
  (void)n.sync(messages, o);
  (void)n.flush();
  const IdleReport none = n.prepare_sync(trimmed, o);
  CHECK(none.prepare_forward_tokens == 0);
  CHECK(none.instances_prepared == 0);
}

namespace {

// An agent that trims its oldest user and assistant messages at every step once past five messages, and
// hints (prepare_sync) the list it will start its next sync with: the last list with that trim made.
struct HintedLoop {
  Window& w;
  SyncOptions o = options();
  std::vector<ChatMessage> history = {msg("system", "You tell short stories.")};
  int k = 0;

  // The list the next step starts with: the trim it will make, before its new messages.
  std::vector<ChatMessage> next_start() const {
    std::vector<ChatMessage> h = history;
    if (h.size() + 2 > 5) h.erase(h.begin() + 1, h.begin() + 3);
    return h;
  }
  // One step: idle time (what the window prepares by itself), then the hint `hint` (none: no hint), then
  // the sync. Returns the idle call's report.
  IdleReport step(const std::optional<std::vector<ChatMessage>>& hint) {
    const IdleReport idle = w.idle();
    if (hint) (void)w.prepare_sync(*hint, o);
    history = next_start();
    history.push_back(msg("user", "Tell me about dog number " + std::to_string(k) + "."));
    history.push_back(msg("assistant", "The dog " + std::to_string(k) + " ran to the park."));
    ++k;
    const SyncReport r = w.sync(history, o);
    (void)w.logits(r.generation_prompt);  // the agent reads: nothing stays deferred
    return idle;
  }
};

}  // namespace

TEST_CASE("idle skips learned lists once the agent's hints reached as far for trust_hints syncs in a row", "[sync]") {
  std::shared_ptr<Engine> engine = open_engine();
  Window w = engine->new_window();  // the default policy: lists=3, move=8, hinted=2
  const int64_t trust = w.policy().trust_hints;
  REQUIRE(trust == 2);
  REQUIRE(w.policy().prepare_lists > 0);
  HintedLoop loop{w};
  for (int i = 0; i < 4; ++i) (void)loop.step(std::nullopt);  // no hint: the window learns the trim
  // Without a hint, idle time prepares what it learned (the benefit a loop without hints keeps).
  const IdleReport unhinted = loop.step(loop.next_start());
  CHECK_FALSE(unhinted.hints_trusted);
  CHECK(unhinted.lists_prepared > 0);
  CHECK(unhinted.prepare_forward_tokens > 0);

  // The rule: after `trust` syncs in a row whose hint reached as far as every learned list (here the hint is
  // the learned trim itself), no idle call prepares a learned list. The syncs so far hold one hinted sync.
  int64_t preparing_idles = 0;
  double trusted_prepare_tokens = 0;
  for (int i = 0; i < 6; ++i) {
    const IdleReport r = loop.step(loop.next_start());
    INFO("hinted step " << i);
    CHECK(r.hints_trusted == (i + 1 >= trust));
    if (r.lists_prepared + r.moves_prepared > 0) ++preparing_idles;
    if (r.hints_trusted) trusted_prepare_tokens += r.prepare_forward_tokens;
  }
  CHECK(preparing_idles <= trust - 1);  // only while the streak was shorter than trust
  CHECK(trusted_prepare_tokens == 0);   // no idle tokens spent preparing once trusted

  // A sync with no hint ends the trust: the next idle call prepares the learned lists again.
  (void)loop.step(std::nullopt);
  const IdleReport after = loop.step(loop.next_start());
  CHECK_FALSE(after.hints_trusted);
  CHECK(after.lists_prepared > 0);

  // So does a hint that a learned list reached further into the list than (here: only the system prompt).
  for (int i = 0; i < 3; ++i) (void)loop.step(loop.next_start());
  REQUIRE(loop.step(std::vector<ChatMessage>{loop.history.front()}).hints_trusted);
  const IdleReport short_hint = loop.step(loop.next_start());
  CHECK_FALSE(short_hint.hints_trusted);
  CHECK(short_hint.lists_prepared > 0);
}

TEST_CASE("under :hinted=0 idle prepares learned lists whatever the hints", "[sync]") {
  std::shared_ptr<Engine> engine = open_engine();
  WindowOptions wo;
  wo.policy = parse_policy("patch:16:kl=0.003:heal:prep=1:move=8:lists=3:hinted=0");
  Window w = engine->new_window(wo);
  HintedLoop loop{w};
  for (int i = 0; i < 4; ++i) (void)loop.step(std::nullopt);
  for (int i = 0; i < 6; ++i) {
    const IdleReport r = loop.step(loop.next_start());
    INFO("hinted step " << i);
    CHECK_FALSE(r.hints_trusted);
    CHECK(r.lists_prepared > 0);
  }
}

namespace {

// A browsing agent: a page's tool message and an assistant message per step, at most three pages in the list
// (the oldest leaves for a new one), and at step 2 it goes back to a page it saw (that page's message moves to
// the end): a window that learns moves. Before each new page it hints the list it will start with (the last
// list, the oldest page gone); the new page's message, unknown until the tool returns, comes after that.
struct PagingLoop {
  Window& w;
  SyncOptions o = options();
  std::vector<ChatMessage> history = {msg("system", "You read pages.")};
  int page = 0;

  static bool is_page(const ChatMessage& m) { return m.role == "tool"; }
  std::vector<ChatMessage> without_oldest_page() const {
    std::vector<ChatMessage> h = history;
    if (std::count_if(h.begin(), h.end(), is_page) >= 3) h.erase(std::find_if(h.begin(), h.end(), is_page));
    return h;
  }
  // One step: idle time, then (hinting) prepare_sync of the list the step starts with, then the sync of the
  // list with a new page (or, going back, the second page's message moved to the end). Returns the idle
  // call's report, the hint's and the sync's.
  struct Step {
    IdleReport idle, hint;
    SyncReport sync;
    std::vector<ChatMessage> hinted;
  };
  // again: the step goes back to the page that would leave (the hinted list, then that page's message).
  Step step(bool hinting, bool back = false, bool again = false) {
    Step out;
    out.idle = w.idle();
    if (again) {
      out.hinted = without_oldest_page();
      if (hinting) out.hint = w.prepare_sync(out.hinted, o);
      const ChatMessage leaving = *std::find_if(history.begin(), history.end(), is_page);
      history = out.hinted;
      history.push_back(leaving);
    } else if (back) {
      const auto it = std::find_if(history.begin() + 2, history.end(), is_page);
      const ChatMessage again = *it;
      history.erase(it);
      history.push_back(again);
    } else {
      out.hinted = without_oldest_page();
      if (hinting) out.hint = w.prepare_sync(out.hinted, o);
      history = out.hinted;
      history.push_back(msg("tool", "page " + std::to_string(page) + ": a dog ran."));
      ++page;
    }
    history.push_back(msg("assistant", "I read it."));
    out.sync = w.sync(history, o);
    (void)w.logits(out.sync.generation_prompt);  // the agent reads: nothing stays deferred
    return out;
  }
};

}  // namespace

TEST_CASE("trusted hints: prepare_sync also prepares the learned moves that go on past the hint", "[sync]") {
  std::shared_ptr<Engine> engine = open_engine();
  Window w = engine->new_window();  // the default policy: lists=3, move=8, hinted=2
  PagingLoop loop{w};
  for (int i = 0; i < 4; ++i) (void)loop.step(false, /*back=*/i == 2);  // learns the trim and the move
  // Hinted syncs: the hint (the trim) reaches as far as every learned list; a learned move of the oldest page,
  // the hint with that page's message after it, extends the hint and does not count against it.
  for (int i = 0; i < 2; ++i) REQUIRE_FALSE(loop.step(true).idle.hints_trusted);
  for (int i = 0; i < 3; ++i) {
    const PagingLoop::Step s = loop.step(true);
    INFO("trusted step " << i);
    // idle time prepares nothing (the hints are trusted) ...
    CHECK(s.idle.hints_trusted);
    CHECK(s.idle.lists_prepared + s.idle.moves_prepared == 0);
    CHECK(s.idle.prepare_forward_tokens == 0);
    // ... the hint's prepare_sync prepares the learned move that extends it, past the hint only: its tokens
    // are fewer than the extended list's own (a move prepared from scratch would forward the hint's part again)
    CHECK(s.hint.hints_trusted);
    CHECK(s.hint.moves_prepared >= 1);
    std::vector<ChatMessage> extended = s.hinted;
    extended.push_back(msg("tool", "page 0: a dog ran."));
    const auto rendered = [&](const std::vector<ChatMessage>& m) {
      return static_cast<double>(engine->tokenize_chat(m, false, loop.o.chat).size());
    };
    CHECK(s.hint.prepare_forward_tokens < rendered(extended) - rendered({loop.history.front()}));
    // ... and the sync serves the head of the new page's message (its role and "page") from that KV, behind
    // the hinted list: the one thing the learned lists prepared that the hint could not.
    const double hinted_tokens = rendered(s.hinted);
    double reused_past_hint = 0;
    for (const Plan& p : s.sync.plans) {
      for (const PlanStep& step : p.steps) {
        if (step.position >= hinted_tokens) reused_past_hint += static_cast<double>(step.reused_tokens);
      }
    }
    CHECK(reused_past_hint > 0);
  }
  // The agent goes back to the page its trim drops: the learned move one message past the hint reaches further
  // into the list than the hint, but it was prepared with the hint, so the hints stay trusted.
  const PagingLoop::Step back = loop.step(true, false, /*again=*/true);
  CHECK(back.hint.moves_prepared >= 1);
  CHECK(loop.step(true).idle.hints_trusted);
}

}  // namespace ORBIT_TEST_FILE
