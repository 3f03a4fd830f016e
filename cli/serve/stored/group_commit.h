// Writes from many threads joined into shared commits (group commit, as LevelDB's writer queue does), for
// both stores `orbit serve` keeps answers in (chat_store.h, responses_store.h): each write waits in one
// queue, and the thread at its head (the leader) takes every write queued so far, at most max_group, and
// writes them at once, while the writes that arrive meanwhile queue behind it and form the next group: a
// group grows with the load, and a write that comes alone is written at once (there is no timer).
//
// Two kinds of writes queue:
//   submit(item)  an item to keep. The leader hands a group's items to Writer::commit, one transaction
//                 behind one sync of the disk, and answers each once it returned: an item answered ok is as
//                 durable as the transaction that held it. When that commit throws, each item of the group
//                 is committed again alone, so that one the disk cannot take (too large for what is left of
//                 it) fails alone and the others are kept.
//   check()       whether the store takes a write now (the check a request with store: true passes before it
//                 runs). The leader runs Writer::check once for the checks of its group (a small write, not
//                 synced) and answers them before it commits the group's items: a check never waits for the
//                 sync of other writes' commit, only for the group being written when it arrived.
//
//   queue:  [leader: writing a, b] [c] [check] [e]   c, check and e wait; once a, b are written, c leads:
//                                                    the check is answered, then c and e are committed
//
// max_group 1 writes every item, and runs every check, alone (`orbit serve --store-group-commit off`).
// Thread-safety: submit() and check() may be called from any thread; Writer's functions run on one thread
// at a time, never under this class's lock.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "serve/stored/store_write.h"

namespace orbit::serve {

// What a store's group commit has written, for /metrics: items / commits is the mean group.
struct StoreWrites {
  int64_t commits = 0;   // transactions committed that held items
  int64_t items = 0;     // items they committed
  int64_t failures = 0;  // item writes that failed (not kept); a held item's failed retries count too
};

template <class Item>
class GroupCommit {
 public:
  struct Writer {
    // Commits `items` (at least one, in arrival order) as one transaction before it returns; throws (the
    // store's error, naming its file) when it cannot, and then keeps none of them.
    std::function<void(const std::vector<Item>& items)> commit;
    // Proves the store takes a write now (SqliteFile::check_writable); throws why when it does not.
    std::function<void()> check;
  };

  GroupCommit(std::size_t max_group, Writer writer)
      : max_group_(std::max<std::size_t>(max_group, 1)), writer_(std::move(writer)) {}
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  // Returns once `item`'s transaction committed (ok), or why it could not be kept.
  StoreWrite submit(Item item) {
    Waiter me;
    me.item = std::move(item);
    return wait_or_lead(me);
  }

  // Submits `items` together, in order (the retry of a store's pending writes, pending_writes.h): queued at
  // once, so that they join one group (or several of max_group); returns each one's outcome, in order.
  std::vector<StoreWrite> submit_all(std::vector<Item> items) {
    std::vector<Waiter> waiters(items.size());  // not moved: the queue points at them
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (std::size_t i = 0; i < items.size(); ++i) {
        waiters[i].item = std::move(items[i]);
        queue_.push_back(&waiters[i]);
      }
    }
    std::vector<StoreWrite> out;
    out.reserve(waiters.size());
    for (Waiter& w : waiters) out.push_back(wait_or_lead(w, true));
    return out;
  }

  // Returns once Writer::check ran for this check's group, with its outcome.
  StoreWrite check() {
    Waiter me;
    me.is_check = true;
    return wait_or_lead(me);
  }

