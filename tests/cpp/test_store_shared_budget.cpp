// A disk budget shared by processes on one store directory: each row's commit checks the budget against every
// process's committed rows inside its own transaction, so writers that made room from their own view of the
// index, at the same moment, never commit past it together; a refusal there keeps the prepared blob for the
// writer to make room and try again.
#include "orbit_catch.h"  // ATen, then <catch2/catch.hpp>: keeps Catch's CHECK (see that header)

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "orbit/store.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/disk_tier.h"
#include "orbit/store/sqlite_index.h"
#include "test_helpers.h"
#include "test_store_sqlite.h"
#include "test_store_values.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using Catch::Matchers::Contains;
using namespace orbit;
using namespace orbit::store;
using namespace test::store_test_names;  // key(i), disk_options(dir) (test_store_values.h)
namespace fs = std::filesystem;

namespace {

DiskRow row_of(const std::string& k, int64_t blob_bytes) {
  DiskRow r;
  r.key = k;
  r.kind = EntryKind::kCanonical;
  r.blob = "blobs/" + k.substr(0, 2) + "/" + k + ".blob";
  r.blob_bytes = blob_bytes;
  r.value_bytes = blob_bytes;
  r.checksum = "00";
  return r;
}

// A value of `rows` rows of 64 floats for K and V (2 * rows * 256 bytes of tensor data).
ValuePtr small_value(int64_t i, int64_t rows) {
  const at::Tensor k = at::full({rows, 4, 16}, static_cast<double>(i), at::kFloat);
  const at::Tensor v = at::full({rows, 4, 16}, static_cast<double>(-i), at::kFloat);
  return make_value(EntryKind::kCanonical, {{"layer.0.k", k}, {"layer.0.v", v}}, {{"index", std::to_string(i)}});
}

// The committed blob bytes of the index at `path`, as another process reading it sees them; -1 when busy.
int64_t committed_bytes(sqlite3* db) {
  sqlite3_stmt* s = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, "SELECT COALESCE(SUM(blob_bytes), 0) FROM entries", -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW) {
    n = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  return n;
}

}  // namespace

TEST_CASE("an index upsert under a budget counts every live row with a store key, the replaced row out",
          "[store][cpu]") {
  test::TempDir dir;
  const std::string path = dir.path().string() + "/index.sqlite";
  SqliteIndex index(path, SqliteIndex::Mode::kReadWrite);
  std::string replaced;
  REQUIRE(index.upsert(row_of(key(1), 100), &replaced).is_ok());
  REQUIRE(index.upsert(row_of(key(2), 200), &replaced).is_ok());
  bool over = false;
  Status s = index.upsert(row_of(key(3), 60), &replaced, true, nullptr, 350, &over);
  CHECK(over);
  CHECK(s.code() == StatusCode::kOutOfCapacity);
  CHECK_THAT(s.reason(), Contains("past the disk budget of 350") && Contains("300 committed"));
  CHECK(index.count_rows() == 2);
  REQUIRE(index.upsert(row_of(key(3), 50), &replaced, true, nullptr, 350, &over).is_ok());  // exactly 350
  CHECK_FALSE(over);
  // Replacing key 2 counts its new size, not both.
  CHECK(index.upsert(row_of(key(2), 200), &replaced, true, nullptr, 350, &over).is_ok());
  CHECK_FALSE(index.upsert(row_of(key(2), 201), &replaced, true, nullptr, 350, &over).is_ok());
  CHECK(over);
  // A row flagged corrupt, or whose key is not a store key, is not counted (the tier leaves both out).
  REQUIRE(index.mark_corrupt(key(1), row_of(key(1), 100).blob).is_ok());
  REQUIRE(index.upsert(row_of("not-a-store-key", 1000), &replaced).is_ok());
  CHECK(index.upsert(row_of(key(4), 100), &replaced, true, nullptr, 350, &over).is_ok());
}

TEST_CASE("a disk tier's commit that another process's commit put past the budget keeps its prepared blob",
          "[store][cpu]") {
  test::TempDir dir;
  DiskTierOptions o;
  o.dir = dir.path().string();
  o.model_fingerprint = test::kStoreTestFingerprint;
  DiskTier a(o), b(o);
  Result<PreparedBlob> first = a.prepare(key(1), *small_value(1, 40));
  Result<PreparedBlob> second = b.prepare(key(2), *small_value(2, 40));
  REQUIRE(first.is_ok());
  REQUIRE(second.is_ok());
  // A budget that holds one of the two: both tiers, each seeing an empty index, would commit.
  o.budget_bytes = std::max(first.value().blob_bytes, second.value().blob_bytes) + 16;
  DiskTier a_budget(o), b_budget(o);
  REQUIRE(a_budget.commit(first.value(), RowAttrs{}).is_ok());
  bool over = false;
  Status s = b_budget.commit(second.value(), RowAttrs{}, true, "", nullptr, &over);
  CHECK(over);
  CHECK(s.code() == StatusCode::kOutOfCapacity);
  CHECK(b_budget.locate(key(2)) == nullptr);
  CHECK(fs::exists(b_budget.absolute(second.value().blob)));  // kept for another try
  REQUIRE(b_budget.probe_commit().is_ok());                   // not taken for a refusing index
  b_budget.discard(second.value());
  CHECK_FALSE(fs::exists(b_budget.absolute(second.value().blob)));
}

TEST_CASE("two stores on one directory writing at once never commit past their disk budget", "[store][cpu]") {
  test::TempDir dir;
  const std::string d = dir.path().string();
  ChunkStoreOptions o = disk_options(d);
  o.disk_budget_bytes = 200000;
  ChunkStore a(o), b(o);
  std::atomic<bool> done{false};
  int64_t most = 0;
  sqlite3* reader = nullptr;  // another process's view of the index
  REQUIRE(sqlite3_open_v2((d + "/index.sqlite").c_str(), &reader, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  std::thread monitor([&] {
    while (!done.load()) most = std::max(most, committed_bytes(reader));
  });
  const auto writer = [&](ChunkStore& store, int64_t first) {
    for (int64_t i = first; i < first + 400; ++i) (void)store.put(key(i), small_value(i, 4 + (i * 7) % 36));
  };
  std::thread wa(writer, std::ref(a), 1000), wb(writer, std::ref(b), 2000);
  wa.join();
  wb.join();
  done = true;
  monitor.join();
  CHECK(most > o.disk_budget_bytes / 2);  // the writers filled it
  CHECK(most <= o.disk_budget_bytes);
  CHECK(committed_bytes(reader) <= o.disk_budget_bytes);
  sqlite3_close(reader);
  CHECK(verify_store(d).clean());
}

}  // namespace ORBIT_TEST_FILE
