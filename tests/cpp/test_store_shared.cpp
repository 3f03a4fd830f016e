// The chunk store shared by several processes through one directory, and the store's defences:
// entries committed by one process are found by another (also by engines: 0 repeated canonical
// forwards), a process's pinned entry is not evicted by another and its pin lapses when it dies (the
// leases themselves: test_store_leases.cpp), blob paths never leave DIR/blobs, a lost index, lost meta rows or a
// damaged schema are refused and repaired, read-only stores can be inspected.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "orbit/common/error.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/disk_tier.h"
#include "orbit/store/sqlite_index.h"
#include "test_child.h"
#include "test_helpers.h"
#include "test_store_checks.h"
#include "test_store_sqlite.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using namespace test::store_test_names;  // key(i), disk_options(dir) (test_store_values.h)
using test::alter_index;                 // test_store_sqlite.h
namespace fs = std::filesystem;

namespace {

// Rewrites the index row of `k` to name `blob` (what a hostile or broken index would hold).
void point_row_at(const std::string& dir, const std::string& k, const std::string& blob) {
  SqliteIndex index(dir + "/index.sqlite", SqliteIndex::Mode::kReadWrite);
  std::optional<DiskRow> row = index.row(k);
  REQUIRE(row.has_value());
  row->blob = blob;
  std::string replaced;
  // upsert would unlink the replaced blob: this is the test's doing, and the old blob is inside the store.
  REQUIRE(index.upsert(*row, &replaced).is_ok());
}

void delete_meta_rows(const std::string& path) { alter_index(path, "DELETE FROM meta"); }

int64_t count_blobs(const std::string& dir) {
  int64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/blobs")) n += e.path().extension() == ".blob";
  return n;
}

}  // namespace

TEST_CASE("a second process sees entries committed after it opened the directory", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  ChunkStore a(disk_options(d));
  ChunkStore b(disk_options(d));  // open at the same time (shared lock)
  for (int64_t i = 1; i <= 5; ++i) REQUIRE(a.put(key(i), test::store_test_value(i)).is_ok());
  for (int64_t i = 1; i <= 5; ++i) {
    CHECK(b.contains(key(i)));
    CHECK(b.residence(key(i)) == StoreTier::kDisk);
    Result<ValuePtr> v = b.get(key(i));
    REQUIRE(v.is_ok());
    CHECK(values_equal(*v.value(), *test::store_test_value(i)));
  }
  // The same content put by both is stored once.
  REQUIRE(b.put(key(3), test::store_test_value(3)).is_ok());
  REQUIRE(b.put(key(9), test::store_test_value(9)).is_ok());
  REQUIRE(a.put(key(9), test::store_test_value(9)).is_ok());
  CHECK(list_store(d).size() == 6);
  const VerifyReport report = verify_store(d);
  CHECK(report.clean());
  CHECK(report.unreferenced_blobs == 0);
}

TEST_CASE("a second process pins, unpins and erases entries committed after it opened", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  ChunkStore a(disk_options(d));
  ChunkStore b(disk_options(d));  // open first, before a's entries
  for (int64_t i = 1; i <= 2; ++i) REQUIRE(a.put(key(i), test::store_test_value(i)).is_ok());
  // b never read them: they were refused as "no entry" though contains() saw them.
  REQUIRE(b.contains(key(1)));
  CHECK(b.pin(key(1)).is_ok());
  CHECK(b.unpin(key(1)).is_ok());
  CHECK(b.erase(key(2)).is_ok());
  CHECK_FALSE(b.contains(key(2)));
  ChunkStore c(disk_options(d));
  CHECK_FALSE(c.contains(key(2)));  // gone from the shared disk (a's own memory may still hold its copy)
  CHECK(b.erase(key(2)).code() == StatusCode::kNotFound);
}

TEST_CASE("concurrent writer processes of overlapping keys leave one whole entry per key", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  {
    test::ChildProcess w1(ORBIT_STORE_CHILD_PATH, {"write", d, "1", "30"});
    test::ChildProcess w2(ORBIT_STORE_CHILD_PATH, {"write", d, "11", "30"});
    const int s1 = w1.wait(), s2 = w2.wait();
    REQUIRE((WIFEXITED(s1) && WEXITSTATUS(s1) == 0));
    REQUIRE((WIFEXITED(s2) && WEXITSTATUS(s2) == 0));
  }
  CHECK(list_store(d).size() == 40);
  const VerifyReport report = verify_store(d);
  CHECK(report.clean());
  CHECK(report.unreferenced_blobs == 0);
  ChunkStore store(disk_options(d));
  for (int64_t i = 1; i <= 40; ++i) CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));
}

