// Helpers of the store tests that reach into a store's index.sqlite with SQLite itself (what a broken tool, or a
// user at the sqlite3 prompt, might do). Link SQLite::SQLite3.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "orbit_catch.h"

namespace orbit::test {

// Runs `sql` on the index at `path` (what a broken tool, or a user at the sqlite3 prompt, might do).
inline void alter_index(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
  INFO(sql << ": " << (error ? error : ""));
  sqlite3_free(error);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}

// The rows of the index's leases table (every owner's, every kind).
inline int64_t lease_rows(const std::string& path) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt* s = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM leases", -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW) {
    n = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return n;
}

}  // namespace orbit::test
