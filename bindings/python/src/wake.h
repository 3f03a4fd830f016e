// Waking a waiting thread when a stop is asked for: StopFlag (set once by a cancel or a close, read without
// a lock) and StreamRoom (orbit._orbit._StreamRoom, wake.cpp), the gate a Window.stream's decode waits at for
// its reader, which every StopFlag it watches wakes at once.
//
//   CancelToken::cancel()  ──┐
//   Window.close()         ──┼─ StopFlag::set() ──> StreamRoom::wake() ──> take() returns (stopped)
//   Engine.close()         ──┘
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "initialized.h"
#include "stream_readers.h"

namespace orbit_py {

namespace py = pybind11;

// Something a StopFlag wakes when it is set. wake() is called from the setter's thread (any thread, GIL or
// not), must not block for long, and must not take the GIL.
struct Waiter {
  virtual ~Waiter() = default;
  virtual void wake() = 0;
};

// A flag set once and never cleared, with the waiters to wake then. is_set() reads an atomic only (no lock,
// no GIL): a decode's per-token check. Thread-safe throughout.
class StopFlag {
 public:
  bool is_set() const { return flag_.load(std::memory_order_acquire); }
  // Sets the flag, then wakes every waiter watching it that is still alive. Idempotent.
  void set();
  // Wakes `w` when the flag is set; at once when it is set already, so no set() is missed however the two
  // race. Held weakly: a waiter gone is dropped (at the next watch()).
  void watch(const std::shared_ptr<Waiter>& w) const;

 private:
  std::atomic<bool> flag_{false};
  mutable std::mutex mu_;  // guards waiters_
  mutable std::vector<std::weak_ptr<Waiter>> waiters_;
};

// A counting gate between a decode (take(), on its thread) and its reader (give()): the decode may run
// `ahead` pieces ahead of the reader. A StopFlag it watches (its CancelToken and that token's ancestors, its
// window's close, its engine's close) stops it: every take() then returns at once. Thread-safe.
class StreamRoom : public Waiter {
 public:
  // readers: the window's (stream_readers.h), where hold_reader() registers the stream's reader.
  StreamRoom(int64_t ahead, std::shared_ptr<StreamReaders> readers) : free_(ahead), readers_(std::move(readers)) {}
  ~StreamRoom() override { release_reader(); }
  // Takes one unit of room (true), or returns true without taking when stopped, or false once timeout_s
  // passed with neither (the reader took nothing meanwhile). Blocks the calling thread: call it without the
  // GIL.
  bool take(double timeout_s);
  // Gives back n units (the reader took n pieces).
  void give(int64_t n);
  void wake() override;  // stops the room
  bool stopped() const;
  // Registers the calling thread as the stream's reader (the thread running the loop's body: for an
  // orbit.aio stream the event loop's, which every task shares, from the decode's start) until
  // release_reader(): the window's calls made on it then raise at once (PyWindow::run). Throws OrbitError,
  // registering nothing, when that thread reads another stream on the window already (its decode would wait
  // for the outer one, which waits for this loop), or when called twice. Not thread-safe with itself.
  void hold_reader();
  // Undoes hold_reader() (the loop ended and its decode returned); idempotent, from any thread.
  void release_reader();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t free_;
  bool stopped_ = false;
  std::shared_ptr<StreamReaders> readers_;
  std::thread::id reader_;  // set by hold_reader()
  bool holding_ = false;    // guarded by mu_
};

}  // namespace orbit_py

ORBIT_PY_INITIALIZED_SHARED_CASTER(orbit_py::StreamRoom)
