// What `orbit serve`'s stores do with an answer whose write failed (stored/pending_writes.h; chat_store.h,
// responses/responses_store.h), without a model: it is held in memory and written by a retry once the disk
// takes writes again (the next put that commits, retry_pending(), or drain_pending() at shutdown), and then
// survives a restart; a held chat completion is not found until then, a held response is served and chained
// from memory, and a response that continues a held (or deleted) one writes it first, so the chain read back
// after a restart is whole. A full disk is RLIMIT_FSIZE (store_write_fixtures.h): lifted, the disk recovers.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "orbit_catch.h"
#include "serve/responses/responses_store.h"
#include "serve/stored/chat_store.h"
#include "serve/stored/group_commit.h"
#include "serve/stored/pending_writes.h"
#include "store_write_fixtures.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;
using namespace store_fixtures;  // store_write_fixtures.h: what these tests share

namespace {

// The count of all four PendingStats, as a string for one CHECK that names every field when it fails.
std::string counts(const sv::PendingStats& s) {
  return "held " + std::to_string(s.held) + " retried " + std::to_string(s.retried) + " dropped " +
         std::to_string(s.dropped);
}

}  // namespace

TEST_CASE("store retry: a chat completion whose write failed lands with the next put once the disk recovers",
          "[serve][chat_store]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "chat.sqlite").string();
  sv::ChatStore store(sv::ChatStoreOptions{64, path});
  REQUIRE(store.put(completion("first")));
  {
    const FileSizeLimit limit(wal_bytes(path) + kRoom);
    const sv::StoreWrite failed = store.put(completion("large", kLarge));
    REQUIRE_FALSE(failed.ok);
    CHECK(failed.held);
    CHECK(counts(store.pending()) == "held 1 retried 0 dropped 0");
    CHECK(store.pending().bytes > static_cast<int64_t>(kLarge));
    CHECK_FALSE(store.get("large"));  // not stored yet: not found
  }
  // The disk recovered: the next put that commits writes the held one before it returns.
  REQUIRE(store.put(completion("next")));
  CHECK(counts(store.pending()) == "held 0 retried 1 dropped 0");
  CHECK(store.get("large"));
  {
    const FileSizeLimit limit(wal_bytes(path) + kRoom);
    REQUIRE(store.put(completion("large2", kLarge)).held);
    // The disk takes this small write but not the held one, which the put tried again: still held.
    REQUIRE(store.put(completion("small")));
    CHECK(counts(store.pending()) == "held 1 retried 1 dropped 0");
    const sv::RetryResult still = store.retry_pending(true);
    CHECK(still.attempted == 1);
    CHECK(still.stored == 0);
    CHECK(still.check_error.empty());  // the check passed: it is this one that does not fit
  }
  // Its backoff (it failed while other writes went through) does not hold back retry_pending(true).
  CHECK(store.retry_pending(true).stored == 1);
  sv::ChatStore reopened(sv::ChatStoreOptions{64, path});
  for (const char* id : {"first", "large", "next", "large2", "small"}) {
    CAPTURE(id);
    CHECK(reopened.get(id));
  }
}

TEST_CASE("store retry: a held chat completion is written at shutdown, or named lost", "[serve][chat_store]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "chat.sqlite").string();
  {
    sv::ChatStore store(sv::ChatStoreOptions{64, path});
    REQUIRE(store.put(completion("first")));
    const auto room = wal_bytes(path) + kRoom;
    {
      const FileSizeLimit limit(room);
      REQUIRE(store.put(completion("kept", kLarge)).held);
    }
    CHECK(store.drain_pending() == 0);  // the disk recovered before shutdown: written
    {
      const FileSizeLimit limit(room);
      REQUIRE(store.put(completion("lost", kLarge)).held);
      CHECK(store.drain_pending() == 1);  // still full at shutdown: dropped
    }
    CHECK(counts(store.pending()) == "held 0 retried 1 dropped 1");
  }
  sv::ChatStore reopened(sv::ChatStoreOptions{64, path});
  CHECK(reopened.get("kept"));
  CHECK_FALSE(reopened.get("lost"));
}

