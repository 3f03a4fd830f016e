#include "engine/engine_life.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <iterator>
#include <vector>

#include "engine/engine_core.h"
#include "orbit/common/error.h"

namespace orbit::detail {

namespace {
// The engines the calling thread holds an OpHold on, innermost last (holds nest: a Window operation
// calls Engine internals that hold again).
thread_local std::vector<const EngineLife*> t_holds;

// This process's id, kept here and refreshed in a fork's child (pthread_atfork): every engine call checks it, and
// getpid() is a system call each time (thousands per request where a sync keys every unit of a long list).
std::atomic<int64_t> g_pid{-1};

void refresh_pid() { g_pid.store(static_cast<int64_t>(::getpid()), std::memory_order_relaxed); }

int64_t current_pid() {
  static const bool registered = [] {
    refresh_pid();
    return ::pthread_atfork(nullptr, nullptr, refresh_pid) == 0;
  }();
  // Without the handler (registration refused) every check asks the system.
  return registered ? g_pid.load(std::memory_order_relaxed) : static_cast<int64_t>(::getpid());
}
}  // namespace

EngineLife::EngineLife() : pid_(current_pid()) {}

bool EngineLife::forked() const { return current_pid() != pid_; }

void EngineLife::check_open() const {
  ORBIT_CHECK(!forked(), "engine was opened in process " << pid_ << " and this process (" << ::getpid()
                                                         << ") is a fork of it: an engine does not cross fork() "
                                                            "(its threads and store connections stay in the "
                                                            "parent); open a new Engine in this process");
  // An operation that began before close() runs to its end (close() waits for it): what it calls on the
  // engine from its own thread is still served.
  ORBIT_CHECK(!closed_.load() || held_by_this_thread(), "engine is closed");
}

bool EngineLife::held_by_this_thread() const {
  return std::find(t_holds.begin(), t_holds.end(), this) != t_holds.end();
}

void EngineLife::enter() const {
  check_open();  // before the lock: a fork's copy of it may be held by a thread of the parent
  std::lock_guard<std::mutex> lock(mu_);
  ORBIT_CHECK(!closed_.load() || held_by_this_thread(), "engine is closed");  // a hold nested in one in flight
  ++holds_;
  t_holds.push_back(this);
}

void EngineLife::leave() const {
  for (auto it = t_holds.rbegin(); it != t_holds.rend(); ++it) {
    if (*it == this) {
      t_holds.erase(std::next(it).base());
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (--holds_ == 0) cv_.notify_all();
}

void EngineLife::close(const std::function<void()>& finish, const std::function<void()>& shut_down) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool inside = held_by_this_thread();
  if (closing_) {
    // Another close() is finishing or draining; wait for it (unless this thread's own hold is what it waits for).
    // Its finish is not cut short by this one's: the first close's bounds hold.
    if (!inside) cv_.wait(lock, [&] { return shut_down_; });
    return;
  }
  ORBIT_CHECK(!inside,
              "close(): called from inside an operation of this engine on the same thread; close the "
              "engine after that operation returns");
  closing_ = true;
  lock.unlock();
  std::exception_ptr failed;  // the engine is closed all the same: a later close() would only wait
  try {
    finish();
  } catch (...) {
    failed = std::current_exception();
  }
  lock.lock();
  closed_.store(true);
  cv_.wait(lock, [&] { return holds_ == 0; });
  lock.unlock();
  shut_down();
  lock.lock();
  shut_down_ = true;
  cv_.notify_all();
  lock.unlock();
  if (failed) std::rethrow_exception(failed);
}

OpHold::OpHold(const EngineCore& core) : life_(core.life()) { life_.enter(); }

OpHold::~OpHold() { life_.leave(); }

}  // namespace orbit::detail
