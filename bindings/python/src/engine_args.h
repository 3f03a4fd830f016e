// orbit.Engine(model, **keywords): its keyword arguments, their defaults and their checks in one place
// (EngineArgs and the table in engine_args.cpp), and the orbit::EngineOptions they make. The Python signature
// (keywords, defaults, the types pybind11 would accept) is the one a function of these parameters would have.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "orbit/engine.h"

namespace orbit_py {

namespace py = pybind11;

// Engine(...)'s keyword arguments as given, each field named as its keyword, each initialised to its default.
// engine_options() checks their values.
struct EngineArgs {
  py::object store_dir = py::none();
  int64_t pool_bytes = int64_t{256} << 20;
  int64_t page_size = 16;
  int64_t host_budget_bytes = int64_t{1} << 30;
  int64_t disk_budget_bytes = 0;
  int threads = 0;
  py::str remote = py::str("");
  int64_t remote_ttl_seconds = 0;
  py::str remote_secret = py::str("");
  double remote_max_held_fraction = 0.5;
  py::str device = py::str("cpu");
  py::str dtype = py::str("float32");
  py::str eviction = py::str("lru");
  py::str cold_tier = py::str("exact");
  int64_t device_tier_bytes = 0;
  bool embedding_cache = true;
  py::object background = py::str("thread");
  bool shared_canonicals = true;
  int64_t max_idle_chunks = 0;
  int64_t max_background_bytes = 0;
  py::object constraint_cache = py::none();
  py::object tokenizer = py::none();
  bool stored_calibration = true;
  bool window_past = true;
};

// Reads Engine(...)'s keywords into EngineArgs, converting each value as pybind11 converts an argument of its
// field's type. TypeError naming the keyword for one Engine does not take or a value of the wrong type.
EngineArgs engine_args(const py::kwargs& kwargs);

// The EngineOptions of `model` and `args`: TypeError / ValueError / OrbitError naming the keyword for a bad
// value (a path that is no path, a string that is no UTF-8, an unknown background mode...). Engine::open checks
// the rest (sizes, names), naming the EngineOptions field.
orbit::EngineOptions engine_options(const py::object& model, const EngineArgs& args);

// The constructor's signature line as pybind11 writes it atop a docstring, `self_type` naming the class:
// "__init__(self: orbit._orbit.Engine, model: object, *, store_dir: object = None, ...) -> None".
std::string engine_signature(const std::string& self_type);

}  // namespace orbit_py