TEST_CASE("store retry: a held chat completion deleted is never written; one with no room is not held",
          "[serve][chat_store]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "chat.sqlite").string();
  // Room for one large completion's bytes, not two.
  sv::ChatStore store(sv::ChatStoreOptions{64, path, true, kLarge + (64 << 10)});
  REQUIRE(store.put(completion("first")));
  {
    const FileSizeLimit limit(wal_bytes(path) + kRoom);
    REQUIRE(store.put(completion("deleted", kLarge)).held);
    const sv::StoreWrite no_room = store.put(completion("no room", kLarge));
    REQUIRE_FALSE(no_room.ok);
    CHECK_FALSE(no_room.held);
  }
  CHECK(store.erase("deleted"));  // its write is cancelled
  CHECK_FALSE(store.erase("deleted"));
  CHECK(store.retry_pending(true).attempted == 0);
  CHECK(store.drain_pending() == 0);
  CHECK(counts(store.pending()) == "held 0 retried 0 dropped 1");
  sv::ChatStore reopened(sv::ChatStoreOptions{64, path});
  CHECK_FALSE(reopened.get("deleted"));
  CHECK_FALSE(reopened.get("no room"));
}

TEST_CASE("store retry: a held response is served, chained, and kept in memory past its LRU bound",
          "[serve][responses]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  sv::ResponseStore store(sv::ResponseStoreOptions{1, path});  // memory holds one response
  REQUIRE(put(store, response("resp_first")));
  std::shared_ptr<sv::StoredResponse> large = response("resp_large", kLarge);
  {
    const FileSizeLimit limit(wal_bytes(path) + kRoom);
    REQUIRE(put(store, large).held);
    REQUIRE(put(store, response("resp_a")));  // each small put tries the held one again: it does not fit
    REQUIRE(put(store, response("resp_b")));
    CHECK(counts(store.pending()) == "held 1 retried 0 dropped 0");
  }
  // Memory's bound (one) dropped resp_a, not the held response, which is found only there.
  const std::shared_ptr<sv::StoredResponse> found = store.get("resp_large");
  REQUIRE(found);
  CHECK(found->body == large->body);
  CHECK(store.continued_by(large->conversation()) == found);
  REQUIRE(store.retry_pending(true).stored == 1);
  CHECK(counts(store.pending()) == "held 0 retried 1 dropped 0");
  sv::ResponseStore reopened(sv::ResponseStoreOptions{1, path});
  CHECK(reopened.get("resp_large"));
}

TEST_CASE("store retry: a response continuing a held one writes it first, and the chain survives a restart",
          "[serve][responses]") {
  TempDir tmp;
  const std::string path = (tmp.dir / "responses.sqlite").string();
  std::shared_ptr<sv::StoredResponse> held = response("resp_held", kLarge);
  std::shared_ptr<sv::StoredResponse> deleted = response("resp_deleted", kLarge);
  {
    sv::ResponseStore store(sv::ResponseStoreOptions{64, path});
    REQUIRE(put(store, response("resp_first")));
    {
      const FileSizeLimit limit(wal_bytes(path) + kRoom);
      REQUIRE(put(store, held).held);
      REQUIRE(put(store, deleted).held);
      // While the disk is full a response continuing the held one fails too: its row needs the held one's.
      const sv::StoreWrite blocked = put(store, response("resp_blocked", 0, held));
      CHECK_FALSE(blocked.ok);
      CHECK(blocked.held);
    }
    CHECK(store.erase("resp_deleted"));  // its write cancelled; a later response may still continue it
    CHECK(counts(store.pending()) == "held 2 retried 0 dropped 0");
    // Written with resp_deleted's row before its own (unnamed: deleted), then it retries the held two.
    REQUIRE(put(store, response("resp_after_deleted", 0, deleted)));
    CHECK(counts(store.pending()) == "held 0 retried 2 dropped 0");
    CHECK(store.get("resp_held"));
  }
  sv::ResponseStore reopened(sv::ResponseStoreOptions{64, path});
  CHECK(reopened.get("resp_held"));
  const std::shared_ptr<sv::StoredResponse> blocked = reopened.get("resp_blocked");
  REQUIRE(blocked);
  CHECK(blocked->conversation().size() == 4);  // resp_held's question and answer, then its own
  // The deleted one is no response of its own (404), but the one that continued it keeps its conversation.
  CHECK_FALSE(reopened.get("resp_deleted"));
  const std::shared_ptr<sv::StoredResponse> after = reopened.get("resp_after_deleted");
  REQUIRE(after);
  REQUIRE(after->previous);
  CHECK(after->previous->id == "resp_deleted");
  CHECK(after->previous->body == deleted->body);
}

