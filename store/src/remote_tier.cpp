#include "orbit/store/remote_tier.h"

#include <ATen/ATen.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/common/sha256.h"
#include "orbit/common/warn.h"
#include "orbit/store/blob_format.h"
#include "orbit/store/redis_backend.h"
#include "orbit/store/remote_auth.h"
#include "remote_blob.h"

namespace orbit::store {

namespace {

using Clock = std::chrono::steady_clock;

// The TLS files a rediss:// remote names exist and are readable: a typo is an error at open, naming the
// option, not a refused handshake on every operation.
void check_tls_files(const std::string& shown, const RedisTlsOptions& tls) {
  const std::pair<const char*, const std::string*> files[] = {
      {"tls.ca_file (ORBIT_REDIS_TLS_CA_FILE)", &tls.ca_file},
      {"tls.ca_dir (ORBIT_REDIS_TLS_CA_DIR)", &tls.ca_dir},
      {"tls.cert_file (ORBIT_REDIS_TLS_CERT_FILE)", &tls.cert_file},
      {"tls.key_file (ORBIT_REDIS_TLS_KEY_FILE)", &tls.key_file}};
  for (const auto& [name, path] : files) {
    ORBIT_CHECK(path->empty() || ::access(path->c_str(), R_OK) == 0,
                "remote " << shown << ": " << name << " '" << *path << "' cannot be read: " << std::strerror(errno));
  }
  ORBIT_CHECK(tls.cert_file.empty() == tls.key_file.empty(),
              "remote " << shown << ": a client certificate needs both tls.cert_file and tls.key_file");
}

// Once per process: without a secret, what a value read from the remote is checked for, and what not.
void warn_unauthenticated(const std::string& shown) {
  static std::once_flag once;
  std::call_once(once, [&] {
    orbit::warn("remote tier " + shown +
                " has no secret: values read from it are checked (format, checksum, key, shapes, finite values) but "
                "not authenticated, so whoever can write to the server can supply a wrong value; give the engines "
                "that share it a secret (remote_secret, or ORBIT_REMOTE_SECRET)");
  });
}

// The causes ping_remote found, as "<url as shown>\n<cause>": its caller reports them (orbit serve on stderr,
// the Python Engine as a warning), so a tier that then fails for one of them counts it without saying it
// again. Process-wide, as the start-up checks are.
std::mutex& reported_mutex() {
  static std::mutex mu;
  return mu;
}
std::set<std::string>& reported_causes() {
  static std::set<std::string> causes;
  return causes;
}

// The live tiers by the URL they show: a start-up check's failure counts on them at once (RemoteTier::failed),
// so stats() says the remote is down from then on, not only after the tier's own first failure.
std::mutex& live_mutex() {
  static std::mutex mu;
  return mu;
}
std::multimap<std::string, RemoteTier*>& live_tiers() {
  static std::multimap<std::string, RemoteTier*> tiers;
  return tiers;
}

void note_reported(const std::string& shown_url, const std::string& cause) {
  {
    std::lock_guard<std::mutex> lock(reported_mutex());
    reported_causes().insert(shown_url + "\n" + cause);
  }
  std::lock_guard<std::mutex> lock(live_mutex());  // held: a tier unregisters (and is destroyed) only after this
  const auto [first, last] = live_tiers().equal_range(shown_url);
  for (auto it = first; it != last; ++it) it->second->check_failed(cause);  // reported: not warned again
}

bool was_reported(const std::string& shown_url, const std::string& cause) {
  std::lock_guard<std::mutex> lock(reported_mutex());
  return reported_causes().count(shown_url + "\n" + cause) > 0;
}

// What the tier's Redis connections are given: its TLS and its connect and reply bounds.
RedisClientOptions client_options(const RemoteOptions& options) {
  RedisClientOptions client;
  client.connect_timeout_ms = options.connect_timeout_ms;
  client.command_timeout_ms = options.command_timeout_ms;
  client.tls = options.tls;
  return client;
}

}  // namespace

std::string sealed_remote_blob(const std::string& secret, const std::string& key, const std::string& fingerprint,
                               const StoredValue& value) {
  const EncodedBlob blob = encode_blob(key, fingerprint, value, BlobEncoding::kExact);
  std::string out;  // the blob file's bytes, trailer included
  out.reserve(static_cast<std::size_t>(blob.size()));
  out += blob.head;
  for (const auto& [data, size] : blob.pieces) out.append(reinterpret_cast<const char*>(data), size);
  out += sha256_hex(out);
  return seal_remote_value(secret, key, std::move(out));
}

RemoteTier::RemoteTier(RemoteOptions options, std::string model_fingerprint, std::shared_ptr<BlobBackend> backend,
                       std::shared_ptr<RemoteJournal> journal)
    : options_(std::move(options)),
      fingerprint_(std::move(model_fingerprint)),
      backend_(std::move(backend)),
      journal_(std::move(journal)) {
  const std::string shown = redact_redis_url(options_.url);
  ORBIT_CHECK(options_.connect_timeout_ms > 0 && options_.command_timeout_ms > 0,
              "remote " << shown << ": timeouts must be > 0 ms");
  ORBIT_CHECK(options_.retry_after_ms >= 0, "remote " << shown << ": retry_after_ms must be >= 0");
  ORBIT_CHECK(options_.max_queued_bytes >= 0, "remote " << shown << ": max_queued_bytes must be >= 0");
  ORBIT_CHECK(options_.max_held_fraction >= 0.0 && options_.max_held_fraction <= 1.0,
              "remote " << shown << ": max_held_fraction " << options_.max_held_fraction
                        << " is outside 0..1 (the share of the disk budget held for undelivered writes)");
  ORBIT_CHECK(options_.ttl_seconds >= 0 && options_.ttl_seconds <= kMaxRemoteTtlSeconds,
              "remote " << shown << ": remote_ttl_seconds " << options_.ttl_seconds << " is outside 0.."
                        << kMaxRemoteTtlSeconds << " (100 years; 0 = entries never expire)");
  if (!backend_) {
    RedisBackendOptions ro;
    ro.url = options_.url;
    ro.ttl_seconds = options_.ttl_seconds;
    ro.part_bytes = options_.part_bytes;
    ro.secret = options_.secret;
    ro.client = client_options(options_);
    check_tls_files(shown, options_.tls);
    backend_ = std::make_shared<RedisBackend>(ro);
  }
  if (options_.secret.empty() && options_.warn) warn_unauthenticated(shown);
  stats_.enabled = true;
  stats_.url = backend_->describe();
  stats_.available = true;
  if (journal_) {  // what earlier runs left recorded, re-sent by the writer; later records are this run's own
    resend_through_ = journal_->last();
    resend_done_ = resend_through_ == 0;
  }
  writer_ = std::thread([this] { writer_loop(); });
  std::lock_guard<std::mutex> lock(live_mutex());
  live_tiers().emplace(stats_.url, this);
}

RemoteTier::~RemoteTier() {
  {
    std::lock_guard<std::mutex> lock(live_mutex());
    auto [first, last] = live_tiers().equal_range(stats_.url);
    for (auto it = first; it != last; ++it) {
      if (it->second == this) {
        live_tiers().erase(it);
        break;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // the write in flight (the queue's front) finishes and is counted by the writer
  }
  cv_.notify_all();
  writer_.join();
  Undelivered left;
  std::string last_error;
  // The writer is gone: its re-send state is read without the lock (stats() reads only stats_ under it).
  const bool uncounted = journal_ && !resend_done_ && !resend_counted_;
  const int64_t backlog = uncounted ? journal_->count(resend_through_) : 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (const Pending& p : queue_) {
      ++(p.value ? left.writes : left.removals);
      left.bytes += p.bytes;
    }
    stats_.writes_dropped += left.writes;
    last_error = stats_.last_error;
    queue_.clear();
    queued_bytes_ = 0;
    if (resending()) left.backlog = uncounted ? backlog : stats_.resend_backlog;
    if (journal_) settle_delivered(lock);  // the queue is empty: every acknowledged key's record goes
  }
  if (options_.warn && left.writes + left.removals + left.backlog > 0) warn_undelivered(left, last_error);
}

void RemoteTier::warn_undelivered(const Undelivered& left, const std::string& last_error) const {
  const auto plural = [](int64_t n, const char* noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); };
  std::string what;
  if (left.writes > 0) {
    what = plural(left.writes, "queued write") + " (" + std::to_string(left.bytes) + " bytes) not delivered" +
           (journal_ ? " (the local tiers keep those entries and the next open of this store re-sends them)"
                     : " (the store has no directory: nothing re-sends them)");
  }
  if (left.removals > 0) {
    what += std::string(what.empty() ? "" : " and ") + plural(left.removals, "queued removal") +
            " not done (the remote still holds those entries" +
            (journal_ ? std::string("; the next open of this store re-sends the removals)") : std::string(")"));
  }
  if (left.backlog > 0) {
    what += std::string(what.empty() ? "" : " and ") + plural(left.backlog, "write or erase record") +
            " not re-sent yet (of an earlier run, or writes the queue's byte bound dropped: the next open tries again)";
  }
  orbit::warn("remote tier " + backend_->describe() + " closed with " + what +
              (last_error.empty() || was_reported(backend_->describe(), last_error) ? std::string()
                                                                                    : "; last error: " + last_error));
}

bool RemoteTier::available() {
  std::lock_guard<std::mutex> lock(mu_);
  return !down_ || Clock::now() >= down_until_;
}

void RemoteTier::failed(const std::string& reason) {
  const bool reported = was_reported(backend_->describe(), reason);  // by a start-up check: not said twice
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.errors;
    stats_.last_error = reason;
    if (!down_) ++stats_.outages;
    down_ = true;
    stats_.available = false;
    down_until_ = Clock::now() + std::chrono::milliseconds(options_.retry_after_ms);
    if (!reported) {
      warn = options_.warn && !warned_;
      warned_ = true;
    }
  }
  if (warn) {
    orbit::warn("remote tier " + backend_->describe() + " unavailable (" + reason +
                "); continuing on the local tiers, retrying every " + std::to_string(options_.retry_after_ms) +
                " ms (counted in stats().store.remote)");
  }
}

