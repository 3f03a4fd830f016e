// Disk tier: an SQLite index (sqlite_index.h) plus one immutable blob file per committed write
// (blob_format.h), in a store directory laid out as orbit/store.h describes.
//
// Write protocol (crash-safe): prepare() writes the blob to a temp file, fsyncs it, renames it into
// place and fsyncs the directory; commit() then inserts the index row in one transaction and only after
// that unlinks the blob the row replaced. A crash anywhere leaves every committed row naming a complete
// blob; what it can leave behind (temp files, blobs no row names) is removed by gc_store().
//
// Many processes may open one directory at once (each takes a shared flock on DIR/LOCK; gc and repair
// take it exclusively). The tier mirrors the index rows it knows; a key it does not know is looked up in
// the index (find()), so entries other processes commit are visible at once. Pins and reads in flight
// are leases in the index (owner = this tier's process and object, expiry renewed every lease_ms / 3 by a
// background thread while the tier lives): evict() never deletes a row another live owner holds.
// The index records the model fingerprint on first open; opening with another fingerprint throws
// orbit::Error naming both. A directory whose blobs survive but whose index.sqlite is gone, empty or
// damaged (SQLite reports it malformed or not a database, or its entries table is gone), or whose index
// lost its meta rows, is refused with a pointer to `orbit store repair` (never opened as an empty store
// that would orphan the blobs).
//
// Every blob path read from the index is confined to DIR/blobs (resolve()): an absolute path, a '..'
// component, or a symlink leading out is refused (the row is treated as corrupt) and never read or unlinked.
//
// Thread-safety: prepare(), discard(), load(), resolve(), acquire_read(), release_read() and the
// remote_pending calls may run on any thread concurrently with anything; every other member must be serialised by the
// owner (the ChunkStore).
#pragma once

#include <atomic>
#include <condition_variable>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "orbit/store/blob_io.h"
#include "orbit/store/sqlite_index.h"
#include "orbit/store/tier.h"

namespace orbit::store {

// Whether `error` (thrown by SqliteIndex) says the index file is damaged: SQLite found it malformed or
// not a database (a truncated file, a garbage header), or its schema lost a table or a column
// (kSchemaDamaged), as opposed to busy, read-only or of another version.
bool is_index_damage(const std::exception& error);

struct DiskTierOptions {
  std::string dir;                // created if missing
  std::string model_fingerprint;  // required
  int64_t budget_bytes = std::numeric_limits<int64_t>::max();
  bool int8_canonicals = false;  // canonicals written as int8 rows (lossy; see blob_format.h)
  int64_t lease_ms = 30000;      // how long a pin or read lease outlives its owner's last renewal
  IoHooks io_hooks;              // fault injection (tests)
};

// A blob durable on disk whose row is not committed yet.
struct PreparedBlob {
  std::string key;
  std::string blob;  // relative to the store directory
  int64_t blob_bytes = 0;
  int64_t value_bytes = 0;
  std::string checksum;
  EntryKind kind = EntryKind::kOther;
  BlobEncoding encoding = BlobEncoding::kExact;
};

// The store's bookkeeping kept in a row.
struct RowAttrs {
  bool pinned = false;
  int64_t hits = 0;
  int64_t last_access = 0;
  double recompute_cost = 1.0;
  double expected_reuse = 1.0;
};

class DiskTier final : public Tier {
 public:
  explicit DiskTier(const DiskTierOptions& options);
  ~DiskTier() override;
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  StoreTier id() const override { return StoreTier::kDisk; }
  int64_t budget_bytes() const override { return options_.budget_bytes; }
  int64_t used_bytes() const override { return used_; }
  int64_t num_entries() const override { return static_cast<int64_t>(rows_.size()); }
  bool accepts(const StoredValue&) const override { return true; }
  // The exact blob size (encoding included).
  int64_t charge(const StoredValue& value) const override;
  Status insert(const std::string& key, const ValuePtr& value) override;
  Result<ValuePtr> read(const std::string& key) override;
  // Best effort: a failed index write leaves the entry in place (see erase()).
  void remove(const std::string& key) override;
  bool contains(const std::string& key) const override { return rows_.count(key) > 0; }
  int64_t charged(const std::string& key) const override;