  // Writes waiting or being written now (for tests that wait until a group has formed).
  std::size_t queued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size() + in_flight_;
  }

  std::size_t max_group() const { return max_group_; }

  StoreWrites writes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return writes_;
  }

 private:
  struct Waiter {
    Item item{};
    bool is_check = false;
    StoreWrite result;
    bool done = false;
    std::condition_variable ready;
  };

  // `queued`: `me` is in queue_ already (submit_all).
  StoreWrite wait_or_lead(Waiter& me, bool queued = false) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!queued) queue_.push_back(&me);
    me.ready.wait(lock, [&] { return me.done || (!writing_ && queue_.front() == &me); });
    if (me.done) return me.result;  // a leader wrote it
    writing_ = true;
    std::vector<Waiter*> checks, puts;
    for (std::size_t n = std::min(queue_.size(), max_group_); n > 0; --n) {
      Waiter* w = queue_.front();
      queue_.pop_front();
      (w->is_check ? checks : puts).push_back(w);
    }
    in_flight_ = checks.size() + puts.size();
    lock.unlock();
    try {
      if (!checks.empty()) {
        const StoreWrite checked = attempt([&] { writer_.check(); });
        answer(checks, std::vector<StoreWrite>(checks.size(), checked), &me);
      }
      if (!puts.empty()) answer(puts, commit_all(puts), &me);
    } catch (...) {  // the leader's own bookkeeping failed (out of memory): its group is answered all the same
      answer_unanswered(checks, &me);
      answer_unanswered(puts, &me);
    }
    lock.lock();
    writing_ = false;
    if (!queue_.empty()) queue_.front()->ready.notify_one();  // the next leader
    return me.result;
  }

  // Each item's outcome: the group in one transaction, else each item alone.
  std::vector<StoreWrite> commit_all(const std::vector<Waiter*>& group) {
    std::vector<Item> items;
    items.reserve(group.size());
    for (const Waiter* w : group) items.push_back(w->item);
    const StoreWrite together = attempt([&] { writer_.commit(items); });
    std::vector<StoreWrite> out(group.size(), together);
    if (together.ok || group.size() == 1) {
      count(together.ok ? 1 : 0, together.ok ? group.size() : 0, together.ok ? 0 : 1);
      return out;
    }
    for (std::size_t i = 0; i < group.size(); ++i) {
      out[i] = attempt([&] { writer_.commit({items[i]}); });
      count(out[i].ok ? 1 : 0, out[i].ok ? 1 : 0, out[i].ok ? 0 : 1);
    }
    return out;
  }

  template <class Fn>
  static StoreWrite attempt(Fn&& fn) {
    try {
      fn();
      return {};
    } catch (const std::exception& e) {
      return StoreWrite::failed(e.what());
    } catch (...) {
      return StoreWrite::failed("the store's writer failed");
    }
  }

  // The waiters of `group` a leader that failed part way left unanswered: failed, so none waits forever (and the
  // next leader is woken by the caller).
  void answer_unanswered(const std::vector<Waiter*>& group, const Waiter* leader) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Waiter* w : group) {
      if (w->done) continue;
      w->result.ok = false;
      try {
        w->result.error = "the store's writer failed part way";
      } catch (...) {  // out of memory: the failure without its reason
      }
      w->done = true;
      --in_flight_;
      if (w != leader) w->ready.notify_one();
    }
  }

  void count(int64_t commits, std::size_t items, int64_t failures) {
    std::lock_guard<std::mutex> lock(mutex_);
    writes_.commits += commits;
    writes_.items += static_cast<int64_t>(items);
    writes_.failures += failures;
  }

  // Under the lock: a waiter returns (and its Waiter goes) only once it has the lock again.
  void answer(const std::vector<Waiter*>& group, std::vector<StoreWrite> results, const Waiter* leader) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < group.size(); ++i) {
      group[i]->result = std::move(results[i]);
      group[i]->done = true;
      if (group[i] != leader) group[i]->ready.notify_one();
    }
    in_flight_ -= group.size();
  }

  const std::size_t max_group_;
  const Writer writer_;
  mutable std::mutex mutex_;
  std::deque<Waiter*> queue_;  // waiting, in arrival order
  bool writing_ = false;       // a leader is writing its group (taken off queue_)
  std::size_t in_flight_ = 0;  // writes of that group not answered yet
  StoreWrites writes_;         // under mutex_
};

}  // namespace orbit::serve
