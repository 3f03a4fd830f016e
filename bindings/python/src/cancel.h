// orbit.CancelToken (cancel.cpp) and how a decode reads it: generate(), generate_n() and generate_many() take
// cancel=, and the decode's GenerateOptions::on_token returns false once a token it watches is cancelled or its
// window is being closed (PyWindow::closing). The check reads atomics only: no GIL, no lock.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "orbit/window.h"

namespace orbit_py {

namespace py = pybind11;

// A cancellation flag shared by Python and the decodes given it. cancel() may be called from any thread, any
// number of times; once set it stays set. A child token (parent given) reads as cancelled when it or any of its
// ancestors was cancelled; cancelling it leaves its parent alone.
struct CancelToken {
  std::atomic<bool> flag{false};
  std::shared_ptr<const CancelToken> parent;  // null: none

  void cancel() { flag.store(true, std::memory_order_release); }
  bool cancelled() const {
    for (const CancelToken* t = this; t != nullptr; t = t->parent.get()) {
      if (t->flag.load(std::memory_order_acquire)) return true;
    }
    return false;
  }
};

// What one decode stops for: any of its tokens cancelled, or its window being closed (nullptr: not watched).
struct CancelWatch {
  std::vector<std::shared_ptr<const CancelToken>> tokens;
  const std::atomic<bool>* closing = nullptr;

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