  // ---- thread-safe -------------------------------------------------------------------------------
  // Encodes and durably writes the blob (no index change). Errors: out_of_capacity (disk full),
  // refused (permission, I/O), each naming the path.
  // Refused (naming the directory) when the store was moved or removed while open: its LOCK file at the path is
  // not the one this process holds.
  Result<PreparedBlob> prepare(const std::string& key, const StoredValue& value) const;
  Status check_in_place() const;
  // Unlinks a prepared blob that will not be committed.
  void discard(const PreparedBlob& blob) const;
  // Reads and verifies the blob a row names. not_found with "key K, blob P: reason" when it is missing,
  // truncated, fails its checksum, or belongs to another key or model (proven damage); refused when it
  // could not be read now (out of file descriptors, an I/O error: read_file_bytes), which proves nothing.
  Result<ValuePtr> load(const DiskRow& row) const;
  std::string absolute(const std::string& blob) const;
  // The absolute path of `blob` when it stays inside DIR/blobs; refused naming the row's path otherwise.
  Result<std::string> resolve(const std::string& blob) const;
  // A read lease on `key` for this owner (released by release_read); a failure only means no lease. Counted:
  // concurrent reads of one key hold its lease until the last is released.
  bool acquire_read(const std::string& key);
  void release_read(const std::string& key);
  // The index's record of remote writes and erases not yet acknowledged (SqliteIndex's remote_pending), through the
  // lease connection: its commits survive the process's death (a kill), not a power cut (a record lost there
  // only means a write not re-sent; the remote is a cache). *seq (non-null): the record's seq.
  Status record_remote_pending(const std::string& key, const std::string& remote, bool erase = false,
                               int64_t* seq = nullptr);
  // Clears each record's key's record of that seq or older (SqliteIndex::clear_remote_pending).
  Status clear_remote_pending(const std::vector<RemotePendingRecord>& records, const std::string& remote);
  int64_t last_remote_pending();
  // Throw orbit::Error when the index cannot be read (as SqliteIndex's reads do).
  std::vector<RemotePendingRecord> remote_pending(const std::string& remote, int64_t after, int64_t through, int limit);
  int64_t count_remote_pending(const std::string& remote, int64_t through);
  // By remote: the records (SqliteIndex::remote_pending_counts); and `from`'s moved to `to`
  // (SqliteIndex::adopt_remote_pending).
  std::map<std::string, int64_t> remote_pending_counts();
  Result<int64_t> adopt_remote_pending(const std::string& from, const std::string& to);

