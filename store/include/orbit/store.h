// The chunk store's public, torch-free surface (docs/ARCHITECTURE.md §6): content and patch keys, tier names and
// statistics, and offline inspection of a store directory (what `orbit store ls|stat|verify|gc` prints).
//
// The store itself (tensors in, tensors out, budgets, eviction, demotion) is engine-internal and lives in
// the orbit::store library (store/include/orbit/store/); an application reaches it through the Engine.
// Nothing here includes torch.
//
// Store directory layout (one model fingerprint per directory):
//
//   DIR/index.sqlite (+ -wal, -shm)   SQLite index in WAL mode: one row per committed entry
//   DIR/blobs/<k0k1>/<key>.<nonce>.blob  one immutable blob per committed write (framed, SHA-256 trailer)
//   DIR/blobs/<k0k1>/.<...>.tmp       a write in flight (or killed mid-write); removed by gc
//   DIR/LOCK                          flock(2): shared by every process that has the store open;
//                                     exclusive for gc and repair (which need it closed everywhere)
//
// A blob is renamed into place (after fsync) before its index row commits, so every row names a complete
// blob; a crash can leave only unreferenced blobs and temp files, which gc removes.
//
// Many processes, one directory (each with its own Engine / ChunkStore), guarantee:
//   - every process sees every entry any process committed (a local miss consults the index);
//   - a reader sees a whole committed entry or a miss, never a partial one (blobs are immutable and
//     complete before their row commits; rows commit in single SQLite WAL transactions; busy waits are
//     bounded by a 10 s busy timeout);
//   - the same key written by two processes at once is stored once (the second keeps the first's row);
//   - eviction under a disk budget never removes an entry another process has pinned or is reading:
//     pins and reads are leases (DIR/index.sqlite table `leases`, owner = process, with an expiry that the
//     owner renews while it lives), so the pins of a process that crashed lapse after the lease time;
//   - a blob path in the index is always confined to DIR/blobs (absolute paths, '..' and symlinks that
//     leave it are refused and reported, never read or deleted).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "orbit/common/status.h"

namespace orbit {

// ---- keys --------------------------------------------------------------------------------------------
// Every key is 64 lowercase hex characters (SHA-256). Hashed records are framed (a domain tag, then
// length-prefixed fields in little-endian order), so no two different inputs share a byte stream. Keys
// never depend on where a chunk sits in a window, and are identical in every process and build.

// A chunk of token ids, for the model with `model_fingerprint` (Model::fingerprint()).
std::string chunk_key_tokens(const std::string& model_fingerprint, const std::vector<int64_t>& tokens);

// A media chunk (image, video frame) identified by a caller's digest of its pixels or encoded bytes, plus
// its position grid: `grid` holds `grid_dims` coordinates per token, flattened token-major (M-RoPE:
// grid_dims = 3, (t, h, w) per token). The grid is hashed relative to its per-coordinate minimum, so the
// same media placed at another offset has the same key. Throws orbit::Error when grid.size() is not a
// multiple of grid_dims or grid_dims < 1.
std::string chunk_key_media(const std::string& model_fingerprint, const std::string& media_digest,
                            const std::vector<int64_t>& grid, int64_t grid_dims);

// A chunk given as input embeddings: raw bytes of a row-major [rows, cols] array of `dtype` ("float32",
// "bfloat16", ...), plus an optional position grid as above (empty = none).
struct EmbeddingBytes {
  const void* data = nullptr;
  std::size_t size = 0;  // bytes; must equal rows × cols × dtype size (checked by the caller's codec)
  std::string dtype;
  int64_t rows = 0;
  int64_t cols = 0;
};
std::string chunk_key_embeddings(const std::string& model_fingerprint, const EmbeddingBytes& embeddings,
                                 const std::vector<int64_t>& grid = {}, int64_t grid_dims = 3);

// Context signatures for patch keys. `context` is the ordered list of chunk keys before the chunk.
//   exact: hashes the ordered context (a patch formed behind exactly this sequence): a hash chain,
//          c0 = H(tag), c(i+1) = H(c(i), key i), so every prefix of a context is signed in O(1) more.
//   orbit: hashes the ordered prefix (its chain) plus the multiset of antecedent keys (any order of the
//          set): the count and the sum mod 2^256 of each antecedent's own hash, so it too grows in O(1).
std::string exact_signature(const std::vector<std::string>& context);
std::string orbit_signature(const std::vector<std::string>& prefix, const std::vector<std::string>& antecedents);

// Both signatures of a context that grows one key at a time, each push O(1): what a planner uses to sign
// the context of every instance of a window in O(n) instead of O(n²). After pushing keys k0..k(n-1),
// exact() == exact_signature({k0..k(n-1)}) and orbit() == orbit_signature({k0..k(p-1)}, {kp..k(n-1)}) for
// p = min(prefix, n). push() throws orbit::Error on a string that is not a 64-hex key.
class ContextSigner {
 public:
  explicit ContextSigner(std::size_t prefix = 0);
  void push(const std::string& key);
  std::size_t size() const { return size_; }
  std::string exact() const;
  std::string orbit() const;

