// RemoteTier's background writer (orbit/store/remote_tier.h): the queue of live writes and removals, sent in
// order and kept at the front through an outage; an earlier run's undelivered writes re-sent from the journal
// once the queue is empty; delivered records settled in the journal; writes given up when their local copies are
// evicted. The tier's reads and its lifetime are in remote_tier.cpp.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "orbit/common/warn.h"
#include "orbit/store/remote_tier.h"
#include "remote_blob.h"

namespace orbit::store {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

bool RemoteTier::drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return queue_.empty() && !in_flight_ && !settling_ && !resending(); });
}

void RemoteTier::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty() || resending(); });
    if (stop_) return;
    if (down_ && Clock::now() < down_until_) {  // wait out the outage (or a stop), then try again
      cv_.wait_until(lock, down_until_, [&] { return stop_; });
      continue;
    }
    if (!queue_.empty()) {
      send_front(lock);  // the live writes first; an earlier run's records wait for an empty queue
    } else if (resend_done_) {
      start_rescan(lock);  // rescan_: writes the byte bound dropped
    } else {
      resend_step(lock);
    }
    cv_.notify_all();
  }
}

void RemoteTier::send_front(std::unique_lock<std::mutex>& lock) {
  Pending p = queue_.front();
  in_flight_ = true;
  in_flight_key_ = p.key;
  lock.unlock();
  std::string bytes;
  Status s = Status::ok();
  if (p.value) {
    bytes = sealed_remote_blob(options_.secret, p.key, fingerprint_, *p.value);
    s = backend_->put(p.key, bytes);
  } else {
    s = backend_->remove(p.key);
  }
  if (!s)
    failed(s.reason());
  else
    succeeded();
  lock.lock();
  in_flight_ = false;
  if (s && p.value) {
    ++stats_.writes;
    stats_.bytes_written += static_cast<int64_t>(bytes.size());
  } else if (s) {
    ++stats_.removals;
  } else {
    ++stats_.write_failures;
  }
  // Sent, or failed: a failed write stays at the front for the next attempt (unless dropped meanwhile).
  if (s && !queue_.empty() && queue_.front().key == p.key && queue_.front().value == p.value) {
    queued_bytes_ -= queue_.front().bytes;
    queue_.pop_front();
  }
  stats_.queued = static_cast<int64_t>(queue_.size());
  if (s && journal_) {  // written, or removed (nothing is left to re-send): the record goes
    delivered_.push_back(RemotePendingRecord{p.seq, p.key, !p.value});
    if (queue_.empty() || delivered_.size() >= 64) settle_delivered(lock);
  }
}

void RemoteTier::start_rescan(std::unique_lock<std::mutex>& lock) {
  rescan_ = false;
  rescan_reading_ = true;  // drain() waits while the journal is read without the lock
  lock.unlock();
  const int64_t last = journal_->last();
  lock.lock();
  rescan_reading_ = false;
  // The records past those re-sent so far: a dropped write's is among them; one still queued is skipped by
  // resend_step, and one acknowledged was cleared when the queue emptied.
  if (last <= resend_after_) return;
  resend_through_ = last;
  resend_done_ = false;
  resend_counted_ = false;
}

