// The remote tier: a shared blob backend (Redis, one server or a cluster) below the disk tier.
//
//   lookup:  device → host → disk → remote → compute      a remote hit is promoted into host (and disk)
//   put:     local tiers first (durable), then queued for the remote; a failed remote write loses nothing
//
// Values are the store's blob format (blob_format.h: key and model fingerprint inside, SHA-256 trailer),
// decoded and verified on every load; a value that fails (truncated, corrupted, another key or model, or
// refused by RemoteOptions::validate) is counted as corrupt, removed from the backend and served as a miss, so
// the caller recomputes it and the next put replaces it. An entry whose parts the server evicted is counted as
// incomplete and removed the same way. A value without a valid authentication tag when RemoteOptions::secret is
// set is counted as unauthenticated and served as a miss but left on the server: it is most likely another
// engine's, sealed under another secret (a misconfiguration the first such read warns of), not damage to
// delete. A refused value is never returned, so the store never promotes it into its local tiers.
//
// Faults never stop the caller: every backend call is bounded by its timeouts; after a failure the tier
// is "down" for RemoteOptions::retry_after_ms, during which reads answer a miss at once and writes wait
// in the queue; the next call after that tries again (the client reconnects by itself). The first outage
// prints one warning on stderr, unless its cause is one a start-up check (orbit::ping_remote, orbit/store.h)
// of this process found and its caller reported; stats() counts every failure.
//
// Writes run on one background thread (bounded by max_queued_bytes: beyond it the oldest queued write is
// dropped and counted, never the write in flight: a write is counted once, as written or as dropped; with a journal
// its record stays, and once the queue empties the writer re-sends it from the local copy, as an open re-sends an
// earlier run's records). drain() waits for the queue (tests, benchmarks, a clean close). Thread-safety: every member
// is safe to call from any thread.
//
// With a RemoteJournal (ChunkStore gives one when it has a directory) no write or erase is lost for good to a
// close, a crash or the byte bound: each put and erase is recorded in the journal before it is queued (one
// record a key, of its latest kind, each record with a new seq), and its record goes once the remote acknowledged
// it: cleared by its seq, so that a newer record of the key (made while this one was sent) stays. What an earlier run
// left recorded is re-sent by the writer in the background, after the live writes and one record at a time
// (stats: resent, resend_backlog): a write from the local copy (none: nothing is sent), an erase as a removal,
// unless the local tiers hold the key again (put since, or the erase was killed before its local removal:
// then the local copy is written, so the remote ends as the local tiers do):
//
//   put/erase ──► journal.record(key, kind): seq ──► queue ──► writer ──► backend ──ok──► journal.settle(key, seq)
//   open ──► records up to journal.last() ──► writer, when the queue is empty ──► local_copy ──► backend
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "orbit/common/status.h"
#include "orbit/store.h"
#include "orbit/store/backend.h"
#include "orbit/store/redis_client.h"
#include "orbit/store/sqlite_index.h"
#include "orbit/store/value.h"

