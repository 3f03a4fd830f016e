#include "orbit/store/disk_tier.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>

#include "blobs_root.h"
#include "orbit/common/error.h"

namespace orbit::store {

namespace {

std::string blob_relative_path(const std::string& key) {
  return "blobs/" + key.substr(0, 2) + "/" + key + "." + unique_nonce() + ".blob";
}

}  // namespace

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

DiskTier::DiskTier(const DiskTierOptions& options) : options_(options) {
  ORBIT_CHECK(!options_.dir.empty(), "disk tier: the store directory is empty");
  ORBIT_CHECK(!options_.model_fingerprint.empty(), "disk tier " << options_.dir << ": the model fingerprint is empty");
  ORBIT_CHECK(options_.budget_bytes >= 0, "disk tier " << options_.dir << ": budget must be >= 0 bytes");
  ORBIT_CHECK(options_.lease_ms >= 100, "disk tier " << options_.dir << ": lease_ms must be >= 100");
  options_.dir = std::filesystem::absolute(options_.dir).lexically_normal().string();
  if (options_.dir.size() > 1 && options_.dir.back() == '/') options_.dir.pop_back();
  Status made = ensure_directory(options_.dir + "/blobs", options_.io_hooks);
  ORBIT_CHECK(made.is_ok(), "store " << options_.dir << ": " << made.reason());
  Result<std::string> blobs_root = resolve_blobs_root(options_.dir);
  ORBIT_CHECK(blobs_root.is_ok(), blobs_root.status().reason());
  blobs_root_ = blobs_root.value();
  const std::string lock_path = options_.dir + "/LOCK";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ORBIT_CHECK(lock_fd_ >= 0, "store " << options_.dir << ": cannot open " << lock_path << ": " << errno_text(errno));
  if (::flock(lock_fd_, LOCK_SH | LOCK_NB) != 0) {
    const int error = errno;
    ::close(lock_fd_);
    ORBIT_FAIL("store " << options_.dir << " is being collected or repaired by another process (" << lock_path << ": "
                        << errno_text(error) << "); try again when `orbit store gc|repair` is done");
  }
  // A write killed inside its blob left a temp file: none of a dead writer outlives this open (a live one is
  // locked and kept), so crashes do not pile them up until `orbit store gc`.
  (void)remove_dead_temps(options_.dir + "/blobs");
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  owner_ = std::to_string(::getpid()) + "@" + host + "/" + unique_nonce();
  try {
    open_index();
    leases_ = std::make_unique<SqliteIndex>(options_.dir + "/index.sqlite", SqliteIndex::Mode::kReadWrite);
    leases_->relax_durability();
  } catch (...) {
    leases_.reset();
    index_.reset();
    ::close(lock_fd_);
    throw;
  }
  beat_ = std::thread([this] { heartbeat(); });
}

DiskTier::~DiskTier() {
  {
    std::lock_guard<std::mutex> lock(beat_mu_);
    stop_ = true;
  }
  beat_cv_.notify_all();
  if (beat_.joinable()) beat_.join();
  {
    std::lock_guard<std::mutex> lock(lease_mu_);
    try {  // the leases lapse by themselves where this fails
      if (leases_) (void)leases_->release_all(owner_);
    } catch (const std::exception&) {
    }
    leases_.reset();
  }
  index_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

void DiskTier::heartbeat() {
  std::unique_lock<std::mutex> lock(beat_mu_);
  while (!beat_cv_.wait_for(lock, std::chrono::milliseconds(options_.lease_ms / 3), [&] { return stop_; })) {
    std::lock_guard<std::mutex> leases(lease_mu_);
    std::vector<std::pair<std::string, SqliteIndex::LeaseKind>> held;
    held.reserve(held_.size());
    for (const auto& [lease, holders] : held_) held.push_back(lease);
    const int64_t now = now_ms();
    // A failure is retried next beat: an index that throws here (a statement it cannot prepare: out of memory, a
    // damaged schema) must not end the process from this thread.
    try {
      (void)leases_->renew_leases(owner_, held, now + options_.lease_ms, now);
    } catch (const std::exception&) {
    }
  }
}

void DiskTier::add_row(DiskRow row) {
  row.pinned = false;  // pins are leases of live processes (the column of older stores is not a pin)
  auto it = rows_.find(row.key);
  if (it != rows_.end()) {
    used_ -= it->second.blob_bytes;
    row.pinned = it->second.pinned;
  }
  used_ += row.blob_bytes;
  const std::string key = row.key;
  rows_[key] = std::move(row);
}

Result<std::string> DiskTier::resolve(const std::string& blob) const {
  return confine_blob_path(options_.dir, blobs_root_, blob);
}

bool DiskTier::acquire_read(const std::string& key) {
  std::lock_guard<std::mutex> lock(lease_mu_);
  const auto lease = std::make_pair(key, SqliteIndex::LeaseKind::kRead);
  if (const auto it = held_.find(lease); it != held_.end()) {
    ++it->second;  // another read holds the row (and the heartbeat takes it again if it went)
    return true;
  }
  if (!leases_->acquire_lease(key, owner_, lease.second, now_ms() + options_.lease_ms).is_ok()) return false;
  held_[lease] = 1;
  return true;
}

void DiskTier::release_read(const std::string& key) {
  std::lock_guard<std::mutex> lock(lease_mu_);
  const auto it = held_.find(std::make_pair(key, SqliteIndex::LeaseKind::kRead));
  if (it == held_.end() || --it->second > 0) return;  // another read still holds it
  held_.erase(it);
  (void)leases_->release_lease(key, owner_, SqliteIndex::LeaseKind::kRead);
}

Status DiskTier::record_remote_pending(const std::string& key, const std::string& remote, bool erase, int64_t* seq) {
  std::lock_guard<std::mutex> lock(lease_mu_);
  return leases_->record_remote_pending(key, remote, erase, seq);
}

Status DiskTier::clear_remote_pending(const std::vector<RemotePendingRecord>& records, const std::string& remote) {
  std::lock_guard<std::mutex> lock(lease_mu_);
  return leases_->clear_remote_pending(records, remote);
}

std::map<std::string, int64_t> DiskTier::held_for_remote() const {
  return held_for_remote_.empty() ? std::map<std::string, int64_t>{} : index_->remote_pending_writes(held_for_remote_);
}

int64_t DiskTier::last_remote_pending() {
  std::lock_guard<std::mutex> lock(lease_mu_);
  return leases_->last_remote_pending();
}

std::vector<RemotePendingRecord> DiskTier::remote_pending(const std::string& remote, int64_t after, int64_t through,
                                                          int limit) {
  std::lock_guard<std::mutex> lock(lease_mu_);
  return leases_->remote_pending(remote, after, through, limit);
}

int64_t DiskTier::count_remote_pending(const std::string& remote, int64_t through) {
  std::lock_guard<std::mutex> lock(lease_mu_);
  return leases_->count_remote_pending(remote, through);
}

std::map<std::string, int64_t> DiskTier::remote_pending_counts() {
  std::lock_guard<std::mutex> lock(lease_mu_);
  return leases_->remote_pending_counts();
}

Result<int64_t> DiskTier::adopt_remote_pending(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(lease_mu_);
  return leases_->adopt_remote_pending(from, to);
}

int64_t DiskTier::charge(const StoredValue& value) const {
  const BlobEncoding encoding =
      options_.int8_canonicals && value.kind == EntryKind::kCanonical ? BlobEncoding::kInt8 : BlobEncoding::kExact;
  return static_cast<int64_t>(encoded_blob_size(std::string(64, '0'), options_.model_fingerprint, value, encoding));
}

std::string DiskTier::absolute(const std::string& blob) const { return options_.dir + "/" + blob; }

Status DiskTier::check_in_place() const {
  struct stat held {};
  struct stat there {};
  if (::fstat(lock_fd_, &held) != 0) return Status::ok();  // cannot tell: the write goes on
  const std::string lock_path = options_.dir + "/LOCK";
  if (::stat(lock_path.c_str(), &there) == 0 && there.st_dev == held.st_dev && there.st_ino == held.st_ino) {
    return Status::ok();
  }
  return Status::refused("store " + options_.dir + " was moved or removed while this process had it open (" +
                         lock_path +
                         " is not the file it opened): nothing more is written there; open the store "
                         "again where it is");
}

Result<PreparedBlob> DiskTier::prepare(const std::string& key, const StoredValue& value) const {
  // A store moved or removed under this process would get new blobs at the old path, indexed in the moved
  // index.sqlite (an open handle follows the file): the blobs unreachable from the index, the index's rows
  // naming files that are not in its directory.
  Status in_place = check_in_place();
  if (!in_place) return in_place;
  PreparedBlob out;
  out.key = key;
  out.kind = value.kind;
  out.encoding =
      options_.int8_canonicals && value.kind == EntryKind::kCanonical ? BlobEncoding::kInt8 : BlobEncoding::kExact;
  out.value_bytes = value.bytes();
  out.blob = blob_relative_path(key);
  const std::string path = absolute(out.blob);
  Status dir = ensure_directory(std::filesystem::path(path).parent_path().string(), options_.io_hooks);
  if (!dir) return dir;
  // Writes are confined as reads are: a shard directory that is a symlink out of DIR/blobs gets no file.
  Result<std::string> confined = resolve(out.blob);
  if (!confined) return confined.status();
  const EncodedBlob encoded = encode_blob(key, options_.model_fingerprint, value, out.encoding);
  BlobWriteResult written;
  Status s = write_blob_file(path, encoded, options_.io_hooks, &written);
  if (!s) return s;
  out.blob_bytes = static_cast<int64_t>(written.bytes);
  out.checksum = written.checksum;
  return out;
}

void DiskTier::discard(const PreparedBlob& blob) const {
  Result<std::string> path = resolve(blob.blob);
  if (path) ::unlink(path.value().c_str());
}

Result<ValuePtr> DiskTier::load(const DiskRow& row) const {
  Result<std::string> resolved = resolve(row.blob);
  if (!resolved) return Status::not_found("corrupt row, key " + row.key + ": " + resolved.status().reason());
  const std::string path = resolved.value();
  const std::string where = "key " + row.key + ", blob " + path;
  Result<at::Tensor> bytes = read_file_bytes(path, row.blob_bytes);
  if (!bytes && bytes.status().code() == StatusCode::kRefused)
    return Status::refused(where + ": " + bytes.status().reason());
  if (!bytes) {  // missing, not a regular file, or (its reason starts "size ") of another size than the row's
    const bool wrong_size = bytes.status().reason().rfind("size ", 0) == 0;
    return Status::not_found(std::string(wrong_size ? "corrupt blob " : "") + where + ": " + bytes.status().reason());
  }
  if (bytes.value().numel() != row.blob_bytes) {
    return Status::not_found("corrupt blob " + where + ": size " + std::to_string(bytes.value().numel()) +
                             " != " + std::to_string(row.blob_bytes) + " in the index (truncated?)");
  }
  Result<DecodedBlob> decoded = decode_blob(bytes.value(), row.checksum, where);
  if (!decoded) return decoded.status();
  if (decoded.value().key != row.key || decoded.value().model_fingerprint != options_.model_fingerprint) {
    return Status::not_found("corrupt blob " + where + ": it holds key " + decoded.value().key + " of model " +
                             decoded.value().model_fingerprint);
  }
  // A store that keeps its entries exact does not serve another's lossy copy as exact: a miss (recomputed), the
  // entry kept for the stores that wrote it so.
  if (decoded.value().encoding == BlobEncoding::kInt8 && !options_.int8_canonicals) {
    return Status::refused(where +
                           ": written as int8 rows (lossy) by a store with the int8 cold tier, and this "
                           "one keeps its entries exact");
  }
  return decoded.value().value;
}

Status DiskTier::commit(const PreparedBlob& blob, const RowAttrs& attrs, bool replace,
                        const std::string& remote_pending, int64_t* seq, bool* over_budget) {
  if (seq != nullptr) *seq = 0;
  if (over_budget != nullptr) *over_budget = false;
  DiskRow row;
  row.key = blob.key;
  row.kind = blob.kind;
  row.encoding = blob.encoding;
  row.blob = blob.blob;
  row.blob_bytes = blob.blob_bytes;
  row.value_bytes = blob.value_bytes;
  row.checksum = blob.checksum;
  row.hits = attrs.hits;
  row.last_access = attrs.last_access;
  row.recompute_cost = attrs.recompute_cost;
  row.expected_reuse = attrs.expected_reuse;
  std::string replaced;
  std::optional<DiskRow> kept;
  bool over = false;
  const auto upsert = [&] { return index_->upsert(row, &replaced, replace, &kept, options_.budget_bytes, &over); };
  // With a record: one transaction (a kept row writes nothing, its record still commits).
  Status s = remote_pending.empty() ? upsert() : index_->in_transaction([&] {
    Status up = upsert();
    return up ? index_->record_remote_pending(blob.key, remote_pending, /*erase=*/false, seq) : up;
  });
  if (over) {  // nothing written, the index takes commits: the caller makes room and tries again
    if (seq != nullptr) *seq = 0;
    if (over_budget != nullptr) {
      *over_budget = true;
    } else {
      discard(blob);
    }
    return s;
  }
  commit_refused_ = !s;
  if (!s) {
    if (seq != nullptr) *seq = 0;  // rolled back with the row
    discard(blob);
    // Out of space: the WAL may be what is full (at a file-size limit). A checkpoint lets the next commit
    // start it over, so a later put finds the disk again (ChunkStore's disk_degraded clears) without a reopen.
    if (s.code() == StatusCode::kOutOfCapacity) (void)index_->checkpoint();
    return s;
  }
  if (kept) {  // another process committed this content first: use its row
    discard(blob);
    add_row(std::move(*kept));
    return Status::ok();
  }
  // The row is durable: the replaced blob (possibly of a corrupt row) is garbage now.
  if (!replaced.empty()) {
    Result<std::string> old = resolve(replaced);
    if (old) ::unlink(old.value().c_str());
  }
  add_row(std::move(row));
  rows_[blob.key].pinned = attrs.pinned;
  return Status::ok();
}

Status DiskTier::probe_commit() {
  if (!commit_refused_) return Status::ok();
  Status s = index_->probe_commit();
  if (s.code() == StatusCode::kOutOfCapacity) (void)index_->checkpoint();  // as commit(): the WAL may start over
  commit_refused_ = !s;
  return s;
}

Status DiskTier::insert(const std::string& key, const ValuePtr& value) {
  Result<PreparedBlob> blob = prepare(key, *value);
  if (!blob) return blob.status();
  return commit(blob.value(), RowAttrs{});
}

Result<ValuePtr> DiskTier::read(const std::string& key) {
  const DiskRow* row = locate(key);
  if (row == nullptr) return Status::not_found("disk tier: no entry " + key);
  return load(*row);
}

Status DiskTier::erase(const std::string& key, const std::string& remote_pending, int64_t* seq) {
  std::string blob;
  if (seq != nullptr) *seq = 0;
  Status s = remote_pending.empty() ? index_->erase(key, &blob) : index_->in_transaction([&] {
    Status erased = index_->erase(key, &blob);
    return erased ? index_->record_remote_pending(key, remote_pending, /*erase=*/true, seq) : erased;
  });
  if (!s) {
    blob.clear();  // rolled back: the row and its blob stay
    if (seq != nullptr) *seq = 0;
    return s;
  }
  if (!blob.empty()) {
    Result<std::string> path = resolve(blob);
    if (path) ::unlink(path.value().c_str());
  }
  auto it = rows_.find(key);
  if (it != rows_.end()) {
    used_ -= it->second.blob_bytes;
    rows_.erase(it);
  }
  return Status::ok();
}

Result<bool> DiskTier::evict(const std::string& key, int64_t abandon_through) {
  std::string blob;
  auto it = rows_.find(key);
  if (it != rows_.end() && it->second.pinned) return false;
  Result<bool> erased = index_->erase_unleased(key, now_ms(), &blob, held_for_remote_, abandon_through);
  if (!erased) return erased.status();
  if (!erased.value()) {
    (void)refresh(key);  // held by another process (kept), or already gone
    return false;
  }
  if (!blob.empty()) {
    Result<std::string> path = resolve(blob);
    if (path) ::unlink(path.value().c_str());  // a reader that opened it keeps reading (POSIX unlink)
  }
  it = rows_.find(key);
  if (it != rows_.end()) {
    used_ -= it->second.blob_bytes;
    rows_.erase(it);
  }
  return true;
}

void DiskTier::remove(const std::string& key) { (void)evict(key); }

int64_t DiskTier::charged(const std::string& key) const {
  auto it = rows_.find(key);
  return it == rows_.end() ? 0 : it->second.blob_bytes;
}

const DiskRow* DiskTier::locate(const std::string& key) const {
  auto it = rows_.find(key);
  return it == rows_.end() ? nullptr : &it->second;
}

const DiskRow* DiskTier::find(const std::string& key) {
  if (const DiskRow* known = locate(key)) return known;
  return refresh(key);
}

const DiskRow* DiskTier::refresh(const std::string& key) {
  std::optional<DiskRow> row;
  try {
    row = index_->row(key);
  } catch (const Error&) {
    return locate(key);  // the index is busy or unreadable right now: keep what the mirror knows
  }
  auto it = rows_.find(key);
  if (!row || row->corrupt) {
    if (it != rows_.end()) {
      used_ -= it->second.blob_bytes;
      rows_.erase(it);
    }
    return nullptr;
  }
  add_row(std::move(*row));
  return &rows_.at(key);
}

void DiskTier::sync(std::vector<std::string>* added, std::vector<std::string>* removed) {
  std::unordered_map<std::string, DiskRow> fresh;
  for (DiskRow& row : index_->rows()) {
    if (usable(row)) fresh.emplace(row.key, std::move(row));
  }
  std::vector<std::string> gone;
  for (const auto& [key, row] : rows_) {
    if (!fresh.count(key)) gone.push_back(key);
  }
  for (const std::string& key : gone) {
    used_ -= rows_.at(key).blob_bytes;
    rows_.erase(key);
    removed->push_back(key);
  }
  for (auto& [key, row] : fresh) {
    if (!rows_.count(key)) added->push_back(key);
    add_row(std::move(row));
  }
}

void DiskTier::mark_corrupt(const DiskRow& row) {
  (void)index_->mark_corrupt(row.key, row.blob);  // best effort: the in-memory miss is what matters now
  auto it = rows_.find(row.key);
  if (it != rows_.end() && it->second.blob == row.blob) {
    used_ -= it->second.blob_bytes;
    rows_.erase(it);
  }
}

Status DiskTier::set_pinned(const std::string& key, bool pinned) {
  auto it = rows_.find(key);
  if (it == rows_.end()) return Status::ok();
  Status s;
  {
    std::lock_guard<std::mutex> lock(lease_mu_);
    const auto lease = std::make_pair(key, SqliteIndex::LeaseKind::kPin);
    if (pinned) {
      held_[lease] = 1;  // taken now, or by the next heartbeat where this fails (the index busy)
      (void)leases_->acquire_lease(key, owner_, lease.second, now_ms() + options_.lease_ms);
    } else {
      held_.erase(lease);  // not taken again; where the release fails the lease lapses by itself
      s = leases_->release_lease(key, owner_, lease.second);
    }
  }
  if (s) it->second.pinned = pinned;
  return s;
}

Status DiskTier::persist_access(const std::vector<AccessUpdate>& updates) {
  Status s = index_->update_access(updates);
  if (!s) return s;
  for (const AccessUpdate& u : updates) {
    auto it = rows_.find(u.key);
    if (it == rows_.end()) continue;
    it->second.hits = u.hits;
    it->second.last_access = u.last_access;
  }
  return s;
}

void DiskTier::verify_integrity(bool deep) const {
  int64_t bytes = 0;
  for (const auto& [key, row] : rows_) bytes += row.blob_bytes;
  ORBIT_CHECK(bytes == used_, "disk tier integrity: rows hold " << bytes << " bytes, accounted " << used_);
  if (!deep) return;
  int64_t live = 0;
  for (const DiskRow& row : index_->rows()) {
    if (row.corrupt) continue;
    ++live;
    auto it = rows_.find(row.key);
    ORBIT_CHECK(it != rows_.end(), "disk tier integrity: index row " << row.key << " is not in the tier");
    ORBIT_CHECK(
        it->second.blob == row.blob && it->second.checksum == row.checksum,
        "disk tier integrity: index row " << row.key << " names blob " << row.blob << ", the tier " << it->second.blob);
    ORBIT_CHECK(resolve(row.blob).is_ok() && std::filesystem::exists(absolute(row.blob)),
                "disk tier integrity: blob " << absolute(row.blob) << " of key " << row.key << " is missing");
  }
  ORBIT_CHECK(live == static_cast<int64_t>(rows_.size()),
              "disk tier integrity: index has " << live << " rows, the tier " << rows_.size());
}

}  // namespace orbit::store
