// ChunkStore's remote journal (RemoteJournal, orbit/store/remote_tier.h): the remote writes and erases not yet
// acknowledged, recorded in the disk index (SqliteIndex's remote_pending, under this remote's URL as shown), and the
// local copies an open re-sends them from.
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/common/warn.h"
#include "orbit/store/chunk_store.h"
#include "orbit/store/redis_client.h"

namespace orbit::store {

// Every call is bounded by the index's busy timeout and never throws: a failure only means a write re-sent
// twice or not at all, the local copy staying either way.
class ChunkStore::Journal final : public RemoteJournal {
 public:
  Journal(ChunkStore& store, std::string remote) : store_(store), disk_(*store.disk_), remote_(std::move(remote)) {}

  int64_t record(const std::string& key, bool erase) override {
    int64_t seq = 0;
    try {
      return disk_.record_remote_pending(key, remote_, erase, &seq) ? seq : 0;
    } catch (const std::exception&) {  // a statement the index cannot prepare now: not recorded
      return 0;
    }
  }
  void settle(const std::vector<RemotePendingRecord>& records) override {
    try {  // the remote writer's thread: the records stay (re-sent once more at a later open)
      (void)disk_.clear_remote_pending(records, remote_);
    } catch (const std::exception&) {
    }
  }
  int64_t last() override {
    try {
      return disk_.last_remote_pending();
    } catch (const std::exception&) {
      return 0;
    }
  }
  int64_t count(int64_t through) override {
    try {
      return disk_.count_remote_pending(remote_, through);
    } catch (const std::exception&) {
      return 0;
    }
  }
  std::vector<RemotePendingRecord> recorded(int64_t after, int64_t through, int limit) override {
    try {
      return disk_.remote_pending(remote_, after, through, limit);
    } catch (const std::exception&) {
      return {};  // the index cannot be read now: the records stay for a later open
    }
  }
  Result<ValuePtr> local_copy(const std::string& key) override {
    try {
      return store_.local_copy(key);
    } catch (const std::exception& e) {
      return Status::refused(e.what());
    }
  }

 private:
  ChunkStore& store_;
  DiskTier& disk_;
  const std::string remote_;
};

// Writes recorded for this remote under another spelling of its URL ("redis://h:6379/0" for "redis://h:6379") are
// this remote's: moved to its name, so that they are re-sent (before, they waited for the old spelling, unsent,
// their local copies kept from eviction). Those recorded for another server stay, named in a warning: they are sent
// only when the store is opened with that remote, or dropped by `orbit store forget-remote`.
void ChunkStore::adopt_other_spellings(const std::string& remote) {
  std::map<std::string, int64_t> counts;
  try {
    counts = disk_->remote_pending_counts();
  } catch (const std::exception&) {
    return;  // the index cannot be read now: the records stay as they are
  }
  const std::string identity = redis_server_identity(remote);
  for (const auto& [name, records] : counts) {
    if (name == remote || records == 0) continue;
    if (redis_server_identity(name) == identity) {
      (void)disk_->adopt_remote_pending(name, remote);  // failing, they stay under the old spelling
      continue;
    }
    orbit::warn("store " + options_.dir + ": " + std::to_string(records) +
                " remote writes or erases not yet delivered are recorded for " + name +
                ", not for this store's remote " + remote +
                ": they are sent when the store is opened with that remote (`orbit store forget-remote --store " +
                options_.dir + " --remote " + name + "` drops them)");
  }
}

std::shared_ptr<RemoteJournal> ChunkStore::make_journal() {
  if (!disk_ || !options_.remote_journal) return nullptr;  // without a directory nothing local outlives the store
  const std::string remote =
      options_.remote_backend ? options_.remote_backend->describe() : redact_redis_url(options_.remote.url);
  journal_remote_ = remote;
  adopt_other_spellings(remote);
  disk_->hold_pending_writes(remote);  // an entry whose write is not delivered yet keeps its local copy
  return std::make_shared<Journal>(*this, remote);
}

Result<ValuePtr> ChunkStore::local_copy(const std::string& key) {
  DiskRow row;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (StoreTier id : {StoreTier::kDevice, StoreTier::kHost}) {
      Tier* t = tier(id);
      if (t != nullptr && t->contains(key)) return t->read(key);
    }
    const DiskRow* found = disk_ ? disk_->find(key) : nullptr;
    if (found == nullptr) return Status::not_found("ChunkStore: no local copy of " + key);
    row = *found;
  }
  const bool leased = disk_->acquire_read(key);  // another process's eviction waits for the read
  Result<ValuePtr> loaded = disk_->load(row);
  if (leased) disk_->release_read(key);
  return loaded;
}

}  // namespace orbit::store
