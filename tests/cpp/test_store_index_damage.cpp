// A store whose index.sqlite had bytes flipped (bit rot, a torn write, a broken tool): gc must never delete
// a blob that `orbit store repair` could still rebuild a row from, and still frees true orphans on a healthy
// index. The damage is done on the file's bytes at offsets found by searching for a row's text.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <set>

#include "orbit/common/error.h"
#include "orbit/common/warn.h"
#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "test_helpers.h"
#include "test_store_checks.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using namespace test::store_test_names;  // key(i), disk_options(dir) (test_store_values.h)
namespace fs = std::filesystem;

namespace {

constexpr int64_t kEntries = 300;

// A store of kEntries entries whose index holds every row in index.sqlite itself (WAL checkpointed).
void make_store(const std::string& d) {
  test::write_entries(d, kEntries);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((d + "/index.sqlite").c_str(), &db) == SQLITE_OK);
  const int rc = sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}

std::string blob_of(const std::string& d, const std::string& k) {
  for (const StoreEntryInfo& e : list_store(d)) {
    if (e.key == k) return e.blob_path;
  }
  FAIL("no row of " << k);
  return "";
}

// Which copies of a row's key flip_row damages.
enum class KeyCopies { kNone, kIndexOnly, kBoth };

// Flips bytes of the row of `k` in index.sqlite: one byte of its blob path (inside the file name's nonce;
// unless `flip_path` is false) and the same byte of the copies of its key `which` says. The key is in the table's
// record (just before the blob path: the record holds key, kind, encoding, blob in that order) and in the index of
// keys, which `ORDER BY key` reads it from. Both flipped alike, SQLite's own checks still pass.
void flip_row(const std::string& d, const std::string& k, KeyCopies which, bool flip_path = true) {
  const std::string path = d + "/index.sqlite";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string blob = fs::relative(blob_of(d, k), d).string();  // blobs/xx/KEY.NONCE.blob
  const std::size_t at = bytes.find(blob);
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(blob, at + 1) == std::string::npos);
  std::vector<std::size_t> offsets;
  if (flip_path) offsets.push_back(at + blob.size() - 6);  // the nonce's last character
  const std::size_t key_in_blob = at + blob.find(k);
  int copies = 0;
  for (std::size_t o = bytes.find(k); o != std::string::npos; o = bytes.find(k, o + 1)) {
    if (o == key_in_blob) continue;
    ++copies;
    const bool in_table = o < at && at - (o + k.size()) < 8;
    if (which == KeyCopies::kBoth || (which == KeyCopies::kIndexOnly && !in_table)) offsets.push_back(o + 10);
  }
  REQUIRE(copies == 2);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  for (std::size_t o : offsets) {
    f.seekp(static_cast<std::streamoff>(o));
    f.put(bytes[o] == 'a' ? 'b' : 'a');  // still a hex digit: the damaged key still looks like a store key
  }
}

PutOptions put_replacing() {
  PutOptions put;
  put.replace = true;
  return put;
}

std::set<std::string> keys_of(const std::string& d) {
  std::set<std::string> out;
  for (const StoreEntryInfo& e : list_store(d)) out.insert(e.key);
  return out;
}

}  // namespace

TEST_CASE("gc keeps a good blob whose row's key and blob path bytes were flipped; repair restores the row",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  make_store(d);
  const int64_t victim = 137;
  const std::string own = blob_of(d, key(victim));
  flip_row(d, key(victim), KeyCopies::kBoth);
  REQUIRE(keys_of(d).count(key(victim)) == 0);  // no row names the key any more: the blob looks orphaned
  REQUIRE(summarize_store(d).unreferenced_blobs == 1);

  const GcReport dry = gc_store(d, GcOptions{true});
  CHECK(dry.removed_blobs == 0);
  CHECK(dry.kept_paths == std::vector<std::string>{own});
  const test::CliRun gc = test::cli("store gc --store " + d);
  INFO(gc.out);
  CHECK(gc.status == 0);
  CHECK_THAT(gc.out, Contains("kept " + own) && Contains("orbit store repair --store " + d));
  REQUIRE(fs::exists(own));

  const RepairReport repaired = repair_store(d);
  CHECK(repaired.rows_dropped == 1);
  CHECK(repaired.rows_restored == 1);
  CHECK(verify_store(d).clean());
  CHECK(keys_of(d).size() == kEntries);
  CHECK(keys_of(d).count(key(victim)) == 1);
  const GcReport after = gc_store(d);  // a healthy index again: nothing is garbage
  CHECK(after.removed_blobs == 0);
  CHECK(after.kept_paths.empty());
  CHECK(fs::exists(own));
}

