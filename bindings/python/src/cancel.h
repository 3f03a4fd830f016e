// orbit.CancelToken (cancel.cpp) and how a decode reads it: generate(), generate_n() and generate_many() take
// cancel=, and the decode's GenerateOptions::on_token returns false once a token it watches is cancelled, its
// window is being closed (PyWindow::closing) or its engine is (Engine.close(): EngineDecodes::closing). The
// check reads atomics only: no GIL, no lock. On Python's main thread the decode also delivers pending signals
// (SignalPoll): Ctrl-C stops it at its next token instead of after the whole answer.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "orbit/window.h"
#include "wake.h"

namespace orbit_py {

namespace py = pybind11;

// A cancellation flag shared by Python and the decodes given it. cancel() may be called from any thread, any
// number of times; once set it stays set, and it wakes the streams waiting on it (a StreamRoom watches its
// token's flag and every ancestor's, wake.h). A child token (parent given) reads as cancelled when it or any of
// its ancestors was cancelled; cancelling it leaves its parent alone.
struct CancelToken {
  StopFlag flag;
  std::shared_ptr<const CancelToken> parent;  // null: none

  void cancel() { flag.set(); }
  bool cancelled() const {
    for (const CancelToken* t = this; t != nullptr; t = t->parent.get()) {
      if (t->flag.is_set()) return true;
    }
    return false;
  }
};

// Signals delivered during a call that runs without the GIL on Python's main thread: a decode (at each token)
// or a window operation (PyWindow::run: at each interruption point, orbit/interrupt.h). Python runs a signal's
// handler (SIGINT's raises KeyboardInterrupt) only when the main thread runs Python code, so such a call would
// otherwise take Ctrl-C only after its whole work (generate_n: after every branch; sync: after every message).
// raised() takes the GIL and calls PyErr_CheckSignals at most every interval() (kInterval unless
// orbit.set_signal_interval changed it); a handler that raises ends the call, its exception kept for rethrow()
// once the call has stopped. A handler that does not raise runs during the call, which goes on. Not
// thread-safe: every raised() of one SignalPoll is on the call's thread.
class SignalPoll {
 public:
  static constexpr std::chrono::milliseconds kInterval{100};
  // The least time between two polls of one call (and from its start to its first poll); any thread.
  static std::chrono::nanoseconds interval();
  static void set_interval(std::chrono::nanoseconds interval);

  // A poll for a call that may run on any thread: its first due raised() finds (under the GIL) whether the
  // call runs on Python's main thread, and polls only there. A call shorter than interval() never asks.
  static SignalPoll main_thread_only() {
    SignalPoll p;
    p.check_thread_ = true;
    return p;
  }

  // Without the GIL, on the call's thread: true once a handler raised (then at every later call too).
  bool raised();
  // Holding the GIL: raises the handler's exception, if one raised (once).
  void rethrow();

 private:
  std::chrono::steady_clock::time_point next_ = std::chrono::steady_clock::now() + interval();
  std::exception_ptr error_;
  bool check_thread_ = false;  // main_thread_only: the thread is not checked yet
  bool off_ = false;           // main_thread_only on another thread: never polls
};

// Holding the GIL: a SignalPoll when the calling thread is Python's main thread (where handlers run), else
// null (a decode on another thread leaves signals to the main thread).
std::shared_ptr<SignalPoll> main_thread_signal_poll();

// What one decode stops for: any of its tokens cancelled, its window being closed or its engine being closed
// (nullptr: not watched), or a signal handler raising (`signals`, null: not polled). The flags outlive the
// decode (its PyWindow holds them).
struct CancelWatch {
  std::vector<std::shared_ptr<const CancelToken>> tokens;
  const StopFlag* closing = nullptr;
  const StopFlag* engine_closing = nullptr;
  std::shared_ptr<SignalPoll> signals;

  // The tokens and flags only (no GIL needed; `signals` is polled by the decode alone).
  bool requested() const;
  // Sets options.on_token to return false (the run ends "cancelled") once requested() holds or a signal
  // handler raised; a watch with nothing to watch leaves the options as they are.
  void arm(orbit::GenerateOptions& options) const;
};

// A cancel= argument: None (null) or an orbit.CancelToken; anything else raises TypeError naming `what`.
std::shared_ptr<const CancelToken> to_cancel_token(const py::handle& obj, const std::string& what);

// The Generation of a run cancelled before it started: no tokens, text "", stop_reason "cancelled".
orbit::Generation cancelled_generation();

}  // namespace orbit_py

ORBIT_PY_INITIALIZED_SHARED_CASTER(orbit_py::CancelToken)
