// Window::prepare_sync: a list the agent expects to sync next, computed exactly in idle time in a throwaway
// fork, so that the sync after it serves what a trim from the front moved from exact KV (no forward, no error).
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "orbit/common/error.h"
#include "sync_test_support.h"

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
  bad.push_back(msg("user", "a private \xEE\x80\x80 marker"));  // U+E000: sync's chunk-part marker
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
