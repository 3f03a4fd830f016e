// orbit.Engine's opening and closing (engine_open.cpp): the constructor, close() and the close of every engine
// still open at interpreter exit. The rest of the class is defined in engine.cpp (init_engine).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "bindings.h"
#include "convert.h"
#include "orbit/engine.h"

namespace orbit_py {

// Engine(model, **keywords): the constructor and its docstring.
void def_engine_open(py::class_<orbit::Engine, std::shared_ptr<orbit::Engine>>& c);

// Whether close() was called (from any thread; reads no lock): Engine.closed.
bool engine_closed(const std::shared_ptr<orbit::Engine>& e);

// Engine.close() and __exit__ (engine_open.cpp says what it stops and waits for).
void close_engine(const std::shared_ptr<orbit::Engine>& e,
                  const std::optional<FloatArg>& finish_seconds = std::nullopt);

// Engine.__repr__: "Engine(model='...', store_dir='...')", ", closed" added once closed (answers after close()).
std::string engine_repr(const std::shared_ptr<orbit::Engine>& e);

// Closes every Engine still open (orbit/__init__.py registers it with atexit).
void close_engines_at_exit();

}  // namespace orbit_py