namespace orbit::store {

// Checks a decoded remote value against what its reader expects of `key` (kind, shapes, dtypes, finite
// values: the store itself knows no model). ok to accept; any other status refuses the value, its reason
// naming what is wrong. Called on the reading thread, before the value is returned; must not throw and
// must not call into the store.
using RemoteValidator = std::function<Status(const std::string& key, const StoredValue& value)>;

// The longest remote TTL accepted (100 years): beyond it the milliseconds sent to Redis overflow.
constexpr int64_t kMaxRemoteTtlSeconds = int64_t{3155760000};

// The local record of writes and erases the remote has not acknowledged (see above), kept by the tier's owner
// (ChunkStore: its disk index's remote_pending table, for this remote's URL as shown). record() is called by the thread
// that puts, the rest by the tier's constructor and writer thread, never under the tier's lock. Must not throw: a
// failure only means a write re-sent twice or not at all (the local copy stays either way), or an erase not re-sent.
class RemoteJournal {
 public:
  virtual ~RemoteJournal() = default;
  // Records that a write of `key` (with `erase`, its removal) is queued, in place of the key's earlier record, and
  // returns the new record's seq (higher than any before; 0: not recorded).
  virtual int64_t record(const std::string& key, bool erase) = 0;
  // The writes or erases of these records (key and seq) reached the remote, or there is nothing to send for them:
  // each key's record goes unless it is newer than the seq given (recorded since: that write or erase is still to
  // be sent).
  virtual void settle(const std::vector<RemotePendingRecord>& records) = 0;
  // The newest record's sequence number (0: none): what an open re-sends goes up to it.
  virtual int64_t last() = 0;
  // How many records go up to `through`.
  virtual int64_t count(int64_t through) = 0;
  // Up to `limit` records with after < seq <= through, oldest first; empty on a failure.
  virtual std::vector<RemotePendingRecord> recorded(int64_t after, int64_t through, int limit) = 0;
  // The local copy of `key` to re-send: not_found when the local tiers hold none (its record goes), refused
  // when it cannot be read now (its record stays for a later open).
  virtual Result<ValuePtr> local_copy(const std::string& key) = 0;
};

struct RemoteOptions {
  // redis://[[user:]password@]host:port[/db] | redis-cluster://[[user:]password@]h:p,...; "" = none.
  // rediss:// and rediss-cluster:// are the same over TLS (`tls` below). Messages, warnings and stats show
  // it with the password as ***.
  std::string url;
  // TLS for rediss:// (CA to verify the server with, client certificate): by default from the
  // ORBIT_REDIS_TLS_* environment variables (redis_client.h). A file named here must be readable.
  RedisTlsOptions tls = redis_tls_from_environment();
  int64_t ttl_seconds = 0;                // 0..kMaxRemoteTtlSeconds; 0 = entries never expire
  int64_t part_bytes = int64_t{4} << 20;  // largest single value sent to the server
  int connect_timeout_ms = 300;
  int command_timeout_ms = 1000;
  int retry_after_ms = 1000;                      // after a failure, skip the remote this long
  int64_t max_queued_bytes = int64_t{256} << 20;  // queued writes (blob bytes) before the oldest is dropped
  // With a journal (ChunkStore with a directory): the share of the disk budget that entries held for their
  // undelivered writes may fill, 0..1. Eviction keeps an entry whose write is recorded and not delivered (the copy
  // the write is to be sent from), the newest records first up to this share; past it, the oldest are evicted
  // before any other entry and their writes given up (records dropped, stats' abandoned, one warning a run), so a
  // remote down for long does not stop the disk from caching. 1 = hold every one (a put that needs their room is
  // refused); 0 = hold none.
  double max_held_fraction = 0.5;
  // Print the one warning on the first outage, and (once per process) that a tier opened without a
  // secret does not authenticate what it reads.
  bool warn = true;
  // The operator's secret ("" = none): every value and manifest written carries an HMAC-SHA256 over its
  // key and bytes under it (remote_auth.h), and with a secret set a value or manifest read without a valid
  // tag is refused (a forged manifest before its parts are fetched). Without one, values are checked but
  // not authenticated: a finite wrong value, or another key's value with its key rewritten, passes the
  // checks (a warning says so at open). Never shown in a message, a warning or stats.
  std::string secret;
  RemoteValidator validate;  // empty = values are checked only by the blob format
  // Tests only (empty: none): called by put() and erase() on the caller's thread once the journal holds the new
  // record and before the write or removal is queued, the moment the writer may be settling the key's earlier one.
  std::function<void(const std::string& key)> before_queue;
};

// One timed read of the remote (RemoteTier::measure_read): what a hit of `bytes` blob bytes cost.
struct RemoteReadSample {
  int64_t bytes = 0;
  double seconds = 0;  // fetch, checksum and decode, as a hit pays them
};

class RemoteTier {
 public:
  // `backend` null: a RedisBackend for options.url. `journal` (optional, see above): its records made before
  // are re-sent in the background (the constructor only reads the newest record's number; it never waits
  // for the remote). Throws orbit::Error on a malformed URL or option.
  RemoteTier(RemoteOptions options, std::string model_fingerprint, std::shared_ptr<BlobBackend> backend = nullptr,
             std::shared_ptr<RemoteJournal> journal = nullptr);
  // Stops the writer after the write in flight; queued writes and removals not yet sent are dropped from the
  // queue (the entries stay in the local tiers; with a journal their records stay, so the next open re-sends the
  // writes), counted in writes_dropped, and, when options.warn, named in one warning (how many, their bytes, the
  // last error, and the records of an earlier run not re-sent yet) so that a close never drops them unreported.
  ~RemoteTier();
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // The verified value, or not_found (a miss, a corrupt value, or the remote down: the reason says which).
  // *refused (when non-null) is true only for a value the remote held and this tier refused (corrupt,
  // incomplete or unauthenticated: removed, but for the last);
  // *unavailable (when non-null) only when the remote did not answer: down (skipped within retry_after_ms)
  // or the call failed. Both false on a hit and on a plain miss (the remote answered: no entry). `internal`: the
  // owner's own read (GetOptions::internal): counted in internal_reads, not in hits, misses, skipped or
  // bytes_read; a failed call still counts as an error, a refused value as corrupt.
  Result<ValuePtr> get(const std::string& key, bool* refused = nullptr, bool* unavailable = nullptr,
                       bool internal = false);
  // Whether the remote holds `key` (false when it is down).
  bool contains(const std::string& key);
  // Queues `value` for writing under `key` (returns at once). With a journal, records the write first, unless
  // `recorded_seq` > 0: the owner recorded it already, that record's seq (ChunkStore, in its local commit's
  // transaction).
  void put(const std::string& key, const ValuePtr& value, int64_t recorded_seq = 0);
  // Queues the removal of `key` (returns at once): queued writes of `key` are dropped, one in flight
  // finishes first, then the entry is deleted; a failed removal stays queued like a failed write. With a
  // journal, records the removal first, unless `recorded_seq` > 0: the owner recorded it already, that record's
  // seq (ChunkStore, in its local removal's transaction).
  void erase(const std::string& key, int64_t recorded_seq = 0);
  // Measures the read rate without touching the entries: writes a probe blob of about `bytes` bytes
  // under a key of its own, times `reps` reads of it (the best counts), and removes it. Not counted as
  // hits. refused when the remote is down or a call fails (counted as an error).
  Result<RemoteReadSample> measure_read(int64_t bytes, int reps = 3);
  // Waits until the queue is empty, no write is in flight, the records of what was delivered are cleared and the
  // journal's earlier records are re-sent (or found to have no local copy), or `timeout` passed. true when
  // drained.
  bool drain(std::chrono::milliseconds timeout);