TEST_CASE("8 processes that open the same new store at the same moment all succeed (50 rounds)", "[store][cpu]") {
  // Agents start in bursts: every process must open a store that none of them has created yet (WAL switch,
  // schema, format version, all racing), and each one's entry must be committed. The 8 children live through
  // all rounds (starting a process costs more than a round); each round starts them on one line and uses a
  // new store directory.
  constexpr int kProcesses = 8, kRounds = 50;
  test::TempDir dir;
  const std::string d = dir.path().string();
  std::vector<std::unique_ptr<test::ChildProcess>> children;
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(std::make_unique<test::ChildProcess>(
        ORBIT_STORE_CHILD_PATH, std::vector<std::string>{"race", d, std::to_string(kRounds), std::to_string(i + 1)}));
    INFO("process " << i << ": spawn errno " << children.back()->spawn_error());
    REQUIRE(children.back()->started());
  }
  for (int round = 0; round < kRounds; ++round) {
    const std::string store = d + "/" + std::to_string(round);
    std::string line;
    for (int i = 0; i < kProcesses; ++i) {
      INFO("round " << round << ", process " << i);
      REQUIRE(children[i]->next_line(&line));
      REQUIRE(line == "ready " + std::to_string(round));  // or "failed <round - 1>: <why>"
    }
    for (auto& c : children) REQUIRE(c->write_line("go"));  // all of them open it now
    if (round > 0) {
      const std::string previous = d + "/" + std::to_string(round - 1);
      CHECK(list_store(previous).size() == static_cast<std::size_t>(kProcesses));
      CHECK(verify_store(previous).clean());
    }
  }
  for (int i = 0; i < kProcesses; ++i) {
    std::string line;
    INFO("process " << i);
    REQUIRE(children[i]->next_line(&line));
    CHECK(line == "done");
    const int status = children[i]->wait();
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  const std::string last = d + "/" + std::to_string(kRounds - 1);
  CHECK(list_store(last).size() == static_cast<std::size_t>(kProcesses));
  CHECK(verify_store(last).clean());
}

TEST_CASE("eviction never removes another process's pinned entry; the pin lapses when that process dies",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  // A lease of 6 s, renewed every 2 s: its renewals wait for the writer's SQLite transactions below, and on
  // a loaded machine (the suite beside two busy loops) a 1.5 s lease lapsed while its holder lived. Once the
  // holder is dead, the test waits for the lapse (at most twice the lease) instead of sleeping a fixed time.
  constexpr int64_t kLeaseMs = 6000;
  test::ChildProcess holder(ORBIT_STORE_CHILD_PATH, {"hold", d, "1", std::to_string(kLeaseMs)});
  std::string line;
  REQUIRE(holder.next_line(&line));
  REQUIRE(line == "pinned");
  CHECK(list_store(d).at(0).pinned);
  ChunkStoreOptions o = disk_options(d);
  o.disk_budget_bytes = 600000;  // a few entries: every put evicts
  o.host_budget_bytes = 0;
  {
    ChunkStore store(o);
    for (int64_t i = 2; i <= 30; ++i) (void)store.put(key(i), test::store_test_value(i));
    CHECK(store.contains(key(1)));  // pinned by the live holder: never evicted
    CHECK(store.stats().tiers[2].evictions >= 5);
  }
  holder.kill();
  (void)holder.wait();
  const auto killed = std::chrono::steady_clock::now();
  bool lapsed = false;
  for (int64_t i = 31; !lapsed && std::chrono::steady_clock::now() - killed < std::chrono::milliseconds(2 * kLeaseMs);
       i += 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    ChunkStore store(o);
    for (int64_t j = i; j < i + 10; ++j) (void)store.put(key(j), test::store_test_value(j));
    lapsed = !store.contains(key(1));
  }
  CHECK(lapsed);  // the crashed process's pin lapsed, and eviction took its entry
  // ... and not before its lease ran out.
  CHECK(std::chrono::steady_clock::now() - killed >= std::chrono::milliseconds(kLeaseMs / 2));
}

