// orbit.CancelToken: a flag another thread sets to stop a decode at its next token (cancel.h).
#include "cancel.h"

#include <atomic>
#include <cmath>
#include <string>
#include <utility>

#include "bindings.h"
#include "convert.h"

namespace orbit_py {

bool CancelWatch::requested() const {
  if (closing != nullptr && closing->is_set()) return true;
  if (engine_closing != nullptr && engine_closing->is_set()) return true;
  for (const auto& t : tokens) {
    if (t->cancelled()) return true;
  }
  return false;
}

void CancelWatch::arm(orbit::GenerateOptions& options) const {
  if (tokens.empty() && closing == nullptr && engine_closing == nullptr && signals == nullptr) return;
  // A copy per decode (generate_n copies the options per branch: the copies share the tokens and the poll).
  // Called on the decode's thread without the GIL: it reads atomics, and takes the GIL to poll for signals
  // at most every SignalPoll::kInterval.
  options.on_token = [watch = *this](int64_t, int64_t) {
    return !watch.requested() && (watch.signals == nullptr || !watch.signals->raised());
  };
}

namespace {
std::atomic<int64_t> poll_interval_ns{std::chrono::nanoseconds(SignalPoll::kInterval).count()};
}  // namespace

std::chrono::nanoseconds SignalPoll::interval() { return std::chrono::nanoseconds(poll_interval_ns.load()); }

void SignalPoll::set_interval(std::chrono::nanoseconds interval) { poll_interval_ns.store(interval.count()); }

namespace {
// Holding the GIL: whether the calling thread is Python's main thread (where signal handlers run).
bool on_main_thread() {
  const py::object ident = py::module_::import("threading").attr("main_thread")().attr("ident");
  return !ident.is_none() && ident.cast<unsigned long>() == PyThread_get_thread_ident();
}
}  // namespace

bool SignalPoll::raised() {
  if (error_) return true;
  if (off_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) return false;
  next_ = now + interval();
  py::gil_scoped_acquire gil;
  if (check_thread_) {
    check_thread_ = false;
    off_ = !on_main_thread();
    if (off_) return false;
  }
  if (PyErr_CheckSignals() == 0) return false;
  error_ = std::make_exception_ptr(py::error_already_set());
  return true;
}

void SignalPoll::rethrow() {
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

std::shared_ptr<SignalPoll> main_thread_signal_poll() {
  return on_main_thread() ? std::make_shared<SignalPoll>() : nullptr;
}

std::shared_ptr<const CancelToken> to_cancel_token(const py::handle& obj, const std::string& what) {
  if (obj.is_none()) return nullptr;
  if (!py::isinstance<CancelToken>(obj)) {
    throw py::type_error(what + " must be an orbit.CancelToken or None, got " + type_name(obj));
  }
  return obj.cast<std::shared_ptr<CancelToken>>();
}

orbit::Generation cancelled_generation() {
  orbit::Generation g;
  g.stop_reason = "cancelled";
  return g;
}

void init_cancel(py::module_& m) {
  m.def(
      "set_signal_interval",
      [](const FloatArg& seconds_arg) {
        const double seconds = seconds_arg.get("set_signal_interval: seconds");
        if (!std::isfinite(seconds) || seconds < 0 || seconds > 3600) {
          throw py::value_error("set_signal_interval: seconds = " + py::repr(seconds_arg.value).cast<std::string>() +
                                " must be in [0, 3600]");
        }
        const double previous = std::chrono::duration<double>(SignalPoll::interval()).count();
        SignalPoll::set_interval(std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9)));
        return previous;
      },
      py::arg("seconds"),
      "How often a long call on Python's main thread (a decode, a window operation such as sync, add_turn,\n"
      "logits or idle, Engine.run_background) takes the GIL to run pending signal handlers, so Ctrl-C stops it:\n"
      "at most every `seconds` (default 0.1; 0: at every token or interruption point). Returns the previous\n"
      "value.");
  py::class_<CancelToken, std::shared_ptr<CancelToken>>(
      m, "CancelToken",
      "Stops a decode from any thread: pass it as cancel= to Window.generate, Window.generate_n or\n"
      "orbit.generate_many, and call cancel() (from another thread, a signal handler, a callback): the decode\n"
      "ends at its next token with stop_reason 'cancelled', the Generation holding every token so far. The\n"
      "decode reads the flag without the GIL. A call given a token already cancelled returns a cancelled\n"
      "Generation at once (no tokens, nothing forwarded). A token stays cancelled; one token may serve many\n"
      "calls. CancelToken(parent) reads as cancelled when it or its parent (at any depth) was cancelled;\n"
      "cancelling it leaves the parent alone.")
      .def(py::init([](const py::object& parent) {
             auto t = std::make_shared<CancelToken>();
             t->parent = to_cancel_token(parent, "CancelToken: parent");
             return t;
           }),
           py::arg("parent") = py::none(), "A token not cancelled, child of `parent` (a CancelToken or None).")
      .def("cancel", &CancelToken::cancel,
           "Cancels: decodes given this token (or a child of it) stop at their next token. Any thread; idempotent.")
      .def_property_readonly("cancelled", &CancelToken::cancelled,
                             "True once cancel() was called on it or on an ancestor.")
      .def("__repr__", [](const CancelToken& t) {
        return std::string("CancelToken(cancelled=") + (t.cancelled() ? "True" : "False") + ")";
      });
}

}  // namespace orbit_py
