// orbit.CancelToken (cancel.cpp) and how a decode reads it: generate(), generate_n() and generate_many() take
// cancel=, and the decode's GenerateOptions::on_token returns false once a token it watches is cancelled, its
// window is being closed (PyWindow::closing) or its engine is (Engine.close(): EngineDecodes::closing). The
// check reads atomics only: no GIL, no lock.
#pragma once

#include <pybind11/pybind11.h>

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

// What one decode stops for: any of its tokens cancelled, its window being closed or its engine being closed
// (nullptr: not watched). The flags outlive the decode (its PyWindow holds them).
struct CancelWatch {
  std::vector<std::shared_ptr<const CancelToken>> tokens;
  const StopFlag* closing = nullptr;
  const StopFlag* engine_closing = nullptr;

  bool requested() const;
  // Sets options.on_token to return false (the run ends "cancelled") once requested() holds; a watch with
  // nothing to watch leaves the options as they are.
  void arm(orbit::GenerateOptions& options) const;
};

// A cancel= argument: None (null) or an orbit.CancelToken; anything else raises TypeError naming `what`.
std::shared_ptr<const CancelToken> to_cancel_token(const py::handle& obj, const std::string& what);

// The Generation of a run cancelled before it started: no tokens, text "", stop_reason "cancelled".
orbit::Generation cancelled_generation();

}  // namespace orbit_py

ORBIT_PY_INITIALIZED_SHARED_CASTER(orbit_py::CancelToken)