TEST_CASE("two engine processes share one directory: the second encodes no canonical", "[store][cpu][model]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::ChildProcess first(ORBIT_ENGINE_CHILD_PATH, {test::stories_path(), d, "-", "6"});
  std::string line;
  REQUIRE(first.next_line(&line));
  const auto a = nlohmann::json::parse(line);
  CHECK(a["canonicals_encoded"] == 6);
  // The first process still has the store open (it waits on stdin) while the second one runs.
  test::ChildProcess second(ORBIT_ENGINE_CHILD_PATH, {test::stories_path(), d, "-", "6"});
  REQUIRE(second.next_line(&line));
  const auto b = nlohmann::json::parse(line);
  CHECK(b["canonicals_encoded"] == 0);
  CHECK(b["disk_hits"] >= 6);  // every canonical came from the shared directory
  first.close_stdin();
  second.close_stdin();
  CHECK(WEXITSTATUS(first.wait()) == 0);
  CHECK(WEXITSTATUS(second.wait()) == 0);
}

TEST_CASE("a blob path that leaves DIR/blobs is never read or deleted", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = (dir.path() / "store").string();
  const std::string victim = (dir.path() / "victim.txt").string();
  std::ofstream(victim) << "not the store's";
  const std::string outside = (dir.path() / "outside").string();
  fs::create_directories(outside);
  test::write_entries(d, 3);
  point_row_at(d, key(1), "../victim.txt");
  point_row_at(d, key(2), victim);  // absolute
  fs::create_directory_symlink(outside, d + "/blobs/zz");
  std::ofstream(outside + "/x.blob") << "outside";
  point_row_at(d, key(3), "blobs/zz/x.blob");

  const VerifyReport report = verify_store(d);
  REQUIRE(report.problems.size() == 3);
  for (const VerifyProblem& p : report.problems) CHECK_THAT(p.reason, Contains("must stay inside"));
  {
    ChunkStore store(disk_options(d));
    for (int64_t i = 1; i <= 3; ++i) {
      Result<ValuePtr> v = store.get(key(i));
      CHECK_FALSE(v.is_ok());  // served as a miss, reported
      // Rewriting the entry replaces the bad row; the file it named must survive.
      REQUIRE(store.put(key(i), test::store_test_value(i)).is_ok());
      CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));
    }
    CHECK(store.stats().corrupt_reads == 3);
  }
  CHECK(fs::exists(victim));
  CHECK(fs::exists(outside + "/x.blob"));
  (void)gc_store(d);
  CHECK(fs::exists(outside + "/x.blob"));
}

TEST_CASE("a blob directory that is a symlink out of DIR/blobs receives no write", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = (dir.path() / "store").string();
  const std::string outside = (dir.path() / "outside").string();
  fs::create_directories(outside);
  test::write_entries(d, 1);
  // Blobs live in DIR/blobs/<first two characters of the key>/: make the next entry's directory a symlink.
  int64_t i = 2;
  while (fs::exists(d + "/blobs/" + key(i).substr(0, 2))) ++i;
  fs::create_directory_symlink(outside, d + "/blobs/" + key(i).substr(0, 2));
  ChunkStore store(disk_options(d));
  REQUIRE(store.put(key(i), test::store_test_value(i)).is_ok());  // kept in memory, the disk reported degraded
  CHECK(fs::is_empty(outside));
  const StoreStats stats = store.stats();
  CHECK(stats.disk_degraded);
  CHECK_THAT(stats.disk_warning, Contains("symlink") && Contains("must stay inside"));
  CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));
}

