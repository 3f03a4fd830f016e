// orbit.OrbitWarning: the store's and the SDK's warnings (orbit/common/warn.h) issued through Python's
// warnings module, so they can be filtered, turned into errors and caught with pytest.warns.
//
// The sink may be called on any thread, the store's workers included, and those may hold a store lock the
// Python thread is waiting for while it holds the GIL: so the sink never takes the GIL. It queues the
// message and asks for a delivery on the main thread (Py_AddPendingCall, callable without the GIL), which
// issues the queued messages with warnings.warn; a filter that makes one an error there is reported with
// PyErr_WriteUnraisable (sys.unraisablehook), not raised at an arbitrary point of the program. A binding
// call that can warn on the calling thread (Engine(...), close()) delivers the queue itself before it
// returns (flush_warnings), so those warnings are raised by that call. At exit (atexit) the sink is
// uninstalled and what is still queued delivered: later warnings (an engine collected while the interpreter
// finalizes) go to stderr as they do without Python.
#include <Python.h>

#include <deque>
#include <mutex>
#include <string>

#include "bindings.h"
#include "convert.h"
#include "orbit/common/warn.h"

namespace orbit_py {

namespace {

PyObject* g_orbit_warning = nullptr;  // never released: pending deliveries may run late in finalization

struct WarningQueue {
  std::mutex mu;
  std::deque<std::string> messages;
  bool scheduled = false;  // a pending call is registered and has not started yet
};

WarningQueue& warning_queue() {
  static WarningQueue* q = new WarningQueue;  // never destroyed: worker threads may warn at exit
  return *q;
}

int deliver_pending(void*);

// The sink: queue, and register one pending call for however many messages arrive before it runs. Without
// the GIL. A full pending-call table leaves the message queued: the next warning, or the next binding call
// that flushes, delivers it.
void queue_warning(std::string message) {
  WarningQueue& q = warning_queue();
  std::lock_guard<std::mutex> lock(q.mu);
  q.messages.push_back(std::move(message));
  if (!q.scheduled && Py_AddPendingCall(deliver_pending, nullptr) == 0) q.scheduled = true;
}

bool pop_warning(std::string& message) {
  WarningQueue& q = warning_queue();
  std::lock_guard<std::mutex> lock(q.mu);
  if (q.messages.empty()) return false;
  message = std::move(q.messages.front());
  q.messages.pop_front();
  return true;
}

// Issues one message as an OrbitWarning; throws py::error_already_set when a filter makes it an error.
void issue(const std::string& message) {
  py::module_::import("warnings").attr("warn")(utf8_text(message), py::handle(g_orbit_warning), 1);
}

// The pending call, on the main thread with the GIL: every queued message; errors are unraisable here.
int deliver_pending(void*) {
  {
    WarningQueue& q = warning_queue();
    std::lock_guard<std::mutex> lock(q.mu);
    q.scheduled = false;
  }
  std::string message;
  while (pop_warning(message)) {
    try {
      issue(message);
    } catch (py::error_already_set& e) {
      e.restore();
      PyErr_WriteUnraisable(g_orbit_warning);
    } catch (const std::exception&) {  // e.g. the warnings module could not be imported
      PyErr_Clear();
    }
  }
  return 0;
}

// At exit, while Python still runs: back to stderr, then what is queued.
void uninstall_sink() {
  orbit::set_warning_sink(nullptr);
  deliver_pending(nullptr);
}

}  // namespace

void flush_warnings() {
  std::string message;
  while (pop_warning(message)) issue(message);
}

void init_warnings(py::module_& m) {
  static py::exception<OrbitWarningTag> orbit_warning(m, "OrbitWarning", PyExc_UserWarning);
  orbit_warning.doc() =
      "A warning from orbit's store or SDK (docs/ARCHITECTURE.md §8): a disk write that failed (entries kept in\n"
      "memory, stats().store.disk_degraded), an engine closed with entries that never reached the disk, a blob\n"
      "found corrupt (recomputed when needed), a remote tier that went down or has no secret. The message is the\n"
      "one the CLI prints after 'orbit: warning: '. Issued through the warnings module: filter it, catch it with\n"
      "pytest.warns, or make it an error. One raised during a call (Engine(...), close()) is issued before that\n"
      "call returns, and raised by it under an 'error' filter; one from the store's background work is issued on\n"
      "the main thread at its next bytecode, where an 'error' filter reports it through sys.unraisablehook.";
  g_orbit_warning = orbit_warning.ptr();
  Py_INCREF(g_orbit_warning);
  orbit::set_warning_sink(queue_warning);
  py::module_::import("atexit").attr("register")(py::cpp_function(uninstall_sink));
}

}  // namespace orbit_py
