// The chunk store (docs/ARCHITECTURE.md §6): content-addressed values (canonicals, patches, embeddings) across a
// device pool, host memory, disk and an optional remote server, with byte budgets, pins, eviction
// policies, demotion instead of loss and promotion on access.
//
//   put ──► disk (write-through: durable before put returns) ──► host or device copy (a cache)
//        └─► remote (queued, after the local copy is durable)
//   get ──► device │ host │ disk (verified; promoted to host) │ remote (verified; promoted to host + disk)
//   lease_device ──► pages shared by refcount
//
//   budget pressure:  device ──demote──► host ──demote──► disk ──evict──► gone (recomputable)
//
// A full memory tier of 1024 entries or more relieved for a put frees 1/64 of its budget beyond the put's
// need (as far as evictable entries allow), so that choosing what to evict, a pass over every entry, comes
// once per many puts rather than at each; below that, and on disk, it frees exactly what the put needs.
//
// Keys are orbit/store.h keys (64 hex). A key names one immutable value: a put of a key that is
// already stored is a no-op (unless PutOptions::replace), and readers see either nothing or the whole
// committed value, never a mix (values are shared immutably; disk rows commit after their blob).
//
// Expected outcomes are values: a miss (also a corrupt blob, reported in faults()), a refusal when no
// tier can admit a value (backpressure, never OOM), a disk-full or permission error. A disk that fails a
// write (full, read-only) does not lose the value: it is kept in memory, a warning naming the path and
// the reason is printed once, and stats() says disk_degraded. Bad input (a malformed key, a store of
// another model) throws orbit::Error.
//
// Many processes may open one directory at once (see orbit/store.h for the guarantees): entries any of
// them committed are found by all; pins and reads in flight are leases that eviction respects.
//
// Thread-safety: every member is safe to call from any thread. One mutex guards the bookkeeping; blob
// writes (put) and blob reads with their checksums (get) run outside it, so readers of memory tiers are
// not blocked by disk I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "orbit/common/status.h"
#include "orbit/store.h"
#include "orbit/store/device_tier.h"
#include "orbit/store/disk_tier.h"
#include "orbit/store/eviction.h"
#include "orbit/store/memory_tier.h"
#include "orbit/store/remote_tier.h"
#include "orbit/store/value.h"