TEST_CASE("a deleted index or lost meta rows are refused, and orbit store repair rebuilds them", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 4);
  SECTION("meta rows deleted: another model does not adopt the store") {
    delete_meta_rows(d + "/index.sqlite");
    ChunkStoreOptions other = disk_options(d);
    other.model_fingerprint = "another-model";
    CHECK_THROWS_WITH(ChunkStore(other), Contains("meta rows were deleted") && Contains("orbit store repair"));
    CHECK_THROWS_WITH(ChunkStore(disk_options(d)), Contains("meta rows were deleted"));
    // The offline readers (orbit store ls|stat|verify) point to repair too, not to "not an orbit store".
    CHECK_THROWS_WITH(orbit::summarize_store(d), Contains("meta rows were deleted") && Contains("orbit store repair"));
    CHECK_THROWS_WITH(orbit::verify_store(d), Contains("meta rows were deleted") && Contains("orbit store repair"));
  }
  SECTION("a format version that is no number: refused naming repair, which restores it") {
    alter_index(d + "/index.sqlite", "UPDATE meta SET value = '1x' WHERE name = 'format_version'");
    CHECK_THROWS_WITH(ChunkStore(disk_options(d)),
                      Contains("format version '1x' is damaged") && Contains("orbit store repair"));
    CHECK_THROWS_WITH(orbit::verify_store(d), Contains("'1x' is damaged") && Contains("orbit store repair"));
  }
  SECTION("index.sqlite deleted: refused instead of silently orphaning every blob") {
    for (const char* f : {"/index.sqlite", "/index.sqlite-wal", "/index.sqlite-shm"}) fs::remove(d + f);
    CHECK_THROWS_WITH(ChunkStore(disk_options(d)),
                      Contains("index.sqlite is missing") && Contains("4 blobs") && Contains("orbit store repair"));
    CHECK_THROWS_WITH(list_store(d), Contains("orbit store repair"));
  }
  const test::CliRun repair = test::cli("store repair --store " + d);
  INFO(repair.out);
  REQUIRE(repair.status == 0);
  CHECK_THAT(repair.out, Contains(test::kStoreTestFingerprint));
  if (repair.out.find("'1x'") != std::string::npos) CHECK_THAT(repair.out, Contains("was damaged (not a number)"));
  ChunkStore store(disk_options(d));
  for (int64_t i = 1; i <= 4; ++i) CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));
  CHECK(verify_store(d).clean());
}

// `orbit store repair` rebuilding a lost index, killed part way by SIGXFSZ (a file-size limit its index writes
// pass: the shell's ulimit -f, in 512-byte blocks for /bin/sh), then `orbit store gc`: a repair that committed
// the fingerprint and some rows left a store that opens as whole, whose other blobs gc took for garbage.
TEST_CASE("a repair killed part way leaves nothing gc takes: a second repair restores every entry",
          "[store][cpu][kill]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  std::vector<int64_t> ids;
  {
    ChunkStore store(disk_options(d));
    for (int64_t i = 1; i <= 25; ++i) {
      if (i % 5 == 0) continue;  // the small values: 20 entries of at most 100 KiB
      REQUIRE(store.put(key(i), test::store_test_value(i)).is_ok());
      ids.push_back(i);
    }
  }
  for (const char* f : {"/index.sqlite", "/index.sqlite-wal", "/index.sqlite-shm"}) fs::remove(d + f);
  // 120 blocks: killed inside the transaction of the rows (the old repair: after its first few per-row commits);
  // 256: the repair completes (the old one was killed after half of its per-row commits).
  const std::string blocks = GENERATE(as<std::string>{}, "120", "256");
  INFO("ulimit -f " << blocks);
  const test::CliRun killed =
      test::run_command("ulimit -f " + blocks + "; exec " + std::string(ORBIT_CLI_PATH) + " store repair --store " + d);
  INFO(killed.out);
  const test::CliRun gc = test::cli("store gc --store " + d);  // refused, or removes nothing of the entries
  INFO(gc.out);
  const test::CliRun repair = test::cli("store repair --store " + d);
  INFO(repair.out);
  REQUIRE(repair.status == 0);
  const VerifyReport report = test::reopen_and_verify(d, ids);
  CHECK(report.checked == static_cast<int64_t>(ids.size()));
  CHECK(report.unreferenced_blobs == 0);
}