void RemoteTier::succeeded() {
  std::lock_guard<std::mutex> lock(mu_);
  down_ = false;
  stats_.available = true;
}

Result<ValuePtr> RemoteTier::get(const std::string& key, bool* refused, bool* unavailable, bool internal) {
  if (refused != nullptr) *refused = false;
  if (unavailable != nullptr) *unavailable = false;
  // The user's reads count as hits and misses; the owner's own (internal) only here.
  const int64_t user = internal ? 0 : 1;
  if (internal) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.internal_reads;
  }
  if (!available()) {
    if (unavailable != nullptr) *unavailable = true;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.skipped += user;
    stats_.misses += user;
    return Status::not_found("remote " + stats_.url + " is down (retrying later): " + stats_.last_error);
  }
  const auto start = Clock::now();
  BackendRead r = backend_->get(key);
  if (r.outcome == BackendRead::Outcome::kUnavailable) {
    failed(r.reason);  // an error either way
    if (unavailable != nullptr) *unavailable = true;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.misses += user;
    return Status::not_found(r.reason);
  }
  succeeded();
  if (r.outcome == BackendRead::Outcome::kMiss) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.misses += user;
    return Status::not_found("remote " + stats_.url + ": no entry " + key);
  }
  std::string reason = r.reason;
  BackendRead::Outcome outcome = r.outcome;
  const ValuePtr value =
      r.outcome == BackendRead::Outcome::kHit ? verified_value(key, r.bytes, &reason, &outcome) : nullptr;
  if (!value) {  // never used
    count_refused(key, outcome, reason, user);
    if (refused != nullptr) *refused = true;
    return Status::not_found(reason);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  if (!internal) {
    ++stats_.hits;
    stats_.bytes_read += static_cast<int64_t>(r.bytes.size());
    stats_.read_seconds += seconds;
  }
  return value;
}

