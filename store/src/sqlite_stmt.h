// Prepared statements and transactions over an sqlite3 connection, for SqliteIndex (sqlite_index*.cpp).
// Thread-safety: none, as SqliteIndex's; each lives within one SqliteIndex call.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "orbit/common/error.h"

namespace orbit::store {

// A prepared statement, finalized on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql, const std::string& origin) {
    const int rc = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
    ORBIT_CHECK(rc == SQLITE_OK, origin << ": cannot prepare '" << sql << "': " << sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Stmt& bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  int step() { return sqlite3_step(stmt_); }
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  int64_t i64(int c) const { return sqlite3_column_int64(stmt_, c); }
  double f64(int c) const { return sqlite3_column_double(stmt_, c); }
  std::string text(int c) const {
    const unsigned char* p = sqlite3_column_text(stmt_, c);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(stmt_, c)))
             : std::string();
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// Rolls back an open transaction unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {}
  ~Transaction() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void committed() { done_ = true; }

 private:
  sqlite3* db_;
  bool done_ = false;
};

}  // namespace orbit::store
