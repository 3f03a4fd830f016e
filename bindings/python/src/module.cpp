// The compiled part of the Python package `orbit` (bindings/python/orbit/__init__.py re-exports it), and
// the exceptions (docs/ARCHITECTURE.md §8): orbit::Error -> orbit.OrbitError carrying the C++ message, its C++
// names in their Python words (python_names); a non-ok Status from apply() -> CapacityError (out_of_capacity) or
// RefusedError (refused); and the warning
// RemoteUnreachableWarning (a remote tier that did not answer when an engine opened): an OrbitWarning, so an
// OrbitWarning filter takes it with orbit's other warnings, and a RuntimeWarning, as it was first.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cctype>
#include <string>

#include "bindings.h"
#include "convert.h"
#include "initialized.h"
#include "orbit/capacity.h"
#include "orbit/errors.h"
#include "orbit/version.h"

namespace orbit_py {

namespace {
// Distinct C++ types so each Python exception class has its own pybind11 registration.
struct CapacityErrorTag {};
struct RefusedErrorTag {};
struct RemoteUnreachableTag {};

PyObject* g_orbit_error = nullptr;
PyObject* g_capacity_error = nullptr;
PyObject* g_refused_error = nullptr;
PyObject* g_remote_unreachable = nullptr;

// Raises `type(message)` with extra attributes set on the instance. The message is decoded as model text is
// (utf8_text): one quoting bytes that are not UTF-8, such as a path os.listdir gave, raised UnicodeDecodeError
// in place of the error.
void set_error(PyObject* type, const std::string& message, const py::dict& attrs) {
  py::object exc = py::reinterpret_borrow<py::object>(type)(utf8_text(message));
  for (auto item : attrs) exc.attr(item.first) = item.second;
  PyErr_SetObject(type, exc.ptr());
}

// C++ names the SDK's messages use where Python has its own, each with the Python words. The options structs'
// fields are the keywords of the calls that fill them, most under the same name (the qualifier dropped);
// ChatOptions' JSON fields are the tools and extra of sync and render_chat. A C++ method becomes the Python
// method ("Window::sync" reads "Window.sync").
struct PythonName {
  const char* cpp;
  const char* python;
};
constexpr PythonName kPythonNames[] = {
    {"ChatOptions::chat_template", "chat_template"},
    {"ChatOptions::tools_json", "tools"},
    {"ChatOptions::extra_json", "extra"},
    {"SyncOptions::", ""},
    {"GenerateOptions::", ""},
    {"WindowOptions::", ""},
    {"MediaLookup::", ""},
    {"Window::", "Window."},
};
// The SDK's C++ spellings of an option's value (GenerateOptions::logprobs = true) where Python passes a keyword
// argument: "generate: top_logprobs = 3 needs logprobs = true" reads "... needs logprobs=True".
constexpr PythonName kPythonValues[] = {
    {"needs logprobs = true", "needs logprobs=True"},
};

// `text` with every `from` replaced by `to`.
void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    text.replace(at, from.size(), to);
    at += to.size();
  }
}

// How a value is written after "EngineOptions::<field> = " in a message: a quoted string or a plain word or
// number ("4", "'/x/tok.bin'"); 0 when it is neither.
std::size_t value_length(const std::string& text, std::size_t at) {
  if (at < text.size() && text[at] == '\'') {
    const std::size_t close = text.find('\'', at + 1);
    return close == std::string::npos ? 0 : close + 1 - at;
  }
  std::size_t end = at;
  while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_' ||
                               text[end] == '.' || text[end] == '-' || text[end] == '+')) {
    ++end;
  }
  while (end > at && text[end - 1] == '.') --end;  // a sentence's full stop
  return end - at;
}

// "EngineOptions::<field>" as the Engine keyword that sets it: "Engine(max_idle_chunks=4)" where the message
// gives the value ("EngineOptions::max_idle_chunks = 4"), else "Engine(max_idle_chunks=...)". Engine(...) and
// replay name their own keywords first (with_keyword_names); this reaches what other calls report, such as a
// chunk part sync finds forgotten past max_idle_chunks.
std::string engine_keywords(std::string message) {
  static const std::string kQualifier = "EngineOptions::";
  for (std::size_t at = message.find(kQualifier); at != std::string::npos; at = message.find(kQualifier, at)) {
    const std::size_t field = at + kQualifier.size();
    std::size_t end = field;
    while (end < message.size() && (std::islower(static_cast<unsigned char>(message[end])) ||
                                    std::isdigit(static_cast<unsigned char>(message[end])) || message[end] == '_')) {
      ++end;
    }
    std::string value = "...";
    std::size_t replaced = end - at;
    if (message.compare(end, 3, " = ") == 0) {
      if (const std::size_t n = value_length(message, end + 3); n > 0) {
        value = message.substr(end + 3, n);
        replaced = end + 3 + n - at;
      }
    }
    const std::string keyword = "Engine(" + message.substr(field, end - field) + "=" + value + ")";
    message.replace(at, replaced, keyword);
    at += keyword.size();
  }
  return message;
}