  // Before the owner gives up the write of `key` (ChunkStore's disk eviction past max_held_fraction, which drops the
  // key's record with its local copy): false while a write of `key` is in flight (it may yet be delivered, so it is
  // not given up: the owner keeps the entry and evicts another); else its queued writes are dropped, so a write
  // counted as abandoned is never delivered, and true. Should the eviction then not happen (another process reads
  // the entry), the record stays and the same run re-sends it once the queue empties, as a write the byte bound
  // dropped.
  bool give_up(const std::string& key);
  // The owner evicted the local copies of `writes` recorded writes past max_held_fraction (each let go by give_up)
  // and dropped their records: counted in stats' abandoned; the first time in a run, when options.warn, one warning
  // names the remote and the count.
  void abandoned(int64_t writes);

  RemoteStats stats() const;
  const RemoteOptions& options() const { return options_; }
  // A start-up check of this tier's remote (orbit::ping_remote, which calls it on every live tier of the URL)
  // failed: counted as the tier's own failure (down, an outage, last_error), not warned of again.
  void check_failed(const std::string& cause) { failed(cause); }

 private:
  bool available();  // false while down (retry_after_ms not yet passed)
  // The value in `bytes` read for `key`: authenticated, decoded, verified and validated; null with
  // `reason` set when any of that fails, and *outcome kUnauthenticated where the authentication failed (else
  // kCorrupt).
  ValuePtr verified_value(const std::string& key, const std::string& bytes, std::string* reason,
                          BackendRead::Outcome* outcome) const;
  // A value read and not used (outcome kCorrupt, kIncomplete or kUnauthenticated): removed from the server unless
  // unauthenticated, counted, the first unauthenticated one of a run warned of.
  void count_refused(const std::string& key, BackendRead::Outcome outcome, const std::string& reason, int64_t user);
  void failed(const std::string& reason);
  // What a close left unsent: queued writes (blob bytes `bytes`) and removals, and journal records of an
  // earlier run not re-sent yet (`backlog`).
  struct Undelivered {
    int64_t writes = 0, bytes = 0, removals = 0, backlog = 0;
  };
  // The one warning of a close that left something unsent.
  void warn_undelivered(const Undelivered& left, const std::string& last_error) const;
  void succeeded();
  void writer_loop();
  // The writer's steps, each entered and left with `lock` (on mu_) held. send_front: the queue's front.
  void send_front(std::unique_lock<std::mutex>& lock);
  // Re-sends the next journal record of an earlier run (fetching a batch of them first when none is buffered).
  void resend_step(std::unique_lock<std::mutex>& lock);
  // resend_step's call to the backend for `record` (no lock held): *settle when its record may go, *bytes the
  // value's blob bytes written (0: none).
  Status resend(const RemotePendingRecord& record, bool* settle, int64_t* bytes);
  // Hands the acknowledged records to the journal, except those of keys a write or removal still queued will
  // settle.
  void settle_delivered(std::unique_lock<std::mutex>& lock);
  // A write the byte bound dropped this run: once the queue empties, the records made since the last re-send are
  // re-sent too (rescan_), from the local copies. mu_ held.
  void start_rescan(std::unique_lock<std::mutex>& lock);
  bool resending() const { return journal_ && (!resend_done_ || rescan_ || rescan_reading_); }  // mu_ held

