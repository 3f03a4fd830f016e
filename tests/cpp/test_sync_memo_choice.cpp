// Which earlier list the memos read for a list whose key they do not know (sync_latest.h): only the list chosen
// is marked used, step 3 reads the encodings of the lists step 2 chose instead of choosing again, each anchor key
// is hashed once per sync.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "orbit/engine.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/sync.h"
#include "orbit/window.h"
#include "orbit_catch.h"
#include "sync_memo_support.h"
#include "sync_test_support.h"
#include "window/sync_encode.h"
#include "window/sync_latest.h"
#include "window/sync_memo.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using orbit::test::sync_memo::runtime_msg;
using Messages = std::vector<runtime::ChatMessage>;
using orbit::detail::ListKeys;
using orbit::detail::ListRenders;

Sha256::Digest digest(const std::string& text) {
  Sha256 h;
  h.update(text);
  return h.digest();
}

// A list of a system prompt and `n` turns, the turns' texts from `tag`.
Messages turns(const std::string& system, const std::string& tag, int from, int n) {
  Messages out = {runtime_msg("system", system)};
  for (int i = from; i < from + n; ++i)
    out.push_back(runtime_msg(i % 2 ? "assistant" : "user", tag + std::to_string(i)));
  return out;
}

// A value holding `messages` as its list's message keys.
std::shared_ptr<ListRenders> holding(std::vector<Sha256::Digest> messages) {
  auto v = std::make_shared<ListRenders>();
  v->messages = std::move(messages);
  return v;
}

}  // namespace

TEST_CASE("choosing among lists marks only the list chosen used", "[sync_memo]") {
  using Memo = orbit::detail::ListMemo<ListRenders>;
  const runtime::ChatTemplate t(kPlainChatTemplate, "plain");
  const ListKeys keys = orbit::detail::list_keys(t, {}, turns("sys", "turn ", 0, 9));
  Memo memo;
  // The loser holds none of the list's messages past the first and is offered first (by the first message); the
  // winner holds them all (by the last message's anchor).
  memo.put(digest("loser"), holding({keys.messages.front()}));
  memo.put(digest("winner"), holding(keys.messages));
  memo.alias(orbit::detail::latest_keys(keys).front(), digest("loser"));
  memo.alias(orbit::detail::anchor_key(keys, keys.messages.size() - 1), digest("winner"));
  for (std::size_t i = 2; i < Memo::kMaxEntries; ++i) memo.put(digest("filler " + std::to_string(i)), holding({}));
  const orbit::detail::LatestList<ListRenders> chosen = orbit::detail::latest_list(memo, keys, 0);
  CHECK(chosen.key == orbit::detail::MemoKey(digest("winner")));
  // The memo is full: the next value put drops the least recently used, the loser (not read), where reading the
  // candidates used to mark it used and drop the oldest filler instead.
  memo.put(digest("one more"), holding({}));
  CHECK(memo.get(digest("loser")) == nullptr);
  CHECK(memo.get(digest("filler 2")) != nullptr);
  CHECK(memo.get(digest("winner")) != nullptr);
}

namespace {

// An engine with TinyStories-656K (the positions its short lists need).
std::shared_ptr<Engine> engine_for_test() {
  EngineOptions o;
  o.model = orbit::test::sync_support::kModel;
  o.pool_bytes = int64_t{16} << 20;
  o.page_size = 16;
  o.background = BackgroundMode::kInline;
  return Engine::open(o);
}

std::vector<ChatMessage> sdk_list(const Messages& list) {
  std::vector<ChatMessage> out;
  for (const runtime::ChatMessage& m : list) {
    ChatMessage c;
    c.role = m.role;
    c.content = m.content;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

TEST_CASE("step 3 reads the encodings of the lists step 2 chose, and hashes each anchor key once", "[sync_memo]") {
  const std::shared_ptr<Engine> engine = engine_for_test();
  orbit::detail::clear_cuts_memo();
  orbit::detail::clear_encode_memo();
  const Window w = engine->new_window();
  SyncOptions o;
  // Two agents, each with its own system prompt; then the first's next request: a new system prompt, its two
  // oldest turns dropped and two added, so neither its first nor its second message is its last list's.
  (void)w.plan_sync(sdk_list(turns("Ada, step 1", "Ada says ", 0, 14)), o);
  (void)w.plan_sync(sdk_list(turns("Bob, step 1", "Bob says ", 0, 12)), o);
  const Messages next = turns("Ada, step 2", "Ada says ", 2, 14);
  const int64_t cuts_reads = orbit::detail::cuts_memo().alias_reads();
  const int64_t encode_reads = orbit::detail::encode_memo().alias_reads();
  const int64_t reused = orbit::detail::tokens_reused_so_far();
  const SyncPlan plan = w.plan_sync(sdk_list(next), o);
  CHECK(orbit::detail::cuts_memo().alias_reads() > cuts_reads);       // step 2 chose
  CHECK(orbit::detail::encode_memo().alias_reads() == encode_reads);  // step 3 read what it chose
  CHECK((orbit::detail::tokens_reused_so_far() - reused) * 2 > static_cast<int64_t>(plan.tokens.size()));
  CHECK(plan.tokens == engine->tokenize_chat(sdk_list(next), false, o.chat));

  // Both memos read and keep a list by the same anchors: each anchor key is hashed once per list.
  const runtime::ChatTemplate t(kPlainChatTemplate, "plain");
  const ListKeys keys = orbit::detail::list_keys(t, {}, next);
  const int64_t hashes = orbit::detail::anchor_hashes_so_far();
  const Sha256::Digest a = orbit::detail::anchor_key(keys, 7);
  CHECK(orbit::detail::anchor_key(keys, 7) == a);
  CHECK(orbit::detail::anchor_hashes_so_far() - hashes == 1);
}

}  // namespace ORBIT_TEST_FILE
