// The Python-side holder of an orbit::Window (shared by engine.cpp, which makes windows, and window.cpp).
//
// orbit::Window is single-threaded and move-only. Python may call one window from several threads, and the
// GIL is released around every call into it, so each holder serializes its calls with a mutex: run()
// releases the GIL first, then takes the mutex (never the other way round: no GIL/mutex deadlock). close()
// destroys the window early (its pages return to the pool); later calls raise OrbitError.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "orbit/common/error.h"
#include "orbit/engine.h"

namespace orbit_py {

namespace py = pybind11;

struct PyWindow {
  PyWindow(std::shared_ptr<orbit::Engine> e, orbit::Window w) : engine(std::move(e)), window(std::move(w)) {
    id = window->id();
  }

  std::shared_ptr<orbit::Engine> engine;  // for resolving chunk keys and Window.engine
  std::optional<orbit::Window> window;    // empty after close()
  uint64_t id = 0;
  std::unique_ptr<std::mutex> mutex = std::make_unique<std::mutex>();

  // Runs f(orbit::Window&) with the GIL released and the window locked. f must not touch Python objects.
  template <typename F>
  auto run(F&& f) -> decltype(f(std::declval<orbit::Window&>())) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(*mutex);
    ORBIT_CHECK(window.has_value(), "window " << id << " is closed");
    return f(*window);
  }

  void close() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(*mutex);
    window.reset();  // returns its pages to the pool
  }
};

// A chunk argument: a ChunkRef, or a key (str) of a chunk `engine` knows (engine.cpp).
orbit::ChunkRef resolve_chunk(orbit::Engine& engine, py::handle obj, const char* what);
// A policy argument: a WindowPolicy or a spec string (engine.cpp).
orbit::WindowPolicy to_policy(py::handle obj, const char* what);

// Makes the Python holder for a window of `engine` (window.cpp).
py::object wrap_window(std::shared_ptr<orbit::Engine> engine, orbit::Window window);

}  // namespace orbit_py
