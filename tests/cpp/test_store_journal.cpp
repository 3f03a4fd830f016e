// The remote journal (RemoteJournal, remote_tier.h; ChunkStore's records in remote_pending) against the interleavings
// that used to lose a record, with an in-process backend (no redis-server, no model): a write recorded while the
// key's earlier write was being acknowledged (a replacement, or a put of a key already stored), and an erase whose
// record the index refuses while it takes the local removal, a write the queue's byte bound dropped, and the share
// of the disk entries held for undelivered writes may fill (max_held_fraction).
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "orbit/store/backend.h"
#include "orbit/store/chunk_store.h"
#include "test_helpers.h"
#include "test_store_sqlite.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using namespace orbit::store;
using test::store_test_key;
using test::store_test_value;

namespace {

constexpr auto kWait = std::chrono::milliseconds(60000);

// A MemoryBackend that can hold its first put in flight until release() (a slow link), and be down (every call
// refused, as an unreachable server), and lose everything it holds (a server restarted empty).
class GateBackend final : public BlobBackend {
 public:
  explicit GateBackend(bool hold_first) : released_(!hold_first) {}
  std::string describe() const override { return "gate-memory"; }
  BackendRead get(const std::string& key) override {
    if (is_down()) return BackendRead{BackendRead::Outcome::kUnavailable, "", "gate-memory: down"};
    return inner_->get(key);
  }
  Status put(const std::string& key, const std::string& bytes) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++entered_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return released_; });
    }
    if (is_down()) return Status::refused("gate-memory: down");
    return inner_->put(key, bytes);
  }
  Status remove(const std::string& key) override {
    return is_down() ? Status::refused("gate-memory: down") : inner_->remove(key);
  }
  Result<bool> exists(const std::string& key) override {
    if (is_down()) return Status::refused("gate-memory: down");
    return inner_->exists(key);
  }
  bool wait_entered() {  // a put is in the backend (the writer's write in flight); false after 60 s
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return entered_ > 0; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  void set_down(bool down) {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = down;
  }
  void forget_all() {
    std::lock_guard<std::mutex> lock(mu_);
    inner_ = std::make_unique<MemoryBackend>();
  }

 private:
  bool is_down() {
    std::lock_guard<std::mutex> lock(mu_);
    return down_;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool released_;
  bool down_ = false;
  std::unique_ptr<MemoryBackend> inner_ = std::make_unique<MemoryBackend>();
};

ChunkStoreOptions journal_options(const std::string& dir, const std::shared_ptr<GateBackend>& backend) {
  ChunkStoreOptions o = test::remote_store_options("", dir);
  o.remote_backend = backend;
  return o;
}

// The value the remote tier behind `backend` serves for `key` (a store without a directory reads it).
Result<ValuePtr> remote_value(const std::shared_ptr<GateBackend>& backend, const std::string& key) {
  ChunkStore reader(journal_options("", backend));
  return reader.get(key);
}

// Puts value 1 under key 1, its write held in flight by the backend, then key 1 again: value 2 replacing it
// (`replace`), or value 1 once more (a put of a key already stored, which queues the remote write again). Between
// the second put's record and its queueing (RemoteOptions::before_queue), the first write is acknowledged and its
// record cleared (drain_remote waits for the clearing); then, for the second put, the server restarts empty and
// goes down, so that only a re-send by a later open can bring its value there. The store closes with the second
// write queued, and a later open with the server back re-sends what the journal kept. Returns the value the
// remote serves then.
Result<ValuePtr> put_twice_across_an_acknowledgement(const std::string& dir, bool replace) {
  auto backend = std::make_shared<GateBackend>(/*hold_first=*/true);
  ChunkStoreOptions o = journal_options(dir, backend);
  ChunkStore* store = nullptr;
  int queued = 0;
  o.remote.before_queue = [&](const std::string&) {
    if (++queued != 2) return;
    backend->release();                   // the first write is acknowledged...
    REQUIRE(store->drain_remote(kWait));  // ...and its record cleared, while the second's is made, not yet queued
    backend->forget_all();
    backend->set_down(true);
  };
  {
    ChunkStore s(o);
    store = &s;
    REQUIRE(s.put(store_test_key(1), store_test_value(1)).is_ok());
    REQUIRE(backend->wait_entered());
    PutOptions again;
    again.replace = replace;
    REQUIRE(s.put(store_test_key(1), store_test_value(replace ? 2 : 1), again).is_ok());
    REQUIRE(queued == 2);
  }  // closed with the second write queued (the server down): dropped from the queue, its record kept
  backend->set_down(false);
  {
    ChunkStore reopened(journal_options(dir, backend));
    REQUIRE(reopened.drain_remote(kWait));
    CHECK(reopened.stats().remote.resent == 1);
  }
  return remote_value(backend, store_test_key(1));
}

}  // namespace