TEST_CASE("an index that lost its entries table or a column is refused, never collected; repair restores it",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string(), index = d + "/index.sqlite";
  test::write_entries(d, 6);
  REQUIRE(count_blobs(d) == 6);
  SECTION("entries dropped") { alter_index(index, "DROP TABLE entries"); }
  SECTION("entries and leases dropped") { alter_index(index, "DROP TABLE entries; DROP TABLE leases"); }
  SECTION("a column of entries dropped") { alter_index(index, "ALTER TABLE entries DROP COLUMN checksum"); }
  // Read as an empty store, every blob would be garbage: gc refuses, naming the index, and deletes nothing.
  const test::CliRun gc = test::cli("store gc --store " + d);
  INFO(gc.out);
  CHECK(gc.status == 1);
  CHECK_THAT(gc.out, Contains(index) && Contains("schema is damaged") && Contains("orbit store repair --store " + d));
  CHECK_THROWS_WITH(gc_store(d), Contains(index) && Contains("schema is damaged"));
  CHECK(count_blobs(d) == 6);
  // The engine's store refuses it too (it does not open as an empty store), and so do ls, stat and verify.
  CHECK_THROWS_WITH(ChunkStore(disk_options(d)),
                    Contains(index) && Contains("schema is damaged") && Contains("orbit store repair --store " + d));
  CHECK_THROWS_WITH(verify_store(d), Contains(index) && Contains("schema is damaged"));
  CHECK_THROWS_WITH(summarize_store(d), Contains(index) && Contains("schema is damaged"));
  CHECK(count_blobs(d) == 6);

  const test::CliRun repair = test::cli("store repair --store " + d);
  INFO(repair.out);
  REQUIRE(repair.status == 0);
  CHECK_THAT(repair.out, Contains("6 rows restored"));
  {
    ChunkStore store(disk_options(d));
    for (int64_t i = 1; i <= 6; ++i) CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));
  }
  CHECK(verify_store(d).clean());
  CHECK(gc_store(d).removed_blobs == 0);
  CHECK(count_blobs(d) == 6);
}

TEST_CASE("an index without the leases table (a store from before leases) opens and gets one", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 3);
  alter_index(d + "/index.sqlite", "DROP TABLE leases");
  CHECK(list_store(d).size() == 3);
  CHECK(gc_store(d).removed_blobs == 0);
  ChunkStore store(disk_options(d));
  for (int64_t i = 1; i <= 3; ++i) CHECK(values_equal(*store.get(key(i)).value(), *test::store_test_value(i)));
  REQUIRE(store.pin(key(1)).is_ok());
  CHECK(count_blobs(d) == 3);
}

TEST_CASE("an index whose remote journal has no kind column (writes only) opens and gets one", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 2);
  // remote_pending as the build before journaled erases made it, holding one write's record.
  alter_index(
      d + "/index.sqlite",
      ("DROP TABLE remote_pending; CREATE TABLE remote_pending(seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT "
       "NOT NULL, remote TEXT NOT NULL, UNIQUE(key, remote)); INSERT INTO remote_pending(key, remote) VALUES('" +
       key(1) + "', 'r')")
          .c_str());
  CHECK(list_store(d).size() == 2);  // a reader does not call the missing column damage
  SqliteIndex index(d + "/index.sqlite", SqliteIndex::Mode::kReadWrite);
  std::vector<RemotePendingRecord> records = index.remote_pending("r", 0, 100, 10);
  REQUIRE(records.size() == 1);
  CHECK(records[0].key == key(1));
  CHECK(!records[0].erase);  // the older build recorded writes only
  // An erase of the same key takes the record over, with a new seq (so that clearing the write's record by its seq
  // leaves it); another key's erase is a record of its own.
  const int64_t first_seq = records[0].seq;
  int64_t erase_seq = 0, second_seq = 0, rewrite_seq = 0;
  REQUIRE(index.record_remote_pending(key(1), "r", /*erase=*/true, &erase_seq).is_ok());
  REQUIRE(index.record_remote_pending(key(2), "r", /*erase=*/true, &second_seq).is_ok());
  REQUIRE(index.record_remote_pending(key(2), "r", /*erase=*/false, &rewrite_seq).is_ok());  // put after its erase
  CHECK(erase_seq > first_seq);
  CHECK(rewrite_seq > second_seq);
  records = index.remote_pending("r", 0, 100, 10);
  REQUIRE(records.size() == 2);
  CHECK(records[0].key == key(1));
  CHECK(records[0].seq == erase_seq);
  CHECK(records[0].erase);
  CHECK(records[1].key == key(2));
  CHECK(records[1].seq == rewrite_seq);
  CHECK(!records[1].erase);
  // Clearing by an older seq (the write acknowledged before the put after the erase was recorded) keeps the newer
  // record; clearing by its own seq takes it.
  REQUIRE(index.clear_remote_pending({{second_seq, key(2), true}, {erase_seq, key(1), true}}, "r").is_ok());
  records = index.remote_pending("r", 0, 100, 10);
  REQUIRE(records.size() == 1);
  CHECK(records[0].seq == rewrite_seq);
  REQUIRE(index.clear_remote_pending({{rewrite_seq, key(2), false}}, "r").is_ok());
  CHECK(index.remote_pending("r", 0, 100, 10).empty());
}

