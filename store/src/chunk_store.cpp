// The chunk store's API and bookkeeping; put and its stages are in chunk_store_put.cpp, its budgets, eviction
// and demotion in chunk_store_tiers.cpp.
#include "orbit/store/chunk_store.h"

#include <algorithm>

#include "chunk_store_args.h"
#include "orbit/common/error.h"
#include "orbit/common/warn.h"
#include "orbit/store/blob_format.h"

namespace orbit::store {

ChunkStore::ChunkStore(ChunkStoreOptions options) : options_(std::move(options)) {
  ORBIT_CHECK(!options_.model_fingerprint.empty(), "ChunkStore: options.model_fingerprint is empty");
  ORBIT_CHECK(options_.device_policy && options_.host_policy && options_.disk_policy,
              "ChunkStore: every tier needs an eviction policy");
  if (options_.device) device_ = std::make_unique<DeviceTier>(*options_.device);
  host_ = std::make_unique<MemoryTier>(options_.host_budget_bytes, options_.pinned_host);
  if (!options_.dir.empty()) {
    DiskTierOptions disk;
    disk.dir = options_.dir;
    disk.model_fingerprint = options_.model_fingerprint;
    disk.budget_bytes = options_.disk_budget_bytes;
    disk.int8_canonicals = options_.int8_cold_tier;
    disk.lease_ms = options_.lease_ms;
    disk.io_hooks = options_.io_hooks;
    disk_ = std::make_unique<DiskTier>(disk);
    for (const auto& [key, row] : disk_->rows()) {
      Meta m;
      m.kind = row.kind;
      m.pinned = row.pinned;
      m.last_access = static_cast<uint64_t>(row.last_access);
      m.hits = row.hits;
      m.recompute_cost = row.recompute_cost;
      m.expected_reuse = row.expected_reuse;
      clock_ = std::max(clock_, m.last_access);
      set_meta(key, m);
    }
  }
  if (!options_.remote.url.empty() || options_.remote_backend) {
    remote_ = std::make_unique<RemoteTier>(options_.remote, options_.model_fingerprint, options_.remote_backend,
                                           make_journal());
  }
}

ChunkStore::~ChunkStore() {
  try {
    Status durable = flush();
    bool lost = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      lost = !memory_only_.empty() || memory_only_lost_ > 0;
    }
    if (!durable && lost) {
      orbit::warn("store " + options_.dir + ": closing with entries that never reached the disk: " + durable.reason());
    }
    // Queued remote writes get a bounded chance to leave (they are durable locally either way).
    if (remote_ && remote_->stats().available) (void)remote_->drain(std::chrono::milliseconds(2000));
  } catch (...) {  // a destructor must not throw; the access times are an optimisation
  }
  remote_.reset();  // its writer reads local copies through the journal: stopped while every tier still lives
}

Result<RemoteReadSample> ChunkStore::measure_remote_read(int64_t bytes) {
  if (!remote_) return Status::refused("ChunkStore: no remote tier to measure");
  return remote_->measure_read(bytes);
}

bool ChunkStore::drain_remote(std::chrono::milliseconds timeout) { return !remote_ || remote_->drain(timeout); }

void ChunkStore::disk_failed(const Status& status) {
  ++io_errors_;
  const bool first = !disk_degraded_ && disk_warning_.empty();
  disk_degraded_ = true;
  disk_warning_ = status.reason();
  if (first && options_.warn_disk_errors) {
    orbit::warn("store " + options_.dir + ": a disk write failed (" + status.reason() +
                "); entries are kept in memory (host budget " + std::to_string(options_.host_budget_bytes) +
                " bytes) and are not durable until a write succeeds again (stats().store.disk_degraded)");
  }
}

ChunkStore::Meta* ChunkStore::known(const std::string& key) {
  auto it = meta_.find(key);
  if (it != meta_.end()) return &it->second;
  if (!disk_) return nullptr;
  const DiskRow* row = disk_->find(key);  // committed by another process since we opened
  if (row == nullptr) return nullptr;
  Meta m;
  m.kind = row->kind;
  m.hits = row->hits;
  m.last_access = ++clock_;
  m.recompute_cost = row->recompute_cost;
  m.expected_reuse = row->expected_reuse;
  return &meta_.emplace(key, m).first->second;
}

void ChunkStore::sync_disk() {
  std::vector<std::string> added, removed;
  try {
    disk_->sync(&added, &removed);
  } catch (const Error&) {
    return;  // the index is busy: decide on what the mirror knows
  }
  for (const std::string& key : added) (void)known(key);
  for (const std::string& key : removed) forget_if_gone(key);
}