  // ---- serialised by the owner ----------------------------------------------------------------------
  // Commits the row (replacing any row for the key, whose blob is then unlinked). With replace = false
  // a live row another process committed first is kept, and the prepared blob discarded. On failure the
  // prepared blob is discarded and nothing changes. A non-empty `remote_pending` also records a pending write
  // of the key to that remote (SqliteIndex::record_remote_pending) in the same transaction, kept row or not:
  // the row and its record commit together (no kill between them leaves a row whose remote write is not
  // recorded), and a put pays no commit of its own for the record.
  // *seq (non-null) gets that record's seq (0 without one).
  // With a budget (DiskTierOptions::budget_bytes) the row commits only if every process's committed blob bytes,
  // summed inside its transaction, stay within it (SqliteIndex::upsert): otherwise out_of_capacity, *over_budget
  // (non-null) set, and the prepared blob kept for the caller to make room (ChunkStore::commit_to_disk) and try
  // again, or discard.
  Status commit(const PreparedBlob& blob, const RowAttrs& attrs, bool replace = true,
                const std::string& remote_pending = "", int64_t* seq = nullptr, bool* over_budget = nullptr);
  // Deletes the key's row (and unlinks its blob). A non-empty `remote_pending` also records the erase of the key
  // for that remote (SqliteIndex::record_remote_pending, *seq its seq) in the same transaction: the record and the
  // removal commit together or not at all (no kill or power cut, and no refused record, leaves a removed row whose
  // remote removal is not recorded).
  Status erase(const std::string& key, const std::string& remote_pending = "", int64_t* seq = nullptr);
  // Eviction keeps the rows whose write to `remote` is recorded (remote_pending): the local copy such a write is
  // still to be sent from (a re-send at the next open reads it). "" (the default): no row is held for a remote.
  void hold_pending_writes(const std::string& remote) { held_for_remote_ = remote; }
  // The keys eviction keeps for hold_pending_writes' remote, each with its record's seq (empty without one).
  std::map<std::string, int64_t> held_for_remote() const;
  // Whether the index takes a commit now: ok at once unless the last commit() was refused; after a refusal, one
  // small write transaction (SqliteIndex::probe_commit, checkpointing after a refusal for want of space as
  // commit() does), so that a store whose index refuses commits (a full disk, a file-size limit) does not write
  // a whole blob per put only to discard it. ok clears the refusal.
  Status probe_commit();
  // Eviction: deletes the row unless another process holds a lease on it, or its write to hold_pending_writes'
  // remote is recorded. ok(false) when held. `abandon_through` > 0: a recorded write of seq <= it (held_for_remote's)
  // is given up instead: its record is dropped in the eviction's transaction (SqliteIndex::erase_unleased); one
  // recorded since still holds the row.
  Result<bool> evict(const std::string& key, int64_t abandon_through = 0);
  // nullptr when absent (corrupt rows are absent). locate() looks in the mirror only; find() also in
  // the index (entries other processes committed) and adds what it finds to the mirror.
  const DiskRow* locate(const std::string& key) const;
  const DiskRow* find(const std::string& key);
  // Re-reads the key's row from the index into the mirror (dropping it when gone); the row or nullptr.
  const DiskRow* refresh(const std::string& key);
  // Reloads the whole mirror from the index (rows added or evicted by other processes). Returns the keys
  // that appeared and the keys that vanished.
  void sync(std::vector<std::string>* added, std::vector<std::string>* removed);
  const std::unordered_map<std::string, DiskRow>& rows() const { return rows_; }
  // Flags the row corrupt in the index (if it still names `row.blob`) and drops it from the tier:
  // the entry is a miss from now on; `orbit store verify` keeps reporting it; a later write replaces it.
  void mark_corrupt(const DiskRow& row);
  // A pin is a lease of this owner (it lapses when the process dies); the row's pinned column is unused. A pin
  // whose lease could not be taken now (the index busy) is taken by the next heartbeat, as is one another
  // process dropped as expired while this one stalled past the lease time.
  Status set_pinned(const std::string& key, bool pinned);
  const std::string& owner() const { return owner_; }
  Status persist_access(const std::vector<AccessUpdate>& updates);
  // The tier's rows and bytes against the index (deep: also re-reads every row). Throws on a mismatch.
  void verify_integrity(bool deep) const;
  const DiskTierOptions& options() const { return options_; }

 private:
  void heartbeat();
  void add_row(DiskRow row);
  // Whether the mirror takes `row`: not marked corrupt, and its key a store key (a row whose key a damaged page
  // changed names no chunk: it is left out, with one warning naming the index and `orbit store repair`).
  bool usable(const DiskRow& row);
  // Opens index_ and loads its rows, refusing a lost, empty or damaged index beside existing blobs.
  void open_index();
  void reindex_if_inconsistent(const std::string& index_path, const std::string& repair);

  DiskTierOptions options_;
  std::string blobs_root_;  // canonical path of DIR/blobs
  std::string owner_;
  int lock_fd_ = -1;
  std::unique_ptr<SqliteIndex> index_;
  std::mutex lease_mu_;                  // guards leases_ (the lease connection) and held_
  std::unique_ptr<SqliteIndex> leases_;  // synchronous=NORMAL: leases need no durability, checkpoints do
  // The leases this process holds, with their holders (reads of a key on several threads share its one row):
  // the row is taken on the first and dropped with the last, and every heartbeat takes again those gone.
  std::map<std::pair<std::string, SqliteIndex::LeaseKind>, int64_t> held_;
  std::mutex beat_mu_;
  std::condition_variable beat_cv_;
  bool stop_ = false;
  std::thread beat_;
  std::unordered_map<std::string, DiskRow> rows_;  // usable rows, mirrored from the index
  bool warned_bad_keys_ = false;                   // usable() warned of a row whose key is not a store key
  int64_t used_ = 0;
  bool commit_refused_ = false;  // the last commit() was refused by the index: probe_commit() asks it again
  std::string held_for_remote_;  // hold_pending_writes
};

}  // namespace orbit::store
