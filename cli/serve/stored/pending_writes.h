// The answers a store of `orbit serve` gave but could not write (store_write.h: `Orbit-Stored: false`), held
// in memory for a retry, for both stores (chat_store.h, responses_store.h). The mechanism only: which are
// held, in which order, how many bytes, and when each is due; the store decides what a retry writes and what
// a held answer means to its readers.
//
//   hold(id)      a write failed: the answer is held, the oldest first, while the held answers' bytes stay
//                 within max_bytes; past it the new one is not held (counted dropped) and hold says so. With a
//                 journal (held_journal.h) its record is appended and synced first, so that it survives a
//                 crash; where the journal cannot take it, it is held in memory only, and hold says so too.
//   adopt(id)     an answer read back from a journal at start: held (past max_bytes if need be: it is on disk
//                 already), its record kept.
//   due(now)      the held answers a retry should attempt now: every one whose backoff has passed.
//   landed(id)    a retry (or another write carrying it) wrote it: no longer held, counted retried; false when
//                 it was not held (landed already, or forgotten).
//   missed(id)    an attempt while the store took writes failed for this answer alone (it does not fit what
//                 is left): its next attempt waits 1 s, then 2, 4, ... at most kMaxBackoff. An attempt that
//                 was not made because the store took no write at all is not a miss.
//   forget(id)    the client deleted it while held: no longer held, counted neither way.
//   drop(id)      at shutdown, after the last attempt: no longer held here. One in the journal stays there
//                 (the next start writes it); one in memory only is given up, counted dropped.
// landed and forget release the journal's record (marked in place and synced, so on a full disk too: a crash
// after it does not bring the answer back).
//
// Thread-safety: every member may be called from any thread (one mutex, held only inside a member; the
// journal's appends and syncs run outside it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "serve/stored/held_journal.h"

namespace orbit::serve {

// What a store's pending writes hold and did, for /metrics.
struct PendingStats {
  int64_t held = 0;       // answers held now (gauge)
  int64_t bytes = 0;      // their bytes (gauge)
  int64_t retried = 0;    // answers written after their first write failed (counter)
  int64_t dropped = 0;    // answers given up: no room to hold them, or not written by shutdown (counter)
  int64_t journaled = 0;  // of those held, the ones whose record is in the journal (gauge)
  int64_t recovered = 0;  // answers read back from a journal at start and written since (counter)
};

// What hold() did with an answer.
struct HoldOutcome {
  bool held = false;          // held for a retry (false: no room within max_bytes; counted dropped)
  bool journaled = false;     // its record is in the journal, synced: it survives a crash
  std::string journal_error;  // why it is not, when held without a journal record ("" without a journal)
};

// What one retry of a store's held writes did.
struct RetryResult {
  std::size_t attempted = 0;  // held answers it tried to write (0 when the store's check failed)
  std::size_t stored = 0;     // of those, written
  std::string check_error;    // why the store's check failed ("" when it passed or did not run)
};

// A store's retry_pending: `retry()` run holding `turn`, the store's retry mutex. `all` (a drain) waits for it;
// otherwise a retry already running is left to finish and nothing is done (a put never waits for another's
// retry).
template <class Retry>
RetryResult retry_in_turn(std::mutex& turn, bool all, Retry&& retry) {
  std::unique_lock<std::mutex> lock(turn, std::defer_lock);
  if (all) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return {};
  }
  return retry();
}

template <class Item>
class PendingWrites {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kFirstBackoff{1};
  static constexpr std::chrono::seconds kMaxBackoff{64};

  struct Due {
    std::string id;
    Item item;
    int attempts = 0;   // failed so far (the first write included)
    std::string error;  // why the last one failed
  };

  // max_bytes: what the held answers may hold together (0 holds none). `journal`: where each held answer is
  // recorded (null: memory only); not owned, it outlives this.
  explicit PendingWrites(std::size_t max_bytes, HeldJournal* journal = nullptr)
      : max_bytes_(max_bytes), journal_(journal) {}
  PendingWrites(const PendingWrites&) = delete;
  PendingWrites& operator=(const PendingWrites&) = delete;