void RemoteTier::resend_step(std::unique_lock<std::mutex>& lock) {
  if (!resend_counted_) {  // on this thread, not at open: a long record is counted in the background
    resend_counted_ = true;
    lock.unlock();
    const int64_t backlog = journal_->count(resend_through_);
    lock.lock();
    stats_.resend_backlog = backlog;
  }
  if (resend_batch_.empty()) {
    const int64_t after = resend_after_;
    lock.unlock();
    const std::vector<RemotePendingRecord> batch = journal_->recorded(after, resend_through_, 64);
    lock.lock();
    for (const RemotePendingRecord& record : batch) resend_batch_.push_back(record);
    if (batch.empty()) {
      resend_done_ = true;
      stats_.resend_backlog = 0;
    } else {
      resend_after_ = batch.back().seq;
    }
    return;
  }
  const RemotePendingRecord record = resend_batch_.front();
  const std::string& key = record.key;
  // A live write or removal of the key is queued: it ends the remote's state of the key and settles the record.
  bool queued = false;
  for (const Pending& p : queue_) queued = queued || p.key == key;
  in_flight_ = true;
  in_flight_key_ = key;
  lock.unlock();
  Status sent = Status::ok();
  bool settle = false;
  int64_t bytes = 0;
  if (!queued) sent = resend(record, &settle, &bytes);
  lock.lock();
  in_flight_ = false;
  if (!sent) {  // the key stays first in the batch: tried again after the outage
    ++stats_.write_failures;
    return;
  }
  resend_batch_.pop_front();
  stats_.resend_backlog = std::max<int64_t>(0, stats_.resend_backlog - 1);
  if (bytes > 0 || (record.erase && settle)) ++stats_.resent;  // a value written, or an erase's removal
  if (settle) delivered_.push_back(record);
  if (resend_batch_.empty() || delivered_.size() >= 64) settle_delivered(lock);
}

Status RemoteTier::resend(const RemotePendingRecord& record, bool* settle, int64_t* bytes) {
  const std::string& key = record.key;
  Result<ValuePtr> local = journal_->local_copy(key);
  *settle = local.is_ok() || local.status().code() == StatusCode::kNotFound;  // refused: kept for a later open
  Status sent = Status::ok();
  if (local) {  // a write, or an erase whose key the local tiers hold again: the remote gets the local copy
    const std::string blob = sealed_remote_blob(options_.secret, key, fingerprint_, *local.value());
    *bytes = static_cast<int64_t>(blob.size());
    sent = backend_->put(key, blob);
  } else if (record.erase && *settle) {  // erased, and not held since: the remote loses it too
    sent = backend_->remove(key);
  } else {
    return sent;  // a write with no local copy (nothing to send), or the local tiers cannot be read now
  }
  if (!sent) {
    failed(sent.reason());
    *settle = false;
  } else {
    succeeded();
  }
  return sent;
}

void RemoteTier::settle_delivered(std::unique_lock<std::mutex>& lock) {
  if (delivered_.empty()) return;
  std::set<std::string> queued;
  for (const Pending& p : queue_) queued.insert(p.key);
  std::vector<RemotePendingRecord> records;
  for (RemotePendingRecord& record : delivered_) {
    // Written or removed again since: that one settles the key's record (now of its kind). A record made since and
    // not queued yet (RemoteTier::put between its record and its queueing) has a higher seq: the journal keeps it.
    if (record.seq > 0 && queued.count(record.key) == 0) records.push_back(std::move(record));
  }
  delivered_.clear();
  if (records.empty()) return;
  settling_ = true;  // drain() waits for the clearing too
  lock.unlock();
  journal_->settle(records);
  lock.lock();
  settling_ = false;
}

bool RemoteTier::give_up(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_ && in_flight_key_ == key) return false;
  bool dropped = false;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->key == key && it->value) {  // not in flight (checked above): the front waiting out an outage goes too
      queued_bytes_ -= it->bytes;
      it = queue_.erase(it);
      dropped = true;
    } else {
      ++it;
    }
  }
  // Not counted in writes_dropped (abandoned counts it). Its record goes with the eviction; should that eviction
  // fail, the record stays, and the rescan re-sends it.
  if (dropped && journal_) rescan_ = true;
  stats_.queued = static_cast<int64_t>(queue_.size());
  cv_.notify_all();
  return true;
}

void RemoteTier::abandoned(int64_t writes) {
  if (writes <= 0) return;
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.abandoned += writes;
    warn = options_.warn && !warned_abandoned_;
    warned_abandoned_ = true;
  }
  if (warn) {
    std::ostringstream what;
    what << "remote tier " << backend_->describe() << ": gave up " << writes << " undelivered write"
         << (writes == 1 ? "" : "s") << " (their local copies evicted past max_held_fraction "
         << options_.max_held_fraction
         << " of the disk budget: the remote down or behind); not re-sent later (stats' remote abandoned counts "
            "every one; warned once a run)";
    orbit::warn(what.str());
  }
}

}  // namespace orbit::store