TEST_CASE("pending writes: oldest first, within their bytes, a backoff after each miss", "[serve][chat_store]") {
  using Pending = sv::PendingWrites<int>;
  Pending pending(100);
  const Pending::Clock::time_point t0{};
  CHECK(pending.hold("a", 1, 60, "full", "").held);
  CHECK_FALSE(pending.hold("b", 2, 50, "full", "").held);  // 110 bytes would pass the bound
  CHECK(pending.hold("c", 3, 40, "full", "").held);
  std::vector<Pending::Due> due = pending.due(t0, false);
  REQUIRE(due.size() == 2);
  CHECK(due[0].id == "a");
  CHECK(due[1].id == "c");
  CHECK(due[0].attempts == 1);
  // A miss waits 1 s, the next 2 s, then 4 s, ... at most 64 s.
  pending.missed("a", t0, "too large");
  CHECK(pending.due(t0 + std::chrono::milliseconds(999), false).size() == 1);  // c only
  CHECK(pending.due(t0 + std::chrono::seconds(1), false).size() == 2);
  for (int i = 0; i < 10; ++i) pending.missed("a", t0, "too large");
  CHECK(pending.due(t0 + std::chrono::seconds(63), false).size() == 1);
  due = pending.due(t0 + std::chrono::seconds(64), false);
  REQUIRE(due.size() == 2);
  CHECK(due[0].attempts == 12);
  CHECK(due[0].error == "too large");
  CHECK(pending.due(t0, true).size() == 2);  // all, whatever their backoff
  pending.landed("a");
  CHECK(pending.forget("c"));  // deleted: counted neither retried nor dropped
  CHECK(pending.empty());
  CHECK(counts(pending.stats()) == "held 0 retried 1 dropped 1");
  CHECK(pending.hold("d", 4, 100, "full", "").held);  // the bytes went with them
  CHECK_FALSE(pending.drop("d"));                     // no journal: given up, counted dropped
  CHECK(counts(pending.stats()) == "held 0 retried 1 dropped 2");
}

TEST_CASE("group commit: items submitted together share one transaction", "[serve][chat_store]") {
  std::vector<std::vector<int>> commits;
  sv::GroupCommit<int>::Writer writer;
  writer.commit = [&](const std::vector<int>& items) { commits.push_back(items); };
  writer.check = [] {};
  sv::GroupCommit<int> group(2, writer);
  const std::vector<sv::StoreWrite> out = group.submit_all({1, 2, 3});
  REQUIRE(out.size() == 3);
  for (const sv::StoreWrite& w : out) CHECK(w.ok);
  // At most max_group (2) a transaction.
  REQUIRE(commits.size() == 2);
  CHECK(commits[0] == std::vector<int>{1, 2});
  CHECK(commits[1] == std::vector<int>{3});
}

}  // namespace ORBIT_TEST_FILE