namespace orbit::store {

struct ChunkStoreOptions {
  std::string model_fingerprint;  // required: Model::fingerprint(); keys and the disk index are tied to it
  std::string dir;                // store directory; empty = no disk tier (memory only, nothing persists)
  int64_t host_budget_bytes = int64_t{1} << 30;
  int64_t disk_budget_bytes = std::numeric_limits<int64_t>::max();
  std::optional<DeviceTierOptions> device;  // absent = no device tier
  std::shared_ptr<const EvictionPolicy> device_policy = std::make_shared<LruPolicy>();
  std::shared_ptr<const EvictionPolicy> host_policy = std::make_shared<LruPolicy>();
  std::shared_ptr<const EvictionPolicy> disk_policy = std::make_shared<LruPolicy>();
  // Every put is written to disk before it returns (durable across crashes); memory tiers are caches.
  // false: disk receives entries only when they are demoted out of host memory; one the disk cannot take then
  // leaves the store (StoreStats::demotions_lost, one warning a run).
  bool write_through = true;
  // Optional compressed cold tier: canonicals are stored on disk as int8 rows (about 1/4 of the bytes,
  // lossy; see test_store_tiers for the measured error). Off by default.
  bool int8_cold_tier = false;
  int64_t lease_ms = 30000;  // pins and reads in flight are leases for this long past the last renewal
  RemoteOptions remote;      // remote.url empty = no remote tier
  std::shared_ptr<BlobBackend> remote_backend;  // instead of remote.url (tests): the remote tier's backend
  // With a directory and a remote: record each remote write in the index until the remote acknowledges it
  // (RemoteJournal, remote_tier.h), so that the next open re-sends what a close or a kill left undelivered.
  // false: no record (bench_journal's baseline); an undelivered write is then lost to the remote for good.
  bool remote_journal = true;
  // Print a warning on stderr when a disk write fails (once, until one succeeds again) and for each blob a read
  // finds corrupt (it is then marked corrupt and served as a miss, so each warns once), and once for each blob
  // a read could not read (EACCES, EISDIR, EIO: no proof of damage; the entry is kept, each read a miss).
  bool warn_disk_errors = true;
  // Host-tier values in pinned (page-locked) host memory: for a store serving a CUDA engine, so recalls to
  // the device are DMA copies. Needs CUDA (the constructor throws otherwise). Off: pageable memory.
  bool pinned_host = false;
  IoHooks io_hooks;  // fault injection for tests
};

struct PutOptions {
  StoreTier tier = StoreTier::kHost;  // highest tier to place the value in (kDevice needs a page-layout match)
  bool pin = false;                   // never evicted or demoted while pinned
  bool replace = false;               // overwrite a stored value of the same key (else the put is a no-op)
  double recompute_cost = 1.0;        // for cost-aware eviction (e.g. forward tokens to rebuild it)
  double expected_reuse = 1.0;
  bool remote = true;  // false: kept in the local tiers only, never written to the remote tier
};

struct GetOptions {
  bool promote = true;  // copy a disk hit into host memory when the host budget can make room
  bool remote = true;   // false: the local tiers only (the remote tier is not asked; a local miss is a miss)
  // Non-null: set to the remote tier's reason when get() missed because the remote held a value for the key
  // and refused it (corrupt, another model's, or refused by RemoteOptions::validate; removed from the
  // server), else cleared. A refusal is still a miss: this only says why, without asking the remote twice.
  std::string* remote_refusal = nullptr;
  // Non-null: set to true when get() missed and the remote tier was asked but did not answer (down, skipped
  // within its retry_after_ms, or the call failed: RemoteTier::get's unavailable), else false. A miss with
  // this false is final for now: the remote answered that it holds no usable value.
  bool* remote_unavailable = nullptr;
  // The store's owner reads for itself, not for its user (the engine's stored fidelity calibration, read again
  // at later plans while the remote is down): counted in StoreStats::internal_reads (and the remote's
  // RemoteStats::internal_reads) instead of misses, the tiers' hits and the remote's hits, misses and skipped.
  // A remote call that fails still counts as an error.
  bool internal = false;
};

// A blob that failed verification on read: served as a miss and recorded here.
struct StoreFault {
  std::string key;
  std::string path;
  std::string reason;  // names the key and the path
};

class ChunkStore {
 public:
  // Opens or creates the store. Throws orbit::Error on invalid options, a store of another model
  // fingerprint, a directory being collected or repaired (gc/repair hold it exclusively), a lost index or
  // lost meta rows (see orbit store repair), or a malformed remote URL. Other processes may have the
  // directory open at the same time.
  explicit ChunkStore(ChunkStoreOptions options);
  ~ChunkStore();  // flush()es; never throws
  ChunkStore(const ChunkStore&) = delete;
  ChunkStore& operator=(const ChunkStore&) = delete;

  // Stores `value` under `key`. ok: committed (durable first when write-through) and placed in the
  // highest tier at or below options.tier that admits it. out_of_capacity: no tier can hold it (every
  // candidate pinned or in use, or on disk kept until its remote write is delivered (see docs/ARCHITECTURE.md §6),
  // or the value exceeds every budget) or the disk is full; refused: an I/O
  // error such as a read-only directory. On any failure nothing changes.
  Status put(const std::string& key, const ValuePtr& value, const PutOptions& options = {});
  // The value, or not_found (a miss; a corrupt or missing blob is a miss whose reason names key and path).
  Result<ValuePtr> get(const std::string& key, const GetOptions& options = {});
  bool contains(const std::string& key) const;
  // The highest tier holding `key`, or nullopt.
  std::optional<StoreTier> residence(const std::string& key) const;
  // What a read of `key` would bring back short of the value written, as a share of its energy (blob_format.h
  // kQuantizationErrorAttr): a value in memory says it (0 for one computed here or read from an exact blob); an
  // int8 blob on disk not read yet is priced at the largest share this store has read from one, or
  // kInt8ErrorPrior before any; an exact blob, a remote value and a missing key 0.
  double quantization_error(const std::string& key) const;
  static constexpr double kInt8ErrorPrior = 5e-5;
  // Removes `key` from every local tier and from the remote tier: the remote removal is queued behind
  // the writes already queued (so a write of `key` in flight cannot bring it back), retried while the
  // remote is down, and done once drain_remote() returns true. not_found when neither a local tier nor
  // the remote holds it; refused when the index cannot be written.
  Status erase(const std::string& key);
  Status pin(const std::string& key);
  Status unpin(const std::string& key);
  // Brings the entry into the device tier (from host or disk) and retains its pages for the caller.
  // refused without a device tier or when the value does not match the page layout.
  Result<DeviceLease> lease_device(const std::string& key);