TEST_CASE("gc refuses an index SQLite finds inconsistent (one copy of a key flipped), naming repair", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  make_store(d);
  const int64_t victim = 61;
  const std::string own = blob_of(d, key(victim));
  flip_row(d, key(victim), KeyCopies::kIndexOnly);
  REQUIRE(keys_of(d).count(key(victim)) == 0);

  const std::string repair = "orbit store repair --store " + d;
  CHECK_THROWS_WITH(gc_store(d, GcOptions{true}), Contains("index.sqlite is damaged") && Contains(repair));
  CHECK_THROWS_WITH(gc_store(d), Contains("index.sqlite is damaged") && Contains(repair));
  const test::CliRun gc = test::cli("store gc --store " + d);
  INFO(gc.out);
  CHECK(gc.status != 0);
  CHECK_THAT(gc.out, Contains("is damaged") && Contains(repair));
  REQUIRE(fs::exists(own));

  repair_store(d);
  CHECK(verify_store(d).clean());
  CHECK(keys_of(d).size() == kEntries);
  CHECK(keys_of(d).count(key(victim)) == 1);
  CHECK(gc_store(d).removed_blobs == 0);
  CHECK(fs::exists(own));
}

TEST_CASE("gc keeps a good blob whose row's key and path a tool rewrote, frees what repair would not restore",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  make_store(d);
  const std::string own = blob_of(d, key(5));
  const fs::path shard = fs::path(own).parent_path();
  // A superseded blob of a key whose row is healthy (a rewrite that died before unlinking the old blob).
  const std::string superseded = shard / (key(5) + ".00000000deadbeef.blob");
  fs::copy_file(own, superseded);
  // An unreferenced blob that does not verify (its trailer is cut off).
  const std::string torn = shard / (key(6) + ".00000000deadbeef.blob");
  fs::copy_file(blob_of(d, key(6)), torn);
  fs::resize_file(torn, fs::file_size(torn) - 3);
  // Row 200's key and blob path rewritten consistently (SQLite's own checks pass): its blob looks orphaned.
  const std::string kept = blob_of(d, key(200));
  const std::string other = key(kEntries + 50);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((d + "/index.sqlite").c_str(), &db) == SQLITE_OK);
  const std::string sql = "UPDATE entries SET key = '" + other + "', blob = 'blobs/zz/" + other +
                          ".0000000000000000.blob' WHERE key = '" + key(200) + "'";
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);

  const GcReport report = gc_store(d);
  CHECK(report.kept_paths == std::vector<std::string>{kept});
  CHECK(std::set<std::string>(report.removed_paths.begin(), report.removed_paths.end()) ==
        std::set<std::string>{superseded, torn});
  CHECK(fs::exists(kept));
  CHECK(fs::exists(own));

  const RepairReport repaired = repair_store(d);
  CHECK(repaired.rows_dropped == 1);
  CHECK(repaired.rows_restored == 1);
  CHECK(verify_store(d).clean());
  CHECK(keys_of(d).count(key(200)) == 1);

  // On the healthy index, a verified blob of a key no row names (a write that died before its commit, here
  // a blob of another store of the same model) is a true orphan and goes.
  test::TempDir other_dir;
  {
    ChunkStore store(disk_options(other_dir.path().string()));
    REQUIRE(store.put(key(kEntries + 1), test::store_test_value(kEntries + 1)).is_ok());
  }
  const std::string from = blob_of(other_dir.path().string(), key(kEntries + 1));
  const std::string orphan = shard / fs::path(from).filename();
  fs::copy_file(from, orphan);
  const GcReport healthy = gc_store(d);
  CHECK(healthy.removed_paths == std::vector<std::string>{orphan});
  CHECK(healthy.kept_paths.empty());
  CHECK(keys_of(d).size() == kEntries);
}

