// The disk tier's index: one SQLite database (WAL journal, synchronous=FULL) in the store directory.
//
//   meta(name TEXT PRIMARY KEY, value TEXT)      "format_version", "model_fingerprint"
//   entries(key TEXT PRIMARY KEY, kind, encoding, blob (path relative to the store), blob_bytes,
//           value_bytes, checksum, pinned, corrupt, hits, last_access, recompute_cost, expected_reuse)
//   leases(key, owner, kind, expires)            a process's hold on an entry (pin or read), until
//                                                `expires` (unix ms); renewed by the owner while it lives
//   remote_pending(seq, key, remote, kind)       a write (kind 0) or an erase (kind 1) queued for the remote
//                                                tier `remote` (its URL as shown) not yet acknowledged: a later
//                                                open re-sends it (a write from the local copy) (seq: the order
//                                                recorded, never reused; one record a key and remote, of the
//                                                key's latest write or erase, with that one's seq; kind was added
//                                                later: an index without it gets it when opened for writing, its
//                                                records being writes)
//   remote_abandoned(remote PRIMARY KEY, writes) writes to `remote` given up: their entries evicted past
//                                                max_held_fraction with their records (erase_unleased); made at
//                                                the first, read by `orbit store stat`
//
// A row is committed only after its blob is durable (blob_io.h), so every row names a complete blob.
// Writes are single transactions (an upsert that replaces a row returns the old blob for deletion after
// the commit), so a crash or a failed write (disk full, read-only file) leaves the previous state intact.
// Several processes may open the same index at once: every wait for another writer is bounded by a busy
// timeout (10 s), and write transactions begin IMMEDIATE (no lock upgrades, no deadlock). Opening also
// retries, for up to 30 s, the steps SQLite refuses at once rather than waiting (switching a new index to
// WAL, creating the schema, the format version), so processes that open a new store together all succeed.
// Thread-safety: none; one owner (the disk tier serialises calls).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "orbit/common/status.h"
#include "orbit/store.h"

struct sqlite3;

namespace orbit::store {

// What the error of an index whose schema is damaged says (is_index_damage, disk_tier.h, looks for it).
inline constexpr const char kSchemaDamaged[] = "its schema is damaged";
// What the error of a reader (Mode::kReadOnly) says of an index file that holds no table: one being created,
// or one whose first commits were lost with its WAL.
inline constexpr const char kNoTables[] = "holds no tables";
// What the error of an index file that is an SQLite database of another program says (tables, none of
// orbit's): refused in every mode and never changed, not taken for damage (is_index_damage) nor repaired.
inline constexpr const char kForeignDatabase[] = "is an SQLite database, but not an orbit store's index";

struct DiskRow {
  std::string key;
  EntryKind kind = EntryKind::kOther;
  BlobEncoding encoding = BlobEncoding::kExact;
  std::string blob;  // path relative to the store directory
  int64_t blob_bytes = 0;
  int64_t value_bytes = 0;
  std::string checksum;
  bool pinned = false;
  bool corrupt = false;
  int64_t hits = 0;
  int64_t last_access = 0;  // the store's logical clock (monotonic across reopenings)
  double recompute_cost = 1.0;
  double expected_reuse = 1.0;
};

// One record of remote_pending (see above).
struct RemotePendingRecord {
  int64_t seq = 0;
  std::string key;
  bool erase = false;  // an erase of the key (kind 1); false: a write (kind 0)
};

struct AccessUpdate {
  std::string key;
  int64_t hits = 0;
  int64_t last_access = 0;
};

class SqliteIndex {
 public:
  // kRepair: read-write, without refusing an index whose meta rows are missing (orbit store repair).
  enum class Mode { kReadWrite, kReadOnly, kRepair };

  // Opens `path` (kReadWrite creates it and the schema). Throws orbit::Error naming the path when the file
  // cannot be opened, is not an orbit index (also: entries without their meta rows), was written by a
  // newer format, holds a format version that is no number (damaged; kRepair writes this build's back and
  // damaged_version() names what it found), or its schema is damaged (kSchemaDamaged): a table lost one of its columns,
  // or the index has tables but no entries table (kRepair makes a missing table, and refuses a lost column), or, for
  // kReadOnly, it holds no table at all (kNoTables), or it is another program's database: tables, none of orbit's
  // (kForeignDatabase, every mode, the file untouched). kReadOnly also works on a read-only directory or file system
  // (where SQLite cannot create the WAL's shared-memory file, the index is opened as immutable: nobody can write it
  // there), unless a writer left commits in DIR/index.sqlite-wal (more than its header) and no readable -shm beside it:
  // an immutable read would miss them, so that is refused naming the -wal file and what to do.
  SqliteIndex(const std::string& path, Mode mode);
  ~SqliteIndex();
  SqliteIndex(const SqliteIndex&) = delete;
  SqliteIndex& operator=(const SqliteIndex&) = delete;

  const std::string& path() const { return path_; }
  // Mode::kRepair only: the format version value found damaged (not a number) and replaced by this build's
  // while opening; empty when the value was sound.
  const std::string& damaged_version() const { return damaged_version_; }