TEST_CASE("orbit store with an empty --store, and on a read-only store", "[store][cpu]") {
  const test::CliRun empty = test::cli("store ls --store ''");
  CHECK(empty.status == 1);  // a clear error, not an internal one (3)
  CHECK_THAT(empty.out, Contains("--store is empty"));
  CHECK_THROWS_WITH(list_store(""), Contains("store directory is empty"));

  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 3);
  REQUIRE(test::run_command("chmod -R a-w " + d).status == 0);
  // As root, file modes do not stop writes: run the CLI as an unprivileged user instead.
  const std::string as = test::as_unprivileged();
  for (const std::string sub : {"ls", "stat", "verify"}) {
    const test::CliRun r = test::run_command(as + ORBIT_CLI_PATH + " store " + sub + " --store " + d);
    INFO(sub << ": " << r.out);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, !Contains("readonly database"));
  }
  CHECK(test::run_command(as + ORBIT_CLI_PATH + " store ls --store " + d).out.find("3 entries") != std::string::npos);
  REQUIRE(test::run_command("chmod -R u+w " + d).status == 0);
}

TEST_CASE("index rows with a non-UTF-8 key or a kind or encoding the blob contradicts are reported and repaired",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 4);
  const std::string idx = d + "/index.sqlite";
  const std::string k1 = key(1);
  alter_index(idx,
              ("UPDATE entries SET key = CAST(X'ff41' || substr(key, 3) AS TEXT) WHERE key = '" + k1 + "'").c_str());
  alter_index(idx, ("UPDATE entries SET kind = 1 WHERE key = '" + key(2) + "'").c_str());      // a patch, it says
  alter_index(idx, ("UPDATE entries SET encoding = 1 WHERE key = '" + key(3) + "'").c_str());  // int8, it says

  // Every text field is valid UTF-8 (what `orbit store ls --json` and Python's str need): the bad byte shows
  // as \xff.
  const std::vector<StoreEntryInfo> entries = list_store(d);
  REQUIRE(entries.size() == 4);
  nlohmann::json listed = nlohmann::json::array();
  for (const StoreEntryInfo& e : entries) listed.push_back({e.key, e.blob_path, e.checksum});
  CHECK_NOTHROW(listed.dump());
  CHECK_THAT(listed.dump(), Contains("\\\\xffA" + k1.substr(2)));
  const test::CliRun ls = test::cli("store ls --json --store " + d);
  INFO(ls.out);
  CHECK(ls.status == 0);

  const VerifyReport report = verify_store(d);
  REQUIRE(report.problems.size() == 3);
  std::map<std::string, std::string> reasons;
  for (const VerifyProblem& p : report.problems) reasons[p.key] = p.reason;
  CHECK_THAT(reasons["\\xffA" + k1.substr(2)], Contains("not a store key"));
  CHECK_THAT(reasons[key(2)], Contains("the index says kind patch") && Contains("the blob holds canonical, exact"));
  CHECK_THAT(reasons[key(3)], Contains("encoding int8") && Contains("the blob holds canonical, exact"));
  const test::CliRun verify = test::cli("store verify --json --store " + d);
  INFO(verify.out);
  CHECK(verify.status == 1);  // bad entries, not an internal error (3)
  CHECK_NOTHROW(nlohmann::json::parse(verify.out.substr(verify.out.find('{'))));

  // Repair drops the three rows and restores them from their blobs, as the blobs say.
  const test::CliRun repair = test::cli("store repair --json --store " + d);
  INFO(repair.out);
  REQUIRE(repair.status == 0);
  const nlohmann::json repaired = nlohmann::json::parse(repair.out.substr(repair.out.find('{')));
  CHECK(repaired["rows_dropped"] == 3);
  CHECK(repaired["rows_restored"] == 3);
  CHECK(verify_store(d).clean());
  for (const StoreEntryInfo& e : list_store(d))
    CHECK((e.kind == EntryKind::kCanonical && e.encoding == BlobEncoding::kExact));
}