 private:
  std::size_t prefix_;
  std::size_t size_ = 0;
  std::string chain_;               // exact chain over every key pushed
  std::string prefix_chain_;        // the chain once the prefix was complete
  uint64_t sum_[4] = {0, 0, 0, 0};  // antecedents' hashes added mod 2^256, little-endian limbs
};

struct PatchKey {
  std::string chunk;              // content key of the patched chunk
  std::string context_signature;  // exact_signature(...) or orbit_signature(...)
  std::string variant;            // e.g. "full", "deep-only@3", "shared-basis"; any non-empty label
  int64_t rank_k = 0;
  int64_t rank_v = 0;
};
// The store key of a patch: SHA-256 over every field. Throws orbit::Error on an empty variant or a
// chunk/signature that is not a 64-hex key.
std::string patch_key(const PatchKey& key);

// True for 64 lowercase hex characters.
bool is_store_key(const std::string& key);

// ---- tiers and entries -------------------------------------------------------------------------------

enum class StoreTier { kDevice = 0, kHost = 1, kDisk = 2, kRemote = 3 };
const char* store_tier_name(StoreTier tier) noexcept;  // "device", "host", "disk", "remote"

enum class EntryKind { kCanonical = 0, kPatch = 1, kEmbedding = 2, kOther = 3 };
const char* entry_kind_name(EntryKind kind) noexcept;  // "canonical", "patch", "embedding", "other"

// How a disk blob stores floating tensors.
enum class BlobEncoding { kExact = 0, kInt8 = 1 };               // kInt8: symmetric int8 per row + float32 scales
const char* blob_encoding_name(BlobEncoding encoding) noexcept;  // "exact", "int8"

// Counters of one tier in one process. Bytes are what the tier charges against its budget: tensor bytes
// (host), whole pages (device), blob file bytes (disk).
struct TierStats {
  StoreTier tier = StoreTier::kHost;
  bool enabled = false;
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t budget_bytes = 0;
  std::string policy;  // its eviction policy: "lru" or "cost-aware"
  int64_t pinned_entries = 0;
  int64_t hits = 0;        // get() served from this tier
  int64_t evictions = 0;   // entries that left this tier under budget pressure (demoted or, on disk, dropped)
  int64_t demotions = 0;   // entries moved from this tier to the next one down
  int64_t promotions = 0;  // entries copied into this tier on access
};

// The remote tier (Redis / Valkey, one server or a cluster) as seen by this process.
struct RemoteStats {
  bool enabled = false;
  std::string url;
  bool available = false;  // false while the remote is considered down (after a failed call)
  int64_t hits = 0;        // values read and verified
  int64_t misses = 0;      // absent, corrupt, incomplete, unauthenticated, or skipped while down
  int64_t corrupt = 0;     // values that failed verification: never used, removed from the server
  // Entries whose parts the server evicted (allkeys-lru can take a part and leave its manifest): read as
  // misses, their manifests removed; the server's own eviction, not damage.
  int64_t incomplete = 0;
  // Values whose authentication tag is missing or does not verify under this tier's secret (written without
  // it, with another secret, or altered): never used, left on the server (a put of the key replaces them);
  // the first in a run is warned of and set as last_error, as engines sharing a remote need one secret.
  int64_t unauthenticated = 0;
  int64_t errors = 0;          // calls that failed (unreachable, timed out, rejected)
  int64_t outages = 0;         // times the remote went from available to down
  int64_t skipped = 0;         // reads answered as a miss at once while down
  int64_t writes = 0;          // values written
  int64_t write_failures = 0;  // write attempts that failed (the value stays queued; the local copy stays)
  int64_t writes_dropped = 0;  // queued writes dropped (queue over its byte bound, or the store closed)
  int64_t queued = 0;          // writes (and removals) waiting now
  int64_t removals = 0;        // entries removed from the server by erase()
  int64_t bytes_read = 0;      // blob bytes of the hits
  int64_t bytes_written = 0;
  double read_seconds = 0;  // wall time of the reads that hit (what a remote recall costs)
  std::string last_error;   // the latest failure, naming the server
  // Reads made for the store's owner itself (GetOptions::internal: the engine's stored fidelity calibration,
  // read again at later plans while the remote is down), answered or not. Not in hits, misses, skipped,
  // bytes_read or read_seconds: those count the user's reads. A call that failed is still an error (and an
  // outage), and a value refused is still corrupt: real faults of the remote are never hidden.
  int64_t internal_reads = 0;
  // Writes and erases an earlier run of this store directory queued and never delivered (closed or killed
  // while the remote was down, or dropped by the queue's byte bound), re-sent by this open (writes from the
  // local copies, erases as removals) in the background, and this run's writes its queue's byte bound dropped,
  // re-sent the same way once the queue empties: those sent, and those left to send (0 once done; they stay
  // recorded for the next open when this one closes first). Not in writes or bytes_written.
  int64_t resent = 0;
  int64_t resend_backlog = 0;
  // Undelivered writes given up: their local copies were evicted from the disk past RemoteOptions::
  // max_held_fraction of its budget (the oldest first) and their records dropped, so neither this run nor a later
  // open re-sends them (one still queued may yet be delivered by this run). Not in writes_dropped.
  int64_t abandoned = 0;
};

struct StoreStats {
  std::vector<TierStats> tiers;  // device, host, disk (disabled tiers included, enabled = false)
  BlobEncoding canonical_encoding = BlobEncoding::kExact;  // how the disk tier writes canonicals
  bool pinned_host = false;                                // host-tier values live in pinned (page-locked) memory
  int64_t misses = 0;         // get()s that found nothing (the owner's own reads excepted: internal_reads)
  int64_t refusals = 0;       // puts no tier could admit (backpressure)
  int64_t corrupt_reads = 0;  // blobs that failed their checksum on read (served as misses)
  // Blobs the file system refused to read (permission, I/O error, out of descriptors): misses, the entry kept.
  int64_t unreadable_reads = 0;
  int64_t io_errors = 0;  // puts that failed on disk (full, permission)
  // Entries a memory tier let go under its budget that the disk could not take (ChunkStoreOptions::write_through =
  // false, where an entry reaches the disk only so, or a disk whose write failed): gone from the store (recomputed
  // when needed), as a disk eviction's. Memory's budget is not grown for them: the first in a run is warned about
  // with the disk's reason (a disk budget full of pinned or held entries, a failed write).
  int64_t demotions_lost = 0;
  // The disk tier failed a write (full, read-only, I/O error): entries are kept in memory only from then
  // on until a write succeeds again. disk_warning names the path and the reason (also printed once).
  bool disk_degraded = false;
  std::string disk_warning;
  RemoteStats remote;
  // get()s with GetOptions::internal (the engine's own: its stored fidelity calibration), hit or miss: not in
  // misses nor in the tiers' hits (remote.internal_reads counts those that reached the remote tier).
  int64_t internal_reads = 0;
};

// ---- offline inspection (the CLI) -------------------------------------------------------------------
// These open DIR read-only through SQLite (safe while an engine has the store open; also on a read-only
// directory or file system) except gc_store and repair_store, which need the store closed everywhere
// (they take the exclusive lock). They do not need a model. Throw orbit::Error when DIR is empty or not a
// store, or its index cannot be read. Text in their reports (keys, paths, reasons, read from the index or
// found by listing the directory) is valid UTF-8: a byte that is not is written \xNN, so JSON and Python's str
// take every report.

struct StoreEntryInfo {
  std::string key;
  EntryKind kind = EntryKind::kOther;
  BlobEncoding encoding = BlobEncoding::kExact;
  int64_t value_bytes = 0;      // the tensors' bytes as stored in memory
  int64_t blob_bytes = 0;       // the blob file's size
  std::string blob_path;        // absolute
  std::string checksum;         // SHA-256 hex of the blob without its trailer
  bool pinned = false;          // a live process holds a pin lease on it
  bool marked_corrupt = false;  // a read found it corrupt; served as a miss until rewritten
  int64_t hits = 0;
};

struct StoreSummary {
  std::string dir;
  std::string model_fingerprint;
  int64_t format_version = 0;
  int64_t entries = 0;
  int64_t value_bytes = 0;
  int64_t blob_bytes = 0;
  int64_t pinned = 0;
  int64_t marked_corrupt = 0;
  std::vector<std::pair<std::string, int64_t>> entries_by_kind;  // kind name -> count
  std::vector<std::pair<std::string, int64_t>> bytes_by_kind;    // kind name -> blob bytes
  int64_t unreferenced_blobs = 0;  // blob files no row names (a crash between rename and commit)
  int64_t temp_files = 0;          // writes that never completed
  // Directories under blobs/ that could not be listed ("<path>: <reason>", e.g. permission denied): the blobs and
  // temp files they hold are not in the counts above.
  std::vector<std::string> unreadable_dirs;
  // By remote tier (its URL as shown): writes and erases recorded and not yet delivered (re-sent by the next open),
  // and writes given up, their local copies evicted past RemoteOptions::max_held_fraction (over every run).
  std::vector<std::pair<std::string, int64_t>> remote_pending;
  std::vector<std::pair<std::string, int64_t>> remote_abandoned;
};

struct VerifyProblem {
  std::string key;
  std::string path;
  std::string reason;  // "missing", "size 10 != 4096 in the index", "checksum mismatch", ...
};

struct VerifyReport {
  int64_t checked = 0;
  std::vector<VerifyProblem> problems;  // corrupt or missing blobs (reported, never deleted)
  // Blobs that could not be read for a reason that proves nothing about them (out of file descriptors or
  // memory, permission, an I/O error): not checked, not called bad; verify again.
  std::vector<VerifyProblem> unreadable;
  int64_t unreferenced_blobs = 0;
  int64_t temp_files = 0;
  std::vector<std::string> unreadable_dirs;  // under blobs/, not listed ("<path>: <reason>"): not counted above
  // Why SQLite finds index.sqlite inconsistent (PRAGMA integrity_check: the table and its index of keys
  // disagree, a damaged page), or "" when it passes. `orbit store repair` rebuilds the index (REINDEX).
  std::string index_damage;
  // every entry checked and sound, and the index consistent
  bool clean() const {
    return problems.empty() && unreadable.empty() && unreadable_dirs.empty() && index_damage.empty();
  }
};

struct GcOptions {
  // Report what would be removed, remove nothing. Changes nothing either (the index opened read-only, the LOCK
  // file opened for reading, never created): it runs on a read-only directory or file system. Where the directory
  // is writable SQLite may leave its empty side files index.sqlite-shm and -wal, as any reader of the index does.
  bool dry_run = false;
};

struct GcReport {
  int64_t removed_blobs = 0;  // unreferenced blob files
  int64_t removed_temps = 0;  // temp files of writes that never completed
  int64_t freed_bytes = 0;
  std::vector<std::string> removed_paths;
  // Unreferenced blobs gc keeps while index rows are damaged (a row names no blob file, or one not named for
  // its key): the blob's key has a row naming no blob file, or the blob verifies, is of this store's model
  // and no healthy row has its key, or it could not be read now. One of the damaged rows may be its own
  // (key and path both damaged), so `orbit store repair` restores the row from it. On a healthy index every
  // unreferenced blob goes (a write or removal that died between its blob and its row).
  std::vector<std::string> kept_paths;
  // Directories under blobs/ that could not be listed ("<path>: <reason>"): what they hold was neither looked at
  // nor removed.
  std::vector<std::string> unreadable_dirs;
};

struct RepairReport {
  int64_t blobs_scanned = 0;
  int64_t rows_restored = 0;   // entries the index did not name, rebuilt from their blobs
  int64_t rows_dropped = 0;    // rows whose blob is missing, corrupt or outside DIR/blobs
  int64_t blobs_rejected = 0;  // blobs that do not verify or belong to another model
  bool meta_restored = false;  // format version / model fingerprint rewritten from the blobs
  // SQLite found the index inconsistent (PRAGMA integrity_check) and REINDEX rebuilt its indexes from the
  // table (a note says what it found); an index REINDEX does not fix is set aside and rebuilt from the blobs.
  bool index_reindexed = false;
  std::string model_fingerprint;
  std::vector<std::string> notes;  // one line per rejected blob or dropped row
};

// Rebuilds DIR's index from its blobs (every blob is verified; the newest verified blob of a key wins):
// after index.sqlite was deleted, its meta rows were lost, or rows name missing blobs. An index SQLite
// finds inconsistent (verify's index_damage) is reindexed first, or set aside when that does not fix it. Needs the
// store closed everywhere (exclusive lock). Throws orbit::Error when DIR has no blobs/ directory, when the blobs belong
// to several models, or when another process holds the store open.
RepairReport repair_store(const std::string& dir);

// A remote tier's server(s) as `orbit store stat --remote URL` shows them.
struct RemoteSummary {
  std::string url;
  bool reachable = false;
  std::string error;  // why not reachable, naming the node
  bool cluster = false;
  std::vector<std::string> nodes;  // "host:port" of every node asked (a cluster's masters)
  int64_t entries = 0;             // orbit entries (manifests orbit:{KEY})
  int64_t keys = 0;                // all keys on the server(s) (DBSIZE)
  int64_t used_memory_bytes = 0;   // Σ INFO used_memory
  int64_t maxmemory_bytes = 0;     // of the first node (0 = no limit)
  std::string maxmemory_policy;    // of the first node (README: allkeys-lru recommended)
  std::string server_version;
};
// Connects to `url` (redis:// or redis-cluster://, bounded timeouts) and counts orbit's entries with SCAN.
// Throws orbit::Error on a malformed URL only; an unreachable server is reported in the summary.
RemoteSummary summarize_remote(const std::string& url);

// What ping_remote found.
struct RemotePing {
  std::string url;  // as given, with the password of its credentials shown as *** (what a message may print)
  Status status;    // ok: the server answered; else refused naming the node and the cause
};

// One PING of the remote tier at `url` (as EngineOptions::remote takes it), connecting as the tier does: TLS
// from the ORBIT_REDIS_TLS_* environment, AUTH and SELECT as the URL says, within the tier's bounds (300 ms
// to connect, 1 s for the reply). A refusal names the cause: cannot connect, a refused AUTH, a TLS failure,
// a timeout. The start-up check of an optional remote, which the tier itself tries only on first use: orbit
// serve --remote and the Python Engine(remote=...) warn when it fails. The caller reports a failure: a remote
// tier of this process that then fails for the same cause counts it (stats) without printing its own outage
// warning for it; another cause is still printed. Throws orbit::Error only on a malformed URL.
RemotePing ping_remote(const std::string& url);

std::vector<StoreEntryInfo> list_store(const std::string& dir);
StoreSummary summarize_store(const std::string& dir);
// Reads every row's blob and runs PRAGMA integrity_check on the index (VerifyReport::index_damage).
VerifyReport verify_store(const std::string& dir);
// Throws orbit::Error when another process holds the store open, or when SQLite finds the index
// inconsistent (PRAGMA integrity_check: a key that differs between the table and its index), naming
// `orbit store repair`.
GcReport gc_store(const std::string& dir, const GcOptions& options = {});
// Zeroes the counts of remote writes given up (StoreSummary::remote_abandoned, kept over every run) of `remote`, as
// StoreSummary names it (a redis URL may also be given with its password: it is matched as shown, redacted), or of
// every remote when `remote` is empty; answers the counts removed, by remote: empty when there was none to reset
// (for `remote`, or for any remote), so a second reset answers empty, as the first left nothing. For an operator who
// dealt with an outage and wants the next one counted from zero (`orbit store reset-counts`). The store must be
// closed everywhere (the exclusive lock: an open store counts into them). Throws orbit::Error when it is open.
std::vector<std::pair<std::string, int64_t>> reset_remote_abandoned(const std::string& dir,
                                                                    const std::string& remote = "");
// Drops the records of writes and erases not yet delivered to `remote` (StoreSummary::remote_pending's name; a redis
// URL matched as reset_remote_abandoned does): only an open of DIR with that remote re-sends them, so those of a
// remote no store opens any more would stay for good (`orbit store forget-remote`). Their writes are never sent
// then; their entries stay, evictable as any. Answers how many records went (with `dry_run`, would go: nothing is
// changed). The store must be closed everywhere (the exclusive lock: an open store with that remote re-sends from
// them). Throws orbit::Error when it is open, when `remote` is empty, or when it has no record (the remotes that
// have some listed).
int64_t forget_remote_writes(const std::string& dir, const std::string& remote, bool dry_run = false);

}  // namespace orbit
