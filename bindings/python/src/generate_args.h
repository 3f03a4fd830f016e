// generate()'s keyword arguments, shared by Window.generate, Window.generate_n (window.cpp) and
// orbit.generate_many (generate.cpp): checked and turned into the query's tokens, GenerateOptions and what
// the answer is read for.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "answer.h"
#include "cancel.h"
#include "orbit/window.h"
#include "py_window.h"

namespace orbit_py {

struct GenerateArgs {
  std::vector<int64_t> query;
  orbit::GenerateOptions options;
  AnswerSpec answer;
  // What generate's on_text raised (it then cancelled the run), to raise again once the decode stopped.
  std::shared_ptr<std::exception_ptr> callback_error = std::make_shared<std::exception_ptr>();
  // What stops the decode at its next token: cancel=, the window's close() and, on the main thread, a signal
  // handler raising (Ctrl-C) (arm() sets options.on_token).
  CancelWatch cancel;

  // Sets options.on_token from `cancel` (after every token is added: generate_many adds its own).
  void arm() { cancel.arm(options); }
  // A token was cancelled before the call: it answers cancelled_generation() without decoding.
  bool cancelled_before() const { return cancel.requested(); }

  // Holding the GIL, once the decode stopped: raises what stopped it from Python, if anything did: the
  // callback's exception first (the signal may have come while it ran), else a signal handler's.
  void rethrow_raised() const {
    if (*callback_error) std::rethrow_exception(std::exchange(*callback_error, nullptr));
    if (cancel.signals) cancel.signals->rethrow();
  }
};

// Holding the GIL. Throws orbit::Error / TypeError / ValueError naming the argument. `stop`: None, a str or a
// list of at most 4 non-empty str. `on_text`: None or a callable, called with the GIL taken (the decode runs
// without it); an exception it raises cancels the run and is kept in callback_error. The callable must outlive
// the decode (the caller's argument does). `cancel`: None or an orbit.CancelToken; with the window's `closing`
// it is watched by the decode (armed: options.on_token is set).
GenerateArgs generate_args(PyWindow& w, const py::object& query, int64_t max_tokens, double temperature, double top_p,
                           uint64_t seed, const py::object& stop_tokens, const py::object& stop,
                           const py::object& on_text, const py::object& tools, const py::object& tool_choice,
                           const py::object& response_format, const py::object& tool_call_format,
                           double presence_penalty, double frequency_penalty, const py::object& logit_bias,
                           bool logprobs, int32_t top_logprobs, const py::object& cancel, bool ignore_eos);

// Holding the GIL: generate's constraint_trigger_block (None, or a pair of str (open, close), close not empty:
// GenerateOptions::constraint_trigger_block) set on `a`, whose answer must be constrained (tools or a
// response_format; tools under "auto" whose grammar cannot be had leave the whole answer free, the block
// too). Raises TypeError / ValueError naming the argument, prefixed with `what`.
void set_trigger_block(GenerateArgs& a, const py::object& block, const std::string& what);

// Holding the GIL: raises TypeError, prefixed with `what`, for a key of `kwargs` generate() does not take, and
// for on_text (one callback cannot stream several answers).
void check_generate_keywords(const py::dict& kwargs, const std::string& what);

// The same from a dict of those keyword arguments (every key optional, with generate()'s defaults); a key
// generate() does not take raises TypeError naming it, prefixed with `what`, and so does on_text (one
// callback cannot stream several answers). Every error names `what` as the call ("generate_n: logit_bias[5]:
// expected float, got bool"), where generate()'s own checks name generate.
GenerateArgs generate_args(PyWindow& w, const py::object& query, const py::dict& kwargs, const std::string& what);

}  // namespace orbit_py