TEST_CASE("an index whose entries table is damaged past its schema is refused with the way to repair", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 3);
  const std::string idx = d + "/index.sqlite";
  int64_t root = 0, page_size = 0;
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(idx.c_str(), &db) == SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db,
                               "SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master "
                               "WHERE name = 'entries'",
                               -1, &stmt, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
    root = sqlite3_column_int64(stmt, 0);
    page_size = sqlite3_column_int64(stmt, 1);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
  }
  {  // the table's root page loses its page type: the schema still reads, the rows do not
    std::fstream f(idx, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((root - 1) * page_size);
    f.put('\0');
  }
  const std::string repair = "orbit store repair --store " + d;
  CHECK_THROWS_WITH(list_store(d), Contains("is damaged") && Contains(repair));
  CHECK_THROWS_WITH(summarize_store(d), Contains("is damaged") && Contains(repair));
  CHECK_THROWS_WITH(verify_store(d), Contains("is damaged") && Contains(repair));
  CHECK_THROWS_WITH(gc_store(d), Contains("is damaged") && Contains(repair));
  CHECK(count_blobs(d) == 3);
  const RepairReport repaired = repair_store(d);
  CHECK(repaired.rows_restored == 3);
  CHECK(verify_store(d).clean());
}

TEST_CASE("gc keeps the blob of a row whose path was damaged, for repair; blobs repair would not restore go",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 3);
  std::string own;  // key(1)'s blob
  for (const StoreEntryInfo& e : list_store(d)) own = e.key == key(1) ? e.blob_path : own;
  REQUIRE_FALSE(own.empty());
  point_row_at(d, key(1), "blobs/" + key(1).substr(0, 2) + "/" + key(1) + ".0000000000000000.blob");  // no such file
  const std::string orphan = d + "/blobs/" + key(4).substr(0, 2) + "/" + key(4) + ".0123456789abcdef.blob";
  fs::create_directories(fs::path(orphan).parent_path());
  fs::copy_file(own, orphan);  // an unreferenced blob that does not verify (cut short): repair rejects it
  fs::resize_file(orphan, fs::file_size(orphan) - 3);

  const GcReport report = gc_store(d);
  CHECK(report.removed_paths == std::vector<std::string>{orphan});
  CHECK(report.kept_paths == std::vector<std::string>{own});
  CHECK(fs::exists(own));
  const test::CliRun gc = test::cli("store gc --store " + d);
  INFO(gc.out);
  CHECK_THAT(gc.out, Contains("kept " + own) && Contains("orbit store repair --store " + d));
  CHECK(repair_store(d).rows_restored == 1);
  CHECK(verify_store(d).clean());
  CHECK(list_store(d).size() == 3);
}

TEST_CASE("index rows whose value_bytes or blob_bytes the blob contradicts are reported by verify and repaired",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 4);
  const int64_t in_memory = summarize_store(d).value_bytes;
  REQUIRE(in_memory > 0);
  const std::string idx = d + "/index.sqlite";
  alter_index(idx, ("UPDATE entries SET value_bytes = -5 WHERE key = '" + key(1) + "'").c_str());
  alter_index(idx, ("UPDATE entries SET value_bytes = 4611686018427387904 WHERE key = '" + key(2) + "'").c_str());
  alter_index(idx, ("UPDATE entries SET blob_bytes = blob_bytes + 1 WHERE key = '" + key(3) + "'").c_str());
  REQUIRE(summarize_store(d).value_bytes != in_memory);

  const VerifyReport report = verify_store(d);
  REQUIRE(report.problems.size() == 3);
  std::map<std::string, std::string> reasons;
  for (const VerifyProblem& p : report.problems) reasons[p.key] = p.reason;
  CHECK_THAT(reasons[key(1)], Contains("the index says value_bytes -5") && Contains("bytes"));
  CHECK_THAT(reasons[key(2)], Contains("value_bytes 4611686018427387904"));
  CHECK_THAT(reasons[key(3)], Contains("in the index"));
  const test::CliRun verify = test::cli("store verify --store " + d);
  INFO(verify.out);
  CHECK(verify.status == 1);
  CHECK_THAT(verify.out, Contains(key(1)) && Contains("value_bytes -5"));

  // Repair drops the three rows and restores them from their blobs, with the sizes the blobs give.
  const RepairReport repaired = repair_store(d);
  CHECK(repaired.rows_dropped == 3);
  CHECK(repaired.rows_restored == 3);
  CHECK(verify_store(d).clean());
  CHECK(summarize_store(d).value_bytes == in_memory);
}

}  // namespace ORBIT_TEST_FILE
