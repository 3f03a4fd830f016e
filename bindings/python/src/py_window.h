// The Python-side holder of an orbit::Window (shared by engine.cpp, which makes windows, and window.cpp).
//
// orbit::Window is single-threaded and move-only. Python may call one window from several threads, and the
// GIL is released around every call into it, so each holder serializes its calls with a mutex: run()
// releases the GIL first, then takes the mutex (never the other way round: no GIL/mutex deadlock). close()
// destroys the window early (its pages return to the pool); later calls raise OrbitError. close() first sets
// `closing`, read without the GIL or the mutex: a decode running on the window stops at its next token
// (stop_reason "cancelled", cancel.h) so close() waits for that token, not for the whole answer, a stream
// waiting for its reader is woken (wake.h), and Window.closed reads it without racing close(). Engine.close()
// stops the decodes of every window of the engine the same way, and waits for them, through `decodes`
// (decodes.h), before the engine closes. A call made on the thread that is inside a call of the same
// window (generate's on_text using its window, orbit.generate_many included) raises OrbitError instead of
// waiting for itself. So does a call made in the body of a Window.stream loop on the same window (the thread
// reading the stream, `stream_readers`), while the stream's decode runs: that decode holds the window and waits
// for the loop, so the call would wait for the whole answer. close() is the exception: it stops the decode.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bindings.h"
#include "cancel.h"
#include "decodes.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "orbit/interrupt.h"
#include "stream_readers.h"
#include "wake.h"

namespace orbit_py {

namespace py = pybind11;

// Whether the calling thread is inside a call (run() or close()) of a window of `engine`: Engine.close()
// there would wait for itself.
bool in_window_call(const orbit::Engine* engine);

// Locks `m`, waiting for its holder in slices of kLockSlice: after each slice that did not get it, `stop()`
// is asked, and the wait ends with the lock not taken when it answers true (it may also throw to end it). A
// free lock is taken at once, without asking. The slices let a call waiting for another thread's call take its
// cancel token, a signal (Ctrl-C) or the window's close while it waits.
inline constexpr std::chrono::milliseconds kLockSlice{20};
template <typename Stop>
std::unique_lock<std::timed_mutex> lock_unless(std::timed_mutex& m, Stop&& stop) {
  std::unique_lock<std::timed_mutex> lock(m, std::defer_lock);
  if (lock.try_lock()) return lock;
  while (!lock.try_lock_for(kLockSlice)) {
    if (stop()) break;
  }
  return lock;
}

struct PyWindow {
  PyWindow(std::shared_ptr<orbit::Engine> e, orbit::Window w)
      : engine(std::move(e)), window(std::move(w)), decodes(engine_decodes(engine)) {
    id = window->id();
  }

  std::shared_ptr<orbit::Engine> engine;  // for resolving chunk keys and Window.engine
  std::optional<orbit::Window> window;    // empty after close()
  uint64_t id = 0;
  std::unique_ptr<std::timed_mutex> mutex = std::make_unique<std::timed_mutex>();
  std::atomic<std::thread::id> holder{};   // the thread inside run() or close(), if any
  StopFlag closing;                        // close() was called: set before it waits for the mutex, never cleared
  std::shared_ptr<EngineDecodes> decodes;  // the engine's (null: its close stops nothing first)
  // The threads reading a Window.stream on this window whose decode runs (registered by its _StreamRoom).
  std::shared_ptr<StreamReaders> stream_readers = std::make_shared<StreamReaders>();

  // Runs f(orbit::Window&) with the GIL released and the window locked. f must not touch Python objects
  // (a callback it calls takes the GIL itself). `what` names the call in errors ("Window.add_turn"), the
  // window's and its engine's closing too ("Window.sync: window 3 is closed", "Window.sync: engine is closed").
  // On Python's main thread the call also delivers pending signals at its interruption points
  // (orbit/interrupt.h; SignalPoll, cancel.h): a handler that raises (Ctrl-C's KeyboardInterrupt) stops the
  // call there, the window left as before the plan being applied, and the call raises the handler's exception.
  // While another thread's call holds the window, the wait takes signals the same way, and ends with
  // OrbitError once the window is closed (lock_for_call).
  template <typename F>
  auto run(const char* what, F&& f) -> decltype(f(std::declval<orbit::Window&>())) {
    using Result = decltype(f(std::declval<orbit::Window&>()));
    return run_unless(what, nullptr, std::forward<F>(f), []() -> Result {
      throw std::logic_error("PyWindow::run: gave up waiting without a give_up check");
    });
  }

  // run() for a read of the window's own fields (its options, policy, version), which the core answers
  // without asking its engine: refused as every other call is once the engine's close() has begun.
  template <typename F>
  auto run_fields(const char* what, F&& f) -> decltype(f(std::declval<orbit::Window&>())) {
    check_engine_open(what);
    return run(what, std::forward<F>(f));
  }

