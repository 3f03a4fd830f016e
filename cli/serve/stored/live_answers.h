// The answers with store true that are still running (a response or a chat completion between its prepare and
// its store), by id, so that the stored endpoints know an id before its answer lands in the store: GET of a
// response in progress returns it with status "in_progress", DELETE of one deletes it (its run goes on, but
// nothing is stored when it ends, so a later GET is a 404), and a request chaining onto one is told it is in
// progress, where without this registry they all answered as for an id never stored (and a DELETE was lost:
// the answer was stored afterwards all the same).
//
// A running answer's Hold (its request's) ends it: begin_store() before the answer goes to its store (false:
// deleted meanwhile, store nothing), end() once the store has it, or the run ended without storing (cancelled,
// failed), or the Hold is destroyed. While its store is under way (begun, not ended) running() and erase() wait
// for it to end, so that a GET or DELETE never falls between the registry and the store: the id is then in the
// store (or not, when the store's write failed), and the caller asks the store.
//
// T is what a running answer shows meanwhile (the Responses API's in-progress response), shared read-only.
//
// Thread-safety: every member may be called from any thread; a Hold is used by its request's thread.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace orbit::serve {

template <typename T>
class LiveAnswers {
 public:
  // A running answer's registration; moves, ends the answer when destroyed (end()).
  class Hold {
   public:
    Hold() = default;
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    Hold(Hold&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), id_(std::move(o.id_)) {}
    Hold& operator=(Hold&& o) noexcept {
      if (this != &o) {
        end();
        owner_ = std::exchange(o.owner_, nullptr);
        id_ = std::move(o.id_);
      }
      return *this;
    }
    ~Hold() { end(); }

    // The answer goes to its store now: false when it was deleted while it ran (then it is over: store nothing).
    // Without a registration (a Hold never begun), true.
    bool begin_store() { return owner_ == nullptr || owner_->begin_store(id_); }
    // The answer is over: stored, or ended without being stored. Idempotent.
    void end() {
      if (owner_ != nullptr) std::exchange(owner_, nullptr)->end(id_);
    }

   private:
    friend class LiveAnswers;
    Hold(LiveAnswers* owner, std::string id) : owner_(owner), id_(std::move(id)) {}
    LiveAnswers* owner_ = nullptr;
    std::string id_;
  };

  // Registers `id` as running, `shown` what running() returns for it meanwhile. An id is registered once (ids
  // are new for each request).
  Hold begin(const std::string& id, std::shared_ptr<const T> shown) {
    const std::lock_guard<std::mutex> lock(mutex_);
    answers_[id] = Answer{std::move(shown)};
    return Hold(this, id);
  }

  // Whether `id` is running (not deleted, its store not begun), and what it shows then. Waits while its store is
  // under way; false then, and for an id not running: the store knows the rest.
  std::pair<bool, std::shared_ptr<const T>> running(const std::string& id) {
    std::unique_lock<std::mutex> lock(mutex_);
    const Answer* a = settled(lock, id);
    if (a == nullptr) return {false, nullptr};
    return {true, a->shown};
  }

  // DELETE of `id`: a running answer is marked deleted (nothing is stored when its run ends): true. False for an
  // id not running (waiting while its store is under way): the caller erases it from the store.
  bool erase(const std::string& id) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (settled(lock, id) == nullptr) return false;
    answers_[id].deleted = true;
    return true;
  }

 private:
  struct Answer {
    std::shared_ptr<const T> shown;
    bool deleted = false;
    bool storing = false;
  };

  // Under the lock: the running answer `id` (waiting while its store is under way), or null when none is.
  const Answer* settled(std::unique_lock<std::mutex>& lock, const std::string& id) {
    auto it = answers_.find(id);
    while (it != answers_.end() && it->second.storing) {
      ended_.wait(lock);
      it = answers_.find(id);
    }
    if (it == answers_.end() || it->second.deleted) return nullptr;
    return &it->second;
  }

  bool begin_store(const std::string& id) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = answers_.find(id);
    if (it == answers_.end()) return true;
    if (it->second.deleted) {
      answers_.erase(it);
      ended_.notify_all();
      return false;
    }
    it->second.storing = true;
    return true;
  }

  void end(const std::string& id) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (answers_.erase(id) > 0) ended_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable ended_;
  std::map<std::string, Answer> answers_;
};

}  // namespace orbit::serve
