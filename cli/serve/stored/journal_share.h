// What the servers sharing one store (store_share.h) must agree on before one of them deletes a row that
// another's journal of held answers needs (held_journal.h): the Responses store's held response names, in its
// journal record, the row on disk its chain continues, and a start rebuilding it after a crash reads that row.
// Its own server keeps the row (HeldJournal::names); any other server consults the journals themselves:
//
//   lock         `STORE.held.lock` (STORE the database's path), flock'ed by one server at a time, and by one
//                thread of it at a time (a mutex): taken by a hold whose record names a row (from the disk
//                lookup that finds the row to the record's sync), by a start adopting journals (from reading
//                them to removing them), and by a deletion of rows (from the first row it would delete to its
//                transaction's commit).
//   names        under the lock: the ids the live records of the store's other journals name (running servers'
//                and those of servers gone, not yet adopted), brought up to date once per lock: no record
//                naming a row can be added while it is held, and one released meanwhile only keeps a row one
//                deletion longer (its server's next collection of unnamed rows deletes it). Kept between
//                locks (journal_cache.h): a check stats the directory and each journal, and lists or reads
//                again only what changed.
//
// So a deletion either sees the record (and keeps the row, unnamed) or comes before its disk lookup (which
// then finds no row and the record carries that link itself). Nothing is written to the database: a hold is
// made when the store refuses writes, and a lock or a read needs none. A crash releases the flock; a journal
// whose server is gone is read as any other. A journal that cannot be read, or is not of this format, keeps
// every row (the deletion skips them all) rather than guess, and is reported once (journal_cache.h).
//
// Thread-safety: every member may be called from any thread; lock() blocks until no other thread or server
// holds it.
#pragma once

#include <mutex>
#include <string>
#include <thread>

#include "serve/stored/held_journal.h"
#include "serve/stored/journal_cache.h"

namespace orbit::serve {

class JournalShare {
 public:
  // Opens (creating when missing) the lock file of the store at `store_path`. Never throws: a file that
  // cannot be opened is reported by error(), and lock() then fails. `link_of` reads a record's link (LinkOf).
  JournalShare(const std::string& store_path, LinkOf link_of);
  ~JournalShare();
  JournalShare(const JournalShare&) = delete;
  JournalShare& operator=(const JournalShare&) = delete;

  const std::string& error() const { return error_; }
  // Takes the lock for the calling thread (waiting for the other threads and servers): "" or why.
  std::string lock();
  // Lets it go, if the calling thread holds it (else nothing).
  void unlock();
  bool held() const;  // by the calling thread
  // Whether a live record of a journal of the store other than `own` (a path; "" none) names `id` as its
  // link, or some journal could not be read (every row is kept then). Takes the lock when the calling thread
  // does not hold it (held until unlock()); a lock that fails keeps every row too. The journals are brought up
  // to date once per lock (the first call), reading only those that changed since the last lock.
  bool named_elsewhere(const std::string& id, const std::string& own);

 private:
  const std::string lock_path_;
  std::string error_;
  int fd_ = -1;
  std::mutex mutex_;                // one thread of this process holds the lock at a time
  mutable std::mutex owner_mutex_;  // guards owner_
  std::thread::id owner_;           // the thread holding the lock (none: default)
  JournalCache cache_;              // read and used by the lock's holder only
  bool fresh_ = false;              // cache_ brought up to date under the lock held now
  std::string own_;                 // the journal it left out then
};

// Holds nothing or `share`'s lock, taken by the calling thread meanwhile, until it ends.
class JournalShareScope {
 public:
  explicit JournalShareScope(JournalShare* share) : share_(share) {}
  ~JournalShareScope() {
    if (share_ != nullptr) share_->unlock();
  }
  JournalShareScope(const JournalShareScope&) = delete;
  JournalShareScope& operator=(const JournalShareScope&) = delete;

 private:
  JournalShare* share_;
};

}  // namespace orbit::serve