// The writer clears a delivered write's record once the remote acknowledged it. A put of the same key recorded in
// between (after that write was sent, before its own write is queued) had its record taken by that clearing: the
// journal kept one record a key, which a new record only updated, and the clearing went by key. A replacement's new
// value, or a put that queues the write again for a server that lost the key, was then never re-sent after a close
// or a kill (the remote kept the replaced value, or nothing: both checks below failed). Now each record has a seq of
// its own and the clearing takes only the acknowledged one's.
TEST_CASE("a put recorded while the key's earlier write is acknowledged keeps its record", "[store][remote]") {
  test::TempDir dir;
  SECTION("a replacement") {
    Result<ValuePtr> v = put_twice_across_an_acknowledgement(dir / "s", /*replace=*/true);
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *store_test_value(2)));  // not the replaced value 1
  }
  SECTION("a put of a key already stored") {
    Result<ValuePtr> v = put_twice_across_an_acknowledgement(dir / "s", /*replace=*/false);
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *store_test_value(1)));
  }
}

// An erase's record and its local removal commit in one transaction. Before, the record was a commit of its own
// whose failure was ignored: with the index refusing erase records (a trigger here; a busy lease connection there),
// the erase removed the local copy and returned ok with no record of the removal, so a close with the server down
// lost the removal for good and the remote kept serving the erased entry. Now the erase is refused with its record
// and the local copy stays: the local tiers and the remote agree either way.
TEST_CASE("an erase whose record the index refuses is refused too: the remote never keeps an erased entry",
          "[store][remote]") {
  test::TempDir dir;
  const std::string d = dir / "s";
  auto backend = std::make_shared<GateBackend>(/*hold_first=*/false);
  {
    ChunkStore store(journal_options(d, backend));
    REQUIRE(store.put(store_test_key(1), store_test_value(1)).is_ok());
    REQUIRE(store.drain_remote(kWait));  // delivered, its record cleared
  }
  test::alter_index(d + "/index.sqlite",
                    "CREATE TRIGGER refuse_erase_records BEFORE INSERT ON remote_pending WHEN NEW.kind = 1 "
                    "BEGIN SELECT RAISE(ABORT, 'erase records refused (test)'); END");
  bool erased = false;
  {
    ChunkStore store(journal_options(d, backend));
    backend->set_down(true);  // a removal queued now stays queued until the close drops it
    const Status s = store.erase(store_test_key(1));
    erased = s.is_ok();
    INFO(s.to_string());
    CHECK(!erased);
    GetOptions local_only;
    local_only.remote = false;
    if (!erased) CHECK(store.get(store_test_key(1), local_only).is_ok());  // refused: the local copy stays
  }
  test::alter_index(d + "/index.sqlite", "DROP TRIGGER refuse_erase_records");
  backend->set_down(false);
  {
    ChunkStore reopened(journal_options(d, backend));
    REQUIRE(reopened.drain_remote(kWait));  // re-sends what the journal holds
  }
  // Erased: the remote must not serve it; refused: it is still held everywhere.
  CHECK(remote_value(backend, store_test_key(1)).is_ok() == !erased);
}

// The queue's byte bound drops a queued write from memory, its record and its local copy staying. Once the queue
// empties, the writer re-sends it from the local copy, as an open re-sends an earlier run's records. Before, only
// the next open did: until a restart the remote lacked the entry, and the disk kept it for the write (eviction
// keeps an entry whose write is recorded).
TEST_CASE("a write the queue's byte bound dropped is re-sent by the same run once the queue empties",
          "[store][remote]") {
  test::TempDir dir;
  auto backend = std::make_shared<GateBackend>(/*hold_first=*/true);
  ChunkStoreOptions o = journal_options(dir / "s", backend);
  o.remote.max_queued_bytes = 1;  // every queued write beyond the newest is over the bound
  ChunkStore store(o);
  REQUIRE(store.put(store_test_key(1), store_test_value(1)).is_ok());
  REQUIRE(backend->wait_entered());  // 1 is in flight, held by the backend
  REQUIRE(store.put(store_test_key(2), store_test_value(2)).is_ok());
  REQUIRE(store.put(store_test_key(3), store_test_value(3)).is_ok());  // 2 is dropped: queued, not in flight
  CHECK(store.stats().remote.writes_dropped == 1);
  backend->release();
  REQUIRE(store.drain_remote(kWait));
  const RemoteStats rs = store.stats().remote;
  CHECK(rs.writes == 2);  // 1 and 3, this run's own
  CHECK(rs.resent == 1);  // 2, from the local copy
  for (int64_t i = 1; i <= 3; ++i) {
    INFO("entry " << i);
    Result<ValuePtr> v = remote_value(backend, store_test_key(i));
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *store_test_value(i)));
  }
}

