// ChunkStore::put and its stages (orbit/store/chunk_store.h): the value encoded and written to disk outside
// the lock, then under it committed to the index and placed in memory.
#include <mutex>
#include <optional>
#include <string>

#include "chunk_store_args.h"
#include "orbit/common/error.h"
#include "orbit/store/chunk_store.h"

namespace orbit::store {

Status ChunkStore::put(const std::string& key, const ValuePtr& value, const PutOptions& options) {
  const bool to_remote = remote_ && options.remote;
  int64_t journal_seq = 0;
  Status s = put_local(key, value, options, to_remote ? &journal_seq : nullptr);
  if (s && to_remote)
    remote_->put(key, value, journal_seq);  // after the local copy: a failed remote write loses nothing
  return s;
}

Status ChunkStore::put_local(const std::string& key, const ValuePtr& value, const PutOptions& options,
                             int64_t* journal_seq) {
  check_chunk_store_key(key, "put");
  ORBIT_CHECK(value != nullptr, "ChunkStore::put: null value for key " << key);
  if (!options.replace) {
    if (std::optional<Status> stored = put_existing(key, value, options)) return *stored;
  }
  PendingPut pending;
  if (journal_seq != nullptr) pending.journal_remote = journal_remote_;
  if (std::optional<Status> ended = prepare_put(key, *value, options, &pending)) return *ended;
  std::lock_guard<std::mutex> lock(mu_);
  const Meta m = put_meta(key, *value, options);
  if (std::optional<Status> ended = commit_put(key, m, options, pending)) return *ended;
  if (journal_seq != nullptr) *journal_seq = pending.journal_seq;
  return place_put(key, value, options, pending);
}

std::optional<Status> ChunkStore::put_existing(const std::string& key, const ValuePtr& value,
                                               const PutOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  Meta* m = known(key);
  // Held in memory only because an earlier disk write failed: write it through now (go on with the put).
  const bool not_durable =
      m && disk_ && options_.write_through && options.tier != StoreTier::kDisk && disk_->locate(key) == nullptr;
  if (!m || not_durable) return std::nullopt;
  touch(key, *m);  // content-addressed: the same key already holds this content
  if (options.pin && !m->pinned) {
    Status pinned = disk_ ? disk_->set_pinned(key, true) : Status::ok();
    if (!pinned) return pinned;
    set_pinned(key, *m, true);
  }
  const bool in_memory = (device_ && device_->contains(key)) || host_->contains(key);
  if (!in_memory && options.tier != StoreTier::kDisk) (void)place_in_memory(options.tier, key, value);
  return Status::ok();
}

std::optional<Status> ChunkStore::prepare_put(const std::string& key, const StoredValue& value,
                                              const PutOptions& options, PendingPut* pending) {
  const bool durable = disk_ && options_.write_through && options.tier != StoreTier::kDisk;
  pending->disk_only = options.tier == StoreTier::kDisk;
  if (pending->disk_only && !disk_) {
    std::lock_guard<std::mutex> lock(mu_);
    ++refusals_;
    return Status::refused("ChunkStore::put: PutOptions::tier is disk but the store has no directory");
  }
  if (!durable && !pending->disk_only) return std::nullopt;
  {
    // While the index refuses commits, a blob written now would only be discarded (and fill a full disk
    // further): a small probe commit first, and no blob unless it passes.
    std::lock_guard<std::mutex> lock(mu_);
    Status index = disk_->probe_commit();
    if (!index) {
      disk_failed(index);
      if (pending->disk_only) return index;
      pending->disk_error = index;  // kept in memory by place_put
      return std::nullopt;
    }
  }
  Result<PreparedBlob> blob = disk_->prepare(key, value);  // outside the lock: encode, write, fsync
  if (blob) {
    pending->prepared = blob.value();
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(mu_);
  disk_failed(blob.status());
  if (pending->disk_only) return blob.status();
  pending->disk_error = blob.status();  // kept in memory by place_put
  return std::nullopt;
}

ChunkStore::Meta ChunkStore::put_meta(const std::string& key, const StoredValue& value, const PutOptions& options) {
  Meta m;
  m.kind = value.kind;
  m.pinned = options.pin;
  m.recompute_cost = options.recompute_cost;
  m.expected_reuse = options.expected_reuse;
  m.last_access = ++clock_;
  if (auto old = meta_.find(key); old != meta_.end()) {  // a replacement keeps the pin and the hit count
    m.pinned = m.pinned || old->second.pinned;
    m.hits = old->second.hits;
  }
  return m;
}

std::optional<Status> ChunkStore::commit_put(const std::string& key, const Meta& m, const PutOptions& options,
                                             PendingPut& pending) {
  if (pending.prepared) {
    bool room_refused = false;
    Status committed = commit_to_disk(*pending.prepared, row_attrs(m), options.replace, pending.journal_remote,
                                      &pending.journal_seq, &room_refused);
    if (room_refused) {
      ++refusals_;
      return committed;
    }
    if (!committed) {
      disk_failed(committed);
      if (pending.disk_only) {
        forget_if_gone(key);
        return committed;
      }
      pending.disk_error = committed;
      pending.prepared.reset();
    } else {
      memory_only_.erase(key);
      if (m.pinned) (void)disk_->set_pinned(key, true);
    }
  }
  // A replaced value leaves every tier (a disk copy too, unless the new value was just committed there). Without
  // replace a disk copy is the same value (another process's, committed meanwhile, or one a failed commit found
  // there): it stays.
  if (options.replace && !pending.prepared && disk_ && disk_->contains(key)) {
    Status erased = disk_->erase(key);
    if (!erased) return erased;
  }
  if (device_) device_->remove(key);
  host_->remove(key);
  set_meta(key, m);
  return std::nullopt;
}

Status ChunkStore::place_put(const std::string& key, const ValuePtr& value, const PutOptions& options,
                             PendingPut& pending) {
  if (pending.disk_only || place_in_memory(options.tier, key, value)) {
    if (!pending.disk_error.is_ok()) {
      memory_only_.insert(key);  // written back by disk_recovered() once the disk takes writes again
    } else if (pending.prepared && disk_degraded_) {
      (void)disk_recovered();
    }
    return Status::ok();
  }
  if (pending.prepared) {  // durable on disk; no memory tier could hold a copy
    if (disk_degraded_) (void)disk_recovered();
    return Status::ok();
  }
  if (disk_ && pending.disk_error.is_ok()) {
    Status s = write_to_disk_locked(key, value);
    if (s && disk_degraded_) (void)disk_recovered();
    if (s) return s;
    forget_if_gone(key);
    ++refusals_;
    return s;
  }
  drop_meta(key);
  ++refusals_;
  if (!pending.disk_error.is_ok()) return pending.disk_error;  // neither the disk nor memory could keep it
  return Status::out_of_capacity("ChunkStore::put: no tier can admit " + std::to_string(value->bytes()) +
                                 " bytes for key " + key + " (host budget " + std::to_string(host_->budget_bytes()) +
                                 ", no disk tier)");
}

}  // namespace orbit::store