  // Each tier's entries, bytes and pinned entries, and the store's counters. Cheap enough for every /metrics
  // scrape: the tiers keep their entry and byte counts, and pinned entries are counted from the set of pinned
  // keys, so the cost grows with the entries pinned (few: pins are opt-in), not with the entries stored.
  // verify_integrity() checks every figure against a walk of all entries.
  StoreStats stats() const;
  std::vector<StoreFault> faults() const;
  // Makes what it can durable: writes back the entries held only in memory since a disk write failed
  // (see stats().disk_degraded), then persists access times and hit counts of disk entries (the eviction
  // order a later process starts from). ok when every entry is durable; otherwise the failure of the disk
  // (out_of_capacity or refused), its reason naming how many entries are still only in memory and why:
  // they are lost when the store closes. The destructor calls it and prints that reason on stderr.
  Status flush();
  // Entries held only in memory because their disk write failed (0 without a disk tier).
  int64_t memory_only_entries() const;
  // Waits until queued remote writes are sent (or failed), and the writes an earlier run left undelivered are
  // re-sent, at most `timeout`. true when none is left.
  bool drain_remote(std::chrono::milliseconds timeout);
  bool has_remote() const { return remote_ != nullptr; }
  // The remote tier's read rate, measured with a probe blob of `bytes` bytes (RemoteTier::measure_read):
  // what calibration prices remote recalls with. refused without a remote tier or while it is down.
  Result<RemoteReadSample> measure_remote_read(int64_t bytes);
  // Budgets, accounting, tier exclusivity, pool and index consistency (deep: re-reads the index).
  // Throws orbit::Error describing the first violation.
  void verify_integrity(bool deep = false) const;
  const ChunkStoreOptions& options() const { return options_; }

 private:
  struct Meta {
    EntryKind kind = EntryKind::kOther;
    bool pinned = false;
    uint64_t last_access = 0;
    int64_t hits = 0;
    double recompute_cost = 1.0;
    double expected_reuse = 1.0;
    bool dirty = false;  // access not yet persisted
  };
  struct Counters {
    int64_t hits = 0, evictions = 0, demotions = 0, promotions = 0;
  };

