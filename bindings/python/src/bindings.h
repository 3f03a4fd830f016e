// The module's parts: one init_<area>() per file (docs/ARCHITECTURE.md §2), called in this order by module.cpp.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <optional>
#include <string>

#include "initialized.h"
#include "orbit/common/error.h"

namespace orbit_py {

namespace py = pybind11;

void init_errors(py::module_& m);     // module.cpp: OrbitError, CapacityError, RefusedError, translators,
                                      // RemoteUnreachableWarning (after init_warnings: an OrbitWarning)
void init_types(py::module_& m);      // types.cpp: enums, ChunkRef, plans, reports, stats, infos
void init_policy(py::module_& m);     // policy.cpp: WindowPolicy (Policy)
void init_engine(py::module_& m);     // engine.cpp: Engine
void init_window(py::module_& m);     // window.cpp: Window, InstanceKV
void init_sync(py::module_& m);       // sync.cpp: Window.sync, Engine.render_chat, SyncPlan, SyncReport
void init_sync_memo(py::module_& m);  // sync_memo.cpp: set_sync_memo_limits, sync_memo_limits, SyncMemoLimits
void init_store(py::module_& m);      // store.cpp: offline store inspection, content keys
void init_trace(py::module_& m);      // trace.cpp: orbit-trace/1 load, make, validate, save, replay
void init_yardstick(py::module_& m);  // yardstick.cpp: RadixCache, BlockPrefixCache (planner/prefix_cache.h)
void init_answer(py::module_& m);     // answer.cpp: parse_tool_calls, Engine.tool_call_format
void init_generate(py::module_& m);   // generate.cpp: generate_many (generate()'s arguments: generate_args.h)
void init_cancel(py::module_& m);     // cancel.cpp: CancelToken (generate's cancel=)
void init_wake(py::module_& m);       // wake.cpp: _StreamRoom (Window.stream's wait for its reader)
void init_warnings(py::module_& m);   // warnings.cpp: OrbitWarning, the sink issuing orbit::warn through Python

// Holds a call without the GIL, counted in native_calls() until the GIL is held again (engine.cpp). At exit, once
// the engines are closed (their calls then end), the interpreter waits, a bounded time, for that count to reach
// 0: a daemon thread that took the GIL back only once finalization had begun was ended inside this guard's
// destructor (std::terminate), which the wait leaves no time for. Every binding call that releases the GIL
// holds one (py::call_guard<NativeCall> where a call_guard does), but the at-exit close itself.
std::atomic<int>& native_calls();
class NativeCall {
 public:
  NativeCall() = default;
  NativeCall(const NativeCall&) = delete;
  NativeCall& operator=(const NativeCall&) = delete;

 private:
  struct Counted {
    Counted() { native_calls().fetch_add(1); }
    ~Counted() { native_calls().fetch_sub(1); }
  };
  // Members are made in this order and ended in the reverse: counted before the GIL is released, and until
  // it is held again.
  Counted counted_;
  py::gil_scoped_release release_;
};

// The C++ type registered as orbit.OrbitWarning (warnings.cpp); never thrown.
struct OrbitWarningTag {};

// Issues the orbit warnings queued so far as OrbitWarning, on this thread (warnings.cpp). Called at the end
// of the binding calls that can warn on their own thread, so those warnings come before the call returns.
// Needs the GIL; throws py::error_already_set when a warnings filter turns one into an error (the rest stay
// queued for the next delivery).
void flush_warnings();

// Whether an open Engine of this process, opened from Python, has a chunk with this key registered
// (engine.cpp): ChunkRef.valid. False for an empty key. Needs the GIL (released while the engines answer).
bool chunk_registered(const std::string& key);

// Raises CapacityError / RefusedError / OrbitError for a non-ok Status (module.cpp).
[[noreturn]] void raise_status(int code, const std::string& reason);

// Calls whose keywords fill a C++ options struct: an orbit::Error naming one of its fields by the C++ name
// ("WindowOptions::max_bytes = -1 must be >= 0") is raised as OrbitError naming the keyword instead, its source
// kept: the qualified name at the start of the message becomes `caller` and the field ("new_window: max_bytes =
// -1 must be >= 0"), one further in the field alone ("find_media: MediaLookup::rows" reads "find_media: rows").
// The keywords are named after the fields. Returns without raising when the message names none (module.cpp).
void raise_with_keyword_names(const orbit::Error& e, const std::string& cpp_type, const std::string& caller);
// fn(), its orbit::Error raised by raise_with_keyword_names (else as it was). Needs the GIL to raise.
template <class F>
decltype(auto) with_keyword_names(const std::string& cpp_type, const std::string& caller, F&& fn) {
  try {
    return fn();
  } catch (const orbit::Error& e) {
    raise_with_keyword_names(e, cpp_type, caller);
    throw;
  }
}

// What the SDK says of a call begun once its engine's close() has begun (the whole message of its orbit::Error).
inline constexpr const char* kEngineClosed = "engine is closed";
// ... and the beginning of what it says of a call in a child of fork() of the process that opened it.
inline constexpr const char* kEngineForked = "engine was opened in process ";
// Whether an orbit::Error's message is one of those two: a call refused for its engine's state, not its own.
inline bool refused_for_engine(const std::string& message) {
  return message == kEngineClosed || message.rfind(kEngineForked, 0) == 0;
}
// fn(), its orbit::Error "engine is closed" raised as "<caller>: engine is closed" (else as it was), so an Engine call
// refused after close() names itself as a window's does ("tokenize: engine is closed", "Window.sync: ..."); the
// same for a call in a child of fork().
template <class F>
decltype(auto) naming_closed(const char* caller, F&& fn) {
  try {
    return fn();
  } catch (const orbit::Error& e) {
    if (!refused_for_engine(e.what())) throw;
    throw orbit::Error(std::string(caller) + ": " + e.what(), __FILE__, __LINE__);
  }
}

// Calls the SDK checks under another call's name (Window.generate_n's options and query are checked as
// generate's: "generate: temperature = -1 must be ..."): an orbit::Error whose message begins "<sdk_caller>: " is
// raised as OrbitError beginning "<caller>: " instead, its source kept. Returns without raising otherwise
// (module.cpp).
void raise_with_caller_name(const orbit::Error& e, const std::string& sdk_caller, const std::string& caller);
// fn(), its orbit::Error raised by raise_with_caller_name (else as it was). Needs the GIL to raise.
template <class F>
decltype(auto) with_caller_name(const std::string& sdk_caller, const std::string& caller, F&& fn) {
  try {
    return fn();
  } catch (const orbit::Error& e) {
    raise_with_caller_name(e, sdk_caller, caller);
    throw;
  }
}

// Issues `message` as an orbit.RemoteUnreachableWarning at the calling Python line (module.cpp); throws
// py::error_already_set when a warnings filter turns it into an error. Needs the GIL.
void warn_remote_unreachable(const std::string& message);

}  // namespace orbit_py
