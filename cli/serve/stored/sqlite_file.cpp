#include "serve/stored/sqlite_file.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <utility>

#include "orbit/common/error.h"

namespace orbit::serve {

SqliteFile::SqliteFile(const std::string& kind, const std::string& path, const char* schema, const char* format)
    : path_(path), label_(kind + " " + path) {
  const int rc =
      sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    ORBIT_FAIL(label_ << ": cannot open: " << message);
  }
  try {
    sqlite3_busy_timeout(db_, 10000);
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");
    struct stat st {};
    on_disk_ = path != ":memory:" && ::stat(path.c_str(), &st) == 0;
    device_ = on_disk_ ? static_cast<uint64_t>(st.st_dev) : 0;
    inode_ = on_disk_ ? static_cast<uint64_t>(st.st_ino) : 0;
    exec("CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL)");
    exec(schema);
    SqlStatement(*this, "INSERT OR IGNORE INTO meta(name, value) VALUES('format', ?)").text(1, format).step();
    SqlStatement read(*this, "SELECT value FROM meta WHERE name = 'format'");
    const std::string found = read.step() ? read.column_text(0) : std::string();
    ORBIT_CHECK(found == format, label_ << ": format '" << found << "' is not '" << format << "'");
  } catch (...) {
    finalize_cached();
    sqlite3_close(db_);
    throw;
  }
}

SqliteFile::~SqliteFile() {
  finalize_cached();
  sqlite3_close(db_);
}

void SqliteFile::finalize_cached() {
  for (const auto& [sql, stmt] : cached_) sqlite3_finalize(stmt);
  cached_.clear();
}

void SqliteFile::exec(const char* sql) const {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) == SQLITE_OK) return;
  const std::string why = message ? message : sqlite3_errmsg(db_);
  sqlite3_free(message);
  ORBIT_FAIL(label_ << ": " << why);
}

int64_t SqliteFile::changes() const { return sqlite3_changes(db_); }

void SqliteFile::check_in_place() const {
  if (!on_disk_) return;
  struct stat st {};
  const bool found = ::stat(path_.c_str(), &st) == 0;
  const std::string why = !found ? std::string("it is gone (") + std::strerror(errno) + ")"
                          : static_cast<uint64_t>(st.st_dev) != device_ || static_cast<uint64_t>(st.st_ino) != inode_
                              ? "another file is there now"
                              : "";
  ORBIT_CHECK(why.empty(), label_ << ": the file was moved or removed while this server had it open (" << why
                                  << "); writes there would be lost at the next start: put the store directory "
                                  << "back, or restart the server on one");
}

void SqliteFile::check_writable() {
  exec("PRAGMA synchronous=NORMAL");
  try {
    SqlTransaction t(*this);
    SqlStatement(*this,
                 "INSERT INTO meta(name, value) VALUES('write_checks', '1') "
                 "ON CONFLICT(name) DO UPDATE SET value = CAST(value AS INTEGER) + 1")
        .step();
    t.commit();
  } catch (...) {
    exec("PRAGMA synchronous=FULL");
    throw;
  }
  exec("PRAGMA synchronous=FULL");
}

SqlStatement::SqlStatement(const SqliteFile& file, const char* sql) : file_(file), sql_(sql) {
  if (const auto cached = file.cached_.find(sql_); cached != file.cached_.end()) {
    stmt_ = cached->second;
    file.cached_.erase(cached);
    return;
  }
  if (sqlite3_prepare_v2(file.db(), sql, -1, &stmt_, nullptr) != SQLITE_OK) fail("prepare");
}

SqlStatement::~SqlStatement() {
  if (stmt_ == nullptr) return;
  sqlite3_reset(stmt_);  // its read or write ends here, as a finalize's would
  sqlite3_clear_bindings(stmt_);
  if (!file_.cached_.emplace(std::move(sql_), stmt_).second) sqlite3_finalize(stmt_);
}

SqlStatement& SqlStatement::text(int at, const std::string& value) {
  sqlite3_bind_text(stmt_, at, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
  return *this;
}

SqlStatement& SqlStatement::integer(int at, int64_t value) {
  sqlite3_bind_int64(stmt_, at, value);
  return *this;
}

SqlStatement& SqlStatement::null(int at) {
  sqlite3_bind_null(stmt_, at);
  return *this;
}

bool SqlStatement::step() {
  // A write outside a transaction (SqlTransaction checks its own) goes only to the file opened.
  if (sqlite3_stmt_readonly(stmt_) == 0 && sqlite3_get_autocommit(file_.db()) != 0) file_.check_in_place();
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc != SQLITE_DONE) fail("step");
  return false;
}

std::string SqlStatement::column_text(int at) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, at));
  return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, at))) : std::string();
}

int64_t SqlStatement::column_int(int at) const { return sqlite3_column_int64(stmt_, at); }

void SqlStatement::fail(const char* what) const {
  ORBIT_FAIL(file_.label() << ": " << what << " failed: " << sqlite3_errmsg(file_.db()));
}

SqlTransaction::SqlTransaction(const SqliteFile& file) : file_(file) {
  file.check_in_place();
  run("BEGIN IMMEDIATE");
}

SqlTransaction::~SqlTransaction() {
  if (!done_) sqlite3_exec(file_.db(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void SqlTransaction::commit() {
  run("COMMIT");
  done_ = true;
}

void SqlTransaction::run(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(file_.db(), sql, nullptr, nullptr, &message) == SQLITE_OK) return;
  const std::string why = message ? message : "unknown error";
  sqlite3_free(message);
  ORBIT_FAIL(file_.label() << ": " << sql << " failed: " << why);
}

}  // namespace orbit::serve
