// SqliteIndex's entries (orbit/store/sqlite_index.h): reading rows, and the writes that add, replace, flag and
// remove them.
#include <sqlite3.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/store/sqlite_index.h"
#include "sqlite_stmt.h"

namespace orbit::store {

namespace {

const char* kColumns =
    "key, kind, encoding, blob, blob_bytes, value_bytes, checksum, pinned, corrupt, hits, last_access, "
    "recompute_cost, expected_reuse";

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

}  // namespace

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

int64_t SqliteIndex::count_rows() const {
  Stmt s(db_, "SELECT count(*) FROM entries", path_);
  const int rc = s.step();
  ORBIT_CHECK(rc == SQLITE_ROW, "store index " << path_ << ": counting entries: " << sqlite3_errmsg(db_));
  return s.i64(0);
}

Result<int64_t> SqliteIndex::live_blob_bytes(const std::string& except_key) const {
  // A store key is 64 lowercase hex characters (is_store_key); rows with others are damage the tier leaves out.
  Stmt s(db_,
         "SELECT COALESCE(SUM(blob_bytes), 0) FROM entries WHERE corrupt = 0 AND key <> ?1 AND length(key) = 64 "
         "AND key NOT GLOB '*[^0-9a-f]*'",
         path_);
  s.bind(1, except_key);
  const int rc = s.step();
  if (rc != SQLITE_ROW) return failure(rc, "summing the committed blob bytes");
  return s.i64(0);
}

Status SqliteIndex::upsert(const DiskRow& r, std::string* replaced_blob, bool replace, std::optional<DiskRow>* kept,
                           int64_t budget_bytes, bool* over_budget) {
  replaced_blob->clear();
  if (kept) kept->reset();
  if (over_budget) *over_budget = false;
  Status begin = begin_write("beginning a write");
  if (!begin) return begin;
  std::optional<Transaction> tx;
  if (!batch_) tx.emplace(db_);
  {
    const std::string sql = std::string("SELECT ") + kColumns + " FROM entries WHERE key = ?1";
    Stmt old(db_, sql.c_str(), path_);
    old.bind(1, r.key);
    const int rc = old.step();
    if (rc == SQLITE_ROW) {
      DiskRow existing = read_row(old);
      if (!replace && !existing.corrupt && kept) {  // the same content is already committed: keep it
        *kept = std::move(existing);
        return Status::ok();  // the transaction rolls back: nothing was written
      }
      *replaced_blob = existing.blob;
    } else if (rc != SQLITE_DONE) {
      return failure(rc, "reading the old row");
    }
  }
  if (budget_bytes != std::numeric_limits<int64_t>::max()) {
    Result<int64_t> held = live_blob_bytes(r.key);
    if (!held) return held.status();
    if (held.value() + r.blob_bytes > budget_bytes) {
      if (over_budget) *over_budget = true;
      return Status::out_of_capacity("store index " + path_ + ": " + std::to_string(r.blob_bytes) + " bytes for key " +
                                     r.key + " past the disk budget of " + std::to_string(budget_bytes) + " (" +
                                     std::to_string(held.value()) + " committed)");
    }
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
  Status commit = commit_write("committing a row");
  if (!commit) {
    replaced_blob->clear();
    return commit;
  }
  if (tx) tx->committed();
  if (*replaced_blob == r.blob) replaced_blob->clear();
  return Status::ok();
}

Status SqliteIndex::erase(const std::string& key, std::string* blob) {
  blob->clear();
  Status begin = begin_write("beginning a delete");
  if (!begin) return begin;
  std::optional<Transaction> tx;
  if (!batch_) tx.emplace(db_);
  {
    Stmt old(db_, "SELECT blob FROM entries WHERE key = ?1", path_);
    old.bind(1, key);
    const int rc = old.step();
    if (rc == SQLITE_ROW)
      *blob = old.text(0);
    else if (rc != SQLITE_DONE)
      return failure(rc, "reading the row");
  }
  Stmt s(db_, "DELETE FROM entries WHERE key = ?1", path_);
  s.bind(1, key);
  int rc = s.step();
  if (rc != SQLITE_DONE) {
    blob->clear();
    return failure(rc, "deleting a row");
  }
  Status commit = commit_write("committing a delete");
  if (!commit) {
    blob->clear();
    return commit;
  }
  if (tx) tx->committed();
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