Tier* ChunkStore::tier(StoreTier id) const {
  switch (id) {
    case StoreTier::kDevice: return device_.get();
    case StoreTier::kHost: return host_.get();
    case StoreTier::kDisk: return disk_.get();
    case StoreTier::kRemote: break;  // not a Tier (remote_tier.h)
  }
  return nullptr;
}

const EvictionPolicy& ChunkStore::policy(StoreTier id) const {
  switch (id) {
    case StoreTier::kDevice: return *options_.device_policy;
    case StoreTier::kHost: return *options_.host_policy;
    case StoreTier::kDisk: return *options_.disk_policy;
    case StoreTier::kRemote: break;
  }
  return *options_.host_policy;
}

void ChunkStore::touch(const std::string&, Meta& meta) {
  meta.last_access = ++clock_;
  meta.dirty = true;
}

RowAttrs ChunkStore::row_attrs(const Meta& m) const {
  RowAttrs a;
  a.pinned = m.pinned;
  a.hits = m.hits;
  a.last_access = static_cast<int64_t>(m.last_access);
  a.recompute_cost = m.recompute_cost;
  a.expected_reuse = m.expected_reuse;
  return a;
}

bool ChunkStore::resident_anywhere(const std::string& key) const {
  return (device_ && device_->contains(key)) || host_->contains(key) || (disk_ && disk_->contains(key));
}

void ChunkStore::set_meta(const std::string& key, const Meta& m) {
  meta_[key] = m;
  if (m.pinned) {
    pinned_.insert(key);
  } else {
    pinned_.erase(key);
  }
}

void ChunkStore::drop_meta(const std::string& key) {
  meta_.erase(key);
  pinned_.erase(key);
}

void ChunkStore::set_pinned(const std::string& key, Meta& m, bool pinned) {
  m.pinned = pinned;
  if (pinned) {
    pinned_.insert(key);
  } else {
    pinned_.erase(key);
  }
}

void ChunkStore::forget_if_gone(const std::string& key) {
  if (!resident_anywhere(key)) drop_meta(key);
}

// ---- the API -----------------------------------------------------------------------------------------

Result<ValuePtr> ChunkStore::get(const std::string& key, const GetOptions& options) {
  check_chunk_store_key(key, "get");
  if (options.remote_refusal != nullptr) options.remote_refusal->clear();
  if (options.remote_unavailable != nullptr) *options.remote_unavailable = false;
  if (options.internal) {
    std::lock_guard<std::mutex> lock(mu_);
    ++internal_reads_;  // instead of a hit or a miss
  }
  Status local_miss = Status::not_found("ChunkStore: no entry " + key);
  for (int attempt = 0; attempt < 4; ++attempt) {
    LocalGet step = get_local(key, options);
    if (step.next == LocalGet::kFound) return std::move(*step.result);
    if (step.next == LocalGet::kMiss) {
      if (step.result) local_miss = step.result->status();
      break;
    }
  }
  if (remote_ && options.remote) {
    Result<ValuePtr> remote = get_remote(key, options);
    if (remote) return remote;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!options.internal) ++misses_;
  return local_miss;
}

ChunkStore::LocalGet ChunkStore::get_local(const std::string& key, const GetOptions& options) {
  DiskRow row;
  {
    std::lock_guard<std::mutex> lock(mu_);
    LocalGet memory = get_from_memory(key, &row, options.internal);
    if (memory.next != LocalGet::kOnDisk) return memory;
  }
  // A read lease keeps another process's eviction away from the row while its blob is read.
  const bool leased = disk_->acquire_read(key);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const DiskRow* current = disk_->refresh(key);
    if (current == nullptr) {
      if (leased) disk_->release_read(key);
      forget_if_gone(key);
      return {LocalGet::kRetry, std::nullopt};
    }
    row = *current;
  }
  if (row.encoding == BlobEncoding::kInt8 && !options_.int8_cold_tier) {
    // Another store's lossy copy (the int8 cold tier), which this exact one does not serve (DiskTier::load refuses
    // it too): a miss without reading the blob, and no fault; the copy stays for the stores that read it.
    if (leased) disk_->release_read(key);
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.warn_disk_errors && !lossy_warned_) {
      lossy_warned_ = true;
      orbit::warn("store " + options_.dir + ": key " + key +
                  " is held as int8 rows (lossy), written by a store with "
                  "the int8 cold tier, and this one keeps its entries exact: read as a miss and recomputed (the copy "
                  "stays; so do the other int8 entries this store meets, warned about only here)");
    }
    return {LocalGet::kMiss, Status::not_found("ChunkStore: entry " + key + " is held as int8 rows (lossy), which " +
                                               "this store (exact) does not serve")};
  }
  Result<ValuePtr> loaded = disk_->load(row);  // outside the lock: read, checksum, decode
  if (leased) disk_->release_read(key);
  std::lock_guard<std::mutex> lock(mu_);
  const DiskRow* current = disk_->refresh(key);
  if (!loaded) return disk_read_failed(key, row, current, loaded.status());
  if (!options.internal) ++counters(StoreTier::kDisk).hits;
  max_int8_error_ = std::max(max_int8_error_, store::quantization_error(*loaded.value()));
  if (options.promote && current && current->blob == row.blob) promote_disk_hit(key, loaded.value());
  return {LocalGet::kFound, std::move(loaded)};
}

