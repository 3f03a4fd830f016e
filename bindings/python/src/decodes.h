// The decodes running on an engine's windows (Window.generate, generate_n, orbit.generate_many, and so
// Window.stream and orbit.aio), and what Engine.close() does to them before the engine closes (decodes.cpp):
//
//   Engine.close():  closing().set()  ──> each decode stops at its next token ("cancelled", cancel.h);
//                                         a stream waiting for its reader wakes (wake.h)
//                    wait: running == 0 (each decode returned its cancelled Generation)
//                    orbit::Engine::close()  (no decode left to find the engine closed under it)
//
// A decode enters before it starts and leaves once it returned (DecodeScope); one that would enter after
// close() began raises OrbitError "engine is closed" instead. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "orbit/engine.h"
#include "wake.h"

namespace orbit_py {

class EngineDecodes {
 public:
  // Set once close began (stop_all()), never cleared: what decodes and streams watch.
  const StopFlag& closing() const { return closing_; }
  // A decode begins. Throws orbit::Error "<what>: engine is closed" once stop_all() began (`what` names the
  // call: "Window.generate").
  void enter(const char* what);
  // ... and ends.
  void leave();
  // Sets closing(), then waits until no decode that entered runs. Blocks: call it without the GIL (a decode
  // needs the GIL to call on_text and to return).
  void stop_all();

 private:
  StopFlag closing_;
  std::mutex mu_;  // guards running_ and orders enter() against stop_all()
  std::condition_variable cv_;
  int64_t running_ = 0;
};

// The decodes of `engine`, carried by the shared_ptr the bindings opened it with (engine.cpp); null for an
// engine the bindings did not open (its close then stops nothing first).
std::shared_ptr<EngineDecodes> engine_decodes(const std::shared_ptr<orbit::Engine>& engine);

// One decode call's stay in an EngineDecodes (none when null): enters at construction, leaves at destruction.
// `what` names the call in the refusal (EngineDecodes::enter).
class DecodeScope {
 public:
  DecodeScope(EngineDecodes* decodes, const char* what) : decodes_(decodes) {
    if (decodes_ != nullptr) decodes_->enter(what);
  }
  ~DecodeScope() {
    if (decodes_ != nullptr) decodes_->leave();
  }
  DecodeScope(DecodeScope&& other) noexcept : decodes_(other.decodes_) { other.decodes_ = nullptr; }
  DecodeScope(const DecodeScope&) = delete;
  DecodeScope& operator=(const DecodeScope&) = delete;
  DecodeScope& operator=(DecodeScope&&) = delete;

 private:
  EngineDecodes* decodes_;
};

}  // namespace orbit_py
