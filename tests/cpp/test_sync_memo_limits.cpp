// The bounds of Window::sync's memos (orbit/sync_memo.h): set small, the memos keep within them (entries and bytes)
// as new lists arrive, sync_memo_usage says what they hold, a bound out of range is refused naming its field, and a
// list's bytes count what its containers allocated (capacity), not only what they use.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "orbit/engine.h"
#include "orbit/sync.h"
#include "orbit/sync_memo.h"
#include "orbit/window.h"
#include "orbit_catch.h"
#include "sync_test_support.h"
#include "window/sync_encode.h"
#include "window/sync_memo.h"
#include "window/sync_render.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using orbit::test::sync_support::msg;

// Puts the default bounds back and empties both memos however the test leaves.
struct DefaultLimits {
  DefaultLimits() { clear(); }
  ~DefaultLimits() {
    set_sync_memo_limits(SyncMemoLimits{});
    clear();
  }
  static void clear() {
    orbit::detail::clear_cuts_memo();
    orbit::detail::clear_encode_memo();
  }
};

// Agent `agent`'s list at its request `request`: a system prompt and request + 1 exchanges, all its own.
std::vector<ChatMessage> agent_list(int agent, int request) {
  std::vector<ChatMessage> list = {msg("system", "You tell short stories to agent " + std::to_string(agent) + ".")};
  for (int i = 0; i <= request; ++i) {
    list.push_back(msg("user", "Tell me story " + std::to_string(i) + " about a cat and a dog who play in the park."));
    list.push_back(msg("assistant", "Once upon a time, a cat and a dog played ball in the park all day long."));
  }
  return list;
}

void check_within(const SyncMemoUsage& u, const SyncMemoLimits& l) {
  for (const SyncMemoCount* c : {&u.cuts, &u.encodings}) {
    CHECK(c->entries <= l.max_entries);
    CHECK(c->bytes <= l.max_bytes);
  }
}

}  // namespace

TEST_CASE("small sync memo bounds hold as new lists arrive", "[sync_memo]") {
  const DefaultLimits restore;
  const auto engine = orbit::test::sync_support::open_engine();
  const SyncOptions o = orbit::test::sync_support::options();
  const SyncMemoUsage empty = sync_memo_usage();
  CHECK(empty.cuts.entries == 0);
  CHECK(empty.encodings.bytes == 0);

  SECTION("entries") {
    const SyncMemoLimits limits{3, int64_t{64} << 20};
    set_sync_memo_limits(limits);
    CHECK(sync_memo_limits().max_entries == 3);
    for (int agent = 0; agent < 4; ++agent) {
      Window w = engine->new_window();
      for (int request = 0; request < 3; ++request) {
        w.sync(agent_list(agent, request), o);
        check_within(sync_memo_usage(), limits);
      }
    }
    const SyncMemoUsage full = sync_memo_usage();
    CHECK(full.cuts.entries == 3);  // twelve lists were kept, each dropping the oldest past three
    CHECK(full.encodings.entries == 3);
    CHECK(full.cuts.bytes > 0);
    CHECK(full.encodings.bytes > 0);
    CHECK(orbit::detail::cuts_memo().aliases() <= 3);
  }
  SECTION("bytes") {
    Window first = engine->new_window();
    first.sync(agent_list(0, 2), o);
    const SyncMemoUsage one = sync_memo_usage();
    REQUIRE(one.cuts.entries == 1);
    REQUIRE(one.encodings.entries == 1);
    // Room for about two lists of this size in each memo.
    const int64_t room = 2 * std::max(one.cuts.bytes, one.encodings.bytes) + 100;
    const SyncMemoLimits limits{4096, std::max(room, SyncMemoLimits::kMinBytes)};
    set_sync_memo_limits(limits);
    for (int agent = 1; agent < 8; ++agent) {
      Window w = engine->new_window();
      w.sync(agent_list(agent, 2), o);
      check_within(sync_memo_usage(), limits);
    }
    const SyncMemoUsage full = sync_memo_usage();
    CHECK(full.cuts.entries >= 1);
    CHECK(full.cuts.entries < 8);
    CHECK(full.encodings.entries >= 1);
    CHECK(full.encodings.entries < 8);
  }
  SECTION("lowered, the memos drop their oldest lists at once") {
    for (int agent = 0; agent < 5; ++agent) engine->new_window().sync(agent_list(agent, 0), o);
    REQUIRE(sync_memo_usage().cuts.entries == 5);
    set_sync_memo_limits({2, int64_t{64} << 20});
    CHECK(sync_memo_usage().cuts.entries == 2);
    CHECK(sync_memo_usage().encodings.entries == 2);
  }
}

TEST_CASE("a sync memo bound out of range is refused naming its field", "[sync_memo]") {
  const DefaultLimits restore;
  set_sync_memo_limits({7, int64_t{1} << 20});
  for (const int64_t entries : {int64_t{0}, int64_t{-1}, SyncMemoLimits::kMaxEntries + 1}) {
    CHECK_THROWS_WITH(set_sync_memo_limits({entries, int64_t{1} << 20}),
                      Catch::Matchers::Contains("SyncMemoLimits::max_entries"));
  }
  for (const int64_t bytes : {int64_t{0}, SyncMemoLimits::kMinBytes - 1, SyncMemoLimits::kMaxBytes + 1}) {
    CHECK_THROWS_WITH(set_sync_memo_limits({8, bytes}), Catch::Matchers::Contains("SyncMemoLimits::max_bytes"));
  }
  CHECK(sync_memo_limits().max_entries == 7);  // nothing changed by a refusal
  CHECK(sync_memo_limits().max_bytes == int64_t{1} << 20);
}

TEST_CASE("a memo entry's bytes count what its containers allocated", "[sync_memo]") {
  orbit::detail::ListRenders renders;
  renders.text.reserve(100000);
  renders.text = "a short text";
  renders.prefixes.reserve(1000);
  CHECK(renders.bytes() >= 100000 + 1000 * sizeof(orbit::detail::PrefixRender));
  orbit::detail::ListEncodings encodings;
  encodings.segments.emplace_back();
  encodings.segments.back().text = "a segment";
  encodings.segments.back().tokens.ids.reserve(10000);
  encodings.segments.back().tokens.bytes.reserve(10000);
  CHECK(encodings.bytes() >= 10000 * (sizeof(int64_t) + sizeof(runtime::TokenBytes)));
}

}  // namespace ORBIT_TEST_FILE