namespace {

// What put_with_the_remote_down saw: the puts that returned ok and how many were refused for want of room (the
// reasons of those), the local copies left on disk (the stored keys a local get finds), and the remote's stats.
struct DownRun {
  std::vector<int64_t> stored;
  std::vector<std::string> refused;
  std::vector<int64_t> on_disk;
  RemoteStats remote;
  int64_t refusals = 0;
};

constexpr int64_t kHeldBudget = 256 << 10;  // a few of the values below: 1 to 100 KiB each

// Puts values 1 to 30 (not the multiples of 5: 2 MiB each, over the whole budget) into a store with a disk budget of
// kHeldBudget, its remote down throughout, and closes it (the queued writes dropped, their records kept as a kill
// would leave them). Every entry's write is then recorded and undelivered: eviction holds them up to `fraction`.
DownRun put_with_the_remote_down(const std::string& dir, const std::shared_ptr<GateBackend>& backend, double fraction) {
  backend->set_down(true);
  ChunkStoreOptions o = journal_options(dir, backend);
  o.host_budget_bytes = 0;  // the disk alone: what it holds is what a kill leaves
  o.disk_budget_bytes = kHeldBudget;
  o.remote.max_held_fraction = fraction;
  DownRun run;
  ChunkStore store(o);
  for (int64_t i = 1; i <= 30; ++i) {
    if (i % 5 == 0) continue;
    const Status s = store.put(store_test_key(i), store_test_value(i));
    if (s.is_ok()) {
      run.stored.push_back(i);
    } else {
      REQUIRE(s.code() == StatusCode::kOutOfCapacity);
      run.refused.push_back(std::to_string(i) + ": " + s.reason());
    }
  }
  GetOptions local_only;
  local_only.remote = false;
  for (int64_t i : run.stored) {
    if (store.get(store_test_key(i), local_only).is_ok()) run.on_disk.push_back(i);
  }
  run.remote = store.stats().remote;
  run.refusals = store.stats().refusals;
  return run;
}

}  // namespace

// A remote down for long (or never reachable) with a bounded disk: each put's entry is held on disk until its write
// is delivered. Before, every such entry was held, so once they filled the budget every put was refused
// (out_of_capacity, counted only in refusals) and the disk stopped caching. Now they are held up to
// RemoteOptions::max_held_fraction of the budget; past it the oldest go first, their writes given up (records
// dropped, counted in abandoned), so puts keep landing on disk; the held ones still reach the remote after a close
// (or a kill: test_store_remote_faults) by the next open's re-send. max_held_fraction = 1 keeps the old behaviour.
TEST_CASE("a remote down for long: entries held for it stay within max_held_fraction, puts keep landing on disk",
          "[store][remote]") {
  test::TempDir dir;
  auto backend = std::make_shared<GateBackend>(/*hold_first=*/false);
  SECTION("the default bound, half the budget") {
    const DownRun run = put_with_the_remote_down(dir / "s", backend, 0.5);
    INFO("refused: " << run.refused.size() << (run.refused.empty() ? "" : ", first " + run.refused.front()));
    CHECK(run.refused.empty());  // every put landed on disk
    CHECK(run.refusals == 0);
    REQUIRE(run.stored.size() == 24);
    // The oldest writes were given up with their local copies: the disk keeps the newest, and abandoned counts the
    // rest exactly.
    REQUIRE(run.remote.abandoned > 0);
    CHECK(run.remote.abandoned == static_cast<int64_t>(run.stored.size() - run.on_disk.size()));
    CHECK(std::equal(run.on_disk.begin(), run.on_disk.end(), run.stored.end() - run.on_disk.size()));
    CHECK(run.on_disk.back() == 29);
    // `orbit store stat` reads both from the index (summarize_store): the records kept, the writes given up.
    const StoreSummary summary = summarize_store(dir / "s");
    using Counts = std::vector<std::pair<std::string, int64_t>>;
    CHECK(summary.remote_pending == Counts{{"gate-memory", static_cast<int64_t>(run.on_disk.size())}});
    CHECK(summary.remote_abandoned == Counts{{"gate-memory", run.remote.abandoned}});
    // The held ones are re-sent by the next open once the remote is back; the given-up ones are not.
    backend->set_down(false);
    {
      ChunkStore reopened(journal_options(dir / "s", backend));
      REQUIRE(reopened.drain_remote(kWait));
      CHECK(reopened.stats().remote.resent == static_cast<int64_t>(run.on_disk.size()));
    }
    for (int64_t i : run.stored) {
      INFO("entry " << i);
      const bool held = std::find(run.on_disk.begin(), run.on_disk.end(), i) != run.on_disk.end();
      CHECK(remote_value(backend, store_test_key(i)).is_ok() == held);
    }
  }
  SECTION("max_held_fraction = 1: every one held, a put that needs their room refused") {
    const DownRun run = put_with_the_remote_down(dir / "s", backend, 1.0);
    REQUIRE(!run.refused.empty());
    CHECK(run.refused.front().find("kept until their remote write is delivered") != std::string::npos);
    CHECK(run.refusals == static_cast<int64_t>(run.refused.size()));
    CHECK(run.remote.abandoned == 0);
    CHECK(run.on_disk == run.stored);  // none evicted
    CHECK(summarize_store(dir / "s").remote_abandoned.empty());
  }
}

