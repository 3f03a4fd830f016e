#include "orbit/store/sqlite_index.h"

#include <sqlite3.h>

#include "orbit/common/error.h"
#include "orbit/store/blob_format.h"

namespace orbit::store {

namespace {

const char* kSchema =
    "CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS entries("
    "  key TEXT PRIMARY KEY, kind INTEGER NOT NULL, encoding INTEGER NOT NULL, blob TEXT NOT NULL,"
    "  blob_bytes INTEGER NOT NULL, value_bytes INTEGER NOT NULL, checksum TEXT NOT NULL,"
    "  pinned INTEGER NOT NULL DEFAULT 0, corrupt INTEGER NOT NULL DEFAULT 0, hits INTEGER NOT NULL DEFAULT 0,"
    "  last_access INTEGER NOT NULL DEFAULT 0, recompute_cost REAL NOT NULL DEFAULT 1,"
    "  expected_reuse REAL NOT NULL DEFAULT 1);";

const char* kColumns =
    "key, kind, encoding, blob, blob_bytes, value_bytes, checksum, pinned, corrupt, hits, last_access, "
    "recompute_cost, expected_reuse";

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

DiskRow read_row(const Stmt& s) {
  DiskRow r;
  r.key = s.text(0);
  r.kind = static_cast<EntryKind>(s.i64(1));
  r.encoding = static_cast<BlobEncoding>(s.i64(2));
  r.blob = s.text(3);
  r.blob_bytes = s.i64(4);
  r.value_bytes = s.i64(5);
  r.checksum = s.text(6);
  r.pinned = s.i64(7) != 0;
  r.corrupt = s.i64(8) != 0;
  r.hits = s.i64(9);
  r.last_access = s.i64(10);
  r.recompute_cost = s.f64(11);
  r.expected_reuse = s.f64(12);
  return r;
}

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

}  // namespace

SqliteIndex::SqliteIndex(const std::string& path, Mode mode) : path_(path) {
  const int flags = mode == Mode::kReadOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    ORBIT_FAIL("store index " << path << ": cannot open: " << message);
  }
  sqlite3_busy_timeout(db_, 10000);
  try {
    if (mode == Mode::kReadWrite) {
      exec_or_throw("PRAGMA journal_mode=WAL");
      exec_or_throw("PRAGMA synchronous=FULL");
      exec_or_throw(kSchema);
      if (!meta("format_version")) {
        Status s = set_meta("format_version", std::to_string(kBlobFormatVersion));
        ORBIT_CHECK(s.is_ok(), "store index " << path << ": " << s.reason());
      }
    }
    const auto version = meta("format_version");
    ORBIT_CHECK(version.has_value(), "store index " << path << ": not an orbit store (no format_version)");
    ORBIT_CHECK(*version == std::to_string(kBlobFormatVersion),
                "store index " << path << ": format version " << *version << " is not supported (this build reads "
                               << kBlobFormatVersion << ")");
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

SqliteIndex::~SqliteIndex() { sqlite3_close(db_); }

void SqliteIndex::exec_or_throw(const char* sql) const {
  char* error = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
  const std::string message = error ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  ORBIT_CHECK(rc == SQLITE_OK, "store index " << path_ << ": '" << sql << "' failed: " << message);
}

Status SqliteIndex::failure(int code, const char* what) const {
  const std::string reason = "store index " + path_ + ": " + what + ": " + sqlite3_errmsg(db_);
  if ((code & 0xff) == SQLITE_FULL) return Status::out_of_capacity(reason);
  return Status::refused(reason);
}

Status SqliteIndex::exec_status(const char* sql, const char* what) {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status::ok() : failure(rc, what);
}

std::optional<std::string> SqliteIndex::meta(const std::string& name) const {
  Stmt s(db_, "SELECT value FROM meta WHERE name = ?1", path_);
  s.bind(1, name);
  const int rc = s.step();
  if (rc == SQLITE_ROW) return s.text(0);
  ORBIT_CHECK(rc == SQLITE_DONE, "store index " << path_ << ": reading meta '" << name << "': " << sqlite3_errmsg(db_));
  return std::nullopt;
}

std::vector<DiskRow> SqliteIndex::rows() const {
  const std::string sql = std::string("SELECT ") + kColumns + " FROM entries ORDER BY key";
  Stmt s(db_, sql.c_str(), path_);
  std::vector<DiskRow> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_row(s));
  ORBIT_CHECK(rc == SQLITE_DONE, "store index " << path_ << ": reading entries: " << sqlite3_errmsg(db_));
  return out;
}

std::optional<DiskRow> SqliteIndex::row(const std::string& key) const {
  const std::string sql = std::string("SELECT ") + kColumns + " FROM entries WHERE key = ?1";
  Stmt s(db_, sql.c_str(), path_);
  s.bind(1, key);
  const int rc = s.step();
  if (rc == SQLITE_ROW) return read_row(s);
  ORBIT_CHECK(rc == SQLITE_DONE, "store index " << path_ << ": reading entry " << key << ": " << sqlite3_errmsg(db_));
  return std::nullopt;
}

Status SqliteIndex::set_meta(const std::string& name, const std::string& value) {
  Stmt s(db_, "INSERT OR REPLACE INTO meta(name, value) VALUES(?1, ?2)", path_);
  s.bind(1, name).bind(2, value);
  const int rc = s.step();
  return rc == SQLITE_DONE ? Status::ok() : failure(rc, "writing meta");
}

Status SqliteIndex::upsert(const DiskRow& r, std::string* replaced_blob) {
  replaced_blob->clear();
  Status begin = exec_status("BEGIN IMMEDIATE", "beginning a write");
  if (!begin) return begin;
  Transaction tx(db_);
  {
    Stmt old(db_, "SELECT blob FROM entries WHERE key = ?1", path_);
    old.bind(1, r.key);
    const int rc = old.step();
    if (rc == SQLITE_ROW) *replaced_blob = old.text(0);
    else if (rc != SQLITE_DONE) return failure(rc, "reading the old row");
  }
  const std::string sql = std::string("INSERT OR REPLACE INTO entries(") + kColumns +
                          ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";
  Stmt s(db_, sql.c_str(), path_);
  s.bind(1, r.key).bind(2, static_cast<int64_t>(r.kind)).bind(3, static_cast<int64_t>(r.encoding));
  s.bind(4, r.blob).bind(5, r.blob_bytes).bind(6, r.value_bytes).bind(7, r.checksum);
  s.bind(8, static_cast<int64_t>(r.pinned)).bind(9, static_cast<int64_t>(r.corrupt)).bind(10, r.hits);
  s.bind(11, r.last_access).bind(12, r.recompute_cost).bind(13, r.expected_reuse);
  const int rc = s.step();
  if (rc != SQLITE_DONE) {
    replaced_blob->clear();
    return failure(rc, "inserting a row");
  }
  Status commit = exec_status("COMMIT", "committing a row");
  if (!commit) {
    replaced_blob->clear();
    return commit;
  }
  tx.committed();
  if (*replaced_blob == r.blob) replaced_blob->clear();
  return Status::ok();
}

Status SqliteIndex::erase(const std::string& key, std::string* blob) {
  blob->clear();
  Status begin = exec_status("BEGIN IMMEDIATE", "beginning a delete");
  if (!begin) return begin;
  Transaction tx(db_);
  {
    Stmt old(db_, "SELECT blob FROM entries WHERE key = ?1", path_);
    old.bind(1, key);
    const int rc = old.step();
    if (rc == SQLITE_ROW) *blob = old.text(0);
    else if (rc != SQLITE_DONE) return failure(rc, "reading the row");
  }
  Stmt s(db_, "DELETE FROM entries WHERE key = ?1", path_);
  s.bind(1, key);
  int rc = s.step();
  if (rc != SQLITE_DONE) {
    blob->clear();
    return failure(rc, "deleting a row");
  }
  Status commit = exec_status("COMMIT", "committing a delete");
  if (!commit) {
    blob->clear();
    return commit;
  }
  tx.committed();
  return Status::ok();
}

Status SqliteIndex::mark_corrupt(const std::string& key, const std::string& blob) {
  Stmt s(db_, "UPDATE entries SET corrupt = 1 WHERE key = ?1 AND blob = ?2", path_);
  s.bind(1, key).bind(2, blob);
  const int rc = s.step();
  return rc == SQLITE_DONE ? Status::ok() : failure(rc, "marking a row corrupt");
}

Status SqliteIndex::set_pinned(const std::string& key, bool pinned) {
  Stmt s(db_, "UPDATE entries SET pinned = ?2 WHERE key = ?1", path_);
  s.bind(1, key).bind(2, static_cast<int64_t>(pinned));
  const int rc = s.step();
  return rc == SQLITE_DONE ? Status::ok() : failure(rc, "updating a pin");
}

Status SqliteIndex::update_access(const std::vector<AccessUpdate>& updates) {
  if (updates.empty()) return Status::ok();
  Status begin = exec_status("BEGIN IMMEDIATE", "beginning an access update");
  if (!begin) return begin;
  Transaction tx(db_);
  Stmt s(db_, "UPDATE entries SET hits = ?2, last_access = ?3 WHERE key = ?1", path_);
  for (const AccessUpdate& u : updates) {
    s.bind(1, u.key).bind(2, u.hits).bind(3, u.last_access);
    const int rc = s.step();
    if (rc != SQLITE_DONE) return failure(rc, "updating access times");
    s.reset();
  }
  Status commit = exec_status("COMMIT", "committing access times");
  if (commit) tx.committed();
  return commit;
}

}  // namespace orbit::store
