// Window::prepare_sync: a list the agent expects to sync next, computed exactly in idle time in a throwaway
// fork, so that the sync after it serves what a trim from the front moved from exact KV (no forward, no error).
#include <algorithm>
#include <cmath>
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