// The option is checked where the remote tier is made: outside 0..1 (or NaN) it is refused, naming it.
TEST_CASE("max_held_fraction outside 0..1 is refused, naming it", "[store][remote]") {
  auto backend = std::make_shared<GateBackend>(/*hold_first=*/false);
  for (double bad : {-0.1, 1.5, std::nan("")}) {
    INFO("max_held_fraction " << bad);
    ChunkStoreOptions o = journal_options("", backend);
    o.remote.max_held_fraction = bad;
    CHECK_THROWS_WITH(ChunkStore(o), Catch::Contains("max_held_fraction"));
  }
}

// A write given up past max_held_fraction while this run still had it queued was counted as abandoned and then
// delivered all the same once the remote took writes (the queue kept it), so abandoned overstated what the remote
// missed. Now giving a write up drops it from the queue, and one in flight (which may be delivered) is not given
// up: its entry stays held and another goes. The backend holds the first write (entry 1) in flight while the puts
// overflow the bound; once it is released, every write not counted as abandoned reaches the remote and none
// counted does.
TEST_CASE("a write counted as abandoned is never delivered: queued ones are dropped, the one in flight is kept",
          "[store][remote]") {
  test::TempDir dir;
  auto backend = std::make_shared<GateBackend>(/*hold_first=*/true);
  ChunkStoreOptions o = journal_options(dir / "s", backend);
  o.host_budget_bytes = 0;
  o.disk_budget_bytes = kHeldBudget;
  o.remote.max_held_fraction = 0.5;
  ChunkStore store(o);
  std::vector<int64_t> stored;
  for (int64_t i = 1; i <= 30; ++i) {
    if (i % 5 == 0) continue;  // over the whole budget
    if (store.put(store_test_key(i), store_test_value(i)).is_ok()) stored.push_back(i);
    if (i == 1) REQUIRE(backend->wait_entered());  // entry 1's write is in flight, held there
  }
  REQUIRE(stored.size() == 24);
  const int64_t abandoned = store.stats().remote.abandoned;
  REQUIRE(abandoned > 0);
  backend->release();
  REQUIRE(store.drain_remote(kWait));
  int64_t delivered = 0;
  for (int64_t i : stored) delivered += remote_value(backend, store_test_key(i)).is_ok() ? 1 : 0;
  CHECK(remote_value(backend, store_test_key(1)).is_ok());  // in flight throughout the give-ups: delivered
  CHECK(delivered + abandoned == static_cast<int64_t>(stored.size()));
  const RemoteStats rs = store.stats().remote;
  CHECK(rs.abandoned == abandoned);
  CHECK(rs.writes == delivered);
  CHECK(rs.resent == 0);  // the dropped writes' records went with their entries: nothing to re-send
  CHECK(summarize_store(dir / "s").remote_abandoned ==
        std::vector<std::pair<std::string, int64_t>>{{"gate-memory", abandoned}});
}

}  // namespace ORBIT_TEST_FILE