  // Reads throw orbit::Error (a broken index is bad input, docs/ARCHITECTURE.md §8).
  std::optional<std::string> meta(const std::string& name) const;
  std::vector<DiskRow> rows() const;
  std::optional<DiskRow> row(const std::string& key) const;

  // Writes return refused / out_of_capacity (SQLITE_FULL, or a write the system refused with ENOSPC, EDQUOT or
  // EFBIG) naming the index, with the system's error after SQLite's ("disk I/O error (File too large)"), on
  // failure; nothing changes then.
  Status set_meta(const std::string& name, const std::string& value);
  // Records `value` unless the meta row exists; returns the value the index holds afterwards.
  Result<std::string> set_meta_if_absent(const std::string& name, const std::string& value);
  // Inserts or replaces the row for row.key; `replaced_blob` receives the replaced row's blob (or "").
  // With replace = false a live (non-corrupt) row of the key is kept instead: *kept receives it and
  // nothing is written (another process stored the same content first).
  // budget_bytes (below the int64 maximum): the write is made only if the blob bytes of the live rows with store
  // keys (what a disk tier's mirror counts), the key's old row replaced by `row`, stay within it. Summed inside the
  // write's transaction, so processes sharing the index cannot together commit past it. Otherwise nothing is
  // written, *over_budget (non-null) is set and the status is out_of_capacity naming both figures.
  Status upsert(const DiskRow& row, std::string* replaced_blob, bool replace = true,
                std::optional<DiskRow>* kept = nullptr, int64_t budget_bytes = std::numeric_limits<int64_t>::max(),
                bool* over_budget = nullptr);
  // Deletes the row; `blob` receives its blob path ("" when there was no row).
  Status erase(const std::string& key, std::string* blob);
  // Runs `body` inside one write transaction (BEGIN IMMEDIATE ... COMMIT) and commits when it returns ok:
  // the upserts, erases and meta writes it makes through this index commit together or not at all (a kill
  // before the COMMIT leaves none of them; its error or exception rolls them all back). Not nested.
  Status in_transaction(const std::function<Status()>& body);
  // Copies the WAL's committed frames into the index file without waiting for another connection (a passive
  // checkpoint), so that the next write may start the WAL over from its beginning. SQLite checkpoints on its
  // own only after a commit, so a WAL that reached a file-size limit (RLIMIT_FSIZE) refused every later commit
  // until the last connection closed: what a write refused for want of space calls (DiskTier::commit). true
  // when every committed frame is in the index file; false (nothing lost) when a reader or a write of the
  // index file (a full disk) stopped it.
  bool checkpoint();
  // One small write transaction (the meta row "commit_probe" written and deleted again: no row stays, and one an
  // older build left goes): whether the index takes a commit now, at the cost of a page rather than a blob.
  // Fails as upsert does (out_of_capacity, refused).
  Status probe_commit();
  // Flags the row corrupt if it still names `blob` (a rewrite in between is left alone).
  Status mark_corrupt(const std::string& key, const std::string& blob);
  Status set_pinned(const std::string& key, bool pinned);
  // One transaction for many rows (missing keys are skipped).
  Status update_access(const std::vector<AccessUpdate>& updates);
  int64_t count_rows() const;
  // Why SQLite finds this index inconsistent (PRAGMA integrity_check: up to 3 findings joined by "; ", or
  // the error that stopped it), or "" when it passes. Unlike quick_check it compares every index with its
  // table, so a key byte flipped in one copy (the table's or the key index's) shows here ("row N missing
  // from index sqlite_autoindex_entries_1"). Reads the whole file: 5.5 ms for 10,000 entries.
  std::string inconsistency() const;
  // Rebuilds every index from its table (REINDEX), then checks again: "" when the index now passes
  // integrity_check, else why not (REINDEX refused: two rows of one key in the table; or what the check
  // still finds). For `orbit store repair` (Mode::kRepair: the store closed everywhere).
  std::string reindex();