TEST_CASE("verify reports a key index that disagrees with its table; repair reindexes it, then gc runs",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  make_store(d);
  const int64_t victim = 222;
  const std::string own = blob_of(d, key(victim));
  flip_row(d, key(victim), KeyCopies::kIndexOnly, /*flip_path=*/false);  // the table's row is intact

  const VerifyReport report = verify_store(d);
  CHECK_FALSE(report.clean());
  CHECK_THAT(report.index_damage, Contains("missing from index sqlite_autoindex_entries_1"));
  const test::CliRun text = test::cli("store verify --store " + d);
  INFO(text.out);
  CHECK(text.status == 1);
  CHECK_THAT(text.out, Contains("DAMAGED INDEX " + d + "/index.sqlite") && Contains("missing from index") &&
                           Contains("orbit store repair --store " + d));
  const test::CliRun js = test::cli("store verify --json --store " + d);
  INFO(js.out);
  CHECK(js.status == 1);
  CHECK_THAT(js.out, Contains("\"index_damage\": \"row ") && Contains("\"clean\": false"));

  const test::CliRun repaired = test::cli("store repair --json --store " + d);
  INFO(repaired.out);
  CHECK(repaired.status == 0);
  CHECK_THAT(repaired.out, Contains("\"index_reindexed\": true") && Contains("REINDEX rebuilt its indexes"));
  CHECK_THAT(repaired.out, Contains("\"rows_dropped\": 0") && Contains("\"rows_restored\": 0"));
  const VerifyReport after = verify_store(d);
  CHECK(after.clean());
  CHECK(after.index_damage.empty());
  CHECK(after.checked == kEntries);
  CHECK(keys_of(d).count(key(victim)) == 1);
  CHECK_FALSE(repair_store(d).index_reindexed);  // a consistent index is left alone
  const GcReport gc = gc_store(d);
  CHECK(gc.removed_blobs == 0);
  CHECK(gc.kept_paths.empty());
  CHECK(fs::exists(own));
}

TEST_CASE("a store opened on a key index that disagrees with its table reindexes it, warning, and loses nothing",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  make_store(d);
  const int64_t victim = 222;
  flip_row(d, key(victim), KeyCopies::kIndexOnly, /*flip_path=*/false);  // the table's row is intact
  REQUIRE(keys_of(d).count(key(victim)) == 0);  // read through the key index, the row is hidden

  std::vector<std::string> said;
  const WarningSink previous = set_warning_sink([&](std::string m) { said.push_back(std::move(m)); });
  const std::unique_ptr<void, std::function<void(void*)>> restore(&said, [&](void*) { set_warning_sink(previous); });
  {
    ChunkStore store(disk_options(d));
    REQUIRE(said.size() == 1);
    CHECK_THAT(said.front(), Contains("its index " + d + "/index.sqlite disagreed with its table") &&
                                 Contains("missing from index") && Contains("REINDEX rebuilt its indexes"));
    const Result<ValuePtr> got = store.get(key(victim));
    REQUIRE(got.is_ok());
    CHECK(values_equal(*got.value(), *test::store_test_value(victim)));
    // A put of the hidden key must not add a second row of it.
    REQUIRE(store.put(key(victim), test::store_test_value(victim), put_replacing()).is_ok());
  }
  const VerifyReport after = verify_store(d);
  CHECK(after.clean());
  CHECK(after.checked == kEntries);
  CHECK(keys_of(d).size() == kEntries);
}

