// SqliteIndex's record of remote writes and erases not yet acknowledged (orbit/store/sqlite_index.h,
// remote_pending): what a store's remote tier queued and has not delivered, so that an open after a close or a
// crash re-sends it.
#include <sqlite3.h>

#include <cerrno>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "orbit/store/sqlite_index.h"
#include "sqlite_stmt.h"

namespace orbit::store {

Status SqliteIndex::record_remote_pending(const std::string& key, const std::string& remote, bool erase, int64_t* seq) {
  errno = 0;  // failure() reads what a failed write left
  // A key recorded already gets a new record (REPLACE deletes the old one): a new seq, so that the writer's clearing
  // of the old record, by its seq, leaves this one, and the latest kind, as the remote must end with the key's last
  // operation.
  Stmt s(db_, "INSERT OR REPLACE INTO remote_pending(key, remote, kind) VALUES(?1, ?2, ?3)", path_);
  s.bind(1, key).bind(2, remote).bind(3, static_cast<int64_t>(erase ? 1 : 0));
  const int rc = s.step();
  if (rc != SQLITE_DONE) return failure(rc, "recording a pending remote write");
  if (seq != nullptr) *seq = sqlite3_last_insert_rowid(db_);
  return Status::ok();
}

Status SqliteIndex::clear_remote_pending(const std::vector<RemotePendingRecord>& records, const std::string& remote) {
  if (records.empty()) return Status::ok();
  Status begin = exec_status("BEGIN IMMEDIATE", "beginning to clear pending remote writes");
  if (!begin) return begin;
  Transaction tx(db_);
  Stmt s(db_, "DELETE FROM remote_pending WHERE key = ?1 AND remote = ?2 AND seq <= ?3", path_);
  for (const RemotePendingRecord& record : records) {
    s.bind(1, record.key).bind(2, remote).bind(3, record.seq);
    const int rc = s.step();
    if (rc != SQLITE_DONE) return failure(rc, "clearing a pending remote write");
    s.reset();
  }
  Status commit = exec_status("COMMIT", "committing cleared pending remote writes");
  if (commit) tx.committed();
  return commit;
}

std::map<std::string, int64_t> SqliteIndex::remote_pending_writes(const std::string& remote) const {
  std::map<std::string, int64_t> out;
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT key, seq FROM remote_pending WHERE remote = ?1 AND kind = 0", -1, &raw,
                         nullptr) != SQLITE_OK) {
    sqlite3_finalize(raw);
    return out;
  }
  sqlite3_bind_text(raw, 1, remote.data(), static_cast<int>(remote.size()), SQLITE_TRANSIENT);
  while (sqlite3_step(raw) == SQLITE_ROW) {
    out[reinterpret_cast<const char*>(sqlite3_column_text(raw, 0))] = sqlite3_column_int64(raw, 1);
  }
  sqlite3_finalize(raw);
  return out;
}

std::map<std::string, int64_t> SqliteIndex::remote_counts(const char* sql) const {
  std::map<std::string, int64_t> out;
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr) != SQLITE_OK) {
    sqlite3_finalize(raw);
    return out;  // no such table (an older store, or nothing abandoned yet)
  }
  while (sqlite3_step(raw) == SQLITE_ROW) {
    out[reinterpret_cast<const char*>(sqlite3_column_text(raw, 0))] = sqlite3_column_int64(raw, 1);
  }
  sqlite3_finalize(raw);
  return out;
}

std::map<std::string, int64_t> SqliteIndex::remote_pending_counts() const {
  return remote_counts("SELECT remote, count(*) FROM remote_pending GROUP BY remote");
}

std::map<std::string, int64_t> SqliteIndex::remote_abandoned() const {
  return remote_counts("SELECT remote, writes FROM remote_abandoned");
}

Result<int64_t> SqliteIndex::reset_remote_abandoned(const std::string& remote) {
  Stmt s(db_, "DELETE FROM remote_abandoned WHERE remote = ?1", path_);
  s.bind(1, remote);
  const int rc = s.step();
  if (rc != SQLITE_DONE) return failure(rc, "resetting the count of remote writes given up");
  return static_cast<int64_t>(sqlite3_changes(db_));
}

Result<int64_t> SqliteIndex::adopt_remote_pending(const std::string& from, const std::string& to) {
  Status begin = exec_status("BEGIN IMMEDIATE", "beginning to adopt pending remote writes");
  if (!begin) return begin;
  Transaction tx(db_);
  Stmt older(db_,
             "DELETE FROM remote_pending WHERE remote = ?1 AND EXISTS (SELECT 1 FROM remote_pending AS p WHERE "
             "p.remote = ?2 AND p.key = remote_pending.key AND p.seq > remote_pending.seq)",
             path_);
  older.bind(1, from).bind(2, to);
  int rc = older.step();
  if (rc != SQLITE_DONE) return failure(rc, "adopting pending remote writes");
  const auto superseded = static_cast<int64_t>(sqlite3_changes(db_));
  Stmt move(db_, "UPDATE OR REPLACE remote_pending SET remote = ?2 WHERE remote = ?1", path_);
  move.bind(1, from).bind(2, to);
  rc = move.step();
  if (rc != SQLITE_DONE) return failure(rc, "adopting pending remote writes");
  const auto moved = static_cast<int64_t>(sqlite3_changes(db_));
  Status commit = exec_status("COMMIT", "committing adopted pending remote writes");
  if (!commit) return commit;
  tx.committed();
  return superseded + moved;
}

Result<int64_t> SqliteIndex::forget_remote_pending(const std::string& remote) {
  Stmt s(db_, "DELETE FROM remote_pending WHERE remote = ?1", path_);
  s.bind(1, remote);
  const int rc = s.step();
  if (rc != SQLITE_DONE) return failure(rc, "dropping a remote's pending writes");
  return static_cast<int64_t>(sqlite3_changes(db_));
}

int64_t SqliteIndex::last_remote_pending() const {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT coalesce(max(seq), 0) FROM remote_pending", -1, &raw, nullptr) != SQLITE_OK) {
    sqlite3_finalize(raw);
    return 0;  // no remote_pending table (an older store opened read-only)
  }
  const int64_t last = sqlite3_step(raw) == SQLITE_ROW ? sqlite3_column_int64(raw, 0) : 0;
  sqlite3_finalize(raw);
  return last;
}

std::vector<RemotePendingRecord> SqliteIndex::remote_pending(const std::string& remote, int64_t after, int64_t through,
                                                             int limit) const {
  Stmt s(db_,
         "SELECT seq, key, kind FROM remote_pending WHERE remote = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4",
         path_);
  s.bind(1, remote).bind(2, after).bind(3, through).bind(4, static_cast<int64_t>(limit));
  std::vector<RemotePendingRecord> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(RemotePendingRecord{s.i64(0), s.text(1), s.i64(2) == 1});
  ORBIT_CHECK(rc == SQLITE_DONE, "store index " << path_ << ": reading pending remote writes: " << sqlite3_errmsg(db_));
  return out;
}

int64_t SqliteIndex::count_remote_pending(const std::string& remote, int64_t through) const {
  Stmt s(db_, "SELECT count(*) FROM remote_pending WHERE remote = ?1 AND seq <= ?2", path_);
  s.bind(1, remote).bind(2, through);
  const int rc = s.step();
  ORBIT_CHECK(rc == SQLITE_ROW, "store index " << path_ << ": counting pending remote writes: " << sqlite3_errmsg(db_));
  return s.i64(0);
}

}  // namespace orbit::store
