// Writes from many threads joined into shared commits (group commit, as LevelDB's writer queue does): each
// write waits in one queue, and the thread at its head (the leader) hands every write queued so far, at
// most max_group, to `write` at once, which commits them as one transaction behind one sync of the disk.
// While it commits, the writes that arrive queue behind it and form the next group: a group grows with the
// load, and a write that comes alone is written at once (there is no timer).
//
// submit() returns once the write of its group has returned, with that write's outcome for its item: an
// item answered ok is as durable as the transaction that held it. max_group 1 writes every item alone
// (`orbit serve --store-group-commit off`).
//
//   queue:  [leader: writing a, b] [c] [d] [e]     c, d, e wait; when a, b are written, c leads c, d, e
//
// Thread-safety: submit() may be called from any thread; `write` runs on one thread at a time.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "serve/stored/store_write.h"

namespace orbit::serve {

template <class Item>
class GroupCommit {
 public:
  // Writes a group (its items in arrival order) and returns one outcome per item, in that order. An
  // exception fails every item of the group with its message.
  using Write = std::function<std::vector<StoreWrite>(const std::vector<Item>& group)>;

  GroupCommit(std::size_t max_group, Write write)
      : max_group_(std::max<std::size_t>(max_group, 1)), write_(std::move(write)) {}
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  StoreWrite submit(Item item) {
    Waiter me{std::move(item)};
    std::unique_lock<std::mutex> lock(mutex_);
    queue_.push_back(&me);
    me.ready.wait(lock, [&] { return me.done || queue_.front() == &me; });
    if (me.done) return me.result;  // a leader wrote it
    const std::size_t n = std::min(queue_.size(), max_group_);
    std::vector<Item> group;
    group.reserve(n);
    for (std::size_t i = 0; i < n; ++i) group.push_back(queue_[i]->item);
    lock.unlock();
    std::vector<StoreWrite> results = write_all(group);
    lock.lock();
    // Answered under the lock: a waiter returns (and its Waiter goes) only once it has the lock again.
    for (std::size_t i = 0; i < n; ++i) {
      Waiter* w = queue_.front();
      queue_.pop_front();
      w->result = std::move(results[i]);
      w->done = true;
      if (w != &me) w->ready.notify_one();
    }
    if (!queue_.empty()) queue_.front()->ready.notify_one();  // the next leader
    return me.result;
  }

  // Writes waiting or being written now (for tests that wait until a group has formed).
  std::size_t queued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return queue_.size();
  }

  std::size_t max_group() const { return max_group_; }

 private:
  struct Waiter {
    Item item;
    StoreWrite result;
    bool done = false;
    std::condition_variable ready;
  };

  std::vector<StoreWrite> write_all(const std::vector<Item>& group) {
    std::vector<StoreWrite> results;
    try {
      results = write_(group);
    } catch (const std::exception& e) {
      results.assign(group.size(), StoreWrite::failed(e.what()));
    }
    results.resize(group.size(), StoreWrite::failed("the group's write gave no outcome for this item"));
    return results;
  }

  const std::size_t max_group_;
  const Write write_;
  mutable std::mutex mutex_;
  std::deque<Waiter*> queue_;  // front: the leader
};

}  // namespace orbit::serve