TEST_CASE("ls, stat and verify of an index that lost its first commits with its WAL name repair", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  make_store(d);
  // What a kill -9 before the first checkpoint, then a lost index.sqlite-wal, leaves: a database file with
  // WAL mode in its header and no table.
  fs::remove(d + "/index.sqlite");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((d + "/index.sqlite").c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  const std::string message = "its index " + d + "/index.sqlite holds no tables but blobs/ holds 300 blobs";
  CHECK_THROWS_WITH(list_store(d), Contains(message) && Contains("orbit store repair --store " + d));
  CHECK_THROWS_WITH(summarize_store(d), Contains(message) && Contains("orbit store repair --store " + d));
  CHECK_THROWS_WITH(verify_store(d), Contains(message) && Contains("orbit store repair --store " + d));
  const test::CliRun text = test::cli("store verify --store " + d);
  INFO(text.out);
  CHECK(text.status == 1);
  CHECK_THAT(text.out, Contains(message));
  CHECK_THROWS_WITH(gc_store(d), Contains("orbit store repair --store " + d));  // and deletes nothing
  const RepairReport repaired = repair_store(d);
  CHECK(repaired.rows_restored == kEntries);
  const VerifyReport after = verify_store(d);
  CHECK(after.clean());
  CHECK(after.checked == kEntries);
}

TEST_CASE("a reader of an index file with no table and no blobs says so, naming the file", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  fs::create_directories(d + "/blobs");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((d + "/index.sqlite").c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  CHECK_THROWS_WITH(verify_store(d), Contains("store index " + d + "/index.sqlite: holds no tables"));
}

// Garbage as index.sqlite with no blobs/ beside it: readers sent the user to repair, which then said there was
// nothing to repair. They say there is nothing to rebuild from, and what to do instead.
TEST_CASE("a damaged index with no blobs/ names no repair", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  std::ofstream(d + "/index.sqlite", std::ios::binary) << std::string(3000, '\x5a');
  const auto says = Contains("index.sqlite is damaged");
  const auto nothing = Contains("there is no blobs/ directory to rebuild it from");
  CHECK_THROWS_WITH(verify_store(d), says && nothing && !Contains("orbit store repair"));
  CHECK_THROWS_WITH(summarize_store(d), says && nothing);
  CHECK_THROWS_WITH(list_store(d), says && nothing);
  const test::CliRun ls = test::cli("store ls --store " + d);
  CHECK(ls.status != 0);
  CHECK_THAT(ls.out, says && nothing && Contains("remove " + d + "/index.sqlite to start an empty store there"));
}

// Another program's SQLite database as index.sqlite was called a damaged index: readers sent the user to repair,
// which added orbit's tables to it and adopted it (and, without blobs/, said there was nothing to repair). Now every
// command refuses it, naming the file and what it is, without pointing at repair, and nothing writes to it.
TEST_CASE("an index.sqlite that is another program's SQLite database is refused everywhere and left untouched",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  test::write_entries(d, 3);
  const std::string path = d + "/index.sqlite";
  fs::remove(path);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db,
                       "CREATE TABLE songs(title TEXT, artist TEXT); CREATE TABLE albums(name TEXT);"
                       "INSERT INTO songs VALUES('a', 'b')",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  const auto file_bytes = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::string before = file_bytes();
  const std::string message =
      "store index " + path + ": is an SQLite database, but not an orbit store's index (its tables: albums, songs)";
  // The error names the file and what it is, and does not send the user to repair.
  const auto refused = [&](const std::function<void()>& run) {
    std::string what = "no error";
    try {
      run();
    } catch (const std::exception& e) {
      what = e.what();
    }
    INFO(what);
    CHECK_THAT(what, Contains(message));
    CHECK_THAT(what, !Contains("orbit store repair"));
  };
  refused([&] { list_store(d); });
  refused([&] { summarize_store(d); });
  refused([&] { verify_store(d); });
  refused([&] { gc_store(d, GcOptions{true}); });
  refused([&] { gc_store(d); });
  refused([&] { repair_store(d); });
  refused([&] { ChunkStore store(disk_options(d)); });
  if (fs::exists(ORBIT_CLI_PATH)) {  // the sanitizer builds have no CLI
    for (const char* command : {"verify", "repair"}) {
      const test::CliRun run = test::cli(std::string("store ") + command + " --store " + d);
      INFO(run.out);
      CHECK(run.status != 0);
      CHECK_THAT(run.out, Contains(message));
      CHECK_THAT(run.out, !Contains("orbit store repair"));
    }
  }
  CHECK(file_bytes() == before);  // no table added, no row written
  for (const char* suffix : {"-wal", "-shm", "-journal"}) CHECK_FALSE(fs::exists(path + suffix));
  CHECK(fs::is_directory(d + "/blobs"));
}

// On a read-only directory where SQLite cannot create index.sqlite-shm, a reader opened the index as immutable,
// which ignores index.sqlite-wal: rows a writer committed there (left by a crash, the -shm lost) were missing, so
// gc --dry-run listed their blobs as unreferenced ("would remove"). With the -shm beside it SQLite reads the log
// read-only; without it the read is refused, naming the -wal file. As root the CLI runs as nobody, whom the file
// modes bind (test::as_unprivileged).
TEST_CASE("a read-only store whose WAL holds commits: gc --dry-run reads them through -shm, or refuses naming -wal",
          "[store][cpu]") {
  if (!fs::exists(ORBIT_CLI_PATH)) {
    WARN("no orbit CLI at " << ORBIT_CLI_PATH << " in this build: a read-only store's WAL is not checked");
    return;
  }
  const std::string as_other = test::as_unprivileged();  // who runs the CLI: this user, or nobody for root
  test::TempDir dir;
  const std::string d = dir.path().string(), index = d + "/index.sqlite";
  test::write_entries(d, 3, PutOptions{StoreTier::kDisk});
  {
    // A second connection that never checkpoints: while it is open the store's close cannot checkpoint either, so
    // the rows of keys 4 and 5 stay in index.sqlite-wal, as a writer killed before a checkpoint leaves them.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(index.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "SELECT count(*) FROM entries", nullptr, nullptr, nullptr) == SQLITE_OK);
    test::write_entries(d, 5, PutOptions{StoreTier::kDisk});
    sqlite3_close(db);
  }
  const std::vector<std::string> wal_only = {blob_of(d, key(4)), blob_of(d, key(5))};
  REQUIRE(fs::file_size(index + "-wal") > 32);  // frames past the log's header
  REQUIRE(fs::exists(index + "-shm"));
  test::set_tree_writable(d, false);
  const std::string dry_run = as_other + ORBIT_CLI_PATH + " store gc --dry-run --store " + d;
  const test::CliRun with_shm = test::run_command(dry_run);
  INFO(with_shm.out);
  CHECK(with_shm.status == 0);
  CHECK_THAT(with_shm.out, !Contains("would remove") && Contains("(dry run) 0 unreferenced blobs"));

  test::set_tree_writable(d, true);
  fs::remove(index + "-shm");
  test::set_tree_writable(d, false);
  const test::CliRun without_shm = test::run_command(dry_run);
  INFO(without_shm.out);
  CHECK(without_shm.status != 0);
  CHECK_THAT(without_shm.out, !Contains("would remove"));
  CHECK_THAT(without_shm.out, Contains("its write-ahead log " + index + "-wal holds") &&
                                  Contains("through " + index + "-shm, which it could not open or create") &&
                                  Contains("a user who can write the store's directory"));
  test::set_tree_writable(d, true);
  for (const std::string& blob : wal_only) CHECK(fs::exists(blob));
  CHECK(keys_of(d).size() == 5);  // a reader that can make the -shm reads the log's rows
}

TEST_CASE("repair takes the fingerprint every blob holds back from a damaged meta row, dropping no good row",
          "[store][cpu]") {
  // verify -> repair -> gc after one bad byte in the index's model fingerprint: repair trusted the index,
  // found every blob "of another model", dropped all rows and succeeded; gc then deleted every blob.
  test::TempDir dir;
  const std::string d = dir.path().string();
  make_store(d);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((d + "/index.sqlite").c_str(), &db) == SQLITE_OK);
  const int rc = sqlite3_exec(db, "UPDATE meta SET value = 'ab' || substr(value, 3) WHERE name = 'model_fingerprint'",
                              nullptr, nullptr, nullptr);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
  REQUIRE_FALSE(verify_store(d).clean());

  const RepairReport repaired = repair_store(d);
  CHECK(repaired.rows_dropped == 0);
  CHECK(repaired.meta_restored);
  CHECK(repaired.blobs_rejected == 0);
  const bool noted = std::any_of(repaired.notes.begin(), repaired.notes.end(), [](const std::string& n) {
    return n.find("which no blob holds") != std::string::npos &&
           n.find("the index names it again") != std::string::npos;
  });
  CHECK(noted);
  CHECK(verify_store(d).clean());
  CHECK(keys_of(d).size() == kEntries);
  CHECK(gc_store(d).removed_blobs == 0);
}

TEST_CASE("stat's byte totals over rows whose byte counts a tool damaged stay totals", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  make_store(d);
  const StoreSummary before = summarize_store(d);
  REQUIRE(before.blob_bytes > 0);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((d + "/index.sqlite").c_str(), &db) == SQLITE_OK);
  // Two counts at int64's largest value summed to a negative total; a negative count lowered it.
  const std::string sql =
      "UPDATE entries SET blob_bytes = 9223372036854775807, value_bytes = 9223372036854775807 "
      "WHERE key IN ('" +
      key(1) + "', '" + key(2) +
      "'); "
      "UPDATE entries SET blob_bytes = -5 WHERE key = '" +
      key(3) + "'";
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
  const StoreSummary s = summarize_store(d);
  CHECK(s.entries == before.entries);
  CHECK(s.blob_bytes == std::numeric_limits<int64_t>::max());
  CHECK(s.value_bytes == std::numeric_limits<int64_t>::max());
  for (const auto& [kind, bytes] : s.bytes_by_kind) CHECK(bytes >= 0);
  CHECK_FALSE(verify_store(d).clean());
}

TEST_CASE("an index.sqlite that is a directory is named as such, not as a missing index", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  fs::create_directories(dir.path() / "index.sqlite");
  CHECK_THROWS_WITH(list_store(d), Contains("index.sqlite is not a regular file (it is a directory)"));
  CHECK_THROWS_WITH(summarize_store(d), Contains("move it aside"));
}

}  // namespace ORBIT_TEST_FILE