// `message` with the C++ names and values above in their Python words: what an OrbitError, CapacityError or
// RefusedError says to a Python caller names the keyword or method it used, and the value as Python writes it.
std::string python_names(const std::string& message) {
  std::string out = message;
  for (const PythonName& value : kPythonValues) replace_all(out, value.cpp, value.python);
  if (out.find("::") == std::string::npos) return out;
  out = engine_keywords(out);
  for (const PythonName& name : kPythonNames) replace_all(out, name.cpp, name.python);
  return out;
}

// orbit::Error's OrbitError: its message (C++ names in their Python words), and the source of the check as
// e.source.
// orbit::RefusedError's is a RefusedError with status 'refused', as a refused Result raises it.
// `status`: kRefused -> RefusedError, kOutOfCapacity -> CapacityError (a capacity refusal thrown rather than
// returned as a Status: Window.sync's), anything else OrbitError with status None.
void set_orbit_error(const std::string& cpp_message, const std::string& source,
                     orbit::StatusCode status = orbit::StatusCode::kOk) {
  const std::string message = python_names(cpp_message);
  py::dict attrs;
  attrs["source"] = source;
  const bool typed = status == orbit::StatusCode::kRefused || status == orbit::StatusCode::kOutOfCapacity;
  attrs["status"] = typed ? py::object(py::str(orbit::status_code_name(status))) : py::none();
  attrs["reason"] = utf8_text(message);
  PyObject* type = status == orbit::StatusCode::kRefused         ? g_refused_error
                   : status == orbit::StatusCode::kOutOfCapacity ? g_capacity_error
                                                                 : g_orbit_error;
  set_error(type, message, attrs);
}
}  // namespace

void raise_status(int code, const std::string& cpp_reason) {
  const std::string reason = python_names(cpp_reason);
  const auto status = static_cast<orbit::StatusCode>(code);
  PyObject* type = g_orbit_error;
  if (status == orbit::StatusCode::kOutOfCapacity) type = g_capacity_error;
  if (status == orbit::StatusCode::kRefused) type = g_refused_error;
  py::dict attrs;
  attrs["status"] = orbit::status_code_name(status);
  attrs["reason"] = utf8_text(reason);
  attrs["source"] = py::none();
  set_error(type, reason, attrs);
  throw py::error_already_set();
}

void raise_with_keyword_names(const orbit::Error& e, const std::string& cpp_type, const std::string& caller) {
  const std::string qualifier = cpp_type + "::";
  std::string message = e.what();
  if (message.find(qualifier) == std::string::npos) return;
  if (message.compare(0, qualifier.size(), qualifier) == 0) message.replace(0, qualifier.size(), caller + ": ");
  for (std::size_t at = message.find(qualifier); at != std::string::npos; at = message.find(qualifier, at)) {
    message.erase(at, qualifier.size());
  }
  set_orbit_error(message, e.source());
  throw py::error_already_set();
}

void raise_with_caller_name(const orbit::Error& e, const std::string& sdk_caller, const std::string& caller) {
  const std::string prefix = sdk_caller + ": ";
  const std::string message = e.what();
  if (message.compare(0, prefix.size(), prefix) != 0) return;
  set_orbit_error(caller + ": " + message.substr(prefix.size()), e.source());
  throw py::error_already_set();
}

void warn_remote_unreachable(const std::string& message) {
  if (PyErr_WarnEx(g_remote_unreachable, message.c_str(), 1) != 0) throw py::error_already_set();
}