  // ---- leases (times are unix milliseconds) ---------------------------------------------------------
  enum class LeaseKind { kPin = 0, kRead = 1 };
  Status acquire_lease(const std::string& key, const std::string& owner, LeaseKind kind, int64_t expires);
  Status release_lease(const std::string& key, const std::string& owner, LeaseKind kind);
  // Extends every lease of `owner`, takes again each of `held` (key and kind) that is gone (dropped as expired
  // by another process while this one stalled, or whose taking failed), then drops expired leases of every owner.
  Status renew_leases(const std::string& owner, const std::vector<std::pair<std::string, LeaseKind>>& held,
                      int64_t expires, int64_t now);
  Status release_all(const std::string& owner);
  // Deletes the row unless a lease on it is live at `now`, or (with `remote` non-empty) a write of it to `remote`
  // is recorded in remote_pending (its local copy is what that write is still to be sent from): ok(true) deleted
  // (`blob` receives its blob), ok(false) held or absent. `abandon_through` > 0: a recorded write of seq <= it
  // does not hold the row: that record is deleted in the eviction's transaction (the write is given up); a newer
  // one (recorded since) still holds it.
  Result<bool> erase_unleased(const std::string& key, int64_t now, std::string* blob, const std::string& remote = "",
                              int64_t abandon_through = 0);
  // Keys with a live pin lease (empty when the index has no lease table: an older store, read-only).
  std::set<std::string> live_pins(int64_t now) const;
  // ---- remote writes not yet acknowledged (remote_pending; RemoteJournal, remote_tier.h) -----------------
  // Records that `key`'s write (or, with `erase`, its erase) to `remote` is pending; *seq (when non-null) gets the
  // record's seq. A key already recorded gets a new record in place of its old one, of the new kind and with a new
  // seq (higher than any before), so that clearing the old one by its seq never takes the new one.
  Status record_remote_pending(const std::string& key, const std::string& remote, bool erase = false,
                               int64_t* seq = nullptr);
  // Drops, for `remote`, each record's key's record of that seq or older (a newer one, recorded since, stays;
  // absent ones are skipped), in one transaction.
  Status clear_remote_pending(const std::vector<RemotePendingRecord>& records, const std::string& remote);
  // The keys with a write to `remote` recorded (their local copies, what those writes are still to be sent
  // from), each with its record's seq; empty when the index has no remote_pending table (an older store opened
  // read-only).
  std::map<std::string, int64_t> remote_pending_writes(const std::string& remote) const;
  // By remote: how many writes and erases are recorded (remote_pending), and how many writes were given up
  // (erase_unleased with abandon_through: the remote_abandoned table, remote -> writes, made at the first). Empty
  // without the table.
  std::map<std::string, int64_t> remote_pending_counts() const;
  std::map<std::string, int64_t> remote_abandoned() const;
  // Drops `remote`'s count of writes given up (its remote_abandoned row; the table must exist) and answers how many
  // rows went (`orbit store reset-counts`).
  Result<int64_t> reset_remote_abandoned(const std::string& remote);
  // Moves `from`'s records in remote_pending to `to` (the same server under another spelling), a key recorded under
  // both keeping its newer record, in one transaction; answers how many records `from` had.
  Result<int64_t> adopt_remote_pending(const std::string& from, const std::string& to);
  // Drops every record of `remote` in remote_pending (`orbit store forget-remote`) and answers how many went.
  Result<int64_t> forget_remote_pending(const std::string& remote);
  // The highest seq recorded (for any remote), 0 when none (or no remote_pending table: an older store).
  int64_t last_remote_pending() const;
  // Up to `limit` records of `remote` with after < seq <= through, in seq order.
  std::vector<RemotePendingRecord> remote_pending(const std::string& remote, int64_t after, int64_t through,
                                                  int limit) const;
  // How many records of `remote` have seq <= through.
  int64_t count_remote_pending(const std::string& remote, int64_t through) const;

  // synchronous=NORMAL for this connection: for lease bookkeeping only. Its commits are not synced (a
  // lease lost in a crash lapses anyway), but its checkpoints are: SQLite syncs the WAL before copying it
  // into the index file and the index file before the WAL may restart, as every connection to a WAL index
  // must (with OFF, a checkpoint left the only durable copy of committed rows in a WAL the next commit
  // overwrote, and a power cut then lost them, or left the index malformed).
  void relax_durability();

 private:
  struct SchemaState;
  SchemaState read_schema() const;
  // Throws naming the index (kSchemaDamaged) when its schema is damaged for `mode`.
  void check_schema(const SchemaState& state, Mode mode) const;
  // Throws (kForeignDatabase, naming the file and its first tables) when `state` is another program's database:
  // tables, none of orbit's. Every mode, before anything is written to it.
  void refuse_foreign(const SchemaState& state) const;
  // Checks the schema, then makes its missing tables (kReadWrite, kRepair).
  void ensure_schema(Mode mode);
  void check_format_version(Mode mode);
  void open(const std::string& uri, int flags);
  // Throws naming path_-wal when it holds commits (more than its header) that a read-only open, which SQLite
  // refused for `why` (it could not open or create the -shm file), could only read as immutable, missing them.
  void refuse_unread_wal(const std::string& why) const;
  void exec_or_throw(const char* sql) const;
  void exec_retrying_or_throw(const char* sql) const;
  std::map<std::string, int64_t> remote_counts(const char* sql) const;  // (remote, count) rows of `sql`
  Status exec_status(const char* sql, const char* what);
  Status failure(int code, const char* what) const;
  // The blob bytes of the live rows with store keys other than `except_key` (upsert's budget).
  Result<int64_t> live_blob_bytes(const std::string& except_key) const;
  // BEGIN IMMEDIATE, unless in_transaction's is open (then upsert and erase write inside it).
  Status begin_write(const char* what);
  Status commit_write(const char* what);

  std::string path_;
  sqlite3* db_ = nullptr;
  bool batch_ = false;  // in_transaction's transaction is open
  std::string damaged_version_;
};

}  // namespace orbit::store