void RemoteTier::count_refused(const std::string& key, BackendRead::Outcome outcome, const std::string& reason,
                               int64_t user) {
  const bool unauthenticated = outcome == BackendRead::Outcome::kUnauthenticated;
  // Damaged or evicted in part: removed, so that the next put replaces it. Another secret's: left (a put of the
  // key replaces it anyway), as deleting it would empty the shared tier for the engines that wrote it.
  const Status removed = unauthenticated ? Status::ok() : backend_->remove(key);
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.misses += user;
    if (!removed) ++stats_.errors;
    if (outcome == BackendRead::Outcome::kIncomplete) {
      ++stats_.incomplete;
    } else if (unauthenticated) {
      ++stats_.unauthenticated;
      stats_.last_error = reason;
      warn = options_.warn && !warned_unauthenticated_;
      warned_unauthenticated_ = true;
    } else {
      ++stats_.corrupt;
    }
  }
  if (warn) {
    orbit::warn(reason + ": not used, and left on the server; engines that share a remote tier need the same " +
                "secret (remote_secret, or ORBIT_REMOTE_SECRET). Further such values are counted in " +
                "stats().store.remote.unauthenticated, not warned of again");
  }
}

ValuePtr RemoteTier::verified_value(const std::string& key, const std::string& bytes, std::string* reason,
                                    BackendRead::Outcome* outcome) const {
  const std::string origin = "remote " + backend_->describe() + ", key " + key;
  Result<std::string_view> blob = open_remote_value(options_.secret, key, bytes);
  *outcome = BackendRead::Outcome::kCorrupt;
  if (!blob) {
    *reason = "refused value " + origin + ": " + blob.status().reason();
    *outcome = BackendRead::Outcome::kUnauthenticated;
    return nullptr;
  }
  at::Tensor raw = at::empty({static_cast<int64_t>(blob.value().size())}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(raw.data_ptr(), blob.value().data(), blob.value().size());
  Result<DecodedBlob> decoded = decode_blob(raw, "", origin);
  if (!decoded) {
    *reason = decoded.status().reason();
    return nullptr;
  }
  if (decoded.value().key != key || decoded.value().model_fingerprint != fingerprint_) {
    *reason = "corrupt value " + origin + ": it holds key " + decoded.value().key + " of model " +
              decoded.value().model_fingerprint;
    return nullptr;
  }
  if (options_.validate) {
    Status valid = Status::refused("the validator threw");
    try {
      valid = options_.validate(key, *decoded.value().value);
    } catch (const std::exception& e) {
      valid = Status::refused(e.what());
    }
    if (!valid) {
      *reason = "refused value " + origin + ": " + valid.reason();
      return nullptr;
    }
  }
  return decoded.value().value;
}

bool RemoteTier::contains(const std::string& key) {
  if (!available()) return false;
  Result<bool> r = backend_->exists(key);
  if (!r) {
    failed(r.status().reason());
    return false;
  }
  succeeded();
  return r.value();
}

void RemoteTier::put(const std::string& key, const ValuePtr& value, int64_t recorded_seq) {
  int64_t seq = recorded_seq;
  if (journal_ && seq == 0) seq = journal_->record(key, false);  // before it is queued: it goes once delivered
  if (options_.before_queue) options_.before_queue(key);
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  Pending p{key, value, value->bytes(), seq};
  queued_bytes_ += p.bytes;
  queue_.push_back(std::move(p));
  // Over the bound, the oldest queued writes go, but never the newest, nor the one in flight (the front while
  // in_flight_: it may be delivered, and the writer counts it), nor a removal (it holds no bytes).
  for (auto it = queue_.begin() + (in_flight_ ? 1 : 0);
       queued_bytes_ > options_.max_queued_bytes && it != queue_.end() && std::next(it) != queue_.end();) {
    if (!it->value) {
      ++it;
      continue;
    }
    queued_bytes_ -= it->bytes;
    it = queue_.erase(it);
    ++stats_.writes_dropped;
    rescan_ = journal_ != nullptr;  // its record stays: re-sent from the local copy once the queue empties
  }
  stats_.queued = static_cast<int64_t>(queue_.size());
  cv_.notify_all();
}

void RemoteTier::erase(const std::string& key, int64_t recorded_seq) {
  int64_t seq = recorded_seq;
  if (journal_ && seq == 0) seq = journal_->record(key, true);  // before it is queued, as a put's write
  if (options_.before_queue) options_.before_queue(key);
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  for (auto it = queue_.begin(); it != queue_.end();) {
    // The front may be the write in flight: it stays, and the removal below runs after it.
    const bool in_flight = in_flight_ && it == queue_.begin();
    if (it->key == key && it->value && !in_flight) {
      queued_bytes_ -= it->bytes;
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  queue_.push_back(Pending{key, nullptr, 0, seq});
  stats_.queued = static_cast<int64_t>(queue_.size());
  cv_.notify_all();
}

Result<RemoteReadSample> RemoteTier::measure_read(int64_t bytes, int reps) {
  ORBIT_CHECK(bytes >= 1 && reps >= 1, "remote: measure_read needs bytes >= 1 and reps >= 1");
  if (!available()) return Status::refused("remote " + stats_.url + " is down (retrying later)");
  static std::atomic<uint64_t> probes{0};
  Sha256 h;
  const std::string tag = "orbit.remote-probe.v1";
  h.update_u64(tag.size()).update(tag).update_u64(fingerprint_.size()).update(fingerprint_);
  h.update_u64(static_cast<uint64_t>(::getpid())).update_u64(probes.fetch_add(1));
  h.update_u64(static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  const std::string key = h.hex_digest();
  const at::Tensor payload = at::randint(0, 256, {bytes}, at::TensorOptions().dtype(at::kByte));
  const ValuePtr value = make_value(EntryKind::kOther, {{"probe", payload}}, {}, /*copy=*/false);
  const std::string blob = sealed_remote_blob(options_.secret, key, fingerprint_, *value);
  Status written = backend_->put(key, blob);
  if (!written) {
    failed(written.reason());
    return written;
  }
  RemoteReadSample best{static_cast<int64_t>(blob.size()), 1e30};
  Status status = Status::ok();
  for (int i = 0; i < reps && status.is_ok(); ++i) {
    const auto start = Clock::now();
    BackendRead r = backend_->get(key);
    if (r.outcome != BackendRead::Outcome::kHit) {
      status = Status::refused("remote " + stats_.url +
                               ": the probe read failed: " + (r.reason.empty() ? std::string("a miss") : r.reason));
      break;
    }
    Result<std::string_view> opened = open_remote_value(options_.secret, key, r.bytes);
    if (!opened) {
      status = opened.status();
      break;
    }
    at::Tensor read = at::empty({static_cast<int64_t>(opened.value().size())}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(read.data_ptr(), opened.value().data(), opened.value().size());
    Result<DecodedBlob> decoded = decode_blob(read, "", "remote probe " + key);
    if (!decoded) {
      status = Status::refused(decoded.status().reason());
      break;
    }
    best.seconds = std::min(best.seconds, std::chrono::duration<double>(Clock::now() - start).count());
  }
  (void)backend_->remove(key);
  if (!status) {
    failed(status.reason());
    return status;
  }
  succeeded();
  best.seconds = std::max(best.seconds, 1e-9);
  return best;
}

RemoteStats RemoteTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  RemoteStats s = stats_;
  s.available = !down_;
  s.queued = static_cast<int64_t>(queue_.size());
  return s;
}

}  // namespace orbit::store

namespace orbit {

RemotePing ping_remote(const std::string& url) {
  store::RemoteOptions tier;
  tier.url = url;
  RemotePing out;
  out.status = store::ping_redis(url, store::client_options(tier));  // parses the URL first: throws if malformed
  out.url = store::redact_redis_url(url);
  if (!out.status.is_ok()) store::note_reported(out.url, out.status.reason());
  return out;
}

}  // namespace orbit