  // run(), except that a wait for another thread's call gives up once give_up() holds (a cancel= token was
  // cancelled meanwhile): the call then returns gave_up() (without the GIL) instead of running f.
  template <typename F, typename G>
  auto run_unless(const char* what, const std::function<bool()>& give_up, F&& f, G&& gave_up)
      -> decltype(f(std::declval<orbit::Window&>())) {
    check_not_held(what);
    check_not_streamed(what);
    SignalPoll signals = SignalPoll::main_thread_only();  // a short call never takes the GIL to ask
    try {
      const NativeCall release;
      std::unique_lock<std::timed_mutex> lock = lock_for_call(what, signals, give_up);
      if (!lock.owns_lock()) return gave_up();
      const Hold hold(*this);
      check_open(what);
      const orbit::InterruptScope interrupt([&signals] { return signals.raised(); });
      return f(*window);
    } catch (const orbit::Interrupted&) {
      signals.rethrow();  // the GIL is held again here
      throw;
    } catch (const orbit::Error& e) {
      if (!refused_for_engine(e.what())) throw;
      throw orbit::Error(std::string(what) + ": " + e.what(), __FILE__, __LINE__);
    }
  }

  // Without the GIL: the window's lock for a call named `what`, waited for in slices (lock_unless) while
  // another thread's call holds it. Between slices: OrbitError "<what>: window N is closed" once close() was
  // called, orbit::Interrupted once a signal handler raised (`signals`), and an unlocked lock once give_up
  // (when not null) answers true.
  std::unique_lock<std::timed_mutex> lock_for_call(const char* what, SignalPoll& signals,
                                                   const std::function<bool()>& give_up) {
    return lock_unless(*mutex, [&] {
      check_open(what);
      if (signals.raised()) throw orbit::Interrupted(what);
      return give_up && give_up();
    });
  }

  // Sets `closing` (a decode on the window stops at its next token), waits for the call in progress, then
  // destroys the window.
  void close() {
    check_not_held("Window.close");
    closing.set();
    const NativeCall release;
    const std::lock_guard<std::timed_mutex> lock(*mutex);
    const Hold hold(*this);
    window.reset();  // returns its pages to the pool
  }

  // Throws OrbitError once close() was called (the window may still be finishing a call), naming the call
  // `what` ("Window.sync: window 3 is closed"). Needs no lock: it reads `closing` only (the window is reset
  // after it is set, and never before).
  void check_open(const char* what) const { ORBIT_CHECK(!closing.is_set(), what << ": window " << id << " is closed"); }

  // Throws OrbitError "<what>: engine is closed" once the engine's close() has begun (in a child of fork(), what
  // the engine says there): for a call that asks its engine before run() (generate's arguments are read against
  // its tokenizer).
  void check_engine_open(const char* what) const {
    if (engine->closed() || engine->forked()) naming_closed(what, [this] { (void)engine->options(); });
  }

  // Throws OrbitError when the calling thread is inside a call of this window (its mutex is taken by this
  // thread: locking it again would wait forever). run() and close() check it; so must code that locks `mutex`
  // itself (generate_many), before it does.
  void check_not_held(const char* what) const {
    ORBIT_CHECK(holder.load() != std::this_thread::get_id(),
                what << ": window " << id
                     << " is in a call on this thread already (generate's on_text must not use its window)");
  }

  // Throws OrbitError when the calling thread runs the body of a Window.stream loop on this window whose
  // decode has not ended, or is the event loop reading an orbit.aio stream of it whose decode runs: the decode holds
  // the window's lock and waits for the loop, so waiting for the lock here would stall the loop for the whole answer.
  // run() checks it; so must code that locks `mutex` itself.
  void check_not_streamed(const char* what) const {
    ORBIT_CHECK(!stream_readers->reads(std::this_thread::get_id()),
                what << ": window " << id
                     << " is streaming to this thread (called inside its Window.stream loop, or on the event "
                        "loop that reads its AsyncWindow.stream): the stream's decode holds the window until the "
                        "stream ends; call "
                     << what
                     << " after the loop (break out of it first to stop the decode), or close() the "
                        "window to stop it");
  }

  // Marks the calling thread as the holder for a scope, and as inside a call of the window's engine. Taken
  // with the window's mutex locked (run(), close(), and generate_many for each window it locks): Python code
  // run meanwhile on this thread (a callback, a signal handler) then gets OrbitError from a call on the
  // window instead of waiting for the lock it holds.
  struct Hold {
    explicit Hold(PyWindow& w) : held(w.holder) {
      held = std::this_thread::get_id();
      engines_called().push_back(w.engine.get());
    }
    ~Hold() {
      engines_called().pop_back();
      held = std::thread::id();
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    std::atomic<std::thread::id>& held;
  };

 private:
  // The engines whose windows the calling thread is inside a call of, innermost last (calls nest: on_text
  // may use another window).
  static std::vector<const orbit::Engine*>& engines_called() {
    thread_local std::vector<const orbit::Engine*> engines;
    return engines;
  }
  friend bool in_window_call(const orbit::Engine* engine);
};

// A chunk argument: a ChunkRef, or a key (str) of a chunk `engine` knows (engine.cpp).
orbit::ChunkRef resolve_chunk(orbit::Engine& engine, py::handle obj, const char* what);
// A policy argument: a WindowPolicy or a spec string (engine.cpp).
orbit::WindowPolicy to_policy(py::handle obj, const char* what);

// Makes the Python holder for a window of `engine` (window.cpp).
py::object wrap_window(std::shared_ptr<orbit::Engine> engine, orbit::Window window);
// Defines Window.generate and Window.generate_n on the class (window_generate.cpp).
void def_window_generate(py::class_<PyWindow>& c);

}  // namespace orbit_py