ChunkStore::LocalGet ChunkStore::get_from_memory(const std::string& key, DiskRow* row, bool internal) {
  Meta* m = known(key);
  if (m == nullptr) return {LocalGet::kMiss, std::nullopt};
  touch(key, *m);
  ++m->hits;
  for (StoreTier id : {StoreTier::kDevice, StoreTier::kHost}) {
    Tier* t = tier(id);
    if (t == nullptr || !t->contains(key)) continue;
    Result<ValuePtr> v = t->read(key);
    if (v && !internal) ++counters(id).hits;
    return {LocalGet::kFound, std::move(v)};
  }
  const DiskRow* located = disk_ ? disk_->locate(key) : nullptr;
  if (located == nullptr) {  // evicted meanwhile (here or by another process)
    forget_if_gone(key);
    return {LocalGet::kRetry, std::nullopt};
  }
  *row = *located;
  return {LocalGet::kOnDisk, std::nullopt};
}

ChunkStore::LocalGet ChunkStore::disk_read_failed(const std::string& key, const DiskRow& row, const DiskRow* current,
                                                  const Status& failure) {
  if (current == nullptr || current->blob != row.blob) {  // removed or rewritten meanwhile: look again
    forget_if_gone(key);
    return {LocalGet::kRetry, std::nullopt};
  }
  if (failure.code() == StatusCode::kRefused) {
    // The read failed, not the blob (e.g. out of file descriptors): a miss now, the entry stays for
    // this and every other process. Only a missing file or a failed verification marks it corrupt.
    ++unreadable_reads_;
    if (options_.warn_disk_errors && unreadable_warned_.insert(row.blob).second) {
      orbit::warn("store " + options_.dir + ": " + failure.reason() + "; the entry " + key +
                  " is kept and recomputed while it cannot be read (`orbit store verify` lists what it cannot "
                  "read)");
    }
    return {LocalGet::kMiss, Status::not_found("ChunkStore: entry " + key + " could not be read now (" +
                                               failure.reason() + "); it is kept")};
  }
  faults_.push_back({key, disk_->absolute(row.blob), failure.reason()});
  ++corrupt_reads_;
  if (options_.warn_disk_errors) {
    orbit::warn("store " + options_.dir + ": " + failure.reason() +
                "; the entry is marked corrupt and recomputed when needed (`orbit store verify` checks every blob)");
  }
  disk_->mark_corrupt(row);
  forget_if_gone(key);
  return {LocalGet::kMiss, failure};
}

void ChunkStore::promote_disk_hit(const std::string& key, const ValuePtr& value) {
  const bool in_memory = (device_ && device_->contains(key)) || host_->contains(key);
  if (!in_memory && meta_.count(key) && make_room(*host_, host_->charge(*value), key).is_ok() &&
      host_->insert(key, value)) {
    ++counters(StoreTier::kHost).promotions;
  }
}

Result<ValuePtr> ChunkStore::get_remote(const std::string& key, const GetOptions& options) {
  bool refused = false;
  // Bounded by the remote's timeouts; never throws for faults.
  Result<ValuePtr> r = remote_->get(key, &refused, options.remote_unavailable, options.internal);
  if (!r) {
    if (refused && options.remote_refusal != nullptr) *options.remote_refusal = r.status().reason();
    return r;
  }
  if (options.promote) {
    PutOptions po;
    po.recompute_cost = static_cast<double>(r.value()->bytes());
    (void)put_local(key, r.value(), po);  // host, and durable on disk for the other processes here
  }
  return r;
}

bool ChunkStore::contains(const std::string& key) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (meta_.count(key) > 0 || (disk_ && disk_->find(key) != nullptr)) return true;
  }
  return remote_ && remote_->contains(key);
}

