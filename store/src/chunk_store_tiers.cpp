// The chunk store's budgets, eviction and demotion between tiers, and the disk's recovery after a failed
// write (chunk_store.h states the contract; chunk_store.cpp holds the API).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/common/warn.h"
#include "orbit/store/chunk_store.h"

namespace orbit::store {

// ---- budgets, eviction, demotion ---------------------------------------------------------------------

// What a memory tier frees beyond a put's need when it must evict. Each relief scans every entry the tier
// holds; relieved of only the one entry a put needs, a full tier is full again at the next put, so a server
// whose store is at its budget would scan thousands of entries for every chunk it stores. A margin of 1/64 of
// the budget makes that scan once per many puts. Below kExactRelief entries a scan is cheap and relief is
// exact; the disk tier is always exact (what leaves it leaves the store).
int64_t ChunkStore::relief_margin(const Tier& t) const {
  constexpr int64_t kExactRelief = 1024;
  if (&t == disk_.get() || t.num_entries() < kExactRelief) return 0;
  return t.budget_bytes() / 64;
}

Status ChunkStore::make_room(Tier& t, int64_t need, const std::string& exclude) {
  const char* name = store_tier_name(t.id());
  if (need > t.budget_bytes()) {
    return Status::out_of_capacity(std::string(name) + " tier: " + std::to_string(need) +
                                   " bytes exceed its whole budget of " + std::to_string(t.budget_bytes()));
  }
  if (&t == disk_.get() && t.budget_bytes() != std::numeric_limits<int64_t>::max()) sync_disk();
  if (t.budget_bytes() - t.used_bytes() >= need) return Status::ok();
  // On disk, the last tier, an entry whose remote write is recorded and not delivered yet is the copy that write
  // is still to be sent from (by this run's writer, or re-sent by the next open): it stays, up to
  // max_held_fraction of the budget. Past that share the oldest such entries go first, their writes given up, so a
  // remote down for long neither refuses every put nor pushes out every delivered entry.
  const HeldForRemote for_remote = held_for_remote(t, exclude);
  std::vector<std::pair<int64_t, std::string>> give_up;  // past the bound and evictable now, oldest first
  int64_t give_up_bytes = 0;
  for (const auto& [seq, key] : for_remote.past_bound) {
    auto it = meta_.find(key);
    if (it == meta_.end() || it->second.pinned || !t.evictable(key)) continue;
    give_up.emplace_back(seq, key);
    give_up_bytes += t.charged(key);
  }
  std::vector<EvictionCandidate> candidates;
  candidates.reserve(static_cast<std::size_t>(t.num_entries()));
  int64_t evictable = 0, held = 0, held_for_remote = -static_cast<int64_t>(give_up.size());
  for (const auto& [key, m] : meta_) {
    if (key == exclude || !t.contains(key)) continue;
    if (for_remote.held.count(key) > 0) {
      ++held_for_remote;
      continue;
    }
    if (m.pinned || !t.evictable(key)) {
      ++held;
      continue;
    }
    EvictionCandidate c;
    c.key = key;
    c.bytes = t.charged(key);
    c.last_access = m.last_access;
    c.hits = m.hits;
    c.expected_reuse = m.expected_reuse;
    c.recompute_cost = m.recompute_cost;
    evictable += c.bytes;
    candidates.push_back(std::move(c));
  }
  const int64_t free_bytes = t.budget_bytes() - t.used_bytes();
  if (free_bytes + evictable + give_up_bytes < need) {
    return Status::out_of_capacity(
        std::string(name) + " tier: " + std::to_string(need) + " bytes needed, " + std::to_string(free_bytes) +
        " free and " + std::to_string(evictable + give_up_bytes) + " evictable of " + std::to_string(t.budget_bytes()) +
        " (" + std::to_string(held) + " entries pinned or in use" +
        (held_for_remote > 0 ? ", " + std::to_string(held_for_remote) +
                                   " kept until their remote write is delivered (within max_held_fraction)"
                             : std::string()) +
        ")");
  }
  int64_t abandoned = 0;
  for (const auto& [seq, key] : give_up) {
    if (t.budget_bytes() - t.used_bytes() >= need) break;
    // A write in flight may yet be delivered: not given up (nor counted); its queued copies are dropped with the
    // others', so no write counted as abandoned reaches the remote.
    if (remote_ && !remote_->give_up(key)) continue;
    if (give_up_held(key, seq)) ++abandoned;
  }
  if (abandoned > 0 && remote_) remote_->abandoned(abandoned);
  // Candidates' keys are views of meta_'s. Evicting one erases at most its own entry: the tier below, relieved
  // to take it, holds none of this tier's keys (memory tiers are exclusive, the disk is the last).
  EvictionQueue queue(policy(t.id()), candidates);
  const int64_t margin = relief_margin(t);
  while (!queue.empty() && t.budget_bytes() - t.used_bytes() < need + margin) {
    const std::string key(candidates[queue.take()].key);
    if (t.contains(key)) evict(t, key);
  }
  if (t.budget_bytes() - t.used_bytes() >= need) return Status::ok();
  return Status::out_of_capacity(
      std::string(name) + " tier: could not free " + std::to_string(need) +
      " bytes (an eviction failed on disk, an entry past max_held_fraction had its remote write in flight, or "
      "the entries left hold writes recorded for a remote this process does not reach)");
}

ChunkStore::HeldForRemote ChunkStore::held_for_remote(const Tier& t, const std::string& exclude) const {
  HeldForRemote out;
  if (&t != disk_.get()) return out;
  out.held = disk_->held_for_remote();
  const double fraction = options_.remote.max_held_fraction;
  if (out.held.empty() || fraction >= 1.0) return out;  // 1: every one held (a put needing their room is refused)
  std::vector<std::pair<int64_t, std::string>> newest_first;
  for (const auto& [key, seq] : out.held) {
    if (key != exclude && t.contains(key)) newest_first.emplace_back(seq, key);
  }
  std::sort(newest_first.begin(), newest_first.end(), std::greater<>());
  const auto bound = static_cast<int64_t>(fraction * static_cast<double>(t.budget_bytes()));
  int64_t kept = 0;
  for (auto& [seq, key] : newest_first) {
    kept += t.charged(key);
    if (kept > bound) out.past_bound.emplace_back(seq, std::move(key));  // and every older one after it
  }
  std::reverse(out.past_bound.begin(), out.past_bound.end());
  return out;
}

bool ChunkStore::give_up_held(const std::string& key, int64_t seq) {
  Result<bool> evicted = disk_->evict(key, seq);
  const bool gone = evicted && evicted.value();
  if (gone) ++counters(StoreTier::kDisk).evictions;
  forget_if_gone(key);
  return gone;
}

void ChunkStore::evict(Tier& t, const std::string& key) {
  if (t.id() == StoreTier::kDisk) {
    // The last tier: the entry leaves the store unless a memory tier still holds it. Another process's
    // pin or read lease keeps it (evict answers false).
    Result<bool> evicted = disk_->evict(key);
    if (evicted && evicted.value()) ++counters(t.id()).evictions;
    forget_if_gone(key);
    return;
  }
  ++counters(t.id()).evictions;
  Result<ValuePtr> value = t.read(key);  // device pages are gathered to host memory for the tiers below
  t.remove(key);
  const Status placed = value ? place_below(t.id(), key, host_copy(value.value())) : value.status();
  if (placed) {
    ++counters(t.id()).demotions;
  } else {
    if (memory_only_.erase(key) > 0) ++memory_only_lost_;  // its disk write failed before: lost to the store
    // Without a disk, leaving memory is the store's eviction; with one, the disk was to take it.
    if (disk_) demotion_lost(key, placed);
  }
  forget_if_gone(key);
}

Status ChunkStore::place_below(StoreTier from, const std::string& key, const ValuePtr& value) {
  if (from == StoreTier::kDevice && make_room(*host_, host_->charge(*value), key).is_ok()) {
    return host_->insert(key, value);
  }
  if (!disk_) return Status::refused("no tier below holds it (memory only)");
  if (disk_->contains(key)) return Status::ok();  // already durable: dropping the memory copy loses nothing
  return write_to_disk_locked(key, value);
}

// Recomputable KV: a cache whose memory grew past its budget for what the disk refused would break the bound the
// server is sized by, and refusing the put that needed the room would stop memory caching, so the entry goes, as a
// disk eviction's would; counted, and the first warned about with the disk's reason, since a disk that refuses
// demotions (full of pinned or held entries, a budget below a value, failing writes) is worth an operator's look.
void ChunkStore::demotion_lost(const std::string& key, const Status& why) {
  if (demotions_lost_++ > 0 || !options_.warn_disk_errors) return;
  orbit::warn("store " + options_.dir + ": an entry leaving memory under its budget (" + key.substr(0, 12) +
              "...) could not be written to disk (" + why.reason() +
              "): it left the store (recomputed when needed); stats' demotions_lost counts every one (warned once "
              "a run)");
}

Status ChunkStore::commit_to_disk(const PreparedBlob& blob, const RowAttrs& attrs, bool replace,
                                  const std::string& remote, int64_t* seq, bool* room_refused) {
  constexpr int kTries = 4;
  *room_refused = false;
  for (int attempt = 1;; ++attempt) {
    Status room = make_room(*disk_, blob.blob_bytes - disk_->charged(blob.key), blob.key);
    bool over_budget = false;
    Status s = room ? disk_->commit(blob, attrs, replace, remote, seq, &over_budget) : room;
    if (s || (room && !over_budget)) return s;
    if (!room || attempt == kTries) {
      disk_->discard(blob);
      *room_refused = true;
      if (!room) return room;
      return Status::out_of_capacity("disk tier: other processes sharing " + disk_->options().dir +
                                     " filled the room made for " + std::to_string(blob.blob_bytes) + " bytes " +
                                     std::to_string(kTries) + " times over (" + s.reason() + ")");
    }
  }
}

Status ChunkStore::write_to_disk_locked(const std::string& key, const ValuePtr& value) {
  Status index = disk_->probe_commit();  // no blob while the index refuses commits
  if (!index) {
    disk_failed(index);
    return index;
  }
  Result<PreparedBlob> blob = disk_->prepare(key, *value);
  if (!blob) {
    disk_failed(blob.status());
    return blob.status();
  }
  auto it = meta_.find(key);
  bool room_refused = false;
  Status s = commit_to_disk(blob.value(), it == meta_.end() ? RowAttrs{} : row_attrs(it->second), false, "", nullptr,
                            &room_refused);
  if (!s) {
    if (!room_refused) disk_failed(s);
    return s;
  }
  memory_only_.erase(key);
  if (it != meta_.end() && it->second.pinned) (void)disk_->set_pinned(key, true);
  return s;
}

ValuePtr ChunkStore::memory_copy(const std::string& key) const {
  if (host_->contains(key)) {
    Result<ValuePtr> v = host_->read(key);
    return v ? v.value() : nullptr;
  }
  if (device_ && device_->contains(key)) {
    Result<ValuePtr> v = device_->read(key);  // gathered from device pages
    return v ? host_copy(v.value()) : nullptr;
  }
  return nullptr;
}

Status ChunkStore::disk_recovered() {
  Status index = disk_->probe_commit();  // an index that still refuses commits gets no blob written back
  if (!index) return index;
  const std::vector<std::string> keys(memory_only_.begin(), memory_only_.end());
  for (const std::string& key : keys) {
    ValuePtr value = disk_->locate(key) == nullptr ? memory_copy(key) : nullptr;
    if (value == nullptr) {  // on disk meanwhile, or erased
      memory_only_.erase(key);
      continue;
    }
    Status s = write_to_disk_locked(key, value);
    if (!s) return s;
  }
  disk_degraded_ = false;
  return Status::ok();
}

int64_t ChunkStore::memory_only_entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(memory_only_.size());
}

bool ChunkStore::place_in_memory(StoreTier highest, const std::string& key, const ValuePtr& value) {
  for (StoreTier id : {StoreTier::kDevice, StoreTier::kHost}) {
    Tier* t = tier(id);
    if (t == nullptr || static_cast<int>(id) < static_cast<int>(highest) || !t->accepts(*value)) continue;
    if (!make_room(*t, t->charge(*value), key)) continue;
    if (t->insert(key, value)) return true;
  }
  return false;
}

}  // namespace orbit::store
