// SqliteIndex's leases (orbit/store/sqlite_index.h): a process's pin or read hold on an entry, renewed while
// it lives, and the eviction that skips leased rows.
#include "orbit/store/sqlite_index.h"

#include <sqlite3.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sqlite_stmt.h"

namespace orbit::store {

Status SqliteIndex::acquire_lease(const std::string& key, const std::string& owner, LeaseKind kind, int64_t expires) {
  Stmt s(db_, "INSERT OR REPLACE INTO leases(key, owner, kind, expires) VALUES(?1, ?2, ?3, ?4)", path_);
  s.bind(1, key).bind(2, owner).bind(3, static_cast<int64_t>(kind)).bind(4, expires);
  const int rc = s.step();
  return rc == SQLITE_DONE ? Status::ok() : failure(rc, "taking a lease");
}

Status SqliteIndex::release_lease(const std::string& key, const std::string& owner, LeaseKind kind) {
  Stmt s(db_, "DELETE FROM leases WHERE key = ?1 AND owner = ?2 AND kind = ?3", path_);
  s.bind(1, key).bind(2, owner).bind(3, static_cast<int64_t>(kind));
  const int rc = s.step();
  return rc == SQLITE_DONE ? Status::ok() : failure(rc, "releasing a lease");
}

Status SqliteIndex::renew_leases(const std::string& owner, const std::vector<std::pair<std::string, LeaseKind>>& held,
                                 int64_t expires, int64_t now) {
  Status begin = exec_status("BEGIN IMMEDIATE", "beginning a lease renewal");
  if (!begin) return begin;
  Transaction tx(db_);
  {
    Stmt s(db_, "UPDATE leases SET expires = ?2 WHERE owner = ?1", path_);
    s.bind(1, owner).bind(2, expires);
    const int rc = s.step();
    if (rc != SQLITE_DONE) return failure(rc, "renewing leases");
  }
  for (const auto& [key, kind] : held) {
    Stmt s(db_, "INSERT OR IGNORE INTO leases(key, owner, kind, expires) VALUES(?1, ?2, ?3, ?4)", path_);
    s.bind(1, key).bind(2, owner).bind(3, static_cast<int64_t>(kind)).bind(4, expires);
    const int rc = s.step();
    if (rc != SQLITE_DONE) return failure(rc, "taking a lease again");
  }
  {
    Stmt s(db_, "DELETE FROM leases WHERE expires <= ?1", path_);
    s.bind(1, now);
    const int rc = s.step();
    if (rc != SQLITE_DONE) return failure(rc, "dropping expired leases");
  }
  Status commit = exec_status("COMMIT", "committing a lease renewal");
  if (commit) tx.committed();
  return commit;
}

Status SqliteIndex::release_all(const std::string& owner) {
  Stmt s(db_, "DELETE FROM leases WHERE owner = ?1", path_);
  s.bind(1, owner);
  const int rc = s.step();
  return rc == SQLITE_DONE ? Status::ok() : failure(rc, "releasing leases");
}

Result<bool> SqliteIndex::erase_unleased(const std::string& key, int64_t now, std::string* blob,
                                         const std::string& remote, int64_t abandon_through) {
  blob->clear();
  Status begin = exec_status("BEGIN IMMEDIATE", "beginning an eviction");
  if (!begin) return begin;
  Transaction tx(db_);
  {
    Stmt held(db_, "SELECT 1 FROM leases WHERE key = ?1 AND expires > ?2 LIMIT 1", path_);
    held.bind(1, key).bind(2, now);
    const int rc = held.step();
    if (rc == SQLITE_ROW) return false;  // pinned or being read by a live process
    if (rc != SQLITE_DONE) return failure(rc, "reading leases");
  }
  if (!remote.empty()) {  // in the eviction's transaction: a put's row and its record commit together
    Stmt pending(db_, "SELECT 1 FROM remote_pending WHERE key = ?1 AND remote = ?2 AND kind = 0 AND seq > ?3 LIMIT 1",
                 path_);
    pending.bind(1, key).bind(2, remote).bind(3, abandon_through);
    const int rc = pending.step();
    if (rc == SQLITE_ROW) return false;  // its remote write is still to be sent from this copy
    if (rc != SQLITE_DONE) return failure(rc, "reading pending remote writes");
  }
  {  // A write recorded for another remote (or for any, in a process without one) is not this process's to send
     // or give up: the entry stays until an open with that remote delivers it, gives it up past its own bound,
     // or `orbit store forget-remote` drops the record.
    Stmt other(db_, "SELECT 1 FROM remote_pending WHERE key = ?1 AND remote <> ?2 AND kind = 0 LIMIT 1", path_);
    other.bind(1, key).bind(2, remote);
    const int rc = other.step();
    if (rc == SQLITE_ROW) return false;
    if (rc != SQLITE_DONE) return failure(rc, "reading pending remote writes");
  }
  if (!remote.empty() && abandon_through > 0) {  // the write given up: its record goes with the row
    Stmt drop(db_, "DELETE FROM remote_pending WHERE key = ?1 AND remote = ?2 AND kind = 0 AND seq <= ?3", path_);
    drop.bind(1, key).bind(2, remote).bind(3, abandon_through);
    const int rc = drop.step();
    if (rc != SQLITE_DONE) return failure(rc, "dropping a pending remote write");
    if (sqlite3_changes(db_) > 0) {  // counted for `orbit store stat` (remote_abandoned)
      Status table =
          exec_status("CREATE TABLE IF NOT EXISTS remote_abandoned (remote TEXT PRIMARY KEY, writes INTEGER NOT NULL)",
                      "creating remote_abandoned");
      if (!table) return table;
      Stmt count(db_,
                 "INSERT INTO remote_abandoned (remote, writes) VALUES (?1, 1) "
                 "ON CONFLICT(remote) DO UPDATE SET writes = writes + 1",
                 path_);
      count.bind(1, remote);
      const int counted = count.step();
      if (counted != SQLITE_DONE) return failure(counted, "counting an abandoned remote write");
    }
  }
  {
    Stmt old(db_, "SELECT blob FROM entries WHERE key = ?1", path_);
    old.bind(1, key);
    const int rc = old.step();
    if (rc == SQLITE_DONE) return false;
    if (rc != SQLITE_ROW) return failure(rc, "reading the row");
    *blob = old.text(0);
  }
  Stmt s(db_, "DELETE FROM entries WHERE key = ?1", path_);
  s.bind(1, key);
  const int rc = s.step();
  if (rc != SQLITE_DONE) {
    blob->clear();
    return failure(rc, "deleting a row");
  }
  Status commit = exec_status("COMMIT", "committing an eviction");
  if (!commit) {
    blob->clear();
    return commit;
  }
  tx.committed();
  return true;
}

std::set<std::string> SqliteIndex::live_pins(int64_t now) const {
  std::set<std::string> out;
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, "SELECT DISTINCT key FROM leases WHERE kind = 0 AND expires > ?1", -1, &raw, nullptr) !=
      SQLITE_OK) {
    sqlite3_finalize(raw);
    return out;  // no lease table (an index written before leases existed, opened read-only)
  }
  sqlite3_bind_int64(raw, 1, now);
  while (sqlite3_step(raw) == SQLITE_ROW) {
    const unsigned char* p = sqlite3_column_text(raw, 0);
    if (p) out.insert(reinterpret_cast<const char*>(p));
  }
  sqlite3_finalize(raw);
  return out;
}

void SqliteIndex::relax_durability() { exec_or_throw("PRAGMA synchronous=NORMAL"); }

}  // namespace orbit::store