std::optional<StoreTier> ChunkStore::residence(const std::string& key) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (StoreTier id : {StoreTier::kDevice, StoreTier::kHost}) {
      const Tier* t = tier(id);
      if (t && t->contains(key)) return id;
    }
    if (disk_ && disk_->find(key) != nullptr) return StoreTier::kDisk;
  }
  if (remote_ && remote_->contains(key)) return StoreTier::kRemote;
  return std::nullopt;
}

double ChunkStore::quantization_error(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (StoreTier id : {StoreTier::kDevice, StoreTier::kHost}) {
    const Tier* t = tier(id);
    if (t == nullptr || !t->contains(key)) continue;
    return store::quantization_error(t->attribute(key, kQuantizationErrorAttr));
  }
  const DiskRow* row = disk_ ? disk_->find(key) : nullptr;
  if (row == nullptr || row->encoding != BlobEncoding::kInt8) return 0.0;
  return max_int8_error_ > 0 ? max_int8_error_ : kInt8ErrorPrior;
}

Status ChunkStore::erase(const std::string& key) {
  check_chunk_store_key(key, "erase");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (known(key) != nullptr) {  // held here, or committed to the shared disk by another process
      // With a journal, the remote's removal is recorded in the local removal's own transaction (a key held only in
      // memory: its row deleted is none), so the two commit together or not at all.
      int64_t recorded_seq = 0;
      const bool journaled = remote_ && !journal_remote_.empty();
      if (disk_ && (journaled || disk_->contains(key))) {
        Status s = disk_->erase(key, journaled ? journal_remote_ : std::string(), &recorded_seq);
        if (!s) return s;
      }
      if (device_) device_->remove(key);
      host_->remove(key);
      drop_meta(key);
      memory_only_.erase(key);
      if (remote_) remote_->erase(key, recorded_seq);
      return Status::ok();
    }
  }
  // Not held here: it may still be on the shared remote (written by another process).
  if (remote_ && remote_->contains(key)) {
    remote_->erase(key);
    return Status::ok();
  }
  return Status::not_found("ChunkStore: no entry " + key);
}

Status ChunkStore::pin(const std::string& key) {
  check_chunk_store_key(key, "pin");
  std::lock_guard<std::mutex> lock(mu_);
  Meta* m = known(key);  // another process's entry on the shared disk too
  if (m == nullptr) return Status::not_found("ChunkStore::pin: no entry " + key);
  if (m->pinned) return Status::ok();  // this process holds its pin already
  if (disk_) {
    Status s = disk_->set_pinned(key, true);
    if (!s) return s;
  }
  set_pinned(key, *m, true);
  return Status::ok();
}

Status ChunkStore::unpin(const std::string& key) {
  check_chunk_store_key(key, "unpin");
  std::lock_guard<std::mutex> lock(mu_);
  Meta* m = known(key);
  if (m == nullptr) return Status::not_found("ChunkStore::unpin: no entry " + key);
  if (disk_) {
    Status s = disk_->set_pinned(key, false);
    if (!s) return s;
  }
  set_pinned(key, *m, false);
  return Status::ok();
}

Result<DeviceLease> ChunkStore::lease_device(const std::string& key) {
  check_chunk_store_key(key, "lease_device");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!device_) return Status::refused("ChunkStore::lease_device: the store has no device tier");
    auto it = meta_.find(key);
    if (it != meta_.end() && device_->contains(key)) {
      touch(key, it->second);
      ++counters(StoreTier::kDevice).hits;
      return device_->lease(key);
    }
  }
  Result<ValuePtr> value = get(key);
  if (!value) return value.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (!meta_.count(key)) return Status::not_found("ChunkStore::lease_device: entry " + key + " was removed");
  if (!device_->contains(key)) {
    if (!device_->accepts(*value.value())) {
      return Status::refused("ChunkStore::lease_device: entry " + key + " does not match the device page layout");
    }
    Status room = make_room(*device_, device_->charge(*value.value()), key);
    if (!room) return room;
    Status s = device_->insert(key, value.value());
    if (!s) return s;
    host_->remove(key);  // memory tiers are exclusive
    ++counters(StoreTier::kDevice).promotions;
  }
  return device_->lease(key);
}