void init_errors(py::module_& m) {
  static py::exception<orbit::Error> orbit_error(m, "OrbitError", PyExc_RuntimeError);
  orbit_error.doc() =
      "Misuse or bad input reported by orbit's C++ core (docs/ARCHITECTURE.md §8): a model that does not load,\n"
      "a closed engine, a chunk unknown to this engine, a stale plan, an invalid policy spec, ... str(e) is the C++\n"
      "message (it names the file, keyword or argument at fault; an option by the keyword that sets it, e.g.\n"
      "Engine(max_idle_chunks=4), not the C++ field); e.source is the 'file.cpp:line' of the check.\n"
      "Wrong Python types and shapes caught before reaching C++ raise TypeError / ValueError instead.";
  static py::exception<CapacityErrorTag> capacity_error(m, "CapacityError", orbit_error.ptr());
  capacity_error.doc() =
      "apply() (or an operation) could not run because the engine's pool or the window's max_bytes cannot hold\n"
      "the result (Status out_of_capacity). The window is unchanged. e.reason has the numbers.";
  static py::exception<RefusedErrorTag> refused_error(m, "RefusedError", orbit_error.ptr());
  refused_error.doc() =
      "apply() (or an operation) was refused, e.g. positions past the model's limit (Status refused; sync's\n"
      "rendering and generate's query past them too). The window is unchanged. e.reason says why.";
  // Both bases (init_warnings made OrbitWarning first): PyErr_NewException takes a tuple of them.
  const py::tuple warning_bases = py::make_tuple(m.attr("OrbitWarning"), py::handle(PyExc_RuntimeWarning));
  static py::exception<RemoteUnreachableTag> remote_unreachable(m, "RemoteUnreachableWarning", warning_bases);
  remote_unreachable.doc() =
      "Engine(remote=...) found the remote tier not answering when it opened (one PING: cannot connect, a refused\n"
      "password, a TLS failure, a timeout): the message names the URL (password shown as ***) and the cause. The\n"
      "engine still opens and serves from its local tiers; the remote tier tries again on use\n"
      "(stats().store.remote). A subclass of OrbitWarning and of RuntimeWarning: a filter of either category\n"
      "takes it. Filter it with the warnings module, or make it an error there: Engine(...) then raises it.";
  g_orbit_error = orbit_error.ptr();
  g_remote_unreachable = remote_unreachable.ptr();
  g_capacity_error = capacity_error.ptr();
  g_refused_error = refused_error.ptr();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const orbit::RefusedError& e) {
      set_orbit_error(e.what(), e.source(), orbit::StatusCode::kRefused);
    } catch (const orbit::CapacityRefused& e) {
      set_orbit_error(e.what(), e.source(), orbit::StatusCode::kOutOfCapacity);
    } catch (const orbit::Error& e) {
      set_orbit_error(e.what(), e.source());
    }
  });
}

// pybind11 keeps numpy's C API table in a function-local static whose initialiser imports
// numpy.core.multiarray. Left to the first conversion, two threads can meet there: one inside the
// initialiser, waiting for the GIL the import gave up; the other holding the GIL, waiting for the
// initialiser. Doing it here, while the module is imported (single-threaded, under the import lock),
// means no later call runs an initialiser that needs Python.
// Wraps the __init__ of every class of `m` bound with a constructor (the enums too) to raise TypeError on an
// instance already made: pybind11's dispatcher returns None for a second __init__ (e.__init__(path),
// policy.__init__("reprefill")) without running it, so the call changed nothing, silently. The wrapper is C++,
// so a warning a constructor issues is still attributed to the caller's line, and it keeps the original's
// docstring (its signatures) as it is.
void run_constructors_once(py::module_& m) {
  for (const auto& [name, obj] : py::dict(m.attr("__dict__"))) {
    if (!PyType_Check(obj.ptr())) continue;
    const py::dict members = obj.attr("__dict__");
    if (!members.contains("__init__") || !PyInstanceMethod_Check(members["__init__"].ptr())) continue;
    const py::object init = members["__init__"];
    const std::string cls = py::str(obj.attr("__name__"));
    const std::string doc = py::str(init.attr("__doc__"));
    py::options options;
    options.disable_function_signatures();  // the docstring is the original's, signatures included
    py::cpp_function once(
        [init, cls](py::handle self, py::args args, py::kwargs kwargs) {
          if (holds_object(self)) {
            throw py::type_error("orbit." + cls + ".__init__: this " + cls + " is already made (__init__ runs " +
                                 "once); create another with orbit." + cls + "(...)");
          }
          init(self, *args, **kwargs);
        },
        // Not named __init__: pybind11 takes a function of that name for a constructor of its scope.
        py::name("init_once"), py::doc(doc.c_str()));
    py::setattr(obj, "__init__", py::reinterpret_steal<py::object>(PyInstanceMethod_New(once.ptr())));
  }
}

void warm_numpy() {
  (void)py::module_::import("numpy");
  (void)py::detail::npy_api::get();
  (void)py::dtype::of<int64_t>();
  (void)py::dtype::of<int32_t>();
  (void)py::dtype::of<float>();
}

}  // namespace orbit_py

PYBIND11_MODULE(_orbit, m) {
  orbit_py::warm_numpy();
  m.doc() = "orbit: context windows as sets of reusable KV chunks (the compiled core; import `orbit`).";
  m.attr("__version__") = orbit::version();
  orbit_py::init_warnings(m);  // OrbitWarning first: init_errors' RemoteUnreachableWarning derives from it
  orbit_py::init_errors(m);
  orbit_py::init_types(m);
  orbit_py::init_policy(m);
  orbit_py::init_engine(m);
  orbit_py::init_window(m);
  orbit_py::init_sync(m);
  orbit_py::init_sync_memo(m);
  orbit_py::init_store(m);
  orbit_py::init_trace(m);
  orbit_py::init_yardstick(m);
  orbit_py::init_answer(m);
  orbit_py::init_generate(m);
  orbit_py::init_cancel(m);
  orbit_py::init_wake(m);
  orbit_py::run_constructors_once(m);
}