  // Private members below require mu_ held, except put_local and get_remote.
  Tier* tier(StoreTier id) const;
  const EvictionPolicy& policy(StoreTier id) const;
  Counters& counters(StoreTier id) { return counters_[static_cast<int>(id)]; }
  void touch(const std::string& key, Meta& meta);
  RowAttrs row_attrs(const Meta& meta) const;
  bool resident_anywhere(const std::string& key) const;
  // meta_ changes only through these three (and known(), which adds unpinned entries), so pinned_ stays the
  // set of keys whose Meta is pinned.
  void set_meta(const std::string& key, const Meta& m);
  void drop_meta(const std::string& key);
  void set_pinned(const std::string& key, Meta& m, bool pinned);
  // The pinned entries `t` holds: a walk of pinned_ only.
  int64_t pinned_in(const Tier& t) const;
  void forget_if_gone(const std::string& key);
  // Frees `need` bytes in `t` by demoting evictable entries other than `exclude`, in policy order (and, in a
  // memory tier of many entries, relief_margin's bytes more where entries allow). On disk, entries held for their
  // undelivered remote writes stay, except those past RemoteOptions::max_held_fraction: evicted first, oldest
  // record first, their writes given up (held_for_remote, give_up_held).
  Status make_room(Tier& t, int64_t need, const std::string& exclude);
  int64_t relief_margin(const Tier& t) const;
  void evict(Tier& t, const std::string& key);
  // The disk's entries held for the remote's undelivered writes (DiskTier::held_for_remote: key -> record seq),
  // and of those in `t` (the disk; nothing for another tier) other than `exclude`, the ones past
  // max_held_fraction of its budget: the newest records fill that share, the older rest are past it, listed
  // (seq, key) oldest first.
  struct HeldForRemote {
    std::map<std::string, int64_t> held;
    std::vector<std::pair<int64_t, std::string>> past_bound;
  };
  HeldForRemote held_for_remote(const Tier& t, const std::string& exclude) const;
  // Evicts the disk entry `key` held for its write of record `seq`, giving the write up (DiskTier::evict with
  // abandon_through): true when it left the disk.
  bool give_up_held(const std::string& key, int64_t seq);
  // Places a value leaving `from` (or new) in the highest memory tier strictly below `from` that admits
  // it, else on disk. A failure when it found no place (the value is lost to the store), saying why.
  Status place_below(StoreTier from, const std::string& key, const ValuePtr& value);
  // A value that left memory and found no place below (`why`) while the store has a disk: counted in
  // demotions_lost, the first in a run warned about.
  void demotion_lost(const std::string& key, const Status& why);
  Status write_to_disk_locked(const std::string& key, const ValuePtr& value);
  // Makes room on disk for the prepared blob and commits its row (DiskTier::commit). Other processes sharing the
  // directory may fill the room made before the commit: the row's transaction checks the budget against every
  // process's rows, and a refusal there makes room again (a few tries). *room_refused: the failure is for want of
  // room (the blob discarded; no disk fault); otherwise a failure is the commit's (DiskTier::commit discarded it).
  Status commit_to_disk(const PreparedBlob& blob, const RowAttrs& attrs, bool replace, const std::string& remote,
                        int64_t* seq, bool* room_refused);
  // A disk write succeeded: writes the memory-only entries back and clears disk_degraded once none is
  // left. Returns the first failure (the store stays degraded).
  Status disk_recovered();
  // flush()'s failure: how many entries are not durable (or were lost) and `cause` (ok: the last warning).
  Status not_durable(const Status& cause) const;
  // The value of a memory-only entry, or null when it left memory (then it is no longer tracked).
  ValuePtr memory_copy(const std::string& key) const;
  // put() without the remote write (also how a remote hit is promoted). Takes mu_ itself. Its stages:
  // put_existing, prepare_put (without mu_), then under mu_ put_meta, commit_put and place_put. Non-null
  // `journal_seq`: the remote write follows, and with a journal it is recorded in the row's commit; *journal_seq
  // gets that record's seq (0: not recorded: no journal, or no row committed, as for a key already stored).
  Status put_local(const std::string& key, const ValuePtr& value, const PutOptions& options,
                   int64_t* journal_seq = nullptr);
  // A put's disk half, prepared outside mu_.
  struct PendingPut {
    bool disk_only = false;                // PutOptions::tier is kDisk
    std::optional<PreparedBlob> prepared;  // encoded, written and fsync'd; not yet committed
    Status disk_error;                     // the disk failed: the value is kept in memory only
    std::string journal_remote;            // non-empty: record the remote write with the row (RemoteJournal)
    int64_t journal_seq = 0;               // the row committed with that record, of this seq (0: no record)
  };
  // A put (not a replacement) of a key already stored: touches it, applies the pin, brings it back into
  // memory. nullopt when the key is unknown or held only in memory for want of a disk write (go on).
  std::optional<Status> put_existing(const std::string& key, const ValuePtr& value, const PutOptions& options);
  // Encodes and writes the blob without mu_ when the put goes to disk. A status: the put ends with it.
  std::optional<Status> prepare_put(const std::string& key, const StoredValue& value, const PutOptions& options,
                                    PendingPut* pending);
  // The new entry's Meta (a replacement keeps the pin and the hit count).
  Meta put_meta(const std::string& key, const StoredValue& value, const PutOptions& options);
  // Commits the prepared blob (room first), drops stale copies from every tier and records `m`. A status:
  // the put ends with it.
  std::optional<Status> commit_put(const std::string& key, const Meta& m, const PutOptions& options,
                                   PendingPut& pending);
  // Places the committed (or memory-only) value in memory, or writes it to disk when memory cannot hold it.
  Status place_put(const std::string& key, const ValuePtr& value, const PutOptions& options, PendingPut& pending);
  // A disk write failed: count it, warn once (path and reason), and remember it for stats().
  void disk_failed(const Status& status);
  // The entry's Meta, created from the disk index when another process committed it. nullptr when absent.
  Meta* known(const std::string& key);
  // The remote tier's journal (chunk_store_journal.cpp): its records in the disk index, and the local copies
  // they re-send. Made only with a disk tier.
  class Journal;
  // null without a disk tier or remote_journal; sets journal_remote_.
  std::shared_ptr<RemoteJournal> make_journal();
  void adopt_other_spellings(const std::string& remote);  // chunk_store_journal.cpp
  // The value a re-send of `key` sends: a memory tier's copy, or the disk's (read under a read lease), without
  // touching the entry or counting a hit. not_found when no local tier holds a readable copy (a corrupt blob
  // included); refused when the disk could not read it now. Takes mu_ itself.
  Result<ValuePtr> local_copy(const std::string& key);
  // Brings a value read from the remote into the local tiers (host, and disk when there is one).
  void promote_remote(const std::string& key, const ValuePtr& value);
  Result<ValuePtr> get_remote(const std::string& key, const GetOptions& options);  // without mu_
  // One of get()'s looks at the local tiers, and what get() does next: return `result` (kFound: a memory
  // tier's or the disk's read, failed or not), stop looking locally (kMiss: `result` holds why where the
  // entry is known but cannot be read, else it is simply absent), or look again (kRetry: the entry moved
  // meanwhile). kOnDisk only from get_from_memory: the entry is on disk only, its row to be read.
  struct LocalGet {
    enum Next { kFound, kMiss, kRetry, kOnDisk } next = kMiss;
    std::optional<Result<ValuePtr>> result;
  };
  // Without mu_: the memory tiers, then the disk row under a read lease (its blob read outside mu_).
  LocalGet get_local(const std::string& key, const GetOptions& options);
  // Touches a known entry and reads it from a memory tier (a hit counted unless `internal`); kOnDisk with *row
  // its disk row otherwise.
  LocalGet get_from_memory(const std::string& key, DiskRow* row, bool internal);
  // A disk read of `row` failed with `failure`; `current` is the key's row now. Moved or rewritten: kRetry. A
  // refused read (the system, not the blob): kMiss, the entry kept, warned once per blob. Else the blob is
  // recorded as a fault and marked corrupt: kMiss with `failure`.
  LocalGet disk_read_failed(const std::string& key, const DiskRow& row, const DiskRow* current, const Status& failure);
  // A disk hit still current: a copy in host memory when no memory tier holds one and room can be made.
  void promote_disk_hit(const std::string& key, const ValuePtr& value);
  // Mirrors disk rows other processes added or evicted into meta_ (before disk budget decisions).
  void sync_disk();
  bool place_in_memory(StoreTier highest, const std::string& key, const ValuePtr& value);

  ChunkStoreOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<DeviceTier> device_;
  std::unique_ptr<MemoryTier> host_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<RemoteTier> remote_;
  std::string journal_remote_;  // the journal's name of the remote (its URL as shown); "" without a journal
  std::unordered_map<std::string, Meta> meta_;
  std::unordered_set<std::string> pinned_;  // the keys of meta_ whose entry is pinned
  uint64_t clock_ = 0;
  Counters counters_[3];
  int64_t misses_ = 0, internal_reads_ = 0, refusals_ = 0, corrupt_reads_ = 0, io_errors_ = 0;
  int64_t unreadable_reads_ = 0;
  double max_int8_error_ = 0;  // the largest quantization_error of a value read from disk
  bool disk_degraded_ = false;
  std::string disk_warning_;
  // Keys put while the disk failed, held only in a memory tier until disk_recovered() writes them back.
  std::set<std::string> memory_only_;
  int64_t memory_only_lost_ = 0;  // memory-only entries that memory evicted before the disk took them
  int64_t demotions_lost_ = 0;    // StoreStats::demotions_lost
  std::vector<StoreFault> faults_;
  std::set<std::string> unreadable_warned_;  // blobs (index paths) whose failed read was warned about
  bool lossy_warned_ = false;                // another store's int8 copy met by this exact one was warned about
};

}  // namespace orbit::store