StoreStats ChunkStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  StoreStats s;
  for (StoreTier id : {StoreTier::kDevice, StoreTier::kHost, StoreTier::kDisk}) {
    TierStats t;
    t.tier = id;
    const Tier* source = tier(id);
    const Counters& c = counters_[static_cast<int>(id)];
    if (source) {
      t.enabled = true;
      t.entries = source->num_entries();
      t.bytes = source->used_bytes();
      t.budget_bytes = source->budget_bytes();
      t.pinned_entries = pinned_in(*source);
    }
    t.policy = policy(id).name();
    t.hits = c.hits;
    t.evictions = c.evictions;
    t.demotions = c.demotions;
    t.promotions = c.promotions;
    s.tiers.push_back(t);
  }
  s.canonical_encoding = options_.int8_cold_tier ? BlobEncoding::kInt8 : BlobEncoding::kExact;
  s.pinned_host = options_.pinned_host;
  s.misses = misses_;
  s.internal_reads = internal_reads_;
  s.refusals = refusals_;
  s.corrupt_reads = corrupt_reads_;
  s.unreadable_reads = unreadable_reads_;
  s.io_errors = io_errors_;
  s.demotions_lost = demotions_lost_;
  s.disk_degraded = disk_degraded_;
  s.disk_warning = disk_warning_;
  if (remote_) s.remote = remote_->stats();
  return s;
}

std::vector<StoreFault> ChunkStore::faults() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_;
}

Status ChunkStore::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!disk_) return Status::ok();
  const Status durable = disk_degraded_ || !memory_only_.empty() ? disk_recovered() : Status::ok();
  std::vector<AccessUpdate> updates;
  for (auto& [key, m] : meta_) {
    if (m.dirty && disk_->contains(key)) updates.push_back({key, m.hits, static_cast<int64_t>(m.last_access)});
  }
  Status s = disk_->persist_access(updates);
  if (s) {
    for (auto& [key, m] : meta_) m.dirty = false;
  }
  if (!durable || memory_only_lost_ > 0) return not_durable(durable);
  return s;
}

Status ChunkStore::not_durable(const Status& cause) const {
  std::string reason = std::to_string(memory_only_.size()) + " entries are held only in memory (not durable)";
  if (memory_only_lost_ > 0) {
    reason += ", and " + std::to_string(memory_only_lost_) + " more left memory before the disk took them (lost)";
  }
  reason += ": " + (cause ? disk_warning_ : cause.reason());
  return cause || cause.code() == StatusCode::kOutOfCapacity ? Status::out_of_capacity(reason)
                                                             : Status::refused(reason);
}

int64_t ChunkStore::pinned_in(const Tier& t) const {
  int64_t n = 0;
  for (const std::string& key : pinned_) n += t.contains(key) ? 1 : 0;
  return n;
}

void ChunkStore::verify_integrity(bool deep) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (StoreTier id : {StoreTier::kDevice, StoreTier::kHost, StoreTier::kDisk}) {
    const Tier* t = tier(id);
    if (!t) continue;
    ORBIT_CHECK(t->used_bytes() <= t->budget_bytes(), "store integrity: " << store_tier_name(id) << " tier uses "
                                                                          << t->used_bytes() << " bytes of a budget of "
                                                                          << t->budget_bytes());
    int64_t entries = 0, bytes = 0;
    for (const auto& [key, m] : meta_) {
      if (!t->contains(key)) continue;
      ++entries;
      bytes += t->charged(key);
    }
    ORBIT_CHECK(entries == t->num_entries(), "store integrity: " << store_tier_name(id) << " tier holds "
                                                                 << t->num_entries() << " entries, the store knows "
                                                                 << entries);
    ORBIT_CHECK(bytes == t->used_bytes(), "store integrity: " << store_tier_name(id) << " tier charges "
                                                              << t->used_bytes() << " bytes, its entries " << bytes);
    int64_t pinned = 0;
    for (const auto& [key, m] : meta_) pinned += m.pinned && t->contains(key) ? 1 : 0;
    ORBIT_CHECK(pinned == pinned_in(*t), "store integrity: " << store_tier_name(id) << " tier holds " << pinned
                                                             << " pinned entries, stats() counts " << pinned_in(*t));
  }
  int64_t pinned = 0;
  for (const auto& [key, m] : meta_) pinned += m.pinned ? 1 : 0;
  ORBIT_CHECK(pinned == static_cast<int64_t>(pinned_.size()),
              "store integrity: " << pinned << " entries are pinned, the pinned set holds " << pinned_.size());
  for (const auto& [key, m] : meta_) {
    ORBIT_CHECK(resident_anywhere(key), "store integrity: entry " << key << " is in no tier");
    ORBIT_CHECK(!(device_ && device_->contains(key) && host_->contains(key)),
                "store integrity: entry " << key << " is in both the device and the host tier");
    if (disk_ && disk_->contains(key)) {
      ORBIT_CHECK(disk_->locate(key)->pinned == m.pinned,
                  "store integrity: entry " << key << " pin differs between the store and its index row");
    }
  }
  if (device_) device_->verify_integrity();
  if (disk_) disk_->verify_integrity(deep);
}

}  // namespace orbit::store
