// EngineLife: an engine's lifetime (EngineCore, engine_core.h): the operations in flight, close(), and the
// windows open on it.
//
// Every public Engine and Window operation holds an OpHold for its whole duration. close() marks the engine
// closed (new holds throw "engine is closed"), waits until the holds in flight are released, then shuts the
// engine's parts down. The store is therefore never destroyed under an operation, and an operation that
// starts after close() fails cleanly instead of touching it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

namespace orbit::detail {

class EngineLife {
 public:
  EngineLife();
  EngineLife(const EngineLife&) = delete;
  EngineLife& operator=(const EngineLife&) = delete;

  // Throws orbit::Error "engine is closed" once close() has begun (but on a thread inside an operation that
  // began before: close() waits for it to end), and, in a process forked from the one that
  // opened the engine, an orbit::Error naming both processes (see forked()).
  void check_open() const;
  // The calling process is not the one that opened the engine: a child of fork(). The engine's threads (the
  // background worker, the store's writers) and its store's connections belong to the parent; a lock one of
  // its threads held at the fork stays held in the child. So nothing of it is used or shut down there.
  bool forked() const;
  bool closed() const { return closed_.load(); }
  // True when the calling thread holds an OpHold on this engine.
  bool held_by_this_thread() const;

  // Closes once the operations in flight have finished (blocks until then; returns at once when already
  // closed; a second concurrent close waits for the first, from the moment the first began, its `finish` too). `finish`
  // runs first, on this thread, while operations are still accepted (the queued background work the store exists to
  // keep); `shut_down` runs once no operation is in flight (stop the workers, flush and destroy the store). Throws
  // orbit::Error when called from inside an operation of this engine on the same thread (it would wait for itself).
  void close(const std::function<void()>& finish, const std::function<void()>& shut_down);

  void window_opened() { ++windows_; }
  void window_closed() { --windows_; }
  int64_t windows() const { return windows_.load(); }

 private:
  friend class OpHold;
  void enter() const;  // an OpHold begins
  void leave() const;  // ... and ends

  const int64_t pid_;  // the process that opened the engine
  std::atomic<bool> closed_{false};
  std::atomic<int64_t> windows_{0};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int64_t holds_ = 0;
  bool closing_ = false;    // a close() has begun (its `finish` may still run): a second one waits for it
  bool shut_down_ = false;  // close() has finished
};

class EngineCore;

// An operation's hold on an engine (see above). Holds nest on one thread. Throws orbit::Error "engine is
// closed" when close() has begun, unless nested in a hold of this thread (an operation in flight, which
// close() waits for, runs to its end). Never blocks: close() is the only waiter.
class OpHold {
 public:
  explicit OpHold(const EngineCore& core);
  ~OpHold();
  OpHold(const OpHold&) = delete;
  OpHold& operator=(const OpHold&) = delete;

 private:
  const EngineLife& life_;
};

}  // namespace orbit::detail
