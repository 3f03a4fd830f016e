// One SQLite database that `orbit serve` keeps records in (the Responses API's stored responses,
// responses_disk.h; stored chat completions, chat_store.h), with the statements and transactions run on it.
//
// The file is opened with a WAL journal and synchronous=FULL (a crash leaves the state before or after a
// transaction), and a busy timeout of 10 s, so several servers sharing a store wait for each other's writes.
// Its table meta(name TEXT PRIMARY KEY, value TEXT) holds "format": a file made for other records, or by
// another version, is refused naming it. Every error throws orbit::Error naming the store by its label
// ("responses store PATH: ...").
// Before each write (a transaction, or a statement that writes outside one) the file at the path must still be the
// one opened (device and inode): a store directory removed or moved while the server runs would take the writes
// into a file no later start opens, so they fail instead (the callers then hold the answers for a retry and say
// they are not stored), as the chunk store's disk tier refuses a moved directory.
// Thread-safety: none (the connection is opened without SQLite's mutex); the owner serialises calls.
#pragma once

#include <cstdint>
#include <map>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace orbit::serve {

class SqliteFile {
 public:
  // Opens (creating when missing) the database at `path` (":memory:" keeps it in memory), runs `schema`
  // (CREATE ... IF NOT EXISTS statements) and checks that its format is `format` (writing it when new).
  // `kind` names what it stores in errors ("responses store").
  SqliteFile(const std::string& kind, const std::string& path, const char* schema, const char* format);
  ~SqliteFile();
  SqliteFile(const SqliteFile&) = delete;
  SqliteFile& operator=(const SqliteFile&) = delete;

  sqlite3* db() const { return db_; }
  const std::string& path() const { return path_; }
  const std::string& label() const { return label_; }  // "<kind> <path>", how errors name it
  void exec(const char* sql) const;                    // statements without results
  int64_t changes() const;                             // rows the last statement changed
  // Proves that the file takes a write now: one transaction that counts itself in meta('write_checks') and
  // commits without waiting for the disk (synchronous=NORMAL for it alone: a crash may lose the count,
  // nothing else; the next synchronous commit syncs it with its own). A real write, not a free-space
  // estimate: it throws orbit::Error naming the store where a write fails (a full disk, a file-size limit,
  // an I/O error, a lock held past the busy timeout). Call it outside a transaction.
  void check_writable();
  // Throws orbit::Error naming the store when the file at path() is not the one opened (removed, moved, or
  // replaced by another); nothing for ":memory:".
  void check_in_place() const;

 private:
  friend class SqlStatement;
  void finalize_cached();
  std::string path_;
  std::string label_;
  sqlite3* db_ = nullptr;
  bool on_disk_ = false;  // not ":memory:": the file's identity below is checked before writes
  uint64_t device_ = 0;
  uint64_t inode_ = 0;
  // One prepared statement by SQL text, not in use: SqlStatement takes it and gives it back reset, so a
  // statement run again (a chain's links looked up one by one) is prepared once.
  mutable std::map<std::string, sqlite3_stmt*> cached_;
};

// One prepared statement, reset and given back to its file's cache on scope exit (finalized when the cache
// holds one of that text already: two in use at once). Errors throw naming the database.
class SqlStatement {
 public:
  SqlStatement(const SqliteFile& file, const char* sql);
  ~SqlStatement();
  SqlStatement(const SqlStatement&) = delete;
  SqlStatement& operator=(const SqlStatement&) = delete;

  // Parameters are numbered from 1.
  SqlStatement& text(int at, const std::string& value);
  SqlStatement& integer(int at, int64_t value);
  SqlStatement& null(int at);
  bool step();  // true while there is a row
  // Columns are numbered from 0.
  std::string column_text(int at) const;
  int64_t column_int(int at) const;

 private:
  [[noreturn]] void fail(const char* what) const;
  const SqliteFile& file_;
  std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
};

// A write transaction (BEGIN IMMEDIATE): committed by commit(), rolled back when left without it (an exception).
class SqlTransaction {
 public:
  explicit SqlTransaction(const SqliteFile& file);
  ~SqlTransaction();
  SqlTransaction(const SqlTransaction&) = delete;
  SqlTransaction& operator=(const SqlTransaction&) = delete;
  void commit();

 private:
  void run(const char* sql);
  const SqliteFile& file_;
  bool done_ = false;
};

}  // namespace orbit::serve