  // Holds `item` (`bytes` of it) under `id`, the newest, due at once, its first write having failed with
  // `error`, and appends `payload` (the item as the store encodes it) to the journal; not held when it does
  // not fit within max_bytes (counted dropped). An id held already keeps its first item.
  HoldOutcome hold(const std::string& id, Item item, std::size_t bytes, const std::string& error,
                   const std::string& payload) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (const auto it = by_id_.find(id); it != by_id_.end()) return {true, it->second->journaled, ""};
      if (bytes > max_bytes_ - std::min(max_bytes_, bytes_)) {
        ++stats_.dropped;
        return {};
      }
      bytes_ += bytes;  // its room, taken before the journal's sync
    }
    HoldOutcome out{true, false, ""};
    if (journal_ != nullptr) {
      out.journal_error = journal_->hold(id, payload);
      out.journaled = out.journal_error.empty();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    insert(Held{id, std::move(item), bytes, 1, error, Clock::time_point{}, kFirstBackoff, out.journaled, false});
    return out;
  }

  // Holds `item`, read back from the journal at start (its record stays there), due at once.
  void adopt(const std::string& id, Item item, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (by_id_.count(id) != 0) return;
    bytes_ += bytes;
    insert(Held{id, std::move(item), bytes, 1, "recovered from a journal", Clock::time_point{}, kFirstBackoff, true,
                true});
  }

  bool holds(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return by_id_.count(id) != 0;
  }
  bool empty() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return order_.empty();
  }

  // The items due at `now` (every one with `all`), oldest first.
  std::vector<Due> due(Clock::time_point now, bool all) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Due> out;
    for (const Held& h : order_) {
      if (all || h.next <= now) out.push_back(Due{h.id, h.item, h.attempts, h.error});
    }
    return out;
  }

  bool landed(const std::string& id) {
    const std::optional<Held> was = take(id);
    if (!was) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.retried;
      if (was->recovered) ++stats_.recovered;
    }
    release(*was);
    return true;
  }
  void missed(const std::string& id, Clock::time_point now, const std::string& error) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = by_id_.find(id);
    if (it == by_id_.end()) return;
    Held& h = *it->second;
    ++h.attempts;
    h.error = error;
    h.next = now + h.backoff;
    h.backoff = std::min<std::chrono::seconds>(2 * h.backoff, kMaxBackoff);
  }
  // `keep_as_link`: its journal record is kept as a link (HeldJournal::keep_as_link) instead of released, for
  // the held answers whose records name it.
  bool forget(const std::string& id, bool keep_as_link = false) {
    const std::optional<Held> was = take(id);
    if (was) release(*was, keep_as_link);
    return was.has_value();
  }
  // Held, with its record in the journal.
  bool journaled(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = by_id_.find(id);
    return it != by_id_.end() && it->second->journaled;
  }
  // true: it stays in the journal.
  bool drop(const std::string& id) {
    const std::optional<Held> was = take(id);
    if (!was || was->journaled) return was.has_value();
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.dropped;
    return false;
  }

  PendingStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    PendingStats s = stats_;
    s.held = static_cast<int64_t>(order_.size());
    s.bytes = static_cast<int64_t>(bytes_);
    s.journaled = std::count_if(order_.begin(), order_.end(), [](const Held& h) { return h.journaled; });
    return s;
  }

 private:
  struct Held {
    std::string id;
    Item item;
    std::size_t bytes = 0;
    int attempts = 0;
    std::string error;
    Clock::time_point next;          // not attempted before this
    std::chrono::seconds backoff{};  // added to the next miss's time
    bool journaled = false;          // its record is in the journal
    bool recovered = false;          // read back from a journal at start
  };

  void insert(Held held) {  // under mutex_; its bytes are counted in bytes_ already
    const std::string id = held.id;
    order_.push_back(std::move(held));
    by_id_[id] = std::prev(order_.end());
  }

  std::optional<Held> take(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = by_id_.find(id);
    if (it == by_id_.end()) return std::nullopt;
    Held held = std::move(*it->second);
    bytes_ -= held.bytes;
    order_.erase(it->second);
    by_id_.erase(it);
    return held;
  }

  // Not under mutex_: the journal syncs. A release adds no byte to the journal (held_journal.h: the record is
  // marked where it lies), so a full disk takes it; one whose mark fails all the same is made again by the
  // journal's next call, and until then a replay would write the answer again (by id: a no-op where it
  // landed) or, deleted meanwhile, bring it back.
  void release(const Held& held, bool keep_as_link = false) {
    if (!held.journaled || journal_ == nullptr) return;
    const std::string why = keep_as_link ? journal_->keep_as_link(held.id) : journal_->release(held.id);
    if (!why.empty()) {
      std::fprintf(stderr, "orbit serve: the journal cannot record that %s is no longer held: %s\n", held.id.c_str(),
                   why.c_str());
    }
  }

  const std::size_t max_bytes_;
  HeldJournal* const journal_;
  mutable std::mutex mutex_;
  std::list<Held> order_;  // oldest first
  std::map<std::string, typename std::list<Held>::iterator> by_id_;
  std::size_t bytes_ = 0;
  PendingStats stats_;  // retried and dropped; held and bytes are read from order_ and bytes_
};

}  // namespace orbit::serve