  struct Pending {
    std::string key;
    ValuePtr value;  // null for a removal
    int64_t bytes = 0;
    int64_t seq = 0;  // its journal record's (0: none)
  };

  RemoteOptions options_;
  std::string fingerprint_;
  std::shared_ptr<BlobBackend> backend_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  int64_t queued_bytes_ = 0;
  bool in_flight_ = false;
  std::string in_flight_key_;  // the key of the write or removal in flight (a live one or a re-send), while in_flight_
  bool stop_ = false;
  std::chrono::steady_clock::time_point down_until_{};
  bool down_ = false;
  bool warned_ = false;
  bool warned_abandoned_ = false;        // abandoned()'s one warning was printed
  bool warned_unauthenticated_ = false;  // count_refused()'s one warning of a value another secret sealed
  RemoteStats stats_;
  // The journal (null: none), its records this open re-sends (seq in (resend_after_, resend_through_]), the
  // batch of them read but not yet sent, and the keys acknowledged since the last settle.
  std::shared_ptr<RemoteJournal> journal_;
  int64_t resend_through_ = 0;
  int64_t resend_after_ = 0;
  bool resend_counted_ = false;
  bool resend_done_ = true;
  bool rescan_ = false;          // a write was dropped by the byte bound since the last re-send began: re-send it too
  bool rescan_reading_ = false;  // start_rescan reads the journal's newest seq (without the lock)
  std::deque<RemotePendingRecord> resend_batch_;
  std::vector<RemotePendingRecord> delivered_;  // key and seq of each acknowledged record
  bool settling_ = false;                       // settle_delivered is clearing records (without the lock)
  std::thread writer_;
};

}  // namespace orbit::store
